/* sigmoid_impl.h: the sigmoid and tanh of the recurrent gates, typed (see
 * core/real.h; include after real.h). In float, from the vectorisable exp
 * (core/simd.h) so gate loops vectorise, tanh taking its odd series below
 * 1/16 where 1 - 2 / (e^2x + 1) would lose relative precision (both within
 * 2e-6 relative); in double, libm's, exact to the last bits. Guarded per
 * type: lanes_impl.h and lstm_cell_impl.h both include it. */
#include "simd.h"

#if ATTNC_F64 && !defined(ATTNC_SIGMOID_F64)
#define ATTNC_SIGMOID_F64
static inline REAL FN(sigmoid)(REAL x) { return 1 / (1 + exp(-x)); }
static inline REAL FN(tanh_)(REAL x) { return tanh(x); }
#elif !ATTNC_F64 && !defined(ATTNC_SIGMOID_F32)
#define ATTNC_SIGMOID_F32
static inline REAL FN(sigmoid)(REAL x) { return 1 / (1 + attnc_expf(-x)); }
static inline REAL FN(tanh_)(REAL x) {
    REAL x2 = x * x, series = x * (1 + x2 * (-(REAL)1 / 3 + x2 * ((REAL)2 / 15)));
    REAL exact = 1 - 2 / (attnc_expf(2 * x) + 1);
    return FABS(x) < (REAL)0.0625 ? series : exact;
}
#endif
