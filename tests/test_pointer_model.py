"""attnc.models.PointerNet (pointer networks: LSTM encoder with a learned end token, LSTM
decoder fed the chosen inputs, additive pointer attention, masks for "permutation", "tour"
and "hull") against the same network written independently in torch
(tests/reference/pointer_torch.py, loaded with attnc's state dict): teacher-forced
log-probabilities in float64 and float32 (ragged lengths, every constraint), every
parameter's and the inputs' gradient through attnc.vjp against torch autograd,
loss_and_grad against torch's NLL, finite differences as a second check, greedy and beam
decoding against torch's decoding loop, beam search as wide as all candidates against an
exhaustive search, the structure of decoded sequences, pointer distributions, no NaN,
inputs never modified, thread-count independence, state_dict / save / load round trips
and argument errors. Sizes are tiny: the file takes seconds."""

from types import SimpleNamespace

import numpy as np
import pytest

import attnc
import attnc.models
from helpers import close, same_bits

D, H = 2, 5  # input width, hidden size
REL64 = 1e-10  # float64 log-probabilities vs torch
GREL64 = 1e-9  # float64 gradients vs torch autograd
REL32 = 1e-4  # float32 model vs float64 torch
CONSTRAINTS = ("permutation", "tour", "hull")

# (B, n, lengths or None, extra target columns beyond n)
SHAPES = [
    (1, 1, None, 0),
    (3, 4, None, 0),
    (5, 4, [4, 1, 3, 2, 4], 0),
    (6, 7, [7, 3, 1, 5, 7, 2], 2),
    (4, 7, [2, 6, 4, 3], 0),
]


@pytest.fixture
def ref(torch):
    from reference import pointer_torch

    return pointer_torch


def state(ref, seed=0, dtype=np.float64, embedding_size=None):
    """Weights wider than a typical init (scale 2), so the pointer distributions are not flat."""
    return ref.random_state(D, H, seed=seed, dtype=dtype, scale=2.0, embedding_size=embedding_size)


def make(ref, seed=0, dtype=np.float64):
    m = attnc.models.PointerNet(D, H, dtype=dtype, seed=seed)
    m.load_state_dict(state(ref, seed, dtype))
    return m


def lengths_of(B, n, lengths):
    return np.full(B, n, np.int64) if lengths is None else np.asarray(lengths, np.int64)


def draw(B, n, lengths, constraint, seed=0, extra=0, dtype=np.float64):
    """(inputs (B, n, D), lengths (B,), valid random targets (B, n + extra))."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, n, D)).astype(dtype)
    nl = lengths_of(B, n, lengths)
    t = np.full((B, n + extra), -1, np.int64)
    for b in range(B):
        k = nl[b] if constraint != "hull" else int(rng.integers(1, nl[b] + 1))
        t[b, :k] = rng.permutation(nl[b])[:k]
    return x, nl, t


def torch_logp(ref, st, x, t, nl, constraint):
    tm = ref.TorchPointerNet.from_state(st)
    return tm(x, t, nl, constraint).detach().numpy()


def torch_grads(ref, st, x, t, nl, constraint, cot):
    """Gradients of sum(logp * cot) over logp's finite entries, by torch autograd, float64."""
    import torch

    tm = ref.TorchPointerNet.from_state(st)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    logp = tm(xt, t, nl, constraint)
    fin = torch.isfinite(logp)
    (torch.where(fin, logp, torch.zeros_like(logp)) * torch.from_numpy(cot)).sum().backward()
    grads = {k: p.grad.numpy() for k, p in tm.named_parameters()}
    grads["inputs"] = xt.grad.numpy()
    return grads


def rel_close(got, want, rel, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite"
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-300)
    err = float(np.abs(got - want).max()) / scale if want.size else 0.0
    assert err <= rel, f"{what}: relative difference {err:.3g} > {rel:g}"


def cotangent(logp, seed=1):
    fin = np.isfinite(logp)
    return np.where(fin, np.random.default_rng(seed).standard_normal(logp.shape), 0).astype(logp.dtype)


def teacher_forced(model, x, nl, indices, constraint):
    """(targets, log-probabilities in float64) of decoded sequences under the model's
    teacher-forced forward. indices: generate's, -1 after each row's last (a tour's
    closing index dropped)."""
    n = x.shape[1]
    t = np.asarray(indices)[:, :n].copy()
    if constraint == "tour":
        t = np.where(np.arange(n)[None, :] < nl[:, None], t, -1)
    return t, model(x, t, lengths=nl, constraint=constraint).astype(np.float64)


