/* flash.c: fused scaled-dot-product attention, a tiled kernel with an online
 * softmax (FlashAttention, Dao et al. 2022), forward and backward.
 *
 * Forward: one task per (batch, head, query block) walks the key blocks,
 * keeping the running max m, sum l and output accumulator of its rows, and
 * saves lse = m + log(l). Causal attention stops at the diagonal's block.
 * Backward (parallel loops, each writing only its own outputs):
 *   D = rowsum(dO o O)                         per (batch, head)
 *   dK_j, dV_j over query blocks i             per (batch, kv head, key block)
 *   dQ_i over key blocks j                     per (batch, head, query block)
 * recomputing P = exp(S - lse) tile by tile. Splitting dQ from dK/dV costs a
 * second pass over the scores but keeps every core busy even when
 * batch x heads is 1. With at least as many (batch, kv head) pairs as
 * threads, one pass per pair does all three (two fewer products per tile);
 * both paths make the same calls in the same order for every output, so
 * the bits do not depend on the thread count. A lone (batch, kv head) pair
 * takes that single pass in two parts over halves of its key blocks, each
 * with its own dQ, added at the end (chosen by shape, not threads).
 *
 * Products: float32 in the AVX2 and AVX-512 builds runs every tile product
 * through core/tile_gemm.c's register-blocked kernels, with K (and, for the
 * backward, V) packed once per call into the panels the products with K^T
 * (V^T) read; BLAS does them in float64 and in the baseline build. BLAS's
 * packing and dispatch per tile had cost a third of the forward. */
#include <math.h>
#include <stdlib.h>

#include "../../core/blas.h"
#include "../../core/rng.h"
#include "../../core/rows_f32.h"
#include "../../core/simd.h"
#include "../../core/status.h"
#include "../../core/threads.h"
#include "../../core/tile_gemm.h"
#include "common.h"

typedef struct {
    attnc_batch batch; /* the dims before the head dim              */
    int64_t H, hkv, group, L, S, e, ev;
    int64_t bq, bk, nqb, nkb; /* tile sizes and block counts               */
    const attnc_tensor *q, *k, *v, *o, *lse, *dout, *dw;
    attnc_tensor *out, *lse_out, *weights, *dq, *dk, *dv, *dmask;
    attnc_tensor *dq_part; /* two-part backward: dQ of the second part  */
    attnc_tensor *dsinks, *dslopes;
    void *slope_part; /* dalibi_slopes: a partial sum per (batch, head, key
                       * block), each made by one task, added in order */
    int64_t lo, hi;   /* the band: key j takes part for query i only if
                     * i + lo <= j <= i + hi (causal, window); NO_LO, NO_HI:
                     * unbounded                                 */
    int64_t split_kb; /* two-part backward: its first key block    */
    bool prefix;      /* a prefix LM: causal with prefix_lengths, whose
                       * causal side is not in the band but a mask   */
    const attnc_sdpa_options *opt;
    void *scratch, *dvec;
    size_t per_worker;
    float *kt, *vt;             /* float32 tile kernels: K and V packed once
                                 * per call, a block of panels per (batch, kv
                                 * head, key block); NULL: BLAS does it     */
    int64_t kt_block, vt_block; /* the floats of one such block             */
    attnc_tensor copies[3];     /* compact copies of scattered operands     */
    int64_t keep_at;            /* forward_weights_task: where a worker's kept
                                 * scores (bq x S) start in its scratch      */
    int ncopies;
} flash_ctx;

/* Tile sizes: a query block's scores (BQ x BK) and accumulator stay in L2.
 * KEEP_MAX: the most scores (BQ x S) a worker keeps to make the weights in
 * the forward's pass (4 MiB of float32: S up to 8192). PACK_MIN_ROWS: the
 * fewest query rows per kv head for the tile kernels (pack_keys): with 16
 * (S 4096, E 64) the scalar packing made a call 15% slower than BLAS, with
 * 32 even, with 64 20% faster. */
enum { BQ = 128, BK = 256, KEEP_MAX = 1 << 20, PACK_MIN_ROWS = 32 };

/* An unbounded side of the band: far enough that i + lo and i + hi cannot
 * overflow for any length a tensor may have. */
#define NO_LO (-(INT64_MAX / 4))
#define NO_HI (INT64_MAX / 4)

