/* tile_gemm.c: register-blocked float32 tile products (see tile_gemm.h).
 *
 * Why not BLAS: flash attention multiplies tiles of a few hundred rows by
 * E = 64 or 128 columns thousands of times per call; each BLAS call packs
 * both operands into its own panels and dispatches on the shape, which
 * measured a third of the forward's time. Here A's entries are broadcast
 * straight from their rows and B's rows loaded as vectors: no packing (a
 * B^T is packed once per call into panels, attnc_tile_pack_panels).
 *
 * The micro-kernel holds an MR x NV-vector block of C in registers (6 x 64
 * floats in AVX-512, 6 x 16 in AVX2) and walks k: NV loads of B's row, MR
 * broadcasts of A's column, MR x NV fused multiply-adds. The last vector of
 * a block is masked (n need not be a multiple of the vector width); masked
 * lanes are neither read nor written. */
#include "tile_gemm.h"

#include "threads.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TILE_FAST 1
#else
#define TILE_FAST 0
#endif

bool attnc_tile_sgemm_available(void) { return TILE_FAST; }

bool attnc_tile_sgemm(float alpha, attnc_mat a, attnc_mat b, float beta, attnc_mat c) {
    return attnc_tile_sgemm_band(alpha, a, b, beta, c, ATTNC_TILE_DENSE);
}

int64_t attnc_tile_panels_size(int64_t n, int64_t k) {
    return (n + ATTNC_TILE_PANEL - 1) / ATTNC_TILE_PANEL * ATTNC_TILE_PANEL * k;
}

void attnc_tile_pack_panels(float *dst, attnc_mat b) {
    const float *s = b.p;
    for (int64_t j0 = 0; j0 < b.rows; j0 += ATTNC_TILE_PANEL) {
        int64_t w = b.rows - j0 < ATTNC_TILE_PANEL ? b.rows - j0 : ATTNC_TILE_PANEL;
        float *panel = dst + j0 * b.cols;
        /* Rows of B in groups of 16 so the writes stay within a few lines. */
        for (int64_t jj0 = 0; jj0 < w; jj0 += 16) {
            int64_t jj1 = jj0 + 16 < w ? jj0 + 16 : w;
            for (int64_t kk = 0; kk < b.cols; kk++)
                for (int64_t jj = jj0; jj < jj1; jj++)
                    panel[kk * ATTNC_TILE_PANEL + jj] = s[(j0 + jj) * b.rs + kk * b.cs];
        }
    }
}

#if TILE_FAST

/* c (MR, NV vectors) = alpha * sum_k a[r, k] b[k, :] + beta c. The last
 * vector is masked by `mask`. */
#define TILE_KERNEL(NAME, VT, VW, MT, LOAD, LOADM, STORE, STOREM, SET1, FMA, MUL, ADD, ZERO, MR, NV)              \
    static void NAME(int64_t k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb, float *c,  \
                     int64_t ldc, float alpha, float beta, MT mask) {                                             \
        VT acc[MR][NV];                                                                                           \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) \
            acc[r][v] = ZERO();                                                                                   \
        for (int64_t kk = 0; kk < k; kk++) {                                                                      \
            const float *bk = b + kk * ldb, *ak = a + kk * acs;                                                   \
            VT bv[NV];                                                                                            \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV - 1; v++) bv[v] = LOAD(bk + v * VW);                   \
            bv[NV - 1] = LOADM(bk + (NV - 1) * VW, mask);                                                         \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                                \
                VT x = SET1(ak[r * ars]);                                                                         \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = FMA(x, bv[v], acc[r][v]);        \
            }                                                                                                     \
        }                                                                                                         \
        VT va = SET1(alpha), vb = SET1(beta);                                                                     \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                                    \
            float *cr = c + r * ldc;                                                                              \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                                \
                VT y = MUL(acc[r][v], va);                                                                        \
                if (beta != 0) y = ADD(y, MUL(vb, v < NV - 1 ? LOAD(cr + v * VW) : LOADM(cr + v * VW, mask)));    \
                if (v < NV - 1)                                                                                   \
                    STORE(cr + v * VW, y);                                                                        \
                else                                                                                              \
                    STOREM(cr + v * VW, mask, y);                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }

