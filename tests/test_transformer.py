"""attnc.nn.TransformerEncoderLayer / TransformerDecoderLayer / TransformerEncoder /
TransformerDecoder / Transformer against torch 2.13 (batch_first=True) loaded with the
same state dict: outputs across configurations (norm_first, activation, bias) and mask
kinds, state dict round trips both ways, gradients against torch autograd and central
finite differences (also through training-mode dropout), per-head attention weights
against an independent NumPy float64 reference (tests/reference/transformer_ref.py,
itself checked against torch), dropout seeding, argument errors, inputs never modified,
unbatched and non-contiguous inputs, thread-count independence, the square subsequent
mask, and attnc.save / attnc.load.

Mask scenarios rotate over the (configuration, dtype) cases (see rotating()) so that every
scenario runs in both dtypes without running every combination: the file takes ~10 s."""

import itertools
import warnings

import numpy as np
import pytest

import attnc
from attnc import nn
from helpers import close, same_bits
from reference import transformer_ref as ref

B, T, S, E, H, FF = 2, 5, 7, 16, 4, 32  # batch, target length, source length, d_model, heads, ff
NL = 2  # layers in the stacks
DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
REL = {np.float32: 1e-5, np.float64: 1e-12}  # forward vs torch
GREL = {np.float32: 1e-4, np.float64: 1e-9}  # gradients vs torch autograd

KINDS = ["enc_layer", "dec_layer", "encoder", "decoder", "transformer"]
# the inputs of each kind, in positional order
INPUTS = {
    "enc_layer": ("src",),
    "encoder": ("src",),
    "dec_layer": ("tgt", "memory"),
    "decoder": ("tgt", "memory"),
    "transformer": ("src", "tgt"),
}
LENGTH = {"src": S, "tgt": T, "memory": S}

CFGS = [
    dict(norm_first=nf, activation=act, bias=bias)
    for nf, act, bias in itertools.product([False, True], ["relu", "gelu"], [True, False])
]
CFG_IDS = [
    f"{'pre' if c['norm_first'] else 'post'}-{c['activation']}-{'bias' if c['bias'] else 'nobias'}" for c in CFGS
]


def _final_norm(cfg):
    """TransformerEncoder / TransformerDecoder get a final LayerNorm when pre-norm
    (so both variants are covered); Transformer always has both."""
    return cfg["norm_first"]


def _tdtype(torch, dtype):
    return torch.float64 if dtype == np.float64 else torch.float32


# --------------------------------------------------------------------------- modules


def torch_module(torch, kind, cfg, dtype, seed=0, eps=1e-5, randomise=True):
    """A torch module with random parameters (norm weights near 1), in eval mode."""
    tdt = _tdtype(torch, dtype)
    kw = dict(
        dim_feedforward=FF,
        dropout=0.1,
        activation=cfg["activation"],
        layer_norm_eps=eps,
        batch_first=True,
        norm_first=cfg["norm_first"],
        bias=cfg["bias"],
        dtype=tdt,
    )
    tnn = torch.nn
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # enable_nested_tensor with norm_first
        if kind == "enc_layer":
            tm = tnn.TransformerEncoderLayer(E, H, **kw)
        elif kind == "dec_layer":
            tm = tnn.TransformerDecoderLayer(E, H, **kw)
        elif kind == "encoder":
            norm = tnn.LayerNorm(E, eps=eps, bias=cfg["bias"], dtype=tdt) if _final_norm(cfg) else None
            tm = tnn.TransformerEncoder(tnn.TransformerEncoderLayer(E, H, **kw), NL, norm=norm)
        elif kind == "decoder":
            norm = tnn.LayerNorm(E, eps=eps, bias=cfg["bias"], dtype=tdt) if _final_norm(cfg) else None
            tm = tnn.TransformerDecoder(tnn.TransformerDecoderLayer(E, H, **kw), NL, norm=norm)
        else:
            tm = tnn.Transformer(E, H, NL, NL, **kw)
    if randomise:
        with torch.no_grad():
            for name, p in tm.named_parameters():
                if name.split(".")[-2].startswith("norm") and name.endswith("weight"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.3 * torch.randn_like(p))
    return tm.eval()


def attnc_module(kind, cfg, dtype, seed=0, dropout=0.1, eps=1e-5, e=E, h=H, ff=FF, nl=NL):
    kw = dict(
        dim_feedforward=ff,
        dropout=dropout,
        activation=cfg["activation"],
        layer_norm_eps=eps,
        norm_first=cfg["norm_first"],
        bias=cfg["bias"],
        dtype=dtype,
        seed=seed,
    )
    if kind == "enc_layer":
        return nn.TransformerEncoderLayer(e, h, **kw)
    if kind == "dec_layer":
        return nn.TransformerDecoderLayer(e, h, **kw)
    if kind in ("encoder", "decoder"):
        layer = (nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer)(e, h, **kw)
        norm = nn.LayerNorm(e, eps=eps, bias=cfg["bias"], dtype=dtype) if _final_norm(cfg) else None
        cls = nn.TransformerEncoder if kind == "encoder" else nn.TransformerDecoder
        return cls(layer, nl, norm=norm)
    return nn.Transformer(e, h, nl, nl, **kw)


def torch_state(tm):
    return {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}


def make_pair(torch, kind, cfg, dtype, seed=0, eps=1e-5):
    tm = torch_module(torch, kind, cfg, dtype, seed, eps)
    sd = torch_state(tm)
    m = attnc_module(kind, cfg, dtype, seed=seed + 100, eps=eps)
    m.load_state_dict(sd)
    m.eval()
    return tm, m, sd


def make_inputs(rng, kind, dtype, batch=B):
    return {n: rng.standard_normal((batch, LENGTH[n], E)).astype(dtype) for n in INPUTS[kind]}


# --------------------------------------------------------------------------- masks

