/* pointer_impl.h: typed kernels of pointer.c (see core/real.h and
 * pointer.h): one decoding step over all R = B K rows, and the reordering of
 * their states after a beam step. */
#include <math.h>
#include <string.h>

#include "../../core/real.h"
#include "../../core/lanes_impl.h"
#include "../../core/lstm_cell_impl.h"
#include "../../core/rows_f32.h"

#ifndef ATTNC_PTR_STATE /* one state for both dtypes (core/typed.h): defined once */
#define ATTNC_PTR_STATE
typedef struct {
    const ptr_run *x;
    const void *inputs, *keys, *h0, *c0; /* (B, n, D), (B, P, H), (B, H), (B, H) */
    const void *w_ih, *w_hh, *b_ih, *b_hh, *w2, *v, *start;
    const float *w_hh_panels, *w2_panels; /* float32 tile kernels: packed; else NULL */
    const int64_t *nlen;                  /* (B) inputs per row                  */
    void *h, *c, *h_next, *c_next;        /* (R, H)                              */
    void *xw, *sw;                        /* W_ih x of every input (B, n, 4H) and of start (4H), + b_ih + b_hh */
    void *gates, *q, *logits;             /* (R, 4H), (R, H), (R, P)             */
    unsigned char *chosen, *chosen_next;  /* (R, P)                              */
    int64_t *count, *count_next;          /* (R) inputs chosen                   */
    int64_t *feed;                        /* (R) see ptr_feed                    */
    unsigned char *ended, *ended_next;    /* (R) fed the end token               */
    unsigned char *allowed;               /* (workers, P) scratch                */
    /* Float32 on AVX-512: the additive score's factored tanh (core/rows_f32.h), e^{2 keys}
     * made once per call and e^{2 q} per row and step; NULL elsewhere. */
    float *ekeys, *eq;      /* (B, P, H), (R, H)                   */
    unsigned char *keys_ok; /* (B) every |key entry| <= ATTNC_EXP2_MAX */
} ptr_state;
#endif

/* c (R, out) = a (R, in) w^T over the pool (fixed row blocks): from w's
 * panels (core/tile_gemm.h) where there are some, else BLAS. */
static void FN(ptr_times_wt)(const ptr_run *x, const REAL *a, int64_t in, const REAL *w, const float *panels,
                             int64_t out, REAL *c) {
    attnc_mat A = {(void *)a, x->R, in, in, 1}, W = {(void *)w, out, in, in, 1}, C = {c, x->R, out, out, 1};
#if !ATTNC_F64
    if (panels) {
        attnc_tile_sgemm_panels_rows(1, A, panels, 0, C, PTR_GEMM_ROWS);
        return;
    }
#else
    (void)panels;
#endif
    attnc_gemm_rows(x->dt, false, true, 1, A, W, 0, C, PTR_GEMM_ROWS);
}

/* Row r's feed after token p (s = step): its chosen set, and which input
 * part of its gates (W_ih x + b_ih + b_hh, x the chosen input or start) the
 * cell adds to its recurrent product: feed[r], an input's row of xw, or -1
 * for sw. */
static void FN(ptr_feed)(ptr_state *S, int64_t r, int64_t p, int64_t s) {
    const ptr_run *x = S->x;
    int64_t b = r / x->K;
    S->feed[r] = -1;
    if (s > 0) {
        if (p == 0) {
            S->ended[r] = 1;
        } else {
            S->chosen[r * x->P + p] = 1;
            S->count[r]++;
            S->feed[r] = b * x->n + p - 1;
        }
    }
}

