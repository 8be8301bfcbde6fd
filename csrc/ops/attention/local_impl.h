/* local_impl.h: typed kernels of local.c (see core/real.h).
 * Per batch element: Q (Tq, dq), W_p (dq, dp), v_p (dp), H = tanh(Q W_p)
 * (Tq, dp), z = H v_p, p = S sigmoid(z) (Tq). */
#include "../../core/real.h"

static attnc_mat FN(lmat)(REAL *p, int64_t rows, int64_t cols) {
    attnc_mat m = {p, rows, cols, cols, 1};
    return m;
}

static attnc_mat FN(wp_mat)(const attnc_local_options *o) {
    attnc_mat m = {o->w_p.data, o->w_p.shape[0], o->w_p.shape[1], o->w_p.strides[0], o->w_p.strides[1]};
    return m;
}

/* H <- tanh(Q_b W_p); p[i] <- S sigmoid(H_i . v_p) unless p is NULL. */
static void FN(predict)(const local_job *j, int64_t b, int64_t klen, REAL *h, REAL *p) {
    const attnc_dims *d = j->c.d;
    const attnc_local_options *o = j->opt;
    int64_t dp = o->w_p.shape[1], vs = o->v_p.strides[0];
    const REAL *v = o->v_p.data;
    GEMM(false, false, 1, attnc_batch_mat(j->c.query, &d->batch, b), FN(wp_mat)(o), 0, FN(lmat)(h, d->tq, dp));
    for (int64_t i = 0; i < d->tq; i++) {
        REAL z = 0;
        for (int64_t a = 0; a < dp; a++) {
            h[i * dp + a] = TANH(h[i * dp + a]);
            z += h[i * dp + a] * v[a * vs];
        }
        if (p) p[i] = (REAL)klen / (1 + EXP(-z));
    }
}

/* Windowed masked softmax of row i around position p (weights row w, scores
 * in place); for PREDICTIVE also times the Gaussian. */
static void FN(window_row)(const local_job *j, const attnc_bmask *bm, int64_t i, REAL p, REAL *w) {
    const attnc_dims *d = j->c.d;
    int64_t lo, hi;
    attnc_row_range(bm, i, &lo, &hi);
    if (p != p) {
        for (int64_t k = 0; k < d->tk; k++) w[k] = NAN;
        return;
    }
    attnc_window(p, j->opt->window, &lo, &hi);
    FN(attnc_softmax_row)(w, w, 1, d->tk, lo, hi, bm, i);
    if (j->opt->mode != ATTNC_LOCAL_PREDICTIVE) return;
    REAL sigma = (REAL)(j->opt->window / 2);
    for (int64_t k = lo; k < hi; k++) {
        REAL x = ((REAL)k - p) / sigma;
        w[k] *= EXP(-x * x / 2);
    }
}

static REAL FN(position_in)(const local_job *j, int64_t b, int64_t i) {
    const attnc_tensor *pos = &j->opt->positions;
    if (!attnc_present(pos)) return (REAL)i;
    int64_t off = attnc_batch_offset(pos, &j->c.d->batch, b) + i * pos->strides[pos->ndim - 1];
    return *(const REAL *)attnc_at(pos, off);
}

static void FN(local_forward_task)(void *arg, int64_t b, int worker) {
    local_job *j = arg;
    const attnc_dims *d = j->c.d;
    REAL *w = (REAL *)j->weights->data + b * d->tq * d->tk;
    REAL *p = (REAL *)j->positions_out->data + b * d->tq;
    REAL *scratch = (REAL *)j->scratch + worker * j->per_worker;
    attnc_bmask bm;
    attnc_bmask_at(&bm, j->mask, d, b);
    for (int64_t i = 0; i < d->tq; i++) p[i] = FN(position_in)(j, b, i);
    if (j->opt->mode == ATTNC_LOCAL_PREDICTIVE) FN(predict)(j, b, bm.klen, scratch, p);
    FN(attnc_score_batch)(&j->c, b, w, scratch);
    for (int64_t i = 0; i < d->tq; i++) FN(window_row)(j, &bm, i, p[i], w + i * d->tk);
    FN(attnc_context)(j->context, d, b, w, j->values);
}

/* G_b <- dS; dvalues_b; for PREDICTIVE the stash gets dPre (Tq, dp), the
 * cotangent of Q W_p, and dv_p of element b. Scratch: weights (Tq, Tk), then
 * a = the windowed softmax (Tq, Tk), then H (Tq, dp) or the score scratch. */
