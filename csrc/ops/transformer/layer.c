/* layer.c: one transformer layer (Vaswani et al. 2017), encoder or decoder,
 * forward and backward, composed of attnc's C operations (linear, fused
 * attention, layer norm, pointwise). A layer is a chain of sublayers:
 *
 *   self-attention -> cross-attention (decoder only) -> feed-forward
 *
 * and each sublayer k with its branch f_k is, with dropout on the branch,
 *   post-norm (the paper):  y = norm(x + dropout(f(x)))    mid = x + dropout(f(x))
 *   pre-norm:               y = x + dropout(f(norm(x)))    mid = norm(x)
 * The forward keeps, per sublayer, its input, `mid`, the norm's statistics
 * and the branch's own activations in one `saved` buffer; the backward runs
 * the chain in reverse. Dropout masks are recomputed from the seed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../nn/rotary.h"
#include "layer.h"

enum { SELF = 0, CROSS = 1, FF = 2, NSUB = 3 };
enum {
    STREAM_HIDDEN = 8
}; /* dropout stream of the feed-forward hidden layer
                               (residual branch k uses stream k + 1)        */

typedef struct {
    int64_t B, L, S, E, F, H, N, M; /* N = B L query rows, M = B S memory rows */
    int64_t Hkv, Ekv;               /* key and value heads, their width (grouped-query attention) */
    bool decoder;
    attnc_dtype dt;
} layer_dims;

/* Element offsets into the saved buffer. */
typedef struct {
    int64_t in[NSUB], mid[NSUB], mean[NSUB], rstd[NSUB];
    int64_t qkv, attn_self, lse_self;     /* self-attention */
    int64_t q, kv, attn_cross, lse_cross; /* cross-attention */
    int64_t f1, hidden;                   /* feed-forward: pre-activation, dropout(act(f1)) */
    int64_t branch;                       /* the forward's scratch: a branch's output */
    int64_t total;
} layer_layout;

static void layout(layer_layout *lo, const layer_dims *d) {
    int64_t at = 0, N = d->N, E = d->E;
#define TAKE(field, n) (lo->field = at, at += (n))
    for (int k = 0; k < NSUB; k++) {
        if (k == CROSS && !d->decoder) continue;
        if (k != SELF) TAKE(in[k], N * E); /* the first sublayer's input is x itself */
        TAKE(mid[k], N * E);
        TAKE(mean[k], N);
        TAKE(rstd[k], N);
    }
    TAKE(qkv, N * 3 * E); /* (N, E + 2 E_kv) used: the size does not depend on kv_heads */
    TAKE(attn_self, N * E);
    TAKE(lse_self, d->B * d->H * d->L);
    if (d->decoder) {
        TAKE(q, N * E);
        TAKE(kv, d->M * 2 * E);
        TAKE(attn_cross, N * E);
        TAKE(lse_cross, d->B * d->H * d->L);
    }
    TAKE(f1, N * d->F);
    TAKE(hidden, N * d->F);
    TAKE(branch, N * E);
#undef TAKE
    lo->total = at;
}

int64_t attnc_layer_kv_heads(const attnc_layer_config *cfg) { return cfg->kv_heads ? cfg->kv_heads : cfg->nhead; }

int64_t attnc_layer_saved_size(int64_t B, int64_t L, int64_t S, int64_t E, int64_t F, int64_t H, int decoder) {
    layer_dims d = {.B = B, .L = L, .S = S, .E = E, .F = F, .H = H, .N = B * L, .M = B * S, .decoder = decoder != 0};
    layer_layout lo;
    layout(&lo, &d);
    return lo.total;
}

/* ---- views ---------------------------------------------------------------- */

attnc_tensor attnc_view(void *data, attnc_dtype dt, int ndim, const int64_t *shape) {
    attnc_tensor t = {.data = data, .dtype = dt, .ndim = ndim};
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = stride;
        stride *= shape[i];
    }
    return t;
}

attnc_tensor attnc_rows(const attnc_tensor *t, int64_t r0, int64_t n) {
    attnc_tensor r = *t;
    if (!attnc_present(t)) return r;
    r.data = (char *)t->data + r0 * t->strides[0] * (int64_t)attnc_dtype_size(t->dtype);
    r.shape[0] = n;
    return r;
}

attnc_tensor attnc_heads(void *data, attnc_dtype dt, int64_t B, int64_t H, int64_t T, int64_t E, int64_t stride) {
    attnc_tensor t = {.data = data, .dtype = dt, .ndim = 4};
    int64_t shape[4] = {B, H, T, E / H}, strides[4] = {T * stride, E / H, stride, 1};
    memcpy(t.shape, shape, sizeof shape);
    memcpy(t.strides, strides, sizeof strides);
    return t;
}

typedef struct {
    layer_dims d;
    layer_layout lo;
    char *saved;
    const attnc_layer_params *p;
    const attnc_layer_config *cfg;
    const attnc_attn_masks *masks[NSUB]; /* self, cross */
    attnc_tensor memory;                 /* (M, E): the memory's rows (decoder) */
    attnc_tensor *weights[NSUB];         /* optional outputs: self, cross */
    attnc_tensor *dweights;              /* optional output of the backward: self */
} layer_run;

/* A contiguous (rows, cols) tensor at element offset off of the saved buffer. */
static attnc_tensor saved_mat(const layer_run *r, int64_t off, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return attnc_view(r->saved + off * (int64_t)attnc_dtype_size(r->d.dt), r->d.dt, 2, shape);
}

