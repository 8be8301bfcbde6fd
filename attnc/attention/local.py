"""attnc.local_attention: Luong et al.'s local attention (local-m, local-p)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from .. import _core
from .._args import (
    as_array,
    blas_ready,
    choice,
    elementwise_ready,
    float_array,
    mask_arrays,
    same_dtype,
    shape_str,
    unbroadcast,
)
from .._typing import Array, ArrayLike
from ..grad import register
from ._spec import Inputs, Score, ScoreKind

MODES = ("monotonic", "predictive")


def _positions(positions, inp: Inputs):
    """Given positions as an array of the call's dtype, broadcast to (..., Tq);
    (the array, whether it is differentiable, its own shape)."""
    p = as_array(positions, "positions")
    if p.dtype.kind in "iu":
        p, differentiable = p.astype(inp.dtype), False
    else:
        p = float_array(p, "positions")
        same_dtype(inp.dtype, positions=p)
        differentiable = True
    want = inp.batch + (inp.tq,)
    try:
        full = elementwise_ready(np.broadcast_to(p, want))
    except ValueError:
        raise ValueError(
            f"positions with shape {shape_str(p.shape)} does not broadcast to (..., Tq) = {shape_str(want)}"
        ) from None
    return full, differentiable, p.shape


def _predictor(w_p, v_p, inp: Inputs):
    for name, x in (("w_p", w_p), ("v_p", v_p)):
        if x is None:
            raise TypeError(f"mode='predictive' needs {name}")
    w = float_array(w_p, "w_p")
    v = float_array(v_p, "v_p")
    same_dtype(inp.dtype, w_p=w, v_p=v)
    if w.ndim != 2 or w.shape[0] != inp.dq:
        raise ValueError(f"w_p has shape {shape_str(w.shape)}; it needs (dq, dp) with dq = {inp.dq}")
    if v.shape != (w.shape[1],):
        raise ValueError(f"v_p has shape {shape_str(v.shape)}; it needs (dp,) = ({w.shape[1]},) to match w_p")
    return blas_ready(w), elementwise_ready(v)


def _forward(
    query,
    keys,
    values=None,
    *,
    window,
    mode="monotonic",
    positions=None,
    w_p=None,
    v_p=None,
    score="dot",
    mask=None,
    key_lengths=None,
    **params,
):
    mode = choice(mode, MODES, "mode")
    window = float(window)  # C checks its range, which depends on the mode
    inp = Inputs(query, keys, values)
    sc = Score(score, params, inp)
    m, kl = mask_arrays(mask, key_lengths, inp.batch, inp.tq, inp.tk)
    pos, pos_info, wp, vp = None, None, None, None
    if mode == "monotonic":
        for name, x in (("w_p", w_p), ("v_p", v_p)):
            if x is not None:
                raise TypeError(f"{name} is only for mode='predictive'")
        if positions is not None:
            pos, differentiable, shape = _positions(positions, inp)
            pos_info = shape if differentiable else None
    else:
        if positions is not None:
            raise TypeError("positions are predicted in mode='predictive'; pass them only with mode='monotonic'")
        wp, vp = _predictor(w_p, v_p, inp)
    # the mask's and the options' keywords, for the forward and the backward
    opts = {
        "mask": m,
        "key_lengths": kl,
        "causal": False,
        "mode": MODES.index(mode),
        "window": window,
        "positions": pos,
        "w_p": wp,
        "v_p": vp,
    }
    context, weights, out_pos = inp.empty(inp.tq, inp.dv), inp.empty(inp.tq, inp.tk), inp.empty(inp.tq)
    _core.local_attention_forward(
        context=context,
        weights=weights,
        positions_out=out_pos,
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        params=sc.c,
        **opts,
    )
    return (context, weights, out_pos), (inp, sc, opts, weights, out_pos, pos_info)


def _backward(saved, cotangents):
    inp, sc, opts, weights, out_pos, pos_info = saved
    dcontext, dweights, dpositions = cotangents
    predictive = opts["mode"] == 1
    dq, dk, dv = inp.backward_outputs()
    dwp = np.empty(opts["w_p"].shape, inp.dtype) if predictive else None
    dvp = np.empty(opts["v_p"].shape, inp.dtype) if predictive else None
    kwargs, finish = sc.grads(inp)
    scalars = _core.local_attention_backward(
        dquery=dq,
        dkeys=dk,
        dvalues=dv,
        dw_p=dwp,
        dv_p=dvp,
        dcontext=dcontext,
        dweights=dweights,
        dpositions=dpositions if predictive else None,
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        weights=weights,
        positions_out=out_pos,
        **kwargs,
        **opts,
    )
    grads = {**inp.grads(dq, dk, dv), **finish(scalars)}
    if predictive:
        grads.update(w_p=dwp, v_p=dvp)
    elif pos_info is not None:
        # The returned positions are the given ones; the window is a step
        # function of them, so only that identity passes a gradient back.
        if dpositions is None:
            grads["positions"] = np.zeros(pos_info, inp.dtype)
        else:
            grads["positions"] = unbroadcast(np.array(dpositions), pos_info)
    return grads


def local_attention(
    query: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike | None = None,
    *,
    window: float,
    mode: Literal["monotonic", "predictive"] = "monotonic",
    positions: ArrayLike | None = None,
    w_p: ArrayLike | None = None,
    v_p: ArrayLike | None = None,
    score: ScoreKind = "dot",
    mask: ArrayLike | None = None,
    key_lengths: ArrayLike | None = None,
    **params: float | ArrayLike,
) -> tuple[Array, Array, Array]:
    """Local attention (Luong et al. 2015): each query attends to a window of keys.

    Soft attention restricted to the keys s with |s - p_t| <= window around a
    centre p_t per query (given, t itself, or predicted from the query).

    Parameters
    ----------
    query : array (..., Tq, dq), float32 or float64
    keys : array (..., Tk, dk), same dtype and leading dims
    values : array (..., Tk, dv), optional (default ``keys``)
    score, mask, key_lengths, **params
        As in ``attnc.attention`` (there is no ``causal``).
    window : float, the half-width D: key s takes part when |s - p_t| <= D.
        D >= 0 for ``"monotonic"``, D >= 1 for ``"predictive"``.
    mode : ``"monotonic"`` (local-m): p_t = ``positions[..., t]`` if given
        (array broadcastable to (..., Tq)), else t. ``"predictive"`` (local-p):
        p_t = S * sigmoid(v_p^T tanh(q_t W_p)), S the number of valid keys,
        and the windowed softmax is multiplied by exp(-(s - p_t)^2 / (2 sigma^2)),
        sigma = D / 2 (not renormalised).
    w_p : array (dq, dp) and v_p : array (dp,), the call's dtype: the
        predictive mode's parameters.

    Returns
    -------
    context : array (..., Tq, dv), the input dtype
    weights : array (..., Tq, Tk), zero outside each window
    positions : array (..., Tq), float, the centres p_t

    Example
    -------
    >>> q = np.random.rand(5, 8); k = np.random.rand(9, 8)
    >>> context, weights, p = attnc.local_attention(q, k, window=2)
    >>> p
    array([0., 1., 2., 3., 4.])
    >>> (weights[0] > 0).astype(int)
    array([1, 1, 1, 0, 0, 0, 0, 0, 0])
    >>> w_p, v_p = np.random.rand(8, 4), np.random.rand(4)
    >>> context, weights, p = attnc.local_attention(q, k, window=2, mode="predictive", w_p=w_p, v_p=v_p)
    >>> context.shape, weights.shape, p.shape
    ((5, 8), (5, 9), (5,))
    """
    return _forward(
        query,
        keys,
        values,
        window=window,
        mode=mode,
        positions=positions,
        w_p=w_p,
        v_p=v_p,
        score=score,
        mask=mask,
        key_lengths=key_lengths,
        **params,
    )[0]


register(local_attention, _forward, _backward)
