"""attnc.scaled_dot_product_attention: the fused, tiled kernel with
torch.nn.functional.scaled_dot_product_attention's arguments and meanings."""

from __future__ import annotations

import math
import numbers
from typing import Literal, overload

import numpy as np

from .. import _core
from .._args import (
    as_array,
    blas_ready,
    default_scale,
    elementwise_ready,
    float_array,
    heads_share,
    same_dtype,
    shape_str,
    unbroadcast,
)
from .._typing import Array, ArrayLike
from ..grad import register
from ._spec import sdpa_options, variant_grads, variant_options


def _attn_mask(attn_mask, dtype, shape):
    """attn_mask as a view broadcast to shape: bool (True = takes part) or
    float of the call's dtype (added to the scores)."""
    m = as_array(attn_mask, "attn_mask")
    if m.dtype != np.bool_:
        m = float_array(m, "attn_mask")
        same_dtype(dtype, attn_mask=m)
    try:
        return m, elementwise_ready(np.broadcast_to(m, shape))
    except ValueError:
        raise ValueError(
            f"attn_mask with shape {shape_str(m.shape)} does not broadcast to (..., H, L, S) = {shape_str(shape)}"
        ) from None


def _broadcast(shapes, what):
    """np.broadcast_shapes of the named shapes, or ValueError naming them."""
    try:
        return np.broadcast_shapes(*shapes.values())
    except ValueError:
        given = ", ".join(f"{n} {shape_str(sh)}" for n, sh in shapes.items())
        raise ValueError(f"{what} do not broadcast: {given}") from None


def _check(query, key, value, enable_gqa):
    """query, key, value broadcast as torch broadcasts them, as the views the
    kernel takes: (B..., H, L, E), (B..., Hkv, S, E), (B..., Hkv, S, Ev).

    Returns (q, k, v, layout); layout tells the backward how to give each
    gradient its argument's shape again (summing over broadcast dims) and
    whether a head dim was added (a (L, E) call)."""
    q = float_array(query, "query")
    k = float_array(key, "key")
    v = float_array(value, "value")
    same_dtype(q.dtype, key=k, value=v)
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise ValueError(
            f"query {shape_str(q.shape)}, key {shape_str(k.shape)} and value {shape_str(v.shape)} must have "
            "at least 2 dims: (..., L, E), (..., S, E), (..., S, Ev)"
        )
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"key {shape_str(k.shape)} and query {shape_str(q.shape)} need the same last dim E")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"value {shape_str(v.shape)} needs key's length S: key is {shape_str(k.shape)}")
    shapes = {"query": q.shape, "key": k.shape, "value": v.shape}
    added_head = max(q.ndim, k.ndim, v.ndim) == 2  # (L, E): one head, added here, dropped from the results
    # a 2-d array has no head dim: with enable_gqa it gets one (1 head), else it simply broadcasts
    q, k, v = (a[None] if a.ndim == 2 and (added_head or enable_gqa) else a for a in (q, k, v))
    repeats = (1, 1)
    if enable_gqa:  # dim -3 is the heads; the dims before it broadcast
        h, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
        if not (heads_share(h, hk) and heads_share(h, hv)):
            raise ValueError(
                f"enable_gqa needs query's heads ({h}) to be a multiple of key's ({hk}) and value's ({hv})"
            )
        hkv = math.lcm(hk, hv)  # key and value share the kernel's kv heads: the coarser is repeated
        repeats = (hkv // hk, hkv // hv) if hkv else (1, 1)  # hkv 0: no heads at all, an empty call
        k, v = (np.repeat(a, r, axis=-3) if r > 1 else a for a, r in ((k, repeats[0]), (v, repeats[1])))
        lead = _broadcast(
            {n: a.shape[:-3] for n, a in zip(shapes, (q, k, v))}, "the batch dims of query, key and value"
        )
        q = np.broadcast_to(q, lead + q.shape[-3:])
        k, v = (np.broadcast_to(a, lead + (hkv,) + a.shape[-2:]) for a in (k, v))
    else:  # every dim before the last two broadcasts, the heads' included
        lead = _broadcast(
            {n: a.shape[:-2] for n, a in zip(shapes, (q, k, v))}, "the batch and head dims of query, key and value"
        )
        q, k, v = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (q, k, v))
    return q, k, v, (shapes, (1,) + repeats, added_head)


