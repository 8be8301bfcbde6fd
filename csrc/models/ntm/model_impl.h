/* model_impl.h: typed kernels of model.c (see core/real.h and model.h):
 * the time loop of one block of rows, forward and backward. */
#include <math.h>
#include <string.h>

#include "../../core/real.h"
#include "../../core/matmul_impl.h"
#include "../../core/lstm_cell_impl.h"
#include "ntm_rows_impl.h"

#if ATTNC_F64
#define LOG1P log1p
#else
#define LOG1P log1pf
#endif

/* Row b's slot of step t; rows of one step are slot_rs apart. */
static inline REAL *FN(slot)(const ntm_job *J, REAL *ring, int64_t b, int64_t b0, int64_t t) {
    const ntm_run *x = J->x;
    return J->saved ? (REAL *)J->saved + (b * x->T + t) * x->S : ring + ((b - b0) * 2 + (t & 1)) * x->S;
}
static inline int64_t FN(slot_rs)(const ntm_job *J) { return J->saved ? J->x->T * J->x->S : 2 * J->x->S; }

/* ---- head parameters ------------------------------------------------------------ */

static inline REAL FN(clamp)(REAL p, REAL c) { return p > c ? c : p < -c ? -c : p; }
static inline REAL FN(softplus)(REAL v) { return v > 0 ? v + LOG1P(EXP(-v)) : LOG1P(EXP(v)); }

/* The offset of head h's chunk in p (read heads first). */
static inline int64_t FN(head_at)(const ntm_run *x, int64_t h) {
    int64_t rd = x->M + x->K + 3;
    return h < x->R ? h * rd : x->R * rd + (h - x->R) * (rd + 2 * x->M);
}

/* One head's activated parameters. */
typedef struct {
    REAL beta, g, gamma;
    REAL *key, *s; /* (M), (K): scratch */
} FN(head);

/* hd <- the activations of head h's chunk of the raw p (clamped first). */
static void FN(activate)(FN(head) * hd, const ntm_run *x, const REAL *p, int64_t h) {
    REAL c = (REAL)x->clip;
    const REAL *q = p + FN(head_at)(x, h);
    int64_t M = x->M, K = x->K;
    for (int64_t j = 0; j < M; j++) hd->key[j] = FN(clamp)(q[j], c);
    hd->beta = FN(softplus)(FN(clamp)(q[M], c));
    hd->g = FN(sigmoid)(FN(clamp)(q[M + 1], c));
    REAL mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < K; k++) {
        hd->s[k] = FN(clamp)(q[M + 2 + k], c);
        if (hd->s[k] > mx) mx = hd->s[k];
    }
    for (int64_t k = 0; k < K; k++) sum += (hd->s[k] = EXP(hd->s[k] - mx));
    for (int64_t k = 0; k < K; k++) hd->s[k] /= sum;
    hd->gamma = 1 + FN(softplus)(FN(clamp)(q[M + 2 + K], c));
}

/* A write head's erase (sigmoid) and add (tanh) vectors (M each). */
static void FN(erase_add)(REAL *e, REAL *a, const ntm_run *x, const REAL *p, int64_t h) {
    REAL c = (REAL)x->clip;
    const REAL *q = p + FN(head_at)(x, h) + x->M + x->K + 3;
    for (int64_t j = 0; j < x->M; j++) {
        e[j] = FN(sigmoid)(FN(clamp)(q[j], c));
        a[j] = FN(tanh_)(FN(clamp)(q[x->M + j], c));
    }
}

/* dq (the cotangent of the raw p, head h's chunk) <- the cotangents of the
 * activated parameters; zero where the clamp was active. */
