"""The block masks and the sigmoid activation of
attnc.scaled_dot_product_attention and KVCache.attend (issue 30): segment_ids
(packed sequences), prefix_lengths (prefix LM), block_mask with block_size,
activation="sigmoid" with sigmoid_bias. Against the NumPy float64 reference
(tests/reference/sdpa_variants_ref.py), torch's flex_attention (CPU, forward;
masks through mask_mod and create_block_mask) and torch.sigmoid's math for
sigmoid (flex_attention normalises), finite differences, compositions with
the other options, fully masked rows, skipped tiles, errors, threads."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sdpa import check_thread_bits

import attnc
from helpers import close, same_bits
from reference import sdpa_variants_ref as ref

DTYPES = [np.float32, np.float64]
REL = {np.float32: 1e-5, np.float64: 1e-12}


sdpa = attnc.scaled_dot_product_attention


def _qkv(rng, b, h, hkv, L, S, E, Ev, dtype=np.float64):
    q = rng.standard_normal((b, h, L, E)).astype(dtype)
    k = rng.standard_normal((b, hkv, S, E)).astype(dtype)
    v = rng.standard_normal((b, hkv, S, Ev)).astype(dtype)
    return q, k, v


def _packed(rng, b, n, pieces):
    """(b, n) nondecreasing segment ids: each row cut into `pieces` sequences."""
    rows = []
    for _ in range(b):
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(pieces - 1, n - 1), replace=False)) if n > 1 else []
        rows.append(np.searchsorted(cuts, np.arange(n), side="right"))
    return np.array(rows, np.int64).reshape(b, n)


def _segments(rng, b, L, S, pieces=3):
    """segment_ids for L queries and S keys: one array when L == S, else a
    pair (the queries' ids drawn from the keys' range)."""
    keys = _packed(rng, b, S, pieces)
    if L == S:
        return keys
    return (np.sort(rng.integers(0, pieces, (b, L)), axis=-1).astype(np.int32), keys)


def _blocks(rng, h, L, S, size, p=0.6):
    bq, bk = size if isinstance(size, tuple) else (size, size)
    return rng.random((1, h, -(-L // bq), -(-S // bk))) < p


def _options(name, b, h, L, S, dtype, rng):
    """The keyword arguments of one named combination of options."""
    slopes = attnc.alibi_slopes(h, dtype)
    sinks = rng.standard_normal(h).astype(dtype)
    prefix = rng.integers(0, S + 2, b)
    return {
        "segments_causal": {"segment_ids": _segments(rng, b, L, S), "is_causal": True},
        "segments": {"segment_ids": _segments(rng, b, L, S, 4)},
        "prefix": {"prefix_lengths": prefix, "is_causal": True},
        "block_tiles": {"block_mask": _blocks(rng, h, L, S, (128, 256)), "block_size": (128, 256)},
        "block_odd": {"block_mask": _blocks(rng, 1, L, S, (40, 7))[:, 0], "block_size": (40, 7)},
        "sigmoid": {"activation": "sigmoid"},
        "alibi_window_causal_segments": {
            "alibi_slopes": slopes,
            "window": (150, 0),
            "is_causal": True,
            "segment_ids": _segments(rng, b, L, S),
        },
        "softcap_sinks_segments": {"softcap": 1.5, "sinks": sinks, "segment_ids": _segments(rng, b, L, S, 2)},
        "sigmoid_window_alibi": {
            "activation": "sigmoid",
            "sigmoid_bias": -1.5,
            "window": (60, 20),
            "alibi_slopes": slopes,
        },
        "all": {
            "activation": "sigmoid",
            "softcap": 2.0,
            "segment_ids": _segments(rng, b, L, S, 2),
            "prefix_lengths": int(prefix[0]),
            "is_causal": True,
            "block_mask": _blocks(rng, h, L, S, 64, 0.8),
            "block_size": 64,
        },
        "float_mask_block_window": {
            "attn_mask": rng.standard_normal((L, S)).astype(dtype),
            "block_mask": _blocks(rng, h, L, S, (16, 300), 0.7),
            "block_size": (16, 300),
            "window": (None, 40),
        },
    }[name]


NAMES = [
    "segments_causal",
    "segments",
    "prefix",
    "block_tiles",
    "block_odd",
    "sigmoid",
    "alibi_window_causal_segments",
    "softcap_sinks_segments",
    "sigmoid_window_alibi",
    "all",
    "float_mask_block_window",
]
SHAPES = [(2, 4, 2, 9, 9, 5, 3), (2, 2, 1, 300, 530, 16, 8)]


def _ref(q, k, v, kw, **more):
    return ref.scaled_dot_product_attention(q, k, v, **kw, **more)


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES, ids=["small", "tiles"])
def test_forward_matches_reference(name, shape, dtype, rng):
    b, h, hkv, L, S, E, Ev = shape
    q, k, v = _qkv(rng, b, h, hkv, L, S, E, Ev, dtype)
    kw = _options(name, b, h, L, S, dtype, rng)
    out, w = sdpa(q, k, v, enable_gqa=True, return_weights=True, **kw)
    want_out, want_w = _ref(q, k, v, kw, return_weights=True)
    close(out, want_out, REL[dtype] * 10, f"{name} output")
    close(w, want_w, REL[dtype] * 10, f"{name} weights")
    assert out.dtype == w.dtype == dtype
    assert ((w == 0) == (want_w == 0)).all(), f"{name}: the excluded keys"
    close(sdpa(q, k, v, enable_gqa=True, **kw), out, 0, f"{name} output without weights")


def test_float32_within_1e5_of_float64(rng):
    q, k, v = _qkv(rng, 2, 4, 2, 260, 300, 32, 16)
    for name in ("alibi_window_causal_segments", "sigmoid_window_alibi", "all"):
        kw = _options(name, 2, 4, 260, 300, np.float64, rng)
        kw32 = {n: a.astype(np.float32) if getattr(a, "dtype", None) == np.float64 else a for n, a in kw.items()}
        out64, w64 = sdpa(q, k, v, enable_gqa=True, return_weights=True, **kw)
        out32, w32 = sdpa(*(x.astype(np.float32) for x in (q, k, v)), enable_gqa=True, return_weights=True, **kw32)
        close(out32, out64, 1e-5, f"{name} output")
        close(w32, w64, 1e-5, f"{name} weights")


def test_segments_broadcast_and_pack(rng):
    """Packed sequences give each sequence's own causal attention; ids of
    shape (L,) broadcast over the batch, any integer dtype."""
    q, k, v = _qkv(rng, 2, 2, 2, 50, 50, 8, 4)
    ids = np.repeat(np.arange(3, dtype=np.int16), [20, 5, 25])
    out = sdpa(q, k, v, is_causal=True, segment_ids=ids)
    for lo, hi in ((0, 20), (20, 25), (25, 50)):
        alone = sdpa(q[:, :, lo:hi], k[:, :, lo:hi], v[:, :, lo:hi], is_causal=True)
        close(out[:, :, lo:hi], alone, 1e-12, f"sequence {lo}:{hi}")
    same_bits(out, sdpa(q, k, v, is_causal=True, segment_ids=np.broadcast_to(ids, (2, 50)).astype(np.uint8)))


def test_prefix_rule(rng):
    """Query i attends key j if j <= i or j < prefix; prefix 0 is causal, a
    prefix past the keys is no mask at all."""
    q, k, v = _qkv(rng, 2, 2, 2, 30, 30, 4, 3)
    _, w = sdpa(q, k, v, is_causal=True, prefix_lengths=[7, 0], return_weights=True)
    i, j = np.arange(30)[:, None], np.arange(30)[None, :]
    np.testing.assert_array_equal(w[0, 0] > 0, (j <= i) | (j < 7))
    same_bits(w[1], sdpa(q, k, v, is_causal=True, return_weights=True)[1][1], "prefix 0")
    same_bits(sdpa(q, k, v, is_causal=True, prefix_lengths=30), sdpa(q, k, v), "prefix = S")


def test_sigmoid_default_bias_and_weights(rng):
    q, k, v = _qkv(rng, 1, 2, 2, 10, 13, 4, 3)
    out, w = sdpa(q, k, v, activation="sigmoid", return_weights=True)
    s = q @ np.swapaxes(k, -1, -2) / 2
    close(w, 1 / (1 + np.exp(-(s - np.log(13)))), 1e-12, "p = sigmoid(s - log S)")
    close(out, w @ v, 1e-12, "no normalisation")
    same_bits(sdpa(q, k, v, activation="sigmoid", sigmoid_bias=-np.log(13)), out, "the default bias")


# --------------------------------------------------------------------------- torch


def _flex(torch, q, k, v, kw):
    """torch's flex_attention (eager, CPU, float64), the block masks as mask_mod."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    t = [torch.tensor(np.asarray(a, np.float64)) for a in (q, k, v)]
    b, L, S = q.shape[0], q.shape[-2], k.shape[-2]
    ok = ref.block_masks(
        (b, q.shape[-3], L, S),
        kw.get("is_causal", False),
        **{n: kw[n] for n in ("segment_ids", "prefix_lengths", "block_mask", "block_size") if n in kw},
    )
    causal = kw.get("is_causal") and "prefix_lengths" not in kw
    if causal:
        ok &= np.arange(S)[None, :] <= np.arange(L)[:, None]
    segs = kw.get("segment_ids")
    qs, ks = (segs if isinstance(segs, tuple) else (segs, segs)) if segs is not None else (None, None)
    qs, ks = (None, None) if segs is None else (torch.tensor(np.asarray(qs, np.int64)), torch.tensor(ks))
    prefix = kw.get("prefix_lengths")
    prefix = None if prefix is None else torch.tensor(np.broadcast_to(prefix, (b,)).astype(np.int64))
    bm = kw.get("block_mask")
    bm = None if bm is None else torch.tensor(np.broadcast_to(bm, (b, q.shape[-3]) + bm.shape[-2:]).copy())
    bs = kw.get("block_size")
    bq, bk = bs if isinstance(bs, tuple) else (bs, bs)

    def mask_mod(bi, h, qi, kv):  # document, prefix-LM and block masks as attention-gym writes them
        allowed = qi >= 0
        if causal:
            allowed = allowed & (kv <= qi)
        if qs is not None:
            allowed = allowed & (qs[bi, qi] == ks[bi, kv])
        if prefix is not None:
            allowed = allowed & ((kv <= qi) | (kv < prefix[bi]))
        if bm is not None:
            allowed = allowed & bm[bi, h, qi // bq, kv // bk]
        return allowed

    block_mask = create_block_mask(mask_mod, b, q.shape[-3], L, S, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile()": the eager form is the point
        out = flex_attention(*t, block_mask=block_mask, enable_gqa=q.shape[-3] != k.shape[-3])
    # flex gives a fully masked row NaN or zeros depending on the version; attnc zeros
    return np.where(ok.any(-1)[..., None], out.numpy(), 0.0)


@pytest.mark.parametrize("name", ["segments_causal", "segments", "prefix", "block_tiles", "block_odd"])
def test_forward_matches_flex_attention(name, rng, torch):
    b, h, hkv, L, S, E, Ev = 2, 2, 1, 300, 280, 16, 8
    q, k, v = _qkv(rng, b, h, hkv, L, S, E, Ev)
    kw = _options(name, b, h, L, S, np.float64, rng)
    out = sdpa(q, k, v, enable_gqa=True, **kw)
    close(out, _flex(torch, q, k, v, kw), 1e-12, f"{name} against flex_attention")


def test_sigmoid_matches_torch(rng, torch):
    """flex_attention normalises, so sigmoid is checked against its math in torch."""
    q, k, v = _qkv(rng, 2, 2, 2, 140, 300, 8, 4)
    slopes = attnc.alibi_slopes(2)
    out = sdpa(q, k, v, activation="sigmoid", sigmoid_bias=-2.0, alibi_slopes=slopes, window=(50, 10))
    tq, tk, tv = (torch.tensor(a) for a in (q, k, v))
    i, j = torch.arange(140)[:, None], torch.arange(300)[None, :]
    s = tq @ tk.transpose(-1, -2) / np.sqrt(8) + torch.tensor(slopes)[:, None, None] * (j - i)
    p = torch.sigmoid(s - 2.0) * ((j >= i - 50) & (j <= i + 10))
    close(out, (p @ tv).numpy(), 1e-12, "sigmoid against torch")


# --------------------------------------------------------------------------- gradients


def _ref_fn(query, key, value, enable_gqa=False, **kw):
    return ref.scaled_dot_product_attention(query, key, value, **kw)


@pytest.mark.parametrize("weights", [False, True], ids=["output", "output_and_weights"])
@pytest.mark.parametrize("name", NAMES)
def test_gradients_match_finite_differences(name, weights, rng, check_vjp):
    q, k, v = _qkv(rng, 2, 2, 1, 5, 6, 3, 2)
    kw = dict(query=q, key=k, value=v, enable_gqa=True, **_options(name, 2, 2, 5, 6, np.float64, rng))
    if weights:
        kw["return_weights"] = True
    differentiable = ("sinks", "alibi_slopes", "attn_mask")
    names = ["query", "key", "value"] + [n for n in differentiable if n in kw]
    check_vjp(sdpa, _ref_fn, kw, rng, positional=("query", "key", "value"), expect_names=names)


@pytest.mark.parametrize("name", ["alibi_window_causal_segments", "sigmoid_window_alibi", "all"])
def test_large_gradients_match_directional_differences(name, rng):
    """At sizes with several tiles (and the backward's paths): the gradient
    along random directions against central differences of the reference."""
    q, k, v = _qkv(rng, 1, 2, 1, 300, 530, 8, 4)
    kw = _options(name, 1, 2, 300, 530, np.float64, rng)
    (out, w), pb = attnc.vjp(sdpa, q, k, v, enable_gqa=True, return_weights=True, **kw)
    dout, dw = rng.standard_normal(out.shape), rng.standard_normal(w.shape)
    grads = pb(dout, dw)
    args = {"query": q, "key": k, "value": v, **kw}
    for n in ["query", "key", "value"] + [n for n in ("sinks", "alibi_slopes") if n in kw]:
        d = rng.standard_normal(np.shape(args[n]))
        eps = 1e-6

        def loss(x, n=n):
            a = {**args, n: x}
            o, ww = ref.scaled_dot_product_attention(
                a.pop("query"), a.pop("key"), a.pop("value"), return_weights=True, **a
            )
            return float((o * dout).sum() + (ww * dw).sum())

        numeric = (loss(args[n] + eps * d) - loss(args[n] - eps * d)) / (2 * eps)
        assert abs(float((grads[n] * d).sum()) - numeric) <= 1e-6 * max(1.0, abs(numeric)), (name, n)


def test_dropout_gradient_with_masks(rng, fd_check):
    """With dropout (a fixed seed): attnc's own forward, differenced."""
    q, k, v = _qkv(rng, 2, 2, 1, 5, 6, 3, 2)
    for name in ("all", "softcap_sinks_segments"):
        kw = dict(query=q, key=k, value=v, enable_gqa=True, dropout_p=0.3, seed=5)
        kw.update(_options(name, 2, 2, 5, 6, np.float64, rng))
        out, pb = attnc.vjp(sdpa, **kw)
        cot = [rng.standard_normal(out.shape)]
        fd_check(sdpa, kw, cot, pb(*cot), wrt=["query", "key", "value"] + (["sinks"] if "sinks" in kw else []))


@settings(max_examples=15, deadline=None)
@given(
    data=st.data(),
    L=st.integers(0, 12),
    S=st.integers(0, 12),
    sigmoid=st.booleans(),
    causal=st.booleans(),
)
def test_random_masks_match_reference(data, L, S, sigmoid, causal):
    """Random sizes (empty ones included), segment ids, prefixes and block
    masks of any block size: outputs, weights and gradients against the
    reference (its gradient by directional differences)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    q, k, v = _qkv(rng, 2, 2, 1, L, S, 3, 2)
    kw = {"activation": "sigmoid" if sigmoid else "softmax", "is_causal": causal}
    if data.draw(st.booleans()):
        kw["segment_ids"] = (rng.integers(0, 3, (2, L)), rng.integers(0, 3, (1, S)))
    if causal and data.draw(st.booleans()):
        kw["prefix_lengths"] = rng.integers(0, S + 2, 2)
    if data.draw(st.booleans()):
        size = (data.draw(st.integers(1, 13)), data.draw(st.integers(1, 13)))
        kw["block_mask"], kw["block_size"] = _blocks(rng, 2, L, S, size), size
    (out, w), pb = attnc.vjp(sdpa, q, k, v, enable_gqa=True, return_weights=True, **kw)
    want_out, want_w = ref.scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
    close(out, want_out, 1e-12, "output")
    close(w, want_w, 1e-12, "weights")
    dout, dw = rng.standard_normal(out.shape), rng.standard_normal(w.shape)
    grads = pb(dout, dw)
    args = {"query": q, "key": k, "value": v}
    for n, x in args.items():
        d = rng.standard_normal(x.shape)

        def loss(y, n=n):
            o, ww = ref.scaled_dot_product_attention(**{**args, n: y}, return_weights=True, **kw)
            return float((o * dout).sum() + (ww * dw).sum())

        numeric = (loss(x + 1e-6 * d) - loss(x - 1e-6 * d)) / 2e-6
        assert abs(float((grads[n] * d).sum()) - numeric) <= 1e-6 * max(1.0, abs(numeric)), n


# --------------------------------------------------------------------------- fully masked rows, skipped tiles


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("activation", ["softmax", "sigmoid"])
@pytest.mark.parametrize("mask", ["segments", "block"])
def test_fully_masked_rows_are_zero(mask, activation, dtype, rng):
    L, S = 300, 290
    q, k, v = _qkv(rng, 1, 2, 2, L, S, 4, 3, dtype)
    dead = np.zeros(L, bool)
    dead[100:250] = True
    if mask == "segments":  # the dead queries' segment has no keys
        kw = {"segment_ids": (np.where(dead, 7, np.arange(L) % 3), np.arange(S) % 3)}
    else:  # query block rows 100..249 (blocks of 50) all False
        bm = rng.random((2, 6, 3)) < 0.7
        bm[:, 2:5] = False
        bm[:, [0, 1, 5], 0] = True
        kw = {"block_mask": bm, "block_size": (50, 100)}
    (out, w), pb = attnc.vjp(sdpa, q, k, v, return_weights=True, activation=activation, **kw)
    assert not out[..., dead, :].any() and not w[..., dead, :].any()
    assert out[..., ~dead, :].any(axis=-1).all()
    dout = rng.standard_normal(out.shape).astype(dtype)
    grads = pb(dout, rng.standard_normal(w.shape).astype(dtype))
    assert not grads["query"][..., dead, :].any()
    assert all(np.isfinite(g).all() for g in grads.values())
    only_dead = np.zeros_like(dout)
    only_dead[..., dead, :] = dout[..., dead, :]
    for name, g in pb(only_dead, None).items():
        assert not g.any(), f"{name}: a cotangent on fully masked rows only gives a gradient"


@pytest.mark.parametrize(
    "kw",
    [
        {"block_mask": np.array([[True, False, True], [True, False, False]]), "block_size": (128, 256)},
        {"segment_ids": (np.zeros(200, np.int64), np.repeat([0, 1, 0], 256)[:700])},
        {"is_causal": True, "prefix_lengths": 100},
    ],
    ids=["block_mask", "segments", "prefix"],
)
def test_excluded_tiles_are_skipped(kw, rng):
    """Keys only excluded tiles hold (keys 256..511: the kernel's second key
    tile of 256) take no part in any arithmetic: NaN there leaves every
    result finite, and the results are those without those keys."""
    q, k, v = _qkv(rng, 1, 1, 1, 200, 700, 8, 4)
    k[:, :, 256:512], v[:, :, 256:512] = np.nan, np.inf
    (out, w), pb = attnc.vjp(sdpa, q, k, v, return_weights=True, **kw)
    grads = pb(np.ones_like(out), np.ones_like(w))
    assert np.isfinite(out).all() and np.isfinite(w).all()
    assert all(np.isfinite(g[..., :256, :]).all() and np.isfinite(g[..., 512:, :]).all() for g in grads.values())
    assert not w[..., 256:512].any()
    clean = [a.copy() for a in (k, v)]
    for a in clean:
        a[:, :, 256:512] = 0
    close(out, ref.scaled_dot_product_attention(q, *clean, **kw), 1e-12, "without the skipped keys")


# --------------------------------------------------------------------------- errors


def _err_cases():
    r = np.random.default_rng(0)
    q, k, v = r.standard_normal((2, 4, 5, 8)), r.standard_normal((2, 4, 7, 8)), r.standard_normal((2, 4, 7, 3))
    pair = (np.zeros((2, 5), np.int64), np.zeros((2, 7), np.int64))
    bm = np.ones((2, 4, 3, 2), bool)
    return {
        "segments_single": (ValueError, "segment_ids.*pair", {"segment_ids": np.zeros((2, 7), np.int64)}),
        "segments_float": (TypeError, "segment_ids", {"segment_ids": (np.zeros((2, 5)), pair[1])}),
        "segments_bool": (TypeError, "segment_ids", {"segment_ids": (pair[0], np.zeros((2, 7), bool))}),
        "segments_length": (ValueError, r"segment_ids\[1\]", {"segment_ids": (pair[0], np.zeros((2, 6), int))}),
        "segments_batch": (ValueError, r"segment_ids\[0\]", {"segment_ids": (np.zeros((3, 5), int), pair[1])}),
        "segments_triple": (TypeError, "segment_ids", {"segment_ids": pair + pair[:1]}),
        "prefix_negative": (ValueError, "prefix_lengths", {"prefix_lengths": [3, -1], "is_causal": True}),
        "prefix_not_causal": (ValueError, "prefix_lengths.*is_causal", {"prefix_lengths": 3}),
        "prefix_float": (TypeError, "prefix_lengths", {"prefix_lengths": 2.5, "is_causal": True}),
        "prefix_shape": (ValueError, "prefix_lengths", {"prefix_lengths": [1, 2, 3], "is_causal": True}),
        "block_shape": (ValueError, "block_mask", {"block_mask": bm[..., :1], "block_size": 3}),
        "block_heads": (ValueError, "block_mask", {"block_mask": np.ones((2, 3, 3, 4), bool), "block_size": 2}),
        "block_float": (TypeError, "block_mask", {"block_mask": bm.astype(float), "block_size": (2, 4)}),
        "block_size_zero": (ValueError, "block_size", {"block_mask": bm, "block_size": 0}),
        "block_size_negative": (ValueError, "block_size", {"block_mask": bm, "block_size": (2, -4)}),
        "block_size_float": (TypeError, "block_size", {"block_mask": bm, "block_size": 2.0}),
        "block_size_missing": (TypeError, "block_size", {"block_mask": bm}),
        "block_size_alone": (TypeError, "block_size", {"block_size": 4}),
        "activation": (ValueError, "activation", {"activation": "relu"}),
        "sigmoid_bias_softmax": (ValueError, "sigmoid_bias", {"sigmoid_bias": 1.0}),
        "sigmoid_bias_nan": (ValueError, "sigmoid_bias", {"activation": "sigmoid", "sigmoid_bias": float("nan")}),
        "sigmoid_bias_str": (TypeError, "sigmoid_bias", {"activation": "sigmoid", "sigmoid_bias": "1"}),
        "sigmoid_sinks": (ValueError, "sinks", {"activation": "sigmoid", "sinks": np.zeros(4)}),
    }, (q, k, v)


@pytest.mark.parametrize("case", list(_err_cases()[0]))
def test_errors_name_the_argument(case):
    cases, args = _err_cases()
    exc, pattern, kw = cases[case]
    with pytest.raises(exc, match=pattern):
        sdpa(*args, **kw)
    with pytest.raises(exc, match=pattern):
        attnc.vjp(sdpa, *args, **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_lse_is_zero(rng, dtype):
    """With activation sigmoid the kernel writes 0 into lse: nothing reads a
    normaliser then (the backward and the weights take p = sigmoid(s + b)),
    so the forward no longer sums each row for one. Several tiles, segments."""
    from attnc import _core
    from attnc.attention import sdpa as impl

    q, k, v = _qkv(rng, 2, 2, 2, 300, 270, 5, 3, dtype)
    segs = (np.repeat([0, 1, 2], 100)[None], np.repeat([0, 1, 2], 90)[None])
    q, k, v, _, options, _ = impl._prepare(
        q, k, v, None, 0.0, False, None, False, None, activation="sigmoid", segment_ids=segs
    )
    out, lse = np.empty((2, 2, 300, 3), dtype), np.full((2, 2, 300), np.nan, dtype)
    _core.sdpa_forward(output=out, lse=lse, query=q, key=k, value=v, options=options)
    assert (lse == 0).all()
    want = ref.scaled_dot_product_attention(q, k, v, activation="sigmoid", segment_ids=segs)
    close(out, want, 1e-5 if dtype == np.float32 else 1e-12, "output")


def test_c_checks_the_options(rng):
    """The kernel's own checks, past the Python ones."""
    from attnc import _core

    q, k, v = _qkv(rng, 1, 2, 2, 3, 4, 5, 2)
    out, lse = np.empty((1, 2, 3, 2)), np.empty((1, 2, 3))

    def call(**options):
        _core.sdpa_forward(output=out, lse=lse, query=q, key=k, value=v, options={"scale": 1.0, **options})

    ids = np.zeros((1, 3), np.int64)
    with pytest.raises(ValueError, match="go together"):
        call(query_segments=ids)
    with pytest.raises(TypeError, match="key_segments"):
        call(query_segments=ids, key_segments=np.zeros((1, 4), np.int32))
    with pytest.raises(ValueError, match="key_segments"):
        call(query_segments=ids, key_segments=np.zeros((1, 3), np.int64))
    with pytest.raises(ValueError, match="prefix_lengths"):
        call(causal=True, prefix_lengths=np.array([-2]))
    with pytest.raises(ValueError, match="prefix_lengths"):
        call(prefix_lengths=np.array([2]))
    with pytest.raises(ValueError, match="block sizes"):
        call(block_mask=np.ones((1, 2, 3, 4), bool), block_q=1, block_k=0)
    with pytest.raises(ValueError, match="block_mask"):
        call(block_mask=np.ones((1, 2, 3, 4), bool), block_q=1, block_k=2)
    with pytest.raises(ValueError, match="activation"):
        call(activation=2)
    with pytest.raises(ValueError, match="sigmoid_bias"):
        call(activation=1, sigmoid_bias=float("inf"))


def test_empty_inputs_give_empty_results(rng):
    for L, S in ((0, 5), (4, 0), (0, 0)):
        q, k, v = _qkv(rng, 2, 2, 2, L, S, 3, 2)
        kw = {"segment_ids": (np.zeros((2, L), int), np.zeros((2, S), int)), "is_causal": True}
        kw.update(prefix_lengths=1, block_mask=np.ones((2, 1, -(-L // 4), -(-S // 4)), bool), block_size=4)
        for activation in ("softmax", "sigmoid"):
            (out, w), pb = attnc.vjp(sdpa, q, k, v, return_weights=True, activation=activation, **kw)
            assert out.shape == (2, 2, L, 2) and w.shape == (2, 2, L, S) and not out.any()
            grads = pb(np.ones_like(out), np.ones_like(w))
            assert all(g.shape == a.shape and not g.any() for g, a in zip(grads.values(), (q, k, v)))


def test_inputs_never_modified(rng, assert_unchanged):
    q, k, v = _qkv(rng, 1, 2, 1, 30, 40, 4, 3)
    kw = _options("all", 1, 2, 30, 40, np.float64, rng)
    (out, w), pb = assert_unchanged(attnc.vjp, sdpa, q, k, v, enable_gqa=True, return_weights=True, **kw)
    assert_unchanged(pb, np.ones_like(out), np.ones_like(w))


# --------------------------------------------------------------------------- threads


def test_thread_counts_give_identical_bits(rng, restore_threads):
    f32 = np.float32
    cases = []
    for (b, h, hkv, L, S, E, Ev), dtype, name in (
        ((1, 2, 1, 600, 700, 16, 8), f32, "alibi_window_causal_segments"),  # the two-part backward
        ((2, 4, 2, 300, 300, 8, 8), np.float64, "all"),
        ((1, 2, 2, 270, 530, 24, 16), f32, "sigmoid_window_alibi"),
        ((2, 2, 1, 200, 260, 16, 8), f32, "block_odd"),
        ((1, 4, 2, 300, 300, 16, 8), np.float64, "prefix"),
    ):
        kw = _options(name, b, h, L, S, dtype, rng)
        cases.append((_qkv(rng, b, h, hkv, L, S, E, Ev, dtype), {"enable_gqa": True, **kw}))
    cases[-1][1].update(dropout_p=0.2, seed=7)
    check_thread_bits(cases)


# --------------------------------------------------------------------------- KVCache.attend


def test_kv_cache_decoding_matches_one_call(rng):
    """Decoding step by step with the block masks over the cache's positions
    gives what one causal call over the whole sequence gives."""
    q, k, v = _qkv(rng, 2, 4, 2, 40, 40, 8, 4)
    ids = _packed(rng, 2, 40, 3)
    for kw in (
        {"segment_ids": ids, "alibi_slopes": attnc.alibi_slopes(4), "softcap": 2.0},
        {"prefix_lengths": [12, 3], "activation": "sigmoid", "sigmoid_bias": -1.0, "window": (9, 0)},
    ):
        whole = sdpa(q, k, v, is_causal=True, enable_gqa=True, **kw)
        cache = attnc.KVCache(2, 2, capacity=40, head_dim=8, value_dim=4, dtype=np.float64)
        steps = []
        for t in range(0, 40, 5):  # five positions at a time
            cache.append(k[:, :, t : t + 5], v[:, :, t : t + 5])
            step = dict(kw)
            if "segment_ids" in kw:
                step["segment_ids"] = (ids[:, t : t + 5], ids[:, : t + 5])
            steps.append(cache.attend(q[:, :, t : t + 5], **step))
        close(np.concatenate(steps, axis=2), whole, 1e-12, f"decoded against one call {sorted(kw)}")


def test_kv_cache_block_mask_and_gradients(rng, fd_check):
    cache = attnc.KVCache(1, 2, capacity=8, head_dim=3, dtype=np.float64)
    x = rng.standard_normal((1, 2, 7, 3))
    cache.append(x, x)
    bm = np.array([[True, False, True, True], [False, True, True, False]])
    kw = {"query": rng.standard_normal((1, 2, 3, 3)), "block_mask": bm, "block_size": (2, 2)}
    kw.update(
        activation="sigmoid", prefix_lengths=2, segment_ids=(np.array([[0, 1, 1]]), np.array([[0] * 3 + [1] * 4]))
    )
    out, pb = attnc.vjp(cache.attend, **kw)
    # the queries sit at positions 4..6 (bottom-right); block_mask's query
    # blocks count from the first new query, its key blocks from position 0
    s = kw["query"] @ np.swapaxes(x, -1, -2) / np.sqrt(3)
    i, j = np.arange(4, 7)[:, None], np.arange(7)[None, :]
    ok = ref.block_masks((1, 2, 3, 7), False, segment_ids=kw["segment_ids"], block_mask=bm, block_size=(2, 2))
    ok &= (j <= i) | (j < 2)
    p = np.where(ok, 1 / (1 + np.exp(-(s - np.log(7)))), 0)
    assert (p > 0).any() and not ok.all()
    close(out, p @ x, 1e-12, "KVCache.attend with the block masks")
    cot = [rng.standard_normal(out.shape)]
    fd_check(cache.attend, kw, cot, pb(*cot), wrt=["query"])
