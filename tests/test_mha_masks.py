"""The block masks (segment_ids, prefix_lengths, block_mask with block_size)
and sigmoid attention (activation, sigmoid_bias) in attnc.multi_head_attention
and attnc.nn.MultiheadAttention (issue 30): against a NumPy float64
multi-head attention written here (torch's projections, its masks, appended
keys, then the kernel's masked softmax or sigmoid of
tests/reference/sdpa_variants_ref.py), torch's flex_attention (CPU, forward,
the masks as a mask_mod) around the same projections, finite differences of
the reference, with grouped heads, dropout, key_padding_mask, attn_mask and
is_causal; fully masked rows, unbatched and empty inputs, threads, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sdpa_masks import _flex

import attnc
from helpers import close, same_bits
from reference import sdpa_variants_ref as ref

mha = attnc.multi_head_attention
REL = {np.float32: 1e-5, np.float64: 1e-12}
DTYPES = [np.float32, np.float64]
POSITIONAL = (
    "query",
    "key",
    "value",
    "num_heads",
    "in_proj_weight",
    "in_proj_bias",
    "out_proj_weight",
    "out_proj_bias",
)


# --------------------------------------------------------------------------- the reference


def _heads(a, n):
    """(B, T, n d) -> (B, n, T, d)."""
    return a.reshape(a.shape[0], a.shape[1], n, a.shape[2] // n).transpose(0, 2, 1, 3)


def _torch_masks(attn_mask, key_padding_mask, B, H, L, S):
    """torch's masks (bool True = ignore, or float added) as one additive
    float64 (B, H, L, S) mask, or None."""
    total = np.zeros((B, H, L, S))
    for m, shape in ((attn_mask, None), (key_padding_mask, (B, 1, 1, S))):
        if m is None:
            continue
        m = np.asarray(m)
        if shape is not None:
            m = m.reshape(shape)
        elif m.ndim == 3:  # (B H, L, S)
            m = m.reshape(B, H, L, S)
        total = total + (np.where(m, -np.inf, 0.0) if m.dtype == bool else m.astype(np.float64))
    return None if attn_mask is None and key_padding_mask is None else total


def mha_ref(
    query,
    key,
    value,
    num_heads,
    in_proj_weight,
    in_proj_bias,
    out_proj_weight,
    out_proj_bias,
    *,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    num_kv_heads=None,
    attn_mask=None,
    key_padding_mask=None,
    is_causal=False,
    need_weights=True,
    average_attn_weights=True,
    bias_k=None,
    bias_v=None,
    add_zero_attn=False,
    **options,
):
    """torch.nn.MultiheadAttention (batch first) in NumPy float64 with the
    kernel's options applied by sdpa_variants_ref: attnc's signature and
    results (output, weights or None)."""
    f = lambda a: None if a is None else np.asarray(a, np.float64)  # noqa: E731
    q, k, v = f(query), f(key), f(value)
    batched = q.ndim == 3
    if not batched:
        q, k, v = q[None], k[None], v[None]
        key_padding_mask = None if key_padding_mask is None else np.asarray(key_padding_mask)[None]
    H, E = num_heads, q.shape[-1]
    Hkv = num_kv_heads or H
    Ekv = Hkv * (E // H)
    if in_proj_weight is not None:
        w = f(in_proj_weight)
        q_proj_weight, k_proj_weight, v_proj_weight = w[:E], w[E : E + Ekv], w[E + Ekv :]
    b = np.zeros(E + 2 * Ekv) if in_proj_bias is None else f(in_proj_bias)
    Q = q @ f(q_proj_weight).T + b[:E]
    K = k @ f(k_proj_weight).T + b[E : E + Ekv]
    V = v @ f(v_proj_weight).T + b[E + Ekv :]
    Bn, L, S = q.shape[0], q.shape[1], k.shape[1]
    tails = ([(f(bias_k), f(bias_v))] if bias_k is not None else []) + [(0.0, 0.0)] * bool(add_zero_attn)
    for tk, tv in tails:  # torch's appended keys, visible to every query
        K = np.concatenate([K, np.broadcast_to(np.reshape(tk, (1, 1, -1)), (Bn, 1, Ekv))], axis=1)
        V = np.concatenate([V, np.broadcast_to(np.reshape(tv, (1, 1, -1)), (Bn, 1, Ekv))], axis=1)
    mask = _torch_masks(attn_mask, key_padding_mask, Bn, H, L, S)
    if mask is not None and tails:
        mask = np.concatenate([mask, np.zeros((Bn, H, L, len(tails)))], axis=-1)
    out, w = ref.scaled_dot_product_attention(
        _heads(Q, H), _heads(K, Hkv), _heads(V, Hkv), mask, is_causal=is_causal, return_weights=True, **options
    )
    out = out.transpose(0, 2, 1, 3).reshape(Bn, L, E) @ f(out_proj_weight).T
    if out_proj_bias is not None:
        out = out + f(out_proj_bias)
    w = w.mean(axis=1) if average_attn_weights else w
    if not batched:
        out, w = out[0], w[0]
    return out, (w if need_weights else None)


# --------------------------------------------------------------------------- inputs


def _inputs(rng, B, L, S, E, H, kv_heads, kdim=None, dtype=np.float64, batched=True):
    """attnc.multi_head_attention's keyword arguments: inputs and separate
    projections (grouped heads: k/v_proj_weight (E_kv, kdim))."""
    kdim = kdim or E
    ekv = kv_heads * (E // H)
    a = lambda *s: (rng.standard_normal(s) * 0.6).astype(dtype)  # noqa: E731
    lead = (B,) if batched else ()
    return dict(
        query=a(*lead, L, E),
        key=a(*lead, S, kdim),
        value=a(*lead, S, kdim),
        num_heads=H,
        in_proj_weight=None,
        in_proj_bias=a(E + 2 * ekv),
        out_proj_weight=a(E, E),
        out_proj_bias=a(E),
        q_proj_weight=a(E, E),
        k_proj_weight=a(ekv, kdim),
        v_proj_weight=a(ekv, kdim),
        num_kv_heads=kv_heads,
    )


def _packed(rng, B, n, pieces):
    """(B, n) nondecreasing segment ids, each row cut into `pieces` runs."""
    cuts = np.sort(rng.random((B, pieces - 1)) * n, axis=-1)
    return (np.arange(n)[None, :, None] >= cuts[:, None, :]).sum(-1)


def _causal(L, S):
    return np.triu(np.ones((L, S), bool), k=1)  # True = may not attend (torch's meaning)


def _options(name, rng, B, H, L, S, dtype):
    """One named combination: the masks, and torch's masks composed with them."""
    blocks = lambda bq, bk, *lead: rng.random((*lead, -(-L // bq), -(-S // bk))) < 0.6  # noqa: E731
    pair = (_packed(rng, B, L, 3).astype(np.int32), _packed(rng, B, S, 3))
    return {
        "segments": {"segment_ids": _packed(rng, B, L, 3)},
        "segments_pair": {"segment_ids": pair},  # L != S: cross-attention between packed sequences
        "segments_causal": {"segment_ids": _packed(rng, B, L, 2), "attn_mask": _causal(L, S), "is_causal": True},
        "prefix": {"prefix_lengths": rng.integers(0, S + 1, B), "is_causal": True},
        "prefix_padding": {"prefix_lengths": 3, "is_causal": True, "key_padding_mask": rng.random((B, S)) < 0.3},
        "block": {"block_mask": blocks(2, 3, B, H), "block_size": (2, 3)},
        "block_shared": {"block_mask": blocks(4, 4), "block_size": 4},
        "sigmoid": {"activation": "sigmoid"},
        "sigmoid_segments": {
            "activation": "sigmoid",
            "sigmoid_bias": -1.5,
            "segment_ids": pair,
            "attn_mask": rng.standard_normal((L, S)).astype(dtype),
        },
        "all": {
            "activation": "sigmoid",
            "segment_ids": pair,
            "prefix_lengths": rng.integers(0, 4, B),
            "is_causal": True,
            "block_mask": blocks(3, 2, 1, H),
            "block_size": (3, 2),
            "key_padding_mask": rng.standard_normal((B, S)).astype(dtype),
            "alibi_slopes": attnc.alibi_slopes(H, dtype),
            "window": (4, 1),
            "softcap": 2.0,
        },
        "softmax_all": {
            "segment_ids": pair,
            "block_mask": blocks(2, 2, B, 1),
            "block_size": 2,
            "attn_mask": rng.random((B * H, L, S)) < 0.2,
            "key_padding_mask": rng.random((B, S)) < 0.2,
            "sinks": rng.standard_normal(H).astype(dtype),
        },
    }[name]


NAMES = [
    "segments",
    "segments_pair",
    "segments_causal",
    "prefix",
    "prefix_padding",
    "block",
    "block_shared",
    "sigmoid",
    "sigmoid_segments",
    "all",
    "softmax_all",
]


def _case(name, rng, dtype=np.float64, B=2, L=9, E=12, H=4, kv_heads=2):
    pair = name.endswith(("pair", "segments", "all")) and name != "segments"
    S = L + 2 if pair else L  # the pair cases: keys and queries of different lengths
    kw = _inputs(rng, B, L, S, E, H, kv_heads, dtype=dtype)
    kw.update(_options(name, rng, B, H, L, S, dtype))
    return kw


def _split(kw):
    """attnc.multi_head_attention's positional arguments and keywords."""
    rest = dict(kw)
    return [rest.pop(n) for n in POSITIONAL], rest


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_the_reference(name, dtype, rng):
    kw = _case(name, rng, dtype)
    args, rest = _split(kw)
    out, w = mha(*args, **rest, average_attn_weights=False)
    want, want_w = mha_ref(*args, **rest, average_attn_weights=False)
    close(out, want, REL[dtype] * 10, f"{name} output")
    close(w, want_w, REL[dtype] * 10, f"{name} weights")
    assert out.dtype == w.dtype == dtype
    assert ((w == 0) == (want_w == 0)).all(), f"{name}: the excluded keys"
    assert (want_w == 0).any() or name == "sigmoid", f"{name}: a mask that masks nothing"
    averaged, mean = mha(*args, **rest)[1], mha_ref(*args, **rest)[1]
    close(averaged, mean, REL[dtype] * 10, f"{name} averaged weights")
    same_bits(mha(*args, **rest, need_weights=False)[0], out, f"{name} output without weights")


def test_stacked_projection_and_unbatched_inputs(rng):
    """in_proj_weight stacked, and unbatched (L, E) inputs with the masks
    without their batch dim: the batched call's first row."""
    kw = _case("all", rng, kv_heads=4)
    kw["in_proj_weight"] = np.concatenate([kw.pop(n) for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight")])
    kw["key"], kw["value"] = kw["key"][:, :9], kw["value"][:, :9]
    ids = kw["segment_ids"][0]
    kw.update(segment_ids=ids, key_padding_mask=kw["key_padding_mask"][:, :9], block_mask=kw["block_mask"][..., :5])
    args, rest = _split(kw)
    out, w = mha(*args, **rest)
    close(out, mha_ref(*args, **rest)[0], 1e-12, "stacked projection")
    one = {**rest, "segment_ids": ids[0], "prefix_lengths": rest["prefix_lengths"][0]}
    one.update(key_padding_mask=rest["key_padding_mask"][0], block_mask=rest["block_mask"][0])
    args1 = [a[0] if i < 3 else a for i, a in enumerate(args)]
    out1, w1 = mha(*args1, **one)
    assert out1.shape == out.shape[1:] and w1.shape == w.shape[1:]
    close(out1, out[0], 1e-12, "unbatched output")
    close(w1, w[0], 1e-12, "unbatched weights")
    close(out1, mha_ref(*args1, **one)[0], 1e-12, "unbatched against the reference")


@pytest.mark.parametrize("name", ["segments", "segments_pair", "segments_causal", "prefix", "block", "softmax_all"])
def test_matches_flex_attention(name, rng, torch):
    """The kernel's masks as flex_attention's mask_mod around the same
    projections (NumPy float64); the causal attn_mask as flex's causal term,
    torch's bool masks folded into a block mask of 1 x 1 blocks."""
    kw = _case(name, rng, L=40, E=16, H=4, kv_heads=1)
    kw.pop("sinks", None)  # (flex's sinks would need a score_mod: the reference has them)
    args, rest = _split(kw)
    out = mha(*args, **rest, need_weights=False)[0]
    B, L, E = kw["query"].shape
    S = kw["key"].shape[1]
    q = kw["query"] @ kw["q_proj_weight"].T + kw["in_proj_bias"][:E]
    k = kw["key"] @ kw["k_proj_weight"].T + kw["in_proj_bias"][E : E + 4]
    v = kw["value"] @ kw["v_proj_weight"].T + kw["in_proj_bias"][E + 4 :]
    masks = {
        n: rest[n] for n in ("segment_ids", "prefix_lengths", "block_mask", "block_size", "is_causal") if n in rest
    }
    torch_masked = _torch_masks(rest.get("attn_mask"), rest.get("key_padding_mask"), B, 4, L, S)
    if torch_masked is not None and not rest.get("is_causal"):
        size = masks["block_size"]
        bq, bk = size if isinstance(size, tuple) else (size, size)
        i, j = np.arange(L)[:, None], np.arange(S)[None, :]
        fine = np.broadcast_to(masks["block_mask"], (B, 4) + masks["block_mask"].shape[-2:])[..., i // bq, j // bk]
        masks.update(block_mask=fine & (torch_masked == 0), block_size=1)
    heads = _flex(torch, _heads(q, 4), _heads(k, 1), _heads(v, 1), masks)
    want = heads.transpose(0, 2, 1, 3).reshape(B, L, E) @ kw["out_proj_weight"].T + kw["out_proj_bias"]
    close(out, want, 1e-12, f"{name} against flex_attention")


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("name", NAMES)
def test_gradients_match_finite_differences_of_the_reference(name, rng, check_vjp):
    """Every input's gradient (projections, float masks, sinks, ALiBi's
    slopes) from outputs and weights, with grouped heads."""
    kw = _case(name, rng, B=2, L=5, E=8, H=4, kv_heads=2)
    kw["average_attn_weights"] = name.startswith("s")  # both forms of the weights
    names = [n for n, a in kw.items() if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    check_vjp(mha, mha_ref, kw, rng, positional=POSITIONAL, expect_names=names, rtol=1e-6, atol=1e-8)


def test_appended_keys_with_sigmoid(rng, check_vjp):
    """bias_k/bias_v and the zero key with sigmoid (its default bias counts
    them: -log(S + 2)): against the reference, gradients included."""
    kw = _inputs(rng, 2, 4, 5, 6, 2, 2)
    kw.update(bias_k=rng.standard_normal((1, 1, 6)), bias_v=rng.standard_normal((1, 1, 6)), add_zero_attn=True)
    kw.update(activation="sigmoid", attn_mask=_causal(4, 5), average_attn_weights=False)
    names = [n for n, a in kw.items() if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    (out, w), _ = check_vjp(mha, mha_ref, kw, rng, positional=POSITIONAL, expect_names=names, rtol=1e-6, atol=1e-8)
    assert w.shape == (2, 2, 4, 7) and (w[..., 5:] > 0).all()


def test_dropout_gradients_with_masks(rng, fd_check):
    """With dropout (a fixed seed): attnc's own forward, differenced."""
    for name in ("all", "softmax_all"):
        kw = _case(name, rng, B=2, L=5, E=8, H=4, kv_heads=1)
        kw.update(dropout_p=0.3, seed=11, need_weights=False)
        (out, _), pullback = attnc.vjp(mha, **kw)
        cot = [rng.standard_normal(out.shape), None]
        wrt = ["query", "key", "value", "q_proj_weight", "k_proj_weight"]
        fd_check(mha, kw, cot, pullback(*cot), wrt=wrt, rtol=1e-6, atol=1e-8)


@settings(max_examples=15, deadline=None)
@given(
    data=st.data(),
    L=st.integers(0, 9),
    S=st.integers(0, 9),
    sigmoid=st.booleans(),
    causal=st.booleans(),
    kv_heads=st.sampled_from([1, 2, 4]),
    batched=st.booleans(),
)
def test_random_masks_match_the_reference(data, L, S, sigmoid, causal, kv_heads, batched):
    """Random sizes (empty ones included), grouped heads, segment ids,
    prefixes, block masks of any block size, key padding, batched or not:
    outputs, weights and the gradients along a random direction against
    the reference."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    kw = _inputs(rng, 2, L, S, 8, 4, kv_heads, batched=batched)
    lead = (2,) if batched else ()
    kw.update(activation="sigmoid" if sigmoid else "softmax", average_attn_weights=data.draw(st.booleans()))
    if data.draw(st.booleans()):
        kw["segment_ids"] = (rng.integers(0, 3, lead + (L,)), rng.integers(0, 3, lead + (S,)))
    if causal:
        kw.update(is_causal=True, prefix_lengths=rng.integers(0, S + 2, lead))
    if data.draw(st.booleans()):
        size = (data.draw(st.integers(1, 10)), data.draw(st.integers(1, 10)))
        kw["block_mask"] = rng.random((*lead, 4, -(-L // size[0]), -(-S // size[1]))) < 0.6
        kw["block_size"] = size
    if data.draw(st.booleans()):
        kw["key_padding_mask"] = rng.random(lead + (S,)) < 0.3
    args, rest = _split(kw)
    (out, w), pullback = attnc.vjp(mha, *args, **rest)
    want, want_w = mha_ref(*args, **rest)
    close(out, want, 1e-12, "output")
    close(w, want_w, 1e-12, "weights")
    dout, dw = rng.standard_normal(out.shape), rng.standard_normal(w.shape)
    grads = pullback(dout, dw)
    for n in ("query", "key", "value", "q_proj_weight", "k_proj_weight", "in_proj_bias"):
        d = rng.standard_normal(kw[n].shape)

        def loss(x, n=n):
            o, ww = mha_ref(**{**kw, n: x})
            return float((o * dout).sum() + (ww * dw).sum())

        numeric = (loss(kw[n] + 1e-6 * d) - loss(kw[n] - 1e-6 * d)) / 2e-6
        assert abs(float((grads[n] * d).sum()) - numeric) <= 1e-6 * max(1.0, abs(numeric)), n


# --------------------------------------------------------------------------- masked rows, empty, unchanged, threads


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("activation", ["softmax", "sigmoid"])
@pytest.mark.parametrize("mask", ["segments", "block"])
def test_fully_masked_rows(mask, activation, dtype, rng):
    """A query no key is left to: zero weights, its attention zero (the
    output is the output projection's bias), no gradient through it."""
    L, S = 8, 6
    kw = _inputs(rng, 2, L, S, 8, 2, 1, dtype=dtype)
    dead = np.zeros(L, bool)
    dead[2:6] = True
    if mask == "segments":  # the dead queries' segment has no keys
        kw["segment_ids"] = (np.where(dead, 9, np.arange(L) % 2), np.arange(S) % 2)
    else:  # query blocks 1, 2 (of 2 queries) all False
        kw.update(block_mask=np.array([[True, True], [False, False], [False, False], [True, False]]), block_size=(2, 3))
    (out, w), pullback = attnc.vjp(mha, **kw, activation=activation, average_attn_weights=False)
    assert not w[..., dead, :].any() and w[..., ~dead, :].any(axis=-1).all()
    same_bits(out[:, dead], np.broadcast_to(kw["out_proj_bias"], out[:, dead].shape), "the bias alone")
    dout = np.zeros_like(out)
    dout[:, dead] = rng.standard_normal(dout[:, dead].shape)
    grads = pullback(dout, None)
    for name, g in grads.items():
        assert np.isfinite(g).all() and (name == "out_proj_bias" or not g.any()), name
    grads = pullback(rng.standard_normal(out.shape).astype(dtype), rng.standard_normal(w.shape).astype(dtype))
    assert not grads["query"][:, dead].any() and grads["query"][:, ~dead].any()


@pytest.mark.parametrize("shape", [(0, 4, 5), (2, 0, 5), (2, 4, 0), (2, 0, 0)], ids=["B0", "L0", "S0", "L0S0"])
def test_empty_inputs_give_empty_results(shape, rng):
    B, L, S = shape
    kw = _inputs(rng, B, L, S, 8, 4, 2)
    kw.update(segment_ids=(np.zeros((B, L), int), np.zeros((B, S), int)), is_causal=True, prefix_lengths=1)
    kw.update(block_mask=np.ones((B, 1, -(-L // 3), -(-S // 3)), bool), block_size=3)
    for activation in ("softmax", "sigmoid"):
        (out, w), pullback = attnc.vjp(mha, **kw, activation=activation)
        assert out.shape == (B, L, 8) and w.shape == (B, L, S)
        same_bits(out, np.broadcast_to(kw["out_proj_bias"], out.shape), "no keys: the bias alone")
        grads = pullback(np.ones_like(out), np.ones_like(w))
        for name in ("query", "key", "value", "q_proj_weight"):
            assert grads[name].shape == kw[name].shape and not grads[name].any(), name


def test_inputs_never_modified(rng, assert_unchanged):
    kw = _case("all", rng)
    (out, w), pullback = assert_unchanged(attnc.vjp, mha, **kw)
    assert_unchanged(pullback, np.ones_like(out), np.ones_like(w))


def test_thread_counts_give_identical_bits(rng, restore_threads):
    cases = []
    for name, dtype, dropout in (("all", np.float32, 0.0), ("softmax_all", np.float64, 0.2), ("prefix", np.float32, 0)):
        kw = _case(name, rng, dtype, L=300, E=16, H=4, kv_heads=2)
        cases.append({**kw, "dropout_p": dropout, "seed": 3, "average_attn_weights": False})
    for kw in cases:
        results = []
        for n in (1, 2):
            attnc.set_num_threads(n)
            (out, w), pullback = attnc.vjp(mha, **kw)
            results.append((out, w, pullback(np.ones_like(out), np.ones_like(w))))
        (o1, w1, g1), (o2, w2, g2) = results
        same_bits(o1, o2, "output")
        same_bits(w1, w2, "weights")
        for name in g1:
            same_bits(g1[name], g2[name], name)


# --------------------------------------------------------------------------- errors


def _err_cases():
    B, L, S, H = 2, 5, 7, 4
    pair = (np.zeros((B, L), np.int64), np.zeros((B, S), np.int64))
    bm = np.ones((B, H, 3, 2), bool)
    causal = np.triu(np.ones((L, S), bool), 1)
    return {
        "segments_single": (ValueError, "segment_ids.*pair", {"segment_ids": np.zeros((B, S), np.int64)}),
        "segments_float": (TypeError, "segment_ids", {"segment_ids": (np.zeros((B, L)), pair[1])}),
        "segments_length": (ValueError, r"segment_ids\[1\]", {"segment_ids": (pair[0], np.zeros((B, 6), int))}),
        "segments_batch": (ValueError, r"segment_ids\[0\]", {"segment_ids": (np.zeros((3, L), int), pair[1])}),
        "prefix_negative": (ValueError, "prefix_lengths", {"prefix_lengths": [3, -1], "is_causal": True}),
        "prefix_not_causal": (ValueError, "prefix_lengths.*is_causal", {"prefix_lengths": 3}),
        "prefix_attn_mask": (
            ValueError,
            "prefix_lengths.*attn_mask",
            {"prefix_lengths": 3, "is_causal": True, "attn_mask": causal},
        ),
        "prefix_float": (TypeError, "prefix_lengths", {"prefix_lengths": 2.5, "is_causal": True}),
        "prefix_shape": (ValueError, "prefix_lengths", {"prefix_lengths": [1, 2, 3], "is_causal": True}),
        "block_shape": (ValueError, "block_mask", {"block_mask": bm[..., :1], "block_size": 3}),
        "block_heads": (ValueError, "block_mask", {"block_mask": np.ones((B, 3, 2, 3), bool), "block_size": 3}),
        "block_float": (TypeError, "block_mask", {"block_mask": bm.astype(float), "block_size": (2, 4)}),
        "block_size_zero": (ValueError, "block_size", {"block_mask": bm, "block_size": 0}),
        "block_size_missing": (TypeError, "block_size", {"block_mask": bm}),
        "block_size_alone": (TypeError, "block_size", {"block_size": 4}),
        "activation": (ValueError, "activation", {"activation": "relu"}),
        "sigmoid_bias_softmax": (ValueError, "sigmoid_bias", {"sigmoid_bias": 1.0}),
        "sigmoid_bias_nan": (ValueError, "sigmoid_bias", {"activation": "sigmoid", "sigmoid_bias": float("nan")}),
        "sigmoid_sinks": (ValueError, "sinks", {"activation": "sigmoid", "sinks": np.zeros(H)}),
        "segments_bias_kv": (
            ValueError,
            "segment_ids.*bias_k",
            {"segment_ids": pair, "bias_k": np.zeros(4), "bias_v": np.zeros(4)},
        ),
        "prefix_zero_attn": (
            ValueError,
            "prefix_lengths.*add_zero_attn",
            {"prefix_lengths": 1, "is_causal": True, "add_zero_attn": True},
        ),
        "block_zero_attn": (
            ValueError,
            "block_mask.*add_zero_attn",
            {"block_mask": bm, "block_size": (2, 4), "add_zero_attn": True},
        ),
    }


@pytest.mark.parametrize("case", list(_err_cases()))
def test_errors_name_the_argument(case, rng):
    exc, pattern, options = _err_cases()[case]
    kw = _inputs(rng, 2, 5, 7, 8, 4, 2)
    with pytest.raises(exc, match=pattern):
        mha(**kw, **options)
    with pytest.raises(exc, match=pattern):
        attnc.vjp(mha, **kw, **options)


# --------------------------------------------------------------------------- the module


def test_module_settings_and_per_call_masks(rng, tmp_path):
    """activation and sigmoid_bias are the module's settings (saved and
    loaded with it); the block masks are the call's, and the module's
    results are the functional call's and the reference's."""
    m = attnc.nn.MultiheadAttention(12, 4, num_kv_heads=2, activation="sigmoid", sigmoid_bias=-1.0, dtype=np.float64)
    sd = m.state_dict()
    x = rng.standard_normal((2, 9, 12))
    masks = dict(segment_ids=_packed(rng, 2, 9, 3), is_causal=True, prefix_lengths=[2, 5])
    masks.update(block_mask=rng.random((1, 4, 3, 3)) < 0.7, block_size=3)
    (out, w), pullback = attnc.vjp(m, x, x, x, average_attn_weights=False, **masks)
    p = dict(q_proj_weight=sd["q_proj_weight"], k_proj_weight=sd["k_proj_weight"], v_proj_weight=sd["v_proj_weight"])
    args = (x, x, x, 4, None, sd["in_proj_bias"], sd["out_proj.weight"], sd["out_proj.bias"])
    options = dict(num_kv_heads=2, activation="sigmoid", sigmoid_bias=-1.0, average_attn_weights=False, **masks)
    want, want_w = mha_ref(*args, **p, **options)
    close(out, want, 1e-12, "module")
    close(w, want_w, 1e-12, "module weights")
    same_bits(out, mha(*args, **p, **options)[0], "the functional call")
    assert set(pullback(np.ones_like(out), None)) == {"query", "key", "value", *sd}
    path = tmp_path / "sigmoid.npz"
    attnc.save(path, m)
    loaded = attnc.load(path)
    assert (loaded.activation, loaded.sigmoid_bias) == ("sigmoid", -1.0)
    same_bits(loaded(x, x, x, average_attn_weights=False, **masks)[0], out, "loaded module")
    with pytest.raises(TypeError, match="activation is set by the module"):
        m(x, x, x, activation="softmax")
    with pytest.raises(ValueError, match="sigmoid_bias"):
        attnc.nn.MultiheadAttention(12, 4, sigmoid_bias=-1.0)
    with pytest.raises(ValueError, match="activation"):
        attnc.nn.MultiheadAttention(12, 4, activation="tanh")
