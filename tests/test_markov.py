"""attnc.datasets.markov_task (text of a random Markov chain of order k):
the sampled tokens follow the chain's table, the true log-probabilities
recomputed by a loop, the splits share one chain, seeds, refusals. NumPy
only, a few seconds."""

import numpy as np
import pytest

from attnc.datasets import markov_task


def context(window, V):
    c = 0
    for t in window:  # oldest first
        c = c * V + int(t)
    return c


@pytest.mark.parametrize("V, k, length", [(2, 1, 1), (3, 2, 9), (5, 3, 20), (4, 2, 2)])
def test_log_probs_and_shift_by_a_loop(V, k, length):
    task = markov_task(20, length, V, k, seed=4)
    assert task.inputs.shape == task.targets.shape == task.log_probs.shape == (20, length)
    np.testing.assert_array_equal(task.inputs[:, 1:], task.targets[:, :-1])
    seq = np.concatenate([task.inputs, task.targets[:, -1:]], axis=1)
    for r in range(20):
        for t in range(length):  # target t is token t + 1
            if t + 1 < k:
                assert np.isnan(task.log_probs[r, t])
            else:
                want = np.log(task.transition[context(seq[r, t + 1 - k : t + 1], V), seq[r, t + 1]])
                assert task.log_probs[r, t] == want
    finite = task.log_probs[~np.isnan(task.log_probs)]
    if finite.size:
        assert task.optimal_loss() == pytest.approx(-finite.mean(), rel=1e-15)


def test_tokens_follow_the_table():
    # Order 2 over 3 tokens: the empirical next-token frequencies of each context against its row.
    task = markov_task(4000, 60, 3, 2, concentration=1.0, seed=1)
    seq = np.concatenate([task.inputs, task.targets[:, -1:]], axis=1)
    ctx = seq[:, :-2] * 3 + seq[:, 1:-1]
    nxt = seq[:, 2:]
    np.testing.assert_allclose(task.transition.sum(axis=1), 1, atol=1e-12)
    for c in range(9):
        seen = nxt[ctx == c]
        freq = np.bincount(seen, minlength=3) / seen.size
        assert np.abs(freq - task.transition[c]).max() < 5 * np.sqrt(0.25 / seen.size), c
    first = np.bincount(seq[:, :2].ravel(), minlength=3) / seq[:, :2].size  # uniform start
    assert np.abs(first - 1 / 3).max() < 0.02


def test_the_true_chain_beats_any_other_and_splits_share_it():
    train, test = markov_task(50, 32, seed=1), markov_task(30, 128, seed=2)
    np.testing.assert_array_equal(train.transition, test.transition)
    assert not np.array_equal(markov_task(5, 8, seed=1, chain_seed=1).transition, train.transition)
    np.testing.assert_array_equal(markov_task(50, 32, seed=1).inputs, train.inputs)
    # another chain's table scores the same held-out tokens worse on average
    other = markov_task(1, 1, chain_seed=9).transition
    seq = np.concatenate([test.inputs, test.targets[:, -1:]], axis=1)
    ctx = seq[:, :-2] * 32 + seq[:, 1:-1]
    assert -np.log(other[ctx, seq[:, 2:]]).mean() > test.optimal_loss()
    per_position = test.optimal_loss([1, 64, 127])
    assert per_position.shape == (3,) and np.allclose(per_position, -test.log_probs[:, [1, 64, 127]].mean(0))
    with pytest.raises(ValueError, match="positions"):
        test.optimal_loss([0])
    x, y = test.batch([3, 1])
    np.testing.assert_array_equal(x, test.inputs[[3, 1]])
    assert sum(len(x) for x, _ in test.batches(7)) == 30
    assert markov_task(0, 8).inputs.shape == (0, 8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n=-1), "n"),
        (dict(length=0), "length"),
        (dict(vocab_size=1), "vocab_size"),
        (dict(order=0), "order"),
        (dict(vocab_size=64, order=5), "contexts"),
        (dict(concentration=0.0), "concentration"),
        (dict(concentration=float("nan")), "concentration"),
    ],
)
def test_refusals(kwargs, match):
    args = dict(n=2, length=8) | kwargs
    with pytest.raises(ValueError, match=match):
        markov_task(**args)
