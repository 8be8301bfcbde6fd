"""What every attention function shares: checking query/keys/values and the
score parameters, and turning them into the keyword arguments the C binding
takes (named as the members of attnc_score_params and attnc_score_grads);
the scaled-dot-product options (attnc_sdpa_options), built here for every
caller of the fused kernel."""

from __future__ import annotations

import math
import numbers
from typing import Literal

import numpy as np

from .._args import (
    as_array,
    blas_ready,
    choice,
    default_scale,
    elementwise_ready,
    float_array,
    integer_array,
    is_constant,
    same_dtype,
    seed_bits,
    shape_str,
    unbroadcast,
)

# Score names and the C enum (attnc_score_kind); "concat" is Luong's name for "additive".
KINDS = {
    "dot": 0,
    "scaled_dot": 1,
    "general": 2,
    "additive": 3,
    "concat": 3,
    "cosine": 4,
    "location": 5,
    "gaussian": 6,
}
# kind -> (required parameters, optional parameters)
PARAMS = {
    0: ((), ()),
    1: ((), ("scale",)),
    2: (("weight",), ()),
    3: (("w_query", "w_key", "v"), ()),
    4: ((), ("beta",)),
    5: (("weight",), ()),
    6: ((), ("bandwidth",)),
}
SAME_SIZE = (0, 1, 4, 6)  # kinds that need dq == dk

# The score names, for annotations (the keys of KINDS).
ScoreKind = Literal["dot", "scaled_dot", "general", "additive", "concat", "cosine", "location", "gaussian"]


class Inputs:
    """query (..., Tq, dq), keys (..., Tk, dk), values (..., Tk, dv), checked.

    values=None means values are the keys (`self.values_is_keys`)."""

    def __init__(self, query, keys, values=None, *, names=("query", "keys", "values")):
        qn, kn, vn = self.names = names
        q = float_array(query, qn)
        k = float_array(keys, kn)
        self.dtype = dtype = q.dtype
        if k.dtype != dtype:
            same_dtype(dtype, **{kn: k})
        qs, ks = q.shape, k.shape
        if len(qs) < 2:
            raise ValueError(f"{qn} must have shape (..., Tq, dq), got {shape_str(qs)}")
        if len(ks) != len(qs) or ks[:-2] != qs[:-2]:
            raise ValueError(
                f"{kn} with shape {shape_str(ks)} does not fit {qn} with shape "
                f"{shape_str(qs)}: both need the same leading dims, (..., Tk, dk) vs (..., Tq, dq)"
            )
        self.shapes = {qn: qs, kn: ks}  # the caller's shapes, for gradients
        self.values_is_keys = values is None
        if values is None:
            v = k
        else:
            v = float_array(values, vn)
            if v.dtype != dtype:
                same_dtype(dtype, **{vn: v})
            if v.ndim != len(ks) or v.shape[:-1] != ks[:-1]:
                raise ValueError(
                    f"{vn} with shape {shape_str(v.shape)} does not fit {kn} with shape "
                    f"{shape_str(ks)}: values need shape (..., Tk, dv)"
                )
            self.shapes[vn] = v.shape
        self.batch = qs[:-2]
        self.tq, self.dq = qs[-2:]
        self.tk, self.dk = ks[-2:]
        self.dv = v.shape[-1]
        self.query, self.keys = blas_ready(q), blas_ready(k)
        self.values = self.keys if values is None else blas_ready(v)

    def grads(self, dq, dk, dv) -> dict:
        """The gradient dict of query, keys and values; with values=None the
        keys' gradient covers both of their uses."""
        qn, kn, vn = self.names
        if self.values_is_keys:
            return {qn: dq, kn: dk + dv}
        return {qn: dq, kn: dk, vn: dv}

    def backward_outputs(self):
        """Uninitialised gradients of query, keys and values (C writes them)."""
        return self.empty(self.tq, self.dq), self.empty(self.tk, self.dk), self.empty(self.tk, self.dv)

    def empty(self, *trailing, dtype=None):
        return np.empty(self.batch + tuple(trailing), dtype=dtype or self.dtype)


