/* attribution.c: which input tokens an output position draws on, from a
 * stack of attention weights (N layers, first first; each (B, H, L, L)):
 *
 *   rollout (Abnar & Zuidema 2020):  A_l = rows_normalised((1 - r) fuse_h(W_l) + r I),
 *                                    rollout = A_N ... A_1;
 *   flow (the same paper):           max-flow from node i of layer N to node j
 *                                    of layer 0 through edges of capacity A_l[p, q];
 *   relevance (Chefer et al. 2021):  R = I; R <- R + mean_h((G_l W_l)^+) R, l = 1..N.
 *
 * Every batch element (and for flow every (batch, output position)) is one
 * block of the thread pool writing only its own rows, and each reduction
 * runs in a fixed order inside its block, so results do not depend on the
 * thread count. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

typedef struct {
    const void *weights, *grads; /* (N, B, H, L, L) */
    void *mixed;                 /* (N, B, L, L): the A_l of rollout and flow */
    void *out;                   /* (B, L, L) */
    void *scratch;               /* per worker: `per_worker` bytes */
    size_t per_worker;
    int64_t N, B, H, L;
    int fusion;
    double residual;
} attr_job;

#define ATTNC_F64 0
#include "attribution_impl.h"
#define ATTNC_F64 1
#include "attribution_impl.h"

static const char *layer_name(int64_t n) { return n == 1 ? "layer" : "layers"; }

/* weights (and grads when given) (N, B, H, L, L), C-contiguous, one float
 * dtype, square, H >= 1 unless empty; every value finite, and non-negative
 * when nonneg. */
static attnc_status check_stack(const attnc_tensor *weights, const attnc_tensor *grads, bool nonneg, attr_job *job) {
    if (!attnc_present(weights)) return attnc_fail(ATTNC_ERR_TYPE, "weights is required");
    attnc_dtype dt = weights->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "weights has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    int64_t s[5] = {-1, -1, -1, -1, -1};
    TRY(attnc_check_array(weights, "weights", dt, 5, s, false));
    if (s[3] != s[4])
        return attnc_fail(ATTNC_ERR_VALUE, "weights must be square (L, L) per head, got (%lld, %lld)", (long long)s[3],
                          (long long)s[4]);
    job->N = s[0], job->B = s[1], job->H = s[2], job->L = s[3];
    if (job->H == 0 && job->N * job->B * job->L > 0)
        return attnc_fail(ATTNC_ERR_VALUE, "weights has 0 heads: there is nothing to fuse");
    if (grads) TRY(attnc_check_array(grads, "grads", dt, 5, s, false));
    int64_t n = attnc_numel(weights), per_layer = job->N ? n / job->N : 0;
    int64_t bad = ATTNC_TYPED(dt, first_bad)(weights->data, n, nonneg);
    if (bad >= 0) {
        double v = attnc_real_get(weights->data, dt, bad);
        return attnc_fail(ATTNC_ERR_VALUE, "weights has %s value %g in layer %lld (of %lld %s)",
                          isfinite(v) ? "a negative" : "a non-finite", v, (long long)(bad / per_layer),
                          (long long)job->N, layer_name(job->N));
    }
    if (grads && (bad = ATTNC_TYPED(dt, first_bad)(grads->data, n, false)) >= 0)
        return attnc_fail(ATTNC_ERR_VALUE, "grads has a non-finite value %g in layer %lld (of %lld %s)",
                          attnc_real_get(grads->data, dt, bad), (long long)(bad / per_layer), (long long)job->N,
                          layer_name(job->N));
    job->weights = weights->data;
    job->grads = grads ? grads->data : NULL;
    return ATTNC_OK;
}