typedef void (*tile_fn)(int64_t k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb, float *c,
                        int64_t ldc, float alpha, float beta, const void *mask);

/* One kernel per (rows, vectors) of a block, up to MAX_MR x NV_USED:
 * FOR_NV(K, PREFIX, MR) lists a row count's kernels (per instruction set). */
#define KERNELS(PREFIX, K) \
    FOR_NV(K, PREFIX, 1)   \
    FOR_NV(K, PREFIX, 2) FOR_NV(K, PREFIX, 3) FOR_NV(K, PREFIX, 4) FOR_NV(K, PREFIX, 5) FOR_NV(K, PREFIX, 6)
#define TABLE(PREFIX) \
    {NV_ROW(PREFIX, 1), NV_ROW(PREFIX, 2), NV_ROW(PREFIX, 3), NV_ROW(PREFIX, 4), NV_ROW(PREFIX, 5), NV_ROW(PREFIX, 6)}
enum { MAX_MR = 6, KC = 128 };

#if defined(__AVX512F__)
/* 6 x 4 accumulators + 4 rows of B + a broadcast: 29 of the 32 registers. */
enum { VW = 16, NV_USED = 4 };
#define FOR_NV(K, P, MR) K(P##MR##_1, MR, 1) K(P##MR##_2, MR, 2) K(P##MR##_3, MR, 3) K(P##MR##_4, MR, 4)
#define NV_ROW(P, MR) {P##MR##_1, P##MR##_2, P##MR##_3, P##MR##_4}
typedef __mmask16 mask_t;
static inline __m512 load_masked(const float *p, const void *m) { return _mm512_maskz_loadu_ps(*(const mask_t *)m, p); }
static inline void store_masked(float *p, const void *m, __m512 v) { _mm512_mask_storeu_ps(p, *(const mask_t *)m, v); }
#define K_VEC(NAME, MR, NV)                                                                                   \
    TILE_KERNEL(NAME, __m512, 16, const void *, _mm512_loadu_ps, load_masked, _mm512_storeu_ps, store_masked, \
                _mm512_set1_ps, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_add_ps, _mm512_setzero_ps, MR, NV)
static mask_t tail_mask(int64_t cols) { return (mask_t)((1u << cols) - 1u); }
#else
/* AVX2: 6 x 2 accumulators + 2 rows of B + a broadcast: 15 of 16 registers. */
enum { VW = 8, NV_USED = 2 };
#define FOR_NV(K, P, MR) K(P##MR##_1, MR, 1) K(P##MR##_2, MR, 2)
#define NV_ROW(P, MR) {P##MR##_1, P##MR##_2}
typedef __m256i mask_t;
static inline __m256 load_masked(const float *p, const void *m) { return _mm256_maskload_ps(p, *(const mask_t *)m); }
static inline void store_masked(float *p, const void *m, __m256 v) { _mm256_maskstore_ps(p, *(const mask_t *)m, v); }
#define K_VEC(NAME, MR, NV)                                                                                  \
    TILE_KERNEL(NAME, __m256, 8, const void *, _mm256_loadu_ps, load_masked, _mm256_storeu_ps, store_masked, \
                _mm256_set1_ps, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_setzero_ps, MR, NV)
static mask_t tail_mask(int64_t cols) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cols), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

KERNELS(tile_k, K_VEC)
static const tile_fn kernels[MAX_MR][NV_USED] = TABLE(tile_k);

static int64_t clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

/* C (m, n) = alpha A B + beta C for B (k, n) with row stride ldb, within
 * the band. */
