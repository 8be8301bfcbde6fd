/* ntm_impl.h: typed kernels of ntm.c (see core/real.h). One block is one
 * batch element b; heads run in order inside it. Every pointer is to a
 * C-contiguous tensor; o[] are outputs, in[] inputs (NULL: absent). */
#include "../../core/real.h"
#include "ntm_rows_impl.h"

#ifndef ATTNC_NTM_JOB /* one job for both dtypes (core/typed.h): defined once */
#define ATTNC_NTM_JOB
typedef struct {
    void *o[8];
    const void *in[16];
    int64_t H, N, M, K;
    void *scratch; /* per worker: 2 N elements (address backward only) */
} ntm_job;
#endif

/* The job's arrays as this dtype's. */
#define OUT(k) ((REAL *)J->o[k])
#define IN(k) ((const REAL *)J->in[k])

/* ---- tasks ---------------------------------------------------------------- */

/* content: o = {w}; in = {key, memory, beta}. */
static void FN(content_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    for (int64_t h = 0; h < H; h++)
        FN(content_row)(OUT(0) + (b * H + h) * N, IN(0) + (b * H + h) * M, IN(1) + b * N * M, IN(2)[b * H + h], N, M);
}

/* o = {dkey, dmemory, dbeta}; in = {dw, key, memory, beta, w}. */
static void FN(content_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    REAL *dmem = OUT(1) + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        FN(content_row_backward)(OUT(0) + r * M, dmem, OUT(2) + r, IN(0) + r * N, IN(4) + r * N, IN(1) + r * M,
                                 IN(2) + b * N * M, IN(3)[r], N, M);
    }
}

/* o = {w}; in = {w_content, w_prev, g}. */
static void FN(interp_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        REAL g = IN(2)[r];
        for (int64_t i = 0; i < N; i++) OUT(0)[r * N + i] = g * IN(0)[r * N + i] + (1 - g) * IN(1)[r * N + i];
    }
}

/* o = {dw_content, dw_prev, dg}; in = {dw, w_content, w_prev, g}. */
static void FN(interp_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        REAL g = IN(3)[r], dg = 0;
        for (int64_t i = 0; i < N; i++) {
            REAL d = IN(0)[r * N + i];
            OUT(0)[r * N + i] = g * d;
            OUT(1)[r * N + i] = (1 - g) * d;
            dg += d * (IN(1)[r * N + i] - IN(2)[r * N + i]);
        }
        OUT(2)[r] = dg;
    }
}

/* o = {out}; in = {w, s}. */
static void FN(shift_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(shift_row)(OUT(0) + r * J->N, IN(0) + r * J->N, IN(1) + r * J->K, J->N, J->K);
    }
}

/* o = {dw, ds}; in = {dout, w, s}. */
static void FN(shift_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(shift_row_backward)(OUT(0) + r * J->N, OUT(1) + r * J->K, IN(0) + r * J->N, IN(1) + r * J->N,
                               IN(2) + r * J->K, J->N, J->K);
    }
}

/* o = {out}; in = {w, gamma}. */
static void FN(sharpen_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(sharpen_row)(OUT(0) + r * J->N, IN(0) + r * J->N, IN(1)[r], J->N);
    }
}

/* o = {dw, dgamma}; in = {dout, w, gamma, out}. */
static void FN(sharpen_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(sharpen_row_backward)(OUT(0) + r * J->N, OUT(1) + r, IN(0) + r * J->N, IN(1) + r * J->N, IN(2)[r],
                                 IN(3) + r * J->N, J->N);
    }
}

/* o = {r}; in = {memory, w}. */
static void FN(read_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    FN(read_elem)(OUT(0) + b * H * M, IN(0) + b * N * M, IN(1) + b * H * N, H, N, M);
}

/* o = {dmemory, dw}; in = {dr, memory, w}. */
static void FN(read_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    REAL *dmem = OUT(0) + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    FN(read_elem_backward)(dmem, OUT(1) + b * H * N, IN(0) + b * H * M, IN(1) + b * N * M, IN(2) + b * H * N, H, N, M);
}


/* o = {out}; in = {memory, w, erase, add}. */
static void FN(write_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    FN(write_elem)(OUT(0) + b * N * M, IN(0) + b * N * M, IN(1) + b * H * N, IN(2) + b * H * M, IN(3) + b * H * M, H, N,
                   M);
}

/* o = {dmemory, dw, derase, dadd}; in = {dout, memory, w, erase, add}. */
static void FN(write_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    FN(write_elem_backward)(OUT(0) + b * N * M, OUT(1) + b * H * N, OUT(2) + b * H * M, OUT(3) + b * H * M,
                            IN(0) + b * N * M, IN(1) + b * N * M, IN(2) + b * H * N, IN(3) + b * H * M,
                            IN(4) + b * H * M, H, N, M);
}

/* address: o = {w, w_c, w_g, w_t}; in = {key, beta, g, s, gamma, w_prev, memory}. */
static void FN(address_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M, K = J->K;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        FN(address_row)(OUT(0) + r * N, OUT(1) + r * N, OUT(2) + r * N, OUT(3) + r * N, IN(0) + r * M,
                        IN(6) + b * N * M, IN(1)[r], IN(2)[r], IN(3) + r * K, IN(4)[r], IN(5) + r * N, N, M, K);
    }
}

/* address backward: o = {dkey, dbeta, dg, ds, dgamma, dw_prev, dmemory};
 * in = {key, beta, g, s, gamma, w_prev, memory, dw, dw_c, dw_g, dw_t, w, w_c, w_g, w_t}. */
static void FN(address_bwd_task)(void *arg, int64_t b, int worker) {
    const ntm_job *J = arg;
    int64_t H = J->H, N = J->N, M = J->M, K = J->K;
    REAL *dmem = OUT(6) + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        FN(address_in)
        a = {.k = IN(0) + r * M,
             .mem = IN(6) + b * N * M,
             .s = IN(3) + r * K,
             .wprev = IN(5) + r * N,
             .beta = IN(1)[r],
             .g = IN(2)[r],
             .gamma = IN(4)[r],
             .w = IN(11) + r * N,
             .wc = IN(12) + r * N,
             .wg = IN(13) + r * N,
             .wt = IN(14) + r * N};
        FN(address_row_backward)(OUT(0) + r * M, OUT(1) + r, OUT(2) + r, OUT(3) + r * K, OUT(4) + r, OUT(5) + r * N,
                                 dmem, IN(7) + r * N, IN(8) ? IN(8) + r * N : NULL, IN(9) ? IN(9) + r * N : NULL,
                                 IN(10) ? IN(10) + r * N : NULL, &a, N, M, K,
                                 (REAL *)J->scratch + (int64_t)worker * 2 * N);
    }
}

#undef OUT
#undef IN
#include "../../core/real_end.h"
