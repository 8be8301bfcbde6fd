"""attnc.torch's classic ops (attnc/torch/_ops.py): each op's outputs and
gradients equal attnc's NumPy results and attnc.vjp's bit for bit, torch's
own op where it has one (softmax, layer_norm, LSTM, GRU) to 1e-5 / 1e-12,
torch.autograd.gradcheck in float64 (masks included), torch.library.opcheck
on every registered op (the forward and the backward op, with the arguments
a real call passes), torch.compile(fullgraph=True), and the errors."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import attnc

B, TQ, TK, D = 2, 3, 4, 3


def _t():
    import attnc.torch

    return attnc.torch


@dataclasses.dataclass
class Case:
    id: str
    arrays: Callable[[np.random.Generator], dict]  # name (attnc's gradient name) -> float64 array
    run: Callable[[Any, dict], Any]  # (attnc.torch, tensors by name) -> outputs
    target: Callable[[dict], tuple]  # arrays by name -> (attnc callable, args, kwargs), for attnc.vjp
    gradcheck: bool = True  # False only for straight-through gradients (not the forward's derivative)


def _qkv(rng, dk=D, dv=2, values=True):
    a = {"query": rng.normal(size=(B, TQ, D)), "keys": rng.normal(size=(B, TK, dk))}
    if values:
        a["values"] = rng.normal(size=(B, TK, dv))
    return a


# A score kind, its parameters' shapes (None: a 0-d array) and the keys' width.
SCORES = {
    "dot": ({}, D),
    "scaled_dot": ({"scale": ()}, D),
    "general": ({"weight": (D, 2)}, 2),
    "additive": ({"w_query": (D, 5), "w_key": (2, 5), "v": (5,)}, 2),
    "cosine": ({"beta": (B, TQ)}, D),
    "location": ({"weight": (D, TK)}, D),
    "gaussian": ({"bandwidth": ()}, D),
}
MASK = np.array([[1, 1, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0]], bool)  # (TQ, TK), every row with a key


def _score_arrays(kind, values=True):
    shapes, dk = SCORES[kind]

    def arrays(rng):
        a = _qkv(rng, dk, values=values)
        a.update({n: rng.uniform(0.5, 1.5, size=s) for n, s in shapes.items()})
        return a

    return arrays


def _params(d, kind):
    return {n: d[n] for n in SCORES[kind][0]}


def _score_case(kind):
    return Case(
        f"score-{kind}",
        _score_arrays(kind, values=False),
        lambda T, d: T.score(d["query"], d["keys"], score=kind, **_params(d, kind)),
        lambda d: (attnc.score, (d["query"], d["keys"]), {"score": kind, **_params(d, kind)}),
    )


def _attention_case(kind):
    mask = MASK if kind != "cosine" else None
    lengths = np.array([4, 2]) if kind == "cosine" else None

    def masks(lib):
        conv = (lambda x: x) if lib is np else lib.from_numpy
        return {
            "mask": None if mask is None else conv(mask),
            "key_lengths": None if lengths is None else conv(lengths),
            "causal": kind == "dot",
        }

    return Case(
        f"attention-{kind}",
        _score_arrays(kind),
        lambda T, d: T.attention(d["query"], d["keys"], d["values"], score=kind, **masks(_torch()), **_params(d, kind)),
        lambda d: (
            attnc.attention,
            (d["query"], d["keys"], d["values"]),
            {"score": kind, **masks(np), **_params(d, kind)},
        ),
    )


def _torch():
    import torch

    return torch


def _ntm_arrays(rng, N=5, M=3, H=2, K=3):
    w = lambda: rng.dirichlet(np.ones(N), size=(B, H))  # noqa: E731
    return {
        "key": rng.normal(size=(B, H, M)),
        "memory": rng.normal(size=(B, N, M)),
        "beta": rng.uniform(0.5, 3, size=(B, H)),
        "g": rng.uniform(0.1, 0.9, size=(B, H)),
        "s": rng.dirichlet(np.ones(K), size=(B, H)),
        "gamma": rng.uniform(1.2, 3, size=(B, H)),
        "w_prev": w(),
        "w_content": w(),
        "w": w(),
        "erase": rng.uniform(0, 1, size=(B, H, M)),
        "add": rng.normal(size=(B, H, M)),
    }


def _ntm_case(name, args):
    def arrays(rng):
        a = _ntm_arrays(rng)
        return {n: a[n] for n in args.split()}

    fn = getattr(attnc.ntm, name)
    kw = {"return_intermediates": True} if name == "address" else {}
    return Case(
        f"ntm-{name}",
        arrays,
        lambda T, d: getattr(T, f"ntm_{name}")(*(d[n] for n in args.split())),
        lambda d: (fn, tuple(d[n] for n in args.split()), kw),
    )


def _rnn_case(mode, layers, bidirectional, hx, lengths=None, dropout=0.0):
    cls = attnc.nn.LSTM if mode == "lstm" else attnc.nn.GRU
    module = cls(2, 3, layers, bidirectional=bidirectional, dropout=dropout, dtype=np.float64, seed=0)
    names = list(module.state_dict())
    states = ("h0", "c0") if mode == "lstm" else ("h0",)

    def arrays(rng):
        a = {
            "input": rng.normal(size=(B, TK, 2)),
            **{n: rng.normal(size=p.shape) for n, p in module.state_dict().items()},
        }
        if hx:
            a.update({s: rng.normal(size=(layers * (1 + bidirectional), B, 3)) for s in states})
        return a

    def hx_of(d):
        if not hx:
            return None
        return (d["h0"], d["c0"]) if mode == "lstm" else d["h0"]

    def run(T, d):
        lens = None if lengths is None else _torch().tensor(lengths)
        extra = {"training": True, "seed": 5} if dropout else {}
        fn = T.lstm if mode == "lstm" else T.gru
        return fn(
            d["input"],
            hx_of(d),
            {n: d[n] for n in names},
            num_layers=layers,
            bidirectional=bidirectional,
            dropout=dropout,
            lengths=lens,
            **extra,
        )

    def target(d):
        m = cls(2, 3, layers, bidirectional=bidirectional, dropout=dropout, dtype=d["input"].dtype, seed=0)
        m.load_state_dict({n: d[n] for n in names})
        m.train(bool(dropout))
        if dropout:  # the generator attnc.torch gives the module for seed 5
            object.__setattr__(m, "_rng", np.random.default_rng(5))
        lens = None if lengths is None else np.array(lengths)
        return m, (d["input"], hx_of(d)), {"lengths": lens}

    tag = f"{mode}-{layers}x{1 + bidirectional}{'-hx' if hx else ''}{'-lengths' if lengths else ''}"
    return Case(tag + ("-dropout" if dropout else ""), arrays, run, target)


def _kv_target(d, **kw):
    k = d["keys"]
    cache = attnc.KVCache(*k.shape, dtype=k.dtype, value_dim=d["values"].shape[3])
    cache.append(k, d["values"])
    return cache.attend, (d["query"],), kw


CASES = [
    *[_score_case(kind) for kind in SCORES],
    *[_attention_case(kind) for kind in SCORES],
    Case(
        "attention-values-are-keys",
        _score_arrays("dot", values=False),
        lambda T, d: T.attention(d["query"], d["keys"], score="scaled_dot", scale=0.7),
        lambda d: (attnc.attention, (d["query"], d["keys"]), {"score": "scaled_dot", "scale": 0.7}),
    ),
    Case(
        "softmax-mask-lengths-causal",
        lambda rng: {"scores": rng.normal(size=(B, TQ, TK))},
        lambda T, d: T.softmax(
            d["scores"], mask=_torch().from_numpy(MASK), key_lengths=_torch().tensor([4, 1]), causal=True
        ),
        lambda d: (attnc.softmax, (d["scores"],), {"mask": MASK, "key_lengths": np.array([4, 1]), "causal": True}),
    ),
    Case(
        "hard-argmax-mask",
        _score_arrays("general"),
        lambda T, d: T.hard_attention(
            d["query"], d["keys"], d["values"], score="general", weight=d["weight"], mask=_torch().from_numpy(MASK)
        ),
        lambda d: (
            attnc.hard_attention,
            (d["query"], d["keys"], d["values"]),
            {"score": "general", "weight": d["weight"], "mask": MASK, "seed": 0},
        ),
    ),
    Case(
        "hard-sample-lengths",
        _score_arrays("dot"),
        lambda T, d: T.hard_attention(
            d["query"], d["keys"], d["values"], mode="sample", seed=7, key_lengths=_torch().tensor([3, 2])
        ),
        lambda d: (
            attnc.hard_attention,
            (d["query"], d["keys"], d["values"]),
            {"mode": "sample", "seed": 7, "key_lengths": np.array([3, 2])},
        ),
    ),
    Case(
        "hard-gumbel",  # straight-through: compared with attnc.vjp bit for bit, not with finite differences
        _score_arrays("cosine"),
        lambda T, d: T.hard_attention(
            d["query"], d["keys"], d["values"], mode="gumbel", temperature=0.5, seed=3, score="cosine", beta=d["beta"]
        ),
        lambda d: (
            attnc.hard_attention,
            (d["query"], d["keys"], d["values"]),
            {"mode": "gumbel", "temperature": 0.5, "seed": 3, "score": "cosine", "beta": d["beta"]},
        ),
        gradcheck=False,
    ),
    Case(
        "local-monotonic-positions",
        lambda rng: {**_qkv(rng), "positions": np.array([0.4, 1.3, 2.6])},
        lambda T, d: T.local_attention(
            d["query"],
            d["keys"],
            d["values"],
            window=1.0,
            positions=d["positions"],
            mask=_torch().from_numpy(MASK | np.eye(TQ, TK, dtype=bool)),
        ),
        lambda d: (
            attnc.local_attention,
            (d["query"], d["keys"], d["values"]),
            {"window": 1.0, "positions": d["positions"], "mask": MASK | np.eye(TQ, TK, dtype=bool)},
        ),
    ),
    Case(
        "local-predictive",
        lambda rng: {**_qkv(rng), "w_p": rng.normal(size=(D, 2)), "v_p": rng.normal(size=2)},
        lambda T, d: T.local_attention(
            d["query"],
            d["keys"],
            d["values"],
            window=1.5,
            mode="predictive",
            w_p=d["w_p"],
            v_p=d["v_p"],
            key_lengths=_torch().tensor([4, 3]),
        ),
        lambda d: (
            attnc.local_attention,
            (d["query"], d["keys"], d["values"]),
            {"window": 1.5, "mode": "predictive", "w_p": d["w_p"], "v_p": d["v_p"], "key_lengths": np.array([4, 3])},
        ),
    ),
    Case(
        "kernel-regression-1d",
        lambda rng: {
            "x_query": rng.normal(size=3),
            "x_train": rng.normal(size=5),
            "y_train": rng.normal(size=5),
            "bandwidth": np.array(0.8),
        },
        lambda T, d: T.kernel_regression(d["x_query"], d["x_train"], d["y_train"], bandwidth=d["bandwidth"]),
        lambda d: (attnc.kernel_regression, (d["x_query"], d["x_train"], d["y_train"]), {"bandwidth": d["bandwidth"]}),
    ),
    Case(
        "kernel-regression-2d",
        lambda rng: {
            "x_query": rng.normal(size=(3, 2)),
            "x_train": rng.normal(size=(5, 2)),
            "y_train": rng.normal(size=(5, 2)),
        },
        lambda T, d: T.kernel_regression(d["x_query"], d["x_train"], d["y_train"], bandwidth=0.9),
        lambda d: (attnc.kernel_regression, (d["x_query"], d["x_train"], d["y_train"]), {"bandwidth": 0.9}),
    ),
    Case(
        "kv-cache-gqa-weights",
        lambda rng: {
            "query": rng.normal(size=(B, 4, 2, D)),
            "keys": rng.normal(size=(B, 2, TK, D)),
            "values": rng.normal(size=(B, 2, TK, 2)),
        },
        lambda T, d: T.kv_cache_attend(d["query"], d["keys"], d["values"], return_weights=True),
        lambda d: _kv_target(d, return_weights=True),
    ),
    Case(
        "kv-cache-scale",
        lambda rng: {
            "query": rng.normal(size=(B, 2, 1, D)),
            "keys": rng.normal(size=(B, 2, TK, D)),
            "values": rng.normal(size=(B, 2, TK, D)),
        },
        lambda T, d: T.kv_cache_attend(d["query"], d["keys"], d["values"], scale=0.3),
        lambda d: _kv_target(d, scale=0.3),
    ),
    _ntm_case("content_weights", "key memory beta"),
    _ntm_case("interpolate", "w_content w_prev g"),
    _ntm_case("shift", "w s"),
    _ntm_case("sharpen", "w gamma"),
    _ntm_case("address", "key beta g s gamma w_prev memory"),
    _ntm_case("read", "memory w"),
    _ntm_case("write", "memory w erase add"),
    Case(
        "layer-norm-affine",
        lambda rng: {
            "input": rng.normal(size=(B, 2, 3)),
            "weight": rng.normal(size=(2, 3)),
            "bias": rng.normal(size=(2, 3)),
        },
        lambda T, d: T.layer_norm(d["input"], (2, 3), d["weight"], d["bias"], eps=1e-3),
        lambda d: (attnc.nn.layer_norm, (d["input"], (2, 3), d["weight"], d["bias"], 1e-3), {}),
    ),
    Case(
        "layer-norm-plain",
        lambda rng: {"input": rng.normal(size=(B, 4))},
        lambda T, d: T.layer_norm(d["input"], 4),
        lambda d: (attnc.nn.layer_norm, (d["input"], 4), {}),
    ),
    _rnn_case("lstm", 2, True, hx=True, lengths=[4, 2]),
    _rnn_case("lstm", 2, False, hx=False, dropout=0.5),
    _rnn_case("gru", 1, True, hx=True),
    _rnn_case("gru", 2, False, hx=False, lengths=[3, 4]),
]
IDS = [c.id for c in CASES]


# --------------------------------------------------------------------------- helpers


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [leaf for item in x for leaf in _flat(item)]
    return [x]


def _nest(flat, like):
    if isinstance(like, (tuple, list)):
        return tuple(_nest(flat, item) for item in like)
    return flat.pop(0)


def _tensors(torch, arrays, dtype, grad=False):
    return {n: torch.from_numpy(a.astype(dtype)).requires_grad_(grad) for n, a in arrays.items()}


def _differentiable(torch, outputs):
    return [o for o in _flat(outputs) if o.is_floating_point() and o.numel()]


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_outputs_and_gradients_are_attncs_bit_for_bit(torch_path, torch, case, dtype):
    arrays = {n: a.astype(dtype) for n, a in case.arrays(np.random.default_rng(0)).items()}
    t = _tensors(torch, arrays, dtype, grad=True)
    outputs = case.run(_t(), t)
    fn, args, kwargs = case.target(arrays)
    expected, pullback = attnc.vjp(fn, *args, **kwargs)
    got_flat, want_flat = _flat(outputs), _flat(expected)
    assert len(got_flat) == len(want_flat)
    for got, want in zip(got_flat, want_flat):
        if want is None:  # attnc computed nothing: the op returns an empty tensor
            assert got.numel() == 0
            continue
        assert got.dtype == torch.from_numpy(want).dtype
        assert np.array_equal(got.detach().numpy(), want), case.id
    rng = np.random.default_rng(1)
    cots = [None if w is None or w.dtype.kind != "f" else rng.normal(size=w.shape).astype(dtype) for w in want_flat]
    used = [(g, torch.from_numpy(c)) for g, c in zip(got_flat, cots) if c is not None]
    names = list(t)
    grads = torch.autograd.grad([g for g, _ in used], [t[n] for n in names], [c for _, c in used], allow_unused=True)
    want_grads = pullback(*_nest(list(cots), expected if isinstance(expected, tuple) else (expected,)))
    for n, g in zip(names, grads):
        want = want_grads.get(n, np.zeros_like(arrays[n]))
        assert g is not None, f"{case.id}: no gradient for {n}"
        assert np.array_equal(g.numpy(), want), f"{case.id}: gradient of {n}"
    for n, a in arrays.items():  # the tensors the op read (forward and backward) hold their values
        assert np.array_equal(t[n].detach().numpy(), a), f"{case.id}: {n} was modified"


@pytest.mark.parametrize("case", [c for c in CASES if c.gradcheck], ids=[c.id for c in CASES if c.gradcheck])
def test_gradcheck(torch_path, torch, case):
    t = _tensors(torch, case.arrays(np.random.default_rng(2)), np.float64, grad=True)
    names = list(t)

    def f(*xs):
        return tuple(_differentiable(torch, case.run(_t(), dict(zip(names, xs)))))

    assert torch.autograd.gradcheck(f, tuple(t[n] for n in names))


class _Record:
    """The attnc ops (and their arguments) a forward and backward call."""

    def __init__(self, torch):
        from torch.utils._python_dispatch import TorchDispatchMode

        calls = self.calls = {}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.namespace == "attnc":
                    calls.setdefault(func, (args, kwargs or {}))
                return func(*args, **(kwargs or {}))

        self.mode = Mode()


FAST_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")


def test_opcheck_every_registered_op(torch):
    """Every attnc op the cases reach, forward and backward, under
    torch.library.opcheck with the arguments a real call passes; and every
    op _ops.py registers is reached."""
    from attnc.torch import _ops

    record = _Record(torch)
    for case in CASES:
        t = _tensors(torch, case.arrays(np.random.default_rng(3)), np.float64, grad=True)
        with record.mode:
            outputs = _differentiable(torch, case.run(_t(), t))
            sum(o.sum() for o in outputs).backward()
    registered = {
        f"attnc::{op.name}{suffix}"
        for op in vars(_ops).values()
        if isinstance(op, _ops._Op)
        for suffix in ("", "_backward")
    }
    assert {f.name().split(".")[0] for f in record.calls} == registered
    for func, (args, kwargs) in record.calls.items():
        # a backward op has no gradient itself (no double backward): its inputs need none
        backward = func.name().endswith("_backward")

        def fresh(a):
            if isinstance(a, (list, tuple)):
                return [fresh(x) for x in a]
            return a.detach().requires_grad_(a.requires_grad and not backward) if isinstance(a, torch.Tensor) else a

        # the forward op's test_aot_dispatch_dynamic traces the backward op too (the
        # slow one of opcheck's tests, a second or so an op): the rest for the backward
        utils = FAST_UTILS if backward else FAST_UTILS + ("test_aot_dispatch_dynamic",)
        torch.library.opcheck(func, tuple(fresh(a) for a in args), kwargs, test_utils=utils)


def test_torchs_own_ops(torch_path, torch):
    """softmax (masked), layer_norm, LSTM and GRU against torch's: 1e-5 in
    float32, 1e-12 in float64, outputs and gradients."""
    T = _t()
    rng = np.random.default_rng(4)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        s = torch.tensor(rng.normal(size=(B, TQ, TK)), dtype=dtype)
        mask = torch.from_numpy(MASK)
        assert torch.allclose(T.softmax(s, mask=mask), torch.softmax(s.masked_fill(~mask, -torch.inf), -1), atol=tol)
        x = torch.tensor(rng.normal(size=(B, 5, 6)), dtype=dtype)
        w, b = torch.rand(6, dtype=dtype), torch.rand(6, dtype=dtype)
        assert torch.allclose(T.layer_norm(x, 6, w, b), torch.nn.functional.layer_norm(x, (6,), w, b), atol=tol)
        x = x[..., :4]
        for cls, fn in ((torch.nn.LSTM, T.lstm), (torch.nn.GRU, T.gru)):
            ref = cls(4, 3, num_layers=2, bidirectional=True, batch_first=True, dtype=dtype)
            xs = x.clone().requires_grad_()
            out, state = fn(xs, None, dict(ref.named_parameters()), num_layers=2, bidirectional=True)
            want, want_state = ref(xs)
            for g, w in zip(_flat((out, state)), _flat((want, want_state))):
                assert torch.allclose(g, w, atol=tol)
            (ga,) = torch.autograd.grad(out.sum(), xs)
            (gw,) = torch.autograd.grad(want.sum(), xs)
            assert torch.allclose(ga, gw, atol=tol)


def test_compile_fullgraph_matches_eager(torch_path, torch):
    """A small model of several attnc ops under torch.compile(fullgraph=True)
    (aot_eager: the graph and the backward ops traced, no graph break), and
    the attention op once under the default backend (inductor)."""
    T = _t()
    rng = np.random.default_rng(5)
    gen = lambda *s: torch.tensor(rng.normal(size=s), requires_grad=True)  # noqa: E731
    q, k, v, w = gen(B, TQ, D), gen(B, TK, D), gen(B, TK, D), gen(D, D)
    lstm_weights = {
        k: p.detach() for k, p in torch.nn.LSTM(D, D, batch_first=True, dtype=torch.float64).named_parameters()
    }
    mask = torch.from_numpy(MASK)

    def model(q, k, v, w):
        context, weights = T.attention(q, k, v, score="general", weight=w, mask=mask)
        h = T.layer_norm(context, D)
        out, _ = T.lstm(h, None, lstm_weights)
        r = T.ntm_read(k, weights)
        return out.sum() + r.square().sum() + weights[..., 0].sum()

    def loss_and_grads(fn, *inputs):
        loss = fn(*inputs)
        return [loss, *torch.autograd.grad(loss, inputs)]

    eager = loss_and_grads(model, q, k, v, w)
    compiled = loss_and_grads(torch.compile(model, backend="aot_eager", fullgraph=True), q, k, v, w)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)
    attend = lambda q, k: T.attention(q, k, score="scaled_dot")[0].sum()  # noqa: E731
    got = loss_and_grads(torch.compile(attend, fullgraph=True), q, k)
    want = loss_and_grads(attend, q, k)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_strided_inputs_are_read_in_place(torch_path, torch):
    """Transposed, sliced and broadcast (stride-0) tensors give what their
    contiguous copies give, gradients included."""
    T = _t()
    rng = np.random.default_rng(7)
    q = torch.tensor(rng.normal(size=(B, D, TQ))).transpose(1, 2).requires_grad_()
    k = torch.tensor(rng.normal(size=(B, TK, 2 * D)))[..., ::2].requires_grad_()
    mask = torch.from_numpy(MASK).expand(B, TQ, TK)
    got = T.attention(q, k, mask=mask)
    qc, kc = q.detach().contiguous().requires_grad_(), k.detach().contiguous().requires_grad_()
    want = T.attention(qc, kc, mask=mask.contiguous())
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    grads = torch.autograd.grad(got[0].sum(), (q, k))
    for a, b in zip(grads, torch.autograd.grad(want[0].sum(), (qc, kc))):
        assert torch.equal(a, b)


def test_empty_inputs_give_empty_results(torch_path, torch):
    T = _t()
    q = torch.zeros(B, 0, D, requires_grad=True)
    k = torch.rand(B, TK, D)
    context, weights = T.attention(q, k, score="scaled_dot")
    assert context.shape == (B, 0, D) and weights.shape == (B, 0, TK)
    (g,) = torch.autograd.grad(context.sum(), q)
    assert g.shape == q.shape


def test_seed_none_follows_torch_manual_seed(torch_path, torch):
    """hard_attention and dropout draw their seed from torch's generator when
    none is given: torch.manual_seed repeats the picks, and the backward op's
    rerun of the forward picks what the forward picked."""
    T = _t()
    rng = np.random.default_rng(6)
    q, k = (torch.tensor(rng.normal(size=(B, 6, D)), requires_grad=True) for _ in range(2))
    picks = []
    for _ in range(2):
        torch.manual_seed(11)
        context, _, idx = T.hard_attention(q, k, mode="sample")
        picks.append(idx)
    assert torch.equal(*picks)
    torch.manual_seed(11)
    seed = int(torch.randint(0, 2**62, ()))
    torch.manual_seed(11)
    context, _, _ = T.hard_attention(q, k, mode="gumbel")
    (g,) = torch.autograd.grad(context.sum(), q)
    (_, _, _), pullback = attnc.vjp(
        attnc.hard_attention, q.detach().numpy(), k.detach().numpy(), mode="gumbel", seed=seed
    )
    want = pullback(np.ones(context.shape), None, None)["query"]
    assert np.array_equal(g.numpy(), want)
    # the seed is drawn inside the graph: no graph break under torch.compile
    gumbel = lambda q, k: T.hard_attention(q, k, mode="gumbel")[0].sum()  # noqa: E731
    compiled = torch.compile(gumbel, backend="aot_eager", fullgraph=True)
    runs = []
    for fn in (gumbel, compiled):
        torch.manual_seed(11)
        loss = fn(q, k)
        runs.append((loss, *torch.autograd.grad(loss, (q, k))))
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "call,error,message",
    [
        (
            lambda T, t: T.attention(t.rand(2, 3, dtype=t.float16), t.rand(4, 3)),
            TypeError,
            "query has dtype torch.float16",
        ),
        (
            lambda T, t: T.score(t.rand(2, 3), t.rand(4, 3), score="general", weight=np.ones((3, 3))),
            TypeError,
            "weight must be a torch.Tensor or a Python float",
        ),
        (
            lambda T, t: T.attention(t.rand(2, 3), t.rand(4, 2)),
            ValueError,
            "score 'dot' needs query and keys of the same",
        ),
        (lambda T, t: T.softmax(t.rand(2, 3), mask=t.ones(2, 3)), TypeError, "mask"),
        (lambda T, t: T.hard_attention(t.rand(2, 3), t.rand(4, 3), seed=True), TypeError, "seed must be an int"),
        (
            lambda T, t: T.kv_cache_attend(t.rand(1, 1, 1, 3), t.rand(1, 4, 3), t.rand(1, 4, 3)),
            ValueError,
            "keys must have shape (batch, heads, length, dim)",
        ),
        (
            lambda T, t: T.kv_cache_attend(t.rand(1, 1, 5, 3), t.rand(1, 1, 4, 3), t.rand(1, 1, 4, 3)),
            ValueError,
            "5 queries but only 4 cached positions",
        ),
        (lambda T, t: T.lstm(t.rand(2, 3, 4), None, [t.rand(3)]), TypeError, "weights must be a dict of tensors"),
        (
            lambda T, t: T.lstm(t.rand(2, 3, 4), None, {"weight_ih_l0": t.rand(12, 4)}),
            ValueError,
            "weights have no 'weight_hh_l0'",
        ),
        (
            lambda T, t: T.gru(t.rand(2, 3, 4), None, dict(t.nn.LSTM(4, 3, batch_first=True).named_parameters())),
            ValueError,
            "weights['weight_ih_l0'] has shape (12, 4), expected (9, 4)",
        ),
        (
            lambda T, t: T.gru(
                t.rand(2, 3, 4), None, dict(t.nn.GRU(4, 3, batch_first=True).double().named_parameters())
            ),
            TypeError,
            "weights['weight_ih_l0'] has dtype float64, but input has dtype float32",
        ),
        (
            lambda T, t: T.gru(t.rand(2, 3, 4), None, {**dict(t.nn.GRU(4, 3).named_parameters()), "extra": t.rand(1)}),
            ValueError,
            "this GRU needs",
        ),
        (lambda T, t: T.layer_norm(t.rand(2, 3), 4), ValueError, "does not end with normalized_shape"),
        (lambda T, t: T.ntm_read(t.rand(2, 5, 3), t.rand(2, 5)), ValueError, "w must have shape (B, H, N)"),
    ],
)
def test_errors_name_the_argument(torch, call, error, message):
    import re

    with pytest.raises(error, match=re.escape(message)):
        call(_t(), torch)
