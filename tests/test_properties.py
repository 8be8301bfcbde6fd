"""Property-based tests (hypothesis) of the attention family and the fused
scaled-dot-product attention: random shapes (0 and 1 included), memory
layouts (transposed, negative, zero and huge strides, the last through a
sparse memory-mapped file), dtypes and masks, forward and gradients, against
the NumPy float64 references (tests/reference) and torch's autograd.

CI runs the bounded, derandomised "ci" profile (tests/conftest.py); a longer
search runs by hand:

    HYPOTHESIS_PROFILE=long pytest tests/test_properties.py
"""

import mmap
import tempfile

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import attnc
from reference import attention_ref as ref
from reference import sdpa_ref

DTYPES = (np.float32, np.float64)
# A row stride of this many elements does not fit BLAS's 32-bit leading dimension.
HUGE = 2**31 + 16


# --------------------------------------------------------------------------- layouts


class _Sparse:
    """One sparse file, mapped once: arrays placed in it with huge row strides
    touch a few pages each and no disk."""

    def __init__(self):
        self.file = tempfile.TemporaryFile()  # noqa: SIM115  (open as long as its mapping, for the session)
        self.size = 8 * HUGE * 8 + 2**20  # eight float64 rows a huge stride apart
        self.file.truncate(self.size)
        self.map = mmap.mmap(self.file.fileno(), self.size)

    def place(self, a):
        """A view equal to a whose second-to-last axis has a stride of HUGE
        elements (the other axes packed below it, so views never overlap)."""
        if a.ndim < 2 or a.shape[-2] > 8:
            return None
        item = a.itemsize
        inner = [1] * a.ndim  # element strides: last axis 1, leading axes packed, rows HUGE
        span = a.shape[-1]
        for d in range(a.ndim - 3, -1, -1):
            inner[d] = span
            span *= a.shape[d]
        inner[-2] = HUGE
        view = np.ndarray(a.shape, a.dtype, buffer=self.map, strides=tuple(s * item for s in inner))
        view[...] = a
        return view


_SPARSE = None


def sparse():
    global _SPARSE
    if _SPARSE is None:
        _SPARSE = _Sparse()
    return _SPARSE


LAYOUTS = ("contiguous", "fortran", "reversed", "every_other", "broadcast", "huge")


def laid_out(a, layout, axis):
    """a (a fresh contiguous array) in the given memory layout, same values."""
    if a.size == 0 or layout == "contiguous":
        return a
    if layout == "fortran":
        return np.asfortranarray(a)
    if layout == "reversed":  # a negative stride along axis
        return np.flip(np.flip(a, axis).copy(), axis)
    if layout == "every_other":
        big = np.repeat(a, 2, axis=axis)
        return big[(slice(None),) * axis + (slice(None, None, 2),)]
    if layout == "broadcast":  # a zero stride: every entry along axis is the first
        first = np.take(a, [0], axis=axis)
        a[...] = first
        return np.broadcast_to(first, a.shape)
    if layout == "huge":
        return sparse().place(a)
    raise ValueError(layout)


@st.composite
def arrays(draw, shape, dtype, scale=1.0):
    """A float array of shape with values from a seeded generator, in a drawn layout."""
    seed = draw(st.integers(0, 2**32 - 1))
    a = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)
    layout = draw(st.sampled_from(LAYOUTS))
    axis = draw(st.integers(0, len(shape) - 1)) if shape else 0
    view = laid_out(a, layout, axis) if shape else a
    if view is None:
        view = a
    return view


def close(got, want, dtype, what):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == dtype, f"{what}: dtype {got.dtype}"
    assert np.all(np.isfinite(got)), f"{what}: not finite"
    tol = 2e-4 if dtype == np.float32 else 1e-9
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)


# --------------------------------------------------------------------------- the attention family

KINDS = ("dot", "scaled_dot", "general", "additive", "cosine")


