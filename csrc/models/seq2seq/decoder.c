/* decoder.c: the recurrent attention decoder of attnc.models.Seq2Seq over a
 * whole teacher-forced target sequence, forward and backward through time.
 *
 * Rows are independent through time, so both directions run blocks of
 * S2S_ROWS rows in parallel, each block looping over every step. What rows
 * share (the weight gradients, the embedding gradient) is formed after the
 * loop from per-step cotangent rows, in a fixed order: results do not depend
 * on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/rng.h"
#include "../../core/status.h"
#include "../../core/threads.h"
#include "../../ops/transformer/layer.h"
#include "decoder.h"

typedef struct {
    const s2s_run *x;
    char *slots; /* slot -1 .. T-1, each slot_size elements   */
    int64_t slot_size;
    const int64_t *tgt_in; /* (B, T)                                     */
    int64_t *fed;          /* (B, T)                                     */
    void *feat, *align;    /* (B, T, F), (B, T, S) or NULL               */
    double sampling;
    uint64_t seed;
    void *scratch; /* per worker                                 */
    int64_t scratch_size;
    /* backward */
    const void *dfeat;
    struct {
        void *dg, *dx, *dpc, *dqw, *de, *dhp;
    } cot;                                           /* step 0's (s2s_cot); step t's at + t * R * width */
    void *dmem, *dkeys, *dv, *dvp, *dfinal, *dstart; /* dstart (B, H): of h_{-1}, before the tanh */
} s2s_job;

typedef struct {
    void *dw;
    const void *dy, *x;
    int64_t out, in, R, steps, dy_step, x_step, x_rs, rows; /* rows: output rows per block */
} s2s_wgrad;

#define ATTNC_F64 0
#include "decoder_impl.h"
#define ATTNC_F64 1
#include "decoder_impl.h"

/* ---- layout ------------------------------------------------------------------ */

/* The width of every slot array, in s2s_slot's order (0: unused). */
static void slot_widths(const s2s_run *x, int64_t w[11]) {
    bool local = x->kind == ATTNC_S2S_LOCAL_M || x->kind == ATTNC_S2S_LOCAL_P, lp = x->kind == ATTNC_S2S_LOCAL_P;
    int64_t v[11] = {x->U,
                     4 * x->H,
                     x->H,
                     x->H,
                     x->additive ? x->A : 0,
                     x->kind != ATTNC_S2S_NONE ? x->S : 0,
                     lp ? x->S : 0,
                     local ? 1 : 0,
                     lp ? x->A : 0,
                     x->luong ? x->He + x->H : 0,
                     x->luong ? x->H : 0};
    memcpy(w, v, sizeof v);
}

int64_t s2s_slot_size(const s2s_run *x) {
    int64_t w[11], total = 0;
    slot_widths(x, w);
    for (int i = 0; i < 11; i++) total += w[i] * x->R;
    return total;
}

s2s_slot s2s_slot_at(const s2s_run *x, void *base) {
    int64_t w[11], at = 0;
    slot_widths(x, w);
    void *p[11];
    for (int i = 0; i < 11; i++) {
        p[i] = w[i] ? (char *)base + at * (int64_t)x->es : NULL;
        at += w[i] * x->R;
    }
    s2s_slot s = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10]};
    return s;
}

int64_t s2s_scratch_size(const s2s_run *x) {
    int64_t fwd = 2 * S2S_ROWS + S2S_ROWS * x->Vt + S2S_ROWS * x->Smax + x->S;
    int64_t bwd = S2S_ROWS * (5 * x->H + 2 * x->He + x->U) + x->S;
    int64_t n = fwd > bwd ? fwd : bwd;
    return (n + 15) / 16 * 16; /* keeps every worker's part aligned for int64 */
}

/* ---- checks -------------------------------------------------------------- */

