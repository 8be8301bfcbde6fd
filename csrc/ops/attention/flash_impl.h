/* flash_impl.h: typed kernels of flash.c (see core/real.h).
 * Per task, tiles: Q_i (nq, E) rows i0.., K_j and V_j (nk, E / Ev) rows
 * j0.., scores and probabilities (nq, nk) contiguous in per-worker scratch. */
#include "../../core/real.h"

/* Matrix view of rows [row0, row0 + nrows) of head h of batch element b. */
static attnc_mat FN(head_rows)(const flash_ctx *c, const attnc_tensor *t, int64_t b, int64_t h, int64_t row0,
                               int64_t nrows) {
    int n = t->ndim;
    int64_t off = attnc_batch_offset(t, &c->batch, b) + h * t->strides[n - 3] + row0 * t->strides[n - 2];
    attnc_mat m = {attnc_at(t, off), nrows, t->shape[n - 1], t->strides[n - 2], t->strides[n - 1]};
    return m;
}

static attnc_mat FN(tile)(REAL *p, int64_t rows, int64_t cols) {
    attnc_mat m = {p, rows, cols, cols, 1};
    return m;
}

/* C = alpha op(A) B + beta C: the float32 tile kernels where the call
 * packed K for them (op(A) = A^T as a strided view; skipping what the
 * causal band allows), else BLAS. */
static void FN(product)(const flash_ctx *x, bool ta, REAL alpha, attnc_mat a, attnc_mat b, REAL beta, attnc_mat c,
                        attnc_tile_band band) {
#if !ATTNC_F64
    attnc_mat at = ta ? (attnc_mat){a.p, a.cols, a.rows, a.cs, a.rs} : a;
    if (x->kt && attnc_tile_sgemm_band(alpha, at, b, beta, c, band)) return;
#else
    (void)x, (void)band;
#endif
    GEMM(ta, false, alpha, a, b, beta, c);
}

/* C = alpha A X_j^T for key block j0 of kv head hk, X = K (which 0) or V
 * (1), A query rows i0..: from the packed panels where there are some
 * (columns past the causal band unspecified), else BLAS. */
static void FN(times_block_t)(const flash_ctx *c, int which, REAL alpha, attnc_mat a, int64_t b, int64_t hk, int64_t i0,
                              int64_t j0, int64_t nk, attnc_mat out) {
#if !ATTNC_F64
    const float *packed = which ? c->vt : c->kt;
    if (packed) {
        int64_t block = (b * c->hkv + hk) * c->nkb + j0 / c->bk;
        attnc_tile_sgemm_panels(alpha, a, packed + block * (which ? c->vt_block : c->kt_block), 0, out,
                                causal_band(c, KEY_COLUMNS, i0, j0));
        return;
    }
#else
    (void)i0;
#endif
    GEMM(false, true, alpha, a, FN(head_rows)(c, which ? c->v : c->k, b, hk, j0, nk), 0, out);
}

/* Row reductions in LANES independent partial results, combined in a fixed
 * order: the compiler vectorises them, and the result does not depend on
 * the vector width. Float32 in the AVX-512 build: core/rows_f32.h's. */
#ifndef LANES
#define LANES 16
#endif

static REAL FN(row_max)(const REAL *x, int64_t n, REAL init) {
#if !ATTNC_F64 && ATTNC_ROWS_F32
    return attnc_row_max_f32(x, n, init);
#else
    REAL lane[LANES], m = init;
    for (int k = 0; k < LANES; k++) lane[k] = init;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
    for (int k = 0; k < LANES; k++) m = lane[k] > m ? lane[k] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
#endif
}

/* x[j] <- exp(x[j] - shift); returns the sum. */
static REAL FN(row_exp)(REAL *x, int64_t n, REAL shift) {
#if !ATTNC_F64 && ATTNC_ROWS_F32
    return attnc_row_exp_f32(x, n, shift);
#else
    REAL lane[LANES], sum = 0;
    for (int k = 0; k < LANES; k++) lane[k] = 0;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane[k] += x[j + k] = EXPV(x[j + k] - shift);
    for (int k = 0; k < LANES; k++) sum += lane[k];
    for (; j < n; j++) sum += x[j] = EXPV(x[j] - shift);
    return sum;
#endif
}

/* x[j] <- sigmoid(x[j] + bias) = 1 / (1 + exp(-(x[j] + bias))) (0 for an
 * excluded key's -inf). No row sum: sigmoid has no normaliser. */
static void FN(row_sigmoid)(REAL *x, int64_t n, REAL bias) {
    for (int64_t j = 0; j < n; j++) x[j] = 1 / (1 + EXPV(-(x[j] + bias)));
}

/* Entry h of an (H,) option vector. */
static REAL FN(head_entry)(const attnc_tensor *t, int64_t h) { return *(const REAL *)attnc_at(t, h * t->strides[0]); }

