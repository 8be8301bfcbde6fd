/* lstmn_impl.h: typed kernels of lstmn.c (see core/real.h and attnc.h's
 * LSTMN section): the time loop of one block of rows, forward and backward. */
#include <math.h>
#include <string.h>

#include "../../core/real.h"
#include "../../core/lanes_impl.h"
#include "../../core/lstm_cell_impl.h"
#include "../../core/matmul_impl.h"

typedef struct {
    const lstmn_run *x;
    const REAL *w_hh, *attn_h, *attn_tilde, *v; /* (4H, H), (A, H), (A, H), (A)          */
    REAL *saved;                                /* B T slots (lstmn.c's layout)            */
    /* forward */
    REAL *output;    /* (B, T, H)                               */
    REAL *attention; /* (B, T, T) or NULL                       */
    /* backward */
    const REAL *doutput;            /* (B, T, H)                               */
    REAL *dG, *dQ, *dKH, *dV, *dHC; /* per (row, step): see lstmn.c            */
    REAL *scratch;                  /* per worker LSTMN_ROWS rows of 4H        */
} FN(lstmn_job);

static inline REAL *FN(slot)(const FN(lstmn_job) * J, int64_t b, int64_t t) {
    return J->saved + (b * J->x->T + t) * J->x->S;
}

static inline bool FN(active)(const lstmn_run *x, int64_t b, int64_t t) { return !x->len || t < x->len[b]; }

/* a_i = v . tanh(kh_i + q) for i < t, then s = softmax(a) (written to s[0, t), zeros after). */
static void FN(scores)(const lstmn_run *x, const FN(lstmn_job) * J, int64_t b, int64_t t, REAL *s) {
    const REAL *q = FN(slot)(J, b, t) + x->q;
    REAL mx = -INFINITY;
    for (int64_t i = 0; i < t; i++) {
        REAL a = s[i] = FN(additive)(q, FN(slot)(J, b, i) + x->kh, J->v, x->A);
        if (a > mx) mx = a;
    }
    REAL sum = 0;
    for (int64_t i = 0; i < t; i++) sum += (s[i] = EXP(s[i] - mx));
    for (int64_t i = 0; i < t; i++) s[i] /= sum;
    for (int64_t i = t; i < x->T; i++) s[i] = 0;
}

/* ht += w hi, ct += w ci (H each). */
static void FN(read_tape)(REAL *restrict ht, REAL *restrict ct, const REAL *restrict hi, const REAL *restrict ci,
                          REAL w, int64_t H) {
    for (int64_t k = 0; k < H; k++) {
        ht[k] += w * hi[k];
        ct[k] += w * ci[k];
    }
}

/* Rows [block LSTMN_ROWS, ...) through every step. The slots arrive with
 * gates = W_ih x_t + b and q = W_x x_t. */
