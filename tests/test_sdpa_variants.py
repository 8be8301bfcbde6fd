"""The options of today's models in attnc.scaled_dot_product_attention (ALiBi,
sliding windows, soft-capping, attention sinks) and attnc.alibi_slopes:
against the NumPy float64 reference (tests/reference/sdpa_variants_ref.py),
torch's flex_attention (CPU, forward: its backward does not run on the CPU),
finite differences, fully masked rows, errors, threads, float32 against
float64."""

import warnings

import numpy as np
import pytest
from test_sdpa import check_thread_bits

import attnc
from helpers import close, same_bits
from reference import sdpa_variants_ref as ref

DTYPES = [np.float32, np.float64]
REL = {np.float32: 1e-5, np.float64: 1e-12}


def sdpa(*args, **kwargs):
    return attnc.scaled_dot_product_attention(*args, **kwargs)


def _qkv(rng, lead, h, hkv, L, S, E, Ev, dtype=np.float64):
    q = rng.standard_normal(lead + (h, L, E)).astype(dtype)
    k = rng.standard_normal(lead + (hkv, S, E)).astype(dtype)
    v = rng.standard_normal(lead + (hkv, S, Ev)).astype(dtype)
    return q, k, v


def _options(name, h, dtype, rng, L=None, S=None):
    """The keyword arguments of one named combination of options."""
    slopes = attnc.alibi_slopes(h, dtype)
    sinks = rng.standard_normal(h).astype(dtype)
    L = L or 8
    S = S or 8
    return {
        "alibi": {"alibi_slopes": slopes},
        "window": {"window": (3, 5)},
        "window_left": {"window": (4, None)},
        "window_right": {"window": (None, 2)},
        "window_causal": {"window": (6, None), "is_causal": True},
        "softcap": {"softcap": 0.7},
        "sinks": {"sinks": sinks},
        "alibi_window_causal": {"alibi_slopes": slopes, "window": (5, 0), "is_causal": True},
        "softcap_sinks": {"softcap": 1.5, "sinks": sinks},
        "all_float_mask": {
            "alibi_slopes": slopes,
            "window": (7, 2),
            "softcap": 2.0,
            "sinks": sinks,
            "attn_mask": rng.standard_normal((L, S)).astype(dtype),
        },
        "all_bool_mask": {
            "alibi_slopes": slopes,
            "window": (2, 9),
            "softcap": 0.9,
            "sinks": sinks,
            "attn_mask": rng.random((1, L, S)) < 0.8,
        },
    }[name]


NAMES = [
    "alibi",
    "window",
    "window_left",
    "window_right",
    "window_causal",
    "softcap",
    "sinks",
    "alibi_window_causal",
    "softcap_sinks",
    "all_float_mask",
    "all_bool_mask",
]


def _ref(q, k, v, kw, **more):
    """The reference's output (and weights) for attnc's arguments."""
    return ref.scaled_dot_product_attention(q, k, v, **{n: a for n, a in kw.items() if n != "enable_gqa"}, **more)


# --------------------------------------------------------------------------- alibi_slopes


def test_alibi_slopes_follow_the_paper():
    for n in range(70):
        got = attnc.alibi_slopes(n)
        assert got.shape == (n,) and got.dtype == np.float64
        np.testing.assert_allclose(got, ref.alibi_slopes(n), rtol=1e-15, atol=0, err_msg=f"{n} heads")
    # the paper's example (section 3): 8 heads, 1/2, 1/4, ..., 1/256
    np.testing.assert_array_equal(attnc.alibi_slopes(8), 0.5 ** np.arange(1, 9))
    # the reference implementation's form (ofirpress/attention_with_linear_biases,
    # fairseq/models/transformer.py): start * start**i with start = 2^(-2^-(log2 n - 3)),
    # for n not a power of two the slopes of 2m (m = 2^floor(log2 n)) taken [0::2]
    for n in (1, 2, 3, 5, 6, 12, 20, 24, 40, 64):
        m = 2 ** int(np.floor(np.log2(n)))
        start, start2 = 2 ** (-(2 ** -(np.log2(m) - 3))), 2 ** (-(2 ** -(np.log2(2 * m) - 3)))
        want = [start * start**i for i in range(m)] + [start2 * start2**i for i in range(2 * m)][0::2][: n - m]
        np.testing.assert_allclose(attnc.alibi_slopes(n), want, rtol=1e-14, err_msg=f"{n} heads")
    assert attnc.alibi_slopes(12, np.float32).dtype == np.float32