/* The band's upper side in the tile of query rows i0.. and keys j0.. (key
 * j0 + j is visible to query i0 + i only if j <= i + i0 + hi - j0) for the tile
 * products (core/tile_gemm.h), in the three shapes they take: rows of
 * queries with keys as columns (Q K^T, dO V^T) or as terms (P V, dS K), and
 * rows of keys with queries as terms (P^T dO, dS^T Q). */
enum band_kind { KEY_COLUMNS, KEY_TERMS, QUERY_TERMS };

static attnc_tile_band causal_band(const flash_ctx *c, enum band_kind kind, int64_t i0, int64_t j0) {
    attnc_tile_band band = ATTNC_TILE_DENSE;
    if (c->hi == NO_HI) return band;
    int64_t d = i0 + c->hi - j0 + 1;
    if (kind == KEY_COLUMNS) band.n_hi = d;
    if (kind == KEY_TERMS) band.k_hi = d;
    if (kind == QUERY_TERMS) band.k_lo = 1 - d;
    return band;
}

/* The end of the keys a row range may need: keys beyond the band's upper
 * side for its last row never take part. */
static int64_t key_end(const flash_ctx *c, int64_t last_row) {
    if (c->hi == NO_HI) return c->S;
    int64_t end = last_row + c->hi + 1;
    return end < 0 ? 0 : end > c->S ? c->S : end;
}

/* The first key block a row range starting at first_row needs: blocks wholly
 * below the band's lower side for that row are skipped. */
static int64_t key_begin(const flash_ctx *c, int64_t first_row) {
    int64_t first = first_row + c->lo;
    return first <= 0 ? 0 : first >= c->S ? c->S : first / c->bk * c->bk;
}

/* The keys of the tile of query rows i0.. (nq) and key block j0: up to the
 * block's end or key_end, whichever comes first (<= 0: the rows see none of
 * the block). Every pass (forward, weights, backward) takes its tiles from
 * here and key_begin, so a score is always made by the same product call,
 * whatever the path, and BLAS, whose rounding depends on a call's shape,
 * gives the same bits on every path the thread count may choose. */
static int64_t tile_keys(const flash_ctx *c, int64_t i0, int64_t nq, int64_t j0) {
    int64_t end = key_end(c, i0 + nq - 1);
    return (end - j0 < c->bk ? end : j0 + c->bk) - j0;
}

/* Whether the passes over the query rows i0.. (nq) take key block j0. */
static bool visits(const flash_ctx *c, int64_t i0, int64_t nq, int64_t j0) {
    return key_begin(c, i0) <= j0 && tile_keys(c, i0, nq, j0) > 0;
}

/* Entry x of the (..., n) INT64 row of batch element b of t. */
static const int64_t *batch_row(const flash_ctx *c, const attnc_tensor *t, int64_t b, int64_t x) {
    return (const int64_t *)attnc_at(t, attnc_batch_offset(t, &c->batch, b) + x * t->strides[t->ndim - 1]);
}

/* prefix_lengths of batch element b. */
static int64_t prefix_of(const flash_ctx *c, int64_t b) {
    const attnc_tensor *t = &c->opt->prefix_lengths;
    return *(const int64_t *)attnc_at(t, attnc_batch_offset(t, &c->batch, b));
}

/* block_mask's entry (query block r, key block k) of batch b, head h. */
static bool block_on(const flash_ctx *c, int64_t b, int64_t h, int64_t r, int64_t k) {
    const attnc_tensor *t = &c->opt->block_mask;
    int n = t->ndim;
    int64_t off = attnc_batch_offset(t, &c->batch, b) + h * t->strides[n - 3] + r * t->strides[n - 2];
    return *(const uint8_t *)attnc_at(t, off + k * t->strides[n - 1]) != 0;
}

/* The least and greatest segment id of entries x0.. (n > 0) of t's row b. */
static void segment_range(const flash_ctx *c, const attnc_tensor *t, int64_t b, int64_t x0, int64_t n, int64_t *lo,
                          int64_t *hi) {
    const int64_t *p = batch_row(c, t, b, x0);
    int64_t stride = t->strides[t->ndim - 1];
    *lo = *hi = p[0];
    for (int64_t x = 1; x < n; x++) {
        int64_t id = p[x * stride];
        *lo = id < *lo ? id : *lo;
        *hi = id > *hi ? id : *hi;
    }
}

/* Whether the tile of query rows i0.. (nq) and keys j0.. (nk) of batch b,
 * head h may hold a pair that takes part, as far as the block masks tell
 * cheaply: not when every key is past the diagonal and the prefix, when
 * the queries' and keys' segment id ranges do not overlap (packed,
 * nondecreasing ids: every tile between two sequences), or when no block
 * of block_mask the tile meets is True. Every pass skips the tiles this
 * rejects, whose pairs would all have been excluded. */
