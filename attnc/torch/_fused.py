"""The fused kernels as torch custom ops: attnc::scaled_dot_product_attention
and attnc::multi_head_attention, each with a fake (shapes and dtypes, for
torch.compile) and an autograd rule whose backward is another custom op
calling attnc's C backward.

The backward ops take tensors only (torch.compile cannot carry a Python
object from a forward to its backward): the forward op returns what the
backward needs (the output and its log-sum-exp) and the backward rebuilds the
kernel's arguments from the same inputs. Dropout's seed crosses as a 0-d
int64 tensor, drawn from torch's generator when the caller gives none, so a
compiled graph draws a fresh one each call and torch.manual_seed governs it.
"""

from __future__ import annotations

import ast
from typing import cast

import numpy as np
import torch

from ..attention import multihead as _mha
from ..attention import sdpa as _sdpa
from ._eager import eager, run
from ._tensors import check_tensor, from_tensor, seed_int, seed_tensor, view

_EMPTY = (0,)  # the shape of an output that was not asked for (custom ops return tensors, not None)


def _tensor(a: np.ndarray | None, like: torch.Tensor) -> torch.Tensor:
    """attnc's array as a contiguous tensor (the fakes promise contiguous
    outputs); None as the empty placeholder."""
    if a is None:
        return like.new_empty(_EMPTY)
    return torch.from_numpy(np.ascontiguousarray(a))


def _array(t: torch.Tensor | None, name: str) -> np.ndarray | None:
    return None if t is None else from_tensor(t, name, floats_only=False)


def _seed_tensor(seed: int | None, dropout_p: float) -> torch.Tensor | None:
    """The dropout seed as the ops take it: None without dropout."""
    return seed_tensor(seed) if dropout_p else None


def _seed(seed: torch.Tensor | None) -> int | None:
    return None if seed is None else seed_int(seed)


def _check_args(named: dict, masks: dict) -> None:
    for name, t in named.items():
        check_tensor(t, name)
    for name, t in masks.items():
        if t is not None:
            check_tensor(t, name, floats_only=False)


# --------------------------------------------------------------------------- the options of today's models

# The kernel's options (attnc.attention._spec.variant_options) that may be
# tensors: the floating-point ones get their gradients, the integer and
# boolean masks none (segment_ids' pair crosses as segment_ids and
# key_segment_ids). The ops carry the tensors given, in this order, as a
# list without None (torch's autograd takes a list holding a None for a
# constant, and would drop the gradients of the others under torch.compile),
# and their names under "tensors" in one string with every other option
# (the repr of the sorted (name, value) pairs: a constant to torch.compile,
# which traces repr but not json); an int prefix_lengths is in the string.
# A new option is one entry here if it may be a tensor, none otherwise.
VARIANT_TENSORS = ("alibi_slopes", "sinks", "segment_ids", "key_segment_ids", "prefix_lengths", "block_mask")
_FLOAT_TENSORS = ("alibi_slopes", "sinks")


def _split_variants(variants: dict) -> tuple[str, list[torch.Tensor]]:
    """The options given (None: off) as the ops take them: (the text of the
    others and of the tensors' names, the tensors in VARIANT_TENSORS'
    order)."""
    variants = dict(variants)
    labels = dict(zip(VARIANT_TENSORS, VARIANT_TENSORS))
    segments = variants.get("segment_ids")
    if isinstance(segments, (tuple, list)):
        if len(segments) != 2:
            raise TypeError(
                f"segment_ids must be a tensor or a pair (query_segments, key_segments), got {len(segments)} items"
            )
        variants["segment_ids"], variants["key_segment_ids"] = segments
        labels.update(segment_ids="segment_ids[0]", key_segment_ids="segment_ids[1]")
    names = []
    for name in VARIANT_TENSORS:
        t = variants.get(name)
        if t is not None and not (name == "prefix_lengths" and _is_int(t)):
            check_tensor(t, labels[name], floats_only=name in _FLOAT_TENSORS)
            names.append(name)
    tensors = [variants.pop(n) for n in names]
    scalars = sorted((n, v) for n, v in variants.items() if v is not None)
    return repr(scalars + [("tensors", tuple(names))] * bool(names)), tensors


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _variant_kwargs(text: str, tensors, convert) -> dict:
    """The ops' form of the options back as attnc's keyword arguments, the
    tensors through convert (a tensor, its name -> its array)."""
    out = _scalars(text)
    out.update((n, convert(t, n)) for n, t in zip(out.pop("tensors", ()), tensors))
    if "key_segment_ids" in out:
        out["segment_ids"] = (out["segment_ids"], out.pop("key_segment_ids"))
    return out


