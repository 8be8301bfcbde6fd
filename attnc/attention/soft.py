"""attnc.attention: soft attention, the context and the alignment matrix."""

from __future__ import annotations

from .. import _core
from .._args import mask_spec
from ..grad import register
from ._spec import Inputs, Score


def _forward(query, keys, values=None, *, score="dot", mask=None, key_lengths=None, causal=False, **params):
    inp = Inputs(query, keys, values)
    sc = Score(score, params, inp)
    ms = mask_spec(mask, key_lengths, causal, inp.batch, inp.tq, inp.tk)
    context, weights = inp.empty(inp.tq, inp.dv), inp.empty(inp.tq, inp.tk)
    _core.attention_forward(sc.c, ms, inp.query, inp.keys, inp.values, context, weights)
    return (context, weights), (inp, sc, weights)


def _backward(saved, cotangents):
    inp, sc, weights = saved
    dcontext, dweights = cotangents
    dq, dk, dv = inp.backward_outputs()
    spec, finish = sc.grads(inp)
    scalars = _core.attention_backward(
        sc.c, spec, dcontext, dweights, inp.query, inp.keys, inp.values, weights, dq, dk, dv
    )
    return {**inp.grads(dq, dk, dv), **finish(scalars)}


def attention(query, keys, values=None, *, score="dot", mask=None, key_lengths=None, causal=False, **params):
    """Soft attention: context = softmax(score(query, keys)) @ values.

    Parameters
    ----------
    query : array (..., Tq, dq), float32 or float64
    keys : array (..., Tk, dk), same dtype and leading dims
    values : array (..., Tk, dv), optional; defaults to ``keys`` (the gradient
        of ``"keys"`` then covers both uses)
    score : str, one of ``attnc.score``'s kinds; its parameters go in ``**params``
    mask : bool array broadcastable to (..., Tq, Tk), True = may attend
    key_lengths : int array broadcastable to (...), number of valid keys
    causal : bool, query i may not attend to key j > i

    Returns
    -------
    context : array (..., Tq, dv)
    weights : array (..., Tq, Tk), the alignment matrix. Rows with no key to
        attend to are zero (and so is their context).

    Example
    -------
    >>> q = np.random.rand(4, 8); k = np.random.rand(6, 8); v = np.random.rand(6, 3)
    >>> context, weights = attnc.attention(q, k, v, score="scaled_dot", causal=True)
    >>> context.shape, weights.shape
    ((4, 3), (4, 6))
    """
    return _forward(query, keys, values, score=score, mask=mask, key_lengths=key_lengths, causal=causal, **params)[0]


register(attention, _forward, _backward)
