"""attnc.nn.LSTM / GRU / LSTMCell / GRUCell against torch 2.13 (batch_first=True) loaded with
the same state dict: outputs and final states over (num_layers, bidirectional, bias), with
and without an initial state, ragged batches (lengths, against torch's
pack_padded_sequence(enforce_sorted=False) + pad_packed_sequence(total_length=T)) and
unbatched input; gradients of every parameter, the input and the initial state against torch
autograd and against central finite differences (also through training-mode dropout);
padding never read; state dicts both ways, seeded initialisation and attnc.save / load;
dropout seeding and placement (between layers only); argument errors naming the argument,
inputs never modified, thread-count independence.

An independent NumPy float64 reference (tests/reference/rnn_ref.py, itself checked against
torch here) gives a second opinion in float64. Sizes are tiny: the file takes seconds."""

import itertools
import warnings

import numpy as np
import pytest

import attnc
from attnc import nn
from helpers import close, same_bits
from reference import rnn_ref as ref

B, T, I, H = 3, 5, 3, 4  # batch, steps, input size, hidden size
LENGTHS = np.array([3, 5, 1])  # ragged, unsorted: a full row and a length-1 row
DTYPES = [np.float32, np.float64]
DT_IDS = ["f32", "f64"]
REL = {np.float32: 1e-5, np.float64: 1e-12}  # forward vs torch
GREL = {np.float32: 1e-4, np.float64: 1e-9}  # gradients vs torch autograd

KINDS = ["lstm", "gru"]
CFGS = [
    dict(num_layers=nl, bidirectional=bd, bias=bias)
    for nl, bd, bias in itertools.product([1, 2], [False, True], [True, False])
]
CFG_IDS = [
    f"L{c['num_layers']}-{'bi' if c['bidirectional'] else 'uni'}-{'bias' if c['bias'] else 'nobias'}" for c in CFGS
]
BIG = dict(num_layers=2, bidirectional=True, bias=True)  # the configuration that has everything
SCENARIOS = ["plain", "hx", "lengths", "hx_lengths"]


def _tdtype(torch, dtype):
    return torch.float64 if dtype == np.float64 else torch.float32


def ndir(cfg):
    return 2 if cfg["bidirectional"] else 1


def nstates(kind):
    return 2 if kind == "lstm" else 1


# --------------------------------------------------------------------------- modules


def torch_module(torch, kind, cfg, dtype, seed=0, randomise=True, input_size=I, hidden=H):
    """A torch LSTM / GRU (batch first) with parameters U(-0.8, 0.8) (wider than torch's
    default, to reach the nonlinearities), in eval mode."""
    torch.manual_seed(seed)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    tm = cls(
        input_size,
        hidden,
        num_layers=cfg["num_layers"],
        bias=cfg["bias"],
        batch_first=True,
        bidirectional=cfg["bidirectional"],
        dtype=_tdtype(torch, dtype),
    )
    if randomise:
        with torch.no_grad():
            for p in tm.parameters():
                p.uniform_(-0.8, 0.8)
    return tm.eval()


def attnc_module(kind, cfg, dtype, seed=0, dropout=0.0, input_size=I, hidden=H):
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about dropout with one layer; attnc may too
        return cls(
            input_size,
            hidden,
            num_layers=cfg["num_layers"],
            bias=cfg["bias"],
            batch_first=True,
            dropout=dropout,
            bidirectional=cfg["bidirectional"],
            dtype=dtype,
            seed=seed,
        )


def torch_state(tm):
    return {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}


def make_pair(torch, kind, cfg, dtype, seed=0):
    tm = torch_module(torch, kind, cfg, dtype, seed)
    sd = torch_state(tm)
    m = attnc_module(kind, cfg, dtype, seed=seed + 100)
    m.load_state_dict(sd)
    m.eval()
    return tm, m, sd


def make_hx(rng, kind, cfg, dtype, batch=B, hidden=H):
    """An initial state: h0 (GRU) or (h0, c0) (LSTM); batch=None gives unbatched ones."""
    shape = (cfg["num_layers"] * ndir(cfg),) + (() if batch is None else (batch,)) + (hidden,)
    parts = [(0.8 * rng.standard_normal(shape)).astype(dtype) for _ in range(nstates(kind))]
    return tuple(parts) if kind == "lstm" else parts[0]


def hx_parts(kind, hx):
    if hx is None:
        return []
    return list(hx) if kind == "lstm" else [hx]


def state_names(kind):
    return ["h0", "c0"] if kind == "lstm" else ["h0"]


def padded(lengths, t_len=T):
    """(B, T) True at padded steps."""
    return np.arange(t_len)[None, :] >= np.asarray(lengths)[:, None]


# --------------------------------------------------------------------------- running


def run(m, x, hx=None, lengths=None):
    kw = {} if lengths is None else {"lengths": lengths}
    return m(x, hx, **kw) if hx is not None else m(x, **kw)


def split(kind, res, what=""):
    """attnc's result in its documented form -> (output, [h_n] or [h_n, c_n])."""
    assert isinstance(res, tuple) and len(res) == 2, f"{what}: result {type(res)}"
    out, st = res
    assert isinstance(out, np.ndarray), f"{what}: output {type(out)}"
    if kind == "lstm":
        assert isinstance(st, tuple) and len(st) == 2, f"{what}: LSTM state must be (h_n, c_n), got {type(st)}"
        return out, list(st)
    assert isinstance(st, np.ndarray), f"{what}: GRU state must be an array, got {type(st)}"
    return out, [st]


def check_shapes(kind, cfg, out, states, dtype, batch=B, t_len=T, hidden=H, what=""):
    bdim = () if batch is None else (batch,)
    assert out.dtype == dtype and out.shape == bdim + (t_len, ndir(cfg) * hidden), (
        f"{what}: output {out.dtype} {out.shape}"
    )
    for s in states:
        assert s.dtype == dtype and s.shape == (cfg["num_layers"] * ndir(cfg),) + bdim + (hidden,), (
            f"{what}: state {s.dtype} {s.shape}"
        )


def torch_run(torch, tm, kind, x, hx=None, lengths=None, grad=False):
    """(output tensor, [state tensors], {name: leaf}) from torch, packing when lengths."""
    leaves = {}

    def t(name, a):
        ta = torch.from_numpy(np.array(a))
        if grad:
            ta.requires_grad_(True)
            leaves[name] = ta
        return ta

    tx = t("input", x)
    thx = None
    if hx is not None:
        parts = [t(n, a) for n, a in zip(state_names(kind), hx_parts(kind, hx))]
        thx = tuple(parts) if kind == "lstm" else parts[0]
    for p in tm.parameters():
        p.grad = None
    inp = tx
    if lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(
            tx, torch.as_tensor(np.asarray(lengths), dtype=torch.int64), batch_first=True, enforce_sorted=False
        )
    out, st = tm(inp, thx)
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out, (list(st) if kind == "lstm" else [st]), leaves


