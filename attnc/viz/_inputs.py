"""What the views take: attention weights as arrays (checked here, once, for
every view) or a model and its input (run once, in :func:`model_weights`)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .. import nn
from .._args import host_array

# The largest payload a view ships. Its base64 text becomes one JavaScript
# string, and V8 caps strings at 2**29 - 24 characters (~512 MiB): 256 MiB of
# float32 (4 heads at 4,096 tokens) keeps well clear of it.
MAX_BYTES = 256 * 2**20


class Attention(NamedTuple):
    """One named attention (a model's "encoder", "decoder_cross", ...):
    float32 (layers, H, L, S) of one batch item, its row (query) and column
    (key) labels."""

    name: str
    weights: np.ndarray
    rows: list[str]
    cols: list[str]


def as_array(x: Any, name: str) -> np.ndarray:
    """x as a NumPy array (a torch tensor is detached and copied to the CPU first)."""
    try:
        arr = np.asarray(host_array(x))
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be an array of attention weights: {e}") from None
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr


def checked(x: Any, name: str, shape: str, ndims: tuple[int, ...], *, weights: bool = True) -> np.ndarray:
    """x as a finite float64 array of one of the ranks ndims (shape names
    them in the message); weights must also be >= 0."""
    arr = as_array(x, name).astype(np.float64)
    if arr.ndim not in ndims:
        raise ValueError(f"{name} must be {shape}, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has non-finite values (nan or inf)")
    if weights and (arr < 0).any():
        raise ValueError(f"{name} has negative values: attention weights are >= 0")
    return arr


def stack_layers(weights: Any, name: str) -> np.ndarray:
    """A list of per-layer (B, H, L, S) arrays (or (H, L, S) arrays), or one
    such array, as float64 (layers, B, H, L, S)."""
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise ValueError(f"{name} is an empty list: give at least one layer's weights")
        layers = [as_array(w, f"{name}[{i}]") for i, w in enumerate(weights)]
        for i, w in enumerate(layers):
            if w.ndim not in (3, 4):
                raise ValueError(f"{name}[{i}] must be (B, H, L, S) or (H, L, S), got shape {w.shape}")
            if w.shape != layers[0].shape:
                raise ValueError(
                    f"{name}[{i}] has shape {w.shape} but {name}[0] has {layers[0].shape}: "
                    "every layer's weights must have the same shape"
                )
        stacked = np.stack(layers)
    else:
        arr = as_array(weights, name)
        if arr.ndim not in (3, 4):
            raise ValueError(
                f"{name} must be a list of per-layer (B, H, L, S) arrays, or one (B, H, L, S) or (H, L, S) "
                f"array, got an array of shape {arr.shape}"
            )
        stacked = arr[None]
    if stacked.ndim == 4:  # (layers, H, L, S): one sequence, no batch axis
        stacked = stacked[:, None]
    where = (lambda i: f"{name}[{i}]") if isinstance(weights, (list, tuple)) else (lambda i: name)
    return np.stack([checked(layer, where(i), "", (layer.ndim,)) for i, layer in enumerate(stacked)])


def labels(tokens: Sequence[object] | None, n: int, name: str, what: str) -> list[str]:
    """tokens as n strings (positions 0..n-1 when None); what says where n comes from."""
    if tokens is None:
        return [str(i) for i in range(n)]
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__"):
        raise TypeError(f"{name} must be a sequence of tokens (one per position), got {type(tokens).__name__}")
    out = [str(t) for t in tokens]
    if len(out) != n:
        raise ValueError(f"{name} has {len(out)} entries but {what}")
    return out


def batch_index(batch: int, size: int) -> int:
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
        raise TypeError(f"batch must be an int, got {batch!r}")
    if not -size <= batch < size:
        raise ValueError(f"batch={batch} is out of range for weights with a batch of {size}")
    return int(batch) % size


def pick(index: Sequence[int] | None, n: int, name: str) -> list[int]:
    """The indices a layers= or heads= argument selects among n (all when None)."""
    if index is None:
        return list(range(n))
    if isinstance(index, (str, bytes)) or not isinstance(index, Sequence):
        raise TypeError(f"{name} must be a sequence of ints, got {index!r}")
    for i in index:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"{name} must be a sequence of ints, got {index!r}")
        if not -n <= i < n:
            raise ValueError(f"{name} holds {i}, out of range for {n} {name}")
    return [int(i) % n for i in index]


def _sides(name: str | None, tokens, target_tokens):
    """(row tokens, column tokens) of an attention: one without a name (not
    in a dict) and names with "cross" attend from the target to the source;
    "self" and names starting with "decoder" attend within the target; the
    rest within the source."""
    if target_tokens is None:
        return tokens, tokens
    if name is None or "cross" in name:
        return target_tokens, tokens
    if name == "self" or name.startswith("decoder"):
        return target_tokens, target_tokens
    return tokens, tokens


def attentions(
    weights: Any,
    tokens: Sequence[object] | None,
    target_tokens: Sequence[object] | None,
    batch: int,
) -> list[Attention]:
    """Every attention in weights (a dict of them, as attnc.nn.Transformer
    returns, or one), checked, at batch item ``batch``, with their labels."""
    named = weights.items() if isinstance(weights, Mapping) else [("attention", weights)]
    out = []
    for key, w in named:
        label = f"weights[{key!r}]" if isinstance(weights, Mapping) else "weights"
        stacked = stack_layers(w, label)
        b = batch_index(batch, stacked.shape[1])
        L, S = stacked.shape[-2:]
        row_tokens, col_tokens = _sides(str(key) if isinstance(weights, Mapping) else None, tokens, target_tokens)
        col_name = "tokens" if col_tokens is tokens else "target_tokens"
        cols = labels(col_tokens, S, col_name, f"{label} has S = {S} key positions (its last axis)")
        if row_tokens is tokens and target_tokens is None and tokens is not None and L != S:
            raise ValueError(
                f"{label} attends from L = {L} positions to S = {S}: give target_tokens "
                "(L labels of the attending sequence) for cross-attention"
            )
        row_name = "tokens" if row_tokens is tokens else "target_tokens"
        rows = labels(row_tokens, L, row_name, f"{label} has L = {L} query positions (its axis -2)")
        out.append(Attention(str(key), stacked[:, b].astype(np.float32), rows, cols))
    return out


def model_weights(model: nn.Module, inputs: Any, batch: int, decode: Callable[[int], object] | None) -> tuple:
    """Run model on inputs with need_weights=True: (its weights, source
    labels, target labels). inputs is the forward's one argument or a tuple
    of them. Integer inputs (token ids, (B, T) or (T,)) give the labels of
    batch item ``batch``, through decode when given: the first the source's,
    a second the target's; without them (embeddings in) the labels are None
    (positions)."""
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    if isinstance(model, nn.MultiheadAttention):
        result = model(*args, need_weights=True, average_attn_weights=False)
    else:
        result = model(*args, need_weights=True)
    found: list[list[object] | None] = [None, None]
    ids = [np.asarray(a) for a in args if np.asarray(a).dtype.kind in "iu"]
    for k, x in enumerate(ids[:2]):
        row = x[batch_index(batch, len(x))] if x.ndim == 2 else x
        found[k] = [decode(int(i)) if decode else int(i) for i in row]
    return result[1], found[0], found[1]


def tokenized(inputs: Any, tokenizer: Any, decode: Callable[[int], object] | None) -> tuple:
    """A model's input and the decode of its ids: text goes through
    ``tokenizer`` (the transformers interface: ``tokenizer(text)["input_ids"]``,
    one sequence, with the special tokens it adds) and the tokenizer's
    ``convert_ids_to_tokens`` labels the ids."""
    if tokenizer is None:
        if isinstance(inputs, str):
            raise TypeError(
                "a model's input given as text needs its tokenizer: pass tokenizer= (a transformers tokenizer, "
                "e.g. AutoTokenizer.from_pretrained(checkpoint_directory)), or the token ids as a (B, T) int array"
            )
        return inputs, decode
    if decode is not None:
        raise ValueError("give decode or tokenizer, not both: the tokenizer's convert_ids_to_tokens labels the ids")
    if not (callable(tokenizer) and hasattr(tokenizer, "convert_ids_to_tokens")):
        raise TypeError(
            "tokenizer must have the transformers tokenizer interface (called on text for input_ids, "
            f"convert_ids_to_tokens), got {type(tokenizer).__name__}"
        )
    if isinstance(inputs, str):
        inputs = np.asarray([tokenizer(inputs)["input_ids"]], dtype=np.int64)
    return inputs, tokenizer.convert_ids_to_tokens


def is_model(x: Any) -> bool:
    """Whether a view's first argument is an attnc module to run rather than weights."""
    return isinstance(x, nn.Module)
