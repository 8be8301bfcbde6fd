"""Issue 30's block masks and sigmoid attention in the C Transformer layers:
per-call segment ids (packed sequences; a decoder's target/memory pairs),
prefix lengths (a prefix LM), block masks, and the layers' attention="sigmoid"
setting. Checked against a NumPy float64 layer written here on the kernel's
reference (tests/reference/sdpa_variants_ref.py), against running each
packed segment alone as its own batch row, by finite differences, for fully
masked rows, thread-count bits, cached decoding token by token, errors and
empty inputs."""

import itertools

import numpy as np
import pytest

import attnc
from helpers import close, same_bits
from reference import sdpa_variants_ref as ref
from reference import transformer_ref as tr

E, H, F = 8, 2, 12
NAMES = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")


# ---------------------------------------------------------------- the reference layers


def _mha(p, prefix, x, kv, **options):
    """torch's stacked-projection attention of x (B, L, E) on kv (B, S, E),
    the kernel's options applied by the reference."""
    w, b, ow, ob = (p[prefix + n] for n in NAMES)
    q, k, v = x @ w[:E].T + b[:E], kv @ w[E : 2 * E].T + b[E : 2 * E], kv @ w[2 * E :].T + b[2 * E :]

    def split(a):
        return a.reshape(a.shape[0], a.shape[1], H, E // H).transpose(0, 2, 1, 3)

    out = ref.scaled_dot_product_attention(split(q), split(k), split(v), **options)
    return out.transpose(0, 2, 1, 3).reshape(x.shape) @ ow.T + ob


def _sublayers(p, x, branches, norm_first):
    """The residual chain: each branch f with its norm, then the feed-forward."""
    norms = [f"norm{i + 1}" for i in range(len(branches) + 1)]
    branches = branches + [lambda h: tr._ff(p, "", h, "relu")]
    for f, norm in zip(branches, norms):
        x = x + f(tr._ln(p, norm, x, 1e-5)) if norm_first else tr._ln(p, norm, x + f(x), 1e-5)
    return x


def encoder_layer(layer, x, norm_first=False, **options):
    p = {n: np.asarray(a, np.float64) for n, a in layer.state_dict().items()}
    return _sublayers(p, np.asarray(x, np.float64), [lambda h: _mha(p, "self_attn.", h, h, **options)], norm_first)


def decoder_layer(layer, x, memory, norm_first=False, self_options=None, cross_options=None):
    p = {n: np.asarray(a, np.float64) for n, a in layer.state_dict().items()}
    mem = np.asarray(memory, np.float64)
    branches = [
        lambda h: _mha(p, "self_attn.", h, h, **(self_options or {})),
        lambda h: _mha(p, "multihead_attn.", h, mem, **(cross_options or {})),
    ]
    return _sublayers(p, np.asarray(x, np.float64), branches, norm_first)


def _layer(cls=attnc.nn.TransformerEncoderLayer, dtype=np.float64, seed=0, **kw):
    layer = cls(E, H, F, dropout=0.0, dtype=dtype, seed=seed, **kw).eval()
    rng = np.random.default_rng(seed)
    layer._initialise(lambda name, p: rng.standard_normal(p.shape) * 0.5 if name.endswith("bias") else None)
    return layer


def _causal(L):
    return np.triu(np.ones((L, L), bool), k=1)


SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 1], [5, 5, 7, 7, 7, 7, 9]])
BLOCKS = np.array([[True, False, True, True], [False, True, True, True]])  # (2 query blocks, 4 key blocks)


# ---------------------------------------------------------------- against the reference