static bool tile_live(const flash_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk) {
    const attnc_sdpa_options *o = c->opt;
    if (c->prefix && j0 > i0 + nq - 1 + o->causal_offset && j0 >= prefix_of(c, b)) return false;
    if (attnc_present(&o->query_segments)) {
        int64_t qlo, qhi, klo, khi;
        segment_range(c, &o->query_segments, b, i0, nq, &qlo, &qhi);
        segment_range(c, &o->key_segments, b, j0, nk, &klo, &khi);
        if (qhi < klo || khi < qlo) return false;
    }
    if (!attnc_present(&o->block_mask)) return true;
    for (int64_t r = i0 / o->block_q; r <= (i0 + nq - 1) / o->block_q; r++)
        for (int64_t k = j0 / o->block_k; k <= (j0 + nk - 1) / o->block_k; k++)
            if (block_on(c, b, h, r, k)) return true;
    return false;
}

#define ATTNC_F64 0
#include "flash_impl.h"
#define ATTNC_F64 1
#include "flash_impl.h"

static attnc_status check_head_tensor(const flash_ctx *c, const attnc_tensor *t, const char *name, attnc_dtype dtype,
                                      int64_t h, int64_t rows, int64_t cols) {
    TRY(attnc_check_dtype(t, name, dtype));
    int64_t trail[3] = {h, rows, cols};
    return attnc_check_shape(t, name, &c->batch, 3, trail);
}

/* A gradient the kernel accumulates into with BLAS: unit column stride. */
static attnc_status check_grad(const flash_ctx *c, const attnc_tensor *t, const char *name, attnc_dtype dtype,
                               int64_t h, int64_t rows, int64_t cols) {
    if (!attnc_present(t)) return ATTNC_OK;
    TRY(check_head_tensor(c, t, name, dtype, h, rows, cols));
    int n = t->ndim;
    if (cols > 1 && (t->strides[n - 1] != 1 || t->strides[n - 2] < cols))
        return attnc_fail(ATTNC_ERR_LAYOUT, "%s needs unit-stride rows", name);
    return ATTNC_OK;
}

/* An optional (H,) vector of the call's dtype with finite entries. */
static attnc_status check_head_vector(const flash_ctx *c, const attnc_tensor *t, const char *name) {
    if (!attnc_present(t)) return ATTNC_OK;
    int64_t h = c->H;
    TRY(attnc_check_dims(t, name, c->q->dtype, 1, &h, false));
    for (int64_t x = 0; x < h; x++) {
        const void *p = attnc_at(t, x * t->strides[0]);
        double value = t->dtype == ATTNC_FLOAT32 ? *(const float *)p : *(const double *)p;
        if (!isfinite(value))
            return attnc_fail(ATTNC_ERR_VALUE, "%s[%lld] is %g: must be finite", name, (long long)x, value);
    }
    return ATTNC_OK;
}

/* The band from causal and window, both relative to query i's position
 * i + causal_offset among the keys (a prefix LM's causal side is a mask). */
static attnc_status set_band(flash_ctx *c) {
    const attnc_sdpa_options *o = c->opt;
    c->lo = NO_LO;
    c->hi = o->causal && !c->prefix ? o->causal_offset : NO_HI;
    if (!o->window && !c->prefix) return ATTNC_OK;
    if (o->causal_offset <= NO_LO / 2 || o->causal_offset >= NO_HI / 2)
        return attnc_fail(ATTNC_ERR_VALUE, "causal_offset %lld is out of range", (long long)o->causal_offset);
    if (!o->window) return ATTNC_OK;
    if (o->window_left < -1 || o->window_right < -1)
        return attnc_fail(ATTNC_ERR_VALUE, "window sides must be >= 0 (or -1: unbounded), got (%lld, %lld)",
                          (long long)o->window_left, (long long)o->window_right);
    if (o->window_left >= 0) c->lo = o->causal_offset - (o->window_left < NO_HI / 2 ? o->window_left : NO_HI / 2);
    if (o->window_right >= 0) {
        int64_t right = o->causal_offset + (o->window_right < NO_HI / 2 ? o->window_right : NO_HI / 2);
        if (right < c->hi) c->hi = right;
    }
    return ATTNC_OK;
}

