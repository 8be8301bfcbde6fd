"""attnc.attention: soft attention, the context and the alignment matrix."""

from __future__ import annotations

from .. import _core
from .._args import mask_arrays
from .._typing import Array, ArrayLike
from ..grad import register
from ._spec import Inputs, Score, ScoreKind


def _forward(query, keys, values=None, *, score="dot", mask=None, key_lengths=None, causal=False, **params):
    inp = Inputs(query, keys, values)
    sc = Score(score, params, inp)
    m, kl = mask_arrays(mask, key_lengths, inp.batch, inp.tq, inp.tk)
    context, weights = inp.empty(inp.tq, inp.dv), inp.empty(inp.tq, inp.tk)
    _core.attention_forward(
        context=context,
        weights=weights,
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        mask=m,
        key_lengths=kl,
        causal=bool(causal),
        params=sc.c,
    )
    return (context, weights), (inp, sc, weights)


def _backward(saved, cotangents):
    inp, sc, weights = saved
    dcontext, dweights = cotangents
    dq, dk, dv = inp.backward_outputs()
    kwargs, finish = sc.grads(inp)
    scalars = _core.attention_backward(
        dquery=dq,
        dkeys=dk,
        dvalues=dv,
        dcontext=dcontext,
        dweights=dweights,
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        weights=weights,
        **kwargs,
    )
    return {**inp.grads(dq, dk, dv), **finish(scalars)}


def attention(
    query: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike | None = None,
    *,
    score: ScoreKind = "dot",
    mask: ArrayLike | None = None,
    key_lengths: ArrayLike | None = None,
    causal: bool = False,
    **params: float | ArrayLike,
) -> tuple[Array, Array]:
    """Soft attention: context = softmax(score(query, keys)) @ values.

    weights[..., i, j] = softmax_j(score(query[..., i], keys[..., j])) over the
    keys query i may attend to; context[..., i] = sum_j weights[..., i, j] values[..., j].

    Parameters
    ----------
    query : array (..., Tq, dq), float32 or float64
    keys : array (..., Tk, dk), same dtype and leading dims
    values : array (..., Tk, dv), same dtype, optional; defaults to ``keys``
        (the gradient of ``"keys"`` then covers both uses)
    score : str, one of ``attnc.score``'s kinds (``"dot"``, ``"scaled_dot"``,
        ``"general"``, ``"additive"``/``"concat"``, ``"cosine"``, ``"location"``,
        ``"gaussian"``); its parameters go in ``**params``
    mask : bool array broadcastable to (..., Tq, Tk), optional; True = may attend
    key_lengths : int array broadcastable to (...), optional; the number of
        valid keys (keys at index >= length are padding)
    causal : bool, query i may not attend to key j > i
    **params : float or array
        The score's parameters (see ``attnc.score``); arrays of the call's
        dtype are differentiable with ``attnc.vjp``.

    Returns
    -------
    context : array (..., Tq, dv), the input dtype
    weights : array (..., Tq, Tk), the alignment matrix. Rows with no key to
        attend to are zero (and so is their context).

    Example
    -------
    >>> q = np.random.rand(4, 8); k = np.random.rand(6, 8); v = np.random.rand(6, 3)
    >>> context, weights = attnc.attention(q, k, v, score="scaled_dot", causal=True)
    >>> context.shape, weights.shape, context.dtype
    ((4, 3), (4, 6), dtype('float64'))
    >>> weights.sum(axis=-1).round(6)
    array([1., 1., 1., 1.])
    """
    return _forward(query, keys, values, score=score, mask=mask, key_lengths=key_lengths, causal=causal, **params)[0]


register(attention, _forward, _backward)
