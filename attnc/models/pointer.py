"""attnc.models.PointerNet: pointer networks (Vinyals, Fortunato & Jaitly
2015): an LSTM encoder over input vectors and an LSTM decoder whose additive
attention over the inputs is itself the output distribution.

Training composes C operations (attnc.nn.LSTM's time loops, the additive
score of attnc.score, attnc.nn.log_softmax) and their C backward passes;
constrained greedy and beam-search decoding runs in C
(csrc/models/pointer/pointer.c, through the library's one search).
"""

from __future__ import annotations

import copy
import numbers
from collections import OrderedDict
from typing import Any, Literal, NamedTuple

import numpy as np

from .. import _core, nn
from .._args import as_array, float_array, same_dtype, shape_str, size_arg
from .._typing import Array, ArrayLike, DTypeLike
from ..attention.score import score
from ..grad import internal, vjp

__all__ = ["PointerNet", "PointerOutput"]

CONSTRAINTS = {"permutation": 0, "tour": 1, "hull": 2}
Constraint = Literal["permutation", "tour", "hull"]
IGNORE = -100


class PointerOutput(NamedTuple):
    """What ``PointerNet.generate`` returns: a named tuple.

    indices : int64 (B, T), the chosen input indices, −1 after a row's end (for
        "tour" the start index is appended to close the tour)
    log_probs : array (B, T), the model's dtype: the log-probability of each
        choice (0 after the end and for the closing index)
    pointers : array (B, T, n + 1), the model's dtype: every step's pointer
        distribution over the n inputs and, in the last column, the end token
        (0 after the end): the alignment matrix

    Example
    -------
    >>> m = attnc.models.PointerNet(2, 8, seed=0)
    >>> out = m.generate(np.random.rand(3, 4, 2).astype(np.float32), constraint="tour")
    >>> type(out).__name__, out.indices.dtype, out.indices.shape, out.pointers.shape
    ('PointerOutput', dtype('int64'), (3, 5), (3, 5, 5))
    >>> bool((out.indices[:, 0] == out.indices[:, -1]).all()), bool((out.log_probs <= 0).all())
    (True, True)
    """

    indices: Array
    log_probs: Array
    pointers: Array


