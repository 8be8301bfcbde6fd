"""attnc.nn.gated_activation: tanh(input) * sigmoid(gate), the gated
activation of WaveNet and of SNAIL's dense blocks, in C."""

from __future__ import annotations

import numpy as np

from .. import _core
from .._args import float_array, same_dtype, shape_str
from .._typing import Array, ArrayLike
from ..grad import register


def _forward(input, gate):
    a = float_array(input, "input")
    b = float_array(gate, "gate")
    same_dtype(a.dtype, gate=b)
    if a.shape != b.shape:
        raise ValueError(f"input {shape_str(a.shape)} and gate {shape_str(b.shape)} must have the same shape")
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    y = np.empty(a.shape, a.dtype)
    _core.gated_forward(output=y, input=a, gate=b)
    return y, (a, b)


def _backward(saved, cotangents):
    a, b = saved
    (dy,) = cotangents
    if dy is None:
        return {"input": np.zeros_like(a), "gate": np.zeros_like(b)}
    da, db = np.empty_like(a), np.empty_like(b)
    _core.gated_backward(dinput=da, dgate=db, doutput=np.ascontiguousarray(dy), input=a, gate=b)
    return {"input": da, "gate": db}


def gated_activation(input: ArrayLike, gate: ArrayLike) -> Array:
    """tanh(input) ⊙ sigmoid(gate), element-wise (one C pass).

    ``attnc.vjp(gated_activation, input, gate)`` gives the gradients "input" =
    dy (1 − tanh²(input)) sigmoid(gate) and "gate" = dy tanh(input)
    sigmoid(gate) (1 − sigmoid(gate)).

    Parameters
    ----------
    input : array of any shape, float32 or float64
    gate : array, the same shape and dtype

    Returns
    -------
    output : array, that shape and dtype

    Example
    -------
    >>> attnc.nn.gated_activation(np.zeros(3), np.zeros(3))
    array([0., 0., 0.])
    """
    return _forward(input, gate)[0]


register(gated_activation, _forward, _backward)
