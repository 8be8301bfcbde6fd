/* model.c: the NTM of attnc.models.NTM over whole sequences, forward and
 * backward through time (equations in model.h).
 *
 * Rows are independent through time, so blocks of NTM_ROWS rows run in
 * parallel, each looping over every step; inside a block each step's
 * products (the controller, the head parameters, the output layer) are one
 * matrix product over the block's rows. The forward saves one slot per
 * (row, step) (its layout: ntm_layout); without a backward to come, each
 * row keeps only two slots. The backward stores the pre-activation
 * cotangents of every (row, step) and forms the weight gradients after the
 * loop, each one product over all of them in a fixed order, so the bits do
 * not depend on the thread count. */
#include "model.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

enum { NTM_ROWS = 8, NTM_GEMM_ROWS = 64 }; /* rows per time-loop block; output rows per product block */

typedef struct {
    int64_t B, T, I, O, C, N, M, R, W, Hh, K, P;
    int64_t Z, G, HR; /* controller input I + R M; pre-activations 4C or C; [h; r] C + R M */
    int lstm;
    double clip;
    attnc_dtype dt;
    /* a slot: the offsets of its arrays (elements) and its size S */
    int64_t z, hprev, gates, c, hr, p, wc, wg, wt, w, mem, S;
    int64_t scratch; /* elements per worker */
} ntm_run;

typedef struct {
    const ntm_run *x;
    const void *inputs;                    /* (B, T, I)                              */
    const void *w_ih, *w_hh, *b_ih, *b_hh; /* the controller (w_hh, b_hh: LSTM only)  */
    const void *head_w, *head_b, *out_w, *out_b;
    const void *mem0, *r0, *w0; /* (B, N, M), (B, R, M), (B, Hh, N)       */
    void *saved;                /* B T slots (model.c's layout); NULL: two slots per row in scratch          */
    void *scratch;              /* per worker, x->scratch REALs                                            */
    /* forward */
    void *logits;             /* (B, T, O)                              */
    void *weights, *memories; /* (B, T, Hh, N), (B, T, N, M) or NULL    */
    /* backward */
    const void *dlogits;     /* (B, T, O)                              */
    void *dG, *dP;           /* (B T, G), (B T, P): pre-activation cotangents */
    void *dinputs;           /* (B, T, I) or NULL                      */
    void *dmem0, *dr0, *dw0; /* the initial state's gradients          */
} ntm_job;

#define ATTNC_F64 0
#include "model_impl.h"
#define ATTNC_F64 1
#include "model_impl.h"

/* A slot holds, for one (row, step): z (Z), h_{t-1} (C, LSTM), the gates
 * after their activations (4C, LSTM), c_t (C, LSTM), [h_t; r_t] (HR), the
 * raw head parameters p_t (P), w_c, w_g, w~ and w_t of every head (Hh N
 * each) and the memory M_{t-1} (N M). */
static void ntm_layout(ntm_run *x) {
    int64_t widths[] = {x->Z,         x->lstm ? x->C : 0, x->lstm ? 4 * x->C : 0, x->lstm ? x->C : 0, x->HR,      x->P,
                        x->Hh * x->N, x->Hh * x->N,       x->Hh * x->N,           x->Hh * x->N,       x->N * x->M};
    int64_t *offsets[] = {&x->z, &x->hprev, &x->gates, &x->c, &x->hr, &x->p, &x->wc, &x->wg, &x->wt, &x->w, &x->mem};
    int64_t at = 0;
    for (int i = 0; i < 11; i++) {
        *offsets[i] = at;
        at += widths[i];
    }
    x->S = at;
    int64_t WM = x->W * x->M, NM = x->N * x->M;
    int64_t fwd = 2 * NTM_ROWS * x->S + 2 * WM + x->M + x->K + NM;
    int64_t per_row = NM + x->Hh * x->N + x->R * x->M + 2 * x->C + x->HR + x->Z;
    int64_t bwd = 4 * WM + x->Hh * x->N + 2 * x->M + 2 * x->K + 2 * x->N + NTM_ROWS * per_row;
    x->scratch = ((fwd > bwd ? fwd : bwd) + 15) / 16 * 16;
}

/* ---- checks -------------------------------------------------------------------- */

