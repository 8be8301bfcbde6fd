"""Memory layouts, buffer-protocol exporters and threads: same results as contiguous copies."""

import array

import numpy as np
import pytest

import attnc
from reference import attention_ref as ref

# --------------------------------------------------------------------------- layouts


def _noncontig(a):
    """Same values, every axis strided (step 2 into a larger buffer)."""
    if a.ndim == 0:
        return a.copy()
    big = np.zeros(tuple(2 * s for s in a.shape) or (), dtype=a.dtype)
    view = big[tuple(slice(None, None, 2) for _ in a.shape)]
    view[...] = a
    return view


def _fortran(a):
    if a.ndim == 0:  # np.asfortranarray would make it 1-d
        return a.copy()
    return np.asfortranarray(a)


def _transposed(a):
    """A transposed view (last two axes) of a contiguous buffer."""
    if a.ndim < 2:
        return a
    return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)


def _negstride(a):
    """Negative strides on every axis."""
    if a.ndim == 0:
        return a.copy()
    rev = tuple(slice(None, None, -1) for _ in a.shape)
    return np.ascontiguousarray(a[rev])[rev]


def _readonly(a):
    """A read-only view."""
    v = a.view()
    v.flags.writeable = False
    return v


LAYOUTS = {
    "noncontig": _noncontig,
    "fortran": _fortran,
    "transposed": _transposed,
    "negstride": _negstride,
    "readonly": _readonly,
}


def _relayout(obj, fn):
    if isinstance(obj, np.ndarray):
        return fn(obj)
    return obj


def _same(a, b, what=""):
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    if a.size == 0:
        return
    scale = max(1.0, float(np.max(np.abs(b))))
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-14 * scale, err_msg=what)


def _tuple(x):
    return tuple(x) if isinstance(x, tuple) else (x,)


def _cases(rng):
    q = rng.standard_normal((2, 3, 5, 4))
    k = rng.standard_normal((2, 3, 6, 4))
    v = rng.standard_normal((2, 3, 6, 3))
    mask = rng.random((3, 5, 6)) < 0.7
    kl = np.array([[6, 2, 4], [1, 6, 5]])
    wq = rng.standard_normal((4, 3))
    wk = rng.standard_normal((4, 3))
    va = rng.standard_normal(3)
    beta = rng.random((2, 3, 5)) + 0.5
    wp = rng.standard_normal((4, 2))
    vp = rng.standard_normal(2)
    pos = rng.random((2, 3, 5)) * 6
    xq = rng.standard_normal((7, 2))
    xt = rng.standard_normal((9, 2))
    yt = rng.standard_normal((9, 3))
    return [
        ("score_dot", attnc.score, (q, k), {}),
        ("score_general", attnc.score, (q, k), {"score": "general", "weight": rng.standard_normal((4, 4))}),
        ("score_additive", attnc.score, (q, k), {"score": "additive", "w_query": wq, "w_key": wk, "v": va}),
        ("score_cosine", attnc.score, (q, k), {"score": "cosine", "beta": beta}),
        ("score_location", attnc.score, (q, k), {"score": "location", "weight": rng.standard_normal((4, 6))}),
        ("score_gaussian", attnc.score, (q, k), {"score": "gaussian"}),
        (
            "softmax",
            attnc.softmax,
            (rng.standard_normal((2, 3, 5, 6)),),
            {"mask": mask, "key_lengths": kl, "causal": True},
        ),
        ("attention", attnc.attention, (q, k, v), {"mask": mask, "key_lengths": kl}),
        ("attention_vnone", attnc.attention, (q, k), {"score": "scaled_dot", "causal": True}),
        ("hard_argmax", attnc.hard_attention, (q, k, v), {"mask": mask}),
        ("hard_gumbel", attnc.hard_attention, (q, k, v), {"mode": "gumbel", "seed": 3, "temperature": 0.5}),
        ("hard_sample", attnc.hard_attention, (q, k, v), {"mode": "sample", "seed": 3, "key_lengths": kl}),
        ("local_m", attnc.local_attention, (q, k, v), {"window": 1.5, "positions": pos, "mask": mask}),
        (
            "local_p",
            attnc.local_attention,
            (q, k, v),
            {"window": 2, "mode": "predictive", "w_p": wp, "v_p": vp, "key_lengths": kl},
        ),
        ("kernel_regression", attnc.kernel_regression, (xq, xt, yt), {"bandwidth": np.asarray(0.8)}),
    ]


def _case_ids():
    return [c[0] for c in _cases(np.random.default_rng(0))]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", _case_ids())
