/* generate.c: greedy and beam-search decoding with the recurrent attention
 * decoder (core/search.c does the search). Rows r = b K + k (beam slot k of
 * batch row b) read source row b; each step runs the decoder's step kernel
 * on blocks of rows, then the output layer. Each step's attention weights
 * are the search's trace, which it keeps per hypothesis: every output comes
 * with its alignment matrix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/search.h"
#include "../../core/status.h"
#include "../../core/threads.h"
#include "../../ops/transformer/layer.h"
#include "decoder.h"

typedef struct {
    s2s_run x;
    int64_t K, Tmax, bos;
    int64_t *src, *start; /* (R): source row, bos                      */
    void *slot_mem[2];    /* two slots: the step reads one, writes the other */
    s2s_slot slot[2], *cur;
    void *feat, *logits; /* (R, F), (R, Vt)                            */
    void *trace;         /* (R, S): this step's alignments (0 for "none"), when asked for */
    bool want_trace;
    void *gather;  /* (R, H)                                     */
    void *scratch; /* per worker                                 */
    int workers;
    const int64_t *tok;
    int64_t s;
} gen_run;

static void step_task(void *arg, int64_t block, int worker) {
    gen_run *g = arg;
    const s2s_run *x = &g->x;
    int64_t r0 = block * S2S_ROWS, n = x->R - r0 < S2S_ROWS ? x->R - r0 : S2S_ROWS;
    s2s_slot *prev = &g->slot[g->s % 2], *cur = &g->slot[(g->s + 1) % 2];
    void *scratch = (char *)g->scratch + (size_t)(worker * s2s_scratch_size(x)) * x->es;
    if (g->s == 0) ATTNC_TYPED(x->dt, s2s_start)(x, prev, r0, n);
    ATTNC_TYPED(x->dt, s2s_step_forward)(x, prev, cur, g->s, r0, n, g->tok + r0, g->feat, x->F, scratch);
}

static attnc_status search_step(void *ctx, const int64_t *tok, int64_t s) {
    gen_run *g = ctx;
    s2s_run *x = &g->x;
    g->tok = tok ? tok : g->start;
    g->s = s;
    g->cur = &g->slot[(s + 1) % 2];
    attnc_parallel_for((x->R + S2S_ROWS - 1) / S2S_ROWS, g->workers, step_task, g);
    if (g->trace && g->cur->alpha) memcpy(g->trace, g->cur->alpha, (size_t)(x->R * x->S) * x->es);
    int64_t fs[2] = {x->R, x->F}, ls[2] = {x->R, x->Vt}, ws[2] = {x->Vt, x->F}, bs[1] = {x->Vt};
    attnc_tensor feat = attnc_view(g->feat, x->dt, 2, fs), logits = attnc_view(g->logits, x->dt, 2, ls);
    attnc_tensor w = attnc_view((void *)x->out_w, x->dt, 2, ws), b = attnc_view((void *)x->out_b, x->dt, 1, bs);
    return attnc_linear_forward(&logits, &feat, &w, &b);
}

/* Rows of a (R, width) array <- rows parent[], through g->gather. */
static void permute(gen_run *g, void *a, int64_t width, const int64_t *parent) {
    size_t row = (size_t)width * g->x.es;
    for (int64_t r = 0; r < g->x.R; r++) memcpy((char *)g->gather + r * row, (char *)a + parent[r] * row, row);
    memcpy(a, g->gather, (size_t)g->x.R * row);
}

static void search_reorder(void *ctx, const int64_t *parent, int64_t s) {
    (void)s;
    gen_run *g = ctx;
    const s2s_run *x = &g->x;
    permute(g, g->cur->h, x->H, parent);
    permute(g, g->cur->c, x->H, parent);
    if (x->luong) permute(g, g->cur->ht, x->H, parent);
}