static attnc_tensor mat_of(void *data, attnc_dtype dt, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return attnc_view(data, dt, 2, shape);
}

static const attnc_norm_params *norm_of(const attnc_layer_params *p, int k) {
    return k == SELF ? &p->norm_self : k == CROSS ? &p->norm_cross : &p->norm_ff;
}

static const attnc_mha_params *mha_of(const attnc_layer_params *p, int k) {
    return k == SELF ? &p->self_attn : &p->cross_attn;
}

/* SplitMix64: a distinct, well-mixed seed for each sublayer's attention dropout. */
static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15u;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
    return x ^ (x >> 31);
}

static const attnc_mha_params *mha_of(const attnc_layer_params *p, int k);

static attnc_sdpa_options sdpa_options(const layer_run *r, int k) {
    attnc_sdpa_options o = {.scale = 1.0 / sqrt((double)(r->d.E / r->d.H)),
                            .dropout_p = r->cfg->dropout,
                            .seed = mix(r->cfg->seed ^ (uint64_t)k)};
    const attnc_attn_masks *m = r->masks[k];
    if (m) {
        o.masks[0] = m->masks[0];
        o.masks[1] = m->masks[1];
        o.causal = m->causal;
        o.query_segments = m->query_segments;
        o.key_segments = m->key_segments;
        o.prefix_lengths = m->prefix_lengths;
        o.block_mask = m->block_mask;
        o.block_q = m->block_q;
        o.block_k = m->block_k;
    }
    o.sinks = mha_of(r->p, k)->sinks;
    o.activation = r->cfg->attention;
    if (o.activation == ATTNC_SIGMOID) {
        int64_t keys = k == SELF ? r->d.L : r->d.S;
        o.sigmoid_bias = r->cfg->sigmoid_bias_set ? r->cfg->sigmoid_bias : keys > 0 ? -log((double)keys) : 0.0;
    }
    if (k == SELF) { /* the options of today's models: the self-attention's */
        o.alibi_slopes = r->cfg->alibi_slopes;
        o.window = r->cfg->window;
        o.window_left = r->cfg->window_left;
        o.window_right = r->cfg->window_right;
        o.softcap = r->cfg->softcap;
    }
    return o;
}

attnc_status attnc_norm_rows(attnc_tensor *y, attnc_tensor *mean, attnc_tensor *rstd, const attnc_tensor *x,
                             const attnc_norm_params *norm, double eps) {
    return attnc_layer_norm_forward(y, mean, rstd, x, &norm->weight, &norm->bias, eps);
}

/* ---- the three branches f_k ---------------------------------------------- */

/* Query, key and value heads of attention sublayer k (views into saved). */
typedef struct {
    attnc_tensor q, k, v, out, lse;
} attn_views;

/* The query, key and value heads of rows (N, E + 2 E_kv) at data. */
static void qkv_heads(const layer_dims *d, char *data, attnc_tensor *q, attnc_tensor *k, attnc_tensor *v) {
    int64_t w = d->E + 2 * d->Ekv, es = (int64_t)attnc_dtype_size(d->dt);
    *q = attnc_heads(data, d->dt, d->B, d->H, d->L, d->E, w);
    *k = attnc_heads(data + d->E * es, d->dt, d->B, d->Hkv, d->L, d->Ekv, w);
    *v = attnc_heads(data + (d->E + d->Ekv) * es, d->dt, d->B, d->Hkv, d->L, d->Ekv, w);
}

/* RoPE on the self-attention's query and key heads, in place, at positions
 * 0 .. L - 1: sign 1 turns the projections, -1 turns their gradients back. */
static attnc_status rope_heads(const layer_run *r, attnc_tensor *q, attnc_tensor *k, double sign) {
    const layer_dims *d = &r->d;
    if (!r->cfg->rotary_dim) return ATTNC_OK;
    double *at = NULL;
    TRY(attnc_calloc((void **)&at, (size_t)d->L, sizeof *at, "RoPE positions"));
    for (int64_t i = 0; i < d->L; i++) at[i] = (double)i;
    int64_t shape[3] = {1, 1, d->L};
    attnc_tensor pos = attnc_view(at, ATTNC_FLOAT64, 3, shape);
    const attnc_layer_config *c = r->cfg;
    attnc_status st = attnc_rotary_apply(q, q, &pos, c->rope_base, c->rotary_dim, c->rope_interleaved, sign);
    if (st == ATTNC_OK) st = attnc_rotary_apply(k, k, &pos, c->rope_base, c->rotary_dim, c->rope_interleaved, sign);
    free(at);
    return st;
}

static attn_views attention_views(const layer_run *r, int k) {
    const layer_dims *d = &r->d;
    size_t es = attnc_dtype_size(d->dt);
    attn_views a;
    int64_t hl[3] = {d->B, d->H, d->L};
    if (k == SELF) {
        char *qkv = r->saved + r->lo.qkv * (int64_t)es;
        qkv_heads(d, qkv, &a.q, &a.k, &a.v);
        a.out = attnc_heads(r->saved + r->lo.attn_self * (int64_t)es, d->dt, d->B, d->H, d->L, d->E, d->E);
        a.lse = attnc_view(r->saved + r->lo.lse_self * (int64_t)es, d->dt, 3, hl);
    } else {
        char *kv = r->saved + r->lo.kv * (int64_t)es;
        a.q = attnc_heads(r->saved + r->lo.q * (int64_t)es, d->dt, d->B, d->H, d->L, d->E, d->E);
        a.k = attnc_heads(kv, d->dt, d->B, d->Hkv, d->S, d->Ekv, 2 * d->Ekv);
        a.v = attnc_heads(kv + d->Ekv * es, d->dt, d->B, d->Hkv, d->S, d->Ekv, 2 * d->Ekv);
        a.out = attnc_heads(r->saved + r->lo.attn_cross * (int64_t)es, d->dt, d->B, d->H, d->L, d->E, d->E);
        a.lse = attnc_view(r->saved + r->lo.lse_cross * (int64_t)es, d->dt, 3, hl);
    }
    return a;
}

