"""attnc.datasets.MarkerTask and EntailmentTask: shapes, seeding, the marker
placement (the markers are the only evidence), balanced classes, held-out
(colour, animal) combinations, and every entailment label checked by an
independent judge of the world's rules."""

import numpy as np
import pytest

from attnc.datasets import EntailmentTask, MarkerTask
from attnc.datasets.text_tasks import (
    ACTIVITIES,
    ANIMALS,
    COLOURS,
    HELDOUT_PAIRS,
    LOCATIONS,
    RELATIONS,
    SIZES,
)


def test_marker_batch_shapes_and_markers():
    task = MarkerTask(num_classes=3, min_len=20, max_len=50, max_markers=3)
    b = task.batch(500, seed=1)
    B, T = b.ids.shape
    assert B == 500 and T == b.lengths.max() and b.lengths.min() >= 20 and b.lengths.max() <= 50
    assert b.ids.dtype == np.int64 and b.labels.dtype == np.int64
    assert np.array_equal(b.mask, np.arange(T)[None] < b.lengths[:, None])
    assert np.all(b.ids[~b.mask] == 0) and np.all(b.ids[b.mask] > 0)
    counts = b.marker_mask.sum(1)
    assert counts.min() == 1 and counts.max() == 3 and not np.any(b.marker_mask & ~b.mask)
    marker_ids = {c: {task.index[w] for w in task.markers[c]} for c in range(3)}
    all_markers = set().union(*marker_ids.values())
    for row in range(B):
        ids = b.ids[row]
        assert {int(i) for i in ids[b.marker_mask[row]]} <= marker_ids[int(b.labels[row])]
        others = {int(i) for i in ids[b.mask[row] & ~b.marker_mask[row]]}
        assert not others & all_markers  # no marker outside marker_mask
    assert set(np.bincount(b.labels).tolist()) and np.bincount(b.labels, minlength=3).min() > 120
    # the distractors carry no label information: their distribution is the same for every class
    d = b.ids[b.mask & ~b.marker_mask]
    lab = np.broadcast_to(b.labels[:, None], b.ids.shape)[b.mask & ~b.marker_mask]
    freq = np.stack([np.bincount(d[lab == c], minlength=task.vocab_size) / (lab == c).sum() for c in range(3)])
    assert np.abs(freq - freq.mean(0)).max() < 0.02
    assert task.decode(b.ids[0])[: b.lengths[0]] == [task.words[i] for i in b.ids[0, : b.lengths[0]]]


def test_marker_seeded():
    task = MarkerTask()
    a, b = task.batch(20, seed=5), task.batch(20, seed=5)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.labels, b.labels)
    assert not np.array_equal(task.batch(20, seed=6).ids[:, :20], a.ids[:, :20])
    rng = np.random.default_rng(0)
    assert not np.array_equal(task.batch(20, seed=rng).ids[:, :20], task.batch(20, seed=rng).ids[:, :20])


def test_marker_bad_arguments():
    with pytest.raises(ValueError, match="num_classes must be <= 4"):
        MarkerTask(num_classes=5)
    with pytest.raises(ValueError, match="max_len"):
        MarkerTask(min_len=10, max_len=5)
    with pytest.raises(ValueError, match="max_markers"):
        MarkerTask(min_len=2, max_len=5, max_markers=3)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        MarkerTask().batch(0)


def _parse(words):
    """A sentence of the world as facts: colour, animal, relation, location, size, activity (None: not said)."""
    f = dict.fromkeys(("colour", "animal", "relation", "location", "size", "activity"))
    for w in words:
        for key, vocab in (("colour", COLOURS), ("animal", ANIMALS), ("relation", RELATIONS),
                           ("location", LOCATIONS), ("size", SIZES), ("activity", ACTIVITIES)):
            if w in vocab:
                assert f[key] is None, words
                f[key] = w
    return f


def judge(premise, hypothesis):
    """The world's rule: one animal in one place, fully described by the premise."""
    p, h = _parse(premise), _parse(hypothesis)
    assert p["animal"] and p["relation"] and p["location"] and p["colour"] and p["activity"] is None
    assert h["animal"] == p["animal"]
    for key in ("colour", "relation", "location", "size"):
        if h[key] is not None and p[key] is not None and h[key] != p[key]:
            return 1
    for key in ("size", "activity"):
        if h[key] is not None and p[key] is None:
            return 2
    return 0


def test_entailment_labels_follow_the_world():
    task = EntailmentTask()
    for split in ("train", "test"):
        b = task.batch(3000, seed=7, split=split)
        assert b.premise.dtype == np.int64 and b.premise.shape[0] == 3000
        counts = np.bincount(b.labels, minlength=3)
        assert counts.min() > 900  # balanced
        names = set()
        for i in range(len(b)):
            pw, hw = task.decode(b.premise[i]), task.decode(b.hypothesis[i])
            assert len(pw) == b.premise_lengths[i] and len(hw) == b.hypothesis_lengths[i]
            assert np.all(b.premise[i, len(pw):] == 0) and np.all(b.hypothesis[i, len(hw):] == 0)
            assert judge(pw, hw) == b.labels[i], (pw, hw, b.labels[i], b.templates[i])
            pair = (_parse(pw)["colour"], _parse(pw)["animal"])
            assert (pair in HELDOUT_PAIRS) == (split == "test")
            names.add(b.templates[i][1])
        assert len(names) == 12  # every hypothesis template appears


def test_entailment_seeded_and_bad_split():
    task = EntailmentTask()
    a, b = task.batch(50, seed=3), task.batch(50, seed=3)
    assert np.array_equal(a.premise, b.premise) and np.array_equal(a.hypothesis, b.hypothesis)
    assert np.array_equal(a.labels, b.labels) and a.templates == b.templates
    assert list(task.encode("the red cat is on the mat")) == [task.index[w] for w in "the red cat is on the mat".split()]
    with pytest.raises(ValueError, match="split must be"):
        task.batch(4, seed=0, split="dev")