def as_reference(indices, nl, n, constraint):
    """generate's indices in the torch reference's layout (B, n): -1 after each row's
    last choice, a tour's closing index dropped."""
    got = np.full((len(indices), n), -1)
    got[:, : min(indices.shape[1], n)] = indices[:, :n]
    if constraint == "tour":
        got = np.where(np.arange(n)[None, :] < nl[:, None], got, -1)
    return got


def totals(model, x, nl, indices, constraint):
    """The summed log-probability (choices and end step) of decoded sequences under the
    model's teacher-forced forward. indices: generate's, -1 after each row's last."""
    n = x.shape[1]
    t, logp = teacher_forced(model, x, nl, indices, constraint)
    counts = (t >= 0).sum(1)
    full = np.concatenate([t, np.full((len(t), 1), -1)], axis=1)
    full[np.arange(len(t)), counts] = n
    picked = np.take_along_axis(logp, np.maximum(full, 0)[:, :, None], 2)[:, :, 0]
    return np.where(full >= 0, picked, 0).sum(1), counts


# --------------------------------------------------------------------------- teacher-forced forward
@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"B{s[0]}n{s[1]}{'r' if s[2] else ''}+{s[3]}")
def test_forward_matches_torch_float64(ref, constraint, shape):
    B, n, lengths, extra = shape
    m = make(ref)
    x, nl, t = draw(B, n, lengths, constraint, seed=n + B, extra=extra)
    got = m(x, t, lengths=None if lengths is None else nl, constraint=constraint)
    want = torch_logp(ref, state(ref), x, t, None if lengths is None else nl, constraint)
    assert got.shape == (B, t.shape[1] + 1, n + 1) and got.dtype == np.float64
    assert not np.isnan(got).any()
    fin = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), fin)
    assert (got[~fin] == -np.inf).all()
    close(got[fin], want[fin], REL64, f"{constraint} log-probabilities")
    # steps after the end step are all -inf; the end step points at the end token
    counts = (t >= 0).sum(1)
    for b in range(B):
        assert np.isfinite(got[b, counts[b], n])
        assert (got[b, counts[b] + 1 :] == -np.inf).all()
        if constraint != "hull":
            assert got[b, counts[b], n] == 0.0  # certain once every input is chosen


@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: f"B{s[0]}n{s[1]}{'r' if s[2] else ''}+{s[3]}")
def test_gradients_match_torch_float64(ref, constraint, shape, assert_unchanged):
    B, n, lengths, extra = shape
    m = make(ref)
    x, nl, t = draw(B, n, lengths, constraint, seed=3 * n + B, extra=extra)
    logp, pull = assert_unchanged(attnc.vjp, m, x, t, lengths=nl, constraint=constraint)
    cot = cotangent(logp)
    grads = assert_unchanged(pull, cot)
    want = torch_grads(ref, state(ref), x, t, nl, constraint, cot)
    assert set(grads) == set(m.state_dict()) | {"inputs"}
    for name, g in want.items():
        assert grads[name].shape == g.shape and grads[name].dtype == np.float64, name
        rel_close(grads[name], g, GREL64, f"{constraint} gradient of {name}")
    # padding inputs get no gradient
    for b in range(B):
        assert (grads["inputs"][b, nl[b] :] == 0).all()


@pytest.mark.parametrize("embedding_size", [None, 5])
@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_float32_matches_torch_float64(ref, constraint, embedding_size):
    """Float32 against torch in float64; with an embedding, attnc folds it into the
    LSTMs' input weights (W_ih W_e), torch applies it first."""
    B, n, lengths = 5, 6, [6, 2, 4, 1, 5]
    st32 = state(ref, seed=2, dtype=np.float32, embedding_size=embedding_size)
    m = attnc.models.PointerNet(D, H, embedding_size=embedding_size, dtype=np.float32, seed=0)
    m.load_state_dict(st32)
    x, nl, t = draw(B, n, lengths, constraint, seed=7, dtype=np.float32)
    check_float32_against_torch(ref, st32, m, x, t, nl, constraint, "float32")


