/* attend_impl.h: typed kernels of attention.c (see core/real.h). */
#include "../../core/real.h"

static attnc_mat FN(cmat)(REAL *p, int64_t rows, int64_t cols) {
    attnc_mat m = {p, rows, cols, cols, 1};
    return m;
}

void FN(attnc_weights_cotangent)(REAL *g, const attnc_dims *d, int64_t b, const attnc_tensor *dcontext,
                                 const attnc_tensor *dweights, const attnc_tensor *values) {
    attnc_mat gm = FN(cmat)(g, d->tq, d->tk);
    if (attnc_present(dcontext))
        GEMM(false, true, 1, attnc_batch_mat(dcontext, &d->batch, b), attnc_batch_mat(values, &d->batch, b), 0, gm);
    else
        for (int64_t x = 0; x < d->tq * d->tk; x++) g[x] = 0;
    if (attnc_present(dweights)) {
        attnc_mat dw = attnc_batch_mat(dweights, &d->batch, b);
        for (int64_t i = 0; i < d->tq; i++)
            for (int64_t j = 0; j < d->tk; j++) g[i * d->tk + j] += ((const REAL *)dw.p)[i * dw.rs + j * dw.cs];
    }
}

void FN(attnc_values_backward)(attnc_tensor *dvalues, const attnc_dims *d, int64_t b, const REAL *w,
                               const attnc_tensor *dcontext) {
    if (!attnc_present(dvalues)) return;
    attnc_mat dv = attnc_batch_mat(dvalues, &d->batch, b);
    if (attnc_present(dcontext))
        GEMM(true, false, 1, FN(cmat)((REAL *)w, d->tq, d->tk), attnc_batch_mat(dcontext, &d->batch, b), 0, dv);
    else
        for (int64_t x = 0; x < d->tk * d->dv; x++) ((REAL *)dv.p)[x] = 0;
}

void FN(attnc_context)(attnc_tensor *context, const attnc_dims *d, int64_t b, const REAL *w,
                       const attnc_tensor *values) {
    GEMM(false, false, 1, FN(cmat)((REAL *)w, d->tq, d->tk), attnc_batch_mat(values, &d->batch, b), 0,
         attnc_batch_mat(context, &d->batch, b));
}

static void FN(attention_forward_task)(void *arg, int64_t b, int worker) {
    attention_job *j = arg;
    const attnc_dims *d = j->c.d;
    REAL *w = (REAL *)j->weights->data + b * d->tq * d->tk;
    FN(attnc_score_batch)(&j->c, b, w, (REAL *)j->scratch + worker * j->per_worker);
    attnc_bmask bm;
    attnc_bmask_at(&bm, j->mask, d, b);
    for (int64_t i = 0; i < d->tq; i++) {
        int64_t lo, hi;
        attnc_row_range(&bm, i, &lo, &hi);
        FN(attnc_softmax_row)(w + i * d->tk, w + i * d->tk, 1, d->tk, lo, hi, &bm, i);
    }
    FN(attnc_context)(j->context, d, b, w, j->values);
}

/* G_b <- the scores' cotangent dS; dvalues_b. Weights gathered per worker. */
static void FN(attention_backward_task)(void *arg, int64_t b, int worker) {
    attention_job *j = arg;
    const attnc_dims *d = j->c.d;
    REAL *g = (REAL *)j->g + b * d->tq * d->tk, *w = (REAL *)j->scratch + worker * j->per_worker;
    attnc_mat wm = attnc_batch_mat(j->fwd_weights, &d->batch, b);
    for (int64_t i = 0; i < d->tq; i++)
        for (int64_t k = 0; k < d->tk; k++) w[i * d->tk + k] = ((const REAL *)wm.p)[i * wm.rs + k * wm.cs];
    FN(attnc_weights_cotangent)(g, d, b, j->dcontext, j->dweights, j->values);
    FN(attnc_values_backward)(j->dvalues, d, b, w, j->dcontext);
    for (int64_t i = 0; i < d->tq; i++)
        FN(attnc_softmax_row_backward)(g + i * d->tk, g + i * d->tk, 1, w + i * d->tk, d->tk);
}

#include "../../core/real_end.h"
