"""Issue 30's block masks and sigmoid attention in attnc.torch.nn's
Transformer layers: per-call segment ids (a decoder's target/memory pairs),
prefix lengths, block masks, and the attention="sigmoid" setting. The torch
twin with a layer's weights against attnc.nn's C layer (checked against its
own NumPy float64 reference in test_layer_masks.py) for the output and every
gradient (attnc.vjp), torch.autograd.gradcheck in float64 (finite
differences), torch.compile(fullgraph) against eager, state_dict keys and
the errors."""

import numpy as np
import pytest

import attnc
from helpers import close

E, H, F = 8, 2, 12
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1, 1], [5, 5, 7, 7, 7, 7, 9]])
MEM_SEGMENTS = np.array([[0, 0, 1, 1, 1], [5, 7, 7, 9, 9]])
BLOCKS = np.array([[True, False, True, True], [False, True, True, True]])  # (2 query blocks, 4 key blocks)
CAUSAL = np.triu(np.ones((7, 7), bool), k=1)


@pytest.fixture
def at(torch):
    import attnc.torch

    return attnc.torch


def _twins(at, torch, decoder, **settings):
    """(attnc.torch.nn layer, attnc.nn layer with its weights), float64, no dropout."""
    name = "TransformerDecoderLayer" if decoder else "TransformerEncoderLayer"
    torch.manual_seed(0)
    layer = getattr(at.nn, name)(E, H, F, dropout=0.0, batch_first=True, dtype=torch.float64, **settings)
    with torch.no_grad():  # biases off zero, so a gradient that skips one shows
        for n, p in layer.named_parameters():
            if n.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.5)
    c = getattr(attnc.nn, name)(E, H, F, dropout=0.0, dtype=np.float64, **settings).eval()
    c.load_state_dict({n: p.detach().numpy().copy() for n, p in layer.state_dict().items()})
    return layer, c


def _tensors(torch, call):
    return {n: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for n, v in call.items()}


ENCODER_CASES = {
    "segments": ({}, {"src_segment_ids": SEGMENTS}),
    "segments_causal": (
        {"alibi": True, "window": (3, 0)},
        {"src_segment_ids": SEGMENTS, "src_mask": CAUSAL, "is_causal": True},
    ),
    "prefix": ({}, {"prefix_lengths": np.array([3, 0])}),
    "block_mask": ({}, {"src_block_mask": BLOCKS, "block_size": (4, 2)}),
    "sigmoid": ({"attention": "sigmoid"}, {}),
    "sigmoid_bias_segments": (
        {"attention": "sigmoid", "sigmoid_bias": -1.5, "softcap": 2.0},
        {"src_segment_ids": SEGMENTS, "prefix_lengths": 2},
    ),
}

DECODER_CALL = {
    "tgt_mask": CAUSAL,
    "tgt_is_causal": True,
    "tgt_segment_ids": SEGMENTS,
    "memory_segment_ids": MEM_SEGMENTS,
    "tgt_block_mask": np.array([[True, True], [False, True]])[None, None],  # (1, 1, 2, 2) with block_size 4
    "memory_block_mask": np.array([[[True, False], [True, True]], [[True, True], [False, True]]]),  # (H, 2, 2)
    "block_size": 4,
}


def _check_against_c(torch, layer, c, inputs, call, names=None):
    """The twin's output and the gradients of its inputs and parameters
    equal the C layer's (attnc.vjp) for a random cotangent."""
    args = [torch.tensor(a, requires_grad=True) for a in inputs]
    out = layer(*args, **_tensors(torch, call))
    want, pullback = attnc.vjp(c, *inputs, **call)
    close(out.detach().numpy(), want, 1e-12, "output")
    cot = np.random.default_rng(1).standard_normal(want.shape)
    grads = pullback(cot)
    params = dict(layer.named_parameters())
    got = torch.autograd.grad(out, [*args, *params.values()], torch.from_numpy(cot))
    names = names or (["tgt", "memory"] if len(inputs) == 2 else ["src"])
    for name, g in zip([*names, *params], got):
        close(g.numpy(), grads[name], 1e-11, name)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
@pytest.mark.parametrize("case", sorted(ENCODER_CASES))
def test_encoder_layer_equals_the_c_layer(case, norm_first, torch, at, rng):
    settings, call = ENCODER_CASES[case]
    layer, c = _twins(at, torch, False, norm_first=norm_first, **settings)
    _check_against_c(torch, layer, c, [rng.standard_normal((2, 7, E))], call)


@pytest.mark.parametrize("attention", ["softmax", "sigmoid"])
def test_decoder_layer_with_cross_segments_equals_the_c_layer(attention, torch, at, rng):
    layer, c = _twins(at, torch, True, attention=attention)
    inputs = [rng.standard_normal((2, 7, E)), rng.standard_normal((2, 5, E))]
    _check_against_c(torch, layer, c, inputs, DECODER_CALL)


def test_sequence_first_layers_take_the_masks_batch_first(torch, at, rng):
    """batch_first=False: the inputs are (L, B, E), the block masks (B, L) still."""
    layer, _ = _twins(at, torch, True, attention="sigmoid")
    seq = at.nn.TransformerDecoderLayer(E, H, F, dropout=0.0, dtype=torch.float64, attention="sigmoid")
    seq.load_state_dict(layer.state_dict())
    x, memory = torch.tensor(rng.standard_normal((2, 7, E))), torch.tensor(rng.standard_normal((2, 5, E)))
    call = _tensors(torch, DECODER_CALL)
    want = layer(x, memory, **call)
    close(
        seq(x.transpose(0, 1), memory.transpose(0, 1), **call).transpose(0, 1).detach().numpy(),
        want.detach().numpy(),
        1e-12,
        "seq",
    )


