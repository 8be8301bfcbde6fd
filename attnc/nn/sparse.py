"""attnc.nn.embedding, attnc.nn.Embedding and attnc.nn.cross_entropy: the
layers that meet token ids, in C."""

from __future__ import annotations

import numbers
from typing import Literal

import numpy as np

from .. import _core
from .._args import as_rows, choice, elementwise_ready, float_array, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import Module


def _ids(x, name):
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array of token ids, got dtype {a.dtype}")
    return elementwise_ready(a.astype(np.int64, copy=False))


def _padding(padding_idx, num):
    if padding_idx is None:
        return -1
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral):
        raise TypeError(f"padding_idx must be an int or None, got {type(padding_idx).__name__}")
    if not -num <= padding_idx < num:
        raise ValueError(f"padding_idx {padding_idx} is outside [-{num}, {num})")
    return int(padding_idx) % num


def _embedding_forward(input, weight, padding_idx=None, *, scale=1.0):
    ids = _ids(input, "input")
    w = float_array(weight, "weight")
    if w.ndim != 2:
        raise ValueError(f"weight must be (num_embeddings, embedding_dim), got {shape_str(w.shape)}")
    pad = _padding(padding_idx, w.shape[0])
    flat = ids.reshape(-1)
    y = np.empty((flat.shape[0], w.shape[1]), w.dtype)
    _core.embedding_forward(y, flat, elementwise_ready(w), float(scale))
    return y.reshape(ids.shape + (w.shape[1],)), (flat, w.shape, w.dtype, float(scale), pad)


def _embedding_backward(saved, cotangents):
    flat, wshape, dtype, scale, pad = saved
    (dy,) = cotangents
    dw = np.empty(wshape, dtype)
    dy2 = np.zeros((flat.shape[0], wshape[1]), dtype) if dy is None else elementwise_ready(as_rows(dy))
    _core.embedding_backward(dw, dy2, flat, scale, pad)
    return {"weight": dw}


def embedding(input: ArrayLike, weight: ArrayLike, padding_idx: int | None = None, *, scale: float = 1.0) -> Array:
    """Rows of ``weight`` for each token id, times ``scale``, as
    ``torch.nn.functional.embedding`` (scale is attnc's: the Transformer's
    sqrt(d_model)).

    Parameters
    ----------
    input : int array (...), token ids in [0, V)
    weight : array (V, D), float32 or float64
    padding_idx : int or None, the row that gets no gradient
    scale : float, multiplies the rows

    Returns
    -------
    output : array (..., D), the weight's dtype

    Example
    -------
    >>> attnc.nn.embedding(np.array([[0, 2]]), np.eye(3)).shape
    (1, 2, 3)
    """
    return _embedding_forward(input, weight, padding_idx, scale=scale)[0]


register(embedding, _embedding_forward, _embedding_backward)


