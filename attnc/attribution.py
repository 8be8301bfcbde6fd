"""attnc.attribution: which input tokens each output position of a
transformer draws on, from its attention weights (csrc/ops/attribution).

- ``rollout`` and ``flow``: attention rollout and attention flow (Abnar &
  Zuidema 2020, "Quantifying Attention Flow in Transformers");
- ``relevance``: gradient-weighted attention relevance (Chefer, Gur & Wolf
  2021, "Generic Attention-model Explainability for Interpreting Bi-Modal and
  Encoder-Decoder Transformers", their rule for self-attention);
- ``attention_gradients``: the attention weights of an attnc transformer
  (``attnc.models.GPT``, ``attnc.nn.TransformerEncoder``) and the gradients of
  a chosen output score with respect to them, through ``attnc.vjp``.

Weights come as the ``need_weights=True`` output of attnc's transformers: a
list (or tuple) with one array per layer, first layer first, each (B, H, L, L)
(batch, heads, query position, key position) or (H, L, L) unbatched, float32
or float64. Results are (B, L, L) (or (L, L)) of that dtype: row i is output
position i, column j input token j.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from . import _core
from ._args import choice, float_array, same_dtype, shape_str
from ._typing import Array, ArrayLike
from .grad import vjp

__all__ = ["attention_gradients", "flow", "relevance", "rollout"]

HeadFusion = Literal["mean", "max", "min"]
_FUSIONS = {"mean": 0, "max": 1, "min": 2}  # attnc_head_fusion


def _layers(weights: Sequence[ArrayLike], name: str, like: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """The per-layer arrays stacked into one new C-contiguous (N, B, H, L, L)
    array, and whether they came batched; `like`: the stack they must match."""
    if isinstance(weights, np.ndarray) or not isinstance(weights, (list, tuple)):
        raise TypeError(
            f"{name} must be a list or tuple with one array per layer, each (B, H, L, L) or (H, L, L), "
            f"got {type(weights).__name__}"
        )
    if not weights:
        raise ValueError(f"{name} is empty: give at least one layer's attention weights")
    arrays = [float_array(w, f"{name}[{i}]") for i, w in enumerate(weights)]
    first = arrays[0]
    if first.ndim not in (3, 4) or first.shape[-1] != first.shape[-2]:
        raise ValueError(f"{name}[0] has shape {shape_str(first.shape)}, expected (B, H, L, L) or (H, L, L)")
    for i, a in enumerate(arrays[1:], 1):
        if a.shape != first.shape:
            raise ValueError(
                f"{name}[{i}] has shape {shape_str(a.shape)} but {name}[0] has {shape_str(first.shape)}: "
                "every layer's weights must have one shape"
            )
        same_dtype(first.dtype, **{f"{name}[{i}]": a})
    stacked = np.stack(arrays)
    batched = first.ndim == 4
    if not batched:
        stacked = stacked[:, None]
    if like is not None:
        if stacked.shape != like.shape:
            raise ValueError(
                f"{name} has {len(arrays)} layers of shape {shape_str(first.shape)} but weights has "
                f"{like.shape[0]} of shape {shape_str(like.shape[1 + (not batched) :])}: they must match"
            )
        same_dtype(like.dtype, **{name: stacked})
    return np.ascontiguousarray(stacked), batched


def _mixed(op: Callable[..., None], out_name: str, weights, head_fusion, residual) -> Array:
    w, batched = _layers(weights, "weights")
    out = np.empty((w.shape[1], w.shape[3], w.shape[3]), w.dtype)
    op(
        **{out_name: out},
        weights=w,
        head_fusion=_FUSIONS[choice(head_fusion, tuple(_FUSIONS), "head_fusion")],
        residual=float(residual),
    )
    return out if batched else out[0]


def rollout(weights: Sequence[ArrayLike], *, head_fusion: HeadFusion = "mean", residual: float = 0.5) -> Array:
    """Attention rollout (Abnar & Zuidema 2020): how much of each input token
    reaches each output position, following the attention of every layer
    and the residual connections.

    For layer l with weights W_l (H, L, L) per batch element,

        A_l = normalise_rows((1 - residual) * fuse_h(W_l) + residual * I)

    (fuse_h: the mean over heads, as the paper, or the max or min; a row
    summing to 0 stays 0) and

        rollout = A_N A_{N-1} ... A_1

    with A_1 the first layer's. The paper's choice is residual = 0.5. Each
    product is one BLAS call per batch element (the same bits for any thread
    count).

    Parameters
    ----------
    weights : list or tuple of N arrays, first layer first, each (B, H, L, L)
        or (H, L, L), float32 or float64, non-negative and finite (softmax
        probabilities, as ``need_weights=True`` returns them)
    head_fusion : "mean" (default), "max" or "min"
    residual : float in [0, 1], the identity's share (0.5)

    Returns
    -------
    (B, L, L) or (L, L), the weights' dtype: row i (output position) holds
    each input token's share, summing to 1 (or 0 for a row that is all zero).

    Example
    -------
    >>> layer = attnc.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, seed=0)
    >>> encoder = attnc.nn.TransformerEncoder(layer, 3).eval()
    >>> out, ws = encoder(np.random.rand(2, 5, 8).astype(np.float32), need_weights=True)
    >>> r = attnc.attribution.rollout(ws)
    >>> r.shape, r.dtype, np.allclose(r.sum(-1), 1)
    ((2, 5, 5), dtype('float32'), True)
    """
    return _mixed(_core.attention_rollout, "rollout", weights, head_fusion, residual)


def flow(weights: Sequence[ArrayLike], *, head_fusion: HeadFusion = "mean", residual: float = 0.5) -> Array:
    """Attention flow (Abnar & Zuidema 2020): the maximum flow from each
    output position to each input token through the layers' attention.

    The graph has N + 1 layers of L nodes (layer 0: the input tokens, layer
    N: the outputs) and an edge from node p of layer l to node q of layer
    l - 1 with capacity A_l[p, q], the A of ``rollout`` (heads fused, the
    residual mixed in, rows normalised). ``flow[b, i, j]`` is the value of the
    maximum flow from node i of layer N to node j of layer 0. Each of the B L^2
    problems is solved exactly by Dinic's algorithm in C (its floating-point
    termination argument is in csrc/ops/attribution/attribution_impl.h), the
    (batch, output position) pairs in parallel (the same bits for any thread
    count). The cost grows as B N L^4: a call with B N L^4 > 2^33 is refused.
    With one layer the flow is A_1 itself.

    Parameters
    ----------
    weights : list or tuple of N arrays, first layer first, each (B, H, L, L)
        or (H, L, L), float32 or float64, non-negative and finite
    head_fusion : "mean" (default), "max" or "min"
    residual : float in [0, 1], the identity's share (0.5)

    Returns
    -------
    (B, L, L) or (L, L), the weights' dtype: flow[..., i, j] in [0, 1].

    Example
    -------
    >>> w = np.random.default_rng(0).dirichlet(np.ones(4), size=(2, 3, 4))  # 2 layers, 3 heads, L = 4
    >>> f = attnc.attribution.flow([w[0], w[1]])
    >>> f.shape, bool((f >= 0).all() and (f <= 1 + 1e-12).all())
    ((4, 4), True)
    """
    return _mixed(_core.attention_flow, "flow", weights, head_fusion, residual)


def relevance(weights: Sequence[ArrayLike], grads: Sequence[ArrayLike]) -> Array:
    """Gradient-weighted attention relevance (Chefer, Gur & Wolf 2021, rule
    for self-attention): how relevant each input token is to a score.

    With W_l the attention weights of layer l (H, L, L per batch element) and
    G_l = dscore / dW_l the score's gradient with respect to them,

        R = I;  for l = 1, ..., N:  R <- R + mean_h((G_l * W_l)^+) R

    (``*`` element-wise, ``^+`` the positive part); row i of R is output
    position i's relevance over the input tokens. ``attention_gradients``
    gets W and G of an attnc transformer.

    Parameters
    ----------
    weights : list or tuple of N arrays, first layer first, each (B, H, L, L)
        or (H, L, L), float32 or float64, finite
    grads : the same shapes and dtype: the gradients of the score with
        respect to each layer's weights

    Returns
    -------
    (B, L, L) or (L, L), the weights' dtype.

    Example
    -------
    >>> model = attnc.models.GPT(6, 8, n_layer=2, n_head=2, n_embd=8, seed=0).eval()
    >>> idx = np.array([[1, 2, 3, 4, 5]])
    >>> def last_token_score(logits):  # the logit of token 0 at the last position
    ...     cot = np.zeros_like(logits)
    ...     cot[:, -1, 0] = 1
    ...     return cot
    >>> ws, gs = attnc.attribution.attention_gradients(model, idx, last_token_score)
    >>> r = attnc.attribution.relevance(ws, gs)
    >>> r.shape, bool((np.diag(r[0]) >= 1).all())
    ((1, 5, 5), True)
    """
    w, batched = _layers(weights, "weights")
    g, _ = _layers(grads, "grads", like=w)
    out = np.empty((w.shape[1], w.shape[3], w.shape[3]), w.dtype)
    _core.attention_relevance(relevance=out, weights=w, grads=g)
    return out if batched else out[0]


def attention_gradients(
    model: Any, inputs: ArrayLike, cotangent: ArrayLike | Callable[[Array], ArrayLike], **kwargs: Any
) -> tuple[list[Array], list[Array]]:
    """The attention weights of a transformer at ``inputs`` and the gradients
    of an output score with respect to them: ``relevance``'s arguments.

    Runs ``attnc.vjp(model, inputs, need_weights=True, **kwargs)`` and its
    pullback with ``cotangent`` (the score is sum(cotangent * output): a
    one-hot cotangent picks one logit).

    Parameters
    ----------
    model : an attnc transformer whose pullback gives the attention weights'
        gradients: ``attnc.models.GPT``, ``attnc.nn.TransformerEncoder``; in
        evaluation mode (``model.eval()``), or with dropout 0
    inputs : the model's first argument (GPT: token ids (B, T); an encoder:
        src (B, L, E) or (L, E))
    cotangent : an array shaped like the model's output, or a function of the
        output returning one
    **kwargs : the model's other arguments (an encoder's ``mask``, ...)

    Returns
    -------
    (weights, grads): two lists with one array per layer, first layer first,
    each (B, H, L, L) (or (H, L, L) for unbatched encoder input).

    Example
    -------
    >>> layer = attnc.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, seed=0)
    >>> encoder = attnc.nn.TransformerEncoder(layer, 2)
    >>> x = np.random.rand(3, 4, 8).astype(np.float32)
    >>> ws, gs = attnc.attribution.attention_gradients(encoder, x, lambda out: out)  # score: sum(out**2) / 2
    >>> len(gs), gs[0].shape
    (2, (3, 2, 4, 4))
    """
    (output, weights), pullback = vjp(model, inputs, need_weights=True, **kwargs)
    cot = cotangent(output) if callable(cotangent) else cotangent
    grads = pullback(cot, None).get("attn_weights")
    if grads is None:
        raise TypeError(
            f"model is a {type(model).__name__}, whose pullback does not give the attention weights' gradients: "
            "attention_gradients takes attnc.models.GPT and attnc.nn.TransformerEncoder"
        )
    if any(g is None for g in grads):
        raise ValueError("model ran with dropout (training mode): call model.eval() for its attention gradients")
    return list(weights), list(grads)