def ref_run(kind, sd, cfg, x, hx=None, lengths=None, masks=None):
    out, st = ref.rnn(
        kind, sd, x, hx, lengths, num_layers=cfg["num_layers"], bidirectional=cfg["bidirectional"], masks=masks
    )
    return out, (list(st) if kind == "lstm" else [st])


def attnc_vjp(m, x, hx=None, lengths=None):
    kw = {} if lengths is None else {"lengths": lengths}
    return attnc.vjp(m, x, hx, **kw) if hx is not None else attnc.vjp(m, x, **kw)


def pull(kind, pullback, dout, dstates):
    """pullback(doutput, (dh_n, dc_n)) for the LSTM, pullback(doutput, dh_n) for the GRU."""
    if kind == "lstm":
        return pullback(dout, None if dstates is None else tuple(dstates))
    return pullback(dout, None if dstates is None else dstates[0])


def expected_grad_names(kind, m, with_hx):
    return {"input"} | (set(state_names(kind)) if with_hx else set()) | set(m.state_dict())


# --------------------------------------------------------------------------- forward vs torch


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", CFGS, ids=CFG_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_forward_matches_torch(kind, cfg, dtype, rng, torch):
    tm, m, sd = make_pair(torch, kind, cfg, dtype)
    x = rng.standard_normal((B, T, I)).astype(dtype)
    for scen in SCENARIOS:
        what = f"{kind}/{scen}"
        hx = make_hx(rng, kind, cfg, dtype) if "hx" in scen else None
        lengths = LENGTHS if "lengths" in scen else None
        out, states = split(kind, run(m, x, hx, lengths), what)
        check_shapes(kind, cfg, out, states, dtype, what=what)
        tout, tstates, _ = torch_run(torch, tm, kind, x, hx, lengths)
        close(out, tout.detach().numpy(), REL[dtype], f"{what}: output")
        for i, (s, ts) in enumerate(zip(states, tstates)):
            close(s, ts.detach().numpy(), REL[dtype], f"{what}: final state {i}")
        if lengths is not None:
            assert np.all(out[padded(lengths)] == 0), f"{what}: padded outputs are not 0"
        if dtype == np.float64:  # the independent reference agrees with both
            rout, rstates = ref_run(kind, sd, cfg, x, hx, lengths)
            close(rout, tout.detach().numpy(), 1e-12, f"{what}: reference vs torch")
            close(out, rout, 1e-12, f"{what}: output vs reference")
            for i, (s, rs) in enumerate(zip(states, rstates)):
                close(s, rs, 1e-12, f"{what}: final state {i} vs reference")


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_unbatched_input(kind, dtype, rng, torch):
    """(T, I) input, states (num_layers * D, H): torch's result and the batch of one's;
    gradients shaped like the unbatched arguments and equal to the batch of one's."""
    cfg = BIG
    tm, m, _ = make_pair(torch, kind, cfg, dtype)
    x = rng.standard_normal((T, I)).astype(dtype)
    for with_hx in (False, True):
        what = f"{kind} unbatched hx={with_hx}"
        hx = make_hx(rng, kind, cfg, dtype, batch=None) if with_hx else None
        out, states = split(kind, run(m, x, hx), what)
        check_shapes(kind, cfg, out, states, dtype, batch=None, what=what)
        tout, tstates, _ = torch_run(torch, tm, kind, x, hx)
        close(out, tout.detach().numpy(), REL[dtype], f"{what}: output vs torch")
        for s, ts in zip(states, tstates):
            close(s, ts.detach().numpy(), REL[dtype], f"{what}: state vs torch")
        hx1 = None if hx is None else (tuple(a[:, None] for a in hx) if kind == "lstm" else hx[:, None])
        out1, states1 = split(kind, run(m, x[None], hx1), what)
        close(out, out1[0], REL[dtype], f"{what}: vs batch of one")
        for s, s1 in zip(states, states1):
            close(s, s1[:, 0], REL[dtype], f"{what}: state vs batch of one")
        # gradients
        res, pullback = attnc_vjp(m, x, hx)
        o, st = split(kind, res, what)
        dout = rng.standard_normal(o.shape).astype(dtype)
        dst = [rng.standard_normal(s.shape).astype(dtype) for s in st]
        g = pull(kind, pullback, dout, dst)
        assert set(g) == expected_grad_names(kind, m, with_hx), sorted(g)
        assert g["input"].shape == x.shape
        for n, a in zip(state_names(kind), hx_parts(kind, hx)):
            assert g[n].shape == a.shape, (n, g[n].shape)
        _, pb1 = attnc_vjp(m, x[None], hx1)
        g1 = pull(kind, pb1, dout[None], [d[:, None] for d in dst])
        close(g["input"], g1["input"][0], GREL[dtype], f"{what}: input gradient vs batch of one")
        for n in state_names(kind) if with_hx else ():
            close(g[n], g1[n][:, 0], GREL[dtype], f"{what}: {n} gradient vs batch of one")
        for n in m.state_dict():
            close(g[n], g1[n], GREL[dtype], f"{what}: {n} gradient vs batch of one")


@pytest.mark.parametrize("kind", KINDS)
def test_lengths_forms_and_edge_cases(kind, rng, torch):
    """lengths all T = no lengths; a list, int32 and int64 give the same bits; all-ones,
    sorted and a single step (T = 1) match torch; hx=None = zero state = omitted."""
    dtype = np.float64
    cfg = BIG
    tm, m, _ = make_pair(torch, kind, cfg, dtype)
    x = rng.standard_normal((B, T, I))
    hx = make_hx(rng, kind, cfg, dtype)
    full, fstates = split(kind, run(m, x, hx))
    o, s = split(kind, run(m, x, hx, np.full(B, T)))
    close(o, full, 1e-13, "lengths all T vs none")
    for a, b in zip(s, fstates):
        close(a, b, 1e-13, "lengths all T vs none: state")
    base, bstates = split(kind, run(m, x, hx, LENGTHS))
    for form in (list(LENGTHS), LENGTHS.astype(np.int32), LENGTHS.astype(np.uint8)):
        o, s = split(kind, run(m, x, hx, form))
        same_bits(o, base, f"lengths as {type(form).__name__} {getattr(form, 'dtype', '')}")
        for a, b in zip(s, bstates):
            same_bits(a, b, "state")
    for lengths in (np.ones(B, np.int64), np.array([5, 4, 2]), np.array([2, 2, 5])):
        o, s = split(kind, run(m, x, hx, lengths))
        to, ts, _ = torch_run(torch, tm, kind, x, hx, lengths)
        close(o, to.detach().numpy(), 1e-12, f"lengths {lengths}")
        for a, b in zip(s, ts):
            close(a, b.detach().numpy(), 1e-12, f"lengths {lengths}: state")
    # T = 1
    x1 = x[:, :1]
    o, s = split(kind, run(m, x1, hx, np.ones(B, np.int64)))
    to, ts, _ = torch_run(torch, tm, kind, x1, hx)
    close(o, to.detach().numpy(), 1e-12, "T = 1")
    for a, b in zip(s, ts):
        close(a, b.detach().numpy(), 1e-12, "T = 1: state")
    # hx None / zeros / omitted
    zero = tuple(np.zeros_like(a) for a in hx_parts(kind, hx))
    zero = zero if kind == "lstm" else zero[0]
    o0, s0 = split(kind, run(m, x))
    o1, s1 = split(kind, m(x, None))
    o2, s2 = split(kind, run(m, x, zero))
    same_bits(o0, o1, "hx=None vs omitted")
    close(o2, o0, 1e-13, "zero hx vs none")
    for a, b, c in zip(s0, s1, s2):
        same_bits(a, b, "hx=None vs omitted: state")
        close(c, a, 1e-13, "zero hx vs none: state")


