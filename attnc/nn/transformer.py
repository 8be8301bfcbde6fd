"""attnc.nn.Transformer* : torch.nn's transformer modules (always batch first).

Each layer's forward and backward run in C (csrc/ops/transformer/layer.c) in one
call; the stacks loop over their layers here and add the final norm. The
parameters are those of the torch modules, named as in their state_dict().
Masks keep torch's meanings (bool True = not allowed, float added).

A forward asked for ``need_weights=True`` also returns every layer's
attention weights per head (softmax probabilities before dropout), which
torch's fused kernels cannot give.
"""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal, Union

import numpy as np

from .. import _core
from .._args import (
    as_array,
    choice,
    elementwise_ready,
    float_array,
    int_arg,
    integer_array,
    same_dtype,
    shape_str,
    torch_mask,
)
from .._typing import Array, ArrayLike, DTypeLike
from ..attention._spec import _block_mask, _sigmoid_bias, variant_options
from .linear import Linear
from .module import Module, ModuleList, _copies
from .multihead import MultiheadAttention
from .normalization import LayerNorm
from .normalization import _backward as _norm_backward
from .normalization import _forward as _norm_forward
from .rotary import RotaryEmbedding

# The C layer's activations (attnc_activation); "gelu_tanh" is torch's
# GELU(approximate="tanh"), given as a module (torch takes no such string).
_ACTIVATIONS = {"relu": 1, "gelu": 2, "gelu_tanh": 3}
Activation = Union[Literal["relu", "gelu"], Callable[..., Any]]


def _activation(activation):
    """torch's activation argument as the C layer's name: "relu" or "gelu",
    torch's or attnc's relu / gelu functions, or a GELU module (torch's or
    attnc's) with approximate "none" or "tanh"."""
    if isinstance(activation, str):
        if activation in ("relu", "gelu"):
            return activation
    elif type(activation).__name__ == "GELU" and getattr(activation, "approximate", None) in ("none", "tanh"):
        return "gelu" if activation.approximate == "none" else "gelu_tanh"
    elif callable(activation) and getattr(activation, "__name__", "").lower() in ("relu", "gelu"):
        return activation.__name__.lower()
    raise ValueError(
        "activation must be 'relu' or 'gelu', torch's or attnc's relu / gelu, or a GELU module "
        f"(approximate 'none' or 'tanh'): the layers run in C; got {activation!r}"
    )


def _attention(attention, sigmoid_bias, sinks):
    """The layers' attention setting, checked: ("softmax" or "sigmoid", the
    sigmoid's bias or None). Named `attention`, not `activation`, which is
    the feed-forward block's in torch's layers. sigmoid_bias None: -log of
    each attention's key count per call (L for self-attention, S for
    cross-attention; attnc.scaled_dot_product_attention's default, the
    paper's b = -log n); a model that decodes token by token (attnc.nn.decode)
    fixes it (say -log of the training length), or each position's output
    would depend on the length of the whole sequence."""
    choice(attention, ("softmax", "sigmoid"), "attention")
    if attention == "softmax":
        if sigmoid_bias is not None:
            raise ValueError("sigmoid_bias is the bias of attention='sigmoid': pass it with that attention")
        return attention, None
    if sinks:
        raise ValueError("sinks join a softmax's normaliser; attention='sigmoid' has none: pass one or the other")
    return attention, None if sigmoid_bias is None else _sigmoid_bias(sigmoid_bias, 0)


def _rows(x, name, dtype, d_model, length="T"):
    """x as a contiguous (B, T, E) array of the module's dtype, and whether it
    came unbatched (T, E), as torch accepts."""
    a = float_array(x, name)
    same_dtype(dtype, **{name: a})
    if a.ndim not in (2, 3) or a.shape[-1] != d_model:
        raise ValueError(
            f"{name} has shape {shape_str(a.shape)}, expected (B, {length}, {d_model}) (batch first) "
            f"or ({length}, {d_model})"
        )
    batched = a.ndim == 3
    return np.ascontiguousarray(a if batched else a[None]), batched


def _tgt_and_memory(tgt, memory, dtype, d_model):
    """tgt (B, T, E) and memory (B, S, E) as _rows gives them, with one batch."""
    x, batched = _rows(tgt, "tgt", dtype, d_model)
    mem, mem_batched = _rows(memory, "memory", dtype, d_model, "S")
    if mem_batched != batched or mem.shape[0] != x.shape[0]:
        raise ValueError(
            f"tgt {shape_str(np.shape(tgt))} and memory {shape_str(np.shape(memory))} need the "
            "same batch size (both batched or both unbatched)"
        )
    return x, mem, batched


def _is_causal_mask(mask, size):
    """Whether mask is exactly the causal mask (torch's _detect_is_causal_mask)."""
    m = as_array(mask, "mask")
    if m.shape != (size, size):
        return False
    above = np.triu(np.ones((size, size), bool), 1)
    if m.dtype == np.bool_:
        return bool(np.array_equal(m, above))
    return bool(np.all(np.isneginf(m[above])) and np.all(m[~above] == 0))


# The keywords of a layer's self- and cross-attention masks (attnc_attn_masks:
# the attention mask, the key padding mask, the causal flag).
_SELF_MASKS = ("attn_mask", "key_padding_mask", "is_causal")
_CROSS_MASKS = ("memory_mask", "memory_key_padding_mask", "memory_is_causal")


def _masks(attn_mask, key_padding_mask, is_causal, B, H, L, S, dtype, names, batched, keys):
    """A torch-style attention mask and key padding mask as the kernel's
    masks broadcast to (B, H, L, S) and causal flag, by their keywords
    (_SELF_MASKS or _CROSS_MASKS)."""
    m0 = m1 = None
    if is_causal and attn_mask is None:
        raise ValueError(
            f"{names[2]}=True is a hint that {names[0]} is the causal mask: pass {names[0]} too "
            "(as torch; Transformer.generate_square_subsequent_mask builds it)"
        )
    if attn_mask is not None:
        m = as_array(attn_mask, names[0])
        if m.ndim == 3 and m.shape == (B * H, L, S):
            m = m.reshape(B, H, L, S)
        elif m.ndim != 2:
            raise ValueError(
                f"{names[0]} must be (L, S) or (B * nhead, L, S) = ({B * H}, {L}, {S}), got {shape_str(m.shape)}"
            )
        m0 = elementwise_ready(torch_mask(m, names[0], (B, H, L, S), dtype)[1])
    if key_padding_mask is not None:
        m = as_array(key_padding_mask, names[1])
        m = m[None] if not batched and m.ndim == 1 else m
        if m.shape != (B, S):
            raise ValueError(
                f"{names[1]} has shape {shape_str(np.shape(key_padding_mask))}, expected (B, S) = ({B}, {S})"
            )
        m1 = elementwise_ready(torch_mask(m[:, None, None, :], names[1], (B, H, L, S), dtype)[1])
    return dict(zip(keys, (m0, m1, bool(is_causal))))


def _segments(ids, name, B, n):
    """segment ids (B, n) (or (n,), shared by the batch) as int64."""
    a = as_array(ids, name)
    if a.ndim not in (1, 2) or a.shape[-1] != n:
        raise ValueError(f"{name} has shape {shape_str(a.shape)}, expected (B, {n}) = ({B}, {n}): one id per position")
    return integer_array(a, name, (B, n), f"(B, {n}) = ({B}, {n})")


def _blocks(prefix, B, H, L, S, blocks, names):
    """One attention's block masks as the C layer's keywords (prefix + an
    attnc_attn_masks member; prefix "self_" or "cross_"). blocks: the
    call's (query segments, key segments, prefix_lengths, block_mask,
    block_size), each None when not given; names: the caller's names of the
    first four, for errors. Segments go in pairs: self-attention passes its
    ids as both."""
    q_ids, k_ids, prefix_lengths, block_mask, block_size = blocks
    out = {}
    if q_ids is not None:
        out[prefix + "query_segments"] = _segments(q_ids, names[0], B, L)
        out[prefix + "key_segments"] = _segments(k_ids, names[1], B, S)
    if prefix_lengths is not None:
        out[prefix + "prefix_lengths"] = integer_array(prefix_lengths, names[2], (B,), f"(B,) = ({B},)")
    if block_mask is not None:
        m = _block_mask(block_mask, block_size, H, (B,), L, S, name=names[3])
        out.update({prefix + k: v for k, v in m.items()})
    return out


