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
    Premise / hypothesis pairs built from templates over a small world of
    animals, colours, relations, locations, sizes and activities. Convention
    of the world: a premise describes a whole scene with exactly one animal
    in exactly one place, so a hypothesis that gives that animal another
    colour, relation, location or location size contradicts it. Templates
    ({c} colour, {a} animal, {r} relation, {l} location, {s} size, {v}
    activity; a primed slot is a different value of the same kind):

    premise      P1  the {c} {a} is {r} the {l}
                 P2  the {c} {a} is {r} the {s} {l}
    entailment   E1  a {a} is {r} the {l}
                 E2  the {c} {a} is {r} the {l}
                 E3  the {a} is {r} a {l}
                 E4  a {c} {a} is {r} a {l}
                 E5  the {a} is {r} the {s} {l}          (P2 only)
    contradiction C1 the {c'} {a} is {r} the {l}
                 C2  the {a} is {r'} the {l}
                 C3  a {c} {a} is {r} the {l'}
                 C4  the {a} is {r} the {s'} {l}         (P2 only)
    neutral      N1  the {c} {a} {v}
                 N2  a {a} {v} {r} the {l}
                 N3  the {a} is {r} the {s} {l}          (P1 only: the size is new)

    Labels: 0 entailment, 1 contradiction, 2 neutral, drawn uniformly (the
    three classes are balanced); the template within a class uniformly among
    those that apply to the premise's form. ``split="test"`` draws scenes
    whose (colour, animal) pair is one of the ``HELDOUT_PAIRS`` that
    ``split="train"`` never uses: held-out combinations.

Token ids: ``PAD = 0``; words from 1 in the order of the task's ``words``.
``seed`` is an int, ``None`` or a ``np.random.Generator``; the same seed
gives the same arrays.

Example
-------
>>> task = MarkerTask()
>>> batch = task.batch(4, seed=0)
>>> batch.ids.shape[0], batch.labels.shape
(4, (4,))
>>> pairs = EntailmentTask().batch(8, seed=0)
>>> pairs.premise.shape[0], sorted(set(pairs.labels.tolist())) <= [0, 1, 2]
(8, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._args import size_arg
from .ntm_tasks import _rng

__all__ = ["EntailmentBatch", "EntailmentTask", "MarkerBatch", "MarkerTask", "PAD"]

PAD = 0

DISTRACTORS = ("the", "a", "movie", "was", "and", "it", "of", "plot", "actor", "scene", "film", "to", "in", "story",
               "this", "that", "with", "music", "ending", "very", "quite", "long", "short", "i", "we", "saw", "felt",
               "some", "all", "part", "end", "start", "cast", "set", "script", "is", "on", "for", "at", "by")
MARKERS = (("good", "great", "superb"), ("bad", "awful", "poor"), ("odd", "weird", "strange"),
           ("funny", "witty", "comic"))


@dataclass(frozen=True)
class MarkerBatch:
    """ids (B, T) int64 padded with PAD; lengths (B,) int64; mask (B, T) bool,
    True at real tokens (attnc's convention); labels (B,) int64;
    marker_mask (B, T) bool, True at the marker tokens."""

    ids: np.ndarray
    lengths: np.ndarray
    mask: np.ndarray
    labels: np.ndarray
    marker_mask: np.ndarray

    def __len__(self):
        return self.ids.shape[0]


class MarkerTask:
    """Classify a sequence by the marker words hidden in it (see the module docstring).

    num_classes 2..4; lengths in [min_len, max_len]; 1..max_markers markers
    (all of the label's class, at distinct random positions)."""

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
        return len(self.words)

    def batch(self, batch_size: int, seed=None) -> MarkerBatch:
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

    def decode(self, ids) -> list:
        """The words of one row of ids (padding dropped)."""
        return [self.words[i] for i in np.asarray(ids).tolist() if i != PAD]


COLOURS = ("red", "blue", "green", "black", "white", "brown", "grey", "yellow")
ANIMALS = ("cat", "dog", "bird", "horse", "mouse", "rabbit", "fox", "cow")
RELATIONS = ("on", "under", "behind", "beside")
LOCATIONS = ("mat", "table", "bed", "box", "chair", "sofa", "rug", "car")
SIZES = ("big", "small")
ACTIVITIES = ("sleeps", "eats", "plays", "hides", "waits")
ARTICLES = ("the", "a", "is")
# (colour, animal) pairs only the test split uses: one per animal, each colour once
HELDOUT_PAIRS = tuple((COLOURS[i], ANIMALS[(3 * i + 1) % len(ANIMALS)]) for i in range(len(COLOURS)))
ENTAILMENT, CONTRADICTION, NEUTRAL = 0, 1, 2
LABELS = ("entailment", "contradiction", "neutral")

# Templates: class -> [(name, form the premise must have (None: any), words)]
TEMPLATES = {
    ENTAILMENT: [("E1", None, "a {a} is {r} the {l}"), ("E2", None, "the {c} {a} is {r} the {l}"),
                 ("E3", None, "the {a} is {r} a {l}"), ("E4", None, "a {c} {a} is {r} a {l}"),
                 ("E5", "P2", "the {a} is {r} the {s} {l}")],
    CONTRADICTION: [("C1", None, "the {c2} {a} is {r} the {l}"), ("C2", None, "the {a} is {r2} the {l}"),
                    ("C3", None, "a {c} {a} is {r} the {l2}"), ("C4", "P2", "the {a} is {r} the {s2} {l}")],
    NEUTRAL: [("N1", None, "the {c} {a} {v}"), ("N2", None, "a {a} {v} {r} the {l}"),
              ("N3", "P1", "the {a} is {r} the {s} {l}")],
}
PREMISES = {"P1": "the {c} {a} is {r} the {l}", "P2": "the {c} {a} is {r} the {s} {l}"}


@dataclass(frozen=True)
class EntailmentBatch:
    """premise (B, La) and hypothesis (B, Lb) int64 padded with PAD;
    premise_lengths, hypothesis_lengths (B,) int64; labels (B,) int64 (0
    entailment, 1 contradiction, 2 neutral); templates: the (premise,
    hypothesis) template names of each pair."""

    premise: np.ndarray
    hypothesis: np.ndarray
    premise_lengths: np.ndarray
    hypothesis_lengths: np.ndarray
    labels: np.ndarray
    templates: tuple

    def __len__(self):
        return self.premise.shape[0]


def _other(rng, values, value):
    i = int(rng.integers(0, len(values) - 1))
    j = values.index(value)
    return values[i if i < j else i + 1]


class EntailmentTask:
    """Premise / hypothesis pairs from templates (see the module docstring)."""

    def __init__(self):
        self.words = ("<pad>",) + ARTICLES + COLOURS + ANIMALS + RELATIONS + LOCATIONS + SIZES + ACTIVITIES
        self.index = {w: i for i, w in enumerate(self.words)}
        self.labels = LABELS

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, sentence: str) -> np.ndarray:
        return np.array([self.index[w] for w in sentence.split()], np.int64)

    def decode(self, ids) -> list:
        return [self.words[i] for i in np.asarray(ids).tolist() if i != PAD]

    def sample(self, rng, split="train"):
        """(premise, hypothesis, label, (premise template, hypothesis template)) as strings."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        while True:
            c, a = COLOURS[rng.integers(len(COLOURS))], ANIMALS[rng.integers(len(ANIMALS))]
            if ((c, a) in HELDOUT_PAIRS) == (split == "test"):
                break
        slots = dict(c=c, a=a, r=RELATIONS[rng.integers(len(RELATIONS))], l=LOCATIONS[rng.integers(len(LOCATIONS))],
                     s=SIZES[rng.integers(len(SIZES))], v=ACTIVITIES[rng.integers(len(ACTIVITIES))])
        slots.update(c2=_other(rng, COLOURS, c), r2=_other(rng, RELATIONS, slots["r"]),
                     l2=_other(rng, LOCATIONS, slots["l"]), s2=_other(rng, SIZES, slots["s"]))
        form = "P1" if rng.random() < 0.5 else "P2"
        label = int(rng.integers(3))
        options = [t for t in TEMPLATES[label] if t[1] in (None, form)]
        name, _, words = options[rng.integers(len(options))]
        return PREMISES[form].format(**slots), words.format(**slots), label, (form, name)

    def batch(self, batch_size: int, seed=None, split="train") -> EntailmentBatch:
        B = size_arg("batch_size", batch_size, 1)
        rng = _rng(seed)
        rows = [self.sample(rng, split) for _ in range(B)]
        prem = [self.encode(p) for p, _, _, _ in rows]
        hyp = [self.encode(h) for _, h, _, _ in rows]
        return EntailmentBatch(_pad(prem), _pad(hyp), np.array([len(p) for p in prem], np.int64),
                               np.array([len(h) for h in hyp], np.int64),
                               np.array([r[2] for r in rows], np.int64), tuple(r[3] for r in rows))


def _pad(seqs) -> np.ndarray:
    out = np.full((len(seqs), max(len(s) for s in seqs)), PAD, np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out
