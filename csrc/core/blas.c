/* blas.c: strided views -> CBLAS row-major calls. */
#include "blas.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>

#include "../include/attnc.h"
#include "glibc_versions.h"
#include "simd.h"
#include "threads.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* How BLAS reads view m (used transposed if `trans`): row-major with leading
 * dim rs, or, when the rows are the unit-stride dim, as the row-major
 * transpose with leading dim cs and the transpose flag flipped. Dims of size
 * one have no meaningful stride, so they get the smallest legal one. */
static void layout(const attnc_mat *m, bool trans, enum CBLAS_TRANSPOSE *op, blasint *ld) {
    int64_t rs = m->rows == 1 ? MAX(m->cols, 1) : m->rs;
    int64_t cs = m->cols == 1 ? 1 : m->cs;
    if (cs == 1 && rs >= MAX(m->cols, 1)) {
        *op = trans ? CblasTrans : CblasNoTrans;
        *ld = (blasint)rs;
    } else {
        *op = trans ? CblasNoTrans : CblasTrans;
        *ld = (blasint)cs;
    }
}

/* OpenBLAS stays single-threaded: attnc's own pool parallelises around it,
 * so the two never oversubscribe the cores. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_init(void) { scipy_openblas_set_num_threads(1); }

/* c (1, n) = alpha a (1, k) op(b) + beta c, looping along whichever of
 * op(b)'s dims has the unit stride (vectorised for the build's SIMD path). */
#define ROW_TIMES_MATRIX(NAME, REAL)                                                          \
    static void NAME(bool trans_a, bool trans_b, REAL alpha, attnc_mat a, attnc_mat b,         \
                     REAL beta, attnc_mat c, int64_t n, int64_t k) {                          \
        const REAL *restrict ap = a.p, *restrict bp = b.p;                                    \
        REAL *restrict cp = c.p;                                                              \
        int64_t as = trans_a ? a.rs : a.cs; /* along k */                                     \
        int64_t bk = trans_b ? b.cs : b.rs, bj = trans_b ? b.rs : b.cs;                       \
        if (bj == 1) { /* rows of op(b) contiguous: c += x row */                             \
            for (int64_t j = 0; j < n; j++) cp[j] = beta == 0 ? 0 : beta * cp[j];             \
            for (int64_t q = 0; q < k; q++) {                                                 \
                REAL x = alpha * ap[q * as];                                                  \
                const REAL *row = bp + q * bk;                                                \
                for (int64_t j = 0; j < n; j++) cp[j] += x * row[j];                          \
            }                                                                                 \
        } else if (as == 1 && bk == 1) { /* contiguous dot products, 16 vector lanes */      \
            for (int64_t j = 0; j < n; j++) {                                                 \
                const REAL *col = bp + j * bj;                                                \
                REAL lane[16] = {0}, dot = 0;                                                 \
                int64_t q = 0;                                                                \
                for (; q + 16 <= k; q += 16)                                                  \
                    for (int u = 0; u < 16; u++) lane[u] += ap[q + u] * col[q + u];           \
                for (int u = 0; u < 16; u++) dot += lane[u];                                  \
                for (; q < k; q++) dot += ap[q] * col[q];                                     \
                cp[j] = alpha * dot + (beta == 0 ? 0 : beta * cp[j]);                         \
            }                                                                                 \
        } else { /* a dot product per output, four partial sums */                           \
            for (int64_t j = 0; j < n; j++) {                                                 \
                const REAL *col = bp + j * bj;                                                \
                REAL acc[4] = {0, 0, 0, 0};                                                   \
                int64_t q = 0;                                                                \
                for (; q + 4 <= k; q += 4)                                                    \
                    for (int u = 0; u < 4; u++) acc[u] += ap[(q + u) * as] * col[(q + u) * bk]; \
                for (; q < k; q++) acc[0] += ap[q * as] * col[q * bk];                        \
                REAL dot = (acc[0] + acc[1]) + (acc[2] + acc[3]);                             \
                cp[j] = alpha * dot + (beta == 0 ? 0 : beta * cp[j]);                         \
            }                                                                                 \
        }                                                                                     \
    }

ROW_TIMES_MATRIX(row_times_matrix_f32, float)
ROW_TIMES_MATRIX(row_times_matrix_f64, double)

