/* embedding.c: token embedding (a row gather) and the cross-entropy loss over
 * classes, forward and backward: the two layers that meet token ids. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

enum { ROWS = 64 }; /* rows (or dweight columns) per block */

typedef struct {
    const attnc_tensor *ids, *w, *dy, *logits, *lse_in, *dloss;
    attnc_tensor *y, *dw, *loss, *lse, *dlogits, *dtargets;
    const attnc_tensor *probs, *weight; /* cross-entropy: class-probability targets, class weights */
    int64_t n, d, v;
    double scale, eps;
    double max_norm, norm_type; /* embedding: torch's renormalisation (max_norm INFINITY: none) */
    int64_t special;            /* padding_idx or ignore_index */
} tok_job;

#define ATTNC_F64 0
#include "embedding_impl.h"
#define ATTNC_F64 1
#include "embedding_impl.h"

/* ids (n) INT64, each in [0, limit) or equal to *special (if given). */
static attnc_status check_ids(const attnc_tensor *ids, const char *name, int64_t *n, int64_t limit,
                              const int64_t *special) {
    if (!attnc_present(ids)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
    *n = -1;
    TRY(attnc_check_dims(ids, name, ATTNC_INT64, 1, n, false));
    for (int64_t r = 0; r < *n; r++) {
        int64_t id = ((const int64_t *)ids->data)[r * ids->strides[0]];
        if ((id < 0 || id >= limit) && !(special && id == *special))
            return attnc_fail(ATTNC_ERR_VALUE, "%s[%" PRId64 "] = %" PRId64 " is outside [0, %" PRId64 ")", name, r, id,
                              limit);
    }
    return ATTNC_OK;
}

static attnc_status float_dims(const attnc_tensor *t, const char *name, int64_t *rows, int64_t *cols) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
    if (t->dtype != ATTNC_FLOAT32 && t->dtype != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "%s has dtype %s, expected float32 or float64", name,
                          attnc_dtype_name(t->dtype));
    int64_t sizes[2] = {*rows, *cols};
    TRY(attnc_check_dims(t, name, t->dtype, 2, sizes, false));
    *rows = sizes[0];
    *cols = sizes[1];
    return ATTNC_OK;
}