/* t present, of the run's dtype, C-contiguous, with the given sizes (ndim <= 4). */
static attnc_status check_params(const ntm_run *x, const attnc_ntm_params *p, bool output) {
#define PARAM(t, label, ...) TRY(ATTNC_NEED_PARAM(t, label, x->dt, output, __VA_ARGS__))
    if (x->lstm) {
        PARAM(&p->w_ih, "controller.weight_ih", 4 * x->C, x->Z);
        PARAM(&p->w_hh, "controller.weight_hh", 4 * x->C, x->C);
        PARAM(&p->b_ih, "controller.bias_ih", 4 * x->C);
        PARAM(&p->b_hh, "controller.bias_hh", 4 * x->C);
    } else {
        PARAM(&p->w_ih, "controller.weight", x->C, x->Z);
        PARAM(&p->b_ih, "controller.bias", x->C);
        if (attnc_present(&p->w_hh) || attnc_present(&p->b_hh))
            return attnc_fail(ATTNC_ERR_VALUE, "a feedforward controller has no recurrent weights");
    }
    PARAM(&p->head_w, "heads.weight", x->P, x->C);
    PARAM(&p->head_b, "heads.bias", x->P);
    PARAM(&p->out_w, "output.weight", x->O, x->HR);
    PARAM(&p->out_b, "output.bias", x->O);
#undef PARAM
    return ATTNC_OK;
}

/* The run's sizes from inputs (B, T, I), the initial memory (B, N, M), the
 * parameters and the config; checks all of them. */
static attnc_status setup(ntm_run *x, const attnc_tensor *inputs, const attnc_ntm_state *init,
                          const attnc_ntm_params *p, const attnc_ntm_config *cfg) {
    *x = (ntm_run){0};
    if (!cfg || !p || !init) return attnc_fail(ATTNC_ERR_TYPE, "config, parameters and initial state are required");
    if (cfg->read_heads < 0 || cfg->write_heads < 0 || cfg->read_heads + cfg->write_heads < 1)
        return attnc_fail(ATTNC_ERR_VALUE, "the NTM needs read_heads, write_heads >= 0 and at least one head");
    if (!(cfg->clip > 0)) return attnc_fail(ATTNC_ERR_VALUE, "clip must be > 0, got %g", cfg->clip);
    if (!attnc_present(inputs)) return attnc_fail(ATTNC_ERR_TYPE, "inputs is required");
    x->dt = inputs->dtype;
    if (x->dt != ATTNC_FLOAT32 && x->dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "inputs has dtype %s, expected float32 or float64", attnc_dtype_name(x->dt));
    int64_t in[3] = {-1, -1, -1}, mem[3] = {-1, -1, -1};
    TRY(attnc_check_dims(inputs, "inputs", x->dt, 3, in, false));
    if (!attnc_is_contiguous(inputs)) return attnc_fail(ATTNC_ERR_LAYOUT, "inputs must be C-contiguous");
    mem[0] = in[0];
    TRY(attnc_check_dims(&init->memory, "the initial memory", x->dt, 3, mem, false));
    x->B = in[0];
    x->T = in[1];
    x->I = in[2];
    x->N = mem[1];
    x->M = mem[2];
    x->R = cfg->read_heads;
    x->W = cfg->write_heads;
    x->Hh = x->R + x->W;
    x->lstm = cfg->lstm != 0;
    x->clip = cfg->clip;
    /* the sizes the parameters give (each checked whole by check_params) */
    int64_t cw[2] = {-1, -1}, hw[2] = {-1, -1}, ow[2] = {-1, -1};
    TRY(attnc_check_array(x->lstm ? &p->w_hh : &p->w_ih, x->lstm ? "controller.weight_hh" : "controller.weight", x->dt,
                          2, cw, false));
    TRY(attnc_check_array(&p->head_w, "heads.weight", x->dt, 2, hw, false));
    TRY(attnc_check_array(&p->out_w, "output.weight", x->dt, 2, ow, false));
    x->C = x->lstm ? cw[1] : cw[0];
    x->O = ow[0];
    x->P = hw[0];
    if (x->N < 1 || x->M < 1 || x->C < 1 || x->O < 1)
        return attnc_fail(ATTNC_ERR_VALUE, "memory slots, memory width, controller and output sizes must be >= 1");
    int64_t fixed = x->R * (x->M + 3) + x->W * (3 * x->M + 3);
    x->K = (x->P - fixed) / x->Hh;
    if (x->P < fixed + x->Hh || (x->P - fixed) % x->Hh || x->K % 2 == 0)
        return attnc_fail(ATTNC_ERR_VALUE,
                          "heads.weight has %lld rows: R (M + K + 3) + W (3M + K + 3) with an odd K is expected",
                          (long long)x->P);
    x->Z = x->I + x->R * x->M;
    x->G = x->lstm ? 4 * x->C : x->C;
    x->HR = x->C + x->R * x->M;
    TRY(check_params(x, p, false));
    TRY(ATTNC_NEED(&init->memory, "the initial memory", x->dt, false, x->B, x->N, x->M));
    TRY(ATTNC_NEED(&init->reads, "the initial reads", x->dt, false, x->B, x->R, x->M));
    TRY(ATTNC_NEED(&init->weights, "the initial weights", x->dt, false, x->B, x->Hh, x->N));
    ntm_layout(x);
    return ATTNC_OK;
}

