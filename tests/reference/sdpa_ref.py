"""Plain NumPy float64 reference for attnc.scaled_dot_product_attention.

Written from /work/notes/issue3.md and sdpa_decisions.md, independently of attnc and
torch. It materialises the full (..., H, L, S) score matrix: fine for test sizes.

Conventions (those of torch.nn.functional.scaled_dot_product_attention):
  query (..., H, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev); or 2-D
  query (L, E), key (S, E), value (S, Ev). Output (..., H, L, Ev).
  attn_mask: bool (True = takes part) or float (added to the scores), broadcastable to
    (..., H, L, S) (to (L, S) for 2-D inputs).
  is_causal: top-left aligned, query i may attend key j <= i (also when L != S).
  scale: default 1 / sqrt(E).
  enable_gqa: H % Hkv == 0, query head h uses kv head h // (H // Hkv).
  A row with no key it may attend to (all False / all -inf) -> zero weights and output.
  Dropout: the caller gives the keep-mask explicitly (bool, broadcastable to
    (..., H, L, S)); kept probabilities are scaled by 1 / (1 - dropout_p); p == 1 -> zeros.
  return_weights=True also returns the softmax probabilities BEFORE dropout.
"""

import numpy as np


def _f64(x):
    return None if x is None else np.asarray(x, dtype=np.float64)


