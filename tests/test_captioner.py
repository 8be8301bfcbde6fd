"""attnc.models.Captioner (show, attend and tell) against a torch re-implementation
(tests/reference/captioner_ref.py) loaded with the same state dict: logits, attention
weights, the loss with its doubly stochastic penalty and every gradient (gate on and
off, soft and hard attention with fixed locations, the REINFORCE and entropy terms of
Xu et al.'s eq. 12); central finite differences in float64; greedy and beam decoding in
C against a decoder built on the teacher-forced forward (weights 0 after a row's end);
thread-count independence; seeding; argument errors; the plot; the experiment's --quick
run."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import attnc
from attnc.datasets import captions
from attnc.models import Captioner
from attnc.models.captioner import PARAM_NAMES
from helpers import close, same_bits
from reference import decoding
from reference.captioner_ref import TorchCaptioner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = [np.float32, np.float64]
REL = {np.float32: 1e-5, np.float64: 1e-10}
F, V = 13, 17  # the captions task's descriptor features and vocabulary


def small_model(dtype=np.float64, gate=True, attention="soft", seed=0, scale=0.8, **kw):
    """A small captioner with parameters U(-scale, scale), wider than the default
    initialisation, so the nonlinearities are reached."""
    m = Captioner(
        F,
        V,
        kw.pop("embed_size", 8),
        kw.pop("hidden_size", 12),
        kw.pop("attention_size", 7),
        gate=gate,
        attention=attention,
        dtype=dtype,
        seed=seed,
        **kw,
    )
    rng = np.random.default_rng(seed + 100)
    m.load_state_dict({k: rng.uniform(-scale, scale, v.shape) for k, v in m.state_dict().items()})
    return m


def task_batch(n=6, seed=1, dtype=np.float64):
    return captions(n, seed=seed, dtype=dtype).batch(np.arange(n))


def assert_grads(got, want, rel, names=None):
    for name in names or want:
        close(got[name], want[name], rel, name)


# --------------------------------------------------------------------------- against torch


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("gate", [True, False], ids=["gate", "nogate"])
@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_forward_and_vjp_match_torch(torch, dtype, gate, attention):
    m = small_model(dtype, gate, attention)
    b = task_batch(dtype=dtype)
    rng = np.random.default_rng(3)
    samples = rng.integers(0, 9, b.tgt_in.shape) if attention == "hard" else None
    ref = TorchCaptioner(torch, m.state_dict(), gate=gate, dtype=dtype)
    feats = torch.tensor(b.features, requires_grad=True)
    t_logits, t_alphas = ref.forward(feats, b.tgt_in, samples)
    (logits, alphas), pullback = attnc.vjp(m, b.features, b.tgt_in, return_alphas=True, samples=samples)
    assert logits.dtype == dtype and alphas.dtype == dtype
    close(logits, t_logits.detach().numpy(), REL[dtype], "logits")
    close(alphas, t_alphas.detach().numpy(), REL[dtype], "alphas")
    cl = rng.standard_normal(logits.shape).astype(dtype)
    ca = rng.standard_normal(alphas.shape).astype(dtype)
    grads = pullback(cl, ca)
    assert set(grads) == set(m.state_dict()) | {"features"}
    value = (t_logits * torch.tensor(cl)).sum() + (t_alphas * torch.tensor(ca)).sum()
    want = ref.grads(value, feats)
    for name, g in grads.items():
        assert g.dtype == dtype and g.shape == want[name].shape, name
    assert_grads(grads, want, REL[dtype])
    # the pullback with only the logits' cotangent, and repeated calls
    again = pullback(cl, None)
    want2 = ref.grads((t_logits * torch.tensor(cl)).sum(), feats)
    assert_grads(again, want2, REL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("gate", [True, False], ids=["gate", "nogate"])
@pytest.mark.parametrize("lam", [0.0, 1.0, 2.5])
def test_soft_loss_and_grad_match_torch(torch, dtype, gate, lam):
    m = small_model(dtype, gate, doubly_stochastic=lam)
    b = task_batch(dtype=dtype)
    ref = TorchCaptioner(torch, m.state_dict(), gate=gate, dtype=dtype)
    loss, grads = m.loss_and_grad(b)
    t_loss, _ = ref.objective(b.features, b.tgt_in, b.tgt_out, lam)
    assert abs(loss - float(t_loss.detach())) <= REL[dtype] * max(1.0, abs(float(t_loss.detach())))
    assert set(grads) == set(m.state_dict())
    assert_grads(grads, ref.grads(t_loss), REL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("gate", [True, False], ids=["gate", "nogate"])
def test_hard_estimator_matches_torch(torch, dtype, gate):
    """Training mode with the locations fixed: the gradient of log p(y|s) (through the
    cross-entropy), the REINFORCE term λ_r (log p(y|s) − b) ∇log p(s), the entropy
    term and the penalty, against torch autograd of the surrogate objective."""
    m = small_model(dtype, gate, "hard", doubly_stochastic=0.7, reinforce=1.3, entropy=0.05)
    b = task_batch(dtype=dtype)
    samples = np.random.default_rng(4).integers(0, 9, b.tgt_in.shape)
    samples[1] = -1  # an image that takes the expected context (Xu et al. sec. 4.1)
    samples[2, ::2] = -1
    m.baseline = -7.5
    loss, grads = m.loss_and_grad(b, samples=samples)
    ref = TorchCaptioner(torch, m.state_dict(), gate=gate, dtype=dtype)
    t_loss, surrogate = ref.objective(
        b.features, b.tgt_in, b.tgt_out, 0.7, samples, reinforce=1.3, entropy=0.05, baseline=-7.5
    )
    assert abs(loss - float(t_loss.detach())) <= REL[dtype] * max(1.0, abs(float(t_loss.detach())))
    assert_grads(grads, ref.grads(surrogate), REL[dtype])
    # the baseline moved: 0.9 b + 0.1 mean log p(y|s)
    logits = m.forward(b.features, b.tgt_in, samples=samples).astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    real = b.tgt_out != -100
    logp_y = (np.take_along_axis(logp, np.where(real, b.tgt_out, 0)[..., None], -1)[..., 0] * real).sum(1)
    rows = ((samples >= 0) & real).any(axis=1)  # rows that sampled somewhere
    assert m.baseline == pytest.approx(0.9 * -7.5 + 0.1 * logp_y[rows].mean(), rel=1e-6)


def test_hard_eval_mode_uses_argmax_and_no_estimator(torch):
    m = small_model(np.float64, True, "hard").eval()
    b = task_batch()
    _, alphas, s = m(b.features, b.tgt_in, return_alphas=True, return_samples=True)
    np.testing.assert_array_equal(s, alphas.argmax(-1))
    _, grads = m.loss_and_grad(b)
    ref = TorchCaptioner(torch, m.state_dict(), dtype=np.float64)
    t_loss, _ = ref.objective(b.features, b.tgt_in, b.tgt_out, 1.0, s)
    assert_grads(grads, ref.grads(t_loss), 1e-10)
    assert m.baseline is None  # only training moves it


# --------------------------------------------------------------------------- finite differences


def _numeric(f, x, eps=1e-6):
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        keep = flat[i]
        flat[i] = keep + eps
        hi = f()
        flat[i] = keep - eps
        lo = f()
        flat[i] = keep
        gflat[i] = (hi - lo) / (2 * eps)
    return g


@pytest.mark.parametrize("attention", ["soft", "hard"])
def test_gradients_match_finite_differences(attention):
    """float64: every parameter's and the features' gradient of
    L = sum(logits * cl) + sum(alphas * ca) (locations fixed in hard mode), and the
    hard estimator's surrogate with its reward held constant."""
    m = small_model(
        np.float64, True, attention, embed_size=3, hidden_size=4, attention_size=3, seed=5, entropy=0.2, reinforce=0.9
    )
    b = task_batch(3, seed=2)
    feats = b.features.copy()
    rng = np.random.default_rng(6)
    samples = rng.integers(-1, 9, b.tgt_in.shape) if attention == "hard" else None  # -1: the expectation
    (logits, alphas), pullback = attnc.vjp(m, feats, b.tgt_in, return_alphas=True, samples=samples)
    cl, ca = rng.standard_normal(logits.shape), rng.standard_normal(alphas.shape)
    grads = pullback(cl, ca)

    def value():
        lg, al = m(feats, b.tgt_in, return_alphas=True, samples=samples)
        return float((lg * cl).sum() + (al * ca).sum())

    for name, p in list(m.named_parameters()) + [("features", feats)]:
        close(grads[name], _numeric(value, p), 1e-7, name)
    if attention == "soft":
        return
    # the eq. 12 surrogate with the reward (log p(y|s) − b) held at its value
    m.baseline = -3.0
    real = b.tgt_out != -100
    n = real.sum()
    lg0 = m(feats, b.tgt_in, samples=samples)
    reward = Captioner._row_log_likelihood(lg0, b.tgt_out, real) - m.baseline
    _, grads = m.loss_and_grad(SimpleNamespace(features=feats, tgt_in=b.tgt_in, tgt_out=b.tgt_out), samples=samples)

    def surrogate():
        lg, al = m(feats, b.tgt_in, return_alphas=True, samples=samples)
        x = lg - lg.max(-1, keepdims=True)
        logp = x - np.log(np.exp(x).sum(-1, keepdims=True))
        ce = -(np.take_along_axis(logp, np.where(real, b.tgt_out, 0)[..., None], -1)[..., 0] * real).sum() / n
        cover = 1 - (al * real[..., None]).sum(1)
        logp_s = (
            np.log(np.take_along_axis(al, np.maximum(samples, 0)[..., None], -1)[..., 0]) * (real & (samples >= 0))
        ).sum(1)
        H = -(al * np.log(al)).sum(-1)
        return float(ce + (cover**2).sum() / len(al) - 0.9 / n * (reward * logp_s).sum() - 0.2 / n * (H * real).sum())

    for name, p in m.named_parameters():
        close(grads[name], _numeric(surrogate, p), 1e-7, name)


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("attention", ["soft", "hard"])
@pytest.mark.parametrize("eos", [None, 2, 5])
def test_generate_matches_reference_decoder(dtype, attention, eos):
    m = small_model(dtype, True, attention, scale=1.5, seed=7)
    feats = captions(16, seed=3, dtype=dtype).features
    tokens, alphas = m.generate(feats, 9, bos=1, eos=eos)
    want_tokens, want_alphas = decoding.captioner(m, feats, 9, bos=1, eos=eos)
    assert tokens.dtype == np.int64 and alphas.dtype == dtype
    np.testing.assert_array_equal(tokens, want_tokens)
    close(alphas, want_alphas, REL[dtype] / 10, "alphas")
    assert alphas.shape == tokens.shape + (9,)
    if eos is None:
        assert tokens.shape == (16, 9)
    assert m.training  # generate and the reference restore the mode


