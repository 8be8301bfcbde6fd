"""attnc.models.Seq2SeqTransformer: an encoder-decoder Transformer for token
sequences, built from attnc.nn modules (embeddings, attnc.nn.Transformer, a
linear generator), with gradients through ``attnc.vjp``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import nn
from .._args import as_array
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import internal, vjp
from ..nn.decoding import _decoding_ints
from ..nn.transformer import Activation
from ._common import _causal_mask, _dropout, _EvalMode, _ids, _Tape

__all__ = ["Seq2SeqTransformer"]


def _padding_mask(mask, shape, name):
    if mask is None:
        return None
    m = as_array(mask, name)
    if m.dtype != np.bool_:
        raise TypeError(f"{name} must be a bool array (True = padding), got dtype {m.dtype}")
    if m.shape != shape:
        raise ValueError(f"{name} has shape {m.shape}, expected {shape}")
    return m


def _xavier_uniform(rng, shape):
    bound = math.sqrt(6.0 / (shape[0] + shape[1]))
    return rng.uniform(-bound, bound, shape)


# --------------------------------------------------------------------------- the model


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer over token ids (Vaswani et al. 2017), batch first.

    Parameters
    ----------
    src_vocab, tgt_vocab : int, the vocabulary sizes
    d_model : int, E, the model's width
    nhead : int, heads per attention; divides d_model
    num_encoder_layers, num_decoder_layers : int, the stacks' depths
    dim_feedforward : int, the feed-forward blocks' hidden width
    dropout : float in [0, 1) (training mode only)
    max_len : int, the longest source or target (rows of the positional table)
    norm_first : bool, pre-norm layers
    activation : "relu" or "gelu"
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation and the dropout streams

    Submodules (state_dict prefixes): ``src_embed``, ``tgt_embed``
    (Embedding, scaled by sqrt(d_model)), ``transformer``
    (attnc.nn.Transformer), ``generator`` (Linear(d_model, tgt_vocab)).
    Sinusoidal positional encodings (not parameters) are added to both
    embeddings, followed by dropout in training mode. Every matrix is
    initialised Xavier-uniform from ``seed``.

    ``forward(src, tgt_in, src_key_padding_mask=None, tgt_key_padding_mask=None,
    *, need_weights=False)``: src (B, S) and tgt_in (B, T) int token ids, masks
    (B, S) / (B, T) bool with True = padding (the source mask also masks the
    memory in cross-attention); the decoder is causal. Returns logits
    (B, T, tgt_vocab), or (logits, weights) with need_weights, weights as
    attnc.nn.Transformer returns them ({"encoder", "decoder_self",
    "decoder_cross"}).

    ``attnc.vjp(model, src, tgt_in, ...)``: pullback(dlogits) gives the
    gradient of every parameter, keyed by state_dict name.
    ``loss_and_grads(...)`` does the cross-entropy and the pullback in one call.

    ``state_dict()``: ``src_embed.weight`` (src_vocab, E), ``tgt_embed.weight``
    (tgt_vocab, E), ``transformer.*`` (torch.nn.Transformer's names, see
    attnc.nn.Transformer), ``generator.weight`` (tgt_vocab, E), ``generator.bias`` (tgt_vocab,).

    Example
    -------
    >>> m = attnc.models.Seq2SeqTransformer(13, 11, d_model=16, nhead=2, num_encoder_layers=1,
    ...                                     num_decoder_layers=1, dim_feedforward=32, seed=0)
    >>> src, tgt = np.random.randint(3, 13, (2, 7)), np.random.randint(3, 11, (2, 6))
    >>> logits = m(src, tgt[:, :-1])
    >>> logits.shape, logits.dtype
    ((2, 5, 11), dtype('float32'))
    >>> loss, grads = m.loss_and_grads(src, tgt[:, :-1], tgt[:, 1:])
    >>> grads["generator.weight"].shape, m.state_dict()["tgt_embed.weight"].shape
    ((11, 16), (11, 16))
    >>> tokens = m.generate(src, 4, bos=1, eos=2, beam_size=2)
    >>> tokens.dtype, tokens.shape[0], tokens.shape[1] <= 4
    (dtype('int64'), 2, True)
    """

    _former_names = ("attnc.models.seq2seq.Seq2SeqTransformer",)  # attnc.load: files saved before its move

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int = 64,
        nhead: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        dim_feedforward: int = 256,
        dropout: float = 0.1,
        max_len: int = 64,
        norm_first: bool = False,
        activation: Activation = "relu",
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        for name, v in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab), ("d_model", d_model), ("max_len", max_len)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        rng = np.random.default_rng(seed)
        self.src_vocab, self.tgt_vocab, self.d_model = int(src_vocab), int(tgt_vocab), int(d_model)
        self.max_len, self.dropout = int(max_len), float(dropout)
        self.src_embed = nn.Embedding(src_vocab, d_model, dtype=dtype, seed=int(rng.integers(2**63)))
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, dtype=dtype, seed=int(rng.integers(2**63)))
        self.transformer = nn.Transformer(
            d_model=d_model,
            nhead=nhead,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            batch_first=True,
            norm_first=norm_first,
            dtype=dtype,
            seed=int(rng.integers(2**63)),
        )
        self.generator = nn.Linear(d_model, tgt_vocab, dtype=dtype, seed=int(rng.integers(2**63)))
        # Xavier-uniform for every matrix (as PyTorch's translation tutorial does)
        self._initialise(lambda name, p: _xavier_uniform(rng, p.shape) if p.ndim > 1 else None)
        self._pe = np.empty((0, self.d_model))  # the positional table's rows made so far (see _positions)
        self._rng = rng

    # -- the computation -------------------------------------------------------------
    def _check(self, src, tgt_in, src_key_padding_mask, tgt_key_padding_mask):
        src, tgt_in = _ids(src, "src"), _ids(tgt_in, "tgt_in")
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"src {src.shape} and tgt_in {tgt_in.shape} have different batch sizes")
        for name, ids, vocab in (("src", src, self.src_vocab), ("tgt_in", tgt_in, self.tgt_vocab)):
            if ids.shape[1] > self.max_len:
                raise ValueError(f"{name} has length {ids.shape[1]}, longer than max_len={self.max_len}")
            if ids.size and (ids.min() < 0 or ids.max() >= vocab):
                raise ValueError(f"{name} has token ids outside [0, {vocab})")
        return (
            src,
            tgt_in,
            _padding_mask(src_key_padding_mask, src.shape, "src_key_padding_mask"),
            _padding_mask(tgt_key_padding_mask, tgt_in.shape, "tgt_key_padding_mask"),
        )

    def _positions(self, n):
        """The sinusoidal table's first n rows (n <= max_len), in the module's
        dtype: made when first asked for, so that max_len bounds the lengths
        taken but sizes nothing by itself."""
        if self._pe.shape[0] < n:
            self._pe = nn.sinusoidal_encoding(n, self.d_model, np.float64)
        return self._pe[:n].astype(self.dtype)

    def _embed(self, tape, name, ids, weight):
        x = tape(name, nn.embedding, ids, weight, scale=math.sqrt(self.d_model))
        x = x + self._positions(ids.shape[1])
        x, mask = _dropout(x, self.dropout, self._rng, self.training)
        return x, mask

    def _run(self, grad, src, tgt_in, src_key_padding_mask=None, tgt_key_padding_mask=None, need_weights=False):
        src, tgt_in, src_kpm, tgt_kpm = self._check(src, tgt_in, src_key_padding_mask, tgt_key_padding_mask)
        tape = _Tape(grad)
        xs, src_drop = self._embed(tape, "src_embed", src, self.src_embed.weight)
        xt, tgt_drop = self._embed(tape, "tgt_embed", tgt_in, self.tgt_embed.weight)
        T = tgt_in.shape[1]
        out = tape(
            "transformer",
            self.transformer,
            xs,
            xt,
            tgt_mask=_causal_mask(T),
            src_key_padding_mask=src_kpm,
            tgt_key_padding_mask=tgt_kpm,
            memory_key_padding_mask=src_kpm,
            tgt_is_causal=True,
            need_weights=need_weights,
        )
        weights = None
        if need_weights:
            out, weights = out
        logits = tape("generator", self.generator, out)
        result = (logits, weights) if need_weights else logits
        return result, (tape.pullbacks, src_drop, tgt_drop, need_weights)

    def forward(
        self,
        src: ArrayLike,
        tgt_in: ArrayLike,
        src_key_padding_mask: ArrayLike | None = None,
        tgt_key_padding_mask: ArrayLike | None = None,
        *,
        need_weights: bool = False,
    ) -> Array | tuple[Array, dict[str, list[Array]]]:
        return self._run(False, src, tgt_in, src_key_padding_mask, tgt_key_padding_mask, need_weights)[0]

    def _vjp_forward(self, src, tgt_in, src_key_padding_mask=None, tgt_key_padding_mask=None, *, need_weights=False):
        return self._run(True, src, tgt_in, src_key_padding_mask, tgt_key_padding_mask, need_weights)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        pullbacks, src_drop, tgt_drop, need_weights = saved
        dlogits = cotangents[0]
        grads = {}
        g = pullbacks["generator"](dlogits)
        grads["generator.weight"] = g["weight"]
        if "bias" in g:
            grads["generator.bias"] = g["bias"]
        g_tr = pullbacks["transformer"](g["input"], None) if need_weights else pullbacks["transformer"](g["input"])
        d_src, d_tgt = g_tr.pop("src"), g_tr.pop("tgt")
        for name, value in g_tr.items():
            if name != "memory":
                grads[f"transformer.{name}"] = value
        if src_drop is not None:
            d_src = d_src * src_drop
        if tgt_drop is not None:
            d_tgt = d_tgt * tgt_drop
        grads["src_embed.weight"] = pullbacks["src_embed"](d_src)["weight"]
        grads["tgt_embed.weight"] = pullbacks["tgt_embed"](d_tgt)["weight"]
        return grads

    @internal()
    def loss_and_grads(
        self,
        src: ArrayLike,
        tgt_in: ArrayLike,
        tgt_out: ArrayLike,
        src_key_padding_mask: ArrayLike | None = None,
        tgt_key_padding_mask: ArrayLike | None = None,
        *,
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
    ) -> tuple[float, dict[str, Array]]:
        """Mean cross-entropy of the logits against tgt_out (B, T) (targets equal
        to ignore_index count for nothing) and its gradients: (loss, grads by
        state_dict name)."""
        logits, pullback = vjp(self, src, tgt_in, src_key_padding_mask, tgt_key_padding_mask)
        V = logits.shape[-1]
        loss, ce_pullback = vjp(
            nn.cross_entropy,
            logits.reshape(-1, V),
            as_array(tgt_out, "tgt_out").reshape(-1),
            ignore_index=ignore_index,
            label_smoothing=label_smoothing,
        )
        dlogits = ce_pullback(np.ones((), logits.dtype))["input"].reshape(logits.shape)
        return float(loss), pullback(dlogits)

    # -- decoding --------------------------------------------------------------------
    def _decoding_args(self, src, src_key_padding_mask, max_new_tokens, bos, eos, beam_size, length_penalty):
        """src and its padding mask, checked with the decoding options."""
        src = _ids(src, "src")
        kpm = _padding_mask(src_key_padding_mask, src.shape, "src_key_padding_mask")
        _decoding_ints(max_new_tokens, eos, beam_size)  # nn.decode checks eos and length_penalty against the model
        if not 0 <= bos < self.tgt_vocab:
            raise ValueError(f"bos {bos} is outside the vocabulary [0, {self.tgt_vocab})")
        if max_new_tokens > self.max_len:
            raise ValueError(f"max_new_tokens {max_new_tokens} exceeds max_len={self.max_len}")
        return src, kpm

    def generate(
        self,
        src: ArrayLike,
        max_new_tokens: int,
        bos: int,
        eos: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.0,
        *,
        src_key_padding_mask: ArrayLike | None = None,
    ) -> Array:
        """Decode target sequences for src (B, S) int, in eval mode.

        Starts every row from ``bos`` and returns int64 (B, L), L <=
        max_new_tokens: the generated tokens (bos not included). A row that
        produces ``eos`` ends with it and is filled with eos after; decoding
        stops when every row has ended. beam_size=1 is greedy; beam_size > 1 is
        beam search scored by sum(log p) / length ** length_penalty (the exact
        rules: ``attnc.nn.decode``). src_key_padding_mask (B, S)
        bool marks source padding (True = padding).

        Runs in C (attnc.nn.decode): the encoder once, then the decoder one
        token at a time with cached keys and values.
        """
        src, kpm = self._decoding_args(src, src_key_padding_mask, max_new_tokens, bos, eos, beam_size, length_penalty)
        if src.shape[1] > self.max_len:
            raise ValueError(f"src has length {src.shape[1]}, longer than max_len={self.max_len}")
        tr = self.transformer
        with _EvalMode(self):
            xs, _ = self._embed(_Tape(False), "src_embed", src, self.src_embed.weight)
            memory = tr.encoder(xs, src_key_padding_mask=kpm)
        return nn.decode(
            tr.decoder.layers,
            self.tgt_embed.weight,
            self._positions(max_new_tokens),
            self.generator.weight,
            np.full((src.shape[0], 1), bos, np.int64),
            max_new_tokens,
            out_bias=self.generator.bias,
            embed_scale=math.sqrt(self.d_model),
            norm=tr.decoder.norm,
            memory=memory,
            memory_key_padding_mask=kpm,
            eos=eos,
            beam_size=beam_size,
            length_penalty=length_penalty,
        )

    def extra_repr(self) -> str:
        return (
            f"src_vocab={self.src_vocab}, tgt_vocab={self.tgt_vocab}, d_model={self.d_model}, "
            f"dropout={self.dropout}, max_len={self.max_len}"
        )
