/* decode.c: greedy and beam-search generation with a transformer decoder,
 * all in C. R = B x beam rows advance together; each step feeds one token
 * per row (the prompt on the first step), runs the layers over the new
 * positions only (self-attention keys and values are cached per layer,
 * cross-attention keys and values computed once from memory), and picks the
 * next tokens from the log-softmax of the output projection. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/search.h"
#include "../../core/simd.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../nn/rotary.h"
#include "layer.h"

/* The options of today's models for one head of one query row (see
 * attnc_layer_config): softcap (0: off), ALiBi's slope (0: off) and the
 * query's position pos, the first key that takes part (the window's left
 * edge; 0: all), the sink's logit (-inf: none). */
typedef struct {
    double softcap, slope, sink;
    int64_t pos, first;
    bool sigmoid; /* p_j = sigmoid(s_j + bias), no normaliser (and no sink) */
    double bias;
} head_variant;

#define ATTNC_F64 0
#include "decode_impl.h"
#define ATTNC_F64 1
#include "decode_impl.h"

/* A linear layer's weight transposed, (k, ldw), ldw = m rounded up to 32,
 * for decode_impl.h's small_linear; wt NULL: BLAS on the layer's own weight. */
typedef struct {
    char *wt;
    const char *b;
    int64_t bs, k, m, ldw;
} packed_linear;

/* A layer's linears in decode_run.packed, the output projection after the
 * last layer's; SMALL_ROWS: the most rows of a step that packing serves. */
enum { SELF_IN, SELF_OUT, CROSS_Q, CROSS_OUT, FF_1, FF_2, PACKED_PER_LAYER };
enum { SMALL_ROWS = 32 };

/* Per-call state: sizes, caches and work buffers (float data of dtype dt). */
typedef struct {
    const attnc_decoder *m;
    attnc_dtype dt;
    size_t es;
    int64_t B, K, R, E, F, H, V, S, Tmax, P;
    int64_t Hkv, Ekv;   /* key and value heads and their width (E_kv = E without grouped-query attention) */
    int64_t Tpad, Spad; /* Tmax and S rounded up to 16: the transposed keys' rows */
    bool cross;
    const attnc_tensor *memory_mask;
    char **kcache;   /* per layer (R, Hkv, hd, Tpad): keys transposed per head */
    char **vcache;   /* per layer (R, Tmax, E_kv)              */
    char **cross_kv; /* per layer (B, S, 2 E_kv): keys, values */
    char **cross_kt; /* per layer (B, Hkv, hd, Spad): keys transposed per head */
    char *x, *a, *tmp, *qkv, *attn, *ff, *mean, *rstd, *scores, *last, *logits, *gather;
    int64_t *start;        /* (R, P) the prompt of every row         */
    packed_linear *packed; /* per layer SELF_IN .. FF_2, then the output; NULL when R > SMALL_ROWS */
} decode_run;

static attnc_tensor mat(const decode_run *d, void *data, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return attnc_view(data, d->dt, 2, shape);
}

/* y (rows, m) = x W^T + b, through the packed weight when there is one and
 * the rows are few (a long prompt's first step goes to BLAS). */
static attnc_status linear(const decode_run *d, int64_t which, attnc_tensor *y, const attnc_tensor *x,
                           const attnc_tensor *w, const attnc_tensor *b) {
    const packed_linear *p = d->packed ? &d->packed[which] : NULL;
    if (!p || !p->wt || x->shape[0] > SMALL_ROWS) return attnc_linear_forward(y, x, w, b);
    ATTNC_TYPED(d->dt, small_linear)(x->data, x->shape[0], p->k, p->wt, p->m, p->ldw, p->b, p->bs, y->data);
    return ATTNC_OK;
}

/* x (n, E) <- norm(x) through the work buffer a. */
static attnc_status norm_in_place(decode_run *d, int64_t n, const attnc_norm_params *norm) {
    attnc_tensor x = mat(d, d->x, n, d->E), a = mat(d, d->a, n, d->E);
    int64_t shape[1] = {n};
    attnc_tensor mean = attnc_view(d->mean, d->dt, 1, shape), rstd = attnc_view(d->rstd, d->dt, 1, shape);
    TRY(attnc_norm_rows(&a, &mean, &rstd, &x, norm, d->m->config.eps));
    memcpy(d->x, d->a, (size_t)(n * d->E) * d->es);
    return ATTNC_OK;
}