def check_float32_against_torch(ref, st32, m, x, t, nl, constraint, what):
    """Float32 model m (state st32) and inputs x against torch in float64 on the same
    values: log-probabilities and every gradient within REL32."""
    st64 = {k: v.astype(np.float64) for k, v in st32.items()}
    x64 = x.astype(np.float64)
    logp, pull = attnc.vjp(m, x, t, lengths=nl, constraint=constraint)
    assert logp.dtype == np.float32
    want = torch_logp(ref, st64, x64, t, nl, constraint)
    fin = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(logp), fin)
    close(logp[fin], want[fin], REL32, f"{what} log-probabilities")
    cot = cotangent(want)
    grads = pull(cot.astype(np.float32))
    for name, g in torch_grads(ref, st64, x64, t, nl, constraint, cot).items():
        assert grads[name].dtype == np.float32, name
        rel_close(grads[name], g, REL32, f"{what} gradient of {name}")


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_loss_and_grad_matches_torch_nll(ref, constraint, assert_unchanged):
    import torch

    B, n, lengths = 6, 7, [7, 3, 1, 5, 7, 2]
    m = make(ref, seed=4)
    x, nl, t = draw(B, n, lengths, constraint, seed=11, extra=1)
    batch = SimpleNamespace(inputs=x, lengths=nl, targets=t)
    loss, grads = assert_unchanged(m.loss_and_grad, batch, constraint=constraint)
    tm = ref.TorchPointerNet.from_state(state(ref, seed=4))
    tl = tm.loss(x, t, nl, constraint)
    tl.backward()
    tl_value = float(tl.detach())
    assert abs(loss - tl_value) <= REL64 * max(1.0, abs(tl_value))
    # the same thing with torch's own NLL over the scored steps
    logp = tm(x, t, nl, constraint)
    counts = (t >= 0).sum(1)
    target = np.full((B, t.shape[1] + 1), -100)
    target[:, : t.shape[1]] = np.where(t >= 0, t, -100)
    target[np.arange(B), counts] = n
    nll = torch.nn.functional.nll_loss(
        torch.where(torch.isfinite(logp), logp, -1e300).reshape(-1, n + 1),
        torch.from_numpy(target).reshape(-1),
        ignore_index=-100,
    )
    nll_value = float(nll.detach())
    assert abs(loss - nll_value) <= REL64 * max(1.0, abs(nll_value))
    assert set(grads) == set(m.state_dict())
    for name, p in tm.named_parameters():
        rel_close(grads[name], p.grad.numpy(), GREL64, f"loss gradient of {name}")


def check_against_torch(ref, st, vjp, m, x, t, lens, constraint, what):
    """m's log-probabilities and every gradient (through vjp) against torch's on
    state st, float64; returns m's gradients."""
    tm = ref.TorchPointerNet.from_state(st)
    logp, pull = vjp(m, x, t, lengths=lens, constraint=constraint)
    want = tm(x, t, lens, constraint).detach().numpy()
    fin = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(logp), fin)
    close(logp[fin], want[fin], REL64, f"log-probabilities {what}")
    cot = cotangent(logp)
    grads = pull(cot)
    wg = torch_grads(ref, st, x, t, lens, constraint, cot)
    assert set(grads) == set(wg)
    for name, g in wg.items():
        rel_close(grads[name], g, GREL64, f"gradient of {name} {what}")
    return grads


def check_finite_differences(fd_check, build, names, data_seed, cot_seed):
    """Gradients of the inputs and of the parameters `names` of build() (a fresh
    model each call) against central differences, "hull" on ragged rows."""
    B, n, lengths = 3, 4, [4, 2, 3]
    constraint = "hull"
    base = build()
    x, nl, t = draw(B, n, lengths, constraint, seed=data_seed)

    def fn(inputs, **params):
        m = build()
        m.load_state_dict({**m.state_dict(), **{k.replace("__", "."): v for k, v in params.items()}})
        out = m(inputs, t, lengths=nl, constraint=constraint)
        return np.where(np.isfinite(out), out, 0)

    logp, pull = attnc.vjp(base, x, t, lengths=nl, constraint=constraint)
    cot = cotangent(logp, seed=cot_seed)
    grads = pull(cot)
    kwargs = {"inputs": x, **{k.replace(".", "__"): base.state_dict()[k].copy() for k in names}}
    grads = {"inputs": grads["inputs"], **{k.replace(".", "__"): grads[k] for k in names}}
    fd_check(fn, kwargs, [cot], grads, eps=1e-6, rtol=1e-6, atol=1e-8)


def test_finite_differences(ref, fd_check):
    check_finite_differences(
        fd_check, lambda: make(ref, seed=5), ["v.weight", "start", "end", "W2.weight", "decoder.bias_hh_l0"], 13, 3
    )


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_embedding_matches_torch(ref, constraint):
    """embedding_size=E: every input vector (start and end too) goes through a linear map first."""
    E = 3
    st = ref.random_state(D, H, seed=12, scale=2.0, embedding_size=E)
    m = attnc.models.PointerNet(D, H, embedding_size=E, dtype=np.float64, seed=0)
    assert set(m.state_dict()) == set(st)
    m.load_state_dict(st)
    tm = ref.TorchPointerNet.from_state(st)
    x, nl, t = draw(6, 7, [7, 3, 1, 5, 7, 2], constraint, seed=14, extra=1)
    check_against_torch(ref, st, attnc.vjp, m, x, t, nl, constraint, "with an embedding")
    n = x.shape[1]
    for K in (1, 3):
        out = m.generate(x, lengths=nl, constraint=constraint, beam_size=K)
        dec = tm.greedy(x, nl, constraint) if K == 1 else tm.beam_search(x, nl, constraint, beam_size=K)
        np.testing.assert_array_equal(as_reference(out.indices, nl, n, constraint), dec.indices)
        close(out.log_probs.sum(1), dec.score, 1e-10, f"beam {K} log-probability with an embedding")