def _variant_arrays(text: str, tensors) -> dict:
    """The ops' form of the options back as attnc's keyword arguments."""
    return _variant_kwargs(text, tensors, _array)


def _scalars(text: str) -> dict:
    """_split_variants' text back as a dict; a value that is not a literal
    (a number, a string, None or a tuple of them) is refused by name."""
    try:
        return dict(ast.literal_eval(text))
    except (ValueError, SyntaxError):
        raise TypeError(f"the options {text} must be numbers, strings, None or tuples of them") from None


def _tensor_names(text: str) -> tuple:
    return _scalars(text).get("tensors", ())


def _variant_grads(grads: dict, text: str, like: torch.Tensor) -> list[torch.Tensor]:
    """One gradient per tensor option (empty placeholders for the masks)."""
    return [_tensor(grads.get(n), like) for n in _tensor_names(text)]


def _list_grads(grads, tensors):
    """The gradient of the ops' list of tensor options, as torch's autograd
    wants it: one per tensor, None for the masks."""
    return [g if t.is_floating_point() else None for g, t in zip(grads, tensors)]


def _variant_fakes(tensors, like: torch.Tensor) -> list[torch.Tensor]:
    return [like.new_empty(t.shape if t.is_floating_point() else _EMPTY) for t in tensors]


# --------------------------------------------------------------------------- scaled_dot_product_attention


