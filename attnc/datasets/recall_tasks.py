"""Key–value recall: a task where reading an earlier position helps (the
intra-attention experiment ``lstmn_recall``), seeded NumPy only.

A row is n steps each showing one (key, value) pair (distinct keys within a
row), then a query step naming one of the row's keys; the answer is that
key's value. Reading the step of the queried key solves it in one hop; a
model that must carry every pair in a fixed-size state has to memorise n
associations.

Each step is two token ids, ``tokens[..., 0]`` and ``tokens[..., 1]``:
channel 0 is 0 (padding), a key 1..K (pair steps) or a query K+1..2K (the
query of key k is K + k: its own token, so a model knows the step that
asks); channel 1 is 0 (padding, and the query step's missing value) or a
value 1..V. Rows draw n uniformly in [min_pairs, max_pairs] and are
left-aligned and padded with zeros to the batch's longest row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._typing import Array, ArrayLike
from .ntm_tasks import SeedLike, _rng
from .sequences import _check_int

__all__ = ["KeyValueRecallTask", "RecallBatch"]


@dataclass(frozen=True)
class RecallBatch:
    """One batch of key–value recall (what ``KeyValueRecallTask.batch`` returns).

    Fields
    ------
    tokens         (B, T, 2) int64: (key or query, value) ids per step, 0 after each row's length
    lengths        (B,) int64: n + 1 per row (the query is the last step)
    targets        (B,) int64 in [0, V): the queried key's value (class index)
    key_positions  (B,) int64: the step of the queried key's pair

    Example
    -------
    >>> task = attnc.datasets.KeyValueRecallTask(num_keys=4, num_values=3, min_pairs=2, max_pairs=2)
    >>> b = task.batch(2, seed=0)
    >>> b.tokens[0].tolist(), b.targets.tolist(), b.key_positions.tolist()
    ([[4, 2], [3, 2], [7, 0]], [1, 1], [1, 0])
    """

    tokens: Array
    lengths: Array
    targets: Array
    key_positions: Array

    def __len__(self) -> int:
        return self.tokens.shape[0]


class KeyValueRecallTask:
    """Key–value recall over ``num_keys`` keys and ``num_values`` values,
    ``min_pairs``..``max_pairs`` pairs a row (see the module docstring).

    Parameters
    ----------
    num_keys : int, K (keys 1..K, queries K+1..2K in channel 0); >= max_pairs
    num_values : int, V (values 1..V in channel 1; V classes)
    min_pairs, max_pairs : int, the range of pairs per row

    ``batch(batch_size, seed=None)`` -> ``RecallBatch`` (tokens (B, T, 2)
    int64, targets (B,) int64); ``vocab_sizes`` = (2K + 1, V + 1), the two
    channels' embedding sizes; ``num_classes`` = V; ``step_labels(tokens)``
    names the steps of one row.

    Example
    -------
    >>> task = attnc.datasets.KeyValueRecallTask(num_keys=8, num_values=4, min_pairs=2, max_pairs=3)
    >>> b = task.batch(2, seed=0)
    >>> b.tokens.shape[-1], b.tokens.dtype, task.vocab_sizes, task.num_classes
    (2, dtype('int64'), (17, 5), 4)
    >>> task.step_labels(np.array([[4, 2], [3, 2], [15, 0]]))
    ['k3:v1', 'k2:v1', 'k6?']
    """

    def __init__(self, num_keys: int = 16, num_values: int = 16, min_pairs: int = 4, max_pairs: int = 8):
        self.num_keys = _check_int("num_keys", num_keys, 1)
        self.num_values = _check_int("num_values", num_values, 1)
        self.min_pairs = _check_int("min_pairs", min_pairs, 1)
        self.max_pairs = _check_int("max_pairs", max_pairs, self.min_pairs)
        if self.num_keys < self.max_pairs:
            raise ValueError(f"num_keys ({num_keys}) must be >= max_pairs ({max_pairs}): keys are distinct in a row")

    @property
    def vocab_sizes(self) -> tuple[int, int]:
        """(channel 0's vocabulary 2K + 1, channel 1's V + 1)."""
        return 2 * self.num_keys + 1, self.num_values + 1

    @property
    def num_classes(self) -> int:
        """V, the number of values (the classifier's outputs)."""
        return self.num_values

    def batch(self, batch_size: int, *, seed: SeedLike = None) -> RecallBatch:
        """batch_size rows (see RecallBatch); the same seed gives the same batch."""
        B = _check_int("batch_size", batch_size, 1)
        rng = _rng(seed)
        K, V, P = self.num_keys, self.num_values, self.max_pairs
        n = rng.integers(self.min_pairs, P + 1, B)
        T = int(n.max()) + 1
        keys = np.argsort(rng.random((B, K)), axis=1)[:, :P]  # distinct keys per row, 0-based
        values = rng.integers(0, V, (B, P))
        which = np.minimum((rng.random(B) * n).astype(np.int64), n - 1)  # the queried pair, uniform in [0, n)
        live = np.arange(P)[None, :] < n[:, None]
        tokens = np.zeros((B, T, 2), np.int64)
        tokens[:, : T - 1, 0] = np.where(live, keys + 1, 0)[:, : T - 1]
        tokens[:, : T - 1, 1] = np.where(live, values + 1, 0)[:, : T - 1]
        rows = np.arange(B)
        tokens[rows, n, 0] = K + 1 + keys[rows, which]
        return RecallBatch(
            tokens=tokens,
            lengths=(n + 1).astype(np.int64),
            targets=values[rows, which].astype(np.int64),
            key_positions=which.astype(np.int64),
        )

    def step_labels(self, tokens: ArrayLike) -> list[str]:
        """Labels of one row's steps (tokens (T, 2), padding dropped): "k3:v7"
        for a pair (0-based key and value), "k3?" for the query; what a plot
        of the intra-attention matrix puts on its axes."""
        t = np.asarray(tokens)
        if t.ndim != 2 or t.shape[1] != 2:
            raise ValueError(f"tokens must be one row (T, 2), got shape {t.shape}")
        K, out = self.num_keys, []
        for key, value in t:
            if key == 0:
                break
            out.append(f"k{key - 1}:v{value - 1}" if key <= K else f"k{key - K - 1}?")
        return out

    def __repr__(self) -> str:
        return (
            f"KeyValueRecallTask(num_keys={self.num_keys}, num_values={self.num_values}, "
            f"min_pairs={self.min_pairs}, max_pairs={self.max_pairs})"
        )