@st.composite
def attention_cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    tq, tk = draw(st.integers(0, 5)), draw(st.integers(0, 6))
    dq, dv = draw(st.integers(1, 5)), draw(st.integers(0, 4))
    kind = draw(st.sampled_from(KINDS))
    dk = dq if kind in ("dot", "scaled_dot", "cosine") else draw(st.integers(1, 5))
    args = {
        "query": draw(arrays(lead + (tq, dq), dtype)),
        "keys": draw(arrays(lead + (tk, dk), dtype)),
        "values": draw(arrays(lead + (tk, dv), dtype)),
    }
    params = {}
    if kind == "general":
        params["weight"] = draw(arrays((dq, dk), dtype, 0.5))
    if kind == "additive":
        da = draw(st.integers(1, 4))
        params.update(
            w_query=draw(arrays((dq, da), dtype, 0.5)),
            w_key=draw(arrays((dk, da), dtype, 0.5)),
            v=draw(arrays((da,), dtype)),
        )
    masking = draw(st.sampled_from(("none", "mask", "key_lengths", "causal")))
    if masking == "mask":
        seed = draw(st.integers(0, 2**32 - 1))
        params["mask"] = np.random.default_rng(seed).random(lead + (tq, tk)) < 0.6
    elif masking == "key_lengths":
        params["key_lengths"] = np.asarray(draw(st.lists(st.integers(0, tk), min_size=1, max_size=1)))[0]
    elif masking == "causal":
        params["causal"] = True
    return dtype, kind, args, params


def torch_attention(torch, q, k, v, kind, params, allowed):
    """The score family and the masked softmax written in torch (float64),
    for its autograd: a row with nothing allowed gets zero weights."""
    kt = k.transpose(-1, -2)
    if kind == "dot":
        s = q @ kt
    elif kind == "scaled_dot":
        s = q @ kt / q.shape[-1] ** 0.5
    elif kind == "general":
        s = q @ params["weight"] @ kt
    elif kind == "additive":
        h = torch.tanh((q @ params["w_query"]).unsqueeze(-2) + (k @ params["w_key"]).unsqueeze(-3))
        s = h @ params["v"]
    else:  # cosine
        norms = q.norm(dim=-1, keepdim=True) * k.norm(dim=-1).unsqueeze(-2)
        s = (q @ kt) / torch.clamp(norms, min=ref.COSINE_EPS)
    allowed = torch.as_tensor(allowed)
    w = torch.softmax(s.masked_fill(~allowed, torch.finfo(s.dtype).min / 2), dim=-1) * allowed
    return w @ v, w


@given(attention_cases())
def test_attention_matches_the_references(torch, assert_unchanged, case):
    dtype, kind, args, params = case
    (ctx, w), pullback = assert_unchanged(attnc.vjp, attnc.attention, **args, score=kind, **params)
    want_ctx, want_w = ref.attention(**args, score=kind, **params)
    close(w, want_w, dtype, "weights")
    close(ctx, want_ctx, dtype, "context")
    rng = np.random.default_rng(0)
    dctx, dw = rng.standard_normal(ctx.shape).astype(dtype), rng.standard_normal(w.shape).astype(dtype)
    grads = pullback(dctx, dw)

    weights = {n: params[n] for n in ("weight", "w_query", "w_key", "v") if n in params}
    tensors = {n: torch.tensor(np.array(a, np.float64), requires_grad=True) for n, a in {**args, **weights}.items()}
    allowed = ref.allowed_mask(want_w.shape, params.get("mask"), params.get("key_lengths"), params.get("causal", False))
    tctx, tw = torch_attention(torch, tensors["query"], tensors["keys"], tensors["values"], kind, tensors, allowed)
    (
        (tctx * torch.tensor(dctx, dtype=torch.float64)).sum() + (tw * torch.tensor(dw, dtype=torch.float64)).sum()
    ).backward()
    for name, t in tensors.items():
        close(grads[name], t.grad.numpy(), dtype, f"gradient of {name}")


# --------------------------------------------------------------------------- fused SDPA


