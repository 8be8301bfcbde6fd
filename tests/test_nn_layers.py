"""attnc.nn.layer_norm / LayerNorm, embedding / Embedding, cross_entropy and
sinusoidal_encoding: forward and gradients against torch 2.13 (autograd) and central
finite differences of independent NumPy references (float64), state dicts, init,
argument errors, inputs never modified, and bitwise results for any thread count."""

import math

import numpy as np
import pytest

import attnc
from attnc import nn
from helpers import close, same_bits

DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
REL = {np.float32: 1e-5, np.float64: 1e-10}


def _t(torch, a, grad=False):
    """A float64 torch tensor (the reference runs in float64 on the same input values)."""
    x = torch.from_numpy(np.array(a, dtype=np.float64))
    return x.requires_grad_(grad)


# --------------------------------------------------------------------------- references


def ln_ref(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = np.asarray(input, dtype=np.float64)
    k = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def ce_ref(input, target, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    x = np.asarray(input, dtype=np.float64)
    t = np.asarray(target)
    if x.ndim == 1:
        x2, tf, shape = x[None], t.reshape(1), ()
    else:
        x2, tf, shape = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1]), t.reshape(-1), t.shape
    m = x2.max(-1, keepdims=True)
    logp = x2 - (m + np.log(np.exp(x2 - m).sum(-1, keepdims=True)))
    valid = tf != ignore_index
    tt = np.where(valid, tf, 0)
    loss = (1 - label_smoothing) * -logp[np.arange(len(tf)), tt] + label_smoothing * -logp.mean(-1)
    loss = np.where(valid, loss, 0.0)
    if reduction == "none":
        return loss.reshape(shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / valid.sum() if valid.any() else 0.0


# --------------------------------------------------------------------------- layer_norm

# leading shape, normalized_shape, weight?, bias?, eps
LN_CASES = {
    "int_wb_lead1": ((4,), 8, True, True, 1e-5),
    "int_wb_lead0": ((), 8, True, True, 1e-5),
    "int_wb_lead3": ((2, 1, 3), 6, True, True, 1e-5),
    "tuple_wb": ((3,), (4, 5), True, True, 1e-5),
    "tuple1_wb": ((2, 3), (7,), True, True, 1e-5),
    "no_params": ((3,), (6,), False, False, 1e-5),
    "weight_only": ((2, 2), 5, True, False, 1e-5),
    "bias_only": ((3,), 5, False, True, 1e-5),
    "big_eps": ((5,), 4, True, True, 0.7),
    "zero_eps": ((5,), 4, True, True, 0.0),
    "empty_batch": ((0,), 5, True, True, 1e-5),
    "empty_batch_lead3": ((2, 0, 3), (2, 3), True, True, 1e-5),
}


def _ln_inputs(rng, lead, ns, wb, bb, dtype):
    shape = (ns,) if isinstance(ns, int) else tuple(ns)
    x = (rng.standard_normal(lead + shape) * 2 + 0.5).astype(dtype)
    w = (rng.standard_normal(shape) + 1).astype(dtype) if wb else None
    b = rng.standard_normal(shape).astype(dtype) if bb else None
    return x, w, b


def _torch_ln(torch, x, ns, w, b, eps, cot):
    tx = _t(torch, x, True)
    tw = None if w is None else _t(torch, w, True)
    tb = None if b is None else _t(torch, b, True)
    shape = [ns] if isinstance(ns, int) else list(ns)
    y = torch.nn.functional.layer_norm(tx, shape, tw, tb, eps)
    y.backward(torch.from_numpy(np.asarray(cot, np.float64)))
    g = {"input": tx.grad.numpy()}
    if tw is not None:
        g["weight"] = tw.grad.numpy()
    if tb is not None:
        g["bias"] = tb.grad.numpy()
    return y.detach().numpy(), g


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("case", list(LN_CASES))
def test_layer_norm_matches_torch(case, dtype, rng, torch, assert_unchanged):
    lead, ns, wb, bb, eps = LN_CASES[case]
    x, w, b = _ln_inputs(rng, lead, ns, wb, bb, dtype)
    y = assert_unchanged(nn.layer_norm, x, ns, w, b, eps)
    assert y.dtype == dtype
    cot = rng.standard_normal(y.shape).astype(dtype)
    y_ref, g_ref = _torch_ln(torch, x, ns, w, b, eps, cot)
    close(y, y_ref, REL[dtype], f"{case} forward")
    if y.size:  # the reference really is layer norm: not a vacuous comparison
        assert np.abs(y_ref).max() > 0.1
    (y2, pullback) = attnc.vjp(nn.layer_norm, x, ns, w, b, eps)
    same_bits(y2, y, "vjp output == plain call")
    grads = pullback(cot)
    assert set(grads) == set(g_ref), (sorted(grads), sorted(g_ref))
    for name, g in grads.items():
        assert g.dtype == dtype, name
        close(g, g_ref[name], REL[dtype], f"{case} d{name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_layer_norm_non_contiguous_input(dtype, rng, torch):
    base = rng.standard_normal((6, 3, 10)).astype(dtype)
    w = rng.standard_normal(5).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    for x in (
        base[:, :, ::2],
        base.transpose(1, 0, 2)[..., 3:8],
        base[::-1, :, 1:6],
        np.asfortranarray(base[:, 0, :5]),
        base[0, :, ::2],
    ):
        assert not x.flags.c_contiguous
        y, pullback = attnc.vjp(nn.layer_norm, x, 5, weight=w, bias=b)
        cot = rng.standard_normal(y.shape).astype(dtype)
        g = pullback(cot)
        y_ref, g_ref = _torch_ln(torch, x, 5, w, b, 1e-5, cot)
        close(y, y_ref, REL[dtype], "strided forward")
        # same bits as the contiguous copy
        yc, pbc = attnc.vjp(nn.layer_norm, np.ascontiguousarray(x), 5, weight=w, bias=b)
        same_bits(y, yc, "strided vs contiguous forward")
        gc = pbc(cot)
        for name in ("input", "weight", "bias"):
            close(g[name], g_ref[name], REL[dtype], f"strided d{name}")
            same_bits(g[name], gc[name], f"strided vs contiguous d{name}")


@pytest.mark.parametrize(
    "case", ["int_wb_lead1", "tuple_wb", "no_params", "weight_only", "bias_only", "big_eps", "int_wb_lead0"]
)
def test_layer_norm_finite_differences(case, rng, check_vjp):
    lead, ns, wb, bb, eps = LN_CASES[case]
    x, w, b = _ln_inputs(rng, lead, ns, wb, bb, np.float64)
    kwargs = {"input": x, "normalized_shape": ns, "eps": eps}
    if w is not None:
        kwargs["weight"] = w
    if b is not None:
        kwargs["bias"] = b
    check_vjp(nn.layer_norm, ln_ref, kwargs, rng, positional=("input",))


LN_MODULES = {
    "default": ((6,), {}),
    "tuple": ((2, 3), {}),
    "no_affine": ((6,), {"elementwise_affine": False}),
    "no_bias": ((6,), {"bias": False}),
    "eps": ((4,), {"eps": 0.3}),
}


@pytest.mark.parametrize("cfg", list(LN_MODULES))
def test_layernorm_state_dict_matches_torch(cfg, torch):
    ns, kw = LN_MODULES[cfg]
    tsd = torch.nn.LayerNorm(ns, **kw).state_dict()
    for dtype in DTYPES:
        sd = nn.LayerNorm(ns, dtype=dtype, **kw).state_dict()
        assert list(sd) == list(tsd), (cfg, list(sd), list(tsd))
        for n in sd:
            assert sd[n].shape == tuple(tsd[n].shape) and sd[n].dtype == dtype, (cfg, n)
            # torch's initialisation: weight ones, bias zeros
            np.testing.assert_array_equal(sd[n], tsd[n].numpy())
    expected = {"default": 2, "tuple": 2, "no_affine": 0, "no_bias": 1, "eps": 2}[cfg]
    assert len(tsd) == expected


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", list(LN_MODULES))
def test_layernorm_module_loads_torch_and_matches(cfg, dtype, rng, torch):
    ns, kw = LN_MODULES[cfg]
    tm = torch.nn.LayerNorm(ns, dtype=torch.float64, **kw)
    with torch.no_grad():
        for p in tm.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(tuple(p.shape)) + 1))
    m = nn.LayerNorm(ns, dtype=dtype, **kw)
    res = m.load_state_dict(tm.state_dict())
    assert not res.missing_keys and not res.unexpected_keys
    for n, v in tm.state_dict().items():
        close(m.state_dict()[n], v.numpy(), REL[dtype], f"loaded {n}")
    x = rng.standard_normal((2, 3) + ns).astype(dtype)
    y, pullback = attnc.vjp(m, x)
    same_bits(m(x), y, "module call == vjp output")
    cot = rng.standard_normal(y.shape).astype(dtype)
    grads = pullback(cot)
    tx = _t(torch, x, True)
    ty = tm(tx)
    ty.backward(torch.from_numpy(cot.astype(np.float64)))
    close(y, ty.detach().numpy(), REL[dtype], "module forward")
    expected = {"input": tx.grad.numpy()}
    expected.update({n: p.grad.numpy() for n, p in tm.named_parameters()})
    assert set(grads) == set(expected), (sorted(grads), sorted(expected))
    for n in expected:
        close(grads[n], expected[n], REL[dtype], f"module d{n}")
    # and ours loads back into torch
    tm2 = torch.nn.LayerNorm(ns, dtype=torch.float64, **kw)
    tm2.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in m.state_dict().items()})
    for n, v in tm2.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), m.state_dict()[n].astype(np.float64))


