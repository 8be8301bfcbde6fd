/* linear_impl.h: typed kernels of linear.c (see core/real.h). Every
 * function works on one (batch, head) block; the sums run in a fixed order. */
#include "../../core/real.h"

/* dst (n) <- scale * row i of the (b, h) block of the 4-D t (n = its last dim). */
static void FN(gather)(REAL *restrict dst, const attnc_tensor *t, int64_t b, int64_t h, int64_t i, REAL scale) {
    const REAL *p = (const REAL *)t->data + b * t->strides[0] + h * t->strides[1] + i * t->strides[2];
    int64_t n = t->shape[3], cs = t->strides[3];
    for (int64_t e = 0; e < n; e++) dst[e] = p[e * cs] * scale;
}

/* Row i of the (b, h) block of a C-contiguous 4-D output. */
static REAL *FN(out_row)(attnc_tensor *t, int64_t b, int64_t h, int64_t i) {
    return (REAL *)t->data + ((b * t->shape[1] + h) * t->shape[2] + i) * t->shape[3];
}

/* elu: phi (E) <- elu(x) + 1, returns 0. favor+: phi (M) <- the exponents
 * w_m . x - |x|^2 / 2 of the (already scaled) row x, returns their maximum
 * (0 when M = 0). */
static REAL FN(exponents)(const lin_job *j, const REAL *restrict x, REAL *restrict phi) {
    int64_t E = j->E;
    if (!j->favor) {
        for (int64_t e = 0; e < E; e++) phi[e] = x[e] > 0 ? x[e] + 1 : EXP(x[e]);
        return 0;
    }
    REAL half = 0, top = j->F ? -INFINITY : 0;
    for (int64_t e = 0; e < E; e++) half += x[e] * x[e];
    half /= 2;
    const REAL *w = j->w;
    for (int64_t m = 0; m < j->F; m++) {
        REAL dot = 0;
        for (int64_t e = 0; e < E; e++) dot += w[m * E + e] * x[e];
        phi[m] = dot - half;
        if (phi[m] > top) top = phi[m];
    }
    return top;
}

/* favor+: exponents (F) <- exp(exponent - c) / sqrt(M), the stabilised features. */
static void FN(stabilise)(const lin_job *j, REAL *restrict phi, REAL c) {
    REAL norm = (REAL)j->norm;
    for (int64_t m = 0; m < j->F; m++) phi[m] = EXP(phi[m] - c) * norm;
}

/* f (F) <- the features of query i of block (b, h), x (E) <- the row as the
 * features read it (scaled for favor+); returns the query's stabiliser. */
static REAL FN(query_features)(const lin_job *j, int64_t b, int64_t h, int64_t i, REAL *restrict x, REAL *restrict f) {
    FN(gather)(x, j->q, b, h, i, (REAL)j->scale);
    REAL c = FN(exponents)(j, x, f);
    if (j->favor) FN(stabilise)(j, f, c);
    return c;
}

/* G (S, F) <- the key features of block (b, h) and Cs (S) <- the key
 * stabiliser each is divided by (linear.c): the running maximum from
 * `start` when causal, the maximum over all keys otherwise, 0 for elu.
 * Padded keys get zero features and leave the maximum as it was. x: a row
 * of E. */
static void FN(key_features)(const lin_job *j, int64_t b, int64_t h, REAL *restrict G, REAL *restrict Cs, REAL start,
                             REAL *restrict x) {
    int64_t F = j->F;
    REAL run = start;
    for (int64_t s = 0; s < j->S; s++) {
        REAL *g = G + s * F;
        if (lin_padded(j, b, s)) {
            for (int64_t m = 0; m < F; m++) g[m] = 0;
        } else {
            FN(gather)(x, j->k, b, h, s, (REAL)j->scale);
            REAL top = FN(exponents)(j, x, g);
            if (top > run) run = top;
        }
        Cs[s] = run;
    }
    if (!j->favor) return;
    for (int64_t s = 0; s < j->S; s++) {
        if (!j->causal) Cs[s] = run;
        if (!lin_padded(j, b, s)) FN(stabilise)(j, G + s * F, Cs[s]);
    }
}

/* The sums kv (F, Ev) and z (F), stabilised by `from`, times exp(from - to):
 * stabilised by `to` (nothing to do when equal, also when both are -inf). */
static void FN(rescale)(const lin_job *j, REAL *restrict kv, REAL *restrict z, REAL from, REAL to) {
    if (from == to) return;
    REAL f = EXP(from - to);
    for (int64_t i = 0; i < j->F * j->Ev; i++) kv[i] *= f;
    for (int64_t m = 0; m < j->F; m++) z[m] *= f;
}

