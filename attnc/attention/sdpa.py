"""attnc.scaled_dot_product_attention: the fused, tiled kernel with
torch.nn.functional.scaled_dot_product_attention's arguments and meanings."""

from __future__ import annotations

import numbers
from typing import Literal, overload

import numpy as np

from .. import _core
from .._args import (
    blas_ready,
    default_scale,
    elementwise_ready,
    float_array,
    heads_share,
    same_dtype,
    seed_bits,
    shape_str,
    unbroadcast,
)
from .._typing import Array, ArrayLike
from ..grad import register


def _attn_mask(attn_mask, dtype, shape):
    """attn_mask as a view broadcast to shape: bool (True = takes part) or
    float of the call's dtype (added to the scores)."""
    m = np.asarray(attn_mask)
    if m.dtype != np.bool_:
        m = float_array(m, "attn_mask")
        same_dtype(dtype, attn_mask=m)
    try:
        return m, elementwise_ready(np.broadcast_to(m, shape))
    except ValueError:
        raise ValueError(
            f"attn_mask with shape {shape_str(m.shape)} does not broadcast to (..., H, L, S) = {shape_str(shape)}"
        ) from None


def _check(query, key, value, enable_gqa):
    q = float_array(query, "query")
    k = float_array(key, "key")
    v = float_array(value, "value")
    same_dtype(q.dtype, key=k, value=v)
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(
            f"query {shape_str(q.shape)}, key {shape_str(k.shape)} and value {shape_str(v.shape)} must have "
            "the same number of dims, at least 2: (..., H, L, E), (..., Hkv, S, E), (..., Hkv, S, Ev)"
        )
    heads = q.ndim >= 3
    lead = q.ndim - (3 if heads else 2)
    if k.shape[:lead] != q.shape[:lead] or v.shape[:lead] != q.shape[:lead]:
        raise ValueError(
            f"query {shape_str(q.shape)}, key {shape_str(k.shape)} and value {shape_str(v.shape)} must have "
            "the same leading (batch) dims"
        )
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"key {shape_str(k.shape)} and query {shape_str(q.shape)} need the same last dim E")
    if v.shape[-2] != k.shape[-2] or (heads and v.shape[-3] != k.shape[-3]):
        raise ValueError(f"value {shape_str(v.shape)} needs key's heads and length: key is {shape_str(k.shape)}")
    if heads:
        h, hkv = q.shape[-3], k.shape[-3]
        if enable_gqa:
            if not heads_share(h, hkv):
                raise ValueError(f"enable_gqa needs query's heads ({h}) to be a multiple of key's heads ({hkv})")
        elif h != hkv:
            raise ValueError(
                f"query has {h} heads and key has {hkv}: pass enable_gqa=True for grouped-query attention"
            )
    else:  # (L, E): one head
        q, k, v = q[None], k[None], v[None]
    return q, k, v, heads


def _forward(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
             *, return_weights=False, seed=None):
    q, k, v, heads = _check(query, key, value, enable_gqa)
    dtype = q.dtype
    batch, (h, L, E), (S, Ev) = q.shape[:-3], q.shape[-3:], v.shape[-2:]
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both (as torch does)")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) or not 0 <= dropout_p <= 1:
        raise ValueError(f"dropout_p must be a float in [0, 1], got {dropout_p!r}")
    if scale is None:
        scale = default_scale(E)
    elif not isinstance(scale, numbers.Real) or isinstance(scale, bool):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    mask, mask_arg = None, None
    if attn_mask is not None:
        mask_arg, mask = _attn_mask(attn_mask, dtype, batch + (h, L, S))
    spec = (mask, None, bool(is_causal), 0, float(scale), float(dropout_p), seed_bits(seed) if dropout_p else 0)
    q, k, v = blas_ready(q), blas_ready(k), blas_ready(v)
    out = np.empty(batch + (h, L, Ev), dtype)
    lse = np.empty(batch + (h, L), dtype)
    weights = np.empty(batch + (h, L, S), dtype) if return_weights else None
    _core.sdpa_forward(spec, q, k, v, out, lse, weights)
    unhead = (lambda a: a[0]) if not heads else (lambda a: a)
    outputs = (unhead(out), unhead(weights)) if return_weights else unhead(out)
    saved = (spec, q, k, v, out, lse, heads, mask_arg)
    return outputs, saved