/* t present, of dtype dt, C-contiguous, with ndim dims: (d0, d1, any). */
static attnc_status need(const attnc_tensor *t, const char *name, attnc_dtype dt, int ndim, int64_t d0, int64_t d1) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "the decoder needs %s", name);
    int64_t sizes[3] = {d0, d1, -1};
    return attnc_check_array(t, name, dt, ndim, sizes, false);
}

/* What follows from the kind, input feeding and the sizes H, He and E: the
 * Luong and additive flags, the feed Fin, the LSTM input U, the features F. */
static void kind_sizes(s2s_run *x, bool input_feeding) {
    x->luong = x->kind >= ATTNC_S2S_DOT;
    x->additive = x->kind == ATTNC_S2S_BAHDANAU || x->kind == ATTNC_S2S_CONCAT;
    x->Fin = x->luong ? (input_feeding ? x->H : 0) : x->He;
    x->U = x->E + x->Fin + x->H;
    x->F = x->luong || x->kind == ATTNC_S2S_NONE ? x->H : x->H + x->He;
}

/* The width of the projected keys: A (additive), H (general, local), 0. */
static int64_t key_width(const s2s_run *x) {
    bool general = x->kind == ATTNC_S2S_GENERAL || x->kind == ATTNC_S2S_LOCAL_M || x->kind == ATTNC_S2S_LOCAL_P;
    return x->additive ? x->A : general ? x->H : 0;
}

/* Elements of the saved buffer: the keys, then slots -1 .. T - 1. */
static int64_t saved_elements(const s2s_run *x, int64_t T) { return x->B * x->S * x->Kw + (T + 1) * s2s_slot_size(x); }

static attnc_status check_attention(s2s_run *x, const attnc_s2s_weights *w) {
    attnc_dtype dt = x->dt;
    if (x->additive) {
        TRY(need(&w->query_weight, "query_weight", dt, 2, -1, x->H));
        x->A = w->query_weight.shape[0];
        TRY(need(&w->key_weight, "key_weight", dt, 2, x->A, x->He));
        TRY(need(&w->v, "v", dt, 1, x->A, 0));
    } else if (x->kind == ATTNC_S2S_DOT) {
        if (x->He != x->H)
            return attnc_fail(ATTNC_ERR_VALUE,
                              "luong-dot needs the memory width (%lld) to equal the hidden size (%lld)",
                              (long long)x->He, (long long)x->H);
    } else if (x->kind == ATTNC_S2S_LOCATION) {
        TRY(need(&w->weight, "weight", dt, 2, -1, x->H));
        x->Smax = w->weight.shape[0];
        TRY(need(&w->bias, "bias", dt, 1, x->Smax, 0));
        if (x->S > x->Smax)
            return attnc_fail(ATTNC_ERR_VALUE, "luong-location scores %lld source positions; the memory has %lld",
                              (long long)x->Smax, (long long)x->S);
    } else if (x->kind != ATTNC_S2S_NONE) { /* general, local-m, local-p */
        TRY(need(&w->weight, "weight", dt, 2, x->H, x->He));
    }
    if (x->kind == ATTNC_S2S_LOCAL_P) {
        TRY(need(&w->position_weight, "position_weight", dt, 2, -1, x->H));
        x->A = w->position_weight.shape[0];
        TRY(need(&w->position_v, "position_v", dt, 1, x->A, 0));
    }
    if (x->luong) TRY(need(&w->combine, "combine", dt, 2, x->H, x->He + x->H));
    return ATTNC_OK;
}

