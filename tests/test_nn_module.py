"""attnc.nn mechanics: Module state dicts (torch's names, order and shapes, loading both
ways, strictness), train/eval, dtype casts, dropout, initialisation, nn.Linear and
nn.linear against torch, argument errors, inputs never modified, thread counts."""

import math
import warnings

import numpy as np
import pytest

import attnc
from attnc import nn
from helpers import close as _close
from helpers import same_bits as _same_bits

DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
REL = {np.float32: 1e-5, np.float64: 1e-12}
GREL = {np.float32: 1e-5, np.float64: 1e-10}


# (embed_dim, num_heads, keywords) of torch.nn.MultiheadAttention / attnc.nn.MultiheadAttention
MHA_CONFIGS = {
    "default": (8, 2, {}),
    "no_bias": (8, 2, {"bias": False}),
    "bias_kv": (8, 4, {"add_bias_kv": True}),
    "zero_attn": (8, 1, {"add_zero_attn": True}),
    "kdim": (6, 3, {"kdim": 4}),
    "vdim": (6, 3, {"vdim": 5}),
    "kdim_vdim_bias_kv_no_bias": (6, 2, {"kdim": 3, "vdim": 7, "add_bias_kv": True, "bias": False}),
    "kdim_vdim_equal_E": (6, 2, {"kdim": 6, "vdim": 6}),
}


def _inputs(rng, e, kw, dtype, b=2, L=4, S=5):
    kdim, vdim = kw.get("kdim") or e, kw.get("vdim") or e
    return (
        rng.standard_normal((b, L, e)).astype(dtype),
        rng.standard_normal((b, S, kdim)).astype(dtype),
        rng.standard_normal((b, S, vdim)).astype(dtype),
    )


def _torch_mha(torch, e, h, kw, dtype=np.float32):
    return torch.nn.MultiheadAttention(
        e, h, batch_first=True, **kw, dtype=torch.float64 if dtype == np.float64 else torch.float32
    )


# --------------------------------------------------------------------------- state dicts


@pytest.mark.parametrize("cfg", list(MHA_CONFIGS))
def test_state_dict_names_order_shapes_match_torch(cfg, torch):
    e, h, kw = MHA_CONFIGS[cfg]
    tsd = _torch_mha(torch, e, h, kw).state_dict()
    for dtype in DTYPES:
        sd = nn.MultiheadAttention(e, h, dtype=dtype, seed=0, **kw).state_dict()
        assert list(sd) == list(tsd), (cfg, list(sd), list(tsd))
        for n in sd:
            assert sd[n].shape == tuple(tsd[n].shape), (cfg, n, sd[n].shape, tuple(tsd[n].shape))
            assert sd[n].dtype == dtype and isinstance(sd[n], np.ndarray), (cfg, n, sd[n].dtype)
    m = nn.MultiheadAttention(e, h, seed=0, **kw)
    assert [n for n, _ in m.named_parameters()] == list(tsd)
    assert len(m.parameters()) == len(tsd)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", list(MHA_CONFIGS))
def test_attnc_state_dict_loads_into_torch(cfg, dtype, rng, torch):
    e, h, kw = MHA_CONFIGS[cfg]
    m = nn.MultiheadAttention(e, h, dtype=dtype, seed=5, **kw).eval()
    # biases start at zero (as torch's): make them non-zero so that they are exercised
    for n, p in m.state_dict().items():
        if "bias" in n:
            m.load_state_dict({n: rng.standard_normal(p.shape)}, strict=False)
    tm = _torch_mha(torch, e, h, kw, dtype).eval()
    res = tm.load_state_dict({k: torch.from_numpy(v) for k, v in m.state_dict().items()})
    assert not res.missing_keys and not res.unexpected_keys
    q, k, v = _inputs(rng, e, kw, dtype)
    kpm = rng.random((2, 5)) < 0.3
    kpm[:, 0] = False
    out, w = m(q, k, v, key_padding_mask=kpm)
    with torch.no_grad():
        tout, tw = tm(*(torch.from_numpy(x) for x in (q, k, v)), key_padding_mask=torch.from_numpy(kpm))
    _close(out, tout.numpy(), REL[dtype], f"{cfg}: output")
    _close(w, tw.numpy(), REL[dtype], f"{cfg}: weights")