def _argument_grads(grads, layout):
    """dquery, dkey, dvalue made at the kernel's shapes, in the arguments'
    shapes again: summed over repeated kv heads and over broadcast dims."""
    shapes, repeats, _ = layout
    out = {}
    for (name, shape), g, r in zip(shapes.items(), grads, repeats):
        if r > 1:
            g = g.reshape(g.shape[:-3] + (g.shape[-3] // r, r) + g.shape[-2:]).sum(axis=-3)
        out[name] = unbroadcast(g, shape)
    return out


def _forward(
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
    seed=None,
    **variants,
):
    q, k, v, layout, options, mask_arg = _prepare(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed, **variants
    )
    dtype = q.dtype
    batch, (h, L), Ev = q.shape[:-3], q.shape[-3:-1], v.shape[-1]
    out = np.empty(batch + (h, L, Ev), dtype)
    lse = np.empty(batch + (h, L), dtype)
    weights = np.empty(batch + (h, L, k.shape[-2]), dtype) if return_weights else None
    _core.sdpa_forward(output=out, lse=lse, weights=weights, query=q, key=k, value=v, options=options)
    unhead = (lambda a: a[0]) if layout[2] else (lambda a: a)
    outputs = (unhead(out), unhead(weights)) if return_weights else unhead(out)
    saved = (options, q, k, v, out, lse, layout, mask_arg)
    return outputs, saved


def _prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed, **variants):
    """The arguments checked, as the kernel takes them: (q, k, v, layout,
    options, mask_arg). The same arguments (and an int seed) give the same
    options again: attnc.torch's backward rebuilds a forward's state here.
    variants: alibi_slopes, window, softcap, sinks, segment_ids,
    prefix_lengths, block_mask, block_size, activation, sigmoid_bias
    (_spec.variant_options)."""
    q, k, v, layout = _check(query, key, value, enable_gqa)
    dtype = q.dtype
    batch, (h, L, E), S = q.shape[:-3], q.shape[-3:], v.shape[-2]
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
    extra = variant_options(h, dtype, kernel=(batch, L, S), **variants)
    options = sdpa_options(scale, attn_mask=mask, causal=is_causal, dropout_p=dropout_p, seed=seed, variants=extra)
    return blas_ready(q), blas_ready(k), blas_ready(v), layout, options, mask_arg


def _backward(saved, cotangents):
    options, q, k, v, out, lse, layout, mask_arg = saved
    dout = cotangents[0]
    dweights = cotangents[1] if len(cotangents) > 1 else None
    if layout[2]:  # the head dim the forward added
        dout = None if dout is None else dout[None]
        dweights = None if dweights is None else dweights[None]
    if dout is None:
        dout = np.zeros(out.shape, out.dtype)
    dq, dk, dv = np.empty_like(q, order="C"), np.empty_like(k, order="C"), np.empty_like(v, order="C")
    float_mask = mask_arg is not None and mask_arg.dtype != np.bool_
    dmask = np.zeros(lse.shape + (k.shape[-2],), q.dtype) if float_mask else None
    extra = variant_grads(options, q.shape[-3], q.dtype)
    _core.sdpa_backward(
        dquery=dq,
        dkey=dk,
        dvalue=dv,
        dmask=dmask,
        dsinks=extra.get("sinks"),
        dalibi_slopes=extra.get("alibi_slopes"),
        doutput=blas_ready(dout),
        dweights=dweights,
        query=q,
        key=k,
        value=v,
        output=out,
        lse=lse,
        options=options,
    )
    grads = _argument_grads((dq, dk, dv), layout)
    if float_mask:
        grads["attn_mask"] = unbroadcast(dmask, mask_arg.shape)
    grads.update(extra)
    return grads


@overload
def scaled_dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = ...,
    dropout_p: float = ...,
    is_causal: bool = ...,
    scale: float | None = ...,
    enable_gqa: bool = ...,
    *,
    return_weights: Literal[False] = ...,
    seed: int | None = ...,
    alibi_slopes: ArrayLike | None = ...,
    window: tuple[int | None, int | None] | None = ...,
    softcap: float | None = ...,
    sinks: ArrayLike | None = ...,
    segment_ids: ArrayLike | tuple[ArrayLike, ArrayLike] | None = ...,
    prefix_lengths: ArrayLike | int | None = ...,
    block_mask: ArrayLike | None = ...,
    block_size: int | tuple[int, int] | None = ...,
    activation: Literal["softmax", "sigmoid"] = ...,
    sigmoid_bias: float | None = ...,
) -> Array: ...
@overload
def scaled_dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = ...,
    dropout_p: float = ...,
    is_causal: bool = ...,
    scale: float | None = ...,
    enable_gqa: bool = ...,
    *,
    return_weights: Literal[True],
    seed: int | None = ...,
    alibi_slopes: ArrayLike | None = ...,
    window: tuple[int | None, int | None] | None = ...,
    softcap: float | None = ...,
    sinks: ArrayLike | None = ...,
    segment_ids: ArrayLike | tuple[ArrayLike, ArrayLike] | None = ...,
    prefix_lengths: ArrayLike | int | None = ...,
    block_mask: ArrayLike | None = ...,
    block_size: int | tuple[int, int] | None = ...,
    activation: Literal["softmax", "sigmoid"] = ...,
    sigmoid_bias: float | None = ...,
) -> tuple[Array, Array]: ...
@overload
def scaled_dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = ...,
    dropout_p: float = ...,
    is_causal: bool = ...,
    scale: float | None = ...,
    enable_gqa: bool = ...,
    *,
    return_weights: bool = ...,
    seed: int | None = ...,
    alibi_slopes: ArrayLike | None = ...,
    window: tuple[int | None, int | None] | None = ...,
    softcap: float | None = ...,
    sinks: ArrayLike | None = ...,
    segment_ids: ArrayLike | tuple[ArrayLike, ArrayLike] | None = ...,
    prefix_lengths: ArrayLike | int | None = ...,
    block_mask: ArrayLike | None = ...,
    block_size: int | tuple[int, int] | None = ...,
    activation: Literal["softmax", "sigmoid"] = ...,
    sigmoid_bias: float | None = ...,
) -> Array | tuple[Array, Array]: ...
def scaled_dot_product_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    attn_mask: ArrayLike | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    return_weights: bool = False,
    seed: int | None = None,
    alibi_slopes: ArrayLike | None = None,
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    sinks: ArrayLike | None = None,
    segment_ids: ArrayLike | tuple[ArrayLike, ArrayLike] | None = None,
    prefix_lengths: ArrayLike | int | None = None,
    block_mask: ArrayLike | None = None,
    block_size: int | tuple[int, int] | None = None,
    activation: Literal["softmax", "sigmoid"] = "softmax",
    sigmoid_bias: float | None = None,
) -> Array | tuple[Array, Array]:
    """Fused scaled-dot-product attention, as ``torch.nn.functional.scaled_dot_product_attention``.

    softmax(query @ key^T * scale + mask) @ value, computed tile by tile with an
    online softmax (FlashAttention): the (L, S) matrix is never stored.

    Parameters
    ----------
    query : array (..., H, L, E) (or (L, E)), float32 or float64
    key : array (..., Hkv, S, E), the same dtype
    value : array (..., Hkv, S, Ev), the same dtype
        The dims before the last two broadcast against each other, as torch
        broadcasts them (a (4, 3, 8) query against (4, 4, 6, 8) keys and
        values gives a (4, 4, 3, 8) output; a (L, E) query with (S, E) keys
        is one head); with enable_gqa, dim -3 is the heads and the dims
        before it broadcast. Gradients are summed over the broadcast dims.
    attn_mask : optional, broadcastable to (..., H, L, S): boolean, True = takes
        part; or float (the call's dtype), added to the scores.
    dropout_p : float in [0, 1], dropout on the attention probabilities.
    is_causal : bool, query i attends to keys j <= i (top-left aligned when
        L != S). Not together with attn_mask.
    scale : float, default 1 / sqrt(E) (1 for E = 0, whose scores are all 0).
    enable_gqa : bool, grouped-query attention: H a multiple of Hkv, query head
        h reads key/value head h // (H // Hkv) (shared, not copied). Key and
        value may have different head counts, each dividing H, as in torch
        (then the one with fewer heads is repeated to the other's count).
    return_weights : bool, also return the (..., H, L, S) attention weights
        (softmax probabilities, before dropout), recomputed from the saved
        log-sum-exp. Calls that don't ask pay nothing.
    seed : int or None, the dropout seed (same seed, same bits).

    Options of today's models (keyword only, each None = off; they compose
    with each other and with everything above, forward and backward). Query i
    sits at key position i, as for is_causal (top-left aligned when L != S).
    The score s = scale * q.k goes through, in this order:

    softcap : float > 0, s <- softcap * tanh(s / softcap) (Gemma 2), with its
        gradient.
    alibi_slopes : array (H,), the call's dtype, finite: s += slope_h * (j - i)
        for query i, key j (ALiBi, Press et al. 2022, as attention-gym's
        alibi score_mod; the paper's slopes: attnc.alibi_slopes(H)). No
        gradient for the slopes.
    attn_mask, is_causal : as above.
    window : (left, right), each an int >= 0 or None (unbounded): query i
        attends only keys i - left <= j <= i + right ((None, 0) is is_causal;
        (W, 0) a causal sliding window of W + 1 keys). Tiles outside the band
        are skipped: the cost grows as L * W, not L * S.
    sinks : array (H,), the call's dtype, finite: a logit per head that joins
        each row's softmax normaliser only, p_ij = exp(s_ij) / (exp(sinks[h])
        + sum_j exp(s_ij)) (gpt-oss); rows of the weights then sum to less
        than 1. attnc.vjp returns its gradient as ``"sinks"``. Not with
        activation="sigmoid" (which has no normaliser).

    Block masks (keyword only, None = off): a key one of them excludes takes
    no part, as under a False attn_mask, and the tiles they exclude wholly
    are skipped (no arithmetic). They compose with everything above.

    segment_ids : integer array shaped like the query without its head and
        feature dims ((B, L) for a (B, H, L, E) query; broadcast as the
        query's leading dims), or a pair (query_segments (..., L),
        key_segments (..., S)), required when L != S: query i attends only
        keys j of its own segment, key_segments[j] == query_segments[i]
        (packed sequences; with is_causal, the causal side stays where it
        is: pack each sequence's queries and keys alike). Tiles whose
        queries' and keys' id ranges do not overlap are skipped, so sorted
        (nondecreasing) ids cost about the sum of the sequences' squares.
    prefix_lengths : int or integer array broadcastable to the batch dims
        ((B,) for a (B, H, L, E) query), each >= 0; needs is_causal=True.
        A prefix LM: query i may attend key j if j <= i or j < prefix (the
        prefix attends bidirectionally, the rest causally); window, masks
        and segments still apply.
    block_mask : boolean array (..., H or 1, ceil(L / bq), ceil(S / bk)),
        broadcast as attn_mask, with block_size : int or (bq, bk), > 0:
        query i and key j take part only if block_mask[..., i // bq,
        j // bk]; False blocks are skipped whatever the kernel's own tile
        size, True blocks computed with the other masks applied.

    activation : "softmax" (default) or "sigmoid": p_ij = sigmoid(s_ij +
        sigmoid_bias) with no normalisation (Ramapuram et al. 2024, "Theory,
        Analysis, and Best Practices for Sigmoid Self-Attention"); excluded
        keys get p = 0; return_weights returns p (rows need not sum to 1).
    sigmoid_bias : float, default -log S (S the number of keys), the bias b
        of activation="sigmoid".

    Returns
    -------
    output : array (..., H, L, Ev), the input dtype, or ``(output, weights)``
    with return_weights, weights (..., H, L, S).
    A row with no key to attend to (S = 0 included) gets zeros (torch gives
    NaN there). Any size may be 0, as in torch: the results are then empty,
    or, for E = 0, the mean of the values each query may attend to (every
    score 0); no heads at all (H = Hkv = 0) is an empty call.

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
    >>> out, w = attnc.scaled_dot_product_attention(     # a causal window of 16 keys, ALiBi, sinks
    ...     q, q, q, window=(15, 0), alibi_slopes=attnc.alibi_slopes(4).astype(np.float32),
    ...     sinks=np.zeros(4, np.float32), return_weights=True)
    >>> int((w[0, 0, 100] > 0).sum()), bool(w.sum(axis=-1).max() < 1)
    (16, True)
    >>> ids = np.repeat([[0, 1], [0, 0]], [100, 28], axis=1)   # two packed sequences in row 0
    >>> out, w = attnc.scaled_dot_product_attention(q, q, q, is_causal=True, segment_ids=ids, return_weights=True)
    >>> int((w[0, 0, 110] > 0).sum()), int((w[1, 0, 110] > 0).sum())   # keys 100..110; 0..110
    (11, 111)
    >>> _, w = attnc.scaled_dot_product_attention(q, q, q, is_causal=True, prefix_lengths=[10, 0], return_weights=True)
    >>> int((w[0, 0, 3] > 0).sum()), int((w[1, 0, 3] > 0).sum())       # a 10-key prefix; plain causal
    (10, 4)
    >>> blocks = np.tril(np.ones((2, 2), bool))                     # 64 x 64 blocks: causal by blocks
    >>> _, w = attnc.scaled_dot_product_attention(q, q, q, block_mask=blocks, block_size=64, return_weights=True)
    >>> int((w[0, 0, 0] > 0).sum()), int((w[0, 0, 64] > 0).sum())
    (64, 128)
    >>> _, w = attnc.scaled_dot_product_attention(q, q, q, activation="sigmoid", return_weights=True)
    >>> bool(((w > 0) & (w < 1)).all()), w.shape                    # each weight in (0, 1), unnormalised
    (True, (2, 4, 128, 128))
    """
    return _forward(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        return_weights=return_weights,
        seed=seed,
        alibi_slopes=alibi_slopes,
        window=window,
        softcap=softcap,
        sinks=sinks,
        segment_ids=segment_ids,
        prefix_lengths=prefix_lengths,
        block_mask=block_mask,
        block_size=block_size,
        activation=activation,
        sigmoid_bias=sigmoid_bias,
    )[0]


