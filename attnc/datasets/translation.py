"""A synthetic translation task with long sentences and reordering, for the
length curves of Bahdanau et al. (2015, Figure 2): seeded, Python and NumPy
only.

The source language is a small English: a sentence is one or more clauses
joined by "and", "but" or "while" and closed by "."; a clause is a subject
noun phrase, a verb, an object noun phrase and, sometimes, a prepositional
phrase; a noun phrase is a determiner, up to two adjectives and a noun::

    the big dog sees a red bird near this old house .

The target language has its own words (a fixed, seeded lexicon of made-up
words, one for each source word: copying is no help) and its own order:
verb last (subject, object, prepositional phrase, verb), postpositions, and
noun phrases backwards (noun, adjectives in reverse, determiner)::

    dog' big' the' bird' red' a' house' old' this' near' sees' .

so every word moves, some by a whole clause. Source and target have the
same length (one word for one word). Sentences are drawn with 1 to
``max_len // 8`` clauses and kept when their length is in [min_len,
max_len]; a sentence belongs to the "test" split when the blake2b hash of
its source is 0 mod 4, so the splits never share a sentence.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator
from typing import Literal

import numpy as np

from .._typing import Array, ArrayLike
from .sequences import _batches, _check_int, _exact_match
from .vocab import TextBatch, Vocab

__all__ = ["TranslationTask", "translation_split", "translation_task"]

# The source language's words, by part of speech.
_WORDS = {
    "noun": "cat dog bird fish horse cow sheep goat mouse lion tiger bear wolf fox rabbit duck frog snake king "
    "queen child farmer doctor teacher baker sailor soldier painter river house garden forest city village bridge "
    "road tree stone apple bread letter book song boat window door table chair",
    "adjective": "big small old young red green blue black white happy sad quick slow tall short brave",
    "verb": "sees likes finds takes helps follows watches calls meets carries paints builds feeds visits hears loves",
    "determiner": "the a this",
    "preposition": "near behind under above beside with",
    "conjunction": "and but while",
}
NOUNS, ADJECTIVES, VERBS, DETERMINERS, PREPOSITIONS, CONJUNCTIONS = (words.split() for words in _WORDS.values())
SOURCE_WORDS = NOUNS + ADJECTIVES + VERBS + DETERMINERS + PREPOSITIONS + CONJUNCTIONS

_ONSETS, _VOWELS = "bdfgklmnprstvz", "aeiou"  # made-up words: syllables of one consonant, one vowel


def _lexicon() -> dict[str, str]:
    """source word -> target word: made-up words of 2 or 3 syllables, distinct,
    drawn once from a fixed seed (the same language for every task)."""
    rng = np.random.default_rng(20150901)
    made: list[str] = []
    while len(made) < len(SOURCE_WORDS):
        n = int(rng.integers(2, 4))
        word = "".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))] for _ in range(n))
        if word not in made:
            made.append(word)
    return dict(zip(SOURCE_WORDS, made))


LEXICON = _lexicon()
SOURCE_VOCAB = Vocab.words(SOURCE_WORDS + ["."], unk=False)
TARGET_VOCAB = Vocab.words(list(LEXICON.values()) + ["."], unk=False)


def translation_split(source: str) -> Literal["train", "test"]:
    """ "test" or "train" for a source sentence, by a stable hash: blake2b of
    its UTF-8 bytes (an 8-byte digest read as a little-endian int), "test"
    when 0 mod 4.

    Example
    -------
    >>> attnc.datasets.translation_split("the dog sees a cat .")
    'test'
    """
    h = int.from_bytes(hashlib.blake2b(source.encode("utf-8"), digest_size=8).digest(), "little")
    return "test" if h % 4 == 0 else "train"


def _noun_phrase(rng: random.Random) -> list[str]:
    """A determiner, up to two adjectives, a noun."""
    adjectives = rng.sample(ADJECTIVES, rng.choices((0, 1, 2), (5, 3, 2))[0])
    return [rng.choice(DETERMINERS), *adjectives, rng.choice(NOUNS)]


def _clause(rng: random.Random) -> list[str]:
    """Subject, verb, object and (40%) a prepositional phrase."""
    words = [*_noun_phrase(rng), rng.choice(VERBS), *_noun_phrase(rng)]
    if rng.random() < 0.4:
        words += [rng.choice(PREPOSITIONS), *_noun_phrase(rng)]
    return words


def _sentence(rng: random.Random, max_clauses: int) -> list[str]:
    """1 to max_clauses clauses joined by conjunctions, then "."."""
    words = _clause(rng)
    for _ in range(rng.randint(1, max_clauses) - 1):
        words += [rng.choice(CONJUNCTIONS), *_clause(rng)]
    return [*words, "."]


class TranslationTask:
    """Sentences of the synthetic language pair and their translations
    (built by :func:`translation_task`).

    Attributes
    ----------
    sources, targets  lists of n str (words separated by spaces)
    lengths           (n,) int64: words per sentence (source and target alike)
    src_vocab, tgt_vocab  word ``Vocab``s (PAD 0, BOS 1, EOS 2)
    split             "train" or "test"

    ``batch(indices)`` -> ``TextBatch`` (src padded to the batch's longest
    sentence, tgt_in/tgt_out its BOS + target / target + EOS);
    ``batches(batch_size, shuffle=False, seed=None, drop_last=False)``;
    ``exact_match(predictions)`` (n,) bool; ``token_accuracy(predictions)``
    (n,) the share of each target's words (and its EOS) predicted at their
    place; ``by_length(values, edges)`` the mean of per-sentence values in
    length buckets.

    Example
    -------
    >>> task = attnc.datasets.TranslationTask(["the dog sees a cat ."], "test")
    >>> task.targets[0] == " ".join(attnc.datasets.translation.LEXICON[w] for w in "dog the cat a sees".split()) + " ."
    True
    """

    def __init__(self, sources: list[str], split: Literal["train", "test"]):
        self.sources = list(sources)
        self.targets = [" ".join(_translate(s.split())) for s in self.sources]
        self.split = split
        self.src_vocab, self.tgt_vocab = SOURCE_VOCAB, TARGET_VOCAB
        self.pad, self.bos, self.eos = SOURCE_VOCAB.pad, SOURCE_VOCAB.bos, SOURCE_VOCAB.eos
        self.lengths = np.array([len(s.split()) for s in self.sources], np.int64)
        self._src = [SOURCE_VOCAB.encode(s) for s in self.sources]
        self._tgt = [TARGET_VOCAB.encode(t) for t in self.targets]

    def __len__(self) -> int:
        return len(self.sources)

    def batch(self, indices: ArrayLike) -> TextBatch:
        """The ``TextBatch`` of the sentences at indices (B,)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        s = SOURCE_VOCAB.pad_batch([self._src[i] for i in idx])
        t = TARGET_VOCAB.teacher_forcing([self._tgt[i] for i in idx])
        return TextBatch(s.ids, s.key_padding_mask, t.tgt_in, t.tgt_out, t.key_padding_mask, s.lengths, t.lengths)

    def batches(
        self, batch_size: int, *, shuffle: bool = False, seed: int | None = None, drop_last: bool = False
    ) -> Iterator[TextBatch]:
        """Iterate over the task in batches (in order, or shuffled with seed)."""
        return _batches(self, batch_size, shuffle, seed, drop_last)

    def decode(self, ids: ArrayLike) -> list[str]:
        """Target strings of predicted ids (B, T) (each up to its first EOS)."""
        return self.tgt_vocab.decode_batch(ids)

    def exact_match(self, predictions: ArrayLike | list[str]) -> Array:
        """(n,) bool: prediction i equals target i. predictions: (n, T) ids
        (decoded up to the first EOS) or n strings."""
        return _exact_match(self, predictions, self.targets, "sentences")

    def token_accuracy(self, predictions: ArrayLike) -> Array:
        """(n,) float64: per sentence, the share of its target's words and
        its EOS that the predicted ids (n, T) have at the same place."""
        pred = np.asarray(predictions)
        if pred.ndim != 2 or pred.shape[0] != len(self):
            raise ValueError(f"predictions must be (n, T) ids with n = {len(self)}, got shape {pred.shape}")
        out = np.empty(len(self))
        for i, t in enumerate(self._tgt):
            want = np.append(t, self.eos)
            got = np.full(want.size, -1, np.int64)
            got[: min(want.size, pred.shape[1])] = pred[i, : want.size]
            out[i] = np.mean(got == want)
        return out

    def by_length(self, values: ArrayLike, edges: ArrayLike) -> dict[str, float]:
        """{"lo-hi": mean of the values of the sentences whose length is in
        [lo, hi]} for the buckets between consecutive edges (ints, rising;
        a bucket holds lengths edges[i] .. edges[i + 1] - 1); empty buckets left out."""
        v = np.asarray(values, np.float64).reshape(-1)
        if v.size != len(self):
            raise ValueError(f"{v.size} values for {len(self)} sentences")
        e = np.asarray(edges, np.int64)
        if e.ndim != 1 or e.size < 2 or (np.diff(e) <= 0).any():
            raise ValueError(f"edges must be at least two rising integers, got {edges!r}")
        out = {}
        for lo, hi in itertools.pairwise(e):
            inside = (self.lengths >= lo) & (self.lengths < hi)
            if inside.any():
                out[f"{lo}-{hi - 1}"] = float(v[inside].mean())
        return out

    def __repr__(self) -> str:
        lo, hi = (int(self.lengths.min()), int(self.lengths.max())) if len(self) else (0, 0)
        return f"TranslationTask(n={len(self)}, split={self.split!r}, lengths {lo}-{hi})"


