"""attnc.nn.LSTMN (Cheng, Dong & Lapata 2016; whole sequences forward and backward
through time in C) against a NumPy float64 step-by-step loop (tests/reference/lstmn_ref.py)
for the outputs and the intra-attention weights, and against the same equations in torch
autograd (tests/reference/lstmn_torch.py) for every gradient; float64 central finite
differences as a second check; variable lengths (including 0 and 1), float32 against
float64, thread-count bitwise independence, state_dict round trips, bad input, inputs
never modified. Also the KeyValueRecallTask generator and the lstmn_recall experiment's
quick run. Sizes are tiny: the file takes seconds."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import attnc
from attnc.datasets import KeyValueRecallTask
from helpers import close, same_bits
from reference.lstmn_ref import lstmn_ref

I, H, A = 3, 5, 4
REL64 = 1e-10
REL32 = 1e-5


@pytest.fixture
def ref_torch(torch):
    from reference import lstmn_torch

    return lstmn_torch.lstmn_torch


def make(dtype=np.float64, seed=0, bias=True, scale=2.0, **kw):
    """An LSTMN with weights wider than the default init (sharper attention)."""
    m = attnc.nn.LSTMN(I, H, attention_size=A, bias=bias, dtype=dtype, seed=seed, **kw)
    rng = np.random.default_rng(seed + 100)
    m.load_state_dict(
        {k: scale * rng.uniform(-1, 1, v.shape) / np.sqrt(v.shape[-1]) for k, v in m.state_dict().items()}
    )
    return m


def data(B=4, T=6, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal((B, T, I)).astype(dtype)


LENGTHS = [None, np.array([6, 3, 1, 0]), np.array([2, 6, 5, 4])]


def lid(x):
    return "full" if x is None else "-".join(map(str, x))


# ------------------------------------------------------------------------------- forward


@pytest.mark.parametrize("lengths", LENGTHS, ids=lid)
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_numpy_reference(lengths, bias):
    m, x = make(bias=bias), data()
    out, attn = m(x, lengths=lengths, return_attention=True)
    ro, ra = lstmn_ref(x, m.state_dict(), lengths)
    close(out, ro, REL64, "output")
    close(attn, ra, REL64, "attention")
    same_bits(m(x, lengths=lengths), out, "forward without the attention")


def test_attention_rows_are_distributions_over_the_past():
    m, x = make(), data(B=3, T=7)
    lens = np.array([7, 4, 1])
    _, w = m(x, lengths=lens, return_attention=True)
    for b, L in enumerate(lens):
        for t in range(7):
            row = w[b, t]
            assert np.all(row[t:] == 0), "no weight on or after the current step"
            expect = 1.0 if 1 <= t < L else 0.0
            assert abs(row.sum() - expect) < 1e-12, (b, t, row.sum())
    assert np.all(w >= 0)


def test_first_step_is_an_lstm_step_from_zero():
    """The tape is empty at t = 1: h~ = c~ = 0, so h_1 = o tanh(i g) from W_ih x_1 + b alone."""
    m, x = make(), data(B=2, T=1)
    z = x[:, 0] @ m.weight_ih.T + m.bias
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, g, o = sig(z[:, :H]), np.tanh(z[:, 2 * H : 3 * H]), sig(z[:, 3 * H :])
    close(m(x)[:, 0], o * np.tanh(i * g), REL64)


def test_padding_is_not_read():
    m, x = make(), data()
    lens = np.array([6, 3, 1, 0])
    y = x.copy()
    for b, L in enumerate(lens):
        y[b, L:] = np.nan if b % 2 else 1e6
    a = m(x, lengths=lens, return_attention=True)
    b = m(y, lengths=lens, return_attention=True)
    same_bits(a[0], b[0], "output")
    same_bits(a[1], b[1], "attention")
    assert np.all(a[0][1, 3:] == 0) and np.all(a[0][3] == 0)
    (_, pb) = attnc.vjp(m, y, lengths=lens)
    g = pb(np.ones((4, 6, H)))
    assert all(np.isfinite(v).all() for v in g.values())
    assert np.all(g["input"][1, 3:] == 0)


def test_mask_is_lengths():
    m, x = make(), data()
    lens = np.array([6, 3, 1, 0])
    mask = np.arange(6)[None, :] < lens[:, None]
    same_bits(m(x, mask=mask), m(x, lengths=lens))
    (_, pb) = attnc.vjp(m, x, mask=mask)
    (_, pb2) = attnc.vjp(m, x, lengths=lens)
    dy = np.ones((4, 6, H))
    for k, v in pb(dy).items():
        same_bits(v, pb2(dy)[k], k)
    with pytest.raises(ValueError, match="mask must be a prefix"):
        m(x, mask=np.ones((4, 6), bool) & (np.arange(6) != 2))
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        m(x, mask=mask.astype(int))
    with pytest.raises(ValueError, match=r"mask has shape \(4, 5\)"):
        m(x, mask=mask[:, :5])
    with pytest.raises(ValueError, match="lengths or mask, not both"):
        m(x, mask=mask, lengths=lens)


def test_float32_matches_float64():
    m64, x = make(), data()
    m32 = attnc.nn.LSTMN(I, H, attention_size=A, dtype=np.float32)
    m32.load_state_dict(m64.state_dict())
    lens = LENGTHS[1]
    o64, a64 = m64(x, lengths=lens, return_attention=True)
    o32, a32 = m32(x.astype(np.float32), lengths=lens, return_attention=True)
    assert o32.dtype == a32.dtype == np.float32
    close(o32, o64, REL32, "output")
    close(a32, a64, REL32, "attention")


# ------------------------------------------------------------------------------- gradients

NAMES = ["input", "weight_ih", "weight_hh", "bias", "attn_h.weight", "attn_x.weight", "attn_tilde.weight", "attn_v"]


def _torch_grads(ref_torch, torch, m, x, lengths, dy, dtype):
    out, attn, tensors = ref_torch(x, m.state_dict(), lengths, dtype=dtype)
    (out * torch.tensor(dy, dtype=out.dtype)).sum().backward()
    return out.detach().numpy(), attn.detach().numpy(), {k: t.grad.numpy() for k, t in tensors.items()}


@pytest.mark.parametrize("lengths", LENGTHS, ids=lid)
@pytest.mark.parametrize("dtype,rel", [(np.float64, REL64), (np.float32, REL32)], ids=["f64", "f32"])
def test_gradients_match_torch_autograd(ref_torch, torch, lengths, dtype, rel):
    m, x = make(dtype=dtype), data(dtype=dtype)
    dy = np.random.default_rng(5).standard_normal((4, 6, H)).astype(dtype)
    (out, attn), pb = attnc.vjp(m, x, lengths=lengths, return_attention=True)
    g = pb(dy, None)
    assert sorted(g) == sorted(NAMES)
    # the float32 kernels against torch in float64: attnc's own rounding, not torch's
    to, ta, tg = _torch_grads(ref_torch, torch, m, x.astype(np.float64), lengths, dy.astype(np.float64), np.float64)
    close(out, to, rel, "output")
    close(attn, ta, rel, "attention")
    for k in NAMES:
        assert g[k].dtype == dtype and g[k].shape == tg[k].shape, k
        close(g[k], tg[k], rel, k)


def test_gradients_without_bias(ref_torch, torch):
    m, x = make(bias=False), data()
    dy = np.random.default_rng(6).standard_normal((4, 6, H))
    _, pb = attnc.vjp(m, x, lengths=LENGTHS[2])
    g = pb(dy)
    assert "bias" not in g and m.bias is None
    _, _, tg = _torch_grads(ref_torch, torch, m, x, LENGTHS[2], dy, np.float64)
    for k in tg:
        close(g[k], tg[k], REL64, k)


def test_finite_differences():
    m, x = make(seed=3), data(B=2, T=5, seed=3)
    lens = np.array([5, 3])
    dy = np.random.default_rng(7).standard_normal((2, 5, H))
    _, pb = attnc.vjp(m, x, lengths=lens)
    g = pb(dy)

    def loss(mod, inp):
        return float(np.sum(mod(inp, lengths=lens) * dy))

    eps = 1e-6
    rng = np.random.default_rng(0)
    for name in NAMES:
        arr = x if name == "input" else dict(m.named_parameters())[name]
        flat = arr.reshape(-1)
        for j in rng.choice(flat.size, size=min(flat.size, 12), replace=False):
            keep = flat[j]
            flat[j] = keep + eps
            lp = loss(m, x)
            flat[j] = keep - eps
            lm = loss(m, x)
            flat[j] = keep
            num = (lp - lm) / (2 * eps)
            assert abs(num - g[name].reshape(-1)[j]) <= 1e-6 * max(1.0, abs(num)), (name, j, num)


def test_zero_cotangent_and_none():
    m, x = make(), data()
    _, pb = attnc.vjp(m, x)
    g = pb(None)
    assert all(np.all(v == 0) for v in g.values())
    (_, _), pb2 = attnc.vjp(m, x, return_attention=True)
    with pytest.raises(ValueError, match="attention weights are not differentiated"):
        pb2(np.ones((4, 6, H)), np.ones((4, 6, 6)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_thread_count_independence(dtype, restore_threads):
    m = make(dtype=dtype)
    x = data(B=21, T=9, seed=2, dtype=dtype)
    lens = np.random.default_rng(1).integers(0, 10, 21)
    dy = np.random.default_rng(2).standard_normal((21, 9, H)).astype(dtype)
    results = []
    for n in (1, 2, 3, 5):
        attnc.set_num_threads(n)
        (out, attn), pb = attnc.vjp(m, x, lengths=lens, return_attention=True)
        results.append((out, attn, pb(dy, None)))
    for out, attn, g in results[1:]:
        same_bits(out, results[0][0], "output")
        same_bits(attn, results[0][1], "attention")
        for k in NAMES:
            same_bits(g[k], results[0][2][k], k)


def test_inputs_not_modified():
    m, x = make(), data()
    lens = np.array([6, 3, 1, 0])
    x0, l0, p0 = x.copy(), lens.copy(), m.state_dict()
    dy = np.ones((4, 6, H))
    dy0 = dy.copy()
    _, pb = attnc.vjp(m, x, lengths=lens)
    pb(dy)
    same_bits(x, x0)
    same_bits(lens, l0)
    same_bits(dy, dy0)
    for k, v in m.state_dict().items():
        same_bits(v, p0[k], k)


def test_strided_and_empty_inputs():
    m = make()
    x = data(B=4, T=12)[:, ::2]
    close(m(x), m(np.ascontiguousarray(x)), 0)
    assert m(np.zeros((0, 3, I))).shape == (0, 3, H)
    out, w = m(np.zeros((2, 0, I)), return_attention=True)
    assert out.shape == (2, 0, H) and w.shape == (2, 0, 0)
    _, pb = attnc.vjp(m, np.zeros((0, 3, I)))
    g = pb(np.zeros((0, 3, H)))
    assert all(np.all(v == 0) for k, v in g.items() if k != "input")


# ------------------------------------------------------------------------------- module


def test_state_dict_names_shapes_and_round_trip(tmp_path):
    m = attnc.nn.LSTMN(7, 6, attention_size=5, seed=1)
    shapes = {k: v.shape for k, v in m.state_dict().items()}
    assert shapes == {
        "weight_ih": (24, 7),
        "weight_hh": (24, 6),
        "bias": (24,),
        "attn_v": (5,),
        "attn_h.weight": (5, 6),
        "attn_x.weight": (5, 7),
        "attn_tilde.weight": (5, 6),
    }
    assert attnc.nn.LSTMN(7, 6).attention_size == 6
    assert "bias" not in attnc.nn.LSTMN(7, 6, bias=False).state_dict()
    m2 = attnc.nn.LSTMN(7, 6, attention_size=5, seed=2)
    m2.load_state_dict(m.state_dict())
    x = np.random.default_rng(0).standard_normal((2, 4, 7)).astype(np.float32)
    same_bits(m2(x), m(x))
    path = tmp_path / "lstmn.npz"
    attnc.save(path, m)
    same_bits(attnc.load(path)(x), m(x))
    same_bits(attnc.nn.LSTMN(7, 6, seed=3).weight_ih, attnc.nn.LSTMN(7, 6, seed=3).weight_ih)


def test_bad_arguments():
    m = make()
    with pytest.raises(ValueError, match=r"input has shape \(4, 6\), expected \(B, T, 3\)"):
        m(np.zeros((4, 6)))
    with pytest.raises(ValueError, match="expected"):
        m(np.zeros((4, 6, 2)))
    with pytest.raises(TypeError, match="dtype float32 but the call's dtype is float64"):
        m(np.zeros((4, 6, I), np.float32))
    with pytest.raises(TypeError, match="float32 or float64"):
        m(np.zeros((4, 6, I), np.int64))
    with pytest.raises(ValueError, match=r"lengths\[0\] = 7 is outside \[0, 6\]"):
        m(data(), lengths=np.array([7, 1, 1, 1]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(4,\)"):
        m(data(), lengths=np.array([1, 1]))
    with pytest.raises(TypeError, match="lengths must be integers"):
        m(data(), lengths=np.array([1.0, 1, 1, 1]))
    with pytest.raises(ValueError, match="hidden_size"):
        attnc.nn.LSTMN(3, 0)
    with pytest.raises(ValueError, match="attention_size"):
        attnc.nn.LSTMN(3, 4, attention_size=0)
    _, pb = attnc.vjp(m, data())
    with pytest.raises(ValueError, match="cotangent 0 has shape"):
        pb(np.zeros((4, 6, H + 1)))


def test_c_checks_its_arguments():
    """The binding and the C core refuse what the Python layer would have caught."""
    m = make()
    x = data()
    p = m._params()
    out = np.empty((4, 6, H))
    saved = np.empty(attnc._core.lstmn_saved_size(B=4, T=6, H=H, A=A))
    call = dict(output=out, attention=None, saved=saved, input=x, lengths=None, params=p)
    with pytest.raises(ValueError, match="saved"):
        attnc._core.lstmn_forward(**{**call, "saved": saved[:-1]})
    with pytest.raises(ValueError, match="attn_x.weight"):
        attnc._core.lstmn_forward(**{**call, "params": {**p, "attn_x": np.zeros((A, I + 1))}})
    with pytest.raises(ValueError, match=r"lengths\[1\] = 9"):
        attnc._core.lstmn_forward(**{**call, "lengths": np.array([1, 9, 1, 1])})
    with pytest.raises(TypeError, match="params has an unexpected key 'attn_w'"):
        attnc._core.lstmn_forward(**{**call, "params": {**p, "attn_w": p["attn_x"]}})


# ------------------------------------------------------------------------------- task and experiment


def test_recall_task():
    task = KeyValueRecallTask(num_keys=8, num_values=5, min_pairs=2, max_pairs=6)
    b = task.batch(300, seed=4)
    same_bits(b.tokens, task.batch(300, seed=4).tokens)
    B, T, _ = b.tokens.shape
    assert T == b.lengths.max() and b.lengths.min() >= 3 and b.lengths.max() <= 7
    for r in range(B):
        n = b.lengths[r] - 1
        keys, values = b.tokens[r, :n, 0], b.tokens[r, :n, 1]
        assert len(set(keys)) == n and keys.min() >= 1 and keys.max() <= 8 and values.min() >= 1
        q = b.tokens[r, n, 0] - 8
        assert b.tokens[r, n, 1] == 0 and keys[b.key_positions[r]] == q
        assert values[b.key_positions[r]] - 1 == b.targets[r]
        assert np.all(b.tokens[r, n + 1 :] == 0)
    assert task.vocab_sizes == (17, 6) and task.num_classes == 5
    assert len(np.unique(b.key_positions)) == 6 and len(np.unique(b.targets)) == 5
    with pytest.raises(ValueError, match="num_keys"):
        KeyValueRecallTask(num_keys=3, max_pairs=4)
    labels = task.step_labels(b.tokens[0])
    assert len(labels) == b.lengths[0] and labels[-1].endswith("?") and ":" in labels[0]
    k, v = b.tokens[0, b.key_positions[0]] - 1
    assert labels[b.key_positions[0]] == f"k{k}:v{v}" and labels[-1] == f"k{k}?"


def _run_quick(seed=0, *extra):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(attnc.__file__)), os.environ.get("PYTHONPATH", "")]
        ),
    )
    with tempfile.TemporaryDirectory() as cwd:  # its run folder goes under runs/ there
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "attnc.experiments.lstmn_recall",
                "--quick",
                "--threads",
                "1",
                "--seed",
                str(seed),
                "--no-progress",
                *extra,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=cwd,
        )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_experiment_quick_run(tmp_path):
    path = tmp_path / "lstmn.npz"
    a, b = _run_quick(0, "--save", str(path)), _run_quick()
    for k in ("accuracy", "accuracy_lstm", "train_seconds", "attention_on_key", "attention_argmax_on_key"):
        assert k in a, k
    assert 0 <= a["accuracy"] <= 1 and 0 <= a["accuracy_lstm"] <= 1
    timing = {"train_seconds", "eval_seconds", "train_seconds_lstm", "train_seconds_lstm_long"}
    assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
    # the saved LSTMN loads (its class recorded as the importable module's, not __main__'s) and scores the same
    from attnc.experiments import lstmn_recall

    model = attnc.load(path)
    assert isinstance(model, lstmn_recall.RecallClassifier) and model.kind == "lstmn"
    held = KeyValueRecallTask(16, 16, 6, 10).batch(64, seed=lstmn_recall.HELDOUT_SEED)
    assert np.mean(model(held.tokens, held.lengths).argmax(-1) == held.targets) == a["accuracy"]


def test_experiment_attention_for_a_notebook():
    from attnc.experiments import lstmn_recall

    task = KeyValueRecallTask(8, 4, 2, 4)
    model = lstmn_recall.RecallClassifier(task.vocab_sizes, task.num_classes, 8, 8, 4, seed=0)
    held = task.batch(5, seed=0)
    w = model.attention(held.tokens, held.lengths)
    assert w.shape == (5, held.tokens.shape[1], held.tokens.shape[1])
    q, on_key, top = lstmn_recall.attention_at_query(model, held)
    assert q.shape == (5, held.tokens.shape[1]) and 0 <= on_key <= 1 and 0 <= top <= 1
    import matplotlib

    matplotlib.use("Agg")
    L = held.lengths[0]
    labels = task.step_labels(held.tokens[0])
    ax = attnc.plot.alignment(w[0, :L, :L], labels, labels)
    assert len(ax.get_xticklabels()) == L
