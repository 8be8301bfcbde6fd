"""attnc.torch.function and attnc.torch.Module: any attnc.vjp-differentiable
function or module inside torch autograd.

Every differentiable case of tests/test_empty.py's CASES (each public
function, module and model attnc.vjp differentiates) runs through the
wrappers: outputs and gradients equal attnc.vjp's bit for bit. Then
gradcheck in float64, a torch.optim.Adam loop training the attnc module in
place (against Adam on plain tensors fed attnc.vjp's gradients), the two
sides of the shared memory, and the error messages.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_empty import CASES, Dims, arguments, cotangent, flat

import attnc
from attnc import nn

GRAD_CASES = [pytest.param(c, id=f"{c.name}[{i}]") for i, c in enumerate(CASES) if c.grad]


@pytest.fixture
def at(torch):
    import attnc.torch

    return attnc.torch


def tensors(torch, v):
    """v with every array a tensor owning a copy (float ones requiring grad)."""
    if isinstance(v, np.ndarray):
        t = torch.from_numpy(v.copy())
        return t.requires_grad_() if v.dtype.kind == "f" else t
    if isinstance(v, (tuple, list)):
        return type(v)(tensors(torch, e) for e in v)
    if isinstance(v, dict):
        return {k: tensors(torch, e) for k, e in v.items()}
    return v


def cotangents(outputs, seed: int) -> tuple:
    """Random cotangents, one per output (test_empty's cotangent, as the pullback takes them)."""
    cot = cotangent(outputs, np.random.default_rng(seed))
    return cot if isinstance(outputs, tuple) else (cot,)


def wrapped(at, fn):
    return at.Module(fn) if isinstance(fn, nn.Module) else at.function(fn)


def torch_flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in torch_flat(o)]
    return [] if out is None else [out]


@pytest.mark.parametrize("case", GRAD_CASES)
def test_gradients_equal_vjp(case, torch, at):
    fn, args, kwargs = case.call(Dims(np.float64))
    outputs, pullback = attnc.vjp(fn, *args, **kwargs)
    cots = cotangents(outputs, 1)
    want = pullback(*cots)

    fn2, args2, kwargs2 = case.call(Dims(np.float64))  # the same call, built afresh
    targs, tkwargs = tensors(torch, args2), tensors(torch, kwargs2)
    model = wrapped(at, fn2)
    got = torch_flat(model(*targs, **tkwargs))
    expected = flat(outputs)
    assert len(got) == len(expected)
    for g, w in zip(got, expected):
        assert isinstance(g, torch.Tensor) and np.array_equal(g.detach().numpy(), w)
    pairs = [(o, torch.from_numpy(c)) for o, c in zip(got, flat(cots)) if o.requires_grad]
    torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])

    leaves = {n: t for n, t in arguments(fn2, targs, tkwargs).items() if isinstance(t, torch.Tensor)}
    if isinstance(model, torch.nn.Module):
        leaves.update(model.named_parameters())
    checked = 0
    for name, t in leaves.items():
        if t.dtype.is_floating_point and name in want:
            assert t.grad is not None and np.array_equal(t.grad.numpy(), want[name]), name
            checked += 1
    assert checked == len([n for n in want if n in leaves]) and checked > 0


def test_states_inside_tuples(torch, at):
    """An LSTM's hx = (h0, c0) and a GRU's hx (whose gradients attnc names h0, c0)."""
    rng = np.random.default_rng(0)
    x, h0, c0 = (rng.standard_normal(s) for s in ((2, 5, 3), (1, 2, 4), (1, 2, 4)))
    for layer, hx in (
        (nn.LSTM(3, 4, dtype=np.float64, seed=0), (h0, c0)),
        (nn.GRU(3, 4, dtype=np.float64, seed=0), h0),
    ):
        (out, _), pullback = attnc.vjp(layer, x, hx)
        want = pullback(np.ones_like(out), None)
        tx, thx = tensors(torch, x), tensors(torch, hx)
        tout, _ = at.Module(layer)(tx, thx)
        tout.sum().backward()
        assert np.array_equal(tx.grad.numpy(), want["input"])
        states = thx if isinstance(thx, tuple) else (thx,)
        for t, name in zip(states, ("h0", "c0")):
            assert np.array_equal(t.grad.numpy(), want[name]), name


def test_gradcheck(torch, at):
    rng = np.random.default_rng(0)
    attention = at.function(attnc.attention)
    q, k, v = (torch.tensor(rng.standard_normal(s), requires_grad=True) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 2)))
    mask = torch.from_numpy(rng.random((2, 3, 5)) < 0.7)
    assert torch.autograd.gradcheck(
        lambda q, k, v: attention(q, k, v, score="general", weight=torch.eye(4, dtype=torch.float64) * 0.5, mask=mask),
        (q, k, v),
    )
    ntm = at.Module(attnc.models.NTM(3, 2, controller_size=4, memory_slots=5, memory_width=3, dtype=np.float64, seed=0))
    x = torch.tensor(rng.standard_normal((2, 3, 3)), requires_grad=True)
    weight = next(ntm.parameters())  # gradcheck perturbs it in place: the attnc module's array
    assert torch.autograd.gradcheck(lambda x, w: ntm(x), (x, weight))