def test_torch_tensors_load_directly(rng, torch):
    e, h, kw = MHA_CONFIGS["bias_kv"]
    tm = _torch_mha(torch, e, h, kw)
    m = nn.MultiheadAttention(e, h, seed=1, **kw)
    m.load_state_dict(tm.state_dict())  # tensors, some requiring grad
    for n, t in tm.state_dict().items():
        _same_bits(m.state_dict()[n], t.detach().numpy(), n)


def test_load_state_dict_strict_and_shapes(rng):
    m = nn.MultiheadAttention(8, 2, seed=0)
    sd = m.state_dict()
    before = m.state_dict()
    missing = {k: v for k, v in sd.items() if k != "out_proj.bias"}
    with pytest.raises((KeyError, RuntimeError)) as exc:
        m.load_state_dict(missing)
    assert "out_proj.bias" in str(exc.value)
    unexpected = dict(sd, **{"extra.weight": np.zeros(3, np.float32)})
    with pytest.raises((KeyError, RuntimeError)) as exc:
        m.load_state_dict(unexpected)
    assert "extra.weight" in str(exc.value)
    for n in sd:  # a failed strict load changes nothing
        _same_bits(m.state_dict()[n], before[n], n)

    # strict=False loads what fits and reports the rest
    new_w = rng.standard_normal(sd["in_proj_weight"].shape)
    res = m.load_state_dict({"in_proj_weight": new_w, "bogus": np.ones(2)}, strict=False)
    assert list(res.missing_keys) == [k for k in sd if k != "in_proj_weight"]
    assert list(res.unexpected_keys) == ["bogus"]
    _same_bits(m.in_proj_weight, new_w.astype(np.float32), "loaded in_proj_weight")
    _same_bits(m.out_proj.weight, before["out_proj.weight"], "untouched out_proj.weight")
    res = m.load_state_dict(sd)
    assert list(res.missing_keys) == [] and list(res.unexpected_keys) == []

    # wrong shape: ValueError naming the key, nothing loaded
    bad = dict(sd, **{"out_proj.weight": np.zeros((8, 7), np.float32)})
    with pytest.raises(ValueError, match=r"out_proj\.weight"):
        m.load_state_dict(bad)
    with pytest.raises(ValueError, match="in_proj_bias"):
        m.load_state_dict({"in_proj_bias": np.zeros(8)}, strict=False)
    _same_bits(m.out_proj.weight, before["out_proj.weight"], "out_proj.weight after a failed load")
    # setting a parameter attribute checks the shape too
    with pytest.raises(ValueError, match="in_proj_weight"):
        m.in_proj_weight = np.zeros((3, 3))


def test_state_dict_copies_and_load_casts(rng):
    m = nn.MultiheadAttention(8, 2, seed=0)
    sd = m.state_dict()
    sd["in_proj_weight"][:] = 7.0  # a copy: the module is unchanged
    assert not np.any(m.in_proj_weight == 7.0)
    src = {k: rng.standard_normal(v.shape) for k, v in m.state_dict().items()}  # float64
    m.load_state_dict(src)
    for n, p in m.named_parameters():
        assert p.dtype == np.float32, n
        _same_bits(p, src[n].astype(np.float32), n)
    src["out_proj.weight"][:] = 3.0  # loaded values are copies too
    assert not np.any(m.out_proj.weight == 3.0)


def test_train_eval_flags_propagate():
    m = nn.MultiheadAttention(8, 2, seed=0)
    assert m.training and m.out_proj.training
    assert m.eval() is m
    assert not m.training and not m.out_proj.training
    assert m.train() is m
    assert m.training and m.out_proj.training
    m.train(False)
    assert not m.training and not m.out_proj.training
    lin = nn.Linear(3, 2, seed=0)
    assert lin.training and not lin.eval().training


def test_to_dtype(rng):
    m = nn.MultiheadAttention(8, 2, add_bias_kv=True, seed=4).eval()
    x = rng.standard_normal((2, 3, 8))
    sd32 = m.state_dict()
    out32, _ = m(x.astype(np.float32), x.astype(np.float32), x.astype(np.float32))
    assert m.to(np.float64) is m
    assert m.dtype == np.float64 and m.out_proj.dtype == np.float64
    for n, p in m.named_parameters():
        assert p.dtype == np.float64, n
        _same_bits(p, sd32[n].astype(np.float64), n)
    out64, w64 = m(x, x, x)
    assert out64.dtype == np.float64 and w64.dtype == np.float64
    _close(out64, out32, 1e-5, "float64 vs float32 output")
    with pytest.raises(TypeError, match="float32"):
        m(x.astype(np.float32), x.astype(np.float32), x.astype(np.float32))
    with pytest.raises(TypeError, match="dtype"):
        m.to(np.int32)
    with pytest.raises(TypeError, match="dtype"):
        nn.MultiheadAttention(8, 2, dtype=np.float16)


