"""attnc.models.Seq2Seq: a recurrent encoder-decoder with attention: none
(Sutskever et al. / Cho et al.), Bahdanau et al. 2015, and Luong et al.
2015's global (dot, general, concat, location) and local (local-m, local-p)
attention.

The encoder is attnc.nn.LSTM; the decoder's loop over time runs in C, forward
and backward (csrc/models/seq2seq), and so do greedy and beam decoding. Nothing runs
per time step in Python.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .. import _core
from .._args import as_array, choice, int_arg, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import internal, vjp
from ..nn import LSTM, Embedding, Linear, LSTMCell, Module, cross_entropy
from ..nn.decoding import _decoding_ints
from ._common import _EvalMode

__all__ = ["Seq2Seq"]

KINDS = ("none", "bahdanau", "luong-dot", "luong-general", "luong-concat", "luong-location", "local-m", "local-p")
_LUONG = KINDS[2:]
AttentionKind = Literal[
    "none", "bahdanau", "luong-dot", "luong-general", "luong-concat", "luong-location", "local-m", "local-p"
]
IGNORE_INDEX = -100


class _Position(Module):
    """local-p's position predictor: p_t = len * sigmoid(v . tanh(W h_t))."""

    def __init__(self, hidden_size, attention_size, *, dtype=np.float32, seed=None):
        super().__init__(dtype)
        rng = np.random.default_rng(seed)
        H, A = int_arg("hidden_size", hidden_size), int_arg("attention_size", attention_size)
        b, c = 1 / np.sqrt(H), 1 / np.sqrt(A)
        self._init_parameter("weight", (A, H), lambda shape: rng.uniform(-b, b, shape))
        self._init_parameter("v", (A,), lambda shape: rng.uniform(-c, c, shape))


class _Attention(Module):
    """The score's parameters of one attention kind (see Seq2Seq)."""

    def __init__(self, kind, hidden_size, memory_size, attention_size, max_source_len, *, dtype=np.float32, seed=None):
        super().__init__(dtype)
        seeds = _spawn(seed, 3)
        rng = np.random.default_rng(seeds[0])
        kind = choice(kind, KINDS, "kind")
        H, He, A = (
            int_arg("hidden_size", hidden_size),
            int_arg("memory_size", memory_size),
            int_arg("attention_size", attention_size),
        )
        uniform = lambda bound: lambda shape: rng.uniform(-bound, bound, shape)  # noqa: E731
        if kind in ("bahdanau", "luong-concat"):
            self.query = Linear(H, A, bias=False, dtype=dtype, seed=seeds[1])
            self.key = Linear(He, A, bias=False, dtype=dtype, seed=seeds[2])
            self._init_parameter("v", (A,), uniform(1 / np.sqrt(A)))
        elif kind in ("luong-general", "local-m", "local-p"):
            self._init_parameter("weight", (H, He), uniform(1 / np.sqrt(He)))
        elif kind == "luong-location":
            L = int_arg("max_source_len", max_source_len)
            self._init_parameter("weight", (L, H), uniform(1 / np.sqrt(H)))
            self._init_parameter("bias", (L,), uniform(1 / np.sqrt(H)))
        if kind == "local-p":
            self.position = _Position(H, A, dtype=dtype, seed=seeds[1])