def test_generate_stops_at_eos_and_matches_torch_greedy(torch):
    m = small_model(np.float64, True, "soft", scale=1.5, seed=8)
    feats = captions(20, seed=4, dtype=np.float64).features
    tokens, alphas = m.generate(feats, 12, bos=1, eos=3)
    ended = (tokens == 3).any(axis=1)
    assert ended.any(), "pick a model whose captions end"
    for row in tokens[ended]:  # eos repeats after the first one
        first = int(np.argmax(row == 3))
        assert (row[first:] == 3).all()
    if ended.all():
        assert (tokens[:, -1] == 3).all()
    # torch, greedily, one full forward per step; weights 0 after a row's eos
    ref = TorchCaptioner(torch, m.state_dict(), dtype=np.float64)
    seqs = np.ones((20, 1), np.int64)
    for t in range(tokens.shape[1]):
        lg, al = ref.forward(feats, seqs)
        done = (seqs[:, 1:] == 3).any(axis=1)
        nxt = np.where(done, 3, lg[:, -1].detach().numpy().argmax(-1))
        want = np.where(done[:, None], 0, al[:, -1].detach().numpy())
        close(alphas[:, t], want, 1e-12, f"alphas at step {t}")
        seqs = np.concatenate([seqs, nxt[:, None]], axis=1)
    np.testing.assert_array_equal(tokens, seqs[:, 1:])
    np.testing.assert_allclose(alphas[~ended].sum(-1), 1, atol=1e-12)  # rows that never end


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("attention", ["soft", "hard"])
@pytest.mark.parametrize("eos,length_penalty", [(None, 0.0), (2, 0.0), (5, 0.7), (2, -0.5)])
@pytest.mark.parametrize("beam_size", [2, 4])
def test_beam_search_matches_reference_decoder(dtype, attention, eos, length_penalty, beam_size):
    m = small_model(dtype, True, attention, scale=1.5, seed=11)
    feats = captions(12, seed=5, dtype=dtype).features
    tokens, alphas = m.generate(feats, 6, bos=1, eos=eos, beam_size=beam_size, length_penalty=length_penalty)
    want_tokens, want_alphas = decoding.captioner(
        m, feats, 6, bos=1, eos=eos, beam_size=beam_size, length_penalty=length_penalty
    )
    np.testing.assert_array_equal(tokens, want_tokens)
    close(alphas, want_alphas, REL[dtype], "alphas")


