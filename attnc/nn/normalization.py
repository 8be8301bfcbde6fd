"""attnc.nn.layer_norm and attnc.nn.LayerNorm, in C."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np

from .. import _core
from .._args import as_rows, elementwise_ready, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import Module


def _shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (normalized_shape,)
    if not isinstance(normalized_shape, Iterable) or isinstance(normalized_shape, str):
        raise TypeError(f"normalized_shape must be an int or a tuple of ints, got {normalized_shape!r}")
    return tuple(int_arg("normalized_shape", n, 0) for n in normalized_shape)


def _eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    return float(eps)


def _forward(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = float_array(input, "input")
    shape = _shape(normalized_shape)
    k = len(shape)
    if k == 0 or x.shape[x.ndim - k :] != shape or x.ndim < k:
        raise ValueError(f"input {shape_str(x.shape)} does not end with normalized_shape {shape_str(shape)}")
    params = []
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            p = float_array(p, name)
            same_dtype(x.dtype, **{name: p})
            if p.shape != shape:
                raise ValueError(f"{name} has shape {shape_str(p.shape)}, expected normalized_shape {shape_str(shape)}")
            p = elementwise_ready(p.reshape(-1))
        params.append(p)
    eps = _eps(eps)
    x2 = elementwise_ready(as_rows(x, k))
    y = np.empty(x2.shape, x.dtype)
    mean, rstd = np.empty(x2.shape[0], x.dtype), np.empty(x2.shape[0], x.dtype)
    _core.layer_norm_forward(output=y, mean=mean, rstd=rstd, input=x2, weight=params[0], bias=params[1], eps=eps)
    return y.reshape(x.shape), (x.shape, shape, x2, params, mean, rstd)


def _backward(saved, cotangents):
    xshape, shape, x2, (w, b), mean, rstd = saved
    (dy,) = cotangents
    dy2 = np.zeros(x2.shape, x2.dtype) if dy is None else elementwise_ready(dy.reshape(x2.shape))
    dx = np.empty(x2.shape, x2.dtype)
    dw = np.empty(x2.shape[1], x2.dtype) if w is not None else None
    db = np.empty(x2.shape[1], x2.dtype) if b is not None else None
    _core.layer_norm_backward(dinput=dx, dweight=dw, dbias=db, doutput=dy2, input=x2, weight=w, mean=mean, rstd=rstd)
    grads = {"input": dx.reshape(xshape)}
    if w is not None:
        grads["weight"] = dw.reshape(shape)
    if b is not None:
        grads["bias"] = db.reshape(shape)
    return grads


def _rms_norm(a, weight, eps):
    """RMSNorm over the last dim (Zhang & Sennrich 2019), in NumPy, for the
    attention modules that normalise inside (differential attention's heads,
    latent attention's latents): (a / rms(a) * weight, saved)."""
    r = 1.0 / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + eps)
    xhat = a * r
    return (xhat * weight).astype(a.dtype), (xhat, r, weight)


def _rms_norm_backward(saved, dy):
    """(da, dweight) of _rms_norm for the cotangent dy."""
    xhat, r, weight = saved
    dxhat = dy * weight
    dweight = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0).astype(weight.dtype)
    da = r * (dxhat - xhat * np.mean(dxhat * xhat, axis=-1, keepdims=True))
    return da.astype(dy.dtype), dweight


class _RMSWeight(Module):
    """An RMSNorm's elementwise weight (state_dict ``weight``), ones at first:
    a submodule, so the weight is named as torch's RMSNorm names it."""

    def __init__(self, dim, dtype):
        super().__init__(dtype)
        self._init_parameter("weight", (dim,), np.ones)

    def forward(self, x):
        return _rms_norm(x, self.weight, 1e-6)[0]


def layer_norm(
    input: ArrayLike,
    normalized_shape: int | Sequence[int],
    weight: ArrayLike | None = None,
    bias: ArrayLike | None = None,
    eps: float = 1e-5,
) -> Array:
    """Layer normalisation over the trailing ``normalized_shape`` dims, as
    ``torch.nn.functional.layer_norm``.

    y = (x - mean) / sqrt(var + eps) * weight + bias, the mean and the
    (biased) variance over the trailing dims.

    Parameters
    ----------
    input : array (..., *normalized_shape), float32 or float64
    normalized_shape : int or tuple of ints, the trailing dims normalised together
    weight, bias : arrays of shape normalized_shape, same dtype, or None
    eps : float >= 0

    Returns
    -------
    output : array, the input's shape and dtype

    Example
    -------
    >>> y = attnc.nn.layer_norm(np.random.rand(2, 5, 8), 8)
    >>> np.allclose(y.mean(-1), 0)
    True
    """
    return _forward(input, normalized_shape, weight, bias, eps)[0]


register(layer_norm, _forward, _backward)


class LayerNorm(Module):
    """``torch.nn.LayerNorm``: ``attnc.nn.layer_norm`` with its own weight and bias.

    Parameters
    ----------
    normalized_shape : int or tuple of ints, the trailing dims normalised together
    eps : float >= 0, added to the variance
    elementwise_affine : bool, whether there are ``weight`` and ``bias``
    bias : bool, whether there is a ``bias`` (with elementwise_affine)
    dtype : float32 or float64, the parameters' dtype

    Forward: input (..., *normalized_shape) -> the same shape, the module's dtype.

    ``state_dict()``: ``weight`` (ones) and ``bias`` (zeros), both of shape
    normalized_shape, as torch's.

    Example
    -------
    >>> norm = attnc.nn.LayerNorm(8)
    >>> y = norm(np.random.rand(2, 5, 8).astype(np.float32))
    >>> y.shape, y.dtype, bool(np.allclose(y.mean(-1), 0, atol=1e-6))
    ((2, 5, 8), dtype('float32'), True)
    >>> {k: v.shape for k, v in norm.state_dict().items()}
    {'weight': (8,), 'bias': (8,)}
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
    ) -> None:
        super().__init__(dtype)
        self.normalized_shape, self.eps = _shape(normalized_shape), _eps(eps)
        self._init_parameter("weight", self.normalized_shape, np.ones if elementwise_affine else None)
        self._init_parameter("bias", self.normalized_shape, np.zeros if elementwise_affine and bias else None)

    def forward(self, input: ArrayLike) -> Array:
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def _vjp_forward(self, input):
        return _forward(input, self.normalized_shape, self.weight, self.bias, self.eps)

    _vjp_backward = staticmethod(_backward)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}, "
            f"bias={self.bias is not None}"
        )