/* Sizes and the K == 0 case (BLAS may leave C untouched when K is 0). */
#define GEMM_BODY(REAL, GEMM, ROW)                                                   \
    blasint m = (blasint)c.rows, n = (blasint)c.cols;                              \
    blasint k = (blasint)(trans_a ? a.rows : a.cols);                              \
    if (m == 0 || n == 0) return;                                                  \
    blasint ldc = (blasint)(c.rows == 1 ? MAX(c.cols, 1) : c.rs);                  \
    if (k == 0) {                                                                  \
        for (blasint i = 0; i < m; i++) {                                          \
            REAL *row = (REAL *)c.p + (int64_t)i * ldc;                            \
            for (blasint j = 0; j < n; j++) row[j] = beta == 0 ? 0 : beta * row[j]; \
        }                                                                          \
        return;                                                                    \
    }                                                                              \
    if (m == 1 && (int64_t)n * k <= 8192) { /* a row times a small matrix (an  \
        attention tile of a decoding step): packing would cost more than it */   \
        ROW(trans_a, trans_b, alpha, a, b, beta, c, n, k);                         \
        return;                                                                    \
    }                                                                              \
    pthread_once(&blas_once, blas_init);                                           \
    enum CBLAS_TRANSPOSE opa, opb;                                                 \
    blasint lda, ldb;                                                              \
    layout(&a, trans_a, &opa, &lda);                                               \
    layout(&b, trans_b, &opb, &ldb);                                               \
    GEMM(CblasRowMajor, opa, opb, m, n, k, alpha, (const REAL *)a.p, lda,          \
         (const REAL *)b.p, ldb, beta, (REAL *)c.p, ldc);

void attnc_gemm_f32(bool trans_a, bool trans_b, float alpha, attnc_mat a, attnc_mat b,
                    float beta, attnc_mat c) {
    GEMM_BODY(float, scipy_cblas_sgemm, row_times_matrix_f32)
}

void attnc_gemm_f64(bool trans_a, bool trans_b, double alpha, attnc_mat a, attnc_mat b,
                    double beta, attnc_mat c) {
    GEMM_BODY(double, scipy_cblas_dgemm, row_times_matrix_f64)
}

typedef struct {
    attnc_dtype dt;
    bool ta, tb;
    double alpha, beta;
    attnc_mat a, b, c;
    int64_t rows;
} rows_job;

/* Rows [block rows, ...) of c = alpha op(a) op(b) + beta c. */
static void rows_task(void *arg, int64_t block, int worker) {
    (void)worker;
    const rows_job *j = arg;
    int64_t r0 = block * j->rows, n = j->c.rows - r0 < j->rows ? j->c.rows - r0 : j->rows;
    attnc_mat a = j->a;
    size_t es = attnc_dtype_size(j->dt);
    if (j->ta) { /* op(a) = a^T: its rows are a's columns */
        a.p = (char *)a.p + (size_t)(r0 * a.cs) * es;
        a.cols = n;
    } else {
        a = attnc_mat_rows(a, r0, n, es);
    }
    attnc_mat c = attnc_mat_rows(j->c, r0, n, es);
    if (j->dt == ATTNC_FLOAT32)
        attnc_gemm_f32(j->ta, j->tb, (float)j->alpha, a, j->b, (float)j->beta, c);
    else
        attnc_gemm_f64(j->ta, j->tb, j->alpha, a, j->b, j->beta, c);
}

void attnc_gemm_rows(attnc_dtype dtype, bool trans_a, bool trans_b, double alpha, attnc_mat a, attnc_mat b,
                     double beta, attnc_mat c, int64_t block_rows) {
    int64_t k = trans_a ? a.rows : a.cols;
    rows_job j = {dtype, trans_a, trans_b, alpha, beta, a, b, c, block_rows};
    attnc_parallel_for((c.rows + block_rows - 1) / block_rows, attnc_workers_for(c.rows * c.cols * k), rows_task,
                       &j);
}

const char *attnc_blas_info(void) { return scipy_openblas_get_config(); }

int attnc_blas_threads(void) {
    pthread_once(&blas_once, blas_init);
    return scipy_openblas_get_num_threads();
}

#define COL_SUMS(REAL)                                                \
    do {                                                              \
        REAL *o = out;                                                \
        const REAL *p = x;                                            \
        for (int64_t k = 0; k < n; k++) o[k] = 0;                     \
        for (int64_t i = 0; i < rows; i++)                            \
            for (int64_t k = 0; k < n; k++) o[k] += p[i * rs + k];    \
    } while (0)

void attnc_col_sums(attnc_dtype dtype, void *out, const void *x, int64_t rows, int64_t n, int64_t rs) {
    if (dtype == ATTNC_FLOAT32)
        COL_SUMS(float);
    else
        COL_SUMS(double);
}
#undef COL_SUMS
