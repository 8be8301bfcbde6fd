/* attention.c: soft attention, context = softmax(score(Q, K)) V, forward and
 * backward. */
#include <math.h>
#include <stdlib.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/threads.h"
#include "attend.h"
#include "softmax.h"

typedef struct {
    attnc_score_ctx c;
    const attnc_mask *mask;
    attnc_tensor *context, *weights, *dvalues;
    const attnc_tensor *values, *dcontext, *dweights, *fwd_weights;
    void *scratch, *g;
    size_t per_worker;
} attention_job;

#define ATTNC_F64 0
#include "attend_impl.h"
#define ATTNC_F64 1
#include "attend_impl.h"

attnc_status attnc_check_outputs(const attnc_dims *d, attnc_tensor *context, attnc_tensor *weights) {
    if (!attnc_present(context) || !attnc_present(weights))
        return attnc_fail(ATTNC_ERR_TYPE, "context and weights are required");
    TRY(attnc_check_like(d, context, "context", 2, d->tq, d->dv, true));
    return attnc_check_like(d, weights, "weights", 2, d->tq, d->tk, true);
}

attnc_status attnc_check_backward(const attnc_dims *d, const attnc_tensor *dcontext, const attnc_tensor *dweights,
                                  attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                  const attnc_score_params *params, attnc_score_grads *dparams) {
    TRY(attnc_check_like(d, dcontext, "dcontext", 2, d->tq, d->dv, false));
    TRY(attnc_check_like(d, dweights, "dweights", 2, d->tq, d->tk, false));
    TRY(attnc_check_like(d, dquery, "dquery", 2, d->tq, d->dq, true));
    TRY(attnc_check_like(d, dkeys, "dkeys", 2, d->tk, d->dk, true));
    TRY(attnc_check_like(d, dvalues, "dvalues", 2, d->tk, d->dv, true));
    return attnc_score_check_grads(d, params, dparams);
}

attnc_status attnc_attention_forward(attnc_tensor *context, attnc_tensor *weights, const attnc_tensor *query,
                                     const attnc_tensor *keys, const attnc_tensor *values,
                                     const attnc_score_params *params, const attnc_mask *mask) {
    attnc_dims d;
    TRY(attnc_check_inputs(&d, query, keys, values, params, mask));
    TRY(attnc_check_outputs(&d, context, weights));
    int workers = attnc_workers();
    size_t per = attnc_score_scratch(&d, params->kind);
    void *scratch;
    TRY(attnc_calloc(&scratch, per * (size_t)workers, attnc_dtype_size(d.dtype), "attention scratch"));
    attnc_score_ctx c;
    attnc_status st = attnc_score_open(&c, &d, query, keys, params);
    if (st == ATTNC_OK) {
        attention_job job = {.c = c,
                             .mask = mask,
                             .context = context,
                             .weights = weights,
                             .values = values,
                             .scratch = scratch,
                             .per_worker = per};
        attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, attention_forward_task), &job);
    }
    attnc_score_close(&c);
    free(scratch);
    return st;
}

attnc_status attnc_attention_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                      attnc_score_grads *dparams, const attnc_tensor *dcontext,
                                      const attnc_tensor *dweights, const attnc_tensor *query, const attnc_tensor *keys,
                                      const attnc_tensor *values, const attnc_tensor *weights,
                                      const attnc_score_params *params) {
    attnc_dims d;
    TRY(attnc_check_inputs(&d, query, keys, values, params, NULL));
    if (!attnc_present(weights)) return attnc_fail(ATTNC_ERR_TYPE, "weights is required");
    TRY(attnc_check_like(&d, weights, "weights", 2, d.tq, d.tk, false));
    TRY(attnc_check_backward(&d, dcontext, dweights, dquery, dkeys, dvalues, params, dparams));
    int workers = attnc_workers();
    size_t size = attnc_dtype_size(d.dtype), per = (size_t)(d.tq * d.tk);
    void *scratch, *g;
    TRY(attnc_calloc(&scratch, per * (size_t)workers, size, "attention scratch"));
    attnc_status st = attnc_calloc(&g, per * (size_t)d.batch.count, size, "score gradient");
    attnc_score_ctx c = {0};
    if (st == ATTNC_OK) st = attnc_score_open(&c, &d, query, keys, params);
    if (st == ATTNC_OK) {
        attention_job job = {.c = c,
                             .dvalues = dvalues,
                             .values = values,
                             .dcontext = dcontext,
                             .dweights = dweights,
                             .fwd_weights = weights,
                             .scratch = scratch,
                             .g = g,
                             .per_worker = per};
        attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, attention_backward_task), &job);
        st = attnc_score_run_backward(&c, g, dquery, dkeys, dparams);
    }
    attnc_score_close(&c);
    free(scratch);
    free(g);
    return st;
}