/* The sublayer's input: norm(x) in a (pre-norm) or x itself (post-norm). */
static attnc_status sublayer_input(decode_run *d, int64_t n, const attnc_norm_params *norm, attnc_tensor *in) {
    attnc_tensor x = mat(d, d->x, n, d->E);
    if (!d->m->config.norm_first) {
        *in = x;
        return ATTNC_OK;
    }
    *in = mat(d, d->a, n, d->E);
    int64_t shape[1] = {n};
    attnc_tensor mean = attnc_view(d->mean, d->dt, 1, shape), rstd = attnc_view(d->rstd, d->dt, 1, shape);
    return attnc_norm_rows(in, &mean, &rstd, &x, norm, d->m->config.eps);
}

/* x <- x + branch (tmp), then the norm after it for post-norm. */
static attnc_status residual(decode_run *d, int64_t n, const attnc_norm_params *norm) {
    attnc_tensor x = mat(d, d->x, n, d->E), t = mat(d, d->tmp, n, d->E);
    TRY(attnc_pointwise_forward(&x, &t, &x, ATTNC_ACT_NONE, 0, 0, 0));
    return d->m->config.norm_first ? ATTNC_OK : norm_in_place(d, n, norm);
}

/* One head of one query row over n cached keys (see decode_impl.h): kt the
 * head's transposed keys (hd rows of ktstride), v its first value row. */
static void attend(const decode_run *d, const char *q, const char *kt, int64_t ktstride, const char *v, int64_t vstride,
                   int64_t n, const uint8_t *allowed, int64_t mstride, const head_variant *var, char *out) {
    int64_t hd = d->E / d->H;
    double scale = 1.0 / sqrt((double)hd);
    ATTNC_TYPED(d->dt, attend_one)(q, kt, ktstride, v, vstride, n, hd, scale, allowed, mstride, var, d->scores, out);
}

/* Element h of an optional (H,) tensor of the run's dtype, or `absent`. */
static double head_value(const decode_run *d, const attnc_tensor *t, int64_t h, double absent) {
    if (!attnc_present(t)) return absent;
    const char *at = (const char *)t->data + h * t->strides[0] * (int64_t)d->es;
    return d->dt == ATTNC_FLOAT32 ? (double)*(const float *)at : *(const double *)at;
}

/* Head h's options for a query at position pos: the self-attention's
 * (self) or the cross-attention's (its sinks and the activation) of the
 * layer p. */
static head_variant variant_of(const decode_run *d, const attnc_mha_params *p, int64_t h, int64_t pos, bool self) {
    const attnc_layer_config *c = &d->m->config;
    head_variant v = {.sink = head_value(d, &p->sinks, h, -INFINITY), .pos = pos};
    v.sigmoid = c->attention == ATTNC_SIGMOID;
    /* the self-attention's bias is set (check_decoder); the cross-attention's defaults to -log S, as the layer's */
    v.bias = c->sigmoid_bias_set ? c->sigmoid_bias : d->S > 0 ? -log((double)d->S) : 0.0;
    if (!self) return v;
    v.softcap = c->softcap;
    v.slope = head_value(d, &c->alibi_slopes, h, 0.0);
    v.first = c->window && c->window_left >= 0 && pos > c->window_left ? pos - c->window_left : 0;
    return v;
}

/* dst[c ld + r] <- src[r rs + c cs] for rows r, columns c: a transposed
 * copy. Keys (n, E) become (H, hd, ld), one row per element of each head;
 * a weight (m, k) becomes (k, ld). */
static void transpose(const decode_run *d, void *dst, int64_t ld, const void *src, int64_t rs, int64_t cs, int64_t rows,
                      int64_t cols) {
    ATTNC_TYPED(d->dt, transpose)(dst, ld, src, rs, cs, rows, cols);
}

/* RoPE on the queries and keys of the new rows (R n, E + 2 E_kv) in qkv,
 * at positions [t, t + n), in place (before the keys are cached). */
