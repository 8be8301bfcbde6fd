/* common.c: argument checks for the attention family. */
#include "common.h"

#include <inttypes.h>
#include <string.h>

#include "../../core/status.h"

static const attnc_batch NO_BATCH = {.nb = 0, .count = 1};

/* A parameter matrix (rows, cols) of the call's dtype that BLAS can read;
 * -1 leaves a size free and returns it. */
static attnc_status check_param(const attnc_dims *d, const attnc_tensor *t, const char *name, int ndim, int64_t *rows,
                                int64_t *cols) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "missing parameter %s", name);
    TRY(attnc_check_dtype(t, name, d->dtype));
    int64_t trail[2] = {*rows, cols ? *cols : 0};
    TRY(attnc_check_shape(t, name, &NO_BATCH, ndim, trail));
    *rows = trail[0];
    if (cols) *cols = trail[1];
    return ndim == 2 ? attnc_check_blas(t, name) : ATTNC_OK;
}

static attnc_status check_score(attnc_dims *d, const attnc_score_params *p) {
    switch (p->kind) {
    case ATTNC_SCORE_DOT:
    case ATTNC_SCORE_SCALED_DOT:
    case ATTNC_SCORE_COSINE:
    case ATTNC_SCORE_GAUSSIAN:
        if (d->dq != d->dk)
            return attnc_fail(ATTNC_ERR_VALUE,
                              "query and keys must have the same feature size for this "
                              "score, got %" PRId64 " and %" PRId64,
                              d->dq, d->dk);
        if (p->kind == ATTNC_SCORE_GAUSSIAN && !(p->bandwidth > 0))
            return attnc_fail(ATTNC_ERR_VALUE, "bandwidth must be > 0, got %g", p->bandwidth);
        if (p->kind == ATTNC_SCORE_COSINE && attnc_present(&p->beta)) {
            TRY(attnc_check_dtype(&p->beta, "beta", d->dtype));
            int64_t tq = d->tq;
            TRY(attnc_check_shape(&p->beta, "beta", &d->batch, 1, &tq));
        }
        return ATTNC_OK;
    case ATTNC_SCORE_GENERAL: {
        int64_t rows = d->dq, cols = d->dk;
        return check_param(d, &p->weight, "weight", 2, &rows, &cols);
    }
    case ATTNC_SCORE_LOCATION: {
        int64_t rows = d->dq, cols = d->tk;
        return check_param(d, &p->weight, "weight", 2, &rows, &cols);
    }
    case ATTNC_SCORE_ADDITIVE: {
        int64_t rows = d->dq, da = -1;
        TRY(check_param(d, &p->w_query, "w_query", 2, &rows, &da));
        rows = d->dk;
        TRY(check_param(d, &p->w_key, "w_key", 2, &rows, &da));
        TRY(check_param(d, &p->v, "v", 1, &da, NULL));
        d->da = da;
        return ATTNC_OK;
    }
    }
    return attnc_fail(ATTNC_ERR_VALUE, "unknown score kind %d", (int)p->kind);
}

attnc_status attnc_check_mask(const attnc_dims *d, const attnc_mask *m) {
    if (!m) return ATTNC_OK;
    if (attnc_present(&m->mask)) {
        TRY(attnc_check_dtype(&m->mask, "mask", ATTNC_BOOL));
        int64_t trail[2] = {d->tq, d->tk};
        TRY(attnc_check_shape(&m->mask, "mask", &d->batch, 2, trail));
    }
    if (attnc_present(&m->key_lengths)) {
        TRY(attnc_check_dtype(&m->key_lengths, "key_lengths", ATTNC_INT64));
        TRY(attnc_check_shape(&m->key_lengths, "key_lengths", &d->batch, 0, NULL));
        for (int64_t b = 0; b < d->batch.count; b++) {
            int64_t len = *(const int64_t *)attnc_at(&m->key_lengths,
                                                     attnc_batch_offset(&m->key_lengths, &d->batch, b));
            if (len < 0) return attnc_fail(ATTNC_ERR_VALUE, "key_lengths must be >= 0, got %" PRId64, len);
        }
    }
    return ATTNC_OK;
}

attnc_status attnc_check_inputs(attnc_dims *d, const attnc_tensor *query, const attnc_tensor *keys,
                                const attnc_tensor *values, const attnc_score_params *params, const attnc_mask *mask) {
    memset(d, 0, sizeof *d);
    if (!attnc_present(query) || !attnc_present(keys)) return attnc_fail(ATTNC_ERR_TYPE, "query and keys are required");
    d->dtype = query->dtype;
    if (d->dtype != ATTNC_FLOAT32 && d->dtype != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "query has dtype %s, expected float32 or float64",
                          attnc_dtype_name(d->dtype));
    TRY(attnc_check_dtype(query, "query", d->dtype));
    if (query->ndim < 2) return attnc_fail(ATTNC_ERR_VALUE, "query must have at least 2 dims, got %d", query->ndim);
    d->batch.nb = query->ndim - 2;
    d->batch.count = 1;
    for (int i = 0; i < d->batch.nb; i++) {
        d->batch.shape[i] = query->shape[i];
        d->batch.count *= query->shape[i];
    }
    d->tq = query->shape[query->ndim - 2];
    d->dq = query->shape[query->ndim - 1];
    TRY(attnc_check_dtype(keys, "keys", d->dtype));
    int64_t kt[2] = {-1, -1};
    TRY(attnc_check_shape(keys, "keys", &d->batch, 2, kt));
    d->tk = kt[0];
    d->dk = kt[1];
    if (values) {
        TRY(attnc_check_dtype(values, "values", d->dtype));
        int64_t vt[2] = {d->tk, -1};
        TRY(attnc_check_shape(values, "values", &d->batch, 2, vt));
        d->dv = vt[1];
        TRY(attnc_check_blas(values, "values"));
    }
    TRY(attnc_check_blas(query, "query"));
    TRY(attnc_check_blas(keys, "keys"));
    TRY(check_score(d, params));
    return attnc_check_mask(d, mask);
}

attnc_status attnc_check_like(const attnc_dims *d, const attnc_tensor *t, const char *name, int ntrail, int64_t t0,
                              int64_t t1, bool output) {
    if (!attnc_present(t)) return ATTNC_OK;
    TRY(attnc_check_dtype(t, name, d->dtype));
    int64_t trail[2] = {t0, t1};
    TRY(attnc_check_shape(t, name, &d->batch, ntrail, trail));
    return output ? attnc_check_out(t, name) : attnc_check_blas(t, name);
}

void attnc_bmask_at(attnc_bmask *bm, const attnc_mask *mask, const attnc_dims *d, int64_t b) {
    bm->mask = NULL;
    bm->rs = bm->cs = 0;
    bm->klen = d->tk;
    bm->causal = mask ? mask->causal : 0;
    if (!mask) return;
    if (attnc_present(&mask->mask)) {
        const attnc_tensor *m = &mask->mask;
        bm->mask = attnc_at(m, attnc_batch_offset(m, &d->batch, b));
        bm->rs = m->strides[m->ndim - 2];
        bm->cs = m->strides[m->ndim - 1];
    }
    if (attnc_present(&mask->key_lengths)) {
        const attnc_tensor *kl = &mask->key_lengths;
        int64_t len = *(const int64_t *)attnc_at(kl, attnc_batch_offset(kl, &d->batch, b));
        if (len < bm->klen) bm->klen = len;
    }
}