def test_layer_norm_errors(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match="normalized_shape"):
        nn.layer_norm(x, 5)
    with pytest.raises(ValueError, match="normalized_shape"):
        nn.layer_norm(x, (2, 3, 4))
    with pytest.raises(ValueError, match="weight"):
        nn.layer_norm(x, 4, np.ones(3))
    with pytest.raises(ValueError, match="bias"):
        nn.layer_norm(x, 4, None, np.ones(5))
    with pytest.raises(TypeError, match="weight"):
        nn.layer_norm(x, 4, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="eps"):
        nn.layer_norm(x, 4, eps=-1.0)
    with pytest.raises(TypeError, match="input"):
        nn.layer_norm(x.astype(np.int64), 4)


# --------------------------------------------------------------------------- embedding


def _torch_emb(torch, ids, w, padding_idx, cot):
    tw = _t(torch, w, True)
    y = torch.nn.functional.embedding(torch.from_numpy(np.asarray(ids, np.int64)), tw, padding_idx=padding_idx)
    y.backward(torch.from_numpy(np.asarray(cot, np.float64)))
    return y.detach().numpy(), tw.grad.numpy()


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("padding_idx", [None, 2, 0, -1, -3])
@pytest.mark.parametrize("ids_shape", [(7,), (3, 5), ()])
def test_embedding_matches_torch(ids_shape, padding_idx, dtype, rng, torch, assert_unchanged):
    V, D = 6, 5
    w = rng.standard_normal((V, D)).astype(dtype)
    ids = rng.integers(0, V, size=ids_shape)
    if ids.ndim:  # repeated ids and the padding id present
        ids.reshape(-1)[:3] = [1, 1, (padding_idx if padding_idx is not None else 4) % V]
    y = assert_unchanged(nn.embedding, ids, w, padding_idx)
    assert y.shape == ids_shape + (D,) and y.dtype == dtype
    cot = rng.standard_normal(y.shape).astype(dtype)
    y_ref, g_ref = _torch_emb(torch, ids, w, padding_idx, cot)
    same_bits(y, y_ref.astype(dtype), "embedding forward is a gather")
    y2, pullback = attnc.vjp(nn.embedding, ids, w, padding_idx)
    grads = pullback(cot)
    assert set(grads) == {"weight"}
    assert grads["weight"].dtype == dtype
    close(grads["weight"], g_ref, REL[dtype], "dweight")
    if padding_idx is not None and ids.ndim:
        assert np.all(grads["weight"][padding_idx] == 0)
        assert np.any(g_ref[1] != 0)  # repeated id 1 does get gradient


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_scale(padding_idx, dtype, rng, torch):
    V, D, s = 5, 4, math.sqrt(4.0)
    w = rng.standard_normal((V, D)).astype(dtype)
    ids = np.array([[0, 3, 3, 1], [4, 1, 1, 2]])
    y, pullback = attnc.vjp(nn.embedding, ids, w, padding_idx, scale=s)
    cot = rng.standard_normal(y.shape).astype(dtype)
    g = pullback(cot)["weight"]
    y_ref, g_ref = _torch_emb(torch, ids, w, padding_idx, cot)
    close(y, s * y_ref, REL[dtype], "scaled forward")
    close(g, s * g_ref, REL[dtype], "scaled dweight")
    assert not np.allclose(g, g_ref)  # the scale does reach the gradient


