"""attnc.attention: reference, every score kind and mask kind, gradients, torch, float32."""

import numpy as np
import pytest

import attnc
from reference import attention_ref as ref

KINDS = ref.SCORE_KINDS
SAME_D = ("dot", "scaled_dot", "cosine", "gaussian")

SHAPES = [((), 5, 7), ((3,), 4, 1), ((2, 3), 3, 5), ((2,), 1, 1), ((), 1, 6), ((2,), 0, 3), ((2,), 3, 0), ((), 0, 0)]


def _mask_kwargs(lead, tq, tk, rng):
    kl = rng.integers(0, tk + 1, size=lead) if lead else np.array(max(tk - 1, 0))
    return [
        {},
        {"mask": rng.random((tq, tk)) < 0.7},
        {"mask": rng.random(lead + (1, tk)) < 0.6},
        {"key_lengths": kl},
        {"causal": True},
        {"mask": rng.random((tk,)) < 0.8, "key_lengths": kl, "causal": True},
    ]


def _inputs(kind, lead, tq, tk, rng, score_params, dv=3):
    dq, dk = (4, 4) if kind in SAME_D else (4, 5)
    q = rng.standard_normal(lead + (tq, dq))
    k = rng.standard_normal(lead + (tk, dk))
    v = rng.standard_normal(lead + (tk, dv))
    p = score_params(kind, rng, dq, dk, tk, beta_shape=lead + (tq,))
    return q, k, v, p


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lead,tq,tk", SHAPES, ids=str)
def test_attention_matches_reference(kind, lead, tq, tk, rng, score_params, assert_unchanged, close_rel):
    q, k, v, p = _inputs(kind, lead, tq, tk, rng, score_params)
    for mk in _mask_kwargs(lead, tq, tk, rng):
        ctx, w = assert_unchanged(attnc.attention, q, k, v, score=kind, **mk, **p)
        assert ctx.dtype == np.float64 and w.dtype == np.float64
        assert ctx.shape == lead + (tq, 3) and w.shape == lead + (tq, tk)
        ectx, ew = ref.attention(q, k, v, score=kind, **mk, **p)
        close_rel(w, ew, 1e-12, f"weights {mk}")
        close_rel(ctx, ectx, 1e-12, f"context {mk}")


@pytest.mark.parametrize("kind", ["dot", "general", "cosine"])
def test_attention_values_default_to_keys(kind, rng, score_params, close_rel):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    p = score_params(kind, rng, 4, 4, 5, beta_shape=(2, 3))
    ctx, w = attnc.attention(q, k, score=kind, **p)
    ectx, ew = ref.attention(q, k, k, score=kind, **p)
    assert ctx.shape == (2, 3, 4)
    close_rel(ctx, ectx, 1e-12)
    close_rel(w, ew, 1e-12)


def test_attention_tk_zero_gives_zero_context(rng):
    q = rng.standard_normal((2, 3, 4))
    ctx, w = attnc.attention(q, np.zeros((2, 0, 4)), np.zeros((2, 0, 5)))
    assert ctx.shape == (2, 3, 5) and w.shape == (2, 3, 0)
    np.testing.assert_array_equal(ctx, 0.0)


def test_attention_tq_zero_gives_empty(rng):
    ctx, w = attnc.attention(np.zeros((2, 0, 4)), rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 5)))
    assert ctx.shape == (2, 0, 5) and w.shape == (2, 0, 3)


def test_attention_fully_masked_rows_zero_context(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 2))
    mask = np.ones((3, 5), bool)
    mask[1] = False
    ctx, w = attnc.attention(q, k, v, mask=mask, key_lengths=np.array([5, 0]))
    assert np.all(np.isfinite(ctx)) and np.all(np.isfinite(w))
    np.testing.assert_array_equal(ctx[:, 1], 0.0)
    np.testing.assert_array_equal(ctx[1], 0.0)
    np.testing.assert_array_equal(w[1], 0.0)
    np.testing.assert_allclose(ctx[0, [0, 2]], ref.attention(q[0], k[0], v[0])[0][[0, 2]], rtol=1e-12)


