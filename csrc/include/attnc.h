/*
 * attnc.h: the public C API of attnc.
 *
 * Conventions
 * - Every operation is a pair: attnc_<op>_forward and attnc_<op>_backward.
 *   Arguments: outputs first, then inputs, then options.
 * - Tensors are views (attnc_tensor): a data pointer, a dtype, a shape and
 *   strides counted in ELEMENTS (not bytes). Strides may be zero (broadcast)
 *   or negative. Float tensors that feed a matrix product must have a unit
 *   stride in one of their last two dims (BLAS layout); outputs and gradients
 *   must be C-contiguous. The Python binding guarantees both by copying
 *   explicitly when an input does not fit.
 * - "Batch" dims are the leading dims of query/keys/values, identical across
 *   them; masks and per-row parameters may broadcast over them with zero
 *   strides.
 * - Every function returns an attnc_status; on failure attnc_last_error()
 *   gives a message for the calling thread. No function prints, exits or
 *   aborts.
 * - Gradient outputs are overwritten (not accumulated into). A NULL data
 *   pointer in an optional tensor means "absent" / "not wanted".
 */
#ifndef ATTNC_H
#define ATTNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNC_MAX_DIMS 16

typedef enum {
    ATTNC_OK = 0,
    ATTNC_ERR_VALUE = 1, /* a bad shape or value: the Python ValueError   */
    ATTNC_ERR_TYPE = 2,  /* a bad dtype or missing argument: TypeError     */
    ATTNC_ERR_NOMEM = 3, /* an allocation failed: MemoryError              */
    ATTNC_ERR_LAYOUT = 4 /* strides a kernel cannot use: ValueError        */
} attnc_status;

typedef enum {
    ATTNC_FLOAT32 = 0,
    ATTNC_FLOAT64 = 1,
    ATTNC_BOOL = 2, /* one byte, 0 or 1 */
    ATTNC_INT64 = 3
} attnc_dtype;

typedef struct {
    void *data; /* NULL: absent                     */
    attnc_dtype dtype;
    int ndim;
    int64_t shape[ATTNC_MAX_DIMS];
    int64_t strides[ATTNC_MAX_DIMS]; /* in elements                      */
} attnc_tensor;

/* ---- core ------------------------------------------------------------ */

/* Message of the last failed call on this thread ("" if none). */
const char *attnc_last_error(void);

/* Threads used by attnc's parallel loops (and nothing else: OpenBLAS is kept
 * single-threaded inside attnc so the two never oversubscribe the cores).
 * n >= 1. Results do not depend on it. */
attnc_status attnc_set_num_threads(int n);
int attnc_get_num_threads(void);

/* Name of the BLAS attnc calls and its own configuration string. */
const char *attnc_blas_info(void);

/* Threads OpenBLAS runs inside attnc's calls (1: see attnc_set_num_threads). */
int attnc_blas_threads(void);

/* The SIMD path of this build ("baseline", "avx2" or "avx512") and the
 * paths this CPU runs, slowest first ("baseline avx2 avx512"): core/cpu.h. */
const char *attnc_simd_path(void);
const char *attnc_cpu_paths(void);

/* ---- masks ------------------------------------------------------------ */

/* Which keys a query may attend to: the logical AND of
 *   mask[..., i, j] != 0   (BOOL, shape (..., Tq, Tk), broadcast by strides),
 *   j < key_lengths[...]   (INT64, shape (...), broadcast by strides, >= 0),
 *   j <= i                 (when causal != 0).
 * Each part is optional (data == NULL). */
typedef struct {
    attnc_tensor mask;
    attnc_tensor key_lengths;
    int causal;
} attnc_mask;

/* ---- scores ----------------------------------------------------------- */

typedef enum {
    ATTNC_SCORE_DOT = 0,        /* q.k                                      */
    ATTNC_SCORE_SCALED_DOT = 1, /* q.k * scale                              */
    ATTNC_SCORE_GENERAL = 2,    /* q W k^T,             weight (dq, dk)     */
    ATTNC_SCORE_ADDITIVE = 3,   /* v^T tanh(q Wq + k Wk), w_query (dq, da),
                                   w_key (dk, da), v (da)                   */
    ATTNC_SCORE_COSINE = 4,     /* beta * q.k / max(|q||k|, 1e-8),
                                   beta (..., Tq) or beta_scalar            */
    ATTNC_SCORE_LOCATION = 5,   /* q W,                 weight (dq, Tk)     */
    ATTNC_SCORE_GAUSSIAN = 6    /* -|q - k|^2 / (2 bandwidth^2)             */
} attnc_score_kind;

#define ATTNC_COSINE_EPS 1e-8

typedef struct {
    attnc_score_kind kind;
    double scale;         /* scaled_dot                                   */
    double bandwidth;     /* gaussian, > 0                                */
    double beta_scalar;   /* cosine, used when beta.data == NULL          */
    attnc_tensor weight;  /* general, location                            */
    attnc_tensor w_query; /* additive                                     */
    attnc_tensor w_key;   /* additive                                     */
    attnc_tensor v;       /* additive                                     */
    attnc_tensor beta;    /* cosine, (..., Tq), may broadcast             */
    /* additive, optional: a contiguous buffer of at least B (Tq + Tk) da + da
     * elements of the call's dtype (B the batch count) for the projections
     * Q W_q, K W_k and v. A forward writes them there; a backward given the
     * same buffer with projections_ready = 1 reads them instead of
     * recomputing the two products (query, keys, w_query and w_key must be
     * unchanged in between). Absent: a scratch buffer of the call. */
    attnc_tensor projections;
    int projections_ready;
} attnc_score_params;

/* Gradients of the score parameters. Tensors are contiguous, shaped like the
 * parameter, except beta: its gradient is the full contiguous (..., Tq) array
 * (the caller sums it back over broadcast dims). Scalars are written through
 * the pointers. Any member may be absent / NULL. */
typedef struct {
    attnc_tensor weight, w_query, w_key, v, beta;
    double *scale;
    double *bandwidth;
} attnc_score_grads;

/* scores (..., Tq, Tk) <- query (..., Tq, dq), keys (..., Tk, dk). */
attnc_status attnc_score_forward(attnc_tensor *scores, const attnc_tensor *query, const attnc_tensor *keys,
                                 const attnc_score_params *params);
/* dquery, dkeys (like query, keys; either may be absent), param grads
 * <- dscores (..., Tq, Tk), query, keys. */
attnc_status attnc_score_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_score_grads *dparams,
                                  const attnc_tensor *dscores, const attnc_tensor *query, const attnc_tensor *keys,
                                  const attnc_score_params *params);

/* ---- masked softmax --------------------------------------------------- */