static void FN(activate_backward)(REAL *dp, const ntm_run *x, const REAL *p, int64_t h, const FN(head) * hd,
                                  const REAL *dkey, REAL dbeta, REAL dg, const REAL *ds, REAL dgamma, const REAL *e,
                                  const REAL *a, const REAL *de, const REAL *da) {
    REAL c = (REAL)x->clip;
    int64_t at = FN(head_at)(x, h), M = x->M, K = x->K;
    const REAL *q = p + at;
    REAL *dq = dp + at;
    dq[M] = dbeta * FN(sigmoid)(FN(clamp)(q[M], c)); /* softplus' = sigmoid */
    dq[M + 1] = dg * hd->g * (1 - hd->g);
    REAL dot = 0;
    for (int64_t k = 0; k < K; k++) dot += hd->s[k] * ds[k];
    for (int64_t k = 0; k < K; k++) dq[M + 2 + k] = hd->s[k] * (ds[k] - dot);
    dq[M + 2 + K] = dgamma * FN(sigmoid)(FN(clamp)(q[M + 2 + K], c));
    for (int64_t j = 0; j < M; j++) dq[j] = dkey[j];
    int64_t n = M + K + 3;
    if (e) {
        for (int64_t j = 0; j < M; j++) {
            dq[n + j] = de[j] * e[j] * (1 - e[j]);
            dq[n + M + j] = da[j] * (1 - a[j] * a[j]);
        }
        n += 2 * M;
    }
    for (int64_t j = 0; j < n; j++)
        if (!(q[j] >= -c && q[j] <= c)) dq[j] = 0;
}

/* ---- forward ------------------------------------------------------------------- */

/* The controller of step t for rows [b0, b0 + n): z, hprev, gates, c and h
 * of every row's slot. */
static void FN(controller_forward)(const ntm_job *J, REAL *ring, int64_t b0, int64_t n, int64_t t) {
    const ntm_run *x = J->x;
    int64_t rs = FN(slot_rs)(J), C = x->C, I = x->I, RM = x->R * x->M;
    for (int64_t b = b0; b < b0 + n; b++) {
        REAL *s = FN(slot)(J, ring, b, b0, t);
        const REAL *prev = t ? FN(slot)(J, ring, b, b0, t - 1) : NULL;
        memcpy(s + x->z, (const REAL *)J->inputs + (b * x->T + t) * I, (size_t)I * sizeof(REAL));
        memcpy(s + x->z + I, prev ? prev + x->hr + C : (const REAL *)J->r0 + b * RM, (size_t)RM * sizeof(REAL));
        if (x->lstm) {
            if (prev)
                memcpy(s + x->hprev, prev + x->hr, (size_t)C * sizeof(REAL));
            else
                memset(s + x->hprev, 0, (size_t)C * sizeof(REAL));
            const REAL *b_ih = J->b_ih, *b_hh = J->b_hh;
            for (int64_t k = 0; k < 4 * C; k++) s[x->gates + k] = b_ih[k] + b_hh[k];
        } else {
            memcpy(s + x->hr, J->b_ih, (size_t)C * sizeof(REAL));
        }
    }
    REAL *s0 = FN(slot)(J, ring, b0, b0, t);
    int64_t pre = x->lstm ? x->gates : x->hr;
    FN(times_wt)(s0 + x->z, rs, J->w_ih, x->G, x->Z, 1, s0 + pre, rs, n);
    if (x->lstm && t) FN(times_wt)(s0 + x->hprev, rs, J->w_hh, x->G, C, 1, s0 + pre, rs, n);
    for (int64_t b = b0; b < b0 + n; b++) {
        REAL *s = FN(slot)(J, ring, b, b0, t), *h = s + x->hr;
        if (!x->lstm) {
            for (int64_t k = 0; k < C; k++) h[k] = FN(tanh_)(h[k]);
            continue;
        }
        const REAL *cprev = t ? FN(slot)(J, ring, b, b0, t - 1) + x->c : NULL;
        FN(lstm_cell_forward)(s + x->gates, NULL, cprev, s + x->c, h, C);
    }
}