static void FN(lstmn_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(lstmn_job) *J = arg;
    const lstmn_run *x = J->x;
    int64_t b0 = block * LSTMN_ROWS, n = x->B - b0 < LSTMN_ROWS ? x->B - b0 : LSTMN_ROWS;
    int64_t T = x->T, H = x->H, A = x->A, rs = T * x->S;
    for (int64_t t = 0; t < T; t++) {
        REAL *s0 = FN(slot)(J, b0, t);
        /* the query: q += W_h~ h~_{t-1} (h~_0 = 0: the tape is empty at step 0) */
        for (int64_t b = b0; b < b0 + n; b++) {
            REAL *sl = FN(slot)(J, b, t);
            if (t)
                memcpy(sl + x->hq, FN(slot)(J, b, t - 1) + x->ht, (size_t)H * sizeof(REAL));
            else
                memset(sl + x->hq, 0, (size_t)H * sizeof(REAL));
        }
        if (t) FN(times_wt)(s0 + x->hq, rs, J->attn_tilde, A, H, 1, s0 + x->q, rs, n);
        /* attention over the tape and the summaries h~_t, c~_t */
        for (int64_t b = b0; b < b0 + n; b++) {
            REAL *sl = FN(slot)(J, b, t), *ht = sl + x->ht, *ct = sl + x->ct, *s = sl + x->s;
            memset(ht, 0, (size_t)(2 * H) * sizeof(REAL)); /* ht, ct are adjacent */
            if (!FN(active)(x, b, t)) continue;
            FN(scores)(x, J, b, t, s);
            for (int64_t i = 0; i < t; i++) {
                const REAL *si = FN(slot)(J, b, i);
                FN(read_tape)(ht, ct, si + x->h, si + x->c, s[i], H);
            }
        }
        /* gates += W_hh h~_t, then the cell */
        if (t) FN(times_wt)(s0 + x->ht, rs, J->w_hh, 4 * H, H, 1, s0 + x->gates, rs, n);
        for (int64_t b = b0; b < b0 + n; b++) {
            REAL *sl = FN(slot)(J, b, t), *y = J->output + (b * T + t) * H;
            if (!FN(active)(x, b, t)) {
                memset(y, 0, (size_t)H * sizeof(REAL));
                continue;
            }
            FN(lstm_cell_forward)(sl + x->gates, NULL, sl + x->ct, sl + x->c, sl + x->h, H);
            memcpy(y, sl + x->h, (size_t)H * sizeof(REAL));
        }
        /* the key of h_t for later steps: kh = W_h h_t */
        for (int64_t b = b0; b < b0 + n; b++)
            if (!FN(active)(x, b, t)) memset(FN(slot)(J, b, t), 0, (size_t)x->S * sizeof(REAL));
        FN(times_wt)(s0 + x->h, rs, J->attn_h, A, H, 0, s0 + x->kh, rs, n);
        for (int64_t b = b0; b < b0 + n; b++) {
            REAL *sl = FN(slot)(J, b, t);
            if (!FN(active)(x, b, t)) memset(sl, 0, (size_t)x->S * sizeof(REAL));
            if (J->attention) memcpy(J->attention + (b * T + t) * T, sl + x->s, (size_t)T * sizeof(REAL));
        }
    }
}

/* The attention of step t backward for row b: from dh~_t and dc~_t, the
 * cotangents of the tape entries h_i, c_i, kh_i (i < t; accumulated), of the
 * query (dQ, written) and v's part (dV, written). */
static void FN(attend_backward)(const FN(lstmn_job) * J, int64_t b, int64_t t, const REAL *dht, const REAL *dct) {
    const lstmn_run *x = J->x;
    int64_t H = x->H, A = x->A, T = x->T, r = b * T + t;
    const REAL *sl = FN(slot)(J, b, t), *s = sl + x->s, *q = sl + x->q;
    REAL *dq = J->dQ + r * A, *dv = J->dV + r * A;
    /* ds_i = dh~ . h_i + dc~ . c_i; da_i = s_i (ds_i - sum_j s_j ds_j) */
    REAL dot = 0;
    for (int64_t i = 0; i < t; i++) {
        const REAL *si = FN(slot)(J, b, i);
        dot += s[i] * (FN(dot)(dht, si + x->h, H) + FN(dot)(dct, si + x->c, H));
    }
    for (int64_t i = 0; i < t; i++) {
        const REAL *si = FN(slot)(J, b, i);
        REAL *dhi = J->dHC + (b * T + i) * 2 * H;
        REAL w = s[i], da = w * (FN(dot)(dht, si + x->h, H) + FN(dot)(dct, si + x->c, H) - dot);
        FN(read_tape)(dhi, dhi + H, dht, dct, w, H);
        FN(additive_backward)(si + x->kh, q, J->v, da, J->dKH + (b * T + i) * A, dq, dv, A);
    }
}

