"""attnc.softmax: the masked, numerically stable softmax over keys."""

from __future__ import annotations

import numpy as np

from .. import _core
from .._args import elementwise_ready, float_array, mask_arrays, shape_str
from .._typing import Array, ArrayLike
from ..grad import register


def _forward(scores, *, mask=None, key_lengths=None, causal=False):
    s = float_array(scores, "scores")
    if s.ndim < 2:
        raise ValueError(f"scores must have shape (..., Tq, Tk), got {shape_str(s.shape)}")
    s = elementwise_ready(s)
    m, kl = mask_arrays(mask, key_lengths, s.shape[:-2], *s.shape[-2:])
    w = np.empty(s.shape, dtype=s.dtype)
    _core.softmax_forward(weights=w, scores=s, mask=m, key_lengths=kl, causal=bool(causal))
    return w, w


def _backward(w, cotangents):
    (dw,) = cotangents
    ds = np.empty_like(w)
    if dw is None:
        ds.fill(0)
    else:
        _core.softmax_backward(dscores=ds, dweights=dw, weights=w)
    return {"scores": ds}


def softmax(
    scores: ArrayLike, *, mask: ArrayLike | None = None, key_lengths: ArrayLike | None = None, causal: bool = False
) -> Array:
    """Softmax over the last axis (keys), restricted to the keys each query may attend to.

    weights[..., i, j] = exp(s_ij) / sum_{j' allowed} exp(s_ij') for allowed j, else 0.

    Parameters
    ----------
    scores : array (..., Tq, Tk), float32 or float64
    mask : bool array broadcastable to (..., Tq, Tk), optional. True = may attend.
    key_lengths : int array broadcastable to the leading dims (...), optional.
        Keys at index >= length are padding.
    causal : bool. Query i may not attend to key j > i.

    The three restrictions combine (logical and). Stable for any finite
    scores (exact for scores of +-1e4); a row with no key it may attend to is
    all zeros, never NaN.

    Returns
    -------
    weights : array (..., Tq, Tk), the input dtype, rows summing to 1 (or 0
        when fully masked)

    Example
    -------
    >>> attnc.softmax(np.array([[1.0, 2.0, 3.0]]), key_lengths=2)
    array([[0.26894142, 0.73105858, 0.        ]])
    >>> w = attnc.softmax(np.zeros((3, 3), np.float32), causal=True)
    >>> w.dtype, w.sum(axis=-1)
    (dtype('float32'), array([1., 1., 1.], dtype=float32))
    """
    return _forward(scores, mask=mask, key_lengths=key_lengths, causal=causal)[0]


register(softmax, _forward, _backward)
