"""attnc.datasets.MarkerTask and EntailmentTask: shapes, seeding, the marker
placement (the markers are the only evidence), balanced classes, held-out
(colour, animal) combinations, and every entailment label and alignment
target checked by an independent judge of the world's rules."""

import numpy as np
import pytest

from attnc.datasets import EntailmentTask, MarkerTask
from attnc.datasets.text_tasks import ANIMALS, COLOURS, HELDOUT_PAIRS


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


def _entities(words):
    """A sentence of the world as [(colour or None, animal)]: "the|a [colour] animal" joined by "and"."""
    out, colour = [], None
    for w in words:
        if w in COLOURS:
            assert colour is None, words
            colour = w
        elif w in ANIMALS:
            out.append((colour, w))
            colour = None
        else:
            assert w in ("the", "a", "and") and colour is None, words
    return out


def judge(premise, hypothesis):
    """The world's rule: the premise lists the whole scene, each animal with its one colour."""
    scene = {a: c for c, a in _entities(premise)}
    assert len(scene) == len(_entities(premise)) in (2, 3) and None not in scene.values()
    assert len(set(scene.values())) == len(scene)  # distinct colours
    said = _entities(hypothesis)
    if any(a in scene and c is not None and c != scene[a] for c, a in said):
        return 1
    if any(a not in scene for _, a in said):
        return 2
    return 0


def test_entailment_labels_follow_the_world():
    task = EntailmentTask()
    for split in ("train", "test"):
        b = task.batch(3000, seed=7, split=split)
        assert b.premise.dtype == np.int64 and b.premise.shape[0] == 3000
        assert b.targets.shape == b.hypothesis.shape and b.targets.dtype == np.int64
        counts = np.bincount(b.labels, minlength=3)
        assert counts.min() > 900  # balanced
        names = set()
        for i in range(len(b)):
            pw, hw = task.decode(b.premise[i]), task.decode(b.hypothesis[i])
            assert len(pw) == b.premise_lengths[i] and len(hw) == b.hypothesis_lengths[i]
            assert np.all(b.premise[i, len(pw) :] == 0) and np.all(b.hypothesis[i, len(hw) :] == 0)
            assert judge(pw, hw) == b.labels[i], (pw, hw, b.labels[i], b.templates[i])
            scene = _entities(pw)
            assert all((pair in HELDOUT_PAIRS) == (split == "test") for pair in scene)
            if split == "train":  # no held-out combination anywhere in training
                assert not set(_entities(hw)) & set(HELDOUT_PAIRS)
            names.add(b.templates[i])
            # targets: a hypothesis animal of the scene points at that animal, its colour at the animal's colour
            animals = {a: k for k, a in enumerate(pw) if a in ANIMALS}
            t = b.targets[i]
            assert np.all(t[len(hw) :] == -1)
            for j, w in enumerate(hw):
                if w in ANIMALS:
                    expect = animals.get(w, -1)
                elif w in COLOURS and hw[j + 1] in animals:
                    expect = animals[hw[j + 1]] - 1
                else:
                    expect = -1
                assert t[j] == expect, (pw, hw, t)
        assert len(names) == 16  # 2 scene sizes x 4 hypothesis kinds x 1 or 2 animals named


def test_entailment_seeded_and_bad_split():
    task = EntailmentTask()
    a, b = task.batch(50, seed=3), task.batch(50, seed=3)
    assert np.array_equal(a.premise, b.premise) and np.array_equal(a.hypothesis, b.hypothesis)
    assert np.array_equal(a.labels, b.labels) and a.templates == b.templates
    assert np.array_equal(a.targets, b.targets)
    sentence = "the red cat and the blue dog"
    assert list(task.encode(sentence)) == [task.index[w] for w in sentence.split()]
    with pytest.raises(ValueError, match="split must be"):
        task.batch(4, seed=0, split="dev")