def test_adam_trains_the_attnc_module_in_place(torch, at):
    """Parameters share the module's arrays; Adam's in-place steps are the
    steps of Adam on plain tensors given attnc.vjp's gradients."""
    net = attnc.models.PointerNet(2, 6, dtype=np.float64, seed=0)
    twin = {n: torch.tensor(p) for n, p in net.state_dict().items()}
    model = at.Module(net)
    arrays = dict(net.named_parameters())
    for name, p in model.named_parameters():
        assert np.shares_memory(p.detach().numpy(), arrays[name])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    opt_twin = torch.optim.Adam(list(twin.values()), lr=0.01)
    rng = np.random.default_rng(0)
    for step in range(3):
        points = rng.random((4, 5, 2))
        targets = np.argsort(rng.random((4, 5)), axis=-1)
        reference = attnc.models.PointerNet(2, 6, dtype=np.float64, seed=0)
        reference.load_state_dict({n: t.numpy() for n, t in twin.items()})
        out, pullback = attnc.vjp(reference, points, targets)
        cot = cotangents(out, step)
        want = pullback(*cot)
        for n, t in twin.items():
            t.grad = torch.from_numpy(want[n])
        opt_twin.step()

        opt.zero_grad()
        got = model(torch.from_numpy(points), torch.from_numpy(targets))
        pairs = [(o, torch.from_numpy(c)) for o, c in zip(torch_flat(got), flat(cot)) if o.requires_grad]
        torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
        opt.step()
    initial = attnc.models.PointerNet(2, 6, dtype=np.float64, seed=0).state_dict()
    for name, a in net.named_parameters():
        assert a is arrays[name], name  # trained in place: the same arrays
        assert np.array_equal(a, twin[name].numpy()), name
    assert sum(not np.array_equal(a, initial[n]) for n, a in net.named_parameters()) > len(initial) // 2


def test_state_dict_names_and_both_sides_of_the_sharing(torch, at):
    layer = nn.TransformerEncoderLayer(4, 2, dim_feedforward=8, dropout=0.0, batch_first=True, dtype=np.float64, seed=0)
    model = at.Module(layer)
    assert list(model.state_dict()) == list(layer.state_dict())
    x = torch.ones(1, 3, 4, dtype=torch.float64)
    # torch's load_state_dict copies in place: the attnc module sees it
    new = {n: torch.full_like(t, 0.1) for n, t in model.state_dict().items()}
    model.load_state_dict(new)
    assert all((p == 0.1).all() for p in layer.parameters())
    # attnc's load_state_dict replaces its arrays: the next forward copies them into the Parameters
    layer.load_state_dict({n: np.full_like(p, 0.2) for n, p in layer.state_dict().items()})
    model(x.requires_grad_())
    assert all((p == 0.2).all() for p in model.parameters())
    assert all(np.shares_memory(p.detach().numpy(), a) for p, a in zip(model.parameters(), layer.parameters()))
    # a Parameter given new data: the attnc module reads it
    first = next(model.parameters())
    first.data = torch.full_like(first, 0.3)
    model(x)
    assert (layer.parameters()[0] == 0.3).all() and np.shares_memory(first.detach().numpy(), layer.parameters()[0])
    # train / eval reach the attnc module
    assert model.eval() is model and not layer.training and model.train().training and layer.training


def test_no_graph_runs_a_plain_call(torch, at):
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    context, weights = at.function(attnc.attention)(q, k)
    want = attnc.attention(q.numpy(), k.numpy())
    assert (
        not context.requires_grad
        and np.array_equal(context.numpy(), want[0])
        and np.array_equal(weights.numpy(), want[1])
    )


def test_a_step_between_forward_and_backward_is_refused(torch, at):
    """The pullback reads the forward's parameters: attnc.vjp's check, as torch's own."""
    model = at.Module(nn.Linear(4, 3, dtype=np.float64, seed=0))
    out = model(torch.ones(2, 4, dtype=torch.float64, requires_grad=True))
    with torch.no_grad():
        model.weight.add_(1.0)
    with pytest.raises(RuntimeError, match="parameter 'weight' was modified after the forward"):
        out.sum().backward()


def test_errors(torch, at):
    attention = at.function(attnc.attention)
    k = torch.randn(2, 5, 4)
    with pytest.raises(TypeError, match="query is on meta: attnc runs on the CPU only"):
        attention(torch.empty(2, 3, 4, device="meta"), k)
    with pytest.raises(TypeError, match="keys has dtype torch.float16: attnc takes float32 or float64"):
        attention(torch.randn(2, 3, 4), k.half())
    lstm = at.Module(nn.LSTM(3, 4, seed=0))
    with pytest.raises(TypeError, match=r"hx\[1\] has dtype torch.bfloat16: attnc takes float32 or float64"):
        lstm(torch.randn(2, 5, 3), (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4, dtype=torch.bfloat16)))

    class Scale(nn.Module):
        def forward(self, x):
            return 2 * x

    with pytest.raises(TypeError, match="attnc.vjp cannot differentiate .*Scale.*, so attnc.torch cannot wrap it"):
        at.Module(Scale())
    with pytest.raises(TypeError, match="attnc.vjp cannot differentiate .*sinusoidal_encoding"):
        at.function(attnc.nn.sinusoidal_encoding)
    with pytest.raises(TypeError, match="module must be an attnc.nn.Module, got Linear"):
        at.Module(torch.nn.Linear(2, 2))
