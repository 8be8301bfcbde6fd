/* local.c: Luong et al.'s local attention (local-m and local-p), forward and
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
    const attnc_local_options *opt;
    attnc_tensor *context, *weights, *positions_out, *dvalues, *dquery;
    const attnc_tensor *values, *dcontext, *dweights, *dpositions, *fwd_weights, *fwd_positions;
    void *scratch, *g, *stash;
    size_t per_worker;
} local_job;

#define ATTNC_F64 0
#include "local_impl.h"
#define ATTNC_F64 1
#include "local_impl.h"

static const attnc_batch NO_BATCH = {.nb = 0, .count = 1};

static attnc_status check_options(const attnc_dims *d, const attnc_local_options *o) {
    if (o->mode == ATTNC_LOCAL_MONOTONIC) {
        if (!(o->window >= 0))
            return attnc_fail(ATTNC_ERR_VALUE, "window must be >= 0 for mode='monotonic', got %g", o->window);
        if (attnc_present(&o->positions)) {
            TRY(attnc_check_dtype(&o->positions, "positions", d->dtype));
            int64_t tq = d->tq;
            TRY(attnc_check_shape(&o->positions, "positions", &d->batch, 1, &tq));
        }
        return ATTNC_OK;
    }
    if (o->mode != ATTNC_LOCAL_PREDICTIVE)
        return attnc_fail(ATTNC_ERR_VALUE, "unknown local attention mode %d", (int)o->mode);
    if (!(o->window >= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "window must be >= 1 for mode='predictive', got %g", o->window);
    if (!attnc_present(&o->w_p) || !attnc_present(&o->v_p))
        return attnc_fail(ATTNC_ERR_TYPE, "predictive local attention needs w_p and v_p");
    TRY(attnc_check_dtype(&o->w_p, "w_p", d->dtype));
    TRY(attnc_check_dtype(&o->v_p, "v_p", d->dtype));
    int64_t wp[2] = {d->dq, -1};
    TRY(attnc_check_shape(&o->w_p, "w_p", &NO_BATCH, 2, wp));
    TRY(attnc_check_shape(&o->v_p, "v_p", &NO_BATCH, 1, &wp[1]));
    return attnc_check_blas(&o->w_p, "w_p");
}

/* Per-worker scratch: forward H (Tq, dp) then the score scratch; backward
 * also the weights and the recomputed softmax (Tq, Tk each). */
static size_t scratch_size(const attnc_dims *d, const attnc_score_params *params, const attnc_local_options *o,
                           bool backward) {
    size_t h = o->mode == ATTNC_LOCAL_PREDICTIVE ? (size_t)(d->tq * o->w_p.shape[1]) : 0;
    size_t s = attnc_score_scratch(d, params->kind);
    return (h > s ? h : s) + (backward ? 2 * (size_t)(d->tq * d->tk) : 0);
}

attnc_status attnc_local_attention_forward(attnc_tensor *context, attnc_tensor *weights, attnc_tensor *positions_out,
                                           const attnc_tensor *query, const attnc_tensor *keys,
                                           const attnc_tensor *values, const attnc_score_params *params,
                                           const attnc_mask *mask, const attnc_local_options *options) {
    attnc_dims d;
    TRY(attnc_check_inputs(&d, query, keys, values, params, mask));
    TRY(check_options(&d, options));
    TRY(attnc_check_outputs(&d, context, weights));
    if (!attnc_present(positions_out)) return attnc_fail(ATTNC_ERR_TYPE, "positions is required");
    TRY(attnc_check_like(&d, positions_out, "positions", 1, d.tq, 0, true));
    int workers = attnc_workers();
    size_t per = scratch_size(&d, params, options, false);
    void *scratch;
    TRY(attnc_calloc(&scratch, per * (size_t)workers, attnc_dtype_size(d.dtype), "local attention scratch"));
    attnc_score_ctx c;
    attnc_status st = attnc_score_open(&c, &d, query, keys, params);
    if (st == ATTNC_OK) {
        local_job job = {.c = c,
                         .mask = mask,
                         .opt = options,
                         .context = context,
                         .weights = weights,
                         .positions_out = positions_out,
                         .values = values,
                         .scratch = scratch,
                         .per_worker = per};
        attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, local_forward_task), &job);
    }
    attnc_score_close(&c);
    free(scratch);
    return st;
}

