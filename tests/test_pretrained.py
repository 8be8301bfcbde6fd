"""attnc.pretrained: the shipped checkpoints are listed, load, and still score
what their training run recorded.

Each checkpoint is evaluated here on its experiment's held-out set (the same
seeds and sizes, rebuilt from attnc.datasets, scored by code written in this
file rather than the experiment's) and compared with the manifest's value.
Tolerance: the metrics count decoded sequences that come out exactly right,
and greedy decoding takes an argmax in float32. On the SIMD path and build
that trained the model the result is bitwise the same (attnc's results do not
depend on the thread count), so on this machine the check is exact; another
SIMD path (baseline vs avx2: fused multiply-adds round differently) can flip
a near tie and with it one decoded sequence. We allow TOLERATED_FLIPS
sequences of difference, a tiny fraction of each set (1,000-5,000 items)
and far below what a wrongly loaded or retrained model would change.
The one measure that is not a count, attention pooling's marker attention
mass (a mean of softmax weights), has no argmax to flip: another SIMD path
moves it by rounding only (~1e-7), and we allow MASS_TOLERANCE (1e-5; a run
of half the steps differs by 5e-4).
"""

import json
import math
import os

import numpy as np
import pytest

import attnc
import attnc.models
from attnc import datasets

TOLERATED_FLIPS = 3
MASS_TOLERANCE = 1e-5
MANIFEST = os.path.join(os.path.dirname(attnc._pretrained.__file__), "manifest.json")


def _manifest():
    with open(MANIFEST, encoding="utf-8") as f:
        return json.load(f)


def _chunks(n, size):
    return [np.arange(s, min(s + size, n)) for s in range(0, n, size)]


def _padded(rows, width):
    """rows (B, L) int, cut or padded with -1 to (B, width)."""
    out = np.full((len(rows), width), -1, np.int64)
    out[:, : min(width, rows.shape[1])] = rows[:, :width]
    return out


# --------------------------------------------------------------- one scorer per experiment: (value, count)


def score_dates(model, record):
    held = datasets.dates(2000, seed=20240605, split="test", split_by="date", unique=True)
    right = 0
    for idx in _chunks(len(held), 500):  # the experiment's chunks: the same float32 sums
        b = held.batch(idx)
        tokens, _ = model.generate(b.src, b.src_lengths, max_len=11, bos=held.bos, eos=held.eos)
        tgt = held.tgt_vocab
        for row, i in zip(tokens.tolist(), idx):
            text = (
                "".join(tgt.tokens[t] for t in row[: row.index(held.eos)] if t not in (tgt.pad, tgt.bos))
                if held.eos in row
                else None
            )
            right += text == held.targets[i]
    return right / len(held), len(held)


def _sequence_match(rows_of, targets, lengths, batch):
    """Exact matches of generated rows against targets up to and with EOS (index lengths[i])."""
    width, right = targets.shape[1], 0
    for idx in _chunks(len(targets), batch):
        got = _padded(rows_of(idx), width)
        valid = np.arange(width)[None, :] <= lengths[idx][:, None]
        right += int(((got == targets[idx]) | ~valid).all(axis=1).sum())
    return right / len(targets), len(targets)


def score_transformer_reverse(model, record):
    held = datasets.reverse_task(1000, seed=20240601, unique=True)

    def rows_of(idx):
        b = held.batch(idx)
        return model.generate(
            b.src,
            max_new_tokens=held.targets_padded().shape[1],
            bos=held.bos,
            eos=held.eos,
            src_key_padding_mask=b.src_key_padding_mask,
        )

    return _sequence_match(rows_of, held.targets_padded(), held.lengths, 500)


def score_captions(model, record):
    held = datasets.captions(600, seed=20240602, split="test", unique=True)
    width = held.targets_padded().shape[1]
    return _sequence_match(
        lambda idx: model.generate(held.features[idx], width, bos=held.bos, eos=held.eos)[0],
        held.targets_padded(),
        held.caption_lengths,
        256,
    )