/* s <- softcap tanh(s / softcap) in one pass; with dcap, the derivative
 * 1 - tanh^2 kept there (the backward's chain rule). TANHV: float's is a
 * rational function (core/simd.h), which the compiler vectorises; the
 * earlier 1 - 2 / (exp(2y) + 1) cost 1.6 times as much, tanhf (a call per
 * score) 2.3 times the plain forward. */
static void FN(cap_scores)(REAL cap, int64_t n, REAL *s, REAL *dcap) {
    REAL inv = 1 / cap;
    if (!dcap) {
        for (int64_t x = 0; x < n; x++) s[x] = cap * TANHV(s[x] * inv);
        return;
    }
    for (int64_t x = 0; x < n; x++) {
        REAL t = TANHV(s[x] * inv);
        s[x] = cap * t;
        dcap[x] = 1 - t * t;
    }
}

/* ds <- ds dcap: through the soft cap. Masked entries (ds 0), whose dcap
 * the products may have left unspecified (NaN, say), stay 0: a select,
 * not a branch, so the loop is a blend (the branch became AVX2's masked
 * store, a fifth of the capped backward's extra time). */
static void FN(cap_grad)(int64_t n, REAL *ds, const REAL *dcap) {
    for (int64_t x = 0; x < n; x++) ds[x] = ds[x] != 0 ? ds[x] * dcap[x] : ds[x];
}

/* s += slope_h (j - i - causal_offset) over the tile (ALiBi). The distance
 * as a row's base plus the key's int j (nk <= BK): AVX2 converts 32-bit
 * integers to floats a vector at a time but not 64-bit ones (the int64 form
 * was scalar, 0.6 ns a score). Both terms and their sum are integers, exact
 * below 2^24 (float) and 2^53 (double), so the bits are those of
 * (REAL)(j - i - causal_offset) up to those distances. */
static void FN(add_alibi)(const flash_ctx *c, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk, REAL *s) {
    REAL slope = FN(head_entry)(&c->opt->alibi_slopes, h);
    int64_t d0 = j0 - i0 - c->opt->causal_offset;
    for (int64_t i = 0; i < nq; i++) {
        REAL base = (REAL)(d0 - i), *row = s + i * nk;
        for (int j = 0; j < (int)nk; j++) row[j] += slope * (base + (REAL)j);
    }
}

/* -inf outside the band (causal, window) where the tile crosses its sides. */
static void FN(band_mask)(const flash_ctx *c, int64_t i0, int64_t nq, int64_t j0, int64_t nk, REAL *s) {
    if (c->hi != NO_HI && j0 + nk - 1 > i0 + c->hi) /* the tile crosses the upper side */
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = i0 + i + c->hi + 1 - j0; j < nk; j++)
                if (j >= 0) s[i * nk + j] = -INFINITY;
    if (c->lo != NO_LO && j0 < i0 + nq - 1 + c->lo) /* the lower side */
        for (int64_t i = 0; i < nq; i++) {
            int64_t first = i0 + i + c->lo - j0; /* the row's first key in the tile */
            for (int64_t j = 0; j < nk && j < first; j++) s[i * nk + j] = -INFINITY;
        }
}

/* -inf where the block masks exclude a key: past the diagonal and the
 * prefix (prefix LM), another segment, a False block of block_mask. */
static void FN(block_masks)(const flash_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                            REAL *s) {
    const attnc_sdpa_options *o = c->opt;
    if (c->prefix) {
        int64_t prefix = prefix_of(c, b);
        for (int64_t i = 0; i < nq; i++) {
            int64_t first = i0 + i + o->causal_offset + 1; /* the first key past the diagonal */
            first = (first > prefix ? first : prefix) - j0;
            for (int64_t j = first > 0 ? first : 0; j < nk; j++) s[i * nk + j] = -INFINITY;
        }
    }
    if (attnc_present(&o->query_segments)) {
        const int64_t *qs = batch_row(c, &o->query_segments, b, i0), *ks = batch_row(c, &o->key_segments, b, j0);
        int64_t qst = o->query_segments.strides[o->query_segments.ndim - 1];
        int64_t kst = o->key_segments.strides[o->key_segments.ndim - 1];
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++)
                if (ks[j * kst] != qs[i * qst]) s[i * nk + j] = -INFINITY;
    }
    if (!attnc_present(&o->block_mask)) return;
    for (int64_t i = 0; i < nq; i++) {
        int64_t r = (i0 + i) / o->block_q;
        for (int64_t j = 0; j < nk;) { /* a run of keys in one block */
            int64_t k = (j0 + j) / o->block_k, end = (k + 1) * o->block_k - j0;
            end = end < nk ? end : nk;
            if (block_on(c, b, h, r, k)) j = end;
            for (; j < end; j++) s[i * nk + j] = -INFINITY;
        }
    }
}

/* s (nq, nk) <- scale * Q_i K_j^T, soft-capped, ALiBi added, then the
 * masks: excluded keys -inf, float masks added. With softcap and dcap, the
 * cap's derivative kept there (cap_scores). */
