/* adam.c: one Adam / AdamW step of a parameter, in place, in one pass.
 *
 * Why in C: the same update in NumPy is about ten whole-array passes and
 * calls per parameter; here each element is read and written once. The
 * update is torch.optim.Adam(W)'s, each operation rounded to the
 * parameter's dtype in the order of attnc/optim.py's former NumPy form
 * (which it replaces bit for bit; torch's m and v use lerp, so torch's
 * float32 differs by rounding):
 *
 *   decoupled (AdamW): p <- p * (1 - lr wd);  else, wd != 0: g <- g + wd p
 *   m <- b1 m + (1 - b1) g,  v <- b2 v + ((1 - b2) g) g
 *   p <- p - (m * lr / (1 - b1^t)) / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * The scalars are computed in double and rounded once to the dtype, as
 * NumPy rounds a Python float meeting a float32 array. Element-wise: the
 * result does not depend on the thread count. */
#include <math.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

/* Elements per parallel block: a few L2-sized pieces of the four arrays. */
#define ADAM_BLOCK 16384

typedef struct {
    void *p, *m, *v;
    const void *g;
    int64_t n;
    double keep, wd, b1, omb1, b2, omb2, bc2, eps, step; /* see attnc_adam_step */
    bool decoupled;
} adam_job;

#define ATTNC_F64 0
#include "adam_impl.h"
#define ATTNC_F64 1
#include "adam_impl.h"

/* A C-contiguous array of dtype with n elements. */
static attnc_status check_flat(const attnc_tensor *t, const char *name, attnc_dtype dtype, int64_t n) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
    TRY(attnc_check_dtype(t, name, dtype));
    int64_t count = 1;
    for (int d = 0; d < t->ndim; d++) count *= t->shape[d];
    if (count != n)
        return attnc_fail(ATTNC_ERR_VALUE, "%s has %lld elements, param %lld", name, (long long)count, (long long)n);
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "%s must be C-contiguous", name);
    return ATTNC_OK;
}

/* Whether the n-element arrays at a and b share memory (the kernel reads
 * and writes them through restrict pointers). */
static bool overlap(const void *a, const void *b, int64_t n, size_t es) {
    const char *x = a, *y = b;
    size_t bytes = (size_t)n * es;
    return n > 0 && x < y + bytes && y < x + bytes;
}

attnc_status attnc_adam_step(attnc_tensor *param, const attnc_tensor *grad, attnc_tensor *exp_avg,
                             attnc_tensor *exp_avg_sq, const attnc_adam_options *o) {
    if (!attnc_present(param)) return attnc_fail(ATTNC_ERR_TYPE, "param is required");
    attnc_dtype dt = param->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "param must be float32 or float64");
    int64_t n = 1;
    for (int d = 0; d < param->ndim; d++) n *= param->shape[d];
    TRY(check_flat(param, "param", dt, n));
    TRY(check_flat(grad, "grad", dt, n));
    TRY(check_flat(exp_avg, "exp_avg", dt, n));
    TRY(check_flat(exp_avg_sq, "exp_avg_sq", dt, n));
    const void *arrays[4] = {param->data, grad->data, exp_avg->data, exp_avg_sq->data};
    static const char *names[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
    for (int a = 0; a < 4; a++)
        for (int b = a + 1; b < 4; b++)
            if (overlap(arrays[a], arrays[b], n, attnc_dtype_size(dt)))
                return attnc_fail(ATTNC_ERR_VALUE, "%s and %s share memory", names[a], names[b]);
    if (!(isfinite(o->lr) && isfinite(o->eps) && isfinite(o->weight_decay)))
        return attnc_fail(ATTNC_ERR_VALUE, "lr, eps and weight_decay must be finite");
    if (o->step < 1) return attnc_fail(ATTNC_ERR_VALUE, "step must be >= 1, got %lld", (long long)o->step);
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1))
        return attnc_fail(ATTNC_ERR_VALUE, "betas must be in [0, 1), got %g and %g", o->beta1, o->beta2);
    double t = (double)o->step;
    adam_job j = {.p = param->data,
                  .g = grad->data,
                  .m = exp_avg->data,
                  .v = exp_avg_sq->data,
                  .n = n,
                  .keep = 1 - o->lr * o->weight_decay,
                  .wd = o->weight_decay,
                  .b1 = o->beta1,
                  .omb1 = 1 - o->beta1,
                  .b2 = o->beta2,
                  .omb2 = 1 - o->beta2,
                  .bc2 = sqrt(1 - pow(o->beta2, t)),
                  .eps = o->eps,
                  .step = o->lr / (1 - pow(o->beta1, t)),
                  .decoupled = o->decoupled != 0};
    int64_t blocks = (n + ADAM_BLOCK - 1) / ADAM_BLOCK;
    attnc_parallel_for(blocks, attnc_workers_for(8 * n), ATTNC_TYPED(dt, adam_task), &j);
    return ATTNC_OK;
}