/* out (N, E) <- f_k(a (N, E)). */
static attnc_status branch_forward(const layer_run *r, int k, const attnc_tensor *a, attnc_tensor *out) {
    const layer_dims *d = &r->d;
    const attnc_layer_params *p = r->p;
    if (k == FF) {
        attnc_tensor f1 = saved_mat(r, r->lo.f1, d->N, d->F), h = saved_mat(r, r->lo.hidden, d->N, d->F);
        TRY(attnc_linear_forward(&f1, a, &p->linear1_weight, &p->linear1_bias));
        TRY(attnc_pointwise_forward(&h, &f1, NULL, r->cfg->activation, r->cfg->dropout, r->cfg->seed, STREAM_HIDDEN));
        return attnc_linear_forward(out, &h, &p->linear2_weight, &p->linear2_bias);
    }
    const attnc_mha_params *m = mha_of(p, k);
    attn_views v = attention_views(r, k);
    if (k == SELF) {
        attnc_tensor qkv = saved_mat(r, r->lo.qkv, d->N, d->E + 2 * d->Ekv);
        TRY(attnc_linear_forward(&qkv, a, &m->in_weight, &m->in_bias));
        TRY(rope_heads(r, &v.q, &v.k, 1.0));
    } else {
        attnc_tensor q = saved_mat(r, r->lo.q, d->N, d->E), kv = saved_mat(r, r->lo.kv, d->M, 2 * d->Ekv);
        attnc_tensor wq = attnc_rows(&m->in_weight, 0, d->E), bq = attnc_rows(&m->in_bias, 0, d->E);
        attnc_tensor wkv = attnc_rows(&m->in_weight, d->E, 2 * d->Ekv);
        attnc_tensor bkv = attnc_rows(&m->in_bias, d->E, 2 * d->Ekv);
        TRY(attnc_linear_forward(&q, a, &wq, &bq));
        TRY(attnc_linear_forward(&kv, &r->memory, &wkv, &bkv));
    }
    attnc_sdpa_options o = sdpa_options(r, k);
    attnc_tensor none = {0}, *w = r->weights[k] ? r->weights[k] : &none;
    TRY(attnc_sdpa_forward(&v.out, &v.lse, w, &v.q, &v.k, &v.v, &o));
    attnc_tensor attn = saved_mat(r, k == SELF ? r->lo.attn_self : r->lo.attn_cross, d->N, d->E);
    return attnc_linear_forward(out, &attn, &m->out_weight, &m->out_bias);
}

/* Scratch of the backward: (N, E) buffers, and the wider ones. */
typedef struct {
    attnc_tensor dmid, dbranch, dx_branch, dattn, dqkv, dkv, dhidden;
} scratch;

/* dweights (B, H, L, L) <- dout_h V^T per batch element and head (query
 * head h reads value head h / (H / Hkv)): the gradient with respect to the
 * attention probabilities (dropout 0). */
static void self_weights_gradient(const layer_dims *d, attnc_tensor *dweights, const attnc_tensor *dout_h,
                                  const attnc_tensor *v) {
    attnc_batch batch = {.nb = 2, .shape = {d->B, d->H}, .count = d->B * d->H};
    attnc_batch kv = {.nb = 2, .shape = {d->B, d->Hkv}, .count = d->B * d->Hkv};
    for (int64_t i = 0; i < batch.count; i++) {
        int64_t ikv = i / d->H * d->Hkv + i % d->H / (d->H / d->Hkv);
        attnc_mat a = attnc_batch_mat(dout_h, &batch, i), b = attnc_batch_mat(v, &kv, ikv);
        attnc_mat c = attnc_batch_mat(dweights, &batch, i);
        if (d->dt == ATTNC_FLOAT32)
            attnc_gemm_f32(false, true, 1, a, b, 0, c);
        else
            attnc_gemm_f64(false, true, 1, a, b, 0, c);
    }
}

/* da (N, E) <- d f_k / da^T dout (N, E); parameter gradients into g;
 * dmemory (cross-attention) into dmem. */
