/* layer_norm.c: layer normalisation over the last dim, forward and backward. */
#include <math.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

enum { ROWS = 64 }; /* rows (or, for the parameters' gradients, columns) per block */

typedef struct {
    const attnc_tensor *x, *w, *b, *dy, *mean_in, *rstd_in;
    attnc_tensor *y, *mean, *rstd, *dx, *dw, *db;
    int64_t n, d;
    double eps;
} ln_job;

#define ATTNC_F64 0
#include "layer_norm_impl.h"
#define ATTNC_F64 1
#include "layer_norm_impl.h"

static attnc_status check_x(const attnc_tensor *x, const attnc_tensor *w, int64_t *n, int64_t *d) {
    if (!attnc_present(x)) return attnc_fail(ATTNC_ERR_TYPE, "input is required");
    attnc_dtype dt = x->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    int64_t sizes[2] = {-1, -1};
    TRY(attnc_check_dims(x, "input", dt, 2, sizes, false));
    *n = sizes[0];
    *d = sizes[1];
    return attnc_present(w) ? attnc_check_dims(w, "weight", dt, 1, d, false) : ATTNC_OK;
}

attnc_status attnc_layer_norm_forward(attnc_tensor *y, attnc_tensor *mean, attnc_tensor *rstd, const attnc_tensor *x,
                                      const attnc_tensor *weight, const attnc_tensor *bias, double eps) {
    int64_t n, d;
    TRY(check_x(x, weight, &n, &d));
    attnc_dtype dt = x->dtype;
    if (!(eps >= 0)) return attnc_fail(ATTNC_ERR_VALUE, "eps must be >= 0, got %g", eps);
    if (attnc_present(bias)) TRY(attnc_check_dims(bias, "bias", dt, 1, &d, false));
    if (!attnc_present(y) || !attnc_present(mean) || !attnc_present(rstd))
        return attnc_fail(ATTNC_ERR_TYPE, "output, mean and rstd are required");
    int64_t yd[2] = {n, d};
    TRY(attnc_check_dims(y, "output", dt, 2, yd, true));
    TRY(attnc_check_dims(mean, "mean", dt, 1, &n, true));
    TRY(attnc_check_dims(rstd, "rstd", dt, 1, &n, true));
    int64_t blocks = (n + ROWS - 1) / ROWS;
    ln_job job = {.x = x, .w = weight, .b = bias, .y = y, .mean = mean, .rstd = rstd, .n = n, .d = d, .eps = eps};
    attnc_parallel_for(blocks, attnc_workers(), ATTNC_TYPED(dt, ln_forward_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_layer_norm_backward(attnc_tensor *dx, attnc_tensor *dweight, attnc_tensor *dbias,
                                       const attnc_tensor *dy, const attnc_tensor *x, const attnc_tensor *weight,
                                       const attnc_tensor *mean, const attnc_tensor *rstd) {
    int64_t n, d;
    TRY(check_x(x, weight, &n, &d));
    attnc_dtype dt = x->dtype;
    if (!attnc_present(dy) || !attnc_present(mean) || !attnc_present(rstd))
        return attnc_fail(ATTNC_ERR_TYPE, "doutput, mean and rstd are required");
    int64_t xd[2] = {n, d};
    TRY(attnc_check_dims(dy, "doutput", dt, 2, xd, false));
    TRY(attnc_check_dims(mean, "mean", dt, 1, &n, false));
    TRY(attnc_check_dims(rstd, "rstd", dt, 1, &n, false));
    if (attnc_present(dx)) TRY(attnc_check_dims(dx, "dinput", dt, 2, xd, true));
    if (attnc_present(dweight)) TRY(attnc_check_dims(dweight, "dweight", dt, 1, &d, true));
    if (attnc_present(dbias)) TRY(attnc_check_dims(dbias, "dbias", dt, 1, &d, true));
    ln_job j = {.x = x,
                .w = weight,
                .dy = dy,
                .mean_in = mean,
                .rstd_in = rstd,
                .dx = dx,
                .dw = dweight,
                .db = dbias,
                .n = n,
                .d = d};
    if (attnc_present(dx)) attnc_parallel_for((n + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, ln_dx_task), &j);
    if (attnc_present(dweight) || attnc_present(dbias))
        attnc_parallel_for((d + ROWS - 1) / ROWS, attnc_workers(), ATTNC_TYPED(dt, ln_dparams_task), &j);
    return ATTNC_OK;
}
