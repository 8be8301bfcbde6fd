"""attnc.scaled_dot_product_attention: against torch and the NumPy reference, every mask
kind, causal, GQA, odd and multi-tile sizes, weights, gradients (torch autograd and
finite differences), dropout, threads, errors, layouts."""

import numpy as np
import pytest

import attnc
from helpers import close as _close
from helpers import same_bits as _same_bits
from reference import sdpa_ref as ref

REL = {np.float32: 1e-5, np.float64: 1e-12}  # forward, vs torch and reference
GREL = {np.float32: 1e-5, np.float64: 1e-10}  # gradients
DTYPES = [np.float32, np.float64]
GRAD_NAMES = ("query", "key", "value")


def sdpa(*args, **kwargs):
    return attnc.scaled_dot_product_attention(*args, **kwargs)


# --------------------------------------------------------------------------- helpers


def _qkv(rng, lead, h, hkv, L, S, E, Ev, dtype=np.float64):
    q = rng.standard_normal(lead + (h, L, E)).astype(dtype)
    k = rng.standard_normal(lead + (hkv, S, E)).astype(dtype)
    v = rng.standard_normal(lead + (hkv, S, Ev)).astype(dtype)
    return q, k, v


def _bool_mask(rng, shape, p=0.7):
    return rng.random(shape) < p


def _mask_kwargs(kind, rng, lead, h, L, S, dtype):
    """attn_mask / is_causal keyword arguments of one mask kind, for 4-D inputs
    (lead = (B,)). Float masks have the call's dtype."""
    B = lead[0] if lead else 1
    full = lead + (h, L, S)
    if kind == "none":
        return {}
    if kind == "causal":
        return {"is_causal": True}
    if kind.startswith(("bool_", "float_")):
        typ, shp = kind.split("_", 1)
        shape = {"LS": (L, S), "1HLS": (1, h, L, S), "B11S": (B, 1, 1, S), "full": full, "inf": (L, S)}[shp]
        if typ == "bool":
            return {"attn_mask": _bool_mask(rng, shape)}
        m = rng.standard_normal(shape)
        if shp == "inf":  # -inf entries, including whole rows
            m = np.where(rng.random(shape) < 0.6, m, -np.inf)
            m[L // 2, :] = -np.inf
        return {"attn_mask": m.astype(dtype)}
    raise ValueError(kind)


MASK_KINDS = [
    "none",
    "causal",
    "bool_LS",
    "bool_1HLS",
    "bool_B11S",
    "bool_full",
    "float_LS",
    "float_1HLS",
    "float_B11S",
    "float_full",
    "float_inf",
]


def _allowed_rows(q, k, v, kw):
    """Bool (..., H, L): rows that have at least one key they may attend to."""
    kw = {n: x for n, x in kw.items() if n not in ("dropout_p", "return_weights", "seed")}
    _, allowed, _, _ = ref.sdpa_parts(q, k, v, **kw)
    return allowed.any(axis=-1)


def _torch_sdpa(torch, q, k, v, kw, dout=None):
    """Run torch's SDPA in the inputs' dtype; returns (output, grads or None)."""
    F = torch.nn.functional
    tq, tk, tv = (torch.from_numpy(np.array(x)).requires_grad_(dout is not None) for x in (q, k, v))
    tkw = {}
    tmask = None
    for n, x in kw.items():
        if n in ("return_weights", "seed"):
            continue
        if n == "attn_mask" and x is not None:
            tmask = torch.from_numpy(np.array(x))
            if tmask.is_floating_point() and dout is not None:
                tmask.requires_grad_(True)
            tkw[n] = tmask
        else:
            tkw[n] = x
    out = F.scaled_dot_product_attention(tq, tk, tv, **tkw)
    if dout is None:
        return out.detach().numpy(), None
    out.backward(torch.from_numpy(np.array(dout)))
    grads = {"query": tq.grad.numpy(), "key": tk.grad.numpy(), "value": tv.grad.numpy()}
    if tmask is not None and tmask.requires_grad:
        grads["attn_mask"] = tmask.grad.numpy()
    return out.detach().numpy(), grads


def _ref_grads(q, k, v, dout, kw, dweights=None, keep_mask=None):
    kw = {n: x for n, x in kw.items() if n not in ("return_weights", "seed")}
    return ref.sdpa_grads(q, k, v, dout, dweights=dweights, keep_mask=keep_mask, **kw)


def _check_forward(torch, q, k, v, kw, dtype, what):
    """attnc vs reference (all rows) and torch (rows with an allowed key); weights vs
    the reference softmax; fully masked rows exactly zero."""
    rel = REL[dtype]
    out = sdpa(q, k, v, **kw)
    L = q.shape[-2]
    Ev = v.shape[-1]
    assert isinstance(out, np.ndarray) and out.dtype == dtype, what
    assert out.shape == q.shape[:-2] + (L, Ev), what
    eout, ew = ref.scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
    _close(out, eout, rel, f"{what}: output vs reference")
    rows = _allowed_rows(q, k, v, kw)
    if (~rows).any():
        assert np.all(out[~rows] == 0.0), f"{what}: fully masked rows not zero"
    tout, _ = _torch_sdpa(torch, q, k, v, kw)
    _close(out[rows], tout[rows], rel, f"{what}: output vs torch")
    res = sdpa(q, k, v, return_weights=True, **kw)
    assert isinstance(res, tuple) and len(res) == 2, what
    o2, w = res
    assert w.dtype == dtype and w.shape == ew.shape, f"{what}: weights {w.shape} {w.dtype}"
    _close(w, ew, rel, f"{what}: weights vs reference")
    _close(o2, eout, rel, f"{what}: output with return_weights")
    if (~rows).any():
        assert np.all(w[~rows] == 0.0), f"{what}: fully masked weights not zero"
    return out


# --------------------------------------------------------------------------- forward

SHAPES = [(5, 7, 8, 8), (7, 5, 8, 8), (6, 6, 24, 5), (1, 9, 8, 3), (9, 1, 8, 3), (37, 53, 24, 24), (1, 1, 4, 4)]
HEADS = [(4, 4, False), (4, 2, True), (4, 1, True), (2, 2, True)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"H{h[0]}kv{h[1]}{'g' if h[2] else ''}")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "L{}S{}E{}Ev{}".format(*s))
def test_forward_every_mask_kind(shape, heads, dtype, rng, torch):
    L, S, E, Ev = shape
    h, hkv, gqa = heads
    lead = (2,)
    q, k, v = _qkv(rng, lead, h, hkv, L, S, E, Ev, dtype)
    for kind in MASK_KINDS:
        kw = _mask_kwargs(kind, rng, lead, h, L, S, dtype)
        if gqa:
            kw["enable_gqa"] = True
        _check_forward(torch, q, k, v, kw, dtype, f"mask {kind}")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("L,S", [(4, 9), (9, 4), (7, 7), (1, 5), (5, 1)])
