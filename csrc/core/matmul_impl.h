/* matmul_impl.h: row-block products with a weight matrix, typed (see
 * core/real.h; include after real.h): what the recurrent time loops
 * (seq2seq/decoder_impl.h, ntm/model_impl.h) do at every step. One thread:
 * the loops themselves run blocks of rows in parallel. */
#include "blas.h"

/* A row-major (rows, cols) matrix at p with row stride rs. */
static inline attnc_mat FN(m)(const void *p, int64_t rows, int64_t cols, int64_t rs) {
    attnc_mat m = {(void *)p, rows, cols, rs, 1};
    return m;
}

/* c (n, out) <- a (n, in) w^T + beta c, w (out, in) row-major. */
static inline void FN(times_wt)(const void *a, int64_t ars, const void *w, int64_t out, int64_t in, REAL beta, void *c,
                                int64_t crs, int64_t n) {
    GEMM(false, true, 1, FN(m)(a, n, in, ars), FN(m)(w, out, in, in), beta, FN(m)(c, n, out, crs));
}

/* c (n, in) <- a (n, out) w + beta c, w (out, in) row-major. */
static inline void FN(times_w)(const void *a, int64_t ars, const void *w, int64_t out, int64_t in, REAL beta, void *c,
                               int64_t crs, int64_t n) {
    GEMM(false, false, 1, FN(m)(a, n, out, ars), FN(m)(w, out, in, in), beta, FN(m)(c, n, in, crs));
}