# --------------------------------------------------------------------------- bidirectional encoder
def bi_state(ref, seed, dtype=np.float64, embedding_size=None):
    return ref.random_state(D, H, seed=seed, dtype=dtype, scale=2.0, embedding_size=embedding_size, bidirectional=True)


def bi_make(ref, seed, dtype=np.float64, embedding_size=None):
    m = attnc.models.PointerNet(D, H, embedding_size=embedding_size, bidirectional=True, dtype=dtype, seed=0)
    m.load_state_dict(bi_state(ref, seed, dtype, embedding_size))
    return m


@pytest.mark.parametrize("E", [None, 3])
@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_bidirectional_matches_torch(ref, constraint, E, assert_unchanged):
    """bidirectional=True: keys from both directions of the encoder (each row's reverse
    direction from its own last input), the decoder from the forward direction's final state."""
    st = bi_state(ref, 15, embedding_size=E)
    m = bi_make(ref, 15, embedding_size=E)
    assert set(m.state_dict()) == set(st) == set(ref.state_shapes(D, H, E, bidirectional=True))
    assert m.state_dict()["W1.weight"].shape == (H, 2 * H)
    tm = ref.TorchPointerNet.from_state(st)
    assert tm.bidirectional
    for shape in SHAPES:
        B, n, lengths, extra = shape
        x, nl, t = draw(B, n, lengths, constraint, seed=5 * n + B, extra=extra)
        lens = None if lengths is None else nl
        vjp = lambda *a, **k: assert_unchanged(attnc.vjp, *a, **k)  # noqa: E731
        grads = check_against_torch(ref, st, vjp, m, x, t, lens, constraint, f"bidirectional {shape}")
        for b in range(B):
            assert (grads["inputs"][b, nl[b] :] == 0).all()
    # loss_and_grad against torch's loss
    x, nl, t = draw(6, 7, [7, 3, 1, 5, 7, 2], constraint, seed=16, extra=1)
    loss, grads = m.loss_and_grad(SimpleNamespace(inputs=x, lengths=nl, targets=t), constraint=constraint)
    tm.zero_grad()
    tl = tm.loss(x, t, nl, constraint)
    tl.backward()
    assert abs(loss - float(tl.detach())) <= REL64 * max(1.0, abs(float(tl.detach())))
    for name, p in tm.named_parameters():
        rel_close(grads[name], p.grad.numpy(), GREL64, f"bidirectional loss gradient of {name}")
    # greedy and beam decoding against torch's loops
    x, nl = decode_case(4)
    n = x.shape[1]
    for K, alpha in ((1, 0.0), (3, 0.0), (4, 0.6)):
        out = assert_unchanged(m.generate, x, lengths=nl, constraint=constraint, beam_size=K, length_penalty=alpha)
        dec = (
            tm.greedy(x, nl, constraint)
            if K == 1
            else tm.beam_search(x, nl, constraint, beam_size=K, length_penalty=alpha)
        )
        np.testing.assert_array_equal(as_reference(out.indices, nl, n, constraint), dec.indices)
        close(out.log_probs.sum(1), dec.score, 1e-10, f"bidirectional beam {K} log-probability")
        total, _ = totals(m, x, nl, out.indices, constraint)
        close(out.log_probs.sum(1), total, 1e-12, "bidirectional log_probs vs the forward")


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_bidirectional_float32(ref, constraint):
    st32 = bi_state(ref, 17, np.float32, embedding_size=4)
    m = bi_make(ref, 17, np.float32, embedding_size=4)
    x, nl, t = draw(5, 6, [6, 2, 4, 1, 5], constraint, seed=8, dtype=np.float32)
    check_float32_against_torch(ref, st32, m, x, t, nl, constraint, "bidirectional float32")
    out = m.generate(x, lengths=nl, constraint=constraint, beam_size=2)
    assert out.log_probs.dtype == out.pointers.dtype == np.float32
    assert np.isfinite(out.pointers).all() and (out.log_probs <= 0).all()


