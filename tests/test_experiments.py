"""attnc.datasets (the synthetic tasks) and attnc.experiments (each --quick run
as a subprocess: exit status, the JSON line, reproducibility, --save)."""

import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pytest

import attnc
import attnc.models  # attnc.load finds only the module classes imported so far
from attnc.datasets import IGNORE_INDEX, pad_sequences, reverse_task, sort_split, sort_task, special_tokens

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = {"train_seconds", "eval_seconds", "threads"}


# --------------------------------------------------------------------------- the reversal task


def test_reverse_task_batches():
    task = reverse_task(200, vocab=10, min_len=5, max_len=12, seed=3)
    pad, bos, eos = special_tokens(10)
    assert (task.pad, task.bos, task.eos, task.num_tokens) == (pad, bos, eos, 13) == (10, 11, 12, 13)
    assert task.lengths.min() >= 5 and task.lengths.max() <= 12 and len(set(task.lengths.tolist())) == 8
    b = task.batch(np.arange(10, 42))
    S = int(task.lengths[10:42].max())
    assert b.src.shape == (32, S) and b.tgt_in.shape == b.tgt_out.shape == (32, S + 1)
    for row, i in enumerate(range(10, 42)):
        n = task.lengths[i]
        src = task.source(i)
        assert len(src) == n and src.max() < 10
        assert np.array_equal(b.src[row, :n], src) and np.all(b.src[row, n:] == pad)
        assert np.array_equal(b.src_key_padding_mask[row], np.arange(S) >= n)
        assert b.tgt_in[row, 0] == bos and np.array_equal(b.tgt_in[row, 1 : n + 1], src[::-1])
        assert np.all(b.tgt_in[row, n + 1 :] == pad)
        assert np.array_equal(b.tgt_out[row, :n], src[::-1]) and b.tgt_out[row, n] == eos
        assert np.all(b.tgt_out[row, n + 1 :] == IGNORE_INDEX)
        assert np.array_equal(b.tgt_key_padding_mask[row], np.arange(S + 1) > n)
    assert b.num_tokens == int((task.lengths[10:42] + 1).sum())
    targets = task.targets_padded()
    assert targets.shape == (200, 13) and targets[0, task.lengths[0]] == eos
    assert sum(len(x) for x in task.batches(64)) == 200
    assert [len(x) for x in task.batches(64, drop_last=True)] == [64, 64, 64]


def test_reverse_task_reproducible_and_disjoint():
    heldout = reverse_task(1000, seed=1, unique=True)
    again = reverse_task(1000, seed=1, unique=True)
    assert np.array_equal(heldout.sequences, again.sequences) and np.array_equal(heldout.lengths, again.lengths)
    assert len(set(heldout.keys().tolist())) == 1000
    # short lengths over a small vocabulary collide often: the exclusion must hold
    small_heldout = reverse_task(300, vocab=3, min_len=2, max_len=6, seed=4, unique=True)
    train = reverse_task(20000, vocab=3, min_len=2, max_len=6, seed=5, exclude=small_heldout)
    assert len(train) == 20000
    assert not np.isin(train.keys(), small_heldout.keys()).any()
    unfiltered = reverse_task(20000, vocab=3, min_len=2, max_len=6, seed=5)
    assert np.isin(unfiltered.keys(), small_heldout.keys()).any()
    # a smaller set is a prefix of a larger one
    longer = reverse_task(30000, vocab=3, min_len=2, max_len=6, seed=5, exclude=small_heldout)
    assert np.array_equal(longer.sequences[:20000], train.sequences)
    assert np.array_equal(reverse_task(5000, seed=1, unique=True).sequences[:1000], heldout.sequences)
    other = reverse_task(1000, seed=2, unique=True)
    assert not np.array_equal(other.sequences, heldout.sequences)


def test_pad_sequences():
    assert pad_sequences([[1, 2], [3]], 9).tolist() == [[1, 2], [3, 9]]
    assert pad_sequences([[1]], 0, length=3).tolist() == [[1, 0, 0]]
    with pytest.raises(ValueError):
        pad_sequences([[1, 2]], 0, length=1)


# --------------------------------------------------------------------------- the sorting task (minGPT)


