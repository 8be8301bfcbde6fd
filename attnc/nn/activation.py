"""attnc.nn.relu and attnc.nn.ReLU: max(x, 0) through the C pointwise
kernel (csrc/nn/pointwise.c), with a registered gradient."""

from __future__ import annotations

import numpy as np

from .. import _core
from .._args import float_array
from ..grad import register
from .module import Module

_RELU = 1  # ATTNC_ACT_RELU


def _relu_forward(input):
    x = np.ascontiguousarray(float_array(input, "input"))
    y = np.empty_like(x)
    _core.activation_forward(y, x, _RELU)
    return y, x


def _relu_backward(x, cotangents):
    (dy,) = cotangents
    if dy is None:
        return {"input": np.zeros_like(x)}
    dx = np.empty_like(x)
    _core.activation_backward(dx, np.ascontiguousarray(dy), x, _RELU)
    return {"input": dx}


def relu(input):
    """max(input, 0) elementwise, as ``torch.nn.functional.relu``; any shape,
    float32 or float64; the gradient at 0 is 0.

    Example
    -------
    >>> attnc.nn.relu(np.array([-1.0, 0.5]))
    array([0. , 0.5])
    """
    return _relu_forward(input)[0]


register(relu, _relu_forward, _relu_backward)


class ReLU(Module):
    """``torch.nn.ReLU()``: no parameters."""

    def __init__(self, *, dtype=np.float32):
        super().__init__(dtype)

    def forward(self, input):
        return relu(input)

    def _vjp_forward(self, input):
        return _relu_forward(input)

    _vjp_backward = staticmethod(_relu_backward)
