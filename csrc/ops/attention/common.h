/* common.h: what every attention operation shares: argument checks that
 * derive the call's sizes, and the per-batch view of the mask. */
#ifndef ATTNC_ATTENTION_COMMON_H
#define ATTNC_ATTENTION_COMMON_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "../../core/tensor.h"

/* The sizes of one call. */
typedef struct {
    attnc_dtype dtype;
    attnc_batch batch;  /* leading dims of query / keys / values          */
    int64_t tq, tk;     /* queries, keys                                  */
    int64_t dq, dk, dv; /* feature sizes                                  */
    int64_t da;         /* additive score's hidden size (0 otherwise)     */
} attnc_dims;

/* Check query, keys, values (may be NULL), the score parameters and the
 * mask against each other, filling d. */
attnc_status attnc_check_inputs(attnc_dims *d, const attnc_tensor *query, const attnc_tensor *keys,
                                const attnc_tensor *values, const attnc_score_params *params, const attnc_mask *mask);

/* mask against the sizes in d (NULL passes). */
attnc_status attnc_check_mask(const attnc_dims *d, const attnc_mask *mask);

/* A float tensor shaped [batch..., trailing...] of the call's dtype
 * (outputs and gradients also C-contiguous). Absent tensors pass. */
attnc_status attnc_check_like(const attnc_dims *d, const attnc_tensor *t, const char *name, int ntrail, int64_t t0,
                              int64_t t1, bool output);

/* The mask of one batch element. */
typedef struct {
    const uint8_t *mask; /* NULL: no boolean mask                         */
    int64_t rs, cs;      /* its strides                                   */
    int64_t klen;        /* keys [0, klen) are valid                      */
    int causal;
} attnc_bmask;

void attnc_bmask_at(attnc_bmask *bm, const attnc_mask *mask, const attnc_dims *d, int64_t b);

/* Keys query i may attend to lie in [lo, hi); within it, attnc_mask_ok. */
static inline void attnc_row_range(const attnc_bmask *m, int64_t i, int64_t *lo, int64_t *hi) {
    *lo = 0;
    *hi = m->klen;
    if (m->causal && i + 1 < *hi) *hi = i + 1;
}

static inline bool attnc_mask_ok(const attnc_bmask *m, int64_t i, int64_t j) {
    return !m->mask || m->mask[i * m->rs + j * m->cs];
}

/* Narrow [lo, hi) to the keys k with |k - p| <= window (p not NaN). */
static inline void attnc_window(double p, double window, int64_t *lo, int64_t *hi) {
    double first = ceil(p - window), last = floor(p + window);
    if (first > (double)*lo) *lo = first >= (double)*hi ? *hi : (int64_t)first;
    if (last + 1 < (double)*hi) *hi = last + 1 <= (double)*lo ? *lo : (int64_t)(last + 1);
}

#endif