static void blocks(float alpha, attnc_mat a, const float *bp, int64_t ldb, float beta, attnc_mat c,
                   attnc_tile_band band) {
    const int64_t m = c.rows, n = c.cols, k = a.cols, width = NV_USED * VW;
    const float *ap = a.p;
    float *cp = c.p;
    /* Column blocks of B outermost, then blocks of KC of its rows (k x width,
     * then KC x width: 16 KiB in AVX-512) stay in L1 while every row block
     * of A and C passes over them; C takes a block's sum at a time. */
    for (int64_t j0 = 0; j0 < n; j0 += width)
        for (int64_t k0 = 0; k0 < k || k0 == 0; k0 += KC)
            for (int64_t i0 = 0; i0 < m; i0 += MAX_MR) {
                int64_t mr = m - i0 < MAX_MR ? m - i0 : MAX_MR;
                /* The block's columns and terms: the union of its rows' bands. */
                int64_t n_end = clamp(i0 + mr - 1 + band.n_hi, 0, n);
                int64_t k_beg = clamp(i0 + band.k_lo, 0, k), k_end = clamp(i0 + mr - 1 + band.k_hi, k_beg, k);
                int64_t lo = k0 > k_beg ? k0 : k_beg, hi = k0 + KC < k_end ? k0 + KC : k_end;
                /* Every block gets beta C once: in the KC block holding its first term
                 * (the first KC block when it has none, with no terms). */
                bool first = k_beg < k_end ? k0 <= k_beg && k_beg < k0 + KC : k0 == 0;
                if (j0 >= n_end || (!first && hi <= lo)) continue;
                if (hi < lo) hi = lo;
                int64_t cols = n_end - j0 < width ? n_end - j0 : width, nv = (cols + VW - 1) / VW;
                mask_t mask = tail_mask(cols - (nv - 1) * VW);
                kernels[mr - 1][nv - 1](hi - lo, ap + i0 * a.rs + lo * a.cs, a.rs, a.cs, bp + lo * ldb + j0, ldb,
                                        cp + i0 * c.rs + j0, c.rs, alpha, first ? beta : 1, &mask);
            }
}

bool attnc_tile_sgemm_band(float alpha, attnc_mat a, attnc_mat b, float beta, attnc_mat c, attnc_tile_band band) {
    if ((b.cols > 1 && b.cs != 1) || (c.cols > 1 && c.cs != 1)) return false;
    blocks(alpha, a, b.p, b.rs, beta, c, band);
    return true;
}

void attnc_tile_sgemm_panels(float alpha, attnc_mat a, const float *panels, float beta, attnc_mat c,
                             attnc_tile_band band) {
    for (int64_t j0 = 0; j0 < c.cols; j0 += ATTNC_TILE_PANEL) {
        attnc_mat cb = {(float *)c.p + j0 * c.cs, c.rows,
                        c.cols - j0 < ATTNC_TILE_PANEL ? c.cols - j0 : ATTNC_TILE_PANEL, c.rs, c.cs};
        attnc_tile_band shifted = band;
        shifted.n_hi -= j0;
        blocks(alpha, a, panels + j0 * a.cols, ATTNC_TILE_PANEL, beta, cb, shifted);
    }
}

typedef struct {
    float alpha, beta;
    attnc_mat a, c;
    const float *panels;
    int64_t block_rows;
} rows_job;

static void rows_task(void *arg, int64_t block, int worker) {
    (void)worker;
    const rows_job *j = arg;
    int64_t r0 = block * j->block_rows, n = j->c.rows - r0 < j->block_rows ? j->c.rows - r0 : j->block_rows;
    attnc_tile_sgemm_panels(j->alpha, attnc_mat_rows(j->a, r0, n, sizeof(float)), j->panels, j->beta,
                            attnc_mat_rows(j->c, r0, n, sizeof(float)), ATTNC_TILE_DENSE);
}

void attnc_tile_sgemm_panels_rows(float alpha, attnc_mat a, const float *panels, float beta, attnc_mat c,
                                  int64_t block_rows) {
    rows_job j = {alpha, beta, a, c, panels, block_rows};
    attnc_parallel_for((c.rows + block_rows - 1) / block_rows, attnc_workers_for(c.rows * c.cols * a.cols), rows_task,
                       &j);
}

#else

bool attnc_tile_sgemm_band(float alpha, attnc_mat a, attnc_mat b, float beta, attnc_mat c, attnc_tile_band band) {
    (void)alpha, (void)a, (void)b, (void)beta, (void)c, (void)band;
    return false;
}

void attnc_tile_sgemm_panels(float alpha, attnc_mat a, const float *panels, float beta, attnc_mat c,
                             attnc_tile_band band) {
    (void)alpha, (void)a, (void)panels, (void)beta, (void)c, (void)band;
}

void attnc_tile_sgemm_panels_rows(float alpha, attnc_mat a, const float *panels, float beta, attnc_mat c,
                                  int64_t block_rows) {
    (void)alpha, (void)a, (void)panels, (void)beta, (void)c, (void)block_rows;
}

#endif