@pytest.mark.parametrize("padding_idx", [None, 1, -2])
def test_embedding_finite_differences(padding_idx, rng, check_vjp):
    V, D = 5, 3
    w = rng.standard_normal((V, D))
    ids = np.array([[0, 1, 1], [3, 1, 4]])
    w0 = w.copy()

    def ref(input, weight, padding_idx=None, scale=1.0):
        weff = np.array(weight, dtype=np.float64)
        if padding_idx is not None:  # the padding row is a constant: no gradient
            weff[padding_idx] = w0[padding_idx]
        return weff[input] * scale

    check_vjp(
        nn.embedding,
        ref,
        {"input": ids, "weight": w, "padding_idx": padding_idx, "scale": 1.7},
        rng,
        positional=("input", "weight"),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_embedding_module(dtype, rng, torch):
    m = nn.Embedding(7, 4, padding_idx=-2, dtype=dtype, seed=3)
    assert m.padding_idx == 5
    assert m.weight.shape == (7, 4) and m.weight.dtype == dtype
    assert np.all(m.weight[5] == 0)
    assert np.all(np.delete(m.weight, 5, axis=0) != 0)
    same_bits(nn.Embedding(7, 4, padding_idx=-2, dtype=dtype, seed=3).weight, m.weight, "same seed")
    assert not np.array_equal(nn.Embedding(7, 4, dtype=dtype, seed=4).weight, m.weight)
    w = nn.Embedding(400, 50, dtype=np.float64, seed=1).weight  # N(0, 1), as torch's
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02
    tm = torch.nn.Embedding(7, 4, padding_idx=5)
    assert list(m.state_dict()) == list(tm.state_dict()) == ["weight"]
    m.load_state_dict(tm.state_dict())
    close(m.weight, tm.weight.detach().numpy(), 1e-7, "loaded weight")
    ids = np.array([[5, 0, 6], [0, 0, 2]])
    y, pullback = attnc.vjp(m, ids)
    same_bits(y, m(ids), "module call == vjp output")
    cot = rng.standard_normal(y.shape).astype(dtype)
    grads = pullback(cot)
    _, g_ref = _torch_emb(torch, ids, m.weight, 5, cot)
    assert set(grads) == {"weight"}
    close(grads["weight"], g_ref, REL[dtype], "module dweight")
    assert np.all(grads["weight"][5] == 0)


def test_embedding_errors(rng):
    w = rng.standard_normal((4, 3))
    for bad in ([0, 4], [-1, 0], [[1, 2], [9, 0]]):
        with pytest.raises(ValueError, match="input"):
            nn.embedding(np.array(bad), w)
    for bad in (np.array([0.0, 1.0]), np.array([True, False])):
        with pytest.raises(TypeError, match="input"):
            nn.embedding(bad, w)
    with pytest.raises(ValueError, match="padding_idx"):
        nn.embedding(np.array([0]), w, padding_idx=4)
    with pytest.raises(ValueError, match="padding_idx"):
        nn.embedding(np.array([0]), w, padding_idx=-5)
    with pytest.raises(TypeError, match="padding_idx"):
        nn.embedding(np.array([0]), w, padding_idx=1.0)
    with pytest.raises(ValueError, match="weight"):
        nn.embedding(np.array([0]), w[0])
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(4, 3, padding_idx=4)


def _renorm_ref(w, ids, max_norm, norm_type):
    """torch's embedding_renorm_ in float64 NumPy: the rows of ids whose
    norm_type-norm exceeds max_norm, times max_norm / (norm + 1e-7)."""
    w = np.array(w, np.float64)
    for i in np.unique(ids):
        norm = np.linalg.norm(w[i], ord=norm_type)
        if norm > max_norm:
            w[i] *= max_norm / (norm + 1e-7)
    return w


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, np.inf])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_max_norm_matches_torch(padding_idx, norm_type, dtype, rng, torch, assert_unchanged):
    """torch's max_norm: the looked-up rows whose norm exceeds it come out renormalised
    (torch also renormalises them in its weight, in place: attnc's functional form
    leaves its input alone); the gradient is torch's (the lookup's scatter)."""
    w = (rng.standard_normal((6, 5)) * np.array([[0.1], [2], [3], [0.2], [1.5], [4]])).astype(dtype)
    ids = np.array([[0, 1, 1], [2, 4, 3]])
    y = assert_unchanged(nn.embedding, ids, w, padding_idx, 1.0, norm_type)
    tw = _t(torch, w, True)
    ty = torch.nn.functional.embedding(torch.from_numpy(ids), tw, padding_idx, 1.0, norm_type)
    cot = rng.standard_normal(y.shape).astype(dtype)
    ty.backward(torch.from_numpy(cot.astype(np.float64)))
    close(y, ty.detach().numpy(), REL[dtype], "forward vs torch")
    renormed = _renorm_ref(w, ids, 1.0, norm_type)
    close(y, renormed[ids], REL[dtype], "forward vs NumPy")
    assert not np.allclose(renormed[ids], w[ids]) and np.allclose(renormed[0], w[0])  # some rows, not all
    y2, pullback = attnc.vjp(nn.embedding, ids, w, padding_idx, max_norm=1.0, norm_type=norm_type)
    same_bits(y2, y, "vjp output == plain call")
    close(pullback(cot)["weight"], tw.grad.numpy(), REL[dtype], "dweight vs torch")


