"""attnc.multi_head_attention and attnc.nn.MultiheadAttention against
torch.nn.MultiheadAttention(batch_first=True) loaded with the same state dict:
outputs, weights and gradients (torch autograd, finite differences) across module
configurations and mask kinds."""

import warnings

import numpy as np
import pytest

import attnc
from helpers import close as _close
from helpers import same_bits as _same_bits

REL = {np.float32: 1e-5, np.float64: 1e-12}  # forward vs torch
GREL = {np.float32: 1e-5, np.float64: 1e-10}  # gradients vs torch autograd
DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]


# module configurations: constructor keywords (embed_dim 12, 3 heads of 4 unless given)
CONFIGS = {
    "default": {},
    "bias_kv": {"add_bias_kv": True},
    "zero_attn": {"add_zero_attn": True},
    "bias_kv_zero_attn": {"add_bias_kv": True, "add_zero_attn": True},
    "kdim_vdim": {"kdim": 5, "vdim": 7},
    "no_bias": {"bias": False},
    "no_bias_kvdim_bias_kv": {"bias": False, "kdim": 6, "vdim": 3, "add_bias_kv": True},
    "one_head": {"num_heads": 1},
    "six_heads": {"num_heads": 6},
    "head_dim_1": {"num_heads": 12},
}
EXTRA_KEYS = ("add_bias_kv", "add_zero_attn")

# mask kinds of one call; "causal" uses L == S
CALLS = [
    "none",
    "kpm_bool",
    "kpm_float",
    "am_bool_LS",
    "am_float_LS",
    "am_bool_BHLS",
    "am_float_BHLS",
    "am_bool_kpm_bool",
    "am_float_kpm_float",
    "causal",
    "causal_kpm",
]
# (need_weights, average_attn_weights)
WEIGHT_MODES = [(True, True), (True, False), (False, True)]

B, E, L, S = 2, 12, 5, 7


# --------------------------------------------------------------------------- helpers


def _tdtype(torch, dtype):
    return torch.float64 if dtype == np.float64 else torch.float32


def _ctor(cfg):
    """(embed_dim, num_heads, keywords) for both torch's and attnc's constructor."""
    kw = {k: v for k, v in cfg.items() if k not in ("num_heads", "embed_dim")}
    return cfg.get("embed_dim", E), cfg.get("num_heads", 3), kw


def make_pair(torch, cfg, dtype, seed=0):
    """A torch module with random (non-zero) parameters, in eval mode, and an attnc
    module loaded from its state dict."""
    e, h, kw = _ctor(cfg)
    torch.manual_seed(seed)
    tm = torch.nn.MultiheadAttention(e, h, batch_first=True, dtype=_tdtype(torch, dtype), **kw)
    with torch.no_grad():
        for p in tm.parameters():
            p.copy_(torch.randn_like(p) * 0.4)
    tm.eval()
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    m = attnc.nn.MultiheadAttention(e, h, dtype=dtype, **kw)
    m.load_state_dict(sd)
    m.eval()
    return tm, m, sd


def make_inputs(rng, cfg, dtype, L=L, S=S, batch=(B,)):
    e = cfg.get("embed_dim", E)
    kdim = cfg.get("kdim") or e
    vdim = cfg.get("vdim") or e
    q = rng.standard_normal(batch + (L, e)).astype(dtype)
    k = rng.standard_normal(batch + (S, kdim)).astype(dtype)
    v = rng.standard_normal(batch + (S, vdim)).astype(dtype)
    return q, k, v


def _bool_ignore(rng, shape):
    """A torch-style bool mask (True = ignore) that leaves key 0 allowed everywhere,
    so no row is fully masked (torch gives NaN there)."""
    m = rng.random(shape) < 0.4
    m[..., 0] = False
    return m


