"""A seeded one-source classification task for attention attribution (NumPy only).

``CueTask``: a [CLS] token, then ``length`` tokens. One of them is the cue
(a marker token, at a uniformly drawn position that is not the last); the
token right after it, the *source*, is a word of one of ``num_classes``
classes (``words_per_class`` words each), and the sequence's label is that
word's class. Every other token is a word drawn uniformly from all the
classes, so the sequence is full of words of the other classes (the
"attractors" of subject-verb agreement, where the verb's number follows the
subject, not the nouns near the verb): only the position of the cue tells
which word decides. The true source of each label is known (``source``),
which is what Abnar & Zuidema's question needs: does an attribution method
point at the tokens that a classifier reading the [CLS] position uses?

Token ids: ``PAD = 0`` (never drawn: the blank an ablation puts in),
``CLS = 1``, ``CUE = 2``, and class c's word k is ``3 + c *
words_per_class + k``. ``seed`` is an int, ``None`` or a
``np.random.Generator``; the same seed gives the same arrays.

Example
-------
>>> task = attnc.datasets.CueTask(length=8, num_classes=2, words_per_class=3)
>>> b = task.batch(2, seed=0)
>>> b.ids.shape, b.ids[:, 0].tolist(), (b.ids[np.arange(2), b.cue] == task.CUE).all()
((2, 9), [1, 1], np.True_)
>>> bool((b.source == b.cue + 1).all()), (task.class_of(b.ids[np.arange(2), b.source]) == b.labels).all()
(True, np.True_)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._args import size_arg
from .._typing import Array, ArrayLike
from .ntm_tasks import SeedLike, _rng

__all__ = ["CueBatch", "CueTask"]


@dataclass(frozen=True)
class CueBatch:
    """One batch of ``CueTask`` (what its ``batch`` returns).

    Fields
    ------
    ids     (B, 1 + length) int64: CLS, then the tokens
    labels  (B,) int64 in [0, num_classes): the source word's class
    cue     (B,) int64: the cue's position in ids (1 .. length - 1)
    source  (B,) int64: the source word's position in ids (cue + 1)

    Example
    -------
    >>> b = attnc.datasets.CueTask(length=5, words_per_class=2).batch(1, seed=3)
    >>> b.ids.tolist(), b.cue.tolist(), b.source.tolist(), b.labels.tolist(), len(b)
    ([[1, 6, 3, 3, 2, 3]], [4], [5], [0], 1)
    """

    ids: Array
    labels: Array
    cue: Array
    source: Array

    def __len__(self) -> int:
        return self.ids.shape[0]


class CueTask:
    """Classify a sequence by the word after its cue (see the module docstring).

    Parameters
    ----------
    length : int >= 2, the tokens after CLS
    num_classes : int >= 2
    words_per_class : int >= 1

    ``vocab_size`` (PAD, CLS, CUE and the words), ``PAD``, ``CLS``, ``CUE``;
    ``batch(batch_size, seed=None)`` -> ``CueBatch``; ``class_of(ids)`` the
    class of word ids (-1 for PAD, CLS and CUE).

    Example
    -------
    >>> task = attnc.datasets.CueTask(length=6, num_classes=2, words_per_class=2)
    >>> task.vocab_size, task.class_of([0, 1, 2, 3, 4, 5, 6]).tolist()
    (7, [-1, -1, -1, 0, 0, 1, 1])
    """

    PAD, CLS, CUE = 0, 1, 2
    FIRST_WORD = 3

    def __init__(self, length: int = 12, num_classes: int = 2, words_per_class: int = 4):
        self.length = size_arg("length", length, 2)
        self.num_classes = size_arg("num_classes", num_classes, 2)
        self.words_per_class = size_arg("words_per_class", words_per_class, 1)

    @property
    def vocab_size(self) -> int:
        """The number of token ids (PAD, CLS and CUE included)."""
        return self.FIRST_WORD + self.num_classes * self.words_per_class

    def class_of(self, ids: ArrayLike) -> Array:
        """The class of each word id (int64, ids' shape); -1 for PAD, CLS and CUE."""
        ids = np.asarray(ids, np.int64)
        return np.where(ids >= self.FIRST_WORD, (ids - self.FIRST_WORD) // self.words_per_class, -1)

    def batch(self, batch_size: int, seed: SeedLike = None) -> CueBatch:
        """Draw batch_size sequences (vectorised)."""
        B = size_arg("batch_size", batch_size, 1)
        rng = _rng(seed)
        words = self.FIRST_WORD + rng.integers(0, self.num_classes * self.words_per_class, (B, self.length))
        cue = 1 + rng.integers(0, self.length - 1, B)  # in ids, after CLS; never the last token
        ids = np.concatenate([np.full((B, 1), self.CLS), words], axis=1).astype(np.int64)
        rows = np.arange(B)
        ids[rows, cue] = self.CUE
        source = cue + 1
        return CueBatch(ids, self.class_of(ids[rows, source]), cue.astype(np.int64), source.astype(np.int64))