/* Addressing, reading and writing of step t for row b (its slot s). */
static void FN(memory_forward)(const ntm_job *J, REAL *ring, int64_t b, int64_t b0, int64_t t, REAL *work) {
    const ntm_run *x = J->x;
    int64_t N = x->N, M = x->M, R = x->R, W = x->W, Hh = x->Hh, K = x->K, T = x->T;
    REAL *s = FN(slot)(J, ring, b, b0, t);
    const REAL *wprev = t ? FN(slot)(J, ring, b, b0, t - 1) + x->w : (const REAL *)J->w0 + b * Hh * N;
    const REAL *mem = s + x->mem;
    REAL *E = work, *A = E + W * M;
    FN(head) hd = {.key = A + W * M, .s = A + W * M + M};
    for (int64_t h = 0; h < Hh; h++) {
        FN(activate)(&hd, x, s + x->p, h);
        FN(address_row)(s + x->w + h * N, s + x->wc + h * N, s + x->wg + h * N, s + x->wt + h * N, hd.key, mem, hd.beta,
                        hd.g, hd.s, hd.gamma, wprev + h * N, N, M, K);
        if (h >= R) FN(erase_add)(E + (h - R) * M, A + (h - R) * M, x, s + x->p, h);
    }
    FN(read_elem)(s + x->hr + x->C, mem, s + x->w, R, N, M);
    /* M_t goes to the next step's slot, or (last step) to the scratch after the head buffers. */
    REAL *next = t + 1 < T ? FN(slot)(J, ring, b, b0, t + 1) + x->mem : hd.s + K;
    if (W)
        FN(write_elem)(next, mem, s + x->w + R * N, E, A, W, N, M);
    else
        memcpy(next, mem, (size_t)(N * M) * sizeof(REAL));
    if (J->weights) memcpy((REAL *)J->weights + (b * T + t) * Hh * N, s + x->w, (size_t)(Hh * N) * sizeof(REAL));
    if (J->memories) memcpy((REAL *)J->memories + (b * T + t) * N * M, next, (size_t)(N * M) * sizeof(REAL));
}

/* Rows [block NTM_ROWS, ...) through every step. */
static void FN(ntm_forward_task)(void *arg, int64_t block, int worker) {
    const ntm_job *J = arg;
    const ntm_run *x = J->x;
    int64_t b0 = block * NTM_ROWS, n = x->B - b0 < NTM_ROWS ? x->B - b0 : NTM_ROWS;
    REAL *work = (REAL *)J->scratch + (int64_t)worker * x->scratch;
    REAL *ring = J->saved ? NULL : work, *heads = work + (J->saved ? 0 : 2 * NTM_ROWS * x->S);
    int64_t rs = FN(slot_rs)(J), NM = x->N * x->M;
    for (int64_t b = b0; b < b0 + n; b++)
        memcpy(FN(slot)(J, ring, b, b0, 0) + x->mem, (const REAL *)J->mem0 + b * NM, (size_t)NM * sizeof(REAL));
    for (int64_t t = 0; t < x->T; t++) {
        FN(controller_forward)(J, ring, b0, n, t);
        REAL *s0 = FN(slot)(J, ring, b0, b0, t);
        for (int64_t b = b0; b < b0 + n; b++)
            memcpy(FN(slot)(J, ring, b, b0, t) + x->p, J->head_b, (size_t)x->P * sizeof(REAL));
        FN(times_wt)(s0 + x->hr, rs, J->head_w, x->P, x->C, 1, s0 + x->p, rs, n);
        for (int64_t b = b0; b < b0 + n; b++) FN(memory_forward)(J, ring, b, b0, t, heads);
        REAL *y = (REAL *)J->logits + (b0 * x->T + t) * x->O;
        for (int64_t b = 0; b < n; b++) memcpy(y + b * x->T * x->O, J->out_b, (size_t)x->O * sizeof(REAL));
        FN(times_wt)(s0 + x->hr, rs, J->out_w, x->O, x->HR, 1, y, x->T * x->O, n);
    }
}

/* ---- backward ------------------------------------------------------------------ */

