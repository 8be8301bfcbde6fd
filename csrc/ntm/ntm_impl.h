/* ntm_impl.h: typed kernels of ntm.c (see core/real.h). One block is one
 * batch element b; heads run in order inside it. Every pointer is to a
 * C-contiguous tensor; o[] are outputs, in[] inputs (NULL: absent). */
#include "../core/real.h"
#if ATTNC_F64
#define POW pow
#else
#define POW powf
#endif

typedef struct {
    REAL *o[8];
    const REAL *in[16];
    int64_t H, N, M, K;
    void *scratch; /* per worker: 2 N REALs (address backward only) */
} FN(ntm_job);

/* ---- rows (one head of one batch element) ------------------------------ */

/* w[N] <- softmax_i(beta cos(k, mem_i)); k[M], mem (N,M). */
static void FN(content_row)(REAL *w, const REAL *k, const REAL *mem, REAL beta, int64_t N,
                            int64_t M) {
    REAL kk = 0;
    for (int64_t j = 0; j < M; j++) kk += k[j] * k[j];
    REAL kn = SQRT(kk), mx = -INFINITY;
    for (int64_t i = 0; i < N; i++) {
        const REAL *m = mem + i * M;
        REAL dot = 0, mm = 0;
        for (int64_t j = 0; j < M; j++) dot += k[j] * m[j], mm += m[j] * m[j];
        REAL den = kn * SQRT(mm);
        if (!(den > (REAL)1e-8)) den = (REAL)1e-8;
        w[i] = beta * (dot / den);
        if (w[i] > mx) mx = w[i];
    }
    REAL sum = 0;
    for (int64_t i = 0; i < N; i++) sum += (w[i] = EXP(w[i] - mx));
    for (int64_t i = 0; i < N; i++) w[i] /= sum;
}

/* From dw[N] and w[N]: dk[M] (written), dmem (N,M) (added to), *dbeta. */
static void FN(content_row_backward)(REAL *dk, REAL *dmem, REAL *dbeta, const REAL *dw,
                                     const REAL *w, const REAL *k, const REAL *mem, REAL beta,
                                     int64_t N, int64_t M) {
    REAL kk = 0, dot_w = 0, db = 0;
    for (int64_t j = 0; j < M; j++) kk += k[j] * k[j], dk[j] = 0;
    for (int64_t i = 0; i < N; i++) dot_w += w[i] * dw[i];
    REAL kn = SQRT(kk);
    for (int64_t i = 0; i < N; i++) {
        const REAL *m = mem + i * M;
        REAL *dm = dmem + i * M;
        REAL dot = 0, mm = 0;
        for (int64_t j = 0; j < M; j++) dot += k[j] * m[j], mm += m[j] * m[j];
        REAL den = kn * SQRT(mm);
        bool clamped = !(den > (REAL)1e-8);
        if (clamped) den = (REAL)1e-8;
        REAL cos = dot / den;
        REAL dz = w[i] * (dw[i] - dot_w); /* softmax backward */
        db += dz * cos;
        REAL dc = beta * dz;
        /* d cos/dk = m/den - cos k/|k|^2, d cos/dm = k/den - cos m/|m|^2
         * (without the second terms where the denominator is clamped). */
        REAL ck = clamped ? 0 : cos / kk, cm = clamped ? 0 : cos / mm;
        for (int64_t j = 0; j < M; j++) {
            dk[j] += dc * (m[j] / den - ck * k[j]);
            dm[j] += dc * (k[j] / den - cm * m[j]);
        }
    }
    *dbeta = db;
}

/* out[i] = sum_k s[k] w[(i - k + c) mod N], c = (K-1)/2. */
static void FN(shift_row)(REAL *out, const REAL *w, const REAL *s, int64_t N, int64_t K) {
    int64_t c = (K - 1) / 2;
    for (int64_t i = 0; i < N; i++) {
        REAL acc = 0;
        for (int64_t k = 0; k < K; k++) acc += s[k] * w[(((i - k + c) % N) + N) % N];
        out[i] = acc;
    }
}

