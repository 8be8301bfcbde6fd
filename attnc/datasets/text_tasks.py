"""Two seeded text tasks over small fixed vocabularies (NumPy only).

``MarkerTask`` (attention pooling, Raffel & Ellis 2015; Yang et al. 2016)
    A sequence of ``min_len``..``max_len`` tokens, mostly distractor words,
    with 1..``max_markers`` marker tokens hidden at random positions. Every
    class has its own marker words (class 0 "good great superb", class 1
    "bad awful poor", class 2 "odd weird strange", ...) and all the markers
    of a sequence belong to its class; the distractors are drawn uniformly
    and independently of the label. So the markers are the only evidence, and
    a model that classifies well has to find them. ``marker_mask`` marks
    their positions (for the "attention mass on the markers" check).

``EntailmentTask`` (decomposable attention, Parikh et al. 2016)
    Premise / hypothesis pairs about a scene of 2 or 3 animals, each of one
    colour (distinct animals, distinct colours; 8 colours, 8 animals). The
    premise lists the whole scene ("the red cat and the blue dog and the green
    fox"); the hypothesis names 1 or 2 animals in any order, each "the|a
    [colour] animal", joined by "and" ("a dog and the red cat"). The world's
    rule: the premise describes the scene completely, so

    entailment     E   every named animal is in the scene with its colour (a
                       colour may be left out: "a dog")
    contradiction  Cs  one named animal of the scene gets another animal's
                       colour ("the blue cat" after "the red cat and the blue
                       dog"): every word of the hypothesis occurs in the
                       premise, so only the colour *of the cat* decides
                   Cn  one named animal gets a colour not in the scene
    neutral        N   one named animal is not in the scene (any colour)

    and in every class the other named animal (if any) is told right. Labels
    0 entailment, 1 contradiction, 2 neutral, drawn uniformly (balanced).
    Because of Cs, the words a sentence contains do not decide its label: the
    colour must be bound to its animal and each named animal compared with
    the same animal of the premise. ``split="test"`` builds scenes only of
    the ``HELDOUT_PAIRS`` (colour, animal) combinations, which no sentence of
    ``split="train"`` contains: held-out combinations. ``targets`` of a batch
    give, for each hypothesis animal of the scene and the colour given to it,
    the position of the corresponding premise word (the alignment the
    experiment measures).

Token ids: ``PAD = 0``; words from 1 in the order of the task's ``words``.
``seed`` is an int, ``None`` or a ``np.random.Generator``; the same seed
gives the same arrays.

Example
-------
>>> task = attnc.datasets.MarkerTask()
>>> batch = task.batch(4, seed=0)
>>> batch.ids.shape[0], batch.labels.shape
(4, (4,))
>>> pairs = attnc.datasets.EntailmentTask().batch(8, seed=0)
>>> pairs.premise.shape[0], sorted(set(pairs.labels.tolist())) <= [0, 1, 2]
(8, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .._args import size_arg
from .._typing import Array, ArrayLike
from .ntm_tasks import SeedLike, _rng

__all__ = ["EntailmentBatch", "EntailmentTask", "MarkerBatch", "MarkerTask", "PAD"]

PAD = 0

DISTRACTORS = (
    "the",
    "a",
    "movie",
    "was",
    "and",
    "it",
    "of",
    "plot",
    "actor",
    "scene",
    "film",
    "to",
    "in",
    "story",
    "this",
    "that",
    "with",
    "music",
    "ending",
    "very",
    "quite",
    "long",
    "short",
    "i",
    "we",
    "saw",
    "felt",
    "some",
    "all",
    "part",
    "end",
    "start",
    "cast",
    "set",
    "script",
    "is",
    "on",
    "for",
    "at",
    "by",
)
MARKERS = (
    ("good", "great", "superb"),
    ("bad", "awful", "poor"),
    ("odd", "weird", "strange"),
    ("funny", "witty", "comic"),
)


@dataclass(frozen=True)
class MarkerBatch:
    """One batch of ``MarkerTask`` (what its ``batch`` returns).

    Fields
    ------
    ids          (B, T) int64 word ids, padded with PAD (0); T the longest row
    lengths      (B,) int64
    mask         (B, T) bool, True at real tokens (attnc's convention, not torch's)
    labels       (B,) int64 in [0, num_classes)
    marker_mask  (B, T) bool, True at the marker tokens

    Example
    -------
    >>> task = attnc.datasets.MarkerTask(num_classes=2, min_len=5, max_len=8, max_markers=2)
    >>> b = task.batch(2, seed=0)
    >>> b.ids.shape, b.ids.dtype, b.lengths.tolist(), b.labels.tolist()
    ((2, 7), dtype('int64'), [7, 6], [1, 1])
    >>> [w for w, m in zip(task.decode(b.ids[0]), b.marker_mask[0]) if m]
    ['awful', 'awful']
    """

    ids: Array
    lengths: Array
    mask: Array
    labels: Array
    marker_mask: Array

    def __len__(self) -> int:
        return self.ids.shape[0]


class MarkerTask:
    """Classify a sequence by the marker words hidden in it (see the module docstring).

    Parameters
    ----------
    num_classes : int, 2..4
    min_len, max_len : int, the range of sequence lengths
    max_markers : int, 1..max_markers markers per sequence (all of the
        label's class, at distinct random positions; <= min_len)

    ``words`` (PAD "<pad>" first), ``vocab_size``; ``batch(batch_size,
    seed=None)`` -> ``MarkerBatch`` (ids (B, T) int64, labels (B,) int64);
    ``decode(ids)`` the words of one row.

    Example
    -------
    >>> task = attnc.datasets.MarkerTask(num_classes=2, min_len=5, max_len=8, max_markers=2)
    >>> b = task.batch(2, seed=0)
    >>> task.vocab_size, b.ids.shape, b.labels.dtype
    (47, (2, 7), dtype('int64'))
    >>> task.decode(b.ids[0])
    ['in', 'awful', 'was', 'awful', 'plot', 'cast', 'saw']
    """

    def __init__(self, num_classes: int = 3, min_len: int = 20, max_len: int = 50, max_markers: int = 3):
        self.num_classes = size_arg("num_classes", num_classes, 2)
        if num_classes > len(MARKERS):
            raise ValueError(f"num_classes must be <= {len(MARKERS)}, got {num_classes}")
        self.min_len = size_arg("min_len", min_len, 1)
        self.max_len = size_arg("max_len", max_len, 1)
        if self.max_len < self.min_len:
            raise ValueError(f"max_len ({max_len}) must be >= min_len ({min_len})")
        self.max_markers = size_arg("max_markers", max_markers, 1)
        if self.max_markers > self.min_len:
            raise ValueError(f"max_markers ({max_markers}) must be <= min_len ({min_len})")
        self.markers = MARKERS[: self.num_classes]
        self.words = ("<pad>",) + DISTRACTORS + tuple(w for m in self.markers for w in m)
        self.index = {w: i for i, w in enumerate(self.words)}
        self._distractor_ids = np.arange(1, 1 + len(DISTRACTORS))
        self._marker_ids = np.array([[self.index[w] for w in m] for m in self.markers])

    @property
    def vocab_size(self) -> int:
        """The number of word ids (PAD included)."""
        return len(self.words)

    def batch(self, batch_size: int, seed: SeedLike = None) -> MarkerBatch:
        """Draw batch_size sequences (vectorised)."""
        B = size_arg("batch_size", batch_size, 1)
        rng = _rng(seed)
        labels = rng.integers(0, self.num_classes, B)
        lengths = rng.integers(self.min_len, self.max_len + 1, B)
        T = int(lengths.max())
        ids = rng.choice(self._distractor_ids, (B, T))
        real = np.arange(T)[None, :] < lengths[:, None]
        counts = rng.integers(1, self.max_markers + 1, B)
        # distinct marker positions: the `count` smallest of random keys over the real positions
        keys = np.where(real, rng.random((B, T)), np.inf)
        rank = np.argsort(np.argsort(keys, axis=1), axis=1)
        marker = rank < counts[:, None]
        which = rng.integers(0, self._marker_ids.shape[1], (B, T))
        ids = np.where(marker, self._marker_ids[labels[:, None], which], ids)
        ids = np.where(real, ids, PAD).astype(np.int64)
        return MarkerBatch(ids, lengths.astype(np.int64), real, labels.astype(np.int64), marker)

    def decode(self, ids: ArrayLike) -> list[str]:
        """The words of one row of ids (padding dropped)."""
        return [self.words[i] for i in np.asarray(ids).tolist() if i != PAD]


COLOURS = ("red", "blue", "green", "black", "white", "brown", "grey", "yellow")
ANIMALS = ("cat", "dog", "bird", "horse", "mouse", "rabbit", "fox", "cow")
ARTICLES = ("the", "a", "and")
# (colour, animal) pairs only the test split uses: one per animal, each colour once
HELDOUT_PAIRS = tuple((COLOURS[i], ANIMALS[(3 * i + 1) % len(ANIMALS)]) for i in range(len(COLOURS)))
ENTAILMENT, CONTRADICTION, NEUTRAL = 0, 1, 2
LABELS = ("entailment", "contradiction", "neutral")


@dataclass(frozen=True)
class EntailmentBatch:
    """One batch of ``EntailmentTask`` (what its ``batch`` returns).

    Fields
    ------
    premise             (B, La) int64 word ids, padded with PAD (0)
    hypothesis          (B, Lb) int64 word ids, padded with PAD
    premise_lengths     (B,) int64
    hypothesis_lengths  (B,) int64
    labels              (B,) int64: 0 entailment, 1 contradiction, 2 neutral
    templates           B (premise, hypothesis) template names: "P2"/"P3";
                        "E", "Cs", "Cn" or "N" followed by the number of
                        animals the hypothesis names
    targets             (B, Lb) int64: for each hypothesis word the world
                        compares with a premise word (an animal of the scene,
                        and the colour given to it, right or wrong) the
                        position of that premise word (the animal; the
                        animal's colour), else -1 (articles, "and", padding,
                        the animal not in the scene and its colour)

    Example
    -------
    >>> task = attnc.datasets.EntailmentTask()
    >>> b = task.batch(2, seed=0)
    >>> b.premise.shape, b.hypothesis.shape, b.labels.tolist(), b.templates
    ((2, 7), (2, 3), [2, 0], (('P2', 'N1'), ('P2', 'E1')))
    >>> task.decode(b.premise[1]), task.decode(b.hypothesis[1]), b.targets[1].tolist()
    (['the', 'black', 'cat', 'and', 'the', 'green', 'bird'], ['a', 'black', 'cat'], [-1, 1, 2])
    """

    premise: Array
    hypothesis: Array
    premise_lengths: Array
    hypothesis_lengths: Array
    labels: Array
    templates: tuple[tuple[str, str], ...]
    targets: Array

    def __len__(self) -> int:
        return self.premise.shape[0]


def _pick(rng: np.random.Generator, values, exclude=()):
    options = [v for v in values if v not in exclude]
    return options[int(rng.integers(len(options)))]


class EntailmentTask:
    """Premise / hypothesis pairs about a scene of coloured animals (see the
    module docstring). No arguments: the words (PAD, articles, 8 colours, 8
    animals) and labels are fixed.

    ``sample(rng, split)`` gives one pair as strings; ``batch(batch_size,
    seed, split)`` an ``EntailmentBatch`` of token ids (premise (B, La) and
    hypothesis (B, Lb) int64, labels (B,) int64); ``encode(sentence)`` ->
    (L,) int64; ``decode(ids)`` -> words; ``vocab_size``; ``labels`` the
    class names.

    Example
    -------
    >>> task = attnc.datasets.EntailmentTask()
    >>> premise, hypothesis, label, names, targets = task.sample(np.random.default_rng(0))
    >>> len(targets) == len(hypothesis.split()), task.labels[label] in task.labels
    (True, True)
    >>> b = task.batch(16, seed=0, split="test")
    >>> b.targets.shape == b.hypothesis.shape
    True
    """

    def __init__(self):
        self.words = ("<pad>",) + ARTICLES + COLOURS + ANIMALS
        self.index = {w: i for i, w in enumerate(self.words)}
        self.labels = LABELS

    @property
    def vocab_size(self) -> int:
        """The number of word ids (PAD included)."""
        return len(self.words)

    def encode(self, sentence: str) -> Array:
        """(L,) int64 ids of a sentence's words."""
        return np.array([self.index[w] for w in sentence.split()], np.int64)

    def decode(self, ids: ArrayLike) -> list[str]:
        """The words of one row of ids (padding dropped)."""
        return [self.words[i] for i in np.asarray(ids).tolist() if i != PAD]

    def _scene(self, rng: np.random.Generator, split: str) -> list[tuple[str, str]]:
        n = 2 + int(rng.random() < 0.5)
        if split == "test":
            return [HELDOUT_PAIRS[i] for i in rng.choice(len(HELDOUT_PAIRS), n, replace=False)]
        while True:
            scene = list(
                zip(
                    (COLOURS[i] for i in rng.choice(len(COLOURS), n, replace=False)),
                    (ANIMALS[i] for i in rng.choice(len(ANIMALS), n, replace=False)),
                )
            )
            if not set(scene) & set(HELDOUT_PAIRS):
                return scene

    def sample(
        self, rng: np.random.Generator, split: Literal["train", "test"] = "train"
    ) -> tuple[str, str, int, tuple[str, str], list[int]]:
        """(premise, hypothesis, label, (premise template, hypothesis template),
        targets (a list, one per hypothesis word: see EntailmentBatch))."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        while True:
            scene = self._scene(rng, split)
            n = len(scene)
            label = int(rng.integers(3))
            kind = {ENTAILMENT: "E", NEUTRAL: "N"}.get(label, "Cs" if rng.random() < 0.5 else "Cn")
            k = 1 + int(rng.random() < 0.5)  # animals named by the hypothesis
            named = [int(i) for i in rng.choice(n, k, replace=False)]
            # (colour or None, animal, scene index)
            mention: list[tuple[str | None, str, int]] = [(scene[i][0], scene[i][1], i) for i in named]
            changed = int(rng.integers(k))
            c, a, i = mention[changed]
            if kind == "Cs":
                mention[changed] = (scene[_pick(rng, range(n), (i,))][0], a, i)
            elif kind == "Cn":
                mention[changed] = (_pick(rng, COLOURS, [s[0] for s in scene]), a, i)
            elif kind == "N":
                mention[changed] = (_pick(rng, COLOURS), _pick(rng, ANIMALS, [s[1] for s in scene]), -1)
            # an entailed or neutral mention may leave the colour out; a contradicted one keeps it
            mention = [
                (None if (kind == "E" or m != changed) and rng.random() < 0.3 else col, an, si)
                for m, (col, an, si) in enumerate(mention)
            ]
            if split == "test" or not {(col, an) for col, an, _ in mention} & set(HELDOUT_PAIRS):
                break
        premise = " and ".join(f"the {col} {an}" for col, an in scene)
        words, targets = [], []
        for m, (col, an, si) in enumerate(mention):
            words += (["and"] if m else []) + [("the", "a")[int(rng.integers(2))]]
            targets += [-1] * (2 if m else 1)
            if col is not None:
                words.append(col)
                targets.append(4 * si + 1 if si >= 0 else -1)
            words.append(an)
            targets.append(4 * si + 2 if si >= 0 else -1)
        return premise, " ".join(words), label, (f"P{n}", f"{kind}{k}"), targets

    def batch(
        self, batch_size: int, seed: SeedLike = None, split: Literal["train", "test"] = "train"
    ) -> EntailmentBatch:
        """Draw batch_size pairs ("train": no held-out combination anywhere;
        "test": scenes made only of HELDOUT_PAIRS)."""
        B = size_arg("batch_size", batch_size, 1)
        rng = _rng(seed)
        rows = [self.sample(rng, split) for _ in range(B)]
        prem = [self.encode(r[0]) for r in rows]
        hyp = [self.encode(r[1]) for r in rows]
        return EntailmentBatch(
            _pad(prem),
            _pad(hyp),
            np.array([len(p) for p in prem], np.int64),
            np.array([len(h) for h in hyp], np.int64),
            np.array([r[2] for r in rows], np.int64),
            tuple(r[3] for r in rows),
            _pad([np.array(r[4], np.int64) for r in rows], -1),
        )


def _pad(seqs: list[Array], fill: int = PAD) -> Array:
    out = np.full((len(seqs), max(len(s) for s in seqs)), fill, np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out