/* The gradient of an (H,) option: only with the option, (H,), contiguous. */
static attnc_status check_head_grad(const flash_ctx *c, const attnc_tensor *g, const char *name,
                                    const attnc_tensor *option) {
    if (!attnc_present(g)) return ATTNC_OK;
    if (!attnc_present(option)) return attnc_fail(ATTNC_ERR_VALUE, "%s needs %s", name, name + 1);
    int64_t h = c->H;
    return attnc_check_dims(g, name, c->q->dtype, 1, &h, true);
}

/* Blocks of `size` covering n. */
static int64_t blocks_of(int64_t n, int64_t size) { return n == 0 ? 0 : (n - 1) / size + 1; }

/* The segment ids (both or neither, INT64, (..., L) and (..., S)), the
 * prefix lengths (INT64 >= 0, the batch dims, causal only) and the block
 * mask with its block sizes. */
static attnc_status check_block_masks(flash_ctx *c) {
    const attnc_sdpa_options *o = c->opt;
    bool qs = attnc_present(&o->query_segments);
    if (qs != attnc_present(&o->key_segments))
        return attnc_fail(ATTNC_ERR_VALUE, "query_segments and key_segments go together: pass both or neither");
    int64_t l = c->L, s = c->S;
    if (qs) {
        TRY(attnc_check_dtype(&o->query_segments, "query_segments", ATTNC_INT64));
        TRY(attnc_check_shape(&o->query_segments, "query_segments", &c->batch, 1, &l));
        TRY(attnc_check_dtype(&o->key_segments, "key_segments", ATTNC_INT64));
        TRY(attnc_check_shape(&o->key_segments, "key_segments", &c->batch, 1, &s));
    }
    if (attnc_present(&o->prefix_lengths)) {
        if (!o->causal) return attnc_fail(ATTNC_ERR_VALUE, "prefix_lengths needs causal attention (is_causal=True)");
        TRY(attnc_check_dtype(&o->prefix_lengths, "prefix_lengths", ATTNC_INT64));
        TRY(attnc_check_shape(&o->prefix_lengths, "prefix_lengths", &c->batch, 0, NULL));
        c->prefix = true;
        for (int64_t b = 0; b < c->batch.count; b++)
            if (prefix_of(c, b) < 0)
                return attnc_fail(ATTNC_ERR_VALUE, "prefix_lengths must be >= 0, got %lld for batch element %lld",
                                  (long long)prefix_of(c, b), (long long)b);
    }
    if (!attnc_present(&o->block_mask)) return ATTNC_OK;
    if (!(o->block_q > 0 && o->block_q <= NO_HI && o->block_k > 0 && o->block_k <= NO_HI))
        return attnc_fail(ATTNC_ERR_VALUE, "block sizes must be in [1, 2^61], got (%lld, %lld)", (long long)o->block_q,
                          (long long)o->block_k);
    return check_head_tensor(c, &o->block_mask, "block_mask", ATTNC_BOOL, c->H, blocks_of(c->L, o->block_q),
                             blocks_of(c->S, o->block_k));
}

/* The activation and its bias: sigmoid has no normaliser for sinks to join. */
static attnc_status check_activation(const attnc_sdpa_options *o) {
    if (o->activation != ATTNC_SOFTMAX && o->activation != ATTNC_SIGMOID)
        return attnc_fail(ATTNC_ERR_VALUE, "activation must be softmax (0) or sigmoid (1), got %d", (int)o->activation);
    if (o->activation == ATTNC_SOFTMAX) return ATTNC_OK;
    if (!isfinite(o->sigmoid_bias))
        return attnc_fail(ATTNC_ERR_VALUE, "sigmoid_bias must be finite, got %g", o->sigmoid_bias);
    if (attnc_present(&o->sinks))
        return attnc_fail(ATTNC_ERR_VALUE,
                          "sinks join a softmax's normaliser; activation sigmoid has none: pass one or the other");
    return ATTNC_OK;
}

