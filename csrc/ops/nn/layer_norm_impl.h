/* layer_norm_impl.h: typed kernels of layer_norm.c (see core/real.h). Rows
 * of x (N, D): mean, rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd. */
#include "../../core/real.h"

#define AT(t, i, j) (((REAL *)(t)->data)[(i) * (t)->strides[0] + (j) * (t)->strides[1]])
#define VEC(t, i) (((REAL *)(t)->data)[(i) * (t)->strides[0]])

/* Sum over c < d of (a[c s] - ma) (b[c t] - mb), or of a[c s] - ma when b
 * is NULL, in 16 partial sums combined in a fixed order: vectorised on
 * contiguous rows, the same bits on strided ones. (A sum in one accumulator
 * waits on itself at every element: at d = 512 that was most of a layer
 * norm's time.) */
static inline REAL FN(lane_sum)(const REAL *a, int64_t s, REAL ma, const REAL *b, int64_t t, REAL mb, int64_t d) {
    REAL lane[16] = {0}, sum = 0;
    int64_t c = 0;
#define TERM(i, s, t) (b ? (a[(i) * (s)] - ma) * (b[(i) * (t)] - mb) : a[(i) * (s)] - ma)
    if (s == 1 && (!b || t == 1)) /* unit strides the compiler can see */
        for (; c + 16 <= d; c += 16)
            for (int k = 0; k < 16; k++) lane[k] += TERM(c + k, 1, 1);
    else
        for (; c + 16 <= d; c += 16)
            for (int k = 0; k < 16; k++) lane[k] += TERM(c + k, s, t);
    for (int k = 0; k < 16; k++) sum += lane[k];
    for (; c < d; c++) sum += TERM(c, s, t);
#undef TERM
    return sum;
}

static void FN(ln_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const ln_job *j = arg;
    int64_t d = j->d, xs = j->x->strides[1];
    const REAL *w = attnc_present(j->w) ? j->w->data : NULL, *b = attnc_present(j->b) ? j->b->data : NULL;
    int64_t ws = w ? j->w->strides[0] : 0, bs = b ? j->b->strides[0] : 0;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        const REAL *x = (const REAL *)j->x->data + r * j->x->strides[0];
        REAL *restrict y = (REAL *)j->y->data + r * d;
        REAL mean = FN(lane_sum)(x, xs, 0, NULL, 0, 0, d) / (REAL)d;
        REAL var = FN(lane_sum)(x, xs, mean, x, xs, mean, d) / (REAL)d;
        REAL rstd = 1 / SQRT(var + (REAL)j->eps);
        /* one loop per factor: a test inside the loop kept it scalar */
        if (xs == 1)
            for (int64_t c = 0; c < d; c++) y[c] = (x[c] - mean) * rstd;
        else
            for (int64_t c = 0; c < d; c++) y[c] = (x[c * xs] - mean) * rstd;
        if (w)
            for (int64_t c = 0; c < d; c++) y[c] *= w[c * ws];
        if (b)
            for (int64_t c = 0; c < d; c++) y[c] += b[c * bs];
        ((REAL *)j->mean->data)[r] = mean;
        ((REAL *)j->rstd->data)[r] = rstd;
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * weight. */
static void FN(ln_dx_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const ln_job *j = arg;
    int64_t d = j->d, xs = j->x->strides[1], gs = j->dy->strides[1];
    const REAL *w = attnc_present(j->w) ? j->w->data : NULL;
    int64_t ws = w ? j->w->strides[0] : 0;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        const REAL *x = (const REAL *)j->x->data + r * j->x->strides[0];
        const REAL *dy = (const REAL *)j->dy->data + r * j->dy->strides[0];
        REAL *restrict dx = (REAL *)j->dx->data + r * d;
        REAL mean = VEC(j->mean_in, r), rstd = VEC(j->rstd_in, r);
        /* g = dy w into dx first (dx is contiguous and none of the inputs) */
        for (int64_t c = 0; c < d; c++) dx[c] = w ? dy[c * gs] * w[c * ws] : dy[c * gs];
        REAL sg = FN(lane_sum)(dx, 1, 0, NULL, 0, 0, d) / (REAL)d;
        REAL sgx = FN(lane_sum)(x, xs, mean, dx, 1, 0, d) * rstd / (REAL)d;
        for (int64_t c = 0; c < d; c++) dx[c] = rstd * (dx[c] - sg - (x[c * xs] - mean) * rstd * sgx);
    }
}

/* dweight, dbias: column sums over all rows, in row order, a block of
 * columns at a time so that the sums run in vector lanes across columns. */
static void FN(ln_dparams_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const ln_job *j = arg;
    int64_t c0 = block * ROWS, nc = j->d - c0 < ROWS ? j->d - c0 : ROWS;
    int64_t xs = j->x->strides[1], gs = j->dy->strides[1];
    REAL sw[ROWS] = {0}, sb[ROWS] = {0};
    for (int64_t r = 0; r < j->n; r++) {
        const REAL *x = (const REAL *)j->x->data + r * j->x->strides[0] + c0 * xs;
        const REAL *dy = (const REAL *)j->dy->data + r * j->dy->strides[0] + c0 * gs;
        REAL mean = VEC(j->mean_in, r), rstd = VEC(j->rstd_in, r);
        for (int64_t c = 0; c < nc; c++) {
            REAL g = dy[c * gs];
            sw[c] += g * (x[c * xs] - mean) * rstd;
            sb[c] += g;
        }
    }
    for (int64_t c = 0; c < nc; c++) {
        if (attnc_present(j->dw)) ((REAL *)j->dw->data)[(c0 + c) * j->dw->strides[0]] = sw[c];
        if (attnc_present(j->db)) ((REAL *)j->db->data)[(c0 + c) * j->db->strides[0]] = sb[c];
    }
}

#undef AT
#undef VEC
#include "../../core/real_end.h"