def test_beam_search_is_exhaustive_with_a_full_beam():
    """max_len 2 and a beam as wide as the vocabulary: the answer is the best of
    every sequence, scored sum(log p) / length ** length_penalty from the
    teacher-forced forward."""
    m = small_model(np.float64, True, "soft", scale=1.5, seed=12)
    feats = captions(5, seed=6, dtype=np.float64).features
    eos, alpha = 2, 0.6
    tokens, _ = m.generate(feats, 2, bos=1, eos=eos, beam_size=V, length_penalty=alpha)

    def logp(prefix_tokens):
        tgt = np.concatenate([np.ones((5, 1), np.int64), prefix_tokens], axis=1)
        lg = m.eval()(feats, tgt).astype(np.float64)[:, -1]
        return lg - lg.max(-1, keepdims=True) - np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1, keepdims=True))

    first = logp(np.zeros((5, 0), np.int64))
    for b in range(5):
        best, arg = first[b, eos], (eos,)
        for t1 in range(V):
            if t1 == eos:
                continue
            second = logp(np.full((5, 1), t1))[b]
            for t2 in range(V):
                score = (first[b, t1] + second[t2]) / 2**alpha
                if score > best:
                    best, arg = score, (t1, t2)
        got = tuple(int(x) for x in tokens[b][: 1 if tokens[b, 0] == eos else 2])
        assert got == arg, (b, got, arg)
    m.train()


