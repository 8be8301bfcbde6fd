/* test_blas.h: the BLAS shim (core/blas.c) on views BLAS's 32-bit interface
 * cannot take in place: a leading dim of 2^31 + 64 (which OpenBLAS refuses,
 * leaving C unwritten) and 2^32 + 16 (which wraps to 16 in 32 bits), in A, B
 * or C, row- or column-major, besides negative and zero strides, against a
 * plain double loop. The views live in an address-space reservation made with
 * MAP_NORESERVE: only the pages touched cost memory. Sizes above the shim's
 * 32-wide copy tiles, so that every tile loop turns and k is accumulated over
 * tiles. Included by test_core.c. */
#include <sys/mman.h>

#include "../../csrc/core/blas.h"

enum { SHIM_M = 70, SHIM_N = 40, SHIM_K = 45 };

/* Element (i, j) of view m (elements of es bytes), as a double. */
static double shim_get(attnc_mat m, int64_t i, int64_t j, size_t es) {
    const char *p = (const char *)m.p + (ptrdiff_t)(i * m.rs + j * m.cs) * (ptrdiff_t)es;
    return es == sizeof(float) ? *(const float *)p : *(const double *)p;
}

static void shim_set(attnc_mat m, int64_t i, int64_t j, size_t es, double x) {
    char *p = (char *)m.p + (ptrdiff_t)(i * m.rs + j * m.cs) * (ptrdiff_t)es;
    if (es == sizeof(float))
        *(float *)p = (float)x;
    else
        *(double *)p = x;
}

/* A rows x cols view in `region` (a reservation) whose "long" stride is
 * `stride` (the row stride; the column stride when col_major), the other
 * one; filled from seed (one row repeated when stride is 0). */
static attnc_mat shim_view(char *region, int64_t rows, int64_t cols, int64_t stride, bool col_major, size_t es,
                           uint64_t seed) {
    int64_t lines = col_major ? cols : rows, len = col_major ? rows : cols;
    int64_t first = stride < 0 ? (lines - 1) * -stride : 0; /* a negative stride starts at the last line */
    attnc_mat m = {region + first * (int64_t)es, rows, cols, col_major ? 1 : stride, col_major ? stride : 1};
    for (int64_t i = 0; i < lines; i++)
        for (int64_t j = 0; j < len; j++) {
            double x = 2 * attnc_uniform(seed, 11, (uint64_t)((stride ? i : 0) * len + j)) - 1;
            shim_set(m, col_major ? j : i, col_major ? i : j, es, x);
        }
    return m;
}

/* |gemm - reference| over C, the reference alpha op(a) op(b) + beta c0 in
 * double, c0 being C's entries before the call. */
static double shim_error(bool ta, bool tb, double alpha, attnc_mat a, attnc_mat b, double beta, const double *c0,
                         attnc_mat c, size_t es) {
    double worst = 0;
    for (int64_t i = 0; i < c.rows; i++)
        for (int64_t j = 0; j < c.cols; j++) {
            double acc = 0;
            for (int64_t q = 0; q < SHIM_K; q++)
                acc += (ta ? shim_get(a, q, i, es) : shim_get(a, i, q, es)) *
                       (tb ? shim_get(b, j, q, es) : shim_get(b, q, j, es));
            double want = alpha * acc + beta * c0[i * c.cols + j];
            worst = fmax(worst, fabs(shim_get(c, i, j, es) - want));
        }
    return worst;
}

