"""Issue 30's kernel options in attnc.torch: the custom ops
scaled_dot_product_attention and multi_head_attention and the modules of
attnc.torch.nn, against the NumPy float64 references
(tests/reference/sdpa_variants_ref.py, mha_variants_ref.py), gradients of
query, key, value, sinks and ALiBi's slopes by torch.autograd.gradcheck
(finite differences), torch.compile(fullgraph) against eager, state_dict
round trips and the errors. (opcheck of the ops with options: test_torch_fused.)"""

import numpy as np
import pytest

from helpers import close
from reference import mha_variants_ref
from reference import sdpa_variants_ref as ref

OPTIONS = {
    "alibi": lambda t: {"alibi_slopes": t(ref.alibi_slopes(2))},
    "window": lambda t: {"window": (2, 1)},
    "softcap": lambda t: {"softcap": 0.8},
    "sinks": lambda t: {"sinks": t(np.array([0.4, -0.7]))},
    "all": lambda t: {
        "alibi_slopes": t(np.array([0.3, 0.1])),
        "window": (3, 0),
        "softcap": 1.2,
        "sinks": t([0.4, 1.0]),
    },
}


@pytest.fixture
def at(torch):
    import attnc.torch

    return attnc.torch


def _numpy(options):
    return {n: v.detach().numpy() if hasattr(v, "detach") else v for n, v in options.items()}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_sdpa_op_matches_the_reference_and_gradcheck(name, torch, at, rng):
    def t(a):
        return torch.tensor(np.asarray(a, np.float64), requires_grad=True)

    q, k, v = (t(rng.standard_normal((1, 2, 6, 4))) for _ in range(3))
    options = OPTIONS[name](t)
    out, w = at.scaled_dot_product_attention(q, k, v, return_weights=True, **options)
    want, want_w = ref.scaled_dot_product_attention(
        q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), return_weights=True, **_numpy(options)
    )
    close(out.detach().numpy(), want, 1e-12, "output")
    close(w.detach().numpy(), want_w, 1e-12, "weights")
    tensors = {n: o for n, o in options.items() if hasattr(o, "requires_grad")}

    def f(q, k, v, *ts):
        return at.scaled_dot_product_attention(q, k, v, **{**options, **dict(zip(tensors, ts))})

    assert torch.autograd.gradcheck(f, (q, k, v, *tensors.values()))


def test_compile_fullgraph_matches_eager(torch, at, rng):
    q = torch.tensor(rng.standard_normal((2, 2, 7, 4)), requires_grad=True)
    sinks = torch.tensor([0.5, -0.5], dtype=torch.float64, requires_grad=True)
    slopes = torch.tensor([0.25, 0.0625], dtype=torch.float64, requires_grad=True)

    def f(q, sinks, slopes):
        out = at.scaled_dot_product_attention(q, q, q, window=(2, 0), softcap=3.0, sinks=sinks, alibi_slopes=slopes)
        return (out**2).sum()

    eager = torch.autograd.grad(f(q, sinks, slopes), (q, sinks, slopes))
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    traced = torch.autograd.grad(compiled(q, sinks, slopes), (q, sinks, slopes))
    for a, b in zip(eager, traced):
        assert torch.equal(a, b)


def _state(module, torch):
    return {n: p.detach().numpy().astype(np.float64) for n, p in module.state_dict().items()}


def test_multihead_module_matches_the_reference(torch, at, rng):
    torch.manual_seed(0)
    m = at.nn.MultiheadAttention(
        8, 2, batch_first=True, sinks=True, alibi=True, window=(2, 0), softcap=2.0, dtype=torch.float64
    )
    with torch.no_grad():
        m.sinks.copy_(torch.tensor([0.3, -1.2]))
    x = torch.tensor(rng.standard_normal((2, 6, 8)), requires_grad=True)
    out, _ = m(x, x, x)
    sd = _state(m, torch)
    assert sorted(sd) == sorted(["sinks", *torch.nn.MultiheadAttention(8, 2).state_dict()])
    weights = (sd[n] for n in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"))
    options = dict(alibi_slopes=ref.alibi_slopes(2), window=(2, 0), softcap=2.0, sinks=sd["sinks"])
    want, _ = mha_variants_ref.mha(x.detach().numpy(), *weights, 2, **options)
    close(out.detach().numpy(), want, 1e-12, "module")
    out.sum().backward()
    assert m.sinks.grad is not None and m.sinks.grad.abs().min() > 0
    twin = at.nn.MultiheadAttention(8, 2, batch_first=True, sinks=True, alibi=True, window=(2, 0), softcap=2.0)
    twin = twin.double()
    twin.load_state_dict(m.state_dict())
    assert torch.equal(twin(x, x, x)[0], out)


def test_encoder_layer_matches_the_reference(torch, at, rng):
    torch.manual_seed(1)
    layer = at.nn.TransformerEncoderLayer(
        8, 2, 16, dropout=0.0, batch_first=True, sinks=True, alibi=True, window=(1, 1), dtype=torch.float64
    )
    with torch.no_grad():
        layer.self_attn.sinks.copy_(torch.tensor([0.7, -0.4]))
    x = torch.tensor(rng.standard_normal((2, 5, 8)))
    sd = _state(layer, torch)
    options = dict(alibi_slopes=ref.alibi_slopes(2), window=(1, 1), sinks=sd["self_attn.sinks"])
    want = mha_variants_ref.encoder_layer(sd, x.numpy(), 2, **options)
    close(layer(x).detach().numpy(), want, 1e-12, "layer")


def test_bad_options_are_named(torch, at, rng):
    q = torch.tensor(rng.standard_normal((1, 2, 3, 4)))
    with pytest.raises(TypeError, match="window must be a pair"):
        at.scaled_dot_product_attention(q, q, q, window=2)
    with pytest.raises(ValueError, match="sinks must have shape"):
        at.scaled_dot_product_attention(q, q, q, sinks=torch.zeros(3, dtype=torch.float64))
    with pytest.raises(TypeError, match="sinks"):
        at.scaled_dot_product_attention(q, q, q, sinks=np.zeros(2))
    with pytest.raises(ValueError, match="softcap must be a finite float > 0"):
        at.nn.MultiheadAttention(8, 2, softcap=-1.0)
