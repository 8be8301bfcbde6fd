"""attnc.models.BERT: BERT's encoder (Devlin et al. 2019) built from attnc.nn
modules, with gradients through ``attnc.vjp``."""

from __future__ import annotations

import numbers

import numpy as np

from .. import nn
from .._args import as_array, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import vjp
from ..nn.transformer import Activation
from ._common import _dropout, _ids, _in_range, _Tape

__all__ = ["BERT", "BERTPooler"]


class BERTPooler(nn.Module):
    """BERT's pooler: tanh(dense(hidden_states[:, 0])), the first ([CLS])
    position's summary of a sequence.

    Parameters
    ----------
    hidden_size : int, D
    dtype : float32 or float64
    seed : int or None, for the initialisation

    ``forward(hidden_states)``: (B, L, D), L >= 1, the module's dtype -> (B, D).
    ``attnc.vjp(pooler, hidden_states)`` gives the gradients of
    ``hidden_states`` and of ``dense.weight`` (D, D), ``dense.bias`` (D,).

    Example
    -------
    >>> pooler = attnc.models.BERTPooler(8, seed=0)
    >>> pooler(np.random.rand(2, 5, 8).astype(np.float32)).shape
    (2, 8)
    """

    def __init__(self, hidden_size: int, *, dtype: DTypeLike = np.float32, seed: int | None = None) -> None:
        super().__init__(dtype)
        self.dense = nn.Linear(hidden_size, hidden_size, dtype=dtype, seed=seed)

    def _first(self, hidden_states):
        h = as_array(hidden_states, "hidden_states")
        if h.ndim != 3 or h.shape[1] < 1:
            raise ValueError(f"hidden_states must be (B, L, D) with L >= 1, got {shape_str(h.shape)}")
        return h[:, 0]

    def forward(self, hidden_states: ArrayLike) -> Array:
        return np.tanh(self.dense(self._first(hidden_states)))

    def _vjp_forward(self, hidden_states):
        z, pullback = vjp(self.dense, self._first(hidden_states))
        y = np.tanh(z)
        return y, (np.shape(hidden_states), y, pullback)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        shape, y, pullback = saved
        dz = np.zeros_like(y) if cotangents[0] is None else cotangents[0] * (1 - y * y)
        g = pullback(dz)
        dh = np.zeros(shape, y.dtype)
        dh[:, 0] = g.pop("input")
        return {"hidden_states": dh, **{f"dense.{k}": v for k, v in g.items()}}