def make_call(kind, rng, dtype, h, L=L, S=S, batch=(B,)):
    """Keyword arguments of forward() for one mask kind."""
    bh = (batch[0] * h,) if batch else (h,)
    if kind == "none":
        return {}
    if kind == "kpm_bool":
        return {"key_padding_mask": _bool_ignore(rng, batch + (S,))}
    if kind == "kpm_float":
        return {"key_padding_mask": rng.standard_normal(batch + (S,)).astype(dtype)}
    if kind == "am_bool_LS":
        return {"attn_mask": _bool_ignore(rng, (L, S))}
    if kind == "am_float_LS":
        return {"attn_mask": rng.standard_normal((L, S)).astype(dtype)}
    if kind == "am_bool_BHLS":
        return {"attn_mask": _bool_ignore(rng, bh + (L, S))}
    if kind == "am_float_BHLS":
        return {"attn_mask": rng.standard_normal(bh + (L, S)).astype(dtype)}
    if kind == "am_bool_kpm_bool":
        return {"attn_mask": _bool_ignore(rng, (L, S)), "key_padding_mask": _bool_ignore(rng, batch + (S,))}
    if kind == "am_float_kpm_float":
        return {
            "attn_mask": rng.standard_normal(bh + (L, S)).astype(dtype),
            "key_padding_mask": rng.standard_normal(batch + (S,)).astype(dtype),
        }
    if kind == "causal":
        assert L == S
        return {"attn_mask": np.triu(np.ones((L, S), bool), 1), "is_causal": True}
    if kind == "causal_kpm":
        assert L == S
        return {
            "attn_mask": np.triu(np.ones((L, S), bool), 1),
            "is_causal": True,
            "key_padding_mask": _bool_ignore(rng, batch + (S,)),
        }
    raise ValueError(kind)


def _shapes_for(kind):
    return (6, 6) if kind.startswith("causal") else (L, S)


def _torch_call(torch, tm, q, k, v, call, grad=False):
    """Run the torch module; returns (out, weights, leaf tensors by attnc name)."""
    leaves = {}

    def t(name, x):
        x = torch.from_numpy(np.array(x))
        if grad and x.is_floating_point():
            x.requires_grad_(True)
            leaves[name] = x
        return x

    tq, tk, tv = t("query", q), t("key", k), t("value", v)
    tcall = {n: (t(n, x) if isinstance(x, np.ndarray) else x) for n, x in call.items()}
    for p in tm.parameters():
        p.requires_grad_(True)  # also keeps torch off its inference fast path
        p.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mismatched mask types are deprecated in torch
        out, w = tm(tq, tk, tv, **tcall)
    return out, w, leaves


def _state_names(m):
    return [n for n, _ in m.named_parameters()]


def _functional(m, q, k, v, call):
    """attnc.multi_head_attention with the module's parameters."""
    p = dict(m.named_parameters())
    return attnc.multi_head_attention(
        q,
        k,
        v,
        m.num_heads,
        p.get("in_proj_weight"),
        p.get("in_proj_bias"),
        p["out_proj.weight"],
        p.get("out_proj.bias"),
        q_proj_weight=p.get("q_proj_weight"),
        k_proj_weight=p.get("k_proj_weight"),
        v_proj_weight=p.get("v_proj_weight"),
        bias_k=p.get("bias_k"),
        bias_v=p.get("bias_v"),
        add_zero_attn=m.add_zero_attn,
        **call,
    )


def _skip_combo(cfg, kind):
    # torch itself is inconsistent for is_causal with appended bias_k / zero keys (the
    # causal hint covers the appended keys only on its need_weights=False path): see
    # test_causal_hint_with_appended_keys.
    return kind.startswith("causal") and any(cfg.get(x) for x in EXTRA_KEYS)


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_forward_matches_torch(cfg_name, dtype, rng, torch):
    cfg = CONFIGS[cfg_name]
    rel = REL[dtype]
    tm, m, _ = make_pair(torch, cfg, dtype)
    h = m.num_heads
    for kind in CALLS:
        if _skip_combo(cfg, kind):
            continue
        Lk, Sk = _shapes_for(kind)
        q, k, v = make_inputs(rng, cfg, dtype, Lk, Sk)
        call = make_call(kind, rng, dtype, h, Lk, Sk)
        extra = sum(bool(cfg.get(x)) for x in EXTRA_KEYS)
        for need, avg in WEIGHT_MODES:
            what = f"{cfg_name}/{kind}/need_weights={need}/average={avg}"
            kw = dict(call, need_weights=need, average_attn_weights=avg)
            with torch.no_grad():
                tout, tw, _ = _torch_call(torch, tm, q, k, v, kw)
            for form, res in (("module", m(q, k, v, **kw)), ("functional", _functional(m, q, k, v, kw))):
                assert isinstance(res, tuple) and len(res) == 2, what
                out, w = res
                assert out.dtype == dtype and out.shape == (B, Lk, m.embed_dim), f"{what} {form}"
                _close(out, tout.numpy(), rel, f"{what} {form}: output")
                if not need:
                    assert w is None and tw is None, f"{what} {form}: weights not None"
                    continue
                wshape = (B, Lk, Sk + extra) if avg else (B, h, Lk, Sk + extra)
                assert w.dtype == dtype and w.shape == wshape, f"{what} {form}: weights {w.shape}"
                _close(w, tw.numpy(), rel, f"{what} {form}: weights")
                _close(w.sum(-1), np.ones(w.shape[:-1]), rel, f"{what} {form}: rows sum to 1")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg_name", ["default", "bias_kv_zero_attn", "kdim_vdim"])
