/* ntm_rows_impl.h: the NTM's operations on one batch element, typed (see
 * core/real.h; include after real.h). Shared by the operations' kernels
 * (ntm_impl.h) and the NTM model's time loop (model_impl.h). Every pointer
 * is to a C-contiguous array; "row" functions work on one head, "elem"
 * functions on all H heads of one batch element. */
#if ATTNC_F64
#define POW pow
#else
#define POW powf
#endif

/* ---- one head ------------------------------------------------------------- */

/* w[N] <- softmax_i(beta cos(k, mem_i)); k[M], mem (N,M). */
static inline void FN(content_row)(REAL *w, const REAL *k, const REAL *mem, REAL beta, int64_t N, int64_t M) {
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
static inline void FN(content_row_backward)(REAL *dk, REAL *dmem, REAL *dbeta, const REAL *dw, const REAL *w,
                                            const REAL *k, const REAL *mem, REAL beta, int64_t N, int64_t M) {
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
        REAL ck = clamped ? 0 : cos / kk, cm = clamped ? 0 : cos / mm, inv = 1 / den;
        for (int64_t j = 0; j < M; j++) {
            dk[j] += dc * (m[j] * inv - ck * k[j]);
            dm[j] += dc * (k[j] * inv - cm * m[j]);
        }
    }
    *dbeta = db;
}

/* out[i] = sum_k s[k] w[(i - k + c) mod N], c = (K-1)/2. For each k the
 * source index is i + d (wrapped once), d = (c - k) mod N. */
static inline void FN(shift_row)(REAL *out, const REAL *w, const REAL *s, int64_t N, int64_t K) {
    int64_t c = (K - 1) / 2;
    for (int64_t i = 0; i < N; i++) out[i] = 0;
    for (int64_t k = 0; k < K; k++) {
        int64_t d = (((c - k) % N) + N) % N;
        for (int64_t i = 0; i < N - d; i++) out[i] += s[k] * w[i + d];
        for (int64_t i = N - d; i < N; i++) out[i] += s[k] * w[i + d - N];
    }
}

/* dw[N] and ds[K] (written) from dout[N]. */
static inline void FN(shift_row_backward)(REAL *dw, REAL *ds, const REAL *dout, const REAL *w, const REAL *s, int64_t N,
                                          int64_t K) {
    int64_t c = (K - 1) / 2;
    for (int64_t j = 0; j < N; j++) dw[j] = 0;
    for (int64_t k = 0; k < K; k++) {
        int64_t d = (((c - k) % N) + N) % N;
        REAL acc = 0;
        for (int64_t i = 0; i < N - d; i++) {
            acc += dout[i] * w[i + d];
            dw[i + d] += s[k] * dout[i];
        }
        for (int64_t i = N - d; i < N; i++) {
            acc += dout[i] * w[i + d - N];
            dw[i + d - N] += s[k] * dout[i];
        }
        ds[k] = acc;
    }
}

/* The largest entry of w (N), 0 for an empty or all-zero row. */
static inline REAL FN(row_max)(const REAL *w, int64_t N) {
    REAL mx = 0;
    for (int64_t i = 0; i < N; i++)
        if (w[i] > mx) mx = w[i];
    return mx;
}

/* out[N] <- w^gamma / sum w^gamma; 0^gamma = 0; an all-zero row gives zeros.
 * Computed as (w / max w)^gamma normalised, so a large gamma on a flat row
 * (1/128 to the power 21 is below float's range) does not underflow to 0. */
static inline void FN(sharpen_row)(REAL *out, const REAL *w, REAL gamma, int64_t N) {
    REAL mx = FN(row_max)(w, N), sum = 0;
    if (!(mx > 0)) {
        for (int64_t i = 0; i < N; i++) out[i] = 0;
        return;
    }
    for (int64_t i = 0; i < N; i++) sum += (out[i] = w[i] > 0 ? POW(w[i] / mx, gamma) : 0);
    for (int64_t i = 0; i < N; i++) out[i] /= sum;
}

/* dw[N] (written), *dgamma from dout[N], the forward's out[N]. With
 * v = w / max w and S = sum v^gamma: d out_i / d w_j = gamma v_j^(gamma-1) /
 * (max w S) (delta_ij - out_i), exact at w_j = 0 too (1 / sum w when gamma =
 * 1, else 0); d out_i / d gamma = out_i (ln w_i - sum_j out_j ln w_j). */
static inline void FN(sharpen_row_backward)(REAL *dw, REAL *dgamma, const REAL *dout, const REAL *w, REAL gamma,
                                            const REAL *out, int64_t N) {
    REAL mx = FN(row_max)(w, N), sum = 0, dot = 0, dg = 0;
    if (!(mx > 0)) {
        for (int64_t i = 0; i < N; i++) dw[i] = 0;
        *dgamma = 0;
        return;
    }
    for (int64_t i = 0; i < N; i++) sum += w[i] > 0 ? POW(w[i] / mx, gamma) : 0;
    for (int64_t i = 0; i < N; i++) dot += out[i] * dout[i];
    REAL scale = gamma / (mx * sum);
    for (int64_t i = 0; i < N; i++) {
        REAL du = dout[i] - dot;
        dw[i] = du * scale * (w[i] > 0 ? POW(w[i] / mx, gamma - 1) : gamma == 1 ? 1 : 0);
        if (w[i] > 0) dg += du * out[i] * LOG(w[i] / mx);
    }
    *dgamma = dg;
}

