/* rnn_impl.h: typed kernels of rnn.c (see core/real.h): one time step of the
 * gates for a block of rows, forward and backward, and the recurrent matrix
 * product split over column blocks. */
#include "../../core/real.h"

#include <string.h>

#include "../../core/lstm_cell_impl.h"

/* One row's GRU gates (torch's r, z, n; hn = W_hn h + b_hn kept for the backward). */
static void FN(gru_row)(const REAL *restrict gx, const REAL *restrict hh, REAL *restrict h, REAL *restrict gate,
                        REAL *restrict o, int64_t H) {
    for (int64_t k = 0; k < H; k++) {
        REAL rg = FN(sigmoid)(gx[k] + hh[k]);
        REAL z = FN(sigmoid)(gx[H + k] + hh[H + k]);
        REAL hn = hh[2 * H + k];
        REAL n = FN(tanh_)(gx[2 * H + k] + rg * hn);
        gate[k] = rg;
        gate[H + k] = z;
        gate[2 * H + k] = n;
        gate[3 * H + k] = hn;
        h[k] = (1 - z) * n + z * h[k];
        o[k] = h[k];
    }
}

/* Row b's time index at step s, or -1 when the row has ended. */
static int64_t FN(time_of)(const rnn_run *r, int64_t b, int64_t s) {
    int64_t n = r->len ? r->len[b] : r->T;
    if (s >= n) return -1;
    return r->d ? n - 1 - s : s;
}

static void FN(forward_step_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const step_job *j = arg;
    const rnn_run *r = j->r;
    int64_t H = r->H, G = r->ng * H; /* projections: 4H (LSTM) or 3H (GRU); saved gates: 4H */
    for (int64_t b = block * ROWS; b < r->B && b < (block + 1) * ROWS; b++) {
        int64_t t = FN(time_of)(r, b, j->s);
        if (t < 0) continue;
        const REAL *gx = (const REAL *)j->gx + (b * r->T + t) * G;
        REAL *hh = (REAL *)j->hh + b * G; /* this step's scratch: b_hh added in place */
        if (j->b_hh)
            for (int64_t k = 0; k < G; k++) hh[k] += ((const REAL *)j->b_hh)[k];
        REAL *gate = (REAL *)j->gates + (b * r->T + t) * 4 * H, *h = (REAL *)j->h + b * H;
        REAL *o = (REAL *)j->out + (b * r->T + t) * r->D * H + r->d * H;
        if (r->mode == ATTNC_LSTM) { /* gates gx + hh; the saved cell and the output, then the running state */
            REAL *c = (REAL *)j->c + b * H, *cell = (REAL *)j->cs + (b * r->T + t) * H;
            memcpy(gate, gx, (size_t)(4 * H) * sizeof(REAL));
            FN(lstm_cell_forward)(gate, hh, c, cell, o, H);
            memcpy(c, cell, (size_t)H * sizeof(REAL));
            memcpy(h, o, (size_t)H * sizeof(REAL));
        } else {
            FN(gru_row)(gx, hh, h, gate, o, H);
        }
    }
}

/* One row's GRU gate gradients: dgx, dgh and dstep (3H), dh z (the part of
 * dh_prev not through W_hh) into direct. */
static void FN(gru_row_back)(const REAL *restrict gate, const REAL *restrict h_prev, const REAL *restrict dh_next,
                             const REAL *restrict dout, REAL *restrict dgx, REAL *restrict dgh, REAL *restrict dstep,
                             REAL *restrict direct, int64_t H) {
    for (int64_t k = 0; k < H; k++) {
        REAL dh = dh_next[k] + dout[k];
        REAL rg = gate[k], z = gate[H + k], n = gate[2 * H + k], hn = gate[3 * H + k];
        REAL dn = dh * (1 - z) * (1 - n * n);
        REAL dr = dn * hn * rg * (1 - rg);
        REAL dz = dh * (h_prev[k] - n) * z * (1 - z);
        dgx[k] = dgh[k] = dstep[k] = dr;
        dgx[H + k] = dgh[H + k] = dstep[H + k] = dz;
        dgx[2 * H + k] = dn;
        dgh[2 * H + k] = dstep[2 * H + k] = dn * rg;
        direct[k] = dh * z;
    }
}

