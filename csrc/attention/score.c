/* score.c: the score family, forward and backward (public entry points and
 * scratch sizing; the kernels are in score_impl.h). */
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/blas.h"
#include "../core/status.h"
#include "../core/threads.h"

#define ATTNC_F64 0
#include "score_impl.h"
#define ATTNC_F64 1
#include "score_impl.h"

size_t attnc_score_scratch(const attnc_dims *d, attnc_score_kind kind) {
    size_t tq = (size_t)d->tq, tk = (size_t)d->tk;
    switch (kind) {
    case ATTNC_SCORE_SCALED_DOT: return tq * tk;
    case ATTNC_SCORE_GENERAL: return tq * (size_t)d->dk;
    case ATTNC_SCORE_ADDITIVE: return (tq + tk) * (size_t)d->da;
    case ATTNC_SCORE_COSINE: return tq * tk + 2 * (tq + tk);
    default: return 0;
    }
}

size_t attnc_score_stash(const attnc_dims *d, attnc_score_kind kind) {
    size_t bc = (size_t)d->batch.count;
    switch (kind) {
    case ATTNC_SCORE_SCALED_DOT:
    case ATTNC_SCORE_GAUSSIAN: return bc;
    case ATTNC_SCORE_GENERAL: return bc * (size_t)d->tq * (size_t)d->dk;
    case ATTNC_SCORE_ADDITIVE: return bc * (size_t)(d->tq + d->tk + 1) * (size_t)d->da;
    default: return 0;
    }
}

attnc_status attnc_score_check_grads(const attnc_dims *d, const attnc_score_params *p,
                                     attnc_score_grads *g) {
    static const attnc_batch none = {.nb = 0, .count = 1};
    if (!g) return ATTNC_OK;
    struct { attnc_tensor *t; const attnc_tensor *like; const char *name; } all[] = {
        {&g->weight, &p->weight, "dweight"}, {&g->w_query, &p->w_query, "dw_query"},
        {&g->w_key, &p->w_key, "dw_key"}, {&g->v, &p->v, "dv"}};
    for (size_t n = 0; n < sizeof all / sizeof all[0]; n++) {
        if (!attnc_present(all[n].t)) continue;
        if (!attnc_present(all[n].like))
            return attnc_fail(ATTNC_ERR_VALUE, "%s given for an absent parameter", all[n].name);
        TRY(attnc_check_dtype(all[n].t, all[n].name, d->dtype));
        int64_t trail[2] = {all[n].like->shape[0], all[n].like->ndim > 1 ? all[n].like->shape[1] : 0};
        TRY(attnc_check_shape(all[n].t, all[n].name, &none, all[n].like->ndim, trail));
        TRY(attnc_check_out(all[n].t, all[n].name));
    }
    if (attnc_present(&g->beta)) TRY(attnc_check_like(d, &g->beta, "dbeta", 1, d->tq, 0, true));
    return ATTNC_OK;
}

typedef struct {
    attnc_score_ctx c;
    attnc_tensor *out, *dquery, *dkeys;
    const void *ds;  /* contiguous (B, Tq, Tk) */
    void *scratch, *stash;
    size_t per_worker;
    attnc_score_grads *g;
} score_job;

#define SCORE_TASKS(REAL, SFX)                                                           \
    static void forward_task_##SFX(void *arg, int64_t b, int worker) {                   \
        score_job *j = arg;                                                              \
        const attnc_dims *d = j->c.d;                                                    \
        attnc_score_batch_##SFX(&j->c, b, (REAL *)j->out->data + b * d->tq * d->tk,      \
                                (REAL *)j->scratch + worker * j->per_worker);            \
    }                                                                                    \
    static void backward_task_##SFX(void *arg, int64_t b, int worker) {                  \
        score_job *j = arg;                                                              \
        const attnc_dims *d = j->c.d;                                                    \
        attnc_score_batch_backward_##SFX(&j->c, b, (const REAL *)j->ds + b * d->tq * d->tk, \
                                         (REAL *)j->scratch + worker * j->per_worker,    \
                                         j->stash, j->dquery, j->dkeys, j->g);           \
    }
SCORE_TASKS(float, f32)
SCORE_TASKS(double, f64)