ENCODER_CASES = {
    "segments": ({}, {"src_segment_ids": SEGMENTS}, {"segment_ids": SEGMENTS}),
    "segments_causal": (
        {"alibi": True, "window": (3, 0)},
        {"src_segment_ids": SEGMENTS, "src_mask": _causal(7), "is_causal": True},
        {"segment_ids": SEGMENTS, "is_causal": True, "alibi_slopes": ref.alibi_slopes(H), "window": (3, 0)},
    ),
    "prefix": ({}, {"prefix_lengths": np.array([3, 0])}, {"prefix_lengths": np.array([3, 0]), "is_causal": True}),
    "block_mask": (
        {},
        {"src_block_mask": BLOCKS, "block_size": (4, 2)},
        {"block_mask": BLOCKS, "block_size": (4, 2)},
    ),
    "sigmoid": ({"attention": "sigmoid"}, {}, {"activation": "sigmoid"}),
    "sigmoid_bias_segments": (
        {"attention": "sigmoid", "sigmoid_bias": -1.5, "softcap": 2.0},
        {"src_segment_ids": SEGMENTS, "prefix_lengths": 2},
        {
            "activation": "sigmoid",
            "sigmoid_bias": -1.5,
            "softcap": 2.0,
            "segment_ids": SEGMENTS,
            "prefix_lengths": np.array([2, 2]),
            "is_causal": True,
        },
    ),
}


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
@pytest.mark.parametrize("case", sorted(ENCODER_CASES))
def test_encoder_layer_matches_the_reference(case, norm_first, rng):
    settings, call, options = ENCODER_CASES[case]
    layer = _layer(norm_first=norm_first, **settings)
    x = rng.standard_normal((2, 7, E))
    want = encoder_layer(layer, x, norm_first, **options)
    close(layer(x, **call), want, 1e-12, case)
    close(layer.to(np.float32)(x.astype(np.float32), **call), want, 2e-5, case + " float32")


@pytest.mark.parametrize("attention", ["softmax", "sigmoid"])
def test_decoder_layer_matches_the_reference(attention, rng):
    """Packed target/memory pairs: target segment k reads its own positions
    (causally) and memory segment k; block masks on both attentions."""
    layer = _layer(attnc.nn.TransformerDecoderLayer, attention=attention)
    x, memory = rng.standard_normal((2, 7, E)), rng.standard_normal((2, 5, E))
    mem_ids = np.array([[0, 0, 1, 1, 1], [5, 7, 7, 9, 9]])
    tgt_block = np.array([[True, True], [False, True]])[None, None]  # (1, 1, 2, 2) with block_size 4
    mem_block = np.array([[[True, False], [True, True]], [[True, True], [False, True]]])  # (H, 2, 2): 4 x 4 of 7 x 5
    out = layer(
        x,
        memory,
        tgt_mask=_causal(7),
        tgt_is_causal=True,
        tgt_segment_ids=SEGMENTS,
        memory_segment_ids=mem_ids,
        tgt_block_mask=tgt_block,
        memory_block_mask=mem_block,
        block_size=4,
    )
    act = {"activation": attention}
    self_options = dict(act, is_causal=True, segment_ids=SEGMENTS, block_mask=tgt_block, block_size=4)
    cross_options = dict(act, segment_ids=(SEGMENTS, mem_ids), block_mask=mem_block, block_size=4)
    want = decoder_layer(layer, x, memory, self_options=self_options, cross_options=cross_options)
    close(out, want, 1e-12, attention)


# ---------------------------------------------------------------- packed rows = each segment alone


def _packed(lengths):
    """Segments of the given lengths packed in one row: (ids (1, L), the pieces' slices)."""
    ids = np.concatenate([np.full(n, k) for k, n in enumerate(lengths)])[None]
    ends = np.cumsum((0,) + tuple(lengths))
    return ids, [slice(int(a), int(b)) for a, b in itertools.pairwise(ends)]


@pytest.mark.parametrize(
    "settings",
    [{}, {"attention": "sigmoid", "sigmoid_bias": -1.0}, {"alibi": True}],
    ids=["softmax", "sigmoid", "alibi"],
)
def test_packed_encoder_equals_each_segment_alone(settings, rng):
    layer = _layer(**settings)
    encoder = attnc.nn.TransformerEncoder(layer, 2, norm=attnc.nn.LayerNorm(E, dtype=np.float64)).eval()
    ids, pieces = _packed((3, 5, 1))
    x = rng.standard_normal((1, 9, E))
    out = encoder(x, src_segment_ids=ids, is_causal=True, mask=_causal(9))
    for s in pieces:
        n = s.stop - s.start
        close(out[:, s], encoder(x[:, s], mask=_causal(n), is_causal=True), 1e-12, str(s))