def _expand_kv(x, h, enable_gqa):
    """(..., Hkv, S, d) -> (..., H, S, d) by torch's repeat_interleave rule."""
    hkv = x.shape[-3]
    if hkv == h:
        return x
    if not enable_gqa:
        raise ValueError(f"query has {h} heads but key/value have {hkv} (enable_gqa=False)")
    if h % hkv:
        raise ValueError(f"query heads {h} not a multiple of key/value heads {hkv}")
    return np.repeat(x, h // hkv, axis=-3)


def sdpa_parts(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Scores and probabilities: returns (scores, allowed, probs, v) in float64, with
    scores (..., H, L, S) including the float mask (-inf where not allowed), allowed the
    bool pattern of keys taking part, probs the masked softmax (zero rows when nothing
    is allowed), and v the value expanded to H heads."""
    q, k, v = _f64(query), _f64(key), _f64(value)
    if q.ndim == 2:
        if k.ndim != 2 or v.ndim != 2:
            raise ValueError("2-D query needs 2-D key and value")
    else:
        if q.ndim < 3 or k.ndim != q.ndim or v.ndim != q.ndim:
            raise ValueError("query, key and value need the same number of dims (>= 3)")
        if q.shape[:-3] != k.shape[:-3] or q.shape[:-3] != v.shape[:-3]:
            raise ValueError("leading dims of query, key and value differ")
        if k.shape[-3] != v.shape[-3]:
            raise ValueError("key and value heads differ")
        h = q.shape[-3]
        k = _expand_kv(k, h, enable_gqa)
        v = _expand_kv(v, h, enable_gqa)
    L, E = q.shape[-2:]
    S = k.shape[-2]
    if k.shape[-1] != E or v.shape[-2] != S:
        raise ValueError("query/key feature dims or key/value lengths differ")
    if attn_mask is not None and is_causal:
        raise ValueError("attn_mask together with is_causal")
    # E == 0: every score is 0, as in torch (whose default scale, 1 / sqrt(0),
    # multiplies nothing)
    sc = (1.0 / np.sqrt(E) if E else 1.0) if scale is None else float(scale)
    scores = (q @ np.swapaxes(k, -1, -2)) * sc
    out_shape = scores.shape
    allowed = np.ones(out_shape, dtype=bool)
    if is_causal:
        allowed &= np.tril(np.ones((L, S), dtype=bool))
    if attn_mask is not None:
        m = np.asarray(attn_mask)
        try:
            ok = np.broadcast_shapes(m.shape, out_shape) == out_shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"attn_mask {m.shape} does not broadcast to {out_shape}")
        if m.dtype == bool:
            allowed &= m
        else:
            scores = scores + m.astype(np.float64)
    allowed = allowed & (scores > -np.inf)
    s = np.where(allowed, scores, -np.inf)
    has_any = allowed.any(axis=-1, keepdims=True)
    mx = np.where(has_any, np.max(np.where(allowed, s, -np.inf), axis=-1, keepdims=True, initial=-np.inf), 0.0)
    e = np.where(allowed, np.exp(np.where(allowed, s, 0.0) - mx), 0.0)
    den = np.sum(e, axis=-1, keepdims=True)
    probs = np.where(has_any, e / np.where(has_any, den, 1.0), 0.0)
    return s, allowed, probs, v


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
):
    """Same signature as attnc's, except `seed` is replaced by an explicit `keep_mask`
    (bool, broadcastable to the weights' shape, True = kept). With dropout_p > 0 a
    keep_mask is required."""
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError("dropout_p must be in [0, 1]")
    _, _, probs, v = sdpa_parts(query, key, value, attn_mask, is_causal, scale, enable_gqa)
    p_used = probs
    if dropout_p > 0.0:
        if dropout_p >= 1.0:
            p_used = np.zeros_like(probs)
        else:
            if keep_mask is None:
                raise ValueError("dropout_p > 0 needs an explicit keep_mask")
            km = np.broadcast_to(np.asarray(keep_mask, dtype=bool), probs.shape)
            p_used = np.where(km, probs / (1.0 - dropout_p), 0.0)
    out = p_used @ v
    if return_weights:
        return out, probs
    return out


def sdpa_grads(
    query,
    key,
    value,
    dout,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    keep_mask=None,
    dweights=None,
):
    """Analytic float64 gradients of sum(out * dout) (+ sum(weights * dweights)):
    dict with "query", "key", "value" (summed over GQA groups) and "attn_mask" (summed
    back to the mask's shape) when the mask is a float array."""
    q, k = _f64(query), _f64(key)
    _, allowed, probs, v = sdpa_parts(query, key, value, attn_mask, is_causal, scale, enable_gqa)
    dout = _f64(dout)
    if dropout_p > 0.0:
        if dropout_p >= 1.0:
            factor = np.zeros_like(probs)
        else:
            km = np.broadcast_to(np.asarray(keep_mask, dtype=bool), probs.shape)
            factor = np.where(km, 1.0 / (1.0 - dropout_p), 0.0)
    else:
        factor = np.ones_like(probs)
    p_used = probs * factor
    dv_full = np.swapaxes(p_used, -1, -2) @ dout
    dp = (dout @ np.swapaxes(v, -1, -2)) * factor
    if dweights is not None:
        dp = dp + _f64(dweights)
    ds = probs * (dp - np.sum(dp * probs, axis=-1, keepdims=True))
    ds = np.where(allowed, ds, 0.0)
    E = q.shape[-1]
    sc = (1.0 / np.sqrt(E) if E else 1.0) if scale is None else float(scale)
    kk = k
    if q.ndim > 2:
        kk = _expand_kv(k, q.shape[-3], enable_gqa)
    dq = (ds @ kk) * sc
    dk_full = (np.swapaxes(ds, -1, -2) @ q) * sc

    def fold(g, like):
        if q.ndim == 2 or g.shape[-3] == like.shape[-3]:
            return g
        hkv = like.shape[-3]
        grp = g.shape[-3] // hkv
        return g.reshape(g.shape[:-3] + (hkv, grp) + g.shape[-2:]).sum(axis=-3)

    grads = {"query": dq, "key": fold(dk_full, k), "value": fold(dv_full, _f64(value))}
    if attn_mask is not None and np.asarray(attn_mask).dtype.kind == "f":
        m = np.asarray(attn_mask)
        g = ds
        while g.ndim > m.ndim:
            g = g.sum(axis=0)
        for ax, n in enumerate(m.shape):
            if n == 1 and g.shape[ax] != 1:
                g = g.sum(axis=ax, keepdims=True)
        grads["attn_mask"] = g
    return grads