/* The whole pipeline of one head: wc <- content(k, mem, beta), wg <- g wc +
 * (1 - g) wprev, wt <- shift(wg, s), w <- sharpen(wt, gamma); all (N). */
static inline void FN(address_row)(REAL *w, REAL *wc, REAL *wg, REAL *wt, const REAL *k, const REAL *mem, REAL beta,
                                   REAL g, const REAL *s, REAL gamma, const REAL *wprev, int64_t N, int64_t M,
                                   int64_t K) {
    FN(content_row)(wc, k, mem, beta, N, M);
    for (int64_t i = 0; i < N; i++) wg[i] = g * wc[i] + (1 - g) * wprev[i];
    FN(shift_row)(wt, wg, s, N, K);
    FN(sharpen_row)(w, wt, gamma, N);
}

/* The inputs and forward values of one head's address_row. */
typedef struct {
    const REAL *k, *mem, *s, *wprev;
    REAL beta, g, gamma;
    const REAL *w, *wc, *wg, *wt;
} FN(address_in);

/* Backward of address_row from dw (N) and the optional cotangents of the
 * intermediates dwc, dwg, dwt (NULL: none): dk (M), ds (K), dwprev (N) and
 * the scalars are written; dmem (N, M) is added to. tmp: 2 N scratch. */
static inline void FN(address_row_backward)(REAL *dk, REAL *dbeta, REAL *dg, REAL *ds, REAL *dgamma, REAL *dwprev,
                                            REAL *dmem, const REAL *dw, const REAL *dwc, const REAL *dwg,
                                            const REAL *dwt, const FN(address_in) * a, int64_t N, int64_t M, int64_t K,
                                            REAL *tmp) {
    REAL *A = tmp, *Bv = tmp + N;
    /* sharpen: A <- d wt */
    FN(sharpen_row_backward)(A, dgamma, dw, a->wt, a->gamma, a->w, N);
    if (dwt)
        for (int64_t i = 0; i < N; i++) A[i] += dwt[i];
    /* shift: Bv <- d wg */
    FN(shift_row_backward)(Bv, ds, A, a->wg, a->s, N, K);
    if (dwg)
        for (int64_t i = 0; i < N; i++) Bv[i] += dwg[i];
    /* interpolate: A <- d wc */
    REAL acc = 0;
    for (int64_t i = 0; i < N; i++) {
        dwprev[i] = (1 - a->g) * Bv[i];
        acc += Bv[i] * (a->wc[i] - a->wprev[i]);
        A[i] = a->g * Bv[i] + (dwc ? dwc[i] : 0);
    }
    *dg = acc;
    FN(content_row_backward)(dk, dmem, dbeta, A, a->wc, a->k, a->mem, a->beta, N, M);
}

/* ---- all heads of one batch element ------------------------------------------- */

/* r (H, M) <- w (H, N) mem (N, M). */
static inline void FN(read_elem)(REAL *r, const REAL *mem, const REAL *w, int64_t H, int64_t N, int64_t M) {
    for (int64_t h = 0; h < H; h++) {
        REAL *rh = r + h * M;
        for (int64_t j = 0; j < M; j++) rh[j] = 0;
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < M; j++) rh[j] += w[h * N + i] * mem[i * M + j];
    }
}

/* dw (H, N) written, dmem (N, M) added to, from dr (H, M). */
static inline void FN(read_elem_backward)(REAL *dmem, REAL *dw, const REAL *dr, const REAL *mem, const REAL *w,
                                          int64_t H, int64_t N, int64_t M) {
    for (int64_t h = 0; h < H; h++) {
        const REAL *drh = dr + h * M, *wh = w + h * N;
        for (int64_t i = 0; i < N; i++) {
            REAL acc = 0;
            for (int64_t j = 0; j < M; j++) {
                acc += drh[j] * mem[i * M + j];
                dmem[i * M + j] += wh[i] * drh[j];
            }
            dw[h * N + i] = acc;
        }
    }
}

/* prod over heads h' != skip of (1 - w_h'[i] e_h'[j]) (skip = -1: all). */
static inline REAL FN(keep)(const REAL *w, const REAL *e, int64_t H, int64_t N, int64_t M, int64_t i, int64_t j,
                            int64_t skip) {
    REAL p = 1;
    for (int64_t h = 0; h < H; h++)
        if (h != skip) p *= 1 - w[h * N + i] * e[h * M + j];
    return p;
}

/* out (N, M) <- mem o prod_h (1 - w_h e_h^T) + sum_h w_h a_h^T; w (H, N), e and a (H, M). */
static inline void FN(write_elem)(REAL *out, const REAL *mem, const REAL *w, const REAL *e, const REAL *a, int64_t H,
                                  int64_t N, int64_t M) {
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < M; j++) {
            REAL add = 0;
            for (int64_t h = 0; h < H; h++) add += w[h * N + i] * a[h * M + j];
            out[i * M + j] = mem[i * M + j] * FN(keep)(w, e, H, N, M, i, j, -1) + add;
        }
}

/* dmem (N, M), dw (H, N), de and da (H, M), all written, from dout (N, M). */
static inline void FN(write_elem_backward)(REAL *dmem, REAL *dw, REAL *de, REAL *da, const REAL *dout, const REAL *mem,
                                           const REAL *w, const REAL *e, const REAL *a, int64_t H, int64_t N,
                                           int64_t M) {
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

#undef POW
