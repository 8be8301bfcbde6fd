"""attnc.datasets.ntm_tasks: the NTM copy, repeat-copy and associative-recall
tasks (exact layouts on small cases, recall answers recovered by parsing the
inputs, seeding, drawn lengths) and the bits-per-sequence error. NumPy only,
well under a second."""

import numpy as np
import pytest

from attnc import datasets
from attnc.datasets import (
    AssociativeRecallTask,
    CopyTask,
    NTMBatch,
    RepeatCopyTask,
    bits_per_sequence,
)


def _assert_binary(a):
    assert set(np.unique(a).tolist()) <= {0.0, 1.0}


# --------------------------------------------------------------------------- copy


def test_copy_layout_by_hand():
    task = CopyTask(bits=3, min_len=1, max_len=5)
    assert (task.input_size, task.output_size) == (4, 3)
    b = task.batch(4, length=2, seed=7)
    assert isinstance(b, NTMBatch) and len(b) == 4
    assert b.inputs.shape == (4, 5, 4) and b.targets.shape == (4, 5, 3) and b.mask.shape == (4, 5)
    assert b.inputs.dtype == np.float32 and b.targets.dtype == np.float32 and b.mask.dtype == bool
    seq = b.inputs[:, :2, :3]
    _assert_binary(seq)
    z3 = np.zeros((4, 3), np.float32)
    for row in range(4):
        s0, s1 = seq[row]
        expected_in = np.array([[*s0, 0], [*s1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32)
        expected_tg = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0], s0, s1], np.float32)
        np.testing.assert_array_equal(b.inputs[row], expected_in)
        np.testing.assert_array_equal(b.targets[row], expected_tg)
    np.testing.assert_array_equal(b.mask, np.array([[False, False, False, True, True]] * 4))
    np.testing.assert_array_equal(b.targets[:, 3], seq[:, 0])
    np.testing.assert_array_equal(b.targets[:, :3], np.stack([z3] * 3, axis=1))


def test_copy_bits_are_fair_coins_and_rows_differ():
    b = CopyTask(bits=8).batch(64, length=20, seed=1)
    seq = b.inputs[:, :20, :8]
    assert 0.45 < seq.mean() < 0.55
    assert len({r.tobytes() for r in seq}) == 64
    assert (b.inputs[:, :20, 8] == 0).all() and (b.inputs[:, 20, :8] == 0).all() and (b.inputs[:, 21:] == 0).all()


def test_copy_long_lengths_for_generalisation():
    task = CopyTask(bits=8, max_len=20)
    for L in (40, 80):
        b = task.batch(2, length=L, seed=0)
        assert b.inputs.shape == (2, 2 * L + 1, 9)
        np.testing.assert_array_equal(b.targets[:, L + 1 :], b.inputs[:, :L, :8])
        assert b.mask.sum(axis=1).tolist() == [L, L]


def test_copy_drawn_lengths_cover_the_range():
    task = CopyTask(bits=2, min_len=3, max_len=6)
    rng = np.random.default_rng(0)
    lengths = set()
    for _ in range(200):
        b = task.batch(2, seed=rng)
        T = b.inputs.shape[1]
        assert T % 2 == 1
        L = (T - 1) // 2
        assert 3 <= L <= 6 and b.mask[0].sum() == L and b.inputs[0, L, 2] == 1
        lengths.add(L)
    assert lengths == {3, 4, 5, 6}


# --------------------------------------------------------------------------- repeat copy