def _layer_param_names(decoder):
    """The C layer's parameter keys (attnc_layer_params' members) -> the
    layer's state_dict names."""
    attn = {
        "in_weight": "in_proj_weight",
        "in_bias": "in_proj_bias",
        "out_weight": "out_proj.weight",
        "out_bias": "out_proj.bias",
        "sinks": "sinks",
    }
    blocks = (("self_attn", "self_attn"),) + ((("cross_attn", "multihead_attn"),) if decoder else ())
    names = {f"{member}.{k}": f"{name}.{v}" for member, name in blocks for k, v in attn.items()}
    names.update({f"linear{i}_{w}": f"linear{i}.{w}" for i in (1, 2) for w in ("weight", "bias")})
    norms = ("norm_self", "norm_cross", "norm_ff") if decoder else ("norm_self", "norm_ff")
    names.update({f"{member}.{w}": f"norm{i + 1}.{w}" for i, member in enumerate(norms) for w in ("weight", "bias")})
    return names


class _Layer(Module, abstract=True):
    """What the encoder and decoder layers share: construction, the C call."""

    _decoder = False
    _param_names = _layer_param_names(False)

    def _build(
        self,
        d_model,
        nhead,
        dim_feedforward,
        dropout,
        activation,
        layer_norm_eps,
        batch_first,
        norm_first,
        bias,
        dtype,
        seed,
        num_kv_heads,
        rotary,
        variants,
        attention="softmax",
        sigmoid_bias=None,
    ):
        """variants: the self-attention's options of today's models, as
        attnc.nn.MultiheadAttention's constructor takes them; attention,
        sigmoid_bias: every attention block's activation (_attention)."""
        d_model, nhead = int_arg("d_model", d_model), int_arg("nhead", nhead)
        dim_feedforward = int_arg("dim_feedforward", dim_feedforward)
        if d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        if not batch_first:
            raise ValueError("attnc's modules are always batch first (batch_first=True)")
        if not 0 <= dropout <= 1:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
        if not layer_norm_eps >= 0:
            raise ValueError(f"layer_norm_eps must be >= 0, got {layer_norm_eps}")
        self.d_model, self.nhead, self.dim_feedforward = d_model, nhead, dim_feedforward
        self.dropout, self.activation = float(dropout), _activation(activation)
        self.layer_norm_eps, self.norm_first = float(layer_norm_eps), bool(norm_first)
        rng = np.random.default_rng(seed)
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        gqa = dict(num_kv_heads=num_kv_heads) if num_kv_heads is not None else {}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout, bias=bias, dtype=dtype, seed=sub(), **gqa, **variants
        )
        self.num_kv_heads = self.self_attn.num_kv_heads
        if rotary is not None and not isinstance(rotary, RotaryEmbedding):
            raise TypeError(f"rotary must be an attnc.nn.RotaryEmbedding or None, got {type(rotary).__name__}")
        if rotary is not None and rotary.dim != d_model // nhead:
            raise ValueError(f"rotary.dim ({rotary.dim}) must be the heads' width d_model / nhead = {d_model // nhead}")
        self.rotary = rotary
        self.attention, self.sigmoid_bias = _attention(attention, sigmoid_bias, variants["sinks"])
        if self._decoder:
            self.multihead_attn = MultiheadAttention(d_model, nhead, dropout, bias=bias, dtype=dtype, seed=sub(), **gqa)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype, seed=sub())
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype, seed=sub())
        for i in range(3 if self._decoder else 2):
            setattr(self, f"norm{i + 1}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self._rng = rng

    def _params(self):
        """The layer's parameters as the C layer takes them (by
        attnc_layer_params' member: _param_names), None for an absent bias."""
        own = dict(self.named_parameters())
        params = {member: own.get(name) for member, name in self._param_names.items()}
        for member, attn in self._attentions():
            if not attn._qkv_same:  # grouped-query attention's q/k/v_proj_weight, stacked as the C layer reads them
                params[f"{member}.in_weight"] = np.concatenate(
                    [attn.q_proj_weight, attn.k_proj_weight, attn.v_proj_weight]
                )
        return params

    def _attentions(self):
        """(attnc_layer_params member, MultiheadAttention) of each attention block."""
        yield "self_attn", self.self_attn
        if self._decoder:
            yield "cross_attn", self.multihead_attn

    def _split_in_proj(self, named):
        """named's stacked in_proj_weight gradients as q/k/v_proj_weight's
        where the block has those (grouped-query attention)."""
        for member, attn in self._attentions():
            prefix = self._param_names[f"{member}.in_weight"].rsplit(".", 1)[0]
            if attn._qkv_same or f"{prefix}.in_proj_weight" not in named:
                continue
            g, E = named.pop(f"{prefix}.in_proj_weight"), self.d_model
            Ekv = (g.shape[0] - E) // 2
            for part, rows in zip("qkv", (g[:E], g[E : E + Ekv], g[E + Ekv :])):
                named[f"{prefix}.{part}_proj_weight"] = rows
        return named

    def _layer_config(self, training):
        """attnc_layer_config by member: the keywords of the C calls."""
        dropout = self.dropout if training else 0.0
        seed = int(self._rng.integers(2**63)) if dropout else 0
        rope = self.rotary
        return dict(
            nhead=self.nhead,
            activation=_ACTIVATIONS[self.activation],
            eps=self.layer_norm_eps,
            norm_first=self.norm_first,
            dropout=dropout,
            seed=seed,
            kv_heads=self.num_kv_heads,
            rotary_dim=0 if rope is None else rope.rotary_dim,
            rope_base=10000.0 if rope is None else rope.base,
            rope_interleaved=False if rope is None else rope.interleaved,
            # the self-attention's fixed options (its sinks are a parameter), by attnc_sdpa_options' names
            **variant_options(self.nhead, self.dtype, **self.self_attn._fixed),
            attention=int(self.attention == "sigmoid"),
            sigmoid_bias_set=self.sigmoid_bias is not None,
            sigmoid_bias=self.sigmoid_bias or 0.0,
        )

    def _run(self, x, memory, self_masks, cross_masks, need_weights, keep):
        """One C forward: (out, weights, saved state for _grads)."""
        B, L, E = x.shape
        S = memory.shape[1] if memory is not None else 0
        H = self.nhead
        params, config = self._params(), self._layer_config(self.training)
        out = np.empty_like(x)
        ws = np.empty((B, H, L, L), x.dtype) if need_weights else None
        wc = np.empty((B, H, L, S), x.dtype) if need_weights and self._decoder else None
        size = _core.layer_saved_size(B=B, L=L, S=S, E=E, F=self.dim_feedforward, H=H, decoder=self._decoder)
        cross_masks = cross_masks or {}
        if keep:
            saved = self._activations(size, x.dtype)
            _core.layer_forward(
                output=out,
                weights_self=ws,
                weights_cross=wc,
                saved=saved.array,
                input=x,
                memory=memory,
                params=params,
                **config,
                **self_masks,
                **cross_masks,
            )
        else:
            with self._workspace(size, x.dtype) as work:
                _core.layer_forward(
                    output=out,
                    weights_self=ws,
                    weights_cross=wc,
                    saved=work,
                    input=x,
                    memory=memory,
                    params=params,
                    **config,
                    **self_masks,
                    **cross_masks,
                )
            saved = None
        state = (saved, x, memory, params, config, self_masks, cross_masks)
        return out, (ws, wc), state

    def __getstate__(self):  # copies and pickles leave the working memory and its lock behind
        return {k: v for k, v in self.__dict__.items() if k not in ("_work", "_work_lock", "_spare")}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def _activations(self, size, dtype):
        """The buffer a training forward saves its activations in. When the
        last reference to it goes (the pullback is dropped), it is kept for
        the next forward: a training loop then writes into pages it already
        has instead of faulting in 100+ MiB of fresh ones every step."""
        spare = self.__dict__.setdefault("_spare", [])
        for i, a in enumerate(spare):
            if a.dtype == dtype and a.size == size:
                return _Activations(spare.pop(i), spare)
        return _Activations(np.empty(size, dtype), spare)

    @contextlib.contextmanager
    def _workspace(self, size, dtype):
        """Working memory of a forward that keeps nothing for a backward, or
        of a backward, reused from call to call (fresh memory costs page
        faults). A concurrent call from another thread gets its own."""
        lock = self.__dict__.setdefault("_work_lock", threading.Lock())
        if not lock.acquire(blocking=False):
            yield np.empty(size, dtype)
            return
        try:
            work = self.__dict__.get("_work")
            if work is None or work.dtype != dtype or work.size < size:
                work = np.empty(size, dtype)
                object.__setattr__(self, "_work", work)
            yield work[:size]
        finally:
            lock.release()

    def _grads(self, state, dout, dweights=None):
        """dx, dmemory and {state_dict name: gradient} from one C backward;
        dweights (B, H, L, L), when given, receives the gradient with respect
        to the self-attention probabilities."""
        saved, x, memory, params, config, sm, cm = state
        grads = {member: None if p is None else np.empty_like(p) for member, p in params.items()}
        dx = np.empty_like(x)
        dmem = np.empty_like(memory) if memory is not None else None
        dout = np.ascontiguousarray(dout, dtype=x.dtype)
        B, L, E = x.shape
        size = _core.layer_scratch_size(
            B=B, L=L, S=0 if memory is None else memory.shape[1], E=E, F=self.dim_feedforward, decoder=self._decoder
        )
        with self._workspace(size, x.dtype) as work:
            _core.layer_backward(
                dinput=dx,
                dmemory=dmem,
                dweights_self=dweights,
                grads=grads,
                scratch=work,
                doutput=dout,
                saved=saved.array,
                input=x,
                memory=memory,
                params=params,
                **config,
                **sm,
                **cm,
            )
        named = {self._param_names[member]: g for member, g in grads.items() if g is not None}
        return dx, dmem, self._split_in_proj(named)


class _Activations:
    """A layer's saved activations; the array returns to its module (which
    keeps one spare: a training loop needs no more) when this is freed."""

    def __init__(self, array, spare):
        self.array = array
        weakref.finalize(self, _give_back, spare, array)


def _give_back(spare, array):
    if not spare:
        spare.append(array)


# No block masks: _blocks' tuple of (query segments, key segments,
# prefix_lengths, block_mask, block_size), and the names the encoder's and
# the decoder's arguments have (for errors).
_NO_BLOCKS = (None,) * 5
_SRC_BLOCKS = ("src_segment_ids", "src_segment_ids", "prefix_lengths", "src_block_mask")
_TGT_BLOCKS = ("tgt_segment_ids", "tgt_segment_ids", "prefix_lengths", "tgt_block_mask")
_MEMORY_BLOCKS = ("tgt_segment_ids", "memory_segment_ids", "prefix_lengths", "memory_block_mask")


def _encoder_blocks(src_segment_ids, prefix_lengths, src_block_mask, block_size):
    """An encoder's block masks, as _self_masks takes them."""
    if block_size is not None and src_block_mask is None:
        raise TypeError("block_size is the size of src_block_mask's blocks: pass it with src_block_mask")
    return (src_segment_ids, src_segment_ids, prefix_lengths, src_block_mask, block_size)


def _decoder_blocks(tgt_segment_ids, memory_segment_ids, tgt_block_mask, memory_block_mask, block_size):
    """A decoder's block masks: (the self-attention's, the cross-attention's).
    Packed pairs: target segment k reads memory segment k (ids compared)."""
    if block_size is not None and tgt_block_mask is None and memory_block_mask is None:
        raise TypeError("block_size is the size of tgt_block_mask's / memory_block_mask's blocks: pass it with one")
    if memory_segment_ids is not None and tgt_segment_ids is None:
        raise TypeError(
            "memory_segment_ids needs tgt_segment_ids: a target position reads the memory of its own segment"
        )
    cross_q = tgt_segment_ids if memory_segment_ids is not None else None
    return (
        (tgt_segment_ids, tgt_segment_ids, None, tgt_block_mask, block_size),
        (cross_q, memory_segment_ids, None, memory_block_mask, block_size),
    )


def _check_packing(src_ids, tgt_ids, src_block_mask, tgt_block_mask, memory_block_mask, block_size):
    """A Transformer's block masks (forward's src_segment_ids,
    tgt_segment_ids, src_block_mask, tgt_block_mask, memory_block_mask,
    block_size) checked: the memory's segments are the source's."""
    if src_ids is not None and tgt_ids is None:
        raise TypeError("src_segment_ids needs tgt_segment_ids: target segment k reads source segment k")
    if block_size is not None and src_block_mask is None and tgt_block_mask is None and memory_block_mask is None:
        raise TypeError("block_size is the size of a block mask's blocks: pass it with one")


def _self_masks(layer, x, attn_mask, key_padding_mask, is_causal, batched, names, blocks=_NO_BLOCKS, block_names=()):
    """The self-attention's masks as the C layer's keywords. With
    prefix_lengths (blocks[2]) the attention is causal but for the prefix
    (the kernel's causal flag on); a causal mask would hide the prefix."""
    B, L, _ = x.shape
    masks = _masks(attn_mask, key_padding_mask, is_causal, B, layer.nhead, L, L, x.dtype, names, batched, _SELF_MASKS)
    if blocks[2] is not None:
        if is_causal:
            raise ValueError(
                f"prefix_lengths makes the self-attention causal outside the prefix; {names[2]}=True "
                f"(and the causal {names[0]}) would hide the prefix: pass neither"
            )
        masks["is_causal"] = True
    masks.update(_blocks("self_", B, layer.nhead, L, L, blocks, block_names))
    return masks


def _cross_masks(layer, x, memory, memory_mask, memory_key_padding_mask, memory_is_causal, batched, blocks=_NO_BLOCKS):
    B, L, _ = x.shape
    S = memory.shape[1]
    masks = _masks(
        memory_mask,
        memory_key_padding_mask,
        memory_is_causal,
        B,
        layer.nhead,
        L,
        S,
        x.dtype,
        _CROSS_MASKS,
        batched,
        _CROSS_MASKS,
    )
    masks.update(_blocks("cross_", B, layer.nhead, L, S, blocks, _MEMORY_BLOCKS))
    return masks


def _decoder_masks(layer, x, mem, masks, batched, blocks):
    """A decoder layer's (self masks, cross masks) as the C layer's keywords;
    masks: torch's six (tgt_mask, memory_mask, tgt_key_padding_mask,
    memory_key_padding_mask, tgt_is_causal, memory_is_causal); blocks:
    _decoder_blocks'."""
    tgt_mask, memory_mask, tgt_kpm, memory_kpm, tgt_is_causal, memory_is_causal = masks
    names = ("tgt_mask", "tgt_key_padding_mask", "tgt_is_causal")
    sm = _self_masks(layer, x, tgt_mask, tgt_kpm, tgt_is_causal, batched, names, blocks[0], _TGT_BLOCKS)
    cm = _cross_masks(layer, x, mem, memory_mask, memory_kpm, memory_is_causal, batched, blocks[1])
    return sm, cm


def _unbatch(a, batched):
    return a if batched or a is None else a[0]


class TransformerEncoderLayer(_Layer):
    """``torch.nn.TransformerEncoderLayer(..., batch_first=True)``: self-attention
    and a feed-forward block, each with a residual connection, dropout and a
    layer norm (after, as in the paper, or before with ``norm_first``).

    Parameters
    ----------
    d_model : int, E, the width of the inputs and outputs
    nhead : int, divides d_model
    dim_feedforward : int, the feed-forward block's hidden width
    dropout : float in [0, 1] (training mode only)
    activation : "relu" or "gelu" (or torch.nn.functional.relu / gelu), or
        attnc.nn.GELU(approximate="tanh") (torch.nn.GELU's works too)
    layer_norm_eps : float, the norms' eps
    batch_first : must be True (attnc's modules are batch first)
    norm_first : bool, the norms before each block (pre-norm) instead of after
    bias : bool, whether the linear layers and norms have biases
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (torch's) and the dropout streams
    num_kv_heads : int dividing nhead, or None (nhead): grouped-query
        attention in every attention block (1: multi-query attention), as
        attnc.nn.MultiheadAttention takes it
    rotary : attnc.nn.RotaryEmbedding of dim d_model / nhead, or None: RoPE
        on the self-attention's queries and keys (each head's), at positions
        0 .. L - 1, in the C layer (forward and backward)
    sinks, alibi, window, softcap : the self-attention's options of today's
        models, as attnc.nn.MultiheadAttention takes them (sinks=True: a
        learned ``self_attn.sinks`` (nhead,); alibi=True: the fixed
        attnc.alibi_slopes(nhead); window=(left, right); softcap), applied by
        the C layer in the forward, the backward (the sinks' gradient) and
        cached decoding (attnc.nn.decode; query i at absolute position i)
    attention : "softmax" (default) or "sigmoid": how every attention block
        of the layer turns scores into weights; sigmoid is p_ij = sigmoid(s_ij
        + sigmoid_bias) with no normalisation (Ramapuram et al. 2024; not
        with sinks). Named so because ``activation`` is the feed-forward
        block's, as in torch.
    sigmoid_bias : float or None, sigmoid's bias b; None: -log of each
        attention's number of keys per call (the paper's -log n). Decoding
        token by token (attnc.nn.decode) needs it fixed, e.g. -log of the
        training length: the default would make a position's output depend
        on the length of the whole sequence.

    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False,
    *, need_weights=False, src_segment_ids=None, prefix_lengths=None,
    src_block_mask=None, block_size=None)``: src (B, L, E) or (L, E), the
    module's dtype; src_mask (L, L) or (B nhead, L, L), bool (True = not
    allowed) or float (added); src_key_padding_mask (B, L) bool (True =
    padding) -> the output (B, L, E), and with need_weights also the
    self-attention weights per head (B, nhead, L, L). The block masks, which
    the C kernel applies tile by tile (skipping the tiles they exclude):
    src_segment_ids (B, L) or (L,) integers, packed sequences (position i
    attends only positions of its own id; with is_causal, causally within
    it); prefix_lengths (B,) or an int >= 0, a prefix LM (causal, but every
    position sees the first prefix_lengths[b]; it makes the attention causal
    itself: pass no is_causal or causal mask); src_block_mask (B or 1, nhead
    or 1, ceil(L / bq), ceil(L / bk)) bool, True = the block is computed, with
    block_size bq or (bq, bk). ``attnc.vjp(layer, src, ...)`` gives the
    gradients of ``src`` and of every parameter, keyed by state_dict name.

    ``state_dict()`` (torch's names): ``self_attn.in_proj_weight`` (3E, E),
    ``self_attn.in_proj_bias`` (3E,), ``self_attn.out_proj.weight`` (E, E),
    ``self_attn.out_proj.bias`` (E,), ``linear1.weight`` (F, E),
    ``linear1.bias`` (F,), ``linear2.weight`` (E, F), ``linear2.bias`` (E,),
    ``norm1.weight``, ``norm1.bias``, ``norm2.weight``, ``norm2.bias`` (E,);
    F = dim_feedforward.

    Example
    -------
    >>> layer = attnc.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, seed=0).eval()
    >>> out, w = layer(np.random.rand(2, 5, 16).astype(np.float32), need_weights=True)
    >>> out.shape, out.dtype, w.shape
    ((2, 5, 16), dtype('float32'), (2, 4, 5, 5))
    >>> len(layer.state_dict()), layer.state_dict()["linear1.weight"].shape
    (12, (32, 16))
    >>> oss = attnc.nn.TransformerEncoderLayer(16, 4, 32, sinks=True, alibi=True, window=(3, 0), seed=0).eval()
    >>> x = np.random.rand(2, 9, 16).astype(np.float32)
    >>> out, w = oss(x, need_weights=True)        # window (3, 0): causal, each query sees 4 keys
    >>> int((w[0, 0, 8] > 0).sum()), oss.state_dict()["self_attn.sinks"].shape
    (4, (4,))
    >>> attnc.vjp(oss, x)[1](np.ones_like(out))["self_attn.sinks"].shape
    (4,)
    >>> packed = np.array([[0, 0, 0, 1, 1, 1, 1, 1, 1]] * 2)  # two sequences in each row
    >>> w = layer(x, src_segment_ids=packed, need_weights=True)[1]
    >>> bool(np.all(w[:, :, :3, 3:] == 0)), bool(np.all(w[:, :, 3:, :3] == 0))
    (True, True)
    >>> w = layer(x, prefix_lengths=3, need_weights=True)[1]  # prefix LM: the first 3 seen by all, causal after
    >>> bool(np.all(w[:, :, 0, :3] > 0)), bool(np.all(w[:, :, 4, 5:] == 0))
    (True, True)
    >>> sig = attnc.nn.TransformerEncoderLayer(16, 4, 32, attention="sigmoid", sigmoid_bias=-2.0, seed=0).eval()
    >>> w = sig(x, need_weights=True)[1]  # not normalised: rows need not sum to 1
    >>> bool(np.all((w > 0) & (w < 1)))
    True
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = True,
        norm_first: bool = False,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
        num_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
        sinks: bool = False,
        alibi: bool = False,
        window: tuple[int | None, int | None] | None = None,
        softcap: float | None = None,
        attention: Literal["softmax", "sigmoid"] = "softmax",
        sigmoid_bias: float | None = None,
    ) -> None:
        super().__init__(dtype)
        self._build(
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation,
            layer_norm_eps,
            batch_first,
            norm_first,
            bias,
            dtype,
            seed,
            num_kv_heads,
            rotary,
            dict(sinks=sinks, alibi=alibi, window=window, softcap=softcap),
            attention,
            sigmoid_bias,
        )

    def _call(self, src, src_mask, src_key_padding_mask, is_causal, need_weights, keep, blocks):
        x, batched = _rows(src, "src", self.dtype, self.d_model)
        names = ("src_mask", "src_key_padding_mask", "is_causal")
        masks = _self_masks(self, x, src_mask, src_key_padding_mask, is_causal, batched, names, blocks, _SRC_BLOCKS)
        out, (w, _), state = self._run(x, None, masks, None, need_weights, keep)
        outputs = (_unbatch(out, batched), _unbatch(w, batched)) if need_weights else _unbatch(out, batched)
        return outputs, (self, state, batched, need_weights)

    def forward(
        self,
        src: ArrayLike,
        src_mask: ArrayLike | None = None,
        src_key_padding_mask: ArrayLike | None = None,
        is_causal: bool = False,
        *,
        need_weights: bool = False,
        src_segment_ids: ArrayLike | None = None,
        prefix_lengths: ArrayLike | None = None,
        src_block_mask: ArrayLike | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Array | tuple[Array, Array]:
        blocks = _encoder_blocks(src_segment_ids, prefix_lengths, src_block_mask, block_size)
        return self._call(src, src_mask, src_key_padding_mask, is_causal, need_weights, False, blocks)[0]

    def _vjp_forward(
        self,
        src,
        src_mask=None,
        src_key_padding_mask=None,
        is_causal=False,
        *,
        need_weights=False,
        src_segment_ids=None,
        prefix_lengths=None,
        src_block_mask=None,
        block_size=None,
    ):
        blocks = _encoder_blocks(src_segment_ids, prefix_lengths, src_block_mask, block_size)
        return self._call(src, src_mask, src_key_padding_mask, is_causal, need_weights, True, blocks)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        layer, state, batched, need_weights = saved
        _no_weights_cotangent(need_weights, cotangents)
        dx, _, grads = layer._grads(state, _cotangent_rows(cotangents[0], state[1]))
        grads["src"] = _unbatch(dx, batched)
        return grads


def _weights_gradient_buffer(state):
    """Where a layer's backward writes the gradient with respect to its
    self-attention probabilities: (B, H, L, L), or None when the forward ran
    with dropout (the returned weights are then not the ones used)."""
    x, config = state[1], state[4]
    if config["dropout"] != 0:
        return None
    B, L, _ = x.shape
    return np.empty((B, config["nhead"], L, L), x.dtype)


def _no_weights_cotangent(need_weights, cotangents):
    """Gradients do not flow back through returned attention weights."""
    if need_weights and cotangents[1] is not None:
        raise NotImplementedError(
            "gradients through the returned attention weights of a transformer are not "
            "supported; pass None as their cotangent"
        )


def _cotangent_rows(c, x):
    return np.zeros_like(x) if c is None else np.asarray(c, x.dtype).reshape(x.shape)


class TransformerDecoderLayer(_Layer):
    """``torch.nn.TransformerDecoderLayer(..., batch_first=True)``: masked
    self-attention, cross-attention on the encoder's output (memory) and a
    feed-forward block, each with a residual connection, dropout and a norm.

    Parameters
    ----------
    d_model : int, E, the width of the inputs and outputs
    nhead : int, divides d_model
    dim_feedforward : int, the feed-forward block's hidden width
    dropout : float in [0, 1] (training mode only)
    activation : "relu" or "gelu" (or torch.nn.functional.relu / gelu), or
        attnc.nn.GELU(approximate="tanh") (torch.nn.GELU's works too)
    layer_norm_eps : float, the norms' eps
    batch_first : must be True (attnc's modules are batch first)
    norm_first : bool, the norms before each block (pre-norm) instead of after
    bias : bool, whether the linear layers and norms have biases
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (torch's) and the dropout streams
    num_kv_heads : int dividing nhead, or None (nhead): grouped-query
        attention in every attention block (1: multi-query attention), as
        attnc.nn.MultiheadAttention takes it
    rotary : attnc.nn.RotaryEmbedding of dim d_model / nhead, or None: RoPE
        on the self-attention's queries and keys (each head's), at positions
        0 .. L - 1, in the C layer (forward and backward)
    sinks, alibi, window, softcap : the self-attention's options of today's
        models, as attnc.nn.MultiheadAttention takes them (sinks=True: a
        learned ``self_attn.sinks`` (nhead,); alibi=True: the fixed
        attnc.alibi_slopes(nhead); window=(left, right); softcap), applied by
        the C layer in the forward, the backward (the sinks' gradient) and
        cached decoding (attnc.nn.decode; query i at absolute position i)
    attention, sigmoid_bias : "softmax" or "sigmoid" in the self- and the
        cross-attention, as in TransformerEncoderLayer (sigmoid_bias None:
        -log T in the self-attention, -log S in the cross-attention)

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=False, memory_is_causal=False, *, need_weights=False,
    tgt_segment_ids=None, memory_segment_ids=None, tgt_block_mask=None,
    memory_block_mask=None, block_size=None)``: tgt (B, T, E) and memory (B,
    S, E) (or both unbatched), the module's dtype; masks with torch's
    meanings (tgt_mask (T, T), memory_mask (T, S), bool True = not allowed or
    float added; key padding masks (B, T), (B, S) bool, True = padding) ->
    the output (B, T, E), and with need_weights also ``(self_weights (B,
    nhead, T, T), cross_weights (B, nhead, T, S))``. Packed pairs: with
    tgt_segment_ids (B, T) integers a target position attends only targets
    of its own id (causally with tgt_is_causal); with memory_segment_ids (B,
    S) too (it needs tgt_segment_ids) it reads only the memory positions of
    its id, so several (source, target) pairs share a row. tgt_block_mask
    (B or 1, nhead or 1, ceil(T / bq), ceil(T / bk)) and memory_block_mask
    (..., ceil(T / bq), ceil(S / bk)), bool (True = computed), with
    block_size bq or (bq, bk). ``attnc.vjp`` gives the gradients of ``tgt``,
    ``memory`` and every parameter.

    ``state_dict()`` (torch's names): ``self_attn.*`` and ``multihead_attn.*``
    (each ``in_proj_weight`` (3E, E), ``in_proj_bias`` (3E,),
    ``out_proj.weight`` (E, E), ``out_proj.bias`` (E,)), ``linear1.weight``
    (F, E), ``linear1.bias`` (F,), ``linear2.weight`` (E, F), ``linear2.bias``
    (E,), ``norm1.*``, ``norm2.*``, ``norm3.*`` (``weight``, ``bias`` (E,)).

    Example
    -------
    >>> layer = attnc.nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, seed=0).eval()
    >>> tgt, memory = np.random.rand(2, 5, 16).astype(np.float32), np.random.rand(2, 7, 16).astype(np.float32)
    >>> mask = attnc.nn.Transformer.generate_square_subsequent_mask(5)
    >>> out, (ws, wc) = layer(tgt, memory, tgt_mask=mask, tgt_is_causal=True, need_weights=True)
    >>> out.shape, ws.shape, wc.shape, bool(np.all(np.triu(ws, 1) == 0))
    ((2, 5, 16), (2, 4, 5, 5), (2, 4, 5, 7), True)
    >>> len(layer.state_dict()), layer.state_dict()["multihead_attn.in_proj_weight"].shape
    (18, (48, 16))
    >>> tgt_ids, mem_ids = np.array([[0, 0, 1, 1, 1]] * 2), np.array([[0, 0, 0, 1, 1, 1, 1]] * 2)
    >>> _, (ws, wc) = layer(tgt, memory, tgt_segment_ids=tgt_ids, memory_segment_ids=mem_ids, need_weights=True)
    >>> bool(np.all(wc[:, :, :2, 3:] == 0)), bool(np.all(wc[:, :, 2:, :3] == 0))
    (True, True)
    """

    _decoder = True
    _param_names = _layer_param_names(True)

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = True,
        norm_first: bool = False,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
        num_kv_heads: int | None = None,
        rotary: RotaryEmbedding | None = None,
        sinks: bool = False,
        alibi: bool = False,
        window: tuple[int | None, int | None] | None = None,
        softcap: float | None = None,
        attention: Literal["softmax", "sigmoid"] = "softmax",
        sigmoid_bias: float | None = None,
    ) -> None:
        super().__init__(dtype)
        self._build(
            d_model,
            nhead,
            dim_feedforward,
            dropout,
            activation,
            layer_norm_eps,
            batch_first,
            norm_first,
            bias,
            dtype,
            seed,
            num_kv_heads,
            rotary,
            dict(sinks=sinks, alibi=alibi, window=window, softcap=softcap),
            attention,
            sigmoid_bias,
        )

    def _call(self, tgt, memory, masks, need_weights, keep, blocks):
        x, mem, batched = _tgt_and_memory(tgt, memory, self.dtype, self.d_model)
        sm, cm = _decoder_masks(self, x, mem, masks, batched, blocks)
        out, (ws, wc), state = self._run(x, mem, sm, cm, need_weights, keep)
        if need_weights:
            outputs = (_unbatch(out, batched), (_unbatch(ws, batched), _unbatch(wc, batched)))
        else:
            outputs = _unbatch(out, batched)
        return outputs, (self, state, batched, need_weights)

    def forward(
        self,
        tgt: ArrayLike,
        memory: ArrayLike,
        tgt_mask: ArrayLike | None = None,
        memory_mask: ArrayLike | None = None,
        tgt_key_padding_mask: ArrayLike | None = None,
        memory_key_padding_mask: ArrayLike | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
        *,
        need_weights: bool = False,
        tgt_segment_ids: ArrayLike | None = None,
        memory_segment_ids: ArrayLike | None = None,
        tgt_block_mask: ArrayLike | None = None,
        memory_block_mask: ArrayLike | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Array | tuple[Array, tuple[Array, Array]]:
        masks = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal)
        blocks = _decoder_blocks(tgt_segment_ids, memory_segment_ids, tgt_block_mask, memory_block_mask, block_size)
        return self._call(tgt, memory, masks, need_weights, False, blocks)[0]

    def _vjp_forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
        *,
        need_weights=False,
        tgt_segment_ids=None,
        memory_segment_ids=None,
        tgt_block_mask=None,
        memory_block_mask=None,
        block_size=None,
    ):
        masks = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal)
        blocks = _decoder_blocks(tgt_segment_ids, memory_segment_ids, tgt_block_mask, memory_block_mask, block_size)
        return self._call(tgt, memory, masks, need_weights, True, blocks)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        layer, state, batched, need_weights = saved
        _no_weights_cotangent(need_weights, cotangents)
        dx, dmem, grads = layer._grads(state, _cotangent_rows(cotangents[0], state[1]))
        grads["tgt"], grads["memory"] = _unbatch(dx, batched), _unbatch(dmem, batched)
        return grads


def _clones(layer, num_layers):
    """num_layers deep copies of layer (as torch: identical initial weights),
    each with its own dropout stream."""
    num_layers = int_arg("num_layers", num_layers, low=0)
    base = int(layer._rng.integers(2**63))
    clones = _copies(layer, num_layers)
    for i, c in enumerate(clones):
        object.__setattr__(c, "_rng", np.random.default_rng([base, i]))
    return clones


def _stack(stack, layer, cls, num_layers, norm, name):
    """Set up a TransformerEncoder / TransformerDecoder: num_layers copies of
    layer as ``layers.0``, ... and the optional final norm."""
    if not isinstance(layer, cls):
        raise TypeError(f"{name} must be an attnc.nn.{cls.__name__}, got {type(layer).__name__}")
    Module.__init__(stack, layer.dtype)
    stack.layers = ModuleList(_clones(layer, num_layers), layer.dtype)
    stack.num_layers = len(stack.layers)
    if norm is not None:
        stack.norm = norm
    else:
        object.__setattr__(stack, "norm", None)


def _final_norm(norm, x, keep):
    """The stack's optional final norm: (y, state)."""
    if norm is None:
        return x, None
    y, state = _norm_forward(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    return y, state if keep else None


def _final_norm_backward(norm, state, dy, prefix, grads):
    if norm is None:
        return dy
    g = _norm_backward(state, (dy,))
    for name in ("weight", "bias"):
        if name in g:
            grads[f"{prefix}norm.{name}"] = g[name]
    return g["input"]


class TransformerEncoder(Module):
    """``torch.nn.TransformerEncoder(encoder_layer, num_layers, norm=None)``:
    num_layers copies of encoder_layer (``layers.0``, ...) and an optional
    final norm.

    Parameters
    ----------
    encoder_layer : attnc.nn.TransformerEncoderLayer, copied num_layers times
        (identical initial weights, as torch; each copy its own dropout stream)
    num_layers : int >= 0
    norm : attnc.nn.LayerNorm or None, applied to the last layer's output
    enable_nested_tensor, mask_check : bool, torch's; accepted and ignored

    The dtype (float32 or float64) is the layer's.

    ``forward(src, mask=None, src_key_padding_mask=None, is_causal=None, *,
    need_weights=False, src_segment_ids=None, prefix_lengths=None,
    src_block_mask=None, block_size=None)``: src (B, L, E) or (L, E); masks
    and block masks as ``TransformerEncoderLayer``'s (the same in every
    layer) -> the output (B, L, E), and with
    need_weights also the list of every layer's self-attention weights (B,
    nhead, L, L). With is_causal None, a mask equal to the causal mask is
    detected (as torch) and its masked tiles are skipped.

    ``attnc.vjp(encoder, src, ..., need_weights=True)``: pullback(dout, None)
    gives, besides the gradients by state_dict name and ``"src"``,
    ``"attn_weights"``: per layer, the gradient with respect to its attention
    weights (B, nhead, L, L) (None for a layer run with dropout, in training
    mode), which ``attnc.attribution.relevance`` takes.

    ``state_dict()``: ``layers.{i}.`` + each layer's names (see
    TransformerEncoderLayer), and ``norm.weight``, ``norm.bias`` (E,) with a norm.

    Example
    -------
    >>> layer = attnc.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, seed=0)
    >>> encoder = attnc.nn.TransformerEncoder(layer, 2, norm=attnc.nn.LayerNorm(16)).eval()
    >>> mask = attnc.nn.Transformer.generate_square_subsequent_mask(5)
    >>> out, ws = encoder(np.random.rand(2, 5, 16).astype(np.float32), mask=mask, need_weights=True)
    >>> out.shape, len(ws), ws[1].shape
    ((2, 5, 16), 2, (2, 4, 5, 5))
    >>> [k for k in encoder.state_dict() if not k.startswith("layers.0.")][-4:]
    ['layers.1.norm2.weight', 'layers.1.norm2.bias', 'norm.weight', 'norm.bias']
    """

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: LayerNorm | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        _stack(self, encoder_layer, TransformerEncoderLayer, num_layers, norm, "encoder_layer")

    def _forward(
        self,
        src,
        mask,
        src_key_padding_mask,
        is_causal,
        need_weights,
        keep,
        names=("mask", "src_key_padding_mask", "is_causal"),
        blocks=_NO_BLOCKS,
    ):
        """(outputs, saved for _vjp_backward); names: the caller's argument
        names, for errors; blocks: _encoder_blocks'."""
        first = self.layers[0] if self.num_layers else None
        d_model = first.d_model if first else np.shape(src)[-1]
        x, batched = _rows(src, "src", self.dtype, d_model)
        if is_causal is None:
            is_causal = mask is not None and _is_causal_mask(mask, x.shape[1])
        states, weights = [], []
        if first is not None:
            masks = _self_masks(first, x, mask, src_key_padding_mask, is_causal, batched, names, blocks, _SRC_BLOCKS)
            for layer in self.layers:
                x_in = x
                x, (w, _), state = layer._run(x_in, None, masks, None, need_weights, keep)
                states.append(state)
                weights.append(_unbatch(w, batched))
        y, norm_state = _final_norm(self.norm, x, keep)
        out = _unbatch(y, batched)
        return ((out, weights) if need_weights else out), (
            self,
            states,
            norm_state,
            batched,
            need_weights,
            out.shape,  # src's (not np.shape(src): src may be any array object, such as a DLPack capsule's owner)
        )

    def forward(
        self,
        src: ArrayLike,
        mask: ArrayLike | None = None,
        src_key_padding_mask: ArrayLike | None = None,
        is_causal: bool | None = None,
        *,
        need_weights: bool = False,
        src_segment_ids: ArrayLike | None = None,
        prefix_lengths: ArrayLike | None = None,
        src_block_mask: ArrayLike | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Array | tuple[Array, list[Array]]:
        blocks = _encoder_blocks(src_segment_ids, prefix_lengths, src_block_mask, block_size)
        return self._forward(src, mask, src_key_padding_mask, is_causal, need_weights, False, blocks=blocks)[0]

    def _vjp_forward(
        self,
        src,
        mask=None,
        src_key_padding_mask=None,
        is_causal=None,
        *,
        need_weights=False,
        src_segment_ids=None,
        prefix_lengths=None,
        src_block_mask=None,
        block_size=None,
    ):
        blocks = _encoder_blocks(src_segment_ids, prefix_lengths, src_block_mask, block_size)
        return self._forward(src, mask, src_key_padding_mask, is_causal, need_weights, True, blocks=blocks)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, states, norm_state, batched, need_weights, src_shape = saved
        _no_weights_cotangent(need_weights, cotangents)
        grads = {}
        dy = cotangents[0]
        shape = (1,) + tuple(src_shape) if not batched else tuple(src_shape)
        dy = np.zeros(shape, self.dtype) if dy is None else np.asarray(dy, self.dtype).reshape(shape)
        dy = _final_norm_backward(self.norm, norm_state, dy, "", grads)
        dweights = [_weights_gradient_buffer(state) if need_weights else None for state in states]
        for i in reversed(range(len(states))):
            dy, _, g = self.layers[i]._grads(states[i], dy, dweights[i])
            grads.update({f"layers.{i}.{k}": v for k, v in g.items()})
        grads["src"] = _unbatch(dy, batched)
        if need_weights:
            grads["attn_weights"] = [_unbatch(w, batched) for w in dweights]
        return grads


class TransformerDecoder(Module):
    """``torch.nn.TransformerDecoder(decoder_layer, num_layers, norm=None)``:
    num_layers copies of decoder_layer (``layers.0``, ...) and an optional
    final norm.

    Parameters
    ----------
    decoder_layer : attnc.nn.TransformerDecoderLayer, copied num_layers times
        (identical initial weights, as torch; each copy its own dropout stream)
    num_layers : int >= 0
    norm : attnc.nn.LayerNorm or None, applied to the last layer's output

    The dtype (float32 or float64) is the layer's.

    ``forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=None, memory_is_causal=False, *, need_weights=False,
    tgt_segment_ids=None, memory_segment_ids=None, tgt_block_mask=None,
    memory_block_mask=None, block_size=None)``: tgt (B, T, E), memory (B, S,
    E); masks and block masks as ``TransformerDecoderLayer``'s (the same in
    every layer) -> the output (B, T, E), and with need_weights also ``{"self": [(B,
    nhead, T, T), ...], "cross": [(B, nhead, T, S), ...]}``, every layer's
    weights per head.

    ``state_dict()``: ``layers.{i}.`` + each layer's names (see
    TransformerDecoderLayer), and ``norm.weight``, ``norm.bias`` (E,) with a norm.

    Example
    -------
    >>> layer = attnc.nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, seed=0)
    >>> decoder = attnc.nn.TransformerDecoder(layer, 2).eval()
    >>> tgt, memory = np.random.rand(2, 5, 16).astype(np.float32), np.random.rand(2, 7, 16).astype(np.float32)
    >>> out, w = decoder(tgt, memory, need_weights=True)
    >>> out.shape, len(w["self"]), w["cross"][0].shape
    ((2, 5, 16), 2, (2, 4, 5, 7))
    >>> decoder.state_dict()["layers.1.multihead_attn.out_proj.weight"].shape
    (16, 16)
    """

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: LayerNorm | None = None) -> None:
        _stack(self, decoder_layer, TransformerDecoderLayer, num_layers, norm, "decoder_layer")

    def _forward(self, tgt, memory, masks, need_weights, keep, blocks=_NO_BLOCKS):
        """masks: torch's six, as _decoder_masks takes them; blocks: _decoder_blocks'."""
        first = self.layers[0] if self.num_layers else None
        d_model = first.d_model if first else np.shape(tgt)[-1]
        x, mem, batched = _tgt_and_memory(tgt, memory, self.dtype, d_model)
        tgt_mask, tgt_is_causal = masks[0], masks[4]
        if tgt_is_causal is None:
            tgt_is_causal = tgt_mask is not None and _is_causal_mask(tgt_mask, x.shape[1])
            masks = masks[:4] + (tgt_is_causal,) + masks[5:]
        states, ws, wc = [], [], []
        if first is not None:
            sm, cm = _decoder_masks(first, x, mem, masks, batched, blocks)
            for layer in self.layers:
                x, (w_self, w_cross), state = layer._run(x, mem, sm, cm, need_weights, keep)
                states.append(state)
                ws.append(_unbatch(w_self, batched))
                wc.append(_unbatch(w_cross, batched))
        y, norm_state = _final_norm(self.norm, x, keep)
        out = _unbatch(y, batched)
        outputs = (out, {"self": ws, "cross": wc}) if need_weights else out
        return outputs, (self, (states, norm_state, batched, need_weights, x.shape, mem))

    def forward(
        self,
        tgt: ArrayLike,
        memory: ArrayLike,
        tgt_mask: ArrayLike | None = None,
        memory_mask: ArrayLike | None = None,
        tgt_key_padding_mask: ArrayLike | None = None,
        memory_key_padding_mask: ArrayLike | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
        *,
        need_weights: bool = False,
        tgt_segment_ids: ArrayLike | None = None,
        memory_segment_ids: ArrayLike | None = None,
        tgt_block_mask: ArrayLike | None = None,
        memory_block_mask: ArrayLike | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Array | tuple[Array, dict[str, list[Array]]]:
        masks = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal)
        blocks = _decoder_blocks(tgt_segment_ids, memory_segment_ids, tgt_block_mask, memory_block_mask, block_size)
        return self._forward(tgt, memory, masks, need_weights, False, blocks)[0]

    def _vjp_forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
        *,
        need_weights=False,
        tgt_segment_ids=None,
        memory_segment_ids=None,
        tgt_block_mask=None,
        memory_block_mask=None,
        block_size=None,
    ):
        masks = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal)
        blocks = _decoder_blocks(tgt_segment_ids, memory_segment_ids, tgt_block_mask, memory_block_mask, block_size)
        return self._forward(tgt, memory, masks, need_weights, True, blocks)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, (states, norm_state, batched, need_weights, xshape, mem) = saved
        _no_weights_cotangent(need_weights, cotangents)
        grads = {}
        dy = cotangents[0]
        dy = np.zeros(xshape, self.dtype) if dy is None else np.asarray(dy, self.dtype).reshape(xshape)
        dy = _final_norm_backward(self.norm, norm_state, dy, "", grads)
        dmem = np.zeros_like(mem)
        for i in reversed(range(len(states))):
            dy, dm, g = self.layers[i]._grads(states[i], dy)
            dmem += dm
            grads.update({f"layers.{i}.{k}": v for k, v in g.items()})
        grads["tgt"], grads["memory"] = _unbatch(dy, batched), _unbatch(dmem, batched)
        return grads


class Transformer(Module):
    """``torch.nn.Transformer(..., batch_first=True)``: an encoder and a decoder
    stack, each with a final LayerNorm, initialised as torch does (Xavier
    uniform for every matrix).

    Parameters
    ----------
    d_model : int, E, the width of the inputs and outputs
    nhead : int, divides d_model
    num_encoder_layers, num_decoder_layers : int, the stacks' depths
    dim_feedforward : int, the feed-forward blocks' hidden width
    dropout : float in [0, 1] (training mode only)
    activation : "relu" or "gelu", or attnc.nn.GELU(approximate="tanh") (see TransformerEncoderLayer)
    custom_encoder : attnc.nn.TransformerEncoder or None, used instead of building one
    custom_decoder : attnc.nn.TransformerDecoder or None, likewise
    layer_norm_eps : float, the norms' eps
    batch_first : must be True (attnc's modules are batch first)
    norm_first : bool, pre-norm layers
    bias : bool, whether the linear layers and norms have biases
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation and the dropout streams

    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
    memory_is_causal=False, *, need_weights=False, src_segment_ids=None,
    tgt_segment_ids=None, src_block_mask=None, tgt_block_mask=None,
    memory_block_mask=None, block_size=None)``: src (B, S, E) and tgt (B, T,
    E), the module's dtype; masks as the layers' -> the decoder's output (B,
    T, E), and with need_weights also ``{"encoder": [...],
    "decoder_self": [...], "decoder_cross": [...]}`` (per layer, per head).
    Packed (source, target) pairs: src_segment_ids (B, S) and
    tgt_segment_ids (B, T) (src's need tgt's), the encoder's segments, the
    decoder's and the memory's (the source's), so target segment k reads
    source segment k only; block masks as the encoder's and decoder's.
    ``attnc.vjp(model, src, tgt, ...)`` gives the gradients of src, tgt and
    every parameter.

    ``state_dict()`` (torch's names): ``encoder.layers.{i}.*`` (see
    TransformerEncoderLayer), ``encoder.norm.weight``, ``encoder.norm.bias``
    (E,), ``decoder.layers.{i}.*`` (see TransformerDecoderLayer),
    ``decoder.norm.weight``, ``decoder.norm.bias`` (E,).

    Example
    -------
    >>> model = attnc.nn.Transformer(16, 4, 2, 2, dim_feedforward=32, seed=0).eval()
    >>> src, tgt = np.random.rand(2, 7, 16), np.random.rand(2, 5, 16)
    >>> mask = model.generate_square_subsequent_mask(5)
    >>> model(src.astype(np.float32), tgt.astype(np.float32), tgt_mask=mask).shape
    (2, 5, 16)
    >>> sd = model.state_dict()
    >>> len(sd), sd["decoder.layers.1.multihead_attn.in_proj_weight"].shape, sd["encoder.norm.bias"].shape
    (64, (48, 16), (16,))
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = "relu",
        custom_encoder: TransformerEncoder | None = None,
        custom_decoder: TransformerDecoder | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = True,
        norm_first: bool = False,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        if custom_encoder is not None and not isinstance(custom_encoder, TransformerEncoder):
            raise TypeError(
                f"custom_encoder must be an attnc.nn.TransformerEncoder, got {type(custom_encoder).__name__}"
            )
        if custom_decoder is not None and not isinstance(custom_decoder, TransformerDecoder):
            raise TypeError(
                f"custom_decoder must be an attnc.nn.TransformerDecoder, got {type(custom_decoder).__name__}"
            )
        rng = np.random.default_rng(seed)
        seeds = int(rng.integers(2**63)), int(rng.integers(2**63))
        kw = dict(
            dim_feedforward=dim_feedforward,
            dropout=dropout,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            batch_first=batch_first,
            norm_first=norm_first,
            bias=bias,
            dtype=dtype,
        )
        for name, custom, stack, layer, num_layers, s in (
            ("encoder", custom_encoder, TransformerEncoder, TransformerEncoderLayer, num_encoder_layers, seeds[0]),
            ("decoder", custom_decoder, TransformerDecoder, TransformerDecoderLayer, num_decoder_layers, seeds[1]),
        ):
            if custom is None:  # only the stacks used are built
                custom = stack(
                    layer(d_model, nhead, seed=s, **kw),
                    num_layers,
                    LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype),
                )
            setattr(self, name, custom)
        self.d_model, self.nhead, self.batch_first = int_arg("d_model", d_model), int_arg("nhead", nhead), True

        def xavier_uniform(name, p):  # torch's _reset_parameters: every matrix
            if p.ndim < 2:
                return None
            bound = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
            return rng.uniform(-bound, bound, p.shape)

        self._initialise(xavier_uniform)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, dtype: DTypeLike = np.float32) -> Array:
        """The causal mask (sz, sz): -inf above the diagonal, 0 elsewhere (float, as torch)."""
        sz = int_arg("sz", sz, low=0)
        return np.triu(np.full((sz, sz), -np.inf, dtype=dtype), 1)

    def _forward(
        self,
        src,
        tgt,
        src_mask,
        tgt_mask,
        memory_mask,
        src_key_padding_mask,
        tgt_key_padding_mask,
        memory_key_padding_mask,
        src_is_causal,
        tgt_is_causal,
        memory_is_causal,
        need_weights,
        keep,
        packing=(None,) * 6,
    ):
        """packing: (src_segment_ids, tgt_segment_ids, src_block_mask,
        tgt_block_mask, memory_block_mask, block_size), as forward takes them."""
        _check_packing(*packing)
        src_ids, tgt_ids, src_block_mask, tgt_block_mask, memory_block_mask, block_size = packing
        enc_blocks = (src_ids, src_ids, None, src_block_mask, block_size)
        dec_size = block_size if tgt_block_mask is not None or memory_block_mask is not None else None
        dec_blocks = _decoder_blocks(tgt_ids, src_ids, tgt_block_mask, memory_block_mask, dec_size)
        s, t = np.shape(src), np.shape(tgt)
        if len(s) != len(t) or (len(s) == 3 and s[0] != t[0]):
            raise ValueError(f"src {shape_str(s)} and tgt {shape_str(t)} need the same batch size")
        enc_out, enc_state = self.encoder._forward(
            src,
            src_mask,
            src_key_padding_mask,
            src_is_causal,
            need_weights,
            keep,
            ("src_mask", "src_key_padding_mask", "src_is_causal"),
            enc_blocks,
        )
        memory, enc_w = enc_out if need_weights else (enc_out, None)
        masks = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal, memory_is_causal)
        dec_out, dec_state = self.decoder._forward(tgt, memory, masks, need_weights, keep, dec_blocks)
        if not need_weights:
            return dec_out, (enc_state, dec_state)
        out, dec_w = dec_out
        weights = {"encoder": enc_w, "decoder_self": dec_w["self"], "decoder_cross": dec_w["cross"]}
        return (out, weights), (enc_state, dec_state)

    def forward(
        self,
        src: ArrayLike,
        tgt: ArrayLike,
        src_mask: ArrayLike | None = None,
        tgt_mask: ArrayLike | None = None,
        memory_mask: ArrayLike | None = None,
        src_key_padding_mask: ArrayLike | None = None,
        tgt_key_padding_mask: ArrayLike | None = None,
        memory_key_padding_mask: ArrayLike | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
        *,
        need_weights: bool = False,
        src_segment_ids: ArrayLike | None = None,
        tgt_segment_ids: ArrayLike | None = None,
        src_block_mask: ArrayLike | None = None,
        tgt_block_mask: ArrayLike | None = None,
        memory_block_mask: ArrayLike | None = None,
        block_size: int | tuple[int, int] | None = None,
    ) -> Array | tuple[Array, dict[str, list[Array]]]:
        packing = (src_segment_ids, tgt_segment_ids, src_block_mask, tgt_block_mask, memory_block_mask, block_size)
        return self._forward(
            src,
            tgt,
            src_mask,
            tgt_mask,
            memory_mask,
            src_key_padding_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            src_is_causal,
            tgt_is_causal,
            memory_is_causal,
            need_weights,
            False,
            packing,
        )[0]

    def _vjp_forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal=False,
        *,
        need_weights=False,
        src_segment_ids=None,
        tgt_segment_ids=None,
        src_block_mask=None,
        tgt_block_mask=None,
        memory_block_mask=None,
        block_size=None,
    ):
        packing = (src_segment_ids, tgt_segment_ids, src_block_mask, tgt_block_mask, memory_block_mask, block_size)
        outputs, states = self._forward(
            src,
            tgt,
            src_mask,
            tgt_mask,
            memory_mask,
            src_key_padding_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            src_is_causal,
            tgt_is_causal,
            memory_is_causal,
            need_weights,
            True,
            packing,
        )
        return outputs, (self, states, need_weights)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, (enc_state, dec_state), need_weights = saved
        _no_weights_cotangent(need_weights, cotangents)
        dec_cot = (cotangents[0], None) if need_weights else (cotangents[0],)
        g_dec = TransformerDecoder._vjp_backward(dec_state, dec_cot)
        enc_cot = (g_dec.pop("memory"), None) if need_weights else (g_dec.pop("memory"),)
        g_enc = TransformerEncoder._vjp_backward(enc_state, enc_cot)
        g_enc.pop("attn_weights", None)  # the encoder-decoder's pullback gives parameters' and inputs' gradients only
        grads = {"src": g_enc.pop("src"), "tgt": g_dec.pop("tgt")}
        grads.update({f"encoder.{k}": v for k, v in g_enc.items()})
        grads.update({f"decoder.{k}": v for k, v in g_dec.items()})
        return grads
