/* score.c: the score family, forward and backward (public entry points and
 * scratch sizing; the kernels are in score_impl.h). */
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/threads.h"

/* A contiguous (rows, cols) matrix at p. */
static attnc_mat rows_mat(void *p, int64_t rows, int64_t cols) {
    attnc_mat m = {p, rows, cols, cols, 1};
    return m;
}

/* A parameter (a matrix, or a vector as a column) as a matrix view. */
static attnc_mat param_mat(const attnc_tensor *t) {
    attnc_mat m = {t->data, t->shape[0], t->ndim > 1 ? t->shape[1] : 1, t->strides[0], t->ndim > 1 ? t->strides[1] : 1};
    return m;
}

#define ATTNC_F64 0
#include "score_impl.h"
#define ATTNC_F64 1
#include "score_impl.h"

size_t attnc_score_scratch(const attnc_dims *d, attnc_score_kind kind) {
    size_t tq = (size_t)d->tq, tk = (size_t)d->tk;
    switch (kind) {
    case ATTNC_SCORE_SCALED_DOT: return tq * tk;
    case ATTNC_SCORE_GENERAL: return tq * (size_t)d->dk;
    case ATTNC_SCORE_ADDITIVE: return (tq + tk) * (size_t)d->da; /* float's e^{2 QA}, e^{2 KA} */
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

/* Rows per block of the additive score's batched GEMMs: fixed, so that
 * results do not depend on the thread count. */
#define ADDITIVE_ROWS 64

/* Whether t's batch elements (rows x cols each) stack into one matrix with a
 * unit column stride (the contiguous case): *all <- that matrix. */
static bool stacked(attnc_mat *all, const attnc_tensor *t, const attnc_batch *batch, int64_t rows) {
    *all = attnc_batch_mat(t, batch, 0);
    if (all->cs != 1 || all->rs < all->cols) return false;
    for (int64_t b = 1; b < batch->count; b++)
        if (attnc_batch_offset(t, batch, b) != b * rows * all->rs) return false;
    all->rows = rows * batch->count;
    return true;
}

/* out (B rows, da) <- t W: one GEMM over the stacked batch, else one per
 * element (broadcast or strided batches). */
static void project(void *out, const attnc_dims *d, const attnc_tensor *t, int64_t rows, const attnc_tensor *w) {
    size_t es = attnc_dtype_size(d->dtype);
    attnc_mat all;
    if (stacked(&all, t, &d->batch, rows)) {
        attnc_gemm_rows(d->dtype, false, false, 1, all, param_mat(w), 0, rows_mat(out, all.rows, d->da), ADDITIVE_ROWS);
        return;
    }
    for (int64_t b = 0; b < d->batch.count; b++)
        attnc_gemm_rows(d->dtype, false, false, 1, attnc_batch_mat(t, &d->batch, b), param_mat(w), 0,
                        rows_mat((char *)out + (size_t)(b * rows * d->da) * es, rows, d->da), ADDITIVE_ROWS);
}

/* c->pre <- params' projections buffer (checked), else a new one. */
static attnc_status projections_buffer(attnc_score_ctx *c, int64_t count) {
    const attnc_tensor *t = &c->p->projections;
    size_t es = attnc_dtype_size(c->d->dtype);
    if (!attnc_present(t)) {
        c->own_pre = true;
        return attnc_calloc(&c->pre, (size_t)count, es, "additive score projections");
    }
    TRY(attnc_check_dtype(t, "projections", c->d->dtype));
    if (t->ndim != 1 || t->shape[0] < count || (t->shape[0] > 1 && t->strides[0] != 1))
        return attnc_fail(ATTNC_ERR_VALUE, "projections must be a contiguous vector of at least %lld elements",
                          (long long)count);
    c->pre = t->data;
    return ATTNC_OK;
}

attnc_status attnc_score_open(attnc_score_ctx *c, const attnc_dims *d, const attnc_tensor *query,
                              const attnc_tensor *keys, const attnc_score_params *p) {
    *c = (attnc_score_ctx){d, query, keys, p, NULL, false};
    if (p->kind != ATTNC_SCORE_ADDITIVE) return ATTNC_OK;
    int64_t B = d->batch.count, da = d->da, nq = B * d->tq * da, nk = B * d->tk * da;
    size_t es = attnc_dtype_size(d->dtype);
    TRY(projections_buffer(c, nq + nk + da));
    char *pre = c->pre;
    if (!c->own_pre && p->projections_ready) return ATTNC_OK; /* the forward wrote all three */
    project(pre, d, query, d->tq, &p->w_query);
    project(pre + (size_t)nq * es, d, keys, d->tk, &p->w_key);
    const char *v = p->v.data;
    for (int64_t a = 0; a < da; a++)
        memcpy(pre + (size_t)(nq + nk + a) * es, v + (size_t)(a * p->v.strides[0]) * es, es);
    return ATTNC_OK;
}

void attnc_score_close(attnc_score_ctx *c) {
    if (c->own_pre) free(c->pre);
    c->pre = NULL;
    c->own_pre = false;
}

/* The additive score's backward over the whole batch, from the stash the
 * elements left (dQA (B Tq, da), dKA (B Tk, da), dv (B, da)):
 * dquery = dQA W_q^T, dkeys = dKA W_k^T, dW_q = Q^T dQA, dW_k = K^T dKA,
 * dv = the sum of the elements' dv in batch order. */
static void additive_finish(const attnc_score_ctx *c, char *stash, attnc_tensor *dquery, attnc_tensor *dkeys,
                            attnc_score_grads *g) {
    const attnc_dims *d = c->d;
    const attnc_score_params *p = c->p;
    int64_t B = d->batch.count, da = d->da;
    size_t es = attnc_dtype_size(d->dtype);
    struct {
        const attnc_tensor *x, *w;
        attnc_tensor *dx, *dw;
        int64_t rows;
        char *dxa;
    } side[2] = {{c->query, &p->w_query, dquery, g ? &g->w_query : NULL, d->tq, stash},
                 {c->keys, &p->w_key, dkeys, g ? &g->w_key : NULL, d->tk, stash + (size_t)(B * d->tq * da) * es}};
    for (int s = 0; s < 2; s++) {
        int64_t rows = side[s].rows, dim = side[s].w->shape[0];
        attnc_mat dxa = rows_mat(side[s].dxa, B * rows, da), all;
        if (attnc_present(side[s].dx)) /* gradients are contiguous */
            attnc_gemm_rows(d->dtype, false, true, 1, dxa, param_mat(side[s].w), 0,
                            rows_mat(side[s].dx->data, B * rows, dim), ADDITIVE_ROWS);
        if (!attnc_present(side[s].dw)) continue;
        if (stacked(&all, side[s].x, &d->batch, rows)) /* B = 0: a product over no rows, zeros */
            attnc_gemm_rows(d->dtype, true, false, 1, all, dxa, 0, rows_mat(side[s].dw->data, dim, da), ADDITIVE_ROWS);
        else /* per element, in batch order */
            ATTNC_TYPED(d->dtype, sum_xty)(side[s].dw, c, side[s].x, side[s].dxa, rows, da);
    }
    if (g && attnc_present(&g->v))
        attnc_col_sums(d->dtype, g->v.data, stash + (size_t)(B * (d->tq + d->tk) * da) * es, B, da, da);
}

attnc_status attnc_score_check_grads(const attnc_dims *d, const attnc_score_params *p, attnc_score_grads *g) {
    static const attnc_batch none = {.nb = 0, .count = 1};
    if (!g) return ATTNC_OK;
    struct {
        attnc_tensor *t;
        const attnc_tensor *like;
        const char *name;
    } all[] = {{&g->weight, &p->weight, "dweight"},
               {&g->w_query, &p->w_query, "dw_query"},
               {&g->w_key, &p->w_key, "dw_key"},
               {&g->v, &p->v, "dv"}};
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
    const void *ds; /* contiguous (B, Tq, Tk) */
    void *scratch, *stash;
    size_t per_worker;
    attnc_score_grads *g;
} score_job;

#define SCORE_TASKS(REAL, SFX)                                                                                       \
    static void forward_task_##SFX(void *arg, int64_t b, int worker) {                                               \
        score_job *j = arg;                                                                                          \
        const attnc_dims *d = j->c.d;                                                                                \
        attnc_score_batch_##SFX(&j->c, b, (REAL *)j->out->data + b * d->tq * d->tk,                                  \
                                (REAL *)j->scratch + worker * j->per_worker);                                        \
    }                                                                                                                \
    static void backward_task_##SFX(void *arg, int64_t b, int worker) {                                              \
        score_job *j = arg;                                                                                          \
        const attnc_dims *d = j->c.d;                                                                                \
        attnc_score_batch_backward_##SFX(&j->c, b, (const REAL *)j->ds + b * d->tq * d->tk,                          \
                                         (REAL *)j->scratch + worker * j->per_worker, j->stash, j->dquery, j->dkeys, \
                                         j->g);                                                                      \
    }
