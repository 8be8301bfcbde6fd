/* softmax_impl.h: typed kernels of softmax.c (see core/real.h). */
#include "../../core/real.h"

int64_t FN(attnc_softmax_row)(REAL *w, const REAL *s, int64_t scs, int64_t tk, int64_t lo, int64_t hi,
                              const attnc_bmask *m, int64_t i) {
    REAL mx = -INFINITY;
    int64_t allowed = 0;
    bool saw_nan = false;
    for (int64_t j = lo; j < hi; j++) {
        if (!attnc_mask_ok(m, i, j)) continue;
        REAL x = s[j * scs];
        allowed++;
        if (x > mx) mx = x;
        if (x != x) saw_nan = true;
    }
    /* Read every score before writing: s may alias w. */
    if (allowed == 0 || (mx == -INFINITY && !saw_nan)) {
        for (int64_t j = 0; j < tk; j++) w[j] = 0;
        return allowed;
    }
    if (saw_nan) mx = NAN;
    REAL sum = 0;
    for (int64_t j = 0; j < tk; j++) {
        REAL e = 0;
        if (j >= lo && j < hi && attnc_mask_ok(m, i, j)) e = EXP(s[j * scs] - mx);
        w[j] = e;
        sum += e;
    }
    REAL inv = 1 / sum;
    for (int64_t j = lo; j < hi; j++) w[j] *= inv;
    return allowed;
}

void FN(attnc_softmax_row_backward)(REAL *ds, const REAL *dw, int64_t dcs, const REAL *w, int64_t tk) {
    REAL dot = 0;
    for (int64_t j = 0; j < tk; j++)
        if (w[j] != 0) dot += w[j] * dw[j * dcs];
    for (int64_t j = 0; j < tk; j++) ds[j] = w[j] != 0 ? w[j] * (dw[j * dcs] - dot) : 0;
}

/* One block: all rows of batch element b. */
static void FN(softmax_forward_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const softmax_job *job = arg;
    const attnc_dims *d = job->d;
    attnc_mat s = attnc_batch_mat(job->in, &d->batch, b);
    REAL *w = (REAL *)job->out->data + b * d->tq * d->tk;
    attnc_bmask bm;
    attnc_bmask_at(&bm, job->mask, d, b);
    for (int64_t i = 0; i < d->tq; i++) {
        int64_t lo, hi;
        attnc_row_range(&bm, i, &lo, &hi);
        FN(attnc_softmax_row)(w + i * d->tk, (const REAL *)s.p + i * s.rs, s.cs, d->tk, lo, hi, &bm, i);
    }
}

static void FN(softmax_backward_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const softmax_job *job = arg;
    const attnc_dims *d = job->d;
    attnc_mat dw = attnc_batch_mat(job->in, &d->batch, b);
    attnc_mat w = attnc_batch_mat(job->aux, &d->batch, b);
    REAL *ds = (REAL *)job->out->data + b * d->tq * d->tk;
    for (int64_t i = 0; i < d->tq; i++) {
        /* The forward's weights may be strided: gather the row into the
         * output row, then transform it in place. */
        REAL *row = ds + i * d->tk;
        const REAL *wr = (const REAL *)w.p + i * w.rs;
        for (int64_t j = 0; j < d->tk; j++) row[j] = wr[j * w.cs];
        FN(attnc_softmax_row_backward)(row, (const REAL *)dw.p + i * dw.rs, dw.cs, row, d->tk);
    }
}

#include "../../core/real_end.h"