attnc_status s2s_setup(s2s_run *x, const attnc_s2s_weights *w, const attnc_s2s_config *cfg, const attnc_tensor *memory,
                       const attnc_tensor *final, const attnc_tensor *lengths) {
    memset(x, 0, sizeof *x);
    if (!w || !cfg) return attnc_fail(ATTNC_ERR_TYPE, "the decoder needs weights and a config");
    if (cfg->attention < ATTNC_S2S_NONE || cfg->attention > ATTNC_S2S_LOCAL_P)
        return attnc_fail(ATTNC_ERR_VALUE, "unknown attention kind %d", (int)cfg->attention);
    x->kind = cfg->attention;
    x->window = cfg->window;
    bool local = x->kind == ATTNC_S2S_LOCAL_M || x->kind == ATTNC_S2S_LOCAL_P;
    if (local && !(cfg->window >= (x->kind == ATTNC_S2S_LOCAL_P ? 1 : 0)))
        return attnc_fail(ATTNC_ERR_VALUE, "window must be >= %d for local attention, got %g",
                          x->kind == ATTNC_S2S_LOCAL_P ? 1 : 0, cfg->window);
    if (!attnc_present(memory)) return attnc_fail(ATTNC_ERR_TYPE, "the decoder needs memory");
    x->dt = memory->dtype;
    if (x->dt != ATTNC_FLOAT32 && x->dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "memory must be float32 or float64");
    x->es = attnc_dtype_size(x->dt);
    TRY(need(memory, "memory", x->dt, 3, -1, -1));
    int64_t shape[3];
    memcpy(shape, memory->shape, sizeof shape);
    x->B = shape[0];
    x->S = shape[1];
    x->He = shape[2];
    if (x->S < 1) return attnc_fail(ATTNC_ERR_VALUE, "memory needs at least one source step");
    TRY(need(final, "final", x->dt, 2, x->B, x->He));
    TRY(need(lengths, "lengths", ATTNC_INT64, 1, x->B, 0));
    x->len = lengths->data;
    for (int64_t b = 0; b < x->B; b++)
        if (x->len[b] < 1 || x->len[b] > x->S)
            return attnc_fail(ATTNC_ERR_VALUE, "lengths[%lld] = %lld is outside [1, %lld]", (long long)b,
                              (long long)x->len[b], (long long)x->S);
    TRY(need(&w->embedding, "embedding", x->dt, 2, -1, -1));
    x->Vt = w->embedding.shape[0];
    x->E = w->embedding.shape[1];
    TRY(need(&w->weight_hh, "weight_hh", x->dt, 2, -1, -1));
    x->H = w->weight_hh.shape[1];
    if (w->weight_hh.shape[0] != 4 * x->H)
        return attnc_fail(ATTNC_ERR_VALUE, "weight_hh has shape (%lld, %lld); it needs (4 H, H)",
                          (long long)w->weight_hh.shape[0], (long long)x->H);
    kind_sizes(x, cfg->input_feeding != 0);
    TRY(need(&w->weight_ih, "weight_ih", x->dt, 2, 4 * x->H, x->E + x->Fin));
    TRY(need(&w->bias_ih, "bias_ih", x->dt, 1, 4 * x->H, 0));
    TRY(need(&w->bias_hh, "bias_hh", x->dt, 1, 4 * x->H, 0));
    TRY(need(&w->bridge_weight, "bridge_weight", x->dt, 2, x->H, x->He));
    TRY(need(&w->bridge_bias, "bridge_bias", x->dt, 1, x->H, 0));
    x->Smax = x->S;
    TRY(check_attention(x, w));
    x->Kw = key_width(x);
    if (attnc_present(&w->out_weight)) {
        TRY(need(&w->out_weight, "out_weight", x->dt, 2, x->Vt, x->F));
        TRY(need(&w->out_bias, "out_bias", x->dt, 1, x->Vt, 0));
    }
    x->emb = w->embedding.data;
    x->wq = w->query_weight.data;
    x->wkey = w->key_weight.data;
    x->v = w->v.data;
    x->watt = w->weight.data;
    x->batt = w->bias.data;
    x->wp = w->position_weight.data;
    x->vp = w->position_v.data;
    x->comb = w->combine.data;
    x->bridge_w = w->bridge_weight.data;
    x->bridge_b = w->bridge_bias.data;
    x->out_w = w->out_weight.data;
    x->out_b = w->out_bias.data;
    x->memory = memory->data;
    x->final = final->data;
    x->R = x->B;
    return ATTNC_OK;
}

/* ---- shared buffers --------------------------------------------------------- */