static attnc_status alloc_gen(gen_run *g) {
    s2s_run *x = &g->x;
    int64_t R = x->R, slot = s2s_slot_size(x);
    struct {
        void **p;
        int64_t n;
        size_t size;
    } want[] = {{(void **)&g->src, R, sizeof(int64_t)},
                {(void **)&g->start, R, sizeof(int64_t)},
                {&g->slot_mem[0], slot, x->es},
                {&g->slot_mem[1], slot, x->es},
                {&g->feat, R * x->F, x->es},
                {&g->logits, R * x->Vt, x->es},
                {&g->trace, g->want_trace ? R * x->S : 0, x->es},
                {&g->gather, R * x->H, x->es},
                {&g->scratch, g->workers * s2s_scratch_size(x), x->es}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        TRY(attnc_calloc(want[i].p, (size_t)want[i].n, want[i].size, "decoding"));
    for (int64_t r = 0; r < R; r++) {
        g->src[r] = r / g->K;
        g->start[r] = g->bos;
    }
    x->src = g->src;
    for (int k = 0; k < 2; k++) g->slot[k] = s2s_slot_at(x, g->slot_mem[k]);
    return ATTNC_OK;
}

static void free_gen(gen_run *g) {
    void *own[] = {g->src,    g->start, g->slot_mem[0], g->slot_mem[1], g->feat,
                   g->logits, g->trace, g->gather,      g->scratch};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) free(own[i]);
}

attnc_status attnc_s2s_generate(attnc_tensor *tokens, attnc_tensor *out_lengths, attnc_tensor *alignments,
                                const attnc_tensor *memory, const attnc_tensor *final, const attnc_tensor *lengths,
                                const attnc_s2s_weights *weights, const attnc_s2s_config *config, int64_t bos,
                                int64_t eos, int64_t beam, double length_penalty) {
    gen_run g;
    memset(&g, 0, sizeof g);
    s2s_run *x = &g.x;
    TRY(s2s_setup(x, weights, config, memory, final, lengths));
    if (!attnc_present(&weights->out_weight)) return attnc_fail(ATTNC_ERR_TYPE, "decoding needs out_weight");
    if (beam < 1) return attnc_fail(ATTNC_ERR_VALUE, "beam_size must be >= 1, got %lld", (long long)beam);
    if (bos < 0 || bos >= x->Vt)
        return attnc_fail(ATTNC_ERR_VALUE, "bos %lld is outside the vocabulary", (long long)bos);
    if (eos >= x->Vt)
        return attnc_fail(ATTNC_ERR_VALUE, "eos %lld is outside the vocabulary [0, %lld)", (long long)eos,
                          (long long)x->Vt);
    if (!isfinite(length_penalty))
        return attnc_fail(ATTNC_ERR_VALUE, "length_penalty must be finite, got %g", length_penalty);
    int64_t bt[2] = {x->B, -1};
    if (!attnc_present(tokens) || !attnc_present(out_lengths))
        return attnc_fail(ATTNC_ERR_TYPE, "tokens and lengths outputs are required");
    TRY(attnc_check_dims(tokens, "tokens", ATTNC_INT64, 2, bt, true));
    TRY(attnc_check_dims(out_lengths, "out_lengths", ATTNC_INT64, 1, &x->B, true));
    g.Tmax = bt[1];
    if (attnc_present(alignments)) {
        int64_t bts[3] = {x->B, g.Tmax, x->S};
        TRY(attnc_check_dims(alignments, "alignments", x->dt, 3, bts, true));
        g.want_trace = true;
    }
    if (x->B == 0 || g.Tmax == 0) {
        memset(out_lengths->data, 0, (size_t)x->B * sizeof(int64_t));
        return ATTNC_OK;
    }
    g.K = beam;
    g.bos = bos;
    x->R = x->B * beam;
    g.workers = attnc_workers_for(x->R * x->U * 4 * x->H);
    attnc_status st = alloc_gen(&g);
    if (st == ATTNC_OK) st = s2s_prepare(x, weights, NULL);
    if (st == ATTNC_OK) {
        attnc_search_model m = {.ctx = &g,
                                .B = x->B,
                                .K = beam,
                                .V = x->Vt,
                                .logits = g.logits,
                                .dt = x->dt,
                                .step = search_step,
                                .reorder = search_reorder,
                                .trace = g.trace,
                                .trace_bytes = x->S * (int64_t)x->es};
        attnc_search_io io = {.out = tokens->data,
                              .lengths = out_lengths->data,
                              .T = g.Tmax,
                              .eos = eos,
                              .alpha = length_penalty,
                              .trace = g.want_trace ? alignments->data : NULL};
        st = attnc_search(&m, &io);
        s2s_release(x, true);
    }
    free_gen(&g);
    return st;
}