def test_unbatched_inputs(cfg_name, dtype, rng, torch):
    cfg = CONFIGS[cfg_name]
    tm, m, _ = make_pair(torch, cfg, dtype)
    h = m.num_heads
    extra = sum(bool(cfg.get(x)) for x in EXTRA_KEYS)
    q, k, v = make_inputs(rng, cfg, dtype, batch=())
    for kind in ["none", "kpm_bool", "kpm_float", "am_bool_LS", "am_float_LS", "am_float_BHLS", "am_bool_kpm_bool"]:
        call = make_call(kind, rng, dtype, h, batch=())
        for need, avg in WEIGHT_MODES:
            kw = dict(call, need_weights=need, average_attn_weights=avg)
            what = f"unbatched {cfg_name}/{kind}/{need}/{avg}"
            with torch.no_grad():
                tout, tw, _ = _torch_call(torch, tm, q, k, v, kw)
            out, w = m(q, k, v, **kw)
            assert out.shape == (L, E), what
            _close(out, tout.numpy(), REL[dtype], what)
            if need:
                assert w.shape == ((L, S + extra) if avg else (h, L, S + extra)), what
                _close(w, tw.numpy(), REL[dtype], what + " weights")
            else:
                assert w is None, what
            # the unbatched result is the batched one of a batch of one
            bkw = {n: (x[None] if isinstance(x, np.ndarray) and n == "key_padding_mask" else x) for n, x in kw.items()}
            bout, bw = m(q[None], k[None], v[None], **bkw)
            _close(out, bout[0], REL[dtype], what + " vs batch of one")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_causal_mask_hint_gives_the_masked_result(dtype, rng, torch):
    """is_causal=True with the causal attn_mask equals the mask alone, and upper
    triangle weights are exactly zero."""
    tm, m, _ = make_pair(torch, {}, dtype)
    q, k, v = make_inputs(rng, {}, dtype, 6, 6)
    mask = np.triu(np.ones((6, 6), bool), 1)
    o1, w1 = m(q, k, v, attn_mask=mask, is_causal=True, average_attn_weights=False)
    o2, w2 = m(q, k, v, attn_mask=mask)
    _close(o1, o2, REL[dtype], "causal hint vs mask alone")
    assert np.all(w1[..., mask] == 0.0)
    o3, _ = m(q, k, v)
    assert np.max(np.abs(o3 - o1)) > 1e-3, "the causal mask had no effect"


def test_causal_hint_with_appended_keys(rng, torch):
    """add_bias_kv + is_causal: torch's need_weights=False path (SDPA is_causal over
    S + 1 keys) hides the bias key from early queries, while its need_weights=True path
    (the padded mask) shows it. attnc must at least not depend on need_weights, and match
    one of torch's two answers."""
    cfg = {"add_bias_kv": True}
    tm, m, _ = make_pair(torch, cfg, np.float64)
    q, k, v = make_inputs(rng, cfg, np.float64, 6, 6)
    mask = np.triu(np.ones((6, 6), bool), 1)
    o_true, _ = m(q, k, v, attn_mask=mask, is_causal=True, need_weights=True)
    o_false, _ = m(q, k, v, attn_mask=mask, is_causal=True, need_weights=False)
    _close(o_true, o_false, 1e-12, "attnc output depends on need_weights")
    with torch.no_grad():
        answers = [
            _torch_call(torch, tm, q, k, v, dict(attn_mask=mask, is_causal=True, need_weights=n))[0].numpy()
            for n in (True, False)
        ]
    errs = [np.max(np.abs(o_true - a)) for a in answers]
    assert min(errs) < 1e-12, errs