/* weights (..., Tq, Tk) <- scores (..., Tq, Tk) under mask. Allowed keys get
 * exp(s - max) / sum; the rest, and whole rows with nothing allowed (or only
 * -inf scores), get 0. In place (weights->data == scores->data) is allowed
 * when both are contiguous. */
attnc_status attnc_softmax_forward(attnc_tensor *weights, const attnc_tensor *scores, const attnc_mask *mask);
/* dscores <- dweights, weights (the forward's output). Zero where weights
 * is zero, so masked entries and rows get zero gradient. */
attnc_status attnc_softmax_backward(attnc_tensor *dscores, const attnc_tensor *dweights, const attnc_tensor *weights);

/* ---- soft attention --------------------------------------------------- */

/* context (..., Tq, dv), weights (..., Tq, Tk)
 *   <- query (..., Tq, dq), keys (..., Tk, dk), values (..., Tk, dv). */
attnc_status attnc_attention_forward(attnc_tensor *context, attnc_tensor *weights, const attnc_tensor *query,
                                     const attnc_tensor *keys, const attnc_tensor *values,
                                     const attnc_score_params *params, const attnc_mask *mask);
/* dquery, dkeys, dvalues, param grads <- dcontext (or absent), dweights (or
 * absent), the inputs and the forward's weights. */
attnc_status attnc_attention_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                      attnc_score_grads *dparams, const attnc_tensor *dcontext,
                                      const attnc_tensor *dweights, const attnc_tensor *query, const attnc_tensor *keys,
                                      const attnc_tensor *values, const attnc_tensor *weights,
                                      const attnc_score_params *params);

/* ---- hard attention --------------------------------------------------- */

typedef enum {
    ATTNC_HARD_ARGMAX = 0, /* the best allowed key (first NaN wins, as
                               numpy.argmax)                               */
    ATTNC_HARD_SAMPLE = 1, /* a draw from the masked softmax (Gumbel-max)  */
    ATTNC_HARD_GUMBEL = 2  /* Gumbel-max forward, straight-through backward
                               via softmax((s + g) / temperature)           */
} attnc_hard_mode;

typedef struct {
    attnc_hard_mode mode;
    double temperature; /* > 0, gumbel backward only                     */
    uint64_t seed;      /* noise g[b, i, j] is a pure function of
                            (seed, b, i, j): any thread count, same bits  */
} attnc_hard_options;

/* context (..., Tq, dv), weights (..., Tq, Tk) one-hot, indices (..., Tq)
 * INT64 (-1 for a row with no allowed key) <- query, keys, values. */
attnc_status attnc_hard_attention_forward(attnc_tensor *context, attnc_tensor *weights, attnc_tensor *indices,
                                          const attnc_tensor *query, const attnc_tensor *keys,
                                          const attnc_tensor *values, const attnc_score_params *params,
                                          const attnc_mask *mask, const attnc_hard_options *options);
/* dvalues = onehot^T dcontext in every mode; for GUMBEL also dquery, dkeys
 * and param grads through the relaxed softmax (zero for the other modes). */
attnc_status attnc_hard_attention_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                           attnc_score_grads *dparams, const attnc_tensor *dcontext,
                                           const attnc_tensor *dweights, const attnc_tensor *query,
                                           const attnc_tensor *keys, const attnc_tensor *values,
                                           const attnc_tensor *indices, const attnc_score_params *params,
                                           const attnc_mask *mask, const attnc_hard_options *options);

/* ---- local attention (Luong et al. 2015) ------------------------------ */

typedef enum {
    ATTNC_LOCAL_MONOTONIC = 0, /* local-m: p_t given (or t)              */
    ATTNC_LOCAL_PREDICTIVE = 1 /* local-p: p_t = S sigmoid(v_p^T tanh(q_t W_p)) */
} attnc_local_mode;

typedef struct {
    attnc_local_mode mode;
    double window;          /* D: keys with |s - p_t| <= D take part     */
    attnc_tensor positions; /* monotonic: (..., Tq) FLOAT, may broadcast;
                               absent: p_t = t                          */
    attnc_tensor w_p;       /* predictive: (dq, dp)                      */
    attnc_tensor v_p;       /* predictive: (dp)                          */
} attnc_local_options;

/* context (..., Tq, dv), weights (..., Tq, Tk), positions_out (..., Tq)
 * <- query, keys, values. For predictive, the windowed softmax is multiplied
 * by exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2, not renormalised. */
attnc_status attnc_local_attention_forward(attnc_tensor *context, attnc_tensor *weights, attnc_tensor *positions_out,
                                           const attnc_tensor *query, const attnc_tensor *keys,
                                           const attnc_tensor *values, const attnc_score_params *params,
                                           const attnc_mask *mask, const attnc_local_options *options);
/* dquery, dkeys, dvalues, param grads, dw_p, dv_p (predictive; absent
 * otherwise) <- dcontext, dweights, dpositions (predictive; each may be
 * absent), the inputs and the forward's weights and positions. The window
 * is a step function of p_t: positions given to local-m get no gradient. */
attnc_status attnc_local_attention_backward(attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                            attnc_score_grads *dparams, attnc_tensor *dw_p, attnc_tensor *dv_p,
                                            const attnc_tensor *dcontext, const attnc_tensor *dweights,
                                            const attnc_tensor *dpositions, const attnc_tensor *query,
                                            const attnc_tensor *keys, const attnc_tensor *values,
                                            const attnc_tensor *weights, const attnc_tensor *positions,
                                            const attnc_score_params *params, const attnc_mask *mask,
                                            const attnc_local_options *options);

/* ---- fused scaled-dot-product attention (FlashAttention-style) --------- */

/* How the scores become weights. */
typedef enum {
    ATTNC_SOFTMAX = 0, /* p_ij = exp(s_ij - lse_i), rows summing to 1      */
    ATTNC_SIGMOID = 1  /* p_ij = 1 / (1 + exp(-(s_ij + sigmoid_bias)))     */
} attnc_sdpa_activation;

/* Shapes: query (..., H, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev),
 * output (..., H, L, Ev); H a multiple of Hkv, query head h reads kv head
 * h / (H / Hkv) (grouped-query attention, nothing copied). The L x S matrix
 * is never stored: the kernel walks (Bq x Bk) tiles with an online softmax
 * and saves the log-sum-exp of every row (lse, (..., H, L)) for the backward,
 * which recomputes the tiles. Work is split into fixed blocks (batch x head x
 * query block forward and for dQ, batch x kv head x key block for dK/dV), so
 * results are bitwise identical for any thread count. */