def _scalar(x, name: str, dtype) -> tuple[float, np.ndarray | None]:
    """A scalar parameter: (its value, the array if it is differentiable)."""
    if is_constant(x):
        return float(x), None
    a = float_array(x, name)
    same_dtype(dtype, **{name: a})
    if a.ndim != 0:
        raise ValueError(f"{name} must be a float or a 0-d array, got shape {shape_str(a.shape)}")
    return float(a), a


class Score:
    """A score name and its parameters, checked against the inputs."""

    def __init__(self, score, params: dict, inp: Inputs):
        self.arrays = {}  # differentiable parameter name -> prepared array
        self.shapes = {}  # ... -> the caller's shape
        if not params and (score == "dot" or (score == "scaled_dot" and inp.dq == inp.dk)):
            # The common case, without the general machinery below.
            self.name, self.kind = score, KINDS[score]
            scale = default_scale(inp.dk) if self.kind == 1 else 1.0
            if self.kind == 0 and inp.dq != inp.dk:
                self._size_error(inp)
            self.c = self.c_saved = {"kind": self.kind, "scale": scale}
            return
        name = choice(score, tuple(KINDS), "score")
        self.name, self.kind = name, KINDS[name]
        required, optional = PARAMS[self.kind]
        given = {k: v for k, v in params.items() if v is not None}
        for p in params:
            if p not in required + optional:
                takes = ", ".join(required + optional) or "no parameters"
                raise TypeError(f"score {name!r} got an unexpected parameter {p!r} (it takes {takes})")
        for p in required:
            if p not in given:
                raise TypeError(f"score {name!r} needs the parameter {p!r}")
        if self.kind in SAME_SIZE and inp.dq != inp.dk:
            self._size_error(inp)
        scale, bandwidth, beta_scalar = 1.0, 1.0, 1.0
        weight = w_query = w_key = v = beta = None
        dt = inp.dtype
        if self.kind == 1:
            scale, arr = _scalar(given.get("scale", default_scale(inp.dk)), "scale", dt)
            self._keep("scale", arr)
        elif self.kind == 6:
            bandwidth, arr = _scalar(given.get("bandwidth", 1.0), "bandwidth", dt)  # C checks bandwidth > 0
            self._keep("bandwidth", arr)
        elif self.kind in (2, 5):
            want = (inp.dq, inp.dk) if self.kind == 2 else (inp.dq, inp.tk)
            weight = self._matrix(given["weight"], "weight", want, "(dq, dk)" if self.kind == 2 else "(dq, Tk)", dt)
        elif self.kind == 3:
            wq = float_array(given["w_query"], "w_query")
            same_dtype(dt, w_query=wq)
            if wq.ndim != 2 or wq.shape[0] != inp.dq:
                raise ValueError(
                    f"w_query has shape {shape_str(wq.shape)}; score 'additive' needs (dq, da) with dq = {inp.dq}"
                )
            da = wq.shape[1]
            w_query = self._matrix(wq, "w_query", (inp.dq, da), "(dq, da)", dt)
            w_key = self._matrix(given["w_key"], "w_key", (inp.dk, da), "(dk, da)", dt)
            v = self._matrix(given["v"], "v", (da,), "(da,)", dt, elementwise=True)
        elif self.kind == 4 and "beta" in given:
            if is_constant(given["beta"]):
                beta_scalar = float(given["beta"])
            else:
                b = float_array(given["beta"], "beta")
                same_dtype(dt, beta=b)
                want = inp.batch + (inp.tq,)
                try:
                    beta = elementwise_ready(np.broadcast_to(b, want))
                except ValueError:
                    raise ValueError(
                        f"beta with shape {shape_str(b.shape)} does not broadcast to (..., Tq) = {shape_str(want)}"
                    ) from None
                self.arrays["beta"], self.shapes["beta"] = beta, b.shape
        # The additive score's projections Q W_q, K W_k (and v), written by the
        # forward's C call and read back by the backward's (c_saved) instead of
        # recomputing the two products.
        proj = None
        if self.kind == 3:
            proj = np.empty(math.prod(inp.batch) * (inp.tq + inp.tk) * w_query.shape[1] + w_query.shape[1], dt)
        self.c = {
            "kind": self.kind,
            "scale": scale,
            "bandwidth": bandwidth,
            "beta_scalar": beta_scalar,
            "weight": weight,
            "w_query": w_query,
            "w_key": w_key,
            "v": v,
            "beta": beta,
            "projections": proj,
        }
        self.c_saved = self.c if proj is None else {**self.c, "projections_ready": True}

    def _size_error(self, inp: Inputs):
        qn, kn, _ = inp.names
        raise ValueError(
            f"score {self.name!r} needs {qn} and {kn} of the same feature size, got "
            f"{shape_str(inp.shapes[qn])} and {shape_str(inp.shapes[kn])}"
        )

    def _keep(self, name, arr):
        if arr is not None:
            self.arrays[name], self.shapes[name] = arr, arr.shape

    def _matrix(self, x, name, shape, described, dtype, elementwise=False):
        a = float_array(x, name)
        same_dtype(dtype, **{name: a})
        if a.shape != shape:
            raise ValueError(
                f"{name} has shape {shape_str(a.shape)}; score {self.name!r} needs {described} = {shape_str(shape)}"
            )
        a = elementwise_ready(a) if elementwise else blas_ready(a)
        self.arrays[name], self.shapes[name] = a, a.shape
        return a

    def grads(self, inp: Inputs):
        """(the backward's keyword arguments: the score's (c_saved), the
        gradients' dict dparams and the scalar gradients wanted; a function
        of the call's scalar results (dscale, dbandwidth) giving the
        parameters' gradient dict)."""
        out = {
            name: np.empty(shape, dtype=inp.dtype)
            for name, shape in self.shapes.items()
            if name not in ("beta", "scale", "bandwidth")
        }
        dbeta = inp.empty(inp.tq) if "beta" in self.shapes else None
        dparams = out if dbeta is None else {**out, "beta": dbeta}
        kwargs = {
            "params": self.c_saved,
            "dparams": dparams,
            "want_scale": "scale" in self.shapes,
            "want_bandwidth": "bandwidth" in self.shapes,
        }

        def finish(scalars):
            grads = dict(out)
            if dbeta is not None:
                grads["beta"] = unbroadcast(dbeta, self.shapes["beta"])
            for i, name in enumerate(("scale", "bandwidth")):
                if name in self.shapes:
                    grads[name] = np.asarray(scalars[i], dtype=inp.dtype)
            return grads

        return kwargs, finish


