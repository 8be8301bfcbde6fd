"""Issue 30's kernel options in the C Transformer layers and the models on
them: attnc.nn.TransformerEncoderLayer / DecoderLayer with sinks (a learned
parameter per head), ALiBi, a window and softcap against a NumPy float64
layer (tests/reference/mha_variants_ref.py), the sinks' and every other
gradient by finite differences, cached decoding (attnc.nn.decode through
GPT.generate) against the full forward for each positional and with a
window, thread-count independence, state round trips and errors."""

import numpy as np
import pytest

import attnc
from helpers import close, same_bits
from reference import mha_variants_ref
from reference import sdpa_variants_ref as ref

E, H, F = 8, 2, 12
LAYER_OPTIONS = {
    "sinks": {"sinks": True},
    "alibi": {"alibi": True},
    "window": {"window": (2, 1)},
    "softcap": {"softcap": 0.9},
    "all_gqa": {"sinks": True, "alibi": True, "window": (3, 0), "softcap": 1.5, "num_kv_heads": 1},
}


def _causal(L):
    """The causal mask is_causal=True promises (torch's meaning: True = not allowed)."""
    return np.triu(np.ones((L, L), bool), k=1)


def _layer(options, dtype=np.float64, norm_first=False, seed=0, cls=attnc.nn.TransformerEncoderLayer):
    layer = cls(E, H, F, dropout=0.0, norm_first=norm_first, dtype=dtype, seed=seed, **options).eval()
    rng = np.random.default_rng(seed)
    layer._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.5 if name.endswith("sinks") else None)
    return layer


def _reference_options(layer):
    """The layer's settings as the reference's keyword arguments."""
    attn = layer.self_attn
    out = {"window": attn.window, "softcap": attn.softcap}
    if attn.alibi:
        out["alibi_slopes"] = ref.alibi_slopes(H)
    if attn.sinks is not None:
        out["sinks"] = attn.sinks
    return {n: v for n, v in out.items() if v is not None}


def _stacked(layer):
    """The layer's state_dict with grouped projections stacked as in_proj_weight."""
    sd = dict(layer.state_dict())
    if "self_attn.q_proj_weight" in sd:
        parts = [sd.pop(f"self_attn.{c}_proj_weight") for c in "qkv"]
        sd["self_attn.in_proj_weight"] = np.concatenate(parts)
    return sd


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
@pytest.mark.parametrize("name", sorted(LAYER_OPTIONS))
def test_encoder_layer_matches_the_reference(name, norm_first, rng):
    layer = _layer(LAYER_OPTIONS[name], norm_first=norm_first)
    x = rng.standard_normal((2, 7, E))
    causal = name == "all_gqa"
    want = mha_variants_ref.encoder_layer(
        _stacked(layer),
        x,
        H,
        layer.num_kv_heads,
        norm_first=norm_first,
        is_causal=causal,
        **_reference_options(layer),
    )
    m = {"src_mask": _causal(7), "is_causal": True} if causal else {}
    close(layer(x, **m), want, 1e-12, name)
    x32 = x.astype(np.float32)
    close(layer.to(np.float32)(x32, **m), want, 1e-5, name + " float32")