def test_repeat_copy_layout_by_hand():
    task = RepeatCopyTask(bits=2, min_len=1, max_len=5, min_repeats=1, max_repeats=4)
    assert (task.input_size, task.output_size) == (4, 3)
    b = task.batch(3, length=2, repeats=3, seed=5, dtype=np.float64)
    L, R = 2, 3
    T = L * (R + 1) + 3
    assert b.inputs.shape == (3, T, 4) and b.targets.shape == (3, T, 3) and b.inputs.dtype == np.float64
    seq = b.inputs[:, :L, :2]
    _assert_binary(seq)
    assert (b.inputs[:, :L, 2:] == 0).all()
    np.testing.assert_array_equal(b.inputs[:, L], np.tile([0, 0, 1, 0], (3, 1)))  # delimiter
    np.testing.assert_array_equal(b.inputs[:, L + 1], np.tile([0, 0, 0, 0.75], (3, 1)))  # 3 / max_repeats
    assert (b.inputs[:, L + 2 :] == 0).all()
    assert (b.targets[:, : L + 2] == 0).all()
    for row in range(3):
        s = seq[row]
        np.testing.assert_array_equal(b.targets[row, L + 2 : T - 1, :2], np.concatenate([s, s, s]))
    assert (b.targets[:, L + 2 : T - 1, 2] == 0).all()
    np.testing.assert_array_equal(b.targets[:, T - 1], np.tile([0, 0, 1], (3, 1)))  # end marker
    expected_mask = np.zeros(T, bool)
    expected_mask[L + 2 :] = True
    np.testing.assert_array_equal(b.mask, np.tile(expected_mask, (3, 1)))


def test_repeat_copy_drawn_ranges_and_repeat_channel():
    task = RepeatCopyTask(bits=3, min_len=2, max_len=4, min_repeats=1, max_repeats=3)
    seen = set()
    for seed in range(150):
        b = task.batch(1, seed=seed)
        # recover L from the delimiter, R from the repeat channel
        L = int(np.flatnonzero(b.inputs[0, :, 3])[0])
        R = round(float(b.inputs[0, L + 1, 4]) * 3)
        assert 2 <= L <= 4 and 1 <= R <= 3
        assert b.inputs.shape[1] == L * (R + 1) + 3 and b.mask[0].sum() == L * R + 1
        np.testing.assert_array_equal(b.targets[0, L + 2 : -1, :3], np.tile(b.inputs[0, :L, :3], (R, 1)))
        seen.add((L, R))
    assert seen == {(L, R) for L in (2, 3, 4) for R in (1, 2, 3)}


def test_repeat_copy_more_repeats_than_trained_on():
    b = RepeatCopyTask(bits=2, max_repeats=10).batch(2, length=3, repeats=20, seed=0)
    assert b.inputs[0, 4, 3] == pytest.approx(2.0)
    assert b.inputs.shape[1] == 3 * 21 + 3


# --------------------------------------------------------------------------- associative recall


def _parse_recall(inputs, bits, item_len):
    """(items, query) of one row, read back from its input alone."""
    item_delims = np.flatnonzero(inputs[:, bits] == 1)
    query_delims = np.flatnonzero(inputs[:, bits + 1] == 1)
    assert len(query_delims) == 2 and query_delims[1] - query_delims[0] == item_len + 1
    assert (item_delims < query_delims[0]).all()
    items = [inputs[d + 1 : d + 1 + item_len, :bits] for d in item_delims]
    query = inputs[query_delims[0] + 1 : query_delims[1], :bits]
    return items, query, query_delims[1]


def test_associative_recall_target_is_the_item_after_the_query():
    K, bits, N = 3, 4, 5
    task = AssociativeRecallTask(bits=bits, item_len=K, min_items=2, max_items=6)
    assert (task.input_size, task.output_size) == (6, 4)
    b = task.batch(64, items=N, seed=3)
    T = (N + 2) * (K + 1)
    assert b.inputs.shape == (64, T, 6) and b.targets.shape == (64, T, 4)
    _assert_binary(b.inputs)
    expected_mask = np.zeros(T, bool)
    expected_mask[T - K :] = True
    np.testing.assert_array_equal(b.mask, np.tile(expected_mask, (64, 1)))
    assert (b.targets[:, : T - K] == 0).all()
    positions = set()
    for row in range(64):
        items, query, last = _parse_recall(b.inputs[row], bits, K)
        assert len(items) == N and last == T - K - 1
        assert (b.inputs[row, last + 1 :] == 0).all()  # the answer phase is silent
        assert len({it.tobytes() for it in items}) == N  # distinct items
        matches = [i for i, it in enumerate(items) if np.array_equal(it, query)]
        assert len(matches) == 1 and matches[0] < N - 1  # the query copies an earlier item, never the last
        np.testing.assert_array_equal(b.targets[row, T - K :], items[matches[0] + 1])
        positions.add(matches[0])
    assert positions == set(range(N - 1))