def test_empty_batches_and_captions():
    m = small_model(np.float32)
    f = captions(3, seed=0).features
    for feats, tgt in ((f, np.zeros((3, 0), np.int64)), (f[:0], np.zeros((0, 4), np.int64))):
        (logits, alphas), pullback = attnc.vjp(m, feats, tgt, return_alphas=True)
        assert logits.shape == tgt.shape + (V,) and alphas.shape == tgt.shape + (9,)
        grads = pullback(logits, alphas)
        assert grads["features"].shape == feats.shape
        for name, g in grads.items():
            assert np.isfinite(g).all(), name
            if name != "features" and feats.shape[0] == 0:
                assert not g.any(), name


def test_generate_edge_cases():
    m = small_model()
    feats = captions(3, seed=0, dtype=np.float64).features
    tokens, alphas = m.generate(feats, 0, bos=1)
    assert tokens.shape == (3, 0) and alphas.shape == (3, 0, 9)
    tokens, alphas = m.generate(feats[:0], 5, bos=1, eos=2)
    assert tokens.shape[0] == 0


# --------------------------------------------------------------------------- threads and seeds


def test_thread_count_independence(restore_threads):
    m = Captioner(F, V, 32, 96, 48, seed=0, dtype=np.float32)
    hard = Captioner(F, V, 32, 96, 48, attention="hard", seed=0, dtype=np.float32)
    b = captions(150, seed=5).batch(np.arange(150))
    results = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        out = {}
        (logits, alphas), pullback = attnc.vjp(m, b.features, b.tgt_in, return_alphas=True)
        out["logits"], out["alphas"] = logits, alphas
        out.update({f"g.{k}": v for k, v in pullback(np.ones_like(logits), np.ones_like(alphas)).items()})
        out["tokens"], out["dec_alphas"] = m.generate(b.features, 9, bos=1, eos=2)
        out["beam"], out["beam_alphas"] = m.generate(b.features[:40], 9, bos=1, eos=2, beam_size=3)
        hard._rng = np.random.default_rng(11)  # the same sampling seed for every thread count
        hard.baseline = None
        loss, grads = hard.loss_and_grad(b)
        out["hard_loss"] = np.array(loss)
        out.update({f"h.{k}": v for k, v in grads.items()})
        results.append(out)
    for other in results[1:]:
        for k in results[0]:
            same_bits(other[k], results[0][k], k)


