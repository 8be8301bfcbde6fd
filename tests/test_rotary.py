"""attnc.nn.rotary_embedding / RotaryEmbedding (csrc/ops/nn/rotary.c): RoPE
against a NumPy float64 reference written here, against transformers' Llama
(half-split) and GPT-J (interleaved) code, by finite differences, and its
relative-position property."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnc
import attnc.models
from attnc import nn


def rope_ref(x, positions, base=10000.0, rotary_dim=None, interleaved=False):
    """RoPE in float64, from the definition: pair i of the first R features
    turns by positions * base ** (-2 i / R)."""
    x = np.asarray(x, np.float64)
    D = x.shape[-1]
    R = D if rotary_dim is None else rotary_dim
    pos = np.asarray(positions, np.float64)[..., None]  # (..., L, 1)
    theta = pos * base ** (-np.arange(0, R, 2) / R) if R else np.zeros(pos.shape[:-1] + (0,))
    c, s = np.cos(theta), np.sin(theta)
    if interleaved:
        a, b = x[..., 0:R:2], x[..., 1:R:2]
    else:
        a, b = x[..., : R // 2], x[..., R // 2 : R]
    ya, yb = a * c - b * s, b * c + a * s
    y = x.copy()
    if interleaved:
        y[..., 0:R:2], y[..., 1:R:2] = ya, yb
    else:
        y[..., : R // 2], y[..., R // 2 : R] = ya, yb
    return y


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_dim", [None, 4, 0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_reference(rng, interleaved, rotary_dim, dtype):
    x = rng.standard_normal((2, 3, 7, 8)).astype(dtype)
    y = nn.rotary_embedding(x, base=500.0, rotary_dim=rotary_dim, interleaved=interleaved)
    ref = rope_ref(x, np.arange(7), 500.0, rotary_dim, interleaved)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-13 if dtype == np.float64 else 2e-6)


def test_offset_and_position_arrays(rng):
    x = rng.standard_normal((2, 3, 5, 6))
    np.testing.assert_allclose(nn.rotary_embedding(x, 11), rope_ref(x, np.arange(11, 16)), atol=1e-13)
    # one row of positions per sequence (left padding), broadcast over heads
    pos = np.array([[0, 0, 1, 2, 3], [4, 5, 6, 7, 8]])
    got = nn.rotary_embedding(x, pos[:, None, :])
    np.testing.assert_allclose(got, rope_ref(x, pos[:, None, :]), atol=1e-13)
    # fractional positions (position interpolation) and the (L,) form
    fpos = np.arange(5) * 0.25
    np.testing.assert_allclose(nn.rotary_embedding(x, fpos), rope_ref(x, fpos), atol=1e-13)


def test_float32_and_float64_agree(rng):
    """The angles are computed in float64 for both dtypes: at large positions
    a float32 angle computation would be off by ~1e-4."""
    x = rng.standard_normal((1, 64, 16))
    pos = np.arange(4000, 4064)
    y64 = nn.rotary_embedding(x, pos)
    y32 = nn.rotary_embedding(x.astype(np.float32), pos)
    assert np.abs(y32 - y64).max() < 1e-6 * max(1.0, np.abs(x).max()) * 4


def test_strided_input_unchanged(rng, assert_unchanged):
    x = rng.standard_normal((4, 9, 12))
    view = x[::2, ::-2, ::2]  # strides in every dim, the feature dim's not 1
    y = assert_unchanged(nn.rotary_embedding, view, 3, interleaved=True)
    np.testing.assert_allclose(y, rope_ref(view, np.arange(3, 8), interleaved=True), atol=1e-13)
    assert y.flags.c_contiguous


@pytest.mark.parametrize("interleaved", [False, True])
def test_gradient_finite_differences(rng, fd_check, interleaved):
    x = rng.standard_normal((2, 4, 6))
    pos = np.array([[0.0, 1, 2, 5], [3, 4, 5, 6]])
    y, pullback = attnc.vjp(nn.rotary_embedding, x, pos, rotary_dim=4, interleaved=interleaved)
    dy = rng.standard_normal(y.shape)
    grads = pullback(dy)
    assert set(grads) == {"x"}
    fd_check(
        lambda x: nn.rotary_embedding(x, pos, rotary_dim=4, interleaved=interleaved),
        {"x": x},
        [dy],
        grads,
    )


def test_module_gradient_and_state(rng):
    rope = nn.RotaryEmbedding(8, base=100.0, rotary_dim=6, interleaved=True, dtype=np.float64)
    x = rng.standard_normal((2, 5, 8))
    y, pullback = attnc.vjp(rope, x, 2)
    np.testing.assert_allclose(y, rope_ref(x, np.arange(2, 7), 100.0, 6, True), atol=1e-13)
    dy = rng.standard_normal(y.shape)
    # a rotation's transpose is its inverse: the gradient is dy turned back
    np.testing.assert_allclose(pullback(dy)["x"], rope_ref(dy, -np.arange(2.0, 7), 100.0, 6, True), atol=1e-13)
    assert rope.state_dict() == {}
    assert "rotary_dim=6" in repr(rope) and "interleaved=True" in repr(rope)
    with pytest.raises(ValueError, match="dim = 8"):
        rope(np.zeros((2, 5, 6)))


@pytest.mark.parametrize("interleaved", [False, True])
def test_relative_positions(rng, interleaved):
    """q_m . k_n depends on m - n only."""
    q, k = rng.standard_normal(16), rng.standard_normal(16)
    pos = np.arange(40.0)
    rq = nn.rotary_embedding(np.broadcast_to(q, (40, 16)), pos, interleaved=interleaved)
    rk = nn.rotary_embedding(np.broadcast_to(k, (40, 16)), pos, interleaved=interleaved)
    scores = rq @ rk.T  # scores[m, n]
    for shift in (-7, 0, 3, 12):
        diag = np.diagonal(scores, offset=-shift)  # m - n = shift
        np.testing.assert_allclose(diag, diag[0], rtol=0, atol=1e-12)
    assert np.ptp(np.diagonal(scores, -3)) < 1e-12 and abs(scores[3, 0] - scores[0, 0]) > 1e-3


def test_transformers_llama(rng, transformers, torch):
    """Half-split RoPE is Hugging Face Llama's apply_rotary_pos_emb, and
    LlamaRotaryEmbedding's cos/sin (computed in float32 there) agree to float32's precision."""
    from transformers.models.llama import modeling_llama as ml

    B, H, L, E = 2, 3, 6, 8
    q, k = rng.standard_normal((B, H, L, E)), rng.standard_normal((B, H, L, E))
    pos = np.arange(5, 5 + L)
    theta = pos[:, None] * 10000.0 ** (-np.arange(0, E, 2) / E)
    emb = np.concatenate([theta, theta], -1)
    cos, sin = torch.tensor(np.cos(emb))[None], torch.tensor(np.sin(emb))[None]
    tq, tk = ml.apply_rotary_pos_emb(torch.tensor(q), torch.tensor(k), cos, sin)
    np.testing.assert_allclose(nn.rotary_embedding(q, 5), tq.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(nn.rotary_embedding(k, 5), tk.numpy(), rtol=0, atol=1e-6)
    config = ml.LlamaConfig(hidden_size=H * E, num_attention_heads=H, max_position_embeddings=64)
    rot = ml.LlamaRotaryEmbedding(config)
    cos32, sin32 = rot(torch.tensor(q, dtype=torch.float32), torch.tensor(pos)[None])
    tq32, _ = ml.apply_rotary_pos_emb(
        torch.tensor(q, dtype=torch.float32), torch.tensor(k, dtype=torch.float32), cos32, sin32
    )
    got = nn.rotary_embedding(q.astype(np.float32), 5)
    np.testing.assert_allclose(got, tq32.numpy(), rtol=0, atol=1e-5)


def test_transformers_gptj_interleaved(rng, transformers, torch):
    """interleaved=True is GPT-J's rotate_every_two form, partial rotary dims included."""
    from transformers.models.gptj import modeling_gptj as mg

    B, L, H, E, R = 2, 5, 3, 10, 6
    x = rng.standard_normal((B, L, H, E))
    sincos = mg.create_sinusoidal_positions(64, R).to(torch.float64)  # float32 table there: recomputed below
    inv = 1.0 / 10000 ** (np.arange(0, R, 2) / R)
    ang = np.arange(64)[:, None] * inv
    sincos = torch.tensor(np.concatenate([np.sin(ang), np.cos(ang)], -1))
    pos = torch.arange(3, 3 + L)[None].expand(B, L)
    s = sincos[pos]
    sin, cos = torch.split(s, R // 2, dim=-1)
    rot = mg.apply_rotary_pos_emb(torch.tensor(x[..., :R]), sin, cos)
    expected = np.concatenate([rot.numpy(), x[..., R:]], -1)  # (B, L, H, E)
    got = nn.rotary_embedding(x.transpose(0, 2, 1, 3), 3, rotary_dim=R, interleaved=True)
    np.testing.assert_allclose(got.transpose(0, 2, 1, 3), expected, rtol=0, atol=1e-6)


def test_empty_inputs():
    for shape in [(0, 4), (2, 0, 4), (3, 5, 0)]:
        y = nn.rotary_embedding(np.zeros(shape, np.float32), 2, rotary_dim=0 if shape[-1] == 0 else None)
        assert y.shape == shape and y.dtype == np.float32
    y, pullback = attnc.vjp(nn.rotary_embedding, np.zeros((2, 0, 4)))
    assert pullback(np.zeros((2, 0, 4)))["x"].shape == (2, 0, 4)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: nn.rotary_embedding(np.zeros(4)), ValueError, "x must be"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4), np.int64)), TypeError, "x"),
        (lambda: nn.rotary_embedding(np.zeros((3, 5))), ValueError, "rotary_dim"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), rotary_dim=6), ValueError, "rotary_dim"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), rotary_dim=1.5), TypeError, "rotary_dim"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), base=0.0), ValueError, "base"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), base=float("nan")), ValueError, "base"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), -1), ValueError, "positions"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), np.arange(4)), ValueError, "positions"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), np.array([0, 1, np.inf])), ValueError, "positions"),
        (lambda: nn.rotary_embedding(np.zeros((3, 4)), np.array(["a", "b", "c"])), TypeError, "positions"),
        (lambda: nn.rotary_embedding(np.zeros((2, 3, 4)), np.zeros((3, 3))), ValueError, "positions"),
        (lambda: nn.RotaryEmbedding(4, rotary_dim=3), ValueError, "rotary_dim"),
        (lambda: nn.RotaryEmbedding(-1), ValueError, "dim"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_c_checks_name_the_argument():
    """The C core checks again: the binding called directly."""
    x, y = np.zeros((2, 3, 4)), np.zeros((2, 3, 4))
    pos = np.zeros((1, 3))
    with pytest.raises(ValueError, match="rotary_dim"):
        attnc._core.rotary_forward(output=y, input=x, positions=pos, rotary_dim=3)
    with pytest.raises(ValueError, match="positions"):
        attnc._core.rotary_forward(output=y, input=x, positions=np.zeros((1, 4)), rotary_dim=4)
    with pytest.raises(ValueError, match="positions must be finite"):
        attnc._core.rotary_forward(output=y, input=x, positions=np.full((1, 3), np.nan), rotary_dim=4)
    with pytest.raises(TypeError, match="positions"):
        attnc._core.rotary_forward(output=y, input=x, positions=np.zeros((1, 3), np.float32), rotary_dim=4)
    with pytest.raises(ValueError, match="base"):
        attnc._core.rotary_backward(dinput=y, doutput=x, positions=pos, rotary_dim=4, base=-1.0)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(0, 6), st.integers(0, 5)),
    step=st.sampled_from([1, 2, -1]),
    f64=st.booleans(),
    interleaved=st.booleans(),
    half=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_hypothesis_shapes_strides_dtypes(shape, step, f64, interleaved, half, seed):
    B, L, P = shape
    D = 2 * P
    R = 2 * (P // 2) if half else D
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    big = rng.standard_normal((B, max(1, 2 * L), 2 * D + 1)).astype(dtype)
    x = big[:, ::step][:, :L, : 2 * D : 2] if step > 0 else big[:, ::-1][:, :L, :D]
    y = nn.rotary_embedding(x, 1, rotary_dim=R, interleaved=interleaved)
    ref = rope_ref(x, np.arange(1, L + 1), rotary_dim=R, interleaved=interleaved)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-12 if f64 else 2e-6 * max(1.0, np.abs(ref).max(initial=0)))


