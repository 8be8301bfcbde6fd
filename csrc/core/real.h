/* real.h: write a kernel once, compile it for float and for double.
 *
 * A typed implementation file (NAME_impl.h) starts with
 *     #include "../core/real.h"
 * and is included twice by NAME.c, once with ATTNC_F64 defined to 0 and once
 * to 1. It names its functions FN(name) (name_f32 / name_f64), its element
 * type REAL, and uses the math macros below. real_end.h undoes all of it.
 * Callers pick a twin with ATTNC_TYPED(dtype, name) (core/typed.h). */
#if ATTNC_F64
#define REAL double
#define FN(name) name##_f64
#define GEMM attnc_gemm_f64
#define EXP exp
#define EXPV exp   /* the exp the vectorised tile loops use */
#define TANHV tanh /* and their tanh */
#define LOG log
#define ERF erf
#define TANH tanh
#define SQRT sqrt
#define FABS fabs
#else
#define REAL float
#define FN(name) name##_f32
#define GEMM attnc_gemm_f32
#define EXP expf
#define EXPV attnc_expf
#define TANHV attnc_tanhf
#define LOG logf
#define ERF erff
#define TANH tanhf
#define SQRT sqrtf
#define FABS fabsf
#endif