def test_bidirectional_finite_differences(ref, fd_check):
    check_finite_differences(
        fd_check,
        lambda: bi_make(ref, 18),
        [
            "W1.weight",
            "encoder.weight_hh_l0_reverse",
            "encoder.bias_ih_l0_reverse",
            "encoder.weight_ih_l0",
            "end",
            "decoder.weight_hh_l0",
        ],
        19,
        4,
    )


def test_bidirectional_state_dict_save_load(ref, tmp_path):
    m = bi_make(ref, 20, embedding_size=3)
    x, nl, t = draw(3, 5, [5, 2, 4], "hull", seed=2)
    want = m(x, t, lengths=nl, constraint="hull")
    sd = m.state_dict()
    for k, s in ref.state_shapes(D, H, 3, bidirectional=True).items():
        assert sd[k].shape == s and sd[k].dtype == np.float64, k
    m2 = attnc.models.PointerNet(D, H, embedding_size=3, bidirectional=True, dtype=np.float64, seed=99)
    m2.load_state_dict(sd)
    same_bits(m2(x, t, lengths=nl, constraint="hull"), want, "load_state_dict")
    with pytest.raises(KeyError, match="unexpected keys.*_reverse"):  # a unidirectional model has no reverse weights
        attnc.models.PointerNet(D, H, embedding_size=3, dtype=np.float64).load_state_dict(sd)
    attnc.save(tmp_path / "bi.npz", m)
    m3 = attnc.load(tmp_path / "bi.npz")
    assert m3.bidirectional and "bidirectional=True" in repr(m3)
    same_bits(m3(x, t, lengths=nl, constraint="hull"), want, "attnc.load")
    for K in (1, 3):
        a, b = (
            m.generate(x, lengths=nl, constraint="hull", beam_size=K),
            m3.generate(x, lengths=nl, constraint="hull", beam_size=K),
        )
        for f, u, v in zip(a._fields, a, b):
            same_bits(u, v, f)
    # the default stays unidirectional, with the same initialisation as before the option
    d = attnc.models.PointerNet(D, H, seed=3)
    assert not d.bidirectional and set(d.state_dict()) == set(ref.state_shapes(D, H))
    same_bits(
        d.state_dict()["W1.weight"],
        attnc.models.PointerNet(D, H, bidirectional=False, seed=3).state_dict()["W1.weight"],
        "W1",
    )


# --------------------------------------------------------------------------- decoding
def decode_case(seed=0, constraint="permutation"):
    """A batch with ragged lengths (and full-length rows) for decoding."""
    B, n = 7, 6
    lengths = [6, 3, 1, 5, 6, 2, 4]
    return draw(B, n, lengths, constraint, seed=seed)[:2]


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_greedy_matches_torch_and_pointer_argmax(ref, constraint, assert_unchanged):
    m = make(ref, seed=6)
    x, nl = decode_case(1)
    out = assert_unchanged(m.generate, x, lengths=nl, constraint=constraint)
    want = ref.TorchPointerNet.from_state(state(ref, seed=6)).greedy(x, nl, constraint)
    n = x.shape[1]
    np.testing.assert_array_equal(as_reference(out.indices, nl, n, constraint), want.indices)
    total, counts = totals(m, x, nl, out.indices, constraint)
    np.testing.assert_array_equal(counts, want.count)
    close(total, want.score, 1e-10, "greedy sequence log-probability")
    # every choice is the argmax of its step's pointer distribution (the end token: column n, index -1)
    for b in range(len(x)):
        steps = counts[b] + (constraint == "hull")
        for i in range(steps):
            j = int(np.argmax(out.pointers[b, i]))
            assert (j if j < n else -1) == out.indices[b, i], (b, i)


@pytest.mark.parametrize(
    "constraint,alpha", [("permutation", 0.0), ("tour", 0.0), ("hull", 0.0), ("hull", 0.8), ("hull", -0.5)]
)
def test_beam_matches_torch_beam(ref, constraint, alpha, assert_unchanged):
    m = make(ref, seed=7)
    x, nl = decode_case(2)
    out = assert_unchanged(m.generate, x, lengths=nl, constraint=constraint, beam_size=3, length_penalty=alpha)
    tm = ref.TorchPointerNet.from_state(state(ref, seed=7))
    want = tm.beam_search(x, nl, constraint, beam_size=3, length_penalty=alpha)
    n = x.shape[1]
    np.testing.assert_array_equal(as_reference(out.indices, nl, n, constraint), want.indices)
    close(out.log_probs.sum(1), want.score, 1e-10, "beam sequence log-probability")
    # beam search never does worse than greedy on the beam's own score
    g = tm.greedy(x, nl, constraint)
    assert (want.normalized >= g.score / (g.count + 1.0) ** alpha - 1e-12).all()


