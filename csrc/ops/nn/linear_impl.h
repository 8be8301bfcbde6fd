/* linear_impl.h: typed kernels of linear.c (see core/real.h). */
#include "../../core/real.h"

/* Rows [r0, r0 + n) of a matrix view. */
static attnc_mat FN(rows)(attnc_mat m, int64_t r0, int64_t n) {
    m.p = (REAL *)m.p + r0 * m.rs;
    m.rows = n;
    return m;
}

/* Columns [c0, c0 + n) of a matrix view. */
static attnc_mat FN(cols)(attnc_mat m, int64_t c0, int64_t n) {
    m.p = (REAL *)m.p + c0 * m.cs;
    m.cols = n;
    return m;
}

static void FN(forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    linear_job *j = arg;
    int64_t r0 = block * ROWS, n = j->x.rows - r0 < ROWS ? j->x.rows - r0 : ROWS;
    attnc_mat y = FN(rows)(j->y, r0, n);
    GEMM(false, true, 1, FN(rows)(j->x, r0, n), j->w, 0, y);
    const REAL *bias = j->bias;
    if (bias)
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < y.cols; o++) ((REAL *)y.p)[i * y.rs + o] += bias[o * j->bias_stride];
}

static void FN(dx_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    linear_job *j = arg;
    int64_t r0 = block * ROWS, n = j->dy.rows - r0 < ROWS ? j->dy.rows - r0 : ROWS;
    GEMM(false, false, 1, FN(rows)(j->dy, r0, n), j->w, 0, FN(rows)(j->dx, r0, n));
}

/* dW rows [o0, o0 + n) = dy[:, o0:o0+n]^T x; db[o0:o0+n] = column sums. */
static void FN(dw_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    linear_job *j = arg;
    int64_t o0 = block * ROWS, n = j->dy.cols - o0 < ROWS ? j->dy.cols - o0 : ROWS;
    attnc_mat dyc = FN(cols)(j->dy, o0, n);
    if (j->dw.p) GEMM(true, false, 1, dyc, j->x, 0, FN(rows)(j->dw, o0, n));
    if (j->dbias) { /* row by row, so dy is read along its rows */
        REAL *db = (REAL *)j->dbias + o0;
        for (int64_t o = 0; o < n; o++) db[o] = 0;
        for (int64_t r = 0; r < dyc.rows; r++) {
            const REAL *row = (const REAL *)dyc.p + r * dyc.rs;
            for (int64_t o = 0; o < n; o++) db[o] += row[o * dyc.cs];
        }
    }
}

#include "../../core/real_end.h"
