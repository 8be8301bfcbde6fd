r"""attnc.models.DecomposableAttention: the decomposable attention model for
natural language inference (Parikh, Täckström, Das & Uszkoreit 2016).

With a = (a_1..a_La) the premise's and b = (b_1..b_Lb) the hypothesis's
(projected) embeddings::

    attend     e_ij = F(a_i)ᵀ F(b_j)
               β_i = Σ_j softmax_j(e_ij) b_j        (over the hypothesis's real tokens)
               α_j = Σ_i softmax_i(e_ij) a_i        (over the premise's real tokens)
    compare    v1_i = G([a_i; β_i]),  v2_j = G([b_j; α_j])
    aggregate  v1 = Σ_i v1_i,  v2 = Σ_j v2_j        (padding excluded)
               ŷ = W_out H([v1; v2]) + b_out        (logits, one per class)

F, G and H are two-layer feed-forward networks with ReLUs (Linear + ReLU,
twice), as in the paper, with optional dropout after each ReLU (seeded); no
intra-sentence attention. Optional local context (``context=1``): before the
projection each token's embedding x_i is replaced by the window
[x_{i-1}; x_i; x_{i+1}] within its own sentence (zeros beyond its ends and at
padding), a fixed stand-in for the context the paper's optional
intra-sentence attention adds (F alone sees one word, so it cannot tell
"the red cat" from "the red dog"); attend, compare and aggregate are
unchanged.

Everything is a composition of C operations through their pullbacks:
attnc.nn.embedding, attnc.nn.linear, attnc.nn.relu (csrc/ops/nn/pointwise.c),
and attnc.attention with the "dot" score and padding masks (fully masked
rows give zero weights, never NaN). The premise's and hypothesis's tokens go
through the embedding, projection, F and G together as one batch of rows, so
a training step crosses into C about twenty times whatever the batch size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from .._args import as_array, as_rows, child_seeds, shape_str, size_arg
from .._typing import Array, ArrayLike, DTypeLike
from ..attention.soft import attention
from ..grad import internal, vjp

__all__ = ["DecomposableAttention", "FeedForward"]


def _shift(x, k):
    """y[:, i] = x[:, i - k] (zero where i - k is outside the sentence), x (B, L, E)."""
    y = np.zeros_like(x)
    if k > 0:
        y[:, k:] = x[:, :-k]
    else:
        y[:, :k] = x[:, -k:]
    return y


def _window(x, na, B, ma, mb):
    """Rows (N, E) of premise then hypothesis tokens -> (N, 3E): each real
    token's [x_{i-1}; x_i; x_{i+1}] within its sentence (zeros beyond its ends
    and at padding)."""
    out = []
    for rows, m in ((x[:na], ma), (x[na:], mb)):
        e = rows.reshape(B, m.shape[1], rows.shape[1]) * m[:, :, None]
        w = np.concatenate([_shift(e, 1), e, _shift(e, -1)], -1) * m[:, :, None]
        out.append(w.reshape(-1, w.shape[-1]))
    return np.concatenate(out).astype(x.dtype, copy=False)


def _window_backward(dw, na, B, ma, mb):
    """The pullback of _window: (N, 3E) -> (N, E)."""
    E = dw.shape[1] // 3
    out = []
    for rows, m in ((dw[:na], ma), (dw[na:], mb)):
        g = rows.reshape(B, m.shape[1], 3 * E) * m[:, :, None]
        d = (g[..., E : 2 * E] + _shift(g[..., :E], -1) + _shift(g[..., 2 * E :], 1)) * m[:, :, None]
        out.append(d.reshape(-1, E))
    return np.concatenate(out).astype(dw.dtype, copy=False)


def _prefixed(prefix, grads):
    return {f"{prefix}.{k}": v for k, v in grads.items() if k != "input"}


class FeedForward(nn.Module):
    """Parikh et al.'s F, G and H: ``relu(linear2(relu(linear1(x))))``.

    in_features -> hidden_size -> hidden_size; parameters ``linear1.weight``
    (hidden, in), ``linear1.bias``, ``linear2.weight`` (hidden, hidden),
    ``linear2.bias``. x (..., in_features) -> (..., hidden_size). With
    ``dropout`` > 0, in training mode, dropout follows each ReLU (one C pass,
    attnc.nn.relu_dropout), its masks drawn from a generator seeded by ``seed``.

    Example
    -------
    >>> ff = attnc.models.decomposable.FeedForward(4, 8, seed=0)
    >>> ff(np.ones((2, 3, 4), np.float32)).shape
    (2, 3, 8)
    """

    def __init__(
        self,
        in_features: int,
        hidden_size: int,
        dropout: float = 0.0,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dropout = float(dropout)
        s1, s2, s3 = child_seeds(seed, 3)
        self.linear1 = nn.Linear(in_features, hidden_size, dtype=dtype, seed=s1)
        self.linear2 = nn.Linear(hidden_size, hidden_size, dtype=dtype, seed=s2)
        self._rng = np.random.default_rng(s3)

    def _act(self, y):
        if self.training and self.dropout > 0:
            return vjp(nn.relu_dropout, y, self.dropout, seed=int(self._rng.integers(2**63)))
        return vjp(nn.relu, y)

    def _vjp_forward(self, x):
        y1, p1 = vjp(self.linear1, x)
        r1, q1 = self._act(y1)
        y2, p2 = vjp(self.linear2, r1)
        r2, q2 = self._act(y2)
        return r2, (p1, q1, p2, q2, r2.shape)

    def _vjp_backward(self, saved, cotangents):
        (d,) = cotangents
        p1, q1, p2, q2, shape = saved
        if d is None:
            d = np.zeros(shape, self.dtype)
        g2 = p2(q2(d)["input"])
        g1 = p1(q1(g2["input"])["input"])
        return {"input": g1["input"], **_prefixed("linear1", g1), **_prefixed("linear2", g2)}

    def forward(self, x: ArrayLike) -> Array:
        return self._vjp_forward(x)[0]


class DecomposableAttention(nn.Module):
    r"""Decomposable attention (Parikh et al. 2016) for sentence pairs.

    Parameters
    ----------
    vocab_size : int, V
    embedding_dim : int, E
    hidden_size : int, H, the width of F, G and H's layers
    num_classes : int, the number of logits
    padding_idx : int or None, the padding token (its embedding is zero and
        gets no gradient; by default the tokens that are not padding are real)
    project : bool, a linear projection (no bias) of the embeddings to H
    context : 0 (the paper's model) or 1: a_i = P [x_{i-1}; x_i; x_{i+1}]
        (neighbours within the sentence's real tokens, zeros elsewhere;
        padding and masked positions count as zeros)
    dropout : float in [0, 1), after every ReLU of F, G and H in training mode
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation and the dropout masks

    ``state_dict()`` names: ``embedding.weight`` (V, E);
    ``projection.weight`` (H, E), or (H, 3E) with ``context=1``, when
    ``project`` (a linear map without bias, as the paper's projection of the
    embeddings; d = H, else d = E or 3E);
    ``attend.*`` (F: d -> H -> H), ``compare.*`` (G: 2d -> H -> H),
    ``aggregate.*`` (H: 2H -> H -> H), each ``linear1.weight/bias``,
    ``linear2.weight/bias`` (see FeedForward); ``classifier.weight``
    (num_classes, H), ``classifier.bias``.

    ``forward(premise, hypothesis, premise_lengths=None,
    hypothesis_lengths=None, *, premise_mask=None, hypothesis_mask=None,
    return_attention=False)``: premise (B, La) and hypothesis (B, Lb) int
    token ids; the real tokens of each row given by lengths (B,) ints, or by
    masks (B, L) bool (True = real token), or by default every id !=
    padding_idx. Returns logits (B, num_classes), or (logits, attention
    (B, La, Lb)) with attention[b, i, j] = softmax_j(e_ij), the premise ×
    hypothesis alignment (rows of padding tokens are zero). ``align(...)``
    (same arguments) returns both directions and the raw scores.
    ``attnc.vjp(model, premise, hypothesis, ...)`` returns gradients keyed
    by state_dict name; ``loss_and_grad(batch)`` the mean cross-entropy and
    its gradients.

    Example
    -------
    >>> m = attnc.models.DecomposableAttention(10, 8, 16, seed=0)
    >>> p = np.array([[1, 2, 3, 0]]); h = np.array([[2, 3]])
    >>> logits, att = m(p, h, return_attention=True)
    >>> logits.shape, logits.dtype, att.shape, att.sum(-1).round(6).tolist()
    ((1, 3), dtype('float32'), (1, 4, 2), [[1.0, 1.0, 1.0, 0.0]])
    >>> {k: v.shape for k, v in m.state_dict().items() if not k.startswith(("attend", "compare", "aggregate"))}
    {'embedding.weight': (10, 8), 'projection.weight': (16, 8), 'classifier.weight': (3, 16), 'classifier.bias': (3,)}
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 32,
        hidden_size: int = 64,
        num_classes: int = 3,
        *,
        padding_idx: int | None = 0,
        project: bool = True,
        context: int = 0,
        dropout: float = 0.0,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        size_arg("vocab_size", vocab_size)
        size_arg("embedding_dim", embedding_dim)
        size_arg("hidden_size", hidden_size)
        size_arg("num_classes", num_classes)
        s = child_seeds(seed, 6)
        self.padding_idx = padding_idx
        if context not in (0, 1):
            raise ValueError(f"context must be 0 or 1, got {context!r}")
        self.context = int(context)
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx, dtype=dtype, seed=s[0])
        self.project = bool(project)
        if self.project:
            self.projection = nn.Linear(
                (1 + 2 * self.context) * embedding_dim, hidden_size, bias=False, dtype=dtype, seed=s[1]
            )
        d = hidden_size if self.project else (1 + 2 * self.context) * embedding_dim
        self.attend = FeedForward(d, hidden_size, dropout, dtype=dtype, seed=s[2])
        self.compare = FeedForward(2 * d, hidden_size, dropout, dtype=dtype, seed=s[3])
        self.aggregate = FeedForward(2 * hidden_size, hidden_size, dropout, dtype=dtype, seed=s[4])
        self.classifier = nn.Linear(hidden_size, num_classes, dtype=dtype, seed=s[5])

    # -- inputs --------------------------------------------------------------------------------
    def _ids(self, x, name):
        a = as_array(x, name)
        if a.dtype.kind not in "iu":
            raise TypeError(f"{name} must be an integer array of token ids, got dtype {a.dtype}")
        if a.ndim != 2:
            raise ValueError(f"{name} must have shape (B, L), got {shape_str(a.shape)}")
        V = self.embedding.num_embeddings
        if a.size and (a.min() < 0 or a.max() >= V):
            raise ValueError(f"{name} has token ids outside [0, {V})")
        return a.astype(np.int64, copy=False)

    def _mask(self, ids, lengths, mask, name):
        B, L = ids.shape
        if lengths is not None and mask is not None:
            raise ValueError(f"give {name}_lengths or {name}_mask, not both")
        if lengths is not None:
            n = as_array(lengths, f"{name}_lengths")
            if n.dtype.kind not in "iu":
                raise TypeError(f"{name}_lengths must be an integer array, got dtype {n.dtype}")
            if n.shape != (B,):
                raise ValueError(f"{name}_lengths has shape {shape_str(n.shape)}, expected ({B},)")
            if n.size and (n.min() < 0 or n.max() > L):
                raise ValueError(f"{name}_lengths must be in [0, {L}]")
            return np.arange(L)[None, :] < n[:, None]
        if mask is not None:
            m = as_array(mask, f"{name}_mask")
            if m.dtype != np.bool_:
                raise TypeError(f"{name}_mask must be a boolean array (True = real token), got dtype {m.dtype}")
            if m.shape != (B, L):
                raise ValueError(f"{name}_mask has shape {shape_str(m.shape)}, expected {shape_str((B, L))}")
            return m
        if self.padding_idx is None:
            return np.ones((B, L), bool)
        return ids != self.embedding.padding_idx

    def _inputs(self, premise, hypothesis, premise_lengths, hypothesis_lengths, premise_mask, hypothesis_mask):
        p, h = self._ids(premise, "premise"), self._ids(hypothesis, "hypothesis")
        if p.shape[0] != h.shape[0]:
            raise ValueError(
                f"premise {shape_str(p.shape)} and hypothesis {shape_str(h.shape)} have different batch sizes"
            )
        return (
            p,
            h,
            self._mask(p, premise_lengths, premise_mask, "premise"),
            self._mask(h, hypothesis_lengths, hypothesis_mask, "hypothesis"),
        )

    # -- the model -------------------------------------------------------------------------------
    def _run(self, p, h, ma, mb):
        B, La = p.shape
        Lb = h.shape[1]
        na = B * La
        x, pe = vjp(self.embedding, np.concatenate([p.reshape(-1), h.reshape(-1)]))
        if self.context:
            x = _window(x, na, B, ma, mb)
        pp = None
        if self.project:
            x, pp = vjp(self.projection, x)
        d = x.shape[1]
        a, b = x[:na].reshape(B, La, d), x[na:].reshape(B, Lb, d)
        f, pf = vjp(self.attend, x)
        fa, fb = f[:na].reshape(B, La, f.shape[1]), f[na:].reshape(B, Lb, f.shape[1])
        mab = ma[:, :, None] & mb[:, None, :]
        (beta, w_ab), pab = vjp(attention, fa, fb, b, score="dot", mask=mab)
        (alpha, w_ba), pba = vjp(attention, fb, fa, a, score="dot", mask=mab.transpose(0, 2, 1))
        g_in = np.concatenate(
            [np.concatenate([a, beta], -1).reshape(na, 2 * d), np.concatenate([b, alpha], -1).reshape(B * Lb, 2 * d)]
        )
        v, pg = vjp(self.compare, g_in)
        H = v.shape[1]
        v1 = (v[:na].reshape(B, La, H) * ma[:, :, None]).sum(axis=1)
        v2 = (v[na:].reshape(B, Lb, H) * mb[:, :, None]).sum(axis=1)
        hh, ph = vjp(self.aggregate, np.concatenate([v1, v2], -1))
        logits, pc = vjp(self.classifier, hh)
        saved = (B, La, Lb, d, H, ma, mb, pe, pp, pf, pab, pba, pg, ph, pc)
        return logits, (w_ab, w_ba, fa, fb), saved

    def _vjp_forward(
        self,
        premise,
        hypothesis,
        premise_lengths=None,
        hypothesis_lengths=None,
        *,
        premise_mask=None,
        hypothesis_mask=None,
    ):
        args = self._inputs(premise, hypothesis, premise_lengths, hypothesis_lengths, premise_mask, hypothesis_mask)
        logits, _, saved = self._run(*args)
        return logits, saved

    def _vjp_backward(self, saved, cotangents):
        (dlogits,) = cotangents
        B, La, Lb, d, H, ma, mb, pe, pp, pf, pab, pba, pg, ph, pc = saved
        na = B * La
        if dlogits is None:
            dlogits = np.zeros((B, self.classifier.out_features), self.dtype)
        grads = {}
        gc = pc(dlogits)
        grads.update(_prefixed("classifier", gc))
        gh = ph(gc["input"])
        grads.update(_prefixed("aggregate", gh))
        dv1, dv2 = gh["input"][:, :H], gh["input"][:, H:]
        dt = self.dtype
        dv = np.concatenate(
            [(dv1[:, None, :] * ma[:, :, None]).reshape(na, H), (dv2[:, None, :] * mb[:, :, None]).reshape(B * Lb, H)]
        ).astype(dt, copy=False)
        gg = pg(dv)
        grads.update(_prefixed("compare", gg))
        dg = gg["input"]
        dx = np.concatenate([dg[:na, :d], dg[na:, :d]])  # the direct a and b paths
        gab = pab(np.ascontiguousarray(dg[:na, d:].reshape(B, La, d)), None)  # query fa, keys fb, values b
        gba = pba(np.ascontiguousarray(dg[na:, d:].reshape(B, Lb, d)), None)  # query fb, keys fa, values a
        dx[:na] += gba["values"].reshape(na, d)
        dx[na:] += gab["values"].reshape(B * Lb, d)
        df = np.concatenate([as_rows(gab["query"] + gba["keys"]), as_rows(gab["keys"] + gba["query"])])
        gf = pf(df)
        grads.update(_prefixed("attend", gf))
        dx += gf["input"]
        if pp is not None:
            gp = pp(dx)
            grads.update(_prefixed("projection", gp))
            dx = gp["input"]
        if self.context:
            dx = _window_backward(dx, na, B, ma, mb)
        grads.update(_prefixed("embedding", pe(dx)))
        return grads

    def forward(
        self,
        premise: ArrayLike,
        hypothesis: ArrayLike,
        premise_lengths: ArrayLike | None = None,
        hypothesis_lengths: ArrayLike | None = None,
        *,
        premise_mask: ArrayLike | None = None,
        hypothesis_mask: ArrayLike | None = None,
        return_attention: bool = False,
    ) -> Array | tuple[Array, Array]:
        args = self._inputs(premise, hypothesis, premise_lengths, hypothesis_lengths, premise_mask, hypothesis_mask)
        logits, (w_ab, *_), _ = self._run(*args)
        return (logits, w_ab) if return_attention else logits

    def align(
        self,
        premise: ArrayLike,
        hypothesis: ArrayLike,
        premise_lengths: ArrayLike | None = None,
        hypothesis_lengths: ArrayLike | None = None,
        *,
        premise_mask: ArrayLike | None = None,
        hypothesis_mask: ArrayLike | None = None,
    ) -> dict[str, Array]:
        """The attend step's matrices, each (B, La, Lb): "scores" e_ij
        (0 where either token is padding), "premise_to_hypothesis"
        softmax_j(e_ij) (the weights of β_i), "hypothesis_to_premise"
        softmax_i(e_ij) (the weights of α_j, transposed to premise × hypothesis);
        and "logits" (B, num_classes)."""
        p, h, ma, mb = self._inputs(
            premise, hypothesis, premise_lengths, hypothesis_lengths, premise_mask, hypothesis_mask
        )
        logits, (w_ab, w_ba, fa, fb), _ = self._run(p, h, ma, mb)
        scores = np.einsum("bik,bjk->bij", fa, fb) * (ma[:, :, None] & mb[:, None, :])
        return {
            "scores": scores,
            "premise_to_hypothesis": w_ab,
            "hypothesis_to_premise": w_ba.transpose(0, 2, 1).copy(),
            "logits": logits,
        }

    @internal()
    def loss_and_grad(self, batch: Any) -> tuple[float, dict[str, Array]]:
        """(mean cross-entropy, gradients by state_dict name) of a batch with
        premise, hypothesis, premise_lengths, hypothesis_lengths and labels
        (an attnc.datasets.EntailmentBatch)."""
        logits, saved = self._vjp_forward(
            batch.premise, batch.hypothesis, batch.premise_lengths, batch.hypothesis_lengths
        )
        loss, pb = vjp(nn.cross_entropy, logits, batch.labels)
        return float(loss), self._vjp_backward(saved, (pb(np.ones((), self.dtype))["input"],))

    loss_and_grads = loss_and_grad

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.embedding.num_embeddings}, embedding_dim={self.embedding.embedding_dim}, "
            f"hidden_size={self.classifier.in_features}, num_classes={self.classifier.out_features}, "
            f"project={self.project}"
        )