/* dw[N] and ds[K] (written) from dout[N]. */
static void FN(shift_row_backward)(REAL *dw, REAL *ds, const REAL *dout, const REAL *w,
                                   const REAL *s, int64_t N, int64_t K) {
    int64_t c = (K - 1) / 2;
    for (int64_t j = 0; j < N; j++) dw[j] = 0;
    for (int64_t k = 0; k < K; k++) {
        REAL acc = 0;
        for (int64_t i = 0; i < N; i++) {
            int64_t j = (((i - k + c) % N) + N) % N;
            acc += dout[i] * w[j];
            dw[j] += s[k] * dout[i];
        }
        ds[k] = acc;
    }
}

/* out[N] <- w^gamma / sum w^gamma; 0^gamma = 0; an all-zero row gives zeros. */
static void FN(sharpen_row)(REAL *out, const REAL *w, REAL gamma, int64_t N) {
    REAL sum = 0;
    for (int64_t i = 0; i < N; i++) sum += (out[i] = w[i] > 0 ? POW(w[i], gamma) : 0);
    for (int64_t i = 0; i < N; i++) out[i] = sum > 0 ? out[i] / sum : 0;
}

/* dw[N] (written), *dgamma from dout[N], the forward's out[N]. */
static void FN(sharpen_row_backward)(REAL *dw, REAL *dgamma, const REAL *dout, const REAL *w,
                                     REAL gamma, const REAL *out, int64_t N) {
    REAL sum = 0, dot = 0, dg = 0;
    for (int64_t i = 0; i < N; i++) sum += w[i] > 0 ? POW(w[i], gamma) : 0;
    if (!(sum > 0)) {
        for (int64_t i = 0; i < N; i++) dw[i] = 0;
        *dgamma = 0;
        return;
    }
    for (int64_t i = 0; i < N; i++) dot += out[i] * dout[i];
    for (int64_t i = 0; i < N; i++) {
        /* du_i = (dout_i - dot) / sum, u_i = w_i^gamma;
         * du/dw = gamma w^(gamma-1), du/dgamma = u ln w (0 at w = 0). */
        REAL du = (dout[i] - dot) / sum;
        if (w[i] > 0) {
            REAL u = out[i] * sum;
            dw[i] = du * gamma * POW(w[i], gamma - 1);
            dg += du * u * LOG(w[i]);
        } else {
            dw[i] = gamma == 1 ? du : 0;
        }
    }
    *dgamma = dg;
}

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
    const REAL *mem = J->in[0] + b * N * M;
    for (int64_t h = 0; h < H; h++) {
        REAL *r = J->o[0] + (b * H + h) * M;
        const REAL *w = J->in[1] + (b * H + h) * N;
        for (int64_t j = 0; j < M; j++) r[j] = 0;
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < M; j++) r[j] += w[i] * mem[i * M + j];
    }
}

/* o = {dmemory, dw}; in = {dr, memory, w}. */
static void FN(read_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    const REAL *mem = J->in[1] + b * N * M;
    REAL *dmem = J->o[0] + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    for (int64_t h = 0; h < H; h++) {
        const REAL *dr = J->in[0] + (b * H + h) * M, *w = J->in[2] + (b * H + h) * N;
        REAL *dw = J->o[1] + (b * H + h) * N;
        for (int64_t i = 0; i < N; i++) {
            REAL acc = 0;
            for (int64_t j = 0; j < M; j++) {
                acc += dr[j] * mem[i * M + j];
                dmem[i * M + j] += w[i] * dr[j];
            }
            dw[i] = acc;
        }
    }
}

/* prod over heads h' != skip of (1 - w_h'[i] e_h'[j]) (skip = -1: all). */
static REAL FN(keep)(const REAL *w, const REAL *e, int64_t H, int64_t N, int64_t M, int64_t i,
                     int64_t j, int64_t skip) {
    REAL p = 1;
    for (int64_t h = 0; h < H; h++)
        if (h != skip) p *= 1 - w[h * N + i] * e[h * M + j];
    return p;
}

/* o = {out}; in = {memory, w, erase, add}. */
static void FN(write_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    const REAL *mem = J->in[0] + b * N * M, *w = J->in[1] + b * H * N;
    const REAL *e = J->in[2] + b * H * M, *a = J->in[3] + b * H * M;
    REAL *out = J->o[0] + b * N * M;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < M; j++) {
            REAL add = 0;
            for (int64_t h = 0; h < H; h++) add += w[h * N + i] * a[h * M + j];
            out[i * M + j] = mem[i * M + j] * FN(keep)(w, e, H, N, M, i, j, -1) + add;
        }
}

