"""The block masks (segment_ids, prefix_lengths, block_mask with block_size)
and sigmoid attention in attnc.torch: scaled_dot_product_attention,
multi_head_attention and nn.MultiheadAttention, on both paths (eager and the
custom ops): bit for bit attnc's NumPy calls, the NumPy float64 reference
(tests/reference/sdpa_variants_ref.py), gradcheck (finite differences) of
every float input, opcheck of the ops with mask tensors, torch.compile
(fullgraph) against eager, and the errors."""

import numpy as np
import pytest

import attnc
from helpers import close, same_bits
from reference import sdpa_variants_ref as ref

B, H, L, S = 2, 2, 6, 7


@pytest.fixture
def at(torch):
    import attnc.torch

    return attnc.torch


def _masks(name, torch, rng):
    """One named combination, as attnc.torch takes it (integer and bool
    tensors; an int prefix)."""
    ids_q = torch.tensor(np.sort(rng.integers(0, 3, (B, L)), axis=-1))
    ids_k = torch.tensor(np.sort(rng.integers(0, 3, (B, S)), axis=-1), dtype=torch.int32)
    blocks = torch.tensor(rng.random((B, 1, 3, 3)) < 0.6)
    return {
        "segments": {"segment_ids": (ids_q, ids_k)},
        "prefix": {"prefix_lengths": torch.tensor([2, 5]), "is_causal": True},
        "prefix_int": {"prefix_lengths": 3, "is_causal": True},
        "block": {"block_mask": blocks, "block_size": (2, 3)},
        "sigmoid": {"activation": "sigmoid", "sigmoid_bias": -0.5},
        "all": {
            "activation": "sigmoid",
            "segment_ids": (ids_q, ids_k),
            "prefix_lengths": torch.tensor([1, 4]),
            "is_causal": True,
            "block_mask": blocks,
            "block_size": (2, 3),
            "window": (3, 1),
        },
        "segments_sinks": {"segment_ids": (ids_q, ids_k), "sinks": torch.tensor([0.3, -0.6], dtype=torch.float64)},
    }[name]


NAMES = ["segments", "prefix", "prefix_int", "block", "sigmoid", "all", "segments_sinks"]


def _numpy(options):
    """The options as attnc's NumPy functions take them."""

    def arr(v):
        if isinstance(v, tuple) and v and hasattr(v[0], "numpy"):
            return tuple(t.numpy() for t in v)
        return v.detach().numpy() if hasattr(v, "detach") else v

    return {n: arr(v) for n, v in options.items()}


@pytest.mark.parametrize("name", NAMES)
def test_sdpa_matches_attnc_the_reference_and_gradcheck(name, torch_path, torch, at, rng):
    q, k, v = (torch.tensor(rng.standard_normal((B, H, n, 4)), requires_grad=True) for n in (L, S, S))
    options = _masks(name, torch, rng)
    if "sinks" in options:
        options["sinks"].requires_grad_()
    out, w = at.scaled_dot_product_attention(q, k, v, return_weights=True, **options)
    arrays = [t.detach().numpy() for t in (q, k, v)]
    want, want_w = attnc.scaled_dot_product_attention(*arrays, return_weights=True, **_numpy(options))
    same_bits(out.detach().numpy(), want, "output")
    same_bits(w.detach().numpy(), want_w, "weights")
    ref_out, ref_w = ref.scaled_dot_product_attention(*arrays, return_weights=True, **_numpy(options))
    close(want, ref_out, 1e-12, "output against the reference")
    close(want_w, ref_w, 1e-12, "weights against the reference")
    assert (ref_w == 0).any() or name == "sigmoid"
    floats = [t for t in (options.get("sinks"),) if t is not None]

    def f(q, k, v, *ts):
        kw = {**options, **dict(zip(["sinks"], ts))}
        return at.scaled_dot_product_attention(q, k, v, return_weights=True, **kw)

    assert torch.autograd.gradcheck(f, (q, k, v, *floats))


