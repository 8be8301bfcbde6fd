"""attnc.nn.linear and attnc.nn.Linear: y = x W^T + b, in C."""

from __future__ import annotations

import math

import numpy as np

from .. import _core
from .._args import as_rows, blas_ready, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import Module


def _forward(input, weight, bias=None):
    x = float_array(input, "input")
    w = float_array(weight, "weight")
    same_dtype(x.dtype, weight=w)
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(
            f"input {shape_str(x.shape)} and weight {shape_str(w.shape)} do not fit: input (..., in), weight (out, in)"
        )
    b = None
    if bias is not None:
        b = float_array(bias, "bias")
        same_dtype(x.dtype, bias=b)
        if b.shape != (w.shape[0],):
            raise ValueError(f"bias has shape {shape_str(b.shape)}, expected ({w.shape[0]},)")
    x2 = blas_ready(as_rows(x))
    w = blas_ready(w)
    y = linear_rows(x2, w, b)
    return y.reshape(x.shape[:-1] + (w.shape[0],)), (x.shape, x2, w, b is not None)


def linear_rows(x2, w, b):
    """The C kernel on checked arrays: x2 (N, in) @ w^T + b -> (N, out)."""
    y = np.empty((x2.shape[0], w.shape[0]), x2.dtype)
    _core.linear_forward(output=y, input=x2, weight=w, bias=b)
    return y


def linear_rows_backward(dy2, x2, w, has_bias):
    """(dx2, dw, db or None) of linear_rows for the cotangent dy2 (N, out)."""
    dx, dw = np.empty(x2.shape, x2.dtype), np.empty(w.shape, w.dtype)
    db = np.empty(w.shape[0], w.dtype) if has_bias else None
    _core.linear_backward(dinput=dx, dweight=dw, dbias=db, doutput=blas_ready(dy2), input=x2, weight=w)
    return dx, dw, db


def _backward(saved, cotangents):
    shape, x2, w, has_bias = saved
    (dy,) = cotangents
    dy2 = np.zeros((x2.shape[0], w.shape[0]), x2.dtype) if dy is None else as_rows(dy)
    dx, dw, db = linear_rows_backward(dy2, x2, w, has_bias)
    grads = {"input": dx.reshape(shape), "weight": dw}
    if has_bias:
        grads["bias"] = db
    return grads


def linear(input: ArrayLike, weight: ArrayLike, bias: ArrayLike | None = None) -> Array:
    """y = input @ weight^T + bias, as ``torch.nn.functional.linear``.

    Parameters
    ----------
    input : array (..., in), float32 or float64
    weight : array (out, in), same dtype
    bias : array (out,), same dtype, or None

    Returns
    -------
    output : array (..., out), the input's dtype; with in = 0 (a product of
        nothing) the bias broadcast, or zeros, as torch

    Example
    -------
    >>> attnc.nn.linear(np.ones((2, 3)), np.ones((4, 3))).shape
    (2, 4)
    """
    return _forward(input, weight, bias)[0]


register(linear, _forward, _backward)


class Linear(Module):
    """``torch.nn.Linear``: y = x W^T + b.

    Parameters
    ----------
    in_features, out_features : int, the sizes of the last axis in and out
    bias : bool, whether there is a ``bias``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (uniform in +-1/sqrt(in), as torch)

    Forward: input (..., in_features) -> (..., out_features), the module's dtype;
    either size may be 0 (in_features 0: the output is the bias, which then
    starts at 0, as torch's).

    ``state_dict()``: ``weight`` (out_features, in_features), ``bias`` (out_features,).

    Example
    -------
    >>> layer = attnc.nn.Linear(3, 2, seed=0)
    >>> layer(np.ones((4, 3), np.float32)).shape
    (4, 2)
    >>> {k: v.shape for k, v in layer.state_dict().items()}
    {'weight': (2, 3), 'bias': (2,)}
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        in_features, out_features = int_arg("in_features", in_features, 0), int_arg("out_features", out_features, 0)
        self.in_features, self.out_features = in_features, out_features
        rng = np.random.default_rng(seed)
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        uniform = lambda shape: rng.uniform(-bound, bound, shape)  # noqa: E731
        self._init_parameter("weight", (out_features, in_features), uniform)
        self._init_parameter("bias", (out_features,), uniform if bias else None)

    def forward(self, input: ArrayLike) -> Array:
        return linear(input, self.weight, self.bias)

    def _vjp_forward(self, input):
        return _forward(input, self.weight, self.bias)

    _vjp_backward = staticmethod(_backward)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
