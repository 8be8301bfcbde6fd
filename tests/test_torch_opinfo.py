"""PyTorch's own OpInfo sample inputs through every attnc function that borrows
a torch name: forward results and the gradients of attnc.vjp against torch's
outputs and autograd, float32 and float64.

The samples are those PyTorch's test suite runs
(``torch.testing._internal.common_methods_invocations.op_db``):
``op.sample_inputs("cpu", dtype, requires_grad=True)``, its reference inputs
where the OpInfo has its own (relu's: empty, strided, 0-d, large and
non-finite inputs), and, where the requires_grad=False list is a different,
larger set (multi-head attention's 192, embedding's padding_idx / max_norm /
sparse samples), that list too, its float tensors then made leaves that
require grad. Each op has a small explicit adapter from torch's call to
attnc's. A sample attnc does not take is an explicit exclusion with its
reason; a sample whose result depends on random bits (dropout) is compared
with dropout off, in both, and counted as such. Every count is asserted, so a
change in torch's lists (or in what attnc takes) fails here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import attnc
from attnc import nn

DTYPES = {"float32": np.float32, "float64": np.float64}
# |attnc - torch| <= TOL * scale, elementwise; an output's scale is max(1, max |torch's|),
# a gradient's the largest of every gradient of the sample (norm-wise: an input whose
# gradient is ~0 because a softmax saturates still carries rounding of the size of
# the others; torch's multi-head attention samples have entries up to 9)
TOL = {np.float32: 3e-5, np.float64: 1e-10}
# torch's multi-head attention samples draw inputs and weights from [-9, 9] with heads
# 1 or 2 wide: scores reach 1e4 and the softmax saturates. There attnc's fused
# backward (FlashAttention's: dS = P (dP - rowsum(dO O))) leaves rounding of order
# eps |dO| |v| |k| |x| where torch's math path (P (dP - rowsum(P dP)), P one-hot)
# cancels exactly: against torch's float64 on the same float32 values, attnc's float32
# gradients are off by up to 2e-4 of the sample's largest gradient, torch's float32
# by 1.4e-5 (outputs: 1.9e-5 and 7.6e-6). Its float32 gets this much room.
MHA_FLOAT32_TOL = 1e-3


@dataclasses.dataclass
class Call:
    """attnc's call of one sample: fn(*args, **kwargs); `grads` maps attnc's
    gradient names to torch's tensors; `out` turns attnc's outputs into
    torch's layout (and `grad_layout` a gradient, by name)."""

    fn: Callable
    args: tuple
    kwargs: dict
    grads: dict
    out: Callable = lambda o: o
    grad_layout: dict = dataclasses.field(default_factory=dict)
    torch_kwargs: dict | None = None  # torch's call, when it differs from the sample's (dropout off)
    dropout_off: bool = False


class Excluded(Exception):
    """A sample attnc does not take: the reason is the key of its count."""


def _np(t):
    """A torch tensor as a NumPy array of its strides (so attnc sees the reference
    inputs' strided layouts), in memory of its own (torch renormalises embedding
    weights in place); anything else as it is."""
    if not hasattr(t, "detach"):
        return t
    a = t.detach().numpy()
    span = 1 + sum((n - 1) * st for n, st in zip(a.shape, a.strides)) // a.itemsize if a.size else 1
    out = np.lib.stride_tricks.as_strided(np.empty(span, a.dtype), a.shape, a.strides)
    out[...] = a
    return out


def _grads_of(**named):
    """attnc gradient name -> torch tensor, for the tensors torch differentiates."""
    return {n: t for n, t in named.items() if hasattr(t, "requires_grad") and t.requires_grad}


# --------------------------------------------------------------------------- adapters


def adapt_sdpa(s):
    q, (k, v), kw = s.input, s.args, dict(s.kwargs)
    off = kw.get("dropout_p", 0.0) > 0
    if off:  # attnc's dropout draws its own counter-based bits (tests/test_sdpa.py checks it)
        kw["dropout_p"] = 0.0
    mask = kw.pop("attn_mask", None)
    return Call(
        attnc.scaled_dot_product_attention,
        (_np(q), _np(k), _np(v)),
        dict(kw, attn_mask=_np(mask)),
        _grads_of(query=q, key=k, value=v, attn_mask=mask),
        torch_kwargs=dict(kw, attn_mask=mask),
        dropout_off=off,
    )


