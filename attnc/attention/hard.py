"""attnc.hard_attention: one key per query (argmax, sampled, or Gumbel-max)."""

from __future__ import annotations

from typing import Literal

from .. import _core
from .._args import choice, mask_arrays, seed_bits
from .._typing import Array, ArrayLike
from ..grad import register
from ._spec import Inputs, Score, ScoreKind

MODES = ("argmax", "sample", "gumbel")


def _forward(
    query,
    keys,
    values=None,
    *,
    mode="argmax",
    temperature=1.0,
    seed=None,
    score="dot",
    mask=None,
    key_lengths=None,
    causal=False,
    **params,
):
    mode = choice(mode, MODES, "mode")
    temperature = float(temperature)  # C checks temperature > 0
    inp = Inputs(query, keys, values)
    sc = Score(score, params, inp)
    m, kl = mask_arrays(mask, key_lengths, inp.batch, inp.tq, inp.tk)
    # the mask's and the options' keywords, for the forward and the backward
    opts = {
        "mask": m,
        "key_lengths": kl,
        "causal": bool(causal),
        "mode": MODES.index(mode),
        "temperature": temperature,
        "seed": seed_bits(seed),
    }
    context, weights = inp.empty(inp.tq, inp.dv), inp.empty(inp.tq, inp.tk)
    indices = inp.empty(inp.tq, dtype="int64")
    _core.hard_attention_forward(
        context=context,
        weights=weights,
        indices=indices,
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        params=sc.c,
        **opts,
    )
    return (context, weights, indices), (inp, sc, opts, indices)


def _backward(saved, cotangents):
    inp, sc, opts, indices = saved
    dcontext, dweights, _ = cotangents
    dq, dk, dv = inp.backward_outputs()
    kwargs, finish = sc.grads(inp)
    scalars = _core.hard_attention_backward(
        dquery=dq,
        dkeys=dk,
        dvalues=dv,
        dcontext=dcontext,
        dweights=dweights,
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        indices=indices,
        **kwargs,
        **opts,
    )
    return {**inp.grads(dq, dk, dv), **finish(scalars)}


def hard_attention(
    query: ArrayLike,
    keys: ArrayLike,
    values: ArrayLike | None = None,
    *,
    mode: Literal["argmax", "sample", "gumbel"] = "argmax",
    temperature: float = 1.0,
    seed: int | None = None,
    score: ScoreKind = "dot",
    mask: ArrayLike | None = None,
    key_lengths: ArrayLike | None = None,
    causal: bool = False,
    **params: float | ArrayLike,
) -> tuple[Array, Array, Array]:
    """Hard attention: each query reads exactly one key's value.

    context[..., i] = values[..., idx_i], idx_i picked from the scores of query i.

    Parameters
    ----------
    query : array (..., Tq, dq), float32 or float64
    keys : array (..., Tk, dk), same dtype and leading dims
    values : array (..., Tk, dv), optional (default ``keys``)
    score, mask, key_lengths, causal, **params
        As in ``attnc.attention``.
    mode : ``"argmax"`` (the best allowed key), ``"sample"`` (a draw from the
        masked softmax of the scores) or ``"gumbel"`` (Gumbel-max: the forward
        is a one-hot pick; the backward is the gradient of
        softmax((s + g) / temperature) with the same noise g: straight-through).
    temperature : float > 0, used by ``"gumbel"``'s backward.
    seed : int or None. The same seed gives the same picks (whatever the
        thread count); None draws fresh randomness.

    Returns
    -------
    context : array (..., Tq, dv), the picked values (the input dtype)
    weights : array (..., Tq, Tk), one-hot rows (zero rows where nothing may be attended)
    indices : int64 array (..., Tq), the picked keys (-1 where nothing may be attended)

    Gradients (``attnc.vjp``) reach the values through the one-hot weights in
    every mode; query, keys and score parameters get gradients only in
    ``"gumbel"`` mode (the picks are piecewise constant otherwise).

    Example
    -------
    >>> q = np.random.rand(4, 8); k = np.random.rand(6, 8)
    >>> context, weights, idx = attnc.hard_attention(q, k, mode="sample", seed=0)
    >>> idx.shape, idx.dtype, weights.sum(axis=-1)
    ((4,), dtype('int64'), array([1., 1., 1., 1.]))
    >>> bool((context == k[idx]).all())
    True
    """
    return _forward(
        query,
        keys,
        values,
        mode=mode,
        temperature=temperature,
        seed=seed,
        score=score,
        mask=mask,
        key_lengths=key_lengths,
        causal=causal,
        **params,
    )[0]


register(hard_attention, _forward, _backward)