def _backward(saved, cotangents):
    spec, q, k, v, out, lse, heads, mask_arg = saved
    dout = cotangents[0]
    dweights = cotangents[1] if len(cotangents) > 1 else None
    if not heads:
        dout = None if dout is None else dout[None]
        dweights = None if dweights is None else dweights[None]
    if dout is None:
        dout = np.zeros(out.shape, out.dtype)
    dq, dk, dv = np.empty_like(q, order="C"), np.empty_like(k, order="C"), np.empty_like(v, order="C")
    float_mask = mask_arg is not None and mask_arg.dtype != np.bool_
    dmask = np.zeros(lse.shape + (k.shape[-2],), q.dtype) if float_mask else None
    _core.sdpa_backward(spec, blas_ready(dout), dweights, q, k, v, out, lse, dq, dk, dv, dmask)
    unhead = (lambda a: a[0]) if not heads else (lambda a: a)
    grads = {"query": unhead(dq), "key": unhead(dk), "value": unhead(dv)}
    if float_mask:
        grads["attn_mask"] = unbroadcast(unhead(dmask), mask_arg.shape)
    return grads


@overload
def scaled_dot_product_attention(query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ...,
                                 dropout_p: float = ..., is_causal: bool = ..., scale: float | None = ...,
                                 enable_gqa: bool = ..., *, return_weights: Literal[False] = ...,
                                 seed: int | None = ...) -> Array: ...
@overload
def scaled_dot_product_attention(query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ...,
                                 dropout_p: float = ..., is_causal: bool = ..., scale: float | None = ...,
                                 enable_gqa: bool = ..., *, return_weights: Literal[True],
                                 seed: int | None = ...) -> tuple[Array, Array]: ...
@overload
def scaled_dot_product_attention(query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = ...,
                                 dropout_p: float = ..., is_causal: bool = ..., scale: float | None = ...,
                                 enable_gqa: bool = ..., *, return_weights: bool = ...,
                                 seed: int | None = ...) -> Array | tuple[Array, Array]: ...
def scaled_dot_product_attention(query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: ArrayLike | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False, *, return_weights: bool = False,
                                 seed: int | None = None) -> Array | tuple[Array, Array]:
    """Fused scaled-dot-product attention, as ``torch.nn.functional.scaled_dot_product_attention``.

    softmax(query @ key^T * scale + mask) @ value, computed tile by tile with an
    online softmax (FlashAttention): the (L, S) matrix is never stored.

    Parameters
    ----------
    query : array (..., H, L, E) (or (L, E)), float32 or float64
    key : array (..., Hkv, S, E), the same dtype (and (S, E) with a (L, E) query)
    value : array (..., Hkv, S, Ev), the same dtype
    attn_mask : optional, broadcastable to (..., H, L, S): boolean, True = takes
        part; or float (the call's dtype), added to the scores.
    dropout_p : float in [0, 1], dropout on the attention probabilities.
    is_causal : bool, query i attends to keys j <= i (top-left aligned when
        L != S). Not together with attn_mask.
    scale : float, default 1 / sqrt(E) (1 for E = 0, whose scores are all 0).
    enable_gqa : bool, grouped-query attention: H a multiple of Hkv, query head
        h reads key/value head h // (H // Hkv) (shared, not copied).
    Any size may be 0, as in torch: the results are then empty, or, for
    E = 0, the mean of the values each query may attend to (every score 0);
    no heads at all (H = Hkv = 0) is an empty call.
    return_weights : bool, also return the (..., H, L, S) attention weights
        (softmax probabilities, before dropout), recomputed from the saved
        log-sum-exp. Calls that don't ask pay nothing.
    seed : int or None, the dropout seed (same seed, same bits).

    Returns
    -------
    output : array (..., H, L, Ev), the input dtype, or ``(output, weights)``
    with return_weights, weights (..., H, L, S).
    A row with no key to attend to (S = 0 included) gets zeros (torch gives
    NaN there).

    Example
    -------
    >>> q = np.random.rand(2, 4, 128, 64).astype(np.float32)
    >>> out = attnc.scaled_dot_product_attention(q, q, q, is_causal=True)
    >>> out.shape, out.dtype
    ((2, 4, 128, 64), dtype('float32'))
    >>> kv = np.random.rand(2, 2, 10, 64).astype(np.float32)    # grouped-query: 4 query heads, 2 kv heads
    >>> out, w = attnc.scaled_dot_product_attention(q[:, :, :3], kv, kv, enable_gqa=True, return_weights=True)
    >>> out.shape, w.shape, round(float(w.sum(axis=-1).min()), 5)
    ((2, 4, 3, 64), (2, 4, 3, 10), 1.0)
    """
    return _forward(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                    return_weights=return_weights, seed=seed)[0]


register(scaled_dot_product_attention, _forward, _backward)