typedef struct {
    /* Up to two masks, each BOOL (nonzero = takes part) or FLOAT (added to
     * the scores), broadcast by strides to (..., H, L, S); absent: unused. */
    attnc_tensor masks[2];
    int causal;            /* key j takes part only if j <= i + causal_offset */
    int64_t causal_offset; /* 0: top-left aligned; S - L: bottom-right      */
    double scale;          /* scores = scale * q.k                          */
    double dropout_p;      /* in [0, 1]; kept probabilities scaled by 1/(1-p) */
    uint64_t seed;         /* dropout keep[b,h,i,j] is a pure function of
                               (seed, b, h, i, j)                           */
    int average_heads;     /* forward: weights averaged over the H heads,
                               shape (..., L, S)                            */
    /* Options of today's models, applied tile by tile (zero: none). Query i
     * sits at key position i + causal_offset, as for causal. The score
     * s = scale * q.k becomes softcap * tanh(s / softcap) (softcap > 0),
     * then slope_h * (j - i - causal_offset) is added (alibi_slopes (H,)),
     * then the masks; with window, key j takes part only if
     * i + causal_offset - window_left <= j <= i + causal_offset + window_right
     * (a side of -1: unbounded), and the kernel skips the tiles outside.
     * sinks (H,): a logit per head joining each row's normaliser only,
     * p_ij = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij)). */
    attnc_tensor alibi_slopes; /* (H,) of the call's dtype, finite, or absent */
    int window;
    int64_t window_left, window_right;
    double softcap;
    attnc_tensor sinks; /* (H,) of the call's dtype, finite, or absent     */
    /* Block masks, each absent (or 0) for none; a key excluded by one takes
     * no part, as under a BOOL mask, and the kernel skips the tiles they
     * exclude wholly. query_segments (..., L) and key_segments (..., S),
     * INT64, both or neither: query i attends only keys j with
     * key_segments[j] == query_segments[i] (packed sequences; a tile is
     * skipped when its queries' and keys' id ranges do not overlap).
     * prefix_lengths (...,) INT64 >= 0, with causal only: the causal side
     * becomes j <= i + causal_offset or j < prefix_lengths[b] (a prefix LM;
     * the window's sides still apply). block_mask (..., H, ceil(L /
     * block_q), ceil(S / block_k)) BOOL: query i and key j take part only if
     * block_mask[i / block_q, j / block_k] (block_q, block_k > 0). */
    attnc_tensor query_segments, key_segments, prefix_lengths, block_mask;
    int64_t block_q, block_k;
    /* ATTNC_SIGMOID: p_ij = sigmoid(s_ij + sigmoid_bias) with no normaliser
     * (Ramapuram et al. 2024; excluded keys p = 0; not with sinks); lse is
     * then 0 (the backward reads no normaliser). */
    attnc_sdpa_activation activation;
    double sigmoid_bias;
} attnc_sdpa_options;

/* output (..., H, L, Ev), lse (..., H, L), weights (..., H, L, S), or
 * (..., L, S) with average_heads (optional: the softmax probabilities before
 * dropout) <- query, key, value. A row with
 * no key to attend to gets a zero output, zero weights and lse = -inf. */
attnc_status attnc_sdpa_forward(attnc_tensor *output, attnc_tensor *lse, attnc_tensor *weights,
                                const attnc_tensor *query, const attnc_tensor *key, const attnc_tensor *value,
                                const attnc_sdpa_options *options);
/* dquery, dkey, dvalue (each optional), dmask (optional: the gradient of a
 * FLOAT masks[0], as a full contiguous (..., H, L, S) array, zero-filled by
 * the caller), dsinks and dalibi_slopes (optional, (H,): the gradients of
 * options->sinks and ->alibi_slopes) <- doutput, dweights (optional: the cotangent of the returned
 * weights) and the forward's inputs, output and lse. */
attnc_status attnc_sdpa_backward(attnc_tensor *dquery, attnc_tensor *dkey, attnc_tensor *dvalue, attnc_tensor *dmask,
                                 attnc_tensor *dsinks, attnc_tensor *dalibi_slopes, const attnc_tensor *doutput,
                                 const attnc_tensor *dweights, const attnc_tensor *query, const attnc_tensor *key,
                                 const attnc_tensor *value, const attnc_tensor *output, const attnc_tensor *lse,
                                 const attnc_sdpa_options *options);

/* ---- nn: linear ------------------------------------------------------- */

/* y (N, out) <- x (N, in) W^T + b; weight (out, in), bias (out) optional.
 * Rows are split into fixed blocks, so results never depend on threads. */
attnc_status attnc_linear_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *weight,
                                  const attnc_tensor *bias);
/* dx (N, in), dweight (out, in), dbias (out) (each optional) <- dy (N, out),
 * x, weight. dweight and dbias are overwritten, not accumulated. */
attnc_status attnc_linear_backward(attnc_tensor *dx, attnc_tensor *dweight, attnc_tensor *dbias, const attnc_tensor *dy,
                                   const attnc_tensor *x, const attnc_tensor *weight);

/* ---- optim ------------------------------------------------------------------ */

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    int decoupled; /* AdamW: p *= 1 - lr weight_decay; else Adam's L2: g += weight_decay p */
    int64_t step;  /* t >= 1, this step's number (bias corrections 1 - beta^t) */
} attnc_adam_options;

/* One Adam (AdamW) step in place, as torch.optim.Adam(W): param, exp_avg (m)
 * and exp_avg_sq (v) updated from grad; four C-contiguous arrays of the same
 * dtype (float32 or float64) and element count, not overlapping. */
attnc_status attnc_adam_step(attnc_tensor *param, const attnc_tensor *grad, attnc_tensor *exp_avg,
                             attnc_tensor *exp_avg_sq, const attnc_adam_options *options);

/* ---- nn: layer norm, embedding, cross-entropy ---------------------------- */

/* y (N, D) <- (x - mean) / sqrt(var + eps) * weight + bias over each row of
 * x (N, D); weight, bias (D) optional. mean, rstd (N) are saved for the
 * backward (contiguous outputs). */
attnc_status attnc_layer_norm_forward(attnc_tensor *y, attnc_tensor *mean, attnc_tensor *rstd, const attnc_tensor *x,
                                      const attnc_tensor *weight, const attnc_tensor *bias, double eps);
/* dx (N, D), dweight, dbias (D) (each optional) <- dy, x, weight, mean, rstd. */
attnc_status attnc_layer_norm_backward(attnc_tensor *dx, attnc_tensor *dweight, attnc_tensor *dbias,
                                       const attnc_tensor *dy, const attnc_tensor *x, const attnc_tensor *weight,
                                       const attnc_tensor *mean, const attnc_tensor *rstd);