@pytest.mark.parametrize("bad", [-1, 2.0, True, "4"])
def test_alibi_slopes_bad_heads(bad):
    with pytest.raises(ValueError, match="heads"):
        attnc.alibi_slopes(bad)


def test_alibi_slopes_bad_dtype():
    with pytest.raises(TypeError, match="dtype"):
        attnc.alibi_slopes(4, np.int32)


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(1, 4, 2, 9, 9, 5, 3), (2, 4, 2, 300, 530, 16, 8), (1, 2, 1, 600, 260, 8, 8)])
def test_forward_matches_reference(name, shape, dtype, rng):
    b, h, hkv, L, S, E, Ev = shape
    q, k, v = _qkv(rng, (b,), h, hkv, L, S, E, Ev, dtype)
    kw = _options(name, h, dtype, rng, L, S)
    out, w = sdpa(q, k, v, enable_gqa=True, return_weights=True, **kw)
    want_out, want_w = _ref(q, k, v, kw, return_weights=True)
    close(out, want_out, REL[dtype] * 10, f"{name} output")
    close(w, want_w, REL[dtype] * 10, f"{name} weights")
    assert out.dtype == w.dtype == dtype
    close(sdpa(q, k, v, enable_gqa=True, **kw), out, 0, f"{name} output without weights")


@pytest.mark.parametrize("name", NAMES)
def test_float32_within_1e5_of_float64(name, rng):
    q, k, v = _qkv(rng, (2,), 4, 2, 260, 300, 32, 16)
    kw = _options(name, 4, np.float64, rng, 260, 300)
    kw32 = {
        n: a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a for n, a in kw.items()
    }
    a32 = [x.astype(np.float32) for x in (q, k, v)]
    out64, w64 = sdpa(q, k, v, enable_gqa=True, return_weights=True, **kw)
    out32, w32 = sdpa(*a32, enable_gqa=True, return_weights=True, **kw32)
    close(out32, out64, 1e-5, f"{name} output")
    close(w32, w64, 1e-5, f"{name} weights")


def test_sink_rows_sum_below_one(rng):
    q, k, v = _qkv(rng, (1,), 2, 2, 5, 7, 4, 3)
    sinks = np.array([0.0, 3.0])
    _, w = sdpa(q, k, v, sinks=sinks, return_weights=True)
    _, plain = sdpa(q, k, v, return_weights=True)
    total = w.sum(-1)
    assert (total < 1).all() and (total > 0).all()
    # the sink's share: 1 - sum_j p_ij = exp(sink) / (exp(sink) + sum_j exp(s_ij))
    np.testing.assert_allclose(w, plain * total[..., None], rtol=1e-12)


def test_window_is_causal_with_zero_right(rng):
    q, k, v = _qkv(rng, (1,), 2, 2, 40, 40, 4, 3)
    same_bits(sdpa(q, k, v, window=(None, 0)), sdpa(q, k, v, is_causal=True), "window (None, 0)")
    same_bits(sdpa(q, k, v, window=(None, None)), sdpa(q, k, v), "window (None, None)")


# --------------------------------------------------------------------------- torch's flex_attention