static void FN(lstmn_backward_task)(void *arg, int64_t block, int worker) {
    const FN(lstmn_job) *J = arg;
    const lstmn_run *x = J->x;
    int64_t b0 = block * LSTMN_ROWS, n = x->B - b0 < LSTMN_ROWS ? x->B - b0 : LSTMN_ROWS;
    int64_t T = x->T, H = x->H, A = x->A, W = 4 * H;
    /* per row: dh (H), dc~ (H), dh~ (H), carry (H): the cotangent of h~_t from step t + 1's query */
    REAL *rows = J->scratch + (int64_t)worker * LSTMN_ROWS * W;
    memset(rows, 0, (size_t)(LSTMN_ROWS * W) * sizeof(REAL));
    for (int64_t t = T - 1; t >= 0; t--) {
        /* dh_t = doutput + the reads' part + W_h^T dkh_t (complete: every later step is done) */
        for (int64_t r = 0; r < n; r++) {
            int64_t b = b0 + r, at = (b * T + t);
            REAL *dh = rows + r * W;
            const REAL *dy = J->doutput + at * H, *dhi = J->dHC + at * 2 * H;
            if (FN(active)(x, b, t))
                for (int64_t k = 0; k < H; k++) dh[k] = dy[k] + dhi[k];
            else
                memset(dh, 0, (size_t)H * sizeof(REAL));
        }
        FN(times_w)(J->dKH + (b0 * T + t) * A, T * A, J->attn_h, A, H, 1, rows, W, n);
        /* the cell: dG and dc~ (from the reads' part of dc) */
        for (int64_t r = 0; r < n; r++) {
            int64_t b = b0 + r, at = b * T + t;
            if (!FN(active)(x, b, t)) continue;
            const REAL *sl = FN(slot)(J, b, t);
            REAL *dh = rows + r * W;
            memcpy(dh + H, J->dHC + at * 2 * H + H, (size_t)H * sizeof(REAL));
            FN(lstm_cell_backward)(sl + x->gates, sl + x->c, sl + x->ct, dh, NULL, dh + H, J->dG + at * W, H);
        }
        /* dh~_t = carry + W_hh^T dG_t */
        for (int64_t r = 0; r < n; r++) memcpy(rows + r * W + 2 * H, rows + r * W + 3 * H, (size_t)H * sizeof(REAL));
        FN(times_w)(J->dG + (b0 * T + t) * W, T * W, J->w_hh, W, H, 1, rows + 2 * H, W, n);
        if (t == 0) break; /* the tape is empty at step 0: no attention, h~_{-1} does not exist */
        for (int64_t r = 0; r < n; r++) {
            int64_t b = b0 + r;
            if (FN(active)(x, b, t)) FN(attend_backward)(J, b, t, rows + r * W + 2 * H, rows + r * W + H);
        }
        /* carry <- W_h~^T dq_t: the cotangent of h~_{t-1} */
        FN(times_w)(J->dQ + (b0 * T + t) * A, T * A, J->attn_tilde, A, H, 0, rows + 3 * H, W, n);
    }
}

/* The forward and backward over every block of rows: lstmn.c's calls (through
 * ATTNC_TYPED), the typed job built here. */
static void FN(lstmn_forward)(const lstmn_run *x, const attnc_lstmn_params *p, void *saved, void *output,
                              void *attention, int workers) {
    FN(lstmn_job)
    j = {.x = x,
         .w_hh = p->weight_hh.data,
         .attn_h = p->attn_h.data,
         .attn_tilde = p->attn_tilde.data,
         .v = p->attn_v.data,
         .saved = saved,
         .output = output,
         .attention = attention};
    attnc_parallel_for((x->B + LSTMN_ROWS - 1) / LSTMN_ROWS, workers, FN(lstmn_forward_task), &j);
}

static void FN(lstmn_backward)(const lstmn_run *x, const attnc_lstmn_params *p, void *saved, const void *doutput,
                               void *dG, void *dQ, void *dKH, void *dV, void *dHC, void *scratch, int workers) {
    FN(lstmn_job)
    j = {.x = x,
         .w_hh = p->weight_hh.data,
         .attn_h = p->attn_h.data,
         .attn_tilde = p->attn_tilde.data,
         .v = p->attn_v.data,
         .saved = saved,
         .doutput = doutput,
         .dG = dG,
         .dQ = dQ,
         .dKH = dKH,
         .dV = dV,
         .dHC = dHC,
         .scratch = scratch};
    attnc_parallel_for((x->B + LSTMN_ROWS - 1) / LSTMN_ROWS, workers, FN(lstmn_backward_task), &j);
}

#include "../../core/real_end.h"
