/* captioner.c: show-attend-tell (Xu et al. 2015), forward and backward
 * through time, and the model side of greedy and beam-search decoding
 * (core/search.c searches; equations in captioner.h).
 *
 * What runs once per call: the initial state, the attention's feature
 * projection W_a a_i + b_a (not once per step), the embedding's share of the
 * LSTM gates for every step, and the deep output layer over all steps. Per
 * step: one product h_{t-1} [W_hh; U_a; w_b]^T (the recurrent gates, the
 * attention's query part and the gate's pre-activation together), the
 * attention rows, z_t W_ih[:, E:]^T and the cell. The backward mirrors it and
 * forms every weight gradient with one product over all steps.
 *
 * Threads: row kernels run over fixed blocks of ROWS images and products are
 * cut into fixed blocks of GEMM_ROWS output rows; each block owns its outputs
 * and every sum runs in a fixed order, so the bits never depend on the
 * thread count. */
#include "captioner.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/rng.h"
#include "../../core/search.h"
#include "../../core/simd.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"
#include "../../ops/transformer/layer.h"

enum { ROWS = 16, GEMM_ROWS = 64 }; /* images per row-kernel block; output rows per product block */

typedef struct {
    int64_t B, T, L, F, E, H, A, V, R; /* R = 4H + A + gate: the recurrent product's width */
    int gate;
    attnc_caption_mode mode;
    uint64_t seed;
    double expect_prob;
    attnc_dtype dt;
} cap_run;

/* Row (b, t) of a (B, T, n) array is at (b T + t) n; the step's scratch rows
 * (rec, zs, zp, h_run, c_run, dh, dc, dzp) are (B, n) and contiguous. */
typedef struct cap_job {
    const cap_run *r;
    int64_t t;
    void (*row)(const struct cap_job *j, int64_t b); /* what rows_task runs on each image */
    const void *feat;                                /* (B, L, F)                                              */
    const void *pa;                                  /* (B, L, A) W_a a_i + b_a                                */
    const void *v;                                   /* (A) the score vector                                   */
    const void *rec;     /* (B, R) h_{t-1} W_rec^T + b_rec: [W_hh h + b_hh | U_a h | w_b h + b_b] */
    const void *gxe;     /* (B, T, 4H) the embedding's part of the input gates + b_ih */
    const void *zp;      /* (B, 4H) z_t W_ih[:, E:]^T                              */
    void *th;            /* (B, T, L, A) tanh(W_a a_i + b_a + U_a h_{t-1})         */
    void *alpha;         /* (B, T, L)                                              */
    void *beta;          /* (B, T)                                                 */
    void *zhat;          /* (B, T, F) sum_i alpha_i a_i (soft) or a_s (hard)       */
    void *xin;           /* (B, T, E + F) [E y_{t-1}; z_t]                         */
    void *zs;            /* (B, F) z_t                                             */
    int64_t *samples;    /* (B, T) locations (hard modes)                          */
    void *gates;         /* (B, T, 4H) i, f, g, o after their nonlinearities       */
    void *h, *c;         /* (B, T, H) h_t, c_t                                     */
    void *hprev;         /* (B, T, H) h_{t-1}, or NULL (decoding)                  */
    void *h_run, *c_run; /* (B, H) the running state                              */
    /* backward */
    const void *c0;      /* (B, H)                                                */
    const void *dh_out;  /* (B, T, H) d logits / d h_t through the deep output    */
    const void *dz_out;  /* (B, T, F) the same for z_t                            */
    const void *dalphas; /* (B, T, L) or NULL                                     */
    const void *dlogp;   /* (B, T) or NULL                                        */
    const void *dzp;     /* (B, F) dgates_t W_ih[:, E:]                           */
    void *dh, *dc;       /* (B, H) running: dL/dh_t from later steps, dL/dc_t     */
    void *drec;          /* (B, T, R) [dgates | d(U_a h) | d(gate pre-activation)] */
    void *de;            /* (B, T, L) d scores                                    */
    void *dpa;           /* (B, L, A) accumulated over steps                      */
    void *dfeat;         /* (B, L, F) accumulated over steps                      */
} cap_job;

#define ATTNC_F64 0
#include "captioner_impl.h"
#define ATTNC_F64 1
#include "captioner_impl.h"

/* j->row on images [block ROWS, ...). */
static void rows_task(void *arg, int64_t block, int worker) {
    (void)worker;
    const cap_job *j = arg;
    for (int64_t b = block * ROWS; b < j->r->B && b < (block + 1) * ROWS; b++) j->row(j, b);
}

/* row (the attention, the cell or their backward) on every image, over
 * fixed blocks of ROWS images. */
static void over_rows(cap_job *j, void (*row)(const cap_job *, int64_t)) {
    const cap_run *r = j->r;
    j->row = row;
    int workers = attnc_workers_for(r->B * (r->L * r->A + 4 * r->H) * 4); /* a few operations per element */
    attnc_parallel_for((r->B + ROWS - 1) / ROWS, workers, rows_task, j);
}

/* ---- small helpers ------------------------------------------------------------ */

static size_t esize(const cap_run *r) { return attnc_dtype_size(r->dt); }

static void *at(const cap_run *r, const void *base, int64_t offset) {
    return (char *)base + offset * (int64_t)esize(r);
}

/* A (rows, cols) matrix at p with row stride rs (unit column stride). */
static attnc_mat M(const void *p, int64_t rows, int64_t cols, int64_t rs) {
    attnc_mat m = {(void *)p, rows, cols, rs, 1};
    return m;
}