# --------------------------------------------------------------------------- gradients

GRAD_CALLS = ["none", "kpm_float", "am_float_LS", "am_float_BHLS", "am_bool_kpm_bool", "am_float_kpm_float", "causal"]


def _check_grads(torch, tm, m, q, k, v, call, dtype, rng, what, form="module"):
    rel = GREL[dtype]
    need = call.get("need_weights", True)
    if form == "module":
        (out, w), pullback = attnc.vjp(m, q, k, v, **call)
    else:
        p = dict(m.named_parameters())
        (out, w), pullback = attnc.vjp(
            attnc.multi_head_attention,
            q,
            k,
            v,
            m.num_heads,
            p.get("in_proj_weight"),
            p.get("in_proj_bias"),
            p["out_proj.weight"],
            p.get("out_proj.bias"),
            q_proj_weight=p.get("q_proj_weight"),
            k_proj_weight=p.get("k_proj_weight"),
            v_proj_weight=p.get("v_proj_weight"),
            bias_k=p.get("bias_k"),
            bias_v=p.get("bias_v"),
            add_zero_attn=m.add_zero_attn,
            **call,
        )
    assert (w is None) == (not need), what
    dout = rng.standard_normal(out.shape).astype(dtype)
    dw = rng.standard_normal(w.shape).astype(dtype) if need else None
    grads = pullback(dout, dw)

    tout, tw, leaves = _torch_call(torch, tm, q, k, v, call, grad=True)
    loss = (tout * torch.from_numpy(dout)).sum()
    if need:
        loss = loss + (tw * torch.from_numpy(dw)).sum()
    loss.backward()
    _close(out, tout.detach().numpy(), REL[dtype], f"{what}: output")
    expected = {n: x.grad.numpy() for n, x in leaves.items()}
    for n, p in tm.named_parameters():
        expected[n] = p.grad.numpy()
    if form == "functional":
        expected = {n.replace("out_proj.", "out_proj_"): g for n, g in expected.items()}
    assert set(grads) == set(expected), f"{what}: keys {sorted(grads)} != {sorted(expected)}"
    for n, g in expected.items():
        assert grads[n].dtype == dtype, f"{what}: gradient {n} dtype {grads[n].dtype}"
        _close(grads[n], g, rel, f"{what}: gradient {n}")
    return grads


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_gradients_match_torch_autograd(cfg_name, dtype, rng, torch):
    cfg = CONFIGS[cfg_name]
    tm, m, sd = make_pair(torch, cfg, dtype)
    for kind in GRAD_CALLS:
        if _skip_combo(cfg, kind):
            continue
        Lk, Sk = _shapes_for(kind)
        q, k, v = make_inputs(rng, cfg, dtype, Lk, Sk)
        call = make_call(kind, rng, dtype, m.num_heads, Lk, Sk)
        for need, avg in WEIGHT_MODES:
            kw = dict(call, need_weights=need, average_attn_weights=avg)
            grads = _check_grads(torch, tm, m, q, k, v, kw, dtype, rng, f"{cfg_name}/{kind}/{need}/{avg}")
            # every state_dict name has a gradient, plus the inputs and float masks
            floats = {n for n, x in call.items() if isinstance(x, np.ndarray) and x.dtype.kind == "f"}
            assert set(grads) == set(sd) | {"query", "key", "value"} | floats, sorted(grads)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg_name", ["default", "bias_kv_zero_attn", "no_bias_kvdim_bias_kv"])