/* The per-row carries of the backward (each row's part of the block's scratch). */
typedef struct {
    REAL *dM; /* (N, M): the cotangent of M_t, then of M_{t-1}     */
    REAL *dw; /* (Hh, N): of w_t (from step t + 1's interpolation) */
    REAL *dr; /* (R M): of r_t (from z_{t+1})                      */
    REAL *dc; /* (C): of c_t (LSTM)                                */
} FN(carry);

/* Memory, addressing and head activations of step t, backward, for row b:
 * dM, dw, dr of the carry move from step t to step t - 1; the row's dP is
 * written. dr_out (R M) is the cotangent of r_t from the output layer. */
static void FN(memory_backward)(const ntm_job *J, const FN(carry) * cy, const REAL *s, const REAL *wprev,
                                const REAL *dr_out, REAL *dp, REAL *work) {
    const ntm_run *x = J->x;
    int64_t N = x->N, M = x->M, R = x->R, W = x->W, Hh = x->Hh, K = x->K;
    const REAL *mem = s + x->mem, *w = s + x->w;
    REAL *E = work, *A = E + W * M, *dE = A + W * M, *dA = dE + W * M, *dW = dA + W * M;
    REAL *dk = dW + Hh * N, *ds = dk + M, *tmp = ds + K;
    FN(head) hd = {.key = tmp + 2 * N, .s = tmp + 2 * N + M};
    for (int64_t h = R; h < Hh; h++) FN(erase_add)(E + (h - R) * M, A + (h - R) * M, x, s + x->p, h);
    /* write: dM becomes the cotangent of M_{t-1} (in place: each entry is read before it is written) */
    if (W) FN(write_elem_backward)(cy->dM, dW + R * N, dE, dA, cy->dM, mem, w + R * N, E, A, W, N, M);
    for (int64_t j = 0; j < R * M; j++) cy->dr[j] += dr_out[j];
    FN(read_elem_backward)(cy->dM, dW, cy->dr, mem, w, R, N, M);
    for (int64_t h = 0; h < Hh; h++) {
        FN(activate)(&hd, x, s + x->p, h);
        for (int64_t i = 0; i < N; i++) dW[h * N + i] += cy->dw[h * N + i];
        FN(address_in)
        a = {.k = hd.key,
             .mem = mem,
             .s = hd.s,
             .wprev = wprev + h * N,
             .beta = hd.beta,
             .g = hd.g,
             .gamma = hd.gamma,
             .w = w + h * N,
             .wc = s + x->wc + h * N,
             .wg = s + x->wg + h * N,
             .wt = s + x->wt + h * N};
        REAL dbeta, dg, dgamma;
        FN(address_row_backward)(dk, &dbeta, &dg, ds, &dgamma, cy->dw + h * N, cy->dM, dW + h * N, NULL, NULL, NULL, &a,
                                 N, M, K, tmp);
        bool wr = h >= R;
        FN(activate_backward)(dp, x, s + x->p, h, &hd, dk, dbeta, dg, ds, dgamma, wr ? E + (h - R) * M : NULL,
                              wr ? A + (h - R) * M : NULL, wr ? dE + (h - R) * M : NULL, wr ? dA + (h - R) * M : NULL);
    }
}

/* The controller of step t backward for row b: dG (pre-activations) from dh
 * (the cotangent of h_t, all of it) and the carried dc. */
static void FN(controller_backward)(const ntm_job *J, const FN(carry) * cy, const REAL *s, const REAL *prev,
                                    const REAL *dh, REAL *dg) {
    const ntm_run *x = J->x;
    int64_t C = x->C;
    const REAL *h = s + x->hr;
    if (!x->lstm) {
        for (int64_t k = 0; k < C; k++) dg[k] = dh[k] * (1 - h[k] * h[k]);
        return;
    }
    FN(lstm_cell_backward)(s + x->gates, s + x->c, prev ? prev + x->c : NULL, dh, NULL, cy->dc, dg, C);
}