/* c (m, n) = alpha op(a) op(b) + beta c over fixed blocks of c's rows. */
static void gemm(const cap_run *r, bool ta, bool tb, double alpha, attnc_mat a, attnc_mat b, double beta, attnc_mat c) {
    attnc_gemm_rows(r->dt, ta, tb, alpha, a, b, beta, c, GEMM_ROWS);
}

/* Every row of c (rows, n) (row stride rs) <- bias (n): the start of a
 * product accumulated with beta = 1. */
static void fill_rows(const cap_run *r, void *c, int64_t rows, int64_t n, int64_t rs, const void *bias) {
    for (int64_t i = 0; i < rows; i++) attnc_copy(at(r, c, i * rs), bias, (size_t)n * esize(r));
}

/* ---- checks ------------------------------------------------------------------- */

/* A C-contiguous parameter of the call's dtype and the given shape (n1 = 0: 1-D). */
static attnc_status check_param(const cap_run *r, const attnc_tensor *t, const char *name, int64_t n0, int64_t n1,
                                bool output) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "parameter %s is required", name);
    int64_t sizes[2] = {n0, n1};
    TRY(attnc_check_dims(t, name, r->dt, n1 ? 2 : 1, sizes, output));
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "parameter %s must be contiguous", name);
    return ATTNC_OK;
}