/* xw and sw, once per call: one product over every input. */
static void FN(ptr_input_gates)(ptr_state *S) {
    const ptr_run *x = S->x;
    int64_t G = 4 * x->H, rows = x->B * x->n;
    attnc_mat A = {(void *)S->inputs, rows, x->D, x->D, 1}, W = {(void *)S->w_ih, G, x->D, x->D, 1},
              C = {S->xw, rows, G, G, 1};
    attnc_gemm_rows(x->dt, false, true, 1, A, W, 0, C, PTR_GEMM_ROWS);
    for (int64_t k = 0; k < G; k++) {
        REAL acc = 0;
        for (int64_t d = 0; d < x->D; d++) acc += ((const REAL *)S->w_ih)[k * x->D + d] * ((const REAL *)S->start)[d];
        ((REAL *)S->sw)[k] = acc;
    }
    for (int64_t i = 0; i < rows + 1; i++) {
        REAL *row = i < rows ? (REAL *)S->xw + i * G : S->sw;
        for (int64_t k = 0; k < G; k++) row[k] += ((const REAL *)S->b_ih)[k] + ((const REAL *)S->b_hh)[k];
    }
}

static void FN(ptr_cell_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    ptr_state *S = arg;
    const ptr_run *x = S->x;
    int64_t H = x->H;
    /* c_next is free until the reorder (which writes it): it holds c_prev here; gates become activations */
    for (int64_t r = block * PTR_ROWS; r < x->R && r < (block + 1) * PTR_ROWS; r++) {
        const REAL *in = S->feed[r] < 0 ? S->sw : (REAL *)S->xw + S->feed[r] * 4 * H;
        memcpy((REAL *)S->c_next + r * H, (REAL *)S->c + r * H, (size_t)H * sizeof(REAL));
        FN(lstm_cell_forward)((REAL *)S->gates + r * 4 * H, in, (REAL *)S->c_next + r * H, (REAL *)S->c + r * H,
                              (REAL *)S->h + r * H, H);
    }
}

/* Whether row r may point at position j now. */
static bool FN(ptr_allowed)(const ptr_state *S, int64_t r, int64_t j) {
    const ptr_run *x = S->x;
    int64_t nb = S->nlen[r / x->K];
    if (j > 0) return j <= nb && !S->chosen[r * x->P + j];
    if (x->constraint == ATTNC_POINTER_HULL) return S->count[r] >= 1;
    return S->count[r] == nb;
}

/* u (P) <- v . tanh(keys_j + q) where allowed[j], -inf elsewhere: the sums
 * of core/lanes_impl.h, so decoding scores as the teacher-forced forward
 * (the additive score) does; in float32 on AVX-512, core/rows_f32.h's,
 * with its own tanh in fused multiply-adds (the scores were a fifth of a
 * beam step's time), factored as the forward's (e^{2 (q + k)} = e^{2q}
 * e^{2k}: no exp per key and unit) where eq, ek are given: equal to the
 * forward's within rounding. */
static void FN(ptr_row_scores)(REAL *restrict u, const REAL *restrict keys, const REAL *restrict q, const float *eq,
                               const float *ek, const REAL *restrict v, const unsigned char *restrict allowed,
                               int64_t P, int64_t H) {
#if !ATTNC_F64 && ATTNC_ROWS_F32
    for (int64_t j = 0; j < P; j++)
        u[j] = !allowed[j] ? -INFINITY
               : eq        ? attnc_additive_exp2_f32(q, keys + j * H, eq, ek + j * H, v, H)
                           : attnc_additive_f32(q, keys + j * H, v, H);
#else
    (void)eq, (void)ek;
    for (int64_t j = 0; j < P; j++) u[j] = allowed[j] ? FN(additive)(q, keys + j * H, v, H) : -INFINITY;
#endif
}

/* Every row's scores; an ended row gives 0 for the end token and -inf
 * elsewhere. */