class Seq2Seq(Module):
    r"""A recurrent encoder-decoder with attention, trained by teacher forcing.

    Parameters
    ----------
    src_vocab, tgt_vocab : int, the vocabulary sizes
    embed_size : int, E, both embeddings' width
    hidden_size : int, H, the LSTMs'
    attention : str, the attention kind (below)
    bidirectional : bool or None, a bidirectional encoder (None: only for "bahdanau")
    attention_size : int or None, A, the additive scores' width (None: H)
    window : float, local attention's half-width D
    input_feeding : bool, Luong kinds: feed h̃_{t-1} to the decoder's LSTM (Luong
        et al.'s input feeding, the default); False: the LSTM reads y_t alone
    max_source_len : int or None, the source length "luong-location" scores (required for it)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation and scheduled sampling

    attention is one of ``"none"``, ``"bahdanau"``, ``"luong-dot"``,
    ``"luong-general"``, ``"luong-concat"``, ``"luong-location"``,
    ``"local-m"``, ``"local-p"``. With E = embed_size, H = hidden_size, the
    encoder (an LSTM, bidirectional by default only for "bahdanau") gives
    the memory h̄ (B, S, He), He = H or 2H, and its final states ``final``
    (B, He) (each direction's state after its last real step). The decoder
    starts from h = tanh(bridge(final)), c = 0 and, at step t with y_t the
    embedded input token:

    - ``"none"``: h_t = LSTM([y_t; final], h_{t-1}); output features o_t = h_t;
    - ``"bahdanau"``: e_s = vᵀ tanh(W_q h_{t-1} + W_k h̄_s), α = softmax(e),
      c_t = Σ_s α_s h̄_s, h_t = LSTM([y_t; c_t], h_{t-1}), o_t = [h_t; c_t];
    - Luong (``"luong-*"``, ``"local-*"``): h_t = LSTM([y_t; h̃_{t-1}], h_{t-1})
      (input feeding, h̃_{-1} = 0; with input_feeding=False h_t = LSTM(y_t,
      h_{t-1})), scores on h_t: dot h_tᵀh̄_s, general
      h_tᵀ W h̄_s, concat vᵀ tanh(W_q h_t + W_k h̄_s), location (W h_t + b)_s;
      c_t = Σ_s α_s h̄_s, h̃_t = tanh(W_c [c_t; h_t]), o_t = h̃_t.
      local-m: the general score over the window |s - t| <= window; local-p:
      over |s - p_t| <= window with p_t = len · sigmoid(v_pᵀ tanh(W_p h_t)),
      the weights then times exp(-(s - p_t)² / (2 (window/2)²)) (the rules of
      attnc.local_attention). A step with no allowed position gets zero
      weights and context.

    Softmaxes run over each row's real source positions (``src_lengths``).
    logits_t = out(o_t). The loss is the mean cross-entropy over target
    tokens that are not -100.

    ``forward(src, tgt_in, src_lengths=None, *, sampling=0.0, seed=None,
    return_alignments=False)``: src (B, S) int, tgt_in (B, T) int,
    src_lengths (B,) int -> logits (B, T, tgt_vocab), the model's dtype
    (float32 or float64), and with return_alignments the weights (B, T, S).
    ``generate(src, ...)`` -> (tokens int64 (B, L), alignments (B, L, S)).

    ``state_dict()``: ``src_embedding.weight``,
    ``tgt_embedding.weight``, ``encoder.*`` (torch's nn.LSTM names),
    ``bridge.weight/bias``, ``decoder.weight_ih/weight_hh/bias_ih/bias_hh``
    (torch's nn.LSTMCell; input [y_t; feed], or y_t without input feeding), the attention's
    (``attention.query.weight``, ``attention.key.weight``, ``attention.v``;
    ``attention.weight`` (H, He) for general/local, (max_source_len, H) and
    ``attention.bias`` for location; ``attention.position.weight/v`` for
    local-p), ``combine.weight`` (Luong) and ``out.weight/bias``.

    Example
    -------
    >>> m = attnc.models.Seq2Seq(20, 12, embed_size=8, hidden_size=16, attention="luong-general", seed=0)
    >>> src, tgt_in = np.array([[4, 5, 6], [7, 8, 0]]), np.array([[1, 7], [1, 3]])
    >>> logits, align = m(src, tgt_in, np.array([3, 2]), return_alignments=True)
    >>> logits.shape, align.shape, align.sum(-1).round(6).tolist(), float(align[1, :, 2].sum())
    ((2, 2, 12), (2, 2, 3), [[1.0, 1.0], [1.0, 1.0]], 0.0)
    >>> tokens, align = m.generate(src, np.array([3, 2]), max_len=4, beam_size=2)
    >>> tokens.dtype, tokens.shape[0], tokens.shape[1] <= 4
    (dtype('int64'), 2, True)
    >>> m.state_dict()["attention.weight"].shape, m.state_dict()["combine.weight"].shape
    ((16, 16), (16, 32))
    """

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        embed_size: int = 32,
        hidden_size: int = 64,
        attention: AttentionKind = "bahdanau",
        *,
        bidirectional: bool | None = None,
        attention_size: int | None = None,
        window: float = 5,
        input_feeding: bool = True,
        max_source_len: int | None = None,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        kind = choice(attention, KINDS, "attention")
        src_vocab, tgt_vocab = int_arg("src_vocab", src_vocab), int_arg("tgt_vocab", tgt_vocab)
        E, H = int_arg("embed_size", embed_size), int_arg("hidden_size", hidden_size)
        bidirectional = kind == "bahdanau" if bidirectional is None else bool(bidirectional)
        A = H if attention_size is None else int_arg("attention_size", attention_size)
        He = H * (2 if bidirectional else 1)
        if kind == "luong-dot" and He != H:
            raise ValueError("attention='luong-dot' scores h_t . h̄_s: it needs bidirectional=False")
        if kind == "luong-location":
            if max_source_len is None:
                raise TypeError("attention='luong-location' needs max_source_len")
            max_source_len = int_arg("max_source_len", max_source_len)
        window = float(window)
        if not isinstance(input_feeding, (bool, np.bool_)):
            raise TypeError(f"input_feeding must be True or False, got {input_feeding!r}")
        input_feeding = bool(input_feeding)
        if not input_feeding and kind not in _LUONG:
            raise ValueError(f"input_feeding=False is for the Luong kinds ({', '.join(_LUONG)}), not {kind!r}")
        if kind.startswith("local") and not window >= (1 if kind == "local-p" else 0):
            raise ValueError(f"window must be >= {1 if kind == 'local-p' else 0} for {kind}, got {window}")
        self.attention_kind, self.bidirectional, self.window = kind, bidirectional, window
        self.input_feeding = input_feeding
        self.hidden_size, self.embed_size, self.max_source_len = H, E, max_source_len
        s = _spawn(seed, 9)
        self._rng = np.random.default_rng(s[8])  # the scheduled-sampling seeds of calls given none
        luong = kind in _LUONG
        self.src_embedding = Embedding(src_vocab, E, dtype=dtype, seed=s[0])
        self.tgt_embedding = Embedding(tgt_vocab, E, dtype=dtype, seed=s[1])
        self.encoder = LSTM(E, H, bidirectional=bidirectional, dtype=dtype, seed=s[2])
        self.bridge = Linear(He, H, dtype=dtype, seed=s[3])
        feed = (H if input_feeding else 0) if luong else He  # what the LSTM reads beside y_t
        self.decoder = LSTMCell(E + feed, H, dtype=dtype, seed=s[4])
        if kind != "none":
            self.attention = _Attention(kind, H, He, A, max_source_len, dtype=dtype, seed=s[5])
        if luong:
            self.combine = Linear(He + H, H, bias=False, dtype=dtype, seed=s[6])
        F = H if luong or kind == "none" else H + He
        self.out = Linear(F, tgt_vocab, dtype=dtype, seed=s[7])

    # -- the C decoder's arguments ------------------------------------------------------
    # the decoder's weights (attnc_s2s_weights' members) and their state_dict names
    _WEIGHTS = {
        "embedding": "tgt_embedding.weight",
        "weight_ih": "decoder.weight_ih",
        "weight_hh": "decoder.weight_hh",
        "bias_ih": "decoder.bias_ih",
        "bias_hh": "decoder.bias_hh",
        "bridge_weight": "bridge.weight",
        "bridge_bias": "bridge.bias",
        "query_weight": "attention.query.weight",
        "key_weight": "attention.key.weight",
        "v": "attention.v",
        "weight": "attention.weight",
        "bias": "attention.bias",
        "position_weight": "attention.position.weight",
        "position_v": "attention.position.v",
        "combine": "combine.weight",
        "out_weight": "out.weight",
        "out_bias": "out.bias",
    }
    _NOT_DECODED = ("out_weight", "out_bias")  # the backward leaves them to self.out's pullback

    def _weights(self):
        """The decoder's weights by attnc_s2s_weights' member names (the model's kind has only some)."""
        params = dict(self.named_parameters())
        return {k: np.ascontiguousarray(params[n]) for k, n in self._WEIGHTS.items() if n in params}

    def _decoder_config(self, sampling=0.0, seed=None):
        """attnc_s2s_config's members: the keyword arguments of every s2s_* call."""
        if seed is None:  # a fresh draw per call from the model's generator (seeded by the constructor)
            seed = int(self._rng.integers(2**63)) if sampling else 0
        seed = int(seed) % 2**64
        return {
            "attention": KINDS.index(self.attention_kind),
            "window": self.window,
            "sampling": float(sampling),
            "seed": seed,
            "input_feeding": self.input_feeding,
        }

    def _inputs(self, src, tgt_in, src_lengths):
        src = _ids(src, "src", self.src_embedding.num_embeddings)
        B, S = src.shape
        if S == 0:
            raise ValueError("src has no source steps")
        if src_lengths is None:
            lens = np.full(B, S, np.int64)
        else:
            lens = as_array(src_lengths, "src_lengths")
            if lens.dtype.kind not in "iu":
                raise TypeError(f"src_lengths must be integers, got dtype {lens.dtype}")
            if lens.shape != (B,):
                raise ValueError(f"src_lengths must have shape ({B},), got {shape_str(lens.shape)}")
            if B and (lens.min() < 1 or lens.max() > S):
                raise ValueError(f"src_lengths must be in [1, {S}], got values from {lens.min()} to {lens.max()}")
            lens = np.ascontiguousarray(lens, np.int64)
        if self.attention_kind == "luong-location" and S > self.max_source_len:
            raise ValueError(f"src has {S} steps; this luong-location model scores at most {self.max_source_len}")
        if tgt_in is not None:
            tgt_in = _ids(tgt_in, "tgt_in", self.tgt_embedding.num_embeddings)
            if tgt_in.shape[0] != B:
                raise ValueError(f"tgt_in has {tgt_in.shape[0]} rows; src has {B}")
        return src, tgt_in, lens

    # -- encoder ----------------------------------------------------------------------------
    def _encode(self, src, lens, keep):
        """memory (B, S, He), final (B, He), and the pullback of both when keep."""
        if not keep:
            mem, (h_n, _) = self.encoder(self.src_embedding(src), lengths=lens)
            return mem, np.ascontiguousarray(np.concatenate(list(h_n), axis=-1)), None
        x, pull_emb = vjp(self.src_embedding, src)
        (mem, (h_n, c_n)), pull_enc = vjp(self.encoder, x, lengths=lens)
        final = np.ascontiguousarray(np.concatenate(list(h_n), axis=-1))

        def pullback(dmem, dfinal):
            D, H = h_n.shape[0], self.hidden_size
            dh_n = np.ascontiguousarray(dfinal.reshape(dfinal.shape[0], D, H).transpose(1, 0, 2))
            g = pull_enc(dmem, (dh_n, None))
            grads = {f"encoder.{k}": v for k, v in g.items() if k != "input"}
            grads["src_embedding.weight"] = pull_emb(g["input"])["weight"]
            return grads

        return mem, final, pullback

    # -- forward -------------------------------------------------------------------------------
    def _run(self, src, tgt_in, src_lengths, *, sampling=0.0, seed=None, keep=False, alignments=False):
        sampling = float(sampling)
        if not 0 <= sampling <= 1:
            raise ValueError(f"sampling must be in [0, 1], got {sampling}")
        if sampling and not self.training:
            raise ValueError("scheduled sampling is for training; call model.train() or pass sampling=0")
        src, tgt_in, lens = self._inputs(src, tgt_in, src_lengths)
        mem, final, pull_enc = self._encode(src, lens, keep)
        weights, config = self._weights(), self._decoder_config(sampling, seed)
        B, T = tgt_in.shape
        dt = self.dtype
        feats = np.empty((B, T, self.out.in_features), dt)
        align = np.empty((B, T, src.shape[1]), dt) if alignments else None
        fed = np.empty((B, T), np.int64)
        saved = np.empty(_core.s2s_saved_size(weights=weights, B=B, S=src.shape[1], T=T, **config), dt)
        _core.s2s_forward(
            features=feats,
            alignments=align,
            fed=fed,
            saved=saved,
            memory=mem,
            final=final,
            lengths=lens,
            tgt_in=tgt_in,
            weights=weights,
            **config,
        )
        logits, pull_out = vjp(self.out, feats) if keep else (self.out(feats), None)
        state = (saved, fed, mem, final, lens, weights, config, pull_enc, pull_out) if keep else None
        return logits, align, state

    def forward(
        self,
        src: ArrayLike,
        tgt_in: ArrayLike,
        src_lengths: ArrayLike | None = None,
        *,
        sampling: float = 0.0,
        seed: int | None = None,
        return_alignments: bool = False,
    ) -> Array | tuple[Array, Array]:
        """logits (B, T, tgt_vocab) of every target step given src (B, S) int,
        tgt_in (B, T) int (the decoder's inputs: BOS, then the target) and
        src_lengths (B,) (default: every row S); with ``return_alignments``
        also the attention weights (B, T, S) (zero for "none"). ``sampling``
        (training only): the probability of feeding the previous step's argmax
        instead of tgt_in (scheduled sampling); ``seed`` fixes its draws, and
        without one every call draws a new seed from the model's generator
        (seeded by the constructor's ``seed``, so a seeded run replays)."""
        logits, align, _ = self._run(
            src, tgt_in, src_lengths, sampling=sampling, seed=seed, alignments=return_alignments
        )
        return (logits, align) if return_alignments else logits

    # -- gradients -----------------------------------------------------------------------------
    def _vjp_forward(self, src, tgt_in, src_lengths=None, *, sampling=0.0, seed=None, return_alignments=False):
        logits, align, state = self._run(
            src, tgt_in, src_lengths, sampling=sampling, seed=seed, keep=True, alignments=return_alignments
        )
        out = (logits, align) if return_alignments else logits
        return out, (self, state, return_alignments)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, state, _ = saved
        return self._backward(state, cotangents[0])  # alignments take no gradient

    def _backward(self, state, dlogits):
        saved, fed, mem, final, lens, weights, config, pull_enc, pull_out = state
        if dlogits is None:
            dlogits = np.zeros((fed.shape[0], fed.shape[1], self.out.out_features), self.dtype)
        g_out = pull_out(np.ascontiguousarray(dlogits, self.dtype))
        grads = {"out.weight": g_out["weight"], "out.bias": g_out["bias"]}
        dfeat = np.ascontiguousarray(g_out["input"])
        wgrads = {k: np.empty_like(w) for k, w in weights.items() if k not in self._NOT_DECODED}
        dmem, dfinal = np.empty_like(mem), np.empty_like(final)
        _core.s2s_backward(
            dmemory=dmem,
            dfinal=dfinal,
            grads=wgrads,
            dfeatures=dfeat,
            saved=saved,
            fed=fed,
            memory=mem,
            final=final,
            lengths=lens,
            weights=weights,
            **config,
        )
        grads.update({self._WEIGHTS[k]: g for k, g in wgrads.items()})
        grads.update(pull_enc(dmem, dfinal))
        return {k: grads[k] for k, _ in self.named_parameters()}

    @internal()
    def loss_and_grad(
        self, batch: Any, *, sampling: float = 0.0, seed: int | None = None
    ) -> tuple[float, dict[str, Array]]:
        """(loss, grads) of one batch (``.src``, ``.src_lengths``, ``.tgt_in``,
        ``.tgt_out``, as attnc.datasets' TextBatch): the mean cross-entropy over
        target tokens that are not -100, and its gradient for every parameter,
        keyed like ``state_dict()``."""
        logits, _, state = self._run(
            batch.src, batch.tgt_in, batch.src_lengths, sampling=sampling, seed=seed, keep=True
        )
        B, T, V = logits.shape
        loss, pull_loss = vjp(
            cross_entropy, logits.reshape(B * T, V), as_array(batch.tgt_out, "tgt_out").reshape(B * T)
        )
        dlogits = pull_loss(np.ones((), self.dtype))["input"].reshape(B, T, V)
        return float(loss), self._backward(state, dlogits)

    def loss(self, batch: Any) -> float:
        """The mean cross-entropy of a batch (see loss_and_grad), without gradients."""
        logits = self.forward(batch.src, batch.tgt_in, batch.src_lengths)
        B, T, V = logits.shape
        return float(cross_entropy(logits.reshape(B * T, V), as_array(batch.tgt_out, "tgt_out").reshape(B * T)))

    # -- decoding ------------------------------------------------------------------------------
    def generate(
        self,
        src: ArrayLike,
        src_lengths: ArrayLike | None = None,
        max_len: int = 30,
        bos: int = 1,
        eos: int | None = 2,
        beam_size: int = 1,
        length_penalty: float = 0.0,
    ) -> tuple[Array, Array]:
        """Decode target sequences for src (B, S) int, in eval mode, in C.

        Returns ``(tokens, alignments)``: tokens int64 (B, L), L <= max_len,
        the generated tokens (bos not included; a row that produces ``eos``
        ends with it and is filled with eos after; eos=None: no end token),
        and alignments (B, L, S), the attention weights of every output step
        (zero after a row's end, and for attention="none"). beam_size=1 is
        greedy; beam_size > 1 is beam search scored by sum(log p) / length **
        length_penalty (the rules of Seq2SeqTransformer.generate).
        """
        src, _, lens = self._inputs(src, None, src_lengths)
        max_len, eos, beam_size = _decoding_ints(max_len, eos, beam_size, "max_len")  # C checks eos < V
        if not 0 <= bos < self.out.out_features:
            raise ValueError(f"bos {bos} is outside the vocabulary [0, {self.out.out_features})")
        with _EvalMode(self):
            mem, final, _ = self._encode(src, lens, keep=False)
        B, S = src.shape
        tokens, lengths = np.empty((B, max_len), np.int64), np.empty(B, np.int64)
        align = np.empty((B, max_len, S), self.dtype)
        _core.s2s_generate(
            tokens=tokens,
            out_lengths=lengths,
            alignments=align,
            memory=mem,
            final=final,
            lengths=lens,
            weights=self._weights(),
            bos=int(bos),
            eos=-1 if eos is None else eos,
            beam_size=beam_size,
            length_penalty=float(length_penalty),
            **self._decoder_config(),
        )
        L = int(lengths.max()) if B else 0
        return tokens[:, :L], align[:, :L]

    def extra_repr(self) -> str:
        feeding = "" if self.input_feeding else ", input_feeding=False"
        return (
            f"attention={self.attention_kind!r}, hidden_size={self.hidden_size}, "
            f"bidirectional={self.bidirectional}{feeding}"
        )


def _spawn(seed, n):
    """n independent seeds from seed (an int, None or a SeedSequence)."""
    return (seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)).spawn(n)


def _ids(a, name, vocab):
    x = as_array(a, name)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be (B, T), got shape {shape_str(x.shape)}")
    if x.size and (x.min() < 0 or x.max() >= vocab):
        raise ValueError(f"{name} holds ids from {x.min()} to {x.max()}, outside [0, {vocab})")
    return np.ascontiguousarray(x, np.int64)