static attnc_status branch_backward(const layer_run *r, int k, const attnc_tensor *dout, const attnc_tensor *a,
                                    attnc_tensor *da, attnc_layer_params *g, attnc_tensor *dmem, scratch *s) {
    const layer_dims *d = &r->d;
    const attnc_layer_params *p = r->p;
    if (k == FF) {
        attnc_tensor f1 = saved_mat(r, r->lo.f1, d->N, d->F), h = saved_mat(r, r->lo.hidden, d->N, d->F);
        TRY(attnc_linear_backward(&s->dhidden, &g->linear2_weight, &g->linear2_bias, dout, &h, &p->linear2_weight));
        TRY(attnc_pointwise_backward(&s->dhidden, &s->dhidden, &f1, r->cfg->activation, r->cfg->dropout, r->cfg->seed,
                                     STREAM_HIDDEN));
        return attnc_linear_backward(da, &g->linear1_weight, &g->linear1_bias, &s->dhidden, a, &p->linear1_weight);
    }
    const attnc_mha_params *m = mha_of(p, k);
    attnc_mha_params *gm = k == SELF ? &g->self_attn : &g->cross_attn;
    attnc_tensor attn = saved_mat(r, k == SELF ? r->lo.attn_self : r->lo.attn_cross, d->N, d->E);
    TRY(attnc_linear_backward(&s->dattn, &gm->out_weight, &gm->out_bias, dout, &attn, &m->out_weight));
    attn_views v = attention_views(r, k);
    attnc_sdpa_options o = sdpa_options(r, k);
    size_t es = attnc_dtype_size(d->dt);
    attnc_tensor dout_h = attnc_heads(s->dattn.data, d->dt, d->B, d->H, d->L, d->E, d->E);
    char *dq = s->dqkv.data;
    if (k == SELF && r->dweights) self_weights_gradient(d, r->dweights, &dout_h, &v.v);
    if (k == SELF) {
        attnc_tensor hq, hk, hv;
        qkv_heads(d, dq, &hq, &hk, &hv);
        TRY(attnc_sdpa_backward(&hq, &hk, &hv, NULL, &gm->sinks, NULL, &dout_h, NULL, &v.q, &v.k, &v.v, &v.out, &v.lse,
                                &o));
        TRY(rope_heads(r, &hq, &hk, -1.0));
        attnc_tensor dqkv = mat_of(dq, d->dt, d->N, d->E + 2 * d->Ekv);
        return attnc_linear_backward(da, &gm->in_weight, &gm->in_bias, &dqkv, a, &m->in_weight);
    }
    char *dkv = s->dkv.data;
    attnc_tensor hq = attnc_heads(dq, d->dt, d->B, d->H, d->L, d->E, d->E);
    attnc_tensor hk = attnc_heads(dkv, d->dt, d->B, d->Hkv, d->S, d->Ekv, 2 * d->Ekv);
    attnc_tensor hv = attnc_heads(dkv + d->Ekv * es, d->dt, d->B, d->Hkv, d->S, d->Ekv, 2 * d->Ekv);
    TRY(attnc_sdpa_backward(&hq, &hk, &hv, NULL, &gm->sinks, NULL, &dout_h, NULL, &v.q, &v.k, &v.v, &v.out, &v.lse,
                            &o));
    attnc_tensor dq2 = mat_of(dq, d->dt, d->N, d->E), dkv2 = mat_of(dkv, d->dt, d->M, 2 * d->Ekv);
    attnc_tensor wq = attnc_rows(&m->in_weight, 0, d->E), wkv = attnc_rows(&m->in_weight, d->E, 2 * d->Ekv);
    attnc_tensor gwq = attnc_rows(&gm->in_weight, 0, d->E), gbq = attnc_rows(&gm->in_bias, 0, d->E);
    attnc_tensor gwkv = attnc_rows(&gm->in_weight, d->E, 2 * d->Ekv);
    attnc_tensor gbkv = attnc_rows(&gm->in_bias, d->E, 2 * d->Ekv);
    TRY(attnc_linear_backward(da, &gwq, &gbq, &dq2, a, &wq));
    return attnc_linear_backward(dmem, &gwkv, &gbkv, &dkv2, &r->memory, &wkv);
}

/* ---- sublayers ------------------------------------------------------------ */

static attnc_status sublayer_forward(const layer_run *r, int k, const attnc_tensor *x, attnc_tensor *y,
                                     attnc_tensor *branch) {
    const layer_dims *d = &r->d;
    attnc_tensor mid = saved_mat(r, r->lo.mid[k], d->N, d->E);
    attnc_tensor mean = saved_mat(r, r->lo.mean[k], d->N, 1), rstd = saved_mat(r, r->lo.rstd[k], d->N, 1);
    mean.ndim = rstd.ndim = 1;
    const attnc_norm_params *norm = norm_of(r->p, k);
    double p = r->cfg->dropout, eps = r->cfg->eps;
    uint64_t stream = (uint64_t)k + 1;
    if (r->cfg->norm_first) {
        TRY(attnc_norm_rows(&mid, &mean, &rstd, x, norm, eps));
        TRY(branch_forward(r, k, &mid, branch));
        return attnc_pointwise_forward(y, branch, x, ATTNC_ACT_NONE, p, r->cfg->seed, stream);
    }
    TRY(branch_forward(r, k, x, branch));
    TRY(attnc_pointwise_forward(&mid, branch, x, ATTNC_ACT_NONE, p, r->cfg->seed, stream));
    return attnc_norm_rows(y, &mean, &rstd, &mid, norm, eps);
}

static attnc_norm_params *grad_norm_of(attnc_layer_params *g, int k) {
    return k == SELF ? &g->norm_self : k == CROSS ? &g->norm_cross : &g->norm_ff;
}