@st.composite
def sdpa_cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    lead = tuple(draw(st.lists(st.integers(0, 2), max_size=1)))
    hkv = draw(st.integers(0, 2))
    h = hkv * draw(st.integers(1, 2))
    L, S = draw(st.integers(0, 6)), draw(st.integers(0, 7))
    E, Ev = draw(st.integers(0, 5)), draw(st.integers(0, 4))
    q = draw(arrays(lead + (h, L, E), dtype))
    k = draw(arrays(lead + (hkv, S, E), dtype))
    v = draw(arrays(lead + (hkv, S, Ev), dtype))
    kw = {"enable_gqa": h != hkv}
    masking = draw(st.sampled_from(("none", "bool", "float", "causal")))
    mask_shape = draw(st.sampled_from([(L, S), (1, S), (h, L, S), lead + (1, L, S)]))
    seed = draw(st.integers(0, 2**32 - 1))
    if masking == "bool":
        kw["attn_mask"] = np.random.default_rng(seed).random(mask_shape) < 0.7
    elif masking == "float":
        kw["attn_mask"] = draw(arrays(mask_shape, dtype))
    elif masking == "causal":
        kw["is_causal"] = True
    if draw(st.booleans()):
        kw["scale"] = draw(st.floats(0.05, 2.0))
    return dtype, (q, k, v), kw


@given(sdpa_cases())
def test_sdpa_matches_the_references(torch, assert_unchanged, case):
    dtype, (q, k, v), kw = case
    (out, w), pullback = assert_unchanged(
        attnc.vjp, attnc.scaled_dot_product_attention, q, k, v, return_weights=True, **kw
    )
    want_out, want_w = sdpa_ref.scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
    close(out, want_out, dtype, "output")
    close(w, want_w, dtype, "weights")
    rng = np.random.default_rng(1)
    dout, dw = rng.standard_normal(out.shape).astype(dtype), rng.standard_normal(w.shape).astype(dtype)
    grads = pullback(dout, dw)
    want = sdpa_ref.sdpa_grads(q, k, v, dout, dweights=dw, **kw)
    assert set(grads) == set(want)
    for name in want:
        close(grads[name], want[name], dtype, f"gradient of {name}")

    # torch where it defines the result: every row has a key to attend to
    # (torch gives NaN where attnc gives zeros) and no head or feature is empty
    _, allowed, _, _ = sdpa_ref.sdpa_parts(
        q, k, v, kw.get("attn_mask"), kw.get("is_causal", False), kw.get("scale"), kw["enable_gqa"]
    )
    if 0 in q.shape or 0 in k.shape or 0 in v.shape or not allowed.any(-1).all():
        return
    t = {n: torch.tensor(np.array(a, np.float64), requires_grad=True) for n, a in zip("qkv", (q, k, v))}
    tkw = dict(kw)
    if "attn_mask" in tkw:
        m = np.asarray(tkw["attn_mask"])
        tkw["attn_mask"] = torch.tensor(m if m.dtype == bool else m.astype(np.float64))
    tout = torch.nn.functional.scaled_dot_product_attention(t["q"], t["k"], t["v"], **tkw)
    (tout * torch.tensor(np.asarray(dout, np.float64))).sum().backward()
    close(out, tout.detach().numpy(), dtype, "output against torch")
    grads_nw = pullback(dout, None)
    for n, name in zip("qkv", ("query", "key", "value")):
        close(grads_nw[name], t[n].grad.numpy(), dtype, f"gradient of {name} against torch")


# --------------------------------------------------------------------------- softmax


@st.composite
def softmax_cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    tq, tk = draw(st.integers(0, 5)), draw(st.integers(0, 7))
    x = draw(arrays(lead + (tq, tk), dtype, 3.0))
    kw = {}
    seed = draw(st.integers(0, 2**32 - 1))
    if draw(st.booleans()):
        kw["mask"] = np.random.default_rng(seed).random((tq, tk)) < 0.5
    if draw(st.booleans()):
        kw["causal"] = True
    return dtype, x, kw