/* y (N, D) <- weight[ids] * scale; ids (N) INT64 in [0, V), weight (V, D).
 * torch's max_norm: a row whose norm_type-norm (p > 0, or INFINITY for the
 * max) exceeds max_norm >= 0 is looked up times max_norm / (norm + 1e-7);
 * max_norm = INFINITY: rows as they are. weight is not modified (torch
 * renormalises its rows in place: a caller that owns the table may write
 * the looked-up rows back). */
attnc_status attnc_embedding_forward(attnc_tensor *y, const attnc_tensor *ids, const attnc_tensor *weight, double scale,
                                     double max_norm, double norm_type);
/* dweight (V, D) <- the sum of scale * dy rows over the tokens of each id;
 * the row of padding_idx (if >= 0) gets zero. */
attnc_status attnc_embedding_backward(attnc_tensor *dweight, const attnc_tensor *dy, const attnc_tensor *ids,
                                      double scale, int64_t padding_idx);

/* Cross-entropy of logits (N, C), as torch's cross_entropy before its
 * reduction: loss_n = sum_c q_nc w_c (lse_n - x_nc), q_n row n's target
 * after label smoothing eps, (1 - eps) target + eps / C. Targets are class
 * ids (N) INT64 (target one-hot; each in [0, C) or ignore_index, whose rows
 * count for nothing: loss 0) or class probabilities (N, C) of the logits'
 * dtype. w: per-class weights (C), or 1 when absent. A term whose
 * coefficient q_nc w_c is 0 is absent (a -inf logit that is not a target
 * adds nothing, not NaN). */
typedef struct {
    attnc_tensor weight;    /* (C), optional                      */
    double label_smoothing; /* eps in [0, 1]                      */
    int64_t ignore_index;   /* class-id targets only              */
} attnc_cross_entropy_options;

/* losses (N), logsumexp (N) (saved for the backward) <- logits, targets. */
attnc_status attnc_cross_entropy_forward(attnc_tensor *losses, attnc_tensor *logsumexp, const attnc_tensor *logits,
                                         const attnc_tensor *targets, const attnc_cross_entropy_options *options);
/* y (N, C) <- log_softmax of each row of x (N, C) (a row of only -inf gives
 * -inf, not NaN). */
attnc_status attnc_log_softmax_forward(attnc_tensor *y, const attnc_tensor *x);
/* dx (N, C) <- dy - exp(y) * rowsum(dy), y the forward's output. */
attnc_status attnc_log_softmax_backward(attnc_tensor *dx, const attnc_tensor *dy, const attnc_tensor *y);

/* dlogits (N, C), dtargets (N, C) (optional, probability targets only),
 * dweight (C) (optional, with a weight; summed over the rows in order)
 * <- dlosses (N), logits, targets, logsumexp. */
attnc_status attnc_cross_entropy_backward(attnc_tensor *dlogits, attnc_tensor *dtargets, attnc_tensor *dweight,
                                          const attnc_tensor *dlosses, const attnc_tensor *logits,
                                          const attnc_tensor *targets, const attnc_tensor *logsumexp,
                                          const attnc_cross_entropy_options *options);

/* ---- nn: activation, dropout and residual in one pass ------------------ */

/* GELU is torch's gelu(approximate="none"), x Phi(x) with erf; GELU_TANH is
 * approximate="tanh", x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2. */
typedef enum { ATTNC_ACT_NONE = 0, ATTNC_ACT_RELU = 1, ATTNC_ACT_GELU = 2, ATTNC_ACT_GELU_TANH = 3 } attnc_activation;

/* y <- residual (optional) + dropout(act(x)); all contiguous, any shape, the
 * same element count. Dropout keeps element k when Philox word k of
 * (seed, stream) is >= dropout * 2^32 and scales it by 1 / (1 - dropout). */
attnc_status attnc_pointwise_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *residual,
                                     attnc_activation act, double dropout, uint64_t seed, uint64_t stream);
/* dx <- act'(x) * dropout(dy) with the forward's mask (x may be absent for
 * ATTNC_ACT_NONE). The residual's gradient is dy itself. */
attnc_status attnc_pointwise_backward(attnc_tensor *dx, const attnc_tensor *dy, const attnc_tensor *x,
                                      attnc_activation act, double dropout, uint64_t seed, uint64_t stream);

/* ---- transformer layers (Vaswani et al. 2017) ---------------------------- */

/* Multi-head attention parameters, torch's layout: in_weight (E + 2 E_kv, E)
 * stacks the query, key and value projections (E_kv = E unless the layer's
 * config has fewer kv_heads); in_bias (E + 2 E_kv), out_bias (E) optional;
 * out_weight (E, E); sinks (H) optional: a learned logit per head joining
 * each row's softmax normaliser (attnc_sdpa_options' sinks; gpt-oss). */
typedef struct {
    attnc_tensor in_weight, in_bias, out_weight, out_bias, sinks;
} attnc_mha_params;

/* Layer norm parameters: weight and bias (E), each optional. */
typedef struct {
    attnc_tensor weight, bias;
} attnc_norm_params;

/* One layer. An encoder layer has no cross-attention (cross_attn.in_weight
 * absent); a decoder layer has one, reading the encoder's output (memory).
 * Sublayers run in the order self-attention, cross-attention, feed-forward
 * (linear1 (F, E), linear2 (E, F); biases (F), (E) optional), each with its
 * own norm (torch: encoder norm1, norm2; decoder norm1, norm2, norm3). */
typedef struct {
    attnc_mha_params self_attn, cross_attn;
    attnc_tensor linear1_weight, linear1_bias, linear2_weight, linear2_bias;
    attnc_norm_params norm_self, norm_cross, norm_ff;
} attnc_layer_params;

typedef struct {
    int64_t nhead;
    attnc_activation activation; /* of the feed-forward block: RELU, GELU or GELU_TANH */
    double eps;                  /* layer norm epsilon                         */
    int norm_first;              /* pre-norm: x + f(norm(x)); post-norm (the paper's):
                                    norm(x + f(x))                             */
    double dropout;              /* on attention probabilities, the feed-forward
                                    hidden layer and every residual branch     */
    uint64_t seed;               /* dropout masks are pure functions of seed   */
    int64_t kv_heads;            /* key and value heads of both attentions (grouped-
                                    query attention; 1: multi-query), dividing
                                    nhead; 0: nhead. E_kv = kv_heads E / nhead */
    int64_t rotary_dim;          /* RoPE on the self-attention's queries and keys:
                                    the leading features of each head that turn
                                    (even, <= E / nhead; 0: none), at positions
                                    0 .. L - 1 (decoding: the token's position) */
    double rope_base;            /* > 0 when rotary_dim is                     */
    int rope_interleaved;        /* pairs (2i, 2i + 1), else (i, i + rotary_dim / 2) */
    /* The self-attention's options of today's models, as attnc_sdpa_options
     * takes them, with query i at position i (decoding: the token's absolute
     * position, so ALiBi's distance and the window count from it):
     * alibi_slopes (nhead) of the layer's dtype or absent; with window, key j
     * takes part only if i - window_left <= j <= i + window_right (-1:
     * unbounded); softcap > 0 caps the scores (0: off). */
    attnc_tensor alibi_slopes;
    int window;
    int64_t window_left, window_right;
    double softcap;
    /* How every attention of the layer turns scores into weights
     * (attnc_sdpa_options' activation): ATTNC_SIGMOID with the bias
     * sigmoid_bias when sigmoid_bias_set, else -log of the attention's key
     * count (self: L, cross: S; 0 without keys). Cached decoding needs the
     * bias set: -log of the whole length would make a position's output
     * depend on how many come after it. */
    attnc_sdpa_activation attention;
    int sigmoid_bias_set;
    double sigmoid_bias;
} attnc_layer_config;