def test_layouts_match_contiguous(layout, case, rng, assert_unchanged):
    name, fn, args, kwargs = next(c for c in _cases(rng) if c[0] == case)
    fl = LAYOUTS[layout]
    args_l = tuple(_relayout(a, fl) for a in args)
    kwargs_l = {n: _relayout(a, fl) for n, a in kwargs.items()}
    if layout != "readonly":
        for a, b in zip(args, args_l):
            if a.ndim >= 2 or layout in ("noncontig", "negstride"):
                assert not b.flags.c_contiguous
    expected = _tuple(fn(*args, **kwargs))
    got = _tuple(assert_unchanged(fn, *args_l, **kwargs_l))
    for i, (g, e) in enumerate(zip(got, expected)):
        _same(g, e, f"{case}/{layout} output {i}")
    # gradients too
    outs_e, pb_e = attnc.vjp(fn, *args, **kwargs)
    outs_g, pb_g = attnc.vjp(fn, *args_l, **kwargs_l)
    cots = [rng.standard_normal(np.shape(o)) if np.asarray(o).dtype.kind == "f" else None for o in _tuple(outs_e)]
    ge = pb_e(*cots)
    gg = pb_g(*cots)
    assert set(ge) == set(gg)
    for n in ge:
        _same(gg[n], ge[n], f"{case}/{layout} gradient {n}")


def test_zero_stride_broadcast_inputs(rng):
    q1 = rng.standard_normal((1, 3, 4))
    k1 = rng.standard_normal((1, 5, 4))
    q = np.broadcast_to(q1, (4, 3, 4))
    k = np.broadcast_to(k1, (4, 5, 4))
    assert q.strides[0] == 0 and not q.flags.writeable
    ctx, w = attnc.attention(q, k)
    ectx, ew = attnc.attention(q.copy(), k.copy())
    _same(ctx, ectx)
    _same(w, ew)
    (c2, _), pb = attnc.vjp(attnc.attention, q, k)
    g = pb(np.ones(c2.shape), None)
    g2 = attnc.vjp(attnc.attention, q.copy(), k.copy())[1](np.ones(c2.shape), None)
    for n in g:
        assert g[n].shape == (4,) + g2[n].shape[1:]
        _same(g[n], g2[n], n)


def test_unaligned_buffer(rng):
    q = rng.standard_normal((3, 4))
    k = rng.standard_normal((5, 4))
    buf = bytearray(q.nbytes + 1)
    qu = np.frombuffer(buf, dtype=np.float64, count=q.size, offset=1).reshape(q.shape)
    buf[1:] = q.tobytes()
    assert not qu.flags.aligned
    np.testing.assert_array_equal(qu, q)
    _same(attnc.attention(qu, k)[0], attnc.attention(q, k)[0])


# --------------------------------------------------------------------------- exporters


def _mv_2d(a, code):
    """A multi-dimensional memoryview over an array.array (no NumPy underneath)."""
    arr = array.array(code, np.asarray(a, dtype=np.float64).ravel().tolist())
    return memoryview(arr).cast("B").cast(code, list(a.shape)), arr


@pytest.mark.parametrize("dtype,code", [(np.float64, "d"), (np.float32, "f")])
def test_memoryview_and_array_array(dtype, code, rng):
    q = rng.standard_normal((3, 4)).astype(dtype)
    k = rng.standard_normal((5, 4)).astype(dtype)
    v = rng.standard_normal((5, 2)).astype(dtype)
    qm, _qa = _mv_2d(q, code)
    km, _ka = _mv_2d(k, code)
    vm, _va = _mv_2d(v, code)
    ctx, w = attnc.attention(qm, km, vm, causal=True)
    ectx, ew = attnc.attention(q, k, v, causal=True)
    assert isinstance(ctx, np.ndarray) and ctx.dtype == dtype
    np.testing.assert_array_equal(ctx, ectx)
    np.testing.assert_array_equal(w, ew)
    # memoryview over a NumPy array
    ctx2, _ = attnc.attention(memoryview(q), memoryview(k), memoryview(v), causal=True)
    np.testing.assert_array_equal(ctx2, ectx)
    # vjp through exporters: gradients are NumPy arrays of the right shape
    (c3, w3), pb = attnc.vjp(attnc.attention, qm, km, vm)
    g = pb(np.ones(c3.shape, dtype), None)
    ge = attnc.vjp(attnc.attention, q, k, v)[1](np.ones(c3.shape, dtype), None)
    for n in ge:
        assert isinstance(g[n], np.ndarray) and g[n].dtype == dtype
        np.testing.assert_array_equal(g[n], ge[n])


def test_array_array_one_dimensional(rng):
    xq = rng.standard_normal(4)
    xt = rng.standard_normal(6)
    y = rng.standard_normal(6)
    yp, w = attnc.kernel_regression(array.array("d", xq), array.array("d", xt), array.array("d", y), bandwidth=0.7)
    eyp, ew = ref.kernel_regression(xq, xt, y, bandwidth=0.7)
    np.testing.assert_allclose(yp, eyp, rtol=1e-12)
    np.testing.assert_allclose(w, ew, rtol=1e-12)
    # a 1-D parameter from array.array
    q = rng.standard_normal((3, 4))
    k = rng.standard_normal((5, 4))
    wq = rng.standard_normal((4, 3))
    wk = rng.standard_normal((4, 3))
    va = rng.standard_normal(3)
    s = attnc.score(q, k, score="additive", w_query=wq, w_key=wk, v=array.array("d", va))
    np.testing.assert_allclose(s, ref.score(q, k, score="additive", w_query=wq, w_key=wk, v=va), rtol=1e-12)


