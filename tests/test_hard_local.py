"""attnc.hard_attention and attnc.local_attention."""

import math

import numpy as np
import pytest

import attnc
from reference import attention_ref as ref

KINDS = ref.SCORE_KINDS
SAME_D = ("dot", "scaled_dot", "cosine", "gaussian")


def _chi2_sf_even_dof(x, dof):
    """Survival function of the chi-square distribution for an even number of dof."""
    assert dof % 2 == 0
    return math.exp(-x / 2) * sum((x / 2) ** i / math.factorial(i) for i in range(dof // 2))


def _check_one_hot(ctx, w, idx, values, allowed):
    """weights one-hot at idx (zeros and -1 when nothing is allowed), context = values[idx],
    picks only allowed keys."""
    tk = w.shape[-1]
    assert idx.dtype == np.int64
    assert idx.shape == w.shape[:-1]
    any_ = allowed.any(-1)
    np.testing.assert_array_equal(idx[~any_], -1)
    assert np.all((idx[any_] >= 0) & (idx[any_] < tk))
    picked_allowed = np.take_along_axis(allowed, np.maximum(idx, 0)[..., None], -1)[..., 0]
    assert np.all(picked_allowed[any_]), "a masked key was picked"
    ectx, ew = ref.one_hot_attention(idx, tk, values)
    np.testing.assert_array_equal(w, ew)
    np.testing.assert_allclose(ctx, ectx, rtol=1e-15, atol=0)


# =========================================================================== hard: argmax

HARD_SHAPES = [((), 5, 7), ((3,), 4, 1), ((2, 3), 3, 5), ((2,), 0, 3), ((2,), 3, 0), ((), 1, 1)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lead,tq,tk", HARD_SHAPES, ids=str)
def test_hard_argmax_matches_reference(kind, lead, tq, tk, rng, score_params, assert_unchanged):
    dq, dk = (4, 4) if kind in SAME_D else (4, 5)
    q = rng.standard_normal(lead + (tq, dq))
    k = rng.standard_normal(lead + (tk, dk))
    v = rng.standard_normal(lead + (tk, 3))
    p = score_params(kind, rng, dq, dk, tk, beta_shape=lead + (tq,))
    kl = rng.integers(0, tk + 1, size=lead)
    for mk in (
        {},
        {"mask": rng.random((tq, tk)) < 0.6},
        {"causal": True},
        {"key_lengths": kl, "causal": True, "mask": rng.random((tk,)) < 0.7},
    ):
        ctx, w, idx = assert_unchanged(attnc.hard_attention, q, k, v, score=kind, **mk, **p)
        ectx, ew, eidx = ref.hard_attention(q, k, v, score=kind, **mk, **p)
        np.testing.assert_array_equal(idx, eidx, err_msg=str(mk))
        assert w.dtype == np.float64 and ctx.dtype == np.float64
        np.testing.assert_array_equal(w, ew)
        np.testing.assert_allclose(ctx, ectx, rtol=1e-15, atol=0)


def test_hard_argmax_values_default_to_keys(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    ctx, w, idx = attnc.hard_attention(q, k)
    ectx, ew, eidx = ref.hard_attention(q, k)
    np.testing.assert_array_equal(idx, eidx)
    np.testing.assert_allclose(ctx, ectx, rtol=1e-15)


@pytest.mark.parametrize("kind", ["dot", "general", "additive", "cosine", "gaussian"])
@pytest.mark.parametrize("values_none", [False, True])
def test_hard_argmax_grad_fd(kind, values_none, rng, score_params, check_vjp):
    d = 3
    kw = dict(query=rng.standard_normal((2, 3, d)), keys=rng.standard_normal((2, 4, d)))
    if not values_none:
        kw["values"] = rng.standard_normal((2, 4, 2))
    kw.update(score=kind, mask=rng.random((3, 4)) < 0.7, key_lengths=np.array([4, 3]))
    kw.update(score_params(kind, rng, d, d, 4, beta_shape=(2, 3)))
    _, g = check_vjp(attnc.hard_attention, ref.hard_attention, kw, rng)
    # piecewise constant in the scores: query and score parameters get exactly zero
    for n in g:
        if n not in ("keys", "values"):
            np.testing.assert_array_equal(g[n], 0.0, err_msg=n)


# =========================================================================== hard: sample


def _sample_inputs(rng, n_rows, tk=6, d=3):
    q1 = rng.standard_normal((1, 1, d))
    k1 = rng.standard_normal((1, tk, d))
    q = np.broadcast_to(q1, (n_rows, 1, d)).copy()
    k = np.broadcast_to(k1, (n_rows, tk, d)).copy()
    v = rng.standard_normal((n_rows, tk, 2))
    return q, k, v


@pytest.mark.parametrize("mode", ["sample", "gumbel"])
def test_random_modes_reproducible_by_seed(mode, rng):
    q = rng.standard_normal((50, 3, 4))
    k = rng.standard_normal((50, 6, 4))
    v = rng.standard_normal((50, 6, 2))
    a = attnc.hard_attention(q, k, v, mode=mode, seed=7)
    b = attnc.hard_attention(q, k, v, mode=mode, seed=7)
    c = attnc.hard_attention(q, k, v, mode=mode, seed=8)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()
    assert np.any(a[2] != c[2]), "different seeds gave identical picks on 150 rows"
    n1 = attnc.hard_attention(q, k, v, mode=mode, seed=None)[2]
    n2 = attnc.hard_attention(q, k, v, mode=mode, seed=None)[2]
    assert np.any(n1 != n2), "seed=None gave identical picks twice on 150 rows"


@pytest.mark.parametrize("mode", ["sample", "gumbel"])
def test_random_modes_frequencies_match_masked_softmax(mode, rng):
    n = 20000
    tk = 6
    q, k, v = _sample_inputs(rng, n, tk)
    mask = np.array([True, True, False, True, True, True])
    kw = dict(mode=mode, seed=12345, mask=mask)
    if mode == "gumbel":
        kw["temperature"] = 0.5  # the forward pick does not depend on the temperature
    ctx, w, idx = attnc.hard_attention(q, k, v, **kw)
    allowed = np.broadcast_to(mask, (n, 1, tk))
    _check_one_hot(ctx, w, idx, v, allowed)
    p = ref.softmax(ref.score(q[:1], k[:1]), mask=mask)[0, 0]
    counts = np.bincount(idx.ravel(), minlength=tk)
    assert counts[2] == 0
    expected = p[mask] * n
    chi2 = float(np.sum((counts[mask] - expected) ** 2 / expected))
    assert _chi2_sf_even_dof(chi2, 4) > 1e-6, (counts, expected, chi2)


def test_sample_frequencies_across_seeds(rng):
    tk = 5
    q = rng.standard_normal((10, 1, 3))
    k = np.broadcast_to(rng.standard_normal((1, tk, 3)), (10, tk, 3)).copy()
    q[:] = q[0]
    p = ref.softmax(ref.score(q[0], k[0]))[0]
    counts = np.zeros(tk)
    for seed in range(600):
        idx = attnc.hard_attention(q, k, mode="sample", seed=seed)[2]
        counts += np.bincount(idx.ravel(), minlength=tk)
    expected = p * counts.sum()
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert _chi2_sf_even_dof(chi2, 4) > 1e-6, (counts, expected, chi2)


@pytest.mark.parametrize("mode", ["sample", "gumbel"])
def test_random_modes_never_pick_masked_keys(mode, rng):
    lead, tq, tk = (40, 2), 5, 7
    q = rng.standard_normal(lead + (tq, 3)) * 3
    k = rng.standard_normal(lead + (tk, 3)) * 3
    v = rng.standard_normal(lead + (tk, 2))
    mask = rng.random((tq, tk)) < 0.5
    mask[2] = False
    kl = rng.integers(0, tk + 1, size=lead)
    ctx, w, idx = attnc.hard_attention(q, k, v, mode=mode, seed=3, mask=mask, key_lengths=kl, causal=True)
    allowed = ref.allowed_mask(lead + (tq, tk), mask, kl, True)
    assert (~allowed.any(-1)).any() and allowed.any(-1).any()
    _check_one_hot(ctx, w, idx, v, allowed)


def test_sample_and_argmax_query_gradient_zero_values_gradient_onehot(rng):
    q = rng.standard_normal((3, 4, 5))
    k = rng.standard_normal((3, 6, 5))
    v = rng.standard_normal((3, 6, 2))
    w_gen = rng.standard_normal((5, 5))
    for mode in ("argmax", "sample"):
        (ctx, w, idx), pb = attnc.vjp(attnc.hard_attention, q, k, v, mode=mode, seed=1, score="general", weight=w_gen)
        dc = rng.standard_normal(ctx.shape)
        g = pb(dc, rng.standard_normal(w.shape), None)
        np.testing.assert_array_equal(g["query"], 0.0)
        np.testing.assert_array_equal(g["keys"], 0.0)
        np.testing.assert_array_equal(g["weight"], 0.0)
        _, ew = ref.one_hot_attention(idx, 6, v)
        np.testing.assert_allclose(g["values"], np.swapaxes(ew, -1, -2) @ dc, rtol=1e-14)


# =========================================================================== hard: gumbel


def test_gumbel_forward_independent_of_temperature(rng):
    q = rng.standard_normal((30, 3, 4))
    k = rng.standard_normal((30, 5, 4))
    picks = [attnc.hard_attention(q, k, mode="gumbel", seed=11, temperature=t)[2] for t in (0.1, 1.0, 7.0)]
    np.testing.assert_array_equal(picks[0], picks[1])
    np.testing.assert_array_equal(picks[0], picks[2])


def test_gumbel_values_gradient_is_onehot_transpose(rng):
    q = rng.standard_normal((3, 4, 5))
    k = rng.standard_normal((3, 6, 5))
    v = rng.standard_normal((3, 6, 2))
    (ctx, w, idx), pb = attnc.vjp(attnc.hard_attention, q, k, v, mode="gumbel", seed=5, temperature=0.7)
    _check_one_hot(ctx, w, idx, v, np.ones(w.shape, bool))
    dc = rng.standard_normal(ctx.shape)
    g = pb(dc, None, None)
    np.testing.assert_allclose(g["values"], np.swapaxes(w, -1, -2) @ dc, rtol=1e-14)
    for n in ("query", "keys"):
        assert np.all(np.isfinite(g[n])) and np.any(g[n] != 0), n
    g_again = pb(dc, None, None)
    for n in g:
        assert g[n].tobytes() == g_again[n].tobytes()
    # the weights' cotangent is dW = dC V^T + dweights: giving dC V^T as the weights'
    # cotangent must give the same query/keys gradients, and no values gradient
    g_w = pb(None, dc @ np.swapaxes(v, -1, -2), None)
    np.testing.assert_array_equal(g_w["values"], 0.0)
    for n in ("query", "keys"):
        np.testing.assert_allclose(g_w[n], g[n], rtol=1e-12, atol=1e-14, err_msg=n)
    # a new call with the same seed uses the same noise: same gradients
    (_, _, idx2), pb2 = attnc.vjp(attnc.hard_attention, q, k, v, mode="gumbel", seed=5, temperature=0.7)
    np.testing.assert_array_equal(idx2, idx)
    g2 = pb2(dc, None, None)
    for n in g:
        assert g[n].tobytes() == g2[n].tobytes(), n


@pytest.mark.parametrize("mode", ["argmax", "sample", "gumbel"])
def test_hard_values_none_keys_gradient_covers_both_uses(mode, rng):
    q = rng.standard_normal((3, 4, 5))
    k = rng.standard_normal((3, 6, 5))
    (ctx, w, idx), pb = attnc.vjp(attnc.hard_attention, q, k, mode=mode, seed=9, temperature=0.8)
    (ctx2, w2, idx2), pb2 = attnc.vjp(attnc.hard_attention, q, k, k.copy(), mode=mode, seed=9, temperature=0.8)
    np.testing.assert_array_equal(idx, idx2)
    dc = rng.standard_normal(ctx.shape)
    dw = rng.standard_normal(w.shape)
    g = pb(dc, dw, None)
    g2 = pb2(dc, dw, None)
    assert "values" not in g
    np.testing.assert_allclose(g["keys"], g2["keys"] + g2["values"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g["query"], g2["query"], rtol=1e-12, atol=1e-14)


def test_gumbel_straight_through_is_tempered_softmax_jacobian(rng):
    """With keys = I the scores are s = q, so the query gradient is the pull-back through
    y = softmax((s + g)/T). Pulling back each basis cotangent e_j of the weights gives the
    Jacobian J = (diag(y) - y y^T)/T. From J we recover y without knowing g and check:
    J has exactly that form, argmax y is the forward pick (same noise), and
    g_j - g_0 = T (log y_j - log y_0) - (s_j - s_0) has the Logistic(0, 1) law of a
    difference of two standard Gumbels (mean 0, variance pi^2/3), which fails if the
    temperature were applied as softmax(s/T + g) (variance T^2 pi^2/3)."""
    n, tk, T = 4000, 4, 2.0
    q = rng.standard_normal((n, 1, tk)) * 0.7
    keys = np.broadcast_to(np.eye(tk), (n, tk, tk)).copy()
    values = rng.standard_normal((n, tk, 2))
    (ctx, w, idx), pb = attnc.vjp(attnc.hard_attention, q, keys, values, mode="gumbel", temperature=T, seed=2024)
    J = np.empty((n, tk, tk))
    for j in range(tk):
        dw = np.zeros(w.shape)
        dw[..., j] = 1.0
        J[:, :, j] = pb(None, dw, None)["query"][:, 0, :]
    np.testing.assert_allclose(J, np.swapaxes(J, 1, 2), rtol=0, atol=1e-13)
    y = np.empty((n, tk))
    for j in range(tk):
        kk, ll = [i for i in range(tk) if i != j][:2]
        y[:, j] = np.sqrt(-T * J[:, j, kk] * J[:, j, ll] / J[:, kk, ll])
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=0, atol=1e-9)
    model = (y[:, :, None] * np.eye(tk) - y[:, :, None] * y[:, None, :]) / T
    np.testing.assert_allclose(J, model, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(np.argmax(y, 1), idx[:, 0])
    s = q[:, 0, :]
    g_est = T * np.log(y) - s
    diffs = (g_est[:, 1:] - g_est[:, :1]).ravel()
    assert abs(diffs.mean()) < 0.12, diffs.mean()
    assert abs(diffs.var() / (np.pi**2 / 3) - 1) < 0.12, diffs.var()
    # same seed at another temperature: the same noise g (up to a per-row constant)
    (_, _, idx3), pb3 = attnc.vjp(attnc.hard_attention, q, keys, values, mode="gumbel", temperature=0.5, seed=2024)
    np.testing.assert_array_equal(idx3, idx)
    J3 = np.empty((n, tk, tk))
    for j in range(tk):
        dw = np.zeros(w.shape)
        dw[..., j] = 1.0
        J3[:, :, j] = pb3(None, dw, None)["query"][:, 0, :]
    # y3 = softmax((s + g)/0.5) predicted from the recovered g
    z = (s + g_est) / 0.5
    y3 = np.exp(z - z.max(1, keepdims=True))
    y3 /= y3.sum(1, keepdims=True)
    model3 = (y3[:, :, None] * np.eye(tk) - y3[:, :, None] * y3[:, None, :]) / 0.5
    np.testing.assert_allclose(J3, model3, rtol=0, atol=1e-8)


def test_gumbel_masked_rows(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 3))
    mask = np.array([True, False, True, False, True])
    (ctx, w, idx), pb = attnc.vjp(
        attnc.hard_attention, q, k, v, mode="gumbel", seed=0, mask=mask, key_lengths=np.array([5, 0])
    )
    allowed = ref.allowed_mask(w.shape, mask, np.array([5, 0]))
    _check_one_hot(ctx, w, idx, v, allowed)
    g = pb(rng.standard_normal(ctx.shape), rng.standard_normal(w.shape), None)
    for n in ("query", "keys", "values"):
        np.testing.assert_array_equal(g[n][1], 0.0, err_msg=n)
        assert np.all(np.isfinite(g[n]))
    # masked keys get no gradient through the softmax (their y is 0)
    np.testing.assert_array_equal(g["keys"][0, [1, 3]], 0.0)


@pytest.mark.parametrize("mode", ["argmax", "sample", "gumbel"])
def test_hard_empty(mode, rng):
    c, w, i = attnc.hard_attention(rng.standard_normal((2, 0, 3)), rng.standard_normal((2, 4, 3)), mode=mode, seed=0)
    assert c.shape == (2, 0, 3) and w.shape == (2, 0, 4) and i.shape == (2, 0)
    c, w, i = attnc.hard_attention(
        rng.standard_normal((2, 3, 3)), np.zeros((2, 0, 3)), np.zeros((2, 0, 2)), mode=mode, seed=0
    )
    assert c.shape == (2, 3, 2) and w.shape == (2, 3, 0) and i.shape == (2, 3)
    np.testing.assert_array_equal(c, 0.0)
    np.testing.assert_array_equal(i, -1)
    assert i.dtype == np.int64


@pytest.mark.parametrize("mode", ["argmax", "sample", "gumbel"])
def test_hard_float32(mode, rng):
    q = rng.standard_normal((3, 4, 5))
    k = rng.standard_normal((3, 6, 5))
    v = rng.standard_normal((3, 6, 2))
    c64, w64, i64 = attnc.hard_attention(q, k, v, mode=mode, seed=4)
    c32, w32, i32 = attnc.hard_attention(
        q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), mode=mode, seed=4
    )
    assert c32.dtype == np.float32 and w32.dtype == np.float32 and i32.dtype == np.int64
    _check_one_hot(c32, w32, i32, v.astype(np.float32), np.ones(w32.shape, bool))
    if mode == "argmax":
        np.testing.assert_array_equal(i32, i64)
        np.testing.assert_allclose(c32, c64, rtol=0, atol=1e-5 * np.max(np.abs(c64)))


def test_hard_nan_does_not_crash(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    q[0, 1, 0] = np.nan
    for mode in ("argmax", "sample", "gumbel"):
        ctx, w, idx = attnc.hard_attention(q, k, mode=mode, seed=1)
        if mode == "argmax":
            ectx, ew, eidx = ref.hard_attention(q, k)
            np.testing.assert_array_equal(idx[1], eidx[1])
            np.testing.assert_array_equal(idx[0, [0, 2]], eidx[0, [0, 2]])
        assert np.all((idx >= -1) & (idx < 5))


# =========================================================================== local attention

LOCAL_SHAPES = [((), 5, 7), ((2,), 6, 4), ((2, 3), 3, 5), ((2,), 1, 1), ((2,), 0, 3), ((2,), 3, 0)]


@pytest.mark.parametrize("lead,tq,tk", LOCAL_SHAPES, ids=str)
@pytest.mark.parametrize("window", [0, 1, 1.5, 2.7])
def test_local_monotonic_matches_reference(lead, tq, tk, window, rng, assert_unchanged, close_rel):
    d = 4
    q = rng.standard_normal(lead + (tq, d))
    k = rng.standard_normal(lead + (tk, d))
    v = rng.standard_normal(lead + (tk, 3))
    pos_cases = [None, rng.random(lead + (tq,)) * (tk + 1) - 0.5, rng.integers(0, tk + 1, size=(tq,))]
    for pos in pos_cases:
        for mk in ({}, {"mask": rng.random((tq, tk)) < 0.7}, {"key_lengths": rng.integers(0, tk + 1, size=lead)}):
            kw = dict(window=window, **mk)
            if pos is not None:
                kw["positions"] = pos
            ctx, w, p = assert_unchanged(attnc.local_attention, q, k, v, **kw)
            ectx, ew, ep = ref.local_attention(q, k, v, **kw)
            assert p.dtype == np.float64 and p.shape == lead + (tq,)
            np.testing.assert_allclose(p, ep, rtol=0, atol=0)
            close_rel(w, ew, 1e-12, str(kw))
            close_rel(ctx, ectx, 1e-12, str(kw))
            dist = np.abs(np.arange(tk) - ep[..., None])
            np.testing.assert_array_equal(w[dist > window], 0.0)


def test_local_monotonic_window_is_inclusive(rng):
    q = rng.standard_normal((4, 3))
    k = rng.standard_normal((6, 3))
    ctx, w, p = attnc.local_attention(q, k, window=1, positions=np.array([0, 2, 5, 3]))
    support = w > 0
    expected = np.zeros((4, 6), bool)
    expected[0, [0, 1]] = True
    expected[1, [1, 2, 3]] = True
    expected[2, [4, 5]] = True
    expected[3, [2, 3, 4]] = True
    np.testing.assert_array_equal(support, expected)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-14)
    # default positions are 0..Tq-1; window 0 is hard attention on key t
    _, w0, p0 = attnc.local_attention(q, k, window=0)
    np.testing.assert_array_equal(p0, [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(w0, np.eye(4, 6))


def test_local_empty_window_gives_zeros(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 2))
    pos = np.array([[1.0, 40.0, -7.0], [2.0, 2.5, 100.0]])
    (ctx, w, p), pb = attnc.vjp(attnc.local_attention, q, k, v, window=1.2, positions=pos)
    for b, t in ((0, 1), (0, 2), (1, 2)):
        np.testing.assert_array_equal(w[b, t], 0.0)
        np.testing.assert_array_equal(ctx[b, t], 0.0)
    assert np.all(np.isfinite(ctx))
    g = pb(rng.standard_normal(ctx.shape), rng.standard_normal(w.shape), None)
    np.testing.assert_array_equal(g["query"][0, 1:], 0.0)
    np.testing.assert_array_equal(g["positions"], 0.0)


@pytest.mark.parametrize(
    "lead,tq,tk", [((), 5, 7), ((2,), 6, 4), ((2, 3), 3, 9), ((2,), 0, 3), ((2,), 3, 0), ((), 1, 1)], ids=str
)
@pytest.mark.parametrize("window", [1, 2.5])
@pytest.mark.parametrize("kind", ["dot", "general", "gaussian"])
def test_local_predictive_matches_reference(lead, tq, tk, window, kind, rng, score_params, assert_unchanged, close_rel):
    d, dp = 4, 3
    q = rng.standard_normal(lead + (tq, d))
    k = rng.standard_normal(lead + (tk, d))
    v = rng.standard_normal(lead + (tk, 2))
    p = score_params(kind, rng, d, d, tk)
    wp = rng.standard_normal((d, dp))
    vp = rng.standard_normal((dp,)) * 2
    for mk in ({}, {"key_lengths": rng.integers(0, tk + 3, size=lead)}, {"mask": rng.random((tk,)) < 0.7}):
        kw = dict(window=window, mode="predictive", w_p=wp, v_p=vp, score=kind, **mk, **p)
        ctx, w, pos = assert_unchanged(attnc.local_attention, q, k, v, **kw)
        ectx, ew, epos = ref.local_attention(q, k, v, **kw)
        close_rel(pos, epos, 1e-12, "positions")
        close_rel(w, ew, 1e-12, "weights")
        close_rel(ctx, ectx, 1e-12, "context")
        dist = np.abs(np.arange(tk) - epos[..., None])
        np.testing.assert_array_equal(w[dist > window + 1e-9], 0.0)


def test_local_predictive_not_renormalised(rng):
    d, tk, D = 4, 9, 2.0
    q = rng.standard_normal((3, 5, d))
    k = rng.standard_normal((3, tk, d))
    wp = rng.standard_normal((d, 2))
    vp = rng.standard_normal(2)
    ctx, w, p = attnc.local_attention(q, k, window=D, mode="predictive", w_p=wp, v_p=vp)
    assert np.all((p > 0) & (p < tk))
    sums = w.sum(-1)
    assert np.all(sums < 1.0 - 1e-6), sums
    # dividing out the Gaussian factor gives the window softmax, which sums to one
    dist = np.arange(tk) - p[..., None]
    inside = np.abs(dist) <= D
    gauss = np.exp(-(dist**2) / (2 * (D / 2) ** 2))
    soft = np.where(inside, w / gauss, 0.0)
    np.testing.assert_allclose(soft.sum(-1), 1.0, rtol=1e-12)
    s = ref.score(q, k)
    np.testing.assert_allclose(soft, ref.masked_softmax(s, inside), rtol=1e-11, atol=1e-15)


def _predictive_data(rng, lead, tq, tk, d, dp, window, kl=None, tries=200):
    """Inputs whose window centres keep a margin from every window edge (so that finite
    differences do not cross a discontinuity)."""
    for _ in range(tries):
        q = rng.standard_normal(lead + (tq, d))
        wp = rng.standard_normal((d, dp))
        vp = rng.standard_normal(dp) * 1.5
        lead_shape = lead
        pos = ref.local_positions(q, tk, lead_shape, mode="predictive", w_p=wp, v_p=vp, key_lengths=kl)
        margin = np.min(np.abs(np.abs(np.arange(tk) - pos[..., None]) - window))
        if margin > 1e-3:
            return q, wp, vp
    raise AssertionError("could not draw well-separated inputs")


@pytest.mark.parametrize("kind", ["dot", "general", "additive", "gaussian"])
@pytest.mark.parametrize("values_none", [False, True])
def test_local_predictive_grad_fd(kind, values_none, rng, score_params, check_vjp):
    lead, tq, tk, d, dp, D = (2,), 3, 6, 3, 2, 1.5
    kl = np.array([6, 4])
    q, wp, vp = _predictive_data(rng, lead, tq, tk, d, dp, D, kl)
    kw = dict(query=q, keys=rng.standard_normal(lead + (tk, d)))
    if not values_none:
        kw["values"] = rng.standard_normal(lead + (tk, 2))
    kw.update(window=D, mode="predictive", w_p=wp, v_p=vp, score=kind, key_lengths=kl)
    kw.update(score_params(kind, rng, d, d, tk))
    (ctx, w, pos), g = check_vjp(attnc.local_attention, ref.local_attention, kw, rng)
    assert np.any(g["w_p"] != 0) and np.any(g["v_p"] != 0)


def test_local_predictive_grad_through_positions_cotangent(rng, fd_check):
    """A cotangent on the returned positions pulls back to w_p, v_p and query."""
    lead, tq, tk, d, dp, D = (2,), 3, 7, 3, 2, 2.0
    q, wp, vp = _predictive_data(rng, lead, tq, tk, d, dp, D)
    k = rng.standard_normal(lead + (tk, d))
    outs, pb = attnc.vjp(attnc.local_attention, q, k, window=D, mode="predictive", w_p=wp, v_p=vp)
    cp = rng.standard_normal(outs[2].shape)
    g = pb(None, None, cp)
    fd_check(
        ref.local_attention,
        dict(query=q, keys=k, window=D, mode="predictive", w_p=wp, v_p=vp),
        [None, None, cp],
        g,
        wrt=["query", "keys", "w_p", "v_p"],
    )


@pytest.mark.parametrize("kind", ["dot", "cosine", "location"])
@pytest.mark.parametrize("with_positions", [False, True])
def test_local_monotonic_grad_fd(kind, with_positions, rng, score_params, check_vjp):
    lead, tq, tk, d = (2,), 4, 5, 3
    kw = dict(
        query=rng.standard_normal(lead + (tq, d)),
        keys=rng.standard_normal(lead + (tk, d)),
        values=rng.standard_normal(lead + (tk, 2)),
        window=1.5,
        score=kind,
        mask=rng.random((tq, tk)) < 0.8,
    )
    if with_positions:
        # offsets of 0.25 keep every |s - p| at least 0.25 away from the window edge
        kw["positions"] = np.arange(tq) + rng.choice([-0.25, 0.25], size=lead + (tq,))
    kw.update(score_params(kind, rng, d, d, tk, beta_shape=lead + (tq,)))
    # no cotangent on the returned positions: their pull-back to `positions` is not
    # specified (api_decisions: positions get a zero gradient)
    cots = [rng.standard_normal(lead + (tq, 2)), rng.standard_normal(lead + (tq, tk)), None]
    _, g = check_vjp(attnc.local_attention, ref.local_attention, kw, rng, cotangents=cots)
    if with_positions:
        np.testing.assert_array_equal(g["positions"], 0.0)


def test_local_float32(rng):
    d = 5
    q = rng.standard_normal((2, 4, d)) * 0.5
    k = rng.standard_normal((2, 8, d)) * 0.5
    v = rng.standard_normal((2, 8, 3))
    wp = rng.standard_normal((d, 3))
    vp = rng.standard_normal(3)
    for kw in (dict(window=2), dict(window=2.0, mode="predictive", w_p=wp, v_p=vp)):
        o64, pb64 = attnc.vjp(attnc.local_attention, q, k, v, **kw)
        kw32 = {n: (a.astype(np.float32) if isinstance(a, np.ndarray) else a) for n, a in kw.items()}
        o32, pb32 = attnc.vjp(
            attnc.local_attention, q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), **kw32
        )
        for a32, a64 in zip(o32, o64):
            assert a32.dtype == np.float32
            np.testing.assert_allclose(a32, a64, rtol=0, atol=1e-5 * np.max(np.abs(a64)))
        cots = [rng.standard_normal(o.shape) for o in o64]
        g64 = pb64(*cots)
        g32 = pb32(*[c.astype(np.float32) for c in cots])
        for n in g64:
            assert g32[n].dtype == np.float32
            np.testing.assert_allclose(
                g32[n], g64[n], rtol=0, atol=1e-5 * max(np.max(np.abs(g64[n])), 1e-30), err_msg=n
            )


def test_gumbel_straight_through_reaches_score_parameters(rng):
    """score="general" with keys = I gives s = q W, the same scores as score="dot" with
    query q W. With the same seed (same noise) the straight-through pull-back ds is the
    same, so the general score must give d query = ds W^T and d weight = sum_b q_b^T ds_b."""
    n, tq, tk = 5, 3, 4
    q = rng.standard_normal((n, tq, tk))
    wgen = rng.standard_normal((tk, tk))
    keys = np.broadcast_to(np.eye(tk), (n, tk, tk)).copy()
    values = rng.standard_normal((n, tk, 2))
    kw = dict(mode="gumbel", temperature=0.6, seed=77)
    (c1, w1, i1), pb1 = attnc.vjp(attnc.hard_attention, q @ wgen, keys, values, **kw)
    (c2, w2, i2), pb2 = attnc.vjp(attnc.hard_attention, q, keys, values, score="general", weight=wgen, **kw)
    np.testing.assert_array_equal(i1, i2)
    dc = rng.standard_normal(c1.shape)
    dw = rng.standard_normal(w1.shape)
    ds = pb1(dc, dw, None)["query"]  # keys = I: d query = ds
    g = pb2(dc, dw, None)
    assert np.any(ds != 0)
    np.testing.assert_allclose(g["query"], ds @ wgen.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g["weight"], np.einsum("btd,btk->dk", q, ds), rtol=1e-10, atol=1e-12)


def test_local_nan_propagates(rng):
    q = rng.standard_normal((2, 4, 3))
    k = rng.standard_normal((2, 6, 3))
    v = rng.standard_normal((2, 6, 2))
    q[1, 2, 0] = np.nan
    ctx, w, p = attnc.local_attention(q, k, v, window=1.5)
    assert np.all(np.isnan(ctx[1, 2]))
    ectx, ew, _ = ref.local_attention(q, k, v, window=1.5)
    keep = np.ones((2, 4), bool)
    keep[1, 2] = False
    np.testing.assert_allclose(ctx[keep], ectx[keep], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w[keep], ew[keep], rtol=1e-12, atol=1e-14)
    wp = rng.standard_normal((3, 2))
    vp = rng.standard_normal(2)
    ctx, w, p = attnc.local_attention(q, k, v, window=2, mode="predictive", w_p=wp, v_p=vp)
    assert np.isnan(p[1, 2]) and np.all(np.isnan(ctx[1, 2]))
    ectx, ew, ep = ref.local_attention(q, k, v, window=2, mode="predictive", w_p=wp, v_p=vp)
    np.testing.assert_allclose(ctx[keep], ectx[keep], rtol=1e-12, atol=1e-14)