# --------------------------------------------------------------------------- dropout


def test_dropout(rng):
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    a = nn.MultiheadAttention(8, 2, dropout=0.5, seed=11)
    b = nn.MultiheadAttention(8, 2, dropout=0.5, seed=11)
    plain = nn.MultiheadAttention(8, 2, dropout=0.0, seed=11)
    for n in a.state_dict():
        _same_bits(a.state_dict()[n], plain.state_dict()[n], f"{n}: dropout changed the init")
    oa1, wa1 = a(x, x, x)
    ob1, wb1 = b(x, x, x)
    oa2, _ = a(x, x, x)
    ob2, _ = b(x, x, x)
    _same_bits(oa1, ob1, "same seed, first call")
    _same_bits(oa2, ob2, "same seed, second call")
    assert np.max(np.abs(oa1 - oa2)) > 1e-3, "consecutive calls drew the same dropout mask"
    eval_out, eval_w = plain.eval()(x, x, x)
    assert np.max(np.abs(oa1 - eval_out)) > 1e-3, "dropout had no effect in training mode"
    # the returned weights are the probabilities before dropout
    _close(wa1, eval_w, 1e-6, "training-mode weights")
    # eval ignores dropout: bitwise the dropout-free module
    a.eval()
    ea, ew = a(x, x, x)
    _same_bits(ea, eval_out, "eval output")
    _same_bits(ew, eval_w, "eval weights")
    _same_bits(a(x, x, x)[0], ea, "eval is deterministic")
    # vjp in training mode replays the same kind of draw: same seed, same bits
    c = nn.MultiheadAttention(8, 2, dropout=0.5, seed=11)
    (oc, _), pullback = attnc.vjp(c, x, x, x)
    _same_bits(oc, oa1, "vjp forward in training mode")
    g = pullback(np.ones_like(oc), None)
    assert np.isfinite(g["in_proj_weight"]).all()


def test_dropout_one_and_bounds(rng):
    x = rng.standard_normal((1, 3, 4))
    m = nn.MultiheadAttention(4, 1, dropout=1.0, seed=0, dtype=np.float64)
    m.load_state_dict({"in_proj_bias": rng.standard_normal(12), "out_proj.bias": rng.standard_normal(4)}, strict=False)
    out, w = m(x, x, x)  # every probability dropped: zero context, output = out_proj.bias
    _close(out, np.broadcast_to(m.out_proj.bias, out.shape), 1e-12, "dropout=1")
    _close(w.sum(-1), np.ones(w.shape[:-1]), 1e-12, "weights before dropout")
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout"):
            nn.MultiheadAttention(4, 1, dropout=p)


# --------------------------------------------------------------------------- initialisation


def test_same_seed_same_parameters():
    for kw in ({}, {"kdim": 3, "vdim": 5, "add_bias_kv": True}):
        a = nn.MultiheadAttention(8, 2, seed=7, **kw).state_dict()
        b = nn.MultiheadAttention(8, 2, seed=7, **kw).state_dict()
        c = nn.MultiheadAttention(8, 2, seed=8, **kw).state_dict()
        for n in a:
            _same_bits(a[n], b[n], n)
        assert any(not np.array_equal(a[n], c[n]) for n in a), "seed has no effect"
        assert not np.array_equal(a["out_proj.weight"], c["out_proj.weight"])
    _same_bits(nn.Linear(5, 3, seed=2).weight, nn.Linear(5, 3, seed=2).weight, "Linear")
    assert not np.array_equal(nn.Linear(5, 3, seed=2).weight, nn.Linear(5, 3, seed=3).weight)


def _check_uniform(w, bound, what):
    w = np.asarray(w, np.float64).ravel()
    assert np.max(np.abs(w)) <= bound * (1 + 1e-6), f"{what}: beyond the bound {bound}"
    assert np.max(np.abs(w)) > 0.95 * bound, f"{what}: far inside the bound {bound}"
    np.testing.assert_allclose(np.std(w), bound / math.sqrt(3), rtol=0.08, err_msg=what)
    assert abs(np.mean(w)) < 0.05 * bound, what


