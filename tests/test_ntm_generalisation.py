"""attnc.experiments.ntm_generalisation: its quick run (the curves' arrays and
their sanity, the same bits for the same seed on 1 and 2 threads, the
weightings of Figure 6 saved), the LSTM baseline's loss and gradients against
torch, the NTM resized for evaluation, and attnc.datasets.cost_per_sequence
against its definition in probabilities."""

import contextlib
import io
import json

import numpy as np
import pytest

import attnc
import attnc.experiments as E
from attnc.datasets import CopyTask, RepeatCopyTask, cost_per_sequence
from attnc.experiments import _ntm
from attnc.experiments import ntm_generalisation as G

TIMING = ("seconds", "threads")


def quick(tmp_path, name, **config):
    with contextlib.redirect_stdout(io.StringIO()):
        return E.run("ntm_generalisation", quick=True, no_progress=True, run_dir=tmp_path / name, **config)


def untimed(metrics):
    return {k: v for k, v in metrics.items() if not any(t in k for t in TIMING)}


# --------------------------------------------------------------------------- the quick run


def test_quick_run_curves_are_sane_and_reproducible(tmp_path):
    import matplotlib.pyplot as plt

    open_figures = plt.get_fignums()
    first = quick(tmp_path, "a", seed=3, threads=1)
    assert plt.get_fignums() == open_figures  # Figure 6 saved on a Figure of its own, not shown by pyplot
    m = first.metrics
    expect = {"copy": ("lengths", G.FULL["lengths"]), "repeat_copy": ("repeats", G.FULL["repeats"]),
              "recall": ("items", G.FULL["items"])}  # fmt: skip
    # scored output bits: 8 per copied vector; 9 channels on 10 r + 1 steps (the end marker's); one item of 3 x 6
    task_size = {"copy": lambda n: 8 * n, "repeat_copy": lambda r: 9 * (10 * r + 1), "recall": lambda n: 18}
    for task, (axis, xs) in expect.items():
        assert m[axis] == xs
        scored_bits = np.array([task_size[task](x) for x in xs], float)
        for kind in ("ntm", "lstm"):
            cost, wrong = np.array(m[f"{task}_bits_{kind}"]), np.array(m[f"{task}_wrong_bits_{kind}"])
            assert cost.shape == wrong.shape == (len(xs),)
            assert np.all(np.isfinite(cost)) and np.all(cost > 0)
            assert np.all(wrong >= 0) and np.all(wrong <= scored_bits)
            # barely trained: near a coin's 1 bit per scored bit, nowhere near a confident model's extremes
            assert np.all(np.abs(cost / scored_bits - 1) < 0.1), (task, kind, cost / scored_bits)
            assert m[f"{task}_sequences_{kind}"] == G.QUICK[f"{task}_sequences"] * (1 if kind == "ntm" else 2)
            assert np.isfinite(m[f"{task}_final_loss_{kind}"]) and m[f"{task}_train_seconds_{kind}"] > 0
        # about the same size: the LSTM within 10% of the NTM
        assert abs(m[f"{task}_parameters_lstm"] / m[f"{task}_parameters_ntm"] - 1) < 0.1
        assert m[f"paper_{task}"]
    assert m["threads"] == 1 and m["cpu"] and m["train_seconds"] > 0
    assert json.loads((first.run_dir / "result.json").read_text()) == m
    # Figure 6: one length-80 copy, T = 161 steps over the 128 slots; each weighting sums to 1
    with np.load(first.run_dir / "copy_weightings.npz") as f:
        arrays = {k: f[k] for k in f.files}
    assert arrays["write_weights"].shape == arrays["read_weights"].shape == (161, 128)
    assert arrays["inputs"].shape == (161, 9) and arrays["outputs"].shape == arrays["targets"].shape == (161, 8)
    for w in (arrays["write_weights"], arrays["read_weights"]):
        np.testing.assert_allclose(w.sum(axis=1), 1, rtol=1e-5)
        assert w.min() >= 0
    assert (first.run_dir / "copy_weightings.png").stat().st_size > 10_000
    # the same seed: the same bits, on 2 threads
    second = quick(tmp_path, "b", seed=3, threads=2)
    assert second.metrics["threads"] == 2
    assert untimed(second.metrics) == untimed(m)
    with np.load(second.run_dir / "copy_weightings.npz") as f:
        for k, v in arrays.items():
            np.testing.assert_array_equal(f[k], v)
    # another seed: other bits
    other = quick(tmp_path, "c", seed=4, task="copy", model="ntm")
    assert other.metrics["copy_bits_ntm"] != m["copy_bits_ntm"] and "copy_bits_lstm" not in other.metrics
    assert "repeats" not in other.metrics and other.metrics["tasks"] == "copy"
    # the median over seeds, element by element
    summary = G.summarise([m, second.metrics, other.metrics])
    runs = np.array([m["copy_bits_ntm"], second.metrics["copy_bits_ntm"], other.metrics["copy_bits_ntm"]])
    assert summary["lengths"] == m["lengths"]
    np.testing.assert_array_equal(summary["copy_bits_ntm_median"], np.median(runs, axis=0))
    np.testing.assert_array_equal(summary["copy_bits_ntm_max"], runs.max(axis=0))