def test_attention_nan_propagates(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 2))
    q[1, 0, 0] = np.nan
    v[0, 2, 1] = np.nan
    ctx, w = attnc.attention(q, k, v)
    assert np.all(np.isnan(w[1, 0])) and np.all(np.isnan(ctx[1, 0]))
    assert np.all(np.isnan(ctx[0, :, 1]))  # NaN value reaches every query
    np.testing.assert_allclose(ctx[0, :, 0], ref.attention(q, k, v)[0][0, :, 0], rtol=1e-12)
    np.testing.assert_allclose(ctx[1, 1:], ref.attention(q, k, v)[0][1, 1:], rtol=1e-12)


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lead", [(), (2,), (2, 2)], ids=str)
def test_attention_grad_fd(kind, lead, rng, score_params, check_vjp):
    dq, dk = (3, 3) if kind in SAME_D else (3, 2)
    tq, tk = 3, 4
    kw = dict(
        query=rng.standard_normal(lead + (tq, dq)),
        keys=rng.standard_normal(lead + (tk, dk)),
        values=rng.standard_normal(lead + (tk, 2)),
        score=kind,
        mask=rng.random((tq, tk)) < 0.8,
        causal=True,
    )
    kw["mask"][0, 0] = False  # row 0 fully masked
    kw.update(score_params(kind, rng, dq, dk, tk, beta_shape=lead + (tq,)))
    _, grads = check_vjp(attnc.attention, ref.attention, kw, rng)
    np.testing.assert_array_equal(grads["query"][..., 0, :], 0.0)


@pytest.mark.parametrize("kind", KINDS)
def test_attention_grad_fd_values_none(kind, rng, score_params, check_vjp):
    d = 3
    tk = 4
    kw = dict(
        query=rng.standard_normal((2, 3, d)),
        keys=rng.standard_normal((2, tk, d)),
        score=kind,
        key_lengths=np.array([4, 2]),
    )
    kw.update(score_params(kind, rng, d, d, tk, beta_shape=(2, 3)))
    _, grads = check_vjp(attnc.attention, ref.attention, kw, rng)
    assert "values" not in grads


def test_attention_grad_key_lengths_padding_zero(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 2))
    out, pb = attnc.vjp(attnc.attention, q, k, v, key_lengths=np.array([3, 0]))
    g = pb(rng.standard_normal(out[0].shape), rng.standard_normal(out[1].shape))
    np.testing.assert_array_equal(g["keys"][0, 3:], 0.0)
    np.testing.assert_array_equal(g["values"][0, 3:], 0.0)
    for n in ("query", "keys", "values"):
        np.testing.assert_array_equal(g[n][1], 0.0)
    assert np.any(g["keys"][0, :3] != 0)


def test_attention_pullback_only_weights_cotangent(rng, fd_check):
    q = rng.standard_normal((3, 4))
    k = rng.standard_normal((5, 4))
    v = rng.standard_normal((5, 2))
    (ctx, w), pb = attnc.vjp(attnc.attention, q, k, v)
    cw = rng.standard_normal(w.shape)
    g = pb(None, cw)
    np.testing.assert_array_equal(g["values"], 0.0)
    fd_check(ref.attention, dict(query=q, keys=k, values=v), [None, cw], g)


@pytest.mark.parametrize("tq,tk", [(0, 3), (3, 0), (0, 0)])
def test_attention_grad_empty(tq, tk, rng):
    q = rng.standard_normal((2, tq, 3))
    k = rng.standard_normal((2, tk, 3))
    v = rng.standard_normal((2, tk, 2))
    (ctx, w), pb = attnc.vjp(attnc.attention, q, k, v)
    g = pb(rng.standard_normal(ctx.shape), rng.standard_normal(w.shape))
    for n, a in (("query", q), ("keys", k), ("values", v)):
        assert g[n].shape == a.shape
        np.testing.assert_array_equal(g[n], 0.0)


# --------------------------------------------------------------------------- torch


