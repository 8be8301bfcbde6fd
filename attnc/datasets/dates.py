"""Human-readable dates to ISO dates (Bahdanau-style character translation),
seeded NumPy only.

A draw is a uniform day between 1 January of ``years[0]`` and 31 December of
``years[1]`` (within 1950-2049, so that two-digit years are unambiguous:
50-99 are 19xx, 00-49 are 20xx) and a uniform format among ``FORMATS``
(16 formats, lower case, English names; weekdays are computed from the date
with ``datetime``, never typed in). For 2026-11-22, a Sunday:

====================  ===========================
name                  source
====================  ===========================
weekday_d_month_y     sunday 22 november 2026
dd/mm/yy              22/11/26
mon_d,_y              nov 22, 2026
yyyy.mm.dd            2026.11.22
d_mon_y               22 nov 2026
month_dth,_y          november 22nd, 2026
mm/dd/yyyy            11/22/2026
dd-mm-yyyy            22-11-2026
d_month_y             22 november 2026
wkd,_mon_d,_y         sun, nov 22, 2026
the_dth_of_month_y    the 22nd of november 2026
month_d,_y            november 22, 2026
d.m.yy                22.11.26 (no zero padding: 2.3.26)
yyyymmdd              20261122
dth_month_y           22nd november 2026
yyyy-mm-dd            2026-11-22
====================  ===========================

Every source has at most ``MAX_INPUT_LEN = 30`` characters and determines its
date (no string arises from two dates); the target is always the 10
characters "yyyy-mm-dd".

Splits: a draw belongs to "test" when the stable hash (blake2b) of its source
string (``split_by="source"``, the default) or of its ISO date
(``split_by="date"``: held-out dates are never seen in any format) is 0 mod 4
(``date_split``), else to "train"; only draws of the asked split are kept, so
the two splits never share a source string.

Vocabularies (``SOURCE_VOCAB``, ``TARGET_VOCAB``, character ``Vocab``s): PAD 0,
BOS 1, EOS 2, then the characters of ``SOURCE_ALPHABET`` (" ,-./0-9a-z", ids
3..43, size 44) and ``TARGET_ALPHABET`` ("-0123456789": "-" = 3, digit d =
4 + d, size 14).

The same arguments give the same strings, bit for bit, on any machine.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import numpy as np

from .._typing import Array, ArrayLike
from .sequences import _CHUNK, _batches, _check_distinct, _check_int, _exact_match
from .vocab import TextBatch, Vocab, teacher_forcing_arrays

MAX_INPUT_LEN = 30
TARGET_LEN = 10
SOURCE_ALPHABET = " ,-./0123456789abcdefghijklmnopqrstuvwxyz"
TARGET_ALPHABET = "-0123456789"
SOURCE_VOCAB = Vocab.chars(SOURCE_ALPHABET)
TARGET_VOCAB = Vocab.chars(TARGET_ALPHABET)

MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
MONTHS_SHORT = tuple(m[:3] for m in MONTHS)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")  # date.weekday()
WEEKDAYS_SHORT = tuple(w[:3] for w in WEEKDAYS)


def ordinal(day: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st, 22nd, 23rd, ..., 31st."""
    if 11 <= day % 100 <= 13:
        return f"{day}th"
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _fmt(name):
    def wrap(fn):
        _FORMATTERS.append((name, fn))
        return fn

    return wrap


_FORMATTERS: list = []
_fmt("weekday_d_month_y")(lambda d: f"{WEEKDAYS[d.weekday()]} {d.day} {MONTHS[d.month - 1]} {d.year}")
_fmt("dd/mm/yy")(lambda d: f"{d.day:02d}/{d.month:02d}/{d.year % 100:02d}")
_fmt("mon_d,_y")(lambda d: f"{MONTHS_SHORT[d.month - 1]} {d.day}, {d.year}")
_fmt("yyyy.mm.dd")(lambda d: f"{d.year}.{d.month:02d}.{d.day:02d}")
_fmt("d_mon_y")(lambda d: f"{d.day} {MONTHS_SHORT[d.month - 1]} {d.year}")
_fmt("month_dth,_y")(lambda d: f"{MONTHS[d.month - 1]} {ordinal(d.day)}, {d.year}")
_fmt("mm/dd/yyyy")(lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}")
_fmt("dd-mm-yyyy")(lambda d: f"{d.day:02d}-{d.month:02d}-{d.year}")
_fmt("d_month_y")(lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}")
_fmt("wkd,_mon_d,_y")(lambda d: f"{WEEKDAYS_SHORT[d.weekday()]}, {MONTHS_SHORT[d.month - 1]} {d.day}, {d.year}")
_fmt("the_dth_of_month_y")(lambda d: f"the {ordinal(d.day)} of {MONTHS[d.month - 1]} {d.year}")
_fmt("month_d,_y")(lambda d: f"{MONTHS[d.month - 1]} {d.day}, {d.year}")
_fmt("d.m.yy")(lambda d: f"{d.day}.{d.month}.{d.year % 100:02d}")
_fmt("yyyymmdd")(lambda d: f"{d.year}{d.month:02d}{d.day:02d}")
_fmt("dth_month_y")(lambda d: f"{ordinal(d.day)} {MONTHS[d.month - 1]} {d.year}")
_fmt("yyyy-mm-dd")(lambda d: d.isoformat())

