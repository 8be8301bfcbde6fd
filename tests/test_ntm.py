"""attnc.ntm: the NTM's addressing and memory operations against the NumPy
float64 reference, gradients against finite differences, edge cases, errors."""

import numpy as np
import pytest

import attnc
from helpers import close, same_bits
from reference import ntm_ref as ref

B, H, N, M, K = 2, 3, 7, 4, 3


def _softmax(x):
    if x.shape[-1] == 0:
        return x
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _inputs(rng, b=B, h=H, n=N, m=M, k=K):
    """Every argument any op takes, float64, in a valid range."""
    return {
        "key": rng.standard_normal((b, h, m)),
        "memory": rng.standard_normal((b, n, m)),
        "beta": rng.uniform(0.5, 3.0, (b, h)),
        "g": rng.uniform(0, 1, (b, h)),
        "s": _softmax(rng.standard_normal((b, h, k))),
        "gamma": rng.uniform(1.0, 3.0, (b, h)),
        "w_prev": _softmax(rng.standard_normal((b, h, n))),
        "w": _softmax(rng.standard_normal((b, h, n))),
        "w_content": _softmax(rng.standard_normal((b, h, n))),
        "erase": rng.uniform(0, 1, (b, h, m)),
        "add": rng.standard_normal((b, h, m)),
    }


OPS = {
    "content_weights": ("key", "memory", "beta"),
    "interpolate": ("w_content", "w_prev", "g"),
    "shift": ("w", "s"),
    "sharpen": ("w", "gamma"),
    "read": ("memory", "w"),
    "write": ("memory", "w", "erase", "add"),
    "address": ("key", "beta", "g", "s", "gamma", "w_prev", "memory"),
}


def _ref(name):
    if name == "address":
        return lambda **kw: ref.address(**kw)[0]
    return getattr(ref, name)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype,rel", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_matches_reference(name, dtype, rel, rng, assert_unchanged):
    x = _inputs(rng)
    args = [x[a].astype(dtype) for a in OPS[name]]
    out = assert_unchanged(getattr(attnc.ntm, name), *args)
    assert out.dtype == dtype
    expected = _ref(name)(**{a: x[a] for a in OPS[name]})
    close(out, expected, rel, name)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("shape", [(B, H, N, M, K), (1, 1, 5, 3, 5), (3, 2, 2, 1, 3), (1, 2, 3, 2, 7)], ids=str)
def test_gradients_finite_differences(name, shape, rng, check_vjp):
    b, h, n, m, k = shape
    x = _inputs(rng, b, h, n, m, k)
    kw = {a: x[a] for a in OPS[name]}
    check_vjp(getattr(attnc.ntm, name), _ref(name), kw, rng, positional=OPS[name], eps=1e-6, rtol=1e-6, atol=1e-7)


