"""attnc.multi_head_attention: torch.nn.MultiheadAttention's computation
(batch first), on the fused kernel: projections and the attention run in C,
heads are strided views (never copied), and the weights come from the saved
log-sum-exp when asked for."""

from __future__ import annotations

import inspect
import numbers

import numpy as np

from .. import _core
from .._args import (
    as_array,
    as_rows,
    blas_ready,
    default_scale,
    elementwise_ready,
    float_array,
    same_dtype,
    shape_str,
    torch_mask,
    unbroadcast,
)
from .._typing import Array, ArrayLike
from ..grad import register
from ..nn.linear import linear_rows, linear_rows_backward
from ._spec import sdpa_options, variant_grads, variant_options


def _param(x, name, shape, dtype, required=True):
    if x is None:
        if required:
            raise TypeError(f"{name} is required")
        return None
    a = float_array(x, name)
    same_dtype(dtype, **{name: a})
    if a.shape != shape:
        raise ValueError(f"{name} has shape {shape_str(a.shape)}, expected {shape_str(shape)}")
    return blas_ready(a)


def _key_bias(x, name, E, dtype):
    """bias_k or bias_v as (1, 1, E): torch appends ``bias.repeat(1, B, 1)``,
    so (E,), (1, E) and (1, 1, E) all mean the same appended key."""
    a = float_array(x, name)
    same_dtype(dtype, **{name: a})
    if a.ndim > 3 or a.shape[-1:] != (E,) or any(n != 1 for n in a.shape[:-1]):
        raise ValueError(f"{name} has shape {shape_str(a.shape)}, expected (E,), (1, E) or (1, 1, E) with E = {E}")
    return blas_ready(a.reshape(1, 1, E))


def _pad_keys(view, extra):
    """Append `extra` allowed key columns to a (B, H, L, S) mask view."""
    if extra == 0:
        return view
    pad = np.ones if view.dtype == np.bool_ else np.zeros
    return np.concatenate([view, pad(view.shape[:-1] + (extra,), view.dtype)], axis=-1)


# The options that mask keys by their positions 0..S - 1 (segments, the
# prefix's causal rule, key blocks).
_KEY_MASKS = ("segment_ids", "prefix_lengths", "block_mask")


def _no_key_masks(variants: dict, appended: str) -> None:
    """Refuse the key masks with appended keys (bias_k/bias_v, add_zero_attn):
    the appended keys have no segment id, sit past every query under the
    prefix's causal rule and would fall into the last key block (or a block
    the mask does not have), so any meaning given to them would be a guess."""
    for name in _KEY_MASKS:
        if variants.get(name) is not None:
            raise ValueError(
                f"{name} masks the keys by their positions and ids, which the keys {appended} appends lack: "
                f"pass {name} without {appended}"
            )


def _check_causal(is_causal, attn_mask, prefix_lengths) -> None:
    """is_causal is torch's hint that attn_mask is the causal mask, which it
    needs (as torch); with prefix_lengths (which the kernel refuses without
    is_causal) it is the kernel's causal rule that the prefix widens, needing
    no attn_mask and refusing one (the causal mask would hide the prefix's
    later keys again)."""
    if prefix_lengths is None:
        if is_causal and attn_mask is None:
            raise ValueError("is_causal is a hint that attn_mask is the causal mask: pass attn_mask too (as torch)")
    elif is_causal and attn_mask is not None:
        raise ValueError(
            "prefix_lengths with is_causal=True is the causal rule with a bidirectional prefix; an attn_mask "
            "with is_causal is the causal mask, which would hide the prefix's later keys: pass no attn_mask"
        )


