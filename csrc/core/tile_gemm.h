/* tile_gemm.h: float32 products of the small tiles inside fused kernels
 * (flash attention's Q K^T and P V), register-blocked, without BLAS's
 * packing and call overhead.
 *
 * C (m, n) = alpha * A (m, k) B (k, n) + beta * C, float32:
 *   A any strides (its entries are broadcast one at a time),
 *   B and C unit column stride (rows of B and C are loaded as vectors).
 * With beta 0, C is not read. Every C entry takes chains of fused
 * multiply-adds over blocks of up to 128 terms in order, each scaled by
 * alpha and added to C (beta C with the first): the same bits in the AVX2
 * and AVX-512 builds, in the plain and panel forms, and for any split of
 * C's rows.
 *
 * Only the AVX2 + FMA and AVX-512 builds have the kernels; elsewhere
 * attnc_tile_sgemm returns false and the caller uses BLAS. */
#ifndef ATTNC_TILE_GEMM_H
#define ATTNC_TILE_GEMM_H
#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

/* What a causal tile lets a product skip, for row r of C:
 *   - A[r, kk] is zero outside [r + k_lo, r + k_hi): those terms may be left out;
 *   - only C[r, j] for j < r + n_hi is wanted: the others are left unspecified.
 * Work is skipped per block of rows, so some entries outside are computed
 * anyway. ATTNC_TILE_DENSE bounds nothing. */
typedef struct {
    int64_t k_lo, k_hi, n_hi;
} attnc_tile_band;
#define ATTNC_TILE_DENSE ((attnc_tile_band){-(INT64_MAX / 4), INT64_MAX / 4, INT64_MAX / 4})

/* Whether this build has the kernels. */
bool attnc_tile_sgemm_available(void);

/* C = alpha A B + beta C as above; a, b, c are (m, k), (k, n), (m, n).
 * Returns false (and does nothing) when this build has no kernels or B or C
 * lacks a unit column stride. */
bool attnc_tile_sgemm(float alpha, attnc_mat a, attnc_mat b, float beta, attnc_mat c);
bool attnc_tile_sgemm_band(float alpha, attnc_mat a, attnc_mat b, float beta, attnc_mat c, attnc_tile_band band);

/* Panels of B^T for C = A B^T: B (n, k) is packed as ceil(n / 64) panels,
 * panel p holding rows [64 p, 64 p + 64) of B transposed, (k, 64) with row
 * stride 64 (a last, narrower panel is padded). Contiguous panels keep the
 * rows a micro-kernel streams out of each other's cache sets (a plain
 * transpose with a row stride of 1024 floats or more thrashed L1).
 * attnc_tile_panels_size: the floats dst needs. */
enum { ATTNC_TILE_PANEL = 64 };
int64_t attnc_tile_panels_size(int64_t n, int64_t k);
void attnc_tile_pack_panels(float *dst, attnc_mat b);

/* C (m, n) = alpha A (m, k) B^T + beta C, B^T given as the panels of B (n,
 * k) from attnc_tile_pack_panels; C unit column stride. Only where
 * attnc_tile_sgemm_available(). */
void attnc_tile_sgemm_panels(float alpha, attnc_mat a, const float *panels, float beta, attnc_mat c,
                             attnc_tile_band band);

/* The same over the thread pool, C's rows in fixed blocks of block_rows
 * (each row's sums are the same whatever the blocks and threads): a
 * decoding step's product of every hypothesis's state with a weight
 * matrix packed once per call. */
void attnc_tile_sgemm_panels_rows(float alpha, attnc_mat a, const float *panels, float beta, attnc_mat c,
                                  int64_t block_rows);

#endif
