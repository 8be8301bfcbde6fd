"""attnc.softmax: masks, key_lengths, causal, stability, gradients, torch."""

import numpy as np
import pytest

import attnc
from reference import attention_ref as ref


def _mask_cases(lead, tq, tk, rng):
    """(id, kwargs) pairs exercising every mask kind and their combinations."""

    def bmask(shape, p=0.7):
        return rng.random(shape) < p

    cases = [
        ("none", {}),
        ("mask_k", {"mask": bmask((tk,))}),
        ("mask_1k", {"mask": bmask((1, tk))}),
        ("mask_qk", {"mask": bmask((tq, tk))}),
        ("mask_q1", {"mask": bmask((tq, 1))}),
        ("mask_full", {"mask": bmask(lead + (tq, tk))}),
        ("causal", {"causal": True}),
    ]
    if lead:
        cases += [
            ("mask_lead_bcast", {"mask": bmask(lead[:1] + (1,) * (len(lead) - 1) + (1, tk))}),
            ("kl_full", {"key_lengths": rng.integers(0, tk + 2, size=lead)}),
            ("kl_last", {"key_lengths": rng.integers(0, tk + 1, size=lead[-1:])}),
            ("kl_scalar", {"key_lengths": np.array(max(tk - 1, 0))}),
            ("all3", {"mask": bmask((tq, tk)), "causal": True, "key_lengths": rng.integers(0, tk + 1, size=lead)}),
            ("kl_causal", {"causal": True, "key_lengths": rng.integers(0, tk + 1, size=lead)}),
        ]
        if len(lead) == 2:
            cases.append(("kl_col", {"key_lengths": rng.integers(0, tk + 1, size=(lead[0], 1))}))
    else:
        cases += [
            ("kl_0d", {"key_lengths": np.array(max(tk - 2, 0))}),
            ("mask_causal", {"mask": bmask((tq, tk)), "causal": True}),
        ]
    return cases


SHAPES = [((), 5, 7), ((3,), 4, 4), ((2, 3), 3, 5), ((2,), 6, 3), ((2,), 1, 1), ((), 1, 6), ((2,), 0, 3), ((2,), 3, 0)]


@pytest.mark.parametrize("lead,tq,tk", SHAPES, ids=str)
def test_softmax_matches_reference(lead, tq, tk, rng, assert_unchanged, close_rel):
    s = rng.standard_normal(lead + (tq, tk)) * 3
    for name, kw in _mask_cases(lead, tq, tk, rng):
        w = assert_unchanged(attnc.softmax, s, **kw)
        assert w.dtype == np.float64 and w.shape == s.shape, name
        expected = ref.softmax(s, **kw)
        close_rel(w, expected, 1e-13, name)
        # rows with an allowed key sum to one; the others are exactly zero
        allowed = ref.allowed_mask(s.shape, kw.get("mask"), kw.get("key_lengths"), kw.get("causal", False))
        any_ = allowed.any(-1)
        np.testing.assert_allclose(w.sum(-1)[any_], 1.0, rtol=1e-13, err_msg=name)
        np.testing.assert_array_equal(w[~allowed], 0.0, err_msg=name)


def test_fully_masked_rows_are_zero(rng):
    s = rng.standard_normal((2, 3, 4))
    mask = np.ones((2, 3, 4), bool)
    mask[0, 1] = False
    w = attnc.softmax(s, mask=mask, key_lengths=np.array([4, 0]))
    assert np.all(np.isfinite(w))
    np.testing.assert_array_equal(w[0, 1], 0.0)
    np.testing.assert_array_equal(w[1], 0.0)
    np.testing.assert_allclose(w[0, [0, 2]], ref.softmax(s[0, [0, 2]]), rtol=1e-13)


def test_causal_with_more_keys_than_queries(rng):
    s = rng.standard_normal((3, 6))
    w = attnc.softmax(s, causal=True)
    assert np.all(w[0, 1:] == 0) and np.all(w[1, 2:] == 0) and np.all(w[2, 3:] == 0)
    np.testing.assert_allclose(w, ref.softmax(s, causal=True), rtol=1e-13, atol=1e-15)


def test_causal_with_more_queries_than_keys(rng):
    s = rng.standard_normal((6, 3))
    w = attnc.softmax(s, causal=True)
    np.testing.assert_allclose(w, ref.softmax(s, causal=True), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(w[3:], ref.softmax(s[3:]), rtol=1e-13)


def test_key_lengths_larger_than_tk_are_clipped(rng):
    s = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(attnc.softmax(s, key_lengths=np.array([4, 100])), ref.softmax(s), rtol=1e-13)


@pytest.mark.parametrize("kl_dtype", [np.int32, np.int64, np.int16, np.uint8])
def test_key_lengths_integer_dtypes(kl_dtype, rng):
    s = rng.standard_normal((3, 2, 5))
    kl = np.array([1, 5, 3], dtype=kl_dtype)
    np.testing.assert_allclose(attnc.softmax(s, key_lengths=kl), ref.softmax(s, key_lengths=kl), rtol=1e-13, atol=1e-16)


def test_softmax_large_scores_exact():
    s = np.array([[1e4, 1e4 - 1.0, -1e4, 1e4 - 2.0], [-1e4, -1e4 - 1.0, -1e4 - 3.0, -1e4], [1e4, -1e4, -1e4, -1e4]])
    w = attnc.softmax(s)
    assert np.all(np.isfinite(w))
    e = np.exp(np.array([0.0, -1.0, -2e4, -2.0]))
    np.testing.assert_allclose(w[0], e / e.sum(), rtol=1e-14, atol=0)
    e = np.exp(np.array([0.0, -1.0, -3.0, 0.0]))
    np.testing.assert_allclose(w[1], e / e.sum(), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(w[2], [1.0, 0.0, 0.0, 0.0])
    # float32 too
    w32 = attnc.softmax(s.astype(np.float32))
    assert np.all(np.isfinite(w32))
    np.testing.assert_allclose(w32, w, rtol=0, atol=1e-6)
    # and with a mask hiding the largest score
    m = np.array([False, True, True, True])
    wm = attnc.softmax(s, mask=m)
    np.testing.assert_allclose(wm, ref.softmax(s, mask=m), rtol=1e-14, atol=0)


def test_softmax_large_scores_gradient_finite(rng):
    s = np.array([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4 + 0.5, -1e4 - 0.25]])
    out, pb = attnc.vjp(attnc.softmax, s)
    cot = rng.standard_normal(s.shape)
    g = pb(cot)["scores"]
    expected = out * (cot - np.sum(out * cot, -1, keepdims=True))
    np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-300)