FORMATS: tuple[str, ...] = tuple(name for name, _ in _FORMATTERS)
_FORMAT_FN = dict(_FORMATTERS)


def format_date(date: datetime.date | str | np.datetime64, fmt: str) -> str:
    """The source string of a date in one format of ``FORMATS`` (the table in
    the module docstring).

    Parameters
    ----------
    date : datetime.date, ISO string "yyyy-mm-dd" or np.datetime64 (any
        unit; cast to dtype datetime64[D])
    fmt : str, a name from ``FORMATS`` such as "dd/mm/yy" or "the_dth_of_month_y"

    Returns
    -------
    str, lower case, at most 30 characters

    Example
    -------
    >>> attnc.datasets.format_date("2026-11-22", "the_dth_of_month_y")
    'the 22nd of november 2026'
    >>> attnc.datasets.format_date(np.datetime64("2026-03-02"), "wkd,_mon_d,_y")
    'mon, mar 2, 2026'
    """
    if isinstance(date, str):
        date = datetime.date.fromisoformat(date)
    elif isinstance(date, np.datetime64):
        date = date.astype("datetime64[D]").astype(datetime.date)
    try:
        fn = _FORMAT_FN[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; choices: {', '.join(FORMATS)}") from None
    return fn(date)


def date_split(text: str) -> Literal["train", "test"]:
    """ "test" or "train" for a source string (or ISO date), by a stable hash:
    blake2b of its UTF-8 bytes (an 8-byte digest read as a little-endian
    int), "test" when 0 mod 4.

    Parameters
    ----------
    text : str, a source string (``split_by="source"``) or an ISO date
        "yyyy-mm-dd" (``split_by="date"``)

    Returns
    -------
    str, "test" (about a quarter of the strings) or "train"

    Example
    -------
    >>> [attnc.datasets.date_split(s) for s in ["nov 22, 2026", "11/22/2026", "2026-11-22"]]
    ['test', 'train', 'train']
    """
    h = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    return "test" if h % 4 == 0 else "train"


class DatesTask:
    """Dates in many formats and their ISO forms (built by ``dates``).

    Parameters
    ----------
    sources : n str, the human-readable dates (characters of ``SOURCE_ALPHABET``, ≤ 30)
    dates : array (n,) of dates, converted to datetime64[D]
    formats : int array (n,), each source's index into ``FORMATS``
    split : "train" or "test", recorded

    Attributes
    ----------
    sources        list of n str, the human-readable dates (≤ 30 characters)
    targets        list of n str, "yyyy-mm-dd"
    dates          (n,) datetime64[D]
    formats        (n,) int64, index into ``format_names`` (= ``FORMATS``)
    input_lengths  (n,) int64, characters of each source (report accuracy by it)
    src_ids        (n, 30) int64, sources encoded with ``src_vocab``, PAD after
    tgt_ids        (n, 10) int64, targets encoded with ``tgt_vocab``
    src_vocab, tgt_vocab   character ``Vocab``s (PAD 0, BOS 1, EOS 2)
    split          "train" or "test"

    ``batch(indices)`` -> ``TextBatch`` (src padded to the batch's longest
    source, tgt_in/tgt_out of 11 steps: BOS + 10 characters / 10 characters +
    EOS); ``batches(batch_size, shuffle=False, seed=None, drop_last=False)``;
    ``targets_padded()`` (n, 11); ``exact_match(predictions)`` (n,) bool;
    ``accuracy_by(correct, by="length")`` {input length or format: fraction}.

    Example
    -------
    >>> from attnc.datasets.dates import FORMATS
    >>> task = attnc.datasets.DatesTask(["nov 22, 2026"], ["2026-11-22"], [FORMATS.index("mon_d,_y")], "test")
    >>> task.src_ids.shape, task.tgt_ids[0].tolist()
    ((1, 30), [6, 4, 6, 10, 3, 5, 5, 3, 6, 6])
    >>> task.exact_match(["2026-11-22"]).tolist(), task.accuracy_by([True], by="format")
    ([True], {'mon_d,_y': 1.0})
    """

    def __init__(self, sources: Iterable[str], dates: ArrayLike, formats: ArrayLike, split: Literal["train", "test"]):
        self.sources = list(sources)
        self.dates = np.asarray(dates, dtype="datetime64[D]")
        self.targets = [str(d) for d in self.dates]
        self.formats = np.asarray(formats, dtype=np.int64)
        self.format_names = FORMATS
        self.split = split
        self.src_vocab, self.tgt_vocab = SOURCE_VOCAB, TARGET_VOCAB
        self.pad, self.bos, self.eos = SOURCE_VOCAB.pad, SOURCE_VOCAB.bos, SOURCE_VOCAB.eos
        self.input_lengths = np.array([len(s) for s in self.sources], np.int64)
        self.max_input_len = MAX_INPUT_LEN
        self.target_len = TARGET_LEN
        n = len(self.sources)
        self.src_ids = (
            SOURCE_VOCAB.pad_batch(self.sources, length=MAX_INPUT_LEN).ids
            if n
            else np.zeros((0, MAX_INPUT_LEN), np.int64)
        )
        self.tgt_ids = (
            TARGET_VOCAB.pad_batch(self.targets, length=TARGET_LEN).ids if n else np.zeros((0, TARGET_LEN), np.int64)
        )

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, i: int) -> tuple[str, str]:
        """(source, target) strings of draw i."""
        return self.sources[i], self.targets[i]

    def keys(self) -> list[str]:
        """The source strings (equal keys = equal inputs)."""
        return list(self.sources)

    def batch(self, indices: ArrayLike) -> TextBatch:
        """The ``TextBatch`` of the draws at indices (B,): src (B, S) with S the
        longest of their sources, tgt_in/tgt_out (B, 11)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        lengths = self.input_lengths[idx]
        S = int(lengths.max()) if idx.size else 0
        src = self.src_ids[idx, :S].copy()
        tf = teacher_forcing_arrays(self.tgt_ids[idx], np.full(idx.size, TARGET_LEN, np.int64))
        return TextBatch(
            src,
            np.arange(S)[None, :] >= lengths[:, None],
            tf.tgt_in,
            tf.tgt_out,
            tf.key_padding_mask,
            lengths.copy(),
            tf.lengths,
        )

    def batches(
        self, batch_size: int, *, shuffle: bool = False, seed: int | None = None, drop_last: bool = False
    ) -> Iterator[TextBatch]:
        """Iterate over the task in batches (in order, or shuffled with seed)."""
        return _batches(self, batch_size, shuffle, seed, drop_last)

    def targets_padded(self, eos: bool = True) -> Array:
        """(n, 11) int64: each target's ids followed by EOS (or (n, 10) without)."""
        if not eos:
            return self.tgt_ids.copy()
        return np.concatenate([self.tgt_ids, np.full((len(self), 1), self.eos, np.int64)], axis=1)

    def decode(self, ids: ArrayLike) -> list[str]:
        """Target strings of predicted ids (B, T) (each up to its first EOS)."""
        return self.tgt_vocab.decode_batch(ids)

    def exact_match(self, predictions: ArrayLike | Sequence[str]) -> Array:
        """(n,) bool: prediction i equals target i. predictions: (n, T) ids
        (decoded up to the first EOS) or n strings."""
        return _exact_match(self, predictions, self.targets, "dates")

    def accuracy_by(self, correct: ArrayLike, by: Literal["length", "format"] = "length") -> dict[int | str, float]:
        """{input length (by="length") or format name (by="format"): fraction
        correct}, sorted by key, over the draws of each group."""
        correct = np.asarray(correct, dtype=bool).reshape(-1)
        if correct.size != len(self):
            raise ValueError(f"{correct.size} results for {len(self)} dates")
        if by == "length":
            keys = self.input_lengths
            return {int(k): float(correct[keys == k].mean()) for k in np.unique(keys)}
        if by == "format":
            return {FORMATS[k]: float(correct[self.formats == k].mean()) for k in np.unique(self.formats)}
        raise ValueError(f"by must be 'length' or 'format', got {by!r}")

    def __repr__(self) -> str:
        lo, hi = (int(self.input_lengths.min()), int(self.input_lengths.max())) if len(self) else (0, 0)
        return (
            f"DatesTask(n={len(self)}, split={self.split!r}, formats={len(np.unique(self.formats))}, "
            f"input lengths {lo}-{hi}, src vocab {len(self.src_vocab)}, tgt vocab {len(self.tgt_vocab)})"
        )