/* Which keys each query sees in one attention sublayer, as in
 * attnc_sdpa_options: up to two masks (BOOL nonzero = takes part, or FLOAT
 * added), broadcast by strides to (B, H, L, S), and a causal flag. */
typedef struct {
    attnc_tensor masks[2];
    int causal;
    /* The block masks, as attnc_sdpa_options takes them (absent or 0: none):
     * query_segments (B, L) and key_segments (B, S) INT64, both or neither;
     * prefix_lengths (B) INT64 >= 0 with causal; block_mask (B or 1, H or 1,
     * ceil(L / block_q), ceil(S / block_k)) BOOL. */
    attnc_tensor query_segments, key_segments, prefix_lengths, block_mask;
    int64_t block_q, block_k;
} attnc_attn_masks;

/* Elements of the `saved` buffer a layer's forward fills for its backward:
 * x (B, L, E), memory (B, S, E) (S = 0 for an encoder layer), F, H. */
int64_t attnc_layer_saved_size(int64_t B, int64_t L, int64_t S, int64_t E, int64_t F, int64_t H, int decoder);

/* out (B, L, E), weights_self (B, H, L, L), weights_cross (B, H, L, S)
 * (optional: softmax probabilities before dropout), saved (optional, 1-D,
 * attnc_layer_saved_size elements: what the backward needs)
 * <- x (B, L, E), memory (B, S, E) (decoder layers). */
attnc_status attnc_layer_forward(attnc_tensor *out, attnc_tensor *weights_self, attnc_tensor *weights_cross,
                                 attnc_tensor *saved, const attnc_tensor *x, const attnc_tensor *memory,
                                 const attnc_layer_params *params, const attnc_layer_config *config,
                                 const attnc_attn_masks *self_masks, const attnc_attn_masks *cross_masks);
/* Elements of the backward's scratch buffer. */
int64_t attnc_layer_scratch_size(int64_t B, int64_t L, int64_t S, int64_t E, int64_t F, int decoder);

/* dx (B, L, E), dmemory (B, S, E), dweights_self (B, H, L, L) (optional:
 * the gradient with respect to the self-attention probabilities, for
 * attribution; dropout must be 0), grads (each present member: the gradient
 * of that parameter, contiguous, overwritten) <- dout (B, L, E), the
 * forward's saved buffer and its inputs. scratch (optional, 1-D,
 * attnc_layer_scratch_size elements) is working memory; absent, the call
 * allocates its own. */
attnc_status attnc_layer_backward(attnc_tensor *dx, attnc_tensor *dmemory, attnc_tensor *dweights_self,
                                  attnc_layer_params *grads, attnc_tensor *scratch, const attnc_tensor *dout,
                                  const attnc_tensor *saved, const attnc_tensor *x, const attnc_tensor *memory,
                                  const attnc_layer_params *params, const attnc_layer_config *config,
                                  const attnc_attn_masks *self_masks, const attnc_attn_masks *cross_masks);

/* ---- transformer decoding: greedy and beam search ------------------------- */

/* A decoder for generation: token embedding (V, E) times embed_scale plus
 * positions (P, E) (a sinusoidal table or learned embeddings), the layers
 * (decoder layers reading memory, or encoder-style layers for a decoder-only
 * model; self-attention is causal either way), an optional final norm, and
 * the output projection out_weight (Vout, E), out_bias (Vout) optional. */
typedef struct {
    const attnc_layer_params *layers;
    int64_t nlayers;
    attnc_layer_config config; /* dropout and seed are ignored: decoding is eval */
    attnc_tensor embedding, positions;
    double embed_scale;
    attnc_norm_params final_norm;
    attnc_tensor out_weight, out_bias;
} attnc_decoder;

typedef struct {
    int64_t max_new_tokens;
    int64_t eos;           /* end token, or -1 for none                        */
    int64_t beam_size;     /* 1: greedy (lowest id on ties)                      */
    double length_penalty; /* beam: finished score = sum(log p) / length^alpha  */
} attnc_decode_options;

/* tokens (B, max_new_tokens) INT64 (after a row's end token: the end token,
 * or 0 without one), lengths (B) INT64 <- prompt (B, P) INT64 (P >= 1: the
 * start token, or a decoder-only model's prompt), memory (B, S, E) and
 * memory_mask (B, S) BOOL (nonzero = takes part; optional) for decoder
 * layers. Self-attention keys and values are cached, cross-attention keys
 * and values computed once. Beam search: each step extends every live
 * hypothesis by every token; one ending in eos is finished (score
 * sum(log p) / length^alpha) and takes no beam slot; the beam_size best
 * others by sum(log p) stay live (ties: earlier hypothesis, lower token); a
 * row stops when no live hypothesis can beat its best finished one. */
attnc_status attnc_decode(attnc_tensor *tokens, attnc_tensor *lengths, const attnc_decoder *decoder,
                          const attnc_tensor *prompt, const attnc_tensor *memory, const attnc_tensor *memory_mask,
                          const attnc_decode_options *options);

/* ---- recurrent layers: LSTM and GRU over whole sequences ----------------- */

typedef enum { ATTNC_LSTM = 0, ATTNC_GRU = 1 } attnc_rnn_mode;

/* One layer and direction, torch's layout: weight_ih (G H, in), weight_hh
 * (G H, H), biases (G H) optional; G = 4 gates i, f, g, o (LSTM) or 3 gates
 * r, z, n (GRU). */
typedef struct {
    attnc_tensor weight_ih, weight_hh, bias_ih, bias_hh;
} attnc_rnn_weights;

typedef struct {
    attnc_rnn_mode mode;
    int64_t hidden_size, num_layers; /* num_layers <= 64                    */
    int bidirectional;
    double dropout; /* on each layer's output but the last */
    uint64_t seed;
} attnc_rnn_config;

