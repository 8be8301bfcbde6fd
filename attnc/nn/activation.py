"""attnc.nn.relu, attnc.nn.ReLU, attnc.nn.relu_dropout, attnc.nn.gelu and
attnc.nn.GELU: max(x, 0) (and dropout after it) and GELU through the C
pointwise kernel (csrc/ops/nn/pointwise.c), with registered gradients."""

from __future__ import annotations

import numbers
from typing import Literal

import numpy as np

from .. import _core
from .._args import choice, float_array, seed_bits
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import Module

_RELU = 1  # ATTNC_ACT_RELU
_GELU = {"none": 2, "tanh": 3}  # torch's approximate= -> ATTNC_ACT_GELU, ATTNC_ACT_GELU_TANH


def _act_forward(input, act, p=0.0, seed=None):
    """(act then dropout, saved); any shape, a 0-d input included (order="C"
    keeps it 0-d, where np.ascontiguousarray would make it (1,))."""
    x = np.asarray(float_array(input, "input"), order="C")
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"p must be a dropout probability in [0, 1], got {p!r}")
    bits = seed_bits(seed) if p > 0 else 0
    y = np.empty_like(x)
    _core.activation_forward(output=y, input=x, activation=act, p=float(p), seed=bits)
    return y, (x, act, float(p), bits)


def _act_backward(saved, cotangents):
    x, act, p, bits = saved
    (dy,) = cotangents
    if dy is None:
        return {"input": np.zeros_like(x)}
    dx = np.empty_like(x)
    _core.activation_backward(dinput=dx, doutput=np.asarray(dy, order="C"), input=x, activation=act, p=p, seed=bits)
    return {"input": dx}


def _relu_dropout_forward(input, p=0.0, *, seed=None):
    return _act_forward(input, _RELU, p, seed)


def relu_dropout(input: ArrayLike, p: float = 0.0, *, seed: int | None = None) -> Array:
    """dropout(relu(input), p) in one C pass.

    Each element is kept with probability 1 - p and scaled by 1 / (1 - p), the
    keep decisions drawn from (seed, position) by attnc's counter-based
    generator (the same seed gives the same bits for any thread count; None
    draws a fresh seed). p = 0 is ``relu``. Gradients through ``attnc.vjp``
    use the same keep decisions.

    Parameters
    ----------
    input : array of any shape, float32 or float64
    p : float in [0, 1], the probability of dropping an element
    seed : int or None, the dropout bits' seed

    Returns
    -------
    output : array, same shape and dtype as ``input``

    Example
    -------
    >>> y = attnc.nn.relu_dropout(np.ones((2, 4)), 0.5, seed=0)
    >>> sorted(set(y.ravel().tolist())) <= [0.0, 2.0]
    True
    """
    return _relu_dropout_forward(input, p, seed=seed)[0]


register(relu_dropout, _relu_dropout_forward, _act_backward)


def _relu_forward(input):
    return _relu_dropout_forward(input, 0.0)


def relu(input: ArrayLike) -> Array:
    """max(input, 0) elementwise, as ``torch.nn.functional.relu``.

    Parameters
    ----------
    input : array of any shape (0-d included), float32 or float64 (the gradient at 0 is 0)

    Returns
    -------
    output : array, same shape and dtype as ``input``

    Example
    -------
    >>> attnc.nn.relu(np.array([-1.0, 0.5]))
    array([0. , 0.5])
    """
    return _relu_forward(input)[0]


register(relu, _relu_forward, _act_backward)


class ReLU(Module):
    """``torch.nn.ReLU()``: max(input, 0) elementwise, as a module.

    Parameters
    ----------
    dtype : float32 or float64 (there are no parameters; ``state_dict()`` is empty)

    Forward: input of any shape, float32 or float64 -> same shape and dtype.

    Example
    -------
    >>> act = attnc.nn.ReLU()
    >>> act(np.array([[-1.0, 2.0]], np.float32))
    array([[0., 2.]], dtype=float32)
    >>> len(act.state_dict())
    0
    """

    def __init__(self, *, dtype: DTypeLike = np.float32) -> None:
        super().__init__(dtype)

    def forward(self, input: ArrayLike) -> Array:
        return relu(input)

    def _vjp_forward(self, input):
        return _relu_forward(input)

    _vjp_backward = staticmethod(_act_backward)


Approximate = Literal["none", "tanh"]


def _gelu_forward(input, approximate="none"):
    return _act_forward(input, _GELU[choice(approximate, tuple(_GELU), "approximate")])


def gelu(input: ArrayLike, approximate: Approximate = "none") -> Array:
    """GELU elementwise, as ``torch.nn.functional.gelu``, forward and backward in C.

    approximate="none": x Phi(x) = x (1 + erf(x / sqrt(2))) / 2;
    approximate="tanh": x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2.

    Parameters
    ----------
    input : array of any shape (0-d included), float32 or float64
    approximate : "none" (exact, with erf) or "tanh"

    Returns
    -------
    output : array, same shape and dtype as ``input``

    Example
    -------
    >>> attnc.nn.gelu(np.array([-1.0, 0.0, 1.0])).round(4)
    array([-0.1587,  0.    ,  0.8413])
    >>> attnc.nn.gelu(np.array([1.0]), approximate="tanh").round(4)
    array([0.8412])
    """
    return _gelu_forward(input, approximate)[0]


register(gelu, _gelu_forward, _act_backward)


class GELU(Module):
    """``torch.nn.GELU(approximate)``: ``attnc.nn.gelu`` as a module.

    Parameters
    ----------
    approximate : "none" (exact, with erf) or "tanh"
    dtype : float32 or float64 (there are no parameters; ``state_dict()`` is empty)

    Forward: input of any shape, float32 or float64 -> same shape and dtype.

    Example
    -------
    >>> act = attnc.nn.GELU(approximate="tanh")
    >>> act(np.array([[-1.0, 2.0]], np.float32)).round(3)
    array([[-0.159,  1.955]], dtype=float32)
    >>> act
    GELU(approximate='tanh')
    """

    def __init__(self, approximate: Approximate = "none", *, dtype: DTypeLike = np.float32) -> None:
        super().__init__(dtype)
        self.approximate = choice(approximate, tuple(_GELU), "approximate")

    def forward(self, input: ArrayLike) -> Array:
        return gelu(input, self.approximate)

    def _vjp_forward(self, input):
        return _gelu_forward(input, self.approximate)

    _vjp_backward = staticmethod(_act_backward)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"
