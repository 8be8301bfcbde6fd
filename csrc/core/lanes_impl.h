/* lanes_impl.h: a dot product and the additive score v . tanh(q + k) in 16
 * independent partial sums combined in a fixed order (and the score's
 * backward for one key), typed (see
 * core/real.h; include after real.h). The compiler vectorises them inside
 * the kernels that inline them, and the result does not depend
 * on the vector width. The float tanh is core/sigmoid_impl.h's (within 2e-6
 * relative), not libm's. Shared by the additive score (attention/score_impl.h),
 * the recurrent decoder (seq2seq/decoder_impl.h) and the pointer decoder
 * (pointer/pointer_impl.h), so all three score alike; the backward by the
 * decoder and the LSTMN (lstmn/lstmn_impl.h). */
#include "sigmoid_impl.h"

#ifndef ATTNC_LANES
#define ATTNC_LANES 16
#endif

static inline REAL FN(dot)(const REAL *restrict a, const REAL *restrict b, int64_t n) {
    REAL lane[ATTNC_LANES] = {0}, sum = 0;
    int64_t j = 0;
    for (; j + ATTNC_LANES <= n; j += ATTNC_LANES)
        for (int k = 0; k < ATTNC_LANES; k++) lane[k] += a[j + k] * b[j + k];
    for (int k = 0; k < ATTNC_LANES; k++) sum += lane[k];
    for (; j < n; j++) sum += a[j] * b[j];
    return sum;
}

/* v . tanh(q + k) over n. */
static inline REAL FN(additive)(const REAL *restrict q, const REAL *restrict k, const REAL *restrict v, int64_t n) {
    REAL lane[ATTNC_LANES] = {0}, sum = 0;
    int64_t j = 0;
    for (; j + ATTNC_LANES <= n; j += ATTNC_LANES)
        for (int i = 0; i < ATTNC_LANES; i++) lane[i] += v[j + i] * FN(tanh_)(q[j + i] + k[j + i]);
    for (int i = 0; i < ATTNC_LANES; i++) sum += lane[i];
    for (; j < n; j++) sum += v[j] * FN(tanh_)(q[j] + k[j]);
    return sum;
}

/* a = v . tanh(q + k) backward for one key (n each): dk += e, dq += e,
 * dv += da tanh(q + k), e = da v (1 - tanh^2(q + k)). */
static inline void FN(additive_backward)(const REAL *restrict k, const REAL *restrict q, const REAL *restrict v,
                                         REAL da, REAL *restrict dk, REAL *restrict dq, REAL *restrict dv, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        REAL u = FN(tanh_)(k[j] + q[j]), e = da * v[j] * (1 - u * u);
        dk[j] += e;
        dq[j] += e;
        dv[j] += da * u;
    }
}