# abstract mask slots: s = encoder self-attention (S, S), t = decoder self-attention (T, T),
# m = decoder cross-attention (T, S); *_kpm key padding (B, keys); *_causal the hint
NAMES = {
    "enc_layer": {"s_mask": "src_mask", "s_kpm": "src_key_padding_mask", "s_causal": "is_causal"},
    "encoder": {"s_mask": "mask", "s_kpm": "src_key_padding_mask", "s_causal": "is_causal"},
    "dec_layer": {
        "t_mask": "tgt_mask",
        "m_mask": "memory_mask",
        "t_kpm": "tgt_key_padding_mask",
        "m_kpm": "memory_key_padding_mask",
        "t_causal": "tgt_is_causal",
        "m_causal": "memory_is_causal",
    },
    "transformer": {
        "s_mask": "src_mask",
        "t_mask": "tgt_mask",
        "m_mask": "memory_mask",
        "s_kpm": "src_key_padding_mask",
        "t_kpm": "tgt_key_padding_mask",
        "m_kpm": "memory_key_padding_mask",
        "s_causal": "src_is_causal",
        "t_causal": "tgt_is_causal",
        "m_causal": "memory_is_causal",
    },
}
NAMES["decoder"] = NAMES["dec_layer"]
SHAPES = {"s": (S, S), "t": (T, T), "m": (T, S)}


def _bool_ignore(rng, shape):
    """A torch-style bool mask (True = ignore) leaving key 0 allowed everywhere, so no
    row is fully masked (torch gives NaN there)."""
    m = rng.random(shape) < 0.4
    m[..., 0] = False
    return m


def _causal_bool(shape):
    return np.triu(np.ones(shape, bool), 1)


def _causal_float(n, dtype):
    return np.triu(np.full((n, n), -np.inf), 1).astype(dtype)


SCENARIOS = {
    "none": {},
    "s_bool": {"s_mask": "bool"},
    "s_float": {"s_mask": "float"},
    "s_bool_3d": {"s_mask": "bool3"},
    "s_float_3d": {"s_mask": "float3"},
    "s_kpm": {"s_kpm": "bool"},
    "s_float_kpm": {"s_mask": "float", "s_kpm": "bool"},
    "s_causal": {"s_mask": "causal", "s_causal": True},
    "s_causal_float_kpm": {"s_mask": "causal_float", "s_causal": True, "s_kpm": "bool"},
    "s_causal_nohint": {"s_mask": "causal"},  # stacks detect it (is_causal=None)
    "s_causal_float_nohint": {"s_mask": "causal_float"},
    "s_almost_causal": {"s_mask": "almost_causal"},  # causal plus one more masked key
    "t_bool": {"t_mask": "bool"},
    "t_float_3d": {"t_mask": "float3"},
    "t_kpm": {"t_kpm": "bool"},
    "t_causal": {"t_mask": "causal", "t_causal": True},
    "t_causal_float": {"t_mask": "causal_float", "t_causal": True},
    "t_causal_float_nohint": {"t_mask": "causal_float"},
    "t_almost_causal_float": {"t_mask": "almost_causal_float"},
    "m_bool": {"m_mask": "bool"},
    "m_float": {"m_mask": "float"},
    "m_bool_3d": {"m_mask": "bool3"},
    "m_kpm": {"m_kpm": "bool"},
    "m_causal": {"m_mask": "causal", "m_causal": True},
    "all": {
        "s_mask": "float3",
        "s_kpm": "bool",
        "t_mask": "causal",
        "t_causal": True,
        "t_kpm": "bool",
        "m_mask": "bool",
        "m_kpm": "bool",
    },
}
CAUSAL_KINDS = ("causal", "causal_float")


def scenarios_for(kind, names=None):
    """The scenarios that use at least one mask slot of kind (plus "none")."""
    have = NAMES[kind]
    out = []
    for name in names or SCENARIOS:
        spec = SCENARIOS[name]
        if not spec or any(k in have for k in spec):
            out.append(name)
    return out


def rotating(kind, names, cfg, dtype, k):
    """ "none" and "all" plus every k-th other scenario, starting at an offset fixed by
    (cfg, dtype): across the 16 (cfg, dtype) cases of a kind every scenario runs in both
    dtypes and several configurations, at 1/k of the cost."""
    scen = scenarios_for(kind, names)
    fixed = [s for s in ("none", "all") if s in scen]
    rest = [s for s in scen if s not in fixed]
    i = CFGS.index(cfg) * len(DTYPES) + DTYPES.index(dtype)
    return fixed + rest[i % k :: k]


def make_call(kind, scenario, rng, dtype):
    """forward() keyword arguments of kind for one scenario; also the names of float
    masks whose torch gradient is meaningful (not replaced by a causal hint)."""
    spec = SCENARIOS[scenario]
    call, diff_masks = {}, set()
    for slot, what in spec.items():
        if slot not in NAMES[kind]:
            continue
        name = NAMES[kind][slot]
        part = slot[0]
        if slot.endswith("_causal"):
            call[name] = what
            continue
        if slot.endswith("_kpm"):
            nkeys = S if part in ("s", "m") else T
            call[name] = _bool_ignore(rng, (B, nkeys))
            continue
        shape = SHAPES[part]
        if what == "bool":
            call[name] = _bool_ignore(rng, shape)
        elif what == "bool3":
            call[name] = _bool_ignore(rng, (B * H,) + shape)
        elif what == "float":
            call[name] = (0.7 * rng.standard_normal(shape)).astype(dtype)
        elif what == "float3":
            call[name] = (0.7 * rng.standard_normal((B * H,) + shape)).astype(dtype)
        elif what == "causal":
            call[name] = _causal_bool(shape)
        elif what == "causal_float":
            call[name] = _causal_float(shape[0], dtype)
        elif what == "almost_causal":
            call[name] = _causal_bool(shape)
            call[name][shape[0] - 1, 1] = True
        elif what == "almost_causal_float":
            call[name] = _causal_float(shape[0], dtype)
            call[name][shape[0] - 1, 1] = -np.inf
        else:
            raise ValueError(what)
        if what in ("float", "float3"):
            diff_masks.add(name)
    return call, diff_masks


# --------------------------------------------------------------------------- running


def torch_forward(torch, tm, kind, inputs, call, grad_masks=()):
    """Run the torch module (grad enabled: keeps torch off its fast paths); returns
    (output tensor, {name: leaf tensor} for inputs and the masks in grad_masks)."""
    leaves = {}

    def t(name, x, grad):
        x = torch.from_numpy(np.array(x))
        if grad:
            x.requires_grad_(True)
            leaves[name] = x
        return x

    args = [t(n, inputs[n], True) for n in INPUTS[kind]]
    kw = {n: (t(n, x, n in grad_masks) if isinstance(x, np.ndarray) else x) for n, x in call.items()}
    for p in tm.parameters():
        p.requires_grad_(True)
        p.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # mismatched mask types are deprecated in torch
        out = tm(*args, **kw)
    return out, leaves