static attnc_status rope_new_rows(decode_run *d, int64_t t, int64_t n) {
    const attnc_layer_config *c = &d->m->config;
    if (!c->rotary_dim) return ATTNC_OK;
    double *at = NULL;
    TRY(attnc_calloc((void **)&at, (size_t)n, sizeof *at, "RoPE positions"));
    for (int64_t i = 0; i < n; i++) at[i] = (double)(t + i);
    int64_t shape[3] = {1, 1, n}, W = d->E + 2 * d->Ekv;
    attnc_tensor pos = attnc_view(at, ATTNC_FLOAT64, 3, shape);
    attnc_tensor q = attnc_heads(d->qkv, d->dt, d->R, d->H, n, d->E, W);
    attnc_tensor k = attnc_heads(d->qkv + d->E * (int64_t)d->es, d->dt, d->R, d->Hkv, n, d->Ekv, W);
    attnc_status st = attnc_rotary_apply(&q, &q, &pos, c->rope_base, c->rotary_dim, c->rope_interleaved, 1.0);
    if (st == ATTNC_OK) st = attnc_rotary_apply(&k, &k, &pos, c->rope_base, c->rotary_dim, c->rope_interleaved, 1.0);
    free(at);
    return st;
}

/* Self-attention over positions [t, t + n) of every row, keys and values
 * appended to layer l's cache; query head h reads key and value head
 * h / (H / Hkv). */
static attnc_status self_attention(decode_run *d, int64_t l, int64_t t, int64_t n, const attnc_tensor *in) {
    const attnc_mha_params *p = &d->m->layers[l].self_attn;
    int64_t E = d->E, Ekv = d->Ekv, W = E + 2 * Ekv, rows = d->R * n;
    attnc_tensor qkv = mat(d, d->qkv, rows, W);
    TRY(linear(d, l * PACKED_PER_LAYER + SELF_IN, &qkv, in, &p->in_weight, &p->in_bias));
    TRY(rope_new_rows(d, t, n));
    int64_t es = (int64_t)d->es, Tmax = d->Tmax, Tpad = d->Tpad, hd = E / d->H, group = d->H / d->Hkv;
    for (int64_t r = 0; r < d->R; r++) {
        const char *src = d->qkv + (r * n * W + E) * es;
        transpose(d, d->kcache[l] + (r * Tpad * Ekv + t) * es, Tpad, src, W, 1, n, Ekv);
        for (int64_t i = 0; i < n; i++)
            memcpy(d->vcache[l] + ((r * Tmax + t + i) * Ekv) * es, src + (i * W + Ekv) * es, (size_t)Ekv * d->es);
    }
    for (int64_t r = 0; r < d->R; r++)
        for (int64_t i = 0; i < n; i++) /* causal: position t + i sees keys 0 .. t + i */
            for (int64_t h = 0; h < d->H; h++) {
                int64_t hk = h / group;
                head_variant var = variant_of(d, p, h, t + i, true);
                attend(d, d->qkv + ((r * n + i) * W + h * hd) * es, d->kcache[l] + (r * Ekv + hk * hd) * Tpad * es,
                       Tpad, d->vcache[l] + (r * Tmax * Ekv + hk * hd) * es, Ekv, t + i + 1, NULL, 0, &var,
                       d->attn + ((r * n + i) * E + h * hd) * es);
            }
    attnc_tensor attn = mat(d, d->attn, rows, E), out = mat(d, d->tmp, rows, E);
    return linear(d, l * PACKED_PER_LAYER + SELF_OUT, &out, &attn, &p->out_weight, &p->out_bias);
}

/* Cross-attention of n new positions per row on memory: rows are (B, K)
 * batch dims, the keys and values of batch b shared by its K beams. */
static attnc_status cross_attention(decode_run *d, int64_t l, int64_t n, const attnc_tensor *in) {
    const attnc_mha_params *p = &d->m->layers[l].cross_attn;
    int64_t E = d->E, Ekv = d->Ekv, hd = E / d->H, rows = d->R * n, S = d->S, group = d->H / d->Hkv;
    attnc_tensor wq = attnc_rows(&p->in_weight, 0, E), bq = attnc_rows(&p->in_bias, 0, E);
    attnc_tensor q2 = mat(d, d->qkv, rows, E);
    TRY(linear(d, l * PACKED_PER_LAYER + CROSS_Q, &q2, in, &wq, &bq));
    const attnc_tensor *mm = d->memory_mask;
    for (int64_t r = 0; r < d->R; r++) {
        int64_t b = r / d->K; /* the K beams of batch b share its memory */
        const uint8_t *allowed = attnc_present(mm) ? (const uint8_t *)mm->data + b * mm->strides[0] : NULL;
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < d->H; h++) {
                head_variant var = variant_of(d, p, h, 0, false);
                attend(d, d->qkv + ((r * n + i) * E + h * hd) * (int64_t)d->es,
                       d->cross_kt[l] + (b * Ekv + h / group * hd) * d->Spad * (int64_t)d->es, d->Spad,
                       d->cross_kv[l] + (b * S * 2 * Ekv + Ekv + h / group * hd) * (int64_t)d->es, 2 * Ekv, S, allowed,
                       attnc_present(mm) ? mm->strides[1] : 0, &var,
                       d->attn + ((r * n + i) * E + h * hd) * (int64_t)d->es);
            }
    }
    attnc_tensor attn = mat(d, d->attn, rows, E), out = mat(d, d->tmp, rows, E);
    return linear(d, l * PACKED_PER_LAYER + CROSS_OUT, &out, &attn, &p->out_weight, &p->out_bias);
}

