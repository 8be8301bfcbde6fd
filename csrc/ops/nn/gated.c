/* gated.c: the gated activation y = tanh(a) * sigmoid(b) of WaveNet's and
 * SNAIL's dense blocks (van den Oord et al. 2016; Mishra et al. 2017), and its
 * backward. Element-wise over contiguous arrays of any shape, in blocks of
 * CHUNK elements: every element is computed alone, so results do not depend
 * on the thread count. */
#include <math.h>
#include <stdbool.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

enum { CHUNK = 4096 }; /* elements per block */

typedef struct {
    const void *a, *b, *dy;
    void *y, *da, *db;
    int64_t n;
} gated_job;

#define ATTNC_F64 0
#include "gated_impl.h"
#define ATTNC_F64 1
#include "gated_impl.h"

/* a's dtype, float32 or float64. */
static attnc_status check_dtype(const attnc_tensor *a, attnc_dtype *dt) {
    if (!attnc_present(a)) return attnc_fail(ATTNC_ERR_TYPE, "input is required");
    *dt = a->dtype;
    if (*dt != ATTNC_FLOAT32 && *dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(*dt));
    return ATTNC_OK;
}

attnc_status attnc_gated_forward(attnc_tensor *y, const attnc_tensor *a, const attnc_tensor *b) {
    attnc_dtype dt = ATTNC_FLOAT32;
    TRY(check_dtype(a, &dt));
    int64_t n = attnc_numel(a);
    TRY(attnc_check_flat(a, "input", dt, n));
    TRY(attnc_check_flat(b, "gate", dt, n));
    TRY(attnc_check_flat(y, "output", dt, n));
    gated_job job = {.a = a->data, .b = b->data, .y = y->data, .n = n};
    attnc_parallel_for((n + CHUNK - 1) / CHUNK, attnc_workers_for(n * 8), ATTNC_TYPED(dt, gated_forward_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_gated_backward(attnc_tensor *da, attnc_tensor *db, const attnc_tensor *dy, const attnc_tensor *a,
                                  const attnc_tensor *b) {
    attnc_dtype dt = ATTNC_FLOAT32;
    TRY(check_dtype(a, &dt));
    int64_t n = attnc_numel(a);
    TRY(attnc_check_flat(a, "input", dt, n));
    TRY(attnc_check_flat(b, "gate", dt, n));
    TRY(attnc_check_flat(dy, "doutput", dt, n));
    if (attnc_present(da)) TRY(attnc_check_flat(da, "dinput", dt, n));
    if (attnc_present(db)) TRY(attnc_check_flat(db, "dgate", dt, n));
    gated_job job = {.a = a->data,
                     .b = b->data,
                     .dy = dy->data,
                     .da = attnc_present(da) ? da->data : NULL,
                     .db = attnc_present(db) ? db->data : NULL,
                     .n = n};
    attnc_parallel_for((n + CHUNK - 1) / CHUNK, attnc_workers_for(n * 8), ATTNC_TYPED(dt, gated_backward_task), &job);
    return ATTNC_OK;
}