SCORE_TASKS(float, f32)
SCORE_TASKS(double, f64)

attnc_status attnc_score_forward(attnc_tensor *scores, const attnc_tensor *query, const attnc_tensor *keys,
                                 const attnc_score_params *params) {
    attnc_dims d;
    TRY(attnc_check_inputs(&d, query, keys, NULL, params, NULL));
    if (!attnc_present(scores)) return attnc_fail(ATTNC_ERR_TYPE, "scores is required");
    TRY(attnc_check_like(&d, scores, "scores", 2, d.tq, d.tk, true));
    int workers = attnc_workers();
    size_t size = attnc_dtype_size(d.dtype);
    score_job job = {.out = scores, .per_worker = attnc_score_scratch(&d, params->kind)};
    TRY(attnc_calloc(&job.scratch, job.per_worker * (size_t)workers, size, "score scratch"));
    attnc_status st = attnc_score_open(&job.c, &d, query, keys, params);
    if (st == ATTNC_OK) attnc_parallel_for(d.batch.count, workers, ATTNC_TYPED(d.dtype, forward_task), &job);
    attnc_score_close(&job.c);
    free(job.scratch);
    return st;
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

attnc_status attnc_score_run_backward(const attnc_score_ctx *c, const void *ds_all, attnc_tensor *dquery,
                                      attnc_tensor *dkeys, attnc_score_grads *g) {
    const attnc_dims *d = c->d;
    int workers = attnc_workers();
    size_t size = attnc_dtype_size(d->dtype);
    score_job job = {.c = *c,
                     .dquery = dquery,
                     .dkeys = dkeys,
                     .ds = ds_all,
                     .g = g,
                     .per_worker = attnc_score_scratch(d, c->p->kind)};
    TRY(attnc_calloc(&job.scratch, job.per_worker * (size_t)workers, size, "score scratch"));
    attnc_status st = attnc_calloc(&job.stash, attnc_score_stash(d, c->p->kind), size, "score gradient stash");
    if (st == ATTNC_OK) {
        attnc_parallel_for(d->batch.count, workers, ATTNC_TYPED(d->dtype, backward_task), &job);
        if (c->p->kind == ATTNC_SCORE_ADDITIVE)
            additive_finish(c, job.stash, dquery, dkeys, g);
        else
            ATTNC_TYPED(d->dtype, attnc_score_params_backward)(c, ds_all, job.stash, g);
    }
    free(job.scratch);
    free(job.stash);
    return st;
}

attnc_status attnc_score_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_score_grads *dparams,
                                  const attnc_tensor *dscores, const attnc_tensor *query, const attnc_tensor *keys,
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
    attnc_score_ctx c;
    attnc_status st = attnc_score_open(&c, &d, query, keys, params);
    if (st == ATTNC_OK) st = attnc_score_run_backward(&c, ds, dquery, dkeys, dparams);
    attnc_score_close(&c);
    free(ds);
    return st;
}