/* x->wcat = [W_ih | W_hh] (4H, U) and x->bsum = b_ih + b_hh (4H). */
static attnc_status pack_weights(s2s_run *x, const attnc_s2s_weights *w) {
    int64_t G = 4 * x->H, in = x->E + x->Fin;
    TRY(attnc_calloc(&x->wcat, (size_t)(G * x->U), x->es, "decoder weights"));
    TRY(attnc_calloc(&x->bsum, (size_t)G, x->es, "decoder biases"));
    for (int64_t g = 0; g < G; g++) {
        memcpy((char *)x->wcat + (size_t)(g * x->U) * x->es, (const char *)w->weight_ih.data + (size_t)(g * in) * x->es,
               (size_t)in * x->es);
        memcpy((char *)x->wcat + (size_t)(g * x->U + in) * x->es,
               (const char *)w->weight_hh.data + (size_t)(g * x->H) * x->es, (size_t)x->H * x->es);
    }
    ATTNC_TYPED(x->dt, s2s_add)(x->bsum, w->bias_ih.data, w->bias_hh.data, G);
    return ATTNC_OK;
}

attnc_status s2s_prepare(s2s_run *x, const attnc_s2s_weights *w, void *keys_buf) {
    attnc_status st = pack_weights(x, w);
    if (st == ATTNC_OK && x->Kw > 0) {
        x->keys = keys_buf;
        if (!keys_buf) st = attnc_calloc(&x->keys, (size_t)(x->B * x->S * x->Kw), x->es, "attention keys");
    }
    if (st == ATTNC_OK && x->Kw > 0) { /* keys (B S, Kw) = memory (B S, He) W^T */
        int64_t shape[2] = {x->B * x->S, x->He}, kshape[2] = {x->B * x->S, x->Kw};
        attnc_tensor mem = attnc_view((void *)x->memory, x->dt, 2, shape), keys = attnc_view(x->keys, x->dt, 2, kshape);
        st = attnc_linear_forward(&keys, &mem, x->additive ? &w->key_weight : &w->weight, NULL);
    }
    if (st != ATTNC_OK) s2s_release(x, keys_buf == NULL);
    return st;
}

void s2s_release(s2s_run *x, bool keys_owned) {
    free(x->wcat);
    free(x->bsum);
    if (keys_owned) free(x->keys);
    x->wcat = x->bsum = x->keys = NULL;
}

/* ---- forward ------------------------------------------------------------------ */

int64_t attnc_s2s_saved_size(const attnc_s2s_config *cfg, const attnc_s2s_weights *w, int64_t B, int64_t S, int64_t T) {
    if (!cfg || !w || B < 0 || S < 1 || T < 0 || !attnc_present(&w->weight_hh) || w->weight_hh.ndim != 2 ||
        !attnc_present(&w->bridge_weight) || w->bridge_weight.ndim != 2)
        return -1;
    s2s_run x = {.kind = cfg->attention,
                 .B = B,
                 .S = S,
                 .R = B,
                 .H = w->weight_hh.shape[1],
                 .He = w->bridge_weight.shape[1],
                 .E = attnc_present(&w->embedding) ? w->embedding.shape[1] : 0};
    bool additive = x.kind == ATTNC_S2S_BAHDANAU || x.kind == ATTNC_S2S_CONCAT;
    const attnc_tensor *a = additive ? &w->query_weight : &w->position_weight;
    x.A = attnc_present(a) && a->ndim == 2 ? a->shape[0] : 0;
    kind_sizes(&x, cfg->input_feeding != 0);
    x.Kw = key_width(&x);
    return saved_elements(&x, T);
}

static attnc_status check_saved(const s2s_run *x, const attnc_tensor *saved, int64_t T) {
    int64_t want = saved_elements(x, T);
    TRY(need(saved, "saved", x->dt, 1, -1, 0));
    if (saved->shape[0] != want)
        return attnc_fail(ATTNC_ERR_VALUE, "saved has %lld elements; the decoder needs %lld",
                          (long long)saved->shape[0], (long long)want);
    return ATTNC_OK;
}

