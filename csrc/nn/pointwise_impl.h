/* pointwise_impl.h: typed kernels of pointwise.c (see core/real.h). */
#include "../core/real.h"

typedef struct {
    const REAL *x, *residual, *dy;
    REAL *y, *dx;
    int64_t n;
    attnc_activation act;
    dropout_mask mask;
} FN(pointwise_job);

static REAL FN(act)(attnc_activation act, REAL x) {
    switch (act) {
    case ATTNC_ACT_RELU: return x > 0 ? x : 0;
    case ATTNC_ACT_GELU: return (REAL)0.5 * x * (1 + ERF(x * (REAL)SQRT1_2));
    default: return x;
    }
}

/* d act(x) / dx. GELU: Phi(x) + x phi(x). */
static REAL FN(act_grad)(attnc_activation act, REAL x) {
    switch (act) {
    case ATTNC_ACT_RELU: return x > 0 ? 1 : 0;
    case ATTNC_ACT_GELU:
        return (REAL)0.5 * (1 + ERF(x * (REAL)SQRT1_2)) +
               x * EXP(-(REAL)0.5 * x * x) * (REAL)INV_SQRT_2PI;
    default: return 1;
    }
}

/* The keep words of elements [i0, i1) (i0 a multiple of 4), if dropout is on. */
static void FN(mask_words)(const dropout_mask *m, int64_t i0, int64_t i1, uint32_t *bits) {
    if (m->active) attnc_random_bits(m->seed, m->stream, (uint64_t)i0 / 4, (i1 - i0 + 3) / 4, bits);
}

/* y = residual + dropout(act(x)) over elements [block * CHUNK, ...). */
static void FN(pointwise_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(pointwise_job) *j = arg;
    int64_t i0 = block * CHUNK, i1 = i0 + CHUNK < j->n ? i0 + CHUNK : j->n;
    REAL scale = (REAL)j->mask.scale;
    uint32_t bits[CHUNK];
    FN(mask_words)(&j->mask, i0, i1, bits);
    for (int64_t k = i0; k < i1; k++) {
        REAL v = FN(act)(j->act, j->x[k]);
        if (j->mask.active) v = bits[k - i0] >= j->mask.threshold ? v * scale : 0;
        j->y[k] = j->residual ? j->residual[k] + v : v;
    }
}

/* dx = act'(x) * dropout(dy), the same mask as the forward. */
static void FN(pointwise_backward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(pointwise_job) *j = arg;
    int64_t i0 = block * CHUNK, i1 = i0 + CHUNK < j->n ? i0 + CHUNK : j->n;
    REAL scale = (REAL)j->mask.scale;
    uint32_t bits[CHUNK];
    FN(mask_words)(&j->mask, i0, i1, bits);
    for (int64_t k = i0; k < i1; k++) {
        REAL g = j->dy[k];
        if (j->mask.active) g = bits[k - i0] >= j->mask.threshold ? g * scale : 0;
        j->dx[k] = j->x ? g * FN(act_grad)(j->act, j->x[k]) : g;
    }
}

#include "../core/real_end.h"