/* dx (N, E) <- dy (N, E) through sublayer k whose input was x. */
static attnc_status sublayer_backward(const layer_run *r, int k, const attnc_tensor *dy, const attnc_tensor *x,
                                      attnc_tensor *dx, attnc_layer_params *g, attnc_tensor *dmem, scratch *s) {
    const layer_dims *d = &r->d;
    attnc_tensor mid = saved_mat(r, r->lo.mid[k], d->N, d->E);
    attnc_tensor mean = saved_mat(r, r->lo.mean[k], d->N, 1), rstd = saved_mat(r, r->lo.rstd[k], d->N, 1);
    mean.ndim = rstd.ndim = 1;
    const attnc_norm_params *norm = norm_of(r->p, k);
    attnc_norm_params *gn = grad_norm_of(g, k);
    double p = r->cfg->dropout;
    uint64_t stream = (uint64_t)k + 1;
    if (r->cfg->norm_first) { /* y = x + dropout(f(norm(x))) */
        TRY(attnc_pointwise_backward(&s->dbranch, dy, NULL, ATTNC_ACT_NONE, p, r->cfg->seed, stream));
        TRY(branch_backward(r, k, &s->dbranch, &mid, &s->dmid, g, dmem, s));
        TRY(attnc_layer_norm_backward(&s->dx_branch, &gn->weight, &gn->bias, &s->dmid, x, &norm->weight, &mean, &rstd));
        return attnc_pointwise_forward(dx, &s->dx_branch, dy, ATTNC_ACT_NONE, 0, 0, 0);
    }
    /* y = norm(mid), mid = x + dropout(f(x)) */
    TRY(attnc_layer_norm_backward(&s->dmid, &gn->weight, &gn->bias, dy, &mid, &norm->weight, &mean, &rstd));
    TRY(attnc_pointwise_backward(&s->dbranch, &s->dmid, NULL, ATTNC_ACT_NONE, p, r->cfg->seed, stream));
    TRY(branch_backward(r, k, &s->dbranch, x, &s->dx_branch, g, dmem, s));
    return attnc_pointwise_forward(dx, &s->dx_branch, &s->dmid, ATTNC_ACT_NONE, 0, 0, 0);
}

/* ---- checks ---------------------------------------------------------------- */

static attnc_status check_param(const attnc_tensor *t, const char *name, attnc_dtype dt, int ndim, int64_t d0,
                                int64_t d1, bool required) {
    if (!attnc_present(t)) return required ? attnc_fail(ATTNC_ERR_TYPE, "%s is required", name) : ATTNC_OK;
    int64_t sizes[2] = {d0, d1};
    TRY(attnc_check_dims(t, name, dt, ndim, sizes, false));
    return ndim == 2 ? attnc_check_blas(t, name) : ATTNC_OK;
}

static attnc_status check_mha(const attnc_mha_params *m, const char *which, attnc_dtype dt, int64_t E, int64_t Ekv) {
    char name[64];
    snprintf(name, sizeof name, "%s.in_proj_weight", which);
    TRY(check_param(&m->in_weight, name, dt, 2, E + 2 * Ekv, E, true));
    snprintf(name, sizeof name, "%s.in_proj_bias", which);
    TRY(check_param(&m->in_bias, name, dt, 1, E + 2 * Ekv, 0, false));
    snprintf(name, sizeof name, "%s.out_proj.weight", which);
    TRY(check_param(&m->out_weight, name, dt, 2, E, E, true));
    snprintf(name, sizeof name, "%s.out_proj.bias", which);
    return check_param(&m->out_bias, name, dt, 1, E, 0, false);
}

