/* blas.c: strided views -> CBLAS row-major calls.
 *
 * The one place that decides what BLAS is given. scipy-openblas32's blasint is
 * 32-bit, so a view BLAS cannot take in place (no unit stride, a leading dim
 * beyond blasint) is copied a tile at a time into compact scratch, and sizes
 * beyond CHUNK are split: every call BLAS sees passes its argument checks (an
 * argument it refuses would leave C unwritten), whatever views come in.
 * OpenBLAS's interface refuses sizes below 0 and leading dims below 1 or
 * their matrix's extent; past that it computes offsets in 64 bits (a leading
 * dim of 2^31 - 64 is read right: tests/test_strides.py). */
#include "blas.h"

#include <cblas.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include "../include/attnc.h"
#include "glibc_versions.h"
#include "simd.h"
#include "threads.h"
#include "typed.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* The largest leading dim blasint holds. */
#define BLAS_INT_MAX ((int64_t)((UINT64_C(1) << (8 * sizeof(blasint) - 1)) - 1))
/* ATTNC_BLAS_CHUNK (blas.h): OpenBLAS checks each size against blasint, and
 * also adds sizes in blasint (gemv's buffer, m + n + 32, when a product with
 * one row or column becomes a GEMV), so each stays far enough below 2^31 that
 * such sums cannot overflow. */
#define CHUNK ATTNC_BLAS_CHUNK
/* The side of the tiles copied into scratch when a view must be (3 x 256 KiB
 * in float32 at most), and of those that fit on the stack (24 KiB in float64;
 * slower: OpenBLAS's call costs more than a 32^3 product). */
enum { COPY_TILE = 256, STACK_TILE = 32 };

/* How BLAS reads view m (used transposed if `trans`) in place: row-major with
 * leading dim rs, or, when the rows are the unit-stride dim, as the row-major
 * transpose with leading dim cs and the transpose flag flipped. A dim of size
 * one has no meaningful stride, so it takes whichever suits. Returns the
 * leading dim, or 0 when BLAS cannot read m in place (no unit stride, rows
 * that overlap, a leading dim beyond blasint). */
static int64_t layout(attnc_mat m, bool trans, enum CBLAS_TRANSPOSE *op) {
    int64_t rs = m.rows == 1 ? MAX(m.cols, 1) : m.rs;
    int64_t cs = m.cols == 1 ? 1 : m.cs;
    int64_t col_ld = m.cols == 1 ? MAX(m.rows, 1) : m.cs; /* as the transpose */
    int64_t ld = 0;
    bool flip = false;
    if (cs == 1 && rs >= MAX(m.cols, 1)) {
        ld = rs;
    } else if ((m.rows == 1 || m.rs == 1) && col_ld >= MAX(m.rows, 1)) {
        ld = col_ld;
        flip = true;
    }
    *op = trans != flip ? CblasTrans : CblasNoTrans;
    return ld <= BLAS_INT_MAX ? ld : 0;
}

/* OpenBLAS stays single-threaded: attnc's own pool parallelises around it,
 * so the two never oversubscribe the cores. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_init(void) { scipy_openblas_set_num_threads(1); }

#define ATTNC_F64 0
#include "blas_impl.h"
#define ATTNC_F64 1
#include "blas_impl.h"

/* One product c = alpha op(a) op(b) + beta c. */
typedef struct {
    attnc_dtype dt;
    bool ta, tb;
    double alpha, beta;
} gemm_op;

/* The block of op(m) at rows [r0, r0 + nr), columns [c0, c0 + nc), as a
 * view of m. */
static attnc_mat op_block(attnc_mat m, bool trans, int64_t r0, int64_t nr, int64_t c0, int64_t nc, size_t es) {
    int64_t rows0 = trans ? c0 : r0, cols0 = trans ? r0 : c0;
    m.p = (char *)m.p + (ptrdiff_t)(rows0 * m.rs + cols0 * m.cs) * (ptrdiff_t)es;
    m.rows = trans ? nc : nr;
    m.cols = trans ? nr : nc;
    return m;
}

/* dst <- src, two views of the same size. */
static void copy_mat(attnc_mat dst, attnc_mat src, size_t es) {
    for (int64_t i = 0; i < src.rows; i++)
        for (int64_t j = 0; j < src.cols; j++) {
            const char *s = (const char *)src.p + (ptrdiff_t)(i * src.rs + j * src.cs) * (ptrdiff_t)es;
            char *d = (char *)dst.p + (ptrdiff_t)(i * dst.rs + j * dst.cs) * (ptrdiff_t)es;
            if (es == sizeof(float))
                *(float *)d = *(const float *)s;
            else
                *(double *)d = *(const double *)s;
        }
}

