"""attnc.nn.embedding, attnc.nn.Embedding and attnc.nn.cross_entropy: the
layers that meet token ids, in C."""

from __future__ import annotations

import math
import numbers
from typing import Literal

import numpy as np

from .. import _core
from .._args import as_array, as_rows, choice, elementwise_ready, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import Module, _settings


def _ids(x, name):
    a = as_array(x, name)
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


def _max_norm(max_norm, norm_type):
    """torch's max_norm and norm_type as the C kernel's two floats (no
    max_norm: infinity, which no row's norm exceeds)."""
    if max_norm is None:
        return math.inf, 2.0
    for name, v in (("max_norm", max_norm), ("norm_type", norm_type)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a float, got {type(v).__name__}")
    if not max_norm >= 0:
        raise ValueError(f"max_norm must be >= 0, got {max_norm!r}")
    if not norm_type > 0:
        raise ValueError(f"norm_type must be > 0 (or inf), got {norm_type!r}")
    return float(max_norm), float(norm_type)


def _embedding_forward(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, *, scale=1.0):
    ids = _ids(input, "input")
    w = float_array(weight, "weight")
    if w.ndim != 2:
        raise ValueError(f"weight must be (num_embeddings, embedding_dim), got {shape_str(w.shape)}")
    pad = _padding(padding_idx, w.shape[0])
    limit, p = _max_norm(max_norm, norm_type)
    flat = ids.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= w.shape[0]):  # before the output, which can be far larger
        i = int(np.flatnonzero((flat < 0) | (flat >= w.shape[0]))[0])
        raise ValueError(f"input[{i}] = {flat[i]} is outside [0, {w.shape[0]})")
    y = np.empty((flat.shape[0], w.shape[1]), w.dtype)
    _core.embedding_forward(
        output=y, input=flat, weight=elementwise_ready(w), scale=float(scale), max_norm=limit, norm_type=p
    )
    return y.reshape(ids.shape + (w.shape[1],)), (flat, w.shape, w.dtype, float(scale), pad)


def _embedding_backward(saved, cotangents):
    flat, wshape, dtype, scale, pad = saved
    (dy,) = cotangents
    dw = np.empty(wshape, dtype)
    dy2 = np.zeros((flat.shape[0], wshape[1]), dtype) if dy is None else elementwise_ready(as_rows(dy))
    _core.embedding_backward(dweight=dw, doutput=dy2, input=flat, scale=scale, padding_idx=pad)
    return {"weight": dw}


def embedding(
    input: ArrayLike,
    weight: ArrayLike,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    *,
    scale: float = 1.0,
) -> Array:
    """Rows of ``weight`` for each token id, times ``scale``, as
    ``torch.nn.functional.embedding`` (scale is attnc's: the Transformer's
    sqrt(d_model)).

    With ``max_norm``, a looked-up row whose ``norm_type``-norm exceeds it is
    returned times max_norm / (norm + 1e-7), as torch returns it. torch also
    writes those rows back into ``weight`` in place; attnc never modifies its
    inputs, so ``weight`` is left as it is (``attnc.nn.Embedding`` does write
    them back into its own table, as torch's module does). The gradient is
    torch's too: the renormalisation is not differentiated (the weight's
    gradient is the sum of the output's gradient rows of each id).

    Parameters
    ----------
    input : int array (...), token ids in [0, V)
    weight : array (V, D), float32 or float64
    padding_idx : int or None, the row that gets no gradient
    max_norm : float >= 0 or None, the largest norm a looked-up row keeps
    norm_type : float > 0 or inf, the p of the p-norm for max_norm
    scale : float, multiplies the rows

    Returns
    -------
    output : array (..., D), the weight's dtype

    Example
    -------
    >>> attnc.nn.embedding(np.array([[0, 2]]), np.eye(3)).shape
    (1, 2, 3)
    >>> attnc.nn.embedding(np.array([1]), np.array([[1.0, 0.0], [3.0, 4.0]]), max_norm=1.0).round(6)
    array([[0.6, 0.8]])
    """
    return _embedding_forward(input, weight, padding_idx, max_norm, norm_type, scale=scale)[0]


register(embedding, _embedding_forward, _embedding_backward)