class BERT(nn.Module):
    """BERT's encoder (Devlin et al. 2019), as Hugging Face's ``BertModel``
    computes it: word, position and token-type embeddings summed, a LayerNorm,
    then post-norm transformer layers; and BERT's pooler.

    Parameters (named as in Hugging Face's BertConfig)
    ----------
    vocab_size : int, V
    max_position_embeddings : int, the longest input (the position table's rows)
    type_vocab_size : int, the token types (segments)
    num_hidden_layers : int
    num_attention_heads : int, divides hidden_size
    hidden_size : int, D
    intermediate_size : int, the feed-forward width
    dropout : float in [0, 1), after the embeddings and inside the layers (training mode only)
    activation : "gelu" (BERT's, exact), "relu" or attnc.nn.GELU(approximate="tanh")
    layer_norm_eps : float, every LayerNorm's eps
    pad_token_id : int or None, the word embedding row that gets no gradient
    add_pooling_layer : bool, whether the model has BERT's pooler
    dtype : float32 or float64
    seed : int or None, for the initialisation and the dropout streams

    Submodules (state_dict prefixes): ``word_embeddings``,
    ``position_embeddings``, ``token_type_embeddings`` (Embedding),
    ``embeddings_norm`` (LayerNorm), ``encoder`` (attnc.nn.TransformerEncoder
    of post-norm TransformerEncoderLayer(hidden_size, num_attention_heads,
    intermediate_size, dropout, activation, layer_norm_eps)), ``pooler``
    (BERTPooler; None without add_pooling_layer). Initialised as Hugging Face's: matrices N(0, 0.02), the
    padding row, biases 0, LayerNorms 1 and 0.

    ``forward(input_ids, attention_mask=None, token_type_ids=None, *,
    need_weights=False)``: input_ids (B, L) int, L <= max_position_embeddings;
    attention_mask (B, L), 1 for tokens and 0 for padding (Hugging Face's
    meaning; a padded key gets no attention); token_type_ids (B, L) int
    (default 0) -> the last hidden states (B, L, D), the model's dtype, or
    (hidden states, [weights (B, num_attention_heads, L, L) per layer]). A
    row that is all padding attends nowhere: zero weights (Hugging Face
    spreads it evenly over the padding). ``model.pooler(hidden_states)`` ->
    (B, D), Hugging Face's ``pooler_output``.
    ``attnc.vjp(model, input_ids, ...)``: pullback(dhidden) -> gradients by
    state_dict name (the pooler's are zeros: the hidden states do not
    depend on it; ``attnc.vjp(model.pooler, hidden_states)`` differentiates it).

    Example
    -------
    >>> m = attnc.models.BERT(20, 16, 2, num_hidden_layers=2, num_attention_heads=2, hidden_size=8,
    ...                       intermediate_size=16, seed=0).eval()
    >>> ids, mask = np.array([[1, 5, 7, 2], [1, 9, 0, 0]]), np.array([[1, 1, 1, 1], [1, 1, 0, 0]])
    >>> h, weights = m(ids, attention_mask=mask, need_weights=True)
    >>> h.shape, len(weights), weights[0].shape, float(weights[1][1, 0, 0, 2:].sum())
    ((2, 4, 8), 2, (2, 2, 4, 4), 0.0)
    >>> m.pooler(h).shape
    (2, 8)
    """

    def __init__(
        self,
        vocab_size: int,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        hidden_size: int = 768,
        intermediate_size: int = 3072,
        dropout: float = 0.1,
        *,
        activation: Activation = "gelu",
        layer_norm_eps: float = 1e-12,
        pad_token_id: int | None = 0,
        add_pooling_layer: bool = True,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        sizes = dict(
            vocab_size=vocab_size,
            max_position_embeddings=max_position_embeddings,
            type_vocab_size=type_vocab_size,
            num_hidden_layers=num_hidden_layers,
            hidden_size=hidden_size,
        )
        for name, v in sizes.items():
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        rng = np.random.default_rng(seed)
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        self.vocab_size, self.max_position_embeddings = int(vocab_size), int(max_position_embeddings)
        self.type_vocab_size, self.num_hidden_layers = int(type_vocab_size), int(num_hidden_layers)
        self.hidden_size, self.dropout = int(hidden_size), float(dropout)
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id, dtype=dtype, seed=sub())
        self.pad_token_id = self.word_embeddings.padding_idx
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size, dtype=dtype, seed=sub())
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size, dtype=dtype, seed=sub())
        self.embeddings_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps, dtype=dtype)
        layer = nn.TransformerEncoderLayer(
            hidden_size,
            num_attention_heads,
            dim_feedforward=intermediate_size,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            dtype=dtype,
            seed=sub(),
        )
        self.encoder = nn.TransformerEncoder(layer, num_hidden_layers, enable_nested_tensor=False)
        pooler_seed = sub()  # drawn either way: the other parameters' values do not depend on the pooler
        if add_pooling_layer:
            self.pooler = BERTPooler(hidden_size, dtype=dtype, seed=pooler_seed)
        else:
            object.__setattr__(self, "pooler", None)

        def init(name, p):
            if "norm" in name:
                return np.ones(p.shape) if name.endswith("weight") else np.zeros(p.shape)
            if p.ndim == 1:
                return np.zeros(p.shape)
            w = rng.normal(0.0, 0.02, p.shape)
            if name == "word_embeddings.weight" and self.pad_token_id is not None:
                w[self.pad_token_id] = 0
            return w

        self._initialise(init)
        self._rng = rng

    def _inputs(self, input_ids, attention_mask, token_type_ids):
        """The checked ids (B, L), the key padding mask (True = padding) or
        None, and the token types (B, L)."""
        ids = _ids(input_ids, "input_ids")
        L = ids.shape[1]
        if L > self.max_position_embeddings:
            raise ValueError(
                f"input_ids has length {L}, longer than max_position_embeddings={self.max_position_embeddings}"
            )
        _in_range(ids, "input_ids", self.vocab_size)
        types = np.zeros_like(ids) if token_type_ids is None else _ids(token_type_ids, "token_type_ids")
        if types.shape != ids.shape:
            raise ValueError(f"token_type_ids has shape {shape_str(types.shape)}, input_ids {shape_str(ids.shape)}")
        _in_range(types, "token_type_ids", self.type_vocab_size)
        padding = None
        if attention_mask is not None:
            m = as_array(attention_mask, "attention_mask")
            if m.shape != ids.shape or not np.isin(m, (0, 1)).all():
                raise ValueError(
                    f"attention_mask must be 1 (token) or 0 (padding) of input_ids' shape {shape_str(ids.shape)}, "
                    f"got {m.dtype} {shape_str(m.shape)}"
                )
            padding = m == 0
        return ids, padding, types

    def _run(self, grad, input_ids, attention_mask, token_type_ids, need_weights):
        ids, padding, types = self._inputs(input_ids, attention_mask, token_type_ids)
        tape = _Tape(grad)
        words = tape("word_embeddings", nn.embedding, ids, self.word_embeddings.weight, self.pad_token_id)
        kinds = tape("token_type_embeddings", nn.embedding, types, self.token_type_embeddings.weight)
        positions = np.arange(ids.shape[1], dtype=np.int64)
        pos = tape("position_embeddings", nn.embedding, positions, self.position_embeddings.weight)
        x = tape("embeddings_norm", self.embeddings_norm, words + kinds + pos)  # Hugging Face's order of sums
        x, drop = _dropout(x, self.dropout, self._rng, self.training)
        out = tape("encoder", self.encoder, x, src_key_padding_mask=padding, need_weights=need_weights)
        return out, (tape.pullbacks, drop, self.pooler)

    def forward(
        self,
        input_ids: ArrayLike,
        attention_mask: ArrayLike | None = None,
        token_type_ids: ArrayLike | None = None,
        *,
        need_weights: bool = False,
    ) -> Array | tuple[Array, list[Array]]:
        return self._run(False, input_ids, attention_mask, token_type_ids, need_weights)[0]

    def _vjp_forward(self, input_ids, attention_mask=None, token_type_ids=None, *, need_weights=False):
        return self._run(True, input_ids, attention_mask, token_type_ids, need_weights)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        pullbacks, drop, pooler = saved
        g = pullbacks["encoder"](*cotangents)
        dx = g.pop("src")
        grads = {f"encoder.{name}": value for name, value in g.items()}
        if drop is not None:
            dx = dx * drop
        g = pullbacks["embeddings_norm"](dx)
        grads["embeddings_norm.weight"], grads["embeddings_norm.bias"] = g["weight"], g["bias"]
        dx = g["input"]
        grads["word_embeddings.weight"] = pullbacks["word_embeddings"](dx)["weight"]
        grads["token_type_embeddings.weight"] = pullbacks["token_type_embeddings"](dx)["weight"]
        dpos = np.ascontiguousarray(dx.sum(axis=0))
        grads["position_embeddings.weight"] = pullbacks["position_embeddings"](dpos)["weight"]
        if pooler is not None:  # the hidden states do not depend on it
            grads.update({f"pooler.{k}": np.zeros_like(p) for k, p in pooler.named_parameters()})
        return grads

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, max_position_embeddings={self.max_position_embeddings}, "
            f"type_vocab_size={self.type_vocab_size}, num_hidden_layers={self.num_hidden_layers}, "
            f"hidden_size={self.hidden_size}, dropout={self.dropout}"
        )