def adapt_mha(s):
    """torch's functional form is sequence first, (L, B, E); attnc's batch first."""
    q = s.input
    k, v, embed_dim, heads, w_in, b_in, bias_k, bias_v, zero_attn, dropout_p, w_out, b_out = s.args
    kw = dict(s.kwargs)
    off = kw.get("training", True) and dropout_p > 0
    batched = q.dim() == 3
    seq = (lambda a: np.swapaxes(a, 0, 1)) if batched else (lambda a: a)
    params = dict(
        in_proj_weight=w_in,
        in_proj_bias=b_in,
        out_proj_weight=w_out,
        out_proj_bias=b_out,
        bias_k=bias_k,
        bias_v=bias_v,
        attn_mask=kw.get("attn_mask"),
        q_proj_weight=kw.get("q_proj_weight"),
        k_proj_weight=kw.get("k_proj_weight"),
        v_proj_weight=kw.get("v_proj_weight"),
    )
    assert embed_dim == q.shape[-1] and kw.get("use_separate_proj_weight", False) == (w_in is None)
    a = {n: _np(t) for n, t in params.items()}
    call = Call(
        attnc.multi_head_attention,
        (
            seq(_np(q)),
            seq(_np(k)),
            seq(_np(v)),
            heads,
            a["in_proj_weight"],
            a["in_proj_bias"],
            a["out_proj_weight"],
            a["out_proj_bias"],
        ),
        dict(
            bias_k=a["bias_k"],
            bias_v=a["bias_v"],
            add_zero_attn=zero_attn,
            dropout_p=0.0 if off else dropout_p,
            attn_mask=a["attn_mask"],
            q_proj_weight=a["q_proj_weight"],
            k_proj_weight=a["k_proj_weight"],
            v_proj_weight=a["v_proj_weight"],
        ),
        _grads_of(query=q, key=k, value=v, **params),
        out=lambda o: (seq(o[0]), o[1]),
        grad_layout=dict.fromkeys(("query", "key", "value"), seq),
        dropout_off=off,
    )
    if off:  # torch without dropout: training=False
        call.torch_kwargs = dict(kw, training=False)
    return call


def adapt_layer_norm(s):
    shape, *rest = s.args
    w, b = (rest + [None, None])[:2]
    eps = s.kwargs.get("eps", 1e-5)
    if eps < 0:  # var + eps may be negative: attnc refuses eps < 0 (torch takes it)
        raise Excluded("eps < 0")
    return Call(
        nn.layer_norm, (_np(s.input), shape, _np(w), _np(b), eps), {}, _grads_of(input=s.input, weight=w, bias=b)
    )


def adapt_log_softmax(s):
    (dim,) = s.args
    dtype = s.kwargs.get("dtype")
    x = _np(s.input)
    if dtype is not None:  # torch casts the input first: so does the adapter (its gradient casts back)
        x = x.astype(str(dtype).removeprefix("torch."))
    return Call(nn.log_softmax, (x, dim), {}, _grads_of(input=s.input))


def adapt_cross_entropy(s):
    (target,) = s.args
    kw = dict(s.kwargs)
    weight = kw.pop("weight", None)
    return Call(
        nn.cross_entropy,
        (_np(s.input), _np(target), _np(weight)),
        kw,
        _grads_of(input=s.input, target=target, weight=weight),
    )


def adapt_embedding(s):
    """torch's OpInfo calls embedding(idx, weight): its sample's input is the weight."""
    weight, (idx,), kw = s.input, s.args, dict(s.kwargs)
    if kw.pop("scale_grad_by_freq", False):  # attnc's embedding has no scale_grad_by_freq
        raise Excluded("scale_grad_by_freq")
    kw.pop("sparse", None)  # torch's gradient is then a sparse tensor of the same values: compared densified
    return Call(nn.embedding, (_np(idx), _np(weight)), kw, _grads_of(weight=weight))


def adapt_linear(s):
    w, *b = s.args
    b = b[0] if b else None
    return Call(nn.linear, (_np(s.input), _np(w), _np(b)), {}, _grads_of(input=s.input, weight=w, bias=b))