static attnc_status setup(flash_ctx *c, const attnc_tensor *q, const attnc_tensor *k, const attnc_tensor *v,
                          const attnc_sdpa_options *opt) {
    *c = (flash_ctx){.q = q, .k = k, .v = v, .opt = opt};
    if (!attnc_present(q) || !attnc_present(k) || !attnc_present(v))
        return attnc_fail(ATTNC_ERR_TYPE, "query, key and value are required");
    attnc_dtype dt = q->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "query has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    TRY(attnc_check_dtype(q, "query", dt));
    if (q->ndim < 3) return attnc_fail(ATTNC_ERR_VALUE, "query must be (..., H, L, E), got %d dims", q->ndim);
    c->batch.nb = q->ndim - 3;
    c->batch.count = 1;
    for (int d = 0; d < c->batch.nb; d++) c->batch.count *= c->batch.shape[d] = q->shape[d];
    c->H = q->shape[c->batch.nb];
    c->L = q->shape[c->batch.nb + 1];
    c->e = q->shape[c->batch.nb + 2];
    TRY(check_head_tensor(c, k, "key", dt, -1, -1, c->e));
    c->hkv = k->shape[c->batch.nb];
    c->S = k->shape[c->batch.nb + 1];
    TRY(check_head_tensor(c, v, "value", dt, c->hkv, c->S, -1));
    c->ev = v->shape[v->ndim - 1];
    if (c->hkv == 0 ? c->H != 0 : c->H % c->hkv != 0) /* no heads at all: an empty result, as torch */
        return attnc_fail(ATTNC_ERR_VALUE, "query's %lld heads are not a multiple of key's %lld", (long long)c->H,
                          (long long)c->hkv);
    c->group = c->hkv ? c->H / c->hkv : 1;
    TRY(attnc_check_blas(q, "query"));
    TRY(attnc_check_blas(k, "key"));
    TRY(attnc_check_blas(v, "value"));
    for (int m = 0; m < 2; m++) {
        const attnc_tensor *mk = &opt->masks[m];
        if (!attnc_present(mk)) continue;
        TRY(check_head_tensor(c, mk, m == 0 ? "attn_mask" : "key_padding_mask",
                              mk->dtype == ATTNC_BOOL ? ATTNC_BOOL : dt, c->H, c->L, c->S));
    }
    if (!(opt->dropout_p >= 0 && opt->dropout_p <= 1))
        return attnc_fail(ATTNC_ERR_VALUE, "dropout_p must be in [0, 1], got %g", opt->dropout_p);
    TRY(check_head_vector(c, &opt->alibi_slopes, "alibi_slopes"));
    TRY(check_head_vector(c, &opt->sinks, "sinks"));
    if (!(opt->softcap >= 0) || !isfinite(opt->softcap))
        return attnc_fail(ATTNC_ERR_VALUE, "softcap must be a finite number > 0 (0: none), got %g", opt->softcap);
    TRY(check_block_masks(c));
    TRY(check_activation(opt));
    TRY(set_band(c));
    /* Tiles no larger than the problem (a decoding step has L = 1): the
     * blocks, and so the results, are the same; the scratch is smaller. */
    c->bq = c->L < BQ ? (c->L > 0 ? c->L : 1) : BQ;
    c->bk = c->S < BK ? (c->S > 0 ? c->S : 1) : BK;
    c->nqb = (c->L + c->bq - 1) / c->bq;
    c->nkb = (c->S + c->bk - 1) / c->bk;
    return ATTNC_OK;
}

static attnc_status run(flash_ctx *c, int64_t tasks, attnc_task_fn task, size_t per_worker) {
    int workers = attnc_workers_for(c->batch.count * c->H * c->L * c->S * (c->e + c->ev));
    c->per_worker = per_worker;
    TRY(attnc_calloc(&c->scratch, per_worker * (size_t)workers, attnc_dtype_size(c->q->dtype), "attention tiles"));
    attnc_parallel_for(tasks, workers, task, c);
    free(c->scratch);
    c->scratch = NULL;
    return ATTNC_OK;
}

/* Pack key block kb of a (batch, kv head) into panels (and its values, for
 * the backward's dO V^T). */
static void pack_task(void *arg, int64_t task, int worker) {
    (void)worker;
    flash_ctx *c = arg;
    int64_t kb = task % c->nkb, bhk = task / c->nkb, b = bhk / c->hkv, hk = bhk % c->hkv;
    int64_t j0 = kb * c->bk, nk = c->S - j0 < c->bk ? c->S - j0 : c->bk;
    attnc_tile_pack_panels(c->kt + task * c->kt_block, head_rows_f32(c, c->k, b, hk, j0, nk));
    if (c->vt) attnc_tile_pack_panels(c->vt + task * c->vt_block, head_rows_f32(c, c->v, b, hk, j0, nk));
}

static void free_packed(flash_ctx *c) {
    free(c->kt);
    free(c->vt);
    c->kt = c->vt = NULL;
    for (int i = 0; i < c->ncopies; i++) free(c->copies[i].data);
    c->ncopies = 0;
}