static void FN(scores)(const flash_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                       REAL *s, REAL *dcap) {
    const attnc_sdpa_options *o = c->opt;
    FN(times_block_t)(c, 0, (REAL)o->scale, FN(head_rows)(c, c->q, b, h, i0, nq), b, h / c->group, i0, j0, nk,
                      FN(tile)(s, nq, nk));
    if (o->softcap > 0) FN(cap_scores)((REAL)o->softcap, nq * nk, s, dcap);
    if (attnc_present(&o->alibi_slopes)) FN(add_alibi)(c, h, i0, nq, j0, nk, s);
    for (int m = 0; m < 2; m++) {
        const attnc_tensor *mk = &o->masks[m];
        if (!attnc_present(mk)) continue;
        int n = mk->ndim;
        int64_t rs = mk->strides[n - 2], cs = mk->strides[n - 1];
        int64_t base = attnc_batch_offset(mk, &c->batch, b) + h * mk->strides[n - 3] + i0 * rs + j0 * cs;
        if (mk->dtype == ATTNC_BOOL) {
            const uint8_t *p = (const uint8_t *)mk->data + base;
            for (int64_t i = 0; i < nq; i++)
                for (int64_t j = 0; j < nk; j++)
                    if (!p[i * rs + j * cs]) s[i * nk + j] = -INFINITY;
        } else {
            const REAL *p = (const REAL *)mk->data + base;
            for (int64_t i = 0; i < nq; i++)
                for (int64_t j = 0; j < nk; j++) s[i * nk + j] += p[i * rs + j * cs];
        }
    }
    FN(band_mask)(c, i0, nq, j0, nk, s);
    FN(block_masks)(c, b, h, i0, nq, j0, nk, s);
}

/* Multiply probabilities (nq, nk) by the dropout keep mask / (1 - p). */
static void FN(dropout)(const flash_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                        REAL *p) {
    const attnc_sdpa_options *o = c->opt;
    if (o->dropout_p <= 0) return;
    REAL keep_scale = o->dropout_p >= 1 ? 0 : (REAL)(1 / (1 - o->dropout_p));
    double t = o->dropout_p * 4294967296.0;
    uint32_t threshold = t >= 4294967295.0 ? UINT32_MAX : (uint32_t)t;
    uint64_t stream = (uint64_t)(b * c->H + h), groups = (uint64_t)(c->S + 3) / 4;
    /* Key j of row i is kept when word j % 4 of Philox(seed, stream, i * groups
     * + j / 4) is >= p 2^32. */
    int64_t g0 = j0 / 4, ng = (j0 + nk + 3) / 4 - g0;
    uint32_t bits[4 * (BK / 4 + 2)];
    for (int64_t i = 0; i < nq; i++) {
        attnc_random_bits(o->seed, stream, (uint64_t)(i0 + i) * groups + (uint64_t)g0, ng, bits);
        const uint32_t *w = bits + (j0 - 4 * g0);
        for (int64_t j = 0; j < nk; j++) p[i * nk + j] *= w[j] >= threshold ? keep_scale : 0;
    }
}

/* The forward of query block qb of (batch b, head h): online softmax over
 * key blocks, then output = acc / l and lse = m + log(l). With keep (nq, S;
 * row stride S), each tile's scores are also kept there before the softmax
 * (the weights' pass then needs no second product). s: the worker's
 * scratch. */
/* The online softmax's step over a tile's scores s (nq, nk): the running
 * max m and sum l updated, the accumulator acc rescaled, s <- exp(s - m). */
static void FN(online_softmax)(const flash_ctx *c, int64_t nq, int64_t nk, REAL *s, REAL *m, REAL *l, REAL *acc) {
    for (int64_t i = 0; i < nq; i++) {
        REAL *row = s + i * nk, mx = FN(row_max)(row, nk, m[i]);
        if (mx == -INFINITY) { /* nothing allowed yet: no contribution */
            for (int64_t j = 0; j < nk; j++) {
                if (row[j] != row[j]) l[i] = NAN; /* but a NaN score propagates */
                row[j] = 0;
            }
            continue;
        }
        REAL alpha = EXP(m[i] - mx);
        l[i] = l[i] * alpha + FN(row_exp)(row, nk, mx);
        m[i] = mx;
        if (alpha != 1)
            for (int64_t e = 0; e < c->ev; e++) acc[i * c->ev + e] *= alpha;
    }
}