def adapt_conv(fn):
    def adapt(s):
        w, b = s.args
        return Call(fn, (_np(s.input), _np(w), _np(b)), dict(s.kwargs), _grads_of(input=s.input, weight=w, bias=b))

    return adapt


def adapt_unary(fn):
    def adapt(s):
        return Call(fn, (_np(s.input),), dict(s.kwargs), _grads_of(input=s.input))

    return adapt


@dataclasses.dataclass
class Op:
    name: str  # the OpInfo's name (and variant)
    adapt: Callable
    also_no_grad_samples: bool = False  # the requires_grad=False list is another, larger one
    reference_inputs: bool = False  # the OpInfo has reference inputs of its own
    # per dtype name: samples compared, {exclusion reason: count}, samples compared with dropout off
    expect: dict[str, Any] = dataclasses.field(default_factory=dict)
    tol: dict = dataclasses.field(default_factory=dict)  # per dtype name, instead of TOL


def _counts(ran, excluded=None, dropout_off=0):
    return {"ran": ran, "excluded": excluded or {}, "dropout_off": dropout_off}


BOTH = lambda c: {"float32": c, "float64": c}  # noqa: E731

OPS = {
    "scaled_dot_product_attention": Op(
        "nn.functional.scaled_dot_product_attention", adapt_sdpa, expect=BOTH(_counts(25, dropout_off=12))
    ),
    "multi_head_attention": Op(
        "nn.functional.multi_head_attention_forward",
        adapt_mha,
        also_no_grad_samples=True,
        expect=BOTH(_counts(1 + 192, dropout_off=1 + 96)),
        tol={"float32": MHA_FLOAT32_TOL},
    ),
    "layer_norm": Op("nn.functional.layer_norm", adapt_layer_norm, expect=BOTH(_counts(5, {"eps < 0": 1}))),
    "log_softmax": Op("log_softmax", adapt_log_softmax, expect=BOTH(_counts(7))),
    "log_softmax.with_dtype": Op("log_softmax.with_dtype", adapt_log_softmax, expect=BOTH(_counts(7))),
    "cross_entropy": Op("nn.functional.cross_entropy", adapt_cross_entropy, expect=BOTH(_counts(21))),
    "embedding": Op(
        "nn.functional.embedding",
        adapt_embedding,
        also_no_grad_samples=True,
        expect=BOTH(_counts(3 + 8, {"scale_grad_by_freq": 2})),
    ),
    "linear": Op("nn.functional.linear", adapt_linear, expect=BOTH(_counts(18))),
    "conv1d": Op("nn.functional.conv1d", adapt_conv(nn.conv1d), expect=BOTH(_counts(10))),
    "conv2d": Op("nn.functional.conv2d", adapt_conv(nn.conv2d), expect=BOTH(_counts(30))),
    "relu": Op("nn.functional.relu", adapt_unary(nn.relu), reference_inputs=True, expect=BOTH(_counts(4 + 41))),
    "gelu": Op("nn.functional.gelu", adapt_unary(nn.gelu), expect=BOTH(_counts(8))),
}


# --------------------------------------------------------------------------- running

_OP_DB: dict = {}  # imported once (seconds): the torch fixture is per test, so no module-scoped fixture


@pytest.fixture
def op_db(torch):
    if not _OP_DB:
        from torch.testing._internal.common_methods_invocations import op_db

        _OP_DB.update((op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""), op) for op in op_db)
    return _OP_DB


def _leaves(sample, every_float):
    """The sample with its tensors made leaves (same strides) that require grad as
    they did, or every float one: a reference input may be a view made without
    grad of a tensor that requires it, which torch's autograd does not connect."""

    def leaf(t):
        if not hasattr(t, "detach"):  # transform also hands over the dtype of log_softmax.with_dtype
            return t
        return t.detach().requires_grad_(t.is_floating_point() and (every_float or t.requires_grad))

    return sample.transform(leaf)