static attnc_status check_fusion(attnc_head_fusion fusion, double residual, attr_job *job) {
    if (fusion != ATTNC_HEADS_MEAN && fusion != ATTNC_HEADS_MAX && fusion != ATTNC_HEADS_MIN)
        return attnc_fail(ATTNC_ERR_VALUE, "head_fusion must be mean, max or min, got %d", (int)fusion);
    if (!(residual >= 0 && residual <= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "residual must be in [0, 1], got %g", residual);
    job->fusion = (int)fusion;
    job->residual = residual;
    return ATTNC_OK;
}

/* Checks, the output, the mixed matrices of every layer (rollout, flow),
 * and per-worker scratch of `per_worker` bytes; job->mixed and
 * job->scratch are freed by finish(). */
static attnc_status start(attr_job *job, attnc_tensor *out, bool mix, size_t per_worker, int workers) {
    attnc_dtype dt = out->dtype;
    int64_t LL = job->L * job->L;
    size_t es = attnc_dtype_size(dt);
    job->per_worker = per_worker;
    TRY(attnc_calloc(&job->scratch, (size_t)workers, per_worker, "attribution scratch"));
    if (mix) {
        attnc_status st = attnc_calloc(&job->mixed, (size_t)(job->N * job->B * LL), es, "attribution layers");
        if (st != ATTNC_OK) {
            free(job->scratch);
            return st;
        }
        if (job->N * job->B * LL > 0)
            attnc_parallel_for(job->N * job->B, attnc_workers_for(job->N * job->B * job->H * LL),
                               ATTNC_TYPED(dt, mix_task), job);
    }
    job->out = out->data;
    return ATTNC_OK;
}

static void finish(attr_job *job) {
    free(job->mixed);
    free(job->scratch);
}

/* The checks of every call: the stack (and grads, for relevance; the
 * weights non-negative otherwise), the fusion and residual when mixed, and
 * the output (B, L, L) of the weights' dtype. */
static attnc_status prepare(attr_job *job, attnc_tensor *out, const char *name, const attnc_tensor *weights,
                            const attnc_tensor *grads, attnc_head_fusion fusion, double residual) {
    TRY(check_stack(weights, grads, !grads, job));
    if (!grads) TRY(check_fusion(fusion, residual, job));
    return ATTNC_NEED(out, name, weights->dtype, true, job->B, job->L, job->L);
}

/* task over nblocks blocks, each worker with per_worker bytes of scratch,
 * on as many workers as about `work` multiply-adds deserve. */
static attnc_status run(attr_job *job, attnc_tensor *out, int64_t work, size_t per_worker, int64_t nblocks,
                        attnc_task_fn task) {
    int workers = attnc_workers_for(work);
    TRY(start(job, out, !job->grads, per_worker, workers));
    if (nblocks * job->L > 0) attnc_parallel_for(nblocks, workers, task, job);
    finish(job);
    return ATTNC_OK;
}

attnc_status attnc_attention_rollout(attnc_tensor *rollout, const attnc_tensor *weights, attnc_head_fusion fusion,
                                     double residual) {
    attr_job job = {0};
    TRY(prepare(&job, rollout, "rollout", weights, NULL, fusion, residual));
    int64_t LL = job.L * job.L;
    return run(&job, rollout, job.B * job.N * LL * job.L, (size_t)LL * attnc_dtype_size(weights->dtype), job.B,
               ATTNC_TYPED(weights->dtype, rollout_task));
}

/* Flow's per-worker scratch: residual and flow per edge (2 N L L reals),
 * then level, current arc, BFS queue and DFS path per node (4 (N + 1) L + 1
 * int64s). */
static size_t flow_scratch(const attr_job *j, size_t es) {
    return (size_t)(2 * j->N * j->L * j->L) * es + (size_t)(4 * (j->N + 1) * j->L + 1) * sizeof(int64_t);
}

attnc_status attnc_attention_flow(attnc_tensor *flow, const attnc_tensor *weights, attnc_head_fusion fusion,
                                  double residual) {
    attr_job job = {0};
    TRY(prepare(&job, flow, "flow", weights, NULL, fusion, residual));
    /* L^2 max-flow problems per batch element, each over N L^2 edges: the
     * guard keeps a call to minutes, not days. */
    double L = (double)job.L, work = (double)job.B * (double)job.N * L * L * L * L;
    if (work > ATTNC_FLOW_MAX_WORK)
        return attnc_fail(ATTNC_ERR_VALUE,
                          "attention flow over B=%lld, %lld layers, L=%lld solves B L^2 max-flow problems of N L^2 "
                          "edges (B N L^4 = %.3g > %.3g): too slow; use rollout, or fewer tokens",
                          (long long)job.B, (long long)job.N, (long long)job.L, work, ATTNC_FLOW_MAX_WORK);
    return run(&job, flow, (int64_t)work, flow_scratch(&job, attnc_dtype_size(weights->dtype)), job.B * job.L,
               ATTNC_TYPED(weights->dtype, flow_task));
}

attnc_status attnc_attention_relevance(attnc_tensor *relevance, const attnc_tensor *weights,
                                       const attnc_tensor *grads) {
    attr_job job = {0};
    if (!attnc_present(grads)) return attnc_fail(ATTNC_ERR_TYPE, "grads is required");
    TRY(prepare(&job, relevance, "relevance", weights, grads, ATTNC_HEADS_MEAN, 0));
    int64_t LL = job.L * job.L;
    return run(&job, relevance, job.B * job.N * (job.H + job.L) * LL, 2 * (size_t)LL * attnc_dtype_size(weights->dtype),
               job.B, ATTNC_TYPED(weights->dtype, relevance_task));
}
