"""attnc.score: the score family, raw scores before any softmax."""

from __future__ import annotations

from .. import _core
from .._typing import Array, ArrayLike
from ..grad import register
from ._spec import Inputs, Score, ScoreKind


def _forward(query, keys, *, score="dot", **params):
    inp = Inputs(query, keys)
    sc = Score(score, params, inp)
    out = inp.empty(inp.tq, inp.tk)
    _core.score_forward(scores=out, query=inp.query, keys=inp.keys, params=sc.c)
    return out, (inp, sc)


def _backward(saved, cotangents):
    inp, sc = saved
    (ds,) = cotangents
    if ds is None:
        ds = inp.empty(inp.tq, inp.tk)
        ds.fill(0)
    dq, dk = inp.empty(inp.tq, inp.dq), inp.empty(inp.tk, inp.dk)
    kwargs, finish = sc.grads(inp)
    scalars = _core.score_backward(dquery=dq, dkeys=dk, dscores=ds, query=inp.query, keys=inp.keys, **kwargs)
    return {"query": dq, "keys": dk, **finish(scalars)}


def score(query: ArrayLike, keys: ArrayLike, *, score: ScoreKind = "dot", **params: float | ArrayLike) -> Array:
    """Raw attention scores of every query against every key.

    scores[..., i, j] = score(query[..., i, :], keys[..., j, :]), before any softmax.

    Parameters
    ----------
    query : array (..., Tq, dq), float32 or float64
    keys : array (..., Tk, dk), same dtype and leading dims
    score : str
        ``"dot"``: q.k. ``"scaled_dot"``: q.k * ``scale`` (default 1/sqrt(dk)).
        ``"general"``: q W k^T, ``weight`` (dq, dk). ``"additive"`` (alias
        ``"concat"``): v^T tanh(q W_q + k W_k), ``w_query`` (dq, da), ``w_key``
        (dk, da), ``v`` (da,). ``"cosine"``: beta * q.k / max(|q||k|, 1e-8),
        ``beta`` a float or an array broadcastable to (..., Tq), default 1.
        ``"location"``: q W, ``weight`` (dq, Tk); keys only fix Tk.
        ``"gaussian"``: -|q - k|^2 / (2 bandwidth^2), ``bandwidth`` default 1.
    **params : float or array
        The score's parameters. Python floats are constants; float arrays of
        the call's dtype (0-d included) are differentiable with ``attnc.vjp``.

    Returns
    -------
    scores : array (..., Tq, Tk), the input dtype

    Example
    -------
    >>> q = np.random.rand(2, 3, 8); k = np.random.rand(2, 5, 8)
    >>> s = attnc.score(q, k, score="scaled_dot")
    >>> s.shape, s.dtype
    ((2, 3, 5), dtype('float64'))
    >>> w = np.random.rand(8, 4).astype(np.float32)
    >>> attnc.score(q[0].astype(np.float32), k[0, :, :4].astype(np.float32), score="general", weight=w).shape
    (3, 5)
    """
    return _forward(query, keys, score=score, **params)[0]


register(score, _forward, _backward)
