"""Views whose row stride BLAS's 32-bit interface cannot express (issue 25,
hole 2), and the other strides a caller's view can have: every function that
hands caller views to BLAS, against NumPy float64 (or torch) on a compact copy.

A stride of 2^31 + 64 elements is refused by OpenBLAS (which printed an
xerbla message and left the output unwritten); 2^32 + 16 wrapped to 16 in
32 bits (wrong rows read); 2^31 - 64 is the largest kind BLAS takes in place
(OpenBLAS must compute its offsets in 64 bits); negative and zero strides are
copied. The views live in sparse memory-mapped files: a few pages are
written, the rest costs no memory and no disk."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import attnc
from helpers import close
from reference import attention_ref as aref
from reference import sdpa_ref

ROW_STRIDES = {"2^31-64": 2**31 - 64, "2^31+64": 2**31 + 64, "2^32+16": 2**32 + 16, "-(2^31+64)": -(2**31 + 64), "0": 0}
HUGE = ["2^31+64", "2^32+16"]
DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
REL = {np.float32: 2e-5, np.float64: 1e-12}


def _holes_cost_nothing(folder):
    """Whether a file with a 1 GiB hole takes (almost) no disk space here: if
    not, the views below would write terabytes."""
    probe = folder / "probe.bin"
    with open(probe, "wb") as f:
        f.seek(2**30)
        f.write(b"\0")
    used = probe.stat().st_blocks * 512
    probe.unlink()
    return used < 2**20


@pytest.fixture
def strided(tmp_path):
    """strided(data, row_stride, transposed=False): a read-only view of data's
    values whose dim -2 (-1 if transposed) has the given stride in elements,
    in a sparse file. A zero stride needs data equal along that dim."""
    if not _holes_cost_nothing(tmp_path):
        pytest.fail(f"{tmp_path} does not keep holes in files: these tests need sparse files (pytest --basetemp)")
    maps = []

    def make(data, row_stride, transposed=False):
        data = np.asarray(data)
        if transposed:
            return make(np.swapaxes(data, -1, -2), row_stride).swapaxes(-1, -2)
        *lead, rows, cols = data.shape
        if row_stride == 0:
            assert (data == data[..., :1, :]).all(), "a zero stride repeats one row"
        span = (rows - 1) * abs(row_stride) + cols
        count = int(np.prod(lead, dtype=np.int64))
        path = tmp_path / f"view{len(maps)}.bin"
        mm = np.memmap(path, dtype=data.dtype, mode="w+", shape=(max(count, 1) * span,))
        maps.append(path)
        lead_strides = [span * int(np.prod(lead[i + 1 :], dtype=np.int64)) for i in range(len(lead))]
        first = (rows - 1) * abs(row_stride) if row_stride < 0 else 0
        it = data.itemsize
        view = as_strided(
            mm[first:], shape=data.shape, strides=tuple(s * it for s in lead_strides) + (row_stride * it, it)
        )
        view[...] = data
        view.flags.writeable = False
        return view

    yield make
    for path in maps:  # the mappings outlive their unlinked files
        path.unlink()


def _data(rng, shape, dtype, row_stride=1):
    x = rng.standard_normal(shape)
    if row_stride == 0:  # one row repeated
        x = np.broadcast_to(x[..., :1, :], shape).copy()
    return x.astype(dtype)


def _f64(x):
    return np.array(x, dtype=np.float64)


def test_a_huge_view_is_what_it_claims(strided, rng):
    x = _data(rng, (2, 3, 4), np.float64)
    v = strided(x, 2**32 + 16)
    assert v.strides == ((2 * (2**32 + 16) + 4) * 8, (2**32 + 16) * 8, 8)
    assert np.array_equal(v, x)


# --------------------------------------------------------------------------- linear


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("weight_layout", ["rows", "cols"])
@pytest.mark.parametrize("stride", list(ROW_STRIDES))
def test_linear(stride, weight_layout, dtype, strided, rng):
    rs = ROW_STRIDES[stride]
    x_, w_, b = _data(rng, (2, 5, 6), dtype, rs), _data(rng, (4, 6), dtype), _data(rng, (4,), dtype)
    dy_ = _data(rng, (2, 5, 4), dtype, rs)
    if rs == 0:
        w_ = (
            np.broadcast_to(w_[:1], w_.shape).copy()
            if weight_layout == "rows"
            else np.broadcast_to(w_[:, :1], w_.shape).copy()
        )
    x, dy = strided(x_, rs), strided(dy_, rs)
    w = strided(w_, rs, transposed=weight_layout == "cols")
    y, pullback = attnc.vjp(attnc.nn.linear, x, w, b)
    close(y, _f64(x_) @ _f64(w_).T + _f64(b), REL[dtype], "output")
    g = pullback(dy)
    close(g["input"], _f64(dy_) @ _f64(w_), REL[dtype], "dinput")
    close(g["weight"], np.einsum("bto,bti->oi", _f64(dy_), _f64(x_)), REL[dtype], "dweight")
    close(g["bias"], _f64(dy_).sum(axis=(0, 1)), REL[dtype], "dbias")


@pytest.mark.parametrize("stride", HUGE)
def test_linear_module(stride, strided, rng):
    rs = ROW_STRIDES[stride]
    lin = attnc.nn.Linear(6, 3, dtype=np.float64)
    x_ = _data(rng, (40, 6), np.float64)
    close(lin(strided(x_, rs)), x_ @ lin.weight.T + lin.bias, 1e-12, "Linear")


def test_a_size_beyond_32_bits_is_refused_by_name(tmp_path):
    """Sizes past 2^31 - 1 are refused with a ValueError naming the argument
    (products computed inside C larger than that are split into BLAS calls,
    tests/c/test_blas.h); nothing is read: the sparse files stay holes."""
    n = 2**31
    x = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(1, n))
    w = np.memmap(tmp_path / "w.bin", dtype=np.float32, mode="w+", shape=(2, n))
    with pytest.raises(ValueError, match=r"input has a dim of size 2147483648 \(sizes must be in \[0, 2147483647\]\)"):
        attnc.nn.linear(x, w)
    for name in ("x.bin", "w.bin"):
        (tmp_path / name).unlink()


# --------------------------------------------------------------------------- the attention family


def _score_params(kind, rng, dtype, dq, dk, tk, strided, rs):
    """The score's parameter arrays; matrices strided like the inputs."""
    mat = lambda shape: strided(_data(rng, shape, dtype, rs), rs)  # noqa: E731
    if kind in ("general",):
        return {"weight": mat((dq, dk))}
    if kind == "location":
        return {"weight": mat((dq, tk))}
    if kind in ("additive", "concat"):
        return {"w_query": mat((dq, 3)), "w_key": mat((dk, 3)), "v": _data(rng, (3,), dtype)}
    return {}