def test_packed_decoder_equals_each_pair_alone(rng):
    """Source/target pairs packed in one row: each target reads only its own
    memory, for a decoder stack and for Transformer (whose memory segments
    are the source's)."""
    layer = _layer(attnc.nn.TransformerDecoderLayer, attention="sigmoid", sigmoid_bias=-0.5)
    decoder = attnc.nn.TransformerDecoder(layer, 2).eval()
    tgt_ids, tgt_pieces = _packed((2, 4))
    mem_ids, mem_pieces = _packed((3, 3))
    x, memory = rng.standard_normal((1, 6, E)), rng.standard_normal((1, 6, E))
    out = decoder(x, memory, tgt_segment_ids=tgt_ids, memory_segment_ids=mem_ids)
    for t, m in zip(tgt_pieces, mem_pieces):
        close(out[:, t], decoder(x[:, t], memory[:, m]), 1e-12, str(t))
    model = attnc.nn.Transformer(E, H, 1, 2, F, dropout=0.0, dtype=np.float64, seed=3).eval()
    src = rng.standard_normal((1, 6, E))
    out = model(src, x, src_segment_ids=mem_ids, tgt_segment_ids=tgt_ids, tgt_mask=_causal(6), tgt_is_causal=True)
    for t, m in zip(tgt_pieces, mem_pieces):
        n = t.stop - t.start
        close(out[:, t], model(src[:, m], x[:, t], tgt_mask=_causal(n), tgt_is_causal=True), 1e-12, str(t))


# ---------------------------------------------------------------- gradients


def _fd(f, x, cot, idx, eps=1e-6):
    e = np.zeros_like(x)
    e[idx] = eps
    return (np.sum(f(x + e) * cot) - np.sum(f(x - e) * cot)) / (2 * eps)


@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_gradients_match_finite_differences(decoder, rng):
    """Sigmoid attention with segments (and a prefix or block masks): the
    input's, the memory's and the parameters' gradients."""
    cls = attnc.nn.TransformerDecoderLayer if decoder else attnc.nn.TransformerEncoderLayer
    layer = _layer(cls, attention="sigmoid", norm_first=decoder)
    x, memory = rng.standard_normal((2, 7, E)), rng.standard_normal((2, 5, E))
    if decoder:
        mem_ids = np.array([[0, 0, 1, 1, 1], [5, 7, 7, 9, 9]])
        kw = dict(tgt_segment_ids=SEGMENTS, memory_segment_ids=mem_ids, memory_block_mask=BLOCKS[:, :3], block_size=2)
        kw["memory_block_mask"] = np.ones((4, 3), bool)
        kw["memory_block_mask"][1, 0] = False
        args = (x, memory)
    else:
        kw = dict(src_segment_ids=SEGMENTS, prefix_lengths=np.array([2, 4]))
        args = (x,)
    out, pullback = attnc.vjp(layer, *args, **kw)
    cot = rng.standard_normal(out.shape)
    grads = pullback(cot)
    first = "tgt" if decoder else "src"
    for idx in [(0, 1, 2), (1, 6, 0)]:
        want = _fd(lambda v: layer(v, *args[1:], **kw), x, cot, idx)
        assert grads[first][idx] == pytest.approx(want, rel=1e-6, abs=1e-9)
    if decoder:
        want = _fd(lambda m: layer(x, m, **kw), memory, cot, (1, 3, 4))
        assert grads["memory"][1, 3, 4] == pytest.approx(want, rel=1e-6, abs=1e-9)
    sd = layer.state_dict()
    for name, idx in [("self_attn.in_proj_weight", (3, 1)), ("linear1.weight", (2, 5))]:
        p = sd[name]

        def with_param(v, name=name):
            layer.load_state_dict({name: v}, strict=False)
            return layer(*args, **kw)

        want = _fd(with_param, p, cot, idx)
        layer.load_state_dict({name: p}, strict=False)
        assert grads[name][idx] == pytest.approx(want, rel=1e-6, abs=1e-9), name


# ---------------------------------------------------------------- masked rows, threads, decoding


def test_fully_masked_rows_get_zero_weights(rng):
    """A query block whose every key block is off: zero weights, and the
    layer's output is the reference's (attention contributing zero)."""
    layer = _layer()
    x = rng.standard_normal((1, 6, E))
    block = np.array([[True, True], [False, False]])  # queries 3..5 see nothing
    out, w = layer(x, src_block_mask=block, block_size=3, need_weights=True)
    assert not w[:, :, 3:].any() and w[:, :, :3].sum(-1) == pytest.approx(1.0)
    close(out, encoder_layer(layer, x, block_mask=block, block_size=3), 1e-12, "masked")
    grads = attnc.vjp(layer, x, src_block_mask=block, block_size=3)[1](np.ones_like(out))
    assert all(np.isfinite(g).all() for g in grads.values())


