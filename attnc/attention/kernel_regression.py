"""attnc.kernel_regression: Nadaraya-Watson regression, i.e. attention with
the Gaussian score: queries are the points to predict at, keys the training
inputs, values the training targets."""

from __future__ import annotations

from .. import _core
from .._args import float_array, same_dtype, shape_str
from .._typing import Array, ArrayLike
from ..grad import register
from ._spec import Inputs, Score

NAMES = ("x_query", "x_train", "y_train")


def _forward(x_query, x_train, y_train, *, bandwidth=1.0):
    xq, xt, yt = (float_array(a, n) for a, n in zip((x_query, x_train, y_train), NAMES))
    same_dtype(xq.dtype, x_train=xt, y_train=yt)
    if xq.ndim not in (1, 2) or xt.ndim != xq.ndim or (xq.ndim == 2 and xq.shape[1] != xt.shape[1]):
        raise ValueError(
            f"x_query {shape_str(xq.shape)} and x_train {shape_str(xt.shape)} must both be (n,) "
            "or both be (n, d) with the same d"
        )
    if yt.ndim not in (1, 2) or yt.shape[0] != xt.shape[0]:
        raise ValueError(f"y_train has shape {shape_str(yt.shape)}; it needs (n,) or (n, dy) with n = {xt.shape[0]}")
    shapes = {"x_query": xq.shape, "x_train": xt.shape, "y_train": yt.shape}
    inp = Inputs(*(a if a.ndim == 2 else a[:, None] for a in (xq, xt, yt)), names=NAMES)
    sc = Score("gaussian", {"bandwidth": bandwidth}, inp)
    y, weights = inp.empty(inp.tq, inp.dv), inp.empty(inp.tq, inp.tk)
    _core.attention_forward(context=y, weights=weights, query=inp.query, keys=inp.keys, values=inp.values, params=sc.c)
    y_pred = y.reshape(-1) if yt.ndim == 1 else y
    return (y_pred, weights), (inp, sc, weights, shapes)


def _backward(saved, cotangents):
    inp, sc, weights, shapes = saved
    dy, dweights = cotangents
    if dy is not None:
        dy = dy.reshape(inp.tq, inp.dv)
    dq, dk, dv = inp.backward_outputs()
    kwargs, finish = sc.grads(inp)
    scalars = _core.attention_backward(
        dquery=dq,
        dkeys=dk,
        dvalues=dv,
        dcontext=dy,
        dweights=dweights,
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        weights=weights,
        **kwargs,
    )
    grads = {name: g.reshape(shapes[name]) for name, g in inp.grads(dq, dk, dv).items()}
    return {**grads, **finish(scalars)}


def kernel_regression(
    x_query: ArrayLike, x_train: ArrayLike, y_train: ArrayLike, *, bandwidth: float | ArrayLike = 1.0
) -> tuple[Array, Array]:
    """Nadaraya-Watson kernel regression as attention.

    y_pred(x) = sum_i softmax_i(-|x - x_i|^2 / (2 bandwidth^2)) y_i

    Parameters
    ----------
    x_query : array (m,) or (m, d), float32 or float64
    x_train : array (n,) or (n, d), the same form and dtype as x_query
    y_train : array (n,) or (n, dy), the same dtype
    bandwidth : float > 0, or a 0-d array of the same dtype (then differentiable)

    Returns
    -------
    y_pred : array (m,) if y_train is (n,), else (m, dy), the input dtype
    weights : array (m, n), the attention of each query on the training points
        (rows sum to 1)

    Example
    -------
    >>> x = np.linspace(0, 5, 50); y = np.sin(x)
    >>> y_pred, w = attnc.kernel_regression(np.array([1.0, 2.0]), x, y, bandwidth=0.3)
    >>> y_pred.shape, w.shape, w.sum(axis=1).round(6)
    ((2,), (2, 50), array([1., 1.]))
    >>> bool(np.abs(y_pred - np.sin([1.0, 2.0])).max() < 0.1)
    True
    """
    return _forward(x_query, x_train, y_train, bandwidth=bandwidth)[0]


register(kernel_regression, _forward, _backward)