def test_causal_top_left(L, S, dtype, rng, torch):
    q, k, v = _qkv(rng, (2,), 3, 3, L, S, 6, 4, dtype)
    out = _check_forward(torch, q, k, v, {"is_causal": True}, dtype, "causal")
    # top-left: query 0 sees only key 0, so its output is value row 0
    _close(out[..., 0, :], v[..., 0, :].astype(np.float64), REL[dtype], "row 0 = value 0")
    _, w = sdpa(q, k, v, is_causal=True, return_weights=True)
    assert np.all(np.triu(np.ones((L, S), bool), 1) <= (w == 0)), "weights above diagonal"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_2d_3d_5d_inputs(dtype, rng, torch):
    # 2-D: (L, E), (S, E), (S, Ev)
    q = rng.standard_normal((6, 8)).astype(dtype)
    k = rng.standard_normal((9, 8)).astype(dtype)
    v = rng.standard_normal((9, 5)).astype(dtype)
    for kw in [
        {},
        {"is_causal": True},
        {"attn_mask": _bool_mask(rng, (6, 9))},
        {"attn_mask": rng.standard_normal((1, 9)).astype(dtype)},
        {"scale": 0.3},
    ]:
        out = _check_forward(torch, q, k, v, kw, dtype, f"2-D {sorted(kw)}")
        assert out.shape == (6, 5)
    # 3-D: (H, L, E), GQA
    q, k, v = _qkv(rng, (), 4, 2, 5, 7, 8, 3, dtype)
    for kw in [
        {"enable_gqa": True},
        {"enable_gqa": True, "is_causal": True},
        {"enable_gqa": True, "attn_mask": rng.standard_normal((4, 1, 7)).astype(dtype)},
    ]:
        _check_forward(torch, q, k, v, kw, dtype, f"3-D {sorted(kw)}")
    # 5-D: (B1, B2, H, L, E), GQA, broadcast masks
    q, k, v = _qkv(rng, (2, 3), 4, 2, 5, 7, 8, 3, dtype)
    for kw in [
        {"enable_gqa": True},
        {"enable_gqa": True, "is_causal": True},
        {"enable_gqa": True, "attn_mask": _bool_mask(rng, (3, 1, 1, 7))},
        {"enable_gqa": True, "attn_mask": rng.standard_normal((2, 1, 1, 5, 7)).astype(dtype)},
        {"enable_gqa": True, "attn_mask": rng.standard_normal((5, 7)).astype(dtype)},
    ]:
        out = _check_forward(torch, q, k, v, kw, dtype, f"5-D {sorted(kw)}")
        assert out.shape == (2, 3, 4, 5, 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_scale_and_e_ne_ev(dtype, rng, torch):
    q, k, v = _qkv(rng, (2,), 2, 2, 7, 11, 12, 5, dtype)
    for scale in (0.3, 1.0, 2.5):
        _check_forward(torch, q, k, v, {"scale": scale}, dtype, f"scale {scale}")
        _check_forward(torch, q, k, v, {"scale": scale, "is_causal": True}, dtype, "scale+causal")
    # the default scale is 1/sqrt(E), not 1/sqrt(Ev)
    _close(sdpa(q, k, v), sdpa(q, k, v, scale=1 / np.sqrt(12)), REL[dtype], "default scale")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_fully_masked_rows_are_zero(dtype, rng, torch):
    q, k, v = _qkv(rng, (2,), 2, 2, 6, 5, 4, 3, dtype)
    bm = _bool_mask(rng, (2, 2, 6, 5), 0.8)
    bm[0, 1, 2] = False
    bm[1, :, 4] = False
    bm[:, :, 0] = False
    fm = np.where(bm, rng.standard_normal(bm.shape), -np.inf).astype(dtype)
    for m in (bm, fm):
        out, w = sdpa(q, k, v, attn_mask=m, return_weights=True)
        dead = ~bm.any(-1)
        assert dead.sum() >= 5
        assert np.all(out[dead] == 0.0) and np.all(w[dead] == 0.0), m.dtype
        assert np.isfinite(out).all() and np.isfinite(w).all()
        _check_forward(torch, q, k, v, {"attn_mask": m}, dtype, f"fully masked {m.dtype}")
        (o, pb) = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, attn_mask=m)
        g = pb(np.ones_like(o))
        assert np.all(g["query"][dead] == 0.0), "dquery of fully masked rows"
        for n in g:
            assert np.isfinite(g[n]).all(), n
        eg = _ref_grads(q, k, v, np.ones(o.shape), {"attn_mask": m})
        for n in eg:
            _close(g[n], eg[n], GREL[dtype], f"gradient {n} vs reference")
    # every key masked for every query
    out = sdpa(q, k, v, attn_mask=np.zeros((6, 5), bool))
    assert np.all(out == 0.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("L,S", [(300, 300), (257, 331), (331, 129)])
def test_multi_tile_sizes(L, S, dtype, rng, torch):
    q, k, v = _qkv(rng, (1,), 2, 2, L, S, 32, 16, dtype)
    for kw in [
        {},
        {"is_causal": True},
        {"attn_mask": rng.standard_normal((L, S)).astype(dtype)},
        {"attn_mask": _bool_mask(rng, (1, 1, 1, S), 0.5)},
    ]:
        _check_forward(torch, q, k, v, kw, dtype, f"L{L} S{S} {sorted(kw)}")


# --------------------------------------------------------------------------- gradients vs torch


def _grad_cases(rng, dtype):
    def fl(*shape):
        return rng.standard_normal(shape).astype(dtype)

    def qkv(lead, h, hkv, L, S, E, Ev):
        return _qkv(rng, lead, h, hkv, L, S, E, Ev, dtype)

    every_row = _bool_mask(rng, (5, 7))
    every_row[:, 3] = True
    return {
        "plain": (qkv((2,), 2, 2, 5, 7, 8, 8), {}),
        "causal_L<S": (qkv((2,), 2, 2, 5, 9, 8, 6), {"is_causal": True}),
        "causal_L>S": (qkv((2,), 2, 2, 9, 5, 8, 6), {"is_causal": True}),
        "causal_L=S": (qkv((2,), 2, 2, 7, 7, 8, 6), {"is_causal": True}),
        "gqa2_mask1HLS": (qkv((2,), 4, 2, 5, 7, 8, 3), {"enable_gqa": True, "attn_mask": fl(1, 4, 5, 7)}),
        "gqa1_causal": (qkv((2,), 4, 1, 6, 6, 8, 3), {"enable_gqa": True, "is_causal": True}),
        "bool_LS": (qkv((2,), 2, 2, 5, 7, 8, 4), {"attn_mask": every_row}),
        "float_B11S": (qkv((2,), 2, 2, 5, 7, 8, 4), {"attn_mask": fl(2, 1, 1, 7)}),
        "float_full": (qkv((2,), 2, 2, 5, 7, 8, 4), {"attn_mask": fl(2, 2, 5, 7)}),
        "E!=Ev_scale": (qkv((2,), 2, 2, 5, 7, 24, 5), {"scale": 0.3}),
        "odd": (qkv((1,), 2, 2, 37, 53, 24, 24), {"attn_mask": fl(37, 53)}),
        "2d": ((fl(5, 8), fl(7, 8), fl(7, 3)), {"attn_mask": fl(5, 7)}),
        "5d_gqa": (qkv((2, 3), 4, 2, 5, 7, 8, 3), {"enable_gqa": True, "is_causal": True}),
        "tiles": (qkv((1,), 2, 2, 300, 300, 32, 32), {}),
        "tiles_causal_gqa": (qkv((1,), 2, 1, 300, 280, 32, 16), {"enable_gqa": True, "is_causal": True}),
        "tiles_mask": (qkv((1,), 1, 1, 290, 310, 32, 32), {"attn_mask": fl(290, 310)}),
    }


GRAD_CASES = list(_grad_cases(np.random.default_rng(0), np.float64))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("case", GRAD_CASES)
def test_gradients_match_torch(case, dtype, rng, torch):
    (q, k, v), kw = _grad_cases(rng, dtype)[case]
    out, pullback = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, **kw)
    dout = rng.standard_normal(out.shape).astype(dtype)
    grads = pullback(dout)
    float_mask = "attn_mask" in kw and kw["attn_mask"].dtype.kind == "f"
    names = set(GRAD_NAMES) | ({"attn_mask"} if float_mask else set())
    assert set(grads) == names, sorted(grads)
    args = {"query": q, "key": k, "value": v, "attn_mask": kw.get("attn_mask")}
    for n in names:
        assert grads[n].shape == args[n].shape and grads[n].dtype == dtype, n
    tout, tgrads = _torch_sdpa(torch, q, k, v, kw, dout)
    _close(out, tout, REL[dtype], "output vs torch")
    eg = _ref_grads(q, k, v, dout, kw)
    for n in names:
        _close(grads[n], tgrads[n], GREL[dtype], f"{case}: gradient {n} vs torch")
        _close(grads[n], eg[n], GREL[dtype], f"{case}: gradient {n} vs reference")