def score_gpt_sort(model, record):
    test_seed = np.random.SeedSequence(record["seed"]).generate_state(4)[2]
    held = datasets.sort_task(5000, 6, 3, seed=int(test_seed), split="test")
    right = sum(
        int((model.generate(held.sequences[idx], max_new_tokens=6) == held.solutions[idx]).all(axis=1).sum())
        for idx in _chunks(len(held), 1000)
    )
    return right / len(held), len(held)


def score_ntm_copy(model, record):
    task = datasets.CopyTask(bits=8, min_len=1, max_len=20)
    held = task.batch(500, length=20, seed=20241122 + 20)
    wrong = 0.0
    for idx in _chunks(len(held), 50):
        logits = model(held.inputs[idx])
        predicted = logits > 0  # sigmoid(logit) > 0.5
        wrong += float((predicted != (held.targets[idx] > 0.5))[held.mask[idx].astype(bool)].sum())
    # a flip is one wrong bit in one sequence: the value is a mean over the 500 sequences
    return wrong / len(held), len(held)


def _pointer_rows(model, batch, constraint):
    parts = [
        model.generate(batch.inputs[idx], lengths=batch.lengths[idx], constraint=constraint).indices
        for idx in _chunks(len(batch.inputs), 500)
    ]
    width = max(p.shape[1] for p in parts)
    return np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1) for p in parts])


def score_pointer_tsp(model, record):
    n = record["metrics"]["n"]
    held = datasets.TSPTask(n=n).batch(1000, seed=20151122 + n)
    tours = _pointer_rows(model, held, "tour")
    points = held.inputs[np.arange(len(tours))[:, None], tours]  # the closed tour's cities in order
    lengths = np.linalg.norm(np.diff(points, axis=1), axis=2).sum(axis=1)
    assert np.all(np.sort(tours[:, :n], axis=1) == np.arange(n)) and np.all(tours[:, n] == tours[:, 0])
    return float(lengths.mean() / held.tour_lengths.mean() - 1), len(held.inputs)


def score_pointer_hull(model, record):
    task = datasets.ConvexHullTask(min_n=5, max_n=10)
    per_n = []
    for n in range(5, 11):
        held = task.batch(500, n=n, seed=20151122 + n)
        pred = _pointer_rows(model, held, "hull")
        right = 0
        for row, target, k in zip(pred, held.targets, held.target_lengths):
            stop = int(np.argmax(np.append(row, -1) < 0))
            right += stop == k and np.array_equal(row[:k], target[:k])
        per_n.append(right / len(pred))
    return float(np.mean(per_n)), 500


def _classified(logits_of, targets, size):
    """(accuracy, count): argmax of logits_of(idx) against targets, in chunks of size."""
    right = sum(int((logits_of(idx).argmax(-1) == targets[idx]).sum()) for idx in _chunks(len(targets), size))
    return right / len(targets), len(targets)


def score_sagan_shapes(model, record):
    # the experiment's task and held-out images (seed [seed, 2]); the baseline is the same network without attention
    task = datasets.SameColourShapes(size=12, colours=6, gap=6, max_radius=1, noise=0.0)
    held = task.batch(1000, seed=np.random.default_rng([record["seed"], 2]))
    assert model.attention == (record["metric"] == "accuracy")  # the attention model, or the baseline
    return _classified(lambda idx: model(held.images[idx]), held.labels, 250)


def score_attention_pooling(model, record):
    # the attention mass on the marker words, summed per sequence and averaged: unlike the accuracy (100% after
    # 150 steps already), it tells the shipped model from a shorter run's
    held = datasets.MarkerTask().batch(2000, seed=20261122)
    mass = 0.0
    for idx in _chunks(len(held), 500):
        _, weights = model(held.ids[idx], held.mask[idx], return_weights=True)
        mass += float((weights.astype(np.float64) * held.marker_mask[idx]).sum())
    return mass / len(held), len(held)