@pytest.mark.parametrize("name", ["segments", "prefix", "block", "all"])
def test_multi_head_attention_matches_attnc_and_gradcheck(name, torch_path, torch, at, rng):
    E = 4
    t = lambda *s: torch.tensor(rng.standard_normal(s) * 0.5, requires_grad=True)  # noqa: E731
    x, kv = t(B, L, E), t(B, S, E)
    w_in, b_in, w_out = t(3 * E, E), t(3 * E), t(E, E)
    options = _masks(name, torch, rng)
    if name == "prefix":  # self-attention: L keys
        kv = x
    if "segment_ids" in options and name != "all":
        options["key_padding_mask"] = torch.tensor(rng.random((B, S)) < 0.2)
    args = (x, kv, kv, H, w_in, b_in, w_out, None)
    out, w = at.multi_head_attention(*args, average_attn_weights=False, **options)
    arrays = [a.detach().numpy() if a is not None and hasattr(a, "detach") else a for a in args]
    want, want_w = attnc.multi_head_attention(*arrays, average_attn_weights=False, **_numpy(options))
    same_bits(out.detach().numpy(), want, "output")
    same_bits(w.detach().numpy(), want_w, "weights")

    def f(x, kv, w_in, b_in, w_out):
        return at.multi_head_attention(x, kv, kv, H, w_in, b_in, w_out, None, **options)

    assert torch.autograd.gradcheck(f, (x, kv, w_in, b_in, w_out))


def test_module_activation_setting_and_per_call_masks(torch_path, torch, at, rng):
    """activation and sigmoid_bias are constructor settings; the masks are
    per call (batch first whatever batch_first says); state_dict is torch's."""
    torch.manual_seed(0)
    m = at.nn.MultiheadAttention(8, 2, activation="sigmoid", sigmoid_bias=-1.0, dtype=torch.float64)
    assert sorted(m.state_dict()) == sorted(torch.nn.MultiheadAttention(8, 2).state_dict())
    x = torch.tensor(rng.standard_normal((L, B, 8)), requires_grad=True)  # sequence first
    ids = torch.tensor(np.sort(rng.integers(0, 2, (B, L)), axis=-1))
    blocks = torch.tensor(rng.random((1, 2, 2, 2)) < 0.7)
    masks = dict(segment_ids=ids, is_causal=True, prefix_lengths=torch.tensor([2, 0]), block_mask=blocks, block_size=3)
    out, w = m(x, x, x, average_attn_weights=False, **masks)
    sd = {n: p.detach().numpy() for n, p in m.state_dict().items()}
    xb = x.detach().numpy().transpose(1, 0, 2)
    weights = (sd["in_proj_weight"], sd["in_proj_bias"], sd["out_proj.weight"], sd["out_proj.bias"])
    kw = dict(activation="sigmoid", sigmoid_bias=-1.0, average_attn_weights=False, **_numpy(masks))
    want, want_w = attnc.multi_head_attention(xb, xb, xb, 2, *weights, **kw)
    same_bits(out.detach().numpy().transpose(1, 0, 2), want, "module output")
    same_bits(w.detach().numpy(), want_w, "module weights")
    out.sum().backward()
    assert x.grad is not None and m.in_proj_weight.grad is not None
    with pytest.raises(ValueError, match="sigmoid_bias"):
        at.nn.MultiheadAttention(8, 2, sigmoid_bias=-1.0)


def test_opcheck_with_masks(torch, at, rng):
    """The ops with integer, bool and float tensors in variant_tensors, and
    their backward ops."""
    ops = torch.ops.attnc
    q = torch.tensor(rng.standard_normal((B, H, L, 4)), requires_grad=True)
    ids = torch.tensor(np.sort(rng.integers(0, 2, (B, L)), axis=-1))
    sinks = torch.tensor([0.5, -0.5], dtype=torch.float64, requires_grad=True)
    blocks = torch.tensor(rng.random((B, 1, 2, 2)) < 0.7)
    names = "('tensors', ('sinks', 'segment_ids', 'prefix_lengths', 'block_mask'))"
    text = f"[('block_size', 3), {names}]"
    tensors = [sinks, ids, torch.tensor([1, 3]), blocks]
    args = (q, q, q, None, 0.0, True, None, False, True, None, text, tensors)
    torch.library.opcheck(ops.scaled_dot_product_attention, args)
    d = [t.detach() for t in tensors]
    qd = q.detach()
    out, w, lse = ops.scaled_dot_product_attention(qd, qd, qd, None, 0.0, True, None, False, True, None, text, d)
    grads = (torch.randn_like(out), torch.randn_like(w), qd, qd, qd, None, out, lse, 0.0, True, None, False, None)
    torch.library.opcheck(ops.scaled_dot_product_attention_backward, grads + (text, d))
    x = torch.tensor(rng.standard_normal((B, L, 4)), requires_grad=True)
    params = [torch.tensor(rng.standard_normal(s), requires_grad=True) for s in ((12, 4), (12,), (4, 4), (4,))]
    text = "[('activation', 'sigmoid'), ('block_size', 3), ('tensors', ('segment_ids', 'block_mask'))]"
    mha = (x, x, x, 2, *params, None, None, False, False, False, None, None, None, None, None, False, 0.0, None)
    torch.library.opcheck(ops.multi_head_attention, mha + (text, [ids, blocks[:, :, :2]]))