def attnc_forward(m, kind, inputs, call, **extra):
    return m(*[inputs[n] for n in INPUTS[kind]], **call, **extra)


def ref_forward(kind, sd, inputs, call, cfg, eps=1e-5):
    """The NumPy float64 reference: (output, weights as a dict of lists)."""
    rc = {k: v for k, v in call.items() if not k.endswith("is_causal")}
    lkw = dict(norm_first=cfg["norm_first"], activation=cfg["activation"])
    if kind == "enc_layer":
        out, w = ref.encoder_layer(sd, "", inputs["src"], H, eps=eps, **lkw, **rc)
        return out, {"encoder": [w]}
    if kind == "dec_layer":
        out, ws, wc = ref.decoder_layer(sd, "", inputs["tgt"], inputs["memory"], H, eps=eps, **lkw, **rc)
        return out, {"decoder_self": [ws], "decoder_cross": [wc]}
    if kind == "encoder":
        out, ws = ref.encoder(sd, "", inputs["src"], H, NL, final_norm=_final_norm(cfg), eps=eps, **lkw, **rc)
        return out, {"encoder": ws}
    if kind == "decoder":
        out, w = ref.decoder(
            sd, "", inputs["tgt"], inputs["memory"], H, NL, final_norm=_final_norm(cfg), eps=eps, **lkw, **rc
        )
        return out, {"decoder_self": w["self"], "decoder_cross": w["cross"]}
    return ref.transformer(sd, inputs["src"], inputs["tgt"], H, NL, NL, eps=eps, **lkw, **rc)


def weights_dict(kind, w):
    """attnc's need_weights result of kind as a dict of lists (checking its documented form)."""
    if kind == "enc_layer":
        assert isinstance(w, np.ndarray), type(w)
        return {"encoder": [w]}
    if kind == "dec_layer":
        assert isinstance(w, tuple) and len(w) == 2, type(w)
        return {"decoder_self": [w[0]], "decoder_cross": [w[1]]}
    if kind == "encoder":
        assert isinstance(w, list), type(w)
        return {"encoder": list(w)}
    if kind == "decoder":
        assert isinstance(w, dict) and set(w) == {"self", "cross"}, w.keys() if isinstance(w, dict) else type(w)
        return {"decoder_self": list(w["self"]), "decoder_cross": list(w["cross"])}
    assert isinstance(w, dict) and set(w) == {"encoder", "decoder_self", "decoder_cross"}, (
        w.keys() if isinstance(w, dict) else type(w)
    )
    return {k: list(v) for k, v in w.items()}


def out_shape(kind):
    return (B, T if "tgt" in INPUTS[kind] else S, E)


# --------------------------------------------------------------------------- forward vs torch


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", CFGS, ids=CFG_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_forward_matches_torch(kind, cfg, dtype, rng, torch):
    tm, m, _ = make_pair(torch, kind, cfg, dtype)
    inputs = make_inputs(rng, kind, dtype)
    for scen in rotating(kind, None, cfg, dtype, 4):
        call, _ = make_call(kind, scen, rng, dtype)
        what = f"{kind}/{scen}"
        tout, _ = torch_forward(torch, tm, kind, inputs, call)
        out = attnc_forward(m, kind, inputs, call)
        assert isinstance(out, np.ndarray), f"{what}: {type(out)}"
        assert out.dtype == dtype and out.shape == out_shape(kind), f"{what}: {out.dtype} {out.shape}"
        close(out, tout.detach().numpy(), REL[dtype], what)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_layer_norm_eps_and_batch_of_one(kind, dtype, rng, torch):
    """A large layer_norm_eps changes the result (it must reach every norm), and a batch
    of one works."""
    cfg = CFGS[5]  # pre-norm, relu, no bias: final norms present in the stacks
    tm, m, _ = make_pair(torch, kind, cfg, dtype, eps=0.3)
    inputs = make_inputs(rng, kind, dtype, batch=1)
    out = attnc_forward(m, kind, inputs, {})
    close(out, torch_forward(torch, tm, kind, inputs, {})[0].detach().numpy(), REL[dtype], f"{kind} eps=0.3")
    default = attnc_module(kind, cfg, dtype).eval()
    default.load_state_dict(m.state_dict())
    assert np.max(np.abs(attnc_forward(default, kind, inputs, {}) - out)) > 1e-3, "eps had no effect"


@pytest.mark.parametrize("kind", KINDS)
def test_unbatched_inputs(kind, rng, torch):
    """(L, E) inputs (torch accepts them; so does attnc): torch's result, and the batch
    of one's."""
    dtype = np.float64
    cfg = CFGS[2]
    tm, m, _ = make_pair(torch, kind, cfg, dtype)
    inputs = make_inputs(rng, kind, dtype, batch=1)
    call, _ = make_call(kind, "all", rng, dtype)
    # unbatched: 2-D attn masks stay, key padding masks lose the batch, (B*H, L, S) masks
    # become (H, L, S)
    ucall = {n: (x[0] if n.endswith("key_padding_mask") else x[:H] if np.ndim(x) == 3 else x) for n, x in call.items()}
    bcall = {n: (x[:1] if n.endswith("key_padding_mask") else x[:H] if np.ndim(x) == 3 else x) for n, x in call.items()}
    uin = {n: x[0] for n, x in inputs.items()}
    out = attnc_forward(m, kind, uin, ucall)
    assert out.shape == out_shape(kind)[1:]
    tout, _ = torch_forward(torch, tm, kind, uin, ucall)
    close(out, tout.detach().numpy(), 1e-12, f"{kind} unbatched vs torch")
    close(out, attnc_forward(m, kind, inputs, bcall)[0], 1e-12, f"{kind} unbatched vs batch of one")
    o, pullback = attnc.vjp(m, *[uin[n] for n in INPUTS[kind]], **ucall)
    g = pullback(np.ones_like(o))
    for n in INPUTS[kind]:
        assert g[n].shape == uin[n].shape, (n, g[n].shape)


# --------------------------------------------------------------------------- state dicts