def test_seeds_reproduce_and_sampling_follows_alpha():
    a, b2, c = Captioner(F, V, seed=3), Captioner(F, V, seed=3), Captioner(F, V, seed=4)
    for k, v in a.state_dict().items():
        same_bits(b2.state_dict()[k], v, k)
    assert any(not np.array_equal(v, c.state_dict()[k]) for k, v in a.state_dict().items())
    h1 = small_model(np.float64, True, "hard", seed=9, scale=1.0, expected_context=0.0)
    h2 = small_model(np.float64, True, "hard", seed=9, scale=1.0, expected_context=0.0)
    batch = captions(4000, seed=6, dtype=np.float64)
    tgt = np.ones((4000, 1), np.int64)
    _, al1, s1 = h1(batch.features, tgt, return_alphas=True, return_samples=True)
    _, _, s2 = h2(batch.features, tgt, return_alphas=True, return_samples=True)
    np.testing.assert_array_equal(s1, s2)  # same model seed, same draws
    _, _, s3 = h1(batch.features, tgt, return_alphas=True, return_samples=True)
    assert not np.array_equal(s1, s3)  # a fresh seed per call
    # Categorical(alpha): the location frequencies match the mean weights
    freq = np.bincount(s1.reshape(-1), minlength=9) / s1.size
    assert np.abs(freq - al1.reshape(-1, 9).mean(0)).max() < 0.03


def test_expected_context_rows():
    """expected_context = p: each image takes the soft context (location -1 at every
    step) with probability p; p = 1 is soft attention exactly."""
    b = captions(2000, seed=7, dtype=np.float64).batch(np.arange(2000))
    half = small_model(np.float64, True, "hard", seed=10, expected_context=0.5)
    _, s = half(b.features, b.tgt_in, return_samples=True)
    expect = (s == -1).all(axis=1)
    assert ((s == -1).any(axis=1) == expect).all()  # whole rows
    assert abs(expect.mean() - 0.5) < 0.04
    assert ((s[~expect] >= 0) & (s[~expect] < 9)).all()
    always = small_model(np.float64, True, "hard", seed=10, expected_context=1.0)
    soft = small_model(np.float64, True, "soft", seed=10)
    same_bits(always(b.features[:8], b.tgt_in[:8]), soft(b.features[:8], b.tgt_in[:8]))


# --------------------------------------------------------------------------- module API


def test_state_dict_names_shapes_and_torch_cell(torch):
    m = Captioner(F, V, 8, 12, 7, seed=0)
    sd = m.state_dict()
    assert set(sd) == set(PARAM_NAMES.values())
    assert sd["decoder.weight_ih"].shape == (48, 8 + F) and sd["attention.score.weight"].shape == (1, 7)
    assert set(Captioner(F, V, 8, 12, 7, gate=False).state_dict()) == set(PARAM_NAMES.values()) - {
        "gate.weight",
        "gate.bias",
    }
    cell = torch.nn.LSTMCell(8 + F, 12)
    cell.load_state_dict({k[len("decoder.") :]: torch.tensor(v) for k, v in sd.items() if k.startswith("decoder.")})
    m2 = Captioner(F, V, 8, 12, 7, seed=1)
    m2.load_state_dict(sd)
    b = task_batch(dtype=np.float32)
    same_bits(m2(b.features, b.tgt_in), m(b.features, b.tgt_in))