# --------------------------------------------------------------------------- finite differences


def _fd_cases(rng):
    def a(*shape):
        return rng.standard_normal(shape)

    dead = _bool_mask(rng, (4, 5))
    dead[1] = False
    finf = np.where(_bool_mask(rng, (1, 2, 4, 5)), a(1, 2, 4, 5), -np.inf)
    finf[0, 1, 2] = -np.inf
    return {
        "plain": dict(query=a(1, 2, 4, 3), key=a(1, 2, 5, 3), value=a(1, 2, 5, 2)),
        "causal_L<S": dict(query=a(1, 2, 3, 3), key=a(1, 2, 5, 3), value=a(1, 2, 5, 2), is_causal=True),
        "causal_L>S": dict(query=a(1, 2, 5, 3), key=a(1, 2, 3, 3), value=a(1, 2, 3, 2), is_causal=True),
        "gqa2_float_mask": dict(
            query=a(1, 4, 3, 3), key=a(1, 2, 4, 3), value=a(1, 2, 4, 2), attn_mask=a(4, 1, 4), enable_gqa=True
        ),
        "gqa1_causal": dict(
            query=a(2, 2, 4, 3), key=a(2, 1, 4, 3), value=a(2, 1, 4, 2), is_causal=True, enable_gqa=True
        ),
        "float_mask_full": dict(query=a(2, 1, 3, 3), key=a(2, 1, 4, 3), value=a(2, 1, 4, 2), attn_mask=a(2, 1, 3, 4)),
        "float_mask_inf": dict(query=a(1, 2, 4, 3), key=a(1, 2, 5, 3), value=a(1, 2, 5, 2), attn_mask=finf),
        "bool_mask_dead_row": dict(query=a(1, 2, 4, 3), key=a(1, 2, 5, 3), value=a(1, 2, 5, 2), attn_mask=dead),
        "weights_too": dict(
            query=a(1, 2, 4, 3), key=a(1, 2, 5, 3), value=a(1, 2, 5, 2), attn_mask=a(4, 5), return_weights=True
        ),
        "weights_causal_gqa": dict(
            query=a(1, 2, 4, 3),
            key=a(1, 1, 4, 3),
            value=a(1, 1, 4, 2),
            is_causal=True,
            enable_gqa=True,
            return_weights=True,
        ),
        "2d_scale": dict(query=a(3, 4), key=a(5, 4), value=a(5, 3), scale=0.7, attn_mask=a(3, 5)),
        "E!=Ev": dict(query=a(1, 1, 3, 5), key=a(1, 1, 4, 5), value=a(1, 1, 4, 2)),
    }


