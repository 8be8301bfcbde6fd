/* rnn_impl.h: typed kernels of rnn.c (see core/real.h): one time step of the
 * gates for a block of rows, forward and backward, and the recurrent matrix
 * product split over column blocks. */
#include "../core/real.h"

typedef struct {
    const rnn_run *r;
    int64_t s;                 /* processing step: time s (forward) or len - 1 - s (reverse) */
    const REAL *gx;            /* (B T, G) input projections (+ b_ih); G = 4H LSTM, 3H GRU  */
    const REAL *hh;            /* (B, G) h_prev W_hh^T (before b_hh); backward: dh_rec (B, H) */
    const REAL *b_hh;          /* (G) or NULL                                                */
    REAL *h, *c;               /* (B, H) running state                                       */
    REAL *gates, *cs;          /* saved (B T, 4H), (B T, H)                                  */
    REAL *out;                 /* (B T, D H) the layer's output; this direction at offset d H */
    /* backward */
    const REAL *dout;          /* (B T, D H)                                                 */
    REAL *dh, *dc;             /* (B, H) running gradient                                    */
    REAL *dgx, *dgh;           /* (B T, G) (the same array for an LSTM)                      */
    REAL *dgh_step;            /* (B, G): this step's dgh rows (0 for finished rows)         */
    REAL *dh_direct;           /* (B, H) GRU: dh * z, the part not through W_hh              */
    REAL *hprev;               /* (B T, H) h_prev of every step                              */
    const REAL *h0, *c0;       /* (B, H) or NULL                                             */
} FN(step_job);

static REAL FN(sigmoid)(REAL x) { return 1 / (1 + EXP(-x)); }

/* Row b's time index at step s, or -1 when the row has ended. */
static int64_t FN(time_of)(const rnn_run *r, int64_t b, int64_t s) {
    int64_t n = r->len ? r->len[b] : r->T;
    if (s >= n) return -1;
    return r->d ? n - 1 - s : s;
}

static void FN(forward_step_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(step_job) *j = arg;
    const rnn_run *r = j->r;
    int64_t H = r->H, G = r->ng * H; /* projections: 4H (LSTM) or 3H (GRU); saved gates: 4H */
    for (int64_t b = block * ROWS; b < r->B && b < (block + 1) * ROWS; b++) {
        int64_t t = FN(time_of)(r, b, j->s);
        if (t < 0) continue;
        const REAL *gx = j->gx + (b * r->T + t) * G, *hh = j->hh + b * G;
        REAL *gate = j->gates + (b * r->T + t) * 4 * H, *h = j->h + b * H;
        REAL *o = j->out + (b * r->T + t) * r->D * H + r->d * H;
        for (int64_t k = 0; k < H; k++) {
            REAL bh[4];
            for (int q = 0; q < 4; q++) bh[q] = j->b_hh && (r->mode == ATTNC_LSTM || q < 3) ? j->b_hh[q * H + k] : 0;
            if (r->mode == ATTNC_LSTM) {
                REAL i = FN(sigmoid)(gx[k] + hh[k] + bh[0]);
                REAL f = FN(sigmoid)(gx[H + k] + hh[H + k] + bh[1]);
                REAL g = TANH(gx[2 * H + k] + hh[2 * H + k] + bh[2]);
                REAL og = FN(sigmoid)(gx[3 * H + k] + hh[3 * H + k] + bh[3]);
                REAL c = f * j->c[b * H + k] + i * g;
                gate[k] = i;
                gate[H + k] = f;
                gate[2 * H + k] = g;
                gate[3 * H + k] = og;
                j->cs[(b * r->T + t) * H + k] = c;
                j->c[b * H + k] = c;
                h[k] = og * TANH(c);
            } else { /* GRU: torch's r, z, n; hn = W_hn h + b_hn is kept for the backward */
                REAL rg = FN(sigmoid)(gx[k] + hh[k] + bh[0]);
                REAL z = FN(sigmoid)(gx[H + k] + hh[H + k] + bh[1]);
                REAL hn = hh[2 * H + k] + bh[2];
                REAL n = TANH(gx[2 * H + k] + rg * hn);
                gate[k] = rg;
                gate[H + k] = z;
                gate[2 * H + k] = n;
                gate[3 * H + k] = hn;
                h[k] = (1 - z) * n + z * h[k];
            }
            o[k] = h[k];
        }
    }
}