def _prepare(
    query,
    key,
    value,
    num_heads,
    in_proj_weight,
    in_proj_bias,
    out_proj_weight,
    out_proj_bias,
    *,
    key_padding_mask=None,
    attn_mask=None,
    need_weights=True,
    average_attn_weights=True,
    is_causal=False,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    bias_k=None,
    bias_v=None,
    add_zero_attn=False,
    dropout_p=0.0,
    seed=None,
    num_kv_heads=None,
    **variants,
):
    """The arguments checked: the state of a call (its backward's `saved`)
    before any arithmetic. The same arguments (and an int seed) give the
    same state again: attnc.torch's backward rebuilds a forward's here.
    variants: the kernel's options of today's models, as
    _spec.variant_options takes them (passed through by name, so an option
    added there reaches multi_head_attention without a change here)."""
    q_in, k_in, v_in = (float_array(a, n) for a, n in ((query, "query"), (key, "key"), (value, "value")))
    dtype = q_in.dtype
    same_dtype(dtype, key=k_in, value=v_in)
    batched = q_in.ndim == 3
    if q_in.ndim not in (2, 3) or k_in.ndim != q_in.ndim or v_in.ndim != q_in.ndim:
        raise ValueError(
            f"query {shape_str(q_in.shape)}, key {shape_str(k_in.shape)} and value "
            f"{shape_str(v_in.shape)} must all be (B, L, E) (batch first) or all (L, E)"
        )
    if not batched:
        q_in, k_in, v_in = q_in[None], k_in[None], v_in[None]
    B, L, E = q_in.shape
    S = k_in.shape[1]
    if k_in.shape[0] != B or v_in.shape[:2] != (B, S):
        raise ValueError(
            f"key {shape_str(k_in.shape)} and value {shape_str(v_in.shape)} need query's batch "
            f"({B}) and the same length"
        )
    if isinstance(num_heads, bool) or not isinstance(num_heads, numbers.Integral):
        raise TypeError(f"num_heads must be an int, got {type(num_heads).__name__}")
    if num_heads < 1 or E % num_heads:
        raise ValueError(f"embed_dim {E} must be divisible by num_heads ({int(num_heads)})")
    H, hd = int(num_heads), E // int(num_heads)
    Hkv = kv_heads(num_kv_heads, H)
    Ekv = Hkv * hd  # the width of the keys and values: E, or less with grouped-query attention
    kdim, vdim = k_in.shape[2], v_in.shape[2]
    if in_proj_weight is not None:
        w_in = _param(in_proj_weight, "in_proj_weight", (E + 2 * Ekv, E), dtype)
        if kdim != E or vdim != E:
            raise ValueError(
                f"in_proj_weight needs key and value of width {E}; use q/k/v_proj_weight for kdim={kdim}, vdim={vdim}"
            )
        wq, wk, wv = w_in[:E], w_in[E : E + Ekv], w_in[E + Ekv :]
    else:
        wq = _param(q_proj_weight, "q_proj_weight", (E, E), dtype)
        wk = _param(k_proj_weight, "k_proj_weight", (Ekv, kdim), dtype)
        wv = _param(v_proj_weight, "v_proj_weight", (Ekv, vdim), dtype)
    b_in = _param(in_proj_bias, "in_proj_bias", (E + 2 * Ekv,), dtype, required=False)
    bq, bk, bv = (None, None, None) if b_in is None else (b_in[:E], b_in[E : E + Ekv], b_in[E + Ekv :])
    wo = _param(out_proj_weight, "out_proj_weight", (E, E), dtype)
    bo = _param(out_proj_bias, "out_proj_bias", (E,), dtype, required=False)
    if (bias_k is None) != (bias_v is None):
        raise ValueError("bias_k and bias_v go together")
    bias_kv = bias_k is not None
    bias_shapes = (np.shape(bias_k), np.shape(bias_v))
    if bias_kv:
        bias_k, bias_v = _key_bias(bias_k, "bias_k", Ekv, dtype), _key_bias(bias_v, "bias_v", Ekv, dtype)
    _check_causal(is_causal, attn_mask, variants.get("prefix_lengths"))
    if not 0 <= dropout_p <= 1:
        raise ValueError(f"dropout_p must be in [0, 1], got {dropout_p}")

    x = {n: blas_ready(a.reshape(B * a.shape[1], a.shape[2])) for n, a in (("q", q_in), ("k", k_in), ("v", v_in))}
    extra = int(bias_kv) + int(bool(add_zero_attn))
    if extra:
        _no_key_masks(variants, "bias_k/bias_v" if bias_kv else "add_zero_attn")

    masks, mask_args = [None, None], {}
    if attn_mask is not None:
        m = attn_mask = as_array(attn_mask, "attn_mask")
        if m.ndim == 3 and m.shape[0] == B * H:
            m = m.reshape(B, H, *m.shape[1:])
        orig, kernel = torch_mask(m, "attn_mask", (B, H, L, S), dtype)
        masks[0], mask_args["attn_mask"] = elementwise_ready(_pad_keys(kernel, extra)), (attn_mask, orig.shape)
    if key_padding_mask is not None:
        m = key_padding_mask = as_array(key_padding_mask, "key_padding_mask")
        m = m[None] if not batched and m.ndim == 1 else m
        if m.shape != (B, S):
            raise ValueError(f"key_padding_mask has shape {shape_str(m.shape)}, expected (B, S) = ({B}, {S})")
        orig, kernel = torch_mask(m[:, None, None, :], "key_padding_mask", (B, H, L, S), dtype)
        masks[1] = elementwise_ready(_pad_keys(kernel, extra))
        mask_args["key_padding_mask"] = (key_padding_mask, orig.shape)
    # is_causal promises that attn_mask is the causal mask: the kernel then also
    # skips the tiles above the diagonal. Not with appended keys: those stay
    # visible to every query, as the padded attn_mask says.
    average = bool(need_weights and average_attn_weights)
    options = sdpa_options(
        default_scale(hd),
        attn_mask=masks[0],
        key_padding_mask=masks[1],
        causal=is_causal and extra == 0,
        dropout_p=dropout_p,
        seed=seed,
        average_heads=average,
        variants=variant_options(H, dtype, kernel=((B,), L, S + extra), **variants),
    )
    return dict(
        options=options,
        x=x,
        shapes=(query, key, value),
        B=B,
        L=L,
        S=S,
        E=E,
        H=H,
        Hkv=Hkv,
        Ekv=Ekv,
        extra=extra,
        bias_kv=bias_kv,
        bias_shapes=bias_shapes,
        add_zero_attn=bool(add_zero_attn),
        batched=batched,
        bias_kv_arrays=(bias_k, bias_v),
        w=(wq, wk, wv, wo),
        b=(bq, bk, bv, bo),
        b_in=b_in is not None,
        separate=in_proj_weight is None,
        mask_args=mask_args,
        dtype=dtype,
        need_weights=need_weights,
        average=average_attn_weights,
        average_heads=average,
    )


