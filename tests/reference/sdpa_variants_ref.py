"""Plain NumPy float64 reference for the options of today's models in
attnc.scaled_dot_product_attention (ALiBi, sliding windows, soft-capping,
attention sinks), written from issue 30's definitions, independently of attnc.

It materialises the full (..., H, L, S) score matrix. Conventions:
  query (..., H, L, E), key/value (..., Hkv, S, E/Ev), H a multiple of Hkv.
  s = scale * q.k; softcap c: s <- c tanh(s / c); alibi_slopes (H,):
  s += slope_h (j - i); then attn_mask (bool: True = takes part, float: added);
  is_causal: j <= i; window (left, right): i - left <= j <= i + right (None:
  unbounded); sinks (H,): p_ij = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij)).
  Queries sit at key position i (top-left), as attnc's is_causal.
  A row with no key it may attend to has zero weights and output.
  Dropout: an explicit keep mask (True = kept), kept weights scaled by 1/(1-p).
Block masks: segment_ids ((..., L) when L == S, or a pair ((..., L), (..., S))):
  key j takes part for query i only if their ids are equal; prefix_lengths
  (with is_causal; broadcast to the batch dims): the causal rule becomes
  j <= i or j < prefix; block_mask (..., H or 1, ceil(L/bq), ceil(S/bk)) with
  block_size bq or (bq, bk): only if block_mask[..., i // bq, j // bk].
activation="sigmoid": p_ij = 1 / (1 + exp(-(s_ij + sigmoid_bias))) where key j
  takes part, else 0 (no normalisation); sigmoid_bias defaults to -log S.
"""

import numpy as np


def alibi_slopes(n):
    """The ALiBi paper's slopes, from its text: 2^(-8 k / n), k = 1..n, for n a
    power of two; otherwise those of the nearest smaller power of two m,
    then the odd ones of 2m: 2^(-8 (2k - 1) / (2m)), k = 1..n - m."""
    m = 1
    while 2 * m <= n:
        m *= 2
    if n == 0:
        return np.zeros(0)
    first = [2.0 ** (-8.0 * k / m) for k in range(1, m + 1)]
    rest = [2.0 ** (-8.0 * (2 * k - 1) / (2 * m)) for k in range(1, n - m + 1)]
    return np.array(first + rest)


def allowed_keys(L, S, is_causal=False, window=None):
    """(L, S) bool: the keys each query may attend to under is_causal and window."""
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    ok = np.ones((L, S), bool)
    if is_causal:
        ok &= j <= i
    if window is not None:
        left, right = window
        if left is not None:
            ok &= j >= i - left
        if right is not None:
            ok &= j <= i + right
    return ok


def block_masks(shape, is_causal, segment_ids=None, prefix_lengths=None, block_mask=None, block_size=None):
    """(..., H, L, S) bool: what the block masks allow (True where none is
    given), and the causal rule under a prefix (prefix_lengths given)."""
    *batch, h, L, S = shape
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    ok = np.ones(shape, bool)
    if segment_ids is not None:
        qs, ks = segment_ids if isinstance(segment_ids, tuple) else (segment_ids, segment_ids)
        qs = np.broadcast_to(np.asarray(qs), tuple(batch) + (L,))
        ks = np.broadcast_to(np.asarray(ks), tuple(batch) + (S,))
        ok &= qs[..., None, :, None] == ks[..., None, None, :]
    if prefix_lengths is not None:
        assert is_causal
        p = np.broadcast_to(np.asarray(prefix_lengths), tuple(batch))[..., None, None, None]
        ok &= (j <= i) | (j < p)
    if block_mask is not None:
        bq, bk = block_size if isinstance(block_size, tuple) else (block_size, block_size)
        m = np.asarray(block_mask)
        ok &= np.broadcast_to(m[..., i[:, 0] // bq, :][..., j[0] // bk], shape)
    return ok


def weights(
    query,
    key,
    value,
    attn_mask=None,
    is_causal=False,
    scale=None,
    *,
    alibi_slopes=None,
    window=None,
    softcap=None,
    sinks=None,
    segment_ids=None,
    prefix_lengths=None,
    block_mask=None,
    block_size=None,
    activation="softmax",
    sigmoid_bias=None,
):
    """(probs (..., H, L, S), value expanded to H heads), float64."""
    q, k, v = (np.asarray(a, np.float64) for a in (query, key, value))
    h, L, E = q.shape[-3:]
    S = k.shape[-2]
    group = h // k.shape[-3] if k.shape[-3] else 1  # no heads at all: an empty call
    k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    sc = (1 / np.sqrt(E) if E else 1.0) if scale is None else scale
    s = (q @ np.swapaxes(k, -1, -2)) * sc
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    if alibi_slopes is not None:
        dist = np.arange(S)[None, :] - np.arange(L)[:, None]
        s = s + np.asarray(alibi_slopes, np.float64)[:, None, None] * dist
    ok = np.broadcast_to(allowed_keys(L, S, is_causal and prefix_lengths is None, window), s.shape).copy()
    ok &= block_masks(s.shape, is_causal, segment_ids, prefix_lengths, block_mask, block_size)
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        if m.dtype == bool:
            ok &= np.broadcast_to(m, s.shape)
        else:
            s = s + m.astype(np.float64)
    ok &= s > -np.inf
    s = np.where(ok, s, -np.inf)
    if activation == "sigmoid":
        assert sinks is None
        bias = (-np.log(S) if S else 0.0) if sigmoid_bias is None else sigmoid_bias
        return np.where(ok, 1 / (1 + np.exp(-(np.where(ok, s, 0) + bias))), 0.0), v
    sink = -np.inf if sinks is None else np.asarray(sinks, np.float64)[:, None, None]
    mx = np.maximum(np.max(s, axis=-1, keepdims=True, initial=-np.inf), sink)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.where(ok, np.exp(s - mx), 0.0)
    den = e.sum(axis=-1, keepdims=True) + np.exp(sink - mx)
    probs = np.where(den > 0, e / np.where(den > 0, den, 1.0), 0.0)
    return probs, v


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    return_weights=False,
    keep_mask=None,
    **options,
):
    """attnc's signature, with an explicit keep_mask in place of the seed;
    options: weights' keyword arguments."""
    probs, v = weights(query, key, value, attn_mask, is_causal, scale, **options)
    used = probs
    if dropout_p >= 1:
        used = np.zeros_like(probs)
    elif dropout_p > 0:
        used = np.where(np.broadcast_to(keep_mask, probs.shape), probs / (1 - dropout_p), 0.0)
    out = used @ v
    return (out, probs) if return_weights else out