/* m if BLAS reads it in place (row-major if `row_major`), else a compact
 * row-major view of scratch (holding m's entries if `copy_in`). */
static attnc_mat in_place_or(attnc_mat m, bool row_major, void *scratch, bool copy_in, size_t es) {
    enum CBLAS_TRANSPOSE op;
    if (layout(m, false, &op) && (!row_major || op == CblasNoTrans)) return m;
    attnc_mat s = {scratch, m.rows, m.cols, m.cols, 1};
    if (copy_in) copy_mat(s, m, es);
    return s;
}

/* One BLAS call on views it reads in place, of at most CHUNK rows, columns
 * and terms each, c row-major. */
static void blas_call(const gemm_op *g, attnc_mat a, attnc_mat b, double beta, attnc_mat c) {
    enum CBLAS_TRANSPOSE opa, opb, opc;
    blasint lda = (blasint)layout(a, g->ta, &opa), ldb = (blasint)layout(b, g->tb, &opb);
    blasint ldc = (blasint)layout(c, false, &opc);
    blasint m = (blasint)c.rows, n = (blasint)c.cols, k = (blasint)(g->ta ? a.rows : a.cols);
    pthread_once(&blas_once, blas_init);
    /* BLAS's own two names, with scalars of each type: no twins to pick. */
    if (g->dt == ATTNC_FLOAT32)
        scipy_cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, (float)g->alpha, a.p, lda, b.p, ldb, (float)beta, c.p, ldc);
    else
        scipy_cblas_dgemm(CblasRowMajor, opa, opb, m, n, k, g->alpha, a.p, lda, b.p, ldb, beta, c.p, ldc);
}

/* The entries of the three copies gemm_tiles(t) may make, in *sizes. */
static void tile_sizes(int64_t t, int64_t m, int64_t n, int64_t k, int64_t sizes[3]) {
    sizes[0] = MIN(t, m) * MIN(t, k);
    sizes[1] = MIN(t, k) * MIN(t, n);
    sizes[2] = MIN(t, m) * MIN(t, n);
}

/* The product in tiles of side t, each one BLAS call; a tile BLAS cannot read
 * in place is copied into scratch (of tile_sizes; NULL when every view is
 * read in place). The first tile along k applies beta, the others add. */
static void gemm_tiles(const gemm_op *g, attnc_mat a, attnc_mat b, attnc_mat c, int64_t t, char *scratch) {
    size_t es = attnc_dtype_size(g->dt);
    int64_t m = c.rows, n = c.cols, k = g->ta ? a.rows : a.cols, sizes[3];
    tile_sizes(t, m, n, k, sizes);
    char *sa = scratch, *sb = scratch ? sa + (size_t)sizes[0] * es : NULL;
    char *sc = scratch ? sb + (size_t)sizes[1] * es : NULL;
    for (int64_t i0 = 0; i0 < m; i0 += t)
        for (int64_t j0 = 0; j0 < n; j0 += t) {
            int64_t tm = MIN(t, m - i0), tn = MIN(t, n - j0);
            attnc_mat ct = op_block(c, false, i0, tm, j0, tn, es);
            attnc_mat cw = in_place_or(ct, true, sc, g->beta != 0, es);
            for (int64_t k0 = 0; k0 < k; k0 += t) {
                int64_t tk = MIN(t, k - k0);
                attnc_mat at = in_place_or(op_block(a, g->ta, i0, tm, k0, tk, es), false, sa, true, es);
                attnc_mat bt = in_place_or(op_block(b, g->tb, k0, tk, j0, tn, es), false, sb, true, es);
                blas_call(g, at, bt, k0 == 0 ? g->beta : 1, cw);
            }
            if (cw.p != ct.p) copy_mat(ct, cw, es);
        }
}

/* The product through copies of its tiles: COPY_TILE ones, on the stack when
 * they fit (small products), else on the heap; STACK_TILE ones on the stack
 * when malloc fails. */
static void gemm_copied(const gemm_op *g, attnc_mat a, attnc_mat b, attnc_mat c) {
    int64_t sizes[3];
    tile_sizes(COPY_TILE, c.rows, c.cols, g->ta ? a.rows : a.cols, sizes);
    size_t bytes = (size_t)(sizes[0] + sizes[1] + sizes[2]) * attnc_dtype_size(g->dt);
    double stack[3 * STACK_TILE * STACK_TILE];
    char *heap = bytes > sizeof stack ? malloc(bytes) : NULL;
    if (heap) {
        gemm_tiles(g, a, b, c, COPY_TILE, heap);
        free(heap);
        return;
    }
    gemm_tiles(g, a, b, c, bytes <= sizeof stack ? COPY_TILE : STACK_TILE, (char *)stack);
}

