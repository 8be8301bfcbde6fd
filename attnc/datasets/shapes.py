"""Two distant shapes: "are they the same colour?", the task of the
``sagan_shapes`` experiment (self-attention over feature maps, SAGAN).

Each image (3, size, size) shows two small shapes on a dark, slightly noisy
background: one in the left part of the image and one in the right part,
with at least ``gap`` empty columns between the two parts, so that a
convolution stack whose receptive field is narrower than ``gap`` never sees
both shapes from one pixel. Each shape has a random kind (square, diamond,
plus, ring, x; at half-size 1 the diamond and the plus coincide), half-size
(1..max_radius: 3 x 3, 5 x 5, ...), position (anywhere in its
part) and a colour from a palette of ``colours`` colours (with a little
per-shape jitter). The label is 1 when the two shapes have the same palette
colour, 0 otherwise; a batch has exactly as many of each label as it can
(⌊n/2⌋ or ⌈n/2⌉ of each). Differently coloured pairs draw the right colour
uniformly among the other palette colours.

Why this needs attention (for a convolutional classifier whose features see
less than ``gap`` columns, pooled by a global average and read by a linear
layer): the pooled features are a background term plus phi(left shape) +
psi(right shape), and no linear function of phi(a) + psi(b) says "a == b"
for every palette pair: summing the two same-colour cases (a, a), (b, b)
and the two mixed ones (a, b), (b, a) gives the same total, so they cannot
lie on opposite sides of one threshold. A self-attention layer lets a pixel
of one shape read the other shape's colour, and the next layer compares
them locally.

Usage::

    task = attnc.datasets.SameColourShapes(size=12, colours=6, gap=6, max_radius=1)
    batch = task.batch(64, seed=0)            # images (64, 3, 12, 12) float32, labels (64,) int64
    batch.masks[:, 0]                          # (64, 12, 12) bool: the left shape's pixels
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._args import size_arg as _check_int
from .._typing import Array, DTypeLike
from .ntm_tasks import SeedLike, _dtype, _rng

__all__ = ["PALETTE", "SHAPE_KINDS", "SameColourShapes", "ShapePairBatch"]

PALETTE = (
    ("red", (0.9, 0.15, 0.1)),
    ("green", (0.15, 0.8, 0.2)),
    ("blue", (0.15, 0.3, 0.95)),
    ("yellow", (0.95, 0.85, 0.1)),
    ("magenta", (0.85, 0.2, 0.85)),
    ("cyan", (0.1, 0.85, 0.9)),
    ("orange", (1.0, 0.55, 0.1)),
    ("white", (0.95, 0.95, 0.95)),
)
SHAPE_KINDS = ("square", "diamond", "plus", "ring", "x")


@dataclass
class ShapePairBatch:
    """One batch of ``SameColourShapes`` (what its ``batch`` returns).

    Fields
    ------
    images   (n, 3, S, S) float32 or float64 (float32 by default), channels first
    labels   (n,) int64, 1 when the two shapes have the same palette colour
    masks    (n, 2, S, S) bool, the pixels of the left [0] and right [1] shape
    centres  (n, 2, 2) int64, (row, column) of each shape's centre
    colours  (n, 2) int64, palette indices (into ``PALETTE``)
    kinds    (n, 2) int64, indices into ``SHAPE_KINDS``
    radii    (n, 2) int64, half-sizes

    Example
    -------
    >>> b = attnc.datasets.SameColourShapes(size=12, gap=6, max_radius=1).batch(4, seed=0)
    >>> b.images.shape, b.images.dtype, b.masks.shape, b.labels.tolist()
    ((4, 3, 12, 12), dtype('float32'), (4, 2, 12, 12), [0, 0, 1, 1])
    >>> bool((b.labels == (b.colours[:, 0] == b.colours[:, 1])).all())
    True
    """

    images: Array
    labels: Array
    masks: Array
    centres: Array
    colours: Array
    kinds: Array
    radii: Array


class SameColourShapes:
    """Two distant shapes, "are they the same colour?" (see the module
    docstring); ``batch(n, seed=None, dtype=np.float32)`` draws n images as a
    ``ShapePairBatch`` (images (n, 3, size, size) float, labels (n,) int64).

    Parameters
    ----------
    size : int, the image side (at least gap + 2 (2 max_radius + 1))
    colours : int, the palette size (2..8, the first of ``PALETTE``)
    gap : int, empty columns between the left and right parts (> the
        receptive field of the convolutions before the attention)
    noise : float, standard deviation of the background noise
    jitter : float, standard deviation of each shape's colour around its palette colour
    max_radius : int, shapes' half-sizes are 1..max_radius
    clutter : int, single pixels of random palette colours scattered between
        the two parts (0: none)

    Example
    -------
    >>> task = attnc.datasets.SameColourShapes(size=12, colours=6, gap=6, max_radius=1)
    >>> b = task.batch(4, seed=0)
    >>> b.images.shape, b.images.dtype, b.labels.dtype, int(b.labels.sum())
    ((4, 3, 12, 12), dtype('float32'), dtype('int64'), 2)
    """

    def __init__(
        self,
        size: int = 20,
        colours: int = 6,
        gap: int = 6,
        noise: float = 0.05,
        jitter: float = 0.05,
        max_radius: int = 2,
        clutter: int = 0,
    ):
        self.gap = _check_int("gap", gap, 1)
        self.max_radius = _check_int("max_radius", max_radius, 1)
        self.size = _check_int("size", size, gap + 2 * (2 * self.max_radius + 1))
        self.colours = _check_int("colours", colours, 2)
        if self.colours > len(PALETTE):
            raise ValueError(f"colours must be <= {len(PALETTE)}, got {colours}")
        if not (noise >= 0 and jitter >= 0):
            raise ValueError(f"noise and jitter must be >= 0, got {noise!r}, {jitter!r}")
        self.noise, self.jitter = float(noise), float(jitter)
        self.part = (self.size - self.gap) // 2  # columns [0, part) and [size - part, size)
        self.clutter = _check_int("clutter", clutter, 0)
        if self.clutter > self.size * (self.size - 2 * self.part):
            raise ValueError(
                f"clutter must be <= the {self.size * (self.size - 2 * self.part)} pixels between "
                f"the parts, got {clutter}"
            )

    def __repr__(self) -> str:
        return (
            f"SameColourShapes(size={self.size}, colours={self.colours}, gap={self.gap}, noise={self.noise}, "
            f"max_radius={self.max_radius}, clutter={self.clutter})"
        )

    def batch(self, n: int, seed: SeedLike = None, dtype: DTypeLike = np.float32) -> ShapePairBatch:
        """n images, half of each label (⌊n/2⌋ or ⌈n/2⌉); dtype float32 or float64."""
        n = _check_int("n", n, 1)
        rng = _rng(seed)
        dt = _dtype(dtype)
        S, part = self.size, self.part
        labels = rng.permutation(np.arange(n) % 2).astype(np.int64)
        first = rng.integers(0, self.colours, n)
        other = (first + rng.integers(1, self.colours, n)) % self.colours  # uniform among the others
        colours = np.stack([first, np.where(labels == 1, first, other)], 1).astype(np.int64)
        kinds = rng.integers(0, len(SHAPE_KINDS), (n, 2)).astype(np.int64)
        radii = rng.integers(1, self.max_radius + 1, (n, 2)).astype(np.int64)
        rows = rng.integers(radii, S - radii)  # (n, 2), within the image
        lo = np.stack([radii[:, 0], S - part + radii[:, 1]], 1)
        hi = np.stack([part - radii[:, 0], S - radii[:, 1]], 1)
        cols = rng.integers(lo, hi)
        centres = np.stack([rows, cols], -1).astype(np.int64)
        grid = np.arange(S)
        dr = np.abs(grid[None, None, :, None] - rows[:, :, None, None])  # (n, 2, S, 1)
        dc = np.abs(grid[None, None, None, :] - cols[:, :, None, None])  # (n, 2, 1, S)
        r = radii[:, :, None, None]
        k = kinds[:, :, None, None]
        cheb = np.maximum(dr, dc)
        masks = np.where(
            k == 0,
            cheb <= r,
            np.where(
                k == 1,
                dr + dc <= r,
                np.where(
                    k == 2,
                    ((dr == 0) & (dc <= r)) | ((dc == 0) & (dr <= r)),
                    np.where(k == 3, cheb == r, (dr == dc) & (dr <= r)),
                ),
            ),
        )
        palette = np.array([c for _, c in PALETTE], np.float64)
        rgb = palette[colours] + self.jitter * rng.standard_normal((n, 2, 3))  # (n, 2, 3)
        images = self.noise * rng.standard_normal((n, 3, S, S))
        for s in range(2):
            images += masks[:, s, None] * rgb[:, s, :, None, None]
        if self.clutter:  # single pixels of random palette colours between the two parts
            between = S * (S - 2 * part)
            spots = np.argsort(rng.random((n, between)), axis=1)[:, : self.clutter]  # distinct, (n, k)
            spot_rows, spot_cols = spots // (S - 2 * part), part + spots % (S - 2 * part)
            spot_rgb = palette[rng.integers(0, self.colours, (n, self.clutter))]  # (n, k, 3)
            idx = np.arange(n)[:, None]
            for ch in range(3):
                images[idx, ch, spot_rows, spot_cols] += spot_rgb[..., ch]
        return ShapePairBatch(images.astype(dt), labels, masks, centres, colours, kinds, radii)
