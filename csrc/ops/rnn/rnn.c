/* rnn.c: multi-layer, optionally bidirectional LSTM and GRU over whole
 * sequences, forward and backward through time, with torch's gate layouts
 * (LSTM: i, f, g, o; GRU: r, z, n) and variable lengths.
 *
 * float32 with a hidden size the vector width divides, on a CPU with AVX2 +
 * FMA or AVX-512: each direction's time loop runs in rnn_fast.c, products and
 * gate kernels fused, input products included; here only the weight
 * gradients, one product each over all steps. A bidirectional layer's two
 * directions then run at once, each on its own thread (each_direction).
 *
 * Otherwise (float64, other sizes, other CPUs), per layer and direction: the
 * input projections of every step in one matrix product, then a loop over
 * time of (batch, H) x (H, gates) products (split over gate column blocks so
 * every core works) and the gate kernels. The backward runs the loop in
 * reverse, keeping each step's gate gradients, and forms the input's and the
 * weights' gradients with one product each over all steps. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/simd.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"
#include "../transformer/layer.h"
#include "rnn_internal.h"

enum { ROWS = 16, COLS = 256 }; /* batch rows per gate block; gate columns per product block */


#define ATTNC_F64 0
#include "rnn_impl.h"
#define ATTNC_F64 1
#include "rnn_impl.h"

/* ---- the saved buffer ------------------------------------------------------ */

/* Per layer: its output (B T, D H) and, with dropout, its dropped input
 * (layers >= 1); per layer and direction: gates (B T, 4H) and cells (B T, H),
 * unless !keep (a forward only the fused kernels run: offsets -1). */
typedef struct {
    int64_t out[64], in[64], gates[128], cells[128], total;
} rnn_layout;

static void layout(rnn_layout *lo, const rnn_run *r, bool keep) {
    int64_t at = 0, bt = r->B * r->T;
    for (int64_t l = 0; l < r->L; l++) {
        lo->out[l] = at;
        at += bt * r->D * r->H;
        lo->in[l] = -1;
        if (l > 0 && r->dropout > 0) {
            lo->in[l] = at;
            at += bt * r->D * r->H;
        }
        for (int64_t d = 0; d < r->D; d++) {
            lo->gates[l * r->D + d] = lo->cells[l * r->D + d] = -1;
            if (!keep) continue;
            lo->gates[l * r->D + d] = at;
            at += bt * 4 * r->H;
            lo->cells[l * r->D + d] = at;
            at += r->mode == ATTNC_LSTM ? bt * r->H : 0;
        }
    }
    lo->total = at;
}

int64_t attnc_rnn_saved_size(const attnc_rnn_config *cfg, int64_t B, int64_t T, int64_t input_size) {
    if (!cfg || cfg->num_layers < 1 || cfg->num_layers > 64) return -1; /* the layout holds 64 layers */
    rnn_run r = {.mode = cfg->mode,
                 .B = B,
                 .T = T,
                 .I = input_size,
                 .H = cfg->hidden_size,
                 .L = cfg->num_layers,
                 .D = cfg->bidirectional ? 2 : 1,
                 .dropout = cfg->dropout};
    rnn_layout lo;
    layout(&lo, &r, true);
    return lo.total;
}

/* ---- helpers ---------------------------------------------------------------- */

static attnc_tensor mat(const rnn_run *r, void *data, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return attnc_view(data, r->dt, 2, shape);
}

static void *at(const rnn_run *r, void *base, int64_t offset) {
    return (char *)base + offset * (int64_t)attnc_dtype_size(r->dt);
}

static attnc_mat as_mat(const attnc_tensor *t) {
    attnc_mat m = {t->data, t->shape[0], t->shape[1], t->strides[0], t->strides[1]};
    return m;
}

/* c (rows, n) <- a (rows, k) op(w): op(w) = w^T for w (n, k), or w (k, n). */
static void colgemm(const rnn_run *r, const attnc_tensor *a, const attnc_tensor *w, bool trans_w, attnc_tensor *c) {
    int64_t blocks = (c->shape[1] + COLS - 1) / COLS;
    int workers = attnc_workers_for(a->shape[0] * a->shape[1] * c->shape[1]);
    colgemm_job job = {.a = as_mat(a), .w = as_mat(w), .c = as_mat(c), .trans_w = trans_w};
    attnc_parallel_for(blocks, workers, ATTNC_TYPED(r->dt, colgemm_task), &job);
}

static void run_rows(const rnn_run *r, attnc_task_fn task, void *job) {
    int workers = attnc_workers_for(r->B * r->H * 32); /* a gate kernel: tens of operations per element */
    attnc_parallel_for((r->B + ROWS - 1) / ROWS, workers, task, job);
}

/* *out <- count elements of size bytes, 64-byte aligned (rows of 16 floats
 * then start on cache lines: no vector load splits two lines), not cleared:
 * for buffers every element of which is written before it is read. count 0
 * gives NULL and OK. */