def _attention_inputs(kind, rs, dtype, strided, rng, tq=5, tk=6):
    q = strided(_data(rng, (2, tq, 4), dtype, rs), rs)
    k = strided(_data(rng, (2, tk, 4), dtype, rs), rs)
    v = strided(_data(rng, (2, tk, 3), dtype, rs), rs)
    return q, k, v, _score_params(kind, rng, dtype, 4, 4, tk, strided, rs)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", aref.SCORE_KINDS)
@pytest.mark.parametrize("stride", list(ROW_STRIDES))
def test_attention_forward(stride, kind, dtype, strided, rng):
    rs = ROW_STRIDES[stride]
    q, k, v, params = _attention_inputs(kind, rs, dtype, strided, rng)
    compact = {n: np.array(a) for n, a in params.items()}
    ctx, w = attnc.attention(q, k, v, score=kind, **params)
    ref_ctx, ref_w = aref.attention(np.array(q), np.array(k), np.array(v), score=kind, **compact)
    close(ctx, ref_ctx, REL[dtype], "context")
    close(w, ref_w, REL[dtype], "weights")
    close(
        attnc.score(q, k, score=kind, **params),
        aref.score(np.array(q), np.array(k), score=kind, **compact),
        10 * REL[dtype],
        "score",
    )
    ctx_h, w_h, idx = attnc.hard_attention(q, k, v, score=kind, **params)
    ref_idx = np.argmax(aref.score(np.array(q), np.array(k), score=kind, **compact), axis=-1)
    assert np.array_equal(idx, ref_idx)
    close(ctx_h, np.take_along_axis(_f64(v), ref_idx[..., None], axis=-2), REL[dtype], "hard context")