static attnc_status check_tokens(const attnc_tensor *t, const char *name, int64_t B, int64_t limit) {
    TRY(need(t, name, ATTNC_INT64, 2, B, -1));
    const int64_t *p = t->data;
    for (int64_t i = 0; i < attnc_numel(t); i++)
        if (p[i] < 0 || p[i] >= limit)
            return attnc_fail(ATTNC_ERR_VALUE, "%s holds token %lld, outside [0, %lld)", name, (long long)p[i],
                              (long long)limit);
    return ATTNC_OK;
}

static int workers_for(const s2s_run *x) { return attnc_workers_for(x->B * x->T * x->U * 4 * x->H); }

attnc_status attnc_s2s_forward(attnc_tensor *features, attnc_tensor *alignments, attnc_tensor *fed, attnc_tensor *saved,
                               const attnc_tensor *memory, const attnc_tensor *final, const attnc_tensor *lengths,
                               const attnc_tensor *tgt_in, const attnc_s2s_weights *weights,
                               const attnc_s2s_config *cfg) {
    s2s_run x;
    TRY(s2s_setup(&x, weights, cfg, memory, final, lengths));
    TRY(check_tokens(tgt_in, "tgt_in", x.B, x.Vt));
    x.T = tgt_in->shape[1];
    if (cfg->sampling > 0 && !attnc_present(&weights->out_weight))
        return attnc_fail(ATTNC_ERR_TYPE, "scheduled sampling needs out_weight and out_bias");
    if (!(cfg->sampling >= 0 && cfg->sampling <= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "sampling must be in [0, 1], got %g", cfg->sampling);
    TRY(need(features, "features", x.dt, 3, x.B, x.T));
    if (features->shape[2] != x.F)
        return attnc_fail(ATTNC_ERR_VALUE, "features has width %lld; the decoder gives %lld",
                          (long long)features->shape[2], (long long)x.F);
    if (attnc_present(alignments)) {
        TRY(need(alignments, "alignments", x.dt, 3, x.B, x.T));
        if (alignments->shape[2] != x.S) return attnc_fail(ATTNC_ERR_VALUE, "alignments needs (B, T, S)");
    }
    TRY(need(fed, "fed", ATTNC_INT64, 2, x.B, x.T));
    TRY(check_saved(&x, saved, x.T));
    if (x.B == 0 || x.T == 0) return ATTNC_OK;
    TRY(s2s_prepare(&x, weights, saved->data));
    int workers = workers_for(&x);
    int64_t scratch = s2s_scratch_size(&x);
    void *work = NULL;
    attnc_status st = attnc_calloc(&work, (size_t)(workers * scratch), x.es, "decoder scratch");
    if (st == ATTNC_OK) {
        char *slots = (char *)saved->data + (size_t)(x.B * x.S * x.Kw) * x.es;
        s2s_job j = {.x = &x,
                     .slots = slots,
                     .slot_size = s2s_slot_size(&x),
                     .tgt_in = tgt_in->data,
                     .fed = fed->data,
                     .feat = features->data,
                     .align = attnc_present(alignments) ? alignments->data : NULL,
                     .sampling = cfg->sampling,
                     .seed = cfg->seed,
                     .scratch = work,
                     .scratch_size = scratch};
        attnc_parallel_for((x.B + S2S_ROWS - 1) / S2S_ROWS, workers, ATTNC_TYPED(x.dt, s2s_forward_task), &j);
    }
    free(work);
    s2s_release(&x, false);
    return st;
}

/* ---- backward --------------------------------------------------------------- */

/* dw (out, in) <- sum over steps of dY_t^T X_t (see s2s_wgrad), split over
 * blocks of output rows (64, or 16 for small outputs: a split by shape). */
static void wgrad(const s2s_run *x, void *dw, const void *dy, int64_t out, int64_t in, int64_t R, int64_t steps,
                  int64_t dy_step, const void *xs, int64_t x_step, int64_t x_rs) {
    memset(dw, 0, (size_t)(out * in) * x->es);
    int workers = attnc_workers_for(steps * R * out * in);
    int64_t rows = out >= 256 ? 64 : 16;
    s2s_wgrad g = {.dw = dw,
                   .dy = dy,
                   .x = xs,
                   .out = out,
                   .in = in,
                   .R = R,
                   .steps = steps,
                   .dy_step = dy_step,
                   .x_step = x_step,
                   .x_rs = x_rs,
                   .rows = rows};
    attnc_parallel_for((out + rows - 1) / rows, workers, ATTNC_TYPED(x->dt, s2s_wgrad_task), &g);
}

/* The backward's buffers (float elements of the call's dtype). */
typedef struct {
    void *dg, *dx, *dpc, *dqw, *de, *dhp; /* per step (T, B, width)      */
    void *dkeys, *dmem, *dfinal, *dv, *dvp, *dstart, *dwcat, *scratch;
} s2s_bufs;

static attnc_status alloc_bufs(const s2s_run *x, s2s_bufs *b, int workers, const attnc_tensor *dmemory,
                               const attnc_tensor *dfinal) {
    int64_t TB = x->T * x->B, G = 4 * x->H;
    bool lp = x->kind == ATTNC_S2S_LOCAL_P;
    struct {
        void **p;
        int64_t n;
    } want[] = {{&b->dg, TB * G},
                {&b->dx, TB * x->E},
                {&b->dpc, x->luong ? TB * x->H : 0},
                {&b->dqw, x->additive ? TB * x->A : 0},
                {&b->de, x->kind == ATTNC_S2S_LOCATION ? TB * x->Smax : 0},
                {&b->dhp, lp ? TB * x->A : 0},
                {&b->dkeys, x->B * x->S * x->Kw},
                {&b->dmem, attnc_present(dmemory) ? 0 : x->B * x->S * x->He},
                {&b->dfinal, attnc_present(dfinal) ? 0 : x->B * x->He},
                {&b->dv, x->additive ? x->B * x->A : 0},
                {&b->dvp, lp ? x->B * x->A : 0},
                {&b->dstart, x->B * x->H},
                {&b->dwcat, G * x->U},
                {&b->scratch, workers * s2s_scratch_size(x)}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        TRY(attnc_calloc(want[i].p, (size_t)want[i].n, x->es, "decoder backward"));
    if (attnc_present(dmemory)) {
        b->dmem = dmemory->data;
        memset(b->dmem, 0, (size_t)(x->B * x->S * x->He) * x->es);
    }
    if (attnc_present(dfinal)) {
        b->dfinal = dfinal->data;
        memset(b->dfinal, 0, (size_t)(x->B * x->He) * x->es);
    }
    return ATTNC_OK;
}

static void free_bufs(s2s_bufs *b, const attnc_tensor *dmemory, const attnc_tensor *dfinal) {
    void *own[] = {b->dg,
                   b->dx,
                   b->dpc,
                   b->dqw,
                   b->de,
                   b->dhp,
                   b->dkeys,
                   attnc_present(dmemory) ? NULL : b->dmem,
                   attnc_present(dfinal) ? NULL : b->dfinal,
                   b->dv,
                   b->dvp,
                   b->dstart,
                   b->dwcat,
                   b->scratch};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) free(own[i]);
}

static attnc_status check_grads(const s2s_run *x, const attnc_s2s_weights *g, const attnc_s2s_weights *w) {
#define PAIR(m) \
    { &g->m, &w->m, "the gradient of " #m }
    const struct {
        const attnc_tensor *grad, *weight;
        const char *name;
    } pairs[] = {PAIR(embedding),     PAIR(weight_ih),   PAIR(weight_hh),       PAIR(bias_ih),    PAIR(bias_hh),
                 PAIR(bridge_weight), PAIR(bridge_bias), PAIR(query_weight),    PAIR(key_weight), PAIR(v),
                 PAIR(weight),        PAIR(bias),        PAIR(position_weight), PAIR(position_v), PAIR(combine)};
#undef PAIR
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const attnc_tensor *gr = pairs[i].grad, *wt = pairs[i].weight;
        if (!attnc_present(gr)) continue;
        if (!attnc_present(wt))
            return attnc_fail(ATTNC_ERR_VALUE, "a gradient was asked for a weight the decoder lacks");
        TRY(need(gr, pairs[i].name, x->dt, wt->ndim, wt->shape[0], wt->ndim > 1 ? wt->shape[1] : 0));
    }
    return ATTNC_OK;
}

/* The weight gradients from the cotangent rows, after the loop. */
static void weight_grads(const s2s_run *x, const s2s_bufs *b, attnc_s2s_weights *g, const char *slots,
                         int64_t slot_size, const int64_t *fed) {
    int64_t TB = x->T * x->B, B = x->B, G = 4 * x->H, H = x->H, in = x->E + x->Fin, es = (int64_t)x->es;
    s2s_slot s0 = s2s_slot_at(x, (void *)(slots + slot_size * es)), sm = s2s_slot_at(x, (void *)slots);
    int64_t step = slot_size; /* elements between one step's arrays and the next's */
    if (attnc_present(&g->weight_ih) || attnc_present(&g->weight_hh)) {
        wgrad(x, b->dwcat, b->dg, G, x->U, B, x->T, B * G, s0.u, step, x->U);
        for (int64_t r = 0; r < G; r++) {
            const char *row = (const char *)b->dwcat + r * x->U * es;
            if (attnc_present(&g->weight_ih)) memcpy((char *)g->weight_ih.data + r * in * es, row, (size_t)(in * es));
            if (attnc_present(&g->weight_hh))
                memcpy((char *)g->weight_hh.data + r * H * es, row + in * es, (size_t)(H * es));
        }
    }
    if (attnc_present(&g->bias_ih)) attnc_col_sums(x->dt, g->bias_ih.data, b->dg, TB, G, G);
    if (attnc_present(&g->bias_hh)) attnc_col_sums(x->dt, g->bias_hh.data, b->dg, TB, G, G);
    if (attnc_present(&g->embedding)) ATTNC_TYPED(x->dt, s2s_embedding_grad)(x, g->embedding.data, b->dx, fed);
    if (x->luong && attnc_present(&g->combine))
        wgrad(x, g->combine.data, b->dpc, H, x->He + H, B, x->T, B * H, s0.cat, step, x->He + H);
    if (x->additive && attnc_present(&g->query_weight)) /* bahdanau's query is h_{t-1}, concat's h_t */
        wgrad(x, g->query_weight.data, b->dqw, x->A, H, B, x->T, B * x->A, x->kind == ATTNC_S2S_BAHDANAU ? sm.h : s0.h,
              step, H);
    if (x->additive && attnc_present(&g->v)) attnc_col_sums(x->dt, g->v.data, b->dv, B, x->A, x->A);
    if (x->kind == ATTNC_S2S_LOCATION) {
        if (attnc_present(&g->weight)) wgrad(x, g->weight.data, b->de, x->Smax, H, B, x->T, B * x->Smax, s0.h, step, H);
        if (attnc_present(&g->bias)) attnc_col_sums(x->dt, g->bias.data, b->de, TB, x->Smax, x->Smax);
    }
    if (x->kind == ATTNC_S2S_LOCAL_P) {
        if (attnc_present(&g->position_weight))
            wgrad(x, g->position_weight.data, b->dhp, x->A, H, B, x->T, B * x->A, s0.h, step, H);
        if (attnc_present(&g->position_v)) attnc_col_sums(x->dt, g->position_v.data, b->dvp, B, x->A, x->A);
    }
    const attnc_tensor *gk = x->additive ? &g->key_weight : &g->weight;
    if (x->Kw > 0 && attnc_present(gk)) /* keys = memory W^T */
        wgrad(x, gk->data, b->dkeys, x->Kw, x->He, B * x->S, 1, 0, x->memory, 0, x->He);
    if (attnc_present(&g->bridge_weight))
        wgrad(x, g->bridge_weight.data, b->dstart, H, x->He, B, 1, 0, x->final, 0, x->He);
    if (attnc_present(&g->bridge_bias)) attnc_col_sums(x->dt, g->bridge_bias.data, b->dstart, B, H, H);
}

attnc_status attnc_s2s_backward(attnc_tensor *dmemory, attnc_tensor *dfinal, attnc_s2s_weights *grads,
                                const attnc_tensor *dfeatures, const attnc_tensor *saved, const attnc_tensor *fed,
                                const attnc_tensor *memory, const attnc_tensor *final, const attnc_tensor *lengths,
                                const attnc_s2s_weights *weights, const attnc_s2s_config *cfg) {
    s2s_run x;
    TRY(s2s_setup(&x, weights, cfg, memory, final, lengths));
    TRY(check_tokens(fed, "fed", x.B, x.Vt));
    x.T = fed->shape[1];
    TRY(need(dfeatures, "dfeatures", x.dt, 3, x.B, x.T));
    if (dfeatures->shape[2] != x.F) return attnc_fail(ATTNC_ERR_VALUE, "dfeatures needs (B, T, F)");
    TRY(check_saved(&x, saved, x.T));
    if (attnc_present(dmemory)) TRY(need(dmemory, "dmemory", x.dt, 3, x.B, x.S));
    if (attnc_present(dfinal)) TRY(need(dfinal, "dfinal", x.dt, 2, x.B, x.He));
    attnc_s2s_weights none = {0};
    if (!grads) grads = &none;
    TRY(check_grads(&x, grads, weights));
    x.keys = saved->data; /* the forward's keys */
    int workers = workers_for(&x);
    s2s_bufs b = {0};
    attnc_status st = alloc_bufs(&x, &b, workers, dmemory, dfinal);
    if (st == ATTNC_OK) st = pack_weights(&x, weights);
    char *slots = (char *)saved->data + (size_t)(x.B * x.S * x.Kw) * x.es;
    int64_t slot_size = s2s_slot_size(&x), scratch = s2s_scratch_size(&x);
    if (st == ATTNC_OK && x.B > 0 && x.T > 0) { /* else every cotangent stays 0 */
        s2s_job j = {.x = &x,
                     .slots = slots,
                     .slot_size = slot_size,
                     .scratch = b.scratch,
                     .scratch_size = scratch,
                     .dfeat = dfeatures->data,
                     .cot = {b.dg, b.dx, b.dpc, b.dqw, b.de, b.dhp},
                     .dmem = b.dmem,
                     .dkeys = b.dkeys,
                     .dv = b.dv,
                     .dvp = b.dvp,
                     .dfinal = b.dfinal,
                     .dstart = b.dstart};
        attnc_parallel_for((x.B + S2S_ROWS - 1) / S2S_ROWS, workers, ATTNC_TYPED(x.dt, s2s_backward_task), &j);
    }
    if (st == ATTNC_OK) {
        weight_grads(&x, &b, grads, slots, slot_size, fed->data);
        if (x.Kw > 0 && x.B > 0) { /* keys = memory W^T: dmemory += dkeys W */
            int64_t n = x.B * x.S;
            attnc_mat dk = {b.dkeys, n, x.Kw, x.Kw, 1},
                      w = {(void *)(x.additive ? x.wkey : x.watt), x.Kw, x.He, x.He, 1},
                      dm = {b.dmem, n, x.He, x.He, 1};
            attnc_gemm_rows(x.dt, false, false, 1, dk, w, 1, dm, S2S_KEY_ROWS);
        }
    }
    s2s_release(&x, false);
    free_bufs(&b, dmemory, dfinal);
    return st;
}
