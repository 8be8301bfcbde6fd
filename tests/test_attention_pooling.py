"""attnc.nn.attention_pool / AttentionPooling (and attnc.nn.relu): forward
against a NumPy float64 reference (tests/reference/pooling_ref.py) and a torch
composition, gradients against torch autograd and central finite differences,
masks (fully masked rows give zeros, never NaN), float32 vs float64, thread
count independence, inputs never modified, state dict, and bad input."""

import numpy as np
import pytest

import attnc
from attnc import nn
from helpers import close, same_bits
from reference.pooling_ref import attention_pool_ref


def _inputs(rng, B=3, T=7, d=5, A=4, dtype=np.float64, bias=True):
    return dict(
        input=rng.standard_normal((B, T, d)).astype(dtype),
        weight=rng.standard_normal((A, d)).astype(dtype),
        bias=rng.standard_normal(A).astype(dtype) if bias else None,
        v=rng.standard_normal(A).astype(dtype),
    )


def _mask(rng, B=3, T=7):
    m = rng.random((B, T)) < 0.6
    m[0] = True
    m[1, :] = False  # a fully masked row
    m[2, 3] = True
    return m


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_forward_matches_reference(rng, bias, masked):
    kw = _inputs(rng, bias=bias)
    mask = _mask(rng) if masked else None
    c, alpha = nn.attention_pool(**kw, mask=mask)
    rc, ra = attention_pool_ref(**kw, mask=mask)
    close(c, rc, 1e-12, "c")
    close(alpha, ra, 1e-12, "alpha")
    if masked:
        assert np.all(alpha[~mask] == 0) and np.all(c[1] == 0) and np.all(alpha[1] == 0)
        close(alpha[[0, 2]].sum(axis=1), np.ones(2), 1e-12)


def test_forward_and_grads_against_torch(rng, torch):
    kw = _inputs(rng)
    mask = _mask(rng)
    (c, alpha), pullback = attnc.vjp(nn.attention_pool, kw["input"], kw["weight"], kw["bias"], kw["v"], mask=mask)
    dc, da = rng.standard_normal(c.shape), rng.standard_normal(alpha.shape)
    grads = pullback(dc, da)
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in kw.items()}
    e = torch.tanh(t["input"] @ t["weight"].T + t["bias"]) @ t["v"]
    tm = torch.from_numpy(mask)
    e = e.masked_fill(~tm, float("-inf"))
    ta = torch.softmax(e, dim=-1)
    ta = torch.where(tm.any(dim=-1, keepdim=True), ta, torch.zeros_like(ta))  # fully masked: 0
    ta = torch.nan_to_num(ta)
    tc = (ta.unsqueeze(-1) * t["input"]).sum(1)
    (tc * torch.from_numpy(dc)).sum().add((ta * torch.from_numpy(da)).sum()).backward()
    close(c, tc.detach().numpy(), 1e-12, "c")
    close(alpha, ta.detach().numpy(), 1e-12, "alpha")
    for name in ("input", "weight", "bias", "v"):
        close(grads[name], t[name].grad.numpy(), 1e-10, name)
        assert np.isfinite(grads[name]).all()
    assert np.all(grads["input"][1] == 0)  # the fully masked row gets no gradient


@pytest.mark.parametrize("bias", [True, False])
def test_finite_differences(rng, check_vjp, bias):
    kw = _inputs(rng, B=2, T=4, d=3, A=3, bias=bias)
    mask = np.array([[True, False, True, True], [False, False, False, False]])
    if not bias:
        kw.pop("bias")
    kw["mask"] = mask
    check_vjp(nn.attention_pool, attention_pool_ref, kw, rng, positional=("input", "weight", "bias", "v"))


def test_weights_only_cotangent(rng, check_vjp):
    kw = _inputs(rng, B=2, T=5, d=3, A=2)
    outs, pullback = attnc.vjp(nn.attention_pool, kw["input"], kw["weight"], kw["bias"], kw["v"])
    da = rng.standard_normal(outs[1].shape)
    got = pullback(None, da)
    from conftest import numeric_vjp

    num = numeric_vjp(lambda **k: attention_pool_ref(**k), kw, [None, da], ["input", "weight", "bias", "v"])
    for name in num:
        close(got[name], num[name], 1e-6, name)


