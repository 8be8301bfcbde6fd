/* softmax.c: masked softmax, forward and backward. */
#include "softmax.h"

#include <math.h>

#include "../../core/status.h"
#include "../../core/threads.h"

typedef struct {
    const attnc_dims *d;
    attnc_tensor *out;
    const attnc_tensor *in, *aux;
    const attnc_mask *mask;
} softmax_job;

#define ATTNC_F64 0
#include "softmax_impl.h"
#define ATTNC_F64 1
#include "softmax_impl.h"

/* Sizes of a (..., Tq, Tk) float tensor t. */
static attnc_status dims_of(attnc_dims *d, const attnc_tensor *t, const char *name) {
    d->dtype = t->dtype;
    if (t->dtype != ATTNC_FLOAT32 && t->dtype != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "%s has dtype %s, expected float32 or float64", name,
                          attnc_dtype_name(t->dtype));
    TRY(attnc_check_dtype(t, name, t->dtype));
    if (t->ndim < 2) return attnc_fail(ATTNC_ERR_VALUE, "%s must have at least 2 dims, got %d", name, t->ndim);
    d->batch.nb = t->ndim - 2;
    d->batch.count = 1;
    for (int i = 0; i < d->batch.nb; i++) {
        d->batch.shape[i] = t->shape[i];
        d->batch.count *= t->shape[i];
    }
    d->tq = t->shape[t->ndim - 2];
    d->tk = t->shape[t->ndim - 1];
    return ATTNC_OK;
}

attnc_status attnc_softmax_forward(attnc_tensor *weights, const attnc_tensor *scores, const attnc_mask *mask) {
    attnc_dims d = {0};
    TRY(dims_of(&d, scores, "scores"));
    TRY(attnc_check_like(&d, weights, "weights", 2, d.tq, d.tk, true));
    if (!attnc_present(weights)) return attnc_fail(ATTNC_ERR_TYPE, "weights is required");
    if (weights->data == scores->data && !attnc_is_contiguous(scores))
        return attnc_fail(ATTNC_ERR_LAYOUT, "in-place softmax needs contiguous scores");
    TRY(attnc_check_mask(&d, mask));
    softmax_job job = {.d = &d, .out = weights, .in = scores, .mask = mask};
    attnc_parallel_for(d.batch.count, attnc_workers(), ATTNC_TYPED(d.dtype, softmax_forward_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_softmax_backward(attnc_tensor *dscores, const attnc_tensor *dweights, const attnc_tensor *weights) {
    attnc_dims d = {0};
    TRY(dims_of(&d, weights, "weights"));
    TRY(attnc_check_like(&d, dweights, "dweights", 2, d.tq, d.tk, false));
    TRY(attnc_check_like(&d, dscores, "dscores", 2, d.tq, d.tk, true));
    if (!attnc_present(dweights) || !attnc_present(dscores))
        return attnc_fail(ATTNC_ERR_TYPE, "dweights and dscores are required");
    softmax_job job = {.d = &d, .out = dscores, .in = dweights, .aux = weights};
    attnc_parallel_for(d.batch.count, attnc_workers(), ATTNC_TYPED(d.dtype, softmax_backward_task), &job);
    return ATTNC_OK;
}