static attnc_status feed_forward(decode_run *d, int64_t l, int64_t rows, const attnc_tensor *in) {
    const attnc_layer_params *p = &d->m->layers[l];
    attnc_tensor f = mat(d, d->ff, rows, d->F), out = mat(d, d->tmp, rows, d->E);
    TRY(linear(d, l * PACKED_PER_LAYER + FF_1, &f, in, &p->linear1_weight, &p->linear1_bias));
    TRY(attnc_pointwise_forward(&f, &f, NULL, d->m->config.activation, 0, 0, 0));
    return linear(d, l * PACKED_PER_LAYER + FF_2, &out, &f, &p->linear2_weight, &p->linear2_bias);
}

/* Feed tokens (R, n) at positions [t, t + n); logits (R, V) of the last. */
static attnc_status step(decode_run *d, const int64_t *tok, int64_t t, int64_t n) {
    const attnc_decoder *m = d->m;
    int64_t E = d->E, rows = d->R * n;
    const attnc_tensor *emb = &m->embedding, *pos = &m->positions;
    for (int64_t r = 0; r < rows; r++) {
        const char *e = (const char *)emb->data + tok[r] * emb->strides[0] * (int64_t)d->es;
        const char *pe = (const char *)pos->data + (t + r % n) * pos->strides[0] * (int64_t)d->es;
        for (int64_t c = 0; c < E; c++)
            attnc_real_set(d->x, d->dt, r * E + c,
                           attnc_real_get(e, d->dt, c * emb->strides[1]) * m->embed_scale +
                               attnc_real_get(pe, d->dt, c * pos->strides[1]));
    }
    for (int64_t l = 0; l < m->nlayers; l++) {
        const attnc_layer_params *p = &m->layers[l];
        attnc_tensor in;
        TRY(sublayer_input(d, rows, &p->norm_self, &in));
        TRY(self_attention(d, l, t, n, &in));
        TRY(residual(d, rows, &p->norm_self));
        if (d->cross) {
            TRY(sublayer_input(d, rows, &p->norm_cross, &in));
            TRY(cross_attention(d, l, n, &in));
            TRY(residual(d, rows, &p->norm_cross));
        }
        TRY(sublayer_input(d, rows, &p->norm_ff, &in));
        TRY(feed_forward(d, l, rows, &in));
        TRY(residual(d, rows, &p->norm_ff));
    }
    for (int64_t r = 0; r < d->R; r++)
        memcpy(d->last + r * E * (int64_t)d->es, d->x + ((r * n + n - 1) * E) * (int64_t)d->es, (size_t)E * d->es);
    attnc_tensor last = mat(d, d->last, d->R, E), logits = mat(d, d->logits, d->R, d->V);
    if (attnc_present(&m->final_norm.weight) || attnc_present(&m->final_norm.bias)) {
        attnc_tensor normed = mat(d, d->a, d->R, E);
        int64_t shape[1] = {d->R};
        attnc_tensor mean = attnc_view(d->mean, d->dt, 1, shape), rstd = attnc_view(d->rstd, d->dt, 1, shape);
        TRY(attnc_norm_rows(&normed, &mean, &rstd, &last, &m->final_norm, m->config.eps));
        return linear(d, m->nlayers * PACKED_PER_LAYER, &logits, &normed, &m->out_weight, &m->out_bias);
    }
    return linear(d, m->nlayers * PACKED_PER_LAYER, &logits, &last, &m->out_weight, &m->out_bias);
}