static attnc_status check_params(const cap_run *r, const attnc_captioner_params *p, bool output) {
    int64_t H = r->H, F = r->F, E = r->E, A = r->A, V = r->V;
    struct {
        const attnc_tensor *t;
        const char *name;
        int64_t n0, n1;
    } parts[] = {{&p->embedding, "embedding.weight", V, E},
                 {&p->init_h_w, "init_h.weight", H, F},
                 {&p->init_h_b, "init_h.bias", H, 0},
                 {&p->init_c_w, "init_c.weight", H, F},
                 {&p->init_c_b, "init_c.bias", H, 0},
                 {&p->att_feat_w, "attention.feature.weight", A, F},
                 {&p->att_feat_b, "attention.feature.bias", A, 0},
                 {&p->att_hidden_w, "attention.hidden.weight", A, H},
                 {&p->att_score_w, "attention.score.weight", 1, A},
                 {&p->w_ih, "decoder.weight_ih", 4 * H, E + F},
                 {&p->w_hh, "decoder.weight_hh", 4 * H, H},
                 {&p->b_ih, "decoder.bias_ih", 4 * H, 0},
                 {&p->b_hh, "decoder.bias_hh", 4 * H, 0},
                 {&p->out_h_w, "out_hidden.weight", E, H},
                 {&p->out_z_w, "out_context.weight", E, F},
                 {&p->out_w, "output.weight", V, E},
                 {&p->out_b, "output.bias", V, 0}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        TRY(check_param(r, parts[i].t, parts[i].name, parts[i].n0, parts[i].n1, output));
    if (r->gate) {
        TRY(check_param(r, &p->gate_w, "gate.weight", 1, H, output));
        TRY(check_param(r, &p->gate_b, "gate.bias", 1, 0, output));
    } else if (attnc_present(&p->gate_w) || attnc_present(&p->gate_b)) {
        return attnc_fail(ATTNC_ERR_VALUE, "gate parameters given but the config has no gate");
    }
    return ATTNC_OK;
}

/* Ids of t (n values, contiguous INT64) all in [low, limit). */
static attnc_status check_ids(const attnc_tensor *t, const char *name, int64_t n, int64_t low, int64_t limit) {
    const int64_t *id = t->data;
    for (int64_t i = 0; i < n; i++)
        if (id[i] < low || id[i] >= limit)
            return attnc_fail(ATTNC_ERR_VALUE,
                              "%s has the value %" PRId64 " at flat index %" PRId64 ", outside [%" PRId64 ", %" PRId64
                              ")",
                              name, id[i], i, low, limit);
    return ATTNC_OK;
}

/* Sizes from features (B, L, F) and the parameters; checks both. T < 0:
 * no tokens (decoding). */
static attnc_status setup(cap_run *r, const attnc_tensor *features, const attnc_tensor *tokens,
                          const attnc_captioner_params *p, const attnc_captioner_config *cfg) {
    *r = (cap_run){0};
    if (!cfg || !p) return attnc_fail(ATTNC_ERR_TYPE, "config and parameters are required");
    if (cfg->mode < ATTNC_CAPTION_SOFT || cfg->mode > ATTNC_CAPTION_HARD_GIVEN)
        return attnc_fail(ATTNC_ERR_VALUE, "unknown attention mode %d", (int)cfg->mode);
    if (!attnc_present(features)) return attnc_fail(ATTNC_ERR_TYPE, "features is required");
    r->dt = features->dtype;
    if (r->dt != ATTNC_FLOAT32 && r->dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "features has dtype %s, expected float32 or float64",
                          attnc_dtype_name(r->dt));
    int64_t fs[3] = {-1, -1, -1};
    TRY(attnc_check_array(features, "features", r->dt, 3, fs, false));
    r->B = fs[0];
    r->L = fs[1];
    r->F = fs[2];
    if (r->L < 1 || r->F < 1)
        return attnc_fail(ATTNC_ERR_VALUE, "features needs at least one location and one feature (L, F >= 1)");
    /* the sizes the parameters give (each checked whole by check_params) */
    int64_t emb[2] = {-1, -1}, hh[2] = {-1, -1}, af[2] = {-1, -1};
    TRY(attnc_check_array(&p->embedding, "embedding.weight", r->dt, 2, emb, false));
    TRY(attnc_check_array(&p->w_hh, "decoder.weight_hh", r->dt, 2, hh, false));
    TRY(attnc_check_array(&p->att_feat_w, "attention.feature.weight", r->dt, 2, af, false));
    r->V = emb[0];
    r->E = emb[1];
    r->H = hh[1];
    r->A = af[0];
    r->gate = cfg->gate != 0;
    r->R = 4 * r->H + r->A + r->gate;
    r->mode = cfg->mode;
    r->seed = cfg->seed;
    r->expect_prob = cfg->expect_prob;
    if (!(cfg->expect_prob >= 0 && cfg->expect_prob <= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "expect_prob must be in [0, 1], got %g", cfg->expect_prob);
    if (r->V < 1 || r->E < 1 || r->H < 1 || r->A < 1)
        return attnc_fail(ATTNC_ERR_VALUE, "vocabulary, embedding, hidden and attention sizes must be >= 1");
    TRY(check_params(r, p, false));
    if (tokens) {
        int64_t ts[2] = {r->B, -1};
        TRY(attnc_check_array(tokens, "tokens", ATTNC_INT64, 2, ts, false));
        r->T = ts[1];
        TRY(check_ids(tokens, "tokens", r->B * r->T, 0, r->V));
    }
    return ATTNC_OK;
}

/* samples (B, T): required in the hard modes; read (and checked) when given. */
static attnc_status check_samples(const cap_run *r, const attnc_tensor *samples, bool output) {
    if (r->mode == ATTNC_CAPTION_SOFT) return ATTNC_OK;
    int64_t ss[2] = {r->B, r->T};
    TRY(attnc_check_array(samples, "samples", ATTNC_INT64, 2, ss, output && r->mode != ATTNC_CAPTION_HARD_GIVEN));
    return r->mode == ATTNC_CAPTION_HARD_GIVEN ? check_ids(samples, "samples", r->B * r->T, -1, r->L) : ATTNC_OK;
}

/* ---- the saved buffer ---------------------------------------------------------- */

typedef struct {
    int64_t mean, h0, c0, pa, xin, hprev, h, c, gates, th, alpha, beta, zhat, q, total;
} cap_layout;

static void layout(cap_layout *lo, int64_t B, int64_t T, int64_t L, int64_t F, int64_t E, int64_t H, int64_t A) {
    int64_t at = 0, BT = B * T;
    int64_t *slots[] = {&lo->mean, &lo->h0,    &lo->c0, &lo->pa,    &lo->xin,  &lo->hprev, &lo->h,
                        &lo->c,    &lo->gates, &lo->th, &lo->alpha, &lo->beta, &lo->zhat,  &lo->q};
    int64_t sizes[] = {B * F,  B * H,      B * H,      B * L * A, BT * (E + F), BT * H, BT * H,
                       BT * H, BT * 4 * H, BT * L * A, BT * L,    BT,           BT * F, BT * E};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = at;
        at += sizes[i];
    }
    lo->total = at;
}

int64_t attnc_captioner_saved_size(int64_t B, int64_t T, int64_t L, int64_t F, int64_t E, int64_t H, int64_t A) {
    if (B < 0 || T < 0 || L < 0 || F < 0 || E < 0 || H < 0 || A < 0) return -1;
    cap_layout lo;
    layout(&lo, B, T, L, F, E, H, A);
    return lo.total;
}

/* ---- pieces shared by the forward and the decoder ------------------------------ */

/* The packed recurrent weight [W_hh; U_a; w_b] (R, H) and its bias [b_hh; 0; b_b]. */
static void pack_recurrent(const cap_run *r, const attnc_captioner_params *p, void *w_rec, void *b_rec) {
    int64_t H = r->H, A = r->A;
    attnc_copy(w_rec, p->w_hh.data, (size_t)(4 * H * H) * esize(r));
    attnc_copy(at(r, w_rec, 4 * H * H), p->att_hidden_w.data, (size_t)(A * H) * esize(r));
    memset(b_rec, 0, (size_t)r->R * esize(r)); /* R >= 5: never empty */
    attnc_copy(b_rec, p->b_hh.data, (size_t)(4 * H) * esize(r));
    if (r->gate) {
        attnc_copy(at(r, w_rec, (4 * H + A) * H), p->gate_w.data, (size_t)H * esize(r));
        attnc_copy(at(r, b_rec, 4 * H + A), p->gate_b.data, esize(r));
    }
}

/* mean (B, F), h0 = tanh(W_h mean + b_h), c0 (B, H), and pa (B L, A) = a W_a^T + b_a. */
static void prepare(const cap_run *r, const attnc_captioner_params *p, const void *feat, void *mean, void *h0, void *c0,
                    void *pa) {
    int64_t B = r->B, L = r->L, F = r->F, H = r->H, A = r->A;
    ATTNC_TYPED(r->dt, mean_of)(mean, feat, B, L, F);
    fill_rows(r, h0, B, H, H, p->init_h_b.data);
    gemm(r, false, true, 1, M(mean, B, F, F), M(p->init_h_w.data, H, F, F), 1, M(h0, B, H, H));
    ATTNC_TYPED(r->dt, tanh_all)(h0, B * H);
    fill_rows(r, c0, B, H, H, p->init_c_b.data);
    gemm(r, false, true, 1, M(mean, B, F, F), M(p->init_c_w.data, H, F, F), 1, M(c0, B, H, H));
    ATTNC_TYPED(r->dt, tanh_all)(c0, B * H);
    fill_rows(r, pa, B * L, A, A, p->att_feat_b.data);
    gemm(r, false, true, 1, M(feat, B * L, F, F), M(p->att_feat_w.data, A, F, F), 1, M(pa, B * L, A, A));
}

/* Scratch of one forward pass (contiguous (B, n) rows) . */
typedef struct {
    void *w_rec, *b_rec, *rec, *zs, *zp, *h_run, *c_run, *gxe;
} step_scratch;

static attnc_status scratch_alloc(const cap_run *r, step_scratch *s, int64_t gxe_rows) {
    int64_t B = r->B, H = r->H;
    struct {
        void **p;
        int64_t n;
    } bufs[] = {{&s->w_rec, r->R * H}, {&s->b_rec, r->R},  {&s->rec, B * r->R}, {&s->zs, B * r->F},
                {&s->zp, B * 4 * H},   {&s->h_run, B * H}, {&s->c_run, B * H},  {&s->gxe, gxe_rows * 4 * H}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        TRY(attnc_calloc(bufs[i].p, (size_t)bufs[i].n, esize(r), "captioner scratch"));
    return ATTNC_OK;
}

static void scratch_free(step_scratch *s) {
    void *ps[] = {s->w_rec, s->b_rec, s->rec, s->zs, s->zp, s->h_run, s->c_run, s->gxe};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
}

/* Pointers of one step's job into (B, T, .) arrays; T and t in r / step. */
typedef struct {
    void *th, *alpha, *beta, *zhat, *xin, *gates, *h, *c, *hprev, *pa;
    int64_t *samples;
} step_arrays;

/* One decoder step t: the recurrent product, the attention rows, z W_ih[:, E:]^T, the cell. */
static void step_forward(const cap_run *r, const attnc_captioner_params *p, const void *feat, step_scratch *s,
                         const step_arrays *arr, int64_t t) {
    int64_t B = r->B, H = r->H, F = r->F, E = r->E;
    fill_rows(r, s->rec, B, r->R, r->R, s->b_rec);
    gemm(r, false, true, 1, M(s->h_run, B, H, H), M(s->w_rec, r->R, H, H), 1, M(s->rec, B, r->R, r->R));
    cap_job j = {.r = r,
                 .t = t,
                 .feat = feat,
                 .pa = arr->pa,
                 .v = p->att_score_w.data,
                 .rec = s->rec,
                 .gxe = s->gxe,
                 .zp = s->zp,
                 .th = arr->th,
                 .alpha = arr->alpha,
                 .beta = arr->beta,
                 .zhat = arr->zhat,
                 .xin = arr->xin,
                 .zs = s->zs,
                 .samples = arr->samples,
                 .gates = arr->gates,
                 .h = arr->h,
                 .c = arr->c,
                 .hprev = arr->hprev,
                 .h_run = s->h_run,
                 .c_run = s->c_run};
    over_rows(&j, ATTNC_TYPED(r->dt, attend_row));
    gemm(r, false, true, 1, M(s->zs, B, F, F), M(at(r, p->w_ih.data, E), 4 * H, F, E + F), 0,
         M(s->zp, B, 4 * H, 4 * H));
    over_rows(&j, ATTNC_TYPED(r->dt, cell_row));
}

/* q (N, E) = x[:, :E] + h L_h^T + z L_z^T and logits (N, V) = q L_o^T + b_o,
 * for N rows of x = [emb; z] (N, E + F) and h (N, H). */
static void deep_output(const cap_run *r, const attnc_captioner_params *p, int64_t N, const void *xin, const void *h,
                        void *q, void *logits) {
    int64_t E = r->E, F = r->F, H = r->H, V = r->V;
    for (int64_t i = 0; i < N; i++) attnc_copy(at(r, q, i * E), at(r, xin, i * (E + F)), (size_t)E * esize(r));
    gemm(r, false, true, 1, M(h, N, H, H), M(p->out_h_w.data, E, H, H), 1, M(q, N, E, E));
    gemm(r, false, true, 1, M(at(r, xin, E), N, F, E + F), M(p->out_z_w.data, E, F, F), 1, M(q, N, E, E));
    fill_rows(r, logits, N, V, V, p->out_b.data);
    gemm(r, false, true, 1, M(q, N, E, E), M(p->out_w.data, V, E, E), 1, M(logits, N, V, V));
}

/* xin[:, :E] (N rows, stride E + F) <- embedding rows of ids (N); gxe (N, 4H)
 * = emb W_ih[:, :E]^T + b_ih. */
static void embed(const cap_run *r, const attnc_captioner_params *p, const int64_t *ids, int64_t N, void *xin,
                  void *gxe) {
    int64_t E = r->E, F = r->F, H = r->H;
    for (int64_t i = 0; i < N; i++)
        attnc_copy(at(r, xin, i * (E + F)), at(r, p->embedding.data, ids[i] * E), (size_t)E * esize(r));
    fill_rows(r, gxe, N, 4 * H, 4 * H, p->b_ih.data);
    gemm(r, false, true, 1, M(xin, N, E, E + F), M(p->w_ih.data, 4 * H, E, E + F), 1, M(gxe, N, 4 * H, 4 * H));
}

/* ---- forward -------------------------------------------------------------------- */

attnc_status attnc_captioner_forward(attnc_tensor *logits, attnc_tensor *alphas, attnc_tensor *samples,
                                     attnc_tensor *saved, const attnc_tensor *features, const attnc_tensor *tokens,
                                     const attnc_captioner_params *p, const attnc_captioner_config *cfg) {
    cap_run r;
    if (!tokens) return attnc_fail(ATTNC_ERR_TYPE, "tokens is required");
    TRY(setup(&r, features, tokens, p, cfg));
    int64_t B = r.B, T = r.T, L = r.L, F = r.F, E = r.E, H = r.H, A = r.A, V = r.V;
    int64_t ls[3] = {B, T, V}, as[3] = {B, T, L};
    TRY(attnc_check_array(logits, "logits", r.dt, 3, ls, true));
    TRY(attnc_check_array(alphas, "alphas", r.dt, 3, as, true));
    TRY(check_samples(&r, samples, true));
    cap_layout lo;
    layout(&lo, B, T, L, F, E, H, A);
    void *own = NULL, *base;
    if (attnc_present(saved)) {
        TRY(attnc_check_array(saved, "saved", r.dt, 1, &lo.total, true));
        base = saved->data;
    } else {
        TRY(attnc_calloc(&own, (size_t)lo.total, esize(&r), "captioner activations"));
        base = own;
    }
    step_scratch s = {0};
    attnc_status st = scratch_alloc(&r, &s, B * T);
    if (st == ATTNC_OK) {
        void *h0 = at(&r, base, lo.h0), *c0 = at(&r, base, lo.c0);
        prepare(&r, p, features->data, at(&r, base, lo.mean), h0, c0, at(&r, base, lo.pa));
        pack_recurrent(&r, p, s.w_rec, s.b_rec);
        embed(&r, p, tokens->data, B * T, at(&r, base, lo.xin), s.gxe);
        attnc_copy(s.h_run, h0, (size_t)(B * H) * esize(&r));
        attnc_copy(s.c_run, c0, (size_t)(B * H) * esize(&r));
        for (int64_t b = 0; b < B && T > 0; b++)
            attnc_copy(at(&r, base, lo.hprev + b * T * H), at(&r, h0, b * H), (size_t)H * esize(&r));
        step_arrays arr = {.th = at(&r, base, lo.th),
                           .alpha = at(&r, base, lo.alpha),
                           .beta = at(&r, base, lo.beta),
                           .zhat = at(&r, base, lo.zhat),
                           .xin = at(&r, base, lo.xin),
                           .gates = at(&r, base, lo.gates),
                           .h = at(&r, base, lo.h),
                           .c = at(&r, base, lo.c),
                           .hprev = at(&r, base, lo.hprev),
                           .pa = at(&r, base, lo.pa),
                           .samples = r.mode == ATTNC_CAPTION_SOFT ? NULL : samples->data};
        for (int64_t t = 0; t < T; t++) step_forward(&r, p, features->data, &s, &arr, t);
        deep_output(&r, p, B * T, arr.xin, arr.h, at(&r, base, lo.q), logits->data);
        attnc_copy(alphas->data, arr.alpha, (size_t)(B * T * L) * esize(&r));
    }
    scratch_free(&s);
    free(own);
    return st;
}

/* ---- backward ------------------------------------------------------------------- */

/* Gradients of the attention's feature projection, the initial state and
 * the score vector, after the loop: dfeat (B, L, F) gets dpa W_a and the
 * mean's share. dh, dc (B, H) are dL/dh0, dL/dc0 (overwritten as scratch). */
static void backward_prepare(const cap_run *r, attnc_captioner_params *g, const attnc_captioner_params *p,
                             const void *feat, const void *base, const cap_layout *lo, void *dpa, void *dh, void *dc,
                             void *dmean, void *dfeat, const void *de) {
    int64_t B = r->B, L = r->L, F = r->F, H = r->H, A = r->A, N = B * r->T * L;
    const void *h0 = at(r, base, lo->h0), *c0 = at(r, base, lo->c0), *mean = at(r, base, lo->mean);
    gemm(r, true, false, 1, M(dpa, B * L, A, A), M(feat, B * L, F, F), 0, M(g->att_feat_w.data, A, F, F));
    attnc_col_sums(r->dt, g->att_feat_b.data, dpa, B * L, A, A);
    gemm(r, false, false, 1, M(dpa, B * L, A, A), M(p->att_feat_w.data, A, F, F), 1, M(dfeat, B * L, F, F));
    gemm(r, true, false, 1, M(de, N, 1, 1), M(at(r, base, lo->th), N, A, A), 0, M(g->att_score_w.data, 1, A, A));
    /* through tanh: d pre-activation = d state (1 - state^2) */
    ATTNC_TYPED(r->dt, tanh_states_backward)(dh, dc, h0, c0, B * H);
    gemm(r, true, false, 1, M(dh, B, H, H), M(mean, B, F, F), 0, M(g->init_h_w.data, H, F, F));
    attnc_col_sums(r->dt, g->init_h_b.data, dh, B, H, H);
    gemm(r, true, false, 1, M(dc, B, H, H), M(mean, B, F, F), 0, M(g->init_c_w.data, H, F, F));
    attnc_col_sums(r->dt, g->init_c_b.data, dc, B, H, H);
    gemm(r, false, false, 1, M(dh, B, H, H), M(p->init_h_w.data, H, F, F), 0, M(dmean, B, F, F));
    gemm(r, false, false, 1, M(dc, B, H, H), M(p->init_c_w.data, H, F, F), 1, M(dmean, B, F, F));
    ATTNC_TYPED(r->dt, mean_of_backward)(dfeat, dmean, B, L, F);
}

/* The recurrent and input weights' gradients and the embedding's, after the
 * loop, from drec (B T, R) and dq (B T, E) (dq is overwritten with d emb). */
static attnc_status backward_weights(const cap_run *r, attnc_captioner_params *g, const attnc_captioner_params *p,
                                     const attnc_tensor *tokens, const void *base, const cap_layout *lo,
                                     const void *drec, void *dq) {
    int64_t N = r->B * r->T, E = r->E, F = r->F, H = r->H, A = r->A, R = r->R;
    const void *xin = at(r, base, lo->xin), *hprev = at(r, base, lo->hprev);
    gemm(r, true, false, 1, M(drec, N, 4 * H, R), M(xin, N, E + F, E + F), 0, M(g->w_ih.data, 4 * H, E + F, E + F));
    attnc_col_sums(r->dt, g->b_ih.data, drec, N, 4 * H, R);
    attnc_copy(g->b_hh.data, g->b_ih.data, (size_t)(4 * H) * esize(r));
    gemm(r, true, false, 1, M(drec, N, 4 * H, R), M(hprev, N, H, H), 0, M(g->w_hh.data, 4 * H, H, H));
    gemm(r, true, false, 1, M(at(r, drec, 4 * H), N, A, R), M(hprev, N, H, H), 0, M(g->att_hidden_w.data, A, H, H));
    if (r->gate) {
        gemm(r, true, false, 1, M(at(r, drec, 4 * H + A), N, 1, R), M(hprev, N, H, H), 0, M(g->gate_w.data, 1, H, H));
        attnc_col_sums(r->dt, g->gate_b.data, at(r, drec, 4 * H + A), N, 1, R);
    }
    gemm(r, false, false, 1, M(drec, N, 4 * H, R), M(p->w_ih.data, 4 * H, E, E + F), 1, M(dq, N, E, E));
    if (N == 0) { /* no tokens: nothing to scatter (and no buffer to read) */
        memset(g->embedding.data, 0, (size_t)(r->V * E) * esize(r));
        return ATTNC_OK;
    }
    int64_t ds[2] = {N, E};
    attnc_tensor demb = attnc_view(dq, r->dt, 2, ds), ids = *tokens;
    ids.ndim = 1;
    ids.shape[0] = N;
    ids.strides[0] = 1;
    return attnc_embedding_backward(&g->embedding, &demb, &ids, 1.0, -1);
}

attnc_status attnc_captioner_backward(attnc_captioner_params *grads, attnc_tensor *dfeatures,
                                      const attnc_tensor *dlogits, const attnc_tensor *dalphas,
                                      const attnc_tensor *dlogp, const attnc_tensor *saved,
                                      const attnc_tensor *features, const attnc_tensor *tokens,
                                      const attnc_tensor *samples, const attnc_captioner_params *p,
                                      const attnc_captioner_config *cfg) {
    cap_run r;
    if (!tokens || !grads) return attnc_fail(ATTNC_ERR_TYPE, "tokens and grads are required");
    TRY(setup(&r, features, tokens, p, cfg));
    TRY(check_params(&r, grads, true));
    int64_t B = r.B, T = r.T, L = r.L, F = r.F, E = r.E, H = r.H, A = r.A, V = r.V, R = r.R, N = B * T;
    cap_layout lo;
    layout(&lo, B, T, L, F, E, H, A);
    TRY(attnc_check_array(saved, "saved", r.dt, 1, &lo.total, false));
    int64_t ls[3] = {B, T, V}, as[3] = {B, T, L}, ps[2] = {B, T}, fs[3] = {B, L, F};
    TRY(attnc_check_array(dlogits, "dlogits", r.dt, 3, ls, false));
    if (attnc_present(dalphas)) TRY(attnc_check_array(dalphas, "dalphas", r.dt, 3, as, false));
    if (attnc_present(dlogp)) {
        if (r.mode == ATTNC_CAPTION_SOFT) return attnc_fail(ATTNC_ERR_VALUE, "dlogp needs a hard attention mode");
        TRY(attnc_check_array(dlogp, "dlogp", r.dt, 2, ps, false));
    }
    if (attnc_present(dfeatures)) TRY(attnc_check_array(dfeatures, "dfeatures", r.dt, 3, fs, true));
    if (r.mode != ATTNC_CAPTION_SOFT) { /* the forward's locations, whatever mode made them */
        TRY(attnc_check_array(samples, "samples", ATTNC_INT64, 2, ps, false));
        TRY(check_ids(samples, "samples", N, -1, L));
    }
    void *dq = NULL, *dh_out = NULL, *dz_out = NULL, *drec = NULL, *de = NULL, *dpa = NULL, *dfeat = NULL;
    void *dh = NULL, *dc = NULL, *dzp = NULL, *dmean = NULL, *w_rec = NULL, *b_rec = NULL;
    struct {
        void **p;
        int64_t n;
    } bufs[] = {{&dq, N * E},      {&dh_out, N * H},    {&dz_out, N * F}, {&drec, N * R}, {&de, N * L},
                {&dpa, B * L * A}, {&dfeat, B * L * F}, {&dh, B * H},     {&dc, B * H},   {&dzp, B * F},
                {&dmean, B * F},   {&w_rec, R * H},     {&b_rec, R}};
    attnc_status st = ATTNC_OK;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && st == ATTNC_OK; i++)
        st = attnc_calloc(bufs[i].p, (size_t)bufs[i].n, esize(&r), "captioner gradients");
    if (st == ATTNC_OK) {
        const void *xin = at(&r, saved->data, lo.xin), *h = at(&r, saved->data, lo.h);
        /* the deep output layer, over every step at once */
        gemm(&r, false, false, 1, M(dlogits->data, N, V, V), M(p->out_w.data, V, E, E), 0, M(dq, N, E, E));
        gemm(&r, true, false, 1, M(dlogits->data, N, V, V), M(at(&r, saved->data, lo.q), N, E, E), 0,
             M(grads->out_w.data, V, E, E));
        attnc_col_sums(r.dt, grads->out_b.data, dlogits->data, N, V, V);
        gemm(&r, false, false, 1, M(dq, N, E, E), M(p->out_h_w.data, E, H, H), 0, M(dh_out, N, H, H));
        gemm(&r, true, false, 1, M(dq, N, E, E), M(h, N, H, H), 0, M(grads->out_h_w.data, E, H, H));
        gemm(&r, false, false, 1, M(dq, N, E, E), M(p->out_z_w.data, E, F, F), 0, M(dz_out, N, F, F));
        gemm(&r, true, false, 1, M(dq, N, E, E), M(at(&r, xin, E), N, F, E + F), 0, M(grads->out_z_w.data, E, F, F));
        pack_recurrent(&r, p, w_rec, b_rec);
        const void *sv = saved->data;
        cap_job j = {.r = &r,
                     .feat = features->data,
                     .v = p->att_score_w.data,
                     .th = at(&r, sv, lo.th),
                     .alpha = at(&r, sv, lo.alpha),
                     .beta = at(&r, sv, lo.beta),
                     .zhat = at(&r, sv, lo.zhat),
                     .samples = r.mode ? samples->data : NULL,
                     .gates = at(&r, sv, lo.gates),
                     .h = at(&r, sv, lo.h),
                     .c = at(&r, sv, lo.c),
                     .c0 = at(&r, sv, lo.c0),
                     .dh_out = dh_out,
                     .dz_out = dz_out,
                     .dalphas = attnc_present(dalphas) ? dalphas->data : NULL,
                     .dlogp = attnc_present(dlogp) ? dlogp->data : NULL,
                     .dzp = dzp,
                     .dh = dh,
                     .dc = dc,
                     .drec = drec,
                     .de = de,
                     .dpa = dpa,
                     .dfeat = dfeat};
        for (j.t = T - 1; j.t >= 0; j.t--) {
            over_rows(&j, ATTNC_TYPED(r.dt, cell_back_row));
            gemm(&r, false, false, 1, M(at(&r, drec, j.t * R), B, 4 * H, T * R),
                 M(at(&r, p->w_ih.data, E), 4 * H, F, E + F), 0, M(dzp, B, F, F));
            over_rows(&j, ATTNC_TYPED(r.dt, attend_back_row));
            gemm(&r, false, false, 1, M(at(&r, drec, j.t * R), B, R, T * R), M(w_rec, R, H, H), 0, M(dh, B, H, H));
        }
        backward_prepare(&r, grads, p, features->data, saved->data, &lo, dpa, dh, dc, dmean, dfeat, de);
        st = backward_weights(&r, grads, p, tokens, saved->data, &lo, drec, dq);
        if (st == ATTNC_OK && attnc_present(dfeatures))
            attnc_copy(dfeatures->data, dfeat, (size_t)(B * L * F) * esize(&r));
    }
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(*bufs[i].p);
    return st;
}

/* ---- decoding (the search itself is core/search.c's) -------------------------------- */

/* The model the search drives: rows i = b K + k (beam slot k of image b; K =
 * 1 for greedy) each see image b. A step embeds the fed tokens and runs the
 * decoder step and the deep output over all R = B K rows at once; the state
 * a reorder moves is h_run and c_run. Each step's weights are the search's
 * trace, which it keeps per hypothesis. */
typedef struct {
    cap_run r; /* r.B = R rows; r.T = 1: the step arrays hold one step */
    const attnc_captioner_params *p;
    cap_layout lo;         /* of base                                              */
    void *base;            /* (lo.total) one step's activations of the R rows      */
    const void *feat;      /* (R, L, F) row i's image: the features when K = 1     */
    void *feat_k;          /* (R, L, F) their copy when K > 1                      */
    void *logits;          /* (R, V)                                               */
    void *gather;          /* (R, H) the reorder's scratch                         */
    int64_t *start, *hard; /* (R) bos; (R) the argmax locations                    */
    int64_t K, T;
    step_scratch s;
    step_arrays arr;
} cap_decoder;

/* The search's step s: feed tok (R) (NULL: bos), leave the logits (R, V). */
static attnc_status decoder_step(void *ctx, const int64_t *tok, int64_t s) {
    (void)s;
    cap_decoder *d = ctx;
    const cap_run *r = &d->r;
    embed(r, d->p, tok ? tok : d->start, r->B, d->arr.xin, d->s.gxe);
    step_forward(r, d->p, d->feat, &d->s, &d->arr, 0);
    deep_output(r, d->p, r->B, d->arr.xin, d->arr.h, at(r, d->base, d->lo.q), d->logits);
    return ATTNC_OK;
}

/* Row i of x (R, H) <- its row parent[i]. */
static void permute_rows(cap_decoder *d, void *x, const int64_t *parent) {
    const cap_run *r = &d->r;
    size_t row = (size_t)r->H * esize(r);
    for (int64_t i = 0; i < r->B; i++) attnc_copy(at(r, d->gather, i * r->H), at(r, x, parent[i] * r->H), row);
    attnc_copy(x, d->gather, (size_t)r->B * row);
}

/* After beam step s, row i continues row parent[i] (R). */
static void decoder_reorder(void *ctx, const int64_t *parent, int64_t s) {
    (void)s;
    cap_decoder *d = ctx;
    permute_rows(d, d->s.h_run, parent);
    permute_rows(d, d->s.c_run, parent);
}

static attnc_status decoder_alloc(cap_decoder *d) {
    const cap_run *r = &d->r;
    int64_t R = r->B, beam = d->K > 1;
    struct {
        void **p;
        int64_t n;
        size_t size;
    } bufs[] = {{&d->base, d->lo.total, esize(r)},        {&d->feat_k, beam ? R * r->L * r->F : 0, esize(r)},
                {&d->logits, R * r->V, esize(r)},         {&d->gather, R * r->H, esize(r)},
                {(void **)&d->start, R, sizeof(int64_t)}, {(void **)&d->hard, R, sizeof(int64_t)}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        TRY(attnc_calloc(bufs[i].p, (size_t)bufs[i].n, bufs[i].size, "captioner decoding"));
    return scratch_alloc(r, &d->s, R);
}

static void decoder_free(cap_decoder *d) {
    void *ps[] = {d->base, d->feat_k, d->logits, d->gather, d->start, d->hard};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
    scratch_free(&d->s);
}

/* Every row's image, initial state and attention projection; bos fed first. */
static void decoder_prepare(cap_decoder *d, const void *features, int64_t bos) {
    const cap_run *r = &d->r;
    const cap_layout *lo = &d->lo;
    int64_t R = r->B, L = r->L, F = r->F, H = r->H;
    d->feat = features;
    if (d->K > 1) {
        for (int64_t i = 0; i < R; i++)
            attnc_copy(at(r, d->feat_k, i * L * F), at(r, features, (i / d->K) * L * F), (size_t)(L * F) * esize(r));
        d->feat = d->feat_k;
    }
    void *base = d->base;
    prepare(r, d->p, d->feat, at(r, base, lo->mean), at(r, base, lo->h0), at(r, base, lo->c0), at(r, base, lo->pa));
    pack_recurrent(r, d->p, d->s.w_rec, d->s.b_rec);
    attnc_copy(d->s.h_run, at(r, base, lo->h0), (size_t)(R * H) * esize(r));
    attnc_copy(d->s.c_run, at(r, base, lo->c0), (size_t)(R * H) * esize(r));
    for (int64_t i = 0; i < R; i++) d->start[i] = bos;
    d->arr = (step_arrays){.th = at(r, base, lo->th),
                           .alpha = at(r, base, lo->alpha),
                           .beta = at(r, base, lo->beta),
                           .zhat = at(r, base, lo->zhat),
                           .xin = at(r, base, lo->xin),
                           .gates = at(r, base, lo->gates),
                           .h = at(r, base, lo->h),
                           .c = at(r, base, lo->c),
                           .hprev = NULL,
                           .pa = at(r, base, lo->pa),
                           .samples = d->hard};
}

/* The decoder's outputs tokens (B, T), lengths (B) INT64 and alphas (B, T, L)
 * (optional), T returned, and its other arguments. */
static attnc_status check_decoding(const cap_run *r, attnc_tensor *tokens, attnc_tensor *lengths, attnc_tensor *alphas,
                                   int64_t bos, int64_t eos, int64_t beam_size, double length_penalty, int64_t *T) {
    if (r->mode != ATTNC_CAPTION_SOFT && r->mode != ATTNC_CAPTION_HARD_ARGMAX)
        return attnc_fail(ATTNC_ERR_VALUE, "decoding needs the soft or the argmax attention mode");
    int64_t ts[2] = {r->B, -1}, ls[1] = {r->B};
    TRY(attnc_check_array(tokens, "tokens", ATTNC_INT64, 2, ts, true));
    TRY(attnc_check_array(lengths, "lengths", ATTNC_INT64, 1, ls, true));
    int64_t as[3] = {r->B, ts[1], r->L};
    if (attnc_present(alphas)) TRY(attnc_check_array(alphas, "alphas", r->dt, 3, as, true));
    if (bos < 0 || bos >= r->V)
        return attnc_fail(ATTNC_ERR_VALUE, "bos %" PRId64 " is outside [0, %" PRId64 ")", bos, r->V);
    if (eos < -1 || eos >= r->V)
        return attnc_fail(ATTNC_ERR_VALUE, "eos %" PRId64 " is outside [0, %" PRId64 ")", eos, r->V);
    if (beam_size < 1) return attnc_fail(ATTNC_ERR_VALUE, "beam_size must be >= 1, got %" PRId64, beam_size);
    if (!isfinite(length_penalty)) return attnc_fail(ATTNC_ERR_VALUE, "length_penalty must be finite");
    *T = ts[1];
    return ATTNC_OK;
}

attnc_status attnc_captioner_generate(attnc_tensor *tokens, attnc_tensor *lengths, attnc_tensor *alphas,
                                      const attnc_tensor *features, const attnc_captioner_params *p,
                                      const attnc_captioner_config *cfg, int64_t bos, int64_t eos, int64_t beam_size,
                                      double length_penalty) {
    cap_decoder d = {0};
    cap_run *r = &d.r;
    TRY(setup(r, features, NULL, p, cfg));
    TRY(check_decoding(r, tokens, lengths, alphas, bos, eos, beam_size, length_penalty, &d.T));
    int64_t B = r->B, T = d.T;
    if (B == 0 || T == 0) {
        if (B > 0) memset(lengths->data, 0, (size_t)B * sizeof(int64_t));
        return ATTNC_OK;
    }
    d.p = p;
    d.K = beam_size;
    r->B = B * beam_size;
    r->T = 1;
    layout(&d.lo, r->B, 1, r->L, r->F, r->E, r->H, r->A);
    attnc_status st = decoder_alloc(&d);
    if (st == ATTNC_OK) {
        decoder_prepare(&d, features->data, bos);
        attnc_search_model m = {.ctx = &d,
                                .B = B,
                                .K = beam_size,
                                .V = r->V,
                                .logits = d.logits,
                                .dt = r->dt,
                                .step = decoder_step,
                                .reorder = decoder_reorder,
                                .trace = d.arr.alpha,
                                .trace_bytes = r->L * (int64_t)esize(r)};
        attnc_search_io io = {.out = tokens->data,
                              .lengths = lengths->data,
                              .T = T,
                              .eos = eos,
                              .alpha = length_penalty,
                              .trace = attnc_present(alphas) ? alphas->data : NULL};
        st = attnc_search(&m, &io);
    }
    decoder_free(&d);
    return st;
}