attnc_status attnc_check_layer_params(const attnc_layer_params *p, const attnc_layer_config *cfg, attnc_dtype dt,
                                      int64_t E, bool decoder, int64_t *F) {
    if (!p || !cfg) return attnc_fail(ATTNC_ERR_TYPE, "params and config are required");
    if (cfg->nhead < 1 || E % cfg->nhead)
        return attnc_fail(ATTNC_ERR_VALUE, "d_model (%lld) must be divisible by nhead (%lld)", (long long)E,
                          (long long)cfg->nhead);
    if (cfg->activation != ATTNC_ACT_RELU && cfg->activation != ATTNC_ACT_GELU &&
        cfg->activation != ATTNC_ACT_GELU_TANH)
        return attnc_fail(ATTNC_ERR_VALUE, "activation must be relu, gelu or gelu with the tanh approximation");
    if (!(cfg->eps >= 0)) return attnc_fail(ATTNC_ERR_VALUE, "layer_norm_eps must be >= 0");
    if (!(cfg->dropout >= 0 && cfg->dropout <= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "dropout must be in [0, 1], got %g", cfg->dropout);
    int64_t Hkv = attnc_layer_kv_heads(cfg), hd = E / cfg->nhead;
    if (Hkv < 1 || cfg->nhead % Hkv)
        return attnc_fail(ATTNC_ERR_VALUE, "num_kv_heads (%lld) must divide nhead (%lld)", (long long)cfg->kv_heads,
                          (long long)cfg->nhead);
    if (cfg->rotary_dim < 0 || cfg->rotary_dim > hd || cfg->rotary_dim % 2)
        return attnc_fail(ATTNC_ERR_VALUE, "rotary_dim must be even and in [0, d_model / nhead = %lld], got %lld",
                          (long long)hd, (long long)cfg->rotary_dim);
    if (cfg->attention != ATTNC_SOFTMAX && cfg->attention != ATTNC_SIGMOID)
        return attnc_fail(ATTNC_ERR_VALUE, "attention must be softmax (0) or sigmoid (1), got %d", (int)cfg->attention);
    if (cfg->attention == ATTNC_SIGMOID && cfg->sigmoid_bias_set && !isfinite(cfg->sigmoid_bias))
        return attnc_fail(ATTNC_ERR_VALUE, "sigmoid_bias must be finite, got %g", cfg->sigmoid_bias);
    if (cfg->rotary_dim && !(cfg->rope_base > 0 && isfinite(cfg->rope_base)))
        return attnc_fail(ATTNC_ERR_VALUE, "rope_base must be positive and finite, got %g", cfg->rope_base);
    TRY(check_mha(&p->self_attn, "self_attn", dt, E, Hkv * hd));
    if (decoder) TRY(check_mha(&p->cross_attn, "multihead_attn", dt, E, Hkv * hd));
    TRY(check_param(&p->self_attn.sinks, "self_attn.sinks", dt, 1, cfg->nhead, 0, false));
    TRY(check_param(&p->cross_attn.sinks, "multihead_attn.sinks", dt, 1, cfg->nhead, 0, false));
    TRY(check_param(&cfg->alibi_slopes, "alibi_slopes", dt, 1, cfg->nhead, 0, false));
    if (cfg->attention == ATTNC_SIGMOID && (attnc_present(&p->self_attn.sinks) || attnc_present(&p->cross_attn.sinks)))
        return attnc_fail(ATTNC_ERR_VALUE, "sinks join a softmax's normaliser; attention sigmoid has none");
    if (!attnc_present(&p->linear1_weight)) return attnc_fail(ATTNC_ERR_TYPE, "linear1.weight is required");
    *F = p->linear1_weight.shape[0];
    TRY(check_param(&p->linear1_weight, "linear1.weight", dt, 2, *F, E, true));
    TRY(check_param(&p->linear1_bias, "linear1.bias", dt, 1, *F, 0, false));
    TRY(check_param(&p->linear2_weight, "linear2.weight", dt, 2, E, *F, true));
    TRY(check_param(&p->linear2_bias, "linear2.bias", dt, 1, E, 0, false));
    const attnc_norm_params *norms[3] = {&p->norm_self, &p->norm_cross, &p->norm_ff};
    const char *names[3][2] = {{"norm1.weight", "norm1.bias"},
                               {"norm2.weight", "norm2.bias"},
                               {decoder ? "norm3.weight" : "norm2.weight", decoder ? "norm3.bias" : "norm2.bias"}};
    for (int k = 0; k < NSUB; k++) {
        if (k == CROSS && !decoder) continue;
        TRY(check_param(&norms[k]->weight, names[k][0], dt, 1, E, 0, false));
        TRY(check_param(&norms[k]->bias, names[k][1], dt, 1, E, 0, false));
    }
    return ATTNC_OK;
}

static attnc_status check_rows(const attnc_tensor *t, const char *name, attnc_dtype dt, int64_t B, int64_t T, int64_t E,
                               bool output) {
    int64_t sizes[3] = {B, T, E};
    TRY(attnc_check_dims(t, name, dt, 3, sizes, output));
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "%s must be contiguous", name);
    return ATTNC_OK;
}

/* Fills r from the call's arguments (everything but the buffers). */
static attnc_status setup(layer_run *r, const attnc_tensor *x, const attnc_tensor *memory, const attnc_layer_params *p,
                          const attnc_layer_config *cfg, const attnc_attn_masks *self_masks,
                          const attnc_attn_masks *cross_masks) {
    *r = (layer_run){.p = p, .cfg = cfg};
    if (!attnc_present(x)) return attnc_fail(ATTNC_ERR_TYPE, "input is required");
    attnc_dtype dt = x->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    if (x->ndim != 3) return attnc_fail(ATTNC_ERR_VALUE, "input must be (B, L, E), got %d dims", x->ndim);
    layer_dims *d = &r->d;
    d->dt = dt;
    d->B = x->shape[0];
    d->L = x->shape[1];
    d->E = x->shape[2];
    d->decoder = p && attnc_present(&p->cross_attn.in_weight);
    TRY(check_rows(x, "input", dt, d->B, d->L, d->E, false));
    TRY(attnc_check_layer_params(p, cfg, dt, d->E, d->decoder, &d->F));
    d->H = cfg->nhead;
    d->Hkv = attnc_layer_kv_heads(cfg);
    d->Ekv = d->Hkv * (d->E / d->H);
    d->N = d->B * d->L;
    if (d->decoder) {
        if (!attnc_present(memory)) return attnc_fail(ATTNC_ERR_TYPE, "memory is required by a decoder layer");
        if (memory->ndim != 3) return attnc_fail(ATTNC_ERR_VALUE, "memory must be (B, S, E)");
        d->S = memory->shape[1];
        TRY(check_rows(memory, "memory", dt, d->B, d->S, d->E, false));
        d->M = d->B * d->S;
        int64_t mrows[2] = {d->M, d->E};
        r->memory = attnc_view(memory->data, dt, 2, mrows);
    }
    layout(&r->lo, d);
    r->masks[SELF] = self_masks;
    r->masks[CROSS] = cross_masks;
    return ATTNC_OK;
}

static attnc_status check_saved(const layer_run *r, const attnc_tensor *saved, bool output) {
    int64_t n = r->lo.total;
    TRY(attnc_check_dims(saved, "saved", r->d.dt, 1, &n, output));
    if (!attnc_is_contiguous(saved)) return attnc_fail(ATTNC_ERR_LAYOUT, "saved must be contiguous");
    return ATTNC_OK;
}