def test_functional_gradients_match_torch_autograd(cfg_name, dtype, rng, torch):
    cfg = CONFIGS[cfg_name]
    tm, m, _ = make_pair(torch, cfg, dtype)
    for kind in ["none", "am_float_kpm_float", "am_bool_LS"]:
        q, k, v = make_inputs(rng, cfg, dtype)
        call = make_call(kind, rng, dtype, m.num_heads)
        for need, avg in WEIGHT_MODES:
            _check_grads(
                torch,
                tm,
                m,
                q,
                k,
                v,
                dict(call, need_weights=need, average_attn_weights=avg),
                dtype,
                rng,
                f"functional {cfg_name}/{kind}/{need}/{avg}",
                form="functional",
            )


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_unbatched_gradients_match_torch_autograd(dtype, rng, torch):
    cfg = {"add_bias_kv": True, "kdim": 5, "vdim": 7}
    tm, m, _ = make_pair(torch, cfg, dtype)
    q, k, v = make_inputs(rng, cfg, dtype, batch=())
    for kind in ["none", "am_float_kpm_float", "am_float_LS"]:
        call = make_call(kind, rng, dtype, m.num_heads, batch=())
        for need, avg in WEIGHT_MODES:
            grads = _check_grads(
                torch,
                tm,
                m,
                q,
                k,
                v,
                dict(call, need_weights=need, average_attn_weights=avg),
                dtype,
                rng,
                f"unbatched {kind}/{need}/{avg}",
            )
            assert grads["query"].shape == q.shape and grads["key"].shape == k.shape


def test_cotangent_for_absent_weights_is_a_type_error(rng):
    m = attnc.nn.MultiheadAttention(E, 3, seed=0)
    q, k, v = make_inputs(rng, {}, np.float32)
    (out, w), pullback = attnc.vjp(m, q, k, v, need_weights=False)
    assert w is None
    with pytest.raises(TypeError, match="cotangent 1"):
        pullback(np.ones_like(out), np.ones((B, L, S), np.float32))


def test_weights_cotangent_alone(rng, torch):
    """pullback(None, dweights): the gradient flows through the weights only."""
    tm, m, _ = make_pair(torch, {}, np.float64)
    q, k, v = make_inputs(rng, {}, np.float64)
    (out, w), pullback = attnc.vjp(m, q, k, v, average_attn_weights=False)
    dw = rng.standard_normal(w.shape)
    grads = pullback(None, dw)
    _, tw, leaves = _torch_call(torch, tm, q, k, v, {"average_attn_weights": False}, grad=True)
    (tw * torch.from_numpy(dw)).sum().backward()
    for n in ("query", "key", "value"):  # torch leaves .grad None for an unused input
        g = leaves[n].grad
        _close(grads[n], np.zeros(leaves[n].shape) if g is None else g.numpy(), 1e-10, n)
    for n, p in tm.named_parameters():
        g = np.zeros(p.shape) if p.grad is None else p.grad.numpy()
        _close(grads[n], g, 1e-10, n)
    # the weights do not depend on the value projection nor the output projection
    assert np.all(grads["value"] == 0) and np.all(grads["out_proj.weight"] == 0)
    assert np.max(np.abs(grads["query"])) > 1e-6


# --------------------------------------------------------------------------- finite differences


def _fd_case(rng, separate):
    E4, H2 = 4, 2
    a = lambda *s: rng.standard_normal(s) * 0.5  # noqa: E731
    kw = dict(
        query=a(1, 3, E4),
        key=a(1, 4, 3 if separate else E4),
        value=a(1, 4, 2 if separate else E4),
        in_proj_bias=a(3 * E4),
        out_proj_weight=a(E4, E4),
        out_proj_bias=a(E4),
        bias_k=a(E4),  # (E,), as torch's functional form
        bias_v=a(1, 1, E4),
        attn_mask=a(3, 4),
        key_padding_mask=a(1, 4),
    )
    if separate:
        kw.update(q_proj_weight=a(E4, E4), k_proj_weight=a(E4, 3), v_proj_weight=a(E4, 2))
    else:
        kw["in_proj_weight"] = a(3 * E4, E4)
    return kw, H2