/* kv (F, Ev) += g v^T, z (F) += g r. */
static void FN(accumulate)(const lin_job *j, REAL *restrict kv, REAL *restrict z, const REAL *restrict g,
                           const REAL *restrict v, REAL r) {
    int64_t Ev = j->Ev;
    for (int64_t m = 0; m < j->F; m++) {
        REAL gm = g[m], *row = kv + m * Ev;
        z[m] += gm * r;
        for (int64_t e = 0; e < Ev; e++) row[e] += gm * v[e];
    }
}

/* Key s (unless padded) joins the sums, rescaled from the stabiliser *prev
 * to the key's; v: a row of Ev. */
static void FN(add_key)(const lin_job *j, int64_t b, int64_t h, int64_t s, const REAL *G, const REAL *Cs, REAL *kv,
                        REAL *z, REAL *restrict v, REAL *prev) {
    if (lin_padded(j, b, s)) return;
    FN(rescale)(j, kv, z, *prev, Cs[s]);
    *prev = Cs[s];
    FN(gather)(v, j->v, b, h, s, 1);
    FN(accumulate)(j, kv, z, G + s * j->F, v, 1);
}

/* out (Ev) <- kv^T f / den, den = f . z + eps exp(-c - C): eps in the
 * unstabilised scale (linear.c). Returns 1 / den, or 0 when den is 0 (no
 * key: the row is zeros) or infinite (eps outweighs every key). */
static REAL FN(readout)(const lin_job *j, const REAL *restrict kv, const REAL *restrict z, const REAL *restrict f,
                        REAL c, REAL C, REAL *restrict out) {
    int64_t Ev = j->Ev;
    REAL den = 0;
    for (int64_t m = 0; m < j->F; m++) den += f[m] * z[m];
    if (j->eps > 0) den += (REAL)j->eps * EXP(-(c + C));
    REAL inv = den > 0 ? 1 / den : 0;
    for (int64_t e = 0; e < Ev; e++) out[e] = 0;
    for (int64_t m = 0; m < j->F; m++) {
        REAL fm = f[m];
        const REAL *row = kv + m * Ev;
        for (int64_t e = 0; e < Ev; e++) out[e] += fm * row[e];
    }
    for (int64_t e = 0; e < Ev; e++) out[e] *= inv;
    return inv;
}

/* dx (E) <- the gradient of the row x (scaled for favor+, whose gradient
 * then comes back in x's unscaled units) from dphi (F), the gradient of its
 * features phi; favor+ with dw (M, E): dw += the projection's gradient from
 * this row. The stabilisers are constants here (they cancel). dphi is
 * overwritten; dx may be NULL. */
static void FN(features_backward)(const lin_job *j, const REAL *restrict x, const REAL *restrict phi,
                                  REAL *restrict dphi, REAL *restrict dx, REAL *restrict dw) {
    int64_t E = j->E;
    if (!j->favor) { /* phi = exp(x) where x <= 0 */
        for (int64_t e = 0; dx && e < E; e++) dx[e] = x[e] > 0 ? dphi[e] : dphi[e] * phi[e];
        return;
    }
    REAL total = 0, scale = (REAL)j->scale;
    for (int64_t m = 0; m < j->F; m++) {
        dphi[m] *= phi[m];
        total += dphi[m];
    }
    for (int64_t m = 0; dw && m < j->F; m++)
        for (int64_t e = 0; e < E; e++) dw[m * E + e] += dphi[m] * x[e];
    if (!dx) return;
    for (int64_t e = 0; e < E; e++) dx[e] = -total * x[e];
    const REAL *w = j->w;
    for (int64_t m = 0; m < j->F; m++) {
        REAL d = dphi[m];
        for (int64_t e = 0; e < E; e++) dx[e] += d * w[m * E + e];
    }
    for (int64_t e = 0; e < E; e++) dx[e] *= scale;
}

/* The scratch of one worker, cut as linear.c's scratch_size says. */
typedef struct {
    REAL *G, *Cs, *kv, *z, *x, *v, *row, *f, *dphi; /* both directions */
    REAL *FQ, *U, *r, *R, *rho;                     /* the backward's */
    REAL *dw;                                       /* this block's part of dprojection, or NULL */
} FN(lin_scratch);

