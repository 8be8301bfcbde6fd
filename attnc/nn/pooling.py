"""attnc.nn.attention_pool and attnc.nn.AttentionPooling: a sequence of
vectors to one vector by a learned attention (Raffel & Ellis 2015, "Feed-
forward networks with attention can solve some long-term memory problems";
Yang et al. 2016, "Hierarchical attention networks"), in C.

    u_t = tanh(W h_t + b),   e_t = v . u_t,   alpha = softmax_t(e) over the
    positions that take part,   c = sum_t alpha_t h_t.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _core
from .._args import as_array, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import Module


def _mask(mask, shape):
    if mask is None:
        return None
    m = as_array(mask, "mask")
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be a boolean array (True = takes part), got dtype {m.dtype}")
    try:
        return np.ascontiguousarray(np.broadcast_to(m, shape))
    except ValueError:
        raise ValueError(
            f"mask with shape {shape_str(m.shape)} does not broadcast to (B, T) = {shape_str(shape)}"
        ) from None


def _forward(input, weight, bias=None, v=None, mask=None):
    h = float_array(input, "input")
    w = float_array(weight, "weight")
    if v is None:
        raise TypeError("v is required: the scoring vector (d_attn,)")
    vv = float_array(v, "v")
    b = None if bias is None else float_array(bias, "bias")
    same_dtype(h.dtype, weight=w, bias=b, v=vv)
    if h.ndim != 3:
        raise ValueError(f"input must have shape (B, T, d), got {shape_str(h.shape)}")
    if w.ndim != 2 or w.shape[1] != h.shape[2]:
        raise ValueError(
            f"weight has shape {shape_str(w.shape)}, expected (d_attn, {h.shape[2]}) for input {shape_str(h.shape)}"
        )
    da = w.shape[0]  # C checks v's and bias's shapes, (da,)
    B, T, d = h.shape
    m = _mask(mask, (B, T))
    h, w, vv = np.ascontiguousarray(h), np.ascontiguousarray(w), np.ascontiguousarray(vv)
    b = None if b is None else np.ascontiguousarray(b)
    c, alpha, u = np.empty((B, d), h.dtype), np.empty((B, T), h.dtype), np.empty((B, T, da), h.dtype)
    _core.attention_pool_forward(output=c, weights=alpha, saved=u, input=h, weight=w, bias=b, v=vv, mask=m)
    return (c, alpha), (h, w, b is not None, vv, alpha, u)


def _backward(saved, cotangents):
    h, w, has_bias, v, alpha, u = saved
    dc, dalpha = cotangents
    if dc is None:
        dc = np.zeros((h.shape[0], h.shape[2]), h.dtype)
    dh, dw, dv = np.empty_like(h), np.empty_like(w), np.empty_like(v)
    db = np.empty_like(v) if has_bias else None
    _core.attention_pool_backward(
        dinput=dh,
        dweight=dw,
        dbias=db,
        dv=dv,
        doutput=np.ascontiguousarray(dc),
        dweights=None if dalpha is None else np.ascontiguousarray(dalpha),
        input=h,
        weight=w,
        v=v,
        weights=alpha,
        saved=u,
    )
    grads = {"input": dh, "weight": dw, "v": dv}
    if has_bias:
        grads["bias"] = db
    return grads


def attention_pool(
    input: ArrayLike,
    weight: ArrayLike,
    bias: ArrayLike | None = None,
    v: ArrayLike | None = None,
    mask: ArrayLike | None = None,
) -> tuple[Array, Array]:
    """Attention pooling: ``c = sum_t alpha_t h_t`` with ``alpha = softmax_t(v . tanh(W h_t + b))``.

    Parameters
    ----------
    input : array (B, T, d), float32 or float64: the sequence h
    weight : array (d_attn, d), W
    bias : array (d_attn,) or None, b
    v : array (d_attn,), the scoring vector (required; the default None is an error)
    mask : bool array broadcastable to (B, T), optional. True = the position
        takes part (attnc's convention). A row with no position taking part
        gets ``c = 0`` and ``alpha = 0`` (never NaN), and no gradient.

    Returns
    -------
    c : array (B, d), the pooled vectors, the input's dtype
    alpha : array (B, T), the weights (rows sum to 1, or 0 when fully masked)

    ``attnc.vjp`` gives gradients for "input", "weight", "bias" and "v".

    Example
    -------
    >>> h = np.random.rand(2, 5, 4); w = np.random.rand(3, 4); v = np.random.rand(3)
    >>> c, alpha = attnc.nn.attention_pool(h, w, None, v, mask=np.arange(5) < 3)
    >>> c.shape, alpha.shape, alpha.sum(1).round(6).tolist(), float(alpha[:, 3:].sum())
    ((2, 4), (2, 5), [1.0, 1.0], 0.0)
    """
    return _forward(input, weight, bias, v, mask)[0]


register(attention_pool, _forward, _backward)


class AttentionPooling(Module):
    """Attention pooling as a module: ``attnc.nn.attention_pool`` with its own W, b and v.

    c = sum_t alpha_t h_t, alpha = softmax_t(v . tanh(W h_t + b)).

    Parameters
    ----------
    d : int >= 0, the width of the pooled vectors
    d_attn : int >= 0, the width of the scoring layer
    bias : bool, whether there is a ``bias``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation

    ``forward(input, mask=None, return_weights=False)``: input h (B, T, d),
    mask (B, T) bool (True = takes part) -> c (B, d), or (c, alpha (B, T)).
    ``attnc.vjp(pool, h, mask=...)`` returns gradients keyed "input", "weight",
    "bias", "v" (outputs (c, alpha): give cotangents for both, None for unused).

    ``state_dict()``: ``weight`` (d_attn, d) and ``bias`` (d_attn,), the
    projection W h_t + b, initialised like ``torch.nn.Linear`` (uniform in
    +-1/sqrt(d)); ``v`` (d_attn,), the scoring vector, uniform in +-1/sqrt(d_attn).

    Example
    -------
    >>> pool = attnc.nn.AttentionPooling(8, 16, seed=0)
    >>> c, alpha = pool(np.random.rand(2, 5, 8).astype(np.float32), return_weights=True)
    >>> c.shape, alpha.shape, c.dtype
    ((2, 8), (2, 5), dtype('float32'))
    >>> {k: v.shape for k, v in pool.state_dict().items()}
    {'weight': (16, 8), 'bias': (16,), 'v': (16,)}
    """

    def __init__(
        self, d: int, d_attn: int, *, bias: bool = True, dtype: DTypeLike = np.float32, seed: int | None = None
    ) -> None:
        super().__init__(dtype)
        self.d, self.d_attn = d, d_attn = int_arg("d", d, 0), int_arg("d_attn", d_attn, 0)
        rng = np.random.default_rng(seed)
        bound, v_bound = (1 / math.sqrt(n) if n else 0.0 for n in (d, d_attn))  # as torch.nn.Linear's
        self._init_parameter("weight", (d_attn, d), lambda shape: rng.uniform(-bound, bound, shape))
        self._init_parameter("bias", (d_attn,), (lambda shape: rng.uniform(-bound, bound, shape)) if bias else None)
        self._init_parameter("v", (d_attn,), lambda shape: rng.uniform(-v_bound, v_bound, shape))

    def forward(
        self, input: ArrayLike, mask: ArrayLike | None = None, return_weights: bool = False
    ) -> Array | tuple[Array, Array]:
        c, alpha = attention_pool(input, self.weight, self.bias, self.v, mask)
        return (c, alpha) if return_weights else c

    def _vjp_forward(self, input, mask=None):
        return _forward(input, self.weight, self.bias, self.v, mask)

    _vjp_backward = staticmethod(_backward)

    def extra_repr(self) -> str:
        return f"d={self.d}, d_attn={self.d_attn}, bias={self.bias is not None}"
