"""attnc.score: every kind against the NumPy reference, finite differences and torch."""

import math

import numpy as np
import pytest

import attnc
from reference import attention_ref as ref

KINDS = ref.SCORE_KINDS
SAME_D = ("dot", "scaled_dot", "cosine", "gaussian")

LEADS = [(), (3,), (2, 3)]
TQTK = [(5, 7), (1, 1), (4, 1), (1, 6), (0, 3), (3, 0), (0, 0)]


def _dims(kind):
    return (4, 4) if kind in SAME_D else (4, 5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lead", LEADS, ids=str)
@pytest.mark.parametrize("tq,tk", TQTK)
def test_score_matches_reference(kind, lead, tq, tk, rng, score_params, assert_unchanged, close_rel):
    dq, dk = _dims(kind)
    q = rng.standard_normal(lead + (tq, dq))
    k = rng.standard_normal(lead + (tk, dk))
    params = score_params(kind, rng, dq, dk, tk, beta_shape=lead + (tq,))
    out = assert_unchanged(attnc.score, q, k, score=kind, **params)
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float64
    assert out.shape == lead + (tq, tk)
    close_rel(out, ref.score(q, k, score=kind, **params), 1e-12, kind)


@pytest.mark.parametrize("kind", ["scaled_dot", "cosine", "gaussian"])
def test_score_python_float_params(kind, rng, score_params, close_rel):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    params = score_params(kind, rng, 4, 4, 5, arrays=False)
    close_rel(attnc.score(q, k, score=kind, **params), ref.score(q, k, score=kind, **params), 1e-12)


def test_score_defaults(rng, close_rel):
    q = rng.standard_normal((3, 6))
    k = rng.standard_normal((4, 6))
    dots = q @ k.T
    close_rel(attnc.score(q, k), dots, 1e-12)
    close_rel(attnc.score(q, k, score="scaled_dot"), dots / math.sqrt(6), 1e-12)
    cos = dots / np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(k, axis=1))
    close_rel(attnc.score(q, k, score="cosine"), cos, 1e-12)
    d2 = ((q[:, None, :] - k[None, :, :]) ** 2).sum(-1)
    close_rel(attnc.score(q, k, score="gaussian"), -d2 / 2.0, 1e-12)


def test_concat_is_alias_of_additive(rng, score_params):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 6))
    p = score_params("additive", rng, 4, 6, 5)
    np.testing.assert_array_equal(attnc.score(q, k, score="concat", **p), attnc.score(q, k, score="additive", **p))


@pytest.mark.parametrize("beta_shape", [(), (3,), (2, 3), (2, 1), (1, 3)], ids=str)
def test_cosine_beta_broadcast(beta_shape, rng, close_rel):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    beta = rng.random(beta_shape) * 3 + 0.5
    close_rel(attnc.score(q, k, score="cosine", beta=beta), ref.score(q, k, score="cosine", beta=beta), 1e-12)


def test_cosine_zero_vector_is_finite(rng):
    q = rng.standard_normal((3, 4))
    q[1] = 0.0
    k = rng.standard_normal((5, 4))
    k[2] = 0.0
    s = attnc.score(q, k, score="cosine", beta=2.0)
    assert np.all(np.isfinite(s))
    np.testing.assert_array_equal(s[1], 0.0)
    np.testing.assert_array_equal(s[:, 2], 0.0)
    np.testing.assert_allclose(s, ref.score(q, k, score="cosine", beta=2.0), atol=1e-12)