static void FN(ptr_score_task)(void *arg, int64_t block, int worker) {
    ptr_state *S = arg;
    const ptr_run *x = S->x;
    int64_t H = x->H, P = x->P;
    unsigned char *allowed = S->allowed + (int64_t)worker * P;
    for (int64_t r = block * PTR_ROWS; r < x->R && r < (block + 1) * PTR_ROWS; r++) {
        REAL *u = (REAL *)S->logits + r * P;
        int64_t b = r / x->K;
        for (int64_t j = 0; j < P; j++) allowed[j] = S->ended[r] ? 0 : FN(ptr_allowed)(S, r, j);
        const float *eq = NULL, *ek = NULL;
#if !ATTNC_F64 && ATTNC_ROWS_F32
        if (S->ekeys && S->keys_ok[b] && attnc_exp2x_f32(S->eq + r * H, (REAL *)S->q + r * H, H)) {
            eq = S->eq + r * H;
            ek = S->ekeys + b * P * H;
        }
#endif
        FN(ptr_row_scores)(u, (const REAL *)S->keys + b * P * H, (REAL *)S->q + r * H, eq, ek, S->v, allowed, P, H);
        if (S->ended[r]) u[0] = 0;
    }
}

static attnc_status FN(ptr_step)(void *ctx, const int64_t *tok, int64_t s) {
    ptr_state *S = ctx;
    const ptr_run *x = S->x;
    int64_t R = x->R, H = x->H;
    for (int64_t r = 0; r < R; r++) FN(ptr_feed)(S, r, tok ? tok[r] : 0, s);
    FN(ptr_times_wt)(x, S->h, H, S->w_hh, S->w_hh_panels, 4 * H, S->gates);
    int64_t blocks = (R + PTR_ROWS - 1) / PTR_ROWS;
    int workers = attnc_workers_for(R * (x->P + 8) * H);
    attnc_parallel_for(blocks, workers, FN(ptr_cell_task), S);
    FN(ptr_times_wt)(x, S->h, H, S->w2, S->w2_panels, H, S->q);
    attnc_parallel_for(blocks, workers, FN(ptr_score_task), S);
    return ATTNC_OK;
}

/* After a beam step: row r continues row parent[r]. */
static void FN(ptr_reorder)(void *ctx, const int64_t *parent, int64_t s) {
    (void)s;
    ptr_state *S = ctx;
    const ptr_run *x = S->x;
    int64_t H = x->H, P = x->P;
    for (int64_t r = 0; r < x->R; r++) {
        int64_t q = parent[r];
        memcpy((REAL *)S->h_next + r * H, (REAL *)S->h + q * H, (size_t)H * sizeof(REAL));
        memcpy((REAL *)S->c_next + r * H, (REAL *)S->c + q * H, (size_t)H * sizeof(REAL));
        memcpy(S->chosen_next + r * P, S->chosen + q * P, (size_t)P);
        S->count_next[r] = S->count[q];
        S->ended_next[r] = S->ended[q];
    }
#define SWAP(T, a, b) \
    do {              \
        T t_ = S->a;  \
        S->a = S->b;  \
        S->b = t_;    \
    } while (0)
    SWAP(REAL *, h, h_next);
    SWAP(REAL *, c, c_next);
    SWAP(unsigned char *, chosen, chosen_next);
    SWAP(int64_t *, count, count_next);
    SWAP(unsigned char *, ended, ended_next);
#undef SWAP
}

/* Rows' starting state: h0, c0 of their batch row, nothing chosen; the
 * input gates of every input. */
static void FN(ptr_init)(ptr_state *S) {
    const ptr_run *x = S->x;
    int64_t H = x->H;
    FN(ptr_input_gates)(S);
#if !ATTNC_F64 && ATTNC_ROWS_F32
    for (int64_t b = 0; b < x->B && S->ekeys; b++)
        S->keys_ok[b] = (unsigned char)attnc_exp2x_f32(S->ekeys + b * x->P * H, (const REAL *)S->keys + b * x->P * H,
                                                       x->P * H);
#endif
    for (int64_t r = 0; r < x->R; r++) {
        memcpy((REAL *)S->h + r * H, (const REAL *)S->h0 + (r / x->K) * H, (size_t)H * sizeof(REAL));
        memcpy((REAL *)S->c + r * H, (const REAL *)S->c0 + (r / x->K) * H, (size_t)H * sizeof(REAL));
    }
}

#include "../../core/real_end.h"
