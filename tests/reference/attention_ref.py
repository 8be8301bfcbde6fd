"""Plain NumPy float64 reference for the attnc attention family.

Written from the formulas in the issue (notes/issue2.md) and the API decisions
(notes/api_decisions.md), independently of attnc. Every function computes in float64
and mirrors the keyword signature of the corresponding attnc function, so a test can
call ``ref.attention(**kw)`` and ``attnc.attention(**kw)`` with the same arguments.

Conventions:
  query (..., Tq, dq), keys (..., Tk, dk), values (..., Tk, dv); scores (..., Tq, Tk).
  mask: bool, broadcastable to (..., Tq, Tk), True = may attend.
  key_lengths: int, broadcastable to the leading dims; key j is valid iff j < length.
  causal: key j is allowed for query i iff j <= i.
  A row with no allowed key gets all-zero weights (and a zero context).
"""

import numpy as np

COSINE_EPS = 1e-8

SCORE_KINDS = ("dot", "scaled_dot", "general", "additive", "concat", "cosine", "location", "gaussian")


def _f64(x):
    return None if x is None else np.asarray(x, dtype=np.float64)


def _kt(x):
    """Swap the last two axes (batched transpose)."""
    return np.swapaxes(x, -1, -2)


# --------------------------------------------------------------------------- scores


def score_fn(query, keys, kind="dot", **params):
    """Raw alignment scores (..., Tq, Tk) of score kind `kind`."""
    q = _f64(query)
    k = _f64(keys)
    dk = k.shape[-1]
    if kind == "dot":
        return q @ _kt(k)
    if kind == "scaled_dot":
        scale = params.get("scale")
        scale = 1.0 / np.sqrt(dk) if scale is None else _f64(scale)
        return (q @ _kt(k)) * scale
    if kind == "general":
        w = _f64(params["weight"])  # (dq, dk)
        return (q @ w) @ _kt(k)
    if kind in ("additive", "concat"):
        wq = _f64(params["w_query"])  # (dq, da)
        wk = _f64(params["w_key"])  # (dk, da)
        v = _f64(params["v"])  # (da,)
        hq = q @ wq  # (..., Tq, da)
        hk = k @ wk  # (..., Tk, da)
        h = np.tanh(hq[..., :, None, :] + hk[..., None, :, :])  # (..., Tq, Tk, da)
        return h @ v
    if kind == "cosine":
        beta = params.get("beta", 1.0)
        beta = _f64(beta)
        dots = q @ _kt(k)
        nq = np.sqrt(np.sum(q * q, axis=-1))  # (..., Tq)
        nk = np.sqrt(np.sum(k * k, axis=-1))  # (..., Tk)
        denom = np.maximum(nq[..., :, None] * nk[..., None, :], COSINE_EPS)
        return beta[..., None] * (dots / denom)
    if kind == "location":
        w = _f64(params["weight"])  # (dq, Tk)
        s = q @ w  # (..., Tq, Tk)
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        return np.broadcast_to(s, lead + s.shape[-2:]).copy()
    if kind == "gaussian":
        bw = _f64(params.get("bandwidth", 1.0))
        diff = q[..., :, None, :] - k[..., None, :, :]  # (..., Tq, Tk, d)
        return -np.sum(diff * diff, axis=-1) / (2.0 * bw * bw)
    raise ValueError(f"unknown score kind {kind!r}")


def score(query, keys, *, score="dot", **params):
    """Same signature as attnc.score."""
    return score_fn(query, keys, score, **params)


# --------------------------------------------------------------------------- masks


def allowed_mask(shape, mask=None, key_lengths=None, causal=False):
    """Boolean array of `shape` (..., Tq, Tk): True where a query may attend a key."""
    shape = tuple(shape)
    tq, tk = shape[-2], shape[-1]
    allowed = np.ones(shape, dtype=bool)
    if mask is not None:
        allowed &= np.broadcast_to(np.asarray(mask, dtype=bool), shape)
    if key_lengths is not None:
        kl = np.asarray(key_lengths)
        valid = np.arange(tk) < kl[..., None, None]  # (..., 1, Tk)
        allowed &= np.broadcast_to(valid, shape)
    if causal:
        i = np.arange(tq)[:, None]
        j = np.arange(tk)[None, :]
        allowed &= j <= i
    return allowed