def alibi_slopes(heads: int, dtype: type = np.float64) -> Array:
    """ALiBi's slopes for ``heads`` heads (Press et al. 2022, "Train Short,
    Test Long"), as its reference implementation makes them: for n a power of
    two the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8); otherwise
    the n' = 2^floor(log2 n) slopes of n' heads followed by every other slope
    of 2n' heads (the odd powers 2^(-4/n'), 2^(-12/n'), ...) until there are n.

    Parameters
    ----------
    heads : int >= 0
    dtype : float32 or float64 (default)

    Returns
    -------
    array (heads,) of positive slopes, decreasing for a power of two; pass it
    as ``alibi_slopes`` to attnc.scaled_dot_product_attention.

    Example
    -------
    >>> attnc.alibi_slopes(4)
    array([0.25      , 0.0625    , 0.015625  , 0.00390625])
    >>> attnc.alibi_slopes(6)                 # 4 heads' slopes, then 8 heads' 1st and 3rd
    array([0.25      , 0.0625    , 0.015625  , 0.00390625, 0.5       , 0.125     ])
    """
    if isinstance(heads, bool) or not isinstance(heads, numbers.Integral) or heads < 0:
        raise ValueError(f"heads must be an int >= 0, got {heads!r}")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {np.dtype(dtype)}")
    return np.array(_slopes(int(heads)), dtype)


def _slopes(n: int) -> list[float]:
    if n == 0:
        return []
    power = 1 << (n.bit_length() - 1)  # the largest power of two <= n
    geometric = [2.0 ** (-8.0 * (i + 1) / power) for i in range(power)]
    return geometric if n == power else geometric + _slopes(2 * power)[0::2][: n - power]


register(scaled_dot_product_attention, _forward, _backward)
