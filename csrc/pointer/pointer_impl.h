/* pointer_impl.h: typed kernels of pointer.c (see core/real.h and
 * pointer.h): one decoding step over all R = B K rows, and the reordering of
 * their states after a beam step. */
#include <math.h>
#include <string.h>

#include "../core/real.h"
#include "../core/sigmoid_impl.h"

typedef struct {
    const ptr_run *x;
    const REAL *inputs, *keys, *h0, *c0;             /* (B, n, D), (B, P, H), (B, H), (B, H) */
    const REAL *w_ih, *w_hh, *b_ih, *b_hh, *w2, *v, *start;
    const int64_t *nlen;                             /* (B) inputs per row                  */
    REAL *h, *c, *h_next, *c_next;                   /* (R, H)                              */
    REAL *xin, *gates, *q, *logits;                  /* (R, D), (R, 4H), (R, H), (R, P)     */
    unsigned char *chosen, *chosen_next;             /* (R, P)                              */
    int64_t *count, *count_next;                     /* (R) inputs chosen                   */
    unsigned char *ended, *ended_next;               /* (R) fed the end token               */
} FN(ptr_state);

/* c (R, out) = a (R, in) w^T + beta c over the pool (fixed row blocks). */
static void FN(ptr_times_wt)(const ptr_run *x, const REAL *a, int64_t in, const REAL *w, int64_t out, double beta,
                             REAL *c) {
    attnc_mat A = {(void *)a, x->R, in, in, 1}, W = {(void *)w, out, in, in, 1}, C = {c, x->R, out, out, 1};
    attnc_gemm_rows(x->dt, false, true, 1, A, W, beta, C, PTR_GEMM_ROWS);
}

/* Row r's feed after token p (s = step): its input vector and its chosen set. */
static void FN(ptr_feed)(FN(ptr_state) *S, int64_t r, int64_t p, int64_t s) {
    const ptr_run *x = S->x;
    int64_t b = r / x->K;
    const REAL *src = S->start;
    if (s > 0) {
        if (p == 0) {
            S->ended[r] = 1;
        } else {
            S->chosen[r * x->P + p] = 1;
            S->count[r]++;
            src = S->inputs + (b * x->n + p - 1) * x->D;
        }
    }
    memcpy(S->xin + r * x->D, src, (size_t)x->D * sizeof(REAL));
}

/* The LSTM cell of every row: gates (activated in place) -> c, h. */
static void FN(ptr_cell_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    FN(ptr_state) *S = arg;
    const ptr_run *x = S->x;
    int64_t H = x->H;
    for (int64_t r = block * PTR_ROWS; r < x->R && r < (block + 1) * PTR_ROWS; r++) {
        REAL *g = S->gates + r * 4 * H, *c = S->c + r * H, *h = S->h + r * H;
        for (int64_t k = 0; k < H; k++) {
            REAL i = FN(sigmoid)(g[k]), f = FN(sigmoid)(g[H + k]), gg = FN(tanh_)(g[2 * H + k]);
            REAL o = FN(sigmoid)(g[3 * H + k]);
            c[k] = f * c[k] + i * gg;
            h[k] = o * FN(tanh_)(c[k]);
        }
    }
}

/* Whether row r may point at position j now. */
static bool FN(ptr_allowed)(const FN(ptr_state) *S, int64_t r, int64_t j) {
    const ptr_run *x = S->x;
    int64_t nb = S->nlen[r / x->K];
    if (j > 0) return j <= nb && !S->chosen[r * x->P + j];
    if (x->constraint == ATTNC_POINTER_HULL) return S->count[r] >= 1;
    return S->count[r] == nb;
}

/* u_j = v . tanh(keys[b, j] + q_r), -inf where not allowed; an ended row
 * gives 0 for the end token and -inf elsewhere. */
static void FN(ptr_score_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    FN(ptr_state) *S = arg;
    const ptr_run *x = S->x;
    int64_t H = x->H, P = x->P;
    for (int64_t r = block * PTR_ROWS; r < x->R && r < (block + 1) * PTR_ROWS; r++) {
        const REAL *q = S->q + r * H, *keys = S->keys + (r / x->K) * P * H;
        REAL *u = S->logits + r * P;
        for (int64_t j = 0; j < P; j++) {
            if (S->ended[r]) {
                u[j] = j == 0 ? 0 : -INFINITY;
                continue;
            }
            if (!FN(ptr_allowed)(S, r, j)) {
                u[j] = -INFINITY;
                continue;
            }
            REAL acc = 0;
            for (int64_t a = 0; a < H; a++) acc += S->v[a] * TANH(keys[j * H + a] + q[a]);
            u[j] = acc;
        }
    }
}

static attnc_status FN(ptr_step)(void *ctx, const int64_t *tok, int64_t s) {
    FN(ptr_state) *S = ctx;
    const ptr_run *x = S->x;
    int64_t R = x->R, H = x->H;
    for (int64_t r = 0; r < R; r++) FN(ptr_feed)(S, r, tok ? tok[r] : 0, s);
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < 4 * H; k++) S->gates[r * 4 * H + k] = S->b_ih[k] + S->b_hh[k];
    FN(ptr_times_wt)(x, S->xin, x->D, S->w_ih, 4 * H, 1, S->gates);
    FN(ptr_times_wt)(x, S->h, H, S->w_hh, 4 * H, 1, S->gates);
    int64_t blocks = (R + PTR_ROWS - 1) / PTR_ROWS;
    int workers = attnc_workers_for(R * (x->P + 8) * H);
    attnc_parallel_for(blocks, workers, FN(ptr_cell_task), S);
    FN(ptr_times_wt)(x, S->h, H, S->w2, H, 0, S->q);
    attnc_parallel_for(blocks, workers, FN(ptr_score_task), S);
    return ATTNC_OK;
}

/* After a beam step: row r continues row parent[r]. */
static void FN(ptr_reorder)(void *ctx, const int64_t *parent, int64_t s) {
    (void)s;
    FN(ptr_state) *S = ctx;
    const ptr_run *x = S->x;
    int64_t H = x->H, P = x->P;
    for (int64_t r = 0; r < x->R; r++) {
        int64_t q = parent[r];
        memcpy(S->h_next + r * H, S->h + q * H, (size_t)H * sizeof(REAL));
        memcpy(S->c_next + r * H, S->c + q * H, (size_t)H * sizeof(REAL));
        memcpy(S->chosen_next + r * P, S->chosen + q * P, (size_t)P);
        S->count_next[r] = S->count[q];
        S->ended_next[r] = S->ended[q];
    }
#define SWAP(T, a, b) do { T t_ = S->a; S->a = S->b; S->b = t_; } while (0)
    SWAP(REAL *, h, h_next);
    SWAP(REAL *, c, c_next);
    SWAP(unsigned char *, chosen, chosen_next);
    SWAP(int64_t *, count, count_next);
    SWAP(unsigned char *, ended, ended_next);
#undef SWAP
}

/* Rows' starting state: h0, c0 of their batch row, nothing chosen. */
static void FN(ptr_init)(FN(ptr_state) *S) {
    const ptr_run *x = S->x;
    int64_t H = x->H;
    for (int64_t r = 0; r < x->R; r++) {
        memcpy(S->h + r * H, S->h0 + (r / x->K) * H, (size_t)H * sizeof(REAL));
        memcpy(S->c + r * H, S->c0 + (r / x->K) * H, (size_t)H * sizeof(REAL));
    }
}

#include "../core/real_end.h"