static attnc_status rnn_malloc(void **out, size_t count, size_t size, const char *what) {
    *out = NULL;
    if (count == 0 || size == 0) return ATTNC_OK;
    if (count > (SIZE_MAX - 63) / size) return attnc_fail_nomem(what, SIZE_MAX);
    size_t bytes = (count * size + 63) / 64 * 64;
    *out = aligned_alloc(64, bytes);
    return *out ? ATTNC_OK : attnc_fail_nomem(what, bytes);
}

/* Blocks of the whole-sequence products (OpenBLAS runs single-threaded
 * inside each): fixed by the sizes, so results do not depend on the thread
 * count, and few, since each block packs the other operand again: 6 row
 * blocks (as many per thread for 2, 3 or 6 threads); weight gradients in
 * blocks of up to 512 output rows, and at least two from 256 rows (dW_hh of
 * an LSTM of 128 units: one block left the second of two threads idle). */
enum { SEQ_BLOCKS = 6, SEQ_DW_ROWS = 512 };

static int64_t seq_blocks(int64_t n) { return n < SEQ_BLOCKS ? n : SEQ_BLOCKS; }

static int64_t dw_blocks(int64_t G) {
    int64_t blocks = (G + SEQ_DW_ROWS - 1) / SEQ_DW_ROWS;
    return blocks < 2 && G >= SEQ_DW_ROWS / 2 ? 2 : blocks;
}

/* y (n, G) = x (n, in) w^T (+ bias (G) unless NULL); w (G, in). */
static void seq_project(const rnn_run *r, const attnc_tensor *x, const attnc_tensor *w, const void *bias,
                        attnc_tensor *y) {
    int64_t n = x->shape[0], blocks = seq_blocks(n);
    seq_job job = {.x = as_mat(x), .w = as_mat(w), .y = as_mat(y), .bias = bias, .blocks = blocks};
    attnc_parallel_for(blocks, attnc_workers_for(n * x->shape[1] * w->shape[0]), ATTNC_TYPED(r->dt, seq_rows_task),
                       &job);
}

/* dx (n, in) = dy (n, G) w (+ dx when accumulate); w (G, in). */
static void seq_dx(const rnn_run *r, const attnc_tensor *dy, const attnc_tensor *w, attnc_tensor *dx, bool accumulate) {
    int64_t n = dy->shape[0], blocks = seq_blocks(n);
    seq_job job =
        {.x = as_mat(dy), .w = as_mat(w), .y = as_mat(dx), .dx = true, .accumulate = accumulate, .blocks = blocks};
    attnc_parallel_for(blocks, attnc_workers_for(n * dy->shape[1] * w->shape[1]), ATTNC_TYPED(r->dt, seq_rows_task),
                       &job);
}

/* The matrix view of t, or an empty one (NULL data: skipped) when absent. */
static attnc_mat mat_or_none(const attnc_tensor *t) {
    attnc_mat none = {0};
    return attnc_present(t) ? as_mat(t) : none;
}

/* The weight gradients of one direction: dW_ih (G, in) = dgx^T x, dW_hh
 * (G, H) = dgh^T hprev, and the biases' (column sums), absent ones skipped;
 * dgx, dgh (B T, G), x (B T, in), hprev (B T, H). */
static void seq_weight_grads(const rnn_run *r, attnc_rnn_weights *g, const attnc_tensor *dgx, const attnc_tensor *x,
                             const attnc_tensor *dgh, const attnc_tensor *hprev) {
    int64_t G = dgx->shape[1], blocks = dw_blocks(G), n = dgx->shape[0];
    bool same = dgx->data == dgh->data && attnc_present(&g->bias_ih) && attnc_present(&g->bias_hh);
    int workers = attnc_workers_for(n * G * (x->shape[1] + hprev->shape[1]));
    seq_job job = {.blocks = blocks,
                   .dy2 = {as_mat(dgx), as_mat(dgh)},
                   .x2 = {as_mat(x), as_mat(hprev)},
                   .dw2 = {mat_or_none(&g->weight_ih), mat_or_none(&g->weight_hh)},
                   .db2 = {attnc_present(&g->bias_ih) ? g->bias_ih.data : NULL,
                           attnc_present(&g->bias_hh) && !same ? g->bias_hh.data : NULL}};
    attnc_parallel_for(2 * blocks, workers, ATTNC_TYPED(r->dt, seq_dw_task), &job);
    if (same) /* an LSTM: the two biases' gradients are the same sums */
        memcpy(g->bias_hh.data, g->bias_ih.data, (size_t)G * attnc_dtype_size(r->dt));
}

/* Slice k (B, H) of a (L D, B, H) state tensor, or NULL. */
static void *state_of(const rnn_run *r, const attnc_tensor *t, int64_t k) {
    return attnc_present(t) ? at(r, t->data, k * r->B * r->H) : NULL;
}

/* ---- both directions at once ------------------------------------------------ */

/* A bidirectional layer's directions are independent until its input's
 * gradient sums them. With the fused kernels and two threads or more, each
 * direction runs on a thread of its own, whole (its time loop and weight
 * gradients), instead of both threads splitting every step of one direction
 * and then of the other: no meeting per step, each W_hh in one core's cache,
 * and the directions' single-block products in parallel. The kernels and
 * their splits are the same, so are the bits. */