/* Rows of every self-attention cache (positions [0, t)) <- rows parent[]:
 * t values of E_kv, and for the keys, E_kv runs of t (one per element of a head). */
static void reorder_caches(decode_run *d, const int64_t *parent, int64_t t) {
    for (int64_t l = 0; l < d->m->nlayers; l++)
        for (int c = 0; c < 2; c++) {
            char *cache = c ? d->vcache[l] : d->kcache[l];
            size_t stride = (size_t)((c ? d->Tmax : d->Tpad) * d->Ekv) * d->es;
            int64_t runs = c ? 1 : d->Ekv, step = c ? 0 : d->Tpad * (int64_t)d->es;
            size_t run = (size_t)(c ? t * d->Ekv : t) * d->es;
            for (int64_t r = 0; r < d->R; r++)
                for (int64_t k = 0; k < runs; k++)
                    memcpy(d->gather + r * stride + k * step, cache + parent[r] * stride + k * step, run);
            for (int64_t r = 0; r < d->R; r++)
                for (int64_t k = 0; k < runs; k++)
                    memcpy(cache + r * stride + k * step, d->gather + r * stride + k * step, run);
        }
}

/* ---- the search's callbacks ---------------------------------------------------- */

static attnc_status search_step(void *ctx, const int64_t *tok, int64_t s) {
    decode_run *d = ctx;
    return s == 0 ? step(d, d->start, 0, d->P) : step(d, tok, d->P + s - 1, 1);
}

static void search_reorder(void *ctx, const int64_t *parent, int64_t s) {
    decode_run *d = ctx;
    reorder_caches(d, parent, d->P + s);
}

/* ---- setup ---------------------------------------------------------------- */

static attnc_status check_decoder(decode_run *d, const attnc_decoder *m) {
    if (!m || !m->layers || m->nlayers < 0) return attnc_fail(ATTNC_ERR_TYPE, "decoder and its layers are required");
    if (!attnc_present(&m->embedding) || !attnc_present(&m->positions) || !attnc_present(&m->out_weight))
        return attnc_fail(ATTNC_ERR_TYPE, "embedding, positions and out_weight are required");
    d->dt = m->embedding.dtype;
    if (d->dt != ATTNC_FLOAT32 && d->dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "embedding has dtype %s, expected float32 or float64",
                          attnc_dtype_name(d->dt));
    int64_t ve[2] = {-1, -1};
    TRY(attnc_check_dims(&m->embedding, "embedding", d->dt, 2, ve, false));
    d->E = ve[1];
    int64_t pe[2] = {-1, d->E};
    TRY(attnc_check_dims(&m->positions, "positions", d->dt, 2, pe, false));
    d->Tmax = pe[0];
    int64_t ow[2] = {-1, d->E};
    TRY(attnc_check_dims(&m->out_weight, "out_weight", d->dt, 2, ow, false));
    TRY(attnc_check_blas(&m->out_weight, "out_weight"));
    d->V = ow[0];
    if (d->V > ve[0])
        return attnc_fail(ATTNC_ERR_VALUE, "out_weight has %lld rows, more than the embedding's %lld tokens",
                          (long long)d->V, (long long)ve[0]);
    if (attnc_present(&m->out_bias)) TRY(attnc_check_dims(&m->out_bias, "out_bias", d->dt, 1, &d->V, false));
    for (int i = 0; i < 2; i++) {
        const attnc_tensor *t = i ? &m->final_norm.bias : &m->final_norm.weight;
        if (attnc_present(t)) TRY(attnc_check_dims(t, i ? "norm.bias" : "norm.weight", d->dt, 1, &d->E, false));
    }
    d->cross = m->nlayers > 0 && attnc_present(&m->layers[0].cross_attn.in_weight);
    d->F = 0;
    for (int64_t l = 0; l < m->nlayers; l++) {
        int64_t F;
        if (attnc_present(&m->layers[l].cross_attn.in_weight) != d->cross)
            return attnc_fail(ATTNC_ERR_VALUE, "layers must all be decoder layers or all encoder-style layers");
        attnc_status st = attnc_check_layer_params(&m->layers[l], &m->config, d->dt, d->E, d->cross, &F);
        if (st != ATTNC_OK) { /* name the layer; the message is copied out of the buffer it is rewritten into */
            char message[256];
            snprintf(message, sizeof message, "%s", attnc_last_error());
            return attnc_fail(st, "layer %lld: %s", (long long)l, message);
        }
        d->F = F > d->F ? F : d->F;
    }
    if (m->config.attention == ATTNC_SIGMOID && !m->config.sigmoid_bias_set)
        return attnc_fail(ATTNC_ERR_VALUE, "cached decoding with attention sigmoid needs a fixed sigmoid_bias (the "
                                           "default, -log of the length, would change with every new token)");
    if (m->config.nhead < 1 || d->E % m->config.nhead)
        return attnc_fail(ATTNC_ERR_VALUE, "d_model (%lld) must be divisible by nhead", (long long)d->E);
    d->H = m->config.nhead;
    d->Hkv = attnc_layer_kv_heads(&m->config);
    d->Ekv = d->Hkv * (d->E / d->H);
    return ATTNC_OK;
}

