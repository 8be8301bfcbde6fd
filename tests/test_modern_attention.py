"""The attention of recent models as attnc modules: grouped-query and
multi-query attention (num_kv_heads), each against a NumPy float64
reference written here and by finite differences through attnc.vjp."""

import numpy as np
import pytest

import attnc
import attnc.models
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


# --------------------------------------------------------------------------- differential attention


def diff_attn_ref(x, p, H, Hkv, layer_index, mask=None, eps=1e-5):
    """Differential attention in float64 from the paper's equations, head by head."""
    B, L, E = x.shape
    d = E // (2 * H)
    lam_init = 0.8 - 0.6 * np.exp(-0.3 * (layer_index - 1))
    lam = np.exp(p["lambda_q1"] @ p["lambda_k1"]) - np.exp(p["lambda_q2"] @ p["lambda_k2"]) + lam_init
    q, k, v = x @ p["q_proj.weight"].T, x @ p["k_proj.weight"].T, x @ p["v_proj.weight"].T
    out = np.zeros((B, L, E))
    maps = np.zeros((B, H, L, L))
    group = H // Hkv
    half = lambda a, i: a[..., i * d : (i + 1) * d]  # noqa: E731
    for h in range(H):
        # as the reference code's repeat_kv: query half-head i reads key half-head i // group,
        # and head h the value head h // group
        q1, q2 = half(q, 2 * h), half(q, 2 * h + 1)
        k1, k2 = half(k, (2 * h) // group), half(k, (2 * h + 1) // group)
        vh = v[..., h // group * 2 * d : (h // group + 1) * 2 * d]
        s1, s2 = q1 @ k1.swapaxes(-1, -2) / np.sqrt(d), q2 @ k2.swapaxes(-1, -2) / np.sqrt(d)
        if mask is not None:
            s1, s2 = np.where(mask, s1, -np.inf), np.where(mask, s2, -np.inf)
        a = softmax(s1) - lam * softmax(s2)
        maps[:, h] = a
        o = a @ vh
        o = o / np.sqrt(np.mean(o * o, -1, keepdims=True) + eps) * p["subln.weight"]
        out[..., h * 2 * d : (h + 1) * 2 * d] = o * (1 - lam_init)
    return out @ p["out_proj.weight"].T, maps


@pytest.mark.parametrize("Hkv", [None, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_differential_matches_reference(rng, Hkv, dtype):
    B, L, E, H = 2, 6, 16, 2
    m = nn.DifferentialAttention(E, H, layer_index=3, num_kv_heads=Hkv, dtype=dtype, seed=0)
    m._initialise(lambda name, p: rng.standard_normal(p.shape) * (0.3 if p.ndim == 2 else 0.5))
    x = rng.standard_normal((B, L, E)).astype(dtype)
    causal = np.tril(np.ones((L, L), bool))
    out, amap = m(x, is_causal=True, need_weights=True)
    p = {k: v.astype(np.float64) for k, v in m.state_dict().items()}
    ref, ref_map = diff_attn_ref(x.astype(np.float64), p, H, Hkv or H, 3, causal)
    tol = 1e-11 if dtype == np.float64 else 3e-5
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(amap, ref_map, rtol=tol, atol=tol)
    assert m.lambda_init == pytest.approx(0.8 - 0.6 * np.exp(-0.6))


def test_differential_lambda_init_schedule():
    """The paper's schedule, and the reference code's lambda_init_fn(depth) with depth = layer_index - 1."""
    from attnc.nn.differential import lambda_init

    for layer in (1, 2, 5, 24):
        assert lambda_init(layer) == pytest.approx(0.8 - 0.6 * np.exp(-0.3 * (layer - 1)), abs=1e-15)
    assert lambda_init(1) == pytest.approx(0.2)


@pytest.mark.parametrize("need_weights", [False, True])
def test_differential_gradients_finite_differences(rng, fd_check, need_weights):
    B, L, E, H = 2, 4, 8, 2
    m = nn.DifferentialAttention(E, H, layer_index=2, num_kv_heads=1, bias=True, dtype=np.float64, seed=1)
    m._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.5)
    x = rng.standard_normal((B, L, E))
    out, pullback = attnc.vjp(m, x, is_causal=True, need_weights=need_weights)
    cots = [rng.standard_normal(o.shape) for o in (out if need_weights else (out,))]
    grads = pullback(*cots)
    params = dict(m.state_dict())
    assert set(grads) == set(params) | {"x"}

    def f(x, **p):
        m2 = nn.DifferentialAttention(E, H, layer_index=2, num_kv_heads=1, bias=True, dtype=np.float64)
        m2.load_state_dict(p)
        return m2(x, is_causal=True, need_weights=need_weights)

    fd_check(f, {"x": x, **params}, cots, grads, rtol=1e-5, atol=1e-8)


def test_differential_rotary_and_state(rng):
    E, H = 16, 2
    rope = nn.RotaryEmbedding(4, interleaved=True, dtype=np.float64)
    m = nn.DifferentialAttention(E, H, rotary=rope, dtype=np.float64, seed=3)
    x = rng.standard_normal((1, 5, E))
    out = m(x, is_causal=True)
    m2 = nn.DifferentialAttention(E, H, rotary=rope, dtype=np.float64, seed=4)
    m2.load_state_dict(m.state_dict())
    assert np.array_equal(m2(x, is_causal=True), out)
    # RoPE makes a causal layer's output depend on positions: shifting a token's place changes it
    no_rope = nn.DifferentialAttention(E, H, dtype=np.float64)
    no_rope.load_state_dict(m.state_dict())
    assert not np.allclose(no_rope(x, is_causal=True), out)
    assert {k: v.shape for k, v in m.state_dict().items()}["subln.weight"] == (8,)
    with pytest.raises(ValueError, match="divisible"):
        nn.DifferentialAttention(12, 4)
    with pytest.raises(ValueError, match="rotary"):
        nn.DifferentialAttention(16, 2, rotary=nn.RotaryEmbedding(8))
    with pytest.raises(ValueError, match="x has shape"):
        m(np.zeros((1, 5, 8)))


# --------------------------------------------------------------------------- multi-head latent attention


def rope_pairs(x, pos, base=10000.0):
    """Interleaved RoPE in float64 (pairs (2i, 2i + 1))."""
    d = x.shape[-1]
    theta = np.asarray(pos, np.float64)[:, None] * base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(theta), np.sin(theta)
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = a * c - b * s, b * c + a * s
    return y


def rms(a, w, eps):
    return a / np.sqrt(np.mean(a * a, -1, keepdims=True) + eps) * w


def mla_ref(x, p, H, dn, dr, dc, q_lora, eps=1e-6):
    """MLA from DeepSeek-V2's equations (9)-(19), with the released code's latent RMSNorms, in float64."""
    B, L, E = x.shape
    pos = np.arange(L)
    if q_lora:
        q = rms(x @ p["q_a_proj.weight"].T, p["q_a_layernorm.weight"], eps) @ p["q_b_proj.weight"].T
    else:
        q = x @ p["q_proj.weight"].T
    q = q.reshape(B, L, H, dn + dr)
    kva = x @ p["kv_a_proj_with_mqa.weight"].T
    c = rms(kva[..., :dc], p["kv_a_layernorm.weight"], eps)  # c_KV: all the cache holds, with k_R
    k_r = rope_pairs(kva[..., dc:], pos)  # one RoPE key shared by the heads
    kv = (c @ p["kv_b_proj.weight"].T).reshape(B, L, H, -1)
    out = np.zeros((B, L, H, kv.shape[-1] - dn))
    causal = np.tril(np.ones((L, L), bool))
    for h in range(H):
        qh = np.concatenate([q[:, :, h, :dn], rope_pairs(q[:, :, h, dn:], pos)], -1)
        kh = np.concatenate([kv[:, :, h, :dn], k_r], -1)
        s = np.where(causal, qh @ kh.swapaxes(-1, -2) / np.sqrt(dn + dr), -np.inf)
        out[:, :, h] = softmax(s) @ kv[:, :, h, dn:]
    return out.reshape(B, L, -1) @ p["o_proj.weight"].T


def _mla(q_lora_rank, dtype=np.float64, seed=0):
    return nn.MultiheadLatentAttention(
        32,
        4,
        kv_lora_rank=8,
        q_lora_rank=q_lora_rank,
        qk_nope_head_dim=6,
        qk_rope_head_dim=4,
        v_head_dim=5,
        dtype=dtype,
        seed=seed,
    )


@pytest.mark.parametrize("q_lora_rank", [None, 12])
def test_mla_matches_reference_naive_and_absorbed(rng, q_lora_rank):
    m = _mla(q_lora_rank)
    m._initialise(lambda name, p: rng.standard_normal(p.shape) * (0.4 if p.ndim == 2 else 1.0))
    x = rng.standard_normal((2, 7, 32))
    ref = mla_ref(x, m.state_dict(), 4, 6, 4, 8, q_lora_rank is not None)
    naive, absorbed = m(x), m(x, absorbed=True)
    np.testing.assert_allclose(naive, ref, rtol=1e-11, atol=1e-11)
    # the absorbed form (W_UK into the queries, W_UV into the output) is the same attention
    np.testing.assert_allclose(absorbed, naive, rtol=0, atol=1e-10 * np.abs(naive).max())


@pytest.mark.parametrize("absorbed", [False, True])
def test_mla_cache_generation_equals_full_forward(rng, absorbed):
    m = _mla(12, seed=1)
    x = rng.standard_normal((2, 9, 32))
    full = m(x)
    cache = nn.LatentCache()
    parts = [m(x[:, :4], cache=cache, absorbed=absorbed)] + [
        m(x[:, t : t + 1], cache=cache, absorbed=absorbed) for t in range(4, 9)
    ]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), full, rtol=0, atol=1e-11)
    assert cache.latent.shape == (2, 9, 8) and cache.rope_key.shape == (2, 9, 4)


def test_mla_cache_grows_past_its_buffer_and_keeps_every_token(rng):
    """The cache's buffer doubles (16, 32, 64 tokens): decoding 40 tokens one at
    a time still equals the full forward, and the cache's views are read-only."""
    m = _mla(12, seed=2)
    x = rng.standard_normal((1, 43, 32))
    cache = nn.LatentCache()
    parts = [m(x[:, :3], cache=cache, absorbed=True)] + [
        m(x[:, t : t + 1], cache=cache, absorbed=True) for t in range(3, 43)
    ]
    np.testing.assert_allclose(np.concatenate(parts, axis=1), m(x), rtol=0, atol=1e-11)
    assert cache.length == 43 and cache.nbytes == 43 * (8 + 4) * 8
    with pytest.raises(ValueError, match="read-only"):
        cache.latent[0, 0, 0] = 1.0


def test_mla_absorbed_weights_follow_the_weights(rng):
    """absorbed_weights() folds once, and again when kv_b_proj or o_proj change
    (in place or replaced): the absorbed form stays the naive one."""
    m = _mla(12, seed=3)
    x = rng.standard_normal((2, 5, 32))
    w_uk, w_out = m.absorbed_weights()
    assert m.absorbed_weights()[1] is w_out and not w_out.flags.writeable
    m.kv_b_proj.weight *= 1.5  # in place
    np.testing.assert_allclose(m(x, absorbed=True), m(x), rtol=0, atol=1e-10)
    m.o_proj.weight = rng.standard_normal(m.o_proj.weight.shape)  # replaced
    np.testing.assert_allclose(m(x, absorbed=True), m(x), rtol=0, atol=1e-10)


def test_mla_cache_is_smaller_than_mha():
    """At the same model size (E = 512, H = 8 heads of 64), standard MHA caches 2 E values per token
    and layer; MLA caches d_c + d_h^R (DeepSeek-V2's 4 d_h + d_h / 2 = 288)."""
    E, H, T = 512, 8, 16
    m = nn.MultiheadLatentAttention(E, H, kv_lora_rank=4 * E // H, qk_rope_head_dim=E // H // 2, seed=0)
    cache = nn.LatentCache()
    m(np.zeros((1, T, E), np.float32), cache=cache)
    mha_bytes = 2 * T * E * 4  # keys and values of every head, float32
    assert cache.nbytes == T * (256 + 32) * 4 == 18432
    assert mha_bytes == 65536 and cache.nbytes / mha_bytes == pytest.approx(0.28125)


def test_mla_gradients_finite_differences(rng, fd_check):
    for q_lora_rank in (None, 6):
        m = nn.MultiheadLatentAttention(
            8,
            2,
            kv_lora_rank=3,
            q_lora_rank=q_lora_rank,
            qk_nope_head_dim=2,
            qk_rope_head_dim=2,
            v_head_dim=3,
            dtype=np.float64,
            seed=2,
        )
        m._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.5)
        x = rng.standard_normal((2, 3, 8))
        out, pullback = attnc.vjp(m, x)
        dout = rng.standard_normal(out.shape)
        grads = pullback(dout)
        params = dict(m.state_dict())
        assert set(grads) == set(params) | {"x"}

        def f(x, **p):
            m.load_state_dict(p)
            return m(x)

        fd_check(f, {"x": x, **params}, [dout], grads, rtol=1e-5, atol=1e-8)
        m.load_state_dict(params)


def test_mla_transformers_deepseek_v3(rng, transformers, torch):
    """Hugging Face's DeepseekV3Attention (eager, float64 weights) on a tiny random config, same weights."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as md

    config = md.DeepseekV3Config(
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=12,
        kv_lora_rank=8,
        qk_nope_head_dim=6,
        qk_rope_head_dim=4,
        v_head_dim=5,
        attention_bias=False,
        rope_interleave=True,
    )
    config._attn_implementation = "eager"
    hf = md.DeepseekV3Attention(config, 0).double().eval()
    m = _mla(12)
    sd = {k: torch.tensor(v) for k, v in m.state_dict().items()}
    hf.load_state_dict(sd)
    B, L = 2, 6
    x = rng.standard_normal((B, L, 32))
    theta = np.arange(L)[:, None] * 10000.0 ** (-np.arange(0, 4, 2) / 4)
    emb = np.concatenate([theta, theta], -1)[None].repeat(B, 0)
    mask = torch.tensor(np.where(np.tril(np.ones((L, L), bool)), 0.0, -np.inf))[None, None].expand(B, 1, L, L)
    with torch.no_grad():
        out = hf(torch.tensor(x), (torch.tensor(np.cos(emb)), torch.tensor(np.sin(emb))), mask)[0]
    # DeepseekV3RMSNorm normalises in float32 whatever the input's dtype: agreement to float32's rounding
    np.testing.assert_allclose(m(x), out.numpy(), rtol=0, atol=1e-6)


def test_mla_state_and_errors(rng):
    m, m2 = _mla(None, seed=3), _mla(None, seed=4)
    m2.load_state_dict(m.state_dict())
    x = rng.standard_normal((1, 4, 32))
    assert np.array_equal(m(x), m2(x))
    assert "q_proj.weight" in m.state_dict() and "q_a_proj.weight" not in m.state_dict()
    with pytest.raises(ValueError, match="x has shape"):
        m(np.zeros((1, 4, 16)))
    with pytest.raises(TypeError, match="cache"):
        m(x, cache={})
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        nn.MultiheadLatentAttention(32, 4, kv_lora_rank=8, qk_rope_head_dim=3)
    cache = nn.LatentCache()
    m(x, cache=cache)
    with pytest.raises(ValueError, match="cache holds"):
        m(np.zeros((2, 1, 32)), cache=cache)


def test_save_and_load_round_trips(rng, tmp_path):
    """attnc.save / attnc.load keep the new options (num_kv_heads, rotary, positional) and parameters."""
    x = rng.standard_normal((1, 3, 8)).astype(np.float32)
    rope = nn.RotaryEmbedding(4, rotary_dim=2, interleaved=True)
    cases = [
        (nn.TransformerEncoderLayer(8, 2, dim_feedforward=4, num_kv_heads=1, rotary=rope, seed=0).eval(), x),
        (nn.MultiheadLatentAttention(8, 2, kv_lora_rank=3, q_lora_rank=4, qk_rope_head_dim=2, seed=0), x),
        (nn.DifferentialAttention(8, 2, layer_index=3, rotary=nn.RotaryEmbedding(2), seed=0), x),
        (
            attnc.models.GPT(5, 8, n_layer=1, n_head=2, n_embd=8, positional="rope", num_kv_heads=1, seed=0).eval(),
            np.array([[1, 2, 3]]),
        ),
    ]
    for i, (m, arg) in enumerate(cases):
        path = tmp_path / f"m{i}.npz"
        attnc.save(path, m)
        loaded = attnc.load(path)
        assert type(loaded) is type(m) and np.array_equal(loaded(arg), m(arg))