def _project(s):
    """The input projections (B, L, E), (B, S2, E), (B, S2, E): the keys and
    values with bias_k/bias_v and the zero key appended."""
    B, L, S, E, Ekv, dtype = s["B"], s["L"], s["S"], s["E"], s["Ekv"], s["dtype"]
    (wq, wk, wv, _), (bq, bk, bv, _), x = s["w"], s["b"], s["x"]
    q = linear_rows(x["q"], wq, bq).reshape(B, L, E)
    k = linear_rows(x["k"], wk, bk).reshape(B, S, Ekv)
    v = linear_rows(x["v"], wv, bv).reshape(B, S, Ekv)
    if s["extra"]:
        bias_k, bias_v = s["bias_kv_arrays"]
        tail_k = [np.broadcast_to(bias_k, (B, 1, Ekv))] if s["bias_kv"] else []
        tail_v = [np.broadcast_to(bias_v, (B, 1, Ekv))] if s["bias_kv"] else []
        if s["add_zero_attn"]:
            tail_k.append(np.zeros((B, 1, Ekv), dtype))
            tail_v.append(np.zeros((B, 1, Ekv), dtype))
        k = np.concatenate([k, *tail_k], axis=1)
        v = np.concatenate([v, *tail_v], axis=1)
    return q, k, v