@pytest.mark.parametrize("case", ["dot", "scaled_dot", "mask", "causal_kl", "values_none"])
def test_attention_vs_torch_autograd(case, torch, rng):
    lead, tq, tk, d, dv = (2, 2), 4, 6, 5, 3
    q = rng.standard_normal(lead + (tq, d))
    k = rng.standard_normal(lead + (tk, d))
    v = None if case == "values_none" else rng.standard_normal(lead + (tk, dv))
    kw = {}
    allowed = np.ones(lead + (tq, tk), bool)
    score = "scaled_dot" if case == "scaled_dot" else "dot"
    if case == "mask":
        kw["mask"] = rng.random((2, 1, tq, tk)) < 0.6
        allowed &= kw["mask"]
    if case == "causal_kl":
        kw["causal"] = True
        kw["key_lengths"] = np.array([[6, 2], [0, 4]])
        allowed &= np.tril(np.ones((tq, tk), bool))
        allowed &= np.arange(tk) < kw["key_lengths"][..., None, None]
    args = (q, k) if v is None else (q, k, v)
    (ctx, w), pb = attnc.vjp(attnc.attention, *args, score=score, **kw)
    cc = rng.standard_normal(ctx.shape)
    cw = rng.standard_normal(w.shape)
    g = pb(cc, cw)

    tq_ = torch.tensor(q, requires_grad=True)
    tk_ = torch.tensor(k, requires_grad=True)
    tv_ = tk_ if v is None else torch.tensor(v, requires_grad=True)
    ts = tq_ @ tk_.transpose(-1, -2)
    if score == "scaled_dot":
        ts = ts / np.sqrt(d)
    ta = torch.tensor(allowed)
    tw = torch.softmax(ts.masked_fill(~ta, -torch.inf), -1)
    tw = torch.where(ta.any(-1, keepdim=True), tw, torch.zeros_like(tw))
    tc = tw @ tv_
    ((tc * torch.tensor(cc)).sum() + (tw * torch.tensor(cw)).sum()).backward()
    np.testing.assert_allclose(ctx, tc.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, tw.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g["query"], tq_.grad.numpy(), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(g["keys"], tk_.grad.numpy(), rtol=1e-9, atol=1e-11)
    if v is not None:
        np.testing.assert_allclose(g["values"], tv_.grad.numpy(), rtol=1e-9, atol=1e-11)
    else:
        assert "values" not in g
    if case == "scaled_dot":
        # cross-check with torch's fused attention too (forward only)
        sdpa = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v))
        np.testing.assert_allclose(ctx, sdpa.numpy(), rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- float32


@pytest.mark.parametrize("kind", KINDS)
def test_attention_float32_matches_float64(kind, rng, score_params):
    dq, dk = (6, 6) if kind in SAME_D else (6, 5)
    q = rng.standard_normal((2, 4, dq)) * 0.5
    k = rng.standard_normal((2, 7, dk)) * 0.5
    v = rng.standard_normal((2, 7, 3))
    p64 = score_params(kind, rng, dq, dk, 7, beta_shape=(2, 4))
    p32 = {n: a.astype(np.float32) for n, a in p64.items()}
    kw = dict(score=kind, mask=rng.random((4, 7)) < 0.8, key_lengths=np.array([7, 5]))
    o64, pb64 = attnc.vjp(attnc.attention, q, k, v, **kw, **p64)
    o32, pb32 = attnc.vjp(
        attnc.attention, q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), **kw, **p32
    )
    for a32, a64 in zip(o32, o64):
        assert a32.dtype == np.float32
        np.testing.assert_allclose(a32, a64, rtol=0, atol=1e-5 * np.max(np.abs(a64)))
    cots = [rng.standard_normal(o.shape) for o in o64]
    g64 = pb64(*cots)
    g32 = pb32(*[c.astype(np.float32) for c in cots])
    assert set(g32) == set(g64)
    for n in g64:
        assert g32[n].dtype == np.float32, n
        np.testing.assert_allclose(g32[n], g64[n], rtol=0, atol=1e-5 * max(np.max(np.abs(g64[n])), 1e-30), err_msg=n)