def test_compile_fullgraph_matches_eager(torch, at, rng):
    """The masks as graph inputs, and sinks without ALiBi's slopes (a list
    of tensor options without every one: their gradients under compile)."""
    q = torch.tensor(rng.standard_normal((B, H, L, 4)), requires_grad=True)
    sinks = torch.tensor([0.5, -0.5], dtype=torch.float64, requires_grad=True)
    ids = torch.tensor(np.sort(rng.integers(0, 2, (B, L)), axis=-1))
    blocks = torch.tensor(rng.random((1, H, 3, 3)) < 0.7)
    w_in = torch.tensor(rng.standard_normal((12, 4)), requires_grad=True)
    x = torch.tensor(rng.standard_normal((B, L, 4)), requires_grad=True)

    def f(q, sinks, x, w_in):
        a = at.scaled_dot_product_attention(q, q, q, sinks=sinks, segment_ids=ids, block_mask=blocks, block_size=2)
        b, _ = at.multi_head_attention(
            x,
            x,
            x,
            2,
            w_in,
            None,
            w_in[:4],
            None,
            is_causal=True,
            prefix_lengths=torch.tensor([2, 4]),
            activation="sigmoid",
            need_weights=False,
        )
        return (a**2).sum() + (b**2).sum()

    inputs = (q, sinks, x, w_in)
    eager = torch.autograd.grad(f(*inputs), inputs)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    traced = torch.autograd.grad(compiled(*inputs), inputs)
    for a, b in zip(eager, traced):
        assert torch.equal(a, b)
    assert eager[1].abs().min() > 0


def test_bad_masks_are_named(torch, at, rng):
    q = torch.tensor(rng.standard_normal((B, H, L, 4)))
    ids = torch.zeros(B, L, dtype=torch.int64)
    with pytest.raises(TypeError, match="segment_ids"):
        at.scaled_dot_product_attention(q, q, q, segment_ids=np.zeros((B, L), np.int64))
    with pytest.raises(TypeError, match=r"segment_ids\[1\]"):
        at.scaled_dot_product_attention(q, q, q, segment_ids=(ids, ids.numpy()))
    with pytest.raises(TypeError, match="segment_ids"):
        at.scaled_dot_product_attention(q, q, q, segment_ids=(ids, ids, ids))
    with pytest.raises(TypeError, match="segment_ids"):
        at.scaled_dot_product_attention(q, q, q, segment_ids=ids.double())
    with pytest.raises(TypeError, match="block_mask"):
        at.scaled_dot_product_attention(q, q, q, block_mask=torch.ones(1, 1, 2, 2), block_size=3)
    with pytest.raises(TypeError, match="prefix_lengths"):
        at.scaled_dot_product_attention(q, q, q, is_causal=True, prefix_lengths=2.0)
    with pytest.raises(ValueError, match="prefix_lengths"):
        at.scaled_dot_product_attention(q, q, q, is_causal=True, prefix_lengths=torch.tensor([1, -1]))
    with pytest.raises(ValueError, match="sigmoid_bias"):
        at.scaled_dot_product_attention(q, q, q, sigmoid_bias=1.0)
    with pytest.raises(TypeError, match="block_size"):
        at.scaled_dot_product_attention(q, q, q, block_size=2)
    x, w = torch.tensor(rng.standard_normal((B, L, 4))), torch.tensor(rng.standard_normal((12, 4)))
    with pytest.raises(ValueError, match="prefix_lengths.*add_zero_attn"):
        at.multi_head_attention(x, x, x, 2, w, None, w[:4], None, is_causal=True, prefix_lengths=1, add_zero_attn=True)
