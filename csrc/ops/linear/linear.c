/* linear.c: linear attention (Katharopoulos et al. 2020, phi = elu + 1) and
 * Performer's FAVOR+ (Choromanski et al. 2021, positive random features),
 * forward and backward:
 *
 *   out_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps),
 *   S_i = sum_j phi(k_j) v_j^T (F x Ev),  z_i = sum_j phi(k_j) (F),
 *
 * j over every key, or j <= i when causal: then S and z are running sums
 * (O(F Ev) state per (batch, head), the paper's Algorithm 1), and the
 * backward runs the forward sums again and then reverse running sums of
 * phi(q_i) u_i^T, never an L x S matrix.
 *
 * FAVOR+'s exponents w_m . x' - |x'|^2 / 2 are stabilised before exp: a
 * query row by its own largest exponent c_i, the keys by C, the largest
 * exponent over the keys summed so far (the running maximum when causal,
 * so that decoding one key at a time gives the same bits as one causal call;
 * the maximum over all keys otherwise); the sums are rescaled when C grows.
 * Numerator and denominator carry the same factor exp(-c_i - C), so it
 * cancels; eps enters as eps exp(-c_i - C), its value in the unstabilised
 * scale, so the result does not depend on the stabilisers at all.
 *
 * One block of the thread pool per (batch, head), each running its sums in
 * a fixed order: results do not depend on the thread count. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

typedef struct {
    const attnc_tensor *q, *k, *v, *dout;
    attnc_tensor *out, *dq, *dk, *dv, *dw;
    void *dw_parts; /* with dw: one (M, E) gradient per (batch, head) block, summed in block order */
    const attnc_linear_state *state;
    const void *w;     /* favor+: the projection (M, E), contiguous */
    const bool *mask;  /* (B, S) or NULL */
    int64_t mask_s[2]; /* its strides */
    int64_t H, L, S, E, Ev, F;
    bool favor, causal, backward; /* backward: the scratch holds the backward's parts too */
    double eps, scale, norm;      /* favor+: x' = scale x; features times norm = M^-1/2 */
    void *scratch;
    size_t per_worker; /* elements of scratch per worker */
} lin_job;

/* Whether key s of batch element b is padding (left out of every sum). */
static inline bool lin_padded(const lin_job *j, int64_t b, int64_t s) {
    return j->mask && j->mask[b * j->mask_s[0] + s * j->mask_s[1]];
}

#define ATTNC_F64 0
#include "linear_impl.h"
#define ATTNC_F64 1
#include "linear_impl.h"

/* The shapes of query, key and value, the options and, when present, the
 * key padding mask and the projection. */
static attnc_status check_inputs(lin_job *job, attnc_dtype *dt, const attnc_tensor *query, const attnc_tensor *key,
                                 const attnc_tensor *value, const attnc_linear_options *o) {
    if (!attnc_present(query)) return attnc_fail(ATTNC_ERR_TYPE, "query is required");
    *dt = query->dtype;
    if (*dt != ATTNC_FLOAT32 && *dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "query has dtype %s, expected float32 or float64", attnc_dtype_name(*dt));
    int64_t qs[4] = {-1, -1, -1, -1};
    TRY(attnc_check_dims(query, "query", *dt, 4, qs, false));
    int64_t ks[4] = {qs[0], qs[1], -1, qs[3]};
    if (!attnc_present(key) || !attnc_present(value)) return attnc_fail(ATTNC_ERR_TYPE, "key and value are required");
    TRY(attnc_check_dims(key, "key", *dt, 4, ks, false));
    int64_t vs[4] = {qs[0], qs[1], ks[2], -1};
    TRY(attnc_check_dims(value, "value", *dt, 4, vs, false));
    if (o->feature_map != ATTNC_FEATURES_ELU && o->feature_map != ATTNC_FEATURES_FAVOR)
        return attnc_fail(ATTNC_ERR_VALUE, "feature_map must be elu or favor+, got %d", (int)o->feature_map);
    if (!(o->eps >= 0 && isfinite(o->eps)))
        return attnc_fail(ATTNC_ERR_VALUE, "eps must be finite and >= 0, got %g", o->eps);
    if (o->causal && qs[2] != ks[2])
        return attnc_fail(ATTNC_ERR_VALUE, "causal linear attention needs as many queries as keys, got L=%lld, S=%lld",
                          (long long)qs[2], (long long)ks[2]);
    *job = (lin_job){.q = query, .k = key, .v = value, .H = qs[1], .L = qs[2], .S = ks[2], .E = qs[3], .Ev = vs[3]};
    job->favor = o->feature_map == ATTNC_FEATURES_FAVOR;
    job->causal = o->causal != 0;
    job->eps = o->eps;
    job->F = job->E, job->scale = 1, job->norm = 1;
    if (job->favor) {
        if (!attnc_present(&o->projection))
            return attnc_fail(ATTNC_ERR_TYPE, "feature_map favor+ needs a projection (M, E)");
        int64_t ps[2] = {-1, job->E};
        TRY(attnc_check_array(&o->projection, "projection", *dt, 2, ps, false));
        job->w = o->projection.data;
        job->F = ps[0];
        job->scale = job->E ? pow((double)job->E, -0.25) : 1.0;
        job->norm = job->F ? 1 / sqrt((double)job->F) : 1.0;
    } else if (attnc_present(&o->projection)) {
        return attnc_fail(ATTNC_ERR_VALUE, "projection is only used by feature_map favor+");
    }
    if (attnc_present(&o->key_padding_mask)) {
        int64_t ms[2] = {qs[0], ks[2]};
        TRY(attnc_check_dims(&o->key_padding_mask, "key_padding_mask", ATTNC_BOOL, 2, ms, false));
        job->mask = o->key_padding_mask.data;
        job->mask_s[0] = o->key_padding_mask.strides[0], job->mask_s[1] = o->key_padding_mask.strides[1];
    }
    return ATTNC_OK;
}