def _translate(words: list[str]) -> list[str]:
    """The target of a source sentence's words: each clause (up to a
    conjunction or the final ".") reordered, the words translated."""
    out: list[str] = []
    clause: list[str] = []
    for w in words:
        if w in CONJUNCTIONS or w == ".":
            out += _translate_clause(clause) + [LEXICON.get(w, w)]
            clause = []
        else:
            clause.append(w)
    return out


def _translate_clause(words: list[str]) -> list[str]:
    """S V O [P NP] -> S' O' [NP' P'] V', each noun phrase as noun, adjectives backwards, determiner."""
    verb = next(i for i, w in enumerate(words) if w in VERBS)
    prep = next((i for i, w in enumerate(words) if w in PREPOSITIONS), len(words))
    phrases = [words[:verb], words[verb + 1 : prep]]
    tail = [words[prep]] if prep < len(words) else []
    if tail:
        phrases.append(words[prep + 1 :])
    moved = [w for p in phrases for w in [p[-1], *p[1:-1][::-1], p[0]]]  # noun, adjectives backwards, determiner
    return [LEXICON[w] for w in moved + tail + [words[verb]]]


def translation_task(
    n: int,
    seed: int | None = 0,
    *,
    min_len: int = 5,
    max_len: int = 60,
    split: Literal["train", "test"] = "train",
) -> TranslationTask:
    """n sentence pairs of the synthetic language pair, from one split.

    Parameters
    ----------
    n : int, the number of sentences
    seed : int or None
    min_len, max_len : the lengths kept (words, "." included; every sentence
        has at least 6 words)
    split : "train" or "test" (see the module docstring)

    Returns
    -------
    TranslationTask (``sources``, ``targets``, ``lengths``, ``batch``, scores).

    Example
    -------
    >>> task = attnc.datasets.translation_task(200, seed=1, min_len=6, max_len=40)
    >>> task
    TranslationTask(n=200, split='train', lengths 6-40)
    """
    n = _check_int("n", n, 0)
    min_len, max_len = _check_int("min_len", min_len, 1), _check_int("max_len", max_len, 1)
    if max_len < max(min_len, 6):
        raise ValueError(f"max_len must be at least min_len and 6 (the shortest sentence), got {max_len}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(seed)  # scalar draws, many per sentence: ten times faster than a NumPy Generator's
    max_clauses = max(1, max_len // 8)  # clauses average about 9 words
    sources: list[str] = []
    while len(sources) < n:
        words = _sentence(rng, max_clauses)
        text = " ".join(words)
        if min_len <= len(words) <= max_len and translation_split(text) == split:
            sources.append(text)
    return TranslationTask(sources, split)