static FN(lin_scratch) FN(cut)(const lin_job *j, int64_t block, int worker) {
    int64_t F = j->F, Ev = j->Ev;
    FN(lin_scratch) s;
    s.dw = j->dw ? (REAL *)j->dw_parts + block * F * j->E : NULL;
    s.G = (REAL *)j->scratch + (size_t)worker * j->per_worker;
    s.Cs = s.G + j->S * F;
    s.kv = s.Cs + j->S;
    s.z = s.kv + F * Ev;
    s.x = s.z + F;
    s.v = s.x + j->E;
    s.row = s.v + Ev;
    s.f = s.row + Ev;
    s.dphi = s.f + F;
    if (!j->backward) {
        s.FQ = s.U = s.r = s.R = s.rho = NULL;
        return s;
    }
    s.FQ = s.dphi + F;
    s.U = s.FQ + j->L * F;
    s.r = s.U + j->L * Ev;
    s.R = s.r + j->L;
    s.rho = s.R + F * Ev;
    return s;
}

/* Block (b, h)'s key features, and its sums zeroed or read from the state;
 * returns the stabiliser the sums start at. */
static REAL FN(start)(const lin_job *j, int64_t block, FN(lin_scratch) * s) {
    int64_t F = j->F, Ev = j->Ev, b = block / j->H, h = block % j->H;
    REAL start = j->favor ? -INFINITY : 0;
    if (j->state) {
        const REAL *kv = (const REAL *)j->state->kv.data + block * F * Ev,
                   *z = (const REAL *)j->state->k.data + block * F;
        for (int64_t i = 0; i < F * Ev; i++) s->kv[i] = kv[i];
        for (int64_t m = 0; m < F; m++) s->z[m] = z[m];
        if (j->favor) start = ((const REAL *)j->state->max.data)[block];
    } else {
        for (int64_t i = 0; i < F * Ev; i++) s->kv[i] = 0;
        for (int64_t m = 0; m < F; m++) s->z[m] = 0;
    }
    FN(key_features)(j, b, h, s->G, s->Cs, start, s->x);
    return start;
}

/* What a sweep does at query i, the sums holding the keys it reads,
 * stabilised by prev. */
typedef void (*FN(query_step))(const lin_job *j, int64_t b, int64_t h, int64_t i, FN(lin_scratch) * s, REAL prev);

/* Block `block`'s sums built key by key, each query's step run when the
 * sums hold the keys it reads (all of them, or j <= i when causal); returns
 * the final stabiliser. */
static REAL FN(sweep)(const lin_job *j, int64_t block, FN(lin_scratch) * s, FN(query_step) step) {
    int64_t b = block / j->H, h = block % j->H;
    REAL prev = FN(start)(j, block, s);
    if (!j->causal)
        for (int64_t k = 0; k < j->S; k++) FN(add_key)(j, b, h, k, s->G, s->Cs, s->kv, s->z, s->v, &prev);
    for (int64_t i = 0; i < j->L; i++) {
        if (j->causal) FN(add_key)(j, b, h, i, s->G, s->Cs, s->kv, s->z, s->v, &prev);
        step(j, b, h, i, s, prev);
    }
    return prev;
}

static void FN(query_forward)(const lin_job *j, int64_t b, int64_t h, int64_t i, FN(lin_scratch) * s, REAL prev) {
    REAL c = FN(query_features)(j, b, h, i, s->x, s->f);
    FN(readout)(j, s->kv, s->z, s->f, c, prev, FN(out_row)(j->out, b, h, i));
}

static void FN(lin_forward_task)(void *arg, int64_t block, int worker) {
    const lin_job *j = arg;
    FN(lin_scratch) s = FN(cut)(j, block, worker);
    REAL last = FN(sweep)(j, block, &s, FN(query_forward));
    if (!j->state) return;
    REAL *kv = (REAL *)j->state->kv.data + block * j->F * j->Ev, *z = (REAL *)j->state->k.data + block * j->F;
    for (int64_t i = 0; i < j->F * j->Ev; i++) kv[i] = s.kv[i];
    for (int64_t m = 0; m < j->F; m++) z[m] = s.z[m];
    ((REAL *)j->state->max.data)[block] = last;
}

/* Query i's u_i = dout_i / den_i (into U) and r_i = -dout_i . out_i / den_i,
 * and, with dquery, its gradient from dphi = kv u_i + z r_i. */
