"""attnc.nn.decode: greedy and beam-search generation in C (csrc/ops/transformer/decode.c)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from .. import _core
from .._args import as_array, float_array, same_dtype, shape_str
from .._typing import Array, ArrayLike
from .normalization import LayerNorm
from .transformer import TransformerDecoderLayer, TransformerEncoderLayer


def _int(name, v, low):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    return int(v)


def _decoding_ints(max_new_tokens, eos, beam_size, length="max_new_tokens"):
    """(max_new_tokens, eos, beam_size) as ints (eos None stays None), for
    every decoder (decode and the models' generate): checked in Python because
    the length sizes the output allocated before the C call, and -1 is C's
    eos for none. The C decoders check the rest: eos inside the vocabulary,
    a finite length_penalty. `length`: the caller's name for max_new_tokens."""
    return (
        _int(length, max_new_tokens, 0),
        None if eos is None else _int("eos", eos, 0),
        _int("beam_size", beam_size, 1),
    )


def _check_sizes(arrays, ids, max_new_tokens):
    """What the C decoder would refuse of the sizes that size the output,
    refused before it is allocated: prompt + max_new_tokens - 1 positions
    within the table. (The C call checks the rest: the prompt's tokens and
    eos within the vocabularies, the shapes.)"""
    for name in ("embedding", "positions", "out_weight"):
        if arrays[name].ndim != 2:
            raise ValueError(f"{name} must be 2-d, got shape {shape_str(arrays[name].shape)}")
    table = arrays["positions"].shape[0]
    if ids.shape[1] < 1:
        raise ValueError("prompt needs at least one token per row")
    if max_new_tokens > 0 and ids.shape[1] + max_new_tokens - 1 > table:
        raise ValueError(
            f"prompt length {ids.shape[1]} + max_new_tokens {max_new_tokens} - 1 exceeds the {table} rows of positions"
        )


def decode(
    layers: Sequence[TransformerDecoderLayer] | Sequence[TransformerEncoderLayer],
    embedding: ArrayLike,
    positions: ArrayLike,
    out_weight: ArrayLike,
    prompt: ArrayLike,
    max_new_tokens: int,
    *,
    out_bias: ArrayLike | None = None,
    embed_scale: float = 1.0,
    norm: LayerNorm | None = None,
    memory: ArrayLike | None = None,
    memory_key_padding_mask: ArrayLike | None = None,
    eos: int | None = None,
    beam_size: int = 1,
    length_penalty: float = 0.0,
) -> Array:
    """Generate tokens with a stack of transformer layers, in one C call.

    Parameters
    ----------
    layers : list of TransformerDecoderLayer (reading ``memory``), or of
        TransformerEncoderLayer (a decoder-only model); self-attention is causal.
        All share one configuration (nhead, activation, norm_first, eps).
    embedding : array (V, E), the layers' dtype (float32 or float64): token
        embeddings, times ``embed_scale``
    positions : array (P, E), added at each position (sinusoidal table or learned)
    out_weight : array (Vout, E), and out_bias (Vout,) or None: the output projection
    prompt : int array (B, P0), P0 >= 1: the start token, or a prompt
    max_new_tokens : int; P0 + max_new_tokens - 1 <= P
    norm : LayerNorm or None, applied before the output projection
    memory : array (B, S, E), the encoder's output, with ``memory_key_padding_mask``
        (B, S) bool (True = padding, torch's meaning)
    eos : int or None, the end token
    beam_size : int, 1 for greedy (lowest id on ties)
    length_penalty : float alpha, beam scores are sum(log p) / length ** alpha

    Layers built with ``attention="sigmoid"`` need a fixed ``sigmoid_bias``
    (the default, -log of the whole length, would change with every new
    token); their cross-attention's default bias is -log S, as in the full
    forward. Block masks (segment ids, prefix lengths, block_mask) are
    training-time packing and are not taken here: each row is one sequence.

    Returns
    -------
    tokens : int64 (B, L), L <= max_new_tokens the longest row: each row's
        new tokens, ending with eos when it produced one, eos (or 0 without
        eos) after that.

    Greedy takes the most probable token at each step (the lowest id on
    ties). Beam search (beam_size K > 1) extends every live hypothesis by
    every token; a candidate ending in eos is finished, scored sum(log p) /
    length ** length_penalty (eos counted), and takes no beam slot; of the
    others the K best by sum(log p) stay live (ties: the earlier hypothesis,
    then the lower id); live hypotheses reaching max_new_tokens finish with
    their length. The answer is the best finished hypothesis (the first on
    ties). A row stops early only when no live hypothesis can still beat its
    best finished one. Tests hold the C search to a Python one written from
    these rules (tests/reference/decoding.py).

    Example
    -------
    >>> layer = attnc.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, seed=0)
    >>> emb = np.random.rand(5, 8).astype(np.float32)
    >>> pos = attnc.nn.sinusoidal_encoding(6, 8)
    >>> out = attnc.nn.decode([layer], emb, pos, emb, np.zeros((3, 1), np.int64), 4, beam_size=2)
    >>> out.shape, out.dtype, bool(((0 <= out) & (out < 5)).all())
    ((3, 4), dtype('int64'), True)
    """
    layers = list(layers)
    if not layers:
        raise ValueError("decode needs at least one layer")
    kinds = {type(layer) for layer in layers}
    if not kinds <= {TransformerEncoderLayer, TransformerDecoderLayer} or len(kinds) != 1:
        raise TypeError("layers must all be attnc.nn.TransformerDecoderLayer or all TransformerEncoderLayer")
    first = layers[0]

    def key(layer):  # (an array, ALiBi's slopes, as a tuple: comparable)
        config = layer._layer_config(training=False)
        values = (config[k] for k in sorted(config) if k != "seed")
        return (layer.d_model,) + tuple(tuple(v.tolist()) if isinstance(v, np.ndarray) else v for v in values)

    if any(key(layer) != key(first) for layer in layers):
        raise ValueError(
            "layers must share nhead, activation, layer_norm_eps, norm_first, d_model, num_kv_heads, rotary, "
            "alibi, window, softcap, attention and sigmoid_bias"
        )
    dtype = first.dtype
    arrays = {}
    for name, a, required in (
        ("embedding", embedding, True),
        ("positions", positions, True),
        ("out_weight", out_weight, True),
        ("out_bias", out_bias, False),
    ):
        if a is None:
            if required:
                raise TypeError(f"{name} is required")
            arrays[name] = None
            continue
        a = float_array(a, name)
        same_dtype(dtype, **{name: a})
        arrays[name] = np.ascontiguousarray(a)
    if norm is not None and not isinstance(norm, LayerNorm):
        raise TypeError(f"norm must be an attnc.nn.LayerNorm or None, got {type(norm).__name__}")
    if norm is not None and norm.eps != first.layer_norm_eps:
        raise ValueError(f"norm.eps ({norm.eps}) must equal the layers' layer_norm_eps ({first.layer_norm_eps})")
    ids = as_array(prompt, "prompt")
    if ids.dtype.kind not in "iu" or ids.ndim != 2:
        raise TypeError(f"prompt must be a (B, P) integer array, got {ids.dtype} {shape_str(ids.shape)}")
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    max_new_tokens, eos, beam_size = _decoding_ints(max_new_tokens, eos, beam_size)
    _check_sizes(arrays, ids, max_new_tokens)
    mem = mask = None
    if isinstance(first, TransformerDecoderLayer):
        if memory is None:
            raise TypeError("memory is required with decoder layers")
        mem = float_array(memory, "memory")
        same_dtype(dtype, memory=mem)
        mem = np.ascontiguousarray(mem)
        if mem.ndim != 3 or mem.shape[0] != ids.shape[0]:
            raise ValueError(f"memory {shape_str(mem.shape)} must be (B, S, E) with the prompt's batch {ids.shape[0]}")
        if memory_key_padding_mask is not None:
            m = as_array(memory_key_padding_mask, "memory_key_padding_mask")
            if m.dtype != np.bool_ or m.shape != mem.shape[:2]:
                raise ValueError(
                    f"memory_key_padding_mask must be bool {shape_str(mem.shape[:2])}, got "
                    f"{m.dtype} {shape_str(m.shape)}"
                )
            mask = np.ascontiguousarray(~m)
    elif memory is not None:
        raise ValueError("memory is only read by decoder layers")
    B = ids.shape[0]
    tokens = np.empty((B, max_new_tokens), np.int64)
    lengths = np.empty(B, np.int64)
    _core.decode(
        tokens=tokens,
        lengths=lengths,
        layers=[layer._params() for layer in layers],
        **first._layer_config(training=False),
        embedding=arrays["embedding"],
        positions=arrays["positions"],
        embed_scale=float(embed_scale),
        norm_weight=None if norm is None else norm.weight,
        norm_bias=None if norm is None else norm.bias,
        out_weight=arrays["out_weight"],
        out_bias=arrays["out_bias"],
        prompt=ids,
        memory=mem,
        memory_mask=mask,
        max_new_tokens=max_new_tokens,
        eos=-1 if eos is None else eos,
        beam_size=beam_size,
        length_penalty=float(length_penalty),
    )
    return tokens[:, : int(lengths.max()) if B else 0]