def dates(
    n: int,
    seed: int | None = 0,
    *,
    split: Literal["train", "test"] = "train",
    formats: Sequence[str] | None = None,
    years: tuple[int, int] = (1950, 2049),
    split_by: Literal["source", "date"] = "source",
    unique: bool = False,
) -> DatesTask:
    """n human-readable dates and their ISO forms, from one split.

    Parameters
    ----------
    n : int, the number of dates
    seed : int or None
    split : "train" or "test" (see the module docstring)
    formats : names from ``FORMATS`` to draw from (default all, uniformly)
    years : (first, last) year, within 1950-2049
    split_by : "source" or "date", what the split hashes
    unique : bool, no source string twice

    Returns
    -------
    DatesTask: ``sources``/``targets`` (n strings), ``src_ids`` (n, 30) and
    ``tgt_ids`` (n, 10) int64; its ``batch(indices)`` gives ``TextBatch``es.

    Draws come in fixed rounds, so the first n are the same for any larger n.

    Example
    -------
    >>> task = attnc.datasets.dates(3, seed=0)
    >>> task.sources, task.targets
    (['12 sep 2013', '11 feb 2001', '23rd december 1976'], ['2013-09-12', '2001-02-11', '1976-12-23'])
    >>> b = task.batch([0, 1, 2])
    >>> b.src.shape, b.tgt_in.shape, b.tgt_in.dtype
    ((3, 18), (3, 11), dtype('int64'))
    """
    n = _check_int("n", n, 0)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if split_by not in ("source", "date"):
        raise ValueError(f"split_by must be 'source' or 'date', got {split_by!r}")
    names = FORMATS if formats is None else tuple(formats)
    if not names:
        raise ValueError("formats must not be empty")
    for f in names:
        if f not in _FORMAT_FN:
            raise ValueError(f"unknown format {f!r}; choices: {', '.join(FORMATS)}")
    fmt_index = np.array([FORMATS.index(f) for f in names], np.int64)
    y0, y1 = years
    y0, y1 = _check_int("years[0]", y0, 1950), _check_int("years[1]", y1, 1950)
    if y1 > 2049 or y0 > y1:
        raise ValueError(f"years must satisfy 1950 <= first <= last <= 2049, got {years!r}")
    first = datetime.date(y0, 1, 1).toordinal()
    last = datetime.date(y1, 12, 31).toordinal()
    if unique:  # at most one source per day and format
        _check_distinct(
            n,
            (last - first + 1) * len(set(names)),
            f"sources of {len(set(names))} formats over {last - first + 1} days",
        )
    fns = [_FORMAT_FN[FORMATS[k]] for k in fmt_index]
    rng = np.random.default_rng(seed)
    sources: list[str] = []
    ords: list[int] = []
    fmts: list[int] = []
    seen: set[str] | None = set() if unique else None
    split_cache: dict = {}
    rounds_without = 0
    while len(sources) < n:
        days = rng.integers(first, last + 1, size=_CHUNK)
        picks = rng.integers(0, len(fns), size=_CHUNK)
        kept = 0
        for o, p in zip(days.tolist(), picks.tolist()):
            d = datetime.date.fromordinal(o)
            s = fns[p](d)
            key = s if split_by == "source" else d.isoformat()
            in_split = split_cache.get(key)
            if in_split is None:
                in_split = split_cache[key] = date_split(key) == split
            if not in_split:
                continue
            if seen is not None:
                if s in seen:
                    continue
                seen.add(s)
            sources.append(s)
            ords.append(o)
            fmts.append(int(fmt_index[p]))
            kept += 1
        rounds_without = 0 if kept else rounds_without + 1
        if rounds_without >= 8:
            raise ValueError("cannot draw that many distinct dates from these formats and years")
    sources, ords, fmts = sources[:n], ords[:n], fmts[:n]
    epoch = datetime.date(1970, 1, 1).toordinal()
    days = (np.array(ords, np.int64) - epoch).astype("datetime64[D]")
    return DatesTask(sources, days, np.array(fmts, np.int64), split)