def _head_vector(x, name: str, heads: int, dtype) -> np.ndarray:
    """An (H,) option of the call's dtype, finite: one entry per query head."""
    a = float_array(x, name)
    same_dtype(dtype, **{name: a})
    if a.shape != (heads,):
        raise ValueError(f"{name} must have shape ({heads},), one entry per query head; got {shape_str(a.shape)}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite")
    return a


def _window_side(x, which: str) -> int:
    """A side of the window: None (unbounded, -1 for the kernel) or an int >= 0."""
    if x is None:
        return -1
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"window's {which} side must be an int >= 0 or None, got {type(x).__name__}")
    if x < 0:
        raise ValueError(f"window's {which} side must be >= 0 or None, got {x}")
    return min(int(x), 2**62)  # past every key: the same as unbounded, and fits C's int64


def _segments(segment_ids, batch: tuple, L: int, S: int) -> dict:
    """segment_ids, one (..., L) array when L == S or a pair (query's (...,
    L), keys' (..., S)), as int64 broadcast to the kernel's batch dims."""
    if isinstance(segment_ids, tuple):
        if len(segment_ids) != 2:
            raise TypeError(
                f"segment_ids must be an integer array or a pair (query_segments, key_segments), "
                f"got a tuple of {len(segment_ids)}"
            )
        pairs = zip(("query_segments", "key_segments"), segment_ids, (L, S))
    else:
        if L != S:
            raise ValueError(
                f"segment_ids: with {L} queries and {S} keys pass a pair (query_segments, key_segments), "
                "shaped (..., L) and (..., S)"
            )
        pairs = zip(("query_segments", "key_segments"), (segment_ids, segment_ids), (L, S))
    options = {}
    for member, ids, n in pairs:
        name = "segment_ids" if not isinstance(segment_ids, tuple) else f"segment_ids[{member == 'key_segments':d}]"
        a = as_array(ids, name)
        if a.ndim < 1 or a.shape[-1] != n:
            raise ValueError(f"{name} has shape {shape_str(a.shape)}, expected (..., {n}): one id per position")
        options[member] = integer_array(a, name, batch + (n,), f"(..., {n}) = {shape_str(batch + (n,))}")
    return options