static void FN(local_backward_task)(void *arg, int64_t b, int worker) {
    local_job *j = arg;
    const attnc_dims *d = j->c.d;
    int64_t tq = d->tq, tk = d->tk;
    REAL *g = (REAL *)j->g + b * tq * tk, *w = (REAL *)j->scratch + worker * j->per_worker;
    REAL *a = w + tq * tk, *h = a + tq * tk;
    attnc_mat wm = attnc_batch_mat(j->fwd_weights, &d->batch, b);
    for (int64_t i = 0; i < tq; i++)
        for (int64_t k = 0; k < tk; k++) w[i * tk + k] = ((const REAL *)wm.p)[i * wm.rs + k * wm.cs];
    FN(attnc_weights_cotangent)(g, d, b, j->dcontext, j->dweights, j->values);
    FN(attnc_values_backward)(j->dvalues, d, b, w, j->dcontext);
    if (j->opt->mode != ATTNC_LOCAL_PREDICTIVE) {
        for (int64_t i = 0; i < tq; i++) FN(attnc_softmax_row_backward)(g + i * tk, g + i * tk, 1, w + i * tk, tk);
        return;
    }
    /* w = a * gauss: dA = G gauss; dp = sum_k G a gauss (k - p) / sigma^2. */
    const attnc_tensor *fp = j->fwd_positions;
    const REAL *p = attnc_at(fp, attnc_batch_offset(fp, &d->batch, b));
    int64_t ps = fp->strides[fp->ndim - 1];
    int64_t dp_size = j->opt->w_p.shape[1];
    REAL sigma = (REAL)(j->opt->window / 2);
    REAL *dpre = (REAL *)j->stash + b * (tq + 1) * dp_size, *dvp = dpre + tq * dp_size;
    attnc_bmask bm;
    attnc_bmask_at(&bm, j->mask, d, b);
    FN(attnc_score_batch)(&j->c, b, a, h);
    FN(predict)(j, b, bm.klen, h, NULL);
    for (int64_t x = 0; x < dp_size; x++) dvp[x] = 0;
    const attnc_tensor *dpos = j->dpositions;
    for (int64_t i = 0; i < tq; i++) {
        REAL pi = p[i * ps], *ar = a + i * tk, *gr = g + i * tk, dpi = 0;
        int64_t lo, hi;
        attnc_row_range(&bm, i, &lo, &hi);
        attnc_window(pi, j->opt->window, &lo, &hi);
        FN(attnc_softmax_row)(ar, ar, 1, tk, lo, hi, &bm, i);
        for (int64_t k = 0; k < tk; k++) {
            if (k < lo || k >= hi) {
                gr[k] = 0;
                continue;
            }
            REAL x = ((REAL)k - pi) / sigma, gauss = EXP(-x * x / 2);
            dpi += gr[k] * ar[k] * gauss * x / sigma;
            gr[k] *= gauss;
        }
        FN(attnc_softmax_row_backward)(gr, gr, 1, ar, tk);
        if (attnc_present(dpos))
            dpi += *(const REAL *)attnc_at(dpos,
                                           attnc_batch_offset(dpos, &d->batch, b) + i * dpos->strides[dpos->ndim - 1]);
        /* p = S sigmoid(z): dp/dz = p (1 - p / S). */
        REAL dz = bm.klen > 0 ? dpi * pi * (1 - pi / (REAL)bm.klen) : 0;
        for (int64_t x = 0; x < dp_size; x++) {
            REAL hx = h[i * dp_size + x];
            dvp[x] += dz * hx;
            dpre[i * dp_size + x] = dz * ((const REAL *)j->opt->v_p.data)[x * j->opt->v_p.strides[0]] * (1 - hx * hx);
        }
    }
}

/* dquery_b += dPre_b W_p^T (after the score backward wrote dquery). */
static void FN(local_query_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    local_job *j = arg;
    const attnc_dims *d = j->c.d;
    int64_t dp = j->opt->w_p.shape[1];
    GEMM(false, true, 1, FN(lmat)((REAL *)j->stash + b * (d->tq + 1) * dp, d->tq, dp), FN(wp_mat)(j->opt), 1,
         attnc_batch_mat(j->dquery, &d->batch, b));
}

/* dW_p = sum_b Q_b^T dPre_b, dv_p = sum_b dv_p(b), in batch order. */
static void FN(local_params)(local_job *j, attnc_tensor *dw_p, attnc_tensor *dv_p) {
    const attnc_dims *d = j->c.d;
    int64_t dq = d->dq, dp = j->opt->w_p.shape[1];
    if (attnc_present(dw_p)) {
        attnc_mat out = FN(lmat)(dw_p->data, dq, dp);
        for (int64_t x = 0; x < dq * dp; x++) ((REAL *)out.p)[x] = 0;
        for (int64_t b = 0; b < d->batch.count; b++)
            GEMM(true, false, 1, attnc_batch_mat(j->c.query, &d->batch, b),
                 FN(lmat)((REAL *)j->stash + b * (d->tq + 1) * dp, d->tq, dp), 1, out);
    }
    if (attnc_present(dv_p)) {
        REAL *out = dv_p->data;
        for (int64_t x = 0; x < dp; x++) out[x] = 0;
        for (int64_t b = 0; b < d->batch.count; b++)
            for (int64_t x = 0; x < dp; x++) out[x] += ((const REAL *)j->stash)[b * (d->tq + 1) * dp + d->tq * dp + x];
    }
}

#include "../../core/real_end.h"