class Embedding(Module):
    """``torch.nn.Embedding``: a table of embeddings looked up by token id.

    Parameters
    ----------
    num_embeddings : int, V, the vocabulary size
    embedding_dim : int, D
    padding_idx : int or None, a row kept at zero (it gets no gradient)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation N(0, 1) (as torch)

    Forward: input int (...) -> (..., D), the module's dtype.

    ``state_dict()``: ``weight`` (V, D), as torch's.

    Example
    -------
    >>> emb = attnc.nn.Embedding(10, 4, padding_idx=0, seed=0)
    >>> out = emb(np.array([[0, 3, 9]]))
    >>> out.shape, out.dtype, float(abs(out[0, 0]).sum())
    ((1, 3, 4), dtype('float32'), 0.0)
    >>> {k: v.shape for k, v in emb.state_dict().items()}
    {'weight': (10, 4)}
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, *,
                 dtype: DTypeLike = np.float32, seed: int | None = None) -> None:
        super().__init__(dtype)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else _padding(padding_idx, num_embeddings)
        w = np.random.default_rng(seed).standard_normal((num_embeddings, embedding_dim))
        if self.padding_idx is not None:
            w[self.padding_idx] = 0
        self.register_parameter("weight", w)

    def forward(self, input: ArrayLike) -> Array:
        return embedding(input, self.weight, self.padding_idx)

    def _vjp_forward(self, input):
        return _embedding_forward(input, self.weight, self.padding_idx)

    _vjp_backward = staticmethod(_embedding_backward)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, padding_idx={self.padding_idx}"


REDUCTIONS = ("mean", "sum", "none")


def _cross_entropy_forward(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    x = float_array(input, "input")
    t = _ids(target, "target")
    choice(reduction, REDUCTIONS, "reduction")
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    if x.ndim == 1:  # (C,) with a scalar target
        if t.ndim != 0:
            raise ValueError(f"target {shape_str(t.shape)} does not fit input {shape_str(x.shape)}")
        x2, t_flat, out_shape = x[None], t.reshape(1), ()
    else:  # (N, C, d1, ...): the class dim is 1, as in torch
        if t.shape != (x.shape[0],) + x.shape[2:]:
            raise ValueError(f"target {shape_str(t.shape)} does not fit input {shape_str(x.shape)}: "
                             "expected (N, d1, ...)")
        x2 = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])
        t_flat, out_shape = t.reshape(-1), t.shape
    x2 = elementwise_ready(x2)
    losses, lse = np.empty(x2.shape[0], x.dtype), np.empty(x2.shape[0], x.dtype)
    _core.cross_entropy_forward(losses, lse, x2, t_flat, float(label_smoothing), int(ignore_index))
    count = int(np.count_nonzero(t_flat != ignore_index))
    if reduction == "none":
        out = losses.reshape(out_shape)
    elif reduction == "sum":
        out = np.asarray(losses.sum(), x.dtype)
    else:  # no target left: 0, not torch's NaN
        out = np.asarray(losses.sum() / count if count else 0.0, x.dtype)
    return out, (x.shape, x2, t_flat, lse, float(label_smoothing), int(ignore_index), reduction, count)


def _cross_entropy_backward(saved, cotangents):
    xshape, x2, t_flat, lse, eps, ignore, reduction, count = saved
    (g,) = cotangents
    n = x2.shape[0]
    if g is None:
        dl = np.zeros(n, x2.dtype)
    elif reduction == "none":
        dl = np.ascontiguousarray(g.reshape(n), x2.dtype)
    else:
        scale = float(g) / (count if reduction == "mean" and count else 1)
        dl = np.full(n, scale if (reduction == "sum" or count) else 0.0, x2.dtype)
    dx = np.empty(x2.shape, x2.dtype)
    _core.cross_entropy_backward(dx, dl, x2, t_flat, lse, eps, ignore)
    if len(xshape) == 1:
        return {"input": dx.reshape(xshape)}
    moved = dx.reshape((xshape[0],) + xshape[2:] + (xshape[1],))
    return {"input": np.ascontiguousarray(np.moveaxis(moved, -1, 1))}


def cross_entropy(input: ArrayLike, target: ArrayLike, ignore_index: int = -100,
                  reduction: Literal["mean", "sum", "none"] = "mean", label_smoothing: float = 0.0) -> Array:
    """Cross-entropy of logits against class ids, as ``torch.nn.functional.cross_entropy``.

    loss_n = -sum_c q_c log softmax(input_n)_c, with q = (1 - eps) onehot(target_n) + eps / C.

    Parameters
    ----------
    input : array (N, C) (or (C,), or (N, C, d1, ...)) of logits, float32 or float64
    target : int array (N,) (or (), or (N, d1, ...)), class ids in [0, C)
    ignore_index : int, targets equal to it count for nothing
    reduction : "mean" (over the targets not ignored; 0 when there are none,
        where torch gives NaN), "sum" or "none"
    label_smoothing : float in [0, 1], eps above

    Returns
    -------
    loss : a 0-d array (mean, sum) or the target's shape (none), the input's dtype

    Example
    -------
    >>> float(attnc.nn.cross_entropy(np.zeros((2, 4)), np.array([1, 3])))  # log 4
    1.3862943611198906
    """
    return _cross_entropy_forward(input, target, ignore_index, reduction, label_smoothing)[0]


register(cross_entropy, _cross_entropy_forward, _cross_entropy_backward)


def _log_softmax_forward(input, dim=-1):
    x = float_array(input, "input")
    if x.ndim == 0:
        raise ValueError("input must have at least one dim")
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim must be an int in [-{x.ndim}, {x.ndim}), got {dim!r}")
    moved = np.moveaxis(x, dim, -1)
    x2 = elementwise_ready(moved.reshape(-1, x.shape[dim]))
    y2 = np.empty(x2.shape, x.dtype)
    _core.log_softmax_forward(y2, x2)
    y = np.moveaxis(y2.reshape(moved.shape), -1, dim)
    return y, (y2, moved.shape, int(dim))


def _log_softmax_backward(saved, cotangents):
    y2, moved_shape, dim = saved
    (dy,) = cotangents
    if dy is None:
        return {"input": np.zeros(np.moveaxis(y2.reshape(moved_shape), -1, dim).shape, y2.dtype)}
    dy2 = elementwise_ready(np.moveaxis(dy, dim, -1).reshape(y2.shape))
    dx2 = np.empty(y2.shape, y2.dtype)
    _core.log_softmax_backward(dx2, dy2, y2)
    return {"input": np.ascontiguousarray(np.moveaxis(dx2.reshape(moved_shape), -1, dim))}


def log_softmax(input: ArrayLike, dim: int = -1) -> Array:
    """``torch.nn.functional.log_softmax(input, dim)``: x - logsumexp(x) along
    dim, in C (a slice of only -inf gives -inf, not NaN).

    Parameters
    ----------
    input : array of any shape (at least 1-d), float32 or float64
    dim : int, the axis normalised

    Returns
    -------
    output : array, the input's shape and dtype

    Example
    -------
    >>> np.exp(attnc.nn.log_softmax(np.array([0.0, np.log(3.0)]))).round(2)
    array([0.25, 0.75])
    """
    return _log_softmax_forward(input, dim)[0]


register(log_softmax, _log_softmax_forward, _log_softmax_backward)


def sinusoidal_encoding(length: int, d_model: int, dtype: DTypeLike = np.float32) -> Array:
    """The Transformer's positional encoding (Vaswani et al. 2017).

    p[t, 2i] = sin(t / 10000^(2i / d_model)), p[t, 2i + 1] = cos(t / 10000^(2i / d_model)).

    Parameters
    ----------
    length : int, the number of positions
    d_model : int, the width
    dtype : the result's dtype (float32 or float64)

    Returns
    -------
    p : array (length, d_model), dtype

    Example
    -------
    >>> p = attnc.nn.sinusoidal_encoding(50, 16)
    >>> p.shape, p.dtype, p[0, :4].tolist()
    ((50, 16), dtype('float32'), [0.0, 1.0, 0.0, 1.0])
    """
    for name, n in (("length", length), ("d_model", d_model)):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"{name} must be an int >= 0, got {n!r}")
    t = np.arange(length, dtype=np.float64)[:, None]
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    angle = t / np.power(10000.0, two_i / d_model) if d_model else np.zeros((length, 0))
    p = np.empty((length, d_model), np.float64)
    p[:, 0::2] = np.sin(angle)
    p[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return p.astype(dtype)