typedef attnc_status (*direction_fn)(rnn_run *r, void *args);

typedef struct {
    const rnn_run *r;
    direction_fn fn;
    void *args[2];
    attnc_status st[2];
    char why[2][256]; /* a failing direction's message (it is per thread) */
} directions_job;

static void direction_task(void *arg, int64_t d, int worker) {
    (void)worker;
    directions_job *j = arg;
    rnn_run r = *j->r;
    r.d = d;
    r.solo = true;
    j->st[d] = j->fn(&r, j->args[d]);
    if (j->st[d] != ATTNC_OK) snprintf(j->why[d], sizeof j->why[d], "%s", attnc_last_error());
}

/* Only while a direction's W_hh (G, H) fits in 256 KiB (an LSTM of up to
 * 128 units), so that one core's L2 holds its direction's weights: beyond,
 * both threads splitting every step keep half of each W_hh per core, which
 * measured faster (2 layers bidirectional, B 64, T 50, 256 units, forward +
 * backward at 2 threads: 313 ms split, 332 ms at once). */
static bool directions_at_once(const rnn_run *r) {
    return r->D == 2 && attnc_rnn_fast_usable(r) && r->ng * r->H * r->H * (int64_t)sizeof(float) <= 256 * 1024 &&
           attnc_workers_for(r->T * r->B * r->ng * r->H * r->H) >= 2;
}

/* fn(r with r->d = d, args[d]) for each direction d of r: at once when
 * directions_at_once, else in order. */
static attnc_status each_direction(rnn_run *r, direction_fn fn, void *args0, void *args1) {
    if (!directions_at_once(r)) {
        void *args[2] = {args0, args1};
        for (r->d = 0; r->d < r->D; r->d++) TRY(fn(r, args[r->d]));
        return ATTNC_OK;
    }
    directions_job j = {.r = r, .fn = fn, .args = {args0, args1}};
    attnc_parallel_for(2, 2, direction_task, &j);
    for (int d = 0; d < 2; d++)
        if (j.st[d] != ATTNC_OK) return attnc_fail(j.st[d], "%s", j.why[d]);
    return ATTNC_OK;
}

/* ---- forward ---------------------------------------------------------------- */

typedef struct {
    void *gx, *hh, *h, *c;
} fwd_scratch;

static attnc_status direction_forward(rnn_run *r, const attnc_tensor *x, const attnc_rnn_weights *w, void *saved,
                                      const rnn_layout *lo, int64_t l, const attnc_tensor *h0, const attnc_tensor *c0,
                                      attnc_tensor *h_n, attnc_tensor *c_n, void *out, fwd_scratch *s) {
    int64_t B = r->B, H = r->H, G = r->ng * H, k = l * r->D + r->d;
    size_t es = attnc_dtype_size(r->dt);
    attnc_tensor gx = mat(r, s->gx, B * r->T, G), hh = mat(r, s->hh, B, G), h = mat(r, s->h, B, H);
    bool fast = attnc_rnn_fast_usable(r);
    const void *b_ih = attnc_present(&w->bias_ih) ? w->bias_ih.data : NULL;
    if (!fast) seq_project(r, x, &w->weight_ih, b_ih, &gx); /* the fused kernels make their own */
    void *h0k = state_of(r, h0, k), *c0k = state_of(r, c0, k);
    if (fast) {
        bool lstm = r->mode == ATTNC_LSTM;
        rnn_fast_fwd f = {.r = r,
                          .x = x->data,
                          .in = x->shape[1],
                          .w_ih = w->weight_ih.data,
                          .w_hh = w->weight_hh.data,
                          .b_ih = b_ih,
                          .b_hh = attnc_present(&w->bias_hh) ? w->bias_hh.data : NULL,
                          .h0 = h0k,
                          .c0 = lstm ? c0k : NULL,
                          .gates = lo->gates[k] >= 0 ? at(r, saved, lo->gates[k]) : NULL,
                          .cells = lstm && lo->cells[k] >= 0 ? at(r, saved, lo->cells[k]) : NULL,
                          .out = out,
                          .h_n = attnc_present(h_n) ? state_of(r, h_n, k) : NULL,
                          .c_n = lstm && attnc_present(c_n) ? state_of(r, c_n, k) : NULL};
        return attnc_rnn_fast_forward(&f);
    }
    if (h0k)
        attnc_copy(s->h, h0k, (size_t)(B * H) * es);
    else
        attnc_zero(s->h, (size_t)(B * H) * es);
    if (c0k)
        attnc_copy(s->c, c0k, (size_t)(B * H) * es);
    else
        attnc_zero(s->c, (size_t)(B * H) * es);
    for (int64_t step = 0; step < r->T; step++) {
        colgemm(r, &h, &w->weight_hh, true, &hh);
        step_job j = {.r = r,
                      .s = step,
                      .gx = s->gx,
                      .hh = s->hh,
                      .b_hh = attnc_present(&w->bias_hh) ? w->bias_hh.data : NULL,
                      .h = s->h,
                      .c = s->c,
                      .gates = at(r, saved, lo->gates[k]),
                      .cs = at(r, saved, lo->cells[k]),
                      .out = out};
        run_rows(r, ATTNC_TYPED(r->dt, forward_step_task), &j);
    }
    if (attnc_present(h_n)) attnc_copy(state_of(r, h_n, k), s->h, (size_t)(B * H) * es);
    if (attnc_present(c_n) && r->mode == ATTNC_LSTM) attnc_copy(state_of(r, c_n, k), s->c, (size_t)(B * H) * es);
    return ATTNC_OK;
}