static void FN(ntm_backward_task)(void *arg, int64_t block, int worker) {
    const ntm_job *J = arg;
    const ntm_run *x = J->x;
    int64_t b0 = block * NTM_ROWS, n = x->B - b0 < NTM_ROWS ? x->B - b0 : NTM_ROWS;
    int64_t T = x->T, C = x->C, NM = x->N * x->M, HN = x->Hh * x->N, RM = x->R * x->M;
    int64_t per_row = NM + HN + RM + 2 * C + x->HR + x->Z;
    REAL *work = (REAL *)J->scratch + (int64_t)worker * x->scratch, *rows = work + x->scratch - NTM_ROWS * per_row;
    FN(carry) cy[NTM_ROWS];
    REAL *dh[NTM_ROWS], *dhr[NTM_ROWS], *dz[NTM_ROWS];
    for (int64_t r = 0; r < n; r++) {
        REAL *q = rows + r * per_row;
        memset(q, 0, (size_t)per_row * sizeof(REAL));
        cy[r] = (FN(carry)){.dM = q, .dw = q + NM, .dr = q + NM + HN, .dc = q + NM + HN + RM};
        dh[r] = cy[r].dc + C;
        dhr[r] = dh[r] + C;
        dz[r] = dhr[r] + x->HR;
    }
    for (int64_t t = T - 1; t >= 0; t--) {
        /* [dh; dr] of the output layer */
        FN(times_w)((const REAL *)J->dlogits + (b0 * T + t) * x->O, T * x->O, J->out_w, x->O, x->HR, 0, dhr[0], per_row,
                    n);
        for (int64_t r = 0; r < n; r++) {
            int64_t b = b0 + r;
            const REAL *s = FN(slot)(J, NULL, b, b0, t);
            const REAL *wprev = t ? FN(slot)(J, NULL, b, b0, t - 1) + x->w : (const REAL *)J->w0 + b * HN;
            FN(memory_backward)(J, &cy[r], s, wprev, dhr[r] + C, (REAL *)J->dP + (b * T + t) * x->P, work);
            for (int64_t k = 0; k < C; k++) dh[r][k] += dhr[r][k];
        }
        /* dh += dP W_head, then the controller */
        FN(times_w)((REAL *)J->dP + (b0 * T + t) * x->P, T * x->P, J->head_w, x->P, C, 1, dh[0], per_row, n);
        for (int64_t r = 0; r < n; r++) {
            int64_t b = b0 + r;
            FN(controller_backward)(J, &cy[r], FN(slot)(J, NULL, b, b0, t), t ? FN(slot)(J, NULL, b, b0, t - 1) : NULL,
                                    dh[r], (REAL *)J->dG + (b * T + t) * x->G);
        }
        const REAL *dG = (REAL *)J->dG + (b0 * T + t) * x->G;
        FN(times_w)(dG, T * x->G, J->w_ih, x->G, x->Z, 0, dz[0], per_row, n);
        if (x->lstm) FN(times_w)(dG, T * x->G, J->w_hh, x->G, C, 0, dh[0], per_row, n);
        for (int64_t r = 0; r < n; r++) {
            int64_t b = b0 + r;
            if (!x->lstm) memset(dh[r], 0, (size_t)C * sizeof(REAL));
            if (J->dinputs) memcpy((REAL *)J->dinputs + (b * T + t) * x->I, dz[r], (size_t)x->I * sizeof(REAL));
            memcpy(cy[r].dr, dz[r] + x->I, (size_t)RM * sizeof(REAL));
        }
    }
    for (int64_t r = 0; r < n; r++) {
        int64_t b = b0 + r;
        memcpy((REAL *)J->dmem0 + b * NM, cy[r].dM, (size_t)NM * sizeof(REAL));
        memcpy((REAL *)J->dr0 + b * RM, cy[r].dr, (size_t)RM * sizeof(REAL));
        memcpy((REAL *)J->dw0 + b * HN, cy[r].dw, (size_t)HN * sizeof(REAL));
    }
}

#undef LOG1P
#include "../../core/real_end.h"