def _flex(torch, q, k, v, kw):
    """torch's flex_attention (eager, CPU, float64) with the options as score
    and mask modifications; sinks through its log-sum-exp: the output with a
    sink is out * l / (l + exp(sink)) = out * sigmoid(lse - sink)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    t = [torch.tensor(np.asarray(a, np.float64)) for a in (q, k, v)]
    L, S = q.shape[-2], k.shape[-2]
    slopes = kw.get("alibi_slopes")
    slopes = None if slopes is None else torch.tensor(np.asarray(slopes, np.float64))
    cap, window = kw.get("softcap"), kw.get("window")

    def score_mod(score, b, h, qi, kv):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            score = score + slopes[h] * (kv - qi)
        return score

    def mask_mod(b, h, qi, kv):
        ok = qi >= 0  # every key
        if kw.get("is_causal"):
            ok = ok & (kv <= qi)
        if window is not None and window[0] is not None:
            ok = ok & (kv >= qi - window[0])
        if window is not None and window[1] is not None:
            ok = ok & (kv <= qi + window[1])
        return ok

    block_mask = create_block_mask(mask_mod, None, None, L, S, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile()": the eager form is the point
        out, lse = flex_attention(
            *t, score_mod=score_mod, block_mask=block_mask, enable_gqa=q.shape[-3] != k.shape[-3], return_lse=True
        )
    if kw.get("sinks") is not None:
        sink = torch.tensor(np.asarray(kw["sinks"], np.float64))[:, None, None]
        out = out * torch.sigmoid(lse[..., None] - sink)
    return out.numpy()


FLEX = ["alibi", "window", "window_left", "window_right", "window_causal", "softcap", "sinks"]
FLEX += ["alibi_window_causal", "softcap_sinks"]


@pytest.mark.parametrize("name", FLEX)
@pytest.mark.parametrize("shape", [(1, 4, 2, 9, 13, 5, 3), (1, 2, 1, 300, 260, 16, 8)])
def test_forward_matches_flex_attention(name, shape, rng, torch):
    b, h, hkv, L, S, E, Ev = shape
    q, k, v = _qkv(rng, (b,), h, hkv, L, S, E, Ev)
    kw = _options(name, h, np.float64, rng, L, S)
    out = sdpa(q, k, v, enable_gqa=True, **kw)
    close(out, _flex(torch, q, k, v, kw), 1e-12, f"{name} against flex_attention")


# --------------------------------------------------------------------------- gradients


def _fd_case(name, rng):
    q, k, v = _qkv(rng, (1,), 2, 1, 4, 6, 3, 2)
    kw = dict(query=q, key=k, value=v, enable_gqa=True)
    kw.update(_options(name, 2, np.float64, rng, 4, 6))
    return kw


@pytest.mark.parametrize("weights", [False, True], ids=["output", "output_and_weights"])
@pytest.mark.parametrize("name", NAMES)
def test_gradients_match_finite_differences(name, weights, rng, check_vjp):
    kw = _fd_case(name, rng)
    if weights:
        kw["return_weights"] = True
    differentiable = ("sinks", "alibi_slopes", "attn_mask")
    names = ["query", "key", "value"] + [n for n in differentiable if n in kw and kw[n].dtype != bool]
    check_vjp(
        attnc.scaled_dot_product_attention,
        _ref_fn,
        kw,
        rng,
        positional=("query", "key", "value"),
        expect_names=names,
    )


def _ref_fn(query, key, value, enable_gqa=False, **kw):
    return ref.scaled_dot_product_attention(query, key, value, **kw)


@pytest.mark.parametrize("name", ["alibi_window_causal", "softcap_sinks", "all_float_mask"])
def test_large_gradients_match_directional_differences(name, rng):
    """At sizes with several tiles (and the backward's paths): the gradient
    along random directions against central differences of the reference."""
    q, k, v = _qkv(rng, (1,), 2, 1, 300, 530, 8, 4)
    kw = _options(name, 2, np.float64, rng, 300, 530)
    (out, w), pb = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, enable_gqa=True, return_weights=True, **kw)
    dout, dw = rng.standard_normal(out.shape), rng.standard_normal(w.shape)
    grads = pb(dout, dw)
    args = {"query": q, "key": k, "value": v, **kw}
    for n in ["query", "key", "value"] + [n for n in ("sinks", "alibi_slopes", "attn_mask") if n in kw]:
        d = rng.standard_normal(np.shape(args[n]))
        eps = 1e-6

        def loss(x, n=n):
            o, ww = _ref_call(args, n, x)
            return float((o * dout).sum() + (ww * dw).sum())

        numeric = (loss(args[n] + eps * d) - loss(args[n] - eps * d)) / (2 * eps)
        assert abs(float((grads[n] * d).sum()) - numeric) <= 1e-6 * max(1.0, abs(numeric)), (name, n)


def _ref_call(args, name, x):
    a = {**args, name: x}
    q, k, v = a.pop("query"), a.pop("key"), a.pop("value")
    return ref.scaled_dot_product_attention(q, k, v, return_weights=True, **a)


def test_dropout_gradient_with_options(rng, fd_check):
    """With dropout (a fixed seed) the reference has no keep mask to match:
    attnc's own forward, differenced."""
    kw = _fd_case("all_float_mask", rng)
    kw.update(dropout_p=0.3, seed=5)
    out, pb = attnc.vjp(attnc.scaled_dot_product_attention, **kw)
    cot = [rng.standard_normal(out.shape)]
    wrt = ["query", "key", "value", "sinks", "alibi_slopes", "attn_mask"]
    fd_check(attnc.scaled_dot_product_attention, kw, cot, pb(*cot), wrt=wrt)


# --------------------------------------------------------------------------- fully masked rows


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize(
    "kw",
    [
        {"window": (0, 0)},  # rows past the last key see nothing
        {"window": (2, 0), "sinks": np.array([0.5, -1.0])},
        {"window": (1, 1), "alibi_slopes": np.array([0.5, 0.25]), "softcap": 1.0},
    ],
    ids=["window", "window_sinks", "window_alibi_softcap"],
)
def test_fully_masked_rows_are_zero(kw, dtype, rng):
    q, k, v = _qkv(rng, (1,), 2, 2, 300, 130, 4, 3, dtype)  # queries 132.. see no key
    kw = {n: a.astype(dtype) if isinstance(a, np.ndarray) else a for n, a in kw.items()}
    (out, w), pb = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, return_weights=True, **kw)
    dead = slice(132, None)
    assert not out[..., dead, :].any() and not w[..., dead, :].any()
    assert np.isfinite(out).all() and np.isfinite(w).all()
    dout = rng.standard_normal(out.shape).astype(dtype)
    grads = pb(dout, rng.standard_normal(w.shape).astype(dtype))
    assert not grads["query"][..., dead, :].any()
    assert all(np.isfinite(g).all() for g in grads.values())
    only_dead = np.zeros_like(dout)
    only_dead[..., dead, :] = dout[..., dead, :]
    for name, g in pb(only_dead, None).items():
        assert not g.any(), f"{name}: a cotangent on fully masked rows only gives a gradient"


