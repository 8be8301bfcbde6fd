"""A fixed vocabulary of characters or words with reserved special tokens,
and the padded batches a recurrent or Transformer encoder-decoder trains on.

Token ids (the same for every ``Vocab``):

* ``PAD = 0``, ``BOS = 1``, ``EOS = 2``;
* ``UNK = 3`` when the vocabulary has an unknown token (word vocabularies by
  default, ``unk=True``); the first ordinary token is then id 4;
* without UNK (character vocabularies by default) the ordinary tokens start
  at id 3.

Ordinary tokens take ids in the order of the alphabet the vocabulary is built
from, so ids never depend on the data drawn. Masks keep torch's meaning
(``key_padding_mask``: True = padding, ignored) and targets that do not count
are ``IGNORE_INDEX = -100``, ``attnc.nn.cross_entropy``'s ``ignore_index``.

Example
-------
>>> from attnc.datasets import Vocab
>>> v = Vocab.chars("abc")
>>> v.encode("cab"), v.decode([5, 3, 4, 2, 0])
(array([5, 3, 4]), 'cab')
>>> tf = v.teacher_forcing(["ab", "c"])
>>> tf.tgt_in.tolist(), tf.tgt_out.tolist()
([[1, 3, 4], [1, 5, 0]], [[3, 4, 2], [5, 2, -100]])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, Union

import numpy as np

from .._typing import Array, ArrayLike
from .sequences import IGNORE_INDEX, Seq2SeqBatch

Text = Union[str, Sequence[str], Array]
"""A text to encode: a string (tokenized), a list of tokens, or an id array (kept as it is)."""

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_NAMES = ("<pad>", "<bos>", "<eos>", "<unk>")


class Padded(NamedTuple):
    """Sequences right-padded with PAD (a named tuple, what
    ``Vocab.pad_batch`` returns).

    Fields
    ------
    ids               (B, T) int64
    lengths           (B,) int64, the real tokens of each row (BOS/EOS included when added)
    key_padding_mask  (B, T) bool, True at padding (``position >= length``)

    Example
    -------
    >>> p = attnc.datasets.Vocab.chars("abc").pad_batch(["ab", "c"], bos=True)
    >>> p.ids.tolist(), p.lengths.tolist(), p.ids.dtype
    ([[1, 3, 4], [1, 5, 0]], [3, 2], dtype('int64'))
    >>> ids, lengths, mask = p  # unpacks as a tuple
    >>> mask.tolist()
    [[False, False, False], [False, False, True]]
    """

    ids: Array
    lengths: Array
    key_padding_mask: Array


class TeacherForcing(NamedTuple):
    """Decoder inputs and targets for teacher forcing, T = longest target + 1
    (a named tuple, what ``Vocab.teacher_forcing`` returns).

    Fields
    ------
    tgt_in            (B, T) int64: BOS, target..., PAD after
    tgt_out           (B, T) int64: target..., EOS, IGNORE_INDEX (-100) after
    lengths           (B,) int64: len(target) + 1, the decoder steps that count
    key_padding_mask  (B, T) bool, True at padding (``position >= length``)

    Example
    -------
    >>> tf = attnc.datasets.Vocab.chars("abc").teacher_forcing(["ab", "c"])
    >>> tf.tgt_in.tolist(), tf.tgt_out.tolist(), tf.lengths.tolist()
    ([[1, 3, 4], [1, 5, 0]], [[3, 4, 2], [5, 2, -100]], [3, 2])
    """

    tgt_in: Array
    tgt_out: Array
    lengths: Array
    key_padding_mask: Array


@dataclass(frozen=True)
class TextBatch(Seq2SeqBatch):
    """A ``Seq2SeqBatch`` with the lengths a recurrent encoder needs (what
    ``Vocab.batch`` and ``DatesTask.batch`` return; torch's mask meaning,
    True = padding).

    Fields
    ------
    src                    (B, S) int64, PAD after each source
    src_key_padding_mask   (B, S) bool
    tgt_in                 (B, T) int64: BOS, target..., PAD after
    tgt_out                (B, T) int64: target..., EOS, IGNORE_INDEX (-100) after
    tgt_key_padding_mask   (B, T) bool
    src_lengths            (B,) int64, real source tokens per row (``lengths=`` of attnc.nn.LSTM/GRU)
    tgt_lengths            (B,) int64, real decoder steps per row (target + EOS)

    Example
    -------
    >>> b = attnc.datasets.Vocab.chars("abc").batch(["abc", "a"], ["cba", "a"])
    >>> b.src.tolist(), b.src_lengths.tolist(), b.tgt_lengths.tolist()
    ([[3, 4, 5], [3, 0, 0]], [3, 1], [4, 2])
    >>> b.tgt_out.tolist()
    [[5, 4, 3, 2], [3, 2, -100, -100]]
    """

    src_lengths: Array
    tgt_lengths: Array


def _lengths_mask(lengths: Array, T: int) -> Array:
    return np.arange(T)[None, :] >= lengths[:, None]


class Vocab:
    """Tokens <-> ids over a fixed alphabet: PAD 0, BOS 1, EOS 2, UNK 3 when
    present, then the tokens in order (see the module docstring).

    Parameters
    ----------
    tokens : the ordinary tokens in id order (a string of characters for
        ``kind="char"``, an iterable of words for ``kind="word"``); no
        duplicates, none of the special names
    kind : "char" or "word"
    unk : bool, optional; an unknown-token id 3 (default ``kind == "word"``)

    ``Vocab.chars(alphabet)``, ``Vocab.words(words)`` build one of each kind.

    Attributes: ``kind``, ``pad``, ``bos``, ``eos``, ``unk`` (None without
    UNK), ``tokens`` (the token of every id, specials as "<pad>", ...),
    ``len(vocab)`` (the size, for embeddings and output layers).

    ``encode(text or tokens, bos=False, eos=False)`` -> (T,) int64;
    ``decode(ids)`` -> str (stops at the first EOS, drops PAD and BOS);
    ``pad_batch(seqs, ...)`` -> ``Padded`` ((B, T) int64 ids);
    ``teacher_forcing(targets)`` -> ``TeacherForcing``;
    ``batch(sources, targets)`` -> ``TextBatch``.

    Example
    -------
    >>> v = attnc.datasets.Vocab.words(["red", "cat"])
    >>> len(v), v.encode("red dog cat", eos=True).tolist(), v.encode("cat").dtype
    (6, [4, 3, 5, 2], dtype('int64'))
    >>> v.decode([1, 4, 5, 2, 0])
    'red cat'
    """

    def __init__(self, tokens: Iterable[str], *, kind: Literal["char", "word"] = "char", unk: bool | None = None):
        if kind not in ("char", "word"):
            raise ValueError(f"kind must be 'char' or 'word', got {kind!r}")
        tokens = list(tokens)
        for t in tokens:
            if not isinstance(t, str) or not t:
                raise ValueError(f"tokens must be non-empty strings, got {t!r}")
            if kind == "char" and len(t) != 1:
                raise ValueError(f"a character vocabulary needs single characters, got {t!r}")
            if kind == "word" and t.split() != [t]:
                raise ValueError(f"words may not contain whitespace, got {t!r}")
            if t in SPECIAL_NAMES:
                raise ValueError(f"{t!r} is a reserved name")
        if len(set(tokens)) != len(tokens):
            raise ValueError("tokens must be distinct")
        self.kind = kind
        self.has_unk = (kind == "word") if unk is None else bool(unk)
        self.pad, self.bos, self.eos = PAD, BOS, EOS
        self.unk = UNK if self.has_unk else None
        n_special = 4 if self.has_unk else 3
        self.tokens = list(SPECIAL_NAMES[:n_special]) + tokens
        self._ids = {t: i + n_special for i, t in enumerate(tokens)}
        self.first_id = n_special
        # character lookup through a table (fast vectorised encoding)
        self._table = None
        if kind == "char" and all(ord(t) < 128 for t in tokens):
            table = np.full(128, -1, np.int64)
            for t, i in self._ids.items():
                table[ord(t)] = i
            self._table = table

    @classmethod
    def chars(cls, alphabet: Iterable[str], *, unk: bool = False) -> Vocab:
        """A character vocabulary: ``alphabet[k]`` gets id 3 + k (4 + k with UNK)."""
        return cls(list(alphabet), kind="char", unk=unk)

    @classmethod
    def words(cls, words: Iterable[str], *, unk: bool = True) -> Vocab:
        """A word vocabulary: ``words[k]`` gets id 4 + k (3 + k without UNK)."""
        return cls(list(words), kind="word", unk=unk)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def size(self) -> int:
        """The number of ids (= ``len(vocab)``)."""
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __getitem__(self, token: str) -> int:
        return self.id(token)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and (self.kind, self.tokens) == (other.kind, other.tokens)

    def __hash__(self) -> int:
        return hash((self.kind, tuple(self.tokens)))

    def __repr__(self) -> str:
        body = "".join(self.tokens[self.first_id :]) if self.kind == "char" else " ".join(self.tokens[self.first_id :])
        if len(body) > 60:
            body = body[:57] + "..."
        unk = ", UNK=3" if self.has_unk else ""
        return f"Vocab({self.kind}, size={len(self)}, PAD=0, BOS=1, EOS=2{unk}: {body!r})"

    # ------------------------------------------------------------------ tokens

    def id(self, token: str) -> int:
        """The id of one token (UNK for an unknown one, or KeyError without UNK)."""
        i = self._ids.get(token)
        if i is None:
            if token in SPECIAL_NAMES[: self.first_id]:
                return SPECIAL_NAMES.index(token)
            if self.has_unk:
                return UNK
            raise KeyError(f"{token!r} is not in the vocabulary")
        return i

    def token(self, i: int) -> str:
        """The token of id i (specials as "<pad>", "<bos>", ...)."""
        return self.tokens[int(i)]

    def tokenize(self, text: str) -> list[str]:
        """Characters of text (char), or its whitespace-separated words (word)."""
        return list(text) if self.kind == "char" else text.split()

    def encode(self, text: str | Sequence[str], *, bos: bool = False, eos: bool = False) -> Array:
        """(T,) int64 ids of a string (tokenized) or a list of tokens, with BOS
        first and/or EOS last on request."""
        if isinstance(text, str) and self.kind == "char" and self._table is not None and text.isascii():
            codes = np.frombuffer(text.encode("ascii"), np.uint8)
            ids = self._table[codes]
            if (ids < 0).any():
                bad = text[int(np.argmax(ids < 0))]
                if not self.has_unk:
                    raise KeyError(f"{bad!r} is not in the vocabulary")
                ids = np.where(ids < 0, UNK, ids)
        else:
            toks = self.tokenize(text) if isinstance(text, str) else list(text)
            ids = np.array([self.id(t) for t in toks], dtype=np.int64)
        parts = (
            ([np.array([BOS], np.int64)] if bos else [])
            + [ids.astype(np.int64, copy=False)]
            + ([np.array([EOS], np.int64)] if eos else [])
        )
        return np.concatenate(parts) if len(parts) > 1 else ids.astype(np.int64)

    def decode(self, ids: ArrayLike, *, stop_at_eos: bool = True, skip_special: bool = True) -> str:
        """The text of a 1-d id sequence: up to the first EOS (``stop_at_eos``),
        without PAD and BOS (``skip_special``; UNK stays as "<unk>"); characters
        joined without separator, words with single spaces. Negative ids (such
        as IGNORE_INDEX) are dropped."""
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == EOS and stop_at_eos:
                break
            if i < 0 or (skip_special and i in (PAD, BOS, EOS)):
                continue
            out.append(self.tokens[i])
        return ("" if self.kind == "char" else " ").join(out)

    def decode_batch(self, ids: ArrayLike, *, stop_at_eos: bool = True, skip_special: bool = True) -> list[str]:
        """``decode`` of every row of a (B, T) array."""
        return [self.decode(row, stop_at_eos=stop_at_eos, skip_special=skip_special) for row in np.asarray(ids)]

    # ------------------------------------------------------------------ batches

    def _encode_all(self, seqs: Sequence[Text]) -> list[Array]:
        return [s if isinstance(s, np.ndarray) else self.encode(s) for s in seqs]

    def pad_batch(
        self, seqs: Sequence[Text], *, bos: bool = False, eos: bool = False, length: int | None = None
    ) -> Padded:
        """Encode (strings, token lists, or id arrays as they are) and right-pad
        with PAD to (B, length) (default: the longest)."""
        rows = []
        for s in self._encode_all(seqs):
            s = np.asarray(s, np.int64)
            if bos:
                s = np.concatenate([[BOS], s])
            if eos:
                s = np.concatenate([s, [EOS]])
            rows.append(s)
        lengths = np.array([len(r) for r in rows], np.int64)
        longest = int(lengths.max()) if rows else 0
        T = longest if length is None else int(length)
        if T < longest:
            raise ValueError(f"length {T} is shorter than the longest sequence ({longest})")
        ids = np.full((len(rows), T), PAD, np.int64)
        for k, r in enumerate(rows):
            ids[k, : len(r)] = r
        return Padded(ids, lengths, _lengths_mask(lengths, T))

    def teacher_forcing(self, targets: Sequence[Text], *, length: int | None = None) -> TeacherForcing:
        """Decoder input and output for targets (strings, token lists or id
        arrays); ``length`` (default longest + 1) fixes T."""
        p = self.pad_batch(targets)
        return teacher_forcing_arrays(p.ids, p.lengths, length=length)

    def batch(
        self,
        sources: Sequence[Text],
        targets: Sequence[Text],
        *,
        src_length: int | None = None,
        tgt_length: int | None = None,
    ) -> TextBatch:
        """A ``TextBatch`` of sources (no BOS/EOS) and targets (teacher forcing)."""
        s = self.pad_batch(sources, length=src_length)
        t = self.teacher_forcing(targets, length=tgt_length)
        return TextBatch(s.ids, s.key_padding_mask, t.tgt_in, t.tgt_out, t.key_padding_mask, s.lengths, t.lengths)


def teacher_forcing_arrays(ids: ArrayLike, lengths: ArrayLike, *, length: int | None = None) -> TeacherForcing:
    """Teacher-forcing arrays from PAD-padded target ids (B, S) and their
    lengths (B,): T = S + 1 unless ``length`` is given (≥ longest + 1)."""
    ids = np.asarray(ids, np.int64)
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    B = ids.shape[0]
    longest = int(lengths.max()) if B else 0
    T = (longest + 1) if length is None else int(length)
    if T < longest + 1:
        raise ValueError(f"length {T} is shorter than the longest target + EOS ({longest + 1})")
    S = min(ids.shape[1], T - 1)
    valid = np.arange(S)[None, :] < lengths[:, None]
    body = np.where(valid, ids[:, :S], PAD)
    tgt_in = np.full((B, T), PAD, np.int64)
    tgt_in[:, 0] = BOS
    tgt_in[:, 1 : S + 1] = body
    tgt_out = np.full((B, T), IGNORE_INDEX, np.int64)
    tgt_out[:, :S] = np.where(valid, body, IGNORE_INDEX)
    tgt_out[np.arange(B), lengths] = EOS
    steps = lengths + 1
    return TeacherForcing(tgt_in, tgt_out, steps, _lengths_mask(steps, T))