def test_init_statistics(torch):
    E = 64
    m = nn.MultiheadAttention(E, 4, add_bias_kv=True, seed=0)
    # torch: xavier_uniform_ on (3E, E): bound sqrt(6 / (E + 3E))
    _check_uniform(m.in_proj_weight, math.sqrt(6 / (4 * E)), "in_proj_weight")
    # the three blocks are independent draws, not copies
    assert not np.array_equal(m.in_proj_weight[:E], m.in_proj_weight[E : 2 * E])
    # out_proj: torch.nn.Linear's kaiming_uniform(a=sqrt(5)): bound 1 / sqrt(E)
    _check_uniform(m.out_proj.weight, 1 / math.sqrt(E), "out_proj.weight")
    assert np.all(m.in_proj_bias == 0) and np.all(m.out_proj.bias == 0)
    # bias_k, bias_v: xavier_normal_ on (1, 1, E): std sqrt(2 / (E + E))
    for n in ("bias_k", "bias_v"):
        w = getattr(m, n).ravel()
        np.testing.assert_allclose(np.std(w), math.sqrt(1 / E), rtol=0.25, err_msg=n)
    assert not np.array_equal(m.bias_k, m.bias_v)
    sep = nn.MultiheadAttention(E, 4, kdim=32, vdim=96, seed=0)
    _check_uniform(sep.q_proj_weight, math.sqrt(6 / (E + E)), "q_proj_weight")
    _check_uniform(sep.k_proj_weight, math.sqrt(6 / (E + 32)), "k_proj_weight")
    _check_uniform(sep.v_proj_weight, math.sqrt(6 / (E + 96)), "v_proj_weight")
    lin = nn.Linear(50, 40, seed=0)
    _check_uniform(lin.weight, 1 / math.sqrt(50), "Linear.weight")
    assert np.max(np.abs(lin.bias)) <= 1 / math.sqrt(50) and np.std(lin.bias) > 0.05
    # same statistics as torch's own initialisation
    torch.manual_seed(0)
    t = torch.nn.MultiheadAttention(E, 4, batch_first=True)
    np.testing.assert_allclose(np.std(m.in_proj_weight), t.in_proj_weight.detach().std().item(), rtol=0.08)
    np.testing.assert_allclose(np.std(m.out_proj.weight), t.out_proj.weight.detach().std().item(), rtol=0.08)


# --------------------------------------------------------------------------- Linear

LINEAR_CASES = [
    ((4, 5), 3, True),
    ((2, 3, 5), 3, False),
    ((5,), 2, True),
    ((2, 1, 3, 7), 4, True),
    ((0, 5), 3, True),
    ((3, 5), 1, False),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda c: f"{c[0]}->{c[1]}{'b' if c[2] else ''}")
def test_linear_matches_torch(case, dtype, rng, torch):
    shape, out_f, has_bias = case
    in_f = shape[-1]
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((out_f, in_f)).astype(dtype)
    b = rng.standard_normal(out_f).astype(dtype) if has_bias else None
    tx, tw = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(w).requires_grad_(True)
    tb = torch.from_numpy(b).requires_grad_(True) if has_bias else None
    ty = torch.nn.functional.linear(tx, tw, tb)
    y = nn.linear(x, w, b)
    assert y.dtype == dtype and y.shape == shape[:-1] + (out_f,)
    _close(y, ty.detach().numpy(), REL[dtype], "linear")
    dy = rng.standard_normal(y.shape).astype(dtype)
    ty.backward(torch.from_numpy(dy))
    expected = {"input": tx.grad.numpy(), "weight": tw.grad.numpy()}
    if has_bias:
        expected["bias"] = tb.grad.numpy()
    y2, pullback = attnc.vjp(nn.linear, x, w, b)
    _same_bits(y2, y, "vjp forward")
    grads = pullback(dy)
    assert set(grads) == set(expected), sorted(grads)
    for n, g in expected.items():
        assert grads[n].dtype == dtype, n
        _close(grads[n], g, GREL[dtype], f"linear gradient {n}")
    # the module form, with the same parameters
    lin = nn.Linear(in_f, out_f, bias=has_bias, dtype=dtype, seed=0)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"][: 1 + has_bias]
    lin.load_state_dict({"weight": w, **({"bias": b} if has_bias else {})})
    _same_bits(lin(x), y, "Linear module")
    y3, pullback = attnc.vjp(lin, x)
    _same_bits(y3, y, "Linear vjp forward")
    mg = pullback(dy)
    assert set(mg) == set(expected), sorted(mg)
    for n in expected:
        _same_bits(mg[n], grads[n], f"Linear gradient {n}")