def _fd_grads(layer, call, x, cot, names, eps=1e-6):
    """Central differences of sum(call(x) * cot) in the named parameters (every
    entry) and in x (a few entries)."""
    sd = layer.state_dict()
    out = {}
    for name in names:
        p, g = sd[name], np.zeros(sd[name].shape)
        for i in np.ndindex(p.shape) if p.size <= 4 else [np.unravel_index(k, p.shape) for k in (0, p.size // 2)]:
            e = np.zeros_like(p)
            e[i] = eps
            layer.load_state_dict({name: p + e}, strict=False)
            up = np.sum(call(x) * cot)
            layer.load_state_dict({name: p - e}, strict=False)
            down = np.sum(call(x) * cot)
            g[i] = (up - down) / (2 * eps)
        layer.load_state_dict({name: p}, strict=False)
        out[name] = g
    return out


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_layer_gradients_match_finite_differences(decoder, rng):
    """Every option on: the sinks' gradient (every head) and a parameter of each
    kind, and the input's, against central differences."""
    cls = attnc.nn.TransformerDecoderLayer if decoder else attnc.nn.TransformerEncoderLayer
    layer = _layer(LAYER_OPTIONS["all_gqa"], norm_first=decoder, cls=cls)
    x = rng.standard_normal((2, 5, E))
    memory = rng.standard_normal((2, 3, E))
    args = (x, memory) if decoder else (x,)
    causal = _causal(5)
    kw = {"tgt_mask": causal, "tgt_is_causal": True} if decoder else {"src_mask": causal, "is_causal": True}
    out, pullback = attnc.vjp(layer, *args, **kw)
    cot = rng.standard_normal(out.shape)
    grads = pullback(cot)
    assert np.abs(grads["self_attn.sinks"]).min() > 0
    names = ["self_attn.sinks", "self_attn.q_proj_weight", "self_attn.k_proj_weight", "linear1.weight"]
    want = _fd_grads(layer, lambda x: layer(x, *args[1:], **kw), x, cot, names)
    for name in names:
        mask = want[name] != 0
        close(grads[name][mask], want[name][mask], 1e-7, name)
    first = "tgt" if decoder else "src"
    e = np.zeros_like(x)
    e[1, 2, 3] = 1e-6
    fd = (np.sum(layer(x + e, *args[1:], **kw) * cot) - np.sum(layer(x - e, *args[1:], **kw) * cot)) / 2e-6
    assert grads[first][1, 2, 3] == pytest.approx(fd, rel=1e-6, abs=1e-9)


def _gpt(positional, **kw):
    m = attnc.models.GPT(11, 24, 2, 2, 8, dropout=0.0, positional=positional, dtype=np.float64, seed=0, **kw)
    rng = np.random.default_rng(1)
    m._initialise(lambda name, p: rng.standard_normal(p.shape) * (0.5 if p.ndim == 2 else 0.3))
    return m.eval()


@pytest.mark.parametrize(
    "positional, kw",
    [
        ("learned", {"window": (3, 0), "sinks": True}),
        ("rope", {"window": (2, 0)}),
        ("alibi", {}),
        ("alibi", {"window": (3, 0), "sinks": True, "softcap": 2.0}),
        ("sinusoidal", {"sinks": True}),
    ],
    ids=["learned_window_sinks", "rope_window", "alibi", "alibi_window_sinks_softcap", "sinusoidal_sinks"],
)
def test_gpt_cached_generation_equals_the_full_forward(positional, kw, rng):
    """The C decoder's cached steps (positions offset by the cache's length,
    ALiBi's distance and the window counted from the absolute position) pick
    the tokens the full forward picks, step by step, past the window."""
    m = _gpt(positional, **kw)
    idx = rng.integers(0, 11, (3, 5))
    new = m.generate(idx, 8)
    seq = idx
    for _ in range(8):
        seq = np.concatenate([seq, m(seq)[:, -1].argmax(-1)[:, None]], axis=1)
    assert np.array_equal(new, seq[:, 5:])
    # the options change the model: the same weights without them give other logits
    plain = attnc.models.GPT(11, 24, 2, 2, 8, dropout=0.0, positional="learned", dtype=np.float64, seed=0).eval()
    plain.load_state_dict(m.state_dict(), strict=False)
    assert not np.allclose(plain(seq), m(seq))


def test_gpt_positionals_against_the_reference(rng):
    """One layer with ALiBi and a window, and the sinusoidal table: the GPT's
    logits from the NumPy layer (pre-norm, causal) and its own embeddings."""
    for positional, kw in (("alibi", {"window": (2, 0)}), ("sinusoidal", {})):
        m = attnc.models.GPT(9, 10, 1, 2, 8, dropout=0.0, positional=positional, dtype=np.float64, seed=2, **kw)
        m = m.eval()
        sd = m.state_dict()
        assert "wpe.weight" not in sd
        idx = rng.integers(0, 9, (2, 6))
        x = sd["wte.weight"][idx]
        if positional == "sinusoidal":
            i, k = np.arange(6)[:, None], np.arange(4)[None, :]
            angle = i / 10000.0 ** (2 * k / 8)
            x = x + np.stack([np.sin(angle), np.cos(angle)], -1).reshape(6, 8)
        layer = {n.split("encoder.layers.0.")[1]: a for n, a in sd.items() if n.startswith("encoder.layers.0.")}
        options = {"alibi_slopes": ref.alibi_slopes(2), **kw} if positional == "alibi" else {}
        h = mha_variants_ref.encoder_layer(layer, x, 2, norm_first=True, is_causal=True, activation="gelu", **options)
        h = mha_variants_ref.tr._ln(sd, "ln_f", h, 1e-5)
        close(m(idx), h @ sd["lm_head.weight"].T, 1e-12, positional)


def test_thread_counts_give_identical_bits(rng, restore_threads):
    layer = _layer(LAYER_OPTIONS["all_gqa"], dtype=np.float32)
    x = rng.standard_normal((2, 70, E)).astype(np.float32)
    results = []
    for n in (1, 2):
        attnc.set_num_threads(n)
        out, pullback = attnc.vjp(layer, x, _causal(70), is_causal=True)
        results.append((out, pullback(np.ones_like(out))))
    same_bits(results[0][0], results[1][0], "output")
    for name in results[0][1]:
        same_bits(results[0][1][name], results[1][1][name], name)


def test_without_options_the_layer_is_unchanged(rng):
    """A layer built with every option off computes bit for bit what a
    layer without the new arguments computes (the same seed)."""
    x = rng.standard_normal((2, 5, E)).astype(np.float32)
    a = attnc.nn.TransformerEncoderLayer(E, H, F, dropout=0.0, seed=3).eval()
    b = attnc.nn.TransformerEncoderLayer(E, H, F, dropout=0.0, seed=3, sinks=False, window=None).eval()
    same_bits(a(x), b(x), "output")
    assert list(a.state_dict()) == list(b.state_dict())


def test_state_round_trips(tmp_path, rng):
    m = _gpt("alibi", window=(3, 0), sinks=True, softcap=5.0)
    attnc.save(tmp_path / "m.npz", m)
    back = attnc.load(tmp_path / "m.npz")
    idx = rng.integers(0, 11, (2, 6))
    same_bits(back(idx), m(idx), "logits")
    assert "encoder.layers.1.self_attn.sinks" in back.state_dict()


@pytest.mark.parametrize(
    "kw, error, match",
    [
        ({"window": (-1, 0)}, ValueError, "window's left side must be >= 0"),
        ({"softcap": 0.0}, ValueError, "softcap must be a finite float > 0"),
        ({"positional": "alibi2"}, ValueError, "positional"),
    ],
)
def test_bad_settings_are_named(kw, error, match):
    with pytest.raises(error, match=match):
        attnc.models.GPT(5, 8, 1, 2, 8, **kw)


def test_wrong_sinks_in_the_c_layer_are_named(rng):
    layer = _layer({"sinks": True})
    x = rng.standard_normal((1, 3, E))
    params = layer._params()
    params["self_attn.sinks"] = np.zeros(3)
    config = layer._layer_config(False)
    with pytest.raises(ValueError, match="self_attn.sinks"):
        attnc._core.layer_forward(
            output=np.empty_like(x),
            weights_self=None,
            weights_cross=None,
            saved=np.empty(10_000),
            input=x,
            memory=None,
            params=params,
            **config,
            attn_mask=None,
            key_padding_mask=None,
            is_causal=False,
            memory_mask=None,
            memory_key_padding_mask=None,
            memory_is_causal=False,
        )
