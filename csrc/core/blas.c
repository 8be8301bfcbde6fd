/* blas.c: strided views -> CBLAS row-major calls. */
#include "blas.h"

#include <cblas.h>
#include <pthread.h>
#include <string.h>

#include "../include/attnc.h"

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

/* Sizes and the K == 0 case (BLAS may leave C untouched when K is 0). */
#define GEMM_BODY(REAL, GEMM)                                                        \
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
    pthread_once(&blas_once, blas_init);                                           \
    enum CBLAS_TRANSPOSE opa, opb;                                                 \
    blasint lda, ldb;                                                              \
    layout(&a, trans_a, &opa, &lda);                                               \
    layout(&b, trans_b, &opb, &ldb);                                               \
    GEMM(CblasRowMajor, opa, opb, m, n, k, alpha, (const REAL *)a.p, lda,          \
         (const REAL *)b.p, ldb, beta, (REAL *)c.p, ldc);

void attnc_gemm_f32(bool trans_a, bool trans_b, float alpha, attnc_mat a, attnc_mat b,
                    float beta, attnc_mat c) {
    GEMM_BODY(float, scipy_cblas_sgemm)
}

void attnc_gemm_f64(bool trans_a, bool trans_b, double alpha, attnc_mat a, attnc_mat b,
                    double beta, attnc_mat c) {
    GEMM_BODY(double, scipy_cblas_dgemm)
}

const char *attnc_blas_info(void) { return scipy_openblas_get_config(); }