def test_memoryview_mask_and_key_lengths(rng):
    s = rng.standard_normal((2, 3, 4))
    mask = rng.random((3, 4)) < 0.6
    kl = np.array([4, 2], dtype=np.int64)
    w = attnc.softmax(memoryview(s), mask=memoryview(mask), key_lengths=memoryview(kl))
    np.testing.assert_allclose(w, ref.softmax(s, mask=mask, key_lengths=kl), rtol=1e-13)


def test_torch_numpy_inputs(torch, rng):
    tq = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    tk = torch.randn(2, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    tv = torch.randn(2, 3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).transpose(-1, -2)
    assert not tv.is_contiguous()
    q, k, v = tq.numpy(), tk.numpy(), tv.numpy()
    ctx, w = attnc.attention(q, k, v, causal=True)
    ectx, ew = ref.attention(q.copy(), k.copy(), v.copy(), causal=True)
    np.testing.assert_allclose(ctx, ectx, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w, ew, rtol=1e-12, atol=1e-14)
    # float32 tensors, and inputs unchanged
    q32 = tq.float().numpy()
    before = q32.copy()
    ctx32, _ = attnc.attention(q32, tk.float().numpy(), tv.float().numpy(), causal=True)
    assert ctx32.dtype == np.float32
    np.testing.assert_array_equal(q32, before)
    np.testing.assert_allclose(ctx32, ectx, rtol=0, atol=1e-5 * np.max(np.abs(ectx)))


# --------------------------------------------------------------------------- threads


def test_set_get_num_threads(restore_threads):
    attnc.set_num_threads(1)
    assert attnc.get_num_threads() == 1
    attnc.set_num_threads(2)
    assert attnc.get_num_threads() == 2


def _thread_cases(rng):
    b, tq, tk, d = 64, 16, 16, 8
    q = rng.standard_normal((b, tq, d))
    k = rng.standard_normal((b, tk, d))
    v = rng.standard_normal((b, tk, 5))
    kl = rng.integers(0, tk + 1, size=b)
    mask = rng.random((tq, tk)) < 0.8
    p_add = dict(w_query=rng.standard_normal((d, 6)), w_key=rng.standard_normal((d, 6)), v=rng.standard_normal(6))
    return [
        (attnc.score, (q, k), dict(score="additive", **p_add)),
        (attnc.score, (q, k), dict(score="cosine", beta=rng.random((b, tq)) + 0.5)),
        (attnc.softmax, (rng.standard_normal((b, tq, tk)),), dict(mask=mask, key_lengths=kl, causal=True)),
        (attnc.attention, (q, k, v), dict(mask=mask, key_lengths=kl)),
        (attnc.attention, (q, k), dict(score="general", weight=rng.standard_normal((d, d)))),
        (attnc.hard_attention, (q, k, v), dict(mode="gumbel", seed=17, temperature=0.7)),
        (attnc.hard_attention, (q, k, v), dict(mode="sample", seed=17, key_lengths=kl)),
        (
            attnc.local_attention,
            (q, k, v),
            dict(window=3, mode="predictive", w_p=rng.standard_normal((d, 4)), v_p=rng.standard_normal(4)),
        ),
        (attnc.local_attention, (q, k, v), dict(window=2.5, mask=mask)),
        (
            attnc.kernel_regression,
            (rng.standard_normal((300, 2)), rng.standard_normal((200, 2)), rng.standard_normal((200, 3))),
            dict(bandwidth=np.asarray(0.5)),
        ),
    ]


def test_threads_bitwise_identical(rng, restore_threads):
    cases = _thread_cases(rng)
    results = {}
    for n in (1, 2):
        attnc.set_num_threads(n)
        crng = np.random.default_rng(99)
        res = []
        for fn, args, kwargs in cases:
            outs, pb = attnc.vjp(fn, *args, **kwargs)
            cots = [
                crng.standard_normal(np.shape(o)) if np.asarray(o).dtype.kind == "f" else None for o in _tuple(outs)
            ]
            grads = pb(*cots)
            res.append(([np.asarray(o).tobytes() for o in _tuple(outs)], {g: a.tobytes() for g, a in grads.items()}))
        results[n] = res
    for i, ((o1, g1), (o2, g2)) in enumerate(zip(results[1], results[2])):
        assert o1 == o2, f"case {i}: outputs differ between 1 and 2 threads"
        assert g1 == g2, f"case {i}: gradients differ between 1 and 2 threads"


def test_threads_float32_bitwise_identical(rng, restore_threads):
    q = rng.standard_normal((64, 16, 8)).astype(np.float32)
    k = rng.standard_normal((64, 16, 8)).astype(np.float32)
    outs = []
    for n in (1, 2):
        attnc.set_num_threads(n)
        (c, w), pb = attnc.vjp(attnc.attention, q, k, causal=True)
        g = pb(np.ones(c.shape, np.float32), None)
        outs.append((c.tobytes(), w.tobytes(), g["query"].tobytes(), g["keys"].tobytes()))
    assert outs[0] == outs[1]
