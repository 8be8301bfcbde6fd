/* pointwise.c: activation, dropout and residual addition in one pass,
 * y = residual + dropout(act(x)), and its backward. The feed-forward block
 * and every residual connection of a transformer layer are this. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "../../core/rng.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

#define SQRT1_2 0.70710678118654752440      /* 1 / sqrt(2)      */
#define INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi)   */
#define SQRT_2_PI 0.79788456080286535588    /* sqrt(2 / pi)     */
#define GELU_KAPPA 0.044715                 /* the tanh GELU's cubic coefficient */

enum { CHUNK = 4096 }; /* elements per block: a multiple of 4 (one Philox call draws 4) */

/* Element k is kept when the 32-bit word k of the stream is >= threshold. */
typedef struct {
    bool active;
    uint32_t threshold;
    double scale; /* 1 / (1 - p), or 0 when p == 1 */
    uint64_t seed, stream;
} dropout_mask;

static dropout_mask make_mask(double p, uint64_t seed, uint64_t stream) {
    dropout_mask m = {.active = p > 0, .seed = seed, .stream = stream, .scale = 1};
    if (!m.active) return m;
    double t = p * 4294967296.0;
    m.threshold = t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
    m.scale = p >= 1 ? 0 : 1 / (1 - p);
    return m;
}

typedef struct {
    const void *x, *residual, *dy;
    void *y, *dx;
    int64_t n;
    attnc_activation act;
    dropout_mask mask;
} pointwise_job;

#define ATTNC_F64 0
#include "pointwise_impl.h"
#define ATTNC_F64 1
#include "pointwise_impl.h"

static attnc_status check_options(attnc_activation act, double p) {
    if (act != ATTNC_ACT_NONE && act != ATTNC_ACT_RELU && act != ATTNC_ACT_GELU && act != ATTNC_ACT_GELU_TANH)
        return attnc_fail(ATTNC_ERR_VALUE, "unknown activation %d", (int)act);
    if (!(p >= 0 && p <= 1)) return attnc_fail(ATTNC_ERR_VALUE, "dropout must be in [0, 1], got %g", p);
    return ATTNC_OK;
}

attnc_status attnc_pointwise_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *residual,
                                     attnc_activation act, double dropout, uint64_t seed, uint64_t stream) {
    if (!attnc_present(y) || !attnc_present(x)) return attnc_fail(ATTNC_ERR_TYPE, "output and input are required");
    attnc_dtype dt = x->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    TRY(check_options(act, dropout));
    int64_t n = attnc_numel(y);
    TRY(attnc_check_flat(x, "input", dt, n));
    TRY(attnc_check_flat(y, "output", dt, n));
    if (attnc_present(residual)) TRY(attnc_check_flat(residual, "residual", dt, n));
    pointwise_job job = {.x = x->data,
                         .residual = attnc_present(residual) ? residual->data : NULL,
                         .y = y->data,
                         .n = n,
                         .act = act,
                         .mask = make_mask(dropout, seed, stream)};
    attnc_parallel_for((n + CHUNK - 1) / CHUNK, attnc_workers(), ATTNC_TYPED(dt, pointwise_forward_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_pointwise_backward(attnc_tensor *dx, const attnc_tensor *dy, const attnc_tensor *x,
                                      attnc_activation act, double dropout, uint64_t seed, uint64_t stream) {
    if (!attnc_present(dx) || !attnc_present(dy)) return attnc_fail(ATTNC_ERR_TYPE, "dinput and doutput are required");
    attnc_dtype dt = dy->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "doutput has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    TRY(check_options(act, dropout));
    int64_t n = attnc_numel(dy);
    TRY(attnc_check_flat(dx, "dinput", dt, n));
    if (act != ATTNC_ACT_NONE) {
        if (!attnc_present(x)) return attnc_fail(ATTNC_ERR_TYPE, "input is required with an activation");
        TRY(attnc_check_flat(x, "input", dt, n));
    }
    pointwise_job job = {.dy = dy->data,
                         .x = act != ATTNC_ACT_NONE ? x->data : NULL,
                         .dx = dx->data,
                         .n = n,
                         .act = act,
                         .mask = make_mask(dropout, seed, stream)};
    attnc_parallel_for((n + CHUNK - 1) / CHUNK, attnc_workers(), ATTNC_TYPED(dt, pointwise_backward_task), &job);
    return ATTNC_OK;
}