def test_threads_bitwise(rng, restore_threads):
    x = rng.standard_normal((4, 8, 200, 16)).astype(np.float32)
    outs = []
    for n in (1, 2):
        attnc.set_num_threads(n)
        y, pullback = attnc.vjp(nn.rotary_embedding, x, 3, rotary_dim=12)
        outs.append((y, pullback(x)["x"]))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])


# --------------------------------------------------------------------------- in the layers, the cache and GPT


def layer_norm(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * w + b


def encoder_layer_ref(x, p, H, Hkv, rotary_dim, interleaved, causal):
    """A post-norm encoder layer (ReLU, no dropout) with RoPE and grouped-query attention, float64."""
    B, L, E = x.shape
    hd = E // H
    Ekv = Hkv * hd
    b = p["self_attn.in_proj_bias"]
    if "self_attn.q_proj_weight" in p:  # grouped: the projections separate
        w = np.concatenate([p[f"self_attn.{n}_proj_weight"] for n in "qkv"])
    else:
        w = p["self_attn.in_proj_weight"]
    qkv = x @ w.T + b
    q = qkv[..., :E].reshape(B, L, H, hd).transpose(0, 2, 1, 3)
    k = qkv[..., E : E + Ekv].reshape(B, L, Hkv, hd).transpose(0, 2, 1, 3)
    v = qkv[..., E + Ekv :].reshape(B, L, Hkv, hd).transpose(0, 2, 1, 3)
    pos = np.arange(L)
    q, k = (rope_ref(a, pos, rotary_dim=rotary_dim, interleaved=interleaved) for a in (q, k))
    k, v = np.repeat(k, H // Hkv, 1), np.repeat(v, H // Hkv, 1)
    s = q @ k.swapaxes(-1, -2) / np.sqrt(hd)
    if causal:
        s = np.where(np.tril(np.ones((L, L), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    a = (s / s.sum(-1, keepdims=True)) @ v
    a = a.transpose(0, 2, 1, 3).reshape(B, L, E) @ p["self_attn.out_proj.weight"].T + p["self_attn.out_proj.bias"]
    h = layer_norm(x + a, p["norm1.weight"], p["norm1.bias"])
    f = np.maximum(h @ p["linear1.weight"].T + p["linear1.bias"], 0) @ p["linear2.weight"].T + p["linear2.bias"]
    return layer_norm(h + f, p["norm2.weight"], p["norm2.bias"])


@pytest.mark.parametrize("Hkv, rotary_dim, interleaved", [(4, 4, False), (2, 2, True), (1, None, False)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_encoder_layer_rope_gqa_matches_reference(rng, Hkv, rotary_dim, interleaved, dtype):
    E, H = 16, 4
    rope = nn.RotaryEmbedding(E // H, rotary_dim=rotary_dim, interleaved=interleaved)
    layer = nn.TransformerEncoderLayer(
        E, H, dim_feedforward=24, dropout=0.0, num_kv_heads=Hkv, rotary=rope, dtype=dtype, seed=0
    )
    layer._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.3)
    x = rng.standard_normal((2, 6, E)).astype(dtype)
    mask = np.triu(np.ones((6, 6), bool), 1)
    out, w = layer(x, src_mask=mask, is_causal=True, need_weights=True)
    p = {k: v.astype(np.float64) for k, v in layer.state_dict().items()}
    ref = encoder_layer_ref(x.astype(np.float64), p, H, Hkv, rotary_dim or E // H, interleaved, True)
    tol = 1e-11 if dtype == np.float64 else 5e-5
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    assert w.shape == (2, H, 6, 6)


@pytest.mark.parametrize("decoder", [False, True])
def test_layer_rope_gqa_gradients(rng, fd_check, decoder):
    E, H = 8, 4
    kw = dict(dim_feedforward=6, dropout=0.0, num_kv_heads=2, rotary=nn.RotaryEmbedding(2), dtype=np.float64, seed=1)
    cls = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    layer = cls(E, H, norm_first=True, **kw)
    layer._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.4)
    x = rng.standard_normal((2, 3, E))
    args = (x, rng.standard_normal((2, 4, E))) if decoder else (x,)
    out, pullback = attnc.vjp(layer, *args)
    dout = rng.standard_normal(out.shape)
    grads = pullback(dout)
    params = dict(layer.state_dict())
    assert "self_attn.k_proj_weight" in grads and grads["self_attn.k_proj_weight"].shape == (4, E)
    names = ["tgt", "memory"] if decoder else ["src"]

    def f(**kw):
        layer.load_state_dict({k: kw[k] for k in params})
        return layer(*(kw[n] for n in names))

    fd_check(f, {**dict(zip(names, args)), **params}, [dout], grads, rtol=1e-5, atol=1e-8)
    layer.load_state_dict(params)


def test_layer_without_options_is_the_old_layer(rng):
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    old = nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, seed=4).eval()
    new = nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, seed=4, num_kv_heads=3).eval()
    assert old.state_dict().keys() == new.state_dict().keys()
    assert np.array_equal(old(x), new(x))


def test_layer_rope_errors():
    with pytest.raises(ValueError, match="rotary.dim"):
        nn.TransformerEncoderLayer(16, 4, rotary=nn.RotaryEmbedding(8))
    with pytest.raises(TypeError, match="rotary"):
        nn.TransformerEncoderLayer(16, 4, rotary=4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        nn.TransformerEncoderLayer(16, 4, num_kv_heads=3)


def test_kv_cache_with_offsets_equals_full_attention(rng):
    """RoPE with positions offset by the cache length: decoding step by step
    through attnc.KVCache gives causal attention over the whole sequence."""
    B, H, L, E = 2, 4, 7, 8
    q, k, v = (rng.standard_normal((B, H, L, E)) for _ in range(3))
    full = attnc.scaled_dot_product_attention(nn.rotary_embedding(q), nn.rotary_embedding(k), v, is_causal=True)
    cache = attnc.KVCache(B, H, capacity=L, head_dim=E, dtype=np.float64)
    steps = []
    for t0, t1 in ((0, 3), (3, 4), (4, 7)):
        cache.append(nn.rotary_embedding(k[:, :, t0:t1], len(cache)), v[:, :, t0:t1])
        steps.append(cache.attend(nn.rotary_embedding(q[:, :, t0:t1], t0)))
    np.testing.assert_allclose(np.concatenate(steps, axis=2), full, rtol=0, atol=1e-13)


@pytest.mark.parametrize("num_kv_heads", [None, 1])
def test_gpt_rope_generation_with_the_cache(rng, num_kv_heads):
    """GPT(positional="rope"): the C decoder's cached generation picks the
    tokens the full forward's logits pick, step by step."""
    m = attnc.models.GPT(
        11,
        16,
        n_layer=2,
        n_head=2,
        n_embd=8,
        dropout=0.0,
        positional="rope",
        num_kv_heads=num_kv_heads,
        dtype=np.float64,
        seed=0,
    ).eval()
    m._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.5 if p.ndim == 2 else None)
    assert "wpe.weight" not in m.state_dict()
    idx = rng.integers(0, 11, (3, 4))
    new = m.generate(idx, 6)
    seq = idx
    for _ in range(6):
        seq = np.concatenate([seq, m(seq)[:, -1].argmax(-1)[:, None]], axis=1)
    assert np.array_equal(new, seq[:, 4:])
    # positions matter: a causal RoPE model's last logits change when the prompt shifts by one token
    shifted = np.concatenate([idx[:, :1], idx], axis=1)
    assert not np.allclose(m(shifted)[:, 1:], m(idx))


def test_gpt_rope_gradients(rng):
    m = attnc.models.GPT(7, 8, n_layer=1, n_head=2, n_embd=8, dropout=0.0, positional="rope", dtype=np.float64, seed=1)
    idx, tgt = rng.integers(0, 7, (2, 5)), rng.integers(0, 7, (2, 5))
    loss, grads = m.loss_and_grads(idx, tgt)
    name = "encoder.layers.0.self_attn.in_proj_weight"
    w = m.state_dict()[name]
    for i, j in [(0, 1), (9, 3), (20, 5)]:  # query, key and value rows
        e = np.zeros_like(w)
        e[i, j] = 1e-6
        m.load_state_dict({name: w + e}, strict=False)
        lp = m.loss_and_grads(idx, tgt)[0]
        m.load_state_dict({name: w - e}, strict=False)
        lm = m.loss_and_grads(idx, tgt)[0]
        m.load_state_dict({name: w}, strict=False)
        assert grads[name][i, j] == pytest.approx((lp - lm) / 2e-6, rel=1e-5, abs=1e-9)
