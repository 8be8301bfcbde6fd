/* layer_norm_impl.h: typed kernels of layer_norm.c (see core/real.h). Rows
 * of x (N, D): mean, rstd = 1 / sqrt(var + eps), xhat = (x - mean) rstd. */
#include "../core/real.h"

typedef struct {
    const attnc_tensor *x, *w, *b, *dy, *mean_in, *rstd_in;
    attnc_tensor *y, *mean, *rstd, *dx, *dw, *db;
    int64_t n, d;
    double eps;
} FN(ln_job);

#define AT(t, i, j) (((REAL *)(t)->data)[(i) * (t)->strides[0] + (j) * (t)->strides[1]])
#define VEC(t, i) (((REAL *)(t)->data)[(i) * (t)->strides[0]])

static void FN(ln_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(ln_job) *j = arg;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL mean = 0, var = 0;
        for (int64_t c = 0; c < j->d; c++) mean += AT(j->x, r, c);
        mean /= (REAL)j->d;
        for (int64_t c = 0; c < j->d; c++) {
            REAL t = AT(j->x, r, c) - mean;
            var += t * t;
        }
        REAL rstd = 1 / SQRT(var / (REAL)j->d + (REAL)j->eps);
        for (int64_t c = 0; c < j->d; c++) {
            REAL v = (AT(j->x, r, c) - mean) * rstd;
            if (attnc_present(j->w)) v *= VEC(j->w, c);
            if (attnc_present(j->b)) v += VEC(j->b, c);
            ((REAL *)j->y->data)[r * j->d + c] = v;
        }
        ((REAL *)j->mean->data)[r] = mean;
        ((REAL *)j->rstd->data)[r] = rstd;
    }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * weight. */
static void FN(ln_dx_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(ln_job) *j = arg;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL mean = VEC(j->mean_in, r), rstd = VEC(j->rstd_in, r), sg = 0, sgx = 0;
        for (int64_t c = 0; c < j->d; c++) {
            REAL g = AT(j->dy, r, c) * (attnc_present(j->w) ? VEC(j->w, c) : 1);
            sg += g;
            sgx += g * (AT(j->x, r, c) - mean) * rstd;
        }
        sg /= (REAL)j->d;
        sgx /= (REAL)j->d;
        for (int64_t c = 0; c < j->d; c++) {
            REAL g = AT(j->dy, r, c) * (attnc_present(j->w) ? VEC(j->w, c) : 1);
            REAL xhat = (AT(j->x, r, c) - mean) * rstd;
            ((REAL *)j->dx->data)[r * j->d + c] = rstd * (g - sg - xhat * sgx);
        }
    }
}

/* dweight, dbias: column sums over all rows, in row order. */
static void FN(ln_dparams_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(ln_job) *j = arg;
    for (int64_t c = block * ROWS; c < j->d && c < (block + 1) * ROWS; c++) {
        REAL sw = 0, sb = 0;
        for (int64_t r = 0; r < j->n; r++) {
            REAL g = AT(j->dy, r, c);
            sw += g * (AT(j->x, r, c) - VEC(j->mean_in, r)) * VEC(j->rstd_in, r);
            sb += g;
        }
        if (attnc_present(j->dw)) ((REAL *)j->dw->data)[c] = sw;
        if (attnc_present(j->db)) ((REAL *)j->db->data)[c] = sb;
    }
}

#undef AT
#undef VEC
#include "../core/real_end.h"