@pytest.mark.parametrize("case", list(_fd_cases(np.random.default_rng(0))))
def test_gradients_match_finite_differences(case, rng, check_vjp):
    kw = _fd_cases(rng)[case]
    check_vjp(
        attnc.scaled_dot_product_attention,
        ref.scaled_dot_product_attention,
        kw,
        rng,
        positional=("query", "key", "value"),
    )


# --------------------------------------------------------------------------- broadcasting


def _broadcast_cases(rng, dtype):
    """(query, key, value, kwargs): leading dims that torch broadcasts."""

    def a(*shape):
        return rng.standard_normal(shape).astype(dtype)

    return {
        # torch's OpInfo sample: a 3-d query is (H, L, E) against (B, H, S, E)
        "opinfo_q3d_kv4d": (a(4, 3, 8), a(4, 4, 6, 8), a(4, 4, 6, 8), {}),
        "q2d_kv4d_causal": (a(5, 8), a(2, 3, 7, 8), a(2, 3, 7, 4), {"is_causal": True}),
        "kv_lead_differ": (a(2, 1, 5, 8), a(1, 3, 7, 8), a(2, 3, 7, 4), {"attn_mask": a(5, 7)}),
        "q_heads_1": (a(2, 1, 5, 8), a(2, 3, 7, 8), a(2, 3, 7, 4), {"attn_mask": a(2, 1, 5, 7)}),
        "gqa_lead": (a(1, 4, 5, 8), a(3, 2, 7, 8), a(1, 2, 7, 4), {"enable_gqa": True}),
        "gqa_k_v_heads_differ": (a(2, 4, 5, 8), a(2, 2, 7, 8), a(2, 1, 7, 4), {"enable_gqa": True, "is_causal": True}),
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("case", list(_broadcast_cases(np.random.default_rng(0), np.float64)))
def test_broadcast_leading_dims_match_torch(case, dtype, rng, torch):
    """The dims before the last two broadcast as torch broadcasts them, and
    the gradients are summed back over them (each in its argument's shape)."""
    q, k, v, kw = _broadcast_cases(rng, dtype)[case]
    out, pullback = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, **kw)
    dout = rng.standard_normal(out.shape).astype(dtype)
    grads = pullback(dout)
    tout, tgrads = _torch_sdpa(torch, q, k, v, kw, dout)
    assert out.shape == tout.shape and out.dtype == dtype
    _close(out, tout, REL[dtype], f"{case}: output vs torch")
    assert set(grads) == set(tgrads), sorted(grads)
    for n, g in grads.items():
        assert g.dtype == dtype, n
        _close(g, tgrads[n], GREL[dtype], f"{case}: gradient {n} vs torch")