def test_location_ignores_key_values(rng):
    q = rng.standard_normal((2, 3, 4))
    w = rng.standard_normal((4, 6))
    s1 = attnc.score(q, rng.standard_normal((2, 6, 5)), score="location", weight=w)
    s2 = attnc.score(q, np.zeros((2, 6, 5)), score="location", weight=w)
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_allclose(s1, q @ w, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lead", [(), (2,), (2, 2)], ids=str)
def test_score_grad_fd(kind, lead, rng, score_params, check_vjp):
    dq, dk = (3, 3) if kind in SAME_D else (3, 2)
    tq, tk = 3, 4
    kw = dict(query=rng.standard_normal(lead + (tq, dq)), keys=rng.standard_normal(lead + (tk, dk)), score=kind)
    kw.update(score_params(kind, rng, dq, dk, tk, beta_shape=lead + (tq,)))
    _, grads = check_vjp(attnc.score, ref.score, kw, rng)
    if kind == "location":
        np.testing.assert_array_equal(grads["keys"], 0.0)


@pytest.mark.parametrize("beta_shape", [(), (3,), (2, 1), (1, 3)], ids=str)
def test_cosine_beta_grad_broadcast(beta_shape, rng, check_vjp):
    kw = dict(
        query=rng.standard_normal((2, 3, 4)),
        keys=rng.standard_normal((2, 5, 4)),
        score="cosine",
        beta=rng.random(beta_shape) + 0.5,
    )
    check_vjp(attnc.score, ref.score, kw, rng)


@pytest.mark.parametrize("kind", ["scaled_dot", "cosine", "gaussian"])
def test_python_float_params_get_no_gradient(kind, rng, score_params, check_vjp):
    kw = dict(query=rng.standard_normal((3, 4)), keys=rng.standard_normal((5, 4)), score=kind)
    kw.update(score_params(kind, rng, 4, 4, 5, arrays=False))
    _, grads = check_vjp(attnc.score, ref.score, kw, rng)
    assert set(grads) == {"query", "keys"}


@pytest.mark.parametrize("tq,tk", [(0, 3), (3, 0)])
def test_score_grad_empty(tq, tk, rng):
    q = rng.standard_normal((2, tq, 3))
    k = rng.standard_normal((2, tk, 3))
    w = rng.standard_normal((3, 3))
    out, pb = attnc.vjp(attnc.score, q, k, score="general", weight=w)
    assert out.shape == (2, tq, tk)
    g = pb(np.zeros(out.shape))
    assert g["query"].shape == q.shape and g["keys"].shape == k.shape
    np.testing.assert_array_equal(g["query"], 0.0)
    np.testing.assert_array_equal(g["keys"], 0.0)
    np.testing.assert_array_equal(g["weight"], 0.0)


def test_pullback_none_cotangent_gives_zero(rng):
    q = rng.standard_normal((3, 4))
    k = rng.standard_normal((5, 4))
    _, pb = attnc.vjp(attnc.score, q, k)
    g = pb(None)
    np.testing.assert_array_equal(g["query"], 0.0)
    np.testing.assert_array_equal(g["keys"], 0.0)


def test_vjp_outputs_equal_forward(rng, score_params):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    for kind in KINDS:
        p = score_params(kind, rng, 4, 4, 5, beta_shape=(2, 3))
        out, _ = attnc.vjp(attnc.score, q, k, score=kind, **p)
        np.testing.assert_array_equal(out, attnc.score(q, k, score=kind, **p))


def test_vjp_keyword_arguments(rng, check_vjp):
    """query/keys passed by keyword to vjp are still differentiated and named."""
    q = rng.standard_normal((3, 4))
    k = rng.standard_normal((5, 4))
    w = rng.standard_normal((4, 4))
    out, pb = attnc.vjp(attnc.score, query=q, keys=k, score="general", weight=w)
    cot = rng.standard_normal(out.shape)
    g = pb(cot)
    np.testing.assert_allclose(g["query"], cot @ k @ w.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g["keys"], cot.T @ q @ w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g["weight"], q.T @ cot @ k, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- torch


def _torch_score(torch, kind, q, k, p):
    kt = k.transpose(-1, -2)
    if kind == "dot":
        return q @ kt
    if kind == "scaled_dot":
        return (q @ kt) * p["scale"]
    if kind == "general":
        return q @ p["weight"] @ kt
    if kind in ("additive", "concat"):
        h = torch.tanh((q @ p["w_query"]).unsqueeze(-2) + (k @ p["w_key"]).unsqueeze(-3))
        return h @ p["v"]
    if kind == "cosine":
        cos = torch.nn.functional.cosine_similarity(q.unsqueeze(-2), k.unsqueeze(-3), dim=-1, eps=1e-8)
        return p["beta"].unsqueeze(-1) * cos
    if kind == "location":
        return (q @ p["weight"]).expand(*q.shape[:-1], p["weight"].shape[-1])
    if kind == "gaussian":
        d2 = ((q.unsqueeze(-2) - k.unsqueeze(-3)) ** 2).sum(-1)
        return -d2 / (2 * p["bandwidth"] ** 2)
    raise ValueError(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_score_vs_torch_autograd(kind, torch, rng, score_params):
    dq, dk = (4, 4) if kind in SAME_D else (4, 3)
    lead, tq, tk = (2,), 3, 5
    q = rng.standard_normal(lead + (tq, dq))
    k = rng.standard_normal(lead + (tk, dk))
    params = score_params(kind, rng, dq, dk, tk, beta_shape=lead + (tq,))
    out, pb = attnc.vjp(attnc.score, q, k, score=kind, **params)
    cot = rng.standard_normal(out.shape)
    grads = pb(cot)

    tq_ = torch.tensor(q, requires_grad=True)
    tk_ = torch.tensor(k, requires_grad=True)
    tp = {n: torch.tensor(v, requires_grad=True) for n, v in params.items()}
    ts = _torch_score(torch, kind, tq_, tk_, tp)
    np.testing.assert_allclose(out, ts.detach().numpy(), rtol=1e-10, atol=1e-12)
    (ts * torch.tensor(cot)).sum().backward()
    expected = {"query": tq_.grad, "keys": tk_.grad}
    expected.update({n: t.grad for n, t in tp.items()})
    assert set(grads) == set(expected)
    for n, e in expected.items():
        e = np.zeros(grads[n].shape) if e is None else e.numpy()
        np.testing.assert_allclose(grads[n], e, rtol=1e-9, atol=1e-11, err_msg=n)


# --------------------------------------------------------------------------- float32


@pytest.mark.parametrize("kind", KINDS)
def test_score_float32_matches_float64(kind, rng, score_params):
    dq, dk = (6, 6) if kind in SAME_D else (6, 5)
    q = rng.standard_normal((2, 4, dq)) * 0.5
    k = rng.standard_normal((2, 7, dk)) * 0.5
    p64 = score_params(kind, rng, dq, dk, 7, beta_shape=(2, 4))
    p32 = {n: v.astype(np.float32) for n, v in p64.items()}
    out64, pb64 = attnc.vjp(attnc.score, q, k, score=kind, **p64)
    out32, pb32 = attnc.vjp(attnc.score, q.astype(np.float32), k.astype(np.float32), score=kind, **p32)
    assert out32.dtype == np.float32
    scale = np.max(np.abs(out64))
    np.testing.assert_allclose(out32, out64, rtol=0, atol=1e-5 * scale)
    cot = rng.standard_normal(out64.shape)
    g64 = pb64(cot)
    g32 = pb32(cot.astype(np.float32))
    for n in g64:
        assert g32[n].dtype == np.float32, n
        s = max(np.max(np.abs(g64[n])), 1e-30)
        np.testing.assert_allclose(g32[n], g64[n], rtol=0, atol=1e-5 * s, err_msg=n)


@pytest.mark.parametrize("tq", [1, 5])
def test_additive_float32_over_ranges(tq, rng):
    """Float's additive score factors tanh's exp over the projections where they
    stay within ±20 and more than one query and key meet (the queries of element 0
    near 0: tanh's series; element 1: ordinary; element 2 beyond ±20: the direct
    path): each stays within float's precision of the float64 reference, values and
    gradients. da = 40 also runs the lanes' tail."""
    tk, dq, dk, da = 6, 7, 5, 40
    scales = np.array([0.002, 1.0, 40.0])[:, None, None]
    q = rng.standard_normal((3, tq, dq)) * scales
    k = rng.standard_normal((3, tk, dk)) * np.array([0.002, 1.0, 1.0])[:, None, None]
    p = dict(
        w_query=rng.standard_normal((dq, da)) / np.sqrt(dq),
        w_key=rng.standard_normal((dk, da)) / np.sqrt(dk),
        v=rng.standard_normal(da),
    )
    p32 = {n: a.astype(np.float32) for n, a in p.items()}
    q32, k32 = q.astype(np.float32), k.astype(np.float32)
    assert np.abs(q32[2] @ p32["w_query"]).max() > 20 > np.abs(q32[1] @ p32["w_query"]).max()
    # the reference on the float32 inputs, in float64: only the score's own rounding counts
    p64 = {n: a.astype(np.float64) for n, a in p32.items()}
    want = ref.score(q32.astype(np.float64), k32.astype(np.float64), score="additive", **p64)
    out, pb = attnc.vjp(attnc.score, q32, k32, score="additive", **p32)
    pre = (q32.astype(np.float64) @ p64["w_query"])[:, :, None] + (k32.astype(np.float64) @ p64["w_key"])[:, None]
    terms = np.abs(np.tanh(pre) * p64["v"]).sum(-1)
    assert np.abs(pre[0]).max() < 0.125  # element 0: tanh on its series only
    # each tanh within 1.5e-6 relative, plus the sums' rounding
    assert np.all(np.abs(out - want) <= 3e-6 * terms), np.max(np.abs(out - want) / terms)
    cot = rng.standard_normal(out.shape)
    g32 = pb(cot.astype(np.float32))
    g64 = attnc.vjp(attnc.score, q32.astype(np.float64), k32.astype(np.float64), score="additive", **p64)[1](cot)
    for n in g64:
        np.testing.assert_allclose(g32[n], g64[n], rtol=0, atol=1e-5 * np.abs(g64[n]).max(), err_msg=n)


# --------------------------------------------------------------------------- NaN


@pytest.mark.parametrize("kind", KINDS)
def test_score_nan_propagates(kind, rng, score_params):
    dq, dk = (4, 4) if kind in SAME_D else (4, 5)
    q = rng.standard_normal((3, dq))
    k = rng.standard_normal((5, dk))
    q[1, 2] = np.nan
    p = score_params(kind, rng, dq, dk, 5)
    s = attnc.score(q, k, score=kind, **p)
    assert np.all(np.isnan(s[1]))
    np.testing.assert_allclose(s[[0, 2]], ref.score(q, k, score=kind, **p)[[0, 2]], rtol=1e-12, atol=1e-12)


def _recomputing(kwargs):
    """A backward's keyword arguments without the saved projections: it recomputes them."""
    return {**kwargs, "params": {**kwargs["params"], "projections": None, "projections_ready": False}}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lead", [(2,), (2, 3)])
def test_additive_backward_reads_saved_projections(dtype, lead, rng):
    """The additive score's backward reads the projections Q W_q, K W_k its
    forward saved instead of recomputing them: the very same bits as the
    recomputing backward, through attnc.score and attnc.attention."""
    from attnc import _core
    from attnc.attention._spec import Inputs, Score

    q = rng.standard_normal(lead + (4, 5)).astype(dtype)
    k = rng.standard_normal(lead + (6, 3)).astype(dtype)
    val = rng.standard_normal(lead + (6, 2)).astype(dtype)
    p = {
        "w_query": rng.standard_normal((5, 7)).astype(dtype),
        "w_key": rng.standard_normal((3, 7)).astype(dtype),
        "v": rng.standard_normal(7).astype(dtype),
    }
    out, pb = attnc.vjp(attnc.score, q, k, score="additive", **p)
    ds = rng.standard_normal(out.shape).astype(dtype)
    g = pb(ds)
    inp = Inputs(q, k)
    sc = Score("additive", p, inp)
    dq, dk = inp.empty(inp.tq, inp.dq), inp.empty(inp.tk, inp.dk)
    kwargs, finish = sc.grads(inp)
    _core.score_backward(
        dquery=dq, dkeys=dk, dscores=np.ascontiguousarray(ds), query=inp.query, keys=inp.keys, **_recomputing(kwargs)
    )
    want = {"query": dq, "keys": dk, **finish(())}
    for name in want:
        np.testing.assert_array_equal(g[name], want[name], err_msg=name)

    (ctx, w), pb = attnc.vjp(attnc.attention, q, k, val, score="additive", **p)
    dctx = rng.standard_normal(ctx.shape).astype(dtype)
    g = pb(dctx, None)
    inp = Inputs(q, k, val)
    sc = Score("additive", p, inp)
    dq, dk, dv = inp.backward_outputs()
    kwargs, finish = sc.grads(inp)
    _core.attention_backward(
        dquery=dq,
        dkeys=dk,
        dvalues=dv,
        dcontext=np.ascontiguousarray(dctx),
        query=inp.query,
        keys=inp.keys,
        values=inp.values,
        weights=w,
        **_recomputing(kwargs),
    )
    for name, want in {**inp.grads(dq, dk, dv), **finish(())}.items():
        np.testing.assert_array_equal(g[name], want, err_msg=name)


def test_projections_buffer_is_checked(rng):
    """A projections buffer that is too small or of another dtype is refused, naming it."""
    from attnc import _core
    from attnc.attention._spec import Inputs, Score

    q, k = rng.standard_normal((2, 4, 5)), rng.standard_normal((2, 6, 3))
    p = {"w_query": rng.standard_normal((5, 7)), "w_key": rng.standard_normal((3, 7)), "v": rng.standard_normal(7)}
    inp = Inputs(q, k)
    params = Score("additive", p, inp).c
    out = inp.empty(inp.tq, inp.tk)
    for projections, error, message in (
        (np.empty(146), ValueError, "projections must be a contiguous vector of at least 147 elements"),
        (np.empty(300)[::2], ValueError, "projections must be a contiguous vector"),
        (np.empty(147, np.float32), TypeError, "projections"),
    ):
        with pytest.raises(error, match=message):
            _core.score_forward(
                scores=out, query=inp.query, keys=inp.keys, params={**params, "projections": projections}
            )
