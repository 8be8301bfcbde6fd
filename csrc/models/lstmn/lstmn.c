/* lstmn.c: the long short-term memory-network (Cheng, Dong & Lapata 2016)
 * over whole sequences, forward and backward through time (equations in
 * attnc.h, section "LSTMN").
 *
 * Rows are independent through time, so blocks of LSTMN_ROWS rows run in
 * parallel, each looping over every step; inside a block each step's
 * recurrent products (W_h~ h~_{t-1}, W_hh h~_t, W_h h_t) are one matrix
 * product over the block's rows. The input's products (W_ih x_t + b and
 * W_x x_t) are two products over all B T steps before the loop. The forward
 * saves one slot per (row, step) (layout: lstmn_layout): the tapes h, c,
 * the summaries, the gates, the query, the keys W_h h_i and the attention
 * row, O(B T (T + H + A)) in all; the tanh of the scores is recomputed by
 * the backward instead of stored (it would be B T^2 A).
 *
 * The backward walks each block of rows backwards in time, accumulating
 * the cotangents of every tape entry (h_i, c_i, W_h h_i) in per-(row, step)
 * buffers in a fixed order; the pre-activation cotangents of every (row,
 * step) are stored and the weight gradients formed after the loop, each one
 * product over all of them, so the bits do not depend on the thread count. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"
#include "../../include/attnc.h"

enum { LSTMN_ROWS = 8, LSTMN_GEMM_ROWS = 64 }; /* rows per time-loop block; output rows per product block */

typedef struct {
    int64_t B, T, I, H, A;
    const int64_t *len; /* (B) or NULL: every row has T steps */
    bool bias;
    attnc_dtype dt;
    /* a slot: the offsets of its arrays (elements) and its size S */
    int64_t h, c, ht, ct, hq, gates, q, kh, s, S;
} lstmn_run;

#define ATTNC_F64 0
#include "lstmn_impl.h"
#define ATTNC_F64 1
#include "lstmn_impl.h"

/* A slot holds, for one (row, step t): h_t, c_t, h~_t, c~_t, h~_{t-1} (H
 * each), the gates i, f, g, o after their activations (4H), the query
 * W_x x_t + W_h~ h~_{t-1} (A), the key W_h h_t (A) and the attention row
 * s^t (T, zero from t on). A step past a row's length has an all-zero slot. */
static void lstmn_layout(lstmn_run *x) {
    int64_t widths[] = {x->H, x->H, x->H, x->H, x->H, 4 * x->H, x->A, x->A, x->T};
    int64_t *offsets[] = {&x->h, &x->c, &x->ht, &x->ct, &x->hq, &x->gates, &x->q, &x->kh, &x->s};
    int64_t at = 0;
    for (int i = 0; i < 9; i++) {
        *offsets[i] = at;
        at += widths[i];
    }
    x->S = at;
}

int64_t attnc_lstmn_saved_size(int64_t B, int64_t T, int64_t H, int64_t A) {
    if (B < 0 || T < 0 || H < 1 || A < 1) return -1;
    return B * T * (9 * H + 2 * A + T);
}

/* ---- checks -------------------------------------------------------------------- */

static attnc_status check_params(const lstmn_run *x, const attnc_lstmn_params *p, bool output) {
#define PARAM(t, label, ...) TRY(ATTNC_NEED_PARAM(t, label, x->dt, output, __VA_ARGS__))
    PARAM(&p->weight_ih, "weight_ih", 4 * x->H, x->I);
    PARAM(&p->weight_hh, "weight_hh", 4 * x->H, x->H);
    if (x->bias) PARAM(&p->bias, "bias", 4 * x->H);
    PARAM(&p->attn_h, "attn_h.weight", x->A, x->H);
    PARAM(&p->attn_x, "attn_x.weight", x->A, x->I);
    PARAM(&p->attn_tilde, "attn_tilde.weight", x->A, x->H);
    PARAM(&p->attn_v, "attn_v", x->A);
#undef PARAM
    return ATTNC_OK;
}