@pytest.mark.parametrize("dropout", [0.0, 0.4], ids=["", "dropout"])
@pytest.mark.parametrize("average", [True, False], ids=["avg", "per_head"])
@pytest.mark.parametrize("separate", [False, True], ids=["in_proj", "qkv_proj"])
def test_gradients_match_finite_differences(separate, average, dropout, rng, fd_check):
    kw, h = _fd_case(rng, separate)
    # a fixed seed makes dropout a deterministic function of the inputs
    opts = dict(add_zero_attn=True, average_attn_weights=average, dropout_p=dropout, seed=3)

    def fn(**x):
        x = dict(x)
        return attnc.multi_head_attention(
            x.pop("query"),
            x.pop("key"),
            x.pop("value"),
            h,
            x.pop("in_proj_weight", None),
            x.pop("in_proj_bias"),
            x.pop("out_proj_weight"),
            x.pop("out_proj_bias"),
            **x,
            **opts,
        )

    args = {n: kw[n] for n in ("query", "key", "value")}
    rest = {n: x for n, x in kw.items() if n not in args}
    (out, w), pullback = attnc.vjp(
        attnc.multi_head_attention,
        args["query"],
        args["key"],
        args["value"],
        h,
        rest.pop("in_proj_weight", None),
        rest.pop("in_proj_bias"),
        rest.pop("out_proj_weight"),
        rest.pop("out_proj_bias"),
        **rest,
        **opts,
    )
    cots = [rng.standard_normal(out.shape), rng.standard_normal(w.shape)]
    grads = pullback(*cots)
    assert set(grads) == set(kw), sorted(grads)
    fd_check(fn, kw, cots, grads, wrt=sorted(kw), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("bias_shape", [(E,), (1, E), (1, 1, E)], ids=["E", "1E", "11E"])
def test_bias_kv_shapes_of_torch_functional(bias_shape, dtype, rng, torch):
    """torch's functional multi_head_attention_forward appends bias_k.repeat(1, B, 1),
    so bias_k / bias_v shaped (E,), (1, E) or (1, 1, E) mean the same key: attnc
    takes all three (torch's OpInfo samples pass (E,)), with gradients in each
    one's own shape, against torch's functional form and autograd."""
    a = lambda *sh: rng.standard_normal(sh).astype(dtype)  # noqa: E731
    q, k, v = a(B, L, E), a(B, S, E), a(B, S, E)
    params = dict(
        in_proj_weight=a(3 * E, E),
        in_proj_bias=a(3 * E),
        out_proj_weight=a(E, E),
        out_proj_bias=a(E),
        bias_k=a(*bias_shape),
        bias_v=a(*bias_shape),
    )
    mask = a(L, S)  # torch pads it for the appended key, as attnc does
    (out, w), pullback = attnc.vjp(
        attnc.multi_head_attention,
        q,
        k,
        v,
        3,
        params["in_proj_weight"],
        params["in_proj_bias"],
        params["out_proj_weight"],
        params["out_proj_bias"],
        bias_k=params["bias_k"],
        bias_v=params["bias_v"],
        attn_mask=mask,
    )
    dout, dw = a(*out.shape), a(*w.shape)
    grads = pullback(dout, dw)
    t = {n: torch.from_numpy(x).requires_grad_() for n, x in dict(params, query=q, key=k, value=v).items()}
    seq = lambda x: x.transpose(0, 1)  # noqa: E731  (torch's functional form is sequence first)
    tout, tw = torch.nn.functional.multi_head_attention_forward(
        seq(t["query"]),
        seq(t["key"]),
        seq(t["value"]),
        E,
        3,
        t["in_proj_weight"],
        t["in_proj_bias"],
        t["bias_k"],
        t["bias_v"],
        False,
        0.0,
        t["out_proj_weight"],
        t["out_proj_bias"],
        attn_mask=torch.from_numpy(mask),
        training=False,
    )
    ((seq(tout) * torch.from_numpy(dout)).sum() + (tw * torch.from_numpy(dw)).sum()).backward()
    _close(out, seq(tout).detach().numpy(), REL[dtype], "output")
    _close(w, tw.detach().numpy(), REL[dtype], "weights")
    for n, x in t.items():
        assert grads[n].shape == x.shape, n
        _close(grads[n], x.grad.numpy(), GREL[dtype], f"gradient of {n}")


def test_broadcast_float_mask_gradient(rng):
    """A float attn_mask that broadcasts to (L, S), here (1, S) and (S,), acts as its
    broadcast copy, and its gradient is summed back to its own shape."""
    m = attnc.nn.MultiheadAttention(E, 3, seed=2, dtype=np.float64).eval()
    q, k, v = make_inputs(rng, {}, np.float64)
    row = rng.standard_normal((1, S))
    full = np.broadcast_to(row, (L, S)).copy()
    (o_full, w_full), pb_full = attnc.vjp(m, q, k, v, attn_mask=full)
    dout, dw = rng.standard_normal(o_full.shape), rng.standard_normal(w_full.shape)
    g_full = pb_full(dout, dw)
    for mask in (row, row[0]):
        (o, w), pb = attnc.vjp(m, q, k, v, attn_mask=mask)
        _close(o, o_full, 1e-12, "output")
        _close(w, w_full, 1e-12, "weights")
        g = pb(dout, dw)
        assert g["attn_mask"].shape == mask.shape
        _close(g["attn_mask"], g_full["attn_mask"].sum(axis=0).reshape(mask.shape), 1e-12, "mask gradient")
        _close(g["query"], g_full["query"], 1e-12, "query gradient")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg_name,kind", [("bias_kv_zero_attn", "kpm_bool"), ("kdim_vdim", "am_float_BHLS")])
def test_multi_tile_sizes_match_torch(cfg_name, kind, dtype, rng, torch):
    """Sequences longer than a kernel tile, odd lengths, more heads."""
    cfg = dict(CONFIGS[cfg_name], embed_dim=32, num_heads=4)
    tm, m, _ = make_pair(torch, cfg, dtype)
    Lb, Sb = 150, 171
    q, k, v = make_inputs(rng, cfg, dtype, Lb, Sb)
    call = make_call(kind, rng, dtype, 4, Lb, Sb)
    for need, avg in [(True, False), (False, True)]:
        _check_grads(
            torch,
            tm,
            m,
            q,
            k,
            v,
            dict(call, need_weights=need, average_attn_weights=avg),
            dtype,
            rng,
            f"{cfg_name}/{kind}/L{Lb}S{Sb}/{need}",
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("LS", [(1, 1), (1, 6), (6, 1)], ids=lambda x: f"L{x[0]}S{x[1]}")
def test_length_one(LS, dtype, rng, torch):
    cfg = {"add_zero_attn": True}
    tm, m, _ = make_pair(torch, cfg, dtype)
    q, k, v = make_inputs(rng, cfg, dtype, *LS)
    _check_grads(torch, tm, m, q, k, v, {"average_attn_weights": False}, dtype, rng, f"L,S={LS}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_thread_counts_give_identical_bits(dtype, rng, torch, restore_threads):
    """Averaged weights of one batch row and one query block: one thread makes
    them in the forward's pass over every head, two threads in a second pass
    (flash.c); both give the same bits, and torch's weights."""
    cfg = {}
    tm, m, _ = make_pair(torch, cfg, dtype)
    q, k, v = make_inputs(rng, cfg, dtype, 90, 110)
    results = []
    for n in (1, 2):
        attnc.set_num_threads(n)
        results.append(m(q[:1], k[:1], v[:1], need_weights=True, average_attn_weights=True))
    (o1, w1), (o2, w2) = results
    _same_bits(o1, o2, "output")
    _same_bits(w1, w2, "averaged weights")
    with torch.no_grad():
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
        to, tw = tm(t(q[:1]), t(k[:1]), t(v[:1]), need_weights=True, average_attn_weights=True)
    _close(w1, tw.numpy(), 1e-5 if dtype == np.float32 else 1e-12, "averaged weights vs torch")
    _close(o1, to.numpy(), 1e-5 if dtype == np.float32 else 1e-12, "output vs torch")


# --------------------------------------------------------------------------- module vs functional


@pytest.mark.parametrize("cfg_name", ["default", "kdim_vdim", "bias_kv_zero_attn"])
def test_module_equals_functional_bitwise(cfg_name, rng):
    cfg = CONFIGS[cfg_name]
    e, h, kw = _ctor(cfg)
    m = attnc.nn.MultiheadAttention(e, h, seed=3, **kw).eval()
    q, k, v = make_inputs(rng, cfg, np.float32)
    call = make_call("am_float_kpm_float", rng, np.float32, h)
    mo, mw = m(q, k, v, **call)
    fo, fw = _functional(m, q, k, v, call)
    _same_bits(mo, fo, "output")
    _same_bits(mw, fw, "weights")