@pytest.mark.parametrize("cfg", CFGS, ids=CFG_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_keys_shapes_and_round_trip(kind, cfg, rng, torch):
    """attnc's own (seeded) initialisation: torch's keys, order and shapes; loads into torch
    strictly and gives torch's outputs."""
    dtype = np.float64
    m = attnc_module(kind, cfg, dtype, seed=5).eval()
    tm = torch_module(torch, kind, cfg, dtype, randomise=False)
    sd = m.state_dict()
    tsd = tm.state_dict()
    assert set(sd) == set(tsd), f"missing {sorted(set(tsd) - set(sd))}, unexpected {sorted(set(sd) - set(tsd))}"
    assert list(sd) == list(tsd), "state_dict order differs from torch's"
    for k in tsd:
        assert sd[k].shape == tuple(tsd[k].shape), (k, sd[k].shape, tuple(tsd[k].shape))
        assert sd[k].dtype == dtype, (k, sd[k].dtype)
        assert np.isfinite(sd[k]).all(), k
    res = tm.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    assert not res.missing_keys and not res.unexpected_keys
    inputs = make_inputs(rng, kind, dtype)
    call, _ = make_call(kind, "all", rng, dtype)
    tout, _ = torch_forward(torch, tm, kind, inputs, call)
    close(attnc_forward(m, kind, inputs, call), tout.detach().numpy(), 1e-12, f"{kind} round trip")
    # attnc's state_dict returns copies
    k0 = next(iter(sd))
    sd[k0][...] = 0
    assert not np.all(m.state_dict()[k0] == 0)


def test_same_seed_same_parameters():
    cfg = CFGS[0]
    for kind in KINDS:
        a = attnc_module(kind, cfg, np.float32, seed=3).state_dict()
        b = attnc_module(kind, cfg, np.float32, seed=3).state_dict()
        c = attnc_module(kind, cfg, np.float32, seed=4).state_dict()
        for k in a:
            same_bits(a[k], b[k], f"{kind} {k}")
        assert any(not np.array_equal(a[k], c[k]) for k in a), f"{kind}: seed has no effect"


def test_stack_layers_are_distinct(rng):
    """TransformerEncoder / Decoder clone the layer (as torch does): loading different
    values into layer 1 leaves layer 0 alone."""
    for kind in ("encoder", "decoder"):
        m = attnc_module(kind, CFGS[0], np.float64, seed=1)
        name = "layers.1.linear1.weight"
        sd = m.state_dict()
        sd[name] = sd[name] + 1.0
        m.load_state_dict(sd)
        after = m.state_dict()
        same_bits(after["layers.0.linear1.weight"], sd["layers.0.linear1.weight"], f"{kind} layer 0")
        same_bits(after[name], sd[name], f"{kind} layer 1")


# --------------------------------------------------------------------------- gradients vs torch

GRAD_SCENARIOS = ["none", "s_float_kpm", "s_float_3d", "s_causal", "t_causal", "t_float_3d", "m_float", "m_kpm", "all"]


def check_grads_vs_torch(torch, tm, m, kind, inputs, call, diff_masks, dtype, rng, what, need_weights=False):
    res, pullback = attnc.vjp(m, *[inputs[n] for n in INPUTS[kind]], **call, need_weights=need_weights)
    out = res[0] if need_weights else res
    dout = rng.standard_normal(out.shape).astype(dtype)
    grads = pullback(dout, None) if need_weights else pullback(dout)
    if need_weights and kind == "encoder":  # its attention weights' gradients: tests/test_attribution.py checks them
        assert len(grads.pop("attn_weights")) == m.num_layers

    tout, leaves = torch_forward(torch, tm, kind, inputs, call, grad_masks=diff_masks)
    (tout * torch.from_numpy(dout)).sum().backward()
    close(out, tout.detach().numpy(), REL[dtype], f"{what}: output")
    expected = {n: x.grad.numpy() for n, x in leaves.items() if n in INPUTS[kind]}
    for n, p in tm.named_parameters():
        expected[n] = np.zeros(p.shape) if p.grad is None else p.grad.numpy()
    missing = set(expected) - set(grads)
    assert not missing, f"{what}: gradients missing for {sorted(missing)}"
    float_masks = {n for n, x in call.items() if isinstance(x, np.ndarray) and x.dtype.kind == "f"}
    extra = set(grads) - set(expected)
    assert extra <= float_masks, f"{what}: unexpected gradient keys {sorted(extra - float_masks)}"
    for n in extra & diff_masks:  # float masks: compare when attnc gives them
        g = leaves[n].grad
        expected[n] = np.zeros(leaves[n].shape) if g is None else g.numpy()
    for n, g in expected.items():
        assert grads[n].dtype == dtype and grads[n].shape == g.shape, (
            f"{what}: gradient {n} {grads[n].dtype} {grads[n].shape}"
        )
        close(grads[n], g, GREL[dtype], f"{what}: gradient {n}")
    return grads


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", CFGS, ids=CFG_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_torch_autograd(kind, cfg, dtype, rng, torch):
    tm, m, sd = make_pair(torch, kind, cfg, dtype)
    for scen in rotating(kind, GRAD_SCENARIOS, cfg, dtype, 3):
        inputs = make_inputs(rng, kind, dtype)
        call, diff = make_call(kind, scen, rng, dtype)
        grads = check_grads_vs_torch(torch, tm, m, kind, inputs, call, diff, dtype, rng, f"{kind}/{scen}")
        assert set(sd) | set(INPUTS[kind]) <= set(grads)


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_with_need_weights(kind, dtype, rng, torch):
    """need_weights=True: pullback(d_out, None) gives the same gradients."""
    cfg = CFGS[6]
    tm, m, _ = make_pair(torch, kind, cfg, dtype)
    inputs = make_inputs(rng, kind, dtype)
    call, diff = make_call(kind, "all", rng, dtype)
    check_grads_vs_torch(torch, tm, m, kind, inputs, call, diff, dtype, rng, f"{kind}/need_weights", need_weights=True)


def test_pullback_repeatable_and_cotangent_checked(rng):
    m = attnc_module("dec_layer", CFGS[0], np.float64, seed=2).eval()
    inputs = make_inputs(rng, "dec_layer", np.float64)
    out, pullback = attnc.vjp(m, inputs["tgt"], inputs["memory"])
    d = rng.standard_normal(out.shape)
    g1, g2 = pullback(d), pullback(d)
    for n in g1:
        same_bits(g1[n], g2[n], n)
    with pytest.raises(ValueError, match="cotangent"):
        pullback(d[:, :-1])
    with pytest.raises(TypeError, match="cotangent"):
        pullback(d.astype(np.float32))


# --------------------------------------------------------------------------- finite differences

FD = dict(e=4, h=2, ff=6, nl=1)
FD_SEED = 17


def _fd_inputs(rng, kind):
    n = {"src": 3, "tgt": 2, "memory": 3}
    return {k: rng.standard_normal((1, n[k], FD["e"])) * 0.8 for k in INPUTS[kind]}


def _fd_masks(rng, kind):
    """Non-trivial masks for the tiny model (float attn masks, bool key padding)."""
    if kind in ("enc_layer", "encoder"):
        kpm = np.array([[False, True, False]])
        return {
            ("src_mask" if kind == "enc_layer" else "mask"): rng.standard_normal((3, 3)) * 0.5,
            "src_key_padding_mask": kpm,
        }
    call = {
        "tgt_mask": _causal_bool((2, 2)),
        "tgt_is_causal": True,
        "memory_mask": rng.standard_normal((2, 3)) * 0.5,
        "memory_key_padding_mask": np.array([[False, False, True]]),
    }
    if kind == "transformer":
        call["src_key_padding_mask"] = np.array([[False, True, False]])
    return call


FD_CASES = {  # id: (kind, cfg, also in training mode with dropout)
    "enc_layer-post-relu": ("enc_layer", CFGS[0], True),
    "enc_layer-pre-gelu-nobias": ("enc_layer", CFGS[7], False),
    "dec_layer-post-gelu": ("dec_layer", CFGS[2], False),
    "dec_layer-pre-relu-nobias": ("dec_layer", CFGS[5], True),
    "encoder-pre-relu": ("encoder", CFGS[4], True),
    "transformer-post-gelu-nobias": ("transformer", CFGS[3], True),
}
FD_PARAMS = [
    (case, dropout) for case, (_, _, train) in FD_CASES.items() for dropout in ([0.0, 0.3] if train else [0.0])
]


@pytest.mark.parametrize(
    "case,dropout", FD_PARAMS, ids=[f"{c}-{'train-dropout' if d else 'eval'}" for c, d in FD_PARAMS]
)
def test_gradients_match_finite_differences(case, dropout, rng, fd_check):
    """Input and parameter gradients against central differences (float64). With
    dropout in training mode every evaluation uses a freshly built module of the same
    seed (each call draws its dropout seed from the module's generator), so each
    evaluation replays the same dropout masks."""
    kind, cfg, _ = FD_CASES[case]
    training = dropout > 0
    nl = 2 if kind == "encoder" else 1

    def fresh():
        mod = attnc_module(
            kind, cfg, np.float64, seed=FD_SEED, dropout=dropout, e=FD["e"], h=FD["h"], ff=FD["ff"], nl=nl
        )
        return mod.train(training)

    params = {k: v + 0.3 * rng.standard_normal(v.shape) for k, v in fresh().state_dict().items()}
    inputs = _fd_inputs(rng, kind)
    call = _fd_masks(rng, kind)
    shared = fresh()

    def fn(**kw):
        mod = fresh() if training else shared
        mod.load_state_dict({k: kw[k] for k in params})
        return mod(*[kw[n] for n in INPUTS[kind]], **call)

    mod = fresh()
    mod.load_state_dict(params)
    out, pullback = attnc.vjp(mod, *[inputs[n] for n in INPUTS[kind]], **call)
    same_bits(out, fn(**inputs, **params), "vjp forward vs forward of a same-seed module")
    if training:  # the dropout really acts
        ev = fresh().eval()
        ev.load_state_dict(params)
        assert np.max(np.abs(out - ev(*[inputs[n] for n in INPUTS[kind]], **call))) > 1e-3, (
            "training-mode dropout had no effect"
        )
    cot = rng.standard_normal(out.shape)
    grads = pullback(cot)
    assert set(grads) == set(inputs) | set(params), sorted(set(grads) ^ (set(inputs) | set(params)))
    wrt = sorted(inputs) + sorted(params)
    if training and kind in ("encoder", "transformer"):
        # building a module per evaluation is slow: the inputs (whose gradients pass every
        # dropout site) and the first layer's linear1 weight
        wrt = sorted(inputs) + [k for k in sorted(params) if k.endswith("layers.0.linear1.weight")]
    fd_check(fn, {**inputs, **params}, [cot], grads, wrt=wrt, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- attention weights


def test_reference_attention_matches_torch_mha(rng, torch):
    """The NumPy reference's attention (used for the weights below) against
    torch.nn.MultiheadAttention(need_weights=True, average_attn_weights=False)."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for p in mha.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    sd = torch_state(mha)
    q = rng.standard_normal((B, T, E))
    kv = rng.standard_normal((B, S, E))
    for am, kpm in [
        (None, None),
        (_bool_ignore(rng, (T, S)), None),
        (rng.standard_normal((B * H, T, S)), _bool_ignore(rng, (B, S))),
        (rng.standard_normal((T, S)), None),
    ]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            to, tw = mha(
                torch.from_numpy(q),
                torch.from_numpy(kv),
                torch.from_numpy(kv),
                attn_mask=None if am is None else torch.from_numpy(am),
                key_padding_mask=None if kpm is None else torch.from_numpy(kpm),
                need_weights=True,
                average_attn_weights=False,
            )
        o, w = ref.mha(sd, "", q, kv, H, am, kpm)
        close(o, to.detach().numpy(), 1e-12, "reference mha output")
        close(w, tw.detach().numpy(), 1e-12, "reference mha weights")


WEIGHT_SCENARIOS = ["none", "s_bool_3d", "s_causal_float_kpm", "t_causal", "m_bool_3d", "all"]


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", [CFGS[0], CFGS[7]], ids=[CFG_IDS[0], CFG_IDS[7]])
@pytest.mark.parametrize("kind", KINDS)
def test_need_weights_per_layer_per_head(kind, cfg, dtype, rng, torch):
    """Weights (B, H, queries, keys) of every layer against the float64 NumPy reference
    (whose outputs are checked against torch here too); rows sum to 1; need_weights does
    not change the output."""
    tm, m, sd = make_pair(torch, kind, cfg, dtype)
    nlayers = 1 if kind.endswith("layer") else NL
    qlen = {"encoder": S, "decoder_self": T, "decoder_cross": T}
    klen = {"encoder": S, "decoder_self": T, "decoder_cross": S}
    for scen in scenarios_for(kind, WEIGHT_SCENARIOS):
        inputs = make_inputs(rng, kind, dtype)
        call, _ = make_call(kind, scen, rng, dtype)
        what = f"{kind}/{scen}"
        rout, rw = ref_forward(kind, sd, inputs, call, cfg)
        tout, _ = torch_forward(torch, tm, kind, inputs, call)
        close(rout, tout.detach().numpy(), 1e-4 if dtype == np.float32 else 1e-10, f"{what}: reference vs torch")
        res = attnc_forward(m, kind, inputs, call, need_weights=True)
        assert isinstance(res, tuple) and len(res) == 2, f"{what}: {type(res)}"
        out, w = res
        close(out, rout, REL[dtype] * 10, f"{what}: output with need_weights")
        close(out, attnc_forward(m, kind, inputs, call), REL[dtype], f"{what}: need_weights changed the output")
        w = weights_dict(kind, w)
        assert set(w) == set(rw), (sorted(w), sorted(rw))
        for part in w:
            assert len(w[part]) == nlayers, f"{what}: {part} has {len(w[part])} layers"
            for i, (a, r) in enumerate(zip(w[part], rw[part])):
                wh = f"{what}: {part}[{i}]"
                assert a.dtype == dtype and a.shape == (B, H, qlen[part], klen[part]), f"{wh}: {a.dtype} {a.shape}"
                close(a, r, REL[dtype] * 10, wh)
                close(a.sum(-1), np.ones(a.shape[:-1]), REL[dtype] * 10, f"{wh}: rows sum to 1")
                assert np.all(a >= 0)


@pytest.mark.parametrize("kind", ["enc_layer", "decoder", "transformer"])
def test_fully_masked_rows(kind, rng):
    """Rows with no allowed key: zero weights (rows sum to 0), a zero context, finite
    output equal to the reference's; other rows unaffected."""
    dtype = np.float64
    cfg = CFGS[1]
    m = attnc_module(kind, cfg, dtype, seed=9).eval()
    sd = m.state_dict()
    inputs = make_inputs(rng, kind, dtype)
    if kind == "enc_layer":
        mask = _bool_ignore(rng, (S, S))
        mask[2] = True  # query 2 sees nothing
        kpm = np.zeros((B, S), bool)
        kpm[1] = True  # batch 1 sees nothing at all
        call = {"src_mask": mask, "src_key_padding_mask": kpm}
        dead = {"encoder": [(slice(None), slice(None), 2), (1,)]}
    else:
        mm = _bool_ignore(rng, (T, S))
        mm[3] = True  # target 3 sees no memory
        call = {"memory_mask": mm}
        dead = {"decoder_cross": [(slice(None), slice(None), 3)]}
    out, w = attnc_forward(m, kind, inputs, call, need_weights=True)
    assert np.isfinite(out).all()
    w = weights_dict(kind, w)
    rout, rw = ref_forward(kind, sd, inputs, call, cfg)
    close(out, rout, 1e-11, "output")
    for part, idxs in dead.items():
        for a, r in zip(w[part], rw[part]):
            close(a, r, 1e-11, part)
            sums = a.sum(-1)
            expect = np.ones(sums.shape)
            for idx in idxs:
                expect[idx] = 0.0
            close(sums, expect, 1e-12, f"{part}: row sums")
    # gradients stay finite
    o, pullback = attnc.vjp(m, *[inputs[n] for n in INPUTS[kind]], **call)
    g = pullback(rng.standard_normal(o.shape))
    assert all(np.isfinite(v).all() for v in g.values())


# --------------------------------------------------------------------------- dropout


@pytest.mark.parametrize("kind", KINDS)
def test_dropout_seeding_and_modes(kind, rng):
    dtype = np.float64
    cfg = CFGS[2]
    params = attnc_module(kind, cfg, dtype, seed=0).state_dict()
    inputs = make_inputs(rng, kind, dtype)
    call, _ = make_call(kind, "all", rng, dtype)

    def build(seed, dropout):
        mod = attnc_module(kind, cfg, dtype, seed=seed, dropout=dropout)
        mod.load_state_dict(params)
        return mod

    def run(mod, **kw):
        return attnc_forward(mod, kind, inputs, call, **kw)

    assert build(1, 0.5).training, "modules start in training mode"
    a, b, c = build(1, 0.5), build(1, 0.5), build(2, 0.5)
    a1, b1, c1 = run(a), run(b), run(c)
    a2, b2 = run(a), run(b)
    same_bits(a1, b1, "same seed, first call")
    same_bits(a2, b2, "same seed, second call")
    assert np.max(np.abs(a1 - c1)) > 1e-3, "different seeds gave the same dropout"
    assert np.max(np.abs(a1 - a2)) > 1e-3, "consecutive calls drew the same dropout masks"
    plain = build(1, 0.0)
    ref_eval = run(build(1, 0.0).eval())
    close(run(plain), ref_eval, 1e-13, "dropout=0 training vs eval")
    assert np.max(np.abs(a1 - ref_eval)) > 1e-3, "dropout had no effect in training mode"
    # eval ignores dropout (the flag reaches every submodule)
    a.eval()
    same_bits(run(a), run(a), "eval is deterministic")
    close(run(a), ref_eval, 1e-13, "eval with dropout=0.5 vs dropout=0")
    a.train()
    assert np.max(np.abs(run(a) - ref_eval)) > 1e-3, "train() did not switch dropout back on"
    # weights are the probabilities before dropout: the first self-attention's do not
    # depend on dropout at all (nothing is dropped before it), all rows sum to 1
    _, w_train = run(build(1, 0.5), need_weights=True)
    _, w_eval = run(build(1, 0.5).eval(), need_weights=True)
    wt, we = weights_dict(kind, w_train), weights_dict(kind, w_eval)
    first = "encoder" if "encoder" in wt else "decoder_self"
    close(wt[first][0], we[first][0], 1e-13, "first layer's weights in training mode")
    for part in wt:
        for a_ in wt[part]:
            close(a_.sum(-1), np.ones(a_.shape[:-1]), 1e-12, f"{part} training rows")
    # vjp in training mode draws like forward: a same-seed module gives the same bits
    out, pullback = attnc.vjp(build(1, 0.5), *[inputs[n] for n in INPUTS[kind]], **call)
    same_bits(out, a1, "vjp forward in training mode")
    g = pullback(np.ones_like(out))
    assert all(np.isfinite(v).all() for v in g.values())


def test_dropout_one_and_bounds(rng):
    """dropout=1 in a post-norm encoder layer: both residual branches vanish, the output
    is norm2(norm1(src))."""
    dtype = np.float64
    m = nn.TransformerEncoderLayer(E, H, FF, dropout=1.0, seed=0, dtype=dtype)
    x = rng.standard_normal((B, S, E))
    sd = m.state_dict()
    expect = ref.layer_norm(
        ref.layer_norm(x, sd["norm1.weight"], sd["norm1.bias"], 1e-5), sd["norm2.weight"], sd["norm2.bias"], 1e-5
    )
    close(m(x), expect, 1e-12, "dropout=1")
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout"):
            nn.TransformerEncoderLayer(E, H, dropout=p)


# --------------------------------------------------------------------------- errors


def test_constructor_errors():
    for cls in (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer):
        with pytest.raises(ValueError, match=r"nhead|d_model|divisible"):
            cls(16, 3)
        with pytest.raises(ValueError, match="activation"):
            cls(16, 4, activation="tanh")
        with pytest.raises(ValueError, match="batch_first"):
            cls(16, 4, batch_first=False)
        with pytest.raises(TypeError, match="dtype"):
            cls(16, 4, dtype=np.int32)
    with pytest.raises(ValueError, match=r"nhead|d_model|divisible"):
        nn.Transformer(16, 3, 1, 1, 32)
    with pytest.raises(ValueError, match="batch_first"):
        nn.Transformer(16, 4, 1, 1, 32, batch_first=False)


def _raises(exc, pattern, fn, *args, **kw):
    """fn raises exc matching pattern, also through attnc.vjp."""
    with pytest.raises(exc, match=pattern):
        fn(*args, **kw)
    with pytest.raises(exc, match=pattern):
        attnc.vjp(fn, *args, **kw)


def test_forward_errors_encoder(rng):
    m = attnc_module("enc_layer", CFGS[0], np.float32, seed=0)
    enc = attnc_module("encoder", CFGS[0], np.float32, seed=0)
    x = rng.standard_normal((B, S, E)).astype(np.float32)
    _raises(ValueError, r"src|d_model|16", m, x[..., :-1])
    _raises(ValueError, r"src|d_model|16", enc, x[..., :-1])
    _raises(ValueError, r"src_mask|attn_mask", m, x, src_mask=np.zeros((S, S + 1), bool))
    _raises(ValueError, r"src_mask|attn_mask", m, x, src_mask=np.zeros((B * H + 1, S, S), np.float32))
    _raises(ValueError, r"\bmask|attn_mask", enc, x, mask=np.zeros((S + 1, S), bool))
    _raises(ValueError, "key_padding_mask", m, x, src_key_padding_mask=np.zeros((B, S + 1), bool))
    _raises(ValueError, "key_padding_mask", enc, x, src_key_padding_mask=np.zeros((B + 1, S), bool))
    _raises(ValueError, "is_causal", m, x, is_causal=True)
    _raises(ValueError, "is_causal", enc, x, is_causal=True)
    _raises(TypeError, r"src|dtype|float", m, x.astype(np.float64))
    _raises(TypeError, r"src|dtype|float", enc, x.astype(np.float64))
    _raises(TypeError, r"src|dtype|float", m, np.ones((B, S, E), np.int64))


def test_forward_errors_decoder(rng):
    d = attnc_module("dec_layer", CFGS[0], np.float32, seed=0)
    dec = attnc_module("decoder", CFGS[0], np.float32, seed=0)
    t = rng.standard_normal((B, T, E)).astype(np.float32)
    mem = rng.standard_normal((B, S, E)).astype(np.float32)
    for mod in (d, dec):
        _raises(ValueError, r"tgt|d_model|16", mod, t[..., :-2], mem)
        _raises(ValueError, r"memory|d_model|16", mod, t, mem[..., :-2])
        _raises(ValueError, r"memory|batch", mod, t, mem[:1])
        _raises(ValueError, r"tgt_mask|attn_mask", mod, t, mem, tgt_mask=np.zeros((T, S), bool))
        _raises(ValueError, r"memory_mask|attn_mask", mod, t, mem, memory_mask=np.zeros((T, S + 1), bool))
        _raises(ValueError, "key_padding_mask", mod, t, mem, memory_key_padding_mask=np.zeros((B, T), bool))
        _raises(ValueError, "tgt_is_causal", mod, t, mem, tgt_is_causal=True)
        _raises(ValueError, "memory_is_causal", mod, t, mem, memory_is_causal=True)
        _raises(TypeError, r"memory|dtype|float", mod, t, mem.astype(np.float64))


def _transformer_error_cases():
    """(exception, pattern naming the Transformer's own argument, positional shapes, keywords)."""
    src, tgt = (B, S, E), (B, T, E)
    return {
        "batch": (ValueError, r"src|tgt|batch", [(1, S, E), tgt], {}),
        "src_d_model": (ValueError, r"\bsrc\b", [(B, S, E - 1), tgt], {}),
        "tgt_d_model": (ValueError, r"\btgt\b", [src, (B, T, E - 1)], {}),
        "src_mask": (ValueError, r"src_mask", [src, tgt], {"src_mask": np.zeros((T, T), bool)}),
        "tgt_mask": (ValueError, r"tgt_mask", [src, tgt], {"tgt_mask": np.zeros((S, S), bool)}),
        "memory_mask": (ValueError, r"memory_mask", [src, tgt], {"memory_mask": np.zeros((S, T), bool)}),
        "src_key_padding_mask": (
            ValueError,
            r"src_key_padding_mask",
            [src, tgt],
            {"src_key_padding_mask": np.zeros((B, T), bool)},
        ),
        "src_is_causal": (ValueError, r"src_is_causal", [src, tgt], {"src_is_causal": True}),
        "tgt_is_causal": (ValueError, r"tgt_is_causal", [src, tgt], {"tgt_is_causal": True}),
        "dtype": (TypeError, r"\btgt\b", [src, "f64"], {}),
    }


@pytest.mark.parametrize("case", list(_transformer_error_cases()))
def test_forward_errors_transformer_name_the_argument(case, rng):
    exc, pattern, shapes, kw = _transformer_error_cases()[case]
    tr = attnc_module("transformer", CFGS[0], np.float32, seed=0)
    args = [
        rng.standard_normal(sh).astype(np.float32) if sh != "f64" else rng.standard_normal((B, T, E)) for sh in shapes
    ]
    _raises(exc, pattern, tr, *args, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_and_parameters_never_modified(kind, rng, assert_unchanged):
    dtype = np.float64
    m = attnc_module(kind, CFGS[4], dtype, seed=0, dropout=0.2)
    before = m.state_dict()
    inputs = make_inputs(rng, kind, dtype)
    call, _ = make_call(kind, "all", rng, dtype)
    args = [inputs[n] for n in INPUTS[kind]]
    assert_unchanged(m, *args, **call)
    assert_unchanged(m, *args, **call, need_weights=True)
    out, pullback = assert_unchanged(attnc.vjp, m, *args, **call)
    assert_unchanged(pullback, rng.standard_normal(out.shape))
    (out, _), pullback = assert_unchanged(attnc.vjp, m, *args, **call, need_weights=True)
    assert_unchanged(pullback, rng.standard_normal(out.shape), None)
    m.eval()
    assert_unchanged(m, *args, **call)
    for n, p in m.named_parameters():
        same_bits(p, before[n], n)


# --------------------------------------------------------------------------- square subsequent mask


@pytest.mark.parametrize("sz", [1, 2, 5])
def test_generate_square_subsequent_mask(sz, torch):
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(sz)
    m = nn.Transformer.generate_square_subsequent_mask(sz)
    assert m.dtype == np.float32 and m.shape == (sz, sz)
    np.testing.assert_array_equal(m, tmask.numpy())
    m64 = nn.Transformer.generate_square_subsequent_mask(sz, dtype=np.float64)
    assert m64.dtype == np.float64
    np.testing.assert_array_equal(
        m64, torch.nn.Transformer.generate_square_subsequent_mask(sz, dtype=torch.float64).numpy()
    )
    # also callable on an instance (a static method)
    inst = nn.Transformer(8, 2, 1, 1, 16, seed=0)
    np.testing.assert_array_equal(inst.generate_square_subsequent_mask(sz), m)


# --------------------------------------------------------------------------- threads, layouts


def test_thread_count_gives_identical_bits(rng, restore_threads):
    """Forward and gradients (training mode, seeded dropout) do not depend on the number
    of threads."""
    kind, dtype = "transformer", np.float32
    inputs = make_inputs(rng, kind, dtype)
    call, _ = make_call(kind, "all", rng, dtype)
    results = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        m = attnc_module(kind, CFGS[6], dtype, seed=8, dropout=0.2)
        out, pullback = attnc.vjp(m, *[inputs[k] for k in INPUTS[kind]], **call)
        results.append((out, pullback(np.ones_like(out))))
    for out, g in results[1:]:
        same_bits(out, results[0][0], "output")
        for k in g:
            same_bits(g[k], results[0][1][k], k)


def test_non_contiguous_inputs_and_masks(rng):
    m = attnc_module("transformer", CFGS[0], np.float64, seed=3).eval()
    big_s = rng.standard_normal((B, 2 * S, 2 * E))
    big_t = rng.standard_normal((2 * B, T, E))
    src, tgt = big_s[:, ::2, 1::2], big_t[::-2]
    mm = (0.5 * rng.standard_normal((S, T))).T  # (T, S), transposed
    kpm = np.zeros((B, 2 * S), bool)[:, ::2]
    kpm[:, 3] = True
    call = dict(
        memory_mask=mm,
        memory_key_padding_mask=kpm,
        src_key_padding_mask=kpm,
        tgt_mask=_causal_bool((T, T)),
        tgt_is_causal=True,
    )
    ccall = {k: (np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v) for k, v in call.items()}
    assert not src.flags.c_contiguous and not tgt.flags.c_contiguous and not mm.flags.c_contiguous
    same_bits(
        m(src, tgt, **call),
        m(np.ascontiguousarray(src), np.ascontiguousarray(tgt), **ccall),
        "non-contiguous vs contiguous",
    )


# --------------------------------------------------------------------------- save / load


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_save_load(kind, dtype, rng, tmp_path):
    """attnc.save / attnc.load keep the class, the configuration (a non-default one) and
    the parameters: the loaded module, in eval mode, gives the same bits."""
    cfg = CFGS[7]  # pre-norm, gelu, no bias
    m = attnc_module(kind, cfg, dtype, seed=4, eps=1e-3)
    sd = {k: v + 0.3 * rng.standard_normal(v.shape) for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    m.eval()
    path = tmp_path / f"{kind}.npz"
    attnc.save(path, m)
    loaded = attnc.load(path)
    assert type(loaded) is type(m)
    assert not loaded.training
    assert loaded.dtype == dtype
    lsd = loaded.state_dict()
    assert list(lsd) == list(m.state_dict())
    for k in lsd:
        same_bits(lsd[k], m.state_dict()[k], k)
    inputs = make_inputs(rng, kind, dtype)
    call, _ = make_call(kind, "all", rng, dtype)
    same_bits(attnc_forward(loaded, kind, inputs, call), attnc_forward(m, kind, inputs, call), "output")


def test_eval_workspace_reuse_and_concurrent_calls(rng):
    """An eval forward reuses the module's activations buffer between calls;
    calls from several threads at once still give each its own answer."""
    from concurrent.futures import ThreadPoolExecutor

    layer = attnc.nn.TransformerEncoderLayer(16, 4, 32, seed=0).eval()
    xs = [rng.standard_normal((2, 5 + i, 16)).astype(np.float32) for i in range(6)]
    want = [layer(x) for x in xs]
    np.testing.assert_array_equal(layer(xs[0]), want[0])  # after a larger call used the buffer
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(layer, xs))
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)


def test_saved_activations_reused_only_when_free(rng):
    """A training forward's activations buffer goes back to the module when
    its pullback is dropped, never while the pullback can still run."""
    import gc

    layer = attnc.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, seed=0).train()
    x1, x2, x3 = (rng.standard_normal((2, 5, 16)).astype(np.float32) for _ in range(3))
    d = rng.standard_normal((2, 5, 16)).astype(np.float32)
    want = [attnc.vjp(layer, x)[1](d)["src"] for x in (x1, x2, x3)]
    gc.collect()
    _, p1 = attnc.vjp(layer, x1)
    _, p2 = attnc.vjp(layer, x2)  # p1 alive: a buffer of its own
    np.testing.assert_array_equal(p1(d)["src"], want[0])
    del p1
    gc.collect()
    _, p3 = attnc.vjp(layer, x3)  # may take p1's buffer; p2's is still in use
    np.testing.assert_array_equal(p2(d)["src"], want[1])
    np.testing.assert_array_equal(p3(d)["src"], want[2])
    assert len(layer.__dict__.get("_spare", [])) <= 1