int64_t attnc_ntm_saved_size(int64_t B, int64_t T, int64_t I, int64_t C, int64_t N, int64_t M, int64_t P,
                             const attnc_ntm_config *cfg) {
    ntm_run x = {.B = B,
                 .T = T,
                 .I = I,
                 .C = C,
                 .N = N,
                 .M = M,
                 .P = P,
                 .lstm = cfg->lstm != 0,
                 .R = cfg->read_heads,
                 .W = cfg->write_heads};
    x.Hh = x.R + x.W;
    if (x.Hh < 1) return 0;
    x.K = (P - x.R * (M + 3) - x.W * (3 * M + 3)) / x.Hh;
    x.Z = I + x.R * M;
    x.HR = C + x.R * M;
    ntm_layout(&x);
    return B * T * x.S;
}

static attnc_status check_saved(const ntm_run *x, const attnc_tensor *saved, bool output) {
    return ATTNC_NEED(saved, "saved", x->dt, output, x->B * x->T * x->S);
}

/* ---- forward --------------------------------------------------------------------- */

attnc_status attnc_ntm_forward(attnc_tensor *logits, attnc_tensor *weights, attnc_tensor *memories, attnc_tensor *saved,
                               const attnc_tensor *inputs, const attnc_ntm_state *init, const attnc_ntm_params *p,
                               const attnc_ntm_config *cfg) {
    ntm_run x;
    TRY(setup(&x, inputs, init, p, cfg));
    TRY(ATTNC_NEED(logits, "logits", x.dt, true, x.B, x.T, x.O));
    if (attnc_present(weights)) TRY(ATTNC_NEED(weights, "weights", x.dt, true, x.B, x.T, x.Hh, x.N));
    if (attnc_present(memories)) TRY(ATTNC_NEED(memories, "memories", x.dt, true, x.B, x.T, x.N, x.M));
    bool keep = attnc_present(saved);
    if (keep) TRY(check_saved(&x, saved, true));
    if (x.B == 0 || x.T == 0) return ATTNC_OK;
    int workers = attnc_workers_for(x.B * x.T * (x.G * (x.Z + x.C) + x.Hh * x.N * x.M * 4));
    void *scratch = NULL;
    TRY(attnc_calloc(&scratch, (size_t)(workers * x.scratch), attnc_dtype_size(x.dt), "the NTM's scratch"));
    ntm_job j = {.x = &x,
                 .inputs = inputs->data,
                 .w_ih = p->w_ih.data,
                 .w_hh = p->w_hh.data,
                 .b_ih = p->b_ih.data,
                 .b_hh = p->b_hh.data,
                 .head_w = p->head_w.data,
                 .head_b = p->head_b.data,
                 .out_w = p->out_w.data,
                 .out_b = p->out_b.data,
                 .mem0 = init->memory.data,
                 .r0 = init->reads.data,
                 .w0 = init->weights.data,
                 .saved = keep ? saved->data : NULL,
                 .scratch = scratch,
                 .logits = logits->data,
                 .weights = attnc_present(weights) ? weights->data : NULL,
                 .memories = attnc_present(memories) ? memories->data : NULL};
    attnc_parallel_for((x.B + NTM_ROWS - 1) / NTM_ROWS, workers, ATTNC_TYPED(x.dt, ntm_forward_task), &j);
    free(scratch);
    return ATTNC_OK;
}

/* ---- backward -------------------------------------------------------------------- */

/* dw (out, in) <- dy^T xs over `rows` rows: dy (rows, out) contiguous, xs
 * (rows, in) with row stride rs. */
static void wgrad(const ntm_run *x, void *dw, const void *dy, int64_t out, const void *xs, int64_t in, int64_t rs,
                  int64_t rows) {
    attnc_mat a = {(void *)dy, rows, out, out, 1}, b = {(void *)xs, rows, in, rs, 1}, c = {dw, out, in, in, 1};
    attnc_gemm_rows(x->dt, true, false, 1, a, b, 0, c, NTM_GEMM_ROWS);
}

static attnc_status check_grads(const ntm_run *x, attnc_ntm_params *grads, attnc_ntm_state *dinit,
                                attnc_tensor *dinputs, const attnc_tensor *dlogits) {
    TRY(check_params(x, grads, true));
    TRY(ATTNC_NEED(&dinit->memory, "the initial memory's gradient", x->dt, true, x->B, x->N, x->M));
    TRY(ATTNC_NEED(&dinit->reads, "the initial reads' gradient", x->dt, true, x->B, x->R, x->M));
    TRY(ATTNC_NEED(&dinit->weights, "the initial weights' gradient", x->dt, true, x->B, x->Hh, x->N));
    if (attnc_present(dinputs)) TRY(ATTNC_NEED(dinputs, "dinputs", x->dt, true, x->B, x->T, x->I));
    return ATTNC_NEED(dlogits, "dlogits", x->dt, false, x->B, x->T, x->O);
}