attnc_status attnc_local_attention_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                            attnc_score_grads *dparams, attnc_tensor *dw_p, attnc_tensor *dv_p,
                                            const attnc_tensor *dcontext, const attnc_tensor *dweights,
                                            const attnc_tensor *dpositions, const attnc_tensor *query,
                                            const attnc_tensor *keys, const attnc_tensor *values,
                                            const attnc_tensor *weights, const attnc_tensor *positions,
                                            const attnc_score_params *params, const attnc_mask *mask,
                                            const attnc_local_options *options) {
    attnc_dims d;
    TRY(attnc_check_inputs(&d, query, keys, values, params, mask));
    TRY(check_options(&d, options));
    if (!attnc_present(weights) || !attnc_present(positions))
        return attnc_fail(ATTNC_ERR_TYPE, "weights and positions are required");
    TRY(attnc_check_like(&d, weights, "weights", 2, d.tq, d.tk, false));
    TRY(attnc_check_like(&d, positions, "positions", 1, d.tq, 0, false));
    TRY(attnc_check_like(&d, dpositions, "dpositions", 1, d.tq, 0, false));
    TRY(attnc_check_backward(&d, dcontext, dweights, dquery, dkeys, dvalues, params, dparams));
    bool predictive = options->mode == ATTNC_LOCAL_PREDICTIVE;
    int64_t dp = predictive ? options->w_p.shape[1] : 0;
    attnc_dims nobatch = {.dtype = d.dtype, .batch = NO_BATCH};
    if (predictive) {
        TRY(attnc_check_like(&nobatch, dw_p, "dw_p", 2, d.dq, dp, true));
        TRY(attnc_check_like(&nobatch, dv_p, "dv_p", 1, dp, 0, true));
    }
    int workers = attnc_workers();
    size_t size = attnc_dtype_size(d.dtype), per = scratch_size(&d, params, options, true);
    void *scratch = NULL, *g = NULL, *stash = NULL;
    attnc_status st = attnc_calloc(&scratch, per * (size_t)workers, size, "local scratch");
    if (st == ATTNC_OK) st = attnc_calloc(&g, (size_t)(d.batch.count * d.tq * d.tk), size, "score gradient");
    if (st == ATTNC_OK)
        st = attnc_calloc(&stash, (size_t)(d.batch.count * (d.tq + 1) * dp), size, "local gradient stash");
    attnc_score_ctx c = {0};
    if (st == ATTNC_OK) st = attnc_score_open(&c, &d, query, keys, params);
    if (st == ATTNC_OK) {
        local_job job = {.c = c,
                         .mask = mask,
                         .opt = options,
                         .dvalues = dvalues,
                         .dquery = dquery,
                         .values = values,
                         .dcontext = dcontext,
                         .dweights = dweights,
                         .dpositions = dpositions,
                         .fwd_weights = weights,
                         .fwd_positions = positions,
                         .scratch = scratch,
                         .g = g,
                         .stash = stash,
                         .per_worker = per};
        attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, local_backward_task), &job);
        st = attnc_score_run_backward(&c, g, dquery, dkeys, dparams);
        if (st == ATTNC_OK && predictive) {
            if (attnc_present(dquery))
                attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, local_query_task), &job);
            ATTNC_TYPED(d.dtype, local_params)(&job, dw_p, dv_p);
        }
    }
    attnc_score_close(&c);
    free(scratch);
    free(g);
    free(stash);
    return st;
}