def test_negative_infinite_scores_get_zero_weight(rng):
    s = rng.standard_normal((3, 5))
    s[0, 1] = -np.inf
    s[2, [0, 4]] = -np.inf
    w = attnc.softmax(s)
    assert np.all(np.isfinite(w))
    assert w[0, 1] == 0 and w[2, 0] == 0 and w[2, 4] == 0
    np.testing.assert_allclose(w, ref.softmax(s), rtol=1e-13, atol=0)


def test_softmax_nan_propagates(rng):
    s = rng.standard_normal((2, 3, 4))
    s[0, 1, 2] = np.nan
    w = attnc.softmax(s)
    assert np.all(np.isnan(w[0, 1]))
    keep = np.ones((2, 3), bool)
    keep[0, 1] = False
    np.testing.assert_allclose(w[keep], ref.softmax(s)[keep], rtol=1e-13)


# --------------------------------------------------------------------------- gradients

GRAD_SHAPES = [((), 4, 5), ((2,), 3, 4), ((2, 2), 3, 3), ((2,), 1, 1)]


@pytest.mark.parametrize("lead,tq,tk", GRAD_SHAPES, ids=str)
def test_softmax_grad_fd(lead, tq, tk, rng, check_vjp):
    s = rng.standard_normal(lead + (tq, tk))
    for name, kw in _mask_cases(lead, tq, tk, rng):
        outs, grads = check_vjp(attnc.softmax, ref.softmax, dict(scores=s, **kw), rng, positional=("scores",))
        allowed = ref.allowed_mask(s.shape, kw.get("mask"), kw.get("key_lengths"), kw.get("causal", False))
        # masked entries and fully masked rows get exactly zero gradient
        np.testing.assert_array_equal(grads["scores"][~allowed], 0.0, err_msg=name)


def test_fully_masked_row_gradient_zero(rng):
    s = rng.standard_normal((2, 3, 4))
    out, pb = attnc.vjp(attnc.softmax, s, key_lengths=np.array([0, 2]), causal=True)
    g = pb(rng.standard_normal(s.shape))["scores"]
    np.testing.assert_array_equal(g[0], 0.0)
    np.testing.assert_array_equal(g[1, :, 2:], 0.0)
    np.testing.assert_array_equal(g[1, 0, 0], 0.0)  # single allowed key: constant weight 1


def test_softmax_grad_empty(rng):
    for shape in [(2, 0, 3), (2, 3, 0)]:
        s = rng.standard_normal(shape)
        out, pb = attnc.vjp(attnc.softmax, s, causal=True)
        assert out.shape == shape
        g = pb(np.zeros(shape))["scores"]
        assert g.shape == shape


# --------------------------------------------------------------------------- torch


def test_masked_softmax_vs_torch(torch, rng):
    lead, tq, tk = (2, 3), 4, 6
    s = rng.standard_normal(lead + (tq, tk)) * 2
    mask = rng.random((1, 3, tq, tk)) < 0.6
    kl = rng.integers(0, tk + 1, size=lead)
    out, pb = attnc.vjp(attnc.softmax, s, mask=mask, key_lengths=kl, causal=True)
    cot = rng.standard_normal(out.shape)
    g = pb(cot)["scores"]

    allowed = torch.tensor(mask) & (torch.arange(tk) < torch.tensor(kl)[..., None, None])
    allowed = allowed & torch.ones(tq, tk, dtype=torch.bool).tril()
    ts = torch.tensor(s, requires_grad=True)
    tw = torch.softmax(ts.masked_fill(~allowed, -torch.inf), dim=-1)
    tw = torch.where(allowed.any(-1, keepdim=True), tw, torch.zeros_like(tw))
    (tw * torch.tensor(cot)).sum().backward()
    assert allowed.any(-1).logical_not().any()  # the case has fully masked rows
    np.testing.assert_allclose(out, tw.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(g, ts.grad.numpy(), rtol=1e-10, atol=1e-13)


# --------------------------------------------------------------------------- float32


def test_softmax_float32_matches_float64(rng):
    s = rng.standard_normal((3, 5, 7)) * 2
    mask = rng.random((5, 7)) < 0.7
    kw = dict(mask=mask, key_lengths=np.array([7, 4, 0]), causal=True)
    o64, pb64 = attnc.vjp(attnc.softmax, s, **kw)
    o32, pb32 = attnc.vjp(attnc.softmax, s.astype(np.float32), **kw)
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, o64, rtol=0, atol=1e-5 * np.max(np.abs(o64)))
    cot = rng.standard_normal(s.shape)
    g64 = pb64(cot)["scores"]
    g32 = pb32(cot.astype(np.float32))["scores"]
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=0, atol=1e-5 * np.max(np.abs(g64)))