/* Every prompt token an embedding row. */
static attnc_status check_prompt_ids(const attnc_tensor *prompt, int64_t vocab) {
    int64_t n = attnc_numel(prompt);
    const int64_t *p = prompt->data;
    for (int64_t i = 0; i < n; i++)
        if (p[i] < 0 || p[i] >= vocab)
            return attnc_fail(ATTNC_ERR_VALUE, "prompt holds token %lld, outside the embedding's [0, %lld)",
                              (long long)p[i], (long long)vocab);
    return ATTNC_OK;
}

static attnc_status alloc_run(decode_run *d) {
    int64_t rows = d->R * d->P, E = d->E, L = d->m->nlayers;
    TRY(attnc_calloc((void **)&d->kcache, (size_t)L, sizeof *d->kcache, "caches"));
    TRY(attnc_calloc((void **)&d->vcache, (size_t)L, sizeof *d->vcache, "caches"));
    TRY(attnc_calloc((void **)&d->cross_kv, (size_t)L, sizeof *d->cross_kv, "caches"));
    TRY(attnc_calloc((void **)&d->cross_kt, (size_t)L, sizeof *d->cross_kt, "caches"));
    for (int64_t l = 0; l < L; l++) {
        TRY(attnc_calloc((void **)&d->kcache[l], (size_t)(d->R * d->Tpad * d->Ekv), d->es, "key cache"));
        TRY(attnc_calloc((void **)&d->vcache[l], (size_t)(d->R * d->Tmax * d->Ekv), d->es, "value cache"));
        if (!d->cross) continue;
        TRY(attnc_calloc((void **)&d->cross_kv[l], (size_t)(d->B * d->S * 2 * d->Ekv), d->es, "memory keys"));
        TRY(attnc_calloc((void **)&d->cross_kt[l], (size_t)(d->B * d->Spad * d->Ekv), d->es, "memory keys"));
    }
    struct {
        char **p;
        int64_t n;
    } bufs[] = {{&d->x, rows * E},
                {&d->a, rows * E},
                {&d->tmp, rows * E},
                {&d->qkv, rows * (E + 2 * d->Ekv)},
                {&d->attn, rows * E},
                {&d->ff, rows * d->F},
                {&d->mean, rows},
                {&d->rstd, rows},
                {&d->scores, d->Tmax + d->S},
                {&d->last, d->R * E},
                {&d->logits, d->R * d->V},
                {&d->gather, d->R * d->Tpad * E}};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        TRY(attnc_calloc((void **)bufs[i].p, (size_t)bufs[i].n, d->es, "decoding buffers"));
    return ATTNC_OK;
}

static void free_run(decode_run *d) {
    for (int64_t l = 0; l < d->m->nlayers; l++) {
        if (d->kcache) free(d->kcache[l]);
        if (d->vcache) free(d->vcache[l]);
        if (d->cross_kv) free(d->cross_kv[l]);
        if (d->cross_kt) free(d->cross_kt[l]);
    }
    free(d->kcache);
    free(d->vcache);
    free(d->cross_kv);
    free(d->cross_kt);
    if (d->packed)
        for (int64_t i = 0; i < d->m->nlayers * PACKED_PER_LAYER + 1; i++) free(d->packed[i].wt);
    free(d->packed);
    char *bufs[] = {d->x,    d->a,    d->tmp,    d->qkv,  d->attn,   d->ff,
                    d->mean, d->rstd, d->scores, d->last, d->logits, d->gather};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
}