def test_linear_state_dict_matches_torch(torch):
    for bias in (True, False):
        t = torch.nn.Linear(5, 3, bias=bias).state_dict()
        sd = nn.Linear(5, 3, bias=bias, seed=0).state_dict()
        assert list(sd) == list(t) and all(sd[n].shape == tuple(t[n].shape) for n in sd)


def test_linear_finite_differences(rng, fd_check):
    kw = dict(input=rng.standard_normal((2, 3)), weight=rng.standard_normal((4, 3)), bias=rng.standard_normal(4))
    y, pullback = attnc.vjp(nn.linear, **kw)
    dy = rng.standard_normal(y.shape)
    fd_check(lambda **a: nn.linear(**a), kw, [dy], pullback(dy))


# --------------------------------------------------------------------------- errors


def _mha_args(rng, dtype=np.float64, E=8, L=3, S=4):
    a = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
    return dict(
        query=a(2, L, E),
        key=a(2, S, E),
        value=a(2, S, E),
        num_heads=2,
        in_proj_weight=a(3 * E, E),
        in_proj_bias=a(3 * E),
        out_proj_weight=a(E, E),
        out_proj_bias=a(E),
    )


def _call(kw):
    kw = dict(kw)
    pos = [
        kw.pop(n)
        for n in (
            "query",
            "key",
            "value",
            "num_heads",
            "in_proj_weight",
            "in_proj_bias",
            "out_proj_weight",
            "out_proj_bias",
        )
    ]
    return attnc.multi_head_attention(*pos, **kw)


def _err_cases():
    r = np.random.default_rng(0)
    base = _mha_args(r)
    a = lambda *s: r.standard_normal(s)  # noqa: E731
    return {
        "heads_not_dividing": (ValueError, r"num_heads|embed_dim", dict(base, num_heads=3)),
        "heads_zero": (ValueError, r"num_heads|embed_dim", dict(base, num_heads=0)),
        "in_proj_weight_shape": (ValueError, r"in_proj_weight", dict(base, in_proj_weight=a(24, 7))),
        "in_proj_bias_shape": (ValueError, r"in_proj_bias", dict(base, in_proj_bias=a(8))),
        "out_proj_weight_shape": (ValueError, r"out_proj_weight", dict(base, out_proj_weight=a(8, 4))),
        "out_proj_bias_shape": (ValueError, r"out_proj_bias", dict(base, out_proj_bias=a(4))),
        "in_proj_with_kdim": (ValueError, r"in_proj_weight|\bkey\b", dict(base, key=a(2, 4, 5))),
        "no_weights": (TypeError, r"q_proj_weight", dict(base, in_proj_weight=None)),
        "k_proj_weight_shape": (
            ValueError,
            r"k_proj_weight",
            dict(base, in_proj_weight=None, q_proj_weight=a(8, 8), k_proj_weight=a(8, 5), v_proj_weight=a(8, 8)),
        ),
        "bias_k_shape": (ValueError, r"bias_k", dict(base, bias_k=a(2, 8), bias_v=a(1, 1, 8))),
        "bias_v_width": (ValueError, r"bias_v", dict(base, bias_k=a(8), bias_v=a(1, 7))),
        "bias_k_alone": (ValueError, r"bias_k|bias_v", dict(base, bias_k=a(1, 1, 8))),
        "is_causal_no_mask": (ValueError, r"is_causal|attn_mask", dict(base, is_causal=True)),
        "attn_mask_shape": (ValueError, r"attn_mask", dict(base, attn_mask=np.zeros((3, 5), bool))),
        "attn_mask_BH": (ValueError, r"attn_mask", dict(base, attn_mask=a(3, 3, 4))),
        "attn_mask_dtype": (TypeError, r"attn_mask", dict(base, attn_mask=a(3, 4).astype(np.float32))),
        "attn_mask_int": (TypeError, r"attn_mask", dict(base, attn_mask=np.zeros((3, 4), np.int64))),
        "kpm_shape": (ValueError, r"key_padding_mask", dict(base, key_padding_mask=np.zeros((2, 3), bool))),
        "kpm_batch": (ValueError, r"key_padding_mask", dict(base, key_padding_mask=np.zeros((1, 4), bool))),
        "kpm_dtype": (TypeError, r"key_padding_mask", dict(base, key_padding_mask=np.zeros((2, 4), np.float32))),
        "query_dtype": (TypeError, r"\bquery\b", dict(base, query=base["query"].astype(np.int32))),
        "key_dtype": (TypeError, r"\bkey\b", dict(base, key=base["key"].astype(np.float32))),
        "weight_dtype": (
            TypeError,
            r"in_proj_weight",
            dict(base, in_proj_weight=base["in_proj_weight"].astype(np.float32)),
        ),
        "query_4d": (ValueError, r"\bquery\b", dict(base, query=a(1, 2, 3, 8))),
        "batch_mismatch": (ValueError, r"\bkey\b|\bvalue\b", dict(base, key=a(3, 4, 8), value=a(3, 4, 8))),
        "key_value_length": (ValueError, r"\bkey\b|\bvalue\b", dict(base, value=a(2, 5, 8))),
        "dropout": (ValueError, r"dropout", dict(base, dropout_p=1.5)),
    }