/* Elements of the saved buffer for input (B, T, input_size); -1 for a bad config. */
int64_t attnc_rnn_saved_size(const attnc_rnn_config *config, int64_t B, int64_t T, int64_t input_size);

/* output (B, T, D H) (0 at padded steps), h_n, c_n (L D, B, H) (c_n: LSTM;
 * each optional), saved (optional, 1-D) <- input (B, T, I), lengths (B)
 * INT64 in [1, T] (optional; padding is never read), h0, c0 (L D, B, H)
 * (optional: zeros), weights[l D + d] (d = 1: the reverse direction; nweights
 * = L D of them). */
attnc_status attnc_rnn_forward(attnc_tensor *output, attnc_tensor *h_n, attnc_tensor *c_n, attnc_tensor *saved,
                               const attnc_tensor *input, const attnc_tensor *lengths, const attnc_tensor *h0,
                               const attnc_tensor *c0, const attnc_rnn_weights *weights, int64_t nweights,
                               const attnc_rnn_config *config);
/* dinput, dh0, dc0, grads[l D + d] (ngrads = L D; each member optional,
 * overwritten) <- doutput, dh_n, dc_n (each optional: zeros), the forward's
 * saved buffer and inputs. */
attnc_status attnc_rnn_backward(attnc_tensor *dinput, attnc_tensor *dh0, attnc_tensor *dc0, attnc_rnn_weights *grads,
                                int64_t ngrads, const attnc_tensor *doutput, const attnc_tensor *dh_n,
                                const attnc_tensor *dc_n, const attnc_tensor *saved, const attnc_tensor *input,
                                const attnc_tensor *lengths, const attnc_tensor *h0, const attnc_tensor *c0,
                                const attnc_rnn_weights *weights, int64_t nweights, const attnc_rnn_config *config);

/* ---- recurrent attention decoder (attnc.models.Seq2Seq) ------------------ */

/* The decoder of an RNN encoder-decoder: an LSTM cell whose steps attend over
 * the encoder's output (Bahdanau et al. 2015; Luong et al. 2015). Sizes: B
 * rows, S source steps, T target steps, He encoder width, H hidden size, E
 * embedding size, Vt target vocabulary, A attention size. */
typedef enum {
    ATTNC_S2S_NONE = 0,     /* feed the encoder's final state at every step          */
    ATTNC_S2S_BAHDANAU = 1, /* additive score on h_{t-1}, context fed with the input  */
    ATTNC_S2S_DOT = 2,      /* Luong: scores on h_t, then h~ = tanh(Wc [ctx; h])      */
    ATTNC_S2S_GENERAL = 3,
    ATTNC_S2S_CONCAT = 4,
    ATTNC_S2S_LOCATION = 5,
    ATTNC_S2S_LOCAL_M = 6, /* general score in a window around p_t = t                */
    ATTNC_S2S_LOCAL_P = 7  /* ... around a predicted p_t, times a Gaussian            */
} attnc_s2s_attention;

/* Weights (torch layouts, (out, in)); absent when the kind has no use for
 * them. Fin = He (none, bahdanau), H (Luong kinds) or 0 (Luong kinds without
 * input feeding). */
typedef struct {
    attnc_tensor embedding;                              /* (Vt, E)                     */
    attnc_tensor weight_ih, weight_hh, bias_ih, bias_hh; /* (4H, E+Fin), (4H, H), (4H) */
    attnc_tensor bridge_weight, bridge_bias;             /* (H, He), (H): h_{-1}       */
    attnc_tensor query_weight, key_weight, v;            /* additive: (A, H), (A, He), (A) */
    attnc_tensor weight, bias;                           /* general, local: (H, He);
                                                         location: (Smax, H), (Smax)  */
    attnc_tensor position_weight, position_v;            /* local-p: (A, H), (A)        */
    attnc_tensor combine;                                /* Luong: (H, He + H)          */
    attnc_tensor out_weight, out_bias;                   /* (Vt, F), (Vt): sampling and
                                                         generation only             */
} attnc_s2s_weights;

typedef struct {
    attnc_s2s_attention attention;
    double window;     /* local kinds: D                                           */
    double sampling;   /* scheduled sampling: probability of feeding the argmax     */
    uint64_t seed;     /* of the sampling decisions                                */
    int input_feeding; /* Luong kinds: 1 feeds h~_{t-1} with the input (Fin = H);
                          0 (Luong's "without input feeding") feeds nothing (Fin =
                          0, weight_ih (4H, E)); ignored by none and bahdanau       */
} attnc_s2s_config;

/* Elements (of the float dtype) of the forward's saved buffer; -1 if the
 * weights do not describe a decoder. */
int64_t attnc_s2s_saved_size(const attnc_s2s_config *config, const attnc_s2s_weights *weights, int64_t B, int64_t S,
                             int64_t T);
/* features (B, T, F) (F = H none, H + He bahdanau, H Luong), alignments
 * (B, T, S) (optional), fed (B, T) int64 (the tokens fed: tgt_in, or argmax
 * under scheduled sampling), saved <- memory (B, S, He) (0 past each row's
 * length), final (B, He), lengths (B) int64 in [1, S], tgt_in (B, T) int64. */
attnc_status attnc_s2s_forward(attnc_tensor *features, attnc_tensor *alignments, attnc_tensor *fed, attnc_tensor *saved,
                               const attnc_tensor *memory, const attnc_tensor *final, const attnc_tensor *lengths,
                               const attnc_tensor *tgt_in, const attnc_s2s_weights *weights,
                               const attnc_s2s_config *config);
/* dmemory, dfinal, grads (each optional, overwritten; out_weight and
 * out_bias are not touched) <- dfeatures (B, T, F), the forward's saved
 * buffer, fed and inputs. */
attnc_status attnc_s2s_backward(attnc_tensor *dmemory, attnc_tensor *dfinal, attnc_s2s_weights *grads,
                                const attnc_tensor *dfeatures, const attnc_tensor *saved, const attnc_tensor *fed,
                                const attnc_tensor *memory, const attnc_tensor *final, const attnc_tensor *lengths,
                                const attnc_s2s_weights *weights, const attnc_s2s_config *config);
/* Greedy (beam 1) or beam search from bos: tokens (B, Tmax) int64 (eos, or 0
 * without one, after a row ends), lengths (B) int64, alignments (B, Tmax, S)
 * (optional) <- memory, final, lengths as above. Beam hypotheses are scored by
 * sum(log p) / length ** length_penalty; eos < 0: none. */
attnc_status attnc_s2s_generate(attnc_tensor *tokens, attnc_tensor *out_lengths, attnc_tensor *alignments,
                                const attnc_tensor *memory, const attnc_tensor *final, const attnc_tensor *lengths,
                                const attnc_s2s_weights *weights, const attnc_s2s_config *config, int64_t bos,
                                int64_t eos, int64_t beam, double length_penalty);