/* A 4-D output or gradient (B, H, n, d) of dtype dt, C-contiguous; absent is
 * fine unless required. */
static attnc_status check_grad(const attnc_tensor *t, const char *name, attnc_dtype dt, const attnc_tensor *like,
                               int64_t d, bool required) {
    if (!attnc_present(t)) return required ? attnc_fail(ATTNC_ERR_TYPE, "%s is required", name) : ATTNC_OK;
    return ATTNC_NEED(t, name, dt, true, like->shape[0], like->shape[1], like->shape[2], d);
}

static attnc_status check_state(const attnc_linear_state *st, attnc_dtype dt, const lin_job *j) {
    if (!j->causal) return attnc_fail(ATTNC_ERR_VALUE, "a state carries causal sums: it needs causal=True");
    int64_t B = j->q->shape[0];
    TRY(ATTNC_NEED(&st->kv, "state_kv", dt, true, B, j->H, j->F, j->Ev));
    TRY(ATTNC_NEED(&st->k, "state_k", dt, true, B, j->H, j->F));
    return ATTNC_NEED(&st->max, "state_max", dt, true, B, j->H);
}

/* Scratch per worker, in elements: the key features G (S, F) and their
 * stabilisers (S); the sums (F, Ev) and (F); rows of E, Ev and F. The
 * backward adds the query features (L, F), u_i (L, Ev) and r_i (L), and the
 * reverse sums (F, Ev) and (F). */
static size_t scratch_size(const lin_job *j, bool backward) {
    size_t F = (size_t)j->F, Ev = (size_t)j->Ev, L = (size_t)j->L, S = (size_t)j->S;
    size_t n = S * (F + 1) + F * (Ev + 1) + (size_t)j->E + 2 * Ev + 2 * F;
    return n + (backward ? L * (F + Ev + 1) + F * (Ev + 1) : 0) + 1; /* + 1: never an empty (NULL) buffer */
}

/* task over the B H (batch, head) blocks with per-worker scratch. */
static attnc_status run(lin_job *job, attnc_dtype dt, bool backward, attnc_task_fn task) {
    int64_t blocks = job->q->shape[0] * job->H;
    if (blocks == 0) return ATTNC_OK;
    int64_t work = blocks * (job->L + job->S) * (job->F + 1) * (job->E + job->Ev + 1);
    int workers = attnc_workers_for(work);
    job->backward = backward;
    job->per_worker = scratch_size(job, backward);
    TRY(attnc_calloc(&job->scratch, (size_t)workers * job->per_worker, attnc_dtype_size(dt),
                     "linear attention scratch"));
    attnc_status st = ATTNC_OK;
    if (job->dw)
        st = attnc_calloc(&job->dw_parts, (size_t)(blocks * job->F * job->E) + 1, attnc_dtype_size(dt),
                          "projection gradients");
    if (st == ATTNC_OK) {
        attnc_parallel_for(blocks, workers, task, job);
        if (job->dw) ATTNC_TYPED(dt, lin_sum_parts)(job, blocks);
    }
    free(job->dw_parts);
    free(job->scratch);
    return st;
}

attnc_status attnc_linear_attention_forward(attnc_tensor *out, attnc_linear_state *state, const attnc_tensor *query,
                                            const attnc_tensor *key, const attnc_tensor *value,
                                            const attnc_linear_options *options) {
    lin_job job;
    attnc_dtype dt;
    TRY(check_inputs(&job, &dt, query, key, value, options));
    TRY(check_grad(out, "out", dt, query, job.Ev, true));
    if (state && (attnc_present(&state->kv) || attnc_present(&state->k) || attnc_present(&state->max))) {
        TRY(check_state(state, dt, &job));
        job.state = state;
    }
    job.out = out;
    return run(&job, dt, false, ATTNC_TYPED(dt, lin_forward_task));
}

attnc_status attnc_linear_attention_backward(attnc_tensor *dquery, attnc_tensor *dkey, attnc_tensor *dvalue,
                                             attnc_tensor *dprojection, const attnc_tensor *dout,
                                             const attnc_tensor *query, const attnc_tensor *key,
                                             const attnc_tensor *value, const attnc_linear_options *options) {
    lin_job job;
    attnc_dtype dt;
    TRY(check_inputs(&job, &dt, query, key, value, options));
    if (!attnc_present(dout)) return attnc_fail(ATTNC_ERR_TYPE, "dout is required");
    int64_t ds[4] = {query->shape[0], job.H, job.L, job.Ev};
    TRY(attnc_check_dims(dout, "dout", dt, 4, ds, false));
    TRY(check_grad(dquery, "dquery", dt, query, job.E, false));
    TRY(check_grad(dkey, "dkey", dt, key, job.E, false));
    TRY(check_grad(dvalue, "dvalue", dt, value, job.Ev, false));
    if (attnc_present(dprojection)) {
        if (!job.favor) return attnc_fail(ATTNC_ERR_VALUE, "dprojection: only feature_map favor+ has a projection");
        TRY(ATTNC_NEED(dprojection, "dprojection", dt, true, job.F, job.E));
        job.dw = dprojection;
        if (query->shape[0] * job.H == 0) attnc_zero(dprojection->data, (size_t)(job.F * job.E) * attnc_dtype_size(dt));
    }
    job.dout = dout;
    job.dq = attnc_present(dquery) ? dquery : NULL;
    job.dk = attnc_present(dkey) ? dkey : NULL;
    job.dv = attnc_present(dvalue) ? dvalue : NULL;
    return run(&job, dt, true, ATTNC_TYPED(dt, lin_backward_task));
}