def _broadcast_ref(query, key, value, attn_mask=None, is_causal=False, enable_gqa=False):
    """The float64 reference on inputs broadcast (and kv heads repeated) by
    hand, so finite differences check the sums over broadcast dims."""
    q, k, v = (np.asarray(x, np.float64) for x in (query, key, value))
    if enable_gqa:
        hkv = int(np.lcm(k.shape[-3], v.shape[-3]))
        k = np.repeat(k, hkv // k.shape[-3], axis=-3)
        v = np.repeat(v, hkv // v.shape[-3], axis=-3)
        lead = np.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
        q, k, v = (np.broadcast_to(x, lead + x.shape[-3:]) for x in (q, k, v))
    else:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        q, k, v = (np.broadcast_to(x, lead + x.shape[-2:]) for x in (q, k, v))
    return ref.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=enable_gqa)


@pytest.mark.parametrize("case", ["q2d_kv4d_causal", "kv_lead_differ", "gqa_k_v_heads_differ"])
def test_broadcast_gradients_match_finite_differences(case, rng, check_vjp):
    q, k, v, kw = _broadcast_cases(rng, np.float64)[case]
    q, k, v = q[..., :3, :3], k[..., :4, :3], v[..., :4, :2]  # small: every entry is perturbed
    if "attn_mask" in kw:
        kw = {"attn_mask": kw["attn_mask"][..., :3, :4]}
    check_vjp(
        attnc.scaled_dot_product_attention,
        _broadcast_ref,
        dict(query=q, key=k, value=v, **kw),
        rng,
        positional=("query", "key", "value"),
    )


# --------------------------------------------------------------------------- dropout


def _recover_keep(q, k, seed, p, lead, hkv, S, **kw):
    """attnc's keep-mask for this call shape, recovered with value = identity (S x S):
    the output is then the dropped-out probability matrix itself."""
    eye = np.broadcast_to(np.eye(S, dtype=q.dtype), lead + (hkv, S, S)).copy()
    pd = sdpa(q, k, eye, dropout_p=p, seed=seed, **kw)
    return pd != 0.0, pd


def test_dropout_same_seed_same_bits(rng):
    q, k, v = _qkv(rng, (2,), 2, 2, 9, 11, 8, 4)
    a = sdpa(q, k, v, dropout_p=0.3, seed=11)
    b = sdpa(q, k, v, dropout_p=0.3, seed=11)
    c = sdpa(q, k, v, dropout_p=0.3, seed=12)
    _same_bits(a, b, "same seed")
    assert not np.array_equal(a, c), "different seeds gave the same output"
    assert not np.allclose(a, sdpa(q, k, v), atol=1e-3), "dropout had no effect"
    n1 = sdpa(q, k, v, dropout_p=0.3)
    n2 = sdpa(q, k, v, dropout_p=0.3)
    assert not np.array_equal(n1, n2), "seed=None gave the same draw twice"


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_dropout_matches_reference_with_recovered_keep_mask(dtype, rng):
    B, H, HKV, L, S, p = 2, 4, 2, 48, 40, 0.3
    q, k, v = _qkv(rng, (B,), H, HKV, L, S, 8, S, dtype)
    keep, pd = _recover_keep(q, k, 5, p, (B,), HKV, S, enable_gqa=True)
    probs = ref.scaled_dot_product_attention(q, k, v, enable_gqa=True, return_weights=True)[1]
    assert (probs > 0).all()
    # the dropped-out matrix is probs * keep / (1 - p)
    _close(pd, np.where(keep, probs / (1 - p), 0.0), REL[dtype], "dropped-out probabilities")
    frac = 1.0 - keep.mean()
    assert abs(frac - p) < 0.02, f"fraction dropped {frac}, expected {p}"
    # independent draws per batch element, head and query row
    assert not np.array_equal(keep[0], keep[1]), "same keep-mask for every batch element"
    assert not np.array_equal(keep[:, 0], keep[:, 1]), "same keep-mask for every head"
    assert not np.array_equal(keep[..., 0, :], keep[..., 1, :]), "same keep-mask per row"
    assert not np.array_equal(keep[..., 0], keep[..., 1]), "same keep-mask per column"
    # the same seed with other values: the reference with that keep-mask
    out, w = sdpa(q, k, v, dropout_p=p, seed=5, enable_gqa=True, return_weights=True)
    eout = ref.scaled_dot_product_attention(q, k, v, dropout_p=p, enable_gqa=True, keep_mask=keep)
    _close(out, eout, REL[dtype], "output with dropout")
    _close(w, probs, REL[dtype], "weights are taken before dropout")
    # gradients: the reference's with the same keep-mask
    (o2, w2), pb = attnc.vjp(
        attnc.scaled_dot_product_attention, q, k, v, dropout_p=p, seed=5, enable_gqa=True, return_weights=True
    )
    _same_bits(o2, out, "vjp forward = plain forward")
    dout = rng.standard_normal(out.shape).astype(dtype)
    dw = rng.standard_normal(w.shape).astype(dtype)
    g = pb(dout, dw)
    eg = _ref_grads(q, k, v, dout, {"dropout_p": p, "enable_gqa": True}, dweights=dw, keep_mask=keep)
    for n in GRAD_NAMES:
        _close(g[n], eg[n], GREL[dtype], f"dropout gradient {n}")


def test_dropout_with_masks_and_causal(rng):
    q, k, v = _qkv(rng, (2,), 2, 2, 7, 9, 4, 9)
    m = rng.standard_normal((7, 9))
    for kw in [{"is_causal": True}, {"attn_mask": m}, {"attn_mask": _bool_mask(rng, (2, 1, 1, 9))}]:
        keep, _ = _recover_keep(q, k, 3, 0.4, (2,), 2, 9, **kw)
        out = sdpa(q, k, v, dropout_p=0.4, seed=3, **kw)
        eout = ref.scaled_dot_product_attention(q, k, v, dropout_p=0.4, keep_mask=keep, **kw)
        _close(out, eout, 1e-12, f"dropout {sorted(kw)}")


def test_dropout_mean_over_seeds_is_undropped_output(rng):
    B, H, L, S, E, Ev, p, N = 2, 2, 8, 8, 4, 4, 0.4, 400
    q, k, v = _qkv(rng, (B,), H, H, L, S, E, Ev)
    o0, P = ref.scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True)
    acc = np.zeros_like(o0)
    for s in range(N):
        acc += sdpa(q, k, v, dropout_p=p, seed=1000 + s, is_causal=True)
    mean = acc / N
    var = (P**2 @ v**2) * p / (1 - p)  # variance of one draw, per element
    z = (mean - o0) / np.sqrt(var / N)
    assert np.abs(z).max() < 5.5, f"max |z| = {np.abs(z).max()}"
    assert 0.4 < np.mean(z**2) < 2.0, f"mean z^2 = {np.mean(z**2)}"


