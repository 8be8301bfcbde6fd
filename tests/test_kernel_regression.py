"""attnc.kernel_regression: Nadaraya-Watson with a Gaussian kernel."""

import numpy as np
import pytest

import attnc
from reference import attention_ref as ref

FORMS = [
    # (x_query shape, x_train shape, y_train shape)
    ((7,), (11,), (11,)),
    ((7,), (11,), (11, 3)),
    ((5, 2), (9, 2), (9,)),
    ((5, 3), (9, 3), (9, 2)),
    ((1,), (1,), (1,)),
    ((0,), (4,), (4,)),
    ((3,), (0,), (0,)),
    ((4, 2), (0, 2), (0, 3)),
]


@pytest.mark.parametrize("xq_shape,xt_shape,y_shape", FORMS, ids=str)
@pytest.mark.parametrize("bandwidth", [1.0, 0.3, "array"])
def test_kernel_regression_matches_reference(xq_shape, xt_shape, y_shape, bandwidth, rng, assert_unchanged, close_rel):
    xq = rng.standard_normal(xq_shape) * 2
    xt = rng.standard_normal(xt_shape) * 2
    y = rng.standard_normal(y_shape)
    bw = np.asarray(0.7) if bandwidth == "array" else bandwidth
    yp, w = assert_unchanged(attnc.kernel_regression, xq, xt, y, bandwidth=bw)
    eyp, ew = ref.kernel_regression(xq, xt, y, bandwidth=bw)
    m, n = xq_shape[0], xt_shape[0]
    assert w.shape == (m, n) and w.dtype == np.float64
    assert yp.shape == ((m,) if len(y_shape) == 1 else (m, y_shape[1]))
    close_rel(w, ew, 1e-12, "weights")
    close_rel(yp, eyp, 1e-12, "y_pred")
    if n == 0:
        np.testing.assert_array_equal(yp, 0.0)