/* The run's sizes from input (B, T, I) and the parameters; checks all of them. */
static attnc_status setup(lstmn_run *x, const attnc_tensor *input, const attnc_tensor *lengths,
                          const attnc_lstmn_params *p) {
    *x = (lstmn_run){0};
    if (!p) return attnc_fail(ATTNC_ERR_TYPE, "the LSTMN's parameters are required");
    if (!attnc_present(input)) return attnc_fail(ATTNC_ERR_TYPE, "input is required");
    x->dt = input->dtype;
    if (x->dt != ATTNC_FLOAT32 && x->dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(x->dt));
    int64_t in[3] = {-1, -1, -1};
    TRY(attnc_check_array(input, "input", x->dt, 3, in, false));
    x->B = in[0];
    x->T = in[1];
    x->I = in[2];
    /* the sizes the parameters give (each checked whole by check_params) */
    int64_t hh[2] = {-1, -1}, ah[2] = {-1, -1};
    TRY(attnc_check_array(&p->weight_hh, "weight_hh", x->dt, 2, hh, false));
    TRY(attnc_check_array(&p->attn_h, "attn_h.weight", x->dt, 2, ah, false));
    x->H = hh[1];
    x->A = ah[0];
    x->bias = attnc_present(&p->bias);
    if (x->H < 1 || x->A < 1) /* the input may be 0 wide: the gates from h and the bias alone */
        return attnc_fail(ATTNC_ERR_VALUE, "the LSTMN's hidden and attention sizes must be >= 1");
    TRY(check_params(x, p, false));
    if (attnc_present(lengths)) {
        TRY(attnc_check_array(lengths, "lengths", ATTNC_INT64, 1, &x->B, false));
        x->len = lengths->data;
        for (int64_t b = 0; b < x->B; b++)
            if (x->len[b] < 0 || x->len[b] > x->T)
                return attnc_fail(ATTNC_ERR_VALUE, "lengths[%lld] = %lld is outside [0, %lld]", (long long)b,
                                  (long long)x->len[b], (long long)x->T);
    }
    lstmn_layout(x);
    return ATTNC_OK;
}

static attnc_status check_saved(const lstmn_run *x, const attnc_tensor *saved, bool output) {
    return ATTNC_NEED(saved, "saved", x->dt, output, x->B * x->T * x->S);
}

/* ---- forward --------------------------------------------------------------------- */

attnc_status attnc_lstmn_forward(attnc_tensor *output, attnc_tensor *attention, attnc_tensor *saved,
                                 const attnc_tensor *input, const attnc_tensor *lengths, const attnc_lstmn_params *p) {
    lstmn_run x;
    TRY(setup(&x, input, lengths, p));
    TRY(ATTNC_NEED(output, "output", x.dt, true, x.B, x.T, x.H));
    if (attnc_present(attention)) TRY(ATTNC_NEED(attention, "attention", x.dt, true, x.B, x.T, x.T));
    if (attnc_present(saved)) TRY(check_saved(&x, saved, true));
    if (x.B == 0 || x.T == 0) return ATTNC_OK;
    size_t es = attnc_dtype_size(x.dt);
    void *own = NULL, *slots = attnc_present(saved) ? saved->data : NULL;
    if (!slots) {
        TRY(attnc_calloc(&own, (size_t)(x.B * x.T * x.S), es, "the LSTMN's tape"));
        slots = own;
    }
    int64_t BT = x.B * x.T;
    /* gates <- bias; gates += x W_ih^T; q <- x W_x^T: every step's input products at once */
    char *sv = slots;
    for (int64_t r = 0; r < BT; r++) {
        char *g = sv + (r * x.S + x.gates) * (int64_t)es;
        if (x.bias)
            memcpy(g, p->bias.data, (size_t)(4 * x.H) * es);
        else
            memset(g, 0, (size_t)(4 * x.H) * es);
    }
    attnc_mat X = {input->data, BT, x.I, x.I, 1};
    attnc_mat Wih = {p->weight_ih.data, 4 * x.H, x.I, x.I, 1}, Wx = {p->attn_x.data, x.A, x.I, x.I, 1};
    attnc_mat G = {sv + x.gates * (int64_t)es, BT, 4 * x.H, x.S, 1}, Q = {sv + x.q * (int64_t)es, BT, x.A, x.S, 1};
    attnc_gemm_rows(x.dt, false, true, 1, X, Wih, 1, G, LSTMN_GEMM_ROWS);
    attnc_gemm_rows(x.dt, false, true, 1, X, Wx, 0, Q, LSTMN_GEMM_ROWS);
    int workers = attnc_workers_for(BT * (x.H * (4 * x.H + 2 * x.A) + x.T * x.A));
    ATTNC_TYPED(x.dt, lstmn_forward)(&x, p, slots, output->data, attnc_present(attention) ? attention->data : NULL,
                                     workers);
    free(own);
    return ATTNC_OK;
}

/* ---- backward -------------------------------------------------------------------- */

/* dw (out, in) <- dy^T xs over `rows` rows: dy (rows, out) contiguous, xs
 * (rows, in) with row stride rs. */
static void wgrad(const lstmn_run *x, void *dw, const void *dy, int64_t out, const void *xs, int64_t in, int64_t rs,
                  int64_t rows) {
    attnc_mat a = {(void *)dy, rows, out, out, 1}, b = {(void *)xs, rows, in, rs, 1}, c = {dw, out, in, in, 1};
    attnc_gemm_rows(x->dt, true, false, 1, a, b, 0, c, LSTMN_GEMM_ROWS);
}