typedef struct {
    const attnc_tensor *x;
    const attnc_rnn_weights *w; /* the layer's, by direction */
    void *saved;
    const rnn_layout *lo;
    int64_t l;
    const attnc_tensor *h0, *c0;
    attnc_tensor *h_n, *c_n;
    void *out;
    fwd_scratch *s; /* the BLAS path's (never run at once) */
} fwd_args;

static attnc_status forward_one(rnn_run *r, void *args) {
    fwd_args *a = args;
    return direction_forward(r, a->x, &a->w[r->d], a->saved, a->lo, a->l, a->h0, a->c0, a->h_n, a->c_n, a->out, a->s);
}

/* ---- checks ---------------------------------------------------------------- */

static attnc_status check_weights(const rnn_run *r, const attnc_rnn_weights *w, int64_t l, int64_t in) {
    const char *suffix = r->d ? "_reverse" : "";
    int64_t G = r->ng * r->H;
    char name[48];
    struct {
        const attnc_tensor *t;
        const char *what;
        int ndim;
        int64_t d0, d1;
        bool required;
    } parts[] = {{&w->weight_ih, "weight_ih", 2, G, in, true},
                 {&w->weight_hh, "weight_hh", 2, G, r->H, true},
                 {&w->bias_ih, "bias_ih", 1, G, 0, false},
                 {&w->bias_hh, "bias_hh", 1, G, 0, false}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(name, sizeof name, "%s_l%lld%s", parts[i].what, (long long)l, suffix);
        if (!attnc_present(parts[i].t)) {
            if (parts[i].required) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
            continue;
        }
        int64_t sizes[2] = {parts[i].d0, parts[i].d1};
        TRY(attnc_check_dims(parts[i].t, name, r->dt, parts[i].ndim, sizes, false));
        if (!attnc_is_contiguous(parts[i].t)) return attnc_fail(ATTNC_ERR_LAYOUT, "%s must be contiguous", name);
    }
    return ATTNC_OK;
}

static attnc_status check_state(const rnn_run *r, const attnc_tensor *t, const char *name, bool output) {
    if (!attnc_present(t)) return ATTNC_OK;
    int64_t sizes[3] = {r->L * r->D, r->B, r->H};
    TRY(attnc_check_dims(t, name, r->dt, 3, sizes, output));
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "%s must be contiguous", name);
    return ATTNC_OK;
}

/* weights (or grads): one set per layer and direction. */
static attnc_status check_count(const rnn_run *r, int64_t n, const char *name) {
    if (n == r->L * r->D) return ATTNC_OK;
    return attnc_fail(ATTNC_ERR_VALUE, "%s holds %lld sets, expected one per layer and direction (%lld)", name,
                      (long long)n, (long long)(r->L * r->D));
}