attnc_status attnc_embedding_forward(attnc_tensor *y, const attnc_tensor *ids, const attnc_tensor *weight, double scale,
                                     double max_norm, double norm_type) {
    int64_t v = -1, d = -1, n;
    TRY(float_dims(weight, "weight", &v, &d));
    TRY(check_ids(ids, "input", &n, v, NULL));
    if (!(max_norm >= 0)) return attnc_fail(ATTNC_ERR_VALUE, "max_norm must be >= 0, got %g", max_norm);
    if (!(norm_type > 0)) return attnc_fail(ATTNC_ERR_VALUE, "norm_type must be > 0 (or inf), got %g", norm_type);
    if (!attnc_present(y)) return attnc_fail(ATTNC_ERR_TYPE, "output is required");
    int64_t yd[2] = {n, d};
    TRY(attnc_check_dims(y, "output", weight->dtype, 2, yd, true));
    tok_job job =
        {.ids = ids, .w = weight, .y = y, .n = n, .d = d, .scale = scale, .max_norm = max_norm, .norm_type = norm_type};
    attnc_parallel_for((n + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(weight->dtype, embed_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_embedding_backward(attnc_tensor *dweight, const attnc_tensor *dy, const attnc_tensor *ids,
                                      double scale, int64_t padding_idx) {
    int64_t v = -1, d = -1, n = -1;
    if (!attnc_present(dweight)) return attnc_fail(ATTNC_ERR_TYPE, "dweight is required");
    TRY(float_dims(dy, "doutput", &n, &d));
    int64_t wd[2] = {-1, d};
    TRY(attnc_check_dims(dweight, "dweight", dy->dtype, 2, wd, true));
    v = wd[0];
    TRY(check_ids(ids, "input", &n, v, NULL));
    tok_job job = {.ids = ids, .dy = dy, .dw = dweight, .n = n, .d = d, .v = v, .scale = scale, .special = padding_idx};
    attnc_parallel_for((d + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dy->dtype, embed_grad_task), &job);
    return ATTNC_OK;
}

/* logits (N, C), targets: class ids (N) INT64, each in [0, C) or
 * ignore_index, or probabilities (N, C) of the logits' dtype (*probs set to
 * them); the optional class weights (C). */
static attnc_status check_ce(const attnc_tensor *logits, const attnc_tensor *targets,
                             const attnc_cross_entropy_options *o, int64_t *n, int64_t *c, const attnc_tensor **probs) {
    *n = *c = -1;
    *probs = NULL;
    if (!o) return attnc_fail(ATTNC_ERR_TYPE, "options are required");
    TRY(float_dims(logits, "input", n, c));
    if (attnc_present(targets) && targets->dtype == logits->dtype) {
        int64_t pd[2] = {*n, *c};
        TRY(attnc_check_dims(targets, "target", logits->dtype, 2, pd, false));
        *probs = targets;
    } else {
        int64_t nt;
        TRY(check_ids(targets, "target", &nt, *c, &o->ignore_index));
        if (nt != *n)
            return attnc_fail(ATTNC_ERR_VALUE, "target has %" PRId64 " entries, input %" PRId64 " rows", nt, *n);
    }
    if (attnc_present(&o->weight)) TRY(attnc_check_dims(&o->weight, "weight", logits->dtype, 1, c, false));
    if (!(o->label_smoothing >= 0 && o->label_smoothing <= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "label_smoothing must be in [0, 1], got %g", o->label_smoothing);
    return ATTNC_OK;
}

attnc_status attnc_cross_entropy_forward(attnc_tensor *losses, attnc_tensor *logsumexp, const attnc_tensor *logits,
                                         const attnc_tensor *targets, const attnc_cross_entropy_options *options) {
    int64_t n, c;
    const attnc_tensor *probs;
    TRY(check_ce(logits, targets, options, &n, &c, &probs));
    if (!attnc_present(losses) || !attnc_present(logsumexp))
        return attnc_fail(ATTNC_ERR_TYPE, "losses and logsumexp are required");
    TRY(attnc_check_dims(losses, "losses", logits->dtype, 1, &n, true));
    TRY(attnc_check_dims(logsumexp, "logsumexp", logits->dtype, 1, &n, true));
    tok_job job = {.ids = probs ? NULL : targets,
                   .probs = probs,
                   .weight = attnc_present(&options->weight) ? &options->weight : NULL,
                   .logits = logits,
                   .loss = losses,
                   .lse = logsumexp,
                   .n = n,
                   .v = c,
                   .eps = options->label_smoothing,
                   .special = options->ignore_index};
    attnc_parallel_for((n + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(logits->dtype, ce_forward_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_cross_entropy_backward(attnc_tensor *dlogits, attnc_tensor *dtargets, attnc_tensor *dweight,
                                          const attnc_tensor *dlosses, const attnc_tensor *logits,
                                          const attnc_tensor *targets, const attnc_tensor *logsumexp,
                                          const attnc_cross_entropy_options *options) {
    int64_t n, c;
    const attnc_tensor *probs;
    TRY(check_ce(logits, targets, options, &n, &c, &probs));
    if (!attnc_present(dlogits) || !attnc_present(dlosses) || !attnc_present(logsumexp))
        return attnc_fail(ATTNC_ERR_TYPE, "dinput, dlosses and logsumexp are required");
    attnc_dtype dt = logits->dtype;
    int64_t ld[2] = {n, c};
    TRY(attnc_check_dims(dlogits, "dinput", dt, 2, ld, true));
    if (attnc_present(dtargets)) {
        if (!probs) return attnc_fail(ATTNC_ERR_TYPE, "dtarget needs probability targets (class ids have none)");
        TRY(attnc_check_dims(dtargets, "dtarget", dt, 2, ld, true));
    }
    if (attnc_present(dweight)) {
        if (!attnc_present(&options->weight)) return attnc_fail(ATTNC_ERR_TYPE, "dweight needs a weight");
        TRY(attnc_check_dims(dweight, "dweight", dt, 1, &c, true));
    }
    TRY(attnc_check_dims(dlosses, "dlosses", dt, 1, &n, false));
    TRY(attnc_check_dims(logsumexp, "logsumexp", dt, 1, &n, false));
    tok_job job = {.ids = probs ? NULL : targets,
                   .probs = probs,
                   .weight = attnc_present(&options->weight) ? &options->weight : NULL,
                   .logits = logits,
                   .dloss = dlosses,
                   .lse_in = logsumexp,
                   .n = n,
                   .v = c,
                   .eps = options->label_smoothing,
                   .special = options->ignore_index,
                   .dlogits = dlogits,
                   .dtargets = attnc_present(dtargets) ? dtargets : NULL,
                   .dw = dweight};
    attnc_parallel_for((n + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, ce_backward_task), &job);
    if (attnc_present(dweight))
        attnc_parallel_for((c + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, ce_weight_grad_task), &job);
    return ATTNC_OK;
}

/* A float (N, C) tensor of rows, any strides; C >= 1. */
static attnc_status check_rows2(const attnc_tensor *t, const char *name, attnc_dtype dt, int64_t *n, int64_t *c,
                                bool output) {
    int64_t sizes[2] = {*n, *c};
    TRY(attnc_check_dims(t, name, dt, 2, sizes, output));
    *n = sizes[0];
    *c = sizes[1];
    return ATTNC_OK;
}

attnc_status attnc_log_softmax_forward(attnc_tensor *y, const attnc_tensor *x) {
    if (!attnc_present(y) || !attnc_present(x)) return attnc_fail(ATTNC_ERR_TYPE, "output and input are required");
    attnc_dtype dt = x->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    int64_t n = -1, c = -1;
    TRY(check_rows2(x, "input", dt, &n, &c, false));
    TRY(check_rows2(y, "output", dt, &n, &c, true));
    tok_job job = {.logits = x, .y = y, .n = n, .v = c};
    attnc_parallel_for((n + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, log_softmax_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_log_softmax_backward(attnc_tensor *dx, const attnc_tensor *dy, const attnc_tensor *y) {
    if (!attnc_present(dx) || !attnc_present(dy) || !attnc_present(y))
        return attnc_fail(ATTNC_ERR_TYPE, "dinput, doutput and output are required");
    attnc_dtype dt = y->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "output has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    int64_t n = -1, c = -1;
    TRY(check_rows2(y, "output", dt, &n, &c, false));
    TRY(check_rows2(dy, "doutput", dt, &n, &c, false));
    TRY(check_rows2(dx, "dinput", dt, &n, &c, true));
    tok_job job = {.logits = y, .dy = dy, .dlogits = dx, .n = n, .v = c};
    attnc_parallel_for((n + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, log_softmax_grad_task), &job);
    return ATTNC_OK;
}