def test_save_load_and_training_with_adam(tmp_path):
    m = Captioner(F, V, 16, 32, 16, seed=0)
    task = captions(64, seed=1)
    b = task.batch(np.arange(64))
    opt = attnc.optim.Adam(m, lr=1e-2)
    losses = []
    for _ in range(30):
        loss, grads = m.loss_and_grad(b)
        attnc.optim.clip_grad_norm_(grads, 5.0, m)
        opt.step(grads)
        losses.append(loss)
    assert losses[-1] < 0.6 * losses[0]
    attnc.save(tmp_path / "cap.npz", m)
    back = attnc.load(tmp_path / "cap.npz")
    assert isinstance(back, Captioner) and not back.training
    same_bits(back(b.features, b.tgt_in), m.eval()(b.features, b.tgt_in))


def test_float64_model_and_to():
    m = Captioner(F, V, seed=0, dtype=np.float64)
    b = task_batch(dtype=np.float64)
    assert m(b.features, b.tgt_in).dtype == np.float64
    m.to(np.float32)
    assert m(b.features.astype(np.float32), b.tgt_in).dtype == np.float32


# --------------------------------------------------------------------------- errors


def test_errors_name_the_argument(assert_unchanged):
    m = Captioner(F, V, 8, 12, 7, seed=0)
    b = task_batch(dtype=np.float32)
    f, t = b.features, b.tgt_in
    cases = [
        (lambda: m(f[0], t), ValueError, "features"),
        (lambda: m(f[:, :, :5], t), ValueError, "features"),
        (lambda: m(f[:, :0], t), ValueError, "features"),
        (lambda: m(f.astype(np.float64), t), TypeError, "features"),
        (lambda: m(f.astype(np.int64), t), TypeError, "features"),
        (lambda: m(f, t.astype(np.float32)), TypeError, "tgt_in"),
        (lambda: m(f, t[0]), ValueError, "tgt_in"),
        (lambda: m(f, t[:2]), ValueError, "tgt_in"),
        (lambda: m(f, np.full_like(t, V)), ValueError, "tgt_in"),
        (lambda: m(f, np.full_like(t, -1)), ValueError, "tgt_in"),
        (lambda: m(f, t, samples=np.zeros_like(t)), ValueError, "samples"),
        (lambda: m.generate(f, -1, bos=1), ValueError, "max_len"),
        (lambda: m.generate(f, 5, bos=V), ValueError, "bos"),
        (lambda: m.generate(f, 5, bos=1, eos=-2), ValueError, "eos"),
        (lambda: m.generate(f, 5, bos=1, beam_size=0), ValueError, "beam_size"),
        (lambda: m.generate(f, 5, bos=1, beam_size=0), ValueError, "beam_size"),
        (lambda: m.generate(f, 5, bos=1, beam_size=2, length_penalty=float("nan")), ValueError, "length_penalty"),
        (lambda: m.loss_and_grad(SimpleNamespace(features=f, tgt_in=t, tgt_out=t[:, :2])), ValueError, "tgt_out"),
        (lambda: m.loss_and_grad(SimpleNamespace(features=f, tgt_in=t, tgt_out=t + V)), ValueError, "tgt_out"),
        (lambda: Captioner(F, V, hidden_size=0), ValueError, "hidden_size"),
        (lambda: Captioner(F, V, attention="local"), ValueError, "attention"),
        (lambda: Captioner(F, V, doubly_stochastic=-1), ValueError, "doubly_stochastic"),
        (lambda: Captioner(F, V, expected_context=1.5), ValueError, "expected_context"),
    ]
    for call, exc, word in cases:
        with pytest.raises(exc, match=word):
            call()
    h = Captioner(F, V, 8, 12, 7, attention="hard", seed=0)
    for bad, word in (
        (np.full_like(t, 9), "samples"),
        (np.full_like(t, -2), "samples"),
        (np.zeros((2, 2), np.int64), "samples"),
        (np.zeros(t.shape, np.float32), "samples"),
    ):
        with pytest.raises((ValueError, TypeError), match=word):
            h(f, t, samples=bad)
    # inputs are never modified, whatever the call
    assert_unchanged(m.loss_and_grad, b)
    samples = np.zeros_like(t)
    assert_unchanged(
        lambda ff, tt, ss: h.train().loss_and_grad(
            SimpleNamespace(features=ff, tgt_in=tt, tgt_out=b.tgt_out), samples=ss
        ),
        f,
        t,
        samples,
    )
    assert_unchanged(m.generate, f, 9, 1, 2)