static void FN(forward_block)(const flash_ctx *c, int64_t b, int64_t h, int64_t qb, REAL *s, REAL *keep) {
    int64_t bh = b * c->H + h, i0 = qb * c->bq, nq = c->L - i0 < c->bq ? c->L - i0 : c->bq;
    REAL *acc = s + c->bq * c->bk, *m = acc + c->bq * c->ev, *l = m + c->bq;
    bool sigmoid = c->opt->activation == ATTNC_SIGMOID;
    for (int64_t i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0;
    for (int64_t x = 0; x < nq * c->ev; x++) acc[x] = 0;
    int64_t nk;
    for (int64_t j0 = key_begin(c, i0); (nk = tile_keys(c, i0, nq, j0)) > 0; j0 += c->bk) {
        bool live = tile_live(c, b, h, i0, nq, j0, nk);
        if (live) FN(scores)(c, b, h, i0, nq, j0, nk, s, NULL);
        if (keep) /* a skipped tile's keys: excluded */
            for (int64_t i = 0; i < nq; i++)
                for (int64_t j = 0; j < nk; j++) keep[i * c->S + j0 + j] = live ? s[i * nk + j] : -INFINITY;
        if (!live) continue;
        if (sigmoid)
            for (int64_t i = 0; i < nq; i++) FN(row_sigmoid)(s + i * nk, nk, (REAL)c->opt->sigmoid_bias);
        else
            FN(online_softmax)(c, nq, nk, s, m, l, acc);
        FN(dropout)(c, b, h, i0, nq, j0, nk, s);
        FN(product)(c, false, 1, FN(tile)(s, nq, nk), FN(head_rows)(c, c->v, b, h / c->group, j0, nk), 1,
                    FN(tile)(acc, nq, c->ev), causal_band(c, KEY_TERMS, i0, j0));
    }
    attnc_mat out = FN(head_rows)(c, c->out, b, h, i0, nq);
    REAL *lse = (REAL *)c->lse_out->data + bh * c->L + i0;
    if (sigmoid) { /* no normaliser: the output is the accumulator. lse, which
                    * the backward and the weights (probabilities) do not read
                    * then, is 0: log sum_j p_ij had cost a row sum per tile. */
        for (int64_t i = 0; i < nq; i++) {
            for (int64_t e = 0; e < c->ev; e++) ((REAL *)out.p)[i * out.rs + e * out.cs] = acc[i * c->ev + e];
            lse[i] = 0;
        }
        return;
    }
    bool sinks = attnc_present(&c->opt->sinks);
    REAL sink = sinks ? FN(head_entry)(&c->opt->sinks, h) : -INFINITY;
    for (int64_t i = 0; i < nq; i++) {
        /* the sink joins the normaliser: a term exp(sink) (with max m) */
        REAL mi = m[i], li = l[i], alpha = 1;
        if (sink > mi) {
            alpha = EXP(mi - sink);
            li = li * alpha + 1;
            mi = sink;
        } else if (sinks) {
            li += EXP(sink - mi);
        }
        bool empty = !(li > 0) && li == li; /* NaN propagates */
        REAL inv = empty ? 0 : alpha / li;
        for (int64_t e = 0; e < c->ev; e++) ((REAL *)out.p)[i * out.rs + e * out.cs] = acc[i * c->ev + e] * inv;
        lse[i] = empty ? -INFINITY : mi + LOG(li);
    }
}

/* Forward, one task = (batch, head, query block): online softmax over key
 * blocks, then output = acc / l and lse = m + log(l). */
static void FN(forward_task)(void *arg, int64_t task, int worker) {
    const flash_ctx *c = arg;
    int64_t qb = task % c->nqb, bh = task / c->nqb;
    FN(forward_block)(c, bh / c->H, bh % c->H, qb, (REAL *)c->scratch + (size_t)worker * c->per_worker, NULL);
}

/* P (nq, nk; row stride ld) <- exp(s - lse_i), 0 for rows with nothing
 * allowed; with activation sigmoid, sigmoid(s + sigmoid_bias). */
static void FN(probabilities)(const flash_ctx *c, const REAL *lse, int64_t nq, int64_t nk, int64_t ld, REAL *s) {
    if (c->opt->activation == ATTNC_SIGMOID) {
        for (int64_t i = 0; i < nq; i++) FN(row_sigmoid)(s + i * ld, nk, (REAL)c->opt->sigmoid_bias);
        return;
    }
    for (int64_t i = 0; i < nq; i++) {
        REAL *row = s + i * ld;
        if (lse[i] == -INFINITY) {
            for (int64_t j = 0; j < nk; j++) row[j] = 0;
            continue;
        }
        FN(row_exp)(row, nk, lse[i]);
    }
}

/* The weights of one (batch, head, query block) from the saved lse, written
 * (or, averaging over heads, added times 1/H) into w, row stride S. */
static void FN(head_weights)(const flash_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t nq, REAL *s, REAL *w,
                             bool average) {
    const REAL *lse = (const REAL *)c->lse_out->data + (b * c->H + h) * c->L + i0;
    REAL share = (REAL)1 / (REAL)c->H;
    int64_t kend = key_end(c, i0 + nq - 1), kbegin = key_begin(c, i0), nk;
    if (!average)
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < c->S; j++)
                if (j < kbegin || j >= kend) w[i * c->S + j] = 0;
    for (int64_t j0 = kbegin; (nk = tile_keys(c, i0, nq, j0)) > 0; j0 += c->bk) {
        bool live = tile_live(c, b, h, i0, nq, j0, nk);
        if (live) {
            FN(scores)(c, b, h, i0, nq, j0, nk, s, NULL);
            FN(probabilities)(c, lse, nq, nk, nk, s);
        }
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++) {
                if (average)
                    w[i * c->S + j0 + j] += live ? s[i * nk + j] * share : 0;
                else
                    w[i * c->S + j0 + j] = live ? s[i * nk + j] : 0;
            }
    }
}