@torch.library.custom_op("attnc::scaled_dot_product_attention", mutates_args=())
def _sdpa_op(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
    return_weights: bool,
    seed: torch.Tensor | None,
    variants: str,
    variant_tensors: list[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output, weights or an empty placeholder, the kernel's log-sum-exp)."""
    outputs, saved = _sdpa._forward(
        from_tensor(query, "query"),
        from_tensor(key, "key"),
        from_tensor(value, "value"),
        _array(attn_mask, "attn_mask"),
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        return_weights=return_weights,
        seed=_seed(seed),
        **_variant_arrays(variants, variant_tensors),
    )
    out, weights = outputs if return_weights else (outputs, None)
    return _tensor(out, query), _tensor(weights, query), _tensor(saved[5], query)


def _sdpa_shapes(query, key, value, enable_gqa):
    """Shapes of (output, weights, lse) as attnc's _check makes them."""
    shapes = [tuple(t.shape) for t in (query, key, value)]
    added_head = max(len(s) for s in shapes) == 2
    if added_head or enable_gqa:
        shapes = [(1,) + s if len(s) == 2 else s for s in shapes]
    kept = 3 if enable_gqa else 2  # the dims that do not broadcast
    lead = tuple(torch.broadcast_shapes(*(s[:-kept] for s in shapes)))
    lse = lead + shapes[0][-3:-2] * enable_gqa + shapes[0][-2:-1]
    out, weights = lse + shapes[2][-1:], lse + shapes[1][-2:-1]
    return (out[1:], weights[1:], lse) if added_head else (out, weights, lse)


@_sdpa_op.register_fake
def _(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_weights, seed, *_):
    out, weights, lse = _sdpa_shapes(query, key, value, enable_gqa)
    return query.new_empty(out), query.new_empty(weights if return_weights else _EMPTY), query.new_empty(lse)


@torch.library.custom_op("attnc::scaled_dot_product_attention_backward", mutates_args=())
def _sdpa_backward_op(
    grad_output: torch.Tensor | None,
    grad_weights: torch.Tensor | None,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    output: torch.Tensor,
    lse: torch.Tensor,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
    seed: torch.Tensor | None,
    variants: str,
    variant_tensors: list[torch.Tensor],
) -> list[torch.Tensor]:
    """[dquery, dkey, dvalue, dattn_mask or an empty placeholder, then the
    gradients of the tensor options] by attnc's C backward."""
    q, k, v, layout, options, mask_arg = _sdpa._prepare(
        from_tensor(query, "query"),
        from_tensor(key, "key"),
        from_tensor(value, "value"),
        _array(attn_mask, "attn_mask"),
        dropout_p,
        is_causal,
        scale,
        enable_gqa,
        _seed(seed),
        **_variant_arrays(variants, variant_tensors),
    )
    out = from_tensor(output, "output")
    saved = (options, q, k, v, out[None] if layout[2] else out, from_tensor(lse, "lse"), layout, mask_arg)
    cotangents = (_array(grad_output, "grad_output"), _array(grad_weights, "grad_weights"))
    grads = _sdpa._backward(saved, cotangents)
    dq, dk, dv, dmask = (_tensor(grads.get(n), query) for n in ("query", "key", "value", "attn_mask"))
    return [dq, dk, dv, dmask, *_variant_grads(grads, variants, query)]


@_sdpa_backward_op.register_fake
def _(grad_output, grad_weights, query, key, value, attn_mask, *rest):
    variant_tensors = rest[-1]
    float_mask = attn_mask is not None and attn_mask.dtype != torch.bool
    dmask = query.new_empty(attn_mask.shape) if float_mask else query.new_empty(_EMPTY)
    grads = [query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape), dmask]
    return grads + _variant_fakes(variant_tensors, query)


def _sdpa_setup(ctx, inputs, output):
    query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_weights, seed, text, tensors = inputs
    ctx.save_for_backward(query, key, value, attn_mask, output[0], output[2], seed, *tensors)
    ctx.options = (dropout_p, is_causal, scale, enable_gqa)
    ctx.variants = text
    ctx.return_weights = return_weights
    ctx.float_mask = attn_mask is not None and attn_mask.dtype != torch.bool
    ctx.mark_non_differentiable(output[2])
    ctx.set_materialize_grads(False)  # an unused output's cotangent stays None: the C backward skips its work


def _sdpa_grad(ctx, grad_output, grad_weights, _):
    query, key, value, attn_mask, output, lse, seed, *tensors = ctx.saved_tensors
    if not ctx.return_weights:  # the placeholder's cotangent (zeros, under torch.compile)
        grad_weights = None
    dq, dk, dv, dmask, *dvariants = _sdpa_backward_op(
        grad_output, grad_weights, query, key, value, attn_mask, output, lse, *ctx.options, seed, ctx.variants, tensors
    )
    return dq, dk, dv, dmask if ctx.float_mask else None, *[None] * 7, _list_grads(dvariants, tensors)


_sdpa_op.register_autograd(_sdpa_grad, setup_context=_sdpa_setup)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    return_weights: bool = False,
    seed: int | None = None,
    alibi_slopes: torch.Tensor | None = None,
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    segment_ids: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    prefix_lengths: torch.Tensor | int | None = None,
    block_mask: torch.Tensor | None = None,
    block_size: int | tuple[int, int] | None = None,
    activation: str = "softmax",
    sigmoid_bias: float | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """attnc.scaled_dot_product_attention on tensors, differentiable by torch
    autograd (the custom op ``torch.ops.attnc.scaled_dot_product_attention``,
    whose backward is attnc's C backward), and by torch.compile without
    graph breaks.

    Arguments, shapes and meanings are those of
    ``attnc.scaled_dot_product_attention`` (which keeps
    ``torch.nn.functional.scaled_dot_product_attention``'s): query
    (..., H, L, E), key (..., Hkv, S, E), value (..., Hkv, S, Ev), CPU
    tensors, float32 or float64; attn_mask bool (True = takes part) or float
    (added, and differentiable); is_causal, scale, enable_gqa, dropout_p.

    return_weights : bool, also return the (..., H, L, S) attention weights
        (before dropout), which torch's own SDPA cannot return; they are
        differentiable too: a loss on the weights reaches query and key.
    seed : int or None, the dropout seed (the same seed gives the NumPy call's
        bits); None draws one from torch's generator (torch.manual_seed
        makes it reproducible).
    alibi_slopes : tensor (H,), window : (left, right), softcap : float > 0,
        sinks : tensor (H,): the options of today's models, with
        attnc.scaled_dot_product_attention's meanings (the tensors of the
        call's dtype); torch autograd gives the gradients of ``sinks`` and
        ``alibi_slopes`` too (attnc's C backward).
    segment_ids : integer tensor (..., L) or a pair of them ((..., L),
        (..., S)); prefix_lengths : int or integer tensor (...,) (with
        is_causal=True); block_mask : bool tensor (..., H or 1, ceil(L / bq),
        ceil(S / bk)) with block_size : int or (bq, bk); activation :
        "softmax" or "sigmoid" with sigmoid_bias : float: the block masks and
        sigmoid attention, with attnc.scaled_dot_product_attention's shapes
        and meanings (the masks take no gradient).

    Returns
    -------
    output : tensor (..., H, L, Ev), or ``(output, weights)`` with
    return_weights, weights (..., H, L, S); the input dtype.

    Raises
    ------
    TypeError naming the argument for a tensor that is not on the CPU, not
    float32/float64 (a mask may be bool), or not strided (sparse, nested).

    Example
    -------
    >>> q = torch.randn(2, 4, 6, 8, dtype=torch.float64, requires_grad=True)
    >>> out, w = attnc.torch.scaled_dot_product_attention(q, q, q, is_causal=True, return_weights=True)
    >>> out.shape, w.shape
    (torch.Size([2, 4, 6, 8]), torch.Size([2, 4, 6, 6]))
    >>> (out.sum() + w[..., 0].sum()).backward()
    >>> q.grad.shape
    torch.Size([2, 4, 6, 8])
    >>> sinks = torch.zeros(4, dtype=torch.float64, requires_grad=True)     # gpt-oss's sinks, a window of 3
    >>> out = attnc.torch.scaled_dot_product_attention(q, q, q, window=(2, 0), sinks=sinks, softcap=20.0)
    >>> out.sum().backward()
    >>> sinks.grad.shape
    torch.Size([4])
    >>> ids = torch.tensor([[0, 0, 0, 1, 1, 1], [0] * 6])                   # row 0: two packed sequences
    >>> out, w = attnc.torch.scaled_dot_product_attention(q, q, q, segment_ids=ids, return_weights=True)
    >>> (w[0, 0, 4] > 0).tolist(), (w[1, 0, 4] > 0).sum().item()
    ([False, False, False, True, True, True], 6)
    >>> out = attnc.torch.scaled_dot_product_attention(q, q, q, is_causal=True, prefix_lengths=torch.tensor([2, 0]),
    ...                                                activation="sigmoid", sigmoid_bias=-1.0)
    >>> out.sum().backward()
    """
    _check_args({"query": query, "key": key, "value": value}, {"attn_mask": attn_mask})
    text, tensors = _split_variants(
        dict(
            alibi_slopes=alibi_slopes,
            window=window,
            softcap=softcap,
            sinks=sinks,
            segment_ids=segment_ids,
            prefix_lengths=prefix_lengths,
            block_mask=block_mask,
            block_size=block_size,
            activation=activation,
            sigmoid_bias=sigmoid_bias,
        )
    )
    args = (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_weights)
    seed_t = _seed_tensor(seed, dropout_p)
    if eager(query, key, value, attn_mask, seed_t, *tensors):
        out, *weights = _sdpa_eager(*args, seed_t, text, tensors)
    else:
        out, *weights, _ = _sdpa_op(*args, seed_t, text, tensors)
    return (out, weights[0]) if return_weights else out


def _sdpa_eager(
    query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_weights, seed, text, tensors
):
    """The op's outputs (without the log-sum-exp) on the eager path."""
    float_mask = attn_mask is not None and attn_mask.dtype != torch.bool
    names = ["query", "key", "value"] + ["attn_mask"] * float_mask
    named = list(zip(_tensor_names(text), tensors))
    names += [n for n, t in named if t.is_floating_point()]
    given = {"query": query, "key": key, "value": value, "attn_mask": attn_mask, **dict(named)}
    inputs = [given[n] for n in names]
    variants = _variant_kwargs(text, tensors, lambda t, _: view(t))

    def call(differentiable):
        outputs, saved = _sdpa._forward(
            view(query),
            view(key),
            view(value),
            None if attn_mask is None else view(attn_mask),
            dropout_p,
            is_causal,
            scale,
            enable_gqa,
            return_weights=return_weights,
            seed=_seed(seed),
            **variants,
        )

        def pullback(cotangents, needs):
            # a float mask that needs no gradient (a causal mask buffer) is a constant: no dmask pass
            kept = saved if float_mask and needs[3] else saved[:-1] + (None,)
            grads = _sdpa._backward(kept, [_array(c, "cotangent") for c in cotangents])
            return [_tensor(grads[n], query) if n in grads and need else None for n, need in zip(names, needs)]

        return [_tensor(a, query) for a in (outputs if return_weights else (outputs,))], (), pullback

    return run(call, inputs)


# --------------------------------------------------------------------------- multi_head_attention

# The op's tensor arguments after query, key and value, in order, and which
# of the op's arguments are tensors that may get a gradient.
_MHA_PARAMS = ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias")
_MHA_MASKS = ("key_padding_mask", "attn_mask")
_MHA_SEPARATE = ("q_proj_weight", "k_proj_weight", "v_proj_weight", "bias_k", "bias_v")
_MHA_GRADS = ("query", "key", "value") + _MHA_PARAMS + _MHA_MASKS + _MHA_SEPARATE


def _mha_state(
    tensors: tuple,
    num_heads,
    need_weights,
    average_attn_weights,
    is_causal,
    add_zero_attn,
    dropout_p,
    seed,
    variants: dict | None = None,
):
    """attnc's multi_head_attention call checked, before its arithmetic
    (tensors: the op's tensor arguments in _MHA_GRADS's order; variants:
    the kernel's options as attnc takes them)."""
    arrays = {n: _array(t, n) for n, t in zip(_MHA_GRADS, tensors)}
    arrays.update(variants or {})
    return _mha._prepare(
        arrays.pop("query"),
        arrays.pop("key"),
        arrays.pop("value"),
        num_heads,
        *(arrays.pop(n) for n in _MHA_PARAMS),
        need_weights=need_weights,
        average_attn_weights=average_attn_weights,
        is_causal=is_causal,
        add_zero_attn=add_zero_attn,
        dropout_p=dropout_p,
        seed=_seed(seed),
        **arrays,
    )


@torch.library.custom_op("attnc::multi_head_attention", mutates_args=())
def _mha_op(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    num_heads: int,
    in_proj_weight: torch.Tensor | None,
    in_proj_bias: torch.Tensor | None,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
    attn_mask: torch.Tensor | None,
    need_weights: bool,
    average_attn_weights: bool,
    is_causal: bool,
    q_proj_weight: torch.Tensor | None,
    k_proj_weight: torch.Tensor | None,
    v_proj_weight: torch.Tensor | None,
    bias_k: torch.Tensor | None,
    bias_v: torch.Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    seed: torch.Tensor | None,
    variants: str,
    variant_tensors: list[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output, weights or an empty placeholder, and for the backward: the
    projections q, k, v, the attention before the output projection and the
    kernel's log-sum-exp)."""
    tensors = (query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias) + (
        key_padding_mask,
        attn_mask,
        q_proj_weight,
        k_proj_weight,
        v_proj_weight,
        bias_k,
        bias_v,
    )
    options = (num_heads, need_weights, average_attn_weights, is_causal, add_zero_attn, dropout_p)
    s = _mha_state(tensors, *options, seed, _variant_arrays(variants, variant_tensors))
    q, k, v = _mha._project(s)
    out, weights = _mha._attend(s, q, k, v)
    out_t, weights_t, q_t, k_t, v_t, attn_t, lse_t = (
        _tensor(a, query) for a in (out, weights, q, k, v, s["attn"], s["lse"])
    )
    return out_t, weights_t, q_t, k_t, v_t, attn_t, lse_t


_MHA_TENSOR_ARGS = (0, 1, 2, 4, 5, 6, 7, 8, 9, 13, 14, 15, 16, 17)  # the op's arguments in _MHA_GRADS
# num_heads, need_weights, average_attn_weights, is_causal, add_zero_attn, dropout_p: the op's arguments
_MHA_OPTIONS = (3, 10, 11, 12, 18, 19)
_MHA_NARGS = 23  # the op's arguments: the seed (20), then the options of today's models (21: their text, 22: tensors)


@_mha_op.register_fake
def _(*args):
    query, key, bias_k = args[0], args[1], args[_MHA_TENSOR_ARGS[_MHA_GRADS.index("bias_k")]]
    num_heads, need_weights, average_attn_weights, _, add_zero_attn, _ = (args[i] for i in _MHA_OPTIONS)
    *batch, L, E = query.shape
    S = key.shape[-2] + (bias_k is not None) + add_zero_attn
    heads = () if average_attn_weights else (num_heads,)
    weights = (*batch, *heads, L, S) if need_weights else _EMPTY
    B = batch[0] if batch else 1
    shapes = (query.shape, weights, (B, L, E), (B, S, E), (B, S, E), (B, L, E), (B, num_heads, L))
    return tuple(query.new_empty(shape) for shape in shapes)


@torch.library.custom_op("attnc::multi_head_attention_backward", mutates_args=())
def _mha_backward_op(
    grad_output: torch.Tensor | None,
    grad_weights: torch.Tensor | None,
    tensors: list[torch.Tensor | None],
    saved: list[torch.Tensor],
    num_heads: int,
    need_weights: bool,
    average_attn_weights: bool,
    is_causal: bool,
    add_zero_attn: bool,
    dropout_p: float,
    seed: torch.Tensor | None,
    variants: str,
    variant_tensors: list[torch.Tensor],
) -> list[torch.Tensor]:
    """The gradients of the tensors (in _MHA_GRADS's order; empty placeholders
    for absent or bool ones), then of the tensor options, by attnc's C
    backward, from the forward's saved q, k, v, attention and log-sum-exp."""
    options = (num_heads, need_weights, average_attn_weights, is_causal, add_zero_attn, dropout_p)
    s = _mha_state(tuple(tensors), *options, seed, _variant_arrays(variants, variant_tensors))
    _mha._keep(s, *(from_tensor(t, "saved") for t in saved))
    cotangents = (_array(grad_output, "grad_output"), _array(grad_weights, "grad_weights"))
    grads = _mha._backward(s, cotangents)
    query = cast(torch.Tensor, tensors[0])  # always given
    return [_tensor(grads.get(n), query) for n in _MHA_GRADS] + _variant_grads(grads, variants, query)


def _differentiable(t: torch.Tensor | None) -> bool:
    return t is not None and t.dtype != torch.bool


@_mha_backward_op.register_fake
def _(grad_output, grad_weights, tensors, *rest):
    grads = [tensors[0].new_empty(t.shape if _differentiable(t) else _EMPTY) for t in tensors]
    return grads + _variant_fakes(rest[-1], tensors[0])


def _mha_setup(ctx, inputs, output):
    variants = inputs[22]
    ctx.save_for_backward(*(inputs[i] for i in _MHA_TENSOR_ARGS), *output[2:], *variants, inputs[20])
    ctx.options = tuple(inputs[i] for i in _MHA_OPTIONS)
    ctx.variants = inputs[21]
    ctx.differentiable = [_differentiable(inputs[i]) for i in _MHA_TENSOR_ARGS]
    ctx.differentiable += [t.is_floating_point() for t in variants]
    ctx.saved_counts = (len(_MHA_TENSOR_ARGS), len(output) - 2)
    ctx.mark_non_differentiable(*output[2:])
    ctx.set_materialize_grads(False)  # weights only logged: no zero cotangent for the C backward to go through


def _mha_grad(ctx, grad_output, grad_weights, *_):
    *saved, seed = ctx.saved_tensors
    n_tensors, n_saved = ctx.saved_counts
    tensors, kept, variants = saved[:n_tensors], saved[n_tensors : n_tensors + n_saved], saved[n_tensors + n_saved :]
    if not ctx.options[1]:  # need_weights=False: the placeholder's cotangent
        grad_weights = None
    grads = _mha_backward_op(grad_output, grad_weights, tensors, kept, *ctx.options, seed, ctx.variants, variants)
    grads = [g if keep else None for g, keep in zip(grads, ctx.differentiable)]
    out: list = [None] * _MHA_NARGS
    for i, g in zip(_MHA_TENSOR_ARGS, grads):
        out[i] = g
    out[22] = _list_grads(grads[len(_MHA_TENSOR_ARGS) :], variants)
    return tuple(out)


_mha_op.register_autograd(_mha_grad, setup_context=_mha_setup)


def multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    num_heads: int,
    in_proj_weight: torch.Tensor | None,
    in_proj_bias: torch.Tensor | None,
    out_proj_weight: torch.Tensor,
    out_proj_bias: torch.Tensor | None,
    *,
    key_padding_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    is_causal: bool = False,
    q_proj_weight: torch.Tensor | None = None,
    k_proj_weight: torch.Tensor | None = None,
    v_proj_weight: torch.Tensor | None = None,
    bias_k: torch.Tensor | None = None,
    bias_v: torch.Tensor | None = None,
    add_zero_attn: bool = False,
    dropout_p: float = 0.0,
    seed: int | None = None,
    alibi_slopes: torch.Tensor | None = None,
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    segment_ids: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    prefix_lengths: torch.Tensor | int | None = None,
    block_mask: torch.Tensor | None = None,
    block_size: int | tuple[int, int] | None = None,
    activation: str = "softmax",
    sigmoid_bias: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """attnc.multi_head_attention on tensors (batch first, as
    ``torch.nn.MultiheadAttention(batch_first=True)``), differentiable by
    torch autograd in every tensor argument (inputs, projections, float
    masks, bias_k/bias_v) through the custom op
    ``torch.ops.attnc.multi_head_attention``, whose backward is attnc's C
    backward; and by torch.compile without graph breaks.

    Arguments, shapes and meanings are those of ``attnc.multi_head_attention``:
    query (B, L, E) or (L, E), key (B, S, kdim), value (B, S, vdim), CPU
    tensors of one dtype, float32 or float64; masks keep torch's meaning
    (bool True = ignore, or float added). The weights (averaged over heads
    unless ``average_attn_weights=False``) come from the fused kernel and are
    differentiable. seed : the dropout seed; None draws one from torch's
    generator. alibi_slopes (H,), window (left, right), softcap, sinks (H,):
    the options of today's models, as attnc.multi_head_attention takes them
    (``sinks`` and ``alibi_slopes`` get their gradients); so are the block
    masks segment_ids (integer tensor (B, L), or a pair (B, L), (B, S)),
    prefix_lengths (int or integer tensor (B,), with is_causal=True and no
    attn_mask), block_mask (bool tensor (B or 1, H or 1, ceil(L / bq),
    ceil(S / bk))) with block_size, and activation="sigmoid" with
    sigmoid_bias (the masks take no gradient).

    Returns
    -------
    output : tensor (B, L, E) (or (L, E)); weights : tensor (B, L, S) or
    (B, H, L, S), or None without need_weights.

    Example
    -------
    >>> E, H = 8, 2
    >>> x = torch.randn(2, 5, E, requires_grad=True)
    >>> w_in, w_out = torch.randn(3 * E, E, requires_grad=True), torch.eye(E)
    >>> out, w = attnc.torch.multi_head_attention(x, x, x, H, w_in, None, w_out, None)
    >>> out.shape, w.shape
    (torch.Size([2, 5, 8]), torch.Size([2, 5, 5]))
    >>> (out.sum() + w[:, :, 0].sum()).backward()
    >>> x.grad.shape, w_in.grad.shape
    (torch.Size([2, 5, 8]), torch.Size([24, 8]))
    >>> sinks = torch.zeros(H, requires_grad=True)
    >>> out, _ = attnc.torch.multi_head_attention(x, x, x, H, w_in, None, w_out, None, sinks=sinks, window=(1, 0))
    >>> out.sum().backward()
    >>> sinks.grad.shape
    torch.Size([2])
    >>> ids = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
    >>> out, w = attnc.torch.multi_head_attention(x, x, x, H, w_in, None, w_out, None, segment_ids=ids,
    ...                                           activation="sigmoid")
    >>> (w[0, 0] > 0).tolist()
    [True, True, False, False, False]
    """
    tensors = (query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias) + (
        key_padding_mask,
        attn_mask,
        q_proj_weight,
        k_proj_weight,
        v_proj_weight,
        bias_k,
        bias_v,
    )
    named = dict(zip(_MHA_GRADS, tensors))
    masks = {n: named.pop(n) for n in _MHA_MASKS}
    _check_args({n: t for n, t in named.items() if t is not None}, masks)
    text, vtensors = _split_variants(
        dict(
            alibi_slopes=alibi_slopes,
            window=window,
            softcap=softcap,
            sinks=sinks,
            segment_ids=segment_ids,
            prefix_lengths=prefix_lengths,
            block_mask=block_mask,
            block_size=block_size,
            activation=activation,
            sigmoid_bias=sigmoid_bias,
        )
    )
    options = (num_heads, need_weights, average_attn_weights, is_causal, add_zero_attn, dropout_p)
    seed_t = _seed_tensor(seed, dropout_p)
    if eager(*tensors, seed_t, *vtensors):
        out, *weights = _mha_eager(tensors, options, seed_t, text, vtensors)
        return out, (weights[0] if need_weights else None)
    args: list = [None] * _MHA_NARGS  # the op's arguments, in its order
    for i, t in zip(_MHA_TENSOR_ARGS, tensors):
        args[i] = t
    for i, o in zip(_MHA_OPTIONS, options):
        args[i] = o
    args[20:] = seed_t, text, vtensors
    out, weights, *_ = _mha_op(*args)
    return out, (weights if need_weights else None)


def _mha_eager(tensors: tuple, options: tuple, seed: torch.Tensor | None, text: str, vtensors) -> list[torch.Tensor]:
    """(output, and the weights with need_weights) on the eager path
    (tensors: in _MHA_GRADS's order; options: in _MHA_OPTIONS's; text,
    vtensors: the options of today's models as the ops carry them)."""
    query = tensors[0]
    floats = [(n, t) for n, t in zip(_tensor_names(text), vtensors) if t.is_floating_point()]
    every = list(zip(_MHA_GRADS, tensors)) + floats
    names = [n for n, t in every if _differentiable(t)]
    inputs = [t for _, t in every if _differentiable(t)]
    variants = _variant_kwargs(text, vtensors, lambda t, _: view(t))

    def call(differentiable):
        s = _mha_state(tensors, *options, seed, variants)
        out, weights = _mha._attend(s, *_mha._project(s))

        def pullback(cotangents, needs):
            needed = {n for n, need in zip(names, needs) if need}
            s["mask_args"] = {n: m for n, m in s["mask_args"].items() if n in needed}  # constants: no dmask pass
            cots = [_array(c, "cotangent") for c in cotangents] + [None]  # no weights: their cotangent None
            grads = _mha._backward(s, cots[:2])
            return [_tensor(grads[n], query) if n in grads else None for n in names]

        outputs = (out, weights) if options[1] else (out,)
        return [_tensor(a, query) for a in outputs], (), pullback

    return run(call, inputs)