/* c <- beta c (beta 0: zeros, whatever c held). */
static void scale_mat(attnc_mat c, double beta, size_t es) {
    for (int64_t i = 0; i < c.rows; i++)
        for (int64_t j = 0; j < c.cols; j++) {
            char *d = (char *)c.p + (ptrdiff_t)(i * c.rs + j * c.cs) * (ptrdiff_t)es;
            if (es == sizeof(float))
                *(float *)d = beta == 0 ? 0 : (float)beta * *(float *)d;
            else
                *(double *)d = beta == 0 ? 0 : beta * *(double *)d;
        }
}

/* Sizes, the K == 0 case (BLAS may leave C untouched when K is 0) and a row
 * times a small matrix (an attention tile of a decoding step: packing would
 * cost more than the product), then BLAS: in one call when it reads every
 * view in place and the sizes fit, else in tiles. */
static void gemm(const gemm_op *g, attnc_mat a, attnc_mat b, attnc_mat c) {
    int64_t m = c.rows, n = c.cols, k = g->ta ? a.rows : a.cols;
    if (m == 0 || n == 0) return;
    if (k == 0) {
        scale_mat(c, g->beta, attnc_dtype_size(g->dt));
        return;
    }
    if (m == 1 && (n == 1 || c.cs == 1) && n <= 8192 && k <= 8192 && n * k <= 8192) {
        ATTNC_TYPED(g->dt, row_times_matrix)(g->ta, g->tb, g->alpha, a, b, g->beta, c, n, k);
        return;
    }
    enum CBLAS_TRANSPOSE op;
    if (layout(a, g->ta, &op) && layout(b, g->tb, &op) && layout(c, false, &op) && op == CblasNoTrans)
        gemm_tiles(g, a, b, c, CHUNK, NULL);
    else
        gemm_copied(g, a, b, c);
}

void attnc_gemm_f32(bool trans_a, bool trans_b, float alpha, attnc_mat a, attnc_mat b, float beta, attnc_mat c) {
    gemm_op g = {ATTNC_FLOAT32, trans_a, trans_b, alpha, beta};
    gemm(&g, a, b, c);
}

void attnc_gemm_f64(bool trans_a, bool trans_b, double alpha, attnc_mat a, attnc_mat b, double beta, attnc_mat c) {
    gemm_op g = {ATTNC_FLOAT64, trans_a, trans_b, alpha, beta};
    gemm(&g, a, b, c);
}

typedef struct {
    gemm_op g;
    attnc_mat a, b, c;
    int64_t rows;
} rows_job;

/* Rows [block rows, ...) of c = alpha op(a) op(b) + beta c. */
static void rows_task(void *arg, int64_t block, int worker) {
    (void)worker;
    const rows_job *j = arg;
    size_t es = attnc_dtype_size(j->g.dt);
    int64_t r0 = block * j->rows, n = MIN(j->rows, j->c.rows - r0), k = j->g.ta ? j->a.rows : j->a.cols;
    gemm(&j->g, op_block(j->a, j->g.ta, r0, n, 0, k, es), j->b, op_block(j->c, false, r0, n, 0, j->c.cols, es));
}

void attnc_gemm_rows(attnc_dtype dtype, bool trans_a, bool trans_b, double alpha, attnc_mat a, attnc_mat b, double beta,
                     attnc_mat c, int64_t block_rows) {
    int64_t k = trans_a ? a.rows : a.cols;
    rows_job j = {{dtype, trans_a, trans_b, alpha, beta}, a, b, c, block_rows};
    attnc_parallel_for((c.rows + block_rows - 1) / block_rows, attnc_workers_for(c.rows * c.cols * k), rows_task, &j);
}

const char *attnc_blas_info(void) { return scipy_openblas_get_config(); }

int attnc_blas_threads(void) {
    pthread_once(&blas_once, blas_init);
    return scipy_openblas_get_num_threads();
}

void attnc_col_sums(attnc_dtype dtype, void *out, const void *x, int64_t rows, int64_t n, int64_t rs) {
    ATTNC_TYPED(dtype, col_sums)(out, x, rows, n, rs);
}
