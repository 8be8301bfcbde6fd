/* hard.c: hard attention (argmax, sampling, Gumbel-max with a straight-through
 * gradient), forward and backward. */
#include <math.h>
#include <stdlib.h>

#include "../../core/blas.h"
#include "../../core/rng.h"
#include "../../core/status.h"
#include "../../core/threads.h"
#include "attend.h"
#include "softmax.h"

typedef struct {
    attnc_score_ctx c;
    const attnc_mask *mask;
    const attnc_hard_options *opt;
    attnc_tensor *context, *weights, *indices, *dvalues;
    const attnc_tensor *values, *dcontext, *dweights, *fwd_indices;
    void *scratch, *g;
    size_t per_worker;
} hard_job;

#define ATTNC_F64 0
#include "hard_impl.h"
#define ATTNC_F64 1
#include "hard_impl.h"

static attnc_status check_options(const attnc_hard_options *opt) {
    if (opt->mode != ATTNC_HARD_ARGMAX && opt->mode != ATTNC_HARD_SAMPLE && opt->mode != ATTNC_HARD_GUMBEL)
        return attnc_fail(ATTNC_ERR_VALUE, "unknown hard attention mode %d", (int)opt->mode);
    if (!(opt->temperature > 0))
        return attnc_fail(ATTNC_ERR_VALUE, "temperature must be > 0, got %g", opt->temperature);
    return ATTNC_OK;
}

static attnc_status check_indices(const attnc_dims *d, const attnc_tensor *t, bool output) {
    TRY(attnc_check_dtype(t, "indices", ATTNC_INT64));
    int64_t tq = d->tq;
    TRY(attnc_check_shape(t, "indices", &d->batch, 1, &tq));
    return output ? attnc_check_out(t, "indices") : ATTNC_OK;
}

attnc_status attnc_hard_attention_forward(attnc_tensor *context, attnc_tensor *weights, attnc_tensor *indices,
                                          const attnc_tensor *query, const attnc_tensor *keys,
                                          const attnc_tensor *values, const attnc_score_params *params,
                                          const attnc_mask *mask, const attnc_hard_options *options) {
    attnc_dims d;
    TRY(check_options(options));
    TRY(attnc_check_inputs(&d, query, keys, values, params, mask));
    TRY(attnc_check_outputs(&d, context, weights));
    if (!attnc_present(indices)) return attnc_fail(ATTNC_ERR_TYPE, "indices is required");
    TRY(check_indices(&d, indices, true));
    int workers = attnc_workers();
    size_t per = attnc_score_scratch(&d, params->kind);
    void *scratch;
    TRY(attnc_calloc(&scratch, per * (size_t)workers, attnc_dtype_size(d.dtype), "hard attention scratch"));
    attnc_score_ctx c;
    attnc_status st = attnc_score_open(&c, &d, query, keys, params);
    if (st == ATTNC_OK) {
        hard_job job = {.c = c,
                        .mask = mask,
                        .opt = options,
                        .context = context,
                        .weights = weights,
                        .indices = indices,
                        .values = values,
                        .scratch = scratch,
                        .per_worker = per};
        attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, hard_forward_task), &job);
    }
    attnc_score_close(&c);
    free(scratch);
    return st;
}

attnc_status attnc_hard_attention_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                           attnc_score_grads *dparams, const attnc_tensor *dcontext,
                                           const attnc_tensor *dweights, const attnc_tensor *query,
                                           const attnc_tensor *keys, const attnc_tensor *values,
                                           const attnc_tensor *indices, const attnc_score_params *params,
                                           const attnc_mask *mask, const attnc_hard_options *options) {
    attnc_dims d;
    TRY(check_options(options));
    TRY(attnc_check_inputs(&d, query, keys, values, params, mask));
    if (!attnc_present(indices)) return attnc_fail(ATTNC_ERR_TYPE, "indices is required");
    TRY(check_indices(&d, indices, false));
    TRY(attnc_check_backward(&d, dcontext, dweights, dquery, dkeys, dvalues, params, dparams));
    int workers = attnc_workers();
    size_t size = attnc_dtype_size(d.dtype);
    size_t per = (size_t)(d.tq * d.tk) + attnc_score_scratch(&d, params->kind);
    void *scratch, *g;
    TRY(attnc_calloc(&scratch, per * (size_t)workers, size, "hard attention scratch"));
    /* G stays zero except under GUMBEL: then the score gradients are zero. */
    attnc_status st = attnc_calloc(&g, (size_t)(d.batch.count * d.tq * d.tk), size, "score gradient");
    attnc_score_ctx c = {0};
    if (st == ATTNC_OK) st = attnc_score_open(&c, &d, query, keys, params);
    if (st == ATTNC_OK) {
        hard_job job = {.c = c,
                        .mask = mask,
                        .opt = options,
                        .dvalues = dvalues,
                        .values = values,
                        .dcontext = dcontext,
                        .dweights = dweights,
                        .fwd_indices = indices,
                        .scratch = scratch,
                        .g = g,
                        .per_worker = per};
        attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, hard_backward_task), &job);
        st = attnc_score_run_backward(&c, g, dquery, dkeys, dparams);
    }
    attnc_score_close(&c);
    free(scratch);
    free(g);
    return st;
}
