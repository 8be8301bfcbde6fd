/* gated_impl.h: typed kernels of gated.c (see core/real.h). tanh and the
 * sigmoid are core/sigmoid_impl.h's (the recurrent gates'): in float from the
 * vectorisable exp, in double libm's. */
#include "../../core/real.h"
#include "../../core/sigmoid_impl.h"

static void FN(gated_rows)(const REAL *restrict a, const REAL *restrict b, REAL *restrict y, int64_t n) {
    for (int64_t k = 0; k < n; k++) y[k] = FN(tanh_)(a[k]) * FN(sigmoid)(b[k]);
}

/* da = dy (1 - t^2) s, db = dy t s (1 - s), t = tanh(a), s = sigmoid(b)
 * (recomputed: the forward saves nothing). Either output may be NULL. */
static void FN(gated_rows_backward)(const REAL *restrict a, const REAL *restrict b, const REAL *restrict dy,
                                    REAL *restrict da, REAL *restrict db, int64_t n) {
    for (int64_t k = 0; k < n; k++) {
        REAL t = FN(tanh_)(a[k]), s = FN(sigmoid)(b[k]), g = dy[k];
        if (da) da[k] = g * (1 - t * t) * s;
        if (db) db[k] = g * t * s * (1 - s);
    }
}

static void FN(gated_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const gated_job *j = arg;
    int64_t i0 = block * CHUNK, n = i0 + CHUNK < j->n ? CHUNK : j->n - i0;
    FN(gated_rows)((const REAL *)j->a + i0, (const REAL *)j->b + i0, (REAL *)j->y + i0, n);
}

static void FN(gated_backward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const gated_job *j = arg;
    int64_t i0 = block * CHUNK, n = i0 + CHUNK < j->n ? CHUNK : j->n - i0;
    FN(gated_rows_backward)((const REAL *)j->a + i0, (const REAL *)j->b + i0, (const REAL *)j->dy + i0,
                            j->da ? (REAL *)j->da + i0 : NULL, j->db ? (REAL *)j->db + i0 : NULL, n);
}

#include "../../core/real_end.h"
