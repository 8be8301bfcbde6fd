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
from dataclasses import dataclass

import numpy as np

from .._args import size_arg as _check_int

IGNORE_INDEX = -100
_CHUNK = 4096  # draws per round: fixed, so that a smaller set is a prefix of a larger one


def special_tokens(vocab: int) -> tuple[int, int, int]:
    """(PAD, BOS, EOS) for a digit vocabulary of size vocab: vocab, vocab + 1, vocab + 2."""
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

def pad_sequences(sequences, pad: int, length: int | None = None) -> np.ndarray:
    """Right-pad a list of 1-d int sequences to one (N, length) int64 array
    (length defaults to the longest)."""
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

    src                    (B, S) int64, PAD after each source
    src_key_padding_mask   (B, S) bool
    tgt_in                 (B, T) int64: BOS, target..., PAD after (the decoder's input)
    tgt_out                (B, T) int64: target..., EOS, IGNORE_INDEX after (what to predict)
    tgt_key_padding_mask   (B, T) bool
    """

    src: np.ndarray
    src_key_padding_mask: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray
    tgt_key_padding_mask: np.ndarray

    def __len__(self):
        return self.src.shape[0]

    @property
    def num_tokens(self) -> int:
        """Target tokens that count in the loss (EOS included)."""
        return int(np.count_nonzero(self.tgt_out != IGNORE_INDEX))


class ReverseTask:
    """Digit sequences and their reversals (see ``reverse_task``).

    ``sequences`` (n, max_len) int64 padded with PAD, ``lengths`` (n,) int64;
    ``source(i)``, ``target(i)`` as arrays; ``batch(indices)`` and
    ``batches(batch_size)`` give ``Seq2SeqBatch``es padded to their longest row.
    """

    def __init__(self, sequences: np.ndarray, lengths: np.ndarray, vocab: int):
        self.sequences, self.lengths, self.vocab = sequences, lengths, vocab
        self.pad, self.bos, self.eos = special_tokens(vocab)
        self.num_tokens = vocab + 3

    def __len__(self):
        return self.sequences.shape[0]

    def source(self, i) -> np.ndarray:
        return self.sequences[i, : self.lengths[i]].copy()

    def target(self, i) -> np.ndarray:
        return self.source(i)[::-1].copy()

    def keys(self):
        """A hashable key per sequence (equal keys = equal sequences)."""
        return _sequence_keys(self.sequences, self.lengths, self.vocab)

    def batch(self, indices) -> Seq2SeqBatch:
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

    def batches(self, batch_size: int, *, shuffle: bool = False, seed=None, drop_last: bool = False):
        """Iterate over the task in batches (in order, or shuffled with seed)."""
        return _batches(self, batch_size, shuffle, seed, drop_last)

    def targets_padded(self, eos: bool = True) -> np.ndarray:
        """(n, max_len + 1) int64: each reversal followed by EOS, padded with PAD
        (what a decoder should generate, for exact-match scoring)."""
        rows = [np.concatenate([self.target(i), [self.eos]]) if eos else self.target(i) for i in range(len(self))]
        return pad_sequences(rows, self.pad, self.sequences.shape[1] + int(eos))

    def __repr__(self):
        return (f"ReverseTask(n={len(self)}, vocab={self.vocab}, lengths {int(self.lengths.min())}-"
                f"{int(self.lengths.max())}, PAD={self.pad}, BOS={self.bos}, EOS={self.eos})")


def reverse_task(n: int, vocab: int = 10, min_len: int = 5, max_len: int = 12, *, seed=0,
                 exclude=None, unique: bool = False) -> ReverseTask:
    """n random digit sequences (uniform lengths in [min_len, max_len], uniform
    digits in [0, vocab)) for the reversal task.

    exclude : a ReverseTask (or array of its ``keys()``) whose sequences must
        not appear (a training set disjoint from a held-out set); rejected
        draws are replaced by fresh ones.
    unique : no sequence twice.

    Draws come in fixed rounds, so the first n sequences are the same for any
    larger n (same seed and exclude).

    Token ids: digits 0..vocab-1, PAD = vocab, BOS = vocab + 1, EOS = vocab + 2.

    Example
    -------
    >>> heldout = reverse_task(1000, seed=1, unique=True)
    >>> train = reverse_task(10000, seed=2, exclude=heldout)
    >>> b = train.batch([0, 1, 2])
    >>> b.src.shape[1] + 1 == b.tgt_in.shape[1]
    True
    """
    n = _check_int("n", n, 0)
    vocab = _check_int("vocab", vocab, 1)
    min_len = _check_int("min_len", min_len, 1)
    max_len = _check_int("max_len", max_len, min_len)
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

def sort_split(sequence) -> str:
    """"test" or "train" for one sequence, by a stable hash (minGPT uses
    Python's salted ``hash(pickle.dumps(...)) % 4 == 0``; this is the same
    rule with blake2b, so the split is the same in every process)."""
    data = np.asarray(sequence, dtype=np.int64).tobytes()
    h = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return "test" if h % 4 == 0 else "train"


class SortTask:
    """minGPT's sorting demo (see ``sort_task``).

    sequences (n, length) int64, the unsorted inputs
    solutions (n, length) int64, sorted
    inputs    (n, 2 * length - 1): sequence + solution[:-1]  (the model's idx)
    targets   (n, 2 * length - 1): inputs shifted by one; the first length - 1
              positions are IGNORE_INDEX (-100)
    ``block_size = 2 * length - 1``, ``vocab_size = num_digits``.
    """

    def __init__(self, sequences: np.ndarray, length: int, num_digits: int, split: str):
        self.sequences = sequences
        self.solutions = np.sort(sequences, axis=1)
        self.length, self.num_digits, self.split = length, num_digits, split
        cat = np.concatenate([self.sequences, self.solutions], axis=1)
        self.inputs = np.ascontiguousarray(cat[:, :-1])
        targets = np.ascontiguousarray(cat[:, 1:])
        targets[:, : length - 1] = IGNORE_INDEX
        self.targets = targets
        self.block_size = 2 * length - 1
        self.vocab_size = num_digits

    def __len__(self):
        return self.sequences.shape[0]

    def batch(self, indices):
        """(inputs, targets) rows for indices."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        return self.inputs[idx], self.targets[idx]

    def batches(self, batch_size: int, *, shuffle: bool = False, seed=None):
        return _batches(self, batch_size, shuffle, seed)

    def __repr__(self):
        return f"SortTask(n={len(self)}, length={self.length}, num_digits={self.num_digits}, split={self.split!r})"


def sort_task(n: int, length: int = 6, num_digits: int = 3, *, seed=0, split: str = "train") -> SortTask:
    """n sequences of minGPT's sorting demo from one split (drawn with
    replacement, as minGPT's SortDataset draws them).

    Each draw is ``length`` uniform digits in [0, num_digits); half of the
    draws reject sequences with more than length // 2 distinct digits (minGPT
    boosts repeats that way); a draw belongs to "test" when its stable hash
    is 0 mod 4 (``sort_split``), else to "train", and only draws of the asked
    split are kept. So train and test never share a sequence. The first n
    sequences are the same for any larger n.

    Example
    -------
    >>> train = sort_task(64, seed=0)
    >>> train.inputs.shape, train.targets[0, :5]
    ((64, 11), array([-100, -100, -100, -100, -100]))
    """
    n = _check_int("n", n, 0)
    length = _check_int("length", length, 1)
    num_digits = _check_int("num_digits", num_digits, 1)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
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