def test_dropout_extremes(rng):
    q, k, v = _qkv(rng, (2,), 2, 2, 5, 6, 4, 3)
    _close(sdpa(q, k, v, dropout_p=0.0, seed=4), sdpa(q, k, v), 1e-12, "p = 0")
    out, w = sdpa(q, k, v, dropout_p=1.0, seed=4, return_weights=True)
    assert np.all(out == 0.0), "p = 1 must give zeros"
    _close(w, ref.scaled_dot_product_attention(q, k, v, return_weights=True)[1], 1e-12, "weights with p = 1")
    o, pb = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, dropout_p=1.0, seed=4)
    g = pb(np.ones_like(o))
    for n in GRAD_NAMES:
        assert np.all(g[n] == 0.0), n


@pytest.mark.parametrize("weights", [False, True])
def test_dropout_gradient_matches_finite_differences(weights, rng, fd_check):
    kw = dict(
        query=rng.standard_normal((1, 2, 4, 3)),
        key=rng.standard_normal((1, 1, 5, 3)),
        value=rng.standard_normal((1, 1, 5, 2)),
        attn_mask=rng.standard_normal((4, 5)),
        dropout_p=0.35,
        seed=21,
        enable_gqa=True,
        return_weights=weights,
    )
    outs, pb = attnc.vjp(attnc.scaled_dot_product_attention, **kw)
    outs = outs if weights else (outs,)
    cots = [rng.standard_normal(o.shape) for o in outs]
    grads = pb(*cots)
    assert set(grads) == {"query", "key", "value", "attn_mask"}
    fd_check(attnc.scaled_dot_product_attention, kw, cots, grads, wrt=["query", "key", "value", "attn_mask"])


# --------------------------------------------------------------------------- threads