static void FN(backward_step_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const step_job *j = arg;
    const rnn_run *r = j->r;
    int64_t H = r->H, G = r->ng * H;
    for (int64_t b = block * ROWS; b < r->B && b < (block + 1) * ROWS; b++) {
        REAL *dstep = (REAL *)j->dgh_step + b * G;
        int64_t t = FN(time_of)(r, b, j->s);
        if (t < 0) {
            for (int64_t k = 0; k < G; k++) dstep[k] = 0;
            continue;
        }
        int64_t tp = r->d ? t + 1 : t - 1, bt = b * r->T + t; /* tp: the step before, in processing order */
        bool first = j->s == 0;
        /* The previous state (h0 / c0 at the first step, zeros without them),
         * copied into hprev (kept for dW_hh) and, for an LSTM, into the
         * row's unused dh_direct. */
        const REAL *h0 = j->h0, *out = j->out;
        const REAL *hp = first ? (h0 ? h0 + b * H : NULL) : out + (b * r->T + tp) * r->D * H + r->d * H;
        REAL *hprev = (REAL *)j->hprev + bt * H;
        for (int64_t k = 0; k < H; k++) hprev[k] = hp ? hp[k] : 0;
        const REAL *gate = (const REAL *)j->gates + bt * 4 * H;
        const REAL *dout = (const REAL *)j->dout + bt * r->D * H + r->d * H;
        REAL *dgx = (REAL *)j->dgx + bt * G;
        if (r->mode == ATTNC_LSTM) {
            const REAL *c0 = j->c0, *cs = j->cs;
            const REAL *cp = first ? (c0 ? c0 + b * H : NULL) : cs + (b * r->T + tp) * H;
            REAL *c_prev = (REAL *)j->dh_direct + b * H;
            for (int64_t k = 0; k < H; k++) c_prev[k] = cp ? cp[k] : 0;
            FN(lstm_cell_backward)(gate, cs + bt * H, c_prev, (REAL *)j->dh + b * H, dout, (REAL *)j->dc + b * H, dgx,
                                   H);
            memcpy(dstep, dgx, (size_t)(4 * H) * sizeof(REAL));
        } else {
            FN(gru_row_back)(gate, hprev, (REAL *)j->dh + b * H, dout, dgx, (REAL *)j->dgh + bt * G, dstep,
                             (REAL *)j->dh_direct + b * H, H);
        }
    }
}

/* dh (B, H) <- dh_rec + the direct part (GRU), for rows still running. */
static void FN(merge_dh_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const step_job *j = arg;
    const rnn_run *r = j->r;
    for (int64_t b = block * ROWS; b < r->B && b < (block + 1) * ROWS; b++) {
        if (FN(time_of)(r, b, j->s) < 0) continue;
        REAL *dh = j->dh;
        const REAL *hh = j->hh, *direct = j->dh_direct;
        for (int64_t k = 0; k < r->H; k++)
            dh[b * r->H + k] = hh[b * r->H + k] + (r->mode == ATTNC_GRU ? direct[b * r->H + k] : 0);
    }
}

/* c[:, block] = a op(w)[:, block], op(w) = w^T (rows of w are output columns) or w. */
static void FN(colgemm_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const colgemm_job *j = arg;
    int64_t c0 = block * COLS, n = j->c.cols - c0 < COLS ? j->c.cols - c0 : COLS;
    attnc_mat w = j->w, c = j->c;
    if (j->trans_w) {
        w.p = (REAL *)w.p + c0 * w.rs;
        w.rows = n;
    } else {
        w.p = (REAL *)w.p + c0 * w.cs;
        w.cols = n;
    }
    c.p = (REAL *)c.p + c0 * c.cs;
    c.cols = n;
    GEMM(false, j->trans_w, 1, j->a, w, 0, c);
}


/* ---- the whole-sequence products, split into blocks fixed by the sizes
 * (never by the thread count) and balanced over 2, 3, 4 or 6 threads ---- */

/* Rows [block n / blocks, (block + 1) n / blocks) of the input projection
 * (or of dx). */
static void FN(seq_rows_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const seq_job *j = arg;
    int64_t n = j->y.rows, r0 = block * n / j->blocks, r1 = (block + 1) * n / j->blocks;
    attnc_mat x = j->x, y = j->y;
    x.p = (REAL *)x.p + r0 * x.rs;
    x.rows = r1 - r0;
    y.p = (REAL *)y.p + r0 * y.rs;
    y.rows = r1 - r0;
    if (x.rows == 0) return;
    GEMM(false, !j->dx, 1, x, j->w, j->accumulate ? 1 : 0, y);
    if (j->bias)
        for (int64_t i = 0; i < y.rows; i++) {
            REAL *restrict row = (REAL *)y.p + i * y.rs; /* unit column stride (contiguous buffers) */
            for (int64_t o = 0; o < y.cols; o++) row[o] += ((const REAL *)j->bias)[o];
        }
}

/* Block of output rows of dw[0] (blocks [0, blocks)) or dw[1] (the next
 * blocks), with the matching bias-gradient entries. */
static void FN(seq_dw_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const seq_job *j = arg;
    int which = block >= j->blocks;
    block -= which * j->blocks;
    attnc_mat dy = j->dy2[which], dw = j->dw2[which];
    int64_t G = dy.cols, o0 = block * G / j->blocks, o1 = (block + 1) * G / j->blocks;
    if (o1 == o0) return;
    dy.p = (REAL *)dy.p + o0; /* contiguous: unit column stride */
    dy.cols = o1 - o0;
    if (dw.p) {
        dw.p = (REAL *)dw.p + o0 * dw.rs;
        dw.rows = o1 - o0;
        GEMM(true, false, 1, dy, j->x2[which], 0, dw);
    }
    REAL *restrict db = j->db2[which];
    if (db) { /* row by row, in row order: dy read along its rows */
        for (int64_t o = o0; o < o1; o++) db[o] = 0;
        for (int64_t r = 0; r < dy.rows; r++) {
            const REAL *restrict row = (const REAL *)dy.p + r * dy.rs;
            for (int64_t o = 0; o < o1 - o0; o++) db[o0 + o] += row[o];
        }
    }
}

#include "../../core/real_end.h"