static int last_sublayer(void) { return FF; }
static int next_sublayer(const layer_run *r, int k) { return k == SELF && !r->d.decoder ? FF : k + 1; }
static int prev_sublayer(const layer_run *r, int k) { return k == FF && !r->d.decoder ? SELF : k - 1; }

/* ---- the layer -------------------------------------------------------------- */

attnc_status attnc_layer_forward(attnc_tensor *out, attnc_tensor *weights_self, attnc_tensor *weights_cross,
                                 attnc_tensor *saved, const attnc_tensor *x, const attnc_tensor *memory,
                                 const attnc_layer_params *params, const attnc_layer_config *config,
                                 const attnc_attn_masks *self_masks, const attnc_attn_masks *cross_masks) {
    layer_run r;
    TRY(setup(&r, x, memory, params, config, self_masks, cross_masks));
    const layer_dims *d = &r.d;
    if (!attnc_present(out)) return attnc_fail(ATTNC_ERR_TYPE, "output is required");
    TRY(check_rows(out, "output", d->dt, d->B, d->L, d->E, true));
    /* checked here, by their names (the attention would call either "weights") */
    if (attnc_present(weights_self)) TRY(ATTNC_NEED(weights_self, "weights_self", d->dt, true, d->B, d->H, d->L, d->L));
    if (attnc_present(weights_cross) && d->decoder)
        TRY(ATTNC_NEED(weights_cross, "weights_cross", d->dt, true, d->B, d->H, d->L, d->S));
    r.weights[SELF] = attnc_present(weights_self) ? weights_self : NULL;
    r.weights[CROSS] = attnc_present(weights_cross) && d->decoder ? weights_cross : NULL;
    size_t es = attnc_dtype_size(d->dt);
    void *own = NULL;
    if (attnc_present(saved)) {
        TRY(check_saved(&r, saved, true));
        r.saved = saved->data;
    } else {
        TRY(attnc_calloc(&own, (size_t)r.lo.total, es, "layer activations"));
        r.saved = own;
    }
    attnc_status st = ATTNC_OK;
    attnc_tensor branch = saved_mat(&r, r.lo.branch, d->N, d->E);
    attnc_tensor x2 = mat_of(x->data, d->dt, d->N, d->E), y2 = mat_of(out->data, d->dt, d->N, d->E);
    for (int k = SELF; st == ATTNC_OK; k = next_sublayer(&r, k)) {
        attnc_tensor in = k == SELF ? x2 : saved_mat(&r, r.lo.in[k], d->N, d->E);
        attnc_tensor y = k == last_sublayer() ? y2 : saved_mat(&r, r.lo.in[next_sublayer(&r, k)], d->N, d->E);
        st = sublayer_forward(&r, k, &in, &y, &branch);
        if (k == last_sublayer()) break;
    }
    free(own);
    return st;
}

static attnc_status check_grads(const layer_run *r, const attnc_layer_params *g) {
    const attnc_layer_params *p = r->p;
    const attnc_tensor *pairs[][2] = {
        {&g->self_attn.in_weight, &p->self_attn.in_weight},
        {&g->self_attn.in_bias, &p->self_attn.in_bias},
        {&g->self_attn.out_weight, &p->self_attn.out_weight},
        {&g->self_attn.out_bias, &p->self_attn.out_bias},
        {&g->cross_attn.in_weight, &p->cross_attn.in_weight},
        {&g->cross_attn.in_bias, &p->cross_attn.in_bias},
        {&g->cross_attn.out_weight, &p->cross_attn.out_weight},
        {&g->cross_attn.out_bias, &p->cross_attn.out_bias},
        {&g->linear1_weight, &p->linear1_weight},
        {&g->linear1_bias, &p->linear1_bias},
        {&g->linear2_weight, &p->linear2_weight},
        {&g->linear2_bias, &p->linear2_bias},
        {&g->norm_self.weight, &p->norm_self.weight},
        {&g->norm_self.bias, &p->norm_self.bias},
        {&g->norm_cross.weight, &p->norm_cross.weight},
        {&g->norm_cross.bias, &p->norm_cross.bias},
        {&g->norm_ff.weight, &p->norm_ff.weight},
        {&g->norm_ff.bias, &p->norm_ff.bias},
        {&g->self_attn.sinks, &p->self_attn.sinks},
        {&g->cross_attn.sinks, &p->cross_attn.sinks},
    };
    static const char *names[] = {"self_attn.in_proj_weight",
                                  "self_attn.in_proj_bias",
                                  "self_attn.out_proj.weight",
                                  "self_attn.out_proj.bias",
                                  "multihead_attn.in_proj_weight",
                                  "multihead_attn.in_proj_bias",
                                  "multihead_attn.out_proj.weight",
                                  "multihead_attn.out_proj.bias",
                                  "linear1.weight",
                                  "linear1.bias",
                                  "linear2.weight",
                                  "linear2.bias",
                                  "norm_self.weight",
                                  "norm_self.bias",
                                  "norm_cross.weight",
                                  "norm_cross.bias",
                                  "norm_ff.weight",
                                  "norm_ff.bias",
                                  "self_attn.sinks",
                                  "multihead_attn.sinks"};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const attnc_tensor *gt = pairs[i][0], *pt = pairs[i][1];
        if (!attnc_present(gt)) continue;
        bool cross = pt == &p->cross_attn.in_weight || pt == &p->cross_attn.in_bias ||
                     pt == &p->cross_attn.out_weight || pt == &p->cross_attn.out_bias || pt == &p->cross_attn.sinks;
        if (!attnc_present(pt) || (cross && !r->d.decoder))
            return attnc_fail(ATTNC_ERR_VALUE, "a gradient of %s is asked for, but the layer has no such parameter",
                              names[i]);
        int64_t sizes[2] = {pt->shape[0], pt->ndim > 1 ? pt->shape[1] : 0};
        TRY(attnc_check_dims(gt, names[i], r->d.dt, pt->ndim, sizes, true));
    }
    return ATTNC_OK;
}

