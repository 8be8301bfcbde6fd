"""attnc.models.GPT: a minGPT-like decoder-only Transformer built from attnc.nn
modules, with gradients through ``attnc.vjp``."""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import nn
from .._args import as_array, choice, integer_array
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import internal, vjp
from ..nn.decoding import _decoding_ints
from ..nn.transformer import Activation
from ._common import _causal_mask, _dropout, _ids, _in_range, _Tape

__all__ = ["GPT"]


class GPT(nn.Module):
    """A small GPT (Radford et al. 2018), as Karpathy's minGPT builds it.

    Parameters
    ----------
    vocab_size : int, V
    block_size : int, the longest context (the position table's rows)
    n_layer : int, the number of transformer layers
    n_head : int, heads per layer; divides n_embd
    n_embd : int, E, the model's width
    dropout : float in [0, 1), after the embeddings and inside the layers (training mode only)
    activation : the layers' feed-forward activation, as
        attnc.nn.TransformerEncoderLayer takes it: "gelu" (exact, minGPT's),
        "relu", or attnc.nn.GELU(approximate="tanh") (GPT-2's)
    n_inner : int or None, the feed-forward width (None: 4 n_embd)
    layer_norm_epsilon : float, every LayerNorm's eps
    positional : "learned" (the position table ``wpe``, GPT-2's), "rope":
        rotary position embeddings (attnc.nn.RotaryEmbedding, the half-split
        layout of GPT-NeoX and Llama) on every layer's queries and keys,
        no ``wpe``; "alibi": ALiBi (Press et al. 2022), the slopes
        attnc.alibi_slopes(n_head) in every layer, no ``wpe``; or
        "sinusoidal": the fixed table of Vaswani et al. 2017
        (attnc.nn.sinusoidal_encoding, not a parameter) added to the
        token embeddings
    window : (left, right) or None: a sliding window in every layer
        (attnc.nn.MultiheadAttention's ``window``; the model is causal, so
        ``(W - 1, 0)`` lets each token see the last W tokens, itself included)
    sinks : bool, a learned attention sink per head in every layer
        (``encoder.layers.{i}.self_attn.sinks``, gpt-oss's)
    softcap : float > 0 or None, every layer's scores capped (Gemma 2)
    rope_base, rotary_dim : RoPE's base and the features of each head that
        turn (None: all), with positional="rope"
    num_kv_heads : int dividing n_head, or None: grouped-query attention in
        every layer (1: multi-query), as attnc.nn.TransformerEncoderLayer takes it
    tie_word_embeddings : bool, the output layer is the token embedding
        (``logits = h @ wte.weight^T``, as GPT-2): no ``lm_head`` module, and
        ``wte.weight``'s gradient sums both uses
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation and the dropout streams

    Submodules (state_dict prefixes): ``wte`` (token Embedding), ``wpe``
    (learned position Embedding, block_size rows), ``encoder``
    (attnc.nn.TransformerEncoder of n_layer pre-norm layers:
    TransformerEncoderLayer(n_embd, n_head, n_inner, dropout, activation,
    layer_norm_epsilon, norm_first=True), run with a causal mask), ``ln_f``
    (the final LayerNorm) and ``lm_head`` (Linear(n_embd, vocab_size,
    bias=False); none with tie_word_embeddings). Dropout after the
    embeddings and inside the layers, in training mode only. With
    ``activation=attnc.nn.GELU(approximate="tanh")`` and
    ``tie_word_embeddings=True`` this is GPT-2 (Radford et al. 2019), which
    ``attnc.models.from_pretrained`` loads into it (in training mode the
    dropout sits where torch's layers put it, also after the feed-forward
    activation, where GPT-2 has none). Initialised as minGPT: matrices N(0, 0.02), the
    projections into the residual stream (``self_attn.out_proj.weight``,
    ``linear2.weight``) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorms 1 and 0.

    ``forward(idx, *, need_weights=False, segment_ids=None)``: idx (B, T)
    int, T <= block_size -> logits (B, T, vocab_size), the model's dtype, or
    (logits, [weights (B, n_head, T, T) per layer]). Packed training:
    segment_ids (B, T) int, documents as runs of equal ids in a row; a token
    attends only its own document (the layers' src_segment_ids) and
    positions restart at 0 at each run's start (as Hugging Face's packed
    training does with position_ids), so each document gets the logits it
    would get alone (RoPE and ALiBi see only distances).
    ``attnc.vjp(model, idx)``: pullback(dlogits) -> gradients by state_dict name;
    with ``need_weights=True``, pullback(dlogits, None) also gives
    ``"attn_weights"``: per layer, the gradient with respect to its attention
    weights (B, n_head, T, T) (None for a layer run with dropout), which
    ``attnc.attribution.relevance`` takes.
    ``loss_and_grads(idx, targets)`` -> (mean cross-entropy, gradients);
    ``generate(idx, max_new_tokens, ...)`` -> the new tokens, int64 (B, L).

    ``state_dict()``: ``wte.weight`` (V, E), ``wpe.weight`` (block_size, E),
    ``encoder.layers.{i}.*`` (torch.nn.TransformerEncoderLayer's names, with
    dim_feedforward n_inner), ``ln_f.weight``, ``ln_f.bias`` (E,),
    ``lm_head.weight`` (V, E) (without tie_word_embeddings).

    Example
    -------
    >>> m = attnc.models.GPT(5, 11, n_layer=2, n_head=2, n_embd=8, seed=0)
    >>> idx = np.random.randint(0, 5, (4, 6))
    >>> logits = m(idx)
    >>> logits.shape, logits.dtype
    ((4, 6, 5), dtype('float32'))
    >>> loss, grads = m.loss_and_grads(idx[:, :-1], idx[:, 1:])
    >>> grads["lm_head.weight"].shape, m.state_dict()["wpe.weight"].shape
    ((5, 8), (11, 8))
    >>> m.generate(idx[:, :2], 3).shape
    (4, 3)
    >>> packed = m.eval()(idx, segment_ids=[0, 0, 0, 1, 1, 1])  # two documents of 3 tokens in every row
    >>> bool(np.allclose(packed[:, 3:], m(idx[:, 3:]), atol=1e-5))
    True
    >>> streaming = attnc.models.GPT(5, 11, 2, 2, 8, positional="alibi", window=(3, 0), sinks=True, seed=0)
    >>> streaming.generate(idx[:, :2], 3).shape, "wpe.weight" in streaming.state_dict()
    ((4, 3), False)
    """

    def __init__(
        self,
        vocab_size: int,
        block_size: int,
        n_layer: int = 3,
        n_head: int = 3,
        n_embd: int = 48,
        dropout: float = 0.1,
        *,
        activation: Activation = "gelu",
        n_inner: int | None = None,
        layer_norm_epsilon: float = 1e-5,
        tie_word_embeddings: bool = False,
        positional: str = "learned",
        rope_base: float = 10000.0,
        rotary_dim: int | None = None,
        num_kv_heads: int | None = None,
        window: tuple[int | None, int | None] | None = None,
        sinks: bool = False,
        softcap: float | None = None,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        for name, v in (
            ("vocab_size", vocab_size),
            ("block_size", block_size),
            ("n_layer", n_layer),
            ("n_embd", n_embd),
        ):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.positional = choice(positional, ("learned", "rope", "alibi", "sinusoidal"), "positional")
        rng = np.random.default_rng(seed)
        self.vocab_size, self.block_size, self.n_layer = int(vocab_size), int(block_size), int(n_layer)
        self.n_embd, self.dropout = int(n_embd), float(dropout)
        self.wte = nn.Embedding(vocab_size, n_embd, dtype=dtype, seed=int(rng.integers(2**63)))
        wpe_seed = int(rng.integers(2**63))  # drawn either way: the other parameters do not depend on positional
        rotary = None
        if self.positional == "learned":
            self.wpe = nn.Embedding(block_size, n_embd, dtype=dtype, seed=wpe_seed)
        elif self.positional == "sinusoidal":  # computed in float64 once, rounded to the model's dtype
            self._sinusoids = nn.sinusoidal_encoding(block_size, n_embd, np.float64)
        elif self.positional == "rope":
            if isinstance(n_head, bool) or not isinstance(n_head, numbers.Integral) or n_head < 1 or n_embd % n_head:
                raise ValueError(f"n_head must be an int >= 1 dividing n_embd ({n_embd}), got {n_head!r}")
            rotary = nn.RotaryEmbedding(n_embd // n_head, rope_base, rotary_dim, dtype=dtype)
        layer = nn.TransformerEncoderLayer(
            n_embd,
            n_head,
            dim_feedforward=4 * n_embd if n_inner is None else n_inner,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_epsilon,
            batch_first=True,
            norm_first=True,
            dtype=dtype,
            seed=int(rng.integers(2**63)),
            num_kv_heads=num_kv_heads,
            rotary=rotary,
            alibi=self.positional == "alibi",
            window=window,
            sinks=sinks,
            softcap=softcap,
        )
        self.encoder = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd, eps=layer_norm_epsilon, dtype=dtype)
        self.tie_word_embeddings = bool(tie_word_embeddings)
        head_seed = int(rng.integers(2**63))  # drawn either way: the other parameters' values do not depend on tying
        if not self.tie_word_embeddings:
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False, dtype=dtype, seed=head_seed)

        def init(name, p):
            leaf = name.rsplit(".", 1)[-1]
            if "norm" in name or name.startswith("ln_f"):
                return np.ones(p.shape) if leaf == "weight" else np.zeros(p.shape)
            if p.ndim == 1:
                return np.zeros(p.shape)
            std = 0.02
            if name.endswith(("self_attn.out_proj.weight", "linear2.weight")):
                std = 0.02 / math.sqrt(2 * self.n_layer)
            return rng.normal(0.0, std, p.shape)

        self._initialise(init)
        self._rng = rng

    def _run(self, grad, idx, need_weights=False, segment_ids=None):
        idx = _ids(idx, "idx")
        T = idx.shape[1]
        if T > self.block_size:
            raise ValueError(f"idx has length {T}, longer than block_size={self.block_size}")
        _in_range(idx, "idx", self.vocab_size)
        pos = _positions_in_segments(segment_ids, idx.shape)
        tape = _Tape(grad)
        x = tape("wte", nn.embedding, idx, self.wte.weight)
        if self.positional == "learned":
            x = x + tape("wpe", nn.embedding, pos, self.wpe.weight)
        elif self.positional == "sinusoidal":
            x = x + self._positions()[pos]
        x, drop = _dropout(x, self.dropout, self._rng, self.training)
        h = tape(
            "encoder",
            self.encoder,
            x,
            mask=_causal_mask(T),
            is_causal=True,
            need_weights=need_weights,
            src_segment_ids=segment_ids,
        )
        weights = None
        if need_weights:
            h, weights = h
        h = tape("ln_f", self.ln_f, h)
        logits = tape("lm_head", nn.linear, h, self._out_weight())
        saved = (tape.pullbacks, drop, need_weights, self.tie_word_embeddings, pos.ndim)
        return ((logits, weights) if need_weights else logits), saved

    def _positions(self):
        """The (block_size, E) table added to the token embeddings: wpe's,
        the sinusoidal one, or zeros (RoPE and ALiBi act inside the layers)."""
        if self.positional == "learned":
            return self.wpe.weight
        if self.positional == "sinusoidal":
            return self._sinusoids.astype(self.dtype, copy=False)
        return np.zeros((self.block_size, self.n_embd), self.dtype)

    def _out_weight(self):
        """The output layer's weight (V, E): lm_head's, or wte's when tied."""
        return self.wte.weight if self.tie_word_embeddings else self.lm_head.weight

    def forward(
        self, idx: ArrayLike, *, need_weights: bool = False, segment_ids: ArrayLike | None = None
    ) -> Array | tuple[Array, list[Array]]:
        return self._run(False, idx, need_weights, segment_ids)[0]

    def _vjp_forward(self, idx, *, need_weights=False, segment_ids=None):
        return self._run(True, idx, need_weights, segment_ids)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        pullbacks, drop, need_weights, tied, pos_ndim = saved
        grads = {}
        g = pullbacks["lm_head"](cotangents[0])
        head = g["weight"]
        if not tied:
            grads["lm_head.weight"] = head
        g = pullbacks["ln_f"](g["input"])
        grads["ln_f.weight"], grads["ln_f.bias"] = g["weight"], g["bias"]
        g = pullbacks["encoder"](g["input"], None) if need_weights else pullbacks["encoder"](g["input"])
        dx = g.pop("src")
        if need_weights:
            grads["attn_weights"] = g.pop("attn_weights")
        grads.update({f"encoder.{name}": value for name, value in g.items()})
        if drop is not None:
            dx = dx * drop
        grads["wte.weight"] = pullbacks["wte"](dx)["weight"]
        if tied:
            grads["wte.weight"] += head
        if "wpe" in pullbacks:
            dpos = dx.sum(axis=0) if pos_ndim == 1 else dx  # one position row for the batch, or one per row
            grads["wpe.weight"] = pullbacks["wpe"](np.ascontiguousarray(dpos))["weight"]
        return grads

    @internal()
    def loss_and_grads(
        self,
        idx: ArrayLike,
        targets: ArrayLike,
        *,
        ignore_index: int = -100,
        label_smoothing: float = 0.0,
        segment_ids: ArrayLike | None = None,
    ) -> tuple[float, dict[str, Array]]:
        """Mean cross-entropy of the logits against targets (B, T) (ignore_index
        counts for nothing) and its gradients: (loss, grads by state_dict name);
        segment_ids as forward's (packed training)."""
        logits, pullback = vjp(self, idx, segment_ids=segment_ids)
        V = logits.shape[-1]
        loss, ce_pullback = vjp(
            nn.cross_entropy,
            logits.reshape(-1, V),
            as_array(targets, "targets").reshape(-1),
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
        )
        dlogits = ce_pullback(np.ones((), logits.dtype))["input"].reshape(logits.shape)
        return float(loss), pullback(dlogits)

    # -- decoding --------------------------------------------------------------------
    def generate(
        self,
        idx: ArrayLike,
        max_new_tokens: int,
        eos: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.0,
    ) -> Array:
        """Continue the prompts idx (B, T) int, in eval mode; returns int64
        (B, L), L <= max_new_tokens: the new tokens only. Rows that produce
        ``eos`` end with it and are filled with eos after; beam_size=1 is
        greedy; beam search is scored by sum(log p) / length ** length_penalty
        (the exact rules: attnc.nn.decode). Runs in C
        (attnc.nn.decode) with cached keys and values; the prompt and the new
        tokens must fit in block_size."""
        idx = _ids(idx, "idx")
        max_new_tokens, eos, beam_size = _decoding_ints(max_new_tokens, eos, beam_size)
        if idx.shape[1] + max_new_tokens - 1 > self.block_size:
            raise ValueError(
                f"prompt length {idx.shape[1]} + max_new_tokens {max_new_tokens} - 1 exceeds "
                f"block_size={self.block_size}: the C decoder keeps every position's keys and values "
                "and does not crop the context"
            )
        _in_range(idx, "idx", self.vocab_size)
        return nn.decode(
            list(self.encoder.layers),
            self.wte.weight,
            self._positions(),
            self._out_weight(),
            idx,
            max_new_tokens,
            norm=self.ln_f,
            eos=eos,
            beam_size=beam_size,
            length_penalty=length_penalty,
        )

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, block_size={self.block_size}, n_layer={self.n_layer}, "
            f"n_embd={self.n_embd}, dropout={self.dropout}"
            + (", tie_word_embeddings=True" if self.tie_word_embeddings else "")
            + (f", positional={self.positional!r}" if self.positional != "learned" else "")
        )


def _positions_in_segments(segment_ids, shape):
    """The positions of idx's tokens: 0 .. T - 1 ((T,), shared by the rows)
    without segment_ids, else (B, T), restarting at 0 where a row's id
    changes (a run of equal ids is one packed document)."""
    B, T = shape
    t = np.arange(T, dtype=np.int64)
    if segment_ids is None:
        return t
    ids = integer_array(segment_ids, "segment_ids", (B, T), f"idx's shape ({B}, {T})")
    start = np.ones((B, T), bool)
    start[:, 1:] = ids[:, 1:] != ids[:, :-1]
    return t - np.maximum.accumulate(np.where(start, t, 0), axis=1)
