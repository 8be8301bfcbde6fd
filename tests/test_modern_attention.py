"""The attention of recent models as attnc modules: grouped-query and
multi-query attention (num_kv_heads), each against a NumPy float64
reference written here and by finite differences through attnc.vjp."""

import numpy as np
import pytest

import attnc
from attnc import nn


def softmax(s, axis=-1):
    s = s - s.max(axis=axis, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=axis, keepdims=True)


def gqa_ref(x_q, x_k, x_v, H, Hkv, wq, wk, wv, bq, bk, bv, wo, bo, causal=False):
    """Grouped-query attention in float64: query head h reads key/value head h // (H / Hkv)."""
    B, L, E = x_q.shape
    S, hd = x_k.shape[1], E // H
    q = (x_q @ wq.T + bq).reshape(B, L, H, hd).transpose(0, 2, 1, 3)
    k = (x_k @ wk.T + bk).reshape(B, S, Hkv, hd).transpose(0, 2, 1, 3)
    v = (x_v @ wv.T + bv).reshape(B, S, Hkv, hd).transpose(0, 2, 1, 3)
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(hd)
    if causal:
        s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
    p = softmax(s)
    out = (p @ v).transpose(0, 2, 1, 3).reshape(B, L, E)
    return out @ wo.T + bo, p


def _mha_params(m):
    sd = m.state_dict()
    E = m.embed_dim
    Ekv = m.num_kv_heads * E // m.num_heads
    b = sd["in_proj_bias"]
    if "in_proj_weight" in sd:
        w = sd["in_proj_weight"]
        wq, wk, wv = w[:E], w[E : E + Ekv], w[E + Ekv :]
    else:
        wq, wk, wv = sd["q_proj_weight"], sd["k_proj_weight"], sd["v_proj_weight"]
    return wq, wk, wv, b[:E], b[E : E + Ekv], b[E + Ekv :], sd["out_proj.weight"], sd["out_proj.bias"]


@pytest.mark.parametrize("Hkv", [1, 2, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gqa_module_matches_reference(rng, Hkv, dtype):
    E, H, B, L, S = 16, 4, 2, 5, 7
    m = nn.MultiheadAttention(E, H, num_kv_heads=Hkv, dtype=dtype, seed=1)
    m._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.3)
    xq, xkv = rng.standard_normal((B, L, E)).astype(dtype), rng.standard_normal((B, S, E)).astype(dtype)
    out, w = m(xq, xkv, xkv, average_attn_weights=False)
    ref, p = gqa_ref(xq, xkv, xkv, H, Hkv, *(a.astype(np.float64) for a in _mha_params(m)))
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(w, p, rtol=tol, atol=tol)
    shapes = {k: v.shape for k, v in m.state_dict().items()}
    if Hkv != H:
        assert shapes["k_proj_weight"] == shapes["v_proj_weight"] == (Hkv * E // H, E)
        assert shapes["q_proj_weight"] == (E, E) and shapes["in_proj_bias"] == (E + 2 * Hkv * E // H,)
    else:
        assert shapes["in_proj_weight"] == (3 * E, E)


def test_gqa_gradients_finite_differences(rng, fd_check):
    E, H, Hkv, B, L = 8, 4, 2, 2, 3
    m = nn.MultiheadAttention(E, H, num_kv_heads=Hkv, add_bias_kv=True, dtype=np.float64, seed=2)
    x = rng.standard_normal((B, L, E))
    mask = np.triu(np.ones((L, L), bool), 1)
    (out, _), pullback = attnc.vjp(m, x, x, x, attn_mask=mask, need_weights=False)
    dout = rng.standard_normal(out.shape)
    grads = pullback(dout, None)
    params = dict(m.state_dict())
    assert set(params) <= set(grads)

    def f(x, **p):
        return attnc.multi_head_attention(
            x,
            x,
            x,
            H,
            None,
            p["in_proj_bias"],
            p["out_proj.weight"],
            p["out_proj.bias"],
            q_proj_weight=p["q_proj_weight"],
            k_proj_weight=p["k_proj_weight"],
            v_proj_weight=p["v_proj_weight"],
            bias_k=p["bias_k"],
            bias_v=p["bias_v"],
            attn_mask=mask,
            need_weights=False,
            num_kv_heads=Hkv,
        )[0]

    named = {"x": x, **params}
    got = {**{k: grads[k] for k in params}, "x": grads["query"] + grads["key"] + grads["value"]}
    fd_check(lambda x, **p: f(x, **p), named, [dout], got)


def test_num_kv_heads_equal_is_the_old_path(rng):
    """num_kv_heads = num_heads is plain multi-head attention: the same module, bit for bit."""
    E, H = 12, 3
    old = nn.MultiheadAttention(E, H, seed=5)
    new = nn.MultiheadAttention(E, H, num_kv_heads=H, seed=5)
    assert old.state_dict().keys() == new.state_dict().keys()
    x = rng.standard_normal((2, 4, E)).astype(np.float32)
    (o1, w1), pb1 = attnc.vjp(old, x, x, x)
    (o2, w2), pb2 = attnc.vjp(new, x, x, x)
    assert np.array_equal(o1, o2) and np.array_equal(w1, w2)
    g1, g2 = pb1(o1, None), pb2(o2, None)
    assert all(np.array_equal(g1[k], g2[k]) for k in g1)


def test_state_dict_round_trip(rng):
    m = nn.MultiheadAttention(8, 4, num_kv_heads=1, dtype=np.float64, seed=0)
    m2 = nn.MultiheadAttention(8, 4, num_kv_heads=1, dtype=np.float64, seed=9)
    m2.load_state_dict(m.state_dict())
    x = rng.standard_normal((1, 3, 8))
    assert np.array_equal(m(x, x, x)[0], m2(x, x, x)[0])
    with pytest.raises((ValueError, KeyError)):
        nn.MultiheadAttention(8, 4, num_kv_heads=2).load_state_dict(m.state_dict())


@pytest.mark.parametrize(
    "kwargs, error",
    [(dict(num_kv_heads=3), ValueError), (dict(num_kv_heads=0), ValueError), (dict(num_kv_heads=1.0), TypeError)],
)
def test_num_kv_heads_checked(kwargs, error):
    with pytest.raises(error, match="num_kv_heads"):
        nn.MultiheadAttention(8, 4, **kwargs)
