"""The Neural Turing Machine tasks (Graves, Wayne & Danihelka 2014, sec. 4),
seeded NumPy only.

Three tasks, each a small object whose ``batch(batch_size, ...)`` draws one
``NTMBatch`` of binary sequences:

* ``CopyTask`` (sec. 4.1): a sequence of random bit vectors, a delimiter,
  then the network must write the sequence back.
* ``RepeatCopyTask`` (sec. 4.2): a sequence, a delimiter, a repeat count;
  the network must write the sequence that many times, then an end marker.
* ``AssociativeRecallTask`` (sec. 4.3): a list of items (each a few bit
  vectors) then a query item; the network must write the item that followed
  the query item in the list.

Every batch is time-major within a row and batch first: ``inputs`` (B, T,
input_size), ``targets`` (B, T, output_size), ``mask`` (B, T) bool, True on
the steps whose outputs are scored (targets are zero elsewhere). All rows of
one batch share their length (and repeats, number of items), so T is fixed
per batch and no padding is needed. Bits are 0/1, each with probability 1/2.

``seed`` is an int, ``None`` (fresh entropy) or a ``np.random.Generator``
(consumed: successive batches from one generator differ). The same seed gives
the same arrays, bit for bit, on any machine.

``bits_per_sequence(logits, batch)`` counts the wrong bits per sequence on
the scored steps, with the prediction ``logits > 0``;
``cost_per_sequence(logits, batch)`` is the cost of the paper's figures: the
binary cross-entropy of the scored outputs in bits, summed over a sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from .._typing import Array, ArrayLike, DTypeLike
from .sequences import _check_int

SeedLike = Union[int, np.random.Generator, None]
"""An int, None (fresh entropy) or a np.random.Generator (consumed)."""

__all__ = [
    "AssociativeRecallTask",
    "CopyTask",
    "NTMBatch",
    "RepeatCopyTask",
    "bits_per_sequence",
    "cost_per_sequence",
]


# --------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class NTMBatch:
    """One batch of an NTM task (what ``CopyTask.batch`` and the others return).

    Fields
    ------
    inputs   (B, T, input_size) float32 or float64 (float32 by default), 0/1
             values except the repeat-count channel of ``RepeatCopyTask``
    targets  (B, T, output_size) same dtype, 0/1, zero on unscored steps
    mask     (B, T) bool: True on the steps whose outputs are scored

    Example
    -------
    >>> b = attnc.datasets.CopyTask(bits=4).batch(2, length=3, seed=0)
    >>> b.inputs.shape, b.targets.shape, b.mask.shape, b.inputs.dtype, len(b)
    ((2, 7, 5), (2, 7, 4), (2, 7), dtype('float32'), 2)
    >>> b.mask[0].tolist()
    [False, False, False, False, True, True, True]
    """

    inputs: Array
    targets: Array
    mask: Array

    def __len__(self) -> int:
        return self.inputs.shape[0]


def _rng(seed: SeedLike) -> np.random.Generator:
    if seed is None or isinstance(seed, np.random.Generator):
        return np.random.default_rng(seed)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, None or a np.random.Generator, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed!r}")
    return np.random.default_rng(int(seed))


def _dtype(dtype: DTypeLike) -> np.dtype:
    try:
        dt = np.dtype(dtype) if dtype is not None else None  # np.dtype(None) would be float64
    except TypeError:
        dt = None
    if dt is None or dt.type not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}")
    return dt


def _bits(rng, shape) -> np.ndarray:
    """uint8 0/1 array, each bit 1 with probability 1/2."""
    return rng.integers(0, 2, size=shape, dtype=np.uint8)


# --------------------------------------------------------------------------- copy (4.1)


class CopyTask:
    """Copy (Graves et al. 2014, sec. 4.1).

    ``input_size = bits + 1`` (the bits, then a delimiter channel),
    ``output_size = bits``. For a sequence of length L, T = 2L + 1:

    ========  =========================  ============  ======
    steps     input                      target        mask
    ========  =========================  ============  ======
    0..L-1    the random bits, delim 0   0             False
    L         delimiter channel 1        0             False
    L+1..2L   all zero                   the sequence  True
    ========  =========================  ============  ======

    Parameters
    ----------
    bits : int, the width of each bit vector
    min_len, max_len : int, the range of sequence lengths ``batch`` draws

    ``batch(batch_size, length=None, seed=None, dtype=np.float32)`` ->
    ``NTMBatch``: inputs (B, 2L + 1, bits + 1), targets (B, 2L + 1, bits),
    mask (B, 2L + 1) bool.

    Example
    -------
    >>> task = attnc.datasets.CopyTask(bits=8, min_len=1, max_len=20)
    >>> b = task.batch(16, length=5, seed=0)
    >>> b.inputs.shape, b.targets.shape, b.mask.shape
    ((16, 11, 9), (16, 11, 8), (16, 11))
    >>> bool((b.targets[:, 6:] == b.inputs[:, :5, :8]).all())
    True
    """

    def __init__(self, bits: int = 8, min_len: int = 1, max_len: int = 20):
        self.bits = _check_int("bits", bits, 1)
        self.min_len = _check_int("min_len", min_len, 1)
        self.max_len = _check_int("max_len", max_len, self.min_len)
        self.input_size = self.bits + 1
        self.output_size = self.bits

    def batch(
        self, batch_size: int, *, length: int | None = None, seed: SeedLike = None, dtype: DTypeLike = np.float32
    ) -> NTMBatch:
        """batch_size sequences of one length: ``length`` when given (any
        length >= 1, e.g. longer than max_len to test generalisation), else
        drawn uniformly in [min_len, max_len]. dtype: float32 or float64."""
        B = _check_int("batch_size", batch_size, 1)
        dt = _dtype(dtype)
        rng = _rng(seed)
        L = int(rng.integers(self.min_len, self.max_len + 1)) if length is None else _check_int("length", length, 1)
        seq = _bits(rng, (B, L, self.bits))
        T = 2 * L + 1
        inputs = np.zeros((B, T, self.input_size), dt)
        inputs[:, :L, : self.bits] = seq
        inputs[:, L, self.bits] = 1
        targets = np.zeros((B, T, self.output_size), dt)
        targets[:, L + 1 :] = seq
        mask = np.zeros((B, T), bool)
        mask[:, L + 1 :] = True
        return NTMBatch(inputs, targets, mask)

    def __repr__(self) -> str:
        return f"CopyTask(bits={self.bits}, min_len={self.min_len}, max_len={self.max_len})"


# --------------------------------------------------------------------------- repeat copy (4.2)


class RepeatCopyTask:
    """Repeat copy (Graves et al. 2014, sec. 4.2).

    ``input_size = bits + 2`` (the bits, a delimiter channel, a repeat-count
    channel), ``output_size = bits + 1`` (the bits, an end-marker channel).
    For a sequence of length L copied R times, T = L (R + 1) + 3:

    ==============  ==================================  ===========================  ======
    steps           input                               target                       mask
    ==============  ==================================  ===========================  ======
    0..L-1          the random bits                     0                            False
    L               delimiter channel 1                 0                            False
    L+1             repeat channel R / max_repeats      0                            False
    L+2..L+1+LR     all zero                            the sequence, R times        True
    L+2+LR (= T-1)  all zero                            end-marker channel 1         True
    ==============  ==================================  ===========================  ======

    The repeat count is normalised by the task's ``max_repeats`` (so it lies
    in (0, 1] for counts within the training range; a larger ``repeats``
    passed to ``batch`` gives a value above 1), as Graves et al. normalised
    it to keep the input on the scale of the bits.

    Parameters
    ----------
    bits : int, the width of each bit vector
    min_len, max_len : int, the range of sequence lengths ``batch`` draws
    min_repeats, max_repeats : int, the range of repeat counts ``batch`` draws

    ``batch(batch_size, length=None, repeats=None, seed=None,
    dtype=np.float32)`` -> ``NTMBatch`` (inputs (B, T, bits + 2), targets
    (B, T, bits + 1), mask (B, T) bool).

    Example
    -------
    >>> task = attnc.datasets.RepeatCopyTask(bits=8, max_len=10, max_repeats=10)
    >>> b = task.batch(4, length=3, repeats=2, seed=0)
    >>> b.inputs.shape, b.targets.shape, round(float(b.inputs[0, 4, 9]), 6)
    ((4, 12, 10), (4, 12, 9), 0.2)
    >>> int(b.mask[0].sum())  # 2 copies of 3 steps, then the end marker
    7
    """

    def __init__(self, bits: int = 8, min_len: int = 1, max_len: int = 10, min_repeats: int = 1, max_repeats: int = 10):
        self.bits = _check_int("bits", bits, 1)
        self.min_len = _check_int("min_len", min_len, 1)
        self.max_len = _check_int("max_len", max_len, self.min_len)
        self.min_repeats = _check_int("min_repeats", min_repeats, 1)
        self.max_repeats = _check_int("max_repeats", max_repeats, self.min_repeats)
        self.input_size = self.bits + 2
        self.output_size = self.bits + 1

    def batch(
        self,
        batch_size: int,
        *,
        length: int | None = None,
        repeats: int | None = None,
        seed: SeedLike = None,
        dtype: DTypeLike = np.float32,
    ) -> NTMBatch:
        """batch_size sequences of one length (``length``, else uniform in
        [min_len, max_len]) and one repeat count (``repeats``, else uniform in
        [min_repeats, max_repeats]); given values may be any int >= 1.
        dtype: float32 or float64."""
        B = _check_int("batch_size", batch_size, 1)
        dt = _dtype(dtype)
        rng = _rng(seed)
        L = int(rng.integers(self.min_len, self.max_len + 1)) if length is None else _check_int("length", length, 1)
        if repeats is None:
            R = int(rng.integers(self.min_repeats, self.max_repeats + 1))
        else:
            R = _check_int("repeats", repeats, 1)
        seq = _bits(rng, (B, L, self.bits))
        start = L + 2  # first output step
        T = start + L * R + 1
        inputs = np.zeros((B, T, self.input_size), dt)
        inputs[:, :L, : self.bits] = seq
        inputs[:, L, self.bits] = 1
        inputs[:, L + 1, self.bits + 1] = R / self.max_repeats
        targets = np.zeros((B, T, self.output_size), dt)
        targets[:, start : T - 1, : self.bits] = np.tile(seq, (1, R, 1))
        targets[:, T - 1, self.bits] = 1
        mask = np.zeros((B, T), bool)
        mask[:, start:] = True
        return NTMBatch(inputs, targets, mask)

    def __repr__(self) -> str:
        return (
            f"RepeatCopyTask(bits={self.bits}, min_len={self.min_len}, max_len={self.max_len}, "
            f"min_repeats={self.min_repeats}, max_repeats={self.max_repeats})"
        )


# --------------------------------------------------------------------------- associative recall (4.3)


class AssociativeRecallTask:
    """Associative recall (Graves et al. 2014, sec. 4.3).

    ``input_size = bits + 2`` (the bits, an item-delimiter channel, a
    query-delimiter channel), ``output_size = bits``. An item is ``item_len``
    random bit vectors (K = item_len below). With N items a row is, with
    T = (N + 2)(K + 1):

    ===================================  ===============================  ======
    input                                target                           mask
    ===================================  ===============================  ======
    N times: item delimiter, the item    0                                False
    query delimiter, the query item, …   0                                False
    … query delimiter                    0                                False
    K zero steps                         the item after the query item    True
    ===================================  ===============================  ======

    The query item is a copy of one of the first N - 1 items, chosen
    uniformly per row. The items of a row are all distinct (rows with a
    repeated item are redrawn), so the answer is never ambiguous; that needs
    2 ** (bits * item_len) >= N, checked.

    Parameters
    ----------
    bits : int, the width of each bit vector
    item_len : int, bit vectors per item (K)
    min_items, max_items : int, the range of item counts ``batch`` draws (>= 2)

    ``batch(batch_size, items=None, seed=None, dtype=np.float32)`` ->
    ``NTMBatch`` (inputs (B, T, bits + 2), targets (B, T, bits), mask (B, T)
    bool).

    Example
    -------
    >>> task = attnc.datasets.AssociativeRecallTask(bits=6, item_len=3, min_items=2, max_items=6)
    >>> b = task.batch(8, items=4, seed=0)
    >>> b.inputs.shape, b.targets.shape, int(b.mask[0].sum())
    ((8, 24, 8), (8, 24, 6), 3)
    """

    def __init__(self, bits: int = 6, item_len: int = 3, min_items: int = 2, max_items: int = 6):
        self.bits = _check_int("bits", bits, 1)
        self.item_len = _check_int("item_len", item_len, 1)
        self.min_items = _check_int("min_items", min_items, 2)
        self.max_items = _check_int("max_items", max_items, self.min_items)
        self._check_space("max_items", self.max_items)
        self.input_size = self.bits + 2
        self.output_size = self.bits

    def _check_space(self, name: str, n: int) -> None:
        width = self.bits * self.item_len
        if width < 63 and 2**width < n:
            raise ValueError(
                f"{name}={n} distinct items do not exist with bits={self.bits} and "
                f"item_len={self.item_len} (only {2**width})"
            )

    def batch(
        self, batch_size: int, *, items: int | None = None, seed: SeedLike = None, dtype: DTypeLike = np.float32
    ) -> NTMBatch:
        """batch_size rows of one number of items (``items``, any int >= 2,
        else uniform in [min_items, max_items]). dtype: float32 or float64."""
        B = _check_int("batch_size", batch_size, 1)
        dt = _dtype(dtype)
        rng = _rng(seed)
        if items is None:
            N = int(rng.integers(self.min_items, self.max_items + 1))
        else:
            N = _check_int("items", items, 2)
            self._check_space("items", N)
        K, bits = self.item_len, self.bits
        query = rng.integers(0, N - 1, size=B)
        data = _bits(rng, (B, N, K * bits))
        while True:  # redraw the rows with a repeated item
            same = (data[:, :, None, :] == data[:, None, :, :]).all(axis=-1)
            bad = np.triu(same, k=1).any(axis=(1, 2))
            if not bad.any():
                break
            data[bad] = _bits(rng, (int(bad.sum()), N, K * bits))
        data = data.reshape(B, N, K, bits)
        rows = np.arange(B)
        T = (N + 2) * (K + 1)
        inputs = np.zeros((B, T, self.input_size), dt)
        starts = np.arange(N) * (K + 1)  # the item delimiters
        inputs[:, starts, bits] = 1
        inputs[:, (starts[:, None] + 1 + np.arange(K)).ravel(), :bits] = data.reshape(B, N * K, bits)
        q0 = N * (K + 1)  # the query delimiter
        inputs[:, q0, bits + 1] = 1
        inputs[:, q0 + 1 : q0 + 1 + K, :bits] = data[rows, query]
        inputs[:, q0 + 1 + K, bits + 1] = 1
        targets = np.zeros((B, T, self.output_size), dt)
        targets[:, T - K :] = data[rows, query + 1]
        mask = np.zeros((B, T), bool)
        mask[:, T - K :] = True
        return NTMBatch(inputs, targets, mask)

    def __repr__(self) -> str:
        return (
            f"AssociativeRecallTask(bits={self.bits}, item_len={self.item_len}, "
            f"min_items={self.min_items}, max_items={self.max_items})"
        )


# --------------------------------------------------------------------------- scoring


def bits_per_sequence(logits: ArrayLike, batch: NTMBatch) -> float:
    """Mean over rows of the number of wrong bits on the scored steps (the
    error measure of Graves et al.).

    The prediction is ``logits > 0`` (i.e. sigmoid(logits) > 0.5; NaN counts
    as 0), the truth ``targets > 0.5``; every output channel counts, the end
    marker of repeat copy too.

    Parameters
    ----------
    logits : array (B, T, output_size), any real dtype, the shape of ``batch.targets``
    batch : NTMBatch

    Returns
    -------
    float, wrong bits per sequence (0.0 when every scored bit is right)

    Example
    -------
    >>> b = attnc.datasets.CopyTask(bits=4).batch(3, length=2, seed=0)
    >>> logits = 2 * b.targets - 1            # right everywhere
    >>> attnc.datasets.bits_per_sequence(logits, b)
    0.0
    >>> logits[:, -1, 0] *= -1                # one wrong bit per sequence
    >>> attnc.datasets.bits_per_sequence(logits, b)
    1.0
    """
    logits = _scored_logits(logits, batch)
    wrong = (logits > 0) != (batch.targets > 0.5)
    wrong &= batch.mask[:, :, None]
    return float(wrong.sum(axis=(1, 2)).mean())


def cost_per_sequence(logits: ArrayLike, batch: NTMBatch) -> float:
    """Mean over rows of the binary cross-entropy, in bits, summed over the
    scored steps' output bits: the "cost per sequence (bits)" of Graves et
    al.'s figures (0 for certain right predictions; 1 bit per output bit for
    a prediction of 1/2; large for confident mistakes).

    With p = sigmoid(logits) and t the target, each scored bit costs
    −(t log2 p + (1 − t) log2(1 − p)), computed from the logits in float64
    without overflow; every output channel counts (the end marker of repeat
    copy too).

    Parameters
    ----------
    logits : array (B, T, output_size), any real dtype, the shape of ``batch.targets``
    batch : NTMBatch

    Returns
    -------
    float, bits per sequence (>= 0)

    Example
    -------
    >>> b = attnc.datasets.CopyTask(bits=4).batch(3, length=2, seed=0)
    >>> attnc.datasets.cost_per_sequence(np.zeros(b.targets.shape), b)   # p = 1/2 on 2 x 4 bits
    8.0
    >>> round(attnc.datasets.cost_per_sequence(40 * (2 * b.targets - 1), b), 12)   # confident and right
    0.0
    """
    y = _scored_logits(logits, batch).astype(np.float64)
    t = batch.targets.astype(np.float64)
    # −log p(t | y) in nats, stably: max(y, 0) − y t + log(1 + e^{−|y|})
    nats = np.maximum(y, 0) - y * t + np.log1p(np.exp(-np.abs(y)))
    nats *= batch.mask[:, :, None]
    return float(nats.sum(axis=(1, 2)).mean() / np.log(2))


def _scored_logits(logits: ArrayLike, batch: NTMBatch) -> np.ndarray:
    """logits as an array of batch.targets' shape (checked)."""
    if not isinstance(batch, NTMBatch):
        raise TypeError(f"batch must be an NTMBatch, got {type(batch).__name__}")
    logits = np.asarray(logits)
    if logits.shape != batch.targets.shape:
        raise ValueError(f"logits must have the shape of batch.targets {batch.targets.shape}, got {logits.shape}")
    return logits