static attnc_status setup(rnn_run *r, const attnc_rnn_config *cfg, const attnc_tensor *x, const attnc_tensor *lengths,
                          const attnc_rnn_weights *w, int64_t nw, const attnc_tensor *h0, const attnc_tensor *c0) {
    *r = (rnn_run){0};
    if (!cfg || !w) return attnc_fail(ATTNC_ERR_TYPE, "config and weights are required");
    if (cfg->mode != ATTNC_LSTM && cfg->mode != ATTNC_GRU) return attnc_fail(ATTNC_ERR_VALUE, "unknown rnn mode");
    if (cfg->hidden_size < 1 || cfg->num_layers < 1 || cfg->num_layers > 64)
        return attnc_fail(ATTNC_ERR_VALUE, "hidden_size must be >= 1 and num_layers in [1, 64]");
    if (!(cfg->dropout >= 0 && cfg->dropout <= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "dropout must be in [0, 1], got %g", cfg->dropout);
    if (!attnc_present(x)) return attnc_fail(ATTNC_ERR_TYPE, "input is required");
    r->dt = x->dtype;
    if (r->dt != ATTNC_FLOAT32 && r->dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(r->dt));
    int64_t sizes[3] = {-1, -1, -1};
    TRY(attnc_check_dims(x, "input", r->dt, 3, sizes, false));
    if (!attnc_is_contiguous(x)) return attnc_fail(ATTNC_ERR_LAYOUT, "input must be contiguous");
    r->mode = cfg->mode;
    r->B = sizes[0];
    r->T = sizes[1];
    r->I = sizes[2];
    r->H = cfg->hidden_size;
    r->L = cfg->num_layers;
    r->D = cfg->bidirectional ? 2 : 1;
    r->ng = cfg->mode == ATTNC_LSTM ? 4 : 3;
    r->dropout = cfg->dropout;
    r->seed = cfg->seed;
    if (attnc_present(lengths)) {
        TRY(attnc_check_dims(lengths, "lengths", ATTNC_INT64, 1, &r->B, false));
        if (!attnc_is_contiguous(lengths)) return attnc_fail(ATTNC_ERR_LAYOUT, "lengths must be contiguous");
        r->len = lengths->data;
        for (int64_t b = 0; b < r->B; b++)
            if (r->len[b] < 1 || r->len[b] > r->T)
                return attnc_fail(ATTNC_ERR_VALUE, "lengths[%lld] = %lld is outside [1, %lld]", (long long)b,
                                  (long long)r->len[b], (long long)r->T);
    }
    TRY(check_count(r, nw, "weights"));
    for (int64_t l = 0; l < r->L; l++)
        for (r->d = 0; r->d < r->D; r->d++) TRY(check_weights(r, &w[l * r->D + r->d], l, l ? r->D * r->H : r->I));
    r->d = 0;
    TRY(check_state(r, h0, "h0", false));
    return r->mode == ATTNC_LSTM ? check_state(r, c0, "c0", false) : ATTNC_OK;
}

/* ---- forward ---------------------------------------------------------------- */

attnc_status attnc_rnn_forward(attnc_tensor *output, attnc_tensor *h_n, attnc_tensor *c_n, attnc_tensor *saved,
                               const attnc_tensor *input, const attnc_tensor *lengths, const attnc_tensor *h0,
                               const attnc_tensor *c0, const attnc_rnn_weights *weights, int64_t nweights,
                               const attnc_rnn_config *cfg) {
    rnn_run r;
    TRY(setup(&r, cfg, input, lengths, weights, nweights, h0, c0));
    int64_t B = r.B, T = r.T, H = r.H, DH = r.D * H, G = r.ng * H;
    if (!attnc_present(output)) return attnc_fail(ATTNC_ERR_TYPE, "output is required");
    int64_t osz[3] = {B, T, DH};
    TRY(attnc_check_dims(output, "output", r.dt, 3, osz, true));
    TRY(check_state(&r, h_n, "h_n", true));
    if (r.mode == ATTNC_LSTM) TRY(check_state(&r, c_n, "c_n", true));
    rnn_layout lo;
    /* Without a saved buffer (no backward to come) the fused kernels keep
     * no gates: only the layers' outputs are stored. */
    layout(&lo, &r, attnc_present(saved) || !attnc_rnn_fast_usable(&r));
    size_t es = attnc_dtype_size(r.dt);
    void *own = NULL;
    void *base;
    if (attnc_present(saved)) {
        TRY(attnc_check_dims(saved, "saved", r.dt, 1, &lo.total, true));
        base = saved->data;
    } else {
        TRY(rnn_malloc(&own, (size_t)lo.total, es, "rnn activations")); /* every part written */
        base = own;
    }
    fwd_scratch s = {0};
    attnc_status st = attnc_rnn_fast_usable(&r) ? ATTNC_OK /* the fused kernels need no projections */
                                                : rnn_malloc(&s.gx, (size_t)(B * T * G), es, "input projections");
    if (st == ATTNC_OK) st = attnc_calloc(&s.hh, (size_t)(B * G), es, "rnn state");
    if (st == ATTNC_OK) st = attnc_calloc(&s.h, (size_t)(B * H), es, "rnn state");
    if (st == ATTNC_OK) st = attnc_calloc(&s.c, (size_t)(B * H), es, "rnn state");
    /* Without a saved buffer the last layer writes the output in place. */
    void *last = attnc_present(saved) || !attnc_is_contiguous(output) ? at(&r, base, lo.out[r.L - 1]) : output->data;
    for (int64_t l = 0; l < r.L && st == ATTNC_OK; l++) {
        void *out = l == r.L - 1 ? last : at(&r, base, lo.out[l]);
        for (int64_t b = 0; b < B && r.len; b++) /* padding steps stay 0 (the rest is written) */
            memset((char *)out + (size_t)((b * T + r.len[b]) * DH) * es, 0, (size_t)((T - r.len[b]) * DH) * es);
        attnc_tensor x = mat(&r, input->data, B * T, r.I);
        if (l > 0) {
            x = mat(&r, at(&r, base, lo.out[l - 1]), B * T, DH);
            if (lo.in[l] >= 0) { /* dropout on the previous layer's output */
                attnc_tensor dropped = mat(&r, at(&r, base, lo.in[l]), B * T, DH);
                st = attnc_pointwise_forward(&dropped, &x, NULL, ATTNC_ACT_NONE, r.dropout, r.seed, (uint64_t)l);
                x = dropped;
            }
        }
        fwd_args a = {.x = &x,
                      .w = &weights[l * r.D],
                      .saved = base,
                      .lo = &lo,
                      .l = l,
                      .h0 = h0,
                      .c0 = c0,
                      .h_n = h_n,
                      .c_n = c_n,
                      .out = out,
                      .s = &s};
        if (st == ATTNC_OK) st = each_direction(&r, forward_one, &a, &a);
    }
    if (st == ATTNC_OK && last != output->data) attnc_copy(output->data, last, (size_t)(B * T * DH) * es);
    free(s.gx);
    free(s.hh);
    free(s.h);
    free(s.c);
    free(own);
    return st;
}

/* ---- backward ---------------------------------------------------------------- */

typedef struct {
    void *dgx, *dgh, *dstep, *dh, *dc, *drec, *direct, *hprev;
} bwd_scratch;

static void bwd_scratch_free(bwd_scratch *s) {
    void *p[] = {s->dgx, s->dgh, s->dstep, s->dh, s->dc, s->drec, s->direct, s->hprev};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
    *s = (bwd_scratch){0};
}

static attnc_status bwd_scratch_alloc(const rnn_run *r, bwd_scratch *s) {
    int64_t B = r->B, T = r->T, H = r->H, G = r->ng * H;
    struct {
        void **p;
        int64_t n;
    } bufs[] = {{&s->dgx, B * T * G}, {&s->dgh, r->mode == ATTNC_GRU ? B * T * G : 1},
                {&s->dstep, B * G},   {&s->dh, B * H},
                {&s->dc, B * H},      {&s->drec, B * H},
                {&s->direct, B * H},  {&s->hprev, B * T * H}};
    *s = (bwd_scratch){0};
    attnc_status st = ATTNC_OK;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && st == ATTNC_OK; i++)
        st = rnn_malloc(bufs[i].p, (size_t)bufs[i].n, attnc_dtype_size(r->dt), "rnn gradients");
    if (st != ATTNC_OK) bwd_scratch_free(s);
    return st;
}