/* Float32 in a build with the tile kernels: K (and, with `values`, V)
 * packed once per call for the products with K^T (V^T), an extra copy the
 * size of K (V), so that no tile is transposed again for each query block.
 * The tile kernels do a call's products only where this packed K (c->kt
 * set); otherwise BLAS does them all. */
static attnc_status pack_keys(flash_ctx *c, bool values) {
    /* Few query rows per key (a decoding step's one) would not repay the
     * packing, an O(S E) pass of its own: BLAS then does the products. */
    if (c->q->dtype != ATTNC_FLOAT32 || !attnc_tile_sgemm_available() || c->L * c->group < PACK_MIN_ROWS)
        return ATTNC_OK;
    int64_t blocks = c->batch.count * c->hkv * c->nkb;
    c->kt_block = attnc_tile_panels_size(c->bk, c->e);
    c->vt_block = values ? attnc_tile_panels_size(c->bk, c->ev) : 0;
    TRY(attnc_calloc((void **)&c->kt, (size_t)(blocks * c->kt_block), sizeof(float), "packed keys"));
    attnc_status st = attnc_calloc((void **)&c->vt, (size_t)(blocks * c->vt_block), sizeof(float), "packed values");
    if (st != ATTNC_OK || !c->kt) { /* a failure, or no keys to pack (E = 0, or no blocks): then */
        free_packed(c);             /* BLAS does every product, V's too (c->kt says which path) */
        return st;
    }
    attnc_parallel_for(blocks, attnc_workers_for(blocks * c->bk * (c->e + c->ev)), pack_task, c);
    return ATTNC_OK;
}

/* A compact copy of one (batch, head) of an operand. */
typedef struct {
    const flash_ctx *c;
    const attnc_tensor *from, *to;
} copy_job;

static void copy_task(void *arg, int64_t bh, int worker) {
    (void)worker;
    const copy_job *j = arg;
    const attnc_tensor *t = j->from;
    int64_t heads = t->shape[t->ndim - 3], rows = t->shape[t->ndim - 2];
    attnc_mat from = head_rows_f32(j->c, j->from, bh / heads, bh % heads, 0, rows);
    attnc_mat to = head_rows_f32(j->c, j->to, bh / heads, bh % heads, 0, rows);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t e = 0; e < from.cols; e++)
            ((float *)to.p)[i * to.rs + e] = ((const float *)from.p)[i * from.rs + e * from.cs];
}

/* With the tile kernels, an operand whose rows the products load as vectors
 * (V forward; dO, Q and K backward) is copied once per call into contiguous
 * heads when its rows are scattered: rows 2 KiB apart (multi-head
 * attention's (B, L, H, E) arrays seen as (B, H, L, E)) fall into a few cache
 * sets and came from L2 again for every row block (10% of the forward). */
static attnc_status compact(flash_ctx *c, const attnc_tensor **t) {
    const attnc_tensor *src = *t;
    int n = src->ndim;
    if (!c->kt || !attnc_present(src) || (src->strides[n - 1] == 1 && src->strides[n - 2] == src->shape[n - 1]))
        return ATTNC_OK;
    attnc_tensor *dst = &c->copies[c->ncopies];
    *dst = *src;
    int64_t count = 1;
    for (int d = n - 1; d >= 0; d--) {
        dst->strides[d] = count;
        count *= src->shape[d];
    }
    TRY(attnc_calloc(&dst->data, (size_t)count, sizeof(float), "a compact copy of an operand"));
    c->ncopies++;
    copy_job j = {c, src, dst};
    int64_t heads = c->batch.count * src->shape[n - 3];
    attnc_parallel_for(heads, attnc_workers_for(count), copy_task, &j);
    *t = dst;
    return ATTNC_OK;
}

/* Query rows the backward visits for key block kb (fewer under a band). */
static int64_t rows_seeing(const flash_ctx *c, int64_t kb) {
    int64_t rows = 0;
    for (int64_t i0 = 0; i0 < c->L; i0 += c->bq) {
        int64_t nq = c->L - i0 < c->bq ? c->L - i0 : c->bq;
        if (visits(c, i0, nq, kb * c->bk)) rows += nq;
    }
    return rows;
}

/* The first key block of the second part (in [1, nkb - 1]): the split that
 * best balances the rows the two parts visit. */
static int64_t balanced_split(const flash_ctx *c) {
    int64_t total = 0, acc = 0;
    for (int64_t kb = 0; kb < c->nkb; kb++) total += rows_seeing(c, kb);
    for (int64_t kb = 0; kb < c->nkb - 1; kb++) {
        acc += rows_seeing(c, kb);
        if (2 * acc >= total) return kb + 1;
    }
    return c->nkb - 1;
}

