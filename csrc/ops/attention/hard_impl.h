/* hard_impl.h: typed kernels of hard.c (see core/real.h). */
#include "../../core/real.h"

/* The noise added to score (b, i, j); argmax adds none. */
static REAL FN(noise)(const hard_job *j, int64_t b, int64_t i, int64_t k) {
    if (j->opt->mode == ATTNC_HARD_ARGMAX) return 0;
    const attnc_dims *d = j->c.d;
    return (REAL)attnc_gumbel(j->opt->seed, 0, (uint64_t)((b * d->tq + i) * d->tk + k));
}

static void FN(hard_forward_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    hard_job *j = arg;
    const attnc_dims *d = j->c.d;
    REAL *w = (REAL *)j->weights->data + b * d->tq * d->tk;
    int64_t *idx = (int64_t *)j->indices->data + b * d->tq;
    FN(attnc_score_batch)(&j->c, b, w, (REAL *)j->scratch + worker * j->per_worker);
    attnc_bmask bm;
    attnc_bmask_at(&bm, j->mask, d, b);
    attnc_mat v = attnc_batch_mat(j->values, &d->batch, b);
    attnc_mat ctx = attnc_batch_mat(j->context, &d->batch, b);
    for (int64_t i = 0; i < d->tq; i++) {
        int64_t lo, hi, best = -1;
        REAL top = -INFINITY;
        attnc_row_range(&bm, i, &lo, &hi);
        for (int64_t k = lo; k < hi; k++) {
            if (!attnc_mask_ok(&bm, i, k)) continue;
            REAL x = w[i * d->tk + k] + FN(noise)(j, b, i, k);
            if (x != x) { /* the first NaN wins, as numpy.argmax */
                best = k;
                break;
            }
            if (x > top) top = x, best = k;
        }
        idx[i] = best;
        REAL *row = w + i * d->tk, *out = (REAL *)ctx.p + i * d->dv;
        for (int64_t k = 0; k < d->tk; k++) row[k] = k == best;
        for (int64_t a = 0; a < d->dv; a++) out[a] = best < 0 ? 0 : ((const REAL *)v.p)[best * v.rs + a * v.cs];
    }
}

/* dvalues_b <- onehot^T dcontext_b; for GUMBEL, G_b <- the relaxed scores'
 * cotangent: softmax((s + g) / T) backward, divided by T. */
static void FN(hard_backward_task)(void *arg, int64_t b, int worker) {
    hard_job *j = arg;
    const attnc_dims *d = j->c.d;
    const int64_t *idx = attnc_at(j->fwd_indices, attnc_batch_offset(j->fwd_indices, &d->batch, b));
    int64_t istride = j->fwd_indices->strides[j->fwd_indices->ndim - 1];
    if (attnc_present(j->dvalues)) {
        REAL *dv = attnc_batch_mat(j->dvalues, &d->batch, b).p;
        for (int64_t x = 0; x < d->tk * d->dv; x++) dv[x] = 0;
        if (attnc_present(j->dcontext)) {
            attnc_mat dc = attnc_batch_mat(j->dcontext, &d->batch, b);
            for (int64_t i = 0; i < d->tq; i++) {
                int64_t k = idx[i * istride];
                if (k < 0 || k >= d->tk) continue;
                for (int64_t a = 0; a < d->dv; a++) dv[k * d->dv + a] += ((const REAL *)dc.p)[i * dc.rs + a * dc.cs];
            }
        }
    }
    if (j->opt->mode != ATTNC_HARD_GUMBEL) return;
    REAL *g = (REAL *)j->g + b * d->tq * d->tk, *y = (REAL *)j->scratch + worker * j->per_worker;
    REAL *score_scratch = y + d->tq * d->tk, inv_t = (REAL)(1 / j->opt->temperature);
    FN(attnc_weights_cotangent)(g, d, b, j->dcontext, j->dweights, j->values);
    FN(attnc_score_batch)(&j->c, b, y, score_scratch);
    attnc_bmask bm;
    attnc_bmask_at(&bm, j->mask, d, b);
    for (int64_t i = 0; i < d->tq; i++) {
        int64_t lo, hi;
        REAL *yr = y + i * d->tk, *gr = g + i * d->tk;
        attnc_row_range(&bm, i, &lo, &hi);
        for (int64_t k = lo; k < hi; k++) yr[k] = (yr[k] + FN(noise)(j, b, i, k)) * inv_t;
        FN(attnc_softmax_row)(yr, yr, 1, d->tk, lo, hi, &bm, i);
        FN(attnc_softmax_row_backward)(gr, gr, 1, yr, d->tk);
        for (int64_t k = 0; k < d->tk; k++) gr[k] *= inv_t;
    }
}

#include "../../core/real_end.h"