class Embedding(Module):
    """``torch.nn.Embedding``: a table of embeddings looked up by token id.

    Parameters
    ----------
    num_embeddings : int, V, the vocabulary size
    embedding_dim : int, D
    padding_idx : int or None, a row kept at zero (it gets no gradient)
    max_norm : float >= 0 or None: as torch's module, every forward first
        renormalises, in this module's own ``weight``, the looked-up rows whose
        ``norm_type``-norm exceeds max_norm (to max_norm / (norm + 1e-7) times
        themselves), then looks them up
    norm_type : float > 0 or inf, the p of the p-norm for max_norm
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
    >>> emb = attnc.nn.Embedding(10, 4, max_norm=1.0, seed=0)
    >>> _ = emb(np.array([3]))
    >>> round(float(np.linalg.norm(emb.weight[3])), 5), float(np.linalg.norm(emb.weight[4])) > 1
    (1.0, True)
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        self.num_embeddings = int_arg("num_embeddings", num_embeddings, 0)
        self.embedding_dim = int_arg("embedding_dim", embedding_dim, 0)
        self.padding_idx = None if padding_idx is None else _padding(padding_idx, self.num_embeddings)
        _max_norm(max_norm, norm_type)  # checks them
        self.max_norm, self.norm_type = max_norm, norm_type

        def init(shape):
            w = np.random.default_rng(seed).standard_normal(shape)
            if self.padding_idx is not None:
                w[self.padding_idx] = 0
            return w

        self._init_parameter("weight", (self.num_embeddings, self.embedding_dim), init)

    def forward(self, input: ArrayLike) -> Array:
        return self._vjp_forward(input)[0]

    def _vjp_forward(self, input):
        y, saved = _embedding_forward(input, self.weight, self.padding_idx, self.max_norm, self.norm_type)
        if self.max_norm is not None:  # torch's in-place renormalisation of the looked-up rows
            self.weight[saved[0]] = y.reshape(-1, self.embedding_dim)
        return y, saved

    _vjp_backward = staticmethod(_embedding_backward)

    def extra_repr(self) -> str:
        return _settings(
            f"{self.num_embeddings}, {self.embedding_dim}",
            padding_idx=(self.padding_idx, None),
            max_norm=(self.max_norm, None),
            norm_type=(self.norm_type, 2),
        )


REDUCTIONS = ("mean", "sum", "none")


def _class_rows(a):
    """a (N, C, d1, ...) as rows (N d1 ..., C) (a (C,) array as one row)."""
    if a.ndim == 1:
        return elementwise_ready(a[None])
    return elementwise_ready(np.moveaxis(a, 1, -1).reshape(-1, a.shape[1]))


def _from_class_rows(a2, shape):
    """The inverse of _class_rows: rows (M, C) back to shape (N, C, d1, ...) or (C,)."""
    if len(shape) == 1:
        return a2.reshape(shape)
    moved = a2.reshape((shape[0],) + shape[2:] + (shape[1],))
    return np.ascontiguousarray(np.moveaxis(moved, -1, 1))


def _ce_targets(x, target, ignore_index):
    """(rows of target, probabilities?, the loss's shape without reduction):
    class probabilities when target is a float array of the input's shape
    (as torch decides), else class ids (N, d1, ...) (() for a (C,) input)."""
    t = as_array(target, "target")
    if t.dtype.kind == "f" and t.shape == x.shape:
        t = float_array(t, "target")
        same_dtype(x.dtype, target=t)
        if ignore_index >= 0:
            raise ValueError(
                f"ignore_index ({ignore_index}) is not supported with class-probability targets (as in torch)"
            )
        return _class_rows(t), True, x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()
    t = _ids(target, "target")
    want = () if x.ndim == 1 else (x.shape[0],) + x.shape[2:]
    if t.shape != want:
        raise ValueError(
            f"target {shape_str(t.shape)} does not fit input {shape_str(x.shape)}: expected class ids "
            f"{shape_str(want)} or class probabilities {shape_str(x.shape)}"
        )
    return t.reshape(-1), False, want


def _cross_entropy_forward(input, target, weight=None, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    x = float_array(input, "input")
    choice(reduction, REDUCTIONS, "reduction")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    if (
        isinstance(label_smoothing, bool)
        or not isinstance(label_smoothing, numbers.Real)
        or not 0 <= label_smoothing <= 1
    ):
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    if x.ndim == 0:
        raise ValueError("input must have at least one dim: (C,) or (N, C, d1, ...)")
    classes = x.shape[0 if x.ndim == 1 else 1]
    w = None
    if weight is not None:
        w = elementwise_ready(float_array(weight, "weight"))
        same_dtype(x.dtype, weight=w)
        if w.shape != (classes,):
            raise ValueError(f"weight has shape {shape_str(w.shape)}, expected one per class ({classes},)")
    t2, probs, out_shape = _ce_targets(x, target, int(ignore_index))
    x2 = _class_rows(x)
    losses, lse = np.empty(x2.shape[0], x.dtype), np.empty(x2.shape[0], x.dtype)
    _core.cross_entropy_forward(
        losses=losses,
        logsumexp=lse,
        input=x2,
        target=t2,
        weight=w,
        label_smoothing=float(label_smoothing),
        ignore_index=int(ignore_index),
    )
    # mean: over the rows (probabilities) or the targets not ignored, each
    # counted with its class's weight, as torch; nothing to count gives 0
    if probs:
        total = x2.shape[0]
    else:
        valid = t2[t2 != ignore_index]
        total = valid.size if w is None else float(w[valid].sum(dtype=np.float64))
    if reduction == "none":
        out = losses.reshape(out_shape)
    elif reduction == "sum":
        out = np.asarray(losses.sum(), x.dtype)
    else:
        out = np.asarray(losses.sum() / total if total else 0.0, x.dtype)
    saved = dict(
        xshape=x.shape,
        x2=x2,
        t2=t2,
        probs=probs,
        w=w,
        lse=lse,
        eps=float(label_smoothing),
        ignore=int(ignore_index),
        reduction=reduction,
        total=total,
        out=out,
    )
    return out, saved


def _cross_entropy_backward(s, cotangents):
    (g,) = cotangents
    x2, w, reduction, total = s["x2"], s["w"], s["reduction"], s["total"]
    n, dtype = x2.shape[0], x2.dtype
    if g is None:
        dl = np.zeros(n, dtype)
    elif reduction == "none":
        dl = np.ascontiguousarray(g.reshape(n), dtype)
    else:
        scale = float(g) / (total if reduction == "mean" and total else 1)
        dl = np.full(n, scale if (reduction == "sum" or total) else 0.0, dtype)
    dx = np.empty(x2.shape, dtype)
    dt = np.empty(x2.shape, dtype) if s["probs"] else None
    dw = None if w is None else np.empty(w.shape, dtype)
    _core.cross_entropy_backward(
        dinput=dx,
        dtarget=dt,
        dweight=dw,
        dlosses=dl,
        input=x2,
        target=s["t2"],
        logsumexp=s["lse"],
        weight=w,
        label_smoothing=s["eps"],
        ignore_index=s["ignore"],
    )
    grads = {"input": _from_class_rows(dx, s["xshape"])}
    if dt is not None:
        grads["target"] = _from_class_rows(dt, s["xshape"])
    if dw is not None:
        if reduction == "mean" and total and not s["probs"] and g is not None:
            # the mean's denominator is the targets' summed weight: d(S / D) / dw_c
            # adds -(S / D) / D per target of class c
            valid = s["t2"][s["t2"] != s["ignore"]]
            counts = np.bincount(valid, minlength=w.shape[0])
            dw -= (float(g) * float(s["out"]) / total * counts).astype(dtype)
        grads["weight"] = dw
    return grads


def cross_entropy(
    input: ArrayLike,
    target: ArrayLike,
    weight: ArrayLike | None = None,
    *,
    ignore_index: int = -100,
    reduction: Literal["mean", "sum", "none"] = "mean",
    label_smoothing: float = 0.0,
) -> Array:
    """Cross-entropy of logits against class ids or class probabilities, as
    ``torch.nn.functional.cross_entropy``.

    loss_n = sum_c q_nc w_c (logsumexp(input_n) - input_nc), with q_n the
    target after label smoothing eps, (1 - eps) target + eps / C (for class
    ids the target is one-hot: loss_n = (1 - eps) w_t (-log p_t) + eps / C
    sum_c w_c (-log p_c)), and w the class weights (1 without ``weight``).
    Gradients through ``attnc.vjp``: "input", and "target" (probabilities)
    and "weight" when they are float arrays (torch differentiates the weight
    only for probabilities; attnc for class ids too).

    Parameters
    ----------
    input : array (N, C) (or (C,), or (N, C, d1, ...)) of logits, float32 or float64
    target : int array (N,) (or (), or (N, d1, ...)) of class ids in [0, C),
        or class probabilities: a float array of the input's shape and dtype
    weight : array (C,) or None, a weight per class
    ignore_index : int, class-id targets equal to it count for nothing (not
        with probabilities, where it must stay negative, as in torch)
    reduction : "mean", "sum" or "none". The mean divides by the summed
        weights of the targets not ignored (their count without ``weight``),
        or by the number of rows for probabilities; when that is 0 the loss is
        0, where torch gives NaN.
    label_smoothing : float in [0, 1], eps above

    A term whose coefficient q_nc w_c is 0 adds nothing, so a -inf logit of
    a class that is no target gives a finite loss (torch: NaN for
    probabilities with label smoothing 0).

    Returns
    -------
    loss : a 0-d array (mean, sum) or the target's shape without the class
        dim (none), the input's dtype

    Example
    -------
    >>> float(attnc.nn.cross_entropy(np.zeros((2, 4)), np.array([1, 3])))  # log 4
    1.3862943611198906
    >>> x, w = np.array([[0.0, 1.0], [2.0, 0.0]]), np.array([1.0, 3.0])
    >>> round(float(attnc.nn.cross_entropy(x, np.array([1, 0]), w)), 4)   # (3 * 0.3133 + 0.1269) / 4
    0.2667
    >>> round(float(attnc.nn.cross_entropy(x, np.array([[0.5, 0.5], [1.0, 0.0]]))), 4)   # probabilities
    0.4701
    """
    return _cross_entropy_forward(
        input, target, weight, ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing
    )[0]


register(cross_entropy, _cross_entropy_forward, _cross_entropy_backward)


def _rows(x, dim):
    """x (a 0-d x as one element) with dim moved last, as the (rows, n) matrix
    the C kernel normalises row by row; rows are counted, not inferred, so a
    zero-length dim (n = 0) or an empty batch reshapes too."""
    moved = np.moveaxis(x.reshape(x.shape or (1,)), dim, -1)
    return elementwise_ready(moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1]))


def _log_softmax_forward(input, dim=-1):
    x = float_array(input, "input")
    n = max(x.ndim, 1)  # a 0-d input has dim 0 (or -1), as in torch
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -n <= dim < n:
        raise ValueError(f"dim must be an int in [-{n}, {n}), got {dim!r}")
    x2 = _rows(x, dim)
    y2 = np.empty(x2.shape, x.dtype)
    _core.log_softmax_forward(output=y2, input=x2)
    return _unrows(y2, x.shape, dim), (y2, x.shape, int(dim))


def _unrows(a2, shape, dim):
    """The inverse of _rows: a2 (rows, n) back to shape, C-contiguous."""
    moved = np.moveaxis(np.empty(shape or (1,), a2.dtype), dim, -1).shape
    return np.ascontiguousarray(np.moveaxis(a2.reshape(moved), -1, dim)).reshape(shape)


def _log_softmax_backward(saved, cotangents):
    y2, shape, dim = saved
    (dy,) = cotangents
    if dy is None:
        return {"input": np.zeros(shape, y2.dtype)}
    dx2 = np.empty(y2.shape, y2.dtype)
    _core.log_softmax_backward(dinput=dx2, doutput=_rows(dy, dim), output=y2)
    return {"input": _unrows(dx2, shape, dim)}


def log_softmax(input: ArrayLike, dim: int = -1) -> Array:
    """``torch.nn.functional.log_softmax(input, dim)``: x - logsumexp(x) along
    dim, in C (a slice of only -inf gives -inf, not NaN).

    Parameters
    ----------
    input : array of any shape, float32 or float64 (a 0-d input gives 0; a
        zero-length dim gives an empty result)
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