/* ---- LSTMN: long short-term memory-network (Cheng, Dong & Lapata 2016) --- */

/* An LSTM whose single memory cell is replaced by a tape of every previous
 * hidden state h_1..h_{t-1} and cell c_1..c_{t-1}, read by intra-attention.
 * Sizes: B rows, T steps, I inputs, H hidden units, A attention units. Step
 * t of a row (0-based; at t = 0 the tape is empty: h~_0 = c~_0 = 0 and the
 * attention row is all zero):
 *
 *   a_i = v . tanh(W_h h_i + W_x x_t + W_h~ h~_{t-1})          i < t
 *   s = softmax(a) over i < t
 *   h~_t = sum_i s_i h_i,  c~_t = sum_i s_i c_i
 *   (i, f, g, o) = (sig, sig, tanh, sig)(W_ih x_t + W_hh h~_t + b)   (torch's gate order)
 *   c_t = f c~_t + i g,  h_t = o tanh(c_t)
 *
 * Steps at or past a row's length give zeros (output, attention) and never
 * read the tape of other rows; padded inputs are only multiplied by zero
 * cotangents (keep them finite). Every tensor of a call has one dtype
 * (float32 or float64) and is C-contiguous. Results do not depend on the
 * thread count. */
typedef struct {
    attnc_tensor weight_ih;  /* (4H, I)                          */
    attnc_tensor weight_hh;  /* (4H, H), acting on h~_t          */
    attnc_tensor bias;       /* (4H), optional (absent: no bias) */
    attnc_tensor attn_h;     /* W_h (A, H)                       */
    attnc_tensor attn_x;     /* W_x (A, I)                       */
    attnc_tensor attn_tilde; /* W_h~ (A, H)                      */
    attnc_tensor attn_v;     /* v (A)                            */
} attnc_lstmn_params;

/* Elements of the buffer a forward saves for its backward: B T (9H + 2A + T). */
int64_t attnc_lstmn_saved_size(int64_t B, int64_t T, int64_t H, int64_t A);

/* output (B, T, H), attention (B, T, T) (optional: row t holds s over the
 * positions < t), saved (optional, attnc_lstmn_saved_size) <- input (B, T,
 * I), lengths (B) INT64 in [0, T] (optional: all T). */
attnc_status attnc_lstmn_forward(attnc_tensor *output, attnc_tensor *attention, attnc_tensor *saved,
                                 const attnc_tensor *input, const attnc_tensor *lengths,
                                 const attnc_lstmn_params *params);

/* grads (every parameter's gradient, overwritten; bias exactly when the
 * parameters have one), dinput (B, T, I) (optional) <- doutput (B, T, H),
 * the forward's saved buffer, its input and lengths. */
attnc_status attnc_lstmn_backward(attnc_lstmn_params *grads, attnc_tensor *dinput, const attnc_tensor *doutput,
                                  const attnc_tensor *saved, const attnc_tensor *input, const attnc_tensor *lengths,
                                  const attnc_lstmn_params *params);
/* ---- pooling: attention pooling (Raffel & Ellis 2015; Yang et al. 2016) -- */

/* u_t = tanh(W h_t + b), e_t = v . u_t, alpha = softmax over the positions
 * that take part (mask True; no mask: all), c = sum_t alpha_t h_t. A row
 * with no position taking part gets alpha = 0 and c = 0.
 * c (B, d), alpha (B, T), saved <- u (B, T, A) <- h (B, T, d),
 * weight (A, d), bias (A) (optional), v (A), mask (B, T) bool (optional).
 * Every array C-contiguous, one float dtype. */
attnc_status attnc_attention_pool_forward(attnc_tensor *c, attnc_tensor *alpha, attnc_tensor *saved,
                                          const attnc_tensor *h, const attnc_tensor *weight, const attnc_tensor *bias,
                                          const attnc_tensor *v, const attnc_tensor *mask);
/* dh (B, T, d), dweight (A, d), dbias (A), dv (A) (each optional,
 * overwritten) <- dc (B, d), dalpha (B, T) (optional: the cotangent of the
 * weights), h, weight, v, and the forward's alpha and saved. */
attnc_status attnc_attention_pool_backward(attnc_tensor *dh, attnc_tensor *dweight, attnc_tensor *dbias,
                                           attnc_tensor *dv, const attnc_tensor *dc, const attnc_tensor *dalpha,
                                           const attnc_tensor *h, const attnc_tensor *weight, const attnc_tensor *v,
                                           const attnc_tensor *alpha, const attnc_tensor *saved);
/* ---- conv: 2-d convolution (torch's conv2d) ------------------------------ */

/* y (B, Cout, Ho, Wo) <- x (B, Cin, H, W) cross-correlated with weight
 * (Cout, Cin / G, kH, kW), plus bias (Cout, optional), in G = groups groups
 * (Cin and Cout divisible by G; output channel o reads the input channels of
 * its group, g = o / (Cout / G)):
 *   y[b, o, r, c] = bias[o] + sum_{i, kh, kw} weight[o, i, kh, kw]
 *                   * x[b, g Cin / G + i, r sh - pt + kh dh, c sw - pl + kw dw]   (0 outside x),
 * stride = (sh, sw) >= 1, dilation = (dh, dw) >= 1, padding = (top, bottom,
 * left, right) >= 0 (asymmetric padding is how "same" with an even kernel and
 * a causal 1-d convolution are made), Ho = (H + top + bottom - dh (kH - 1)
 * - 1) / sh + 1 and likewise Wo. Every tensor C-contiguous. A 1-d
 * convolution is H = kH = 1. */
attnc_status attnc_conv2d_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *weight,
                                  const attnc_tensor *bias, const int64_t stride[2], const int64_t padding[4],
                                  const int64_t dilation[2], int64_t groups);
/* dx (B, Cin, H, W), dweight (Cout, Cin / G, kH, kW), dbias (Cout) (each
 * optional, overwritten) <- dy (B, Cout, Ho, Wo), x, weight and the
 * forward's options. The weight and bias gradients are summed over the batch
 * in batch order (the same bits for any thread count). */
attnc_status attnc_conv2d_backward(attnc_tensor *dx, attnc_tensor *dweight, attnc_tensor *dbias, const attnc_tensor *dy,
                                   const attnc_tensor *x, const attnc_tensor *weight, const int64_t stride[2],
                                   const int64_t padding[4], const int64_t dilation[2], int64_t groups);

/* ---- gated activation (WaveNet, SNAIL's dense blocks) ----------------------- */

/* y <- tanh(a) * sigmoid(b), element-wise; a (the input), b (the gate) and y
 * C-contiguous, the same dtype and element count (any shape). */