def test_sort_task_is_mingpt_format():
    task = sort_task(500, length=6, num_digits=3, seed=0)
    assert task.inputs.shape == task.targets.shape == (500, 11) and task.block_size == 11 and task.vocab_size == 3
    for i in range(500):
        seq = task.sequences[i]
        cat = np.concatenate([seq, np.sort(seq)])
        assert np.array_equal(task.inputs[i], cat[:-1])
        assert np.all(task.targets[i, :5] == IGNORE_INDEX) and np.array_equal(task.targets[i, 5:], cat[6:])
        assert sort_split(seq) == "train"
    assert np.array_equal(task.solutions, np.sort(task.sequences, axis=1))
    # minGPT rejects half of the draws with more than length // 2 distinct digits (never the case
    # for 3 digits): over 10 digits, 6.8% of uniform draws have <= 3 distinct ones, 12.7% after that
    wide = sort_task(20000, length=6, num_digits=10, seed=0)
    few = np.mean([len(set(r)) <= 3 for r in wide.sequences.tolist()])
    assert 0.11 < few < 0.145, few
    x, y = task.batch([3, 4])
    assert np.array_equal(x, task.inputs[3:5]) and np.array_equal(y, task.targets[3:5])


def test_sort_task_splits_are_disjoint_and_reproducible():
    train = sort_task(5000, seed=1, split="train")
    test = sort_task(5000, seed=1, split="test")
    train_set = set(map(tuple, train.sequences.tolist()))
    test_set = set(map(tuple, test.sequences.tolist()))
    assert not train_set & test_set
    # a quarter of the 729 sequences are test sequences (hash mod 4)
    assert 120 < len(test_set) < 250 and len(train_set) > 400
    assert np.array_equal(sort_task(5000, seed=1, split="test").sequences, test.sequences)
    assert np.array_equal(sort_task(9000, seed=1, split="test").sequences[:5000], test.sequences)
    with pytest.raises(ValueError):
        sort_task(1, split="valid")


# --------------------------------------------------------------------------- the experiments


