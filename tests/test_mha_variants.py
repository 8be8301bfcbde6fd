"""Issue 30's kernel options (alibi_slopes, window, softcap, sinks) in
attnc.multi_head_attention and attnc.nn.MultiheadAttention: against a NumPy
float64 multi-head attention around the options' reference
(tests/reference/mha_variants_ref.py), against Hugging Face's gpt-oss
attention (sinks and a sliding window) loaded with the same weights, finite
differences for the new gradients (sinks, ALiBi's slopes), thread-count
independence, and the errors."""

import numpy as np
import pytest

import attnc
from helpers import close, same_bits
from reference import mha_variants_ref
from reference import sdpa_variants_ref as ref

B, L, E, H = 2, 7, 12, 3
OPTIONS = {
    "alibi": {"alibi_slopes": ref.alibi_slopes(H)},
    "window": {"window": (2, 1)},
    "softcap": {"softcap": 0.7},
    "sinks": {"sinks": np.array([0.5, -1.0, 2.0])},
    "all": {"alibi_slopes": ref.alibi_slopes(H), "window": (3, 0), "softcap": 1.5, "sinks": np.array([0.5, -1.0, 2.0])},
}


def _params(rng, kv_heads=H):
    ekv = kv_heads * (E // H)
    a = lambda *s: rng.standard_normal(s) * 0.6  # noqa: E731
    return {
        "in_proj_weight": a(E + 2 * ekv, E),
        "in_proj_bias": a(E + 2 * ekv),
        "out_proj_weight": a(E, E),
        "out_proj_bias": a(E),
    }


def mha_ref(x, p, kv_heads, options):
    """The NumPy float64 reference: (output (B, L, E), weights (B, H, L, L))."""
    return mha_variants_ref.mha(x, *p.values(), H, kv_heads, **options)


def _call(x, p, kv_heads, dtype, **kw):
    p = {n: a.astype(dtype) for n, a in p.items()}
    return attnc.multi_head_attention(
        x.astype(dtype), x.astype(dtype), x.astype(dtype), H, *p.values(), num_kv_heads=kv_heads, **kw
    )


def _typed(options, dtype):
    return {n: o.astype(dtype) if isinstance(o, np.ndarray) else o for n, o in options.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_functional_matches_the_reference(name, dtype, rng):
    kv_heads = 1 if name == "all" else H  # multi-query attention with every option
    x, p = rng.standard_normal((B, L, E)), _params(rng, kv_heads)
    want, want_w = mha_ref(x, p, kv_heads, OPTIONS[name])
    out, w = _call(x, p, kv_heads, dtype, average_attn_weights=False, **_typed(OPTIONS[name], dtype))
    rel = 1e-5 if dtype == np.float32 else 1e-12
    close(out, want, rel, "output")
    close(w, want_w, rel, "weights")
    assert out.dtype == dtype


def test_gradients_match_finite_differences(rng, fd_check):
    """Every input's gradient, sinks' and the slopes' included, with every
    option on and appended keys (bias_k/bias_v, a zero key)."""
    a = lambda *s: rng.standard_normal(s) * 0.5  # noqa: E731
    kw = dict(
        query=a(1, 4, 6),
        key=a(1, 5, 6),
        value=a(1, 5, 6),
        in_proj_weight=a(18, 6),
        in_proj_bias=a(18),
        out_proj_weight=a(6, 6),
        out_proj_bias=a(6),
        bias_k=a(1, 1, 6),
        bias_v=a(1, 1, 6),
        sinks=a(2),
        alibi_slopes=np.array([0.3, 0.1]),
    )
    fixed = dict(window=(2, 1), softcap=0.8, add_zero_attn=True, average_attn_weights=False)

    def fn(**x):
        x = dict(x)
        q, k, v = x.pop("query"), x.pop("key"), x.pop("value")
        w, b, wo, bo = (x.pop(n) for n in ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias"))
        return attnc.multi_head_attention(q, k, v, 2, w, b, wo, bo, **x, **fixed)

    args = [kw[n] for n in ("query", "key", "value")] + [2] + [kw[n] for n in list(kw)[3:7]]
    rest = {n: kw[n] for n in ("bias_k", "bias_v", "sinks", "alibi_slopes")}
    (out, w), pullback = attnc.vjp(attnc.multi_head_attention, *args, **rest, **fixed)
    cots = [rng.standard_normal(out.shape), rng.standard_normal(w.shape)]
    grads = pullback(*cots)
    assert set(grads) == set(kw)
    assert np.abs(grads["sinks"]).min() > 0 and np.abs(grads["alibi_slopes"]).min() > 0
    fd_check(fn, kw, cots, grads, rtol=1e-6, atol=1e-8)


def test_module_options_and_sinks_parameter(rng, fd_check):
    """The module's constructor options give the functional call's results;
    its sinks are a parameter whose attnc.vjp gradient is keyed "sinks"."""
    m = attnc.nn.MultiheadAttention(E, H, sinks=True, alibi=True, window=(2, 0), softcap=2.0, dtype=np.float64)
    m.load_state_dict({"sinks": rng.standard_normal(H)}, strict=False)
    x = rng.standard_normal((B, L, E))
    sd = m.state_dict()
    assert list(sd) == ["in_proj_weight", "in_proj_bias", "sinks", "out_proj.weight", "out_proj.bias"]
    p = {n: sd[n] for n in ("in_proj_weight", "in_proj_bias")}
    p.update(out_proj_weight=sd["out_proj.weight"], out_proj_bias=sd["out_proj.bias"])
    options = dict(alibi_slopes=attnc.alibi_slopes(H), window=(2, 0), softcap=2.0, sinks=sd["sinks"])
    want, _ = mha_ref(x, p, H, options)
    (out, _), pullback = attnc.vjp(m, x, x, x, need_weights=False)
    close(out, want, 1e-12, "module output")
    cot = rng.standard_normal(out.shape)
    grads = pullback(cot, None)
    assert set(grads) == {"query", "key", "value", *sd}

    def fn(sinks):
        return attnc.multi_head_attention(x, x, x, H, *p.values(), **{**options, "sinks": sinks})[0]

    fd_check(fn, {"sinks": sd["sinks"]}, [cot], {"sinks": grads["sinks"]}, rtol=1e-6, atol=1e-8)
    with pytest.raises(TypeError, match="window is set by the module"):
        m(x, x, x, window=(1, 1))


def test_matches_hugging_face_gpt_oss_attention(rng, torch):
    """Sinks and a sliding window as gpt-oss has them (HF's GptOssAttention,
    eager, rotary turned off by cos = 1, sin = 0), with the same weights."""
    from transformers.models.gpt_oss import modeling_gpt_oss as oss

    W = 3
    cfg = oss.GptOssConfig(
        hidden_size=E, num_attention_heads=H, num_key_value_heads=1, head_dim=E // H, attention_bias=True
    )
    cfg._attn_implementation = "eager"
    hf = oss.GptOssAttention(cfg, 0).double().eval()
    with torch.no_grad():
        for t in hf.parameters():
            t.copy_(torch.randn(t.shape, dtype=torch.float64) * 0.5)
    x = rng.standard_normal((B, L, E))
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    mask = np.where((j <= i) & (j > i - W), 0.0, -np.inf)  # HF's sliding window W: the last W keys
    ones = torch.ones(B, L, E // H // 2, dtype=torch.float64)  # gpt-oss rotates half-split pairs
    with torch.no_grad():
        want, _ = hf(torch.from_numpy(x), (ones, 0 * ones), torch.from_numpy(mask)[None, None])
    m = attnc.nn.MultiheadAttention(E, H, num_kv_heads=1, sinks=True, window=(W - 1, 0), dtype=np.float64)
    sd = {n: t.detach().numpy() for n, t in hf.state_dict().items()}
    m.load_state_dict(
        {
            "q_proj_weight": sd["q_proj.weight"],
            "k_proj_weight": sd["k_proj.weight"],
            "v_proj_weight": sd["v_proj.weight"],
            "in_proj_bias": np.concatenate([sd["q_proj.bias"], sd["k_proj.bias"], sd["v_proj.bias"]]),
            "sinks": sd["sinks"],
            "out_proj.weight": sd["o_proj.weight"],
            "out_proj.bias": sd["o_proj.bias"],
        }
    )
    close(m(x, x, x, need_weights=False)[0], want.numpy(), 1e-12, "gpt-oss attention")


def test_thread_counts_give_identical_bits(rng, restore_threads):
    x, p = rng.standard_normal((B, 40, E)).astype(np.float32), _params(rng)
    p = {n: a.astype(np.float32) for n, a in p.items()}
    kw = _typed(OPTIONS["all"], np.float32)
    results = []
    for n in (1, 2):
        attnc.set_num_threads(n)
        (out, w), pullback = attnc.vjp(attnc.multi_head_attention, x, x, x, H, *p.values(), **kw)
        results.append((out, w, pullback(np.ones_like(out), np.ones_like(w))))
    (o1, w1, g1), (o2, w2, g2) = results
    same_bits(o1, o2, "output")
    same_bits(w1, w2, "weights")
    for name in g1:
        same_bits(g1[name], g2[name], name)


@pytest.mark.parametrize(
    "kw, error, match",
    [
        ({"sinks": np.zeros(2)}, ValueError, r"sinks must have shape \(3,\)"),
        ({"alibi_slopes": np.zeros((3, 1))}, ValueError, "alibi_slopes must have shape"),
        ({"window": 3}, TypeError, "window must be a pair"),
        ({"softcap": -1.0}, ValueError, "softcap must be a finite float > 0"),
        ({"sinks": np.zeros(3, np.float32)}, TypeError, "sinks"),
    ],
)
def test_bad_options_are_named(kw, error, match, rng):
    x, p = rng.standard_normal((B, L, E)), _params(rng)
    with pytest.raises(error, match=match):
        attnc.multi_head_attention(x, x, x, H, *p.values(), **kw)
    module_kw = {"window": kw["window"]} if "window" in kw else {"softcap": kw["softcap"]} if "softcap" in kw else None
    if module_kw is not None:  # the module checks its settings when built
        with pytest.raises(error, match=match):
            attnc.nn.MultiheadAttention(E, H, **module_kw)