/* p <- w (m, k) transposed, rows padded to 32, and b's address. */
static attnc_status pack_linear(const decode_run *d, packed_linear *p, const attnc_tensor *w, const attnc_tensor *b) {
    p->m = w->shape[0];
    p->k = w->shape[1];
    p->ldw = (p->m + 31) / 32 * 32;
    TRY(attnc_calloc((void **)&p->wt, (size_t)(p->k * p->ldw), d->es, "packed weights"));
    transpose(d, p->wt, p->ldw, w->data, w->strides[0], w->strides[1], p->m, p->k);
    p->b = attnc_present(b) ? b->data : NULL;
    p->bs = attnc_present(b) ? b->strides[0] : 0;
    return ATTNC_OK;
}

/* Every linear layer's weight packed for small_linear: when a step has few
 * rows (at most SMALL_ROWS), else nothing (BLAS serves). */
static attnc_status pack_all(decode_run *d) {
    const attnc_decoder *m = d->m;
    if (d->R > SMALL_ROWS) return ATTNC_OK;
    int64_t count = m->nlayers * PACKED_PER_LAYER + 1;
    TRY(attnc_calloc((void **)&d->packed, (size_t)count, sizeof *d->packed, "packed weights"));
    for (int64_t l = 0; l < m->nlayers; l++) {
        const attnc_layer_params *p = &m->layers[l];
        packed_linear *q = d->packed + l * PACKED_PER_LAYER;
        TRY(pack_linear(d, q + SELF_IN, &p->self_attn.in_weight, &p->self_attn.in_bias));
        TRY(pack_linear(d, q + SELF_OUT, &p->self_attn.out_weight, &p->self_attn.out_bias));
        if (d->cross) {
            attnc_tensor wq = attnc_rows(&p->cross_attn.in_weight, 0, d->E);
            attnc_tensor bq = attnc_rows(&p->cross_attn.in_bias, 0, d->E);
            TRY(pack_linear(d, q + CROSS_Q, &wq, &bq));
            TRY(pack_linear(d, q + CROSS_OUT, &p->cross_attn.out_weight, &p->cross_attn.out_bias));
        }
        TRY(pack_linear(d, q + FF_1, &p->linear1_weight, &p->linear1_bias));
        TRY(pack_linear(d, q + FF_2, &p->linear2_weight, &p->linear2_bias));
    }
    return pack_linear(d, d->packed + m->nlayers * PACKED_PER_LAYER, &m->out_weight, &m->out_bias);
}

/* Cross-attention keys and values of every layer, once: (B S, 2 E_kv), and
 * the keys transposed per head (B, Hkv, hd, Spad). */
static attnc_status memory_keys(decode_run *d, const attnc_tensor *memory) {
    int64_t rows[2] = {d->B * d->S, d->E};
    attnc_tensor mem = attnc_view(memory->data, d->dt, 2, rows);
    for (int64_t l = 0; l < d->m->nlayers; l++) {
        const attnc_mha_params *p = &d->m->layers[l].cross_attn;
        int64_t Ekv = d->Ekv;
        attnc_tensor w = attnc_rows(&p->in_weight, d->E, 2 * Ekv), b = attnc_rows(&p->in_bias, d->E, 2 * Ekv);
        attnc_tensor kv = mat(d, d->cross_kv[l], d->B * d->S, 2 * Ekv);
        TRY(attnc_linear_forward(&kv, &mem, &w, &b));
        for (int64_t i = 0; i < d->B; i++)
            transpose(d, d->cross_kt[l] + i * d->Spad * Ekv * (int64_t)d->es, d->Spad,
                      d->cross_kv[l] + i * d->S * 2 * Ekv * (int64_t)d->es, 2 * Ekv, 1, d->S, Ekv);
    }
    return ATTNC_OK;
}