def run_experiment(name, *args):
    """Run it in a fresh working directory (its run folder goes under runs/ there)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run(
            [sys.executable, "-m", f"attnc.experiments.{name}", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert len(os.listdir(os.path.join(cwd, "runs"))) == 1
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output; stderr: {proc.stderr[-2000:]}"
    metrics = json.loads(lines[-1])
    assert isinstance(metrics, dict)
    return metrics, proc.stderr


@pytest.mark.parametrize("name", ["transformer_reverse", "gpt_sort", "dates"])
def test_quick_run_reproducible(name, tmp_path):
    path = tmp_path / "model.npz"
    first, stderr = run_experiment(name, "--quick", "--seed", "3", "--threads", "1", "--save", str(path))
    assert "it/s" in stderr or "s/it" in stderr  # the tqdm bar is on stderr
    for key in ("exact_match", "train_seconds", "steps", "final_loss", "heldout_size"):
        assert key in first, key
    assert 0 <= first["exact_match"] <= 1 and first["train_seconds"] > 0 and first["quick"] is True
    assert first["threads"] == 1 and first["seed"] == 3
    assert np.isfinite(first["final_loss"]) and first["final_loss"] < first["first_loss"]
    # the same seed gives the same metrics, on any number of threads
    second, _ = run_experiment(name, "--quick", "--seed", "3", "--threads", "2")
    assert second["threads"] == 2
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    # the saved model loads and decodes
    model = attnc.load(path)
    assert not model.training
    if name == "gpt_sort":
        assert model.generate(np.zeros((2, 6), np.int64), 6).shape == (2, 6)
    elif name == "dates":
        tokens, align = model.generate(np.full((2, 5), 8, np.int64), max_len=11)
        assert tokens.shape[0] == 2 and tokens.shape[1] <= 11 and align.shape == tokens.shape + (5,)
        assert first["attention"] == "bahdanau"
        assert set(first["accuracy_by_length"]) == {"≤10", "11-15", "16-20", "21-30"}
        assert first["long_inputs"]["size"] == 100 and 0 <= first["long_inputs"]["exact_match"] <= 1
    else:
        out = model.generate(np.zeros((2, 5), np.int64), 6, bos=11, eos=12)
        assert out.shape[0] == 2 and out.shape[1] <= 6


@pytest.mark.parametrize(
    "name,keys",
    [
        ("ntm_copy", ("bits_per_sequence", "bits_per_sequence_40", "bits_per_sequence_80")),
        ("ntm_repeat_copy", ("bits_per_sequence",)),
        ("ntm_recall", ("bits_per_sequence", "bits_per_sequence_6_items")),
    ],
)
def test_ntm_quick_runs(name, keys, tmp_path):
    path = tmp_path / "ntm.npz"
    first, stderr = run_experiment(name, "--quick", "--seed", "5", "--threads", "1", "--save", str(path))
    assert "it/s" in stderr or "s/it" in stderr
    for key in keys + ("train_seconds", "sequences_seen", "final_loss"):
        assert key in first, key
    assert all(first[k] >= 0 for k in keys) and first["finite"] is True
    assert first["sequences_seen"] == first["steps"] and first["train_seconds"] > 0
    assert np.isfinite(first["final_loss"]) and first["final_loss"] < first["first_loss"]
    second, _ = run_experiment(name, "--quick", "--seed", "5", "--threads", "2")
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    model = attnc.load(path)
    assert isinstance(model, attnc.models.NTM) and model.memory_slots == 128 and model.memory_width == 20
    logits = model(np.zeros((2, 5, model.input_size), np.float32))
    assert logits.shape == (2, 5, model.output_size)


@pytest.mark.parametrize(
    "name,keys",
    [
        ("pointer_sort", ("exact_match", "exact_match_by_n")),
        ("pointer_tsp", ("tour_length", "optimal_tour_length", "gap", "beam10")),
        ("pointer_hull", ("accuracy", "area_coverage", "accuracy_by_n")),
    ],
)
def test_pointer_quick_runs(name, keys, tmp_path):
    path = tmp_path / "pointer.npz"
    first, stderr = run_experiment(name, "--quick", "--seed", "2", "--threads", "1", "--save", str(path))
    assert "it/s" in stderr or "s/it" in stderr
    for key in keys + ("train_seconds", "final_loss", "heldout_size"):
        assert key in first, key
    assert first["train_seconds"] > 0 and np.isfinite(first["final_loss"]) and first["final_loss"] < first["first_loss"]
    for key in ("exact_match", "accuracy", "area_coverage"):
        if key in first:
            assert 0 <= first[key] <= 1
    if name == "pointer_tsp":
        assert first["tour_length"] >= first["optimal_tour_length"] > 0 and first["n"] == 5
        assert first["gap"] == pytest.approx(first["tour_length"] / first["optimal_tour_length"] - 1)
    second, _ = run_experiment(name, "--quick", "--seed", "2", "--threads", "2")
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    model = attnc.load(path)
    assert isinstance(model, attnc.models.PointerNet)
    out = model.generate(np.random.default_rng(0).random((2, 6, model.input_size), np.float32))
    assert out.indices.shape == (2, 6) and sorted(out.indices[0]) == list(range(6))


# --------------------------------------------------------------------------- attention attribution


def test_cue_task_matches_its_definition():
    """Each row checked by a loop: [CLS], one cue not last, the source right
    after it and the label its class; every other token a word of any class."""
    task = attnc.datasets.CueTask(length=7, num_classes=3, words_per_class=2)
    batch = task.batch(3000, seed=4)
    assert batch.ids.shape == (3000, 8) and batch.ids.dtype == batch.labels.dtype == np.int64
    with_attractor = 0
    for ids, label, cue, source in zip(batch.ids, batch.labels, batch.cue, batch.source):
        assert ids[0] == task.CLS and 1 <= cue <= 6 and source == cue + 1
        assert [j for j in range(8) if ids[j] == task.CUE] == [cue]
        words = [int(ids[j]) for j in range(1, 8) if j != cue]
        assert all(3 <= w < 3 + 3 * 2 for w in words)  # no PAD, CLS or CUE among them
        assert label == (ids[source] - 3) // 2
        with_attractor += any((w - 3) // 2 != label for w in words)
    assert with_attractor > 0.95 * len(batch)  # words of the other classes around the source
    assert set(batch.cue.tolist()) == set(range(1, 7)) and set(batch.labels.tolist()) == {0, 1, 2}
    assert abs(np.mean(batch.labels == 0) - 1 / 3) < 0.05
    assert set(batch.ids[:, 1:].ravel().tolist()) == set(range(2, task.vocab_size))
    again, other = task.batch(3000, seed=4), task.batch(3000, seed=5)
    for field in ("ids", "labels", "cue", "source"):
        np.testing.assert_array_equal(getattr(again, field), getattr(batch, field))
    assert not np.array_equal(other.ids, batch.ids)
    assert task.class_of([[0, 1, 2], [3, 4, 8]]).tolist() == [[-1, -1, -1], [0, 0, 2]]
    for kwargs, name in [
        ({"length": 1}, "length"),
        ({"num_classes": 1}, "num_classes"),
        ({"words_per_class": 0}, "words_per_class"),
    ]:
        with pytest.raises(ValueError, match=name):
            attnc.datasets.CueTask(**kwargs)


def _cls_classifier(task, seed=0):
    from attnc.experiments.attention_attribution import CLSClassifier

    return CLSClassifier(task.vocab_size, 1 + task.length, task.num_classes, 8, 2, 2, 16, dtype=np.float64, seed=seed)


def test_attention_attribution_blank_out_importance_against_a_loop():
    from attnc.experiments.attention_attribution import blank_out_importance

    task = attnc.datasets.CueTask(length=5)
    model, batch = _cls_classifier(task), task.batch(4, seed=0)
    got = blank_out_importance(model, batch.ids, batch.labels)

    def p(ids, label):  # the true class's probability, one sequence at a time
        z = model(ids[None])[0]
        return np.exp(z[label]) / np.exp(z).sum()

    for b in range(4):
        assert got[b, 0] == 0
        for j in range(1, 6):
            blanked = batch.ids[b].copy()
            blanked[j] = 0
            assert abs(got[b, j] - (p(batch.ids[b], batch.labels[b]) - p(blanked, batch.labels[b]))) < 1e-12


def test_cls_classifier_gradients():
    """loss_and_grads against central differences; the attention weights'
    gradients of the class logit against those of the encoder alone, given the
    logit's gradient at the [CLS] output (head.weight's row)."""
    task = attnc.datasets.CueTask(length=5)
    model, batch = _cls_classifier(task, seed=1), task.batch(6, seed=1)
    loss, grads = model.loss_and_grads(batch)
    rng = np.random.default_rng(0)
    for name in ("tokens.weight", "positions.weight", "encoder.layers.0.self_attn.in_proj_weight", "head.weight"):
        p = dict(model.named_parameters())[name]  # the array itself: perturbed in place
        for _ in range(3):
            i = tuple(rng.integers(0, n) for n in p.shape)
            if name == "tokens.weight" and i[0] == 0:
                continue  # PAD's row is never trained
            old, h, f = p[i], 1e-6, []
            for v in (old + h, old - h):
                p[i] = v
                f.append(model.loss_and_grads(batch)[0])
            p[i] = old
            assert abs(grads[name][i] - (f[0] - f[1]) / (2 * h)) < 1e-7, name
    cot = np.zeros((6, task.num_classes))
    cot[np.arange(6), batch.labels] = 1
    weights, gs = attnc.attribution.attention_gradients(model, batch.ids, cot)
    x = model.tokens.weight[batch.ids] + model.positions.weight[: 1 + task.length]
    dh = np.zeros(x.shape)
    dh[:, 0] = model.head.weight[batch.labels]
    weights2, gs2 = attnc.attribution.attention_gradients(model.encoder, x, dh)
    for w, w2, g, g2 in zip(weights, weights2, gs, gs2):
        np.testing.assert_allclose(w, w2, rtol=0, atol=1e-14)
        np.testing.assert_allclose(g, g2, rtol=0, atol=1e-12)


def test_attention_attribution_quick_run():
    first, _ = run_experiment("attention_attribution", "--quick", "--seed", "2", "--threads", "1")
    methods = {"raw_attention", "rollout", "flow", "relevance"} | {f"raw_attention_layer{l}" for l in range(1, 5)}
    assert first["quick"] is True and first["heldout_size"] == 12 and first["steps"] == 20
    assert 0 <= first["accuracy"] <= 1 and np.isfinite(first["final_loss"])
    for key in ("spearman", "spearman_mean", "undefined", "above_raw_attention"):
        assert set(first[key]) == methods | {"evidence_indicator"}, key
    assert first["above_raw_attention"]["raw_attention"] == 0
    for key in ("source_accuracy", "evidence_accuracy", "tied_at_max"):
        assert set(first[key]) == methods | {"blank_out"}, key
        assert all(0 <= v <= 1 for v in first[key].values())
    assert all(first["source_accuracy"][m] <= v for m, v in first["evidence_accuracy"].items())
    assert all(v >= round(1 / 12, 4) for v in first["tied_at_max"].values())  # the maximum itself, of 12 positions
    assert all(-1 <= v <= 1 for v in first["spearman"].values())
    assert set(first["paper_spearman"]) == {"raw_attention", "rollout", "flow"}
    assert isinstance(first["rollout_and_flow_beat_raw"], bool)
    second, _ = run_experiment("attention_attribution", "--quick", "--seed", "2", "--threads", "2")
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    shallow, _ = run_experiment("attention_attribution", "--quick", "--layers", "2")
    assert {m for m in shallow["spearman"] if m.startswith("raw_attention_layer")} == {
        "raw_attention_layer1",
        "raw_attention_layer2",
    }


def test_attention_attribution_spearman_matches_scipy(rng):
    from scipy.stats import spearmanr

    from attnc.experiments.attention_attribution import spearman

    for n in (2, 5, 11):
        for _ in range(20):
            a, b = rng.integers(0, 4, n).astype(float), rng.standard_normal(n)  # a has ties
            with warnings.catch_warnings():  # scipy warns of a constant input (a's values all tied)
                warnings.simplefilter("ignore")
                expected = spearmanr(a, b).statistic
            got = spearman(a, b)
            assert (np.isnan(got) and np.isnan(expected)) or abs(got - expected) < 1e-12, (a, b)
    assert np.isnan(spearman(np.ones(4), np.arange(4.0)))