def kv_heads(num_kv_heads, num_heads):
    """num_kv_heads checked (None: num_heads): grouped-query attention's
    number of key and value heads, dividing num_heads."""
    if num_kv_heads is None:
        return num_heads
    if isinstance(num_kv_heads, bool) or not isinstance(num_kv_heads, numbers.Integral):
        raise TypeError(f"num_kv_heads must be an int or None, got {type(num_kv_heads).__name__}")
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_kv_heads ({num_kv_heads}) must be >= 1 and divide num_heads ({num_heads})")
    return int(num_kv_heads)


def _heads(a, H):
    """(B, T, E) as (B, H, T, E / H): a strided view."""
    return a.reshape(a.shape[0], a.shape[1], H, a.shape[2] // H).transpose(0, 2, 1, 3)


def _keep(s, q, k, v, attn, lse):
    """Record in s the arrays of the kernel's call the backward reads."""
    H, Hkv = s["H"], s["Hkv"]
    B, L, E = attn.shape  # (not reshape(-1, E): E may be 0)
    s.update(qh=_heads(q, H), kh=_heads(k, Hkv), vh=_heads(v, Hkv), attn=attn, attn2=attn.reshape(B * L, E), lse=lse)


def _attend(s, q, k, v):
    """The kernel and the output projection on the projections q, k, v;
    records in s what the backward reads. Returns (output, weights) as the
    caller's batching has them."""
    B, L, E, H, dtype = s["B"], s["L"], s["E"], s["H"], s["dtype"]
    S2 = s["S"] + s["extra"]
    attn = np.empty((B, L, E), dtype)
    lse = np.empty((B, H, L), dtype)
    shape = (B, L, S2) if s["average_heads"] else (B, H, L, S2)
    weights = np.empty(shape, dtype) if s["need_weights"] else None
    _keep(s, q, k, v, attn, lse)
    _core.sdpa_forward(
        output=_heads(attn, H),
        lse=lse,
        weights=weights,
        query=s["qh"],
        key=s["kh"],
        value=s["vh"],
        options=s["options"],
    )
    out = linear_rows(s["attn2"], s["w"][3], s["b"][3]).reshape(B, L, E)
    if s["batched"]:
        return out, weights
    return out[0], None if weights is None else weights[0]


def _forward(*args, **kwargs):
    s = _prepare(*args, **kwargs)
    return _attend(s, *_project(s)), s


# multi_head_attention's arguments: attnc.vjp names a changed one from here.
_forward.__signature__ = inspect.signature(_prepare)  # type: ignore[attr-defined]


def _backward(s, cotangents):
    dout, dweights = cotangents
    B, L, S, E, H, extra, dtype = s["B"], s["L"], s["S"], s["E"], s["H"], s["extra"], s["dtype"]
    Hkv, Ekv = s["Hkv"], s["Ekv"]
    S2 = S + extra
    if not s["batched"]:
        dout = None if dout is None else dout[None]
        dweights = None if dweights is None else dweights[None]
    wq, wk, wv, wo = s["w"]
    bq, bk, bv, bo = s["b"]
    grads = {}
    dout2 = np.zeros((B * L, E), dtype) if dout is None else dout.reshape(B * L, E)
    dattn2, grads["out_proj_weight"], dbo = linear_rows_backward(dout2, s["attn2"], wo, bo is not None)
    if bo is not None:
        grads["out_proj_bias"] = dbo
    if dweights is not None:  # averaged weights: each head's share is 1/H
        dweights = np.broadcast_to(dweights[:, None] / H, (B, H, L, S2)) if s["average"] else dweights
        dweights = elementwise_ready(dweights)
    heads = lambda a: _heads(a, H)  # noqa: E731
    dq, dk, dv = np.empty((B, L, E), dtype), np.empty((B, S2, Ekv), dtype), np.empty((B, S2, Ekv), dtype)
    float_masks = [n for n, (m, _) in s["mask_args"].items() if np.asarray(m).dtype != np.bool_]
    dmask = np.zeros((B, H, L, S2), dtype) if float_masks else None
    dvariants = variant_grads(s["options"], H, dtype)
    _core.sdpa_backward(
        dquery=heads(dq),
        dkey=_heads(dk, Hkv),
        dvalue=_heads(dv, Hkv),
        dmask=dmask,
        dsinks=dvariants.get("sinks"),
        dalibi_slopes=dvariants.get("alibi_slopes"),
        doutput=heads(dattn2.reshape(B, L, E)),
        dweights=dweights,
        query=s["qh"],
        key=s["kh"],
        value=s["vh"],
        output=heads(s["attn"]),
        lse=s["lse"],
        options=s["options"],
    )
    for name in float_masks:
        orig, shape = s["mask_args"][name]
        g = dmask[..., :S]
        if name == "key_padding_mask":
            g = g.sum(axis=(1, 2))
        elif np.asarray(orig).ndim == 3 and len(shape) == 4:  # given as (B*H, L, S)
            g = g.reshape(B * H, L, S)
        grads[name] = unbroadcast(g, np.shape(orig)) if name == "attn_mask" else (g if s["batched"] else g[0])
    grads.update(dvariants)
    if s["bias_kv"]:  # in the caller's shape of each
        grads["bias_k"] = dk[:, S].sum(axis=0).reshape(s["bias_shapes"][0])
        grads["bias_v"] = dv[:, S].sum(axis=0).reshape(s["bias_shapes"][1])
    x = s["x"]
    dxs, dws, dbs = {}, {}, {}
    for n, d, w, b in (("q", dq, wq, bq), ("k", dk[:, :S], wk, bk), ("v", dv[:, :S], wv, bv)):
        dxs[n], dws[n], dbs[n] = linear_rows_backward(as_rows(d), x[n], w, b is not None)
    if s["separate"]:
        grads.update(q_proj_weight=dws["q"], k_proj_weight=dws["k"], v_proj_weight=dws["v"])
    else:
        grads["in_proj_weight"] = np.concatenate([dws["q"], dws["k"], dws["v"]])
    if s["b_in"]:
        grads["in_proj_bias"] = np.concatenate([dbs["q"], dbs["k"], dbs["v"]])
    for n, name, given in zip("qkv", ("query", "key", "value"), s["shapes"]):
        grads[name] = dxs[n].reshape(np.shape(given))
    return grads


def multi_head_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    num_heads: int,
    in_proj_weight: ArrayLike | None,
    in_proj_bias: ArrayLike | None,
    out_proj_weight: ArrayLike,
    out_proj_bias: ArrayLike | None,
    *,
    key_padding_mask: ArrayLike | None = None,
    attn_mask: ArrayLike | None = None,
    need_weights: bool = True,
    average_attn_weights: bool = True,
    is_causal: bool = False,
    q_proj_weight: ArrayLike | None = None,
    k_proj_weight: ArrayLike | None = None,
    v_proj_weight: ArrayLike | None = None,
    bias_k: ArrayLike | None = None,
    bias_v: ArrayLike | None = None,
    add_zero_attn: bool = False,
    dropout_p: float = 0.0,
    seed: int | None = None,
    num_kv_heads: int | None = None,
    alibi_slopes: ArrayLike | None = None,
    window: tuple[int | None, int | None] | None = None,
    softcap: float | None = None,
    sinks: ArrayLike | None = None,
    segment_ids: ArrayLike | tuple[ArrayLike, ArrayLike] | None = None,
    prefix_lengths: ArrayLike | int | None = None,
    block_mask: ArrayLike | None = None,
    block_size: int | tuple[int, int] | None = None,
    activation: str = "softmax",
    sigmoid_bias: float | None = None,
) -> tuple[Array, Array | None]:
    """Multi-head attention, as ``torch.nn.MultiheadAttention(batch_first=True)``.

    out = concat_h(softmax(q_h k_h^T / sqrt(E / H) + mask) v_h) W_out^T + b_out,
    with q, k, v the input projections of query, key and value, split into H heads.

    Parameters
    ----------
    query : (B, L, E) or (L, E), float32 or float64; key : (B, S, kdim);
        value : (B, S, vdim); all of one dtype (the parameters too)
    num_heads : int, dividing E (E may be 0: the output is then empty and the
        weights uniform over the keys each query may attend to)
    in_proj_weight : (3E, E) (query, key, value projections stacked), or None
        with ``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim)
    in_proj_bias : (3E,) or None; out_proj_weight : (E, E); out_proj_bias : (E,) or None
    key_padding_mask : (B, S), bool (True = ignore this key) or float (added)
    attn_mask : (L, S) or (B*num_heads, L, S), bool (True = not allowed) or float (added)
    need_weights : bool, also return the attention weights (from the fused kernel)
    average_attn_weights : bool, average the weights over heads: (B, L, S), else (B, H, L, S)
    is_causal : bool, hint that attn_mask is the causal mask (attn_mask is required, as in torch)
    bias_k, bias_v : (1, 1, E) (or (E,) or (1, E), as torch's functional form takes), an extra
        key/value appended to the sequence; add_zero_attn appends zeros
    dropout_p, seed : dropout on the attention probabilities, reproducible from seed
    num_kv_heads : int dividing num_heads, or None (num_heads): grouped-query
        attention (Ainslie et al. 2023; 1 is multi-query attention, Shazeer
        2019): the keys and values have num_kv_heads heads of width E / H
        (E_kv = num_kv_heads E / H), query head h reading key/value head
        h // (H / num_kv_heads); in_proj_weight is then (E + 2 E_kv, E)
        (query, key, value rows), k_proj_weight (E_kv, kdim), v_proj_weight
        (E_kv, vdim), in_proj_bias (E + 2 E_kv,), bias_k/bias_v (1, 1, E_kv)
    alibi_slopes : (H,), window : (left, right), softcap : float > 0,
        sinks : (H,): the options of today's models, applied by the fused
        kernel to every head exactly as attnc.scaled_dot_product_attention
        applies them (there: their order and meanings); query i sits at key
        position i, and keys appended by bias_k/add_zero_attn at positions
        S, S + 1. attnc.vjp gives the gradients of ``sinks`` and
        ``alibi_slopes`` by those names.
    segment_ids : integer array (B, L), or a pair (query_segments (B, L),
        key_segments (B, S)), required when L != S: query i attends only
        keys of its own segment (packed sequences)
    prefix_lengths : int or integer array (B,), each >= 0, with
        is_causal=True: a prefix LM, query i attends key j if j <= i or
        j < prefix. is_causal is then the kernel's causal rule, which
        needs no attn_mask and refuses one (the causal mask would hide the
        prefix's later keys again)
    block_mask : bool array (B or 1, H or 1, ceil(L / bq), ceil(S / bk))
        with block_size : int or (bq, bk): query i and key j take part only
        if block_mask[b, h, i // bq, j // bk] (True = computed, the kernel's
        meaning, not attn_mask's); False blocks are skipped
    activation : "softmax" or "sigmoid", sigmoid_bias : float (default
        -log S, S counting appended keys): p = sigmoid(s + sigmoid_bias),
        not normalised (Ramapuram et al. 2024); not with sinks.
        The block masks and sigmoid are attnc.scaled_dot_product_attention's
        (there: their meanings in full), shaped like the query without its
        features (unbatched input: without B); they compose with the masks
        above, is_causal, num_kv_heads and dropout, and take no gradient.
        segment_ids, prefix_lengths and block_mask refuse bias_k/bias_v and
        add_zero_attn: the keys those append have no position or segment.

    Masks here keep PyTorch's meaning (True = ignore), because the argument
    names are PyTorch's. The returned weights are the probabilities before
    dropout (torch returns them after).

    Returns
    -------
    output : array (B, L, E) (or (L, E)), the input dtype
    weights : array (B, L, S) averaged over heads, (B, H, L, S) with
        ``average_attn_weights=False`` (without B for unbatched input; S grows
        by one for bias_k/bias_v and for add_zero_attn), or None without need_weights

    Example
    -------
    >>> E, H = 16, 4; x = np.random.rand(2, 5, E).astype(np.float32)
    >>> w_in = np.random.rand(3 * E, E).astype(np.float32); w_out = np.eye(E, dtype=np.float32)
    >>> out, w = attnc.multi_head_attention(x, x, x, H, w_in, None, w_out, None)
    >>> out.shape, out.dtype, w.shape
    ((2, 5, 16), dtype('float32'), (2, 5, 5))
    >>> causal = np.triu(np.ones((5, 5), bool), k=1)          # True = may not attend
    >>> out, w = attnc.multi_head_attention(x, x, x, H, w_in, None, w_out, None, attn_mask=causal,
    ...                                     average_attn_weights=False)
    >>> w.shape, float(w[0, 0, 0, 1])
    ((2, 4, 5, 5), 0.0)
    >>> w_mqa = np.random.rand(E + 2 * 4, E).astype(np.float32)     # one key/value head of width E / H
    >>> attnc.multi_head_attention(x, x, x, H, w_mqa, None, w_out, None, num_kv_heads=1)[0].shape
    (2, 5, 16)
    >>> out, w = attnc.multi_head_attention(      # a causal window of 3 keys, ALiBi, a sink per head
    ...     x, x, x, H, w_in, None, w_out, None, window=(2, 0), alibi_slopes=attnc.alibi_slopes(H, np.float32),
    ...     sinks=np.zeros(H, np.float32), average_attn_weights=False)
    >>> int((w[0, 0, 4] > 0).sum()), bool(w.sum(-1).min() < 1)
    (3, True)
    >>> ids = np.array([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])        # row 0 packs two sequences
    >>> _, w = attnc.multi_head_attention(x, x, x, H, w_in, None, w_out, None, segment_ids=ids)
    >>> int((w[0, 3] > 0).sum()), int((w[1, 3] > 0).sum())
    (3, 5)
    >>> _, w = attnc.multi_head_attention(x, x, x, H, w_in, None, w_out, None, is_causal=True, prefix_lengths=[3, 0])
    >>> int((w[0, 1] > 0).sum()), int((w[1, 1] > 0).sum())       # a 3-key prefix; plain causal
    (3, 2)
    >>> blocks = np.array([[True, False], [True, True], [False, True]])   # 2 x 4 blocks
    >>> _, w = attnc.multi_head_attention(x, x, x, H, w_in, None, w_out, None, block_mask=blocks, block_size=(2, 4))
    >>> (w[0, 0] > 0).astype(int).tolist(), (w[0, 4] > 0).astype(int).tolist()
    ([1, 1, 1, 1, 0], [0, 0, 0, 0, 1])
    >>> _, w = attnc.multi_head_attention(x, x, x, H, w_in, None, w_out, None, activation="sigmoid")
    >>> bool((w > 0).all()), bool(w.sum(-1).max() > 1)         # sigmoid(s - log 5): rows not normalised
    (True, True)
    """
    return _forward(
        query,
        key,
        value,
        num_heads,
        in_proj_weight,
        in_proj_bias,
        out_proj_weight,
        out_proj_bias,
        key_padding_mask=key_padding_mask,
        attn_mask=attn_mask,
        need_weights=need_weights,
        average_attn_weights=average_attn_weights,
        is_causal=is_causal,
        q_proj_weight=q_proj_weight,
        k_proj_weight=k_proj_weight,
        v_proj_weight=v_proj_weight,
        bias_k=bias_k,
        bias_v=bias_v,
        add_zero_attn=add_zero_attn,
        dropout_p=dropout_p,
        seed=seed,
        num_kv_heads=num_kv_heads,
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
    )[0]


register(multi_head_attention, _forward, _backward)