/* The weights, one task = (batch, head, query block), or with
 * average_heads (batch, query block) summing the heads in order. */
static void FN(weights_task)(void *arg, int64_t task, int worker) {
    const flash_ctx *c = arg;
    REAL *s = (REAL *)c->scratch + (size_t)worker * c->per_worker;
    int64_t qb = task % c->nqb, i0 = qb * c->bq, nq = c->L - i0 < c->bq ? c->L - i0 : c->bq;
    if (!c->opt->average_heads) {
        int64_t bh = task / c->nqb;
        FN(head_weights)(c, bh / c->H, bh % c->H, i0, nq, s, (REAL *)c->weights->data + (bh * c->L + i0) * c->S, false);
        return;
    }
    int64_t b = task / c->nqb;
    REAL *w = (REAL *)c->weights->data + (b * c->L + i0) * c->S;
    for (int64_t x = 0; x < nq * c->S; x++) w[x] = 0;
    for (int64_t h = 0; h < c->H; h++) FN(head_weights)(c, b, h, i0, nq, s, w, true);
}

/* Forward and weights in one pass where a query block's scores over every
 * key fit in a worker's scratch (KEEP_MAX): one task = (batch, head, query
 * block), or with average_heads (batch, query block) taking the heads in
 * order. The weights come from the kept scores, exp(s - lse) as
 * head_weights makes them, so they are the same bits as the two-pass path. */
static void FN(forward_weights_task)(void *arg, int64_t task, int worker) {
    const flash_ctx *c = arg;
    REAL *s = (REAL *)c->scratch + (size_t)worker * c->per_worker, *keep = s + c->keep_at;
    int64_t qb = task % c->nqb, i0 = qb * c->bq, nq = c->L - i0 < c->bq ? c->L - i0 : c->bq;
    bool average = c->opt->average_heads;
    int64_t b = average ? task / c->nqb : task / c->nqb / c->H;
    int64_t h0 = average ? 0 : task / c->nqb % c->H, h1 = average ? c->H : h0 + 1;
    REAL share = (REAL)1 / (REAL)c->H;
    REAL *w = (REAL *)c->weights->data + ((average ? b : b * c->H + h0) * c->L + i0) * c->S;
    int64_t kend = key_end(c, i0 + nq - 1), kbegin = key_begin(c, i0);
    if (kbegin > kend) kbegin = kend; /* no key block at all */
    if (average)
        for (int64_t x = 0; x < nq * c->S; x++) w[x] = 0;
    for (int64_t h = h0; h < h1; h++) { /* the kept scores: the visited key blocks [kbegin, kend) */
        FN(forward_block)(c, b, h, qb, s, keep);
        FN(probabilities)(c, (const REAL *)c->lse_out->data + (b * c->H + h) * c->L + i0, nq, kend - kbegin, c->S,
                          keep + kbegin);
        for (int64_t i = 0; i < nq; i++) {
            const REAL *row = keep + i * c->S;
            REAL *wr = w + i * c->S;
            if (average)
                for (int64_t j = kbegin; j < kend; j++) wr[j] += row[j] * share;
            else
                for (int64_t j = 0; j < c->S; j++) wr[j] = j >= kbegin && j < kend ? row[j] : 0;
        }
    }
}

/* D[bh, i] = sum_e dO[i, e] O[i, e], one task = (batch, head). */
static void FN(rowdot_task)(void *arg, int64_t bh, int worker) {
    (void)worker;
    const flash_ctx *c = arg;
    int64_t b = bh / c->H, h = bh % c->H;
    attnc_mat o = FN(head_rows)(c, c->o, b, h, 0, c->L);
    attnc_mat g = FN(head_rows)(c, c->dout, b, h, 0, c->L);
    REAL *d = (REAL *)c->dvec + bh * c->L;
    for (int64_t i = 0; i < c->L; i++) {
        REAL acc = 0;
        for (int64_t e = 0; e < c->ev; e++)
            acc += ((const REAL *)o.p)[i * o.rs + e * o.cs] * ((const REAL *)g.p)[i * g.rs + e * g.cs];
        d[i] = acc;
    }
}

/* The tile (nq, nk) of the weights' cotangent at rows i0.., keys j0... */
#define DW_AT(c, b, h, i0, j0, i, j)                                                           \
    (*(const REAL *)attnc_at((c)->dw, attnc_batch_offset((c)->dw, &(c)->batch, b) +            \
                                          (h) * (c)->dw->strides[(c)->dw->ndim - 3] +          \
                                          ((i0) + (i)) * (c)->dw->strides[(c)->dw->ndim - 2] + \
                                          ((j0) + (j)) * (c)->dw->strides[(c)->dw->ndim - 1]))

