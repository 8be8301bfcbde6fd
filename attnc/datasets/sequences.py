"""Synthetic sequence tasks for the Transformer experiments, seeded NumPy only.

Two tasks:

* ``reverse_task``: sequence-to-sequence reversal of digit strings of variable
  length (an encoder-decoder learns it). Token ids ``0 .. vocab-1`` are the
  digits; three special tokens are appended to the vocabulary:
  ``PAD = vocab``, ``BOS = vocab + 1``, ``EOS = vocab + 2`` (so the model's
  vocabulary has ``vocab + 3`` tokens; ``special_tokens(vocab)`` gives them).
* ``sort_task``: minGPT's sorting demo for a decoder-only model: the input is
  the sequence followed by its sorted version without the last token, the
  targets are the same shifted by one with the first ``length - 1`` positions
  ignored (``IGNORE_INDEX = -100``, cross-entropy's default ``ignore_index``).

The same arguments give the same arrays, bit for bit, on any machine.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .._args import size_arg as _check_int
from .._typing import Array, ArrayLike

IGNORE_INDEX = -100
_CHUNK = 4096  # draws per round: fixed, so that a smaller set is a prefix of a larger one


def special_tokens(vocab: int) -> tuple[int, int, int]:
    """(PAD, BOS, EOS) of ``reverse_task``'s tokens for a digit vocabulary of
    size vocab: the ids vocab, vocab + 1, vocab + 2 (after the digits).

    Parameters
    ----------
    vocab : int, the number of digits (ids 0 .. vocab - 1)

    Returns
    -------
    (pad, bos, eos) : tuple of 3 int

    Example
    -------
    >>> attnc.datasets.special_tokens(10)
    (10, 11, 12)
    """
    return vocab, vocab + 1, vocab + 2


def _batches(task, batch_size, shuffle, seed, drop_last=False):
    """task.batch(...) over the whole task in batch_size steps (in order, or
    shuffled with seed; without the last short batch with drop_last)."""
    batch_size = _check_int("batch_size", batch_size, 1)
    n = len(task)
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    stop = n - (n % batch_size if drop_last else 0)
    for start in range(0, stop, batch_size):
        yield task.batch(order[start : start + batch_size])


def _exact_match(task, predictions, references, what, normalise=lambda p: p):
    """(n,) bool: prediction i (normalised) equals references[i]. predictions:
    (n, T) ids (decoded by task.decode, up to the first EOS) or n strings."""
    if isinstance(predictions, np.ndarray) and predictions.dtype.kind in "iu":
        predictions = task.decode(predictions)
    predictions = list(predictions)
    if len(predictions) != len(task):
        raise ValueError(f"{len(predictions)} predictions for {len(task)} {what}")
    return np.array([normalise(p) == t for p, t in zip(predictions, references)], dtype=bool)


def _check_distinct(n: int, space: int, what: str) -> None:
    """n distinct draws (unique=True) from a space of `space` items: refused
    before drawing when they do not exist (drawing would exhaust the space
    first, holding all of it)."""
    if n > space:
        raise ValueError(f"n ({n}) exceeds the {space} distinct {what} (unique=True)")


def _sequence_count(vocab: int, min_len: int, max_len: int, cap: int) -> int:
    """The number of sequences of lengths min_len..max_len over vocab
    digits, or cap if there are at least cap (never computing a huge power)."""
    if vocab == 1:
        return min(max_len - min_len + 1, cap)
    total = 0
    for length in range(max_len, min_len - 1, -1):  # the longest first: it alone reaches cap, or all are small
        if length * math.log2(vocab) >= math.log2(cap) + 1:
            return cap
        total += vocab**length
        if total >= cap:
            return cap
    return total


def _sequence_keys(tokens: np.ndarray, lengths: np.ndarray, vocab: int):
    """One hashable key per row (rows padded after their length): int64 when
    the base-(vocab + 1) number fits, else bytes."""
    width = tokens.shape[1]
    valid = np.arange(width)[None, :] < lengths[:, None]
    digits = np.where(valid, tokens + 1, 0).astype(np.int64)  # 0 marks "past the end"
    if (vocab + 1) ** width < 2**62:
        weights = (vocab + 1) ** np.arange(width, dtype=np.int64)
        return digits @ weights
    return np.array([row.tobytes() for row in digits], dtype=object)


# --------------------------------------------------------------------------- padding


def pad_sequences(sequences: Sequence[Sequence[int] | Array], pad: int, length: int | None = None) -> Array:
    """Right-pad 1-d integer sequences into one array.

    Parameters
    ----------
    sequences : N 1-d int sequences (lists or arrays) of any lengths
    pad : int, the id written after each sequence
    length : int, optional; the width (default: the longest sequence;
        ValueError when shorter than it)

    Returns
    -------
    array (N, length), int64

    Example
    -------
    >>> attnc.datasets.pad_sequences([[1, 2, 3], [4]], pad=0)
    array([[1, 2, 3],
           [4, 0, 0]])
    """
    longest = max((len(s) for s in sequences), default=0)
    length = longest if length is None else length
    if length < longest:
        raise ValueError(f"length {length} is shorter than the longest sequence ({longest})")
    out = np.full((len(sequences), length), pad, np.int64)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
    return out


@dataclass(frozen=True)
class Seq2SeqBatch:
    """One padded batch of a sequence-to-sequence task (masks with torch's
    meaning: True = padding, ignored).

    Fields
    ------
    src                    (B, S) int64, PAD after each source
    src_key_padding_mask   (B, S) bool, True at padding
    tgt_in                 (B, T) int64: BOS, target..., PAD after (the decoder's input)
    tgt_out                (B, T) int64: target..., EOS, IGNORE_INDEX after (what to predict)
    tgt_key_padding_mask   (B, T) bool, True at padding

    ``len(batch)`` is B; ``batch.num_tokens`` counts the targets that are
    not IGNORE_INDEX (what a loss averages over).

    Example
    -------
    >>> b = attnc.datasets.reverse_task(8, min_len=2, max_len=4, seed=0).batch([0, 1])
    >>> b.src.shape, b.tgt_in.shape, b.src.dtype, b.src_key_padding_mask.dtype
    ((2, 4), (2, 5), dtype('int64'), dtype('bool'))
    >>> b.src.tolist(), b.tgt_out.tolist()
    ([[4, 2, 2, 8], [8, 0, 1, 10]], [[8, 2, 2, 4, 12], [1, 0, 8, 12, -100]])
    """

    src: Array
    src_key_padding_mask: Array
    tgt_in: Array
    tgt_out: Array
    tgt_key_padding_mask: Array

    def __len__(self) -> int:
        return self.src.shape[0]

    @property
    def num_tokens(self) -> int:
        """Target tokens that count in the loss (EOS included)."""
        return int(np.count_nonzero(self.tgt_out != IGNORE_INDEX))


class ReverseTask:
    """Digit sequences and their reversals (built by ``reverse_task``).

    Parameters
    ----------
    sequences : array (n, max_len), int64, digits 0..vocab-1 padded with PAD
    lengths : array (n,), int64, the real digits of each row
    vocab : int, the number of digits; PAD, BOS, EOS = vocab, vocab + 1, vocab + 2

    Attributes: ``sequences``, ``lengths``, ``vocab``, ``pad``, ``bos``,
    ``eos``, ``num_tokens = vocab + 3`` (the model's vocabulary size).
    ``source(i)``, ``target(i)``: (L,) int64 arrays; ``batch(indices)`` and
    ``batches(batch_size)`` give ``Seq2SeqBatch``es padded to their longest
    row; ``targets_padded()`` (n, max_len + 1) int64; ``keys()`` one hashable
    key per sequence.

    Example
    -------
    >>> task = attnc.datasets.reverse_task(8, min_len=2, max_len=4, seed=0)
    >>> task.source(0).tolist(), task.target(0).tolist(), task.num_tokens
    ([4, 2, 2, 8], [8, 2, 2, 4], 13)
    >>> task.targets_padded().shape
    (8, 5)
    """

    def __init__(self, sequences: Array, lengths: Array, vocab: int):
        self.sequences, self.lengths, self.vocab = sequences, lengths, vocab
        self.pad, self.bos, self.eos = special_tokens(vocab)
        self.num_tokens = vocab + 3

    def __len__(self) -> int:
        return self.sequences.shape[0]

    def source(self, i: int) -> Array:
        """(L,) int64: the digits of sequence i (without padding)."""
        return self.sequences[i, : self.lengths[i]].copy()

    def target(self, i: int) -> Array:
        """(L,) int64: sequence i reversed."""
        return self.source(i)[::-1].copy()

    def keys(self) -> Array:
        """A hashable key per sequence (equal keys = equal sequences)."""
        return _sequence_keys(self.sequences, self.lengths, self.vocab)

    def batch(self, indices: ArrayLike) -> Seq2SeqBatch:
        """The ``Seq2SeqBatch`` of the sequences at indices (B,): src (B, S)
        with S the longest of them, tgt_in/tgt_out (B, S + 1)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        lengths = self.lengths[idx]
        S = int(lengths.max()) if idx.size else 0
        src = self.sequences[idx, :S].copy()
        pos = np.arange(S)[None, :]
        src_pad = pos >= lengths[:, None]
        # the reversal of the valid part: position j holds token length-1-j
        rev_idx = np.clip(lengths[:, None] - 1 - pos, 0, max(S - 1, 0))
        rev = np.take_along_axis(src, rev_idx, axis=1) if S else src
        rev = np.where(src_pad, self.pad, rev)
        B, T = idx.size, S + 1
        tgt_in = np.full((B, T), self.pad, np.int64)
        tgt_in[:, 0] = self.bos
        tgt_in[:, 1:] = rev
        tgt_out = np.full((B, T), IGNORE_INDEX, np.int64)
        tgt_out[:, :S] = np.where(src_pad, IGNORE_INDEX, rev)
        tgt_out[np.arange(B), lengths] = self.eos
        tgt_pad = np.arange(T)[None, :] > lengths[:, None]  # BOS + length tokens are real
        return Seq2SeqBatch(src, src_pad, tgt_in, tgt_out, tgt_pad)

    def batches(
        self, batch_size: int, *, shuffle: bool = False, seed: int | None = None, drop_last: bool = False
    ) -> Iterator[Seq2SeqBatch]:
        """Iterate over the task in batches (in order, or shuffled with seed)."""
        return _batches(self, batch_size, shuffle, seed, drop_last)

    def targets_padded(self, eos: bool = True) -> Array:
        """(n, max_len + 1) int64: each reversal followed by EOS, padded with PAD
        (what a decoder should generate, for exact-match scoring)."""
        rows = [np.concatenate([self.target(i), [self.eos]]) if eos else self.target(i) for i in range(len(self))]
        return pad_sequences(rows, self.pad, self.sequences.shape[1] + int(eos))

    def __repr__(self):
        return (
            f"ReverseTask(n={len(self)}, vocab={self.vocab}, lengths {int(self.lengths.min())}-"
            f"{int(self.lengths.max())}, PAD={self.pad}, BOS={self.bos}, EOS={self.eos})"
        )


def reverse_task(
    n: int,
    vocab: int = 10,
    min_len: int = 5,
    max_len: int = 12,
    *,
    seed: int | None = 0,
    exclude: ReverseTask | ArrayLike | None = None,
    unique: bool = False,
) -> ReverseTask:
    """n random digit sequences for the reversal task (an encoder-decoder
    learns to write each sequence backwards).

    Lengths are uniform in [min_len, max_len], digits uniform in [0, vocab).
    Token ids: digits 0..vocab-1, PAD = vocab, BOS = vocab + 1, EOS = vocab + 2.

    Parameters
    ----------
    n : int, the number of sequences
    vocab : int, the number of digits
    min_len, max_len : int, the range of lengths
    seed : int or None
    exclude : a ReverseTask (or an array of its ``keys()``) whose sequences
        must not appear (a training set disjoint from a held-out set);
        rejected draws are replaced by fresh ones
    unique : bool, no sequence twice

    Returns
    -------
    ReverseTask: ``sequences`` (n, max_len) int64, ``lengths`` (n,) int64;
    its ``batch(indices)`` gives ``Seq2SeqBatch``es.

    Draws come in fixed rounds, so the first n sequences are the same for any
    larger n (same seed and exclude).

    Example
    -------
    >>> heldout = attnc.datasets.reverse_task(100, seed=1, unique=True)
    >>> train = attnc.datasets.reverse_task(1000, seed=2, exclude=heldout)
    >>> train.sequences.shape, train.sequences.dtype
    ((1000, 12), dtype('int64'))
    >>> b = train.batch([0, 1, 2])
    >>> b.src.shape[1] + 1 == b.tgt_in.shape[1]
    True
    """
    n = _check_int("n", n, 0)
    vocab = _check_int("vocab", vocab, 1)
    min_len = _check_int("min_len", min_len, 1)
    max_len = _check_int("max_len", max_len, min_len)
    if unique and n:
        _check_distinct(
            n,
            _sequence_count(vocab, min_len, max_len, n),
            f"sequences of lengths {min_len}..{max_len} over {vocab} digits",
        )
    pad = vocab
    if exclude is None:
        excluded = None
    else:
        excluded = exclude.keys() if isinstance(exclude, ReverseTask) else np.asarray(exclude)
    rng = np.random.default_rng(seed)
    seqs, lens, seen = [], [], None
    have = 0
    while have < n:
        m = _CHUNK
        lengths = rng.integers(min_len, max_len + 1, size=m)
        tokens = rng.integers(0, vocab, size=(m, max_len))
        tokens[np.arange(max_len)[None, :] >= lengths[:, None]] = pad
        keep = np.ones(m, bool)
        keys = _sequence_keys(tokens, lengths, vocab)
        if excluded is not None and len(excluded):
            keep &= ~np.isin(keys, excluded)
        if unique:
            if seen is None:
                seen = set()
            for i, k in enumerate(keys.tolist()):
                if keep[i]:
                    if k in seen:
                        keep[i] = False
                    else:
                        seen.add(k)
        tokens, lengths = tokens[keep], lengths[keep]
        seqs.append(tokens)
        lens.append(lengths)
        have += tokens.shape[0]
        if tokens.shape[0] == 0:  # pragma: no cover - the space is exhausted
            raise ValueError("cannot draw that many distinct sequences")
    sequences = np.concatenate(seqs)[:n] if seqs else np.zeros((0, max_len), np.int64)
    lengths = np.concatenate(lens)[:n].astype(np.int64) if lens else np.zeros(0, np.int64)
    return ReverseTask(np.ascontiguousarray(sequences, np.int64), lengths, vocab)


# --------------------------------------------------------------------------- sorting (minGPT)


def sort_split(sequence: ArrayLike) -> Literal["train", "test"]:
    """ "test" or "train" for one sequence of ``sort_task``, by a stable hash.

    minGPT uses Python's salted ``hash(pickle.dumps(...)) % 4 == 0``; this is
    the same rule with blake2b of the int64 bytes, so the split is the same in
    every process.

    Parameters
    ----------
    sequence : 1-d int sequence (length,), hashed as int64

    Returns
    -------
    str, "test" (a quarter of the sequences) or "train"

    Example
    -------
    >>> attnc.datasets.sort_split([0, 1, 2]), attnc.datasets.sort_split([2, 1, 0])
    ('train', 'test')
    """
    data = np.asarray(sequence, dtype=np.int64).tobytes()
    h = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return "test" if h % 4 == 0 else "train"


class _TokenRows:
    """What a language-model task holding ``inputs`` and ``targets`` (n, T)
    int64 rows offers: ``len``, ``batch(indices)`` and ``batches(batch_size)``."""

    inputs: Array
    targets: Array

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def batch(self, indices: ArrayLike) -> tuple[Array, Array]:
        """(inputs, targets) rows for indices: two (B, T) int64 arrays."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return self.inputs[idx], self.targets[idx]

    def batches(
        self, batch_size: int, *, shuffle: bool = False, seed: int | None = None
    ) -> Iterator[tuple[Array, Array]]:
        """Iterate over (inputs, targets) batches (in order, or shuffled with seed)."""
        return _batches(self, batch_size, shuffle, seed)


class SortTask(_TokenRows):
    """minGPT's sorting demo (built by ``sort_task``).

    Parameters
    ----------
    sequences : array (n, length), int64, digits in [0, num_digits)
    length : int, the sequence length
    num_digits : int, the vocabulary size
    split : "train" or "test", recorded

    Attributes
    ----------
    sequences (n, length) int64, the unsorted inputs
    solutions (n, length) int64, sorted
    inputs    (n, 2 * length - 1) int64: sequence + solution[:-1]  (the model's idx)
    targets   (n, 2 * length - 1) int64: inputs shifted by one; the first
              length - 1 positions are IGNORE_INDEX (-100)
    ``block_size = 2 * length - 1``, ``vocab_size = num_digits``.
    ``batch(indices)`` -> (inputs (B, 2 length - 1), targets (B, 2 length - 1));
    ``batches(batch_size)`` iterates over such pairs.

    Example
    -------
    >>> task = attnc.datasets.SortTask(np.array([[2, 0, 1]]), 3, 3, "train")
    >>> task.inputs.tolist(), task.targets.tolist()
    ([[2, 0, 1, 0, 1]], [[-100, -100, 0, 1, 2]])
    """

    def __init__(self, sequences: Array, length: int, num_digits: int, split: Literal["train", "test"]):
        self.sequences = sequences
        self.solutions = np.sort(sequences, axis=1)
        self.length, self.num_digits, self.split = length, num_digits, split
        cat = np.concatenate([self.sequences, self.solutions], axis=1)
        self.inputs = np.ascontiguousarray(cat[:, :-1])
        targets = np.array(cat[:, 1:], order="C")  # a copy (one row is contiguous: a view would alias inputs)
        targets[:, : length - 1] = IGNORE_INDEX
        self.targets = targets
        self.block_size = 2 * length - 1
        self.vocab_size = num_digits

    def __repr__(self):
        return f"SortTask(n={len(self)}, length={self.length}, num_digits={self.num_digits}, split={self.split!r})"


def sort_task(
    n: int, length: int = 6, num_digits: int = 3, *, seed: int | None = 0, split: Literal["train", "test"] = "train"
) -> SortTask:
    """n sequences of minGPT's sorting demo from one split (drawn with
    replacement, as minGPT's SortDataset draws them).

    Parameters
    ----------
    n : int, the number of sequences
    length : int, digits per sequence
    num_digits : int, digits are uniform in [0, num_digits)
    seed : int or None
    split : "train" or "test"

    Returns
    -------
    SortTask: ``inputs`` and ``targets`` (n, 2 length - 1) int64 (a
    decoder-only model's idx and targets), ``sequences`` and ``solutions``
    (n, length) int64.

    Each draw is ``length`` uniform digits in [0, num_digits); half of the
    draws reject sequences with more than length // 2 distinct digits (minGPT
    boosts repeats that way); a draw belongs to "test" when its stable hash
    is 0 mod 4 (``sort_split``), else to "train", and only draws of the asked
    split are kept. So train and test never share a sequence. The first n
    sequences are the same for any larger n.

    Example
    -------
    >>> train = attnc.datasets.sort_task(64, seed=0)
    >>> train.inputs.shape, train.inputs.dtype, train.targets[0, :5]
    ((64, 11), dtype('int64'), array([-100, -100, -100, -100, -100]))
    """
    n = _check_int("n", n, 0)
    length = _check_int("length", length, 1)
    num_digits = _check_int("num_digits", num_digits, 1)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    small = num_digits == 1 or length * math.log2(num_digits) <= 12  # a small space: its split may be empty
    if n and small and not any(sort_split(s) == split for s in itertools.product(range(num_digits), repeat=length)):
        raise ValueError(f"the {split} split of the {num_digits}**{length} sequences is empty: no n can be drawn")
    rng = np.random.default_rng(seed)
    weights = num_digits ** np.arange(length, dtype=np.float64)
    cache: dict = {}
    out, have = [], 0
    while have < n:
        m = _CHUNK
        draws = rng.integers(0, num_digits, size=(m, length))
        boost = rng.random(m) < 0.5
        distinct = 1 + np.count_nonzero(np.diff(np.sort(draws, axis=1), axis=1), axis=1)
        keep = ~(boost & (distinct > length // 2))
        # the split of each distinct sequence, hashed once
        keys = draws @ weights if num_digits**length < 2**52 else None
        in_split = np.empty(m, bool)
        for i in range(m):
            k = keys[i] if keys is not None else draws[i].tobytes()
            s = cache.get(k)
            if s is None:
                s = cache[k] = sort_split(draws[i]) == split
            in_split[i] = s
        keep &= in_split
        out.append(draws[keep])
        have += int(keep.sum())
    sequences = np.concatenate(out)[:n].astype(np.int64) if out else np.zeros((0, length), np.int64)
    return SortTask(np.ascontiguousarray(sequences), length, num_digits, split)