def test_address_intermediates_and_gradients(rng, check_vjp):
    x = _inputs(rng)
    kw = {a: x[a] for a in OPS["address"]}
    w, (wc, wg, wt) = attnc.ntm.address(**kw, return_intermediates=True)
    ew, (ewc, ewg, ewt) = ref.address(**kw)
    for a, e, what in [(w, ew, "w"), (wc, ewc, "w_c"), (wg, ewg, "w_g"), (wt, ewt, "w_t")]:
        close(a, e, 1e-12, what)

    def ref_all(**k):
        w_, (a, b_, c) = ref.address(**k)
        return w_, a, b_, c

    _, pull = attnc.vjp(attnc.ntm.address, *kw.values(), return_intermediates=True)
    cots = [rng.standard_normal(w.shape) for _ in range(4)]
    grads = pull(cots[0], tuple(cots[1:]))
    from conftest import fd_check_impl

    fd_check_impl(ref_all, kw, cots, grads, eps=1e-6, rtol=1e-6, atol=1e-7)
    # intermediates with a None cotangent entry
    grads = pull(cots[0], (None, cots[2], None))
    fd_check_impl(ref_all, kw, [cots[0], None, cots[2], None], grads, eps=1e-6, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_address_is_the_composition(dtype, rng):
    x = {k: v.astype(dtype) for k, v in _inputs(rng).items()}
    w, (wc, wg, wt) = attnc.ntm.address(
        x["key"], x["beta"], x["g"], x["s"], x["gamma"], x["w_prev"], x["memory"], return_intermediates=True
    )
    c = attnc.ntm.content_weights(x["key"], x["memory"], x["beta"])
    i = attnc.ntm.interpolate(c, x["w_prev"], x["g"])
    t = attnc.ntm.shift(i, x["s"])
    f = attnc.ntm.sharpen(t, x["gamma"])
    same_bits(wc, c, "w_c")
    same_bits(wg, i, "w_g")
    same_bits(wt, t, "w_t")
    same_bits(w, f, "w")
    # gradients of the fused call match the chain of the four pullbacks
    dw = rng.standard_normal(w.shape).astype(dtype)
    _, pa = attnc.vjp(attnc.ntm.address, x["key"], x["beta"], x["g"], x["s"], x["gamma"], x["w_prev"], x["memory"])
    ga = pa(dw)
    _, p4 = attnc.vjp(attnc.ntm.sharpen, t, x["gamma"])
    g4 = p4(dw)
    _, p3 = attnc.vjp(attnc.ntm.shift, i, x["s"])
    g3 = p3(g4["w"])
    _, p2 = attnc.vjp(attnc.ntm.interpolate, c, x["w_prev"], x["g"])
    g2 = p2(g3["w"])
    _, p1 = attnc.vjp(attnc.ntm.content_weights, x["key"], x["memory"], x["beta"])
    g1 = p1(g2["w_content"])
    rel = 1e-12 if dtype == np.float64 else 1e-5
    for name, got in [
        ("gamma", g4["gamma"]),
        ("s", g3["s"]),
        ("g", g2["g"]),
        ("w_prev", g2["w_prev"]),
        ("key", g1["key"]),
        ("memory", g1["memory"]),
        ("beta", g1["beta"]),
    ]:
        close(ga[name], got, rel, name)


def test_shift_direction():
    w = np.zeros((1, 1, 5))
    w[0, 0, 1] = 1.0
    w[0, 0, 4] = 0.5
    s = np.zeros((1, 1, 3))
    s[0, 0, 2] = 1.0  # index (K-1)/2 + 1
    out = attnc.ntm.shift(w, s)
    expected = np.zeros((1, 1, 5))
    expected[0, 0, 2] = 1.0
    expected[0, 0, 0] = 0.5  # wraps around
    same_bits(out, expected)
    s = np.zeros((1, 1, 5))
    s[0, 0, 2] = 1.0  # the centre: identity
    same_bits(attnc.ntm.shift(w, s), w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sharpen_exact_zeros(dtype, rng):
    w = np.array(
        [[[0.0, 0.2, 0.0, 0.8], [0.0, 0.0, 0.0, 0.0]], [[0.5, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.0]]], dtype=dtype
    )
    gamma = np.array([[1.0, 2.0], [1.5, 3.0]], dtype=dtype)
    out, pull = attnc.vjp(attnc.ntm.sharpen, w, gamma)
    close(out, ref.sharpen(w, gamma), 1e-6)
    assert np.all(out[0, 1] == 0)
    g = pull(rng.standard_normal(w.shape).astype(dtype))
    assert np.isfinite(g["w"]).all() and np.isfinite(g["gamma"]).all()
    assert np.all(g["w"][0, 1] == 0) and g["gamma"][0, 1] == 0
    # through the whole pipeline, with a one-hot w_prev, g = 0 and a one-hot shift
    x = _inputs(rng)
    x["w_prev"] = np.zeros((B, H, N))
    x["w_prev"][:, :, 2] = 1
    x["g"][:] = 0
    x["s"] = np.zeros((B, H, K))
    x["s"][:, :, 1] = 1
    x["gamma"][:] = 2.5
    args = [x[a] for a in OPS["address"]]
    w, pull = attnc.vjp(attnc.ntm.address, *args)
    assert np.isfinite(w).all()
    for v in pull(rng.standard_normal(w.shape)).values():
        assert np.isfinite(v).all()


def test_sharpen_gradient_with_zeros_fd(rng, check_vjp):
    # gamma = 1 and gamma > 1, zeros in w: the one-sided difference at 0 is
    # avoided by differentiating only gamma (w's gradient is checked analytically).
    w = np.array([[[0.0, 0.3, 0.7], [0.4, 0.0, 0.6]]])
    gamma = np.array([[1.0, 2.0]])
    _, pull = attnc.vjp(attnc.ntm.sharpen, w, gamma)
    d = rng.standard_normal(w.shape)
    g = pull(d)
    from conftest import numeric_vjp

    num = numeric_vjp(lambda **k: ref.sharpen(**k), {"w": w, "gamma": gamma}, [d], ["gamma"])
    close(g["gamma"], num["gamma"], 1e-7)
    # dw at the zero: gamma = 1 -> d/dw_j (w_j / sum) = (d_j - sum d out)/sum; gamma > 1 -> 0
    out = ref.sharpen(w, gamma)
    close(g["w"][0, 0, 0], (d[0, 0, 0] - (d[0, 0] * out[0, 0]).sum()) / w[0, 0].sum(), 1e-12)
    assert g["w"][0, 1, 1] == 0


def test_sharpen_flat_row_large_gamma_float32(rng):
    # (1/128)^21 is below float32's range: w^gamma / sum w^gamma computed as
    # written would give 0/0; the kernel scales by the row's max first.
    w = np.full((1, 2, 128), 1 / 128, np.float32)
    w[0, 1, 5] = 2 / 128
    gamma = np.array([[21.0, 21.0]], np.float32)
    out, pull = attnc.vjp(attnc.ntm.sharpen, w, gamma)
    close(out, ref.sharpen(w.astype(np.float64), gamma.astype(np.float64)), 1e-5)
    close(out[0, 0], np.full(128, 1 / 128), 1e-6)
    d = rng.standard_normal(w.shape)
    g = pull(d.astype(np.float32))
    g64 = attnc.vjp(attnc.ntm.sharpen, w.astype(np.float64), gamma.astype(np.float64))[1](d)
    close(g["w"], g64["w"], 1e-4)
    close(g["gamma"], g64["gamma"], 1e-4)


def test_content_zero_vectors(rng):
    x = _inputs(rng)
    x["key"][0, 0] = 0
    x["memory"][1, 3] = 0
    args = [x[a] for a in OPS["content_weights"]]
    w, pull = attnc.vjp(attnc.ntm.content_weights, *args)
    close(w, ref.content_weights(*args), 1e-12)
    for v in pull(rng.standard_normal(w.shape)).values():
        assert np.isfinite(v).all()


def test_write_is_order_free(rng):
    x = _inputs(rng, h=4)
    perm = np.array([2, 0, 3, 1])
    a = attnc.ntm.write(x["memory"], x["w"], x["erase"], x["add"])
    b = attnc.ntm.write(x["memory"], x["w"][:, perm], x["erase"][:, perm], x["add"][:, perm])
    close(a, b, 1e-14)
    close(a, ref.write(x["memory"], x["w"], x["erase"], x["add"]), 1e-12)


@pytest.mark.parametrize("name", sorted(OPS))
def test_thread_count_independent(name, rng, restore_threads):
    x = _inputs(rng, b=9, h=3, n=11, m=6, k=5)
    args = [x[a] for a in OPS[name]]
    results = []
    for threads in (1, 2, 4):
        attnc.set_num_threads(threads)
        out, pull = attnc.vjp(getattr(attnc.ntm, name), *args)
        grads = pull(np.ones_like(out))
        results.append((out, grads))
    for out, grads in results[1:]:
        same_bits(out, results[0][0], name)
        for k in grads:
            same_bits(grads[k], results[0][1][k], k)


def test_strided_and_mixed_layout_inputs(rng):
    x = _inputs(rng)
    key = np.asfortranarray(x["key"])
    mem = x["memory"][:, ::-1]
    w = attnc.ntm.content_weights(key, mem, x["beta"])
    close(w, ref.content_weights(key, mem, x["beta"]), 1e-12)


def test_empty_memory_slots(rng):
    x = _inputs(rng, n=0)
    for name in ("shift", "read", "write", "sharpen", "interpolate"):
        args = [x[a] for a in OPS[name]]
        out = getattr(attnc.ntm, name)(*args)
        assert out.shape == _ref(name)(**dict(zip(OPS[name], args))).shape


def _raises(exc, match, fn, *args, **kw):
    with pytest.raises(exc, match=match):
        fn(*args, **kw)


def test_errors_name_arguments(rng):
    x = _inputs(rng)
    ntm = attnc.ntm
    _raises(ValueError, "memory", ntm.content_weights, x["key"], x["memory"][:, :, :2], x["beta"])
    _raises(ValueError, "beta", ntm.content_weights, x["key"], x["memory"], x["beta"][:, :1])
    _raises(ValueError, "beta", ntm.content_weights, x["key"], x["memory"], -x["beta"])
    _raises(ValueError, "key", ntm.content_weights, x["key"][0], x["memory"], x["beta"])
    _raises(TypeError, "memory", ntm.content_weights, x["key"], x["memory"].astype(np.float32), x["beta"])
    _raises(TypeError, "key", ntm.content_weights, x["key"].astype(int), x["memory"], x["beta"])
    _raises(ValueError, "g", ntm.interpolate, x["w_content"], x["w_prev"], x["g"][:, :, None])
    _raises(ValueError, "w_prev", ntm.interpolate, x["w_content"], x["w_prev"][:, :, 1:], x["g"])
    _raises(ValueError, "odd", ntm.shift, x["w"], np.ones((B, H, 2)) / 2)
    _raises(ValueError, "s", ntm.shift, x["w"], np.ones((B, 1, 3)) / 3)
    _raises(ValueError, "gamma", ntm.sharpen, x["w"], x["gamma"] * 0.5)
    _raises(ValueError, "gamma", ntm.sharpen, x["w"], np.full((B, H), np.nan))
    _raises(ValueError, "w", ntm.sharpen, -x["w"], x["gamma"])
    _raises(ValueError, r"^w has shape .*, expected", ntm.read, x["memory"], x["w"][:, :, :3])  # memory sets N
    _raises(ValueError, "erase", ntm.write, x["memory"], x["w"], x["erase"][:, :1], x["add"])
    _raises(ValueError, "add", ntm.write, x["memory"], x["w"], x["erase"], x["add"][..., :1])
    a = [x[n] for n in OPS["address"]]
    for i, n in enumerate(OPS["address"]):
        bad = list(a)
        bad[i] = bad[i][..., :1] if bad[i].ndim == 3 else bad[i][:1]
        if n == "s":
            bad[i] = np.ones((B, H, 4)) / 4
        if n == "key":  # key sets B, H and M: a key of the wrong rank is named
            bad[i] = bad[i][0]
        _raises(ValueError, n if n != "s" else "odd", ntm.address, *bad)
    bad = list(a)
    bad[1] = -bad[1]
    _raises(ValueError, "beta", ntm.address, *bad)
    bad = list(a)
    bad[4] = bad[4] * 0
    _raises(ValueError, "gamma", ntm.address, *bad)


def test_c_core_checks_too(rng):
    """The C core refuses bad shapes itself, naming the argument."""
    from attnc import _core

    x = _inputs(rng)
    out = np.empty((B, H, N))
    with pytest.raises(ValueError, match="beta"):
        _core.ntm_content_forward(w=out, key=x["key"], memory=x["memory"], beta=x["beta"][:, :1].copy())
    with pytest.raises(ValueError, match="odd"):
        _core.ntm_shift_forward(out=out, w=x["w"], s=np.ones((B, H, 2)))
    with pytest.raises(ValueError, match="gamma"):
        _core.ntm_sharpen_forward(out=out, w=x["w"], gamma=np.zeros((B, H)))