/* D[bh, i] += sum_j P_ij dW_ij, one task = (batch, head, query block). */
static void FN(weights_rowdot_task)(void *arg, int64_t task, int worker) {
    const flash_ctx *c = arg;
    int64_t qb = task % c->nqb, bh = task / c->nqb, b = bh / c->H, h = bh % c->H;
    int64_t i0 = qb * c->bq, nq = c->L - i0 < c->bq ? c->L - i0 : c->bq;
    REAL *s = (REAL *)c->scratch + (size_t)worker * c->per_worker;
    REAL *d = (REAL *)c->dvec + bh * c->L + i0;
    int64_t nk;
    for (int64_t j0 = key_begin(c, i0); (nk = tile_keys(c, i0, nq, j0)) > 0; j0 += c->bk) {
        if (!tile_live(c, b, h, i0, nq, j0, nk)) continue;
        FN(scores)(c, b, h, i0, nq, j0, nk, s, NULL);
        FN(probabilities)(c, (const REAL *)c->lse->data + bh * c->L + i0, nq, nk, nk, s);
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++)
                if (s[i * nk + j] != 0) d[i] += s[i * nk + j] * DW_AT(c, b, h, i0, j0, i, j);
    }
}

/* s <- s o (dp - d_i) row by row (0 where s is 0). */
static void FN(softmax_grad_tile)(REAL *s, const REAL *dp, const REAL *d, int64_t nq, int64_t nk) {
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < nk; j++) {
            REAL p = s[i * nk + j];
            s[i * nk + j] = p == 0 ? 0 : p * (dp[i * nk + j] - d[i]);
        }
}

/* s <- s (1 - s) dp, sigmoid's gradient (0 where s is 0). */
static void FN(sigmoid_grad_tile)(REAL *s, const REAL *dp, int64_t n) {
    for (int64_t x = 0; x < n; x++) s[x] = s[x] == 0 ? 0 : s[x] * (1 - s[x]) * dp[x];
}

/* dS (in s) <- P o (dP' + dW - D) (sigmoid: P o (1 - P) o (dP' + dW)), where P is in s, dP' = dropout(dO V^T)
 * in dp, dW the weights' cotangent (if any) and D = rowsum(dO o O) (+
 * rowsum(P o dW)). */
static void FN(score_grad)(const flash_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                           REAL *s, REAL *dp) {
    FN(times_block_t)(c, 1, 1, FN(head_rows)(c, c->dout, b, h, i0, nq), b, h / c->group, i0, j0, nk,
                      FN(tile)(dp, nq, nk));
    FN(dropout)(c, b, h, i0, nq, j0, nk, dp);
    if (c->dw)
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++) dp[i * nk + j] += DW_AT(c, b, h, i0, j0, i, j);
    if (c->opt->activation == ATTNC_SIGMOID)
        FN(sigmoid_grad_tile)(s, dp, nq * nk);
    else
        FN(softmax_grad_tile)(s, dp, (const REAL *)c->dvec + (b * c->H + h) * c->L + i0, nq, nk);
}

/* dsinks[h] = -sum over batch and rows of p_sink D, p_sink = exp(sink_h -
 * lse) the sink's share of the normaliser (its value is zero, so its dP is
 * zero). Serial, in a fixed order: H B L terms. */
static void FN(sink_grads)(const flash_ctx *c) {
    const REAL *lse = c->lse->data, *d = c->dvec;
    for (int64_t h = 0; h < c->H; h++) {
        REAL sink = FN(head_entry)(&c->opt->sinks, h), acc = 0;
        for (int64_t b = 0; b < c->batch.count; b++)
            for (int64_t i = 0; i < c->L; i++) {
                int64_t x = (b * c->H + h) * c->L + i;
                acc -= EXP(sink - lse[x]) * d[x];
            }
        *(REAL *)attnc_at(c->dsinks, h * c->dsinks->strides[0]) = acc;
    }
}

/* dalibi_slopes[h] = the sum over batch and key blocks of the partial sums
 * of dS (j - i - causal_offset) the key blocks' tasks made (add_slope_part). */
static void FN(slope_grads)(const flash_ctx *c) {
    const REAL *part = c->slope_part;
    for (int64_t h = 0; h < c->H; h++) {
        REAL acc = 0;
        for (int64_t b = 0; b < c->batch.count; b++)
            for (int64_t kb = 0; kb < c->nkb; kb++) acc += part[(b * c->H + h) * c->nkb + kb];
        *(REAL *)attnc_at(c->dslopes, h * c->dslopes->strides[0]) = acc;
    }
}

/* sum_j x[j] (base + ramp[j]) in LANES partial sums, as row_max's (one
 * running sum was a chain of dependent adds: 1 ns a score). ramp[j] = j:
 * with j converted inside the loop, GCC's vector code shuffled more than it
 * added (0.75 ns a score; 0.1 with the table). */