# (constraint, n, length penalty, weight seed): weights for which greedy decoding misses the best sequence of
# some row (and a beam of 2 often too), so the case tells a full search from a narrow one
EXHAUSTIVE = [
    ("permutation", 4, 0.0, 23),
    ("permutation", 5, 0.0, 42),
    ("hull", 4, 0.0, 23),
    ("hull", 5, 0.0, 46),
    ("hull", 4, 0.7, 36),
    ("hull", 5, 1.0, 10),
]


@pytest.mark.parametrize("constraint,n,alpha,seed", EXHAUSTIVE)
def test_full_width_beam_is_exhaustive(ref, constraint, n, alpha, seed):
    m = make(ref, seed=seed)
    B = 4
    x, nl = draw(B, n, [n, n - 1, n, n], constraint, seed=n)[:2]
    K = len(ref.candidates(n, constraint))  # every complete candidate: beam search is exhaustive
    out = m.generate(x, lengths=nl, constraint=constraint, beam_size=K, length_penalty=alpha)
    tm = ref.TorchPointerNet.from_state(state(ref, seed=seed))
    best = ref.exhaustive(tm, x, nl, constraint, length_penalty=alpha)
    assert (tm.greedy(x, nl, constraint).indices != best.indices).any()  # the case is not easy
    np.testing.assert_array_equal(as_reference(out.indices, nl, n, constraint), best.indices)
    close(out.log_probs.sum(1), best.score, 1e-10, "exhaustive best log-probability")
    # and attnc's greedy decoding is not that search
    g = m.generate(x, lengths=nl, constraint=constraint)
    assert (g.log_probs.sum(1) / ((g.indices[:, :n] >= 0).sum(1) + 1.0) ** alpha <= best.normalized + 1e-12).all()