/* One direction of layer l: dh0/dc0 slices, weight gradients, and the
 * layer input's gradient added into dx (B T, in) (overwritten when first;
 * left to the caller when defer_dx and not fused: s->dgx W_ih). */
static attnc_status direction_backward(rnn_run *r, const attnc_tensor *x, const attnc_rnn_weights *w,
                                       attnc_rnn_weights *g, void *saved, const rnn_layout *lo, int64_t l,
                                       const void *dout, const attnc_tensor *h0, const attnc_tensor *c0,
                                       const attnc_tensor *dh_n, const attnc_tensor *dc_n, attnc_tensor *dh0,
                                       attnc_tensor *dc0, attnc_tensor *dx, bool first, bool defer_dx, bwd_scratch *s) {
    int64_t B = r->B, T = r->T, H = r->H, G = r->ng * H, k = l * r->D + r->d;
    size_t es = attnc_dtype_size(r->dt);
    void *dhk = state_of(r, dh_n, k), *dck = r->mode == ATTNC_LSTM ? state_of(r, dc_n, k) : NULL;
    if (dhk)
        attnc_copy(s->dh, dhk, (size_t)(B * H) * es);
    else
        attnc_zero(s->dh, (size_t)(B * H) * es);
    if (dck)
        attnc_copy(s->dc, dck, (size_t)(B * H) * es);
    else
        attnc_zero(s->dc, (size_t)(B * H) * es);
    void *dgh = r->mode == ATTNC_LSTM ? s->dgx : s->dgh;
    bool lstm = r->mode == ATTNC_LSTM, fast = attnc_rnn_fast_usable(r);
    bool fused_dx = attnc_rnn_fast_fuses_dx(r, x->shape[1]);
    if (fast) {
        rnn_fast_bwd f = {.r = r,
                          .w_hh = w->weight_hh.data,
                          .gates = at(r, saved, lo->gates[k]),
                          .cells = lstm ? at(r, saved, lo->cells[k]) : NULL,
                          .out = at(r, saved, lo->out[l]),
                          .dout = dout,
                          .h0 = state_of(r, h0, k),
                          .c0 = lstm ? state_of(r, c0, k) : NULL,
                          .dh_n = dhk,
                          .dc_n = dck,
                          .dgx = s->dgx,
                          .dgh = dgh,
                          .hprev = s->hprev,
                          .dh0 = attnc_present(dh0) ? state_of(r, dh0, k) : NULL,
                          .dc0 = lstm && attnc_present(dc0) ? state_of(r, dc0, k) : NULL,
                          .dx = fused_dx ? dx->data : NULL,
                          .dx_add = !first,
                          .in = x->shape[1],
                          .w_ih = w->weight_ih.data};
        TRY(attnc_rnn_fast_backward(&f));
    } else {
        attnc_zero(s->dgx, (size_t)(B * T * G) * es);
        attnc_zero(s->hprev, (size_t)(B * T * H) * es);
        if (dgh != s->dgx) attnc_zero(dgh, (size_t)(B * T * G) * es);
    }
    attnc_tensor dstep = mat(r, s->dstep, B, G), drec = mat(r, s->drec, B, H);
    for (int64_t step = T - 1; step >= 0 && !fast; step--) {
        step_job j = {.r = r,
                      .s = step,
                      .hh = s->drec,
                      .gates = at(r, saved, lo->gates[k]),
                      .cs = at(r, saved, lo->cells[k]),
                      .out = at(r, saved, lo->out[l]),
                      .dout = dout,
                      .dh = s->dh,
                      .dc = s->dc,
                      .dgx = s->dgx,
                      .dgh = dgh,
                      .dgh_step = s->dstep,
                      .dh_direct = s->direct,
                      .hprev = s->hprev,
                      .h0 = state_of(r, h0, k),
                      .c0 = state_of(r, c0, k)};
        run_rows(r, ATTNC_TYPED(r->dt, backward_step_task), &j);
        colgemm(r, &dstep, &w->weight_hh, false, &drec);
        run_rows(r, ATTNC_TYPED(r->dt, merge_dh_task), &j);
    }
    if (attnc_present(dh0) && !fast) attnc_copy(state_of(r, dh0, k), s->dh, (size_t)(B * H) * es);
    if (attnc_present(dc0) && lstm && !fast) attnc_copy(state_of(r, dc0, k), s->dc, (size_t)(B * H) * es);
    attnc_tensor dgx2 = mat(r, s->dgx, B * T, G), dgh2 = mat(r, dgh, B * T, G), hp = mat(r, s->hprev, B * T, H);
    if (!fused_dx && !defer_dx) seq_dx(r, &dgx2, &w->weight_ih, dx, !first);
    seq_weight_grads(r, g, &dgx2, x, &dgh2, &hp);
    return ATTNC_OK;
}