def masked_softmax(scores, allowed):
    """Softmax over the last axis restricted to `allowed`; rows with nothing allowed -> 0."""
    s = _f64(scores)
    allowed = np.broadcast_to(allowed, s.shape)
    s_m = np.where(allowed, s, -np.inf)
    any_allowed = np.any(allowed, axis=-1, keepdims=True)
    row_max = np.max(s_m, axis=-1, keepdims=True, initial=-np.inf)
    row_max = np.where(any_allowed, row_max, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.where(allowed, np.exp(s_m - row_max), 0.0)
        z = np.sum(e, axis=-1, keepdims=True)
        w = np.where(any_allowed, e / np.where(any_allowed, z, 1.0), 0.0)
    return w


def softmax(scores, *, mask=None, key_lengths=None, causal=False):
    s = _f64(scores)
    return masked_softmax(s, allowed_mask(s.shape, mask, key_lengths, causal))


def _scores_shape(q, k):
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    return lead + (q.shape[-2], k.shape[-2])


# --------------------------------------------------------------------------- attention


def attention(query, keys, values=None, *, score="dot", mask=None, key_lengths=None, causal=False, **params):
    """Soft attention -> (context (..., Tq, dv), weights (..., Tq, Tk))."""
    q = _f64(query)
    k = _f64(keys)
    v = k if values is None else _f64(values)
    s = score_fn(q, k, score, **params)
    w = masked_softmax(s, allowed_mask(s.shape, mask, key_lengths, causal))
    return w @ v, w


# --------------------------------------------------------------------------- hard attention


def hard_argmax_indices(scores, allowed):
    """Index of the best allowed key per row (first on ties), -1 for rows with none."""
    s = np.where(allowed, _f64(scores), -np.inf)
    any_allowed = np.any(allowed, axis=-1)
    if s.shape[-1] == 0:
        return np.full(s.shape[:-1], -1, dtype=np.int64)
    idx = np.argmax(s, axis=-1).astype(np.int64)
    return np.where(any_allowed, idx, -1)


def one_hot_attention(indices, tk, values):
    """Given chosen key indices (..., Tq) (-1 = none), build the one-hot weights
    (..., Tq, Tk) and the context weights @ values."""
    idx = np.asarray(indices)
    w = (np.arange(tk) == idx[..., None]).astype(np.float64)  # -1 never matches
    return w @ _f64(values), w


def hard_attention(
    query, keys, values=None, *, mode="argmax", score="dot", mask=None, key_lengths=None, causal=False, **params
):
    """Reference for mode="argmax" only (the random modes are checked by property)."""
    if mode != "argmax":
        raise ValueError("the reference implements only mode='argmax'")
    q = _f64(query)
    k = _f64(keys)
    v = k if values is None else _f64(values)
    s = score_fn(q, k, score, **params)
    idx = hard_argmax_indices(s, allowed_mask(s.shape, mask, key_lengths, causal))
    ctx, w = one_hot_attention(idx, s.shape[-1], v)
    return ctx, w, idx


# --------------------------------------------------------------------------- local attention


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def local_positions(query, tk, lead, *, mode="monotonic", positions=None, w_p=None, v_p=None, key_lengths=None):
    """The window centres p_t, shape lead + (Tq,)."""
    q = _f64(query)
    tq = q.shape[-2]
    if mode == "monotonic":
        if positions is None:
            p = np.arange(tq, dtype=np.float64)
        else:
            p = _f64(positions)
        return np.broadcast_to(p, lead + (tq,)).astype(np.float64)
    if mode == "predictive":
        if key_lengths is None:
            s_valid = np.full(lead, float(tk))
        else:
            s_valid = np.minimum(np.broadcast_to(np.asarray(key_lengths), lead), tk)
            s_valid = s_valid.astype(np.float64)
        h = np.tanh(q @ _f64(w_p))  # (..., Tq, dp)
        p = s_valid[..., None] * _sigmoid(h @ _f64(v_p))
        return np.broadcast_to(p, lead + (tq,)).astype(np.float64)
    raise ValueError(f"unknown mode {mode!r}")


def local_attention(
    query,
    keys,
    values=None,
    *,
    window,
    mode="monotonic",
    positions=None,
    w_p=None,
    v_p=None,
    score="dot",
    mask=None,
    key_lengths=None,
    **params,
):
    """Luong local attention -> (context, weights, positions)."""
    q = _f64(query)
    k = _f64(keys)
    v = k if values is None else _f64(values)
    s = score_fn(q, k, score, **params)
    lead = s.shape[:-2]
    tk = s.shape[-1]
    p = local_positions(q, tk, lead, mode=mode, positions=positions, w_p=w_p, v_p=v_p, key_lengths=key_lengths)
    dist = np.arange(tk, dtype=np.float64) - p[..., None]  # (..., Tq, Tk): s - p_t
    in_window = np.abs(dist) <= window
    allowed = allowed_mask(s.shape, mask, key_lengths, False) & in_window
    w = masked_softmax(s, allowed)
    if mode == "predictive":
        sigma = window / 2.0
        w = w * np.exp(-(dist * dist) / (2.0 * sigma * sigma))
        w = np.where(allowed, w, 0.0)
    return w @ v, w, p


# --------------------------------------------------------------------------- kernel regression


def kernel_regression(x_query, x_train, y_train, *, bandwidth=1.0):
    """Nadaraya-Watson with a Gaussian kernel -> (y_pred, weights (m, n))."""
    xq = _f64(x_query)
    xt = _f64(x_train)
    y = _f64(y_train)
    if xq.ndim == 1:
        xq = xq[:, None]
    if xt.ndim == 1:
        xt = xt[:, None]
    bw = _f64(bandwidth)
    d2 = np.sum((xq[:, None, :] - xt[None, :, :]) ** 2, axis=-1)  # (m, n)
    s = -d2 / (2.0 * bw * bw)
    w = masked_softmax(s, np.ones(s.shape, dtype=bool))
    return w @ y, w