def _block_mask(block_mask, block_size, heads: int, batch: tuple, L: int, S: int, name: str = "block_mask") -> dict:
    """block_mask broadcast to (..., H, ceil(L / bq), ceil(S / bk)) with the
    block sizes (bq, bk) from block_size (an int or a pair); name: the
    caller's name of block_mask, for errors."""
    if block_size is None:
        raise TypeError(f"{name} needs block_size: an int, or a pair (query block, key block)")
    sizes = tuple(block_size) if isinstance(block_size, (tuple, list)) else (block_size, block_size)
    if len(sizes) != 2:
        raise TypeError(f"block_size must be an int or a pair of ints, got {block_size!r}")
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"block_size must be an int or a pair of ints, got {block_size!r}")
        if n <= 0:
            raise ValueError(f"block_size must be > 0, got {block_size!r}")
    bq, bk = (min(int(n), 2**40) for n in sizes)  # past every length: one block, as the size given
    m = as_array(block_mask, name)
    if m.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array (True = computed), got dtype {m.dtype}")
    blocks = (-(-L // bq), -(-S // bk))
    if m.ndim < 2 or m.shape[-2:] != blocks:
        raise ValueError(
            f"{name} has shape {shape_str(m.shape)}; with block_size ({bq}, {bk}), L = {L} and S = {S} it "
            f"needs (..., H or 1, ceil(L / {bq}), ceil(S / {bk})) = (..., {blocks[0]}, {blocks[1]})"
        )
    want = batch + (heads,) + blocks
    try:
        view = elementwise_ready(np.broadcast_to(m, want))
    except ValueError:
        raise ValueError(f"{name} with shape {shape_str(m.shape)} does not broadcast to {shape_str(want)}") from None
    return {"block_mask": view, "block_q": bq, "block_k": bk}


def _sigmoid_bias(sigmoid_bias, S: int) -> float:
    """sigmoid's bias: default -log S (0 without keys), else a finite float."""
    if sigmoid_bias is None:
        return -math.log(S) if S > 0 else 0.0
    if isinstance(sigmoid_bias, bool) or not isinstance(sigmoid_bias, numbers.Real):
        raise TypeError(f"sigmoid_bias must be a float or None, got {type(sigmoid_bias).__name__}")
    if not math.isfinite(sigmoid_bias):
        raise ValueError(f"sigmoid_bias must be finite, got {sigmoid_bias!r}")
    return float(sigmoid_bias)


def variant_options(
    heads: int,
    dtype,
    *,
    kernel: tuple | None = None,
    alibi_slopes=None,
    window=None,
    softcap=None,
    sinks=None,
    segment_ids=None,
    prefix_lengths=None,
    block_mask=None,
    block_size=None,
    activation: str = "softmax",
    sigmoid_bias=None,
) -> dict:
    """The options of today's models checked, as attnc_sdpa_options members
    (none given: an empty dict). heads: the query heads H of the kernel's
    call; dtype: the call's; kernel: (batch dims, L, S) of the kernel's call,
    which segment_ids, prefix_lengths, block_mask and sigmoid's default
    bias need."""
    options: dict = {}
    if alibi_slopes is not None:
        options["alibi_slopes"] = _head_vector(alibi_slopes, "alibi_slopes", heads, dtype)
    if window is not None:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise TypeError(f"window must be a pair (left, right), each an int >= 0 or None; got {window!r}")
        options.update(window=True, window_left=_window_side(window[0], "left"))
        options["window_right"] = _window_side(window[1], "right")
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
            raise TypeError(f"softcap must be a float > 0 or None, got {type(softcap).__name__}")
        cap = float(softcap)
        if not (math.isfinite(cap) and cap > 0):
            raise ValueError(f"softcap must be a finite float > 0, got {softcap!r}")
        options["softcap"] = cap
    if sinks is not None:
        options["sinks"] = _head_vector(sinks, "sinks", heads, dtype)
    if block_size is not None and block_mask is None:
        raise TypeError("block_size is the size of block_mask's blocks: pass it with block_mask")
    if choice(activation, ("softmax", "sigmoid"), "activation") == "softmax" and sigmoid_bias is not None:
        raise ValueError("sigmoid_bias is the bias of activation='sigmoid': pass it with that activation")
    if segment_ids is None and prefix_lengths is None and block_mask is None and activation == "softmax":
        return options
    if kernel is None:
        raise TypeError("segment_ids, prefix_lengths, block_mask and activation need the kernel's shape (kernel=)")
    batch, L, S = kernel
    if segment_ids is not None:
        options.update(_segments(segment_ids, batch, L, S))
    if prefix_lengths is not None:
        to = f"the batch dims {shape_str(batch)}"
        options["prefix_lengths"] = integer_array(prefix_lengths, "prefix_lengths", batch, to)  # C: >= 0
    if block_mask is not None:
        options.update(_block_mask(block_mask, block_size, heads, batch, L, S))
    if activation == "sigmoid":
        options.update(activation=1, sigmoid_bias=_sigmoid_bias(sigmoid_bias, S))
    return options


def variant_grads(options: dict, heads: int, dtype) -> dict:
    """The buffers sdpa_backward fills with the gradients of the options that
    have one, by their argument names ("sinks", "alibi_slopes"): (H,) each,
    for the options a call has (none: an empty dict)."""
    return {name: np.empty(heads, dtype) for name in ("sinks", "alibi_slopes") if name in options}


def sdpa_options(
    scale: float,
    *,
    attn_mask=None,
    key_padding_mask=None,
    causal=False,
    causal_offset=0,
    dropout_p=0.0,
    seed=None,
    average_heads=False,
    variants: dict | None = None,
) -> dict:
    """The fused kernel's options, the ``options`` dict of sdpa_forward and
    sdpa_backward (attnc_sdpa_options by member name; one dict, matched in C
    to the members by interned keys, rather than keywords merged into every
    call). The masks as the kernel takes them (bool, True = takes part; or
    float, added to the scores); the dropout's seed drawn from ``seed`` only
    when there is dropout. Without masks, offset, dropout or averaging (most
    calls) only the scale and the causal flag: the binding takes the other
    members' defaults, and the smaller dict costs less to build and read.
    variants: variant_options' members, added as they are."""
    if attn_mask is None and key_padding_mask is None and not (causal_offset or dropout_p or average_heads):
        return {"causal": bool(causal), "scale": float(scale), **(variants or {})}
    return {
        **(variants or {}),
        "attn_mask": attn_mask,
        "key_padding_mask": key_padding_mask,
        "causal": bool(causal),
        "causal_offset": causal_offset,
        "scale": float(scale),
        "dropout_p": float(dropout_p),
        "seed": seed_bits(seed) if dropout_p else 0,
        "average_heads": bool(average_heads),
    }
