"""Multi-query associative recall (MQAR; Arora et al. 2023, *Zoology*),
seeded NumPy only.

A row opens with P key-value pairs, ``k1 v1 k2 v2 ... kP vP``, then every
key comes back once, in a random order, at positions of the rest of the row;
at each such position a causal language model must predict the value bound
to that key (the next token). Everything else is filler (token 0, or random
tokens with ``random_non_queries``) and has no target. Keys are drawn from
``[1, vocab_size // 2)`` and values from ``[vocab_size // 2, vocab_size)``,
distinct within a row.

The query of a key sits 2 g positions after the pairs end, for a gap index g
drawn without replacement from ``0 .. (length - 2 P) // 2 - 1`` with
probability proportional to ``power_a * (g + 1) ** (power_a - 1)``: a power
law that puts most queries soon after the pairs (Zoology's ``power_a=0.01``)
while some wait long. Drawing without replacement by these weights is done
with the Gumbel top-k trick: the P largest of ``log w_g + Gumbel`` are a
sample of successive draws without replacement.
"""

from __future__ import annotations

import numpy as np

from .._typing import Array, ArrayLike
from .sequences import IGNORE_INDEX, _check_int, _TokenRows

__all__ = ["MQARTask", "mqar_task"]


class MQARTask(_TokenRows):
    """Rows of multi-query associative recall (built by :func:`mqar_task`).

    Attributes
    ----------
    inputs          (n, length) int64: the model's idx
    targets         (n, length) int64: at each query position the value bound
                    to the key there, IGNORE_INDEX (-100) elsewhere
    keys, values    (n, P) int64: the pairs, in their order in the row
    query_positions (n, P) int64: where key i of the row is queried
    ``num_kv_pairs = P``, ``length``, ``vocab_size``.
    ``batch(indices)`` -> (inputs (B, length), targets (B, length));
    ``batches(batch_size)`` iterates over such pairs; ``accuracy(predictions)``
    scores predicted next tokens (n, length) at the query positions.

    Example
    -------
    >>> task = attnc.datasets.mqar_task(2, num_kv_pairs=2, length=12, vocab_size=10, random_non_queries=False, seed=0)
    >>> task.inputs[0], task.keys[0], task.values[0]
    (array([4, 8, 3, 5, 4, 0, 3, 0, 0, 0, 0, 0]), array([4, 3]), array([8, 5]))
    >>> task.query_positions[0], task.targets[0, task.query_positions[0]]
    (array([4, 6]), array([8, 5]))
    """

    def __init__(
        self, inputs: Array, targets: Array, keys: Array, values: Array, query_positions: Array, vocab_size: int
    ):
        self.inputs, self.targets = inputs, targets
        self.keys, self.values, self.query_positions = keys, values, query_positions
        self.num_kv_pairs, self.length, self.vocab_size = keys.shape[1], inputs.shape[1], vocab_size

    def accuracy(self, predictions: ArrayLike) -> float:
        """The fraction of queries answered right: predictions (n, length)
        are the predicted next tokens (argmax of the logits), scored at the
        query positions only."""
        pred = np.asarray(predictions)
        if pred.shape != self.inputs.shape:
            raise ValueError(f"predictions must have the inputs' shape {self.inputs.shape}, got {pred.shape}")
        asked = self.targets != IGNORE_INDEX
        return float((pred[asked] == self.targets[asked]).mean()) if asked.any() else float("nan")

    def __repr__(self):
        sizes = f"num_kv_pairs={self.num_kv_pairs}, length={self.length}, vocab_size={self.vocab_size}"
        return f"MQARTask(n={len(self)}, {sizes})"


def _distinct(rng: np.random.Generator, n: int, k: int, low: int, high: int) -> Array:
    """(n, k) int64: k distinct integers of [low, high) per row, uniformly.
    A small range is shuffled whole; from a large one (a vocabulary of
    thousands) rows are drawn with replacement and the few with a repeat
    drawn again, since shuffling n rows of the whole range costs n * range."""
    span = high - low
    if span <= 4 * k:
        return low + np.argsort(rng.random((n, span)), axis=1)[:, :k]
    out = rng.integers(0, span, (n, k))
    while True:
        s = np.sort(out, axis=1)
        again = np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))
        if not again.size:
            return low + out
        out[again] = rng.integers(0, span, (again.size, k))


def mqar_task(
    n: int,
    num_kv_pairs: int = 8,
    length: int = 64,
    vocab_size: int = 8192,
    *,
    power_a: float = 0.01,
    random_non_queries: bool = True,
    seed: int | None = 0,
) -> MQARTask:
    """n rows of multi-query associative recall (Zoology's MQAR).

    Parameters
    ----------
    n : int, the number of rows
    num_kv_pairs : int P >= 1, the pairs per row (each queried once)
    length : int, tokens per row; at least 4 P (the pairs, then room for P
        queries on even offsets)
    vocab_size : int, at least 2 P + 2: keys in [1, vocab_size // 2), values
        in [vocab_size // 2, vocab_size); 0 is the filler
    power_a : float in (0, 1], the power law of the gaps (1: uniform; small:
        most queries right after the pairs)
    random_non_queries : fill the positions that are neither pairs nor queries
        with uniform tokens of [0, vocab_size) instead of 0 (Zoology's default
        for training: the model cannot find the queries by the zeros)
    seed : int or None

    Returns
    -------
    MQARTask with ``inputs`` and ``targets`` (n, length) int64 (a causal
    model's idx and next-token targets, -100 where nothing is asked).

    Example
    -------
    >>> task = attnc.datasets.mqar_task(100, num_kv_pairs=4, length=32, vocab_size=64, seed=1)
    >>> task.inputs.shape, int((task.targets != -100).sum(1).max())
    ((100, 32), 4)
    """
    n = _check_int("n", n, 0)
    P = _check_int("num_kv_pairs", num_kv_pairs, 1)
    length = _check_int("length", length, 1)
    vocab_size = _check_int("vocab_size", vocab_size, 1)
    if length < 4 * P:
        raise ValueError(f"length must be at least 4 * num_kv_pairs = {4 * P} (pairs, then queries), got {length}")
    if vocab_size < 2 * P + 2:
        raise ValueError(f"vocab_size must be at least 2 * num_kv_pairs + 2 = {2 * P + 2} (distinct keys and values)")
    if not 0 < power_a <= 1:
        raise ValueError(f"power_a must be in (0, 1], got {power_a}")
    rng = np.random.default_rng(seed)
    half = vocab_size // 2
    keys, values = _distinct(rng, n, P, 1, half), _distinct(rng, n, P, half, vocab_size)
    space = (length - 2 * P) // 2
    log_w = np.log(power_a) + (power_a - 1) * np.log(np.arange(1, space + 1))
    gumbel = -np.log(-np.log(rng.random((n, space))))
    gaps = np.argsort(-(log_w + gumbel), axis=1, kind="stable")[:, :P]
    query_positions = 2 * P + 2 * gaps
    inputs = rng.integers(0, vocab_size, (n, length)) if random_non_queries else np.zeros((n, length), np.int64)
    inputs[:, 0 : 2 * P : 2], inputs[:, 1 : 2 * P : 2] = keys, values
    targets = np.full((n, length), IGNORE_INDEX, np.int64)
    np.put_along_axis(inputs, query_positions, keys, axis=1)
    np.put_along_axis(targets, query_positions, values, axis=1)
    return MQARTask(inputs, targets, keys, values, query_positions, vocab_size)
