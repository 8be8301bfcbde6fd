"""attnc.KVCache: keys and values of past tokens for incremental decoding."""

from __future__ import annotations

import numbers
from typing import Literal, overload

import numpy as np

from .. import _core
from .._args import FLOAT_DTYPES, blas_ready, default_scale, float_array, heads_share, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from ._spec import sdpa_options, variant_grads, variant_options


class KVCache:
    """Keys and values of the tokens decoded so far, for attention that grows
    one step at a time.

    ``KVCache(batch, heads, capacity, head_dim, dtype)`` holds keys and values
    of shape (batch, heads, capacity, head_dim) (``value_dim`` if values are
    wider). ``append(key, value)`` adds t new positions, (batch, heads, t,
    head_dim); ``attend(query)`` runs the fused kernel for t new queries
    (batch, H, t, head_dim) against everything cached, the new block causal
    among itself (query i of the block sees cached positions up to
    length - t + i). H may be a multiple of ``heads`` (grouped-query
    attention: a cached head serves H / heads query heads, never copied).
    Decoding T tokens one at a time costs O(T * length * head_dim) and gives
    the same outputs as causal attention over the whole sequence.

    Parameters
    ----------
    batch, heads : int >= 0, the cache's batch size and number of key/value heads
    capacity : int >= 0, the most positions it can hold
    head_dim : int >= 0, the width of a key (and of a query)
    dtype : float32 or float64, of the cache and of every array passed to it
    value_dim : int >= 0, optional, the width of a value (default head_dim)

    Any of them may be 0: the arrays, and so the results, are then empty.

    Attributes
    ----------
    ``len(cache)`` / ``length``: positions cached so far; ``capacity``;
    ``keys`` (batch, heads, length, head_dim) and ``values`` (batch, heads,
    length, value_dim): read-only views. ``reset()`` empties it.
    ``attend`` is differentiable with ``attnc.vjp(cache.attend, query)``
    (gradients ``"query"``, ``"keys"``, ``"values"`` of the cached positions).

    Example
    -------
    >>> cache = attnc.KVCache(1, 2, capacity=16, head_dim=8, dtype=np.float32)
    >>> for t in range(3):
    ...     k = v = q = np.random.rand(1, 2, 1, 8).astype(np.float32)
    ...     cache.append(k, v)
    ...     out = cache.attend(q)
    >>> len(cache), out.shape, out.dtype
    (3, (1, 2, 1, 8), dtype('float32'))
    >>> out, w = cache.attend(np.random.rand(1, 4, 1, 8).astype(np.float32), return_weights=True)
    >>> w.shape, cache.keys.shape                 # 4 query heads share the 2 cached heads
    ((1, 4, 1, 3), (1, 2, 3, 8))
    """

    def __init__(
        self,
        batch: int,
        heads: int,
        capacity: int,
        head_dim: int,
        dtype: DTypeLike = np.float32,
        *,
        value_dim: int | None = None,
    ) -> None:
        value_dim = head_dim if value_dim is None else value_dim
        for name, n in (
            ("batch", batch),
            ("heads", heads),
            ("capacity", capacity),
            ("head_dim", head_dim),
            ("value_dim", value_dim),
        ):
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
                raise ValueError(f"{name} must be an int >= 0, got {n!r}")
        dtype = np.dtype(dtype)
        if dtype not in FLOAT_DTYPES:
            raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        self._k = np.zeros((batch, heads, capacity, head_dim), dtype)
        self._v = np.zeros((batch, heads, capacity, value_dim), dtype)
        self.length = 0

    def __len__(self) -> int:
        return self.length

    @property
    def capacity(self) -> int:
        return self._k.shape[2]

    @property
    def keys(self) -> Array:
        """The cached keys, (batch, heads, length, head_dim) (a read-only view)."""
        view = self._k[:, :, : self.length]
        view.flags.writeable = False
        return view

    @property
    def values(self) -> Array:
        """The cached values, (batch, heads, length, value_dim) (a read-only view)."""
        view = self._v[:, :, : self.length]
        view.flags.writeable = False
        return view

    def reset(self) -> None:
        """Forget every cached position."""
        self.length = 0

    def append(self, key: ArrayLike, value: ArrayLike) -> None:
        """Cache t new positions: key (batch, heads, t, head_dim), value (batch, heads, t, value_dim)."""
        k = float_array(key, "key")
        v = float_array(value, "value")
        same_dtype(self._k.dtype, key=k, value=v)
        b, h, _, e = self._k.shape
        if k.ndim != 4 or k.shape[:2] != (b, h) or k.shape[3] != e:
            raise ValueError(f"key has shape {shape_str(k.shape)}, expected ({b}, {h}, t, {e})")
        if v.shape != k.shape[:3] + (self._v.shape[3],):
            want = shape_str(k.shape[:3] + (self._v.shape[3],))
            raise ValueError(f"value has shape {shape_str(v.shape)}, expected {want}")
        t = k.shape[2]
        if self.length + t > self.capacity:
            raise ValueError(f"appending {t} positions to {self.length} exceeds the capacity {self.capacity}")
        self._k[:, :, self.length : self.length + t] = k
        self._v[:, :, self.length : self.length + t] = v
        self.length += t

    @overload
    def attend(
        self,
        query: ArrayLike,
        *,
        scale: float | None = ...,
        return_weights: Literal[False] = ...,
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
    def attend(
        self,
        query: ArrayLike,
        *,
        scale: float | None = ...,
        return_weights: Literal[True],
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
    def attend(
        self,
        query: ArrayLike,
        *,
        scale: float | None = ...,
        return_weights: bool = ...,
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
    def attend(
        self,
        query: ArrayLike,
        *,
        scale: float | None = None,
        return_weights: bool = False,
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
        """Attention of t new queries (batch, H, t, head_dim) on the cache; the
        last t cached positions are the queries' own (causal among them).
        Returns (batch, H, t, value_dim), and the (batch, H, t, length)
        weights with return_weights.

        alibi_slopes, window, softcap, sinks: as in
        attnc.scaled_dot_product_attention, with the queries at their own
        positions: query i of the block sits at key position length - t + i
        (bottom-right aligned), so ALiBi's distance and the window count back
        from it (window=(W - 1, 0) keeps the last W positions; the right side
        is moot under causal attention). Decoding step by step gives what one
        call over the whole sequence gives.

        segment_ids, prefix_lengths, block_mask (with block_size),
        activation, sigmoid_bias: as in attnc.scaled_dot_product_attention,
        over the cache's positions: segment_ids is a pair (query_segments
        (batch, t), key_segments (batch, length)), or one (batch, length)
        array when t == length; prefix_lengths (batch,) or an int counts
        cache positions (query i, at position length - t + i, may attend key
        j if j <= length - t + i or j < prefix); block_mask is (batch or 1,
        H or 1, ceil(t / bq), ceil(length / bk)), its query blocks counted
        from the first new query; sigmoid_bias defaults to -log length.

        Example
        -------
        >>> cache = attnc.KVCache(1, 2, capacity=16, head_dim=4)
        >>> x = np.random.rand(1, 2, 10, 4).astype(np.float32)
        >>> cache.append(x, x)
        >>> cache.attend(x[:, :, -1:], window=(3, 0), sinks=np.zeros(2, np.float32)).shape
        (1, 2, 1, 4)
        >>> ids = np.array([[0, 0, 0, 0, 1, 1, 1, 1, 1, 1]])            # the last 6 positions: a new document
        >>> _, w = cache.attend(x[:, :, -1:], segment_ids=(ids[:, -1:], ids), return_weights=True)
        >>> int((w[0, 0, 0] > 0).sum())
        6
        """
        return _attend_forward(
            self,
            query,
            scale=scale,
            return_weights=return_weights,
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


def _attend_forward(cache: KVCache, query, *, scale=None, return_weights=False, **variants):
    q = float_array(query, "query")
    same_dtype(cache._k.dtype, query=q)
    b, hkv, _, e = cache._k.shape
    if q.ndim != 4 or q.shape[0] != b or q.shape[3] != e or not heads_share(q.shape[1], hkv):
        raise ValueError(f"query has shape {shape_str(q.shape)}, expected ({b}, H, t, {e}) with H a multiple of {hkv}")
    h, t, length = q.shape[1], q.shape[2], cache.length
    if t > length:
        raise ValueError(f"{t} queries but only {length} cached positions: append their keys and values first")
    extra = variant_options(h, q.dtype, kernel=((b,), t, length), **variants)
    options = sdpa_options(
        default_scale(e) if scale is None else scale, causal=True, causal_offset=length - t, variants=extra
    )
    q = blas_ready(q)
    k, v = cache._k[:, :, :length], cache._v[:, :, :length]
    out = np.empty((b, h, t, v.shape[3]), q.dtype)
    lse = np.empty((b, h, t), q.dtype)
    weights = np.empty((b, h, t, length), q.dtype) if return_weights else None
    _core.sdpa_forward(output=out, lse=lse, weights=weights, query=q, key=k, value=v, options=options)
    # The pullback must see the cache as it was: keep copies of the keys and values.
    saved = (options, q, k.copy(), v.copy(), out, lse)
    return ((out, weights) if return_weights else out), saved


def _attend_backward(saved, cotangents):
    options, q, k, v, out, lse = saved
    dout = cotangents[0]
    dweights = cotangents[1] if len(cotangents) > 1 else None
    if dout is None:
        dout = np.zeros(out.shape, out.dtype)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    extra = variant_grads(options, q.shape[1], q.dtype)
    _core.sdpa_backward(
        dquery=dq,
        dkey=dk,
        dvalue=dv,
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
    return {"query": dq, "keys": dk, "values": dv, **extra}


register(KVCache.attend, _attend_forward, _attend_backward)