# --------------------------------------------------------------------------- errors


def _err_cases():
    r = np.random.default_rng(0)
    q, k, v = r.standard_normal((2, 4, 5, 8)), r.standard_normal((2, 4, 7, 8)), r.standard_normal((2, 4, 7, 3))
    return {
        "slopes_shape": (ValueError, "alibi_slopes", {"alibi_slopes": np.ones(3)}),
        "slopes_2d": (ValueError, "alibi_slopes", {"alibi_slopes": np.ones((4, 1))}),
        "slopes_dtype": (TypeError, "alibi_slopes", {"alibi_slopes": np.ones(4, np.float32)}),
        "slopes_int": (TypeError, "alibi_slopes", {"alibi_slopes": np.ones(4, np.int64)}),
        "slopes_nan": (ValueError, "alibi_slopes", {"alibi_slopes": np.array([1, np.nan, 1, 1])}),
        "slopes_inf": (ValueError, "alibi_slopes", {"alibi_slopes": np.array([1, 1, 1, np.inf])}),
        "window_negative": (ValueError, "window", {"window": (-1, 2)}),
        "window_negative_right": (ValueError, "window", {"window": (None, -3)}),
        "window_float": (TypeError, "window", {"window": (1.5, 2)}),
        "window_bool": (TypeError, "window", {"window": (True, 2)}),
        "window_int": (TypeError, "window", {"window": 4}),
        "window_triple": (TypeError, "window", {"window": (1, 2, 3)}),
        "softcap_zero": (ValueError, "softcap", {"softcap": 0.0}),
        "softcap_negative": (ValueError, "softcap", {"softcap": -1.0}),
        "softcap_nan": (ValueError, "softcap", {"softcap": float("nan")}),
        "softcap_inf": (ValueError, "softcap", {"softcap": float("inf")}),
        "softcap_str": (TypeError, "softcap", {"softcap": "1"}),
        "sinks_shape": (ValueError, "sinks", {"sinks": np.ones(2)}),
        "sinks_dtype": (TypeError, "sinks", {"sinks": np.ones(4, np.float32)}),
        "sinks_nan": (ValueError, "sinks", {"sinks": np.array([0, 0, np.nan, 0])}),
    }, (q, k, v)


@pytest.mark.parametrize("case", list(_err_cases()[0]))
def test_errors_name_the_argument(case):
    cases, args = _err_cases()
    exc, pattern, kw = cases[case]
    with pytest.raises(exc, match=pattern):
        sdpa(*args, **kw)
    with pytest.raises(exc, match=pattern):
        attnc.vjp(attnc.scaled_dot_product_attention, *args, **kw)