def test_associative_recall_distinct_items_in_a_tiny_space():
    task = AssociativeRecallTask(bits=1, item_len=2, min_items=2, max_items=4)  # only 4 items exist
    b = task.batch(50, items=4, seed=0)
    for row in range(50):
        items, _, _ = _parse_recall(b.inputs[row], 1, 2)
        assert len({it.tobytes() for it in items}) == 4
    with pytest.raises(ValueError, match="items"):
        task.batch(2, items=5, seed=0)
    with pytest.raises(ValueError, match="max_items"):
        AssociativeRecallTask(bits=1, item_len=2, max_items=5)


def test_associative_recall_drawn_number_of_items():
    task = AssociativeRecallTask(bits=2, item_len=1, min_items=2, max_items=4)
    counts = set()
    for seed in range(100):
        b = task.batch(2, seed=seed)
        N = b.inputs.shape[1] // 2 - 2
        assert b.inputs.shape[1] == (N + 2) * 2 and int(b.inputs[0, :, 2].sum()) == N
        counts.add(N)
    assert counts == {2, 3, 4}


# --------------------------------------------------------------------------- seeding, dtypes, repr


@pytest.mark.parametrize("task", [CopyTask(), RepeatCopyTask(), AssociativeRecallTask()], ids=repr)
def test_same_seed_same_arrays_different_seeds_differ(task):
    a, b, c = task.batch(8, seed=11), task.batch(8, seed=11), task.batch(8, seed=12)
    for name in ("inputs", "targets", "mask"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    g = task.batch(8, seed=np.random.default_rng(11))
    np.testing.assert_array_equal(g.inputs, a.inputs)
    assert a.inputs.shape != c.inputs.shape or not np.array_equal(a.inputs, c.inputs)
    rng = np.random.default_rng(0)  # a generator is consumed: successive batches differ
    x, y = task.batch(8, seed=rng), task.batch(8, seed=rng)
    assert x.inputs.shape != y.inputs.shape or not np.array_equal(x.inputs, y.inputs)


@pytest.mark.parametrize("task", [CopyTask(), RepeatCopyTask(), AssociativeRecallTask()], ids=repr)
def test_dtypes(task):
    for dt in (np.float32, np.float64, "float64"):
        b = task.batch(2, seed=0, dtype=dt)
        assert b.inputs.dtype == np.dtype(dt) and b.targets.dtype == np.dtype(dt) and b.mask.dtype == bool
    b32, b64 = task.batch(2, seed=0), task.batch(2, seed=0, dtype=np.float64)  # the same draws in either dtype
    np.testing.assert_array_equal(b64.inputs.astype(np.float32), b32.inputs)
    np.testing.assert_array_equal(b64.targets.astype(np.float32), b32.targets)
    for bad in (np.int64, np.float16, "nope", bool, None):
        with pytest.raises(TypeError, match="dtype"):
            task.batch(2, seed=0, dtype=bad)


def test_repr_and_exports():
    assert repr(CopyTask(3, 2, 7)) == "CopyTask(bits=3, min_len=2, max_len=7)"
    assert repr(RepeatCopyTask()) == "RepeatCopyTask(bits=8, min_len=1, max_len=10, min_repeats=1, max_repeats=10)"
    assert repr(AssociativeRecallTask()) == "AssociativeRecallTask(bits=6, item_len=3, min_items=2, max_items=6)"
    for name in ("NTMBatch", "CopyTask", "RepeatCopyTask", "AssociativeRecallTask", "bits_per_sequence"):
        assert name in datasets.__all__ and hasattr(datasets, name)


# --------------------------------------------------------------------------- bits per sequence


def test_bits_per_sequence_counts_scored_bits_only():
    b = CopyTask(bits=4).batch(5, length=3, seed=2)
    perfect = 2 * b.targets - 1
    assert bits_per_sequence(perfect, b) == 0.0
    flipped = perfect.copy()
    flipped[1, 4, 0] *= -1  # 3 wrong bits on scored steps of row 1
    flipped[1, 5, 2] *= -1
    flipped[1, 6, 3] *= -1
    assert bits_per_sequence(flipped, b) == pytest.approx(3 / 5)
    unscored = perfect.copy()
    unscored[:, :4] = 5.0  # every unscored step wrong, for every row
    assert bits_per_sequence(unscored, b) == 0.0
    assert bits_per_sequence(np.full_like(perfect, -1.0) + 2 * b.targets, b) == 0.0  # logits 1 / -1 same as ±1
    assert bits_per_sequence(-perfect, b) == pytest.approx(3 * 4)  # every scored bit wrong
    assert bits_per_sequence(np.zeros_like(perfect), b) == pytest.approx(b.targets.sum() / 5)  # 0 predicts 0


def test_bits_per_sequence_counts_the_end_marker():
    b = RepeatCopyTask(bits=2).batch(4, length=2, repeats=2, seed=0)
    wrong = 2 * b.targets - 1
    wrong[:, -1, 2] = -1.0  # miss the end marker in every row
    assert bits_per_sequence(wrong, b) == pytest.approx(1.0)


def test_bits_per_sequence_errors():
    b = CopyTask(bits=4).batch(2, length=3, seed=0)
    with pytest.raises(ValueError, match="logits"):
        bits_per_sequence(np.zeros((2, 7, 5)), b)
    with pytest.raises(TypeError, match="batch"):
        bits_per_sequence(np.zeros((2, 7, 4)), (b.inputs, b.targets, b.mask))


# --------------------------------------------------------------------------- argument errors


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: CopyTask(bits=0), "bits"),
        (lambda: CopyTask(bits=2.5), "bits"),
        (lambda: CopyTask(min_len=0), "min_len"),
        (lambda: CopyTask(min_len=5, max_len=4), "max_len"),
        (lambda: RepeatCopyTask(bits=0), "bits"),
        (lambda: RepeatCopyTask(min_len=3, max_len=2), "max_len"),
        (lambda: RepeatCopyTask(min_repeats=0), "min_repeats"),
        (lambda: RepeatCopyTask(min_repeats=4, max_repeats=3), "max_repeats"),
        (lambda: AssociativeRecallTask(bits=0), "bits"),
        (lambda: AssociativeRecallTask(item_len=0), "item_len"),
        (lambda: AssociativeRecallTask(min_items=1), "min_items"),
        (lambda: AssociativeRecallTask(min_items=4, max_items=3), "max_items"),
        (lambda: CopyTask().batch(0), "batch_size"),
        (lambda: CopyTask().batch(True), "batch_size"),
        (lambda: CopyTask().batch(2, length=0), "length"),
        (lambda: RepeatCopyTask().batch(2, length=0), "length"),
        (lambda: RepeatCopyTask().batch(2, repeats=0), "repeats"),
        (lambda: AssociativeRecallTask().batch(2, items=1), "items"),
        (lambda: AssociativeRecallTask().batch(-1), "batch_size"),
        (lambda: CopyTask().batch(2, seed=-1), "seed"),
    ],
)
def test_bad_arguments_raise_value_error(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_bad_seed_type():
    with pytest.raises(TypeError, match="seed"):
        CopyTask().batch(2, seed="0")
    with pytest.raises(TypeError, match="seed"):
        CopyTask().batch(2, seed=1.5)