attnc_status attnc_gated_forward(attnc_tensor *y, const attnc_tensor *a, const attnc_tensor *b);
/* da <- dy (1 - tanh(a)^2) sigmoid(b), db <- dy tanh(a) sigmoid(b) (1 - sigmoid(b))
 * (each optional, overwritten; all C-contiguous of a's element count). */
attnc_status attnc_gated_backward(attnc_tensor *da, attnc_tensor *db, const attnc_tensor *dy, const attnc_tensor *a,
                                  const attnc_tensor *b);

/* ---- rotary position embeddings (RoPE; Su et al. 2021) -------------------- */

/* y (..., L, D) <- x (..., L, D) (any strides) with its first rotary_dim
 * features (even, <= D) turned in pairs: pair i by the angle
 * positions[..., l] * base^(-2i / rotary_dim). Pairs are (2i, 2i + 1) when
 * interleaved (RoFormer, GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX,
 * Llama); the other features are copied. positions (..., L) float64, finite,
 * each leading dim x's or 1; y C-contiguous. Angles are computed in double. */
attnc_status attnc_rotary_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *positions, double base,
                                  int64_t rotary_dim, int interleaved);
/* dx <- dy turned back (the opposite angles): the forward's transpose. */
attnc_status attnc_rotary_backward(attnc_tensor *dx, const attnc_tensor *dy, const attnc_tensor *positions, double base,
                                   int64_t rotary_dim, int interleaved);

/* ---- attribution: attention rollout and flow (Abnar & Zuidema 2020),
 * relevance (Chefer, Gur & Wolf 2021) ------------------------------------- */

/* How the heads of a layer are fused: their mean (the paper's), max or min. */
typedef enum { ATTNC_HEADS_MEAN = 0, ATTNC_HEADS_MAX = 1, ATTNC_HEADS_MIN = 2 } attnc_head_fusion;

/* Every layer's mixed matrix A_l = normalise_rows((1 - residual) fuse_h(W_l)
 * + residual I) (a row summing to 0 stays 0), and rollout (B, L, L) <- the
 * product A_N ... A_1 (I when N = 0) of weights (N, B, H, L, L): N layers,
 * first layer first, each (B, H, L, L) of non-negative finite values;
 * residual in [0, 1]. Row: output position, column: input token. */
attnc_status attnc_attention_rollout(attnc_tensor *rollout, const attnc_tensor *weights, attnc_head_fusion fusion,
                                     double residual);
/* flow (B, L, L) <- for every output position i and input token j, the
 * value of the maximum flow from node i of layer N to node j of layer 0 in
 * the layered graph whose edges run from node p of layer l to node q of
 * layer l - 1 with capacity A_l[p, q] (the A of attnc_attention_rollout).
 * Refused (ATTNC_ERR_VALUE) when B N L^4 exceeds ATTNC_FLOW_MAX_WORK. */
#define ATTNC_FLOW_MAX_WORK ((double)((int64_t)1 << 33))
attnc_status attnc_attention_flow(attnc_tensor *flow, const attnc_tensor *weights, attnc_head_fusion fusion,
                                  double residual);
/* relevance (B, L, L) <- R, where R = I and, for each layer l = 1..N in
 * order, R <- R + mean_h(max(G_l * W_l, 0)) R; weights W and grads G (N, B,
 * H, L, L) finite: the attention probabilities and the gradient of a score
 * with respect to them. */
attnc_status attnc_attention_relevance(attnc_tensor *relevance, const attnc_tensor *weights, const attnc_tensor *grads);

/* ---- linear attention (Katharopoulos et al. 2020) and Performer's FAVOR+
 * (Choromanski et al. 2021) ------------------------------------------------ */

/* The feature map phi: elu(x) + 1 element-wise (F = E features), or FAVOR+'s
 * positive random features phi(x) = exp(w_m . x' - |x'|^2 / 2) / sqrt(M),
 * x' = x E^-1/4, m < M, the w_m the rows of a projection (M, E) (F = M). */
typedef enum { ATTNC_FEATURES_ELU = 0, ATTNC_FEATURES_FAVOR = 1 } attnc_feature_map;

typedef struct {
    attnc_feature_map feature_map;
    attnc_tensor projection;       /* favor+ only: (M, E), C-contiguous     */
    attnc_tensor key_padding_mask; /* optional (B, S) bool: true = ignored  */
    int causal;                    /* L == S; query i sums keys j <= i      */
    double eps;                    /* >= 0, added to every denominator      */
} attnc_linear_options;

/* A causal call's running sums over the keys seen so far (recurrent
 * decoding), each C-contiguous: kv (B, H, F, Ev) = sum_j phi(k_j) v_j^T and
 * k (B, H, F) = sum_j phi(k_j), both times exp(-max); max (B, H) the
 * FAVOR+ stabiliser (the largest exponent seen; -inf before any key; 0 and
 * unused for elu). Read before the call, overwritten with the sums that
 * include the call's keys. */
typedef struct {
    attnc_tensor kv, k, max;
} attnc_linear_state;

/* out (B, H, L, Ev) <- query (B, H, L, E), key (B, H, S, E), value (B, H,
 * S, Ev) (any strides):
 *     out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps),
 * j over the keys not padded (and j <= i when causal); a row whose
 * denominator is 0 gives zeros. FAVOR+ computes its features stabilised
 * (each query row divided by its largest feature, the keys by the largest
 * over the keys summed so far: the running maximum when causal), which
 * cancels in the ratio: eps is added in the unstabilised scale. state
 * (optional, causal only) carries the sums from an earlier call. */
attnc_status attnc_linear_attention_forward(attnc_tensor *out, attnc_linear_state *state, const attnc_tensor *query,
                                            const attnc_tensor *key, const attnc_tensor *value,
                                            const attnc_linear_options *options);
/* dquery (B, H, L, E), dkey (B, H, S, E), dvalue (B, H, S, Ev) and, for
 * favor+, dprojection (M, E) (each optional, C-contiguous, overwritten) <-
 * dout (B, H, L, Ev) and the forward's inputs (recomputed, in O((L + S) F
 * (E + Ev)); the causal form by a forward and a reverse running sum, never
 * an L x S matrix). The stabilisers are constants of the gradient: the
 * output does not depend on them. */
attnc_status attnc_linear_attention_backward(attnc_tensor *dquery, attnc_tensor *dkey, attnc_tensor *dvalue,
                                             attnc_tensor *dprojection, const attnc_tensor *dout,
                                             const attnc_tensor *query, const attnc_tensor *key,
                                             const attnc_tensor *value, const attnc_linear_options *options);

#ifdef __cplusplus
}
#endif
#endif /* ATTNC_H */