attnc_status attnc_decode(attnc_tensor *tokens, attnc_tensor *lengths, const attnc_decoder *decoder,
                          const attnc_tensor *prompt, const attnc_tensor *memory, const attnc_tensor *memory_mask,
                          const attnc_decode_options *o) {
    decode_run d = {.m = decoder};
    TRY(check_decoder(&d, decoder));
    d.es = attnc_dtype_size(d.dt);
    if (!o) return attnc_fail(ATTNC_ERR_TYPE, "options are required");
    if (o->max_new_tokens < 0) return attnc_fail(ATTNC_ERR_VALUE, "max_new_tokens must be >= 0");
    if (o->beam_size < 1) return attnc_fail(ATTNC_ERR_VALUE, "beam_size must be >= 1");
    if (o->eos >= d.V)
        return attnc_fail(ATTNC_ERR_VALUE, "eos %lld is outside the output's vocabulary [0, %lld)", (long long)o->eos,
                          (long long)d.V);
    if (!isfinite(o->length_penalty))
        return attnc_fail(ATTNC_ERR_VALUE, "length_penalty must be finite, got %g", o->length_penalty);
    if (!attnc_present(prompt) || !attnc_present(tokens) || !attnc_present(lengths))
        return attnc_fail(ATTNC_ERR_TYPE, "tokens, lengths and prompt are required");
    int64_t bp[2] = {-1, -1};
    TRY(attnc_check_dims(prompt, "prompt", ATTNC_INT64, 2, bp, false));
    if (!attnc_is_contiguous(prompt)) return attnc_fail(ATTNC_ERR_LAYOUT, "prompt must be contiguous");
    d.B = bp[0];
    d.P = bp[1];
    if (d.P < 1) return attnc_fail(ATTNC_ERR_VALUE, "prompt needs at least one token");
    TRY(check_prompt_ids(prompt, decoder->embedding.shape[0]));
    int64_t bt[2] = {d.B, o->max_new_tokens};
    TRY(attnc_check_dims(tokens, "tokens", ATTNC_INT64, 2, bt, true));
    TRY(attnc_check_dims(lengths, "lengths", ATTNC_INT64, 1, &d.B, true));
    if (o->max_new_tokens > 0 && d.P + o->max_new_tokens - 1 > d.Tmax)
        return attnc_fail(ATTNC_ERR_VALUE, "prompt (%lld) + max_new_tokens (%lld) - 1 exceeds the %lld positions",
                          (long long)d.P, (long long)o->max_new_tokens, (long long)d.Tmax);
    if (d.cross) {
        if (!attnc_present(memory)) return attnc_fail(ATTNC_ERR_TYPE, "memory is required by decoder layers");
        int64_t bse[3] = {d.B, -1, d.E};
        TRY(attnc_check_dims(memory, "memory", d.dt, 3, bse, false));
        if (!attnc_is_contiguous(memory)) return attnc_fail(ATTNC_ERR_LAYOUT, "memory must be contiguous");
        d.S = bse[1];
        if (attnc_present(memory_mask)) {
            int64_t bs[2] = {d.B, d.S};
            TRY(attnc_check_dims(memory_mask, "memory_mask", ATTNC_BOOL, 2, bs, false));
        }
        d.memory_mask = memory_mask;
    }
    if (d.B == 0 || o->max_new_tokens == 0) {
        int64_t *len = lengths->data;
        for (int64_t b = 0; b < d.B; b++) len[b] = 0;
        return ATTNC_OK;
    }
    d.K = o->beam_size;
    d.R = d.B * d.K;
    d.Tmax = d.P + o->max_new_tokens - 1;
    d.Tpad = (d.Tmax + 15) / 16 * 16;
    d.Spad = (d.S + 15) / 16 * 16;
    attnc_status st = alloc_run(&d);
    if (st == ATTNC_OK && d.cross) st = memory_keys(&d, memory);
    if (st == ATTNC_OK) st = pack_all(&d);
    if (st == ATTNC_OK) st = attnc_calloc((void **)&d.start, (size_t)(d.R * d.P), sizeof *d.start, "prompt");
    if (st == ATTNC_OK) {
        const int64_t *p = prompt->data;
        for (int64_t r = 0; r < d.R; r++) memcpy(d.start + r * d.P, p + (r / d.K) * d.P, (size_t)d.P * sizeof *p);
        attnc_search_model sm = {.ctx = &d,
                                 .B = d.B,
                                 .K = d.K,
                                 .V = d.V,
                                 .logits = d.logits,
                                 .dt = d.dt,
                                 .step = search_step,
                                 .reorder = search_reorder};
        attnc_search_io io = {.out = tokens->data,
                              .lengths = lengths->data,
                              .T = o->max_new_tokens,
                              .eos = o->eos,
                              .alpha = o->length_penalty};
        st = attnc_search(&sm, &io);
    }
    free(d.start);
    free_run(&d);
    return st;
}