def score_entailment(model, record):
    held = datasets.EntailmentTask().batch(3000, seed=20261123, split="test")  # unseen (colour, animal) pairs

    def logits_of(idx):
        return model(held.premise[idx], held.hypothesis[idx], held.premise_lengths[idx], held.hypothesis_lengths[idx])

    return _classified(logits_of, held.labels, 1000)


def score_snail_fewshot(model, record):
    task = datasets.FewShotTask(5, model.k_shot, dim=32, noise=1.2)
    held = task.episodes(2000, seed=20170711 + model.k_shot, dtype=np.float32)  # the same for every seed
    return _classified(lambda idx: model(held.features[idx], held.labels[idx]), held.targets, 500)


def score_lstmn_recall(model, record):
    held = datasets.KeyValueRecallTask(16, 16, 6, 10).batch(2000, seed=20261122)
    return _classified(lambda idx: model(held.tokens[idx], held.lengths[idx]), held.targets, 2000)


SCORERS = {
    "dates": score_dates,
    "transformer_reverse": score_transformer_reverse,
    "captions": score_captions,
    "gpt_sort": score_gpt_sort,
    "ntm_copy": score_ntm_copy,
    "pointer_tsp": score_pointer_tsp,
    "pointer_hull": score_pointer_hull,
    "sagan_shapes": score_sagan_shapes,
    "attention_pooling": score_attention_pooling,
    "entailment": score_entailment,
    "snail_fewshot": score_snail_fewshot,
    "lstmn_recall": score_lstmn_recall,
}


# --------------------------------------------------------------------------- the tests


def test_listing_matches_the_manifest_and_the_files():
    listed = attnc.pretrained()
    manifest = _manifest()
    assert listed == {k: v["description"] for k, v in manifest.items()} and listed
    folder = os.path.dirname(MANIFEST)
    assert sorted(f[:-4] for f in os.listdir(folder) if f.endswith(".npz")) == sorted(manifest)
    total = sum(os.path.getsize(os.path.join(folder, f"{k}.npz")) for k in manifest)
    assert total < 10 * 10**6  # "at most a few MB" all together: under 10 MB (8.8 MB with notebook 06's)
    for name, record in manifest.items():
        for key in (
            "experiment",
            "command",
            "seed",
            "attnc_version",
            "train_seconds",
            "metric",
            "value",
            "metrics",
            "description",
        ):
            assert key in record, (name, key)
        assert record["command"].startswith(f"python -m attnc.experiments.{record['experiment']} ")
        assert "--quick" not in record["command"] and record["metrics"]["quick"] is False
        assert record["metrics"][record["metric"]] == record["value"]
        assert "\n" not in record["description"]


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="no pretrained model named 'nope'.*" + next(iter(attnc.pretrained()))):
        attnc.pretrained("nope")
    with pytest.raises(TypeError, match="name must be a str"):
        attnc.pretrained(3)


@pytest.mark.parametrize("name", sorted(_manifest()))
def test_checkpoint_reproduces_its_recorded_metric(name):
    model, record = attnc.pretrained(name, info=True)
    assert not model.training and model.dtype == np.float32
    assert record["experiment"] in SCORERS, f"no scorer for {record['experiment']}: every checkpoint is checked"
    value, count = SCORERS[record["experiment"]](model, record)
    assert math.isfinite(value)
    if record["experiment"] == "pointer_tsp":  # a gap: one flipped tour moves it by at most ~ its length / count
        tolerance = TOLERATED_FLIPS * 0.5 / count
    elif record["metric"] == "marker_attention_mass":  # a mean of float32 softmax weights: no argmax to flip
        tolerance = MASS_TOLERANCE
    else:  # a fraction (or, for the NTM, bits) per sequence: one flip moves it by 1 / count
        tolerance = TOLERATED_FLIPS / count
    assert abs(value - record["value"]) <= tolerance, (name, value, record["value"])