@given(softmax_cases())
def test_softmax_matches_the_reference(case):
    dtype, x, kw = case
    w, pullback = attnc.vjp(attnc.softmax, x, **kw)
    want = ref.softmax(x, **kw)
    close(w, want, dtype, "softmax")
    dw = np.random.default_rng(2).standard_normal(w.shape)
    got = pullback(dw.astype(dtype))["scores"]
    # the softmax's Jacobian-vector product, from the float64 reference weights
    expect = want * (dw - np.sum(dw * want, axis=-1, keepdims=True))
    close(got, expect, dtype, "gradient of scores")


# --------------------------------------------------------------------------- the options of today's models


@st.composite
def sdpa_variant_cases(draw):
    """Shapes (0 and 1 included) and a random combination of ALiBi, window,
    softcap, sinks, causal and a mask."""
    dtype = draw(st.sampled_from(DTYPES))
    hkv = draw(st.integers(0, 2))
    h = hkv * draw(st.integers(1, 2))
    L, S = draw(st.integers(0, 6)), draw(st.integers(0, 7))
    E, Ev = draw(st.integers(0, 4)), draw(st.integers(0, 3))
    q, k, v = (
        draw(arrays((1, h, L, E), dtype)),
        draw(arrays((1, hkv, S, E), dtype)),
        draw(arrays((1, hkv, S, Ev), dtype)),
    )
    kw = {"enable_gqa": True}
    side = st.one_of(st.none(), st.integers(0, 7))
    if draw(st.booleans()):
        kw["alibi_slopes"] = draw(arrays((h,), dtype))
    if draw(st.booleans()):
        kw["window"] = (draw(side), draw(side))
    if draw(st.booleans()):
        kw["softcap"] = draw(st.floats(0.1, 5.0))
    if draw(st.booleans()):
        kw["sinks"] = draw(arrays((h,), dtype))
    masking = draw(st.sampled_from(("none", "bool", "float", "causal")))
    if masking == "bool":
        kw["attn_mask"] = np.random.default_rng(draw(st.integers(0, 99))).random((L, S)) < 0.7
    elif masking == "float":
        kw["attn_mask"] = draw(arrays((L, S), dtype))
    elif masking == "causal":
        kw["is_causal"] = True
    return dtype, (q, k, v), kw


@given(sdpa_variant_cases())
def test_sdpa_variants_match_the_reference(assert_unchanged, case):
    """Forward against the NumPy reference; gradients (every float input, the
    weights' cotangent included) against its central differences."""
    from conftest import numeric_vjp
    from reference import sdpa_variants_ref

    dtype, (q, k, v), kw = case
    (out, w), pullback = assert_unchanged(
        attnc.vjp, attnc.scaled_dot_product_attention, q, k, v, return_weights=True, **kw
    )
    ref_kw = {n: a for n, a in kw.items() if n != "enable_gqa"}

    def reference(query, key, value, **more):
        return sdpa_variants_ref.scaled_dot_product_attention(query, key, value, return_weights=True, **more)

    want_out, want_w = reference(q, k, v, **ref_kw)
    close(out, want_out, dtype, "output")
    close(w, want_w, dtype, "weights")
    rng = np.random.default_rng(1)
    dout, dw = rng.standard_normal(out.shape).astype(dtype), rng.standard_normal(w.shape).astype(dtype)
    grads = pullback(dout, dw)
    args = {"query": q, "key": k, "value": v, **ref_kw}
    names = [n for n, a in args.items() if isinstance(a, np.ndarray) and a.dtype != bool]
    assert set(grads) == set(names)
    want = numeric_vjp(reference, args, [np.asarray(dout, np.float64), np.asarray(dw, np.float64)], names, 1e-6)
    for name in names:
        tol = 2e-4 if dtype == np.float32 else 1e-6  # central differences: O(eps^2) and rounding
        np.testing.assert_allclose(grads[name], want[name], atol=tol * max(1.0, np.abs(want[name]).max(initial=0)))