def test_embedding_max_norm_finite_differences(rng, check_vjp):
    """The gradient with max_norm is the lookup's, the renormalisation a constant
    shift of the clipped rows (torch's semantics): finite differences of that."""
    w = rng.standard_normal((5, 3)) * 2
    ids = np.array([[0, 1, 1], [3, 1, 4]])
    shift = _renorm_ref(w, ids, 1.5, 2.0) - w

    def ref(input, weight, padding_idx=None, max_norm=None):
        weff = np.array(weight, dtype=np.float64) + shift
        if padding_idx is not None:
            weff[padding_idx] = w[padding_idx] + shift[padding_idx]
        return weff[input]

    check_vjp(
        nn.embedding,
        ref,
        {"input": ids, "weight": w, "padding_idx": 4, "max_norm": 1.5},
        rng,
        positional=("input", "weight"),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_embedding_module_max_norm_renormalises_its_weight_as_torch(dtype, rng, torch):
    """torch.nn.Embedding(max_norm=...) renormalises the looked-up rows of its own
    weight at every forward; attnc's module does the same to its own table."""
    tm = torch.nn.Embedding(8, 4, max_norm=1.2, norm_type=3.0, dtype=torch.float64)
    m = nn.Embedding(8, 4, max_norm=1.2, norm_type=3.0, dtype=dtype)
    assert "max_norm=1.2" in repr(m)
    with torch.no_grad():  # from the test's generator, not torch's global one: rows 0.1 to 3 times N(0, 1)
        tm.weight.copy_(torch.from_numpy(rng.standard_normal((8, 4)) * np.linspace(0.1, 3, 8)[:, None]))
    m.load_state_dict(tm.state_dict())
    before = m.weight.copy()
    for ids in (np.array([[1, 7, 7], [3, 6, 0]]), np.array([5, 7, 2])):
        y, pullback = attnc.vjp(m, ids)
        ty = tm(torch.from_numpy(ids))
        close(y, ty.detach().numpy(), REL[dtype], "output")
        close(m.weight, tm.weight.detach().numpy(), REL[dtype], "the module's renormalised weight")
        cot = rng.standard_normal(y.shape).astype(dtype)
        tm.weight.grad = None
        ty.backward(torch.from_numpy(cot.astype(np.float64)))
        close(pullback(cot)["weight"], tm.weight.grad.numpy(), REL[dtype], "dweight")
    np.testing.assert_array_equal(m.weight[4], before[4])  # never looked up: as it was
    assert np.linalg.norm(before[[7]], 3, axis=1).min() > 1.2  # a looked-up row the forward renormalised


def test_embedding_max_norm_errors(rng):
    w = rng.standard_normal((4, 3))
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="max_norm"):
            nn.embedding(np.array([0]), w, max_norm=bad)
    for bad in (0.0, -2.0, float("nan")):
        with pytest.raises(ValueError, match="norm_type"):
            nn.embedding(np.array([0]), w, max_norm=1.0, norm_type=bad)
    with pytest.raises(TypeError, match="max_norm"):
        nn.embedding(np.array([0]), w, max_norm=True)
    with pytest.raises(ValueError, match="max_norm"):
        nn.Embedding(4, 3, max_norm=-1.0)


# --------------------------------------------------------------------------- gelu


def gelu_ref(input, approximate="none"):
    x = np.asarray(input, np.float64)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(10, 10), (), (0, 3), (3, 5000)])