# --------------------------------------------------------------------------- gradients vs torch


def grads_vs_torch(torch, tm, m, kind, x, hx, lengths, dtype, rng, what, parts=(True, True, True), out_rel=None):
    """Compare attnc.vjp with torch autograd for L = <dout, out> + <dh, h_n> (+ <dc, c_n>),
    where parts says which cotangents are given (the others passed as None); the outputs
    within out_rel (default REL[dtype])."""
    res, pullback = attnc_vjp(m, x, hx, lengths)
    out, states = split(kind, res, what)
    dout = rng.standard_normal(out.shape).astype(dtype)
    dst = [rng.standard_normal(s.shape).astype(dtype) for s in states]
    use_out, use_h = parts[0], parts[1]
    use_c = parts[2] if kind == "lstm" else False
    d_out = dout if use_out else None
    if kind == "lstm":
        dstates = None if not (use_h or use_c) else [dst[0] if use_h else None, dst[1] if use_c else None]
    else:
        dstates = [dst[0]] if use_h else None
    grads = pull(kind, pullback, d_out, dstates)

    tout, tstates, leaves = torch_run(torch, tm, kind, x, hx, lengths, grad=True)
    for p in tm.parameters():
        p.requires_grad_(True)
    loss = 0
    if use_out:
        loss = loss + (tout * torch.from_numpy(dout)).sum()
    if use_h:
        loss = loss + (tstates[0] * torch.from_numpy(dst[0])).sum()
    if use_c:
        loss = loss + (tstates[1] * torch.from_numpy(dst[1])).sum()
    loss.backward()
    close(out, tout.detach().numpy(), out_rel or REL[dtype], f"{what}: output")
    expected = {n: (np.zeros(a.shape) if a.grad is None else a.grad.numpy()) for n, a in leaves.items()}
    for n, p in tm.named_parameters():
        expected[n] = np.zeros(p.shape) if p.grad is None else p.grad.numpy()
    assert set(grads) == set(expected), (
        f"{what}: gradient keys: missing {sorted(set(expected) - set(grads))}, "
        f"unexpected {sorted(set(grads) - set(expected))}"
    )
    for n, e in expected.items():
        assert grads[n].dtype == dtype and grads[n].shape == e.shape, (
            f"{what}: gradient {n} {grads[n].dtype} {grads[n].shape}"
        )
        close(grads[n], e, GREL[dtype], f"{what}: gradient {n}")
    return grads


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("cfg", CFGS, ids=CFG_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_torch_autograd(kind, cfg, dtype, rng, torch):
    tm, m, _ = make_pair(torch, kind, cfg, dtype)
    for scen in ("hx_lengths", "plain", "lengths"):
        x = rng.standard_normal((B, T, I)).astype(dtype)
        hx = make_hx(rng, kind, cfg, dtype) if "hx" in scen else None
        lengths = LENGTHS if "lengths" in scen else None
        grads_vs_torch(torch, tm, m, kind, x, hx, lengths, dtype, rng, f"{kind}/{scen}")


# Hidden sizes the fused float32 kernels of csrc/ops/rnn/rnn_fast.c take (multiples of 8 with AVX2,
# of 16 with AVX-512; 24 takes the AVX2 kernels on an AVX-512 CPU), batches that are not a
# multiple of their row tiles, lengths that make rows stop at different steps.
FUSED_HIDDEN = [16, 24, 48, 64]


@pytest.mark.parametrize("hidden", FUSED_HIDDEN)
@pytest.mark.parametrize("kind", KINDS)
def test_fused_sizes_match_torch(kind, hidden, rng, torch):
    b, t, i = 13, 9, 5
    lengths = np.array([9, 1, 4, 9, 2, 7, 3, 9, 5, 8, 6, 1, 9])
    for cfg in (
        dict(num_layers=1, bidirectional=False, bias=True),
        BIG,
        dict(num_layers=1, bidirectional=True, bias=False),
    ):
        tm = torch_module(torch, kind, cfg, np.float32, seed=hidden, input_size=i, hidden=hidden)
        m = attnc_module(kind, cfg, np.float32, input_size=i, hidden=hidden)
        m.load_state_dict(torch_state(tm))
        # The outputs against torch in float64 (the same weights): at these sizes torch's own
        # float32 results are 1e-5 away from it, as far as attnc's.
        tm64 = torch_module(torch, kind, cfg, np.float64, input_size=i, hidden=hidden, randomise=False)
        tm64.load_state_dict({k: v.double() for k, v in tm.state_dict().items()})
        for scen in ("plain", "hx_lengths"):
            x = rng.standard_normal((b, t, i)).astype(np.float32)
            hx = make_hx(rng, kind, cfg, np.float32, batch=b, hidden=hidden) if "hx" in scen else None
            ln = lengths if "lengths" in scen else None
            what = f"{kind} H={hidden} {cfg} {scen}"
            m.eval()
            out, states = split(kind, run(m, x, hx, ln), what)
            hx64 = None if hx is None else tuple(a.astype(np.float64) for a in hx_parts(kind, hx))
            hx64 = hx64 if kind == "lstm" or hx64 is None else hx64[0]
            tout, tstates, _ = torch_run(torch, tm64, kind, x.astype(np.float64), hx64, ln)
            close(out, tout.detach().numpy(), REL[np.float32], f"{what}: eval output")
            for a, e in zip(states, tstates):
                close(a, e.detach().numpy(), REL[np.float32], f"{what}: eval state")
            m.train()  # both sides in float32 here: each within 1e-5 of the float64 result
            grads_vs_torch(torch, tm, m, kind, x, hx, ln, np.float32, rng, what, out_rel=2 * REL[np.float32])


@pytest.mark.parametrize("kind", KINDS)
def test_partial_cotangents(kind, rng, torch):
    """None for the output's or a state's cotangent: the gradient of the remaining terms."""
    dtype = np.float64
    tm, m, _ = make_pair(torch, kind, BIG, dtype)
    x = rng.standard_normal((B, T, I))
    hx = make_hx(rng, kind, BIG, dtype)
    cases = [(True, False, False), (False, True, False), (True, True, False)]
    if kind == "lstm":
        cases += [(False, False, True), (False, True, True), (True, False, True)]
    for parts in cases:
        grads_vs_torch(torch, tm, m, kind, x, hx, LENGTHS, dtype, rng, f"{kind} cotangents {parts}", parts)


@pytest.mark.parametrize("kind", KINDS)
def test_pullback_repeatable_and_cotangents_checked(kind, rng):
    m = attnc_module(kind, BIG, np.float64, seed=2).eval()
    x = rng.standard_normal((B, T, I))
    hx = make_hx(rng, kind, BIG, np.float64)
    res, pullback = attnc_vjp(m, x, hx, LENGTHS)
    out, states = split(kind, res)
    dout = rng.standard_normal(out.shape)
    dst = [rng.standard_normal(s.shape) for s in states]
    g1, g2 = pull(kind, pullback, dout, dst), pull(kind, pullback, dout, dst)
    for n in g1:
        same_bits(g1[n], g2[n], n)
    with pytest.raises(ValueError):
        pull(kind, pullback, dout[:, :-1], dst)
    with pytest.raises(ValueError):
        pull(kind, pullback, dout, [d[:, :-1] for d in dst])
    with pytest.raises(TypeError):
        pull(kind, pullback, dout.astype(np.float32), dst)
    with pytest.raises(TypeError):
        pull(kind, pullback, dout, [d.astype(np.float32) for d in dst])


# --------------------------------------------------------------------------- finite differences

FD_I, FD_H, FD_B, FD_T = 2, 2, 2, 3
FD_LENGTHS = np.array([1, 3])
FD_CFG = dict(num_layers=2, bidirectional=True, bias=True)


def _fd_setup(kind, rng, dropout=0.0, seed=7):
    def build():
        return attnc_module(kind, FD_CFG, np.float64, seed=seed, dropout=dropout, input_size=FD_I, hidden=FD_H)

    params = {k: 0.7 * rng.standard_normal(v.shape) for k, v in build().state_dict().items()}
    x = rng.standard_normal((FD_B, FD_T, FD_I))
    hx = make_hx(rng, kind, FD_CFG, np.float64, batch=FD_B, hidden=FD_H)
    return build, params, x, hx


def _fd_fn(kind, build, training):
    def fn(input, h0, c0=None, **params):
        mod = build()
        mod.load_state_dict(params)
        mod.train(training)
        hx = (h0, c0) if kind == "lstm" else h0
        out, st = split(kind, mod(input, hx, lengths=FD_LENGTHS))
        return (out, *st)

    return fn


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train-dropout"])
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_finite_differences(kind, training, rng, fd_check):
    """A tiny two-layer bidirectional LSTM / GRU with a ragged batch and an initial state:
    every parameter, the input, h0 (and c0) against central differences of
    <dout, out> + <dh, h_n> (+ <dc, c_n>). In training mode a fresh module with the same
    seed is built for every evaluation, so every call draws the same dropout mask."""
    build, params, x, hx = _fd_setup(kind, rng, dropout=0.5 if training else 0.0)
    mod = build()
    mod.load_state_dict(params)
    mod.train(training)
    res, pullback = attnc_vjp(mod, x, hx, FD_LENGTHS)
    out, states = split(kind, res)
    if training:  # dropout did something (else this would only repeat the eval case)
        ev = build()
        ev.load_state_dict(params)
        ev_out, _ = split(kind, ev.eval()(x, hx, lengths=FD_LENGTHS))
        assert np.max(np.abs(ev_out - out)) > 1e-3, "dropout had no effect in training mode"
    dout = rng.standard_normal(out.shape)
    dst = [rng.standard_normal(s.shape) for s in states]
    grads = pull(kind, pullback, dout, dst)
    kwargs = dict(input=x, **dict(zip(state_names(kind), hx_parts(kind, hx))), **params)
    assert set(grads) == set(kwargs), sorted(grads)
    fd_check(
        _fd_fn(kind, build, training), kwargs, [dout] + dst, grads, wrt=list(kwargs), eps=1e-6, rtol=1e-6, atol=1e-8
    )


# --------------------------------------------------------------------------- padding


def _garbage(x, lengths, value=None, rng=None):
    y = x.copy()
    pad = padded(lengths, x.shape[1])
    y[pad] = value if value is not None else 1e3 * rng.standard_normal(y[pad].shape)
    return y


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_padding_is_not_read(kind, dtype, rng):
    """Values at padded steps (of the input, and of the output's cotangent) change
    nothing: outputs, final states and gradients keep their bits; the input gradient is 0
    at padded steps."""
    m = attnc_module(kind, BIG, dtype, seed=3).eval()
    x = rng.standard_normal((B, T, I)).astype(dtype)
    hx = make_hx(rng, kind, BIG, dtype)
    x2 = _garbage(x, LENGTHS, rng=rng)
    res1, pb1 = attnc_vjp(m, x, hx, LENGTHS)
    res2, pb2 = attnc_vjp(m, x2, hx, LENGTHS)
    o1, s1 = split(kind, res1)
    o2, s2 = split(kind, res2)
    same_bits(o1, o2, "output")
    for a, b in zip(s1, s2):
        same_bits(a, b, "final state")
    assert np.all(o1[padded(LENGTHS)] == 0)
    dout = rng.standard_normal(o1.shape).astype(dtype)
    dst = [rng.standard_normal(s.shape).astype(dtype) for s in s1]
    g1, g2 = pull(kind, pb1, dout, dst), pull(kind, pb2, dout, dst)
    for n in g1:
        same_bits(g1[n], g2[n], f"gradient {n} with garbage padding")
    assert np.all(g1["input"][padded(LENGTHS)] == 0), "input gradient at padded steps is not 0"
    # the output's cotangent at padded steps is ignored
    g3 = pull(kind, pb1, _garbage(dout, LENGTHS, value=0.0), dst)
    for n in g1:
        same_bits(g1[n], g3[n], f"gradient {n} with zeroed padded cotangent")


@pytest.mark.parametrize("kind", KINDS)
def test_padding_may_hold_nan(kind, rng):
    """Padding is never read, not even multiplied by 0: NaN and inf there give the clean
    result (torch's packed sequences never see them either)."""
    dtype = np.float64
    m = attnc_module(kind, BIG, dtype, seed=3).eval()
    x = rng.standard_normal((B, T, I))
    hx = make_hx(rng, kind, BIG, dtype)
    bad = _garbage(x, LENGTHS, value=np.nan)
    bad[2, -1] = np.inf
    res1, pb1 = attnc_vjp(m, x, hx, LENGTHS)
    res2, pb2 = attnc_vjp(m, bad, hx, LENGTHS)
    o1, s1 = split(kind, res1)
    o2, s2 = split(kind, res2)
    same_bits(o2, o1, "output with NaN padding")
    for a, b in zip(s2, s1):
        same_bits(a, b, "final state with NaN padding")
    dout = rng.standard_normal(o1.shape)
    dst = [rng.standard_normal(s.shape) for s in s1]
    g1, g2 = pull(kind, pb1, dout, dst), pull(kind, pb2, dout, dst)
    for n in g1:
        same_bits(g2[n], g1[n], f"gradient {n} with NaN padding")


# --------------------------------------------------------------------------- cells


def cell_pair(torch, kind, dtype, bias, seed=0):
    torch.manual_seed(seed)
    tcls = torch.nn.LSTMCell if kind == "lstm" else torch.nn.GRUCell
    tc = tcls(I, H, bias=bias, dtype=_tdtype(torch, dtype))
    with torch.no_grad():
        for p in tc.parameters():
            p.uniform_(-0.8, 0.8)
    cls = nn.LSTMCell if kind == "lstm" else nn.GRUCell
    c = cls(I, H, bias=bias, dtype=dtype, seed=seed + 1)
    c.load_state_dict(torch_state(tc))
    return tc, c


def _cell_out(kind, res, what):
    if kind == "lstm":
        assert isinstance(res, tuple) and len(res) == 2, f"{what}: LSTMCell returns (h', c'), got {type(res)}"
        return list(res)
    assert isinstance(res, np.ndarray), f"{what}: GRUCell returns h', got {type(res)}"
    return [res]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_cells_match_torch(kind, dtype, bias, rng, torch):
    """LSTMCell / GRUCell: forward and gradients (input, hx, parameters) against torch,
    batched and unbatched, with and without hx; float64 also against the reference."""
    tc, c = cell_pair(torch, kind, dtype, bias)
    sd = c.state_dict()
    assert list(sd) == list(tc.state_dict())
    for batch, with_hx in ((B, True), (B, False), (None, True)):
        what = f"{kind}cell batch={batch} hx={with_hx}"
        bdim = () if batch is None else (batch,)
        x = rng.standard_normal(bdim + (I,)).astype(dtype)
        parts = [(0.8 * rng.standard_normal(bdim + (H,))).astype(dtype) for _ in range(nstates(kind))]
        hx = (tuple(parts) if kind == "lstm" else parts[0]) if with_hx else None
        outs = _cell_out(kind, c(x, hx) if with_hx else c(x), what)
        for o in outs:
            assert o.dtype == dtype and o.shape == bdim + (H,), f"{what}: {o.dtype} {o.shape}"
        # torch
        tx = torch.from_numpy(x.copy()).requires_grad_(True)
        tparts = [torch.from_numpy(p.copy()).requires_grad_(True) for p in parts]
        thx = (tuple(tparts) if kind == "lstm" else tparts[0]) if with_hx else None
        for p in tc.parameters():
            p.grad = None
        touts = tc(tx, thx)
        touts = list(touts) if kind == "lstm" else [touts]
        for o, to in zip(outs, touts):
            close(o, to.detach().numpy(), REL[dtype], f"{what}: output")
        if dtype == np.float64:
            if with_hx:
                h, cst = parts[0], (parts[1] if kind == "lstm" else None)
            else:
                h = np.zeros(bdim + (H,))
                cst = np.zeros(bdim + (H,))
            args = (sd["weight_ih"], sd["weight_hh"], sd.get("bias_ih"), sd.get("bias_hh"))
            r = list(ref.lstm_cell(x, h, cst, *args)) if kind == "lstm" else [ref.gru_cell(x, h, *args)]
            for o, ro in zip(outs, r):
                close(o, ro, 1e-12, f"{what}: vs reference")
        # gradients
        res, pullback = attnc.vjp(c, x, hx) if with_hx else attnc.vjp(c, x)
        outs2 = _cell_out(kind, res, what)
        for o, o2 in zip(outs, outs2):
            same_bits(o, o2, f"{what}: vjp output vs forward")
        cots = [rng.standard_normal(o.shape).astype(dtype) for o in outs]
        grads = pullback(*cots)
        sum(((to * torch.from_numpy(ct)).sum() for to, ct in zip(touts, cots))).backward()
        expected = {"input": tx.grad.numpy()}
        if with_hx:
            for n, tp in zip(state_names(kind), tparts):
                expected[n] = tp.grad.numpy()
        for n, p in tc.named_parameters():
            expected[n] = p.grad.numpy()
        assert set(grads) == set(expected), f"{what}: gradient keys {sorted(grads)}, expected {sorted(expected)}"
        for n, e in expected.items():
            assert grads[n].dtype == dtype and grads[n].shape == e.shape, (what, n)
            close(grads[n], e, GREL[dtype], f"{what}: gradient {n}")


@pytest.mark.parametrize("kind", KINDS)
def test_cell_finite_differences(kind, rng, fd_check):
    cls = nn.LSTMCell if kind == "lstm" else nn.GRUCell
    c = cls(FD_I, FD_H, dtype=np.float64, seed=0)
    params = {k: 0.7 * rng.standard_normal(v.shape) for k, v in c.state_dict().items()}
    c.load_state_dict(params)
    x = rng.standard_normal((FD_B, FD_I))
    parts = [rng.standard_normal((FD_B, FD_H)) for _ in range(nstates(kind))]
    hx = tuple(parts) if kind == "lstm" else parts[0]
    res, pullback = attnc.vjp(c, x, hx)
    outs = _cell_out(kind, res, "cell")
    cots = [rng.standard_normal(o.shape) for o in outs]
    grads = pullback(*cots)

    def fn(input, h0, c0=None, **p):
        cell = cls(FD_I, FD_H, dtype=np.float64, seed=0)
        cell.load_state_dict(p)
        return cell(input, (h0, c0) if kind == "lstm" else h0)

    kwargs = dict(input=x, **dict(zip(state_names(kind), parts)), **params)
    fd_check(fn, kwargs, cots, grads, wrt=list(kwargs), eps=1e-6, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------- state dicts, init


@pytest.mark.parametrize("cfg", CFGS, ids=CFG_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_keys_shapes_and_round_trip(kind, cfg, rng, torch):
    """attnc's own (seeded) initialisation: torch's keys, order and shapes, within
    U(-1/sqrt(H), 1/sqrt(H)); loads into torch strictly and gives torch's outputs."""
    dtype = np.float64
    m = attnc_module(kind, cfg, dtype, seed=5).eval()
    tm = torch_module(torch, kind, cfg, dtype, randomise=False)
    sd, tsd = m.state_dict(), tm.state_dict()
    assert list(sd) == list(tsd), f"keys {list(sd)} != torch's {list(tsd)}"
    bound = 1 / np.sqrt(H)
    for k in tsd:
        assert sd[k].shape == tuple(tsd[k].shape), (k, sd[k].shape, tuple(tsd[k].shape))
        assert sd[k].dtype == dtype, (k, sd[k].dtype)
        assert np.all(np.abs(sd[k]) <= bound), f"{k}: outside U(-1/sqrt(H), 1/sqrt(H))"
    res = tm.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    assert not res.missing_keys and not res.unexpected_keys
    x = rng.standard_normal((B, T, I))
    hx = make_hx(rng, kind, cfg, dtype)
    out, states = split(kind, run(m, x, hx, LENGTHS))
    tout, tstates, _ = torch_run(torch, tm, kind, x, hx, LENGTHS)
    close(out, tout.detach().numpy(), 1e-12, "round trip output")
    for s, ts in zip(states, tstates):
        close(s, ts.detach().numpy(), 1e-12, "round trip state")
    k0 = next(iter(sd))
    sd[k0][...] = 0
    assert not np.all(m.state_dict()[k0] == 0), "state_dict must return copies"


@pytest.mark.parametrize("kind", KINDS)
def test_initialisation_distribution_and_seed(kind):
    """Every parameter U(-k, k), k = 1/sqrt(hidden_size) (torch's init): within bounds,
    spread like a uniform, no two parameters equal; same seed same bits; the cells too."""
    hidden = 16
    k = 1 / np.sqrt(hidden)
    cfg = BIG
    m = attnc_module(kind, cfg, np.float64, seed=0, input_size=8, hidden=hidden)
    sd = m.state_dict()
    allp = np.concatenate([v.ravel() for v in sd.values()])
    assert np.all(np.abs(allp) <= k)
    assert abs(allp.mean()) < 0.05 * k, allp.mean()
    assert abs(allp.std() / (k / np.sqrt(3)) - 1) < 0.05, allp.std()
    assert np.abs(allp).max() > 0.95 * k
    for v in sd.values():  # every tensor is spread over the range, not only the pool
        assert v.std() > 0.4 * k, "a parameter is not initialised U(-k, k)"
    vals = list(sd.values())
    for a, b in itertools.combinations(range(len(vals)), 2):
        if vals[a].shape == vals[b].shape:
            assert not np.array_equal(vals[a], vals[b]), f"{list(sd)[a]} == {list(sd)[b]}"
    again = attnc_module(kind, cfg, np.float64, seed=0, input_size=8, hidden=hidden).state_dict()
    other = attnc_module(kind, cfg, np.float64, seed=1, input_size=8, hidden=hidden).state_dict()
    for n in sd:
        same_bits(sd[n], again[n], f"same seed: {n}")
    assert all(not np.array_equal(sd[n], other[n]) for n in sd), "seed has no effect"
    cls = nn.LSTMCell if kind == "lstm" else nn.GRUCell
    c1, c2 = cls(8, hidden, seed=4).state_dict(), cls(8, hidden, seed=4).state_dict()
    assert list(c1) == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    for n in c1:
        same_bits(c1[n], c2[n], f"cell same seed: {n}")
        assert np.all(np.abs(c1[n]) <= k) and c1[n].std() > 0.4 * k, n
    assert list(cls(8, hidden, bias=False, seed=4).state_dict()) == ["weight_ih", "weight_hh"]


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_save_load(kind, dtype, rng, tmp_path):
    """attnc.save / attnc.load keep the class, the (non-default) configuration and the
    parameters: the loaded module (eval mode) gives the same bits; dropout survives."""
    cfg = dict(num_layers=2, bidirectional=True, bias=False)
    m = attnc_module(kind, cfg, dtype, seed=4, dropout=0.4)
    m.load_state_dict({k: v + 0.3 * rng.standard_normal(v.shape) for k, v in m.state_dict().items()})
    m.eval()
    path = tmp_path / f"{kind}.npz"
    attnc.save(path, m)
    loaded = attnc.load(path)
    assert type(loaded) is type(m)
    assert not loaded.training
    assert loaded.dtype == dtype
    lsd, msd = loaded.state_dict(), m.state_dict()
    assert list(lsd) == list(msd)
    for k in lsd:
        same_bits(lsd[k], msd[k], k)
    x = rng.standard_normal((B, T, I)).astype(dtype)
    hx = make_hx(rng, kind, cfg, dtype)
    a, sa = split(kind, run(loaded, x, hx, LENGTHS))
    b, sb = split(kind, run(m, x, hx, LENGTHS))
    same_bits(a, b, "output")
    for u, v in zip(sa, sb):
        same_bits(u, v, "state")
    loaded.train()
    c, _ = split(kind, run(loaded, x, hx, LENGTHS))
    assert np.max(np.abs(c - a)) > 1e-3, "the loaded module lost its dropout"
    # cells
    cls = nn.LSTMCell if kind == "lstm" else nn.GRUCell
    cell = cls(I, H, bias=False, dtype=dtype, seed=1)
    attnc.save(tmp_path / "cell.npz", cell)
    lc = attnc.load(tmp_path / "cell.npz")
    assert type(lc) is cls and lc.dtype == dtype and list(lc.state_dict()) == ["weight_ih", "weight_hh"]
    xc = x[:, 0]
    for u, v in zip(_cell_out(kind, lc(xc), "cell"), _cell_out(kind, cell(xc), "cell")):
        same_bits(u, v, "cell output")


# --------------------------------------------------------------------------- dropout


@pytest.mark.parametrize("kind", KINDS)
def test_dropout_seeding_and_modes(kind, rng):
    dtype = np.float64
    cfg = BIG
    d = ndir(cfg)
    params = attnc_module(kind, cfg, dtype, seed=0).state_dict()
    x = rng.standard_normal((B, T, I))
    hx = make_hx(rng, kind, cfg, dtype)

    def build(seed, dropout):
        mod = attnc_module(kind, cfg, dtype, seed=seed, dropout=dropout)
        mod.load_state_dict(params)
        return mod

    def go(mod):
        return split(kind, run(mod, x, hx, LENGTHS))

    assert build(1, 0.5).training, "modules start in training mode"
    a, b, c = build(1, 0.5), build(1, 0.5), build(2, 0.5)
    (a1, sa1), (b1, sb1), (c1, _) = go(a), go(b), go(c)
    (a2, _), (b2, _) = go(a), go(b)
    same_bits(a1, b1, "same seed, first call")
    same_bits(a2, b2, "same seed, second call")
    for u, v in zip(sa1, sb1):
        same_bits(u, v, "same seed: state")
    assert np.max(np.abs(a1 - c1)) > 1e-3, "different seeds gave the same dropout"
    assert np.max(np.abs(a1 - a2)) > 1e-3, "consecutive calls drew the same dropout mask"
    ref_eval, ref_states = go(build(1, 0.0).eval())
    plain, _ = go(build(1, 0.0))
    close(plain, ref_eval, 1e-13, "dropout=0: training vs eval")
    assert np.max(np.abs(a1 - ref_eval)) > 1e-3, "dropout had no effect in training mode"
    # only between layers: the first layer's final states are untouched by dropout, the
    # output's padding stays 0
    for u, v in zip(sa1, ref_states):
        close(u[:d], v[:d], 1e-13, "first layer's final state in training mode")
        assert np.max(np.abs(u[d:] - v[d:])) > 1e-3, "last layer's state unaffected by dropout"
    assert np.all(a1[padded(LENGTHS)] == 0)
    # eval ignores dropout; train() switches it back on
    a.eval()
    same_bits(go(a)[0], go(a)[0], "eval is deterministic")
    close(go(a)[0], ref_eval, 1e-13, "eval with dropout=0.5 vs dropout=0")
    a.train()
    assert np.max(np.abs(go(a)[0] - ref_eval)) > 1e-3, "train() did not switch dropout back on"
    # vjp in training mode draws like forward
    res, pullback = attnc_vjp(build(1, 0.5), x, hx, LENGTHS)
    out, states = split(kind, res)
    same_bits(out, a1, "vjp forward in training mode")
    g = pull(kind, pullback, np.ones_like(out), [np.ones_like(s) for s in states])
    assert all(np.isfinite(v).all() for v in g.values())


@pytest.mark.parametrize("kind", KINDS)
def test_dropout_one_layer_is_inert_and_dropout_one(kind, rng):
    """num_layers=1: nothing lies between layers, training = eval (torch warns);
    dropout=1 zeroes the first layer's output before the second layer (the reference with
    a zero mask)."""
    dtype = np.float64
    x = rng.standard_normal((B, T, I))
    one = dict(num_layers=1, bidirectional=True, bias=True)
    m = attnc_module(kind, one, dtype, seed=3, dropout=0.7)
    hx = make_hx(rng, kind, one, dtype)
    tr, st = split(kind, run(m, x, hx, LENGTHS))
    ev, se = split(kind, run(m.eval(), x, hx, LENGTHS))
    close(tr, ev, 1e-13, "one layer: training vs eval")
    for u, v in zip(st, se):
        close(u, v, 1e-13, "one layer: state")
    m = attnc_module(kind, BIG, dtype, seed=3, dropout=1.0)
    hx = make_hx(rng, kind, BIG, dtype)
    out, states = split(kind, run(m, x, hx, LENGTHS))
    rout, rstates = ref_run(kind, m.state_dict(), BIG, x, hx, LENGTHS, masks=[0.0])
    close(out, rout, 1e-12, "dropout=1 vs reference with a zero mask")
    for s, rs in zip(states, rstates):
        close(s, rs, 1e-12, "dropout=1: state")


# --------------------------------------------------------------------------- errors


def _raises(exc, pattern, fn, *args, **kw):
    """fn raises exc matching pattern, also through attnc.vjp."""
    with pytest.raises(exc, match=pattern):
        fn(*args, **kw)
    with pytest.raises(exc, match=pattern):
        attnc.vjp(fn, *args, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_constructor_errors(kind):
    cls = nn.LSTM if kind == "lstm" else nn.GRU
    with pytest.raises(ValueError, match="batch_first"):
        cls(I, H, batch_first=False)
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout"):
            cls(I, H, num_layers=2, dropout=p)
    with pytest.raises(ValueError, match="hidden_size"):
        cls(I, 0)
    with pytest.raises(ValueError, match="num_layers"):
        cls(I, H, num_layers=0)
    with pytest.raises(TypeError, match="dtype"):
        cls(I, H, dtype=np.int32)
    cell = nn.LSTMCell if kind == "lstm" else nn.GRUCell
    with pytest.raises(ValueError, match="hidden_size"):
        cell(I, 0)
    with pytest.raises(TypeError, match="dtype"):
        cell(I, H, dtype=np.int32)


def _error_cases(kind):
    """name -> (exception, pattern, input, hx, lengths); the module is BIG in float32."""
    L = BIG["num_layers"] * ndir(BIG)
    f = np.float32

    def z(*shape, dtype=f):
        return np.zeros(shape, dtype)

    def hx(h, c=None):
        return (h, z(L, B, H) if c is None else c) if kind == "lstm" else h

    x = z(B, T, I)
    cases = {
        "input_width": (ValueError, r"input", z(B, T, I + 1), None, None),
        "input_1d": (ValueError, r"input", z(I), None, None),
        "input_4d": (ValueError, r"input", z(1, B, T, I), None, None),
        "input_f64": (TypeError, r"input", z(B, T, I, dtype=np.float64), None, None),
        "input_int": (TypeError, r"input", z(B, T, I, dtype=np.int64), None, None),
        "lengths_zero": (ValueError, r"lengths", x, None, np.array([3, 0, 5])),
        "lengths_negative": (ValueError, r"lengths", x, None, np.array([3, -1, 5])),
        "lengths_too_long": (ValueError, r"lengths", x, None, np.array([3, T + 1, 5])),
        "lengths_shape": (ValueError, r"lengths", x, None, np.array([3, 2, 5, 1])),
        "lengths_2d": (ValueError, r"lengths", x, None, np.array([[3], [2], [5]])),
        "lengths_float": (TypeError, r"lengths", x, None, np.array([3.0, 2.0, 5.0])),
        "h0_hidden": (ValueError, r"h0|hx", x, hx(z(L, B, H + 1)), None),
        "h0_batch": (ValueError, r"h0|hx", x, hx(z(L, B + 1, H)), None),
        "h0_layers": (ValueError, r"h0|hx", x, hx(z(L - 1, B, H)), None),
        "h0_unbatched": (ValueError, r"h0|hx", x, hx(z(L, H), z(L, H)), None),
        "h0_f64": (TypeError, r"h0|hx", x, hx(z(L, B, H, dtype=np.float64)), None),
        "unbatched_input_batched_hx": (ValueError, r"h0|hx", z(T, I), hx(z(L, B, H)), None),
    }
    if kind == "lstm":
        cases.update(
            {
                "c0_hidden": (ValueError, r"c0|hx", x, (z(L, B, H), z(L, B, H + 1)), None),
                "c0_f64": (TypeError, r"c0|hx", x, (z(L, B, H), z(L, B, H, dtype=np.float64)), None),
                "hx_not_a_pair": ((TypeError, ValueError), r"hx", x, z(L, B, H), None),
            }
        )
    else:
        cases["hx_pair"] = ((TypeError, ValueError), r"hx|h0", x, (z(L, B, H), z(L, B, H)), None)
    return cases


@pytest.mark.parametrize("kind,case", [(k, c) for k in KINDS for c in _error_cases(k)])
def test_forward_errors_name_the_argument(kind, case):
    exc, pattern, x, hx, lengths = _error_cases(kind)[case]
    m = attnc_module(kind, BIG, np.float32, seed=0)
    kw = {} if lengths is None else {"lengths": lengths}
    args = (x,) if hx is None else (x, hx)
    _raises(exc, pattern, m, *args, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_lengths_errors_say_which_row_or_shape(kind):
    """lengths' shape and range are checked once, in C: the message names the
    row and its value, or the shape wanted."""
    m = attnc_module(kind, BIG, np.float32, seed=0)
    x = np.zeros((B, T, I), np.float32)
    _raises(ValueError, rf"lengths\[1\] = 0 is outside \[1, {T}\]", m, x, lengths=np.array([3, 0, 5]))
    _raises(ValueError, rf"lengths\[2\] = {T + 1} is outside \[1, {T}\]", m, x, lengths=[3, 2, T + 1])
    _raises(ValueError, rf"lengths has shape \(4,\), expected \({B},\)", m, x, lengths=np.array([3, 2, 5, 1]))
    _raises(ValueError, rf"lengths has shape \({B}, 1\), expected \({B},\)", m, x, lengths=np.array([[3], [2], [5]]))


@pytest.mark.parametrize("kind", KINDS)
def test_cell_errors(kind):
    cls = nn.LSTMCell if kind == "lstm" else nn.GRUCell
    c = cls(I, H, seed=0)
    x = np.zeros((B, I), np.float32)
    h = np.zeros((B, H), np.float32)

    def hx(a, b=h):
        return (a, b) if kind == "lstm" else a

    _raises(ValueError, "input", c, np.zeros((B, I + 1), np.float32))
    _raises(ValueError, "input", c, np.zeros((1, B, I), np.float32))
    _raises(TypeError, "input", c, x.astype(np.float64))
    _raises(ValueError, r"hx|h0|h\b", c, x, hx(np.zeros((B, H + 1), np.float32)))
    _raises(ValueError, r"hx|h0|h\b", c, x, hx(np.zeros((B + 1, H), np.float32)))
    _raises(TypeError, r"hx|h0|h\b", c, x, hx(h.astype(np.float64)))
    if kind == "lstm":
        _raises(ValueError, r"hx|c0|c\b", c, x, (h, np.zeros((B, H + 1), np.float32)))


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_and_parameters_never_modified(kind, rng, assert_unchanged):
    dtype = np.float64
    m = attnc_module(kind, BIG, dtype, seed=0, dropout=0.3)
    before = m.state_dict()
    x = rng.standard_normal((B, T, I))
    hx = make_hx(rng, kind, BIG, dtype)
    lengths = LENGTHS.copy()
    assert_unchanged(m, x, hx, lengths=lengths)
    res, pullback = assert_unchanged(attnc.vjp, m, x, hx, lengths=lengths)
    out, states = split(kind, res)
    dout = rng.standard_normal(out.shape)
    dst = [rng.standard_normal(s.shape) for s in states]
    if kind == "lstm":
        assert_unchanged(pullback, dout, tuple(dst))
    else:
        assert_unchanged(pullback, dout, dst[0])
    m.eval()
    assert_unchanged(m, x, hx, lengths=lengths)
    for n, p in m.named_parameters():
        same_bits(p, before[n], n)
    # the outputs do not alias the inputs or each other
    out, states = split(kind, m(x, hx, lengths=lengths))
    for a in [x] + hx_parts(kind, hx):
        for o in [out] + states:
            assert not np.shares_memory(a, o)
    cls = nn.LSTMCell if kind == "lstm" else nn.GRUCell
    c = cls(I, H, dtype=dtype, seed=0)
    assert_unchanged(c, x[:, 0], tuple(s[0] for s in hx_parts(kind, hx)) if kind == "lstm" else hx[0])


# --------------------------------------------------------------------------- threads, layouts


@pytest.mark.parametrize("b, i, h", [(9, 6, 4), (9, 6, 24), (9, 6, 64), (100, 16, 64), (100, 256, 256)])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_thread_count_gives_identical_bits(kind, bidirectional, b, i, h, rng, restore_threads):
    """Forward and gradients (training mode, seeded dropout, ragged batch) do not depend on
    the number of threads (h 24 and up: the fused float32 kernels). One thread runs them
    as one chunk of rows. With more, a big enough bidirectional layer runs its two
    directions side by side, each on one thread; one direction alone is shared: by
    units for the batch of 9 and for h 256's big weights, by rows, in 6 chunks (tiles
    starting elsewhere), for the batch of 100 at h 64. i 16 and 256: the input gradient
    fused too."""
    dtype = np.float32
    t = 7
    x = rng.standard_normal((b, t, i)).astype(dtype)
    lengths = np.array([7, 1, 3, 7, 2, 5, 6, 4, 7]) if b == 9 else np.r_[t, rng.integers(1, t + 1, b - 1)]
    cfg = dict(BIG, bidirectional=bidirectional)
    hx = make_hx(rng, kind, cfg, dtype, batch=b, hidden=h)
    results = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        m = attnc_module(kind, cfg, dtype, seed=8, dropout=0.2, input_size=i, hidden=h)
        res, pullback = attnc_vjp(m, x, hx, lengths)
        out, states = split(kind, res)
        g = pull(kind, pullback, np.ones_like(out), [np.ones_like(s) for s in states])
        results.append((out, states, g))
    for out, states, g in results[1:]:
        same_bits(out, results[0][0], "output")
        for s, s0 in zip(states, results[0][1]):
            same_bits(s, s0, "state")
        for k in g:
            same_bits(g[k], results[0][2][k], k)


@pytest.mark.parametrize("kind", KINDS)
def test_non_contiguous_inputs(kind, rng):
    m = attnc_module(kind, BIG, np.float64, seed=3).eval()
    L = BIG["num_layers"] * ndir(BIG)
    big = rng.standard_normal((B, 2 * T, 2 * I))
    x = big[:, ::2, 1::2]
    parts = [rng.standard_normal((B, L, H)).transpose(1, 0, 2) for _ in range(nstates(kind))]
    hx = tuple(parts) if kind == "lstm" else parts[0]
    lengths = np.repeat(LENGTHS, 2)[::2]
    assert not x.flags.c_contiguous and not parts[0].flags.c_contiguous and not lengths.flags.c_contiguous
    chx = tuple(np.ascontiguousarray(p) for p in parts) if kind == "lstm" else np.ascontiguousarray(hx)
    a, sa = split(kind, m(x, hx, lengths=lengths))
    b, sb = split(kind, m(np.ascontiguousarray(x), chx, lengths=np.ascontiguousarray(lengths)))
    same_bits(a, b, "non-contiguous vs contiguous")
    for u, v in zip(sa, sb):
        same_bits(u, v, "state")