static attnc_status two_parts(flash_ctx *c, size_t per) {
    const attnc_tensor *dq = c->dq;
    attnc_tensor part = *dq;
    int64_t stride = 1;
    for (int d = part.ndim - 1; d >= 0; d--) {
        part.strides[d] = stride;
        stride *= part.shape[d];
    }
    TRY(attnc_calloc(&part.data, (size_t)stride, attnc_dtype_size(dq->dtype), "dquery part"));
    c->dq_part = &part;
    c->split_kb = balanced_split(c);
    attnc_status st = run(c, 2, ATTNC_TYPED(c->q->dtype, part_task), per);
    if (st == ATTNC_OK) {
        ATTNC_TYPED(dq->dtype, add_parts)(c);
    }
    free(part.data);
    c->dq_part = NULL;
    return st;
}

attnc_status attnc_sdpa_forward(attnc_tensor *output, attnc_tensor *lse, attnc_tensor *weights,
                                const attnc_tensor *query, const attnc_tensor *key, const attnc_tensor *value,
                                const attnc_sdpa_options *options) {
    flash_ctx c;
    TRY(setup(&c, query, key, value, options));
    attnc_dtype dt = query->dtype;
    if (!attnc_present(output) || !attnc_present(lse)) return attnc_fail(ATTNC_ERR_TYPE, "output and lse are required");
    TRY(check_head_tensor(&c, output, "output", dt, c.H, c.L, c.ev));
    TRY(attnc_check_dtype(lse, "lse", dt));
    int64_t hl[2] = {c.H, c.L};
    TRY(attnc_check_shape(lse, "lse", &c.batch, 2, hl));
    TRY(attnc_check_out(lse, "lse"));
    if (attnc_present(weights)) {
        if (options->average_heads) {
            TRY(attnc_check_dtype(weights, "weights", dt));
            int64_t ls[2] = {c.L, c.S};
            TRY(attnc_check_shape(weights, "weights", &c.batch, 2, ls));
        } else {
            TRY(check_head_tensor(&c, weights, "weights", dt, c.H, c.L, c.S));
        }
        TRY(attnc_check_out(weights, "weights"));
    }
    c.out = output;
    c.lse_out = lse;
    c.weights = weights;
    int64_t tasks = c.batch.count * c.H * c.nqb;
    int64_t weight_tasks = options->average_heads ? c.batch.count * c.nqb : tasks;
    size_t per = (size_t)(c.bq * c.bk + c.bq * c.ev + 2 * c.bq);
    attnc_status st = pack_keys(&c, false);
    if (st == ATTNC_OK) st = compact(&c, &c.v);
    if (st == ATTNC_OK && attnc_present(weights) && c.bq * c.S <= KEEP_MAX && weight_tasks >= attnc_workers()) {
        /* The weights from the forward's own scores (no second product), where
         * its tasks keep every thread busy (with average_heads, a task takes a
         * query block of every head). Both paths give the same bits. */
        c.keep_at = (int64_t)per;
        st = run(&c, weight_tasks, ATTNC_TYPED(dt, forward_weights_task), per + (size_t)(c.bq * c.S));
    } else {
        if (st == ATTNC_OK) st = run(&c, tasks, ATTNC_TYPED(dt, forward_task), per);
        if (st == ATTNC_OK && attnc_present(weights))
            st = run(&c, weight_tasks, ATTNC_TYPED(dt, weights_task), (size_t)(c.bq * c.bk));
    }
    free_packed(&c);
    return st;
}

