/* blas.h: the one place attnc calls BLAS (OpenBLAS from scipy-openblas32).
 *
 * C = alpha * op(A) * op(B) + beta * C over strided matrix views:
 * op(A) is M x K, op(B) is K x N, C is M x N. Any strides and sizes: views
 * BLAS reads in place (a unit stride in one dim, a leading dim within its
 * 32-bit blasint) go to it as they are, the others a tile at a time through
 * compact copies, and products too large for one call are split. C is always
 * written (with beta 0, whatever it held is ignored). */
#ifndef ATTNC_BLAS_H
#define ATTNC_BLAS_H
#include <stdbool.h>

#include "tensor.h"

/* The most rows, columns or terms one BLAS call gets; larger products are
 * split into calls of at most this many. */
#define ATTNC_BLAS_CHUNK ((int64_t)1 << 29)

void attnc_gemm_f32(bool trans_a, bool trans_b, float alpha, attnc_mat a, attnc_mat b, float beta, attnc_mat c);
void attnc_gemm_f64(bool trans_a, bool trans_b, double alpha, attnc_mat a, attnc_mat b, double beta, attnc_mat c);

/* The same over the thread pool: C's rows in fixed blocks of block_rows (a
 * split by shape, so results do not depend on the thread count), each block
 * one call of the above. dtype: ATTNC_FLOAT32 or ATTNC_FLOAT64. */
void attnc_gemm_rows(attnc_dtype dtype, bool trans_a, bool trans_b, double alpha, attnc_mat a, attnc_mat b, double beta,
                     attnc_mat c, int64_t block_rows);

/* out (n) <- the sum of the rows of x (rows, n; row stride rs), in row order:
 * a bias's gradient, 1^T dY. dtype: ATTNC_FLOAT32 or ATTNC_FLOAT64. */
void attnc_col_sums(attnc_dtype dtype, void *out, const void *x, int64_t rows, int64_t n, int64_t rs);

#endif