class PointerNet(nn.Module):
    r"""A pointer network (Vinyals et al. 2015).

    Positions: the n inputs x_1..x_n and an end token, a learned vector
    ``end`` read by the encoder before the inputs (so the encoder's states are
    e_0 = end, e_1..e_n). Equations (B rows, hidden size H)::

        e_0..e_n, (h, c) = LSTM_enc([end; x_1; ...; x_n])        (each row over its own n_b + 1)
        d_i = LSTM_dec(x_{π(i−1)}, (d_{i−1}, c_{i−1}))            (x_{π(−1)} = ``start``, d_{−1}, c_{−1} = h, c)
        u_ij = vᵀ tanh(W1 e_j + W2 d_i)                           (j = 0..n)
        p(π_i = j | π_<i, x) = softmax_j(u_ij masked to −inf)

    Masked: positions past a row's inputs, inputs already chosen, and the end
    token unless the constraint allows it: "permutation" and "tour" only once
    every input is chosen (it is then certain: log p = 0), "hull" after at
    least one input. Teacher forcing: the decoder reads the target's inputs.

    With ``embedding_size=E``, every input vector (``start`` and ``end``
    included) first goes through a linear embedding x → W_e x + b_e (E), as in
    Bello et al. 2016: with raw 2-D coordinates the LSTMs' inputs are small
    next to their recurrent terms, and learning which input is where is slow.
    Training folds it into the LSTMs' input weights (W_ih W_e and W_ih b_e +
    b_ih): the same function, with input products D columns wide instead of E
    (a training step about 30% faster at D = 2, E = H = 128).

    With ``bidirectional=True`` the encoder is a bidirectional LSTM (each row's
    reverse direction starts at its own last input): e_j = [e→_j; e←_j] (2H),
    so every key has seen all the inputs, not only those before it (for a
    convex hull: whether x_j is a vertex depends on the points after it too);
    W1 is then (H, 2H) and the decoder starts from the forward direction's
    final state.

    Parameters
    ----------
    input_size : int, D, the width of each input vector (2 for points in the plane)
    hidden_size : int, H, both LSTMs'
    embedding_size : int or None, E, the optional linear embedding's width
    bidirectional : bool, a bidirectional encoder (keys from both directions)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation

    ``state_dict()`` names: ``embedding.weight`` (E, D) and
    ``embedding.bias`` (E) (with ``embedding_size``), ``encoder.*`` and ``decoder.*``
    (``torch.nn.LSTM(E or input_size, hidden_size, batch_first=True)``'s; the
    encoder's with ``bidirectional=bidirectional``: ``encoder.*_l0_reverse``
    too), ``W1.weight`` (H, H; (H, 2H) when bidirectional), ``W2.weight``
    (H, H), ``v.weight`` (1, H), ``start`` and ``end`` (input_size).

    ``forward(inputs (B, n, D) float32/float64, targets (B, T) int, *, lengths=None,
    constraint="permutation")`` → log-probabilities (B, T + 1, n + 1): step i
    < T points at targets[:, i] (input indices, −1 padding after a row's
    last), step T_b (a row's target count) at the end token (last column);
    −inf where masked and after a row's end step. ``attnc.vjp(model, inputs,
    targets, ...)``: gradients of "inputs" and every parameter.
    ``loss_and_grad(batch, constraint=...)``: the mean negative
    log-likelihood of the target steps and the end step.
    ``generate(inputs, *, lengths=None, constraint="permutation",
    beam_size=1, length_penalty=0.0)`` → :class:`PointerOutput`.

    Example
    -------
    >>> m = attnc.models.PointerNet(1, 16, seed=0)
    >>> x = np.random.default_rng(0).random((2, 5, 1), np.float32)
    >>> out = m.generate(x)
    >>> out.indices.shape, sorted(out.indices[0].tolist())
    ((2, 5), [0, 1, 2, 3, 4])
    >>> logp = m(x, np.argsort(x[..., 0], axis=1))
    >>> logp.shape, logp.dtype
    ((2, 6, 6), dtype('float32'))
    >>> m.state_dict()["encoder.weight_ih_l0"].shape, m.state_dict()["v.weight"].shape
    ((64, 1), (1, 16))
    >>> b = attnc.models.PointerNet(1, 16, bidirectional=True, seed=0)
    >>> b.state_dict()["W1.weight"].shape, b.state_dict()["encoder.weight_hh_l0_reverse"].shape
    ((16, 32), (64, 16))
    >>> b.generate(x).indices.shape
    (2, 5)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int = 128,
        *,
        embedding_size: int | None = None,
        bidirectional: bool = False,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        D, H = size_arg("input_size", input_size), size_arg("hidden_size", hidden_size)
        E = None if embedding_size is None else size_arg("embedding_size", embedding_size)
        self.input_size, self.hidden_size, self.embedding_size = D, H, E
        self.bidirectional = bool(bidirectional)
        K = 2 * H if self.bidirectional else H  # the width of an encoder state
        rng = np.random.default_rng(seed)
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        # an optional linear embedding of the inputs (and of start and end) before both LSTMs
        self.embedding = nn.Linear(D, E, dtype=dtype, seed=sub()) if E else None
        self.encoder = nn.LSTM(E or D, H, bidirectional=self.bidirectional, dtype=dtype, seed=sub())
        self.decoder = nn.LSTM(E or D, H, dtype=dtype, seed=sub())
        self.W1 = nn.Linear(K, H, bias=False, dtype=dtype, seed=sub())
        self.W2 = nn.Linear(H, H, bias=False, dtype=dtype, seed=sub())
        self.v = nn.Linear(H, 1, bias=False, dtype=dtype, seed=sub())
        init = np.random.default_rng(sub())
        self._init_parameter("start", (D,), lambda shape: init.uniform(-1, 1, shape))
        self._init_parameter("end", (D,), lambda shape: init.uniform(-1, 1, shape))

    # -- arguments ------------------------------------------------------------------------
    def _inputs(self, inputs, lengths):
        x = float_array(inputs, "inputs")
        same_dtype(self.dtype, inputs=x)
        if x.ndim != 3 or x.shape[2] != self.input_size or x.shape[1] < 1:
            raise ValueError(f"inputs has shape {shape_str(x.shape)}, expected (B, n, {self.input_size}) with n >= 1")
        B, n, _ = x.shape
        if lengths is None:
            nl = np.full(B, n, np.int64)
        else:
            nl = as_array(lengths, "lengths")
            if nl.dtype.kind not in "iu":
                raise ValueError(f"lengths must be integers, got dtype {nl.dtype}")
            nl = np.ascontiguousarray(nl, np.int64)
            # its shape (B,) and range [1, n], checked by the C decoder's check before anything reads it
            _core.pointer_check_lengths(lengths=nl, B=B, n=n)
        return np.ascontiguousarray(x), nl

    @staticmethod
    def _constraint(constraint):
        if constraint not in CONSTRAINTS:
            raise ValueError(f"constraint must be one of {tuple(CONSTRAINTS)}, got {constraint!r}")
        return constraint

    @staticmethod
    def _targets(targets, nl, constraint):
        """(targets (B, T) int64, counts (B,)): checked against the constraint."""
        t = as_array(targets, "targets")
        B = nl.shape[0]
        if t.dtype.kind not in "iu" or t.ndim != 2 or t.shape[0] != B:
            raise ValueError(f"targets must be integers of shape ({B}, T), got {t.dtype} {shape_str(t.shape)}")
        t = t.astype(np.int64)
        real = t >= 0
        counts = real.sum(axis=1)
        if np.any(real[:, 1:] & ~real[:, :-1]) or np.any(t < -1):
            raise ValueError("targets must be input indices followed only by -1 padding")
        if np.any(real & (t >= nl[:, None])):
            raise ValueError("targets point past a row's inputs")
        ordered = np.sort(np.where(real, t, -1), axis=1)
        repeats = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any(axis=1)
        empty = (counts < 1) if constraint == "hull" else np.zeros(B, bool)
        partial = (counts != nl) if constraint != "hull" else np.zeros(B, bool)
        if np.any(repeats | empty | partial):
            b = int(np.argmax(repeats | empty | partial))  # the first bad row, its first problem
            if repeats[b]:
                raise ValueError(f"targets row {b} repeats an input: every constraint forbids it")
            if empty[b]:
                raise ValueError(f"targets row {b} is empty: a hull has at least one input before its end")
            raise ValueError(f"targets row {b} has {counts[b]} indices; a {constraint} needs all {nl[b]}")
        return t, counts

    @staticmethod
    def _masks(t, counts, nl, n, constraint):
        """(mask (B, T + 1, n + 1) True = −inf, target positions (B, T + 1) with IGNORE after the end)."""
        B, T = t.shape
        P = n + 1
        steps = np.arange(T + 1)
        real = steps[None, :T] < counts[:, None]  # the rows' choices
        pos = np.where(real, t + 1, 0)  # internal positions, 0 = end
        when = np.full((B, P), T + 1, np.int64)  # the step each was chosen at
        rows, at = np.nonzero(real)
        when[rows, pos[rows, at]] = at
        mask = when[:, None, :] < steps[None, :, None]  # chosen before step i
        mask[:, :, 1:] |= np.arange(n)[None, None, :] >= nl[:, None, None]  # padding inputs
        if constraint == "hull":
            mask[:, 0, 0] = True  # not before one input
        else:  # the end once all are chosen
            mask[:, :, 0] = np.minimum(steps[None, :], counts[:, None]) < nl[:, None]
        target = np.full((B, T + 1), IGNORE, np.int64)
        target[:, :T] = np.where(steps[None, :T] < counts[:, None], pos, IGNORE)
        target[np.arange(B), counts] = 0  # the end step
        after = steps[None, :] > counts[:, None]
        mask |= after[:, :, None]  # nothing after the end
        return mask, target

    # -- the computation ----------------------------------------------------------------------
    def _folded(self, lstm):
        """lstm with the embedding folded in: W_ih (W_e z + b_e) + b_ih = (W_ih W_e) z +
        (W_ih b_e + b_ih), so it reads the raw inputs z (D wide) and its input products
        shrink from E to D columns (the same function, rounded otherwise). lstm itself
        without an embedding."""
        if self.embedding is None:
            return lstm
        W_e, b_e = self.embedding.weight, self.embedding.bias
        folded = OrderedDict()
        for name, p in lstm._parameters.items():
            if name.startswith("weight_ih"):
                p = p @ W_e
            elif name.startswith("bias_ih"):
                p = p + lstm._parameters["weight_ih" + name[len("bias_ih") :]] @ b_e
            folded[name] = np.ascontiguousarray(p, self.dtype)
        f = copy.copy(lstm)  # the same LSTM (mode, sizes, training) on the folded weights
        object.__setattr__(f, "_parameters", folded)
        object.__setattr__(f, "input_size", self.input_size)
        return f

    def _unfold(self, grads, prefix, g):
        """grads (by state-dict name) += those of lstm `prefix` and its share of the
        embedding's, from those g of its folded form: with G_W, G_b the gradients of
        W_ih W_e and W_ih b_e + b_ih, dW_ih = G_W W_eᵀ + G_b b_eᵀ, db_ih = G_b,
        dW_e = W_ihᵀ G_W, db_e = W_ihᵀ G_b."""
        grads.update({f"{prefix}.{k}": v for k, v in g.items() if k not in ("input", "h0", "c0")})
        if self.embedding is None:
            return
        W_e, b_e = self.embedding.weight, self.embedding.bias
        for name, W_ih in getattr(self, prefix)._parameters.items():
            if not name.startswith("weight_ih"):
                continue
            G_W, G_b = g[name], g["bias_ih" + name[len("weight_ih") :]]
            grads[f"{prefix}.{name}"] = (G_W @ W_e.T + np.outer(G_b, b_e)).astype(self.dtype)
            grads["embedding.weight"] = grads.get("embedding.weight", 0) + W_ih.T @ G_W
            grads["embedding.bias"] = grads.get("embedding.bias", 0) + W_ih.T @ G_b

    def _run(self, inputs, targets, lengths, constraint, keep):
        constraint = self._constraint(constraint)
        x, nl = self._inputs(inputs, lengths)
        t, counts = self._targets(targets, nl, constraint)
        B, n, D = x.shape
        dt = self.dtype
        enc_in = np.concatenate([np.broadcast_to(self.end, (B, 1, D)), x], axis=1)
        prev = np.where(t >= 0, t, 0)
        dec_in = np.concatenate(
            [np.broadcast_to(self.start, (B, 1, D)), np.take_along_axis(x, prev[:, :, None], 1)], axis=1
        )
        run = (lambda f, *a, **k: vjp(f, *a, **k)) if keep else (lambda f, *a, **k: (f(*a, **k), None))
        # the embedding, folded into both LSTMs: they read the raw inputs
        encoder, decoder = self._folded(self.encoder), self._folded(self.decoder)
        (enc, (h, c)), enc_pb = run(encoder, enc_in, None, lengths=nl + 1)
        # the decoder starts from the (forward) encoder's final state
        (dec, _), dec_pb = run(decoder, dec_in, (h[:1], c[:1]), lengths=counts + 1)
        u, score_pb = run(
            score, dec, enc, score="additive", w_query=self.W2.weight.T, w_key=self.W1.weight.T, v=self.v.weight[0]
        )
        mask, target = self._masks(t, counts, nl, n, constraint)
        masked = np.where(mask, np.asarray(-np.inf, dt), u).astype(dt)
        logp, lsm_pb = run(nn.log_softmax, masked, dim=-1)
        state = (enc_pb, dec_pb, score_pb, lsm_pb, mask, prev, counts) if keep else None
        # the user's column order: inputs 0..n-1, then the end token
        return np.concatenate([logp[..., 1:], logp[..., :1]], axis=-1), target, state

    def forward(
        self,
        inputs: ArrayLike,
        targets: ArrayLike,
        *,
        lengths: ArrayLike | None = None,
        constraint: Constraint = "permutation",
    ) -> Array:
        return self._run(inputs, targets, lengths, constraint, keep=False)[0]

    def _vjp_forward(self, inputs, targets, *, lengths=None, constraint="permutation"):
        logp, _, state = self._run(inputs, targets, lengths, constraint, keep=True)
        return logp, state

    def _vjp_backward(self, state, cotangents):
        d = cotangents[0]
        if d is None:
            raise ValueError("the pullback needs the cotangent of the log-probabilities")
        return self._backward(state, np.concatenate([d[..., -1:], d[..., :-1]], axis=-1))

    def _backward(self, state, dlogp, inputs=True):
        """The gradients by name (the inputs' under "inputs" when inputs is true)."""
        enc_pb, dec_pb, score_pb, lsm_pb, mask, prev, counts = state
        dmasked = lsm_pb(np.ascontiguousarray(dlogp, self.dtype))["input"]
        du = np.where(mask, 0, dmasked).astype(self.dtype)
        g = score_pb(du)
        gd = dec_pb(g["query"], (None, None))
        dh, dc = gd["h0"], gd["c0"]
        if self.bidirectional:  # the reverse direction's final state is not used
            dh, dc = (np.concatenate([a, np.zeros_like(a)]) for a in (dh, dc))
        ge = enc_pb(g["keys"], (dh, dc))
        grads = {}
        self._unfold(grads, "encoder", ge)
        self._unfold(grads, "decoder", gd)
        grads["W1.weight"] = np.ascontiguousarray(g["w_key"].T)
        grads["W2.weight"] = np.ascontiguousarray(g["w_query"].T)
        grads["v.weight"] = g["v"][None, :].copy()
        ddec, denc = gd["input"], ge["input"]
        grads["start"] = ddec[:, 0].astype(np.float64).sum(axis=0).astype(self.dtype)
        grads["end"] = denc[:, 0].astype(np.float64).sum(axis=0).astype(self.dtype)
        if not inputs:
            return grads
        dx = denc[:, 1:].astype(np.float64)
        rows, steps = np.nonzero(np.arange(prev.shape[1])[None, :] < counts[:, None])  # the real choices
        dx[rows, prev[rows, steps]] += ddec[:, 1:][rows, steps]  # each input is fed at most once per row
        grads["inputs"] = dx.astype(self.dtype)
        return grads

    @internal()
    def loss_and_grad(self, batch: Any, *, constraint: Constraint = "permutation") -> tuple[float, dict[str, Array]]:
        """(loss, gradients by state_dict name) of a batch with ``inputs``
        (B, n, D), ``lengths`` (B,) and ``targets`` (B, T) (input indices, −1
        padding), such as ``attnc.datasets.TSPTask(10).batch(...)``: the mean
        negative log-likelihood over the target steps and each row's end step."""
        logp, target, state = self._run(
            batch.inputs, batch.targets, getattr(batch, "lengths", None), constraint, keep=True
        )
        internal = np.concatenate([logp[..., -1:], logp[..., :-1]], axis=-1)
        B, T1, P = internal.shape
        keep = target != IGNORE
        count = max(int(keep.sum()), 1)
        picked = np.take_along_axis(internal, np.where(keep, target, 0)[:, :, None], axis=2)[:, :, 0]
        loss = -float(np.where(keep, picked, 0).astype(np.float64).sum()) / count
        dlogp = np.zeros((B, T1, P), self.dtype)
        np.put_along_axis(
            dlogp,
            np.where(keep, target, 0)[:, :, None],
            np.where(keep, -1.0 / count, 0)[:, :, None].astype(self.dtype),
            axis=2,
        )
        return loss, self._backward(state, dlogp, inputs=False)

    loss_and_grads = loss_and_grad

    # -- decoding ---------------------------------------------------------------------------
    def generate(
        self,
        inputs: ArrayLike,
        *,
        lengths: ArrayLike | None = None,
        constraint: Constraint = "permutation",
        beam_size: int = 1,
        length_penalty: float = 0.0,
    ) -> PointerOutput:
        """Decode inputs (B, n, D) under a constraint, in C:

        - "permutation": every input once;
        - "tour": a permutation closed back to its start (the start index
          again right after a row's last choice, −1 after it);
        - "hull": inputs without repeats until the end token.

        Greedy (beam_size=1): the most probable allowed position at every step
        (lowest index on ties). Beam search (beam_size=K): the K best partial
        sequences by summed log-probability; finished ones scored sum / length
        ** length_penalty. Returns a :class:`PointerOutput` (indices, their
        log-probabilities and every step's pointer distribution, the ones the
        search scored: equal, up to rounding, to the teacher-forced forward's
        on the decoded sequence)."""
        constraint = self._constraint(constraint)
        K = size_arg("beam_size", beam_size)
        if (
            isinstance(length_penalty, bool)
            or not isinstance(length_penalty, numbers.Real)
            or not np.isfinite(length_penalty)
        ):
            raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
        x, nl = self._inputs(inputs, lengths)
        B, n, D = x.shape
        enc_in = np.ascontiguousarray(np.concatenate([np.broadcast_to(self.end, (B, 1, D)), x], axis=1))
        # both LSTMs read the raw inputs, the embedding folded into their weights
        enc, (h, c) = self._folded(self.encoder)(enc_in, None, lengths=nl + 1)  # h[0], c[0]: the forward direction's
        keys = np.ascontiguousarray(nn.linear(enc, self.W1.weight))
        dec = self._folded(self.decoder)
        params = dict(
            w_ih=dec.weight_ih_l0,
            w_hh=dec.weight_hh_l0,
            b_ih=dec.bias_ih_l0,
            b_hh=dec.bias_hh_l0,
            w2=self.W2.weight,
            v=np.ascontiguousarray(self.v.weight[0]),
            start=np.ascontiguousarray(self.start),
        )
        out, lens = np.empty((B, n + 1), np.int64), np.empty(B, np.int64)
        logits = np.empty((B, n + 1, n + 1), self.dtype)  # every output step's pointer logits, end token first
        _core.pointer_decode(
            out=out,
            counts=lens,
            logits=logits,
            inputs=x,
            lengths=nl,
            keys=keys,
            h0=np.ascontiguousarray(h[0]),
            c0=np.ascontiguousarray(c[0]),
            params=params,
            constraint=CONSTRAINTS[constraint],
            beam_size=K,
            length_penalty=float(length_penalty),
        )
        taken = lens - 1  # inputs chosen per row
        width = int(taken.max()) if B else 0
        indices = np.where(np.arange(width)[None, :] < taken[:, None], out[:, :width] - 1, -1)
        logp = nn.log_softmax(np.concatenate([logits[:, : width + 1, 1:], logits[:, : width + 1, :1]], axis=-1), dim=-1)
        # a hull's end token is one of its choices (its probability counts); a
        # permutation's is certain, and left out
        T_out = width + 1 if constraint == "hull" else width
        steps = np.arange(T_out)[None, :]
        live = steps < (lens if constraint == "hull" else taken)[:, None]
        indices = np.pad(indices, ((0, 0), (0, T_out - width)), constant_values=-1)
        cols = np.where(indices >= 0, indices, n)
        picked = np.take_along_axis(logp[:, :T_out], cols[:, :, None], axis=2)[:, :, 0]
        log_probs = np.where(live, picked, 0).astype(self.dtype)
        pointers = np.where(live[:, :, None], np.exp(logp[:, :T_out]), 0).astype(self.dtype)
        if constraint == "tour":  # the start again, right after each row's last choice
            closed = np.pad(indices, ((0, 0), (0, 1)), constant_values=-1)
            closed[np.arange(B), taken] = indices[:, 0] if width else -1
            indices = closed
            log_probs = np.pad(log_probs, ((0, 0), (0, 1)))
            pointers = np.pad(pointers, ((0, 0), (0, 1), (0, 0)))
        return PointerOutput(indices, log_probs, pointers)

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size}, embedding_size={self.embedding_size}, "
            f"bidirectional={self.bidirectional}"
        )
