/* pointwise_impl.h: typed kernels of pointwise.c (see core/real.h). */
#include "../../core/real.h"

/* tanh(sqrt(2 / pi) (x + 0.044715 x^3)), the tanh GELU's inner tanh (the
 * operations in torch's order, so float32 results match its bits closely). */
static REAL FN(gelu_tanh_inner)(REAL x) { return TANH((REAL)SQRT_2_PI * (x + (REAL)GELU_KAPPA * (x * x * x))); }

/* ReLU as torch's clamp_min(x, 0): NaN and -0 pass through (x < 0 is
 * false for both); its derivative torch's threshold_backward: 0 where
 * x <= 0, so 1 at NaN. */
static REAL FN(act)(attnc_activation act, REAL x) {
    switch (act) {
    case ATTNC_ACT_RELU: return x < 0 ? 0 : x;
    case ATTNC_ACT_GELU: return (REAL)0.5 * x * (1 + ERF(x * (REAL)SQRT1_2));
    case ATTNC_ACT_GELU_TANH: return (REAL)0.5 * x * (1 + FN(gelu_tanh_inner)(x));
    default: return x;
    }
}

/* d act(x) / dx. GELU: Phi(x) + x phi(x). Tanh GELU with t its inner tanh:
 * (1 + t) / 2 + x / 2 (1 - t^2) sqrt(2 / pi) (1 + 3 kappa x^2). */
static REAL FN(act_grad)(attnc_activation act, REAL x) {
    switch (act) {
    case ATTNC_ACT_RELU: return x <= 0 ? 0 : 1;
    case ATTNC_ACT_GELU:
        return (REAL)0.5 * (1 + ERF(x * (REAL)SQRT1_2)) + x * EXP(-(REAL)0.5 * x * x) * (REAL)INV_SQRT_2PI;
    case ATTNC_ACT_GELU_TANH: {
        REAL t = FN(gelu_tanh_inner)(x);
        REAL inner_grad = (REAL)SQRT_2_PI * (1 + 3 * (REAL)GELU_KAPPA * (x * x));
        return (REAL)0.5 * (1 + t) + (REAL)0.5 * x * (1 - t * t) * inner_grad;
    }
    default: return 1;
    }
}

/* v[0..n) <- act(x[0..n)), a loop per activation so each vectorises. */
static void FN(act_rows)(attnc_activation act, const REAL *x, REAL *v, int64_t n) {
    if (act == ATTNC_ACT_RELU)
        for (int64_t k = 0; k < n; k++) v[k] = x[k] < 0 ? 0 : x[k];
    else if (act == ATTNC_ACT_GELU)
        for (int64_t k = 0; k < n; k++) v[k] = FN(act)(ATTNC_ACT_GELU, x[k]);
    else if (act == ATTNC_ACT_GELU_TANH)
        for (int64_t k = 0; k < n; k++) v[k] = FN(act)(ATTNC_ACT_GELU_TANH, x[k]);
    else
        memcpy(v, x, (size_t)n * sizeof *v);
}

/* v[0..n) *= keep ? 1 / (1 - p) : 0, the keep words of elements [i0, i0 + n)
 * (i0 a multiple of 4). */
static void FN(drop_rows)(const dropout_mask *m, int64_t i0, REAL *v, int64_t n) {
    if (!m->active) return;
    uint32_t bits[CHUNK];
    attnc_random_bits(m->seed, m->stream, (uint64_t)i0 / 4, (n + 3) / 4, bits);
    REAL scale = (REAL)m->scale;
    for (int64_t k = 0; k < n; k++) v[k] = bits[k] >= m->threshold ? v[k] * scale : 0;
}

/* y = residual + dropout(act(x)) over elements [block * CHUNK, ...). */
static void FN(pointwise_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const pointwise_job *j = arg;
    int64_t i0 = block * CHUNK, n = i0 + CHUNK < j->n ? CHUNK : j->n - i0;
    REAL v[CHUNK];
    FN(act_rows)(j->act, (const REAL *)j->x + i0, v, n);
    FN(drop_rows)(&j->mask, i0, v, n);
    REAL *y = (REAL *)j->y + i0;
    if (j->residual) {
        const REAL *r = (const REAL *)j->residual + i0;
        for (int64_t k = 0; k < n; k++) y[k] = r[k] + v[k];
    } else {
        memcpy(y, v, (size_t)n * sizeof *y);
    }
}

/* dx = act'(x) * dropout(dy), the same mask as the forward. */
static void FN(pointwise_backward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const pointwise_job *j = arg;
    int64_t i0 = block * CHUNK, n = i0 + CHUNK < j->n ? CHUNK : j->n - i0;
    REAL g[CHUNK];
    memcpy(g, (const REAL *)j->dy + i0, (size_t)n * sizeof *g);
    FN(drop_rows)(&j->mask, i0, g, n);
    REAL *dx = (REAL *)j->dx + i0;
    const REAL *x = j->x ? (const REAL *)j->x + i0 : NULL;
    if (j->act == ATTNC_ACT_RELU)
        for (int64_t k = 0; k < n; k++) dx[k] = x[k] <= 0 ? 0 : g[k];
    else if (j->act == ATTNC_ACT_GELU)
        for (int64_t k = 0; k < n; k++) dx[k] = g[k] * FN(act_grad)(ATTNC_ACT_GELU, x[k]);
    else if (j->act == ATTNC_ACT_GELU_TANH)
        for (int64_t k = 0; k < n; k++) dx[k] = g[k] * FN(act_grad)(ATTNC_ACT_GELU_TANH, x[k]);
    else
        memcpy(dx, g, (size_t)n * sizeof *dx);
}

#include "../../core/real_end.h"
