/* linear.c: the affine layer y = x W^T + b, forward and backward. */
#include <stdlib.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

/* Rows of x (forward, dx) or of W (dW, db) per block. */
enum { ROWS = 256 };

typedef struct {
    attnc_mat x, w, y, dy, dx, dw;
    const void *bias;
    int64_t bias_stride;
    void *dbias;
} linear_job;

#define ATTNC_F64 0
#include "linear_impl.h"
#define ATTNC_F64 1
#include "linear_impl.h"

static attnc_mat mat_of(const attnc_tensor *t) {
    attnc_mat m = {t->data, t->shape[0], t->shape[1], t->strides[0], t->strides[1]};
    return m;
}

/* A 2-D float tensor of the call's dtype, shape (rows, cols) (-1: any); inputs
 * BLAS can read. */
static attnc_status check2(const attnc_tensor *t, const char *name, attnc_dtype dt, int64_t *rows, int64_t *cols,
                           bool output) {
    int64_t sizes[2] = {*rows, *cols};
    TRY(attnc_check_dims(t, name, dt, 2, sizes, output));
    *rows = sizes[0];
    *cols = sizes[1];
    return output ? ATTNC_OK : attnc_check_blas(t, name);
}

static attnc_status check_weight(const attnc_tensor *x, const attnc_tensor *w, int64_t *n, int64_t *in, int64_t *out) {
    if (!attnc_present(x) || !attnc_present(w)) return attnc_fail(ATTNC_ERR_TYPE, "input and weight are required");
    attnc_dtype dt = x->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    *n = *in = *out = -1;
    TRY(check2(x, "input", dt, n, in, false));
    return check2(w, "weight", dt, out, in, false);
}

attnc_status attnc_linear_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *weight,
                                  const attnc_tensor *bias) {
    int64_t n = 0, in = 0, out = 0;
    TRY(check_weight(x, weight, &n, &in, &out));
    attnc_dtype dt = x->dtype;
    if (!attnc_present(y)) return attnc_fail(ATTNC_ERR_TYPE, "output is required");
    TRY(check2(y, "output", dt, &n, &out, true));
    if (attnc_present(bias)) TRY(attnc_check_dims(bias, "bias", dt, 1, &out, false));
    int64_t blocks = (n + ROWS - 1) / ROWS;
    linear_job job = {.x = mat_of(x),
                      .w = mat_of(weight),
                      .y = mat_of(y),
                      .bias = attnc_present(bias) ? bias->data : NULL,
                      .bias_stride = attnc_present(bias) ? bias->strides[0] : 0};
    attnc_parallel_for(blocks, attnc_workers_for(n * in * out), ATTNC_TYPED(dt, forward_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_linear_backward(attnc_tensor *dx, attnc_tensor *dweight, attnc_tensor *dbias, const attnc_tensor *dy,
                                   const attnc_tensor *x, const attnc_tensor *weight) {
    int64_t n = 0, in = 0, out = 0;
    TRY(check_weight(x, weight, &n, &in, &out));
    attnc_dtype dt = x->dtype;
    if (!attnc_present(dy)) return attnc_fail(ATTNC_ERR_TYPE, "doutput is required");
    TRY(check2(dy, "doutput", dt, &n, &out, false));
    if (attnc_present(dx)) TRY(check2(dx, "dinput", dt, &n, &in, true));
    if (attnc_present(dweight)) TRY(check2(dweight, "dweight", dt, &out, &in, true));
    if (attnc_present(dbias)) TRY(attnc_check_dims(dbias, "dbias", dt, 1, &out, true));
    attnc_mat none = {0};
    linear_job j = {.x = mat_of(x),
                    .w = mat_of(weight),
                    .dy = mat_of(dy),
                    .dx = attnc_present(dx) ? mat_of(dx) : none,
                    .dw = attnc_present(dweight) ? mat_of(dweight) : none,
                    .dbias = attnc_present(dbias) ? dbias->data : NULL};
    if (attnc_present(dx)) attnc_parallel_for((n + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, dx_task), &j);
    if (attnc_present(dweight) || attnc_present(dbias))
        attnc_parallel_for((out + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, dw_task), &j);
    return ATTNC_OK;
}
