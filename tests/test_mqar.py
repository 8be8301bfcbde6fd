"""attnc.datasets.mqar_task (multi-query associative recall, Zoology): every
row rebuilt from its keys, values and query positions by a plain loop, the
gap law checked against its definition, seeds, scoring and refusals. NumPy
only, a second."""

import numpy as np
import pytest

from attnc.datasets import IGNORE_INDEX, mqar_task


def rebuilt(task, filler):
    """The rows a plain loop writes from the task's pairs and query positions
    (filler: the task's own non-query tokens, or zeros)."""
    inputs, targets = filler.copy(), np.full_like(filler, IGNORE_INDEX)
    for r in range(len(task)):
        for i, (k, v, q) in enumerate(zip(task.keys[r], task.values[r], task.query_positions[r])):
            inputs[r, 2 * i], inputs[r, 2 * i + 1] = k, v
            inputs[r, q], targets[r, q] = k, v
    return inputs, targets


@pytest.mark.parametrize("random_non_queries", [False, True])
@pytest.mark.parametrize("P, length, vocab", [(1, 4, 4), (2, 12, 10), (4, 33, 64), (8, 64, 8192)])
def test_rows_follow_the_definition(P, length, vocab, random_non_queries):
    task = mqar_task(50, P, length, vocab, random_non_queries=random_non_queries, seed=3)
    assert task.inputs.shape == task.targets.shape == (50, length) and task.inputs.dtype == np.int64
    half = vocab // 2
    assert ((task.keys >= 1) & (task.keys < half)).all() and ((task.values >= half) & (task.values < vocab)).all()
    for r in range(50):  # distinct within a row; queries on even offsets after the pairs, each key once
        assert len(set(task.keys[r])) == P and len(set(task.values[r])) == P
        assert len(set(task.query_positions[r])) == P
    q = task.query_positions
    assert (q >= 2 * P).all() and (q < length).all() and ((q - 2 * P) % 2 == 0).all()
    filler = task.inputs if random_non_queries else np.zeros_like(task.inputs)
    inputs, targets = rebuilt(task, filler)
    np.testing.assert_array_equal(task.inputs, inputs)
    np.testing.assert_array_equal(task.targets, targets)
    if random_non_queries and vocab > 4:  # the filler is random, not zeros
        assert (task.inputs[:, 2 * P :][task.targets[:, 2 * P :] == IGNORE_INDEX] != 0).mean() > 0.5


@pytest.mark.parametrize("power_a", [0.01, 0.5, 1.0])
def test_gaps_follow_the_power_law(power_a):
    # One pair: the gap index g is drawn once, with P(g) = w_g / sum(w), w_g = (g + 1) ** (a - 1).
    length, n = 42, 40000
    task = mqar_task(n, 1, length, 8, power_a=power_a, random_non_queries=False, seed=11)
    g = (task.query_positions[:, 0] - 2) // 2
    space = (length - 2) // 2
    w = np.arange(1, space + 1, dtype=np.float64) ** (power_a - 1)
    p = w / w.sum()
    freq = np.bincount(g, minlength=space) / n
    assert np.abs(freq - p).max() < 4 * np.sqrt(p.max() / n)  # 4 standard errors


def test_two_pairs_drawn_without_replacement_by_weight():
    # Successive draws without replacement: P(second = j | first = i) = p_j / (1 - p_i).
    length, n, a = 10, 60000, 0.3
    task = mqar_task(n, 2, length, 16, power_a=a, random_non_queries=False, seed=5)
    g = (task.query_positions - 4) // 2
    w = np.arange(1, 4, dtype=np.float64) ** (a - 1)
    p = w / w.sum()
    for i in range(3):
        for j in range(3):
            want = 0.0 if i == j else p[i] * p[j] / (1 - p[i])
            got = np.mean((g[:, 0] == i) & (g[:, 1] == j))
            assert abs(got - want) < 4 * np.sqrt(max(want, 1e-4) / n), (i, j, got, want)


def test_seeds_batches_and_accuracy():
    a, b = mqar_task(30, 3, 20, 32, seed=7), mqar_task(30, 3, 20, 32, seed=7)
    np.testing.assert_array_equal(a.inputs, b.inputs)
    assert not np.array_equal(a.inputs, mqar_task(30, 3, 20, 32, seed=8).inputs)
    x, y = a.batch([4, 2])
    np.testing.assert_array_equal(x, a.inputs[[4, 2]])
    np.testing.assert_array_equal(y, a.targets[[4, 2]])
    assert sum(len(x) for x, _ in a.batches(8)) == 30
    perfect = np.where(a.targets == IGNORE_INDEX, 0, a.targets)
    assert a.accuracy(perfect) == 1.0
    half_right = perfect.copy()
    half_right[np.arange(30), a.query_positions[:, 0]] += 1  # one of the three queries wrong per row
    assert a.accuracy(half_right) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="predictions"):
        a.accuracy(perfect[:, :5])
    assert len(mqar_task(0, 2, 8, 8)) == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=-1), "n"),
        (dict(num_kv_pairs=0), "num_kv_pairs"),
        (dict(num_kv_pairs=4, length=15), "length"),
        (dict(num_kv_pairs=4, vocab_size=9), "vocab_size"),
        (dict(power_a=0.0), "power_a"),
        (dict(power_a=1.5), "power_a"),
    ],
)
def test_refusals(kwargs, match):
    args = dict(n=4, num_kv_pairs=2, length=16, vocab_size=16) | kwargs
    with pytest.raises(ValueError, match=match):
        mqar_task(**args)