/* The backward's scratch, carved from one buffer: six (N, E) buffers (the
 * last two carry the gradient between sublayers), then dqkv (N, 3E), dkv
 * (M, 2E) and dhidden (N, F). */
static int64_t scratch_size(const layer_dims *d) { return 9 * d->N * d->E + 2 * d->M * d->E + d->N * d->F; }

int64_t attnc_layer_scratch_size(int64_t B, int64_t L, int64_t S, int64_t E, int64_t F, int decoder) {
    layer_dims d = {.N = B * L, .M = decoder ? B * S : 0, .E = E, .F = F};
    return scratch_size(&d);
}

static void carve_scratch(scratch *s, attnc_tensor bufs[2], char *base, const layer_dims *d) {
    size_t es = attnc_dtype_size(d->dt);
    int64_t ne = d->N * d->E;
    attnc_tensor *mats[] = {&s->dmid, &s->dbranch, &s->dx_branch, &s->dattn, &bufs[0], &bufs[1]};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        *mats[i] = mat_of(base + (int64_t)i * ne * (int64_t)es, d->dt, d->N, d->E);
    char *at = base + 6 * ne * (int64_t)es;
    s->dqkv = mat_of(at, d->dt, d->N, 3 * d->E);
    at += 3 * ne * (int64_t)es;
    s->dkv = mat_of(at, d->dt, d->M, 2 * d->E);
    at += 2 * d->M * d->E * (int64_t)es;
    s->dhidden = mat_of(at, d->dt, d->N, d->F);
}

attnc_status attnc_layer_backward(attnc_tensor *dx, attnc_tensor *dmemory, attnc_tensor *dweights_self,
                                  attnc_layer_params *grads, attnc_tensor *work, const attnc_tensor *dout,
                                  const attnc_tensor *saved, const attnc_tensor *x, const attnc_tensor *memory,
                                  const attnc_layer_params *params, const attnc_layer_config *config,
                                  const attnc_attn_masks *self_masks, const attnc_attn_masks *cross_masks) {
    layer_run r;
    TRY(setup(&r, x, memory, params, config, self_masks, cross_masks));
    const layer_dims *d = &r.d;
    if (!attnc_present(dout) || !attnc_present(saved) || !grads)
        return attnc_fail(ATTNC_ERR_TYPE, "doutput, saved and grads are required");
    TRY(check_rows(dout, "doutput", d->dt, d->B, d->L, d->E, false));
    TRY(check_saved(&r, saved, false));
    TRY(check_grads(&r, grads));
    if (attnc_present(dx)) TRY(check_rows(dx, "dinput", d->dt, d->B, d->L, d->E, true));
    if (attnc_present(dweights_self)) {
        if (r.cfg->dropout != 0)
            return attnc_fail(ATTNC_ERR_VALUE, "dweights_self needs dropout 0 (evaluation mode), got dropout %g",
                              r.cfg->dropout);
        TRY(ATTNC_NEED(dweights_self, "dweights_self", d->dt, true, d->B, d->H, d->L, d->L));
        r.dweights = dweights_self;
    }
    bool want_dmem = d->decoder && attnc_present(dmemory);
    if (want_dmem) TRY(check_rows(dmemory, "dmemory", d->dt, d->B, d->S, d->E, true));
    r.saved = saved->data;
    int64_t mrows[2] = {d->M, d->E};
    attnc_tensor dmem2 = want_dmem ? attnc_view(dmemory->data, d->dt, 2, mrows) : (attnc_tensor){0};
    scratch s;
    attnc_tensor bufs[2];
    void *own = NULL;
    char *base;
    if (attnc_present(work)) {
        int64_t n = scratch_size(d);
        TRY(attnc_check_dims(work, "scratch", d->dt, 1, &n, true));
        base = work->data;
    } else {
        TRY(attnc_calloc(&own, (size_t)scratch_size(d), attnc_dtype_size(d->dt), "layer gradients"));
        base = own;
    }
    carve_scratch(&s, bufs, base, d);
    attnc_status st = ATTNC_OK;
    /* The gradient flows back through the sublayers, alternating between
     * two buffers; the first sublayer writes the caller's dx. */
    attnc_tensor dy = mat_of(dout->data, d->dt, d->N, d->E);
    attnc_tensor x2 = mat_of(x->data, d->dt, d->N, d->E);
    for (int k = last_sublayer(), i = 0; st == ATTNC_OK; k = prev_sublayer(&r, k), i ^= 1) {
        attnc_tensor in = k == SELF ? x2 : saved_mat(&r, r.lo.in[k], d->N, d->E);
        attnc_tensor out = k == SELF && attnc_present(dx) ? mat_of(dx->data, d->dt, d->N, d->E) : bufs[i];
        st = sublayer_backward(&r, k, &dy, &in, &out, grads, &dmem2, &s);
        dy = out;
        if (k == SELF) break;
    }
    free(own);
    return st;
}