static REAL FN(ramp_dot)(const REAL *x, int64_t n, REAL base, const REAL *ramp) {
    REAL lane[LANES], sum = 0;
    for (int k = 0; k < LANES; k++) lane[k] = 0;
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int k = 0; k < LANES; k++) lane[k] += x[j + k] * (base + ramp[j + k]);
    for (int k = 0; k < LANES; k++) sum += lane[k];
    for (; j < n; j++) sum += x[j] * (base + ramp[j]);
    return sum;
}

/* The tile's share of dalibi_slopes[h]: sum of dS_ij (j - i - causal_offset),
 * dS the gradient of the scores the slope's bias is added to; the distance
 * as add_alibi makes it. */
static void FN(add_slope_part)(const flash_ctx *c, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                               const REAL *ds) {
    int64_t d0 = j0 - i0 - c->opt->causal_offset;
    REAL ramp[BK], acc = 0;
    for (int j = 0; j < (int)nk; j++) ramp[j] = (REAL)j;
    for (int64_t i = 0; i < nq; i++) acc += FN(ramp_dot)(ds + i * nk, nk, (REAL)(d0 - i), ramp);
    ((REAL *)c->slope_part)[(b * c->H + h) * c->nkb + j0 / c->bk] += acc;
}

/* Zero rows [row0, row0 + n) of head h of a contiguous gradient. */
static void FN(zero_rows)(const flash_ctx *c, attnc_tensor *t, int64_t b, int64_t h, int64_t row0, int64_t n) {
    attnc_mat m = FN(head_rows)(c, t, b, h, row0, n);
    for (int64_t i = 0; i < n; i++)
        for (int64_t x = 0; x < m.cols; x++) ((REAL *)m.p)[i * m.rs + x] = 0;
}

/* Key block j0 of kv head hk: dK_j, dV_j (and dmask) over every query head
 * of the group and every query block that can see the keys; with dq (not
 * NULL), also dQ_i += scale dS K_j into it (the single-pass backward). */
static void FN(key_block)(const flash_ctx *c, int64_t b, int64_t hk, int64_t j0, REAL *s, attnc_tensor *dq) {
    int64_t block = c->S - j0 < c->bk ? c->S - j0 : c->bk;
    REAL *dp = s + c->bq * c->bk;
    bool want_k = attnc_present(c->dk), want_v = attnc_present(c->dv);
    if (want_k) FN(zero_rows)(c, c->dk, b, hk, j0, block);
    if (want_v) FN(zero_rows)(c, c->dv, b, hk, j0, block);
    REAL *dcap = c->opt->softcap > 0 ? dp + c->bq * c->bk : NULL;
    int64_t first = c->hi == NO_HI ? 0 : j0 - c->hi; /* the first row that sees j0 */
    if (first < 0) first = 0;
    for (int64_t h = hk * c->group; h < (hk + 1) * c->group; h++)
        for (int64_t i0 = (first / c->bq) * c->bq; i0 < c->L; i0 += c->bq) {
            int64_t nq = c->L - i0 < c->bq ? c->L - i0 : c->bq, nk = tile_keys(c, i0, nq, j0);
            if (c->lo != NO_LO && i0 + c->lo >= j0 + block) break; /* later rows start past the block */
            if (!visits(c, i0, nq, j0) || !tile_live(c, b, h, i0, nq, j0, nk)) continue; /* as the forward's */
            FN(scores)(c, b, h, i0, nq, j0, nk, s, dcap);
            FN(probabilities)(c, (const REAL *)c->lse->data + (b * c->H + h) * c->L + i0, nq, nk, nk, s);
            if (want_v) { /* dV_j += P'^T dO_i, P' = dropout(P) (P itself without dropout) */
                REAL *pd = s;
                if (c->opt->dropout_p > 0) {
                    for (int64_t x = 0; x < nq * nk; x++) dp[x] = s[x];
                    FN(dropout)(c, b, h, i0, nq, j0, nk, dp);
                    pd = dp;
                }
                FN(product)(c, true, 1, FN(tile)(pd, nq, nk), FN(head_rows)(c, c->dout, b, h, i0, nq), 1,
                            FN(head_rows)(c, c->dv, b, hk, j0, nk), causal_band(c, QUERY_TERMS, i0, j0));
            }
            if (!want_k && !dq && !attnc_present(c->dmask) && !c->slope_part) continue;
            FN(score_grad)(c, b, h, i0, nq, j0, nk, s, dp);
            if (attnc_present(c->dmask)) {
                REAL *dm = (REAL *)c->dmask->data + ((b * c->H + h) * c->L + i0) * c->S + j0;
                for (int64_t i = 0; i < nq; i++)
                    for (int64_t j = 0; j < nk; j++) dm[i * c->S + j] = s[i * nk + j];
            }
            if (c->slope_part) FN(add_slope_part)(c, b, h, i0, nq, j0, nk, s);
            if (dcap) FN(cap_grad)(nq * nk, s, dcap);
            if (want_k)
                FN(product)(c, true, (REAL)c->opt->scale, FN(tile)(s, nq, nk), FN(head_rows)(c, c->q, b, h, i0, nq), 1,
                            FN(head_rows)(c, c->dk, b, hk, j0, nk), causal_band(c, QUERY_TERMS, i0, j0));
            if (dq)
                FN(product)(c, false, (REAL)c->opt->scale, FN(tile)(s, nq, nk), FN(head_rows)(c, c->k, b, hk, j0, nk),
                            1, FN(head_rows)(c, dq, b, h, i0, nq), causal_band(c, KEY_TERMS, i0, j0));
        }
}