/* Every weight gradient from the stored cotangents and the saved slots. */
static void weight_grads(const ntm_run *x, attnc_ntm_params *g, const void *dG, const void *dP,
                         const attnc_tensor *dlogits, const void *saved) {
    size_t es = attnc_dtype_size(x->dt);
    int64_t rows = x->B * x->T;
    const char *s = saved;
    if (rows == 0) { /* no steps: every gradient is 0 */
        attnc_tensor *all[] = {&g->w_ih, &g->w_hh, &g->b_ih, &g->b_hh, &g->head_w, &g->head_b, &g->out_w, &g->out_b};
        for (int i = 0; i < 8; i++)
            if (attnc_present(all[i])) memset(all[i]->data, 0, (size_t)attnc_numel(all[i]) * es);
        return;
    }
    wgrad(x, g->w_ih.data, dG, x->G, s + x->z * es, x->Z, x->S, rows);
    attnc_col_sums(x->dt, g->b_ih.data, dG, rows, x->G, x->G);
    if (x->lstm) {
        wgrad(x, g->w_hh.data, dG, x->G, s + x->hprev * es, x->C, x->S, rows);
        memcpy(g->b_hh.data, g->b_ih.data, (size_t)x->G * es);
    }
    wgrad(x, g->head_w.data, dP, x->P, s + x->hr * es, x->C, x->S, rows);
    attnc_col_sums(x->dt, g->head_b.data, dP, rows, x->P, x->P);
    wgrad(x, g->out_w.data, dlogits->data, x->O, s + x->hr * es, x->HR, x->S, rows);
    attnc_col_sums(x->dt, g->out_b.data, dlogits->data, rows, x->O, x->O);
}

attnc_status attnc_ntm_backward(attnc_ntm_params *grads, attnc_ntm_state *dinit, attnc_tensor *dinputs,
                                const attnc_tensor *dlogits, const attnc_tensor *saved, const attnc_tensor *inputs,
                                const attnc_ntm_state *init, const attnc_ntm_params *p, const attnc_ntm_config *cfg) {
    ntm_run x;
    TRY(setup(&x, inputs, init, p, cfg));
    if (!grads || !dinit) return attnc_fail(ATTNC_ERR_TYPE, "the gradients are required");
    TRY(check_grads(&x, grads, dinit, dinputs, dlogits));
    TRY(check_saved(&x, saved, false));
    size_t es = attnc_dtype_size(x.dt);
    void *scratch = NULL, *dG = NULL, *dP = NULL;
    int workers = attnc_workers_for(x.B * x.T * (x.G * (x.Z + x.C) + x.Hh * x.N * x.M * 8));
    attnc_status st = attnc_calloc(&scratch, (size_t)(workers * x.scratch), es, "the NTM's scratch");
    if (st == ATTNC_OK) st = attnc_calloc(&dG, (size_t)(x.B * x.T * x.G), es, "the NTM's controller cotangents");
    if (st == ATTNC_OK) st = attnc_calloc(&dP, (size_t)(x.B * x.T * x.P), es, "the NTM's head cotangents");
    if (st == ATTNC_OK) {
        if (x.B * x.T > 0) {
            ntm_job j = {.x = &x,
                         .inputs = inputs->data,
                         .w_ih = p->w_ih.data,
                         .w_hh = p->w_hh.data,
                         .b_ih = p->b_ih.data,
                         .b_hh = p->b_hh.data,
                         .head_w = p->head_w.data,
                         .head_b = p->head_b.data,
                         .out_w = p->out_w.data,
                         .out_b = p->out_b.data,
                         .mem0 = init->memory.data,
                         .r0 = init->reads.data,
                         .w0 = init->weights.data,
                         .saved = saved->data,
                         .scratch = scratch,
                         .dlogits = dlogits->data,
                         .dG = dG,
                         .dP = dP,
                         .dinputs = attnc_present(dinputs) ? dinputs->data : NULL,
                         .dmem0 = dinit->memory.data,
                         .dr0 = dinit->reads.data,
                         .dw0 = dinit->weights.data};
            attnc_parallel_for((x.B + NTM_ROWS - 1) / NTM_ROWS, workers, ATTNC_TYPED(x.dt, ntm_backward_task), &j);
        } else {
            memset(dinit->memory.data, 0, (size_t)(x.B * x.N * x.M) * es);
            memset(dinit->reads.data, 0, (size_t)(x.B * x.R * x.M) * es);
            memset(dinit->weights.data, 0, (size_t)(x.B * x.Hh * x.N) * es);
        }
        weight_grads(&x, grads, dG, dP, dlogits, saved->data);
    }
    free(scratch);
    free(dG);
    free(dP);
    return st;
}