static void FN(query_backward)(const lin_job *j, int64_t b, int64_t h, int64_t i, FN(lin_scratch) * s, REAL prev) {
    int64_t F = j->F, Ev = j->Ev;
    REAL *f = s->FQ + i * F, *u = s->U + i * Ev;
    REAL c = FN(query_features)(j, b, h, i, s->x, f);
    REAL inv = FN(readout)(j, s->kv, s->z, f, c, prev, s->row);
    FN(gather)(s->v, j->dout, b, h, i, 1);
    REAL dot = 0;
    for (int64_t e = 0; e < Ev; e++) {
        u[e] = s->v[e] * inv;
        dot += s->v[e] * s->row[e];
    }
    REAL r = s->r[i] = -dot * inv;
    if (!j->dq && !s->dw) return;
    for (int64_t m = 0; m < F; m++) {
        const REAL *row = s->kv + m * Ev;
        REAL acc = 0;
        for (int64_t e = 0; e < Ev; e++) acc += row[e] * u[e];
        s->dphi[m] = acc + s->z[m] * r;
    }
    FN(features_backward)(j, s->x, f, s->dphi, j->dq ? FN(out_row)(j->dq, b, h, i) : NULL, s->dw);
}

/* Key k's gradients from the reverse sums R = sum_i phi(q_i) u_i^T and
 * rho = sum_i phi(q_i) r_i over the queries that read it: dvalue = R^T
 * phi(k), dphi(k) = R v + rho. */
static void FN(key_backward)(const lin_job *j, int64_t b, int64_t h, int64_t k, FN(lin_scratch) * s) {
    int64_t F = j->F, Ev = j->Ev;
    REAL *dk = j->dk ? FN(out_row)(j->dk, b, h, k) : NULL, *dv = j->dv ? FN(out_row)(j->dv, b, h, k) : NULL;
    if (lin_padded(j, b, k)) {
        for (int64_t e = 0; dk && e < j->E; e++) dk[e] = 0;
        for (int64_t e = 0; dv && e < Ev; e++) dv[e] = 0;
        return;
    }
    const REAL *g = s->G + k * F;
    if (dv) {
        for (int64_t e = 0; e < Ev; e++) dv[e] = 0;
        for (int64_t m = 0; m < F; m++)
            for (int64_t e = 0; e < Ev; e++) dv[e] += g[m] * s->R[m * Ev + e];
    }
    if (!dk && !s->dw) return;
    FN(gather)(s->v, j->v, b, h, k, 1);
    for (int64_t m = 0; m < F; m++) {
        const REAL *row = s->R + m * Ev;
        REAL acc = 0;
        for (int64_t e = 0; e < Ev; e++) acc += row[e] * s->v[e];
        s->dphi[m] = acc + s->rho[m];
    }
    FN(gather)(s->x, j->k, b, h, k, (REAL)j->scale);
    FN(features_backward)(j, s->x, g, s->dphi, dk, s->dw);
}

static void FN(lin_backward_task)(void *arg, int64_t block, int worker) {
    const lin_job *j = arg;
    int64_t b = block / j->H, h = block % j->H, F = j->F, Ev = j->Ev;
    FN(lin_scratch) s = FN(cut)(j, block, worker);
    FN(sweep)(j, block, &s, FN(query_backward));
    if (!j->dk && !j->dv && !s.dw) return;
    for (int64_t i = 0; i < F * Ev; i++) s.R[i] = 0;
    for (int64_t m = 0; m < F; m++) s.rho[m] = 0;
    if (!j->causal) {
        for (int64_t i = 0; i < j->L; i++) FN(accumulate)(j, s.R, s.rho, s.FQ + i * F, s.U + i * Ev, s.r[i]);
        for (int64_t k = 0; k < j->S; k++) FN(key_backward)(j, b, h, k, &s);
        return;
    }
    /* R_k = phi(q_k) u_k^T + exp(C_k - C_{k+1}) R_{k+1}: every term in key k's scale */
    for (int64_t k = j->S - 1; k >= 0; k--) {
        if (k + 1 < j->S) FN(rescale)(j, s.R, s.rho, s.Cs[k], s.Cs[k + 1]);
        FN(accumulate)(j, s.R, s.rho, s.FQ + k * F, s.U + k * Ev, s.r[k]);
        FN(key_backward)(j, b, h, k, &s);
    }
}

/* dprojection <- the sum of the blocks' parts, in block order. */
static void FN(lin_sum_parts)(const lin_job *j, int64_t blocks) {
    int64_t n = j->F * j->E;
    REAL *dw = j->dw->data;
    const REAL *parts = j->dw_parts;
    for (int64_t i = 0; i < n; i++) dw[i] = 0;
    for (int64_t blk = 0; blk < blocks; blk++)
        for (int64_t i = 0; i < n; i++) dw[i] += parts[blk * n + i];
}

#include "../../core/real_end.h"