/* o = {dmemory, dw, derase, dadd}; in = {dout, memory, w, erase, add}. */
static void FN(write_bwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M;
    const REAL *dout = J->in[0] + b * N * M, *mem = J->in[1] + b * N * M;
    const REAL *w = J->in[2] + b * H * N, *e = J->in[3] + b * H * M, *a = J->in[4] + b * H * M;
    REAL *dmem = J->o[0] + b * N * M, *dw = J->o[1] + b * H * N;
    REAL *de = J->o[2] + b * H * M, *da = J->o[3] + b * H * M;
    for (int64_t x = 0; x < H * N; x++) dw[x] = 0;
    for (int64_t x = 0; x < H * M; x++) de[x] = da[x] = 0;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < M; j++) {
            REAL d = dout[i * M + j], m = mem[i * M + j];
            dmem[i * M + j] = d * FN(keep)(w, e, H, N, M, i, j, -1);
            for (int64_t h = 0; h < H; h++) {
                REAL dm_rest = d * m * FN(keep)(w, e, H, N, M, i, j, h);
                dw[h * N + i] += a[h * M + j] * d - dm_rest * e[h * M + j];
                de[h * M + j] -= dm_rest * w[h * N + i];
                da[h * M + j] += d * w[h * N + i];
            }
        }
}

/* address: o = {w, w_c, w_g, w_t}; in = {key, beta, g, s, gamma, w_prev, memory}. */
static void FN(address_fwd_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M, K = J->K;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        REAL *w = J->o[0] + r * N, *wc = J->o[1] + r * N, *wg = J->o[2] + r * N,
             *wt = J->o[3] + r * N;
        const REAL *wp = J->in[5] + r * N;
        REAL g = J->in[2][r];
        FN(content_row)(wc, J->in[0] + r * M, J->in[6] + b * N * M, J->in[1][r], N, M);
        for (int64_t i = 0; i < N; i++) wg[i] = g * wc[i] + (1 - g) * wp[i];
        FN(shift_row)(wt, wg, J->in[3] + r * K, N, K);
        FN(sharpen_row)(w, wt, J->in[4][r], N);
    }
}

/* address backward: o = {dkey, dbeta, dg, ds, dgamma, dw_prev, dmemory};
 * in = {key, beta, g, s, gamma, w_prev, memory, dw, dw_c, dw_g, dw_t, w, w_c, w_g, w_t}. */
static void FN(address_bwd_task)(void *arg, int64_t b, int worker) {
    const FN(ntm_job) *J = arg;
    int64_t H = J->H, N = J->N, M = J->M, K = J->K;
    REAL *A = (REAL *)J->scratch + (int64_t)worker * 2 * N, *Bv = A + N;
    REAL *dmem = J->o[6] + b * N * M;
    for (int64_t x = 0; x < N * M; x++) dmem[x] = 0;
    for (int64_t h = 0; h < H; h++) {
        int64_t r = b * H + h;
        const REAL *wc = J->in[12] + r * N, *wg = J->in[13] + r * N, *wt = J->in[14] + r * N;
        REAL g = J->in[2][r];
        /* sharpen: A <- d w_t */
        FN(sharpen_row_backward)(A, J->o[4] + r, J->in[7] + r * N, wt, J->in[4][r],
                                 J->in[11] + r * N, N);
        if (J->in[10])
            for (int64_t i = 0; i < N; i++) A[i] += J->in[10][r * N + i];
        /* shift: Bv <- d w_g */
        FN(shift_row_backward)(Bv, J->o[3] + r * K, A, wg, J->in[3] + r * K, N, K);
        if (J->in[9])
            for (int64_t i = 0; i < N; i++) Bv[i] += J->in[9][r * N + i];
        /* interpolate: A <- d w_c */
        REAL dg = 0;
        for (int64_t i = 0; i < N; i++) {
            J->o[5][r * N + i] = (1 - g) * Bv[i];
            dg += Bv[i] * (wc[i] - J->in[5][r * N + i]);
            A[i] = g * Bv[i] + (J->in[8] ? J->in[8][r * N + i] : 0);
        }
        J->o[2][r] = dg;
        FN(content_row_backward)(J->o[0] + r * M, dmem, J->o[1] + r, A, wc, J->in[0] + r * M,
                                 J->in[6] + b * N * M, J->in[1][r], N, M);
    }
}

#undef POW
#include "../core/real_end.h"
