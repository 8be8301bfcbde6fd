r"""attnc.models.SNAIL: a simple neural attentive meta-learner (Mishra,
Rohaninejad, Chen & Abbeel 2017) for N-way K-shot classification.

An episode is one sequence: the N·K labelled support examples (each a
feature vector concatenated with its one-hot label), then the query (its
label part zero). The network reads it causally, interleaving causal
attention blocks (which look up earlier positions by content) with
temporal-convolution blocks (which aggregate over time with dilated causal
convolutions), and classifies the query from the last position.

Training and inference compose the C operations of attnc.nn's SNAIL blocks
(attnc/nn/snail.py) and their C backward passes; the layout changes between
the attention blocks' (B, T, C) and the convolutions' (B, C, T) are NumPy
transposes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import nn
from .._args import as_array, float_array, same_dtype, shape_str, size_arg
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import internal, vjp
from ..nn.module import ModuleList
from ..nn.snail import AttentionBlock, TCBlock, _runner

__all__ = ["SNAIL"]

#: The paper's Omniglot network after the embedding: attention(64, 32), TC(128),
#: attention(256, 128), TC(128), attention(512, 256) (key size, value size).
PAPER_ATTENTION = ((64, 32), (256, 128), (512, 256))


class SNAIL(nn.Module):
    r"""SNAIL for N-way K-shot classification (Mishra et al. 2017).

    Sequence length T = N·K + 1. Layers, in the paper's order::

        x_t = [features_t ; onehot(label_t)]        (the query's label part is 0)
        h   = embedding(x)                          Linear(input_size + N, E)       (B, T, E)
        h   = AttentionBlock(K1, V1)(h)             (B, T, E + V1)
        h   = TCBlock(T, F)(h)                      (+ ⌈log2 T⌉·F channels)
        h   = AttentionBlock(K2, V2)(h)
        ...                                         (one TC block between consecutive attention blocks)
        logits = classifier(h[:, T − 1])            Linear(C_final, N)              (B, N)

    ``attention_sizes`` lists the attention blocks' (key size, value size);
    the defaults, ((32, 16), (64, 32), (128, 64)) with ``filters=32`` and
    ``embedding_size=64``, are the paper's network (``PAPER_ATTENTION`` with
    128 filters) at a quarter of its widths, small enough to train in
    minutes on two cores. The embedding is a Linear map: the features here
    are already vectors (the paper's is a CNN over images).

    Parameters
    ----------
    n_way : int >= 2, N, the classes per episode
    k_shot : int, K, the labelled examples per class
    input_size : int, the width of each feature vector
    embedding_size : int, E
    filters : int, F, the channels each dense block of a TC block adds
    attention_sizes : sequence of (key_size, value_size) int pairs, one per attention block
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation

    ``state_dict()`` names: ``embedding.weight`` (E, input_size + N),
    ``embedding.bias`` (E,); ``blocks.{i}.*`` (AttentionBlock: ``query``,
    ``key``, ``value`` ``.weight``/``.bias``; TCBlock:
    ``blocks.{j}.filter_conv`` / ``gate_conv`` ``.weight``/``.bias``);
    ``classifier.weight`` (N, C_final), ``classifier.bias`` (N,).

    ``forward(features (B, T, input_size) float32/float64, labels (B, T − 1) int in [0, N),
    return_attention=False)`` → logits (B, N) of the query (the last
    position), or (logits, attention) with a tuple of each attention block's
    weights (B, T, T). Any T ≥ 1 is read (the TC blocks' receptive field
    covers N·K + 1 steps). ``attnc.vjp(model, features, labels)``: gradients
    of "features" and every parameter. ``loss_and_grad(episodes)``: the mean
    cross-entropy of the queries and its gradients.

    Example
    -------
    >>> ep = attnc.datasets.FewShotTask(5, 1, dim=8).episodes(3, seed=0)
    >>> model = attnc.models.SNAIL(5, 1, 8, embedding_size=16, filters=8, attention_sizes=((8, 4), (8, 4)), seed=0)
    >>> logits, att = model(ep.features, ep.labels, return_attention=True)
    >>> logits.shape, logits.dtype, len(att), att[0].shape
    ((3, 5), dtype('float32'), 2, (3, 6, 6))
    >>> loss, grads = model.loss_and_grad(ep)
    >>> grads["classifier.weight"].shape, model.predict(ep.features, ep.labels).dtype
    ((5, 48), dtype('int64'))
    """

    def __init__(
        self,
        n_way: int,
        k_shot: int,
        input_size: int,
        embedding_size: int = 64,
        filters: int = 32,
        attention_sizes: Sequence[tuple[int, int]] = ((32, 16), (64, 32), (128, 64)),
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        self.n_way = size_arg("n_way", n_way, 2)
        self.k_shot = size_arg("k_shot", k_shot)
        self.input_size = size_arg("input_size", input_size)
        self.embedding_size = size_arg("embedding_size", embedding_size)
        self.filters = size_arg("filters", filters)
        sizes = self._sizes(attention_sizes)
        self.attention_sizes = sizes
        rng = np.random.default_rng(seed)
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        self.embedding = nn.Linear(self.input_size + self.n_way, self.embedding_size, dtype=dtype, seed=sub())
        blocks, C = [], self.embedding_size
        for i, (k, v) in enumerate(sizes):
            if i:
                blocks.append(TCBlock(C, self.seq_len, self.filters, dtype=dtype, seed=sub()))
                C = blocks[-1].out_channels
            blocks.append(AttentionBlock(C, k, v, dtype=dtype, seed=sub()))
            C = blocks[-1].out_channels
        self.blocks = ModuleList(blocks, dtype)
        self.classifier = nn.Linear(C, self.n_way, dtype=dtype, seed=sub())

    @staticmethod
    def _sizes(attention_sizes):
        try:
            sizes = tuple((int(k), int(v)) for k, v in attention_sizes)
            ok = len(sizes) >= 1 and all(
                k >= 1 and v >= 1 and k == kk and v == vv for (k, v), (kk, vv) in zip(sizes, attention_sizes)
            )
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(
                "attention_sizes must be a non-empty sequence of (key_size, value_size) pairs of "
                f"ints >= 1, got {attention_sizes!r}"
            )
        return sizes

    @property
    def seq_len(self) -> int:
        """N·K + 1: the episode's length (support examples and the query)."""
        return self.n_way * self.k_shot + 1

    # -- arguments ------------------------------------------------------------------------
    def _inputs(self, features, labels):
        """[features ; onehot(labels), the last position's label part 0] (B, T, input_size + N)."""
        x = float_array(features, "features")
        same_dtype(self.dtype, features=x)
        if x.ndim != 3 or x.shape[2] != self.input_size or x.shape[1] < 1:
            raise ValueError(
                f"features has shape {shape_str(x.shape)}, expected (B, T, {self.input_size}) "
                "with T >= 1 (the support examples, then the query)"
            )
        B, T, _ = x.shape
        y = as_array(labels, "labels")
        if y.dtype.kind not in "iu" or y.shape != (B, T - 1):
            raise ValueError(
                f"labels must be integers of shape ({B}, {T - 1}) (one per support example), "
                f"got {y.dtype} {shape_str(y.shape)}"
            )
        if y.size and (y.min() < 0 or y.max() >= self.n_way):
            raise ValueError(f"labels must be in [0, {self.n_way}), got values from {y.min()} to {y.max()}")
        onehot = np.zeros((B, T, self.n_way), self.dtype)
        b, t = np.indices(y.shape)
        onehot[b, t, y] = 1
        return np.concatenate([x, onehot], axis=-1)

    # -- the computation ----------------------------------------------------------------------
    def _run(self, features, labels, return_attention, keep):
        x = self._inputs(features, labels)
        run = _runner(keep)
        h, emb_pb = run(self.embedding, x)
        states, attention = [], []
        for block in self.blocks:
            if isinstance(block, TCBlock):
                hc, state = block._run(np.ascontiguousarray(h.transpose(0, 2, 1)), keep)
                h = np.ascontiguousarray(hc.transpose(0, 2, 1))
            else:
                out, state = block._run(h, return_attention, keep)
                h, w = out if return_attention else (out, None)
                attention.append(w)
            states.append(state)
        logits, cls_pb = run(self.classifier, h[:, -1])
        outputs = (logits, tuple(attention)) if return_attention else logits
        state = (emb_pb, states, cls_pb, h.shape, x.shape) if keep else None
        return outputs, state

    def forward(
        self, features: ArrayLike, labels: ArrayLike, return_attention: bool = False
    ) -> Array | tuple[Array, tuple[Array, ...]]:
        return self._run(features, labels, return_attention, keep=False)[0]

    def _vjp_forward(self, features, labels, return_attention=False):
        return self._run(features, labels, return_attention, keep=True)

    def _vjp_backward(self, state, cotangents):
        dlogits = cotangents[0]
        datt = cotangents[1] if len(cotangents) > 1 else None
        return self._grads(state, dlogits, datt)

    def _grads(self, state, dlogits, datt=None):
        emb_pb, states, cls_pb, hshape, xshape = state
        grads = {}
        dh = np.zeros(hshape, self.dtype)
        if dlogits is not None:
            g = cls_pb(np.ascontiguousarray(dlogits, self.dtype))
            dh[:, -1] = g["input"]
            grads["classifier.weight"], grads["classifier.bias"] = g["weight"], g["bias"]
        else:
            grads["classifier.weight"] = np.zeros_like(self.classifier.weight)
            grads["classifier.bias"] = np.zeros_like(self.classifier.bias)
        a = sum(1 for blk in self.blocks if isinstance(blk, AttentionBlock))
        for i in reversed(range(len(self.blocks))):
            block = self.blocks[i]
            if isinstance(block, TCBlock):
                g = block._grads(states[i], np.ascontiguousarray(dh.transpose(0, 2, 1)))
                dh = np.ascontiguousarray(g.pop("input").transpose(0, 2, 1))
            else:
                a -= 1
                g = block._grads(states[i], dh, None if datt is None else datt[a])
                dh = g.pop("input")
            grads.update({f"blocks.{i}.{k}": v for k, v in g.items()})
        g = emb_pb(np.ascontiguousarray(dh))
        grads["embedding.weight"], grads["embedding.bias"] = g["weight"], g["bias"]
        grads["features"] = np.ascontiguousarray(g["input"][..., : self.input_size])
        return grads

    @internal()
    def loss_and_grad(self, episodes: Any) -> tuple[float, dict[str, Array]]:
        """(mean cross-entropy of the queries' logits, gradients by
        state_dict name) for episodes with ``features`` (B, T, input_size),
        ``labels`` (B, T − 1) and ``targets`` (B,), such as
        ``attnc.datasets.FewShotTask(...).episodes(...)``."""
        logits, state = self._run(episodes.features, episodes.labels, False, keep=True)
        loss, ce_pb = vjp(nn.cross_entropy, logits, as_array(episodes.targets, "targets").astype(np.int64, copy=False))
        dlogits = ce_pb(np.ones((), logits.dtype))["input"]
        grads = self._grads(state, dlogits)
        del grads["features"]
        return float(loss), grads

    def predict(self, features: ArrayLike, labels: ArrayLike) -> Array:
        """The predicted class of each query: (B,) int64."""
        return self.forward(features, labels).argmax(axis=1).astype(np.int64)

    def extra_repr(self) -> str:
        return (
            f"n_way={self.n_way}, k_shot={self.k_shot}, input_size={self.input_size}, "
            f"embedding_size={self.embedding_size}, filters={self.filters}, "
            f"attention_sizes={self.attention_sizes}"
        )
