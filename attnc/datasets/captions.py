"""Images of coloured shapes on a 3 × 3 grid with a sentence describing them,
and the feature grid a show-attend-tell captioner attends over; seeded NumPy
only.

Images
    24 × 24 × 3 float (H, W, RGB in [0, 1]), black background, a 3 × 3 grid
    of 8 × 8-pixel cells; cell (row, col) covers pixels [8·row, 8·row + 8) ×
    [8·col, 8·col + 8). An object is a colour (``COLOURS``: red (1, 0, 0),
    green (0, 1, 0), blue (0, 0, 1), yellow (1, 1, 0)) and a shape
    (``SHAPES``: square, circle, triangle; the 8 × 8 masks ``SHAPE_MASKS``)
    filling one cell. No noise: an image is a function of its content.

Content
    ``grid`` (3, 3) int64 cell codes: 0 = empty, else 1 + 3·colour + shape
    (colour and shape indices into ``COLOURS`` and ``SHAPES``). An image has
    one object, or (probability ``p_two``) two different objects (not the
    same colour and shape) in the same column or the same row.

Captions (unambiguous by construction)
    one object: "a {colour} {shape}";
    two: "a {colour} {shape} {relation} a {colour} {shape}", where the object
    named first is the one with the smaller code (colour first: red < green
    < blue < yellow, then square < circle < triangle), and the relation says
    where it is relative to the other: "above" / "below" (same column),
    "left of" / "right of" (same row). At most 8 words.

Features (``features=``), one vector per cell, L = 9 cells in row-major
order (l = 3·row + col), all computed from the cell's pixels:
    "descriptors" (F = 13): [occupied, mean R, mean G, mean B of the shape's
    pixels, area (shape pixels / 64), bounding-box fill (shape pixels /
    bounding-box area), top-row width (the width of the shape's top row /
    the bounding box's width), row one-hot (3), column one-hot (3)]; empty
    cells are zeros except the position one-hots. Square, circle and
    triangle have areas 36, 32, 24 pixels, fills 1, 8/9, 2/3 and top-row
    widths 1, 2/3, 1/3.
    "pixels" (F = 198): the cell's 8 × 8 × 3 pixels flattened (row, column,
    channel), then row one-hot (3) and column one-hot (3).
The one-hots tell the decoder where an attended cell is (soft attention's
context carries no position otherwise).

Splits: an image is "test" when the stable hash (blake2b) of its grid codes
is 0 mod 4 (``caption_split``), else "train"; only draws of the asked split
are kept, so no image (content) is in both. There are 2,484 distinct images
(108 with one object, 2,376 with two).

Vocabulary: ``VOCAB = Vocab.words(WORDS)``: PAD 0, BOS 1, EOS 2, UNK 3, then
"a" 4, "red" 5, "green" 6, "blue" 7, "yellow" 8, "square" 9, "circle" 10,
"triangle" 11, "above" 12, "below" 13, "left" 14, "right" 15, "of" 16
(size 17).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .._typing import Array, ArrayLike, DTypeLike
from .sequences import _CHUNK, IGNORE_INDEX, _batches, _check_distinct, _check_int, _exact_match
from .vocab import Vocab, teacher_forcing_arrays

GRID = 3
CELL = 8
IMAGE_SIZE = GRID * CELL
NUM_CELLS = GRID * GRID
MAX_CAPTION_WORDS = 8

COLOURS = ("red", "green", "blue", "yellow")
COLOUR_RGB = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
SHAPES = ("square", "circle", "triangle")
RELATIONS = ("above", "below", "left of", "right of")
WORDS = ("a",) + COLOURS + SHAPES + ("above", "below", "left", "right", "of")
VOCAB = Vocab.words(WORDS)
NUM_OBJECTS = len(COLOURS) * len(SHAPES)

_MASK_ART = {
    "square": ["........", ".######.", ".######.", ".######.", ".######.", ".######.", ".######.", "........"],
    "circle": ["........", "..####..", ".######.", ".######.", ".######.", ".######.", "..####..", "........"],
    "triangle": ["........", "...##...", "...##...", "..####..", "..####..", ".######.", ".######.", "........"],
}
SHAPE_MASKS = np.array([[[ch == "#" for ch in row] for row in _MASK_ART[s]] for s in SHAPES])  # (3, 8, 8) bool


def object_code(colour: int, shape: int) -> int:
    """The cell code of an object: 1 + 3·colour + shape."""
    return 1 + len(SHAPES) * colour + shape


def _code_cells() -> Array:
    """(13, 8, 8, 3) float64: the pixels of a cell of every code (0 = empty)."""
    cells = np.zeros((1 + NUM_OBJECTS, CELL, CELL, 3))
    for c in range(len(COLOURS)):
        for s in range(len(SHAPES)):
            cells[object_code(c, s)] = SHAPE_MASKS[s][:, :, None] * COLOUR_RGB[c]
    return cells


_CODE_CELLS = _code_cells()


def cell_descriptors(cell: Array) -> Array:
    """The 7 pixel descriptors of one (8, 8, 3) cell: occupied, mean RGB of
    the shape's pixels, area, bounding-box fill, top-row width (zeros when
    empty)."""
    mask = cell.max(axis=-1) > 0
    out = np.zeros(7)
    if not mask.any():
        return out
    rows, cols = np.nonzero(mask)
    r0, r1, c0, c1 = rows.min(), rows.max(), cols.min(), cols.max()
    width = c1 - c0 + 1
    out[0] = 1.0
    out[1:4] = cell[mask].mean(axis=0)
    out[4] = mask.sum() / (CELL * CELL)
    out[5] = mask.sum() / ((r1 - r0 + 1) * width)
    out[6] = mask[r0].sum() / width
    return out


def _position_onehots() -> Array:
    """(9, 6): row one-hot, column one-hot of each cell."""
    pos = np.zeros((NUM_CELLS, 2 * GRID))
    for l in range(NUM_CELLS):
        pos[l, l // GRID] = 1.0
        pos[l, GRID + l % GRID] = 1.0
    return pos


_POSITIONS = _position_onehots()
_CODE_DESCRIPTORS = np.stack([cell_descriptors(c) for c in _CODE_CELLS])  # (13, 7)
FEATURE_SIZES = {"descriptors": 7 + 2 * GRID, "pixels": CELL * CELL * 3 + 2 * GRID}


def render(grid: ArrayLike) -> Array:
    """Images (..., 24, 24, 3) float64 of grid codes (..., 3, 3)."""
    grid = np.asarray(grid, dtype=np.int64)
    cells = _CODE_CELLS[grid]  # (..., 3, 3, 8, 8, 3)
    lead = grid.shape[:-2]
    k = len(lead)
    order = tuple(range(k)) + (k, k + 2, k + 1, k + 3, k + 4)
    return cells.transpose(order).reshape(lead + (IMAGE_SIZE, IMAGE_SIZE, 3))


def grid_features(
    grid: ArrayLike, kind: Literal["descriptors", "pixels"] = "descriptors", dtype: DTypeLike = np.float32
) -> Array:
    """The feature grid (..., 9, F) of grid codes (..., 3, 3) (see the module docstring)."""
    grid = np.asarray(grid, dtype=np.int64)
    codes = grid.reshape(grid.shape[:-2] + (NUM_CELLS,))
    if kind == "descriptors":
        per_cell = _CODE_DESCRIPTORS[codes]
    elif kind == "pixels":
        per_cell = _CODE_CELLS.reshape(len(_CODE_CELLS), -1)[codes]
    else:
        raise ValueError(f"features must be 'descriptors' or 'pixels', got {kind!r}")
    pos = np.broadcast_to(_POSITIONS, codes.shape + (2 * GRID,))
    return np.concatenate([per_cell, pos], axis=-1).astype(dtype)


def caption_of(grid: ArrayLike) -> str:
    """The sentence of one grid of cell codes (the rule in the module docstring).

    Parameters
    ----------
    grid : int array (3, 3): 0 = empty, else 1 + 3·colour + shape (colours
        red, green, blue, yellow; shapes square, circle, triangle); one
        object, or two different ones sharing a row or a column

    Returns
    -------
    str, "a {colour} {shape}" or "a {colour} {shape} {relation} a {colour} {shape}"

    Example
    -------
    >>> grid = np.zeros((3, 3), np.int64)
    >>> grid[0, 0] = 1                   # a red square, top left
    >>> grid[2, 0] = 1 + 3 * 2 + 1       # a blue circle, bottom left
    >>> attnc.datasets.caption_of(grid)
    'a red square above a blue circle'
    """
    grid = np.asarray(grid, dtype=np.int64)
    cells = [(int(grid[r, c]), r, c) for r in range(GRID) for c in range(GRID) if grid[r, c]]
    if not 1 <= len(cells) <= 2:
        raise ValueError(f"a grid needs one or two objects, got {len(cells)}")

    def name(code):
        colour, shape = divmod(code - 1, len(SHAPES))
        return f"a {COLOURS[colour]} {SHAPES[shape]}"

    if len(cells) == 1:
        return name(cells[0][0])
    (c1, r1, k1), (c2, r2, k2) = sorted(cells)
    if c1 == c2:
        raise ValueError("the two objects must differ in colour or shape")
    if k1 == k2:
        rel = "above" if r1 < r2 else "below"
    elif r1 == r2:
        rel = "left of" if k1 < k2 else "right of"
    else:
        raise ValueError("the two objects must share a row or a column")
    return f"{name(c1)} {rel} {name(c2)}"


def content_keys(grid: ArrayLike) -> Array:
    """One int64 per grid (..., 3, 3): its codes as a base-13 number (equal keys = equal images)."""
    grid = np.asarray(grid, dtype=np.int64)
    codes = grid.reshape(grid.shape[:-2] + (NUM_CELLS,))
    return codes @ ((1 + NUM_OBJECTS) ** np.arange(NUM_CELLS, dtype=np.int64))


def caption_split(grid: ArrayLike) -> Literal["train", "test"]:
    """ "test" or "train" for one image, by a stable hash: blake2b of its
    grid's int64 codes (little-endian, row-major), "test" when 0 mod 4.

    Parameters
    ----------
    grid : int array (3, 3) of cell codes

    Returns
    -------
    str, "test" (about a quarter of the images) or "train"

    Example
    -------
    >>> grid = np.zeros((3, 3), np.int64)
    >>> grid[1, 1] = 5                   # a green circle in the middle
    >>> attnc.datasets.caption_of(grid), attnc.datasets.caption_split(grid)
    ('a green circle', 'test')
    """
    data = np.ascontiguousarray(grid, dtype="<i8").tobytes()
    h = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return "test" if h % 4 == 0 else "train"


@dataclass(frozen=True)
class CaptionBatch:
    """One batch of images to caption (what ``CaptionsTask.batch`` returns;
    torch's mask meaning: True = padding).

    Fields
    ------
    features               (B, 9, F) float32 or float64, the cells the decoder attends over
    tgt_in                 (B, T) int64: BOS, words..., PAD after
    tgt_out                (B, T) int64: words..., EOS, IGNORE_INDEX (-100) after
    tgt_key_padding_mask   (B, T) bool
    tgt_lengths            (B,) int64: words + 1 (the decoder steps that count)

    T = the batch's longest caption + 1; ``num_tokens`` counts the targets
    that are not IGNORE_INDEX.

    Example
    -------
    >>> b = attnc.datasets.captions(4, seed=0).batch([0, 3])
    >>> b.features.shape, b.features.dtype, b.tgt_in.shape, b.tgt_lengths.tolist()
    ((2, 9, 13), dtype('float32'), (2, 8), [8, 4])
    >>> b.tgt_out[1].tolist(), b.num_tokens
    ([4, 6, 10, 2, -100, -100, -100, -100], 12)
    """

    features: Array
    tgt_in: Array
    tgt_out: Array
    tgt_key_padding_mask: Array
    tgt_lengths: Array

    def __len__(self) -> int:
        return self.features.shape[0]

    @property
    def num_tokens(self) -> int:
        """Target tokens that count in the loss (EOS included)."""
        return int(np.count_nonzero(self.tgt_out != IGNORE_INDEX))


class CaptionsTask:
    """Images of shapes and their captions (built by ``captions``).

    Parameters
    ----------
    grid : int array (n, 3, 3) of cell codes, each grid a valid image (see ``caption_of``)
    split : "train" or "test", recorded
    features : "descriptors" (F = 13) or "pixels" (F = 198)
    dtype : float32 or float64, of features and images

    Attributes
    ----------
    grid             (n, 3, 3) int64 cell codes (0 empty, 1 + 3·colour + shape)
    captions         list of n str
    caption_ids      (n, 8) int64, the captions' word ids, PAD after
    caption_lengths  (n,) int64, words per caption (3, 7 or 8)
    num_objects      (n,) int64, 1 or 2
    features         (n, 9, F) float, F = 13 ("descriptors") or 198 ("pixels")
    feature_kind     "descriptors" or "pixels"
    vocab            the word ``Vocab`` (``VOCAB``)
    split            "train" or "test"

    ``images(indices=None)`` -> (B, 24, 24, 3) float (rendered on demand);
    ``batch(indices)`` -> ``CaptionBatch``; ``batches(batch_size, shuffle=False,
    seed=None, drop_last=False)``; ``targets_padded()`` (n, 9);
    ``exact_match(predictions)`` (n,) bool; ``keys()`` content keys.

    Example
    -------
    >>> grid = np.zeros((1, 3, 3), np.int64)
    >>> grid[0, 1, 0], grid[0, 1, 2] = 1, 12   # a red square, a yellow triangle
    >>> task = attnc.datasets.CaptionsTask(grid, "train")
    >>> task.captions, task.features.shape, task.images().shape
    (['a red square left of a yellow triangle'], (1, 9, 13), (1, 24, 24, 3))
    >>> task.exact_match(["a red square left of a yellow triangle"]).tolist()
    [True]
    """

    def __init__(
        self,
        grid: ArrayLike,
        split: Literal["train", "test"],
        features: Literal["descriptors", "pixels"] = "descriptors",
        dtype: DTypeLike = np.float32,
    ):
        self.grid = np.ascontiguousarray(grid, dtype=np.int64)
        self.split = split
        self.vocab = VOCAB
        self.pad, self.bos, self.eos = VOCAB.pad, VOCAB.bos, VOCAB.eos
        self.feature_kind = features
        self.dtype = np.dtype(dtype)
        self.captions = [caption_of(g) for g in self.grid]
        n = len(self.captions)
        if n:
            p = VOCAB.pad_batch(self.captions, length=MAX_CAPTION_WORDS)
            self.caption_ids, self.caption_lengths = p.ids, p.lengths
        else:
            self.caption_ids = np.zeros((0, MAX_CAPTION_WORDS), np.int64)
            self.caption_lengths = np.zeros(0, np.int64)
        self.num_objects = np.count_nonzero(self.grid.reshape(n, -1), axis=1).astype(np.int64)
        self.features = grid_features(self.grid, features, dtype)
        self.num_cells, self.feature_size = NUM_CELLS, self.features.shape[-1]

    def __len__(self) -> int:
        return self.grid.shape[0]

    def images(self, indices: ArrayLike | None = None) -> Array:
        """(B, 24, 24, 3) images of the draws at indices (all by default)."""
        g = self.grid if indices is None else self.grid[np.asarray(indices, dtype=np.int64).reshape(-1)]
        return render(g).astype(self.dtype)

    def image(self, i: int) -> Array:
        """(24, 24, 3) image of draw i."""
        return render(self.grid[i]).astype(self.dtype)

    def objects(self, i: int) -> list[tuple[int, int, str, str]]:
        """(row, col, colour, shape) of every object of draw i, in reading order."""
        out = []
        for r in range(GRID):
            for c in range(GRID):
                code = int(self.grid[i, r, c])
                if code:
                    colour, shape = divmod(code - 1, len(SHAPES))
                    out.append((r, c, COLOURS[colour], SHAPES[shape]))
        return out

    def keys(self) -> Array:
        """(n,) int64 content keys (equal keys = equal images)."""
        return content_keys(self.grid)

    def batch(self, indices: ArrayLike) -> CaptionBatch:
        """The ``CaptionBatch`` of the draws at indices (B,)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        tf = teacher_forcing_arrays(self.caption_ids[idx], self.caption_lengths[idx])
        return CaptionBatch(self.features[idx], tf.tgt_in, tf.tgt_out, tf.key_padding_mask, tf.lengths)

    def batches(
        self, batch_size: int, *, shuffle: bool = False, seed: int | None = None, drop_last: bool = False
    ) -> Iterator[CaptionBatch]:
        """Iterate over the task in batches (in order, or shuffled with seed)."""
        return _batches(self, batch_size, shuffle, seed, drop_last)

    def targets_padded(self, eos: bool = True) -> Array:
        """(n, 9) int64: each caption's ids, EOS, then PAD ((n, 8) without EOS)."""
        n = len(self)
        out = np.full((n, MAX_CAPTION_WORDS + int(eos)), self.pad, np.int64)
        out[:, :MAX_CAPTION_WORDS] = self.caption_ids
        if eos:
            out[np.arange(n), self.caption_lengths] = self.eos
        return out

    def decode(self, ids: ArrayLike) -> list[str]:
        """Sentences of predicted word ids (B, T) (each up to its first EOS)."""
        return self.vocab.decode_batch(ids)

    def exact_match(self, predictions: ArrayLike | Sequence[str]) -> Array:
        """(n,) bool: prediction i equals caption i. predictions: (n, T) ids
        (decoded up to the first EOS) or n strings, compared word by word."""
        return _exact_match(self, predictions, self.captions, "images", lambda p: " ".join(p.split()))

    def __repr__(self) -> str:
        two = int((self.num_objects == 2).sum())
        return (
            f"CaptionsTask(n={len(self)}, split={self.split!r}, {two} with two objects, "
            f"features {self.feature_kind} (9, {self.feature_size}), vocab {len(self.vocab)})"
        )


def captions(
    n: int,
    seed: int | None = 0,
    *,
    split: Literal["train", "test"] = "train",
    p_two: float = 0.75,
    features: Literal["descriptors", "pixels"] = "descriptors",
    dtype: DTypeLike = np.float32,
    unique: bool = False,
) -> CaptionsTask:
    """n captioned images of shapes, from one split (with replacement unless
    ``unique``).

    Parameters
    ----------
    n : int, the number of images
    seed : int or None
    split : "train" or "test" (``caption_split``)
    p_two : float, the probability of two objects
    features : "descriptors" (F = 13) or "pixels" (F = 198)
    dtype : float32 or float64, of features and images
    unique : bool, no image twice

    Returns
    -------
    CaptionsTask: ``grid`` (n, 3, 3) int64, ``features`` (n, 9, F),
    ``captions`` (n strings), ``caption_ids`` (n, 8) int64, ``images()``
    (n, 24, 24, 3).

    Each draw: with probability p_two two different objects (uniform over
    the 12 × 11 ordered pairs) in a uniform line (row or column, 3 + 3) at
    two uniform distinct positions, else one uniform object in a uniform
    cell. A draw is kept when its image belongs to ``split``
    (``caption_split``). ``features``: "descriptors" (F = 13) or "pixels"
    (F = 198); ``dtype`` of features and images.

    Draws come in fixed rounds, so the first n are the same for any larger n.

    Example
    -------
    >>> task = attnc.datasets.captions(4, seed=0)
    >>> task.features.shape, task.features.dtype, task.images().shape
    ((4, 9, 13), dtype('float32'), (4, 24, 24, 3))
    >>> task.captions[:2]
    ['a blue square above a yellow square', 'a red square left of a green circle']
    """
    n = _check_int("n", n, 0)
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if features not in FEATURE_SIZES:
        raise ValueError(f"features must be 'descriptors' or 'pixels', got {features!r}")
    if not 0.0 <= float(p_two) <= 1.0:
        raise ValueError(f"p_two must be in [0, 1], got {p_two!r}")
    if unique:  # one object in a cell, or two different ones in two cells of a line (either order: one image)
        two = NUM_OBJECTS * (NUM_OBJECTS - 1) * 2 * GRID * GRID * (GRID - 1) // 2
        _check_distinct(n, NUM_OBJECTS * NUM_CELLS + two, "images (both splits)")
    rng = np.random.default_rng(seed)
    split_cache: dict = {}
    seen: set[int] | None = set() if unique else None
    out, have, rounds_without = [], 0, 0
    while have < n:
        m = _CHUNK
        two = rng.random(m) < p_two
        obj1 = rng.integers(0, NUM_OBJECTS, size=m)
        obj2 = (obj1 + rng.integers(1, NUM_OBJECTS, size=m)) % NUM_OBJECTS
        vertical = rng.integers(0, 2, size=m).astype(bool)
        line = rng.integers(0, GRID, size=m)
        a = rng.integers(0, GRID, size=m)
        b = (a + rng.integers(1, GRID, size=m)) % GRID
        cell = rng.integers(0, NUM_CELLS, size=m)
        grid = np.zeros((m, NUM_CELLS), np.int64)
        rows = np.arange(m)
        # one object: at cell; two: at (a, line) and (b, line) (vertical) or (line, a), (line, b)
        pos1 = np.where(two, np.where(vertical, a * GRID + line, line * GRID + a), cell)
        pos2 = np.where(vertical, b * GRID + line, line * GRID + b)
        grid[rows, pos1] = obj1 + 1
        grid[rows[two], pos2[two]] = obj2[two] + 1
        keys = content_keys(grid.reshape(m, GRID, GRID))
        keep = np.zeros(m, bool)
        for i, k in enumerate(keys.tolist()):
            s = split_cache.get(k)
            if s is None:
                s = split_cache[k] = caption_split(grid[i].reshape(GRID, GRID)) == split
            if not s:
                continue
            if seen is not None:
                if k in seen:
                    continue
                seen.add(k)
            keep[i] = True
        out.append(grid[keep])
        have += int(keep.sum())
        rounds_without = 0 if keep.any() else rounds_without + 1
        if rounds_without >= 8:
            raise ValueError(f"cannot draw {n} distinct images of the {split} split")
    grid = np.concatenate(out)[:n] if out else np.zeros((0, NUM_CELLS), np.int64)
    return CaptionsTask(grid.reshape(-1, GRID, GRID), split, features, dtype)