def test_gradcheck_tiny_layers(torch, at, rng):
    enc, _ = _twins(at, torch, False, attention="sigmoid", sigmoid_bias=-1.0)
    dec, _ = _twins(at, torch, True)
    x = torch.tensor(rng.standard_normal((2, 4, E)), requires_grad=True)
    memory = torch.tensor(rng.standard_normal((2, 3, E)), requires_grad=True)
    ids, mem_ids = torch.tensor([[0, 0, 1, 1], [2, 3, 3, 3]]), torch.tensor([[0, 1, 1], [2, 2, 3]])
    w = enc.self_attn.in_proj_weight
    assert torch.autograd.gradcheck(lambda x, w: enc(x, src_segment_ids=ids, prefix_lengths=1), (x, w))
    assert torch.autograd.gradcheck(
        lambda x, m: dec(x, m, tgt_segment_ids=ids, memory_segment_ids=mem_ids), (x, memory)
    )


def test_compile_fullgraph_matches_eager(torch, at, rng):
    layer, _ = _twins(at, torch, True, attention="sigmoid", sigmoid_bias=-0.5)
    x = torch.tensor(rng.standard_normal((2, 7, E)), requires_grad=True)
    memory = torch.tensor(rng.standard_normal((2, 5, E)))
    call = _tensors(torch, DECODER_CALL)

    def f(x):
        return (layer(x, memory, **call) ** 2).sum()

    eager = torch.autograd.grad(f(x), x)[0]
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert torch.equal(torch.autograd.grad(compiled(x), x)[0], eager)


def test_state_dict_keys_are_torchs(torch, at):
    for decoder in (False, True):
        layer, _ = _twins(at, torch, decoder, attention="sigmoid")
        cls = torch.nn.TransformerDecoderLayer if decoder else torch.nn.TransformerEncoderLayer
        assert sorted(layer.state_dict()) == sorted(cls(E, H, F).state_dict())
        attns = [layer.self_attn, *([layer.multihead_attn] if decoder else [])]
        assert all(a.activation == "sigmoid" for a in attns)


ENCODER_ERRORS = [
    ({"prefix_lengths": 1, "src_mask": CAUSAL, "is_causal": True}, ValueError, "hide the prefix"),
    ({"prefix_lengths": 1, "src_mask": CAUSAL}, ValueError, "no src_mask with prefix_lengths"),
    ({"prefix_lengths": 1, "is_causal": True}, ValueError, "prefix_lengths makes .* is_causal=True"),
    ({"block_size": 2}, TypeError, "pass it with src_block_mask"),
    ({"src_block_mask": BLOCKS}, TypeError, "block_mask needs block_size"),
    ({"src_segment_ids": SEGMENTS[:, :5]}, ValueError, "segment_ids"),
]


@pytest.mark.parametrize("call, error, match", ENCODER_ERRORS)
def test_encoder_errors_name_the_argument(call, error, match, torch, at, rng):
    layer, _ = _twins(at, torch, False)
    with pytest.raises(error, match=match):
        layer(torch.tensor(rng.standard_normal((2, 7, E))), **_tensors(torch, call))


def test_decoder_and_setting_errors(torch, at, rng):
    layer, _ = _twins(at, torch, True)
    x, memory = torch.tensor(rng.standard_normal((2, 7, E))), torch.tensor(rng.standard_normal((2, 5, E)))
    with pytest.raises(TypeError, match="memory_segment_ids needs tgt_segment_ids"):
        layer(x, memory, memory_segment_ids=torch.zeros((2, 5), dtype=torch.int64))
    with pytest.raises(TypeError, match="pass it with one"):
        layer(x, memory, block_size=4)
    cls = at.nn.TransformerEncoderLayer
    with pytest.raises(ValueError, match="unknown attention 'relu'"):
        cls(E, H, F, attention="relu")
    with pytest.raises(ValueError, match="sigmoid_bias is the bias of attention='sigmoid'"):
        cls(E, H, F, sigmoid_bias=-1.0)
    with pytest.raises(ValueError, match="sinks join a softmax's normaliser"):
        at.nn.TransformerDecoderLayer(E, H, F, attention="sigmoid", sinks=True)


def test_transformer_with_packed_pairs_equals_the_c_transformer(torch, at, rng):
    """Packed (source, target) pairs and block masks through the stacks."""
    torch.manual_seed(2)
    model = at.nn.Transformer(E, H, 2, 2, F, dropout=0.0, batch_first=True, dtype=torch.float64)
    c = attnc.nn.Transformer(E, H, 2, 2, F, dropout=0.0, dtype=np.float64).eval()
    c.load_state_dict({n: p.detach().numpy().copy() for n, p in model.state_dict().items()})
    src, tgt = rng.standard_normal((2, 5, E)), rng.standard_normal((2, 7, E))
    call = dict(
        src_segment_ids=MEM_SEGMENTS,
        tgt_segment_ids=SEGMENTS,
        tgt_mask=CAUSAL,
        tgt_is_causal=True,
        src_block_mask=np.array([[True, False], [True, True]]),
        memory_block_mask=DECODER_CALL["memory_block_mask"],
        block_size=4,
    )
    _check_against_c(torch, model, c, [src, tgt], call, names=["src", "tgt"])
    with pytest.raises(TypeError, match="src_segment_ids needs tgt_segment_ids"):
        model(torch.tensor(src), torch.tensor(tgt), src_segment_ids=torch.from_numpy(MEM_SEGMENTS))
    with pytest.raises(TypeError, match="pass it with one"):
        model(torch.tensor(src), torch.tensor(tgt), block_size=2)
