/* pooling.c: attention pooling (Raffel & Ellis 2015; Yang et al. 2016),
 * forward and backward.
 *
 *   u_t = tanh(W h_t + b),  e_t = v . u_t,  alpha = masked softmax_t(e),
 *   c = sum_t alpha_t h_t.
 *
 * W h_t for every (b, t) is one product over the pool (fixed row blocks);
 * the rest runs per batch element in parallel. The parameter gradients are
 * products and column sums over all rows in row order, so results do not
 * depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

enum { ROWS = 256 }; /* rows per block of the products */

typedef struct {
    const void *h, *bias, *v, *dc, *dalpha;
    const uint8_t *mask; /* (B, T) or NULL */
    void *u, *alpha, *c, *dh, *dz, *de;
    int64_t T, d, A;
} pool_job;

#define ATTNC_F64 0
#include "pooling_impl.h"
#define ATTNC_F64 1
#include "pooling_impl.h"

static attnc_mat mat2(void *p, int64_t rows, int64_t cols) {
    attnc_mat m = {p, rows, cols, cols, 1};
    return m;
}

/* h (B, T, d), weight (A, d), v (A), bias (A) optional, mask (B, T) bool
 * optional: every array C-contiguous, one float dtype. */
static attnc_status check_inputs(const attnc_tensor *h, const attnc_tensor *weight, const attnc_tensor *bias,
                                 const attnc_tensor *v, const attnc_tensor *mask, int64_t *B, int64_t *T, int64_t *d,
                                 int64_t *A) {
    if (!attnc_present(h)) return attnc_fail(ATTNC_ERR_TYPE, "input is required");
    attnc_dtype dt = h->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    int64_t hs[3] = {-1, -1, -1}, ws[2] = {-1, -1};
    TRY(attnc_check_array(h, "input", dt, 3, hs, false));
    *B = hs[0], *T = hs[1], *d = hs[2];
    ws[1] = *d;
    TRY(attnc_check_array(weight, "weight", dt, 2, ws, false));
    *A = ws[0];
    TRY(attnc_check_array(v, "v", dt, 1, A, false));
    if (attnc_present(bias)) TRY(attnc_check_array(bias, "bias", dt, 1, A, false));
    if (attnc_present(mask)) {
        int64_t ms[2] = {*B, *T};
        TRY(attnc_check_array(mask, "mask", ATTNC_BOOL, 2, ms, false));
    }
    return ATTNC_OK;
}

attnc_status attnc_attention_pool_forward(attnc_tensor *c, attnc_tensor *alpha, attnc_tensor *u, const attnc_tensor *h,
                                          const attnc_tensor *weight, const attnc_tensor *bias, const attnc_tensor *v,
                                          const attnc_tensor *mask) {
    int64_t B = 0, T = 0, d = 0, A = 0;
    TRY(check_inputs(h, weight, bias, v, mask, &B, &T, &d, &A));
    attnc_dtype dt = h->dtype;
    TRY(ATTNC_NEED(c, "output", dt, true, B, d));
    TRY(ATTNC_NEED(alpha, "weights", dt, true, B, T));
    TRY(ATTNC_NEED(u, "saved", dt, true, B, T, A));
    int64_t N = B * T;
    if (N == 0) {
        memset(c->data, 0, (size_t)(B * d) * attnc_dtype_size(dt));
        return ATTNC_OK;
    }
    /* u <- h W^T, (B T, A) */
    attnc_gemm_rows(dt, false, true, 1, mat2(h->data, N, d), mat2(weight->data, A, d), 0, mat2(u->data, N, A), ROWS);
    pool_job job = {.h = h->data,
                    .bias = attnc_present(bias) ? bias->data : NULL,
                    .v = v->data,
                    .mask = attnc_present(mask) ? mask->data : NULL,
                    .u = u->data,
                    .alpha = alpha->data,
                    .c = c->data,
                    .T = T,
                    .d = d,
                    .A = A};
    attnc_parallel_for(B, attnc_workers_for(N * (A + d)), ATTNC_TYPED(dt, pool_forward_task), &job);
    return ATTNC_OK;
}

attnc_status attnc_attention_pool_backward(attnc_tensor *dh, attnc_tensor *dweight, attnc_tensor *dbias,
                                           attnc_tensor *dv, const attnc_tensor *dc, const attnc_tensor *dalpha,
                                           const attnc_tensor *h, const attnc_tensor *weight, const attnc_tensor *v,
                                           const attnc_tensor *alpha, const attnc_tensor *u) {
    int64_t B = 0, T = 0, d = 0, A = 0;
    TRY(check_inputs(h, weight, NULL, v, NULL, &B, &T, &d, &A));
    attnc_dtype dt = h->dtype;
    TRY(ATTNC_NEED(dc, "doutput", dt, false, B, d));
    if (attnc_present(dalpha)) TRY(ATTNC_NEED(dalpha, "dweights", dt, false, B, T));
    TRY(ATTNC_NEED(alpha, "weights", dt, false, B, T));
    TRY(ATTNC_NEED(u, "saved", dt, false, B, T, A));
    if (attnc_present(dh)) TRY(ATTNC_NEED(dh, "dinput", dt, true, B, T, d));
    if (attnc_present(dweight)) TRY(ATTNC_NEED(dweight, "dweight", dt, true, A, d));
    if (attnc_present(dbias)) TRY(ATTNC_NEED(dbias, "dbias", dt, true, A));
    if (attnc_present(dv)) TRY(ATTNC_NEED(dv, "dv", dt, true, A));
    int64_t N = B * T;
    size_t es = attnc_dtype_size(dt);
    /* dz (N, A) then de (N) in one allocation */
    size_t bytes = (size_t)(N * A + N) * es;
    void *scratch = malloc(bytes ? bytes : 1);
    if (!scratch) return attnc_fail_nomem("attention pooling scratch", bytes);
    void *dz = scratch, *de = (char *)scratch + (size_t)(N * A) * es;
    pool_job job = {.h = h->data,
                    .v = v->data,
                    .dc = dc->data,
                    .dalpha = attnc_present(dalpha) ? dalpha->data : NULL,
                    .u = u->data,
                    .alpha = alpha->data,
                    .dh = attnc_present(dh) ? dh->data : NULL,
                    .dz = dz,
                    .de = de,
                    .T = T,
                    .d = d,
                    .A = A};
    if (N > 0) attnc_parallel_for(B, attnc_workers_for(N * (A + d)), ATTNC_TYPED(dt, pool_backward_task), &job);
    /* dh += dz W; dW = dz^T h; db = column sums of dz; dv = de^T u */
    if (attnc_present(dh) && N > 0)
        attnc_gemm_rows(dt, false, false, 1, mat2(dz, N, A), mat2(weight->data, A, d), 1, mat2(dh->data, N, d), ROWS);
    if (attnc_present(dweight))
        attnc_gemm_rows(dt, true, false, 1, mat2(dz, N, A), mat2(h->data, N, d), 0, mat2(dweight->data, A, d), ROWS);
    if (attnc_present(dbias)) attnc_col_sums(dt, dbias->data, dz, N, A, A);
    if (attnc_present(dv))
        attnc_gemm_rows(dt, true, false, 1, mat2(de, N, 1), mat2(u->data, N, A), 0, mat2(dv->data, 1, A), ROWS);
    free(scratch);
    return ATTNC_OK;
}