def test_c_checks_the_options(rng):
    """The kernel's own checks, past the Python ones (the binding's options
    dict as a caller of _core might fill it)."""
    from attnc import _core

    q, k, v = _qkv(rng, (1,), 2, 2, 3, 4, 5, 2)
    out, lse = np.empty((1, 2, 3, 2)), np.empty((1, 2, 3))

    def call(**options):
        _core.sdpa_forward(output=out, lse=lse, query=q, key=k, value=v, options={"scale": 1.0, **options})

    with pytest.raises(ValueError, match="alibi_slopes"):
        call(alibi_slopes=np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="alibi_slopes"):
        call(alibi_slopes=np.ones(3))
    with pytest.raises(TypeError, match="sinks"):
        call(sinks=np.ones(2, np.float32))
    with pytest.raises(ValueError, match="window"):
        call(window=True, window_left=-2)
    with pytest.raises(ValueError, match="softcap"):
        call(softcap=-1.0)
    with pytest.raises(ValueError, match="softcap"):
        call(softcap=float("inf"))


def test_inputs_never_modified(rng, assert_unchanged):
    q, k, v = _qkv(rng, (1,), 2, 1, 30, 40, 4, 3)
    kw = _options("all_float_mask", 2, np.float64, rng, 30, 40)
    (out, w), pb = assert_unchanged(
        attnc.vjp, attnc.scaled_dot_product_attention, q, k, v, enable_gqa=True, return_weights=True, **kw
    )
    assert_unchanged(pb, np.ones_like(out), np.ones_like(w))


# --------------------------------------------------------------------------- threads


def _thread_cases(rng):
    f32 = np.float32
    return [
        # one (batch, kv head): the two-part backward; window skips tiles both sides
        (_qkv(rng, (1,), 2, 1, 600, 700, 16, 8, f32), {"window": (200, 30), "alibi_slopes": np.ones(2, f32) / 8}),
        (_qkv(rng, (1,), 1, 1, 100, 290, 16, 16, f32), {"window": (50, None), "sinks": np.ones(1, f32)}),
        (_qkv(rng, (2,), 4, 2, 300, 300, 8, 8), {"softcap": 1.0, "sinks": np.zeros(4), "is_causal": True}),
        (
            _qkv(rng, (2,), 2, 2, 270, 310, 24, 16, f32),
            {"window": (100, 100), "softcap": 0.5, "attn_mask": rng.standard_normal((270, 310)).astype(f32)},
        ),
        (
            _qkv(rng, (1,), 4, 2, 200, 260, 16, 8),
            {"enable_gqa": True, "alibi_slopes": attnc.alibi_slopes(4), "dropout_p": 0.2, "seed": 7},
        ),
    ]


def test_thread_counts_give_identical_bits(rng, restore_threads):
    cases = _thread_cases(rng)
    for _, kw in cases:
        kw.setdefault("enable_gqa", True)
    check_thread_bits(cases)


# --------------------------------------------------------------------------- KVCache.attend


def test_kv_cache_decoding_matches_one_call(rng):
    """Queries sit at their own positions (bottom-right): decoding step by
    step gives what one causal call over the whole sequence gives."""
    q, k, v = _qkv(rng, (1,), 4, 2, 40, 40, 8, 4)
    kw = {"alibi_slopes": attnc.alibi_slopes(4), "window": (6, 0), "softcap": 2.0, "sinks": rng.standard_normal(4)}
    whole = sdpa(q, k, v, is_causal=True, enable_gqa=True, **kw)
    cache = attnc.KVCache(1, 2, capacity=40, head_dim=8, value_dim=4, dtype=np.float64)
    steps = []
    for t in range(0, 40, 5):  # five positions at a time
        cache.append(k[:, :, t : t + 5], v[:, :, t : t + 5])
        steps.append(cache.attend(q[:, :, t : t + 5], **kw))
    close(np.concatenate(steps, axis=2), whole, 1e-12, "decoded against one call")


def test_kv_cache_gradients_match_finite_differences(rng, fd_check):
    cache = attnc.KVCache(1, 2, capacity=8, head_dim=3, dtype=np.float64)
    x = rng.standard_normal((1, 2, 7, 3))
    cache.append(x, x)
    kw = {"query": rng.standard_normal((1, 2, 3, 3)), "alibi_slopes": np.array([0.5, 0.1]), "window": (3, 0)}
    kw.update(softcap=1.5, sinks=np.array([0.3, -0.2]))
    out, pb = attnc.vjp(cache.attend, **kw)
    cot = [rng.standard_normal(out.shape)]
    grads = pb(*cot)
    assert set(grads) == {"query", "keys", "values", "alibi_slopes", "sinks"}
    fd_check(cache.attend, kw, cot, grads, wrt=["query", "alibi_slopes", "sinks"])