@pytest.mark.parametrize("kind", aref.SCORE_KINDS)
@pytest.mark.parametrize("stride", list(ROW_STRIDES))
def test_attention_gradients(stride, kind, strided, rng, check_vjp):
    rs = ROW_STRIDES[stride]
    q, k, v, params = _attention_inputs(kind, rs, np.float64, strided, rng)
    kwargs = dict(query=q, keys=k, values=v, score=kind, **params)
    # cotangents strided too: the pullback hands them to BLAS
    cots = [strided(_data(rng, (2, 5, 3), np.float64, rs), rs), strided(_data(rng, (2, 5, 6), np.float64, rs), rs)]
    check_vjp(attnc.attention, aref.attention, kwargs, rng, cotangents=cots, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("stride", list(ROW_STRIDES))
def test_local_attention_predictive(stride, strided, rng, check_vjp):
    rs = ROW_STRIDES[stride]
    q, k, v, _ = _attention_inputs("dot", rs, np.float64, strided, rng)
    w_p = strided(_data(rng, (4, 3), np.float64, rs), rs)
    v_p = _data(rng, (3,), np.float64)
    kwargs = dict(query=q, keys=k, values=v, window=2, mode="predictive", w_p=w_p, v_p=v_p)
    out = attnc.local_attention(**kwargs)
    ref = aref.local_attention(**{n: np.array(a) if isinstance(a, np.ndarray) else a for n, a in kwargs.items()})
    for got, want, what in zip(out, ref, ("context", "weights", "positions")):
        close(got, want, 1e-12, what)
    check_vjp(
        attnc.local_attention,
        aref.local_attention,
        kwargs,
        rng,
        cotangents=[_data(rng, (2, 5, 3), np.float64), None, None],
        rtol=1e-6,
        atol=1e-8,
    )


# --------------------------------------------------------------------------- SDPA


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("L", [5, 40])
@pytest.mark.parametrize("stride", list(ROW_STRIDES))
def test_sdpa_forward_and_backward(stride, L, dtype, strided, rng):
    rs = ROW_STRIDES[stride]
    shapes = {"query": (1, 2, L, 8), "key": (1, 2, 7, 8), "value": (1, 2, 7, 5)}
    compact = {n: _data(rng, s, dtype, rs) for n, s in shapes.items()}
    views = {n: strided(a, rs) for n, a in compact.items()}
    dout_ = _data(rng, (1, 2, L, 5), dtype, rs)
    (out, w), pullback = attnc.vjp(
        attnc.scaled_dot_product_attention,
        views["query"],
        views["key"],
        views["value"],
        is_causal=L == 40,
        return_weights=True,
    )
    ref_out, ref_w = sdpa_ref.scaled_dot_product_attention(*compact.values(), is_causal=L == 40, return_weights=True)
    close(out, ref_out, REL[dtype], "output")
    close(w, ref_w, REL[dtype], "weights")
    grads = pullback(strided(dout_, rs), None)
    ref = sdpa_ref.sdpa_grads(*compact.values(), dout_, is_causal=L == 40)
    for n in shapes:
        close(grads[n], ref[n], 10 * REL[dtype], f"d{n}")


@pytest.mark.parametrize("stride", HUGE)
def test_kv_cache_attend(stride, strided, rng):
    rs = ROW_STRIDES[stride]
    cache = attnc.KVCache(1, 2, 16, 8, np.float64)
    k_, v_ = _data(rng, (1, 2, 9, 8), np.float64), _data(rng, (1, 2, 9, 8), np.float64)
    cache.append(strided(k_, rs), strided(v_, rs))
    q_ = _data(rng, (1, 2, 3, 8), np.float64)
    out = cache.attend(strided(q_, rs))
    sees = np.arange(9)[None, :] <= 9 - 3 + np.arange(3)[:, None]  # the new block causal among itself
    close(out, sdpa_ref.scaled_dot_product_attention(q_, k_, v_, attn_mask=sees), 1e-12, "attend")


# --------------------------------------------------------------------------- multi-head attention


@pytest.mark.parametrize("stride", list(ROW_STRIDES))
def test_multi_head_attention(stride, strided, rng, torch):
    rs = ROW_STRIDES[stride]
    B, L, S, E, H = 2, 5, 6, 8, 2
    compact = {
        "query": _data(rng, (B, L, E), np.float64, rs),
        "key": _data(rng, (B, S, E), np.float64, rs),
        "value": _data(rng, (B, S, E), np.float64, rs),
        "in_proj_weight": _data(rng, (3 * E, E), np.float64, rs),
        "in_proj_bias": _data(rng, (3 * E,), np.float64),
        "out_proj_weight": _data(rng, (E, E), np.float64, rs),
        "out_proj_bias": _data(rng, (E,), np.float64),
    }
    args = {n: strided(a, rs) if a.ndim > 1 else a for n, a in compact.items()}
    dout_ = _data(rng, (B, L, E), np.float64, rs)
    dw_ = _data(rng, (B, L, S), np.float64)
    names = list(compact)
    (out, w), pullback = attnc.vjp(
        attnc.multi_head_attention, args["query"], args["key"], args["value"], H, *(args[n] for n in names[3:])
    )
    grads = pullback(strided(dout_, rs), dw_)
    leaves = {n: torch.tensor(a, requires_grad=True) for n, a in compact.items()}
    t = {n: x.transpose(0, 1) if n in ("query", "key", "value") else x for n, x in leaves.items()}
    tout, tw = torch.nn.functional.multi_head_attention_forward(
        t["query"],
        t["key"],
        t["value"],
        E,
        H,
        t["in_proj_weight"],
        t["in_proj_bias"],
        None,
        None,
        False,
        0.0,
        t["out_proj_weight"],
        t["out_proj_bias"],
        training=False,
    )
    tout = tout.transpose(0, 1)
    ((tout * torch.tensor(dout_)).sum() + (tw * torch.tensor(dw_)).sum()).backward()
    close(out, tout.detach().numpy(), 1e-12, "output")
    close(w, tw.detach().numpy(), 1e-12, "weights")
    for n, x in leaves.items():
        close(grads[n], x.grad.numpy(), 1e-10, f"gradient of {n}")