def test_results_do_not_depend_on_the_thread_count(rng, restore_threads):
    layer = _layer(attnc.nn.TransformerDecoderLayer, attention="sigmoid", dtype=np.float32)
    x, memory = rng.standard_normal((3, 40, E)).astype(np.float32), rng.standard_normal((3, 33, E)).astype(np.float32)
    ids = np.repeat(np.arange(4), 10)[None].repeat(3, 0)
    mem_ids = np.minimum(np.arange(33) // 8, 3)[None].repeat(3, 0)
    kw = dict(tgt_segment_ids=ids, memory_segment_ids=mem_ids, tgt_mask=_causal(40), tgt_is_causal=True)
    runs = []
    for threads in (1, 2, 3):
        attnc.set_num_threads(threads)
        out, pullback = attnc.vjp(layer, x, memory, **kw)
        runs.append((out, pullback(np.ones_like(out))))
    for out, grads in runs[1:]:
        same_bits(out, runs[0][0], "output")
        for name, g in grads.items():
            same_bits(g, runs[0][1][name], name)


def _greedy_by_forward(layers, emb, pos, prompt, steps, memory=None):
    """Greedy tokens from the full forward of the whole prefix at each step."""
    tokens = prompt.copy()
    for _ in range(steps):
        h = emb[tokens] + pos[: tokens.shape[1]]
        L = tokens.shape[1]
        for layer in layers:
            if memory is None:
                h = layer(h, src_mask=_causal(L), is_causal=True)
            else:
                h = layer(h, memory, tgt_mask=_causal(L), tgt_is_causal=True)
        tokens = np.concatenate([tokens, (h[:, -1] @ emb.T).argmax(-1)[:, None]], axis=1)
    return tokens[:, prompt.shape[1] :]


@pytest.mark.parametrize("decoder", [False, True], ids=["decoder_only", "with_memory"])
def test_cached_sigmoid_decoding_equals_the_full_forward(decoder, rng):
    cls = attnc.nn.TransformerDecoderLayer if decoder else attnc.nn.TransformerEncoderLayer
    layers = [_layer(cls, seed=s, attention="sigmoid", sigmoid_bias=-1.0, alibi=True) for s in (0, 1)]
    emb, pos = rng.standard_normal((11, E)), rng.standard_normal((12, E)) * 0.3
    prompt = rng.integers(0, 11, (3, 2))
    memory = rng.standard_normal((3, 5, E)) if decoder else None
    got = attnc.nn.decode(layers, emb, pos, emb, prompt, 9, memory=memory)
    np.testing.assert_array_equal(got, _greedy_by_forward(layers, emb, pos, prompt, 9, memory))


def test_decoding_refuses_the_length_dependent_default_bias():
    layer = _layer(attention="sigmoid")
    emb = np.eye(4, E)
    with pytest.raises(ValueError, match="fixed sigmoid_bias"):
        attnc.nn.decode([layer], emb, np.zeros((5, E)), emb, np.zeros((1, 1), np.int64), 3)


# ---------------------------------------------------------------- settings, errors, empty inputs


def test_attention_setting_round_trips(tmp_path, rng):
    layer = _layer(attnc.nn.TransformerDecoderLayer, attention="sigmoid", sigmoid_bias=-2.0)
    attnc.save(tmp_path / "layer.npz", layer)
    loaded = attnc.load(tmp_path / "layer.npz").eval()
    assert (loaded.attention, loaded.sigmoid_bias) == ("sigmoid", -2.0)
    x, memory = rng.standard_normal((1, 4, E)), rng.standard_normal((1, 3, E))
    same_bits(loaded(x, memory), layer(x, memory), "loaded")


def test_softmax_is_unchanged_by_the_new_arguments(rng):
    """No block mask given: the old path's bits."""
    layer = _layer()
    x = rng.standard_normal((2, 7, E))
    ones = np.zeros((2, 7), np.int64)
    same_bits(layer(x, src_segment_ids=ones), layer(x), "one segment")


@pytest.mark.parametrize(
    "settings, call, error, match",
    [
        ({}, {"src_segment_ids": np.zeros((2, 6), np.int64)}, ValueError, "src_segment_ids has shape"),
        ({}, {"src_segment_ids": np.zeros((2, 7))}, TypeError, "src_segment_ids must be an integer"),
        ({}, {"src_segment_ids": np.zeros((3, 7), np.int64)}, ValueError, "src_segment_ids"),
        ({}, {"prefix_lengths": [1, 2, 3]}, ValueError, "prefix_lengths"),
        ({}, {"prefix_lengths": [1, -1]}, ValueError, "prefix_lengths must be >= 0"),
        ({}, {"prefix_lengths": 1, "src_mask": _causal(7), "is_causal": True}, ValueError, "hide the prefix"),
        ({}, {"block_size": 2}, TypeError, "pass it with src_block_mask"),
        ({}, {"src_block_mask": BLOCKS}, TypeError, "src_block_mask needs block_size"),
        ({}, {"src_block_mask": BLOCKS, "block_size": 3}, ValueError, "src_block_mask has shape"),
        ({}, {"src_block_mask": BLOCKS.astype(int), "block_size": (4, 2)}, TypeError, "src_block_mask must be a bool"),
    ],
)
def test_encoder_errors_name_the_argument(settings, call, error, match, rng):
    layer = _layer(**settings)
    with pytest.raises(error, match=match):
        layer(rng.standard_normal((2, 7, E)), **call)


def test_decoder_and_setting_errors(rng):
    layer = _layer(attnc.nn.TransformerDecoderLayer)
    x, memory = rng.standard_normal((2, 7, E)), rng.standard_normal((2, 5, E))
    with pytest.raises(TypeError, match="memory_segment_ids needs tgt_segment_ids"):
        layer(x, memory, memory_segment_ids=np.zeros((2, 5), np.int64))
    with pytest.raises(ValueError, match="memory_segment_ids has shape"):
        layer(x, memory, tgt_segment_ids=SEGMENTS, memory_segment_ids=SEGMENTS)
    with pytest.raises(ValueError, match="memory_block_mask has shape"):
        layer(x, memory, memory_block_mask=BLOCKS, block_size=4)
    model = attnc.nn.Transformer(E, H, 1, 1, F, dtype=np.float64)
    with pytest.raises(TypeError, match="src_segment_ids needs tgt_segment_ids"):
        model(memory, x, src_segment_ids=np.zeros((2, 5), np.int64))
    with pytest.raises(ValueError, match="unknown attention 'relu'"):
        _layer(attention="relu")
    with pytest.raises(ValueError, match="sigmoid_bias is the bias of attention='sigmoid'"):
        _layer(sigmoid_bias=-1.0)
    with pytest.raises(ValueError, match="sigmoid_bias must be finite"):
        _layer(attention="sigmoid", sigmoid_bias=float("inf"))
    with pytest.raises(ValueError, match="sinks join a softmax's normaliser"):
        _layer(attention="sigmoid", sinks=True)


@pytest.mark.parametrize("shape", [(0, 7), (2, 0)], ids=["no_rows", "no_positions"])
def test_empty_inputs_give_empty_outputs(shape, rng):
    B, L = shape
    layer = _layer(attnc.nn.TransformerDecoderLayer, attention="sigmoid")
    x, memory = np.zeros((B, L, E)), rng.standard_normal((B, 3, E))
    ids = np.zeros((B, L), np.int64)
    out = layer(x, memory, tgt_segment_ids=ids, memory_segment_ids=np.zeros((B, 3), np.int64))
    assert out.shape == (B, L, E)
    encoder = _layer(attention="sigmoid")
    assert encoder(x, src_segment_ids=ids, prefix_lengths=np.zeros(B, np.int64)).shape == (B, L, E)


# ---------------------------------------------------------------- GPT's packed training


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope", "alibi"])
def test_packed_gpt_equals_each_document_alone(positional, rng):
    """Documents packed in a row (positions restarting at each): the logits
    and the gradients (summed over the documents) of running each alone."""
    m = attnc.models.GPT(11, 16, 2, 2, E, dropout=0.0, positional=positional, dtype=np.float64, seed=0).eval()
    idx = rng.integers(0, 11, (2, 9))
    ids, pieces = _packed((4, 2, 3))
    ids = np.concatenate([ids, ids + 5])  # the same layout in both rows, other ids
    logits, pullback = attnc.vjp(m, idx, segment_ids=ids)
    cot = rng.standard_normal(logits.shape)
    grads = pullback(cot)
    summed = {}
    for s in pieces:
        alone, pb = attnc.vjp(m, idx[:, s])
        close(logits[:, s], alone, 1e-12, f"{positional} {s}")
        for name, g in pb(cot[:, s]).items():
            summed[name] = summed.get(name, 0) + g
    for name, g in summed.items():
        close(grads[name], g, 1e-12, name)


def test_gpt_segment_ids_errors(rng):
    m = attnc.models.GPT(11, 16, 1, 2, E, seed=0)
    with pytest.raises(ValueError, match="segment_ids"):
        m(rng.integers(0, 11, (2, 5)), segment_ids=np.zeros((2, 4), np.int64))
    with pytest.raises(TypeError, match="segment_ids must be an integer"):
        m(rng.integers(0, 11, (2, 5)), segment_ids=np.zeros((2, 5)))