def test_gelu_matches_torch(shape, approximate, dtype, rng, torch, assert_unchanged):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    y = assert_unchanged(nn.gelu, x, approximate)
    tx = _t(torch, x, True)
    ty = torch.nn.functional.gelu(tx, approximate=approximate)
    dy = rng.standard_normal(shape).astype(dtype)
    ty.backward(torch.from_numpy(dy.astype(np.float64)))
    assert y.shape == shape and y.dtype == dtype
    close(y, ty.detach().numpy(), REL[dtype], "forward vs torch")
    close(y, gelu_ref(x, approximate), REL[dtype], "forward vs NumPy")
    y2, pullback = attnc.vjp(nn.gelu, x, approximate=approximate)
    same_bits(y2, y, "vjp output == plain call")
    g = pullback(dy)["input"]
    assert g.shape == shape and g.dtype == dtype
    close(g, tx.grad.numpy(), REL[dtype], "gradient vs torch")
    xs = x[..., ::2] if x.ndim else x  # strided
    close(nn.gelu(xs, approximate), gelu_ref(xs, approximate), REL[dtype], "strided input")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_finite_differences(approximate, rng, check_vjp):
    check_vjp(
        nn.gelu,
        gelu_ref,
        {"input": rng.standard_normal((4, 6)) * 2, "approximate": approximate},
        rng,
        positional=("input",),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_gelu_module(dtype, rng, torch):
    x = rng.standard_normal((2, 7)).astype(dtype)
    for approximate in ("none", "tanh"):
        m = nn.GELU(approximate, dtype=dtype)
        assert repr(m) == f"GELU(approximate='{approximate}')" == repr(torch.nn.GELU(approximate))
        assert len(m.state_dict()) == 0
        y, pullback = attnc.vjp(m, x)
        same_bits(y, nn.gelu(x, approximate), "module == function")
        dy = rng.standard_normal(x.shape).astype(dtype)
        same_bits(pullback(dy)["input"], attnc.vjp(nn.gelu, x, approximate)[1](dy)["input"], "module gradient")
    with pytest.raises(ValueError, match="approximate"):
        nn.gelu(x, "fast")
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("erf")
    with pytest.raises(TypeError, match="input"):
        nn.gelu(np.ones(3, np.int64))


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_torch_compat_paths_thread_count_bitwise(dtype, rng, restore_threads):
    """gelu over several C blocks, weighted cross-entropy with class ids and with
    probabilities (every gradient, the weight's summed over many rows), and
    embedding with max_norm: the same bits for 1 and 2 threads."""
    x = rng.standard_normal((3, 9000)).astype(dtype)
    logits = rng.standard_normal((300, 150)).astype(dtype)
    tgt = rng.integers(0, 150, size=300)
    tgt[::7] = -100
    probs = rng.random((300, 150)).astype(dtype)
    w = (rng.random(150) + 0.5).astype(dtype)
    table = (rng.standard_normal((40, 150)) * 2).astype(dtype)
    ids = rng.integers(0, 40, size=(3, 100))

    def run():
        out = []
        for approximate in ("none", "tanh"):
            y, pb = attnc.vjp(nn.gelu, x, approximate)
            out += [y, pb(x)["input"]]
        for t in (tgt, probs):
            loss, pb = attnc.vjp(nn.cross_entropy, logits, t, w, reduction="mean", label_smoothing=0.1)
            out += [loss, *pb(np.asarray(0.7, dtype)).values()]
        e, pb = attnc.vjp(nn.embedding, ids, table, None, 1.0, 3.0)
        out += [e, pb(e)["weight"]]
        return out

    attnc.set_num_threads(1)
    one = run()
    attnc.set_num_threads(2)
    two = run()
    assert len(one) == len(two) == 13
    for i, (a, c) in enumerate(zip(one, two)):
        same_bits(a, c, f"result {i}")


# --------------------------------------------------------------------------- cross_entropy


def _ce_inputs(rng, kind, ignore_index, dtype, N=6, C=5, d1=3):
    if kind == "NC":
        x = rng.standard_normal((N, C)) * 2
        t = rng.integers(0, C, size=N)
        ign = [1, N - 1]
    elif kind == "C":
        x = rng.standard_normal(C) * 2
        t = np.array(rng.integers(0, C))
        ign = []
    else:
        x = rng.standard_normal((N, C, d1)) * 2
        t = rng.integers(0, C, size=(N, d1))
        ign = [(0, 1), (N // 2, d1 - 1), (N - 1, 0)]
    if ignore_index is not None and t.ndim:
        t = t.copy()
        for i in ign:
            t[i] = ignore_index
    return x.astype(dtype), t


CE_IGNORE = {"default": None, "custom": 2, "custom_neg": -7}


def _ce_kwargs(ignore, reduction, ls):
    kw = {"reduction": reduction, "label_smoothing": ls}
    if CE_IGNORE[ignore] is not None:
        kw["ignore_index"] = CE_IGNORE[ignore]
    return kw


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", list(CE_IGNORE))
@pytest.mark.parametrize("kind", ["NC", "C", "NCd"])
def test_cross_entropy_matches_torch(kind, ignore, reduction, ls, dtype, rng, torch, assert_unchanged):
    ig = CE_IGNORE[ignore]
    x, t = _ce_inputs(rng, kind, -100 if ig is None else ig, dtype)
    kw = _ce_kwargs(ignore, reduction, ls)
    out = assert_unchanged(nn.cross_entropy, x, t, **kw)
    assert out.dtype == dtype and out.shape == (t.shape if reduction == "none" else ())
    tx = _t(torch, x, True)
    tout = torch.nn.functional.cross_entropy(tx, torch.from_numpy(t.astype(np.int64)), **kw)
    cot = rng.standard_normal(out.shape).astype(dtype)
    tout.backward(torch.from_numpy(cot.astype(np.float64)))
    close(out, tout.detach().numpy(), REL[dtype], "cross_entropy forward")
    out2, pullback = attnc.vjp(nn.cross_entropy, x, t, **kw)
    same_bits(out2, out, "vjp output == plain call")
    grads = pullback(cot)
    assert set(grads) == {"input"}
    assert grads["input"].dtype == dtype and grads["input"].shape == x.shape
    close(grads["input"], tx.grad.numpy(), REL[dtype], "cross_entropy dinput")
    if t.ndim:  # ignored targets get no gradient, the others do
        ignored = t == (-100 if ig is None else ig)
        gi = np.moveaxis(grads["input"], 1, -1)
        assert ignored.any() and np.all(gi[ignored] == 0)
        assert np.all(np.abs(gi[~ignored]).sum(-1) > 0)


@pytest.mark.parametrize("ls", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kind", ["NC", "C", "NCd"])
def test_cross_entropy_finite_differences(kind, reduction, ls, rng, check_vjp):
    x, t = _ce_inputs(rng, kind, 3, np.float64, N=4, C=4, d1=2)
    check_vjp(
        nn.cross_entropy,
        ce_ref,
        {"input": x, "target": t, "ignore_index": 3, "reduction": reduction, "label_smoothing": ls},
        rng,
        positional=("input", "target"),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_cross_entropy_all_ignored(ls, dtype, rng, torch):
    x = rng.standard_normal((3, 4)).astype(dtype)
    t = np.full(3, -100)
    out, pullback = attnc.vjp(nn.cross_entropy, x, t, label_smoothing=ls)
    assert out.shape == () and out.dtype == dtype
    assert out == 0 and not np.isnan(out)
    g = pullback(np.asarray(1.0, dtype))["input"]
    assert np.all(g == 0) and g.shape == x.shape
    # torch gives NaN here: attnc's documented choice differs on purpose
    tout = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(t), label_smoothing=ls)
    assert torch.isnan(tout)
    # sum and none: zeros, as torch
    assert nn.cross_entropy(x, t, reduction="sum") == 0
    assert np.all(nn.cross_entropy(x, t, reduction="none") == 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_cross_entropy_masked_classes(dtype, torch):
    # -inf logits (masked classes, as a pointer network's) and ignored rows of
    # only -inf: finite loss and gradient, equal to torch's on the kept rows
    x = np.array([[0.5, -np.inf, 1.0, -0.3], [-np.inf] * 4, [2.0, 0.1, -np.inf, -np.inf]], dtype)
    t = np.array([2, -100, 1])
    out, pullback = attnc.vjp(nn.cross_entropy, x, t)
    g = pullback(np.asarray(1.0, dtype))["input"]
    assert np.isfinite(out) and np.isfinite(g).all()
    tx = torch.from_numpy(x[[0, 2]]).requires_grad_()
    tl = torch.nn.functional.cross_entropy(tx, torch.from_numpy(t[[0, 2]]))
    tl.backward()
    np.testing.assert_allclose(out, tl.item(), rtol=1e-6)
    np.testing.assert_allclose(g[[0, 2]], tx.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert np.all(g[1] == 0)


def ce_full_ref(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """torch's cross_entropy in float64 NumPy, class weights and class-probability
    targets included: loss_n = -sum_c q_nc w_c log p_nc, q the smoothed target
    (one-hot for class ids, 0 for ignored ones); the mean divides by the summed
    weights of the targets not ignored, or by the rows for probabilities."""
    x = np.asarray(input, np.float64)
    C = x.shape[0 if x.ndim == 1 else 1]
    rows = lambda a: a[None] if a.ndim == 1 else np.moveaxis(a, 1, -1).reshape(-1, C)  # noqa: E731
    x2 = rows(x)
    logp = x2 - np.log(np.exp(x2 - x2.max(-1, keepdims=True)).sum(-1, keepdims=True)) - x2.max(-1, keepdims=True)
    w = np.ones(C) if weight is None else np.asarray(weight, np.float64)
    t = np.asarray(target)
    probs = t.dtype.kind == "f"
    if probs:
        q = rows(t.astype(np.float64))
        denom = x2.shape[0]
        shape = x.shape[:1] + x.shape[2:] if x.ndim > 1 else ()
    else:
        tf = t.reshape(-1)
        valid = tf != ignore_index
        q = np.eye(C)[np.where(valid, tf, 0)] * valid[:, None]
        denom = w[tf[valid]].sum()
        shape = t.shape
    q = (1 - label_smoothing) * q + label_smoothing / C * (np.ones_like(q) if probs else valid[:, None])
    loss = -(q * w * logp).sum(-1)
    if reduction == "none":
        return loss.reshape(shape)
    return loss.sum() if reduction == "sum" else loss.sum() / denom


def _ce_probs(rng, x, dtype):
    """Class probabilities of x's shape (rows summing to 1, one row 0 in a class:
    torch's samples are any numbers in [0, 1), which attnc takes too)."""
    p = rng.random(x.shape)
    return (p / p.sum(axis=0 if x.ndim == 1 else 1, keepdims=True)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("ls", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_kind", ["ids", "probs", "probs_unnormalised"])
@pytest.mark.parametrize("kind", ["NC", "C", "NCd"])
def test_cross_entropy_weight_and_probabilities_match_torch(
    kind, target_kind, reduction, ls, dtype, rng, torch, assert_unchanged
):
    """weight= and class-probability targets, as torch: the loss, the input's gradient,
    and for probabilities the target's and the weight's (torch differentiates the
    weight only there; test_cross_entropy_weight_finite_differences checks class ids)."""
    x, t = _ce_inputs(rng, kind, 2, dtype)
    if target_kind != "ids":
        t = _ce_probs(rng, x, dtype) if target_kind == "probs" else rng.random(x.shape).astype(dtype)
    w = (rng.random(x.shape[0 if x.ndim == 1 else 1]) + 0.5).astype(dtype)
    kw = dict(reduction=reduction, label_smoothing=ls, ignore_index=2 if target_kind == "ids" else -100)
    out = assert_unchanged(nn.cross_entropy, x, t, w, **kw)
    close(out, ce_full_ref(x, t, w, **kw), REL[dtype], "forward vs NumPy")
    tt = {
        n: _t(torch, a, n != "target" or target_kind != "ids") for n, a in (("input", x), ("target", t), ("weight", w))
    }
    if target_kind == "ids":
        tt["target"], tt["weight"] = torch.from_numpy(t.astype(np.int64)), torch.from_numpy(w.astype(np.float64))
    tout = torch.nn.functional.cross_entropy(tt["input"], tt["target"], tt["weight"], **kw)
    cot = rng.standard_normal(out.shape).astype(dtype)
    tout.backward(torch.from_numpy(cot.astype(np.float64)))
    close(out, tout.detach().numpy(), REL[dtype], "forward vs torch")
    out2, pullback = attnc.vjp(nn.cross_entropy, x, t, w, **kw)
    same_bits(out2, out, "vjp output == plain call")
    grads = pullback(cot)
    assert set(grads) == ({"input", "weight"} if target_kind == "ids" else {"input", "target", "weight"})
    for n, g in grads.items():
        assert g.dtype == dtype and g.shape == np.shape({"input": x, "target": t, "weight": w}[n]), n
        if tt[n].requires_grad:
            close(g, tt[n].grad.numpy(), REL[dtype] * 10, f"gradient of {n} vs torch")


@pytest.mark.parametrize("ls", [0.0, 0.3])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_kind", ["ids", "probs"])
def test_cross_entropy_weight_finite_differences(target_kind, reduction, ls, rng, check_vjp):
    """Every gradient (the weight's with class ids too, where the mean's
    denominator is the targets' summed weight) against central differences."""
    x, t = _ce_inputs(rng, "NCd", 3, np.float64, N=3, C=4, d1=2)
    if target_kind == "probs":
        t = _ce_probs(rng, x, np.float64)
    kw = {"input": x, "target": t, "weight": rng.random(4) + 0.5, "reduction": reduction, "label_smoothing": ls}
    if target_kind == "ids":
        kw["ignore_index"] = 3
    check_vjp(nn.cross_entropy, ce_full_ref, kw, rng, positional=("input", "target", "weight"))


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_cross_entropy_weight_and_probability_edges(dtype, rng, torch):
    """Weighted mean with every target ignored, or with zero summed weight: 0 (torch:
    NaN); a -inf logit of a class with target probability 0 adds nothing (torch:
    NaN without smoothing); ignore_index >= 0 with probabilities refused, as torch."""
    x = rng.standard_normal((3, 4)).astype(dtype)
    w = np.array([0.0, 0.0, 1.0, 2.0], dtype)
    for t in (np.full(3, -100), np.array([0, 1, 0])):
        out, pullback = attnc.vjp(nn.cross_entropy, x, t, w)
        assert out == 0 and out.dtype == dtype
        g = pullback(np.asarray(1.0, dtype))
        assert np.all(g["input"] == 0) and np.isfinite(g["weight"]).all()
        tl = torch.nn.functional.cross_entropy(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(w))
        assert torch.isnan(tl)
    xm = np.array([[0.5, -np.inf, 1.0], [2.0, 0.1, -np.inf]], dtype)
    p = np.array([[0.3, 0.0, 0.7], [0.5, 0.5, 0.0]], dtype)
    out, pullback = attnc.vjp(nn.cross_entropy, xm, p)
    g = pullback(np.asarray(1.0, dtype))
    assert np.isfinite(out) and np.isfinite(g["input"]).all()
    keep = np.isfinite(xm)
    close(out, -(p[keep] * (xm - np.log(np.exp(xm).sum(1, keepdims=True)))[keep]).sum() / 2, REL[dtype], "loss")
    with pytest.raises(ValueError, match="ignore_index"):
        nn.cross_entropy(x, _ce_probs(rng, x, dtype), ignore_index=0)
    with pytest.raises(ValueError, match="weight"):
        nn.cross_entropy(x, np.array([0, 1, 2]), np.ones(3, dtype))
    with pytest.raises(TypeError, match="weight"):
        nn.cross_entropy(x, np.array([0, 1, 2]), np.ones(4, np.float32 if dtype == np.float64 else np.float64))
    with pytest.raises(TypeError, match="target"):  # probabilities have the input's dtype
        nn.cross_entropy(x, _ce_probs(rng, x, np.float32 if dtype == np.float64 else np.float64))


def test_cross_entropy_errors(rng):
    x = rng.standard_normal((3, 4))
    t = np.array([0, 1, 3])
    with pytest.raises(ValueError, match=r"reduction.*'mean'.*'sum'.*'none'"):
        nn.cross_entropy(x, t, reduction="avg")
    for bad in ([0, 4, 1], [0, -1, 1], [0, -100, 5]):
        with pytest.raises(ValueError, match="target"):
            nn.cross_entropy(x, np.array(bad))
    with pytest.raises(ValueError, match="target"):  # -100 is not ignored with another ignore_index
        nn.cross_entropy(x, np.array([0, -100, 1]), ignore_index=2)
    for ls in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="label_smoothing"):
            nn.cross_entropy(x, t, label_smoothing=ls)
    with pytest.raises(TypeError, match="target"):
        nn.cross_entropy(x, t.astype(np.float64))
    with pytest.raises(ValueError, match="target"):
        nn.cross_entropy(x, np.array([0, 1]))
    with pytest.raises(ValueError, match="target"):
        nn.cross_entropy(x[0], t)  # (C,) takes a scalar target
    with pytest.raises(TypeError, match="input"):
        nn.cross_entropy(x.astype(np.int32), t)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_strided_logits_and_embedding_table(dtype, rng):
    """docs/guide/conventions.md: any strided input works (copied first when a kernel cannot read it) and
    gives the same results as its contiguous copy."""
    base = rng.standard_normal((6, 10)).astype(dtype)
    t = np.array([0, 4, 1, -100, 3, 2])
    ids = np.array([[0, 5, 5], [2, 1, 0]])
    for x in (base[:, ::2], np.asfortranarray(base[:, :5]), base[::-1, 1:6]):
        for red in ("mean", "none"):
            out, pb = attnc.vjp(nn.cross_entropy, x, t, reduction=red, label_smoothing=0.1)
            outc, pbc = attnc.vjp(nn.cross_entropy, np.ascontiguousarray(x), t, reduction=red, label_smoothing=0.1)
            same_bits(out, outc, f"cross_entropy {red} strided vs contiguous")
            c = np.ones(out.shape, dtype)
            same_bits(pb(c)["input"], pbc(c)["input"], "cross_entropy dinput strided")
        y, pb = attnc.vjp(nn.embedding, ids, x, 2)
        yc, pbc = attnc.vjp(nn.embedding, ids, np.ascontiguousarray(x), 2)
        same_bits(y, yc, "embedding strided weight")
        c = rng.standard_normal(y.shape).astype(dtype)
        same_bits(pb(c)["weight"], pbc(c)["weight"], "embedding dweight strided")


# --------------------------------------------------------------------------- sinusoidal


@pytest.mark.parametrize("length,d_model", [(7, 8), (5, 7), (3, 1), (0, 6), (4, 0), (50, 16)])
def test_sinusoidal_encoding_formula(length, d_model):
    p = nn.sinusoidal_encoding(length, d_model, dtype=np.float64)
    assert p.shape == (length, d_model) and p.dtype == np.float64
    expected = np.empty((length, d_model))
    for t in range(length):
        for j in range(d_model):
            i2 = j - j % 2
            a = t / 10000 ** (i2 / d_model)
            expected[t, j] = math.sin(a) if j % 2 == 0 else math.cos(a)
    close(p, expected, 1e-14, "sinusoidal f64")
    p32 = nn.sinusoidal_encoding(length, d_model)
    assert p32.dtype == np.float32
    close(p32, expected, 1e-7, "sinusoidal f32")
    if length > 1 and d_model > 1:
        assert p[0, 1] == 1 and p[0, 0] == 0 and p[1, 0] == pytest.approx(math.sin(1.0))


def test_sinusoidal_encoding_errors():
    for args in ((-1, 4), (3, -2), (2.5, 4), (3, True)):
        with pytest.raises(ValueError):
            nn.sinusoidal_encoding(*args)


# --------------------------------------------------------------------------- threads


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_thread_count_bitwise(dtype, rng, restore_threads):
    # 300 rows (several 64-row blocks) and 150 columns (several dweight column blocks)
    x = rng.standard_normal((3, 100, 150)).astype(dtype)
    w = rng.standard_normal(150).astype(dtype)
    b = rng.standard_normal(150).astype(dtype)
    cot = rng.standard_normal(x.shape).astype(dtype)
    E = rng.standard_normal((40, 150)).astype(dtype)
    ids = rng.integers(0, 40, size=(3, 100))
    logits = rng.standard_normal((300, 70)).astype(dtype)
    tgt = rng.integers(0, 70, size=300)
    tgt[::7] = -100

    def run():
        y, pb = attnc.vjp(nn.layer_norm, x, 150, w, b)
        out = [y, *pb(cot).values()]
        e, pb = attnc.vjp(nn.embedding, ids, E, 3, scale=1.5)
        out += [e, pb(cot)["weight"]]
        for red in ("mean", "none"):
            loss, pb = attnc.vjp(nn.cross_entropy, logits, tgt, reduction=red, label_smoothing=0.1)
            c = np.asarray(0.7, dtype) if red == "mean" else np.linspace(-1, 1, 300).astype(dtype)
            out += [loss, pb(c)["input"]]
        return out

    attnc.set_num_threads(1)
    one = run()
    attnc.set_num_threads(2)
    assert attnc.get_num_threads() == 2
    two = run()
    assert len(one) == len(two) == 10
    for i, (a, c) in enumerate(zip(one, two)):
        same_bits(a, c, f"result {i}")


# --------------------------------------------------------------------------- log_softmax


def _log_softmax_ref(input, dim=-1):
    x = np.asarray(input, np.float64)
    if x.ndim == 0 or x.size == 0:  # one element normalised alone: 0; nothing: nothing
        return np.zeros_like(x)
    m = x.max(axis=dim, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=dim, keepdims=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize(
    "shape, dim",
    [
        ((7,), 0),
        ((3, 5), -1),
        ((3, 5), 0),
        ((2, 4, 6), 1),
        # 0-d, a zero-length dim and an empty batch (torch's OpInfo has the
        # first two): torch's results, empty where torch's are
        ((), 0),
        ((), -1),
        ((5, 0, 0), -1),
        ((4, 0, 3), 1),
        ((4, 0, 3), 0),
        ((0, 3), 1),
    ],
)
def test_log_softmax_matches_torch(shape, dim, dtype, rng, torch, assert_unchanged):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    y, pull = assert_unchanged(attnc.vjp, nn.log_softmax, x, dim=dim)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.log_softmax(xt, dim)
    dy = rng.standard_normal(shape).astype(dtype)
    yt.backward(torch.tensor(dy))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.dtype == dtype and y.shape == shape
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(pull(dy)["input"], xt.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(y, _log_softmax_ref(x, dim), rtol=tol, atol=tol)
    assert pull(dy)["input"].shape == shape and pull(None)["input"].shape == shape


def test_log_softmax_finite_differences(rng, check_vjp):
    check_vjp(
        nn.log_softmax,
        _log_softmax_ref,
        {"input": rng.standard_normal((3, 4, 5)), "dim": 1},
        rng,
        positional=("input",),
    )


def test_log_softmax_stable_and_minus_inf_rows():
    y = nn.log_softmax(np.array([[1000.0, 0.0], [-np.inf, -np.inf], [0.0, -np.inf]]))
    np.testing.assert_allclose(y[0], [0.0, -1000.0])
    assert np.all(np.isneginf(y[1]))
    assert y[2, 0] == 0 and np.isneginf(y[2, 1])
    _, pull = attnc.vjp(nn.log_softmax, np.array([[-np.inf, -np.inf], [0.0, -np.inf]]))
    g = pull(np.ones((2, 2)))["input"]
    assert np.all(np.isfinite(g)) and np.all(g[0] == 0)


def test_log_softmax_errors():
    with pytest.raises(ValueError, match="dim"):
        nn.log_softmax(np.zeros((2, 3)), dim=2)
    with pytest.raises(ValueError, match="dim"):  # a 0-d input has dim 0 (or -1) only, as in torch
        nn.log_softmax(np.float64(1.0), dim=1)
    with pytest.raises(TypeError):
        nn.log_softmax(np.zeros((2, 3), np.int64))


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("k, n", [(1, 1), (5, 3), (16, 64), (64, 128), (200, 41)])
def test_linear_single_row_small_products(k, n, dtype, rng):
    """One row times a small matrix takes attnc's own loops instead of BLAS
    (decoding); both layouts of the weight (rows or columns contiguous)."""
    x = rng.standard_normal((1, k)).astype(dtype)
    w = rng.standard_normal((n, k)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for weight in (w, np.asfortranarray(w)):
        np.testing.assert_allclose(nn.linear(x, weight, b), want, rtol=tol, atol=tol * k)
    y, pull = attnc.vjp(nn.linear, x, w, b)
    g = pull(np.ones_like(y))
    np.testing.assert_allclose(g["input"], np.ones((1, n)) @ w.astype(np.float64), rtol=tol, atol=tol * n)