def _samples(torch, op, info, dtype):
    tdtype = getattr(torch, np.dtype(dtype).name)
    for s in info.sample_inputs("cpu", tdtype, requires_grad=True):
        yield _leaves(s, False)
    if op.reference_inputs:
        assert info.reference_inputs_func is not None, f"{op.name} has no reference inputs of its own any more"
        for s in info.reference_inputs("cpu", tdtype, requires_grad=True):
            yield _leaves(s, False)
    if op.also_no_grad_samples:
        for s in info.sample_inputs("cpu", tdtype, requires_grad=False):
            yield _leaves(s, True)


def _scale(*arrays):
    """max(1, the largest finite |entry| of the arrays)."""
    finite = [np.abs(a[np.isfinite(a)]).max() for a in map(np.asarray, arrays) if np.isfinite(a).any()]
    return max([1.0, *map(float, finite)])


def _close(got, want, tol, what, scale=None):
    want = np.asarray(want, np.float64)
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != torch's {want.shape}"
    scale = _scale(want) if scale is None else scale
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=tol * scale, equal_nan=True, err_msg=what)


def _torch_run(torch, info, s, call):
    """torch's outputs (a tuple) and, for a fixed random cotangent per output,
    the gradients of call.grads' tensors (zeros where torch has none)."""
    kwargs = s.kwargs if call.torch_kwargs is None else call.torch_kwargs
    out = info(s.input, *s.args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    rng = np.random.default_rng(0)
    cots = [torch.from_numpy(rng.standard_normal(tuple(o.shape)).astype(_np(o).dtype)) for o in outs]
    leaves = list(call.grads.values())
    grads = torch.autograd.grad(outs, leaves, cots, allow_unused=True) if leaves else ()
    dense = [torch.zeros_like(t) if g is None else (g.to_dense() if g.is_sparse else g) for t, g in zip(leaves, grads)]
    return [_np(o) for o in outs], [_np(c) for c in cots], dict(zip(call.grads, map(_np, dense)))


def _run_sample(torch, info, s, call, tol):
    """attnc against torch, forward and gradients; the inputs left unmodified."""
    arrays = [a for a in (*call.args, *call.kwargs.values()) if isinstance(a, np.ndarray)]
    before = [a.copy() for a in arrays]
    outputs, pullback = attnc.vjp(call.fn, *call.args, **call.kwargs)
    touts, tcots, tgrads = _torch_run(torch, info, s, call)  # after attnc: torch renormalises max_norm's weight
    raw = outputs if isinstance(outputs, tuple) else (outputs,)
    outs = call.out(outputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    assert len(outs) == len(touts)
    for i, (o, t) in enumerate(zip(outs, touts)):
        _close(o, t, tol, f"output {i}")
    # torch's cotangents in attnc's layout: call.out is its own inverse (a transpose
    # of the sequence and batch dims, or nothing)
    cots = call.out(tuple(tcots) if len(raw) > 1 else tcots[0])
    cots = cots if isinstance(cots, tuple) else (cots,)
    grads = pullback(*(np.asarray(c, dtype=r.dtype, order="C") for c, r in zip(cots, raw)))
    scale = _scale(*tgrads.values())
    for name, want in tgrads.items():
        _close(call.grad_layout.get(name, lambda a: a)(grads[name]), want, tol, f"gradient of {name}", scale)
    for a, b in zip(arrays, before):
        assert np.array_equal(a, b, equal_nan=True), "attnc modified an input"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(OPS))
def test_opinfo_samples_match_torch(name, dtype, torch, op_db):
    op = OPS[name]
    info = op_db[op.name]
    np_dtype = DTYPES[dtype]
    ran, excluded, dropout_off = 0, {}, 0
    for i, s in enumerate(_samples(torch, op, info, np_dtype)):
        try:
            call = op.adapt(s)
        except Excluded as why:
            excluded[str(why)] = excluded.get(str(why), 0) + 1
            continue
        try:
            _run_sample(torch, info, s, call, op.tol.get(dtype, TOL[np_dtype]))
        except AssertionError as e:
            raise AssertionError(f"{name} sample {i} ({s!r:.400}): {e}") from None
        ran += 1
        dropout_off += call.dropout_off
    got = {"ran": ran, "excluded": excluded, "dropout_off": dropout_off}
    assert got == op.expect[dtype], f"{name}: {got}"