attnc_status attnc_score_forward(attnc_tensor *scores, const attnc_tensor *query,
                                 const attnc_tensor *keys, const attnc_score_params *params) {
    attnc_dims d;
    TRY(attnc_check_inputs(&d, query, keys, NULL, params, NULL));
    if (!attnc_present(scores)) return attnc_fail(ATTNC_ERR_TYPE, "scores is required");
    TRY(attnc_check_like(&d, scores, "scores", 2, d.tq, d.tk, true));
    int workers = attnc_workers();
    size_t size = attnc_dtype_size(d.dtype);
    score_job job = {.c = {&d, query, keys, params}, .out = scores,
                     .per_worker = attnc_score_scratch(&d, params->kind)};
    TRY(attnc_calloc(&job.scratch, job.per_worker * (size_t)workers, size, "score scratch"));
    attnc_parallel_for(d.batch.count, workers,
                       d.dtype == ATTNC_FLOAT32 ? forward_task_f32 : forward_task_f64, &job);
    free(job.scratch);
    return ATTNC_OK;
}

/* Copy a (..., Tq, Tk) tensor into a new contiguous buffer. */
static attnc_status gather(void **out, const attnc_tensor *t, const attnc_dims *d) {
    size_t size = attnc_dtype_size(d->dtype), n = (size_t)(d->batch.count * d->tq * d->tk);
    TRY(attnc_calloc(out, n, size, "gradient copy"));
    char *dst = *out;
    for (int64_t b = 0; b < d->batch.count; b++) {
        attnc_mat m = attnc_batch_mat(t, &d->batch, b);
        for (int64_t i = 0; i < d->tq; i++)
            for (int64_t j = 0; j < d->tk; j++, dst += size)
                memcpy(dst, (char *)m.p + (i * m.rs + j * m.cs) * (int64_t)size, size);
    }
    return ATTNC_OK;
}

attnc_status attnc_score_run_backward(const attnc_score_ctx *c, const void *ds_all,
                                      attnc_tensor *dquery, attnc_tensor *dkeys,
                                      attnc_score_grads *g) {
    const attnc_dims *d = c->d;
    int workers = attnc_workers();
    size_t size = attnc_dtype_size(d->dtype);
    score_job job = {.c = *c, .dquery = dquery, .dkeys = dkeys, .ds = ds_all, .g = g,
                     .per_worker = attnc_score_scratch(d, c->p->kind)};
    TRY(attnc_calloc(&job.scratch, job.per_worker * (size_t)workers, size, "score scratch"));
    attnc_status st = attnc_calloc(&job.stash, attnc_score_stash(d, c->p->kind), size,
                                   "score gradient stash");
    if (st == ATTNC_OK) {
        bool f32 = d->dtype == ATTNC_FLOAT32;
        attnc_parallel_for(d->batch.count, workers, f32 ? backward_task_f32 : backward_task_f64,
                           &job);
        if (f32)
            attnc_score_params_backward_f32(c, ds_all, job.stash, g);
        else
            attnc_score_params_backward_f64(c, ds_all, job.stash, g);
    }
    free(job.scratch);
    free(job.stash);
    return st;
}

attnc_status attnc_score_backward(attnc_tensor *dquery, attnc_tensor *dkeys,
                                  attnc_score_grads *dparams, const attnc_tensor *dscores,
                                  const attnc_tensor *query, const attnc_tensor *keys,
                                  const attnc_score_params *params) {
    attnc_dims d;
    TRY(attnc_check_inputs(&d, query, keys, NULL, params, NULL));
    if (!attnc_present(dscores)) return attnc_fail(ATTNC_ERR_TYPE, "dscores is required");
    TRY(attnc_check_like(&d, dscores, "dscores", 2, d.tq, d.tk, false));
    TRY(attnc_check_like(&d, dquery, "dquery", 2, d.tq, d.dq, true));
    TRY(attnc_check_like(&d, dkeys, "dkeys", 2, d.tk, d.dk, true));
    TRY(attnc_score_check_grads(&d, params, dparams));
    void *ds = NULL;
    TRY(gather(&ds, dscores, &d));
    attnc_score_ctx c = {&d, query, keys, params};
    attnc_status st = attnc_score_run_backward(&c, ds, dquery, dkeys, dparams);
    free(ds);
    return st;
}