@pytest.mark.parametrize("case", list(_err_cases()))
def test_multi_head_attention_errors_name_the_argument(case):
    exc, pattern, kw = _err_cases()[case]
    with pytest.raises(exc, match=pattern):
        _call(kw)


def test_module_and_linear_errors(rng):
    with pytest.raises(ValueError, match=r"embed_dim|num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="batch_first"):
        nn.MultiheadAttention(8, 2, batch_first=False)
    m = nn.MultiheadAttention(8, 2, seed=0)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=r"is_causal|attn_mask"):
        m(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="attn_mask"):
        m(x, x, x, attn_mask=np.zeros((3, 4), bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=np.zeros((2, 4), bool))
    with pytest.raises(ValueError, match="key_padding_mask"):
        attnc.vjp(m, x, x, x, key_padding_mask=np.zeros((3,), bool))
    with pytest.raises(TypeError, match=r"\bvalue\b"):
        m(x, x, x.astype(np.float64))
    with pytest.raises(ValueError, match=r"\bkey\b|in_proj_weight"):
        m(x, x[..., :6], x)
    w = rng.standard_normal((4, 3))
    with pytest.raises(ValueError, match=r"\binput\b.*\bweight\b|\bweight\b.*\binput\b"):
        nn.linear(rng.standard_normal((2, 5)), w)
    with pytest.raises(ValueError, match=r"\bbias\b"):
        nn.linear(rng.standard_normal((2, 3)), w, rng.standard_normal(3))
    with pytest.raises(TypeError, match=r"\bweight\b"):
        nn.linear(rng.standard_normal((2, 3)), w.astype(np.float32))
    with pytest.raises(TypeError, match=r"\binput\b"):
        nn.linear(np.ones((2, 3), np.int64), w)
    with pytest.raises(ValueError, match=r"\bweight\b"):
        nn.linear(rng.standard_normal((2, 3)), rng.standard_normal(3))
    with pytest.raises(ValueError, match=r"\binput\b|\bweight\b"):
        nn.Linear(3, 4, seed=0)(np.ones((2, 5), np.float32))


# --------------------------------------------------------------------------- inputs unchanged


def test_inputs_never_modified(rng, assert_unchanged):
    kw = _mha_args(rng)
    kw.update(
        attn_mask=rng.standard_normal((3, 4)),
        key_padding_mask=rng.random((2, 4)) < 0.3,
        bias_k=rng.standard_normal((1, 1, 8)),
        bias_v=rng.standard_normal((1, 1, 8)),
        add_zero_attn=True,
    )
    kw["key_padding_mask"][:, 0] = False
    assert_unchanged(_call, kw)
    pos = {
        n: kw[n]
        for n in (
            "query",
            "key",
            "value",
            "num_heads",
            "in_proj_weight",
            "in_proj_bias",
            "out_proj_weight",
            "out_proj_bias",
        )
    }
    rest = {n: x for n, x in kw.items() if n not in pos}
    (out, w), pullback = assert_unchanged(attnc.vjp, attnc.multi_head_attention, *pos.values(), **rest)
    cots = [rng.standard_normal(out.shape), rng.standard_normal(w.shape)]
    g = assert_unchanged(pullback, *cots)
    assert_unchanged(pullback, *cots)
    # the pullback may be called again: same gradients (nothing saved was modified)
    g2 = pullback(*cots)
    for n in g:
        _same_bits(g[n], g2[n], n)
    # the module: its parameters are unchanged by forward and vjp
    m = nn.MultiheadAttention(8, 2, add_bias_kv=True, dtype=np.float64, seed=0)
    before = m.state_dict()
    x = rng.standard_normal((2, 3, 8))
    assert_unchanged(m, x, x[:, :2], x[:, :2], attn_mask=kw["attn_mask"][:, :2])
    (o, w), pb = assert_unchanged(attnc.vjp, m, x, x, x, key_padding_mask=kw["key_padding_mask"][:, :3])
    assert_unchanged(pb, np.ones_like(o), np.ones_like(w))
    for n, p in m.named_parameters():
        _same_bits(p, before[n], n)
    assert_unchanged(nn.linear, x, rng.standard_normal((5, 8)), rng.standard_normal(5))


def test_non_contiguous_inputs(rng):
    m = nn.MultiheadAttention(8, 2, kdim=6, seed=0, dtype=np.float64).eval()
    big = rng.standard_normal((4, 7, 16))
    q, k, v = big[::2, :3, ::2], big[1::2, 3:, 3:9], big[::-2, 6:2:-1, :8]  # strided, reversed
    o1, w1 = m(q, k, v)
    o2, w2 = m(*(np.ascontiguousarray(a) for a in (q, k, v)))
    _same_bits(o1, o2, "strided output")
    _same_bits(w1, w2, "strided weights")


# --------------------------------------------------------------------------- threads


def test_thread_counts_give_identical_bits(rng, restore_threads):
    cfg = dict(add_bias_kv=True, kdim=24, vdim=40)
    m = nn.MultiheadAttention(32, 4, seed=3, **cfg).eval()
    q = rng.standard_normal((2, 130, 32)).astype(np.float32)
    k = rng.standard_normal((2, 150, 24)).astype(np.float32)
    v = rng.standard_normal((2, 150, 40)).astype(np.float32)
    am = rng.standard_normal((130, 150)).astype(np.float32)
    kpm = rng.random((2, 150)) < 0.2
    dout = rng.standard_normal((2, 130, 32)).astype(np.float32)
    dw = rng.standard_normal((2, 4, 130, 151)).astype(np.float32)
    res = []
    for n in (1, 2):
        attnc.set_num_threads(n)
        assert attnc.get_num_threads() == n
        (o, w), pb = attnc.vjp(m, q, k, v, attn_mask=am, key_padding_mask=kpm, average_attn_weights=False)
        lin_x = rng.standard_normal((300, 64)) if n == 1 else res[0][4][0]
        lin_w = np.random.default_rng(1).standard_normal((48, 64))
        y, lpb = attnc.vjp(nn.linear, lin_x, lin_w)
        res.append((o, w, pb(dout, None), pb(dout, dw), (lin_x, y, lpb(np.ones_like(y)))))
    (o1, w1, g1, h1, l1), (o2, w2, g2, h2, l2) = res
    _same_bits(o1, o2, "output")
    _same_bits(w1, w2, "weights")
    assert set(g1) == set(g2) and "attn_mask" in g1
    for n in g1:
        _same_bits(g1[n], g2[n], f"gradient {n}")
        _same_bits(h1[n], h2[n], f"gradient {n} with dweights")
    _same_bits(l1[1], l2[1], "linear output")
    for n in l1[2]:
        _same_bits(l1[2][n], l2[2][n], f"linear gradient {n}")


def test_warnings_free(rng):
    m = nn.MultiheadAttention(8, 2, seed=0)
    x = rng.standard_normal((1, 2, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x, x, x, attn_mask=np.zeros((2, 2), bool), key_padding_mask=np.zeros((1, 2), np.float32))


# --------------------------------------------------------------------------- argument types


def test_numpy_integer_num_heads(rng):
    x = rng.standard_normal((1, 3, 8)).astype(np.float32)
    out, w = nn.MultiheadAttention(8, np.int64(2), seed=0)(x, x, x)
    expected, ew = nn.MultiheadAttention(8, 2, seed=0)(x, x, x)
    _same_bits(out, expected, "output")
    _same_bits(w, ew, "weights")


def test_zero_heads_is_a_value_error():
    with pytest.raises(ValueError, match="num_heads"):
        nn.MultiheadAttention(8, 0)