def _thread_cases(rng):
    return [
        ((_qkv(rng, (1,), 1, 1, 300, 300, 32, 32)), {"is_causal": True}),
        # a single query block: one thread makes the weights in the forward's
        # pass, two threads in a second pass over the scores (flash.c)
        ((_qkv(rng, (1,), 1, 1, 100, 290, 16, 16, np.float32)), {"is_causal": True}),
        # one (batch, kv head) pair and one key block: one thread makes dQ in
        # the single-pass backward, two in a pass of its own; causal, so the
        # diagonal tiles are narrower than the key block (flash.c's tile_keys)
        ((_qkv(rng, (1,), 2, 1, 150, 200, 16, 16, np.float32)), {"is_causal": True, "enable_gqa": True}),
        (
            (_qkv(rng, (1,), 1, 1, 270, 310, 24, 16, np.float32)),
            {"attn_mask": rng.standard_normal((270, 310)).astype(np.float32)},
        ),
        (
            (_qkv(rng, (2,), 4, 2, 200, 260, 16, 8)),
            {"enable_gqa": True, "attn_mask": _bool_mask(rng, (2, 1, 1, 260)), "dropout_p": 0.2, "seed": 7},
        ),
        # broadcast leading dims: the gradients' sums over them
        (
            (
                rng.standard_normal((1, 3, 150, 16)),
                rng.standard_normal((2, 1, 270, 16)),
                rng.standard_normal((2, 3, 270, 8)),
            ),
            {"attn_mask": rng.standard_normal((150, 270))},
        ),
    ]


def test_thread_counts_give_identical_bits(rng, restore_threads):
    check_thread_bits(_thread_cases(rng))


def check_thread_bits(cases):
    """Outputs, weights and gradients (with and without the weights'
    cotangent) of each ((q, k, v), kwargs) bitwise the same on 1 and 2 threads."""
    for i, ((q, k, v), kw) in enumerate(cases):
        results = []
        for n in (1, 2):
            attnc.set_num_threads(n)
            (out, w), pb = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, return_weights=True, **kw)
            dout = np.random.default_rng(1).standard_normal(out.shape).astype(q.dtype)
            dw = np.random.default_rng(2).standard_normal(w.shape).astype(q.dtype)
            results.append((out, w, pb(dout, None), pb(dout, dw), sdpa(q, k, v, **kw)))
        (o1, w1, g1, h1, p1), (o2, w2, g2, h2, p2) = results
        _same_bits(o1, o2, f"case {i} output")
        _same_bits(w1, w2, f"case {i} weights")
        _same_bits(p1, p2, f"case {i} output without weights")
        for n in g1:
            _same_bits(g1[n], g2[n], f"case {i} gradient {n}")
            _same_bits(h1[n], h2[n], f"case {i} gradient {n} with dweights")


# --------------------------------------------------------------------------- errors


def _err_cases():
    r = np.random.default_rng(0)

    def a(*shape, dtype=np.float64):
        return r.standard_normal(shape).astype(dtype)

    q, k, v = a(2, 4, 5, 8), a(2, 4, 7, 8), a(2, 4, 7, 3)
    return {
        "query_1d": (ValueError, r"\bquery\b", (a(8), a(7, 8), a(7, 3)), {}),
        "key_1d": (ValueError, r"\bkey\b", (q, a(8), v), {}),
        "value_1d": (ValueError, r"\bvalue\b", (q, k, a(3)), {}),
        "2d_query_lead_mismatch": (ValueError, r"\bquery\b|\bkey\b", (a(5, 8), k, a(3, 4, 7, 3)), {}),
        "E_mismatch": (ValueError, r"\bkey\b", (q, a(2, 4, 7, 6), v), {}),
        "S_mismatch": (ValueError, r"\bvalue\b", (q, k, a(2, 4, 6, 3)), {}),
        "Hkv_not_dividing": (ValueError, r"\bvalue\b", (q, k, a(2, 3, 7, 3)), {"enable_gqa": True}),
        "lead_mismatch": (ValueError, r"\bquery\b|\bkey\b", (q, a(3, 4, 7, 8), a(3, 4, 7, 3)), {}),
        "gqa_not_divisible": (
            ValueError,
            r"\bquery\b|\bkey\b|enable_gqa",
            (q, a(2, 3, 7, 8), a(2, 3, 7, 3)),
            {"enable_gqa": True},
        ),
        "heads_without_gqa": (ValueError, r"\bquery\b|\bkey\b|enable_gqa", (q, a(2, 2, 7, 8), a(2, 2, 7, 3)), {}),
        "int_query": (TypeError, r"\bquery\b", (q.astype(np.int64), k, v), {}),
        "f16_value": (TypeError, r"\bvalue\b", (q, k, v.astype(np.float16)), {}),
        "mixed_dtype_key": (TypeError, r"\bkey\b", (q, k.astype(np.float32), v), {}),
        "mask_dtype": (TypeError, r"\battn_mask\b", (q, k, v), {"attn_mask": a(5, 7, dtype=np.float32)}),
        "int_mask": (TypeError, r"\battn_mask\b", (q, k, v), {"attn_mask": np.zeros((5, 7), np.int64)}),
        "mask_S": (ValueError, r"\battn_mask\b", (q, k, v), {"attn_mask": a(5, 8)}),
        "mask_L": (ValueError, r"\battn_mask\b", (q, k, v), {"attn_mask": np.ones((4, 7), bool)}),
        "mask_batch": (ValueError, r"\battn_mask\b", (q, k, v), {"attn_mask": a(3, 1, 1, 7)}),
        "mask_too_many_dims": (ValueError, r"\battn_mask\b", (q, k, v), {"attn_mask": a(2, 2, 4, 5, 7)}),
        "mask_and_causal": (
            ValueError,
            r"\battn_mask\b|\bis_causal\b",
            (q, k, v),
            {"attn_mask": np.ones((5, 7), bool), "is_causal": True},
        ),
        "dropout_negative": (ValueError, r"\bdropout_p\b", (q, k, v), {"dropout_p": -0.1}),
        "dropout_above_1": (ValueError, r"\bdropout_p\b", (q, k, v), {"dropout_p": 1.5}),
        "dropout_nan": (ValueError, r"\bdropout_p\b", (q, k, v), {"dropout_p": float("nan")}),
    }