def test_float32_matches_float64(rng):
    kw64 = _inputs(rng, B=4, T=30, d=16, A=8)
    kw32 = {k: v.astype(np.float32) for k, v in kw64.items()}
    mask = rng.random((4, 30)) < 0.7
    (c64, a64), p64 = attnc.vjp(nn.attention_pool, *kw64.values(), mask=mask)
    (c32, a32), p32 = attnc.vjp(nn.attention_pool, *kw32.values(), mask=mask)
    assert c32.dtype == np.float32 and a32.dtype == np.float32
    close(c32, c64, 1e-5)
    close(a32, a64, 1e-5)
    dc = rng.standard_normal(c64.shape)
    g64, g32 = p64(dc, None), p32(dc.astype(np.float32), None)
    for name in g64:
        assert g32[name].dtype == np.float32
        close(g32[name], g64[name], 1e-4, name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_threads_bitwise(rng, restore_threads, dtype):
    # large enough that the per-row passes run in parallel too (attnc_workers_for)
    kw = _inputs(rng, B=16, T=400, d=32, A=24, dtype=dtype)
    mask = rng.random((16, 400)) < 0.8
    mask[3] = False
    dc = rng.standard_normal((16, 32)).astype(dtype)
    results = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        (c, a), pb = attnc.vjp(nn.attention_pool, *kw.values(), mask=mask)
        results.append((c, a, pb(dc, a.copy())))
    for c, a, g in results[1:]:
        same_bits(c, results[0][0], "c")
        same_bits(a, results[0][1], "alpha")
        for name in g:
            same_bits(g[name], results[0][2][name], name)


def test_inputs_not_modified(rng):
    kw = _inputs(rng)
    mask = _mask(rng)
    before = {k: v.copy() for k, v in kw.items()}
    mb = mask.copy()
    (c, a), pb = attnc.vjp(nn.attention_pool, *kw.values(), mask=mask)
    pb(np.ones_like(c), np.ones_like(a))
    for k in kw:
        same_bits(kw[k], before[k], k)
    assert (mask == mb).all()


def test_strided_and_broadcast_mask(rng):
    kw = _inputs(rng, B=2, T=6, d=4, A=3)
    h = np.asfortranarray(kw["input"])[:, ::1]
    big = rng.standard_normal((2, 12, 4))
    h2 = big[:, ::2]
    mask_row = np.array([True, True, False, True, False, True])
    c, a = nn.attention_pool(h2, kw["weight"], kw["bias"], kw["v"], mask=mask_row)
    rc, ra = attention_pool_ref(h2, kw["weight"], kw["bias"], kw["v"], mask=mask_row)
    close(c, rc, 1e-12)
    close(a, ra, 1e-12)
    c, a = nn.attention_pool(h, kw["weight"], kw["bias"], kw["v"])
    close(c, attention_pool_ref(h, kw["weight"], kw["bias"], kw["v"])[0], 1e-12)


def test_large_scores_stable():
    h = np.zeros((1, 3, 2))
    w = np.array([[1.0, 0.0]])
    h[0, :, 0] = [100.0, -100.0, 100.0]
    v = np.array([1e4])
    c, a = nn.attention_pool(h, w, None, v)
    assert np.isfinite(c).all()
    close(a, [[0.5, 0.0, 0.5]], 1e-12)


def test_empty_sequence():
    c, a = nn.attention_pool(np.zeros((2, 0, 3)), np.ones((2, 3)), None, np.ones(2))
    assert c.shape == (2, 3) and a.shape == (2, 0) and np.all(c == 0)


def test_module_state_dict_and_vjp(rng, torch):
    pool = nn.AttentionPooling(6, 5, dtype=np.float64, seed=3)
    assert list(pool.state_dict()) == ["weight", "bias", "v"]
    assert pool.weight.shape == (5, 6) and pool.bias.shape == (5,) and pool.v.shape == (5,)
    same_bits(nn.AttentionPooling(6, 5, dtype=np.float64, seed=3).weight, pool.weight)
    h = rng.standard_normal((2, 4, 6))
    mask = np.array([[True, True, True, False], [True, False, False, False]])
    c = pool(h, mask=mask)
    c2, a = pool(h, mask=mask, return_weights=True)
    same_bits(c, c2)
    rc, ra = attention_pool_ref(h, pool.weight, pool.bias, pool.v, mask=mask)
    close(c, rc, 1e-12)
    close(a, ra, 1e-12)
    (_, _), pb = attnc.vjp(pool, h, mask=mask)
    g = pb(np.ones((2, 6)), None)
    assert set(g) == {"input", "weight", "bias", "v"}
    nb = nn.AttentionPooling(6, 5, bias=False, seed=1)
    assert list(nb.state_dict()) == ["weight", "v"] and nb.dtype == np.float32
    (_, _), pb = attnc.vjp(nb, h.astype(np.float32))
    assert set(pb(np.ones((2, 6), np.float32), None)) == {"input", "weight", "v"}
    pool.load_state_dict({k: v * 2 for k, v in pool.state_dict().items()})
    close(pool.v, nn.AttentionPooling(6, 5, dtype=np.float64, seed=3).v * 2, 1e-15)


def test_bad_input(rng):
    kw = _inputs(rng)
    h, w, b, v = kw["input"], kw["weight"], kw["bias"], kw["v"]
    with pytest.raises(ValueError, match=r"input must have shape \(B, T, d\)"):
        nn.attention_pool(h[0], w, b, v)
    with pytest.raises(ValueError, match="weight has shape"):
        nn.attention_pool(h, w[:, :2], b, v)
    with pytest.raises(ValueError, match=r"v has shape \(2,\), expected \(4,\)"):
        nn.attention_pool(h, w, b, v[:2])
    with pytest.raises(ValueError, match=r"bias has shape \(1,\), expected \(4,\)"):
        nn.attention_pool(h, w, b[:1], v)
    with pytest.raises(TypeError, match="v is required"):
        nn.attention_pool(h, w, b)
    with pytest.raises(TypeError, match="weight has dtype float32"):
        nn.attention_pool(h, w.astype(np.float32), b, v)
    with pytest.raises(TypeError, match="input has dtype int64"):
        nn.attention_pool(h.astype(np.int64), w, b, v)
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        nn.attention_pool(h, w, b, v, mask=np.ones((3, 7)))
    with pytest.raises(ValueError, match="mask with shape"):
        nn.attention_pool(h, w, b, v, mask=np.ones((3, 6), bool))
    with pytest.raises(ValueError, match="d must be >= 0"):
        nn.AttentionPooling(-1, 3)
    with pytest.raises(TypeError, match="d_attn must be an int"):
        nn.AttentionPooling(3, 2.5)
    (c, a), pb = attnc.vjp(nn.attention_pool, h, w, b, v)
    with pytest.raises(ValueError, match="cotangent 0 has shape"):
        pb(np.ones((2, 5)), None)


def test_c_core_checks(rng):
    """The C operation refuses what the Python layer would have caught."""
    from attnc import _core

    kw = _inputs(rng)
    h, w, b, v = kw["input"], kw["weight"], kw["bias"], kw["v"]
    call = dict(
        output=np.empty((3, 5)), weights=np.empty((3, 7)), saved=np.empty((3, 7, 4)), input=h, weight=w, bias=b, v=v
    )
    with pytest.raises(ValueError, match="weight"):
        _core.attention_pool_forward(**{**call, "weight": np.ones((4, 3))})
    with pytest.raises(ValueError, match="saved"):
        _core.attention_pool_forward(**{**call, "saved": np.empty((3, 7, 3))})
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.attention_pool_forward(**{**call, "input": h[:, ::-1]})


# ---- attnc.nn.relu -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 4, 5), (), (0,), (2, 0, 3)])
def test_relu(rng, torch, dtype, shape):
    """torch's relu for every shape, a 0-d input (and its gradient) staying 0-d."""
    x = rng.standard_normal(shape).astype(dtype)
    if x.size:
        x.reshape(-1)[0] = 0
    y, pb = attnc.vjp(nn.relu, x)
    same_bits(y, np.maximum(x, 0).astype(dtype))
    dy = rng.standard_normal(x.shape).astype(dtype)
    g = pb(dy)["input"]
    tx = torch.tensor(x, requires_grad=True)
    torch.relu(tx).backward(torch.tensor(dy))
    same_bits(g, tx.grad.numpy())
    same_bits(nn.ReLU()(x), y)
    xs = rng.standard_normal((4, 6))[:, ::2]
    same_bits(nn.relu(xs), np.maximum(xs, 0))
    with pytest.raises(TypeError, match="input has dtype int64"):
        nn.relu(np.ones(3, np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_nan_inf_and_signed_zero_as_torch(torch, dtype):
    """torch's relu is clamp_min(x, 0): NaN and -0 pass through; its gradient is 0
    where x <= 0 (so it passes at NaN). Bit for bit, forward and backward."""
    x = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 2.5, -1.0], dtype)
    y, pb = attnc.vjp(nn.relu, x)
    dy = np.arange(1, 8).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.relu(tx)
    ty.backward(torch.tensor(dy))
    same_bits(y, ty.detach().numpy())
    same_bits(pb(dy)["input"], tx.grad.numpy())


# ---- the attention_pooling experiment -----------------------------------------------------


def test_marker_classifier_gradients(rng):
    """The experiment's model chains the C pullbacks: check against finite differences (float64)."""
    from attnc.datasets import MarkerTask
    from attnc.experiments.attention_pooling import MarkerClassifier
    from conftest import numeric_vjp

    task = MarkerTask(min_len=4, max_len=6, max_markers=2)
    b = task.batch(3, seed=2)
    m = MarkerClassifier(task.vocab_size, 3, 3, 4, 3, dtype=np.float64, seed=1)
    logits, pb = attnc.vjp(m, b.ids, b.mask)
    cot = rng.standard_normal(logits.shape)
    grads = pb(cot)
    assert set(grads) == set(m.state_dict())
    sd = m.state_dict()

    def ref(**params):
        emb = params["embedding.weight"][b.ids]
        z = np.maximum(emb @ params["hidden.weight"].T + params["hidden.bias"], 0)
        c, _ = attention_pool_ref(z, params["pool.weight"], params["pool.bias"], params["pool.v"], b.mask)
        return c @ params["out.weight"].T + params["out.bias"]

    close(logits, ref(**sd), 1e-12)
    num = numeric_vjp(ref, dict(sd), [cot], [k for k in sd if k != "embedding.weight"])
    for k in num:
        close(grads[k], num[k], 1e-6, k)


def test_attention_pooling_quick_run(tmp_path):
    from test_experiments import TIMING, run_experiment

    path = tmp_path / "pool.npz"
    first, stderr = run_experiment("attention_pooling", "--quick", "--seed", "2", "--threads", "1", "--save", str(path))
    assert "it/s" in stderr or "s/it" in stderr
    for key in ("accuracy", "marker_attention_mass", "train_seconds", "heldout_size", "final_loss"):
        assert key in first
    assert 0 <= first["accuracy"] <= 1 and 0 <= first["marker_attention_mass"] <= 1
    assert first["final_loss"] < first["first_loss"]
    second, _ = run_experiment("attention_pooling", "--quick", "--seed", "2", "--threads", "2")
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    model = attnc.load(path)
    assert model(np.array([[1, 2, 3]])).shape == (1, 3)


def test_pooling_notebook_helper():
    from attnc.experiments import attention_pooling

    model, task, metrics = attention_pooling.train_model(seed=0, quick=True, steps=5)
    words, weights, probs = attention_pooling.pooling_weights(model, task, "the movie was great and the plot odd")
    assert len(words) == 8 and weights.shape == (8,) and probs.shape == (3,)
    close(weights.sum(), 1.0, 1e-5)
    assert set(metrics) >= {"accuracy", "marker_attention_mass", "heldout_size", "train"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_dropout(rng, restore_threads, dtype):
    x = rng.standard_normal((40, 130)).astype(dtype)
    keep = nn.relu_dropout(np.ones_like(x), 0.3, seed=11) * dtype(0.7)  # the keep mask of seed 11
    assert set(np.unique(keep).tolist()) <= {0.0, 1.0}
    assert abs(keep.mean() - 0.7) < 0.02
    y, pb = attnc.vjp(nn.relu_dropout, x, 0.3, seed=11)
    close(y, np.maximum(x.astype(np.float64), 0) * keep / 0.7, 1e-6)
    dy = rng.standard_normal(x.shape).astype(dtype)
    close(pb(dy)["input"], dy.astype(np.float64) * (x > 0) * keep / 0.7, 1e-6)
    attnc.set_num_threads(1)
    same_bits(nn.relu_dropout(x, 0.3, seed=11), y)
    assert not np.array_equal(nn.relu_dropout(x, 0.3, seed=12), y)
    same_bits(nn.relu_dropout(x, 0.0, seed=5), nn.relu(x))
    with pytest.raises(ValueError, match="p must be a dropout probability"):
        nn.relu_dropout(x, 1.5)


def test_relu_dropout_finite_differences(rng, check_vjp):
    x = rng.standard_normal((3, 7))
    keep = nn.relu_dropout(np.ones_like(x), 0.4, seed=3) * 0.6

    def ref(input, p, seed):
        return np.maximum(input, 0) * keep / (1 - p)

    check_vjp(nn.relu_dropout, ref, {"input": x, "p": 0.4, "seed": 3}, rng, positional=("input",))
