/* ntm_impl.h: typed kernels of ntm.c (see core/real.h). One block is one
 * batch element b; heads run in order inside it. Every pointer is to a
 * C-contiguous tensor; o[] are outputs, in[] inputs (NULL: absent). */
#include "../core/real.h"
#include "ntm_rows_impl.h"

typedef struct {
    REAL *o[8];
    const REAL *in[16];
    int64_t H, N, M, K;
    void *scratch; /* per worker: 2 N REALs (address backward only) */
} FN(ntm_job);

/* ---- tasks ---------------------------------------------------------------- */

/* content: o = {w}; in = {key, memory, beta}. */
static void FN(content_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    for (int64_t h = 0; h < H; h++)
        FN(content_row)(J->o[0] + (b * H + h) * N, J->in[0] + (b * H + h) * M,
                        J->in[1] + b * N * M, J->in[2][b * H + h], N, M);
}

/* o = {dkey, dmemory, dbeta}; in = {dw, key, memory, beta, w}. */
static void FN(content_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    REAL *dmem = J->o[1] + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        FN(content_row_backward)(J->o[0] + r * M, dmem, J->o[2] + r, J->in[0] + r * N,
                                 J->in[4] + r * N, J->in[1] + r * M, J->in[2] + b * N * M,
                                 J->in[3][r], N, M);
    }
}

/* o = {w}; in = {w_content, w_prev, g}. */
static void FN(interp_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        REAL g = J->in[2][r];
        for (int64_t i = 0; i < N; i++)
            J->o[0][r * N + i] = g * J->in[0][r * N + i] + (1 - g) * J->in[1][r * N + i];
    }
}

/* o = {dw_content, dw_prev, dg}; in = {dw, w_content, w_prev, g}. */
static void FN(interp_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        REAL g = J->in[3][r], dg = 0;
        for (int64_t i = 0; i < N; i++) {
            REAL d = J->in[0][r * N + i];
            J->o[0][r * N + i] = g * d;
            J->o[1][r * N + i] = (1 - g) * d;
            dg += d * (J->in[1][r * N + i] - J->in[2][r * N + i]);
        }
        J->o[2][r] = dg;
    }
}

/* o = {out}; in = {w, s}. */
static void FN(shift_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(shift_row)(J->o[0] + r * J->N, J->in[0] + r * J->N, J->in[1] + r * J->K, J->N, J->K);
    }
}

/* o = {dw, ds}; in = {dout, w, s}. */
static void FN(shift_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(shift_row_backward)(J->o[0] + r * J->N, J->o[1] + r * J->K, J->in[0] + r * J->N,
                               J->in[1] + r * J->N, J->in[2] + r * J->K, J->N, J->K);
    }
}

/* o = {out}; in = {w, gamma}. */
static void FN(sharpen_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(sharpen_row)(J->o[0] + r * J->N, J->in[0] + r * J->N, J->in[1][r], J->N);
    }
}

/* o = {dw, dgamma}; in = {dout, w, gamma, out}. */
static void FN(sharpen_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    for (int64_t h = 0; h < J->H; h++) {
        int64_t r = b * J->H + h;
        FN(sharpen_row_backward)(J->o[0] + r * J->N, J->o[1] + r, J->in[0] + r * J->N,
                                 J->in[1] + r * J->N, J->in[2][r], J->in[3] + r * J->N, J->N);
    }
}

/* o = {r}; in = {memory, w}. */
static void FN(read_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    FN(read_elem)(J->o[0] + b * H * M, J->in[0] + b * N * M, J->in[1] + b * H * N, H, N, M);
}

/* o = {dmemory, dw}; in = {dr, memory, w}. */
static void FN(read_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    REAL *dmem = J->o[0] + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    FN(read_elem_backward)(dmem, J->o[1] + b * H * N, J->in[0] + b * H * M, J->in[1] + b * N * M,
                           J->in[2] + b * H * N, H, N, M);
}


/* o = {out}; in = {memory, w, erase, add}. */
static void FN(write_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    FN(write_elem)(J->o[0] + b * N * M, J->in[0] + b * N * M, J->in[1] + b * H * N, J->in[2] + b * H * M,
                   J->in[3] + b * H * M, H, N, M);
}

/* o = {dmemory, dw, derase, dadd}; in = {dout, memory, w, erase, add}. */
static void FN(write_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    FN(write_elem_backward)(J->o[0] + b * N * M, J->o[1] + b * H * N, J->o[2] + b * H * M, J->o[3] + b * H * M,
                            J->in[0] + b * N * M, J->in[1] + b * N * M, J->in[2] + b * H * N,
                            J->in[3] + b * H * M, J->in[4] + b * H * M, H, N, M);
}

/* address: o = {w, w_c, w_g, w_t}; in = {key, beta, g, s, gamma, w_prev, memory}. */
static void FN(address_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M, K = J->K;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        FN(address_row)(J->o[0] + r * N, J->o[1] + r * N, J->o[2] + r * N, J->o[3] + r * N, J->in[0] + r * M,
                        J->in[6] + b * N * M, J->in[1][r], J->in[2][r], J->in[3] + r * K, J->in[4][r],
                        J->in[5] + r * N, N, M, K);
    }
}

/* address backward: o = {dkey, dbeta, dg, ds, dgamma, dw_prev, dmemory};
 * in = {key, beta, g, s, gamma, w_prev, memory, dw, dw_c, dw_g, dw_t, w, w_c, w_g, w_t}. */
static void FN(address_bwd_task)(void *arg, int64_t b, int worker) {
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M, K = J->K;
    const REAL *const *in = J->in;
    REAL *dmem = J->o[6] + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        FN(address_in) a = {.k = in[0] + r * M, .mem = in[6] + b * N * M, .s = in[3] + r * K,
                            .wprev = in[5] + r * N, .beta = in[1][r], .g = in[2][r], .gamma = in[4][r],
                            .w = in[11] + r * N, .wc = in[12] + r * N, .wg = in[13] + r * N, .wt = in[14] + r * N};
        FN(address_row_backward)(J->o[0] + r * M, J->o[1] + r, J->o[2] + r, J->o[3] + r * K, J->o[4] + r,
                                 J->o[5] + r * N, dmem, in[7] + r * N, in[8] ? in[8] + r * N : NULL,
                                 in[9] ? in[9] + r * N : NULL, in[10] ? in[10] + r * N : NULL, &a, N, M, K,
                                 (REAL *)J->scratch + (int64_t)worker * 2 * N);
    }
}

#include "../core/real_end.h"