/* dK_j, dV_j (and dmask), one task = (batch, kv head, key block). */
static void FN(dkv_task)(void *arg, int64_t task, int worker) {
    const flash_ctx *c = arg;
    int64_t kb = task % c->nkb, bhk = task / c->nkb;
    FN(key_block)(c, bhk / c->hkv, bhk % c->hkv, kb * c->bk, (REAL *)c->scratch + (size_t)worker * c->per_worker, NULL);
}

/* Everything of one (batch, kv head) in a single pass over its tiles: used
 * when there are at least as many of those as threads. dQ_i receives its
 * key blocks in the same order, through the same calls, as in dq_task, so
 * both paths give the same bits. */
static void FN(fused_task)(void *arg, int64_t bhk, int worker) {
    const flash_ctx *c = arg;
    int64_t b = bhk / c->hkv, hk = bhk % c->hkv;
    for (int64_t h = hk * c->group; h < (hk + 1) * c->group; h++) FN(zero_rows)(c, c->dq, b, h, 0, c->L);
    for (int64_t j0 = 0; j0 < c->S; j0 += c->bk)
        FN(key_block)(c, b, hk, j0, (REAL *)c->scratch + (size_t)worker * c->per_worker, c->dq);
}

/* The single-pass backward of a lone (batch, kv head) in two parts, key
 * blocks [0, split) and [split, nkb), so that two threads share it: part 0
 * accumulates dQ in dquery, part 1 in dq_part, added afterwards (add_parts).
 * Chosen by shape alone, so the bits do not depend on the thread count. */
static void FN(part_task)(void *arg, int64_t part, int worker) {
    const flash_ctx *c = arg;
    attnc_tensor *dq = part == 0 ? c->dq : c->dq_part;
    for (int64_t h = 0; h < c->group; h++) FN(zero_rows)(c, dq, 0, h, 0, c->L);
    int64_t first = part == 0 ? 0 : c->split_kb, last = part == 0 ? c->split_kb : c->nkb;
    for (int64_t kb = first; kb < last; kb++)
        FN(key_block)(c, 0, 0, kb * c->bk, (REAL *)c->scratch + (size_t)worker * c->per_worker, dq);
}

static void FN(add_parts)(const flash_ctx *c) {
    for (int64_t h = 0; h < c->group; h++) {
        attnc_mat to = FN(head_rows)(c, c->dq, 0, h, 0, c->L);
        attnc_mat from = FN(head_rows)(c, c->dq_part, 0, h, 0, c->L);
        for (int64_t i = 0; i < c->L; i++)
            for (int64_t e = 0; e < c->e; e++)
                ((REAL *)to.p)[i * to.rs + e * to.cs] += ((const REAL *)from.p)[i * from.rs + e];
    }
}

/* dQ_i, one task = (batch, head, query block). */
static void FN(dq_task)(void *arg, int64_t task, int worker) {
    const flash_ctx *c = arg;
    int64_t qb = task % c->nqb, bh = task / c->nqb, b = bh / c->H, h = bh % c->H;
    int64_t i0 = qb * c->bq, nq = c->L - i0 < c->bq ? c->L - i0 : c->bq;
    REAL *s = (REAL *)c->scratch + (size_t)worker * c->per_worker, *dp = s + c->bq * c->bk;
    REAL *dcap = c->opt->softcap > 0 ? dp + c->bq * c->bk : NULL;
    FN(zero_rows)(c, c->dq, b, h, i0, nq);
    int64_t nk;
    for (int64_t j0 = key_begin(c, i0); (nk = tile_keys(c, i0, nq, j0)) > 0; j0 += c->bk) {
        if (!tile_live(c, b, h, i0, nq, j0, nk)) continue;
        FN(scores)(c, b, h, i0, nq, j0, nk, s, dcap);
        FN(probabilities)(c, (const REAL *)c->lse->data + bh * c->L + i0, nq, nk, nk, s);
        FN(score_grad)(c, b, h, i0, nq, j0, nk, s, dp);
        if (dcap) FN(cap_grad)(nq * nk, s, dcap);
        FN(product)(c, false, (REAL)c->opt->scale, FN(tile)(s, nq, nk), FN(head_rows)(c, c->k, b, h / c->group, j0, nk),
                    1, FN(head_rows)(c, c->dq, b, h, i0, nq), causal_band(c, KEY_TERMS, i0, j0));
    }
}

#undef DW_AT
#undef LANES
#include "../../core/real_end.h"