def test_kernel_regression_default_bandwidth(rng):
    xq = rng.standard_normal(4)
    xt = rng.standard_normal(6)
    y = rng.standard_normal(6)
    yp, w = attnc.kernel_regression(xq, xt, y)
    e = np.exp(-((xq[:, None] - xt[None, :]) ** 2) / 2.0)
    np.testing.assert_allclose(w, e / e.sum(1, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(yp, (e / e.sum(1, keepdims=True)) @ y, rtol=1e-12)


def test_kernel_regression_band_narrows_as_bandwidth_shrinks():
    x = np.linspace(0.0, 10.0, 21)
    y = np.sin(x)
    diag_mass = []
    spread = []
    idx = np.arange(21)
    for bw in (3.0, 1.5, 0.8, 0.4, 0.2, 0.05):
        yp, w = attnc.kernel_regression(x, x, y, bandwidth=bw)
        eyp, ew = ref.kernel_regression(x, x, y, bandwidth=bw)
        np.testing.assert_allclose(w, ew, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(yp, eyp, rtol=1e-12, atol=1e-14)
        diag_mass.append(np.mean(np.diag(w)))
        spread.append(np.mean(np.sum(w * np.abs(idx[:, None] - idx[None, :]), axis=1)))
    assert np.all(np.diff(diag_mass) > 0), diag_mass
    assert np.all(np.diff(spread) < 0), spread
    # bandwidth 0.05 with spacing 0.5: the weights are the identity, y_pred = y_train
    # (off-diagonal kernel exp(-50) ~ 2e-22 relative to the diagonal)
    yp, w = attnc.kernel_regression(x, x, y, bandwidth=0.05)
    np.testing.assert_allclose(w, np.eye(21), rtol=0, atol=1e-20)
    np.testing.assert_allclose(yp, y, rtol=0, atol=1e-20)
    # very wide bandwidth: close to uniform, prediction close to the mean
    yp, w = attnc.kernel_regression(x, x, y, bandwidth=1e4)
    np.testing.assert_allclose(w, 1 / 21, rtol=1e-6)
    np.testing.assert_allclose(yp, y.mean(), atol=1e-6)


def test_kernel_regression_tiny_bandwidth_stays_finite():
    """Scores of order -1e6: the softmax must stay finite (stable)."""
    x = np.linspace(0.0, 10.0, 11)
    y = np.cos(x)
    xq = np.array([0.1, 5.2, 9.9])
    yp, w = attnc.kernel_regression(xq, x, y, bandwidth=1e-3)
    assert np.all(np.isfinite(w)) and np.all(np.isfinite(yp))
    np.testing.assert_allclose(yp, y[[0, 5, 10]], rtol=0, atol=1e-12)


@pytest.mark.parametrize("xq_shape,xt_shape,y_shape", FORMS[:4], ids=str)
def test_kernel_regression_grad_fd(xq_shape, xt_shape, y_shape, rng, check_vjp):
    kw = dict(
        x_query=rng.standard_normal(xq_shape)[:4],
        x_train=rng.standard_normal(xt_shape)[:5] * 1.5,
        y_train=rng.standard_normal(y_shape)[:5],
        bandwidth=np.asarray(0.9),
    )
    check_vjp(attnc.kernel_regression, ref.kernel_regression, kw, rng, positional=("x_query", "x_train", "y_train"))


def test_kernel_regression_float_bandwidth_no_gradient(rng, check_vjp):
    kw = dict(
        x_query=rng.standard_normal(3), x_train=rng.standard_normal(4), y_train=rng.standard_normal(4), bandwidth=0.8
    )
    _, g = check_vjp(
        attnc.kernel_regression, ref.kernel_regression, kw, rng, positional=("x_query", "x_train", "y_train")
    )
    assert set(g) == {"x_query", "x_train", "y_train"}


def test_kernel_regression_is_gaussian_attention(rng):
    xq = rng.standard_normal((4, 2))
    xt = rng.standard_normal((6, 2))
    y = rng.standard_normal((6, 3))
    bw = np.asarray(0.6)
    yp, w = attnc.kernel_regression(xq, xt, y, bandwidth=bw)
    ctx, wa = attnc.attention(xq, xt, y, score="gaussian", bandwidth=bw)
    np.testing.assert_allclose(w, wa, rtol=1e-13)
    np.testing.assert_allclose(yp, ctx, rtol=1e-13)


def test_kernel_regression_vs_torch(torch, rng):
    xq = rng.standard_normal(5)
    xt = rng.standard_normal(7)
    y = rng.standard_normal(7)
    bw = np.asarray(0.8)
    (yp, w), pb = attnc.vjp(attnc.kernel_regression, xq, xt, y, bandwidth=bw)
    cy = rng.standard_normal(yp.shape)
    cw = rng.standard_normal(w.shape)
    g = pb(cy, cw)
    t = {
        n: torch.tensor(a, requires_grad=True)
        for n, a in (("x_query", xq), ("x_train", xt), ("y_train", y), ("bandwidth", bw))
    }
    tw = torch.softmax(-((t["x_query"][:, None] - t["x_train"][None, :]) ** 2) / (2 * t["bandwidth"] ** 2), dim=-1)
    typ = tw @ t["y_train"]
    ((typ * torch.tensor(cy)).sum() + (tw * torch.tensor(cw)).sum()).backward()
    np.testing.assert_allclose(yp, typ.detach().numpy(), rtol=1e-12)
    for n in t:
        np.testing.assert_allclose(g[n], t[n].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)


def test_kernel_regression_float32(rng):
    xq = rng.standard_normal((6, 2))
    xt = rng.standard_normal((9, 2))
    y = rng.standard_normal((9, 2))
    bw = np.asarray(0.9)
    o64, pb64 = attnc.vjp(attnc.kernel_regression, xq, xt, y, bandwidth=bw)
    o32, pb32 = attnc.vjp(
        attnc.kernel_regression,
        xq.astype(np.float32),
        xt.astype(np.float32),
        y.astype(np.float32),
        bandwidth=bw.astype(np.float32),
    )
    for a32, a64 in zip(o32, o64):
        assert a32.dtype == np.float32
        np.testing.assert_allclose(a32, a64, rtol=0, atol=1e-5 * np.max(np.abs(a64)))
    cots = [rng.standard_normal(o.shape) for o in o64]
    g64 = pb64(*cots)
    g32 = pb32(*[c.astype(np.float32) for c in cots])
    for n in g64:
        assert g32[n].dtype == np.float32 and g32[n].shape == g64[n].shape
        np.testing.assert_allclose(g32[n], g64[n], rtol=0, atol=1e-5 * np.max(np.abs(g64[n])), err_msg=n)


def test_kernel_regression_nan_propagates(rng):
    xq = rng.standard_normal(3)
    xt = rng.standard_normal(5)
    y = rng.standard_normal(5)
    xq[1] = np.nan
    yp, w = attnc.kernel_regression(xq, xt, y)
    assert np.isnan(yp[1]) and np.all(np.isnan(w[1]))
    eyp, ew = ref.kernel_regression(xq, xt, y)
    np.testing.assert_allclose(yp[[0, 2]], eyp[[0, 2]], rtol=1e-12)