typedef struct {
    const attnc_tensor *x;
    const attnc_rnn_weights *w; /* the layer's, by direction */
    attnc_rnn_weights *g;       /* the layer's, by direction */
    void *saved;
    const rnn_layout *lo;
    int64_t l;
    const void *dout;
    const attnc_tensor *h0, *c0, *dh_n, *dc_n;
    attnc_tensor *dh0, *dc0, *dx;
    bool first, defer_dx;
    bwd_scratch *s;
} bwd_args;

static attnc_status backward_one(rnn_run *r, void *args) {
    bwd_args *a = args;
    return direction_backward(r, a->x, &a->w[r->d], &a->g[r->d], a->saved, a->lo, a->l, a->dout, a->h0, a->c0, a->dh_n,
                              a->dc_n, a->dh0, a->dc0, a->dx, a->first, a->defer_dx, a->s);
}

attnc_status attnc_rnn_backward(attnc_tensor *dinput, attnc_tensor *dh0, attnc_tensor *dc0, attnc_rnn_weights *grads,
                                int64_t ngrads, const attnc_tensor *doutput, const attnc_tensor *dh_n,
                                const attnc_tensor *dc_n, const attnc_tensor *saved, const attnc_tensor *input,
                                const attnc_tensor *lengths, const attnc_tensor *h0, const attnc_tensor *c0,
                                const attnc_rnn_weights *weights, int64_t nweights, const attnc_rnn_config *cfg) {
    rnn_run r;
    TRY(setup(&r, cfg, input, lengths, weights, nweights, h0, c0));
    int64_t B = r.B, T = r.T, H = r.H, DH = r.D * H, G = r.ng * H;
    if (!attnc_present(saved) || !grads) return attnc_fail(ATTNC_ERR_TYPE, "saved and grads are required");
    TRY(check_count(&r, ngrads, "grads"));
    rnn_layout lo;
    layout(&lo, &r, true);
    TRY(attnc_check_dims(saved, "saved", r.dt, 1, &lo.total, false));
    int64_t osz[3] = {B, T, DH};
    if (attnc_present(doutput)) {
        TRY(attnc_check_dims(doutput, "doutput", r.dt, 3, osz, false));
        if (!attnc_is_contiguous(doutput)) return attnc_fail(ATTNC_ERR_LAYOUT, "doutput must be contiguous");
    }
    TRY(check_state(&r, dh_n, "dh_n", false));
    TRY(check_state(&r, dh0, "dh0", true));
    if (r.mode == ATTNC_LSTM) {
        TRY(check_state(&r, dc_n, "dc_n", false));
        TRY(check_state(&r, dc0, "dc0", true));
    }
    if (attnc_present(dinput)) {
        int64_t isz[3] = {B, T, r.I};
        TRY(attnc_check_dims(dinput, "dinput", r.dt, 3, isz, true));
    }
    for (int64_t l = 0; l < r.L; l++)
        for (int64_t d = 0; d < r.D; d++) {
            const attnc_rnn_weights *w = &weights[l * r.D + d];
            attnc_rnn_weights *g = &grads[l * r.D + d];
            const attnc_tensor *pairs[4][2] = {{&g->weight_ih, &w->weight_ih},
                                               {&g->weight_hh, &w->weight_hh},
                                               {&g->bias_ih, &w->bias_ih},
                                               {&g->bias_hh, &w->bias_hh}};
            static const char *const names[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
            for (int i = 0; i < 4; i++) {
                if (!attnc_present(pairs[i][0])) continue;
                if (!attnc_present(pairs[i][1]))
                    return attnc_fail(ATTNC_ERR_VALUE, "a gradient is given for an absent bias");
                int64_t sizes[2] = {pairs[i][1]->shape[0], pairs[i][1]->ndim > 1 ? pairs[i][1]->shape[1] : 0};
                char name[64]; /* torch's parameter name: weight_ih_l0, weight_hh_l1_reverse */
                snprintf(name, sizeof name, "the gradient of %s_l%lld%s", names[i], (long long)l, d ? "_reverse" : "");
                TRY(attnc_check_dims(pairs[i][0], name, r.dt, pairs[i][1]->ndim, sizes, true));
            }
        }
    size_t es = attnc_dtype_size(r.dt);
    bool at_once = directions_at_once(&r);
    bwd_scratch s[2] = {{0}};                      /* the second for the second direction when at_once */
    void *dcur = NULL, *dnext = NULL, *dx0 = NULL; /* dx0: the input's gradient when not wanted */
    void *dx1 = NULL;                              /* at_once: the second direction's fused dx, added after */
    attnc_status st = bwd_scratch_alloc(&r, &s[0]);
    if (st == ATTNC_OK && at_once) st = bwd_scratch_alloc(&r, &s[1]);
    struct {
        void **p;
        int64_t n;
    } bufs[] = {{&dcur, B * T * DH},
                {&dnext, B * T * DH},
                {&dx0, attnc_present(dinput) ? 1 : B * T * r.I},
                {&dx1, at_once ? B * T * (r.I > DH ? r.I : DH) : 0}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && st == ATTNC_OK; i++) /* dcur: zeros without doutput */
        st = bufs[i].p == &dcur ? attnc_calloc(bufs[i].p, (size_t)bufs[i].n, es, "rnn gradients")
                                : rnn_malloc(bufs[i].p, (size_t)bufs[i].n, es, "rnn gradients");
    if (st == ATTNC_OK && attnc_present(doutput)) attnc_copy(dcur, doutput->data, (size_t)(B * T * DH) * es);
    /* The first layer's weight gradient sums over every row of the input:
     * padding must not be read (it may hold anything, NaN included), so it
     * reads a copy with the padded steps zeroed. */
    void *x0 = NULL;
    if (st == ATTNC_OK && r.len) {
        st = attnc_calloc(&x0, (size_t)(B * T * r.I), es, "rnn input");
        for (int64_t b = 0; b < B && st == ATTNC_OK; b++)
            memcpy(at(&r, x0, b * T * r.I), at(&r, input->data, b * T * r.I), (size_t)(r.len[b] * r.I) * es);
    }
    for (int64_t l = r.L - 1; l >= 0 && st == ATTNC_OK; l--) {
        attnc_tensor x = l == 0 ? mat(&r, x0 ? x0 : input->data, B * T, r.I)
                                : mat(&r, at(&r, saved->data, lo.in[l] >= 0 ? lo.in[l] : lo.out[l - 1]), B * T, DH);
        attnc_tensor dx = l > 0 ? mat(&r, dnext, B * T, DH)
                                : mat(&r, attnc_present(dinput) ? dinput->data : dx0, B * T, r.I);
        bool fused_dx = attnc_rnn_fast_fuses_dx(&r, x.shape[1]);
        attnc_tensor dx1t = mat(&r, dx1, B * T, x.shape[1]);
        bwd_args a[2];
        for (int d = 0; d < 2; d++)
            a[d] = (bwd_args){.x = &x,
                              .w = &weights[l * r.D],
                              .g = &grads[l * r.D],
                              .saved = saved->data,
                              .lo = &lo,
                              .l = l,
                              .dout = dcur,
                              .h0 = h0,
                              .c0 = c0,
                              .dh_n = dh_n,
                              .dc_n = dc_n,
                              .dh0 = dh0,
                              .dc0 = dc0,
                              .dx = &dx,
                              .first = d == 0,
                              .s = &s[0]};
        if (at_once) { /* the second direction keeps its own scratch and dx; dx made after, in order */
            a[1].s = &s[1];
            a[0].defer_dx = a[1].defer_dx = true;
            if (fused_dx) {
                attnc_zero(dx1, (size_t)(B * T * x.shape[1]) * es); /* steps a row did not run stay 0 */
                a[1].dx = &dx1t;
                a[1].first = true;
            }
        }
        if (st == ATTNC_OK) st = each_direction(&r, backward_one, &a[0], &a[1]);
        if (st == ATTNC_OK && at_once) {
            if (fused_dx) {
                float *restrict to = dx.data; /* the fused kernels: float32 */
                const float *restrict from = dx1;
                for (int64_t i = 0; i < B * T * x.shape[1]; i++) to[i] += from[i];
            } else {
                for (int d = 0; d < 2; d++) {
                    attnc_tensor dgx = mat(&r, s[d].dgx, B * T, G);
                    seq_dx(&r, &dgx, &weights[l * r.D + d].weight_ih, &dx, d > 0);
                }
            }
        }
        if (st == ATTNC_OK && l > 0) {
            if (lo.in[l] >= 0) /* through the dropout on the previous layer's output */
                st = attnc_pointwise_backward(&dx, &dx, NULL, ATTNC_ACT_NONE, r.dropout, r.seed, (uint64_t)l);
            void *t = dcur;
            dcur = dnext;
            dnext = t;
        }
    }
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(*bufs[i].p);
    bwd_scratch_free(&s[0]);
    bwd_scratch_free(&s[1]);
    free(x0);
    return st;
}