def test_eval_memory(tmp_path):
    with pytest.raises(ValueError, match="--eval-memory 64 is below the 128"):
        quick(tmp_path, "small", task="copy", model="ntm", eval_memory=64, steps=1)
    res = quick(tmp_path, "big", task="copy", eval_memory=160, steps=2, save=tmp_path / "m.npz")
    assert json.loads((tmp_path / "big" / "config.json").read_text())["settings"]["eval_memory"] == 160
    with np.load(res.run_dir / "copy_weightings.npz") as f:
        assert f["write_weights"].shape == (161, 160)
    # --save: the first model (the copy NTM, with its training memory) and the other beside it
    ntm, lstm = attnc.load(tmp_path / "m.npz"), attnc.load(tmp_path / "m_copy_lstm.npz")
    assert isinstance(ntm, attnc.models.NTM) and ntm.memory_slots == 128 and isinstance(lstm, G.LSTMBaseline)
    for k, v in res.model.state_dict().items():
        np.testing.assert_array_equal(ntm.state_dict()[k], v)
    assert lstm(CopyTask(bits=8).batch(2, length=5, seed=0).inputs).shape == (2, 11, 8)


def test_resized_ntm_starts_where_the_trained_one_does():
    task = CopyTask(bits=8)
    model = attnc.models.NTM(task.input_size, task.output_size, **_ntm.MODEL, seed=1)
    model.weight_init[...] = np.random.default_rng(0).normal(0, 3, model.weight_init.shape)
    bigger = G.resized(model, 200)
    assert bigger.memory_slots == 200 and not bigger.training
    for k, v in model.state_dict().items():
        if k != "weight_init":
            np.testing.assert_array_equal(bigger.state_dict()[k], v)
    w = bigger._initial_state(1)["weights"][0]
    expect = np.exp(model.weight_init - model.weight_init.max(1, keepdims=True))
    expect /= expect.sum(1, keepdims=True)
    np.testing.assert_allclose(w[:, :128], expect, rtol=1e-5)
    assert np.all(w[:, 128:] == 0)
    batch = task.batch(2, length=150, seed=0)  # longer than the trained memory
    assert np.all(np.isfinite(bigger(batch.inputs)))
    assert G.resized(model, 128) is model


# --------------------------------------------------------------------------- the LSTM baseline


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lstm_baseline_loss_and_grad_match_torch(torch, dtype):
    task = RepeatCopyTask(bits=3, max_len=4, max_repeats=3)
    batch = task.batch(3, length=3, repeats=2, seed=1, dtype=dtype)
    model = G.LSTMBaseline(task.input_size, task.output_size, 7, 2, dtype=dtype, seed=0)
    loss, grads = model.loss_and_grad(batch)
    tdt = torch.float64 if dtype == np.float64 else torch.float32
    lstm = torch.nn.LSTM(task.input_size, 7, 2, batch_first=True, dtype=tdt)
    out = torch.nn.Linear(7, task.output_size, dtype=tdt)
    with torch.no_grad():
        for name, p in lstm.named_parameters():
            p.copy_(torch.from_numpy(model.state_dict()[f"rnn.{name}"]))
        out.weight.copy_(torch.from_numpy(model.out.weight))
        out.bias.copy_(torch.from_numpy(model.out.bias))
    logits = out(lstm(torch.from_numpy(batch.inputs))[0])
    mask = torch.from_numpy(batch.mask)
    ref = torch.nn.functional.binary_cross_entropy_with_logits(logits[mask], torch.from_numpy(batch.targets)[mask])
    ref.backward()
    tol = dict(rtol=1e-4, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(loss, ref.item(), **tol)
    np.testing.assert_allclose(model(batch.inputs), logits.detach().numpy(), **tol)
    named = {f"rnn.{k}": p for k, p in lstm.named_parameters()} | {"out.weight": out.weight, "out.bias": out.bias}
    assert sorted(grads) == sorted(named) == sorted(model.state_dict())
    for k, p in named.items():
        assert grads[k].dtype == dtype
        np.testing.assert_allclose(grads[k], p.grad.numpy(), **tol, err_msg=k)


# --------------------------------------------------------------------------- the paper's cost


def test_cost_per_sequence_is_the_cross_entropy_in_bits():
    b = RepeatCopyTask(bits=4).batch(5, length=2, repeats=3, seed=3)
    logits = np.random.default_rng(0).normal(0, 3, b.targets.shape)
    p, t = 1 / (1 + np.exp(-logits)), b.targets
    per_bit = -(t * np.log2(p) + (1 - t) * np.log2(1 - p))
    expect = (per_bit * b.mask[:, :, None]).sum(axis=(1, 2)).mean()
    assert cost_per_sequence(logits, b) == pytest.approx(expect, rel=1e-12)
    assert cost_per_sequence(logits.astype(np.float32), b) == pytest.approx(expect, rel=1e-6)
    # p = 1/2: one bit per scored bit (the end marker counts); confident mistakes stay finite
    assert cost_per_sequence(np.zeros_like(logits), b) == pytest.approx(b.mask.sum(1).mean() * 5, rel=1e-12)
    wrong = -800.0 * (2 * t - 1)  # sigmoid underflows to 0 for the right answer
    assert cost_per_sequence(wrong, b) == pytest.approx(800 / np.log(2) * b.mask.sum(1).mean() * 5)
    with pytest.raises(ValueError, match="logits must have the shape"):
        cost_per_sequence(logits[:, :-1], b)
    with pytest.raises(TypeError, match="batch must be an NTMBatch"):
        cost_per_sequence(logits, (b.inputs, b.targets, b.mask))