attnc_status attnc_sdpa_backward(attnc_tensor *dquery, attnc_tensor *dkey, attnc_tensor *dvalue, attnc_tensor *dmask,
                                 attnc_tensor *dsinks, attnc_tensor *dalibi_slopes, const attnc_tensor *doutput,
                                 const attnc_tensor *dweights, const attnc_tensor *query, const attnc_tensor *key,
                                 const attnc_tensor *value, const attnc_tensor *output, const attnc_tensor *lse,
                                 const attnc_sdpa_options *options) {
    flash_ctx c;
    TRY(setup(&c, query, key, value, options));
    attnc_dtype dt = query->dtype;
    if (!attnc_present(doutput) || !attnc_present(output) || !attnc_present(lse))
        return attnc_fail(ATTNC_ERR_TYPE, "doutput, output and lse are required");
    if (attnc_present(dweights)) TRY(check_head_tensor(&c, dweights, "dweights", dt, c.H, c.L, c.S));
    TRY(check_head_tensor(&c, doutput, "doutput", dt, c.H, c.L, c.ev));
    TRY(attnc_check_blas(doutput, "doutput"));
    TRY(check_head_tensor(&c, output, "output", dt, c.H, c.L, c.ev));
    TRY(attnc_check_dtype(lse, "lse", dt));
    int64_t hl[2] = {c.H, c.L};
    TRY(attnc_check_shape(lse, "lse", &c.batch, 2, hl));
    if (!attnc_is_contiguous(lse)) return attnc_fail(ATTNC_ERR_LAYOUT, "lse must be contiguous");
    TRY(check_grad(&c, dquery, "dquery", dt, c.H, c.L, c.e));
    TRY(check_grad(&c, dkey, "dkey", dt, c.hkv, c.S, c.e));
    TRY(check_grad(&c, dvalue, "dvalue", dt, c.hkv, c.S, c.ev));
    if (attnc_present(dmask)) {
        TRY(check_head_tensor(&c, dmask, "dmask", dt, c.H, c.L, c.S));
        TRY(attnc_check_out(dmask, "dmask"));
    }
    TRY(check_head_grad(&c, dsinks, "dsinks", &options->sinks));
    TRY(check_head_grad(&c, dalibi_slopes, "dalibi_slopes", &options->alibi_slopes));
    c.o = output;
    c.lse = lse;
    c.dout = doutput;
    c.dw = attnc_present(dweights) ? dweights : NULL;
    c.dq = dquery;
    c.dk = dkey;
    c.dv = dvalue;
    c.dmask = dmask;
    c.dsinks = attnc_present(dsinks) ? dsinks : NULL;
    c.dslopes = attnc_present(dalibi_slopes) ? dalibi_slopes : NULL;
    size_t size = attnc_dtype_size(dt);
    TRY(attnc_calloc(&c.dvec, (size_t)(c.batch.count * c.H * c.L), size, "row dots"));
    attnc_status st = ATTNC_OK;
    if (c.dslopes) st = attnc_calloc(&c.slope_part, (size_t)(c.batch.count * c.H * c.nkb), size, "slope sums");
    if (st == ATTNC_OK) st = pack_keys(&c, true);
    if (st == ATTNC_OK) st = compact(&c, &c.dout);
    if (st == ATTNC_OK) st = compact(&c, &c.q);
    if (st == ATTNC_OK) st = compact(&c, &c.k);
    if (st != ATTNC_OK) {
        free(c.dvec);
        free(c.slope_part);
        free_packed(&c);
        return st;
    }
    bool softmax = options->activation == ATTNC_SOFTMAX; /* sigmoid's score gradient needs no row dots */
    if (softmax) attnc_parallel_for(c.batch.count * c.H, attnc_workers(), ATTNC_TYPED(dt, rowdot_task), &c);
    /* P and dP per tile, and with softcap the cap's derivative (cap_scores) */
    size_t per = (size_t)((options->softcap > 0 ? 3 : 2) * c.bq * c.bk);
    if (c.dw && softmax) /* D += rowsum(P o dweights): the weights' own softmax backward */
        st = run(&c, c.batch.count * c.H * c.nqb, ATTNC_TYPED(dt, weights_rowdot_task), (size_t)(c.bq * c.bk));
    if (st == ATTNC_OK && c.dsinks) ATTNC_TYPED(dt, sink_grads)(&c);
    int64_t groups = c.batch.count * c.hkv;
    bool all = attnc_present(dquery) && attnc_present(dkey) && attnc_present(dvalue);
    if (st == ATTNC_OK && all && groups == 1 && c.nkb >= 2) {
        st = two_parts(&c, per);
    } else if (st == ATTNC_OK && all && groups >= attnc_workers()) {
        st = run(&c, groups, ATTNC_TYPED(dt, fused_task), per);
    } else {
        if (st == ATTNC_OK && (attnc_present(dkey) || attnc_present(dvalue) || attnc_present(dmask) || c.dslopes))
            st = run(&c, groups * c.nkb, ATTNC_TYPED(dt, dkv_task), per);
        if (st == ATTNC_OK && attnc_present(dquery))
            st = run(&c, c.batch.count * c.H * c.nqb, ATTNC_TYPED(dt, dq_task), per);
    }
    if (st == ATTNC_OK && c.dslopes) ATTNC_TYPED(dt, slope_grads)(&c);
    free(c.dvec);
    free(c.slope_part);
    free_packed(&c);
    return st;
}