@pytest.mark.parametrize("constraint", CONSTRAINTS)
@pytest.mark.parametrize("K", [1, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_decoded_structure(ref, constraint, K, dtype):
    m = make(ref, seed=9, dtype=dtype)
    x, nl = decode_case(3)
    x = x.astype(dtype)
    B, n, _ = x.shape
    alpha = 0.5 if constraint == "hull" else 0.0
    out = m.generate(x, lengths=nl, constraint=constraint, beam_size=K, length_penalty=alpha)
    idx, lp, ptr = out
    assert idx.dtype == np.int64 and lp.dtype == dtype and ptr.dtype == dtype
    assert idx.shape == lp.shape == ptr.shape[:2] and ptr.shape[2] == n + 1
    for a in (lp, ptr):
        assert not np.isnan(a).any() and np.isfinite(a).all()
    assert (lp <= 0).all() and (ptr >= 0).all()
    for b in range(B):
        row = idx[b]
        if constraint in ("permutation", "tour"):
            assert sorted(row[: nl[b]]) == list(range(nl[b])), row
            live = nl[b]
            if constraint == "tour":  # closed right after the row's last choice
                assert idx.shape[1] == n + 1
                assert row[nl[b]] == row[0] and (row[nl[b] + 1 :] == -1).all(), row
                assert lp[b, nl[b]] == 0 and (ptr[b, nl[b]] == 0).all()
            else:
                assert (row[nl[b] :] == -1).all(), row
        else:
            k = int(np.argmax(row < 0))  # the end step
            assert row[-1] == -1 and k >= 1, row
            chosen = row[:k]
            assert len(set(chosen)) == k and chosen.max() < nl[b], row
            assert (row[k:] == -1).all(), row
            live = k + 1  # the end token is a choice
        sums = ptr[b].astype(np.float64).sum(1)
        tol = 1e-12 if dtype == np.float64 else 1e-5
        assert np.abs(sums[:live] - 1).max() <= tol, sums
        assert (sums[live:] == 0).all() and (lp[b, live:] == 0).all()
        # pointers put no mass on padding inputs
        assert (ptr[b, :, nl[b] : n] == 0).all()
    # log_probs sum to the sequence's total under the forward
    total, _ = totals(m, x, nl, idx, constraint)
    close(lp.astype(np.float64).sum(1), total, 1e-12 if dtype == np.float64 else 1e-5, "log_probs sum")
    # every live step's distribution (the search's own) is the teacher-forced forward's
    fwd = np.exp(teacher_forced(m, x, nl, idx, constraint)[1])
    T = min(ptr.shape[1], fwd.shape[1])
    live = (ptr[:, :T].sum(2) > 0)[:, :, None]
    close(
        np.where(live, ptr[:, :T], 0),
        np.where(live, fwd[:, :T], 0),
        1e-12 if dtype == np.float64 else 1e-5,
        "pointer distributions vs the forward",
    )


@pytest.mark.parametrize("w1_scale", [1.0, 100.0])
def test_float32_decoding_in_and_out_of_the_factored_score(ref, w1_scale):
    """Float32 decoding on AVX-512 takes the additive score's tanh from e^{2q} e^{2k} where
    every |q|, |k| <= 20, the direct tanh elsewhere (W1 scaled by 100: keys far beyond 20):
    either way every step's distribution is the teacher-forced forward's."""
    m = make(ref, seed=9, dtype=np.float32)
    sd = m.state_dict()
    sd["W1.weight"] = (sd["W1.weight"] * w1_scale).astype(np.float32)
    m.load_state_dict(sd)
    x, nl = decode_case(3)
    x = x.astype(np.float32)
    for K in (1, 3):
        idx, lp, ptr = m.generate(x, lengths=nl, constraint="hull", beam_size=K)
        fwd = np.exp(teacher_forced(m, x, nl, idx, "hull")[1])
        T = min(ptr.shape[1], fwd.shape[1])
        live = (ptr[:, :T].sum(2) > 0)[:, :, None]
        close(np.where(live, ptr[:, :T], 0), np.where(live, fwd[:, :T], 0), 1e-5, f"pointers, beam {K}")
        total, _ = totals(m, x, nl, idx, "hull")
        close(lp.astype(np.float64).sum(1), total, 1e-5, f"log_probs sum, beam {K}")


def test_single_input_rows(ref):
    m = make(ref)
    x = np.random.default_rng(0).standard_normal((3, 1, D))
    for c in CONSTRAINTS:
        for K in (1, 2):
            out = m.generate(x, constraint=c, beam_size=K)
            assert (out.indices[:, 0] == 0).all()
            assert np.all(out.log_probs[:, 0] == 0)  # one choice: certain
    out = m.generate(x, constraint="hull")
    np.testing.assert_array_equal(out.indices, np.tile([0, -1], (3, 1)))
    np.testing.assert_array_equal(m.generate(x, constraint="tour").indices, np.zeros((3, 2), np.int64))


# --------------------------------------------------------------------------- threads, saving, errors
def test_thread_count_invariance(ref, restore_threads):
    B, n = 40, 7
    rng = np.random.default_rng(21)
    lengths = rng.integers(1, n + 1, B)
    lengths[0] = n
    m = make(ref, seed=10)
    results = []
    for threads in (1, 2):
        attnc.set_num_threads(threads)
        got = {}
        for c in CONSTRAINTS:
            x, nl, t = draw(B, n, lengths, c, seed=22)
            logp, pull = attnc.vjp(m, x, t, lengths=nl, constraint=c)
            got[c, "logp"] = logp
            for k, v in pull(cotangent(logp)).items():
                got[c, k] = v
            loss, g = m.loss_and_grad(SimpleNamespace(inputs=x, lengths=nl, targets=t), constraint=c)
            got[c, "loss"] = np.float64(loss)
            for k, v in g.items():
                got[c, "loss", k] = v
            for K in (1, 5):
                out = m.generate(x, lengths=nl, constraint=c, beam_size=K, length_penalty=0.3)
                for f, a in zip(out._fields, out):
                    got[c, K, f] = a
        results.append(got)
    assert results[0].keys() == results[1].keys()
    for k in results[0]:
        same_bits(results[0][k], results[1][k], str(k))


def test_state_dict_save_load(ref, tmp_path):
    m = make(ref, seed=11)
    x, nl, t = draw(3, 5, [5, 2, 4], "hull", seed=1)
    want = m(x, t, lengths=nl, constraint="hull")
    sd = m.state_dict()
    assert set(sd) == set(ref.state_shapes(D, H))
    for k, s in ref.state_shapes(D, H).items():
        assert sd[k].shape == s and sd[k].dtype == np.float64, k
    m2 = attnc.models.PointerNet(D, H, dtype=np.float64, seed=99)
    m2.load_state_dict(sd)
    same_bits(m2(x, t, lengths=nl, constraint="hull"), want, "load_state_dict")
    path = tmp_path / "ptr.npz"
    attnc.save(path, m)
    m3 = attnc.load(path)
    assert isinstance(m3, attnc.models.PointerNet) and m3.dtype == np.float64
    assert (m3.input_size, m3.hidden_size) == (D, H)
    same_bits(m3(x, t, lengths=nl, constraint="hull"), want, "attnc.load")
    for K in (1, 3):
        a, b = m.generate(x, lengths=nl, beam_size=K), m3.generate(x, lengths=nl, beam_size=K)
        for f, u, v in zip(a._fields, a, b):
            same_bits(u, v, f)
    # float32 round trip
    m4 = make(ref, seed=11, dtype=np.float32)
    attnc.save(tmp_path / "ptr32.npz", m4)
    m5 = attnc.load(tmp_path / "ptr32.npz")
    assert m5.dtype == np.float32
    x32 = x.astype(np.float32)
    same_bits(m5(x32, t, lengths=nl, constraint="hull"), m4(x32, t, lengths=nl, constraint="hull"), "float32 load")


def test_seeded_construction():
    a = attnc.models.PointerNet(D, H, seed=3)
    b = attnc.models.PointerNet(D, H, seed=3)
    c = attnc.models.PointerNet(D, H, seed=4)
    for k, v in a.state_dict().items():
        same_bits(v, b.state_dict()[k], k)
    assert any(not np.array_equal(v, c.state_dict()[k]) for k, v in a.state_dict().items())


def test_errors(ref):
    m = make(ref)
    x, nl, t = draw(2, 4, [4, 3], "permutation", seed=0)
    with pytest.raises(ValueError, match="constraint"):
        m(x, t, lengths=nl, constraint="cycle")
    with pytest.raises(ValueError, match="constraint"):
        m.generate(x, constraint="Permutation")
    bad = t.copy()
    bad[0, 1] = bad[0, 0]
    with pytest.raises(ValueError, match="repeats"):
        m(x, bad, lengths=nl)
    with pytest.raises(ValueError, match="repeats"):
        m(x, np.array([[1, 1, -1, -1], [0, -1, -1, -1]]), lengths=nl, constraint="hull")
    with pytest.raises(ValueError, match="past"):
        m(x, np.array([[0, 1, 2, 3], [0, 1, 3, -1]]), lengths=nl)  # row 1 has 3 inputs
    with pytest.raises(ValueError, match="past"):
        m(x, np.array([[4, -1, -1, -1], [0, -1, -1, -1]]), constraint="hull")
    with pytest.raises(ValueError, match="needs all"):
        m(x, np.array([[0, 1, 2, -1], [0, 1, 2, -1]]), lengths=nl)  # a permutation of 3 of 4
    with pytest.raises(ValueError, match="needs all"):
        m(x, np.array([[0, 1, 2, 3], [0, 1, -1, -1]]), lengths=nl, constraint="tour")
    with pytest.raises(ValueError, match="empty"):
        m(x, np.array([[0, -1, -1, -1], [-1, -1, -1, -1]]), lengths=nl, constraint="hull")
    with pytest.raises(ValueError, match="padding"):
        m(x, np.array([[0, -1, 1, 2], [0, 1, 2, -1]]), constraint="hull")
    with pytest.raises(ValueError, match="padding"):
        m(x, np.array([[0, 1, 2, -2], [0, 1, 2, -1]]), constraint="hull")
    with pytest.raises(ValueError, match="targets"):
        m(x, t.astype(np.float64), lengths=nl)
    with pytest.raises(ValueError, match="targets"):
        m(x, t[:1], lengths=nl)
    for bad_len, message in (
        ([0, 3], r"lengths\[0\] = 0 is outside \[1, 4\]"),
        ([5, 3], r"lengths\[0\] = 5 is outside \[1, 4\]"),
        ([4], r"lengths has shape \(1,\), expected \(2,\)"),
        ([4.0, 3.0], "lengths must be integers, got dtype float64"),
        ([[4, 3]], r"lengths has shape \(1, 2\), expected \(2,\)"),
    ):
        with pytest.raises(ValueError, match=message):  # the same message both ways, not the encoder's n + 1
            m(x, t, lengths=np.array(bad_len))
        with pytest.raises(ValueError, match=message):
            m.generate(x, lengths=np.array(bad_len))
    with pytest.raises(ValueError, match="inputs"):
        m(np.zeros((2, 4, D + 1)), t, lengths=nl)
    with pytest.raises(ValueError, match="inputs"):
        m.generate(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="inputs"):
        m.generate(np.zeros((2, 0, D)))
    with pytest.raises(TypeError, match="dtype"):
        m(x.astype(np.float32), t, lengths=nl)
    with pytest.raises(TypeError, match="dtype"):
        m.generate(x.astype(np.int64))
    for K in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="beam_size"):
            m.generate(x, beam_size=K)
    for alpha in (float("nan"), float("inf"), "0.5"):
        with pytest.raises(ValueError, match="length_penalty"):
            m.generate(x, beam_size=2, length_penalty=alpha)
    with pytest.raises(ValueError, match="cotangent"):
        attnc.vjp(m, x, t, lengths=nl)[1](None)