static void FN(backward_step_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(step_job) *j = arg;
    const rnn_run *r = j->r;
    int64_t H = r->H, G = r->ng * H;
    for (int64_t b = block * ROWS; b < r->B && b < (block + 1) * ROWS; b++) {
        REAL *dstep = j->dgh_step + b * G;
        int64_t t = FN(time_of)(r, b, j->s);
        if (t < 0) {
            for (int64_t k = 0; k < G; k++) dstep[k] = 0;
            continue;
        }
        int64_t tp = r->d ? t + 1 : t - 1; /* the step before, in processing order */
        bool first = j->s == 0;
        const REAL *hp = first ? j->h0 : j->out + (b * r->T + tp) * r->D * H + r->d * H;
        const REAL *gate = j->gates + (b * r->T + t) * 4 * H;
        const REAL *dout = j->dout + (b * r->T + t) * r->D * H + r->d * H;
        REAL *dgx = j->dgx + (b * r->T + t) * G, *dgh = j->dgh + (b * r->T + t) * G;
        REAL *hprev = j->hprev + (b * r->T + t) * H;
        for (int64_t k = 0; k < H; k++) {
            REAL h_prev = hp ? hp[first ? b * H + k : k] : 0;
            REAL dh = j->dh[b * H + k] + dout[k];
            hprev[k] = h_prev;
            if (r->mode == ATTNC_LSTM) {
                const REAL *cp = first ? j->c0 : j->cs + (b * r->T + tp) * H;
                REAL c_prev = cp ? cp[first ? b * H + k : k] : 0;
                REAL i = gate[k], f = gate[H + k], g = gate[2 * H + k], og = gate[3 * H + k];
                REAL tc = TANH(j->cs[(b * r->T + t) * H + k]);
                REAL dc = j->dc[b * H + k] + dh * og * (1 - tc * tc);
                dgx[k] = dc * g * i * (1 - i);
                dgx[H + k] = dc * c_prev * f * (1 - f);
                dgx[2 * H + k] = dc * i * (1 - g * g);
                dgx[3 * H + k] = dh * tc * og * (1 - og);
                for (int q = 0; q < 4; q++) dstep[q * H + k] = dgx[q * H + k];
                j->dc[b * H + k] = dc * f;
            } else {
                REAL rg = gate[k], z = gate[H + k], n = gate[2 * H + k], hn = gate[3 * H + k];
                REAL dn = dh * (1 - z) * (1 - n * n);
                REAL dr = dn * hn * rg * (1 - rg);
                REAL dz = dh * (h_prev - n) * z * (1 - z);
                dgx[k] = dr;
                dgx[H + k] = dz;
                dgx[2 * H + k] = dn;
                dgh[k] = dr;
                dgh[H + k] = dz;
                dgh[2 * H + k] = dn * rg;
                for (int q = 0; q < 3; q++) dstep[q * H + k] = dgh[q * H + k];
                j->dh_direct[b * H + k] = dh * z;
            }
        }
    }
}

/* dh (B, H) <- dh_rec + the direct part (GRU), for rows still running. */
static void FN(merge_dh_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(step_job) *j = arg;
    const rnn_run *r = j->r;
    for (int64_t b = block * ROWS; b < r->B && b < (block + 1) * ROWS; b++) {
        if (FN(time_of)(r, b, j->s) < 0) continue;
        for (int64_t k = 0; k < r->H; k++)
            j->dh[b * r->H + k] = j->hh[b * r->H + k] + (r->mode == ATTNC_GRU ? j->dh_direct[b * r->H + k] : 0);
    }
}

typedef struct {
    attnc_mat a, w, c;
    bool trans_w;
} FN(colgemm_job);

/* c[:, block] = a op(w)[:, block], op(w) = w^T (rows of w are output columns) or w. */
static void FN(colgemm_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(colgemm_job) *j = arg;
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

#include "../core/real_end.h"
