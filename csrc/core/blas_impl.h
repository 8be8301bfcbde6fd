/* blas_impl.h: typed kernels of blas.c (see core/real.h). */
#include "real.h"

/* c (1, n) = alpha a (1, k) op(b) + beta c, looping along whichever of
 * op(b)'s dims has the unit stride (vectorised for the build's SIMD path). */
static void FN(row_times_matrix)(bool trans_a, bool trans_b, double alpha_, attnc_mat a, attnc_mat b, double beta_,
                                 attnc_mat c, int64_t n, int64_t k) {
    const REAL alpha = (REAL)alpha_, beta = (REAL)beta_;
    const REAL *restrict ap = a.p, *restrict bp = b.p;
    REAL *restrict cp = c.p;
    int64_t as = trans_a ? a.rs : a.cs; /* along k */
    int64_t bk = trans_b ? b.cs : b.rs, bj = trans_b ? b.rs : b.cs;
    if (bj == 1) { /* rows of op(b) contiguous: c += x row */
        for (int64_t j = 0; j < n; j++) cp[j] = beta == 0 ? 0 : beta * cp[j];
        for (int64_t q = 0; q < k; q++) {
            REAL x = alpha * ap[q * as];
            const REAL *row = bp + q * bk;
            for (int64_t j = 0; j < n; j++) cp[j] += x * row[j];
        }
    } else if (as == 1 && bk == 1) { /* contiguous dot products, 16 vector lanes */
        for (int64_t j = 0; j < n; j++) {
            const REAL *col = bp + j * bj;
            REAL lane[16] = {0}, dot = 0;
            int64_t q = 0;
            for (; q + 16 <= k; q += 16)
                for (int u = 0; u < 16; u++) lane[u] += ap[q + u] * col[q + u];
            for (int u = 0; u < 16; u++) dot += lane[u];
            for (; q < k; q++) dot += ap[q] * col[q];
            cp[j] = alpha * dot + (beta == 0 ? 0 : beta * cp[j]);
        }
    } else { /* a dot product per output, four partial sums */
        for (int64_t j = 0; j < n; j++) {
            const REAL *col = bp + j * bj;
            REAL acc[4] = {0, 0, 0, 0};
            int64_t q = 0;
            for (; q + 4 <= k; q += 4)
                for (int u = 0; u < 4; u++) acc[u] += ap[(q + u) * as] * col[(q + u) * bk];
            for (; q < k; q++) acc[0] += ap[q * as] * col[q * bk];
            REAL dot = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            cp[j] = alpha * dot + (beta == 0 ? 0 : beta * cp[j]);
        }
    }
}

/* out (n) <- the sums of x's rows (rows, n), row stride rs, in row order. */
static void FN(col_sums)(void *out, const void *x, int64_t rows, int64_t n, int64_t rs) {
    REAL *o = out;
    const REAL *p = x;
    for (int64_t k = 0; k < n; k++) o[k] = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < n; k++) o[k] += p[i * rs + k];
}

#include "real_end.h"