attnc_status attnc_lstmn_backward(attnc_lstmn_params *grads, attnc_tensor *dinput, const attnc_tensor *doutput,
                                  const attnc_tensor *saved, const attnc_tensor *input, const attnc_tensor *lengths,
                                  const attnc_lstmn_params *p) {
    lstmn_run x;
    TRY(setup(&x, input, lengths, p));
    if (!grads) return attnc_fail(ATTNC_ERR_TYPE, "the gradients are required");
    if (x.bias != attnc_present(&grads->bias))
        return attnc_fail(ATTNC_ERR_VALUE, "the gradient of bias must be given exactly when bias is");
    TRY(check_params(&x, grads, true));
    if (attnc_present(dinput)) TRY(ATTNC_NEED(dinput, "dinput", x.dt, true, x.B, x.T, x.I));
    TRY(ATTNC_NEED(doutput, "doutput", x.dt, false, x.B, x.T, x.H));
    TRY(check_saved(&x, saved, false));
    size_t es = attnc_dtype_size(x.dt);
    int64_t BT = x.B * x.T, H = x.H, A = x.A;
    /* dG (BT, 4H): pre-activation gate cotangents; dQ, dKH, dV (BT, A): of the
     * query, of the key W_h h_i, the per-step parts of v's gradient; dHC (BT,
     * 2H): the cotangents of h_i and c_i from later steps' reads. */
    void *dG = NULL, *dQ = NULL, *dKH = NULL, *dV = NULL, *dHC = NULL, *scratch = NULL;
    int workers = attnc_workers_for(BT * (x.H * (4 * x.H + 2 * x.A) + x.T * x.A) * 2);
    attnc_status st = attnc_calloc(&dG, (size_t)(BT * 4 * H), es, "the LSTMN's gate cotangents");
    if (st == ATTNC_OK) st = attnc_calloc(&dQ, (size_t)(BT * A), es, "the LSTMN's query cotangents");
    if (st == ATTNC_OK) st = attnc_calloc(&dKH, (size_t)(BT * A), es, "the LSTMN's key cotangents");
    if (st == ATTNC_OK) st = attnc_calloc(&dV, (size_t)(BT * A), es, "the LSTMN's score cotangents");
    if (st == ATTNC_OK) st = attnc_calloc(&dHC, (size_t)(BT * 2 * H), es, "the LSTMN's tape cotangents");
    if (st == ATTNC_OK) st = attnc_calloc(&scratch, (size_t)(workers * LSTMN_ROWS * 4 * H), es, "the LSTMN's scratch");
    if (st == ATTNC_OK) {
        if (BT > 0) {
            ATTNC_TYPED(x.dt, lstmn_backward)(&x, p, saved->data, doutput->data, dG, dQ, dKH, dV, dHC, scratch,
                                              workers);
        }
        const char *sv = saved->data;
        if (BT == 0) {
            attnc_tensor *all[] = {&grads->weight_ih, &grads->weight_hh,  &grads->bias,  &grads->attn_h,
                                   &grads->attn_x,    &grads->attn_tilde, &grads->attn_v};
            for (int i = 0; i < 7; i++)
                if (attnc_present(all[i])) memset(all[i]->data, 0, (size_t)attnc_numel(all[i]) * es);
        } else {
            wgrad(&x, grads->weight_ih.data, dG, 4 * H, input->data, x.I, x.I, BT);
            wgrad(&x, grads->weight_hh.data, dG, 4 * H, sv + x.ht * (int64_t)es, H, x.S, BT);
            if (x.bias) attnc_col_sums(x.dt, grads->bias.data, dG, BT, 4 * H, 4 * H);
            wgrad(&x, grads->attn_h.data, dKH, A, sv + x.h * (int64_t)es, H, x.S, BT);
            wgrad(&x, grads->attn_x.data, dQ, A, input->data, x.I, x.I, BT);
            wgrad(&x, grads->attn_tilde.data, dQ, A, sv + x.hq * (int64_t)es, H, x.S, BT);
            attnc_col_sums(x.dt, grads->attn_v.data, dV, BT, A, A);
            if (attnc_present(dinput)) { /* dx = dG W_ih + dQ W_x over every step at once */
                attnc_mat a = {dG, BT, 4 * H, 4 * H, 1}, w = {p->weight_ih.data, 4 * H, x.I, x.I, 1};
                attnc_mat aq = {dQ, BT, A, A, 1}, wq = {p->attn_x.data, A, x.I, x.I, 1};
                attnc_mat c = {dinput->data, BT, x.I, x.I, 1};
                attnc_gemm_rows(x.dt, false, false, 1, a, w, 0, c, LSTMN_GEMM_ROWS);
                attnc_gemm_rows(x.dt, false, false, 1, aq, wq, 1, c, LSTMN_GEMM_ROWS);
            }
        }
    }
    free(dG);
    free(dQ);
    free(dKH);
    free(dV);
    free(dHC);
    free(scratch);
    return st;
}