static void test_blas_shim(void) {
    /* 2^31 - 64: the largest kind BLAS reads in place (its offsets must be 64-bit) */
    const int64_t strides[] = {(INT64_C(1) << 31) - 64, (INT64_C(1) << 31) + 64, (INT64_C(1) << 32) + 16,
                               -((INT64_C(1) << 31) + 64), 0};
    /* room for SHIM_M lines of the largest stride, in float64 */
    size_t bytes = (size_t)(SHIM_M + 1) * (size_t)((INT64_C(1) << 32) + 16) * sizeof(double);
    char *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) {
        CHECK(0, "cannot reserve %zu bytes of address space for the shim's huge strides", bytes);
        return;
    }
    float small_f[3 * SHIM_M * SHIM_K];
    double small_d[3 * SHIM_M * SHIM_K], c0[SHIM_M * SHIM_N];
    for (int dt = 0; dt < 2; dt++)
        for (int si = 0; si < 5; si++)
            for (int which = 0; which < 3; which++)             /* the operand with the long stride: A, B or C */
                for (int variant = 0; variant < 4; variant++) { /* its transposition and layout, beta */
                    size_t es = dt ? sizeof(double) : sizeof(float);
                    char *small = dt ? (char *)small_d : (char *)small_f;
                    int64_t stride = strides[si];
                    bool ta = variant & 1, tb = variant == 2, col_major = variant >= 2;
                    double alpha = 0.75, beta = variant == 1 || variant == 3 ? 0.5 : 0;
                    if (which == 2 && (col_major || stride <= 0)) continue; /* C: rows apart, rows at unit stride */
                    int64_t ar = ta ? SHIM_K : SHIM_M, ac = ta ? SHIM_M : SHIM_K;
                    int64_t br = tb ? SHIM_N : SHIM_K, bc = tb ? SHIM_K : SHIM_N;
                    attnc_mat a = which == 0 ? shim_view(region, ar, ac, stride, col_major, es, 1)
                                             : shim_view(small, ar, ac, ac, false, es, 1);
                    attnc_mat b = which == 1 ? shim_view(region, br, bc, stride, col_major, es, 2)
                                             : shim_view(small + SHIM_M * SHIM_K * es, br, bc, bc, false, es, 2);
                    attnc_mat c = which == 2 ? shim_view(region, SHIM_M, SHIM_N, stride, false, es, 3)
                                             : shim_view(small + 2 * SHIM_M * SHIM_K * es, SHIM_M, SHIM_N, SHIM_N,
                                                         false, es, 3);
                    for (int64_t i = 0; i < SHIM_M; i++)
                        for (int64_t j = 0; j < SHIM_N; j++) c0[i * SHIM_N + j] = shim_get(c, i, j, es);
                    if (which == 2) { /* sentinels between C's rows */
                        shim_set(c, 0, SHIM_N, es, 7);
                        shim_set(c, SHIM_M - 2, SHIM_N + 100, es, 7);
                    }
                    if (dt)
                        attnc_gemm_f64(ta, tb, alpha, a, b, beta, c);
                    else
                        attnc_gemm_f32(ta, tb, (float)alpha, a, b, (float)beta, c);
                    double err = shim_error(ta, tb, alpha, a, b, beta, c0, c, es);
                    CHECK(err < (dt ? 1e-12 : 1e-5), "gemm %s with a stride of %lld in %c (variant %d): error %g",
                          dt ? "f64" : "f32", (long long)stride, "ABC"[which], variant, err);
                    if (which == 2)
                        CHECK(shim_get(c, 0, SHIM_N, es) == 7 && shim_get(c, SHIM_M - 2, SHIM_N + 100, es) == 7,
                              "gemm wrote between C's rows");
                }
    munmap(region, bytes);
}

/* A product of more than ATTNC_BLAS_CHUNK terms, split into calls along k:
 * A (2, K) and B (K, 2) are all zeros (untouched pages of a reservation read
 * as the zero page: no memory) but for entries at the last term, at the first
 * term of the second call and at the last of the first. */
static void test_blas_chunks(void) {
    const int64_t K = ATTNC_BLAS_CHUNK + 5;
    size_t bytes = (size_t)(4 * K) * sizeof(float);
    char *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) {
        CHECK(0, "cannot reserve %zu bytes of address space for a long product", bytes);
        return;
    }
    float *a = (float *)region, *b = a + 2 * K, c[4] = {1, 2, 3, 4};
    a[K - 1] = 3, b[(K - 1) * 2] = 2;                                    /* c00 += 6 */
    a[K + ATTNC_BLAS_CHUNK] = 1, b[ATTNC_BLAS_CHUNK * 2 + 1] = 5;        /* c11 += 5 */
    a[ATTNC_BLAS_CHUNK - 1] = 7, b[(ATTNC_BLAS_CHUNK - 1) * 2 + 1] = -1; /* c01 -= 7 */
    attnc_mat am = {a, 2, K, K, 1}, bm = {b, K, 2, 2, 1}, cm = {c, 2, 2, 2, 1};
    attnc_gemm_f32(false, false, 1, am, bm, 0.5f, cm);
    CHECK(c[0] == 6.5f && c[1] == -6 && c[2] == 1.5f && c[3] == 7,
          "a product of 2^29 + 5 terms: got %g %g %g %g, expected 6.5 -6 1.5 7", c[0], c[1], c[2], c[3]);
    munmap(region, bytes);
}