def test_nan_features_do_not_crash():
    m = Captioner(F, V, 8, 12, 7, seed=0, attention="hard").eval()
    b = task_batch(dtype=np.float32)
    f = b.features.copy()
    f[0] = np.nan
    logits, alphas, s = m(f, b.tgt_in, return_alphas=True, return_samples=True)
    assert np.isnan(logits[0]).all() and np.isfinite(logits[1:]).all() and np.isfinite(alphas[1:]).all()
    assert ((s >= 0) & (s < 9)).all()
    tokens, _ = m.generate(f, 5, bos=1, eos=2)
    assert ((tokens >= 0) & (tokens < V)).all()


# --------------------------------------------------------------------------- plot and experiment


def test_caption_attention_plot():
    import matplotlib

    matplotlib.use("Agg")
    import attnc.plot

    task = captions(2, seed=0)
    m = Captioner(F, V, seed=0)
    tokens, alphas = m.generate(task.features[:1], 5, bos=task.bos)
    words = task.vocab.decode(tokens[0], stop_at_eos=False, skip_special=False).split()
    axes = attnc.plot.caption_attention(task.image(0), words, alphas[0])
    assert axes.size == len(words)
    assert [ax.get_title() for ax in axes.flat] == words
    for ax in axes.flat:
        assert len(ax.images) == 2  # the image and the weights over it
    # alphas as weights per cell, and given axes
    import matplotlib.pyplot as plt

    _, given = plt.subplots(1, 3)
    out = attnc.plot.caption_attention(task.image(1), ["a", "b", "c"], np.full((3, 9), 1 / 9), ax=given)
    assert list(out) == list(given)
    with pytest.raises(ValueError, match="alphas"):
        attnc.plot.caption_attention(task.image(0), ["a"], np.ones((2, 9)) / 9)
    with pytest.raises(ValueError, match="alphas"):
        attnc.plot.caption_attention(task.image(0), ["a"], np.ones((1, 8)) / 8)
    plt.close("all")


def test_experiment_quick_run(tmp_path):  # run folders under tmp_path/runs
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = []
    for attention in ("soft", "hard"):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "attnc.experiments.captions",
                "--quick",
                "--threads",
                "2",
                "--attention",
                attention,
                "--seed",
                "1",
            ],
            cwd=str(tmp_path),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "it/s" in proc.stderr or "s/it" in proc.stderr  # tqdm on stderr
        metrics = json.loads(proc.stdout.strip().splitlines()[-1])
        assert metrics["attention"] == attention and metrics["quick"] is True and metrics["seed"] == 1
        assert 0 <= metrics["exact_match"] <= 1 and metrics["train_seconds"] > 0
        assert metrics["final_loss"] < metrics["first_loss"]
        runs.append(metrics)
    assert sum(r["train_seconds"] for r in runs) < 20
    # the same seed gives the same run on one thread
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnc.experiments.captions",
            "--quick",
            "--threads",
            "1",
            "--attention",
            "hard",
            "--seed",
            "1",
            "--no-progress",
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = json.loads(proc.stdout.strip().splitlines()[-1])
    timing = ("train_seconds", "eval_seconds", "threads")
    assert {k: v for k, v in one.items() if k not in timing} == {k: v for k, v in runs[1].items() if k not in timing}