@pytest.mark.parametrize("case", list(_err_cases()))
def test_errors_name_the_argument(case):
    exc, pattern, args, kw = _err_cases()[case]
    with pytest.raises(exc, match=pattern):
        sdpa(*args, **kw)
    with pytest.raises(exc, match=pattern):
        attnc.vjp(attnc.scaled_dot_product_attention, *args, **kw)


# --------------------------------------------------------------------------- NaN


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("where", ["query", "key", "value", "attn_mask"])
def test_nan_inputs_propagate(where, dtype, rng, torch):
    """docs/guide/conventions.md: NaN inputs propagate (no crash, no silent zeros): the NaN pattern of the
    output is torch's, and a NaN query element makes its row NaN, not a zero row."""
    q, k, v = _qkv(rng, (1,), 2, 2, 5, 7, 4, 3, dtype)
    m = rng.standard_normal((5, 7)).astype(dtype)
    args = {"query": q, "key": k, "value": v, "attn_mask": m}
    bad = args[where].copy()
    bad[(0,) * (bad.ndim - 2) + (1, 2)] = np.nan
    args[where] = bad
    kw = {"attn_mask": args["attn_mask"]}
    out = sdpa(args["query"], args["key"], args["value"], **kw)
    tout, _ = _torch_sdpa(torch, args["query"], args["key"], args["value"], kw)
    assert np.isnan(tout).any()
    np.testing.assert_array_equal(
        np.isnan(out), np.isnan(tout), err_msg=f"NaN in {where}: NaN pattern differs from torch"
    )


# --------------------------------------------------------------------------- inputs, layouts


def test_inputs_never_modified(rng, assert_unchanged):
    q, k, v = _qkv(rng, (2,), 4, 2, 6, 7, 8, 3)
    m = rng.standard_normal((1, 4, 6, 7))
    kw = dict(attn_mask=m, enable_gqa=True, dropout_p=0.2, seed=3, return_weights=True)
    assert_unchanged(sdpa, q, k, v, **kw)
    (o, w), pb = assert_unchanged(attnc.vjp, attnc.scaled_dot_product_attention, q, k, v, **kw)
    do, dw = rng.standard_normal(o.shape), rng.standard_normal(w.shape)
    assert_unchanged(pb, do, dw)


def _transposed(a):
    """Same values, a view whose last two axes are transposed in memory."""
    return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)


def _sliced_heads(a):
    """Same values, a view taking every other head of a bigger array."""
    big = np.zeros(a.shape[:-3] + (2 * a.shape[-3],) + a.shape[-2:], a.dtype)
    big[..., ::2, :, :] = a
    return big[..., ::2, :, :]


def _negstride(a):
    rev = tuple(slice(None, None, -1) for _ in a.shape)
    return np.ascontiguousarray(a[rev])[rev]


LAYOUTS = {"transposed": _transposed, "sliced_heads": _sliced_heads, "negstride": _negstride}


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_non_contiguous_inputs(layout, dtype, rng):
    q, k, v = _qkv(rng, (2,), 4, 2, 70, 90, 16, 8, dtype)
    m = rng.standard_normal((2, 4, 70, 90)).astype(dtype)
    kw = dict(enable_gqa=True, return_weights=True)
    f = LAYOUTS[layout]
    ql, kl, vl, ml = f(q), f(k), f(v), f(m)
    for x, y in [(q, ql), (k, kl), (v, vl), (m, ml)]:
        assert not y.flags.c_contiguous and np.array_equal(x, y)
    rel = 1e-14 if dtype == np.float64 else 1e-6
    mb = m > 0.3
    for extra, extra_l in [
        ({"attn_mask": m}, {"attn_mask": ml}),
        ({"is_causal": True},) * 2,
        ({"attn_mask": mb}, {"attn_mask": f(mb)}),
        ({"attn_mask": np.broadcast_to(m[:1, :1], m.shape)}, {"attn_mask": np.broadcast_to(ml[:1, :1], m.shape)}),
    ]:
        (eo, ew), epb = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, **kw, **extra)
        (go, gw), gpb = attnc.vjp(attnc.scaled_dot_product_attention, ql, kl, vl, **kw, **extra_l)
        _close(go, eo, rel, f"{layout}: output")
        _close(gw, ew, rel, f"{layout}: weights")
        do = rng.standard_normal(eo.shape).astype(dtype)
        eg, gg = epb(do, None), gpb(do, None)
        assert set(eg) == set(gg)
        for n in eg:
            assert gg[n].shape == eg[n].shape
            _close(gg[n], eg[n], rel, f"{layout}: gradient {n}")
