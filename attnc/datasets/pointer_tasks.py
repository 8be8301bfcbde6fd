"""The Pointer Networks tasks (Vinyals, Fortunato & Jaitly 2015), seeded.

Three tasks whose outputs are positions in the input, each a small object
whose ``batch(batch_size, ...)`` draws one ``PointerBatch``:

* ``PointerSortTask``: n numbers uniform in [0, 1); the target is the order
  that sorts them ascending (``np.argsort``, stable: equal values keep their
  index order).
* ``ConvexHullTask`` (sec. 4.2): n points uniform in the unit square; the
  target is the convex hull's vertices, counter-clockwise, starting from the
  lowest index among them (points inside the hull or on one of its edges
  between two vertices are not vertices), padded with -1.
* ``TSPTask`` (sec. 4.3): n points uniform in the unit square; the target is
  the shortest closed tour (exact, by Held-Karp dynamic programming in C, for
  n <= 12; the nearest-neighbour + 2-opt tour above, with Or-opt moves too if
  asked), starting at city 0, in
  its canonical direction ``tour[1] < tour[n-1]``; the batch also keeps the
  tours' lengths.

Every row of a batch has the same number n of inputs (drawn per batch, or
given), so ``lengths`` is n everywhere. Targets are computed from the inputs
as returned, after the cast to ``dtype``: they are exact for the arrays the
model sees.

``seed`` is an int, ``None`` (fresh entropy) or a ``np.random.Generator``
(consumed: successive batches from one generator differ). The same seed gives
the same arrays, bit for bit, on any machine.

Scores: ``sort_exact_match``, ``hull_accuracy`` and ``hull_area_coverage``
(the paper's two hull measures), and ``tour_length`` for tours (``tsp_tours``
solves given instances).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._typing import Array, ArrayLike, DTypeLike
from .ntm_tasks import SeedLike, _dtype, _rng
from .sequences import _check_int

__all__ = [
    "ConvexHullTask",
    "PointerBatch",
    "PointerSortTask",
    "TSPTask",
    "hull_accuracy",
    "hull_area_coverage",
    "sort_exact_match",
    "tour_length",
    "tsp_tours",
]

HELD_KARP_MAX_N = 20  # the largest n solved exactly (attnc_tsp_held_karp: 90 MB and ~0.2 s an instance at 20)
EXACT_BY_DEFAULT_MAX_N = 12  # tsp_tours(exact=None) and TSPTask solve exactly up to this n (fast: 0.1 ms)
_AREA_CHUNK = 1 << 20  # edge pairs per vectorised simple-polygon test


# --------------------------------------------------------------------------- the batch


@dataclass(frozen=True)
class PointerBatch:
    """One batch of a pointer task (what ``PointerSortTask.batch``,
    ``ConvexHullTask.batch`` and ``TSPTask.batch`` return).

    Fields
    ------
    inputs          (B, n, d) float32 or float64 (float32 by default): d = 1 (sort) or 2 (points)
    lengths         (B,) int64: the number of real inputs per row, n everywhere
    targets         (B, T) int64: input indices 0..n-1, padded with -1
                    (T is the longest target of the batch)
    target_lengths  (B,) int64: the number of indices before the padding
    tour_lengths    (B,) float64 (TSP only, else None): the target tours' closed lengths

    Example
    -------
    >>> b = attnc.datasets.ConvexHullTask().batch(2, n=6, seed=0)
    >>> b.inputs.shape, b.inputs.dtype, b.lengths.tolist(), b.tour_lengths is None
    ((2, 6, 2), dtype('float32'), [6, 6], True)
    >>> b.targets.tolist(), b.target_lengths.tolist()
    ([[1, 5, 2, 4, -1], [0, 2, 5, 3, 4]], [4, 5])
    """

    inputs: Array
    lengths: Array
    targets: Array
    target_lengths: Array
    tour_lengths: Array | None = None

    def __len__(self) -> int:
        return self.inputs.shape[0]


def _draw_n(rng, n, min_n, max_n, low):
    if n is None:
        return int(rng.integers(min_n, max_n + 1))
    return _check_int("n", n, low)


def _full(B, n):
    return np.full(B, n, np.int64)


# --------------------------------------------------------------------------- sort


class PointerSortTask:
    """Sorting by pointing: n numbers uniform in [0, 1), the target the indices
    that sort them ascending (T = n).

    ``input_size = 1``, ``constraint = "permutation"`` (a decoder may mask the
    indices it has already pointed at).

    Parameters
    ----------
    min_n, max_n : int, the range of n ``batch`` draws (one n per batch)

    ``batch(batch_size, n=None, seed=None, dtype=np.float32)`` ->
    ``PointerBatch``: inputs (B, n, 1) float, targets (B, n) int64.

    Example
    -------
    >>> b = attnc.datasets.PointerSortTask(min_n=5, max_n=10).batch(4, n=6, seed=0)
    >>> b.inputs.shape, b.targets.shape, b.lengths.tolist()
    ((4, 6, 1), (4, 6), [6, 6, 6, 6])
    >>> bool((np.diff(np.take_along_axis(b.inputs[..., 0], b.targets, 1), axis=1) >= 0).all())
    True
    """

    input_size = 1
    constraint = "permutation"

    def __init__(self, min_n: int = 5, max_n: int = 10):
        self.min_n = _check_int("min_n", min_n, 1)
        self.max_n = _check_int("max_n", max_n, self.min_n)

    def batch(
        self, batch_size: int, *, n: int | None = None, seed: SeedLike = None, dtype: DTypeLike = np.float32
    ) -> PointerBatch:
        """batch_size rows of one length: ``n`` when given (any int >= 1, e.g.
        longer than max_n to test generalisation), else drawn uniformly in
        [min_n, max_n]."""
        B = _check_int("batch_size", batch_size, 1)
        dt = _dtype(dtype)
        rng = _rng(seed)
        n = _draw_n(rng, n, self.min_n, self.max_n, 1)
        inputs = rng.random((B, n, 1)).astype(dt)
        targets = np.argsort(inputs[..., 0], axis=1, kind="stable").astype(np.int64)
        return PointerBatch(inputs, _full(B, n), targets, _full(B, n))

    def __repr__(self) -> str:
        return f"PointerSortTask(min_n={self.min_n}, max_n={self.max_n})"


# --------------------------------------------------------------------------- convex hull


def _hull_targets(P):
    """(targets (B, T) padded with -1, sizes (B,)) of the points P (B, n, 2):
    each row's hull vertices counter-clockwise from the lowest index, by
    Andrew's monotone chain in C (attnc_convex_hull, on attnc's threads)."""
    from .. import _core

    P = np.ascontiguousarray(P, np.float64)
    B, n, _ = P.shape
    hull = np.empty((B, n), np.int64)
    sizes = np.empty(B, np.int64)
    _core.convex_hull(hull=hull, sizes=sizes, points=P)
    return np.ascontiguousarray(hull[:, : int(sizes.max()) if B else 0]), sizes


class ConvexHullTask:
    """Planar convex hulls (Vinyals et al. 2015, sec. 4.2): n points uniform
    in the unit square, the target the hull's vertices counter-clockwise
    starting from the lowest index among them, padded with -1 to the largest
    hull of the batch (T <= n). Points on an edge between two vertices are
    not vertices.

    ``input_size = 2``, ``constraint = "hull"``.

    Parameters
    ----------
    min_n, max_n : int, the range of n ``batch`` draws (one n per batch, >= 3)

    ``batch(batch_size, n=None, seed=None, dtype=np.float32)`` ->
    ``PointerBatch``: inputs (B, n, 2) float, targets (B, T) int64 padded
    with -1, target_lengths (B,) int64.

    Example
    -------
    >>> b = attnc.datasets.ConvexHullTask().batch(3, n=4, seed=0)
    >>> b.inputs.shape, b.lengths.tolist(), b.targets.shape[0]
    ((3, 4, 2), [4, 4, 4], 3)
    >>> all(int(r[0]) == int(r[r >= 0].min()) for r in b.targets)  # starts at the lowest index
    True
    """

    input_size = 2
    constraint = "hull"

    def __init__(self, min_n: int = 5, max_n: int = 10):
        self.min_n = _check_int("min_n", min_n, 3)
        self.max_n = _check_int("max_n", max_n, self.min_n)

    def batch(
        self, batch_size: int, *, n: int | None = None, seed: SeedLike = None, dtype: DTypeLike = np.float32
    ) -> PointerBatch:
        """batch_size rows of one number of points: ``n`` when given (any int
        >= 3), else drawn uniformly in [min_n, max_n]."""
        B = _check_int("batch_size", batch_size, 1)
        dt = _dtype(dtype)
        rng = _rng(seed)
        n = _draw_n(rng, n, self.min_n, self.max_n, 3)
        inputs = rng.random((B, n, 2)).astype(dt)
        targets, sizes = _hull_targets(inputs)
        return PointerBatch(inputs, _full(B, n), targets, sizes)

    def __repr__(self) -> str:
        return f"ConvexHullTask(min_n={self.min_n}, max_n={self.max_n})"


# --------------------------------------------------------------------------- TSP


def _points(points: ArrayLike, name: str = "points") -> Array:
    p = np.asarray(points)
    if p.dtype.kind not in "fiu" or p.dtype == np.bool_:
        raise TypeError(f"{name} must be a real array, got dtype {p.dtype}")
    if p.ndim != 3 or p.shape[2] != 2:
        raise ValueError(f"{name} must have shape (B, n, 2), got {p.shape}")
    if p.shape[1] < 1:
        raise ValueError(f"{name} must hold at least 1 point per row, got n = 0")
    p = np.ascontiguousarray(p, np.float64)
    if not np.isfinite(p).all():
        raise ValueError(f"{name} must be finite")
    return p


def tsp_tours(points: ArrayLike, exact: bool | None = None, or_opt: bool = False) -> tuple[Array, Array]:
    """Closed tours of planar instances, solved in C on attnc's threads.

    Parameters
    ----------
    points : array (B, n, 2), any real dtype (computed in float64), finite
    exact : None: Held-Karp (optimal) for n <= 12, else the heuristic; True:
        Held-Karp (n <= 20 required: its table takes 90 MB and an instance
        about 0.2 s at n = 20); False: the heuristic, nearest neighbour from
        city 0 then 2-opt moves until none shortens the tour by more than 1e-12
    or_opt : bool, the heuristic also makes Or-opt moves (a segment of 1-3
        cities moved elsewhere, forwards or reversed), each followed by 2-opt
        again, until neither gains (closer to the optimum: about 1% above it
        at n = 20, against 2-opt's 3%)

    Returns
    -------
    tours : array (B, n), int64, starting at 0 with tour[1] < tour[n-1] (n >= 3)
    lengths : array (B,), float64, their closed Euclidean lengths

    Example
    -------
    >>> square = np.array([[[0, 0], [1, 1], [1, 0], [0, 1]]], float)
    >>> tours, lengths = attnc.datasets.tsp_tours(square)
    >>> tours.tolist(), lengths.tolist()
    ([[0, 2, 1, 3]], [4.0])
    """
    from .. import _core

    p = _points(points)
    if exact is not None and not isinstance(exact, (bool, np.bool_)):
        raise TypeError(f"exact must be None, True or False, got {exact!r}")
    if not isinstance(or_opt, (bool, np.bool_)):
        raise TypeError(f"or_opt must be True or False, got {or_opt!r}")
    B, n, _ = p.shape
    if exact and n > HELD_KARP_MAX_N:
        raise ValueError(
            f"exact=True solves n <= {HELD_KARP_MAX_N} cities (Held-Karp), got n = {n}; "
            "pass exact=False or None for heuristic tours"
        )
    use_exact = n <= EXACT_BY_DEFAULT_MAX_N if exact is None else bool(exact)
    solve = _core.tsp_held_karp if use_exact else _core.tsp_or_opt if or_opt else _core.tsp_two_opt
    tours = np.empty((B, n), np.int64)
    lengths = np.empty(B, np.float64)
    solve(tours=tours, lengths=lengths, points=p)
    return tours, lengths


def tour_length(points: ArrayLike, tours: ArrayLike) -> Array:
    """Closed Euclidean lengths of tours (computed in C).

    Parameters
    ----------
    points : array (B, n, 2), any real dtype (computed in float64)
    tours : int array (B, n), each row a permutation of 0..n-1, or (B, n + 1)
        closed tours whose last entry repeats the first

    Returns
    -------
    array (B,), float64

    Example
    -------
    >>> square = np.array([[[0, 0], [1, 0], [1, 1], [0, 1]]], float)
    >>> attnc.datasets.tour_length(square, [[0, 1, 2, 3, 0]]).tolist()
    [4.0]
    >>> round(float(attnc.datasets.tour_length(square, [[0, 2, 1, 3]])[0]), 4)  # crossing diagonals
    4.8284
    """
    from .. import _core

    p = _points(points)
    B, n, _ = p.shape
    t = np.asarray(tours)
    if t.dtype.kind not in "iu":
        raise TypeError(f"tours must be an integer array, got dtype {t.dtype}")
    if t.ndim != 2 or t.shape[0] != B or t.shape[1] not in (n, n + 1):
        raise ValueError(
            f"tours must have shape ({B}, {n}) or ({B}, {n + 1}) (closed) for points of shape {p.shape}, got {t.shape}"
        )
    if t.shape[1] == n + 1:
        open_ = t[:, 0] != t[:, -1]
        if open_.any():
            row = int(np.flatnonzero(open_)[0])
            raise ValueError(
                f"tours has n + 1 = {n + 1} columns, so each row must end where it starts; "
                f"row {row} starts at {t[row, 0]} and ends at {t[row, -1]}"
            )
        t = t[:, :n]
    t = np.ascontiguousarray(t, np.int64)
    lengths = np.empty(B, np.float64)
    _core.tsp_tour_length(lengths=lengths, points=p, tours=t)
    return lengths


class TSPTask:
    """The planar symmetric travelling salesman (Vinyals et al. 2015, sec.
    4.3): n cities uniform in the unit square, the target the shortest closed
    tour (Held-Karp, exact, for n <= 12; nearest neighbour + 2-opt above,
    with Or-opt moves too when ``or_opt``),
    starting at city 0, in the direction with ``tour[1] < tour[n-1]`` (T = n).
    ``batch.tour_lengths`` holds the target tours' lengths.

    ``input_size = 2``, ``constraint = "tour"``.

    Parameters
    ----------
    n : int, the default number of cities (>= 3)
    or_opt : bool, heuristic targets (n > 12) also improved by Or-opt moves
        (``tsp_tours(..., or_opt=True)``)

    ``batch(batch_size, n=None, seed=None, dtype=np.float32)`` ->
    ``PointerBatch``: inputs (B, n, 2) float, targets (B, n) int64,
    tour_lengths (B,) float64.

    Example
    -------
    >>> b = attnc.datasets.TSPTask(n=5).batch(8, seed=0)
    >>> b.inputs.shape, b.targets.shape, bool((b.targets[:, 0] == 0).all())
    ((8, 5, 2), (8, 5), True)
    >>> bool(np.allclose(attnc.datasets.tour_length(b.inputs, b.targets), b.tour_lengths))
    True
    """

    input_size = 2
    constraint = "tour"

    def __init__(self, n: int = 5, or_opt: bool = False):
        self.n = _check_int("n", n, 3)
        if not isinstance(or_opt, (bool, np.bool_)):
            raise TypeError(f"or_opt must be True or False, got {or_opt!r}")
        self.or_opt = bool(or_opt)

    def batch(
        self, batch_size: int, *, n: int | None = None, seed: SeedLike = None, dtype: DTypeLike = np.float32
    ) -> PointerBatch:
        """batch_size instances of ``n`` cities (default: the task's n; any
        int >= 3). Tours are solved on the inputs as cast to dtype."""
        B = _check_int("batch_size", batch_size, 1)
        dt = _dtype(dtype)
        rng = _rng(seed)
        n = self.n if n is None else _check_int("n", n, 3)
        inputs = rng.random((B, n, 2)).astype(dt)
        tours, lengths = tsp_tours(inputs, or_opt=self.or_opt)
        return PointerBatch(inputs, _full(B, n), tours, _full(B, n), lengths)

    def __repr__(self) -> str:
        return f"TSPTask(n={self.n}, or_opt={self.or_opt})"


# --------------------------------------------------------------------------- scoring


def _check_batch(batch: PointerBatch) -> None:
    if not isinstance(batch, PointerBatch):
        raise TypeError(f"batch must be a PointerBatch, got {type(batch).__name__}")


def _indices(indices: ArrayLike, batch: PointerBatch, min_width: int = 1) -> Array:
    """indices as a (B, L) int64 array of values in [-1, n)."""
    a = np.asarray(indices)
    if a.dtype.kind not in "iu":
        raise TypeError(f"indices must be an integer array, got dtype {a.dtype}")
    B, n = batch.inputs.shape[:2]
    if a.ndim != 2 or a.shape[0] != B or a.shape[1] < min_width:
        raise ValueError(f"indices must have shape ({B}, L) with L >= {min_width}, got {a.shape}")
    if a.size and (a.min() < -1 or a.max() >= n):
        raise ValueError(f"indices must lie in [-1, {n - 1}] (-1: padding), got values in [{a.min()}, {a.max()}]")
    return a.astype(np.int64, copy=False)


def _until_pad(a):
    """(B,) the number of entries before the first -1 of each row."""
    pad = a < 0
    return np.where(pad.any(axis=1), pad.argmax(axis=1), a.shape[1])


def sort_exact_match(indices: ArrayLike, batch: PointerBatch) -> float:
    """Fraction of rows whose predicted indices equal the target on the first
    n entries and (when the prediction is longer) are -1 after them.

    Parameters
    ----------
    indices : int array (B, L), L >= n, values in [-1, n) (-1: padding)
    batch : PointerBatch of ``PointerSortTask``

    Returns
    -------
    float in [0, 1]

    Example
    -------
    >>> b = attnc.datasets.PointerSortTask().batch(4, n=5, seed=0)
    >>> attnc.datasets.sort_exact_match(b.targets, b), attnc.datasets.sort_exact_match(b.targets[:, ::-1], b)
    (1.0, 0.0)
    """
    _check_batch(batch)
    n = batch.inputs.shape[1]
    a = _indices(indices, batch, n)
    ok = (a[:, :n] == batch.targets[:, :n]).all(axis=1) & (a[:, n:] == -1).all(axis=1)
    return float(ok.mean())


def hull_accuracy(indices: ArrayLike, batch: PointerBatch) -> float:
    """Fraction of rows whose prediction (the indices up to the first -1)
    equals the target hull exactly: the same vertices, in the same order,
    from the same start.

    Parameters
    ----------
    indices : int array (B, L), any L >= 1, values in [-1, n) (-1: padding)
    batch : PointerBatch of ``ConvexHullTask``

    Returns
    -------
    float in [0, 1]

    Example
    -------
    >>> b = attnc.datasets.ConvexHullTask().batch(2, n=6, seed=0)
    >>> b.targets.tolist()
    [[1, 5, 2, 4, -1], [0, 2, 5, 3, 4]]
    >>> attnc.datasets.hull_accuracy(b.targets, b)
    1.0
    >>> attnc.datasets.hull_accuracy([[1, 5, 2, 4, -1], [0, 4, 3, 5, 2]], b)  # row 1 clockwise: wrong
    0.5
    """
    _check_batch(batch)
    a = _indices(indices, batch)
    m, t = _until_pad(a), batch.target_lengths
    W = max(a.shape[1], batch.targets.shape[1])
    pa = np.full((len(a), W), -1, np.int64)
    pa[:, : a.shape[1]] = np.where(np.arange(a.shape[1])[None, :] < m[:, None], a, -1)
    pt = np.full((len(a), W), -1, np.int64)
    pt[:, : batch.targets.shape[1]] = batch.targets
    return float(((m == t) & (pa == pt).all(axis=1)).mean())


def _shoelace(V: Array, m: Array) -> Array:
    """|area| of polygons V (R, M, 2) with m (R,) vertices (the rest ignored)."""
    M = V.shape[1]
    j = np.arange(M)[None, :]
    nxt = np.where(j + 1 < m[:, None], j + 1, 0)
    Vn = np.take_along_axis(V, nxt[..., None], 1)
    term = V[..., 0] * Vn[..., 1] - Vn[..., 0] * V[..., 1]
    return 0.5 * np.abs(np.where(j < m[:, None], term, 0).sum(axis=1))


def _orient(a, b, c):
    return (b[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (b[..., 1] - a[..., 1]) * (c[..., 0] - a[..., 0])


def _on_box(a, b, c):
    """c within the bounding box of segment ab (used for collinear c)."""
    return (
        (np.minimum(a[..., 0], b[..., 0]) <= c[..., 0])
        & (c[..., 0] <= np.maximum(a[..., 0], b[..., 0]))
        & (np.minimum(a[..., 1], b[..., 1]) <= c[..., 1])
        & (c[..., 1] <= np.maximum(a[..., 1], b[..., 1]))
    )


def _simple(V, m):
    """(R,) bool: polygon V (R, M, 2) with m vertices is simple (no two edges
    meet except adjacent ones at their shared vertex; no zero-length edge)."""
    M = V.shape[1]
    j = np.arange(M)[None, :]
    nxt = np.where(j + 1 < m[:, None], j + 1, 0)
    nxt2 = np.take_along_axis(nxt, nxt, 1)
    A, Bv = V, np.take_along_axis(V, nxt[..., None], 1)  # edge i: A[i] -> Bv[i]
    C = np.take_along_axis(V, nxt2[..., None], 1)
    valid = j < m[:, None]
    zero_edge = (A == Bv).all(axis=-1) & valid
    # adjacent edges i, i+1 fold back on each other
    fold = (_orient(A, Bv, C) == 0) & (((A - Bv) * (C - Bv)).sum(axis=-1) > 0) & valid
    # non-adjacent edge pairs (i < k) must not meet at all
    p1, p2 = A[:, :, None], Bv[:, :, None]
    p3, p4 = A[:, None, :], Bv[:, None, :]
    o1, o2, o3, o4 = _orient(p1, p2, p3), _orient(p1, p2, p4), _orient(p3, p4, p1), _orient(p3, p4, p2)
    meet = (
        ((o1 > 0) & (o2 < 0) | (o1 < 0) & (o2 > 0)) & ((o3 > 0) & (o4 < 0) | (o3 < 0) & (o4 > 0))
        | (o1 == 0) & _on_box(p1, p2, p3)
        | (o2 == 0) & _on_box(p1, p2, p4)
        | (o3 == 0) & _on_box(p3, p4, p1)
        | (o4 == 0) & _on_box(p3, p4, p2)
    )
    i, k = np.arange(M)[:, None], np.arange(M)[None, :]
    mm = m[:, None, None]
    pair = (i[None] < k[None]) & (k[None] < mm) & (k[None] != i[None] + 1) & ~((i[None] == 0) & (k[None] == mm - 1))
    crossing = (meet & pair).any(axis=(1, 2))
    return ~(zero_edge.any(axis=1) | fold.any(axis=1) | crossing)


def hull_area_coverage(indices: ArrayLike, batch: PointerBatch) -> float:
    """Mean over rows of area(predicted polygon) / area(true hull), capped at
    1 (the paper's area coverage). The predicted polygon is the indices up to
    the first -1, in order; a prediction that is not a simple polygon with >= 3
    distinct vertices (repeated indices, crossing or overlapping edges) counts
    0, whichever its orientation. A row whose true hull has zero area (all
    points collinear) counts 1 if the prediction equals the target, else 0.

    Parameters
    ----------
    indices : int array (B, L), any L >= 1, values in [-1, n) (-1: padding)
    batch : PointerBatch of ``ConvexHullTask``

    Returns
    -------
    float in [0, 1]

    Example
    -------
    >>> b = attnc.datasets.ConvexHullTask().batch(2, n=6, seed=0)
    >>> attnc.datasets.hull_area_coverage(b.targets, b)
    1.0
    >>> attnc.datasets.hull_area_coverage([[1, 5, 2, 4, -1], [0, 4, 3, 5, 2]], b)  # orientation does not matter
    1.0
    >>> attnc.datasets.hull_area_coverage([[1, 5, 2, 4, -1], [0, 0, 3, -1, -1]], b)  # a repeated index counts 0
    0.5
    """
    _check_batch(batch)
    a = _indices(indices, batch)
    P = np.asarray(batch.inputs, np.float64)
    B = P.shape[0]
    rows = np.arange(B)
    m = _until_pad(a)
    t = batch.targets
    true_area = _shoelace(P[rows[:, None], np.maximum(t, 0)], batch.target_lengths)
    idx = np.where(np.arange(a.shape[1])[None, :] < m[:, None], a, -1)
    srt = np.sort(idx, axis=1)
    distinct = ~((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(axis=1)
    cover = np.zeros(B)
    ok = (m >= 3) & distinct & (true_area > 0)
    step = max(1, _AREA_CHUNK // max(int(m[ok].max(initial=1)), 1) ** 2)  # (rows, M, M) pair tests per chunk
    for s in range(0, B, step):
        r = rows[s : s + step][ok[s : s + step]]
        if r.size == 0:
            continue
        M = int(m[r].max())
        V = P[r[:, None], np.maximum(idx[r, :M], 0)]
        simple = _simple(V, m[r])
        area = _shoelace(V, m[r])
        cover[r] = np.where(simple, np.minimum(area / true_area[r], 1.0), 0.0)
    flat = true_area <= 0
    if flat.any():
        W = max(a.shape[1], t.shape[1])
        pa = np.full((B, W), -1, np.int64)
        pa[:, : a.shape[1]] = idx
        pt = np.full((B, W), -1, np.int64)
        pt[:, : t.shape[1]] = t
        cover[flat] = ((m == batch.target_lengths) & (pa == pt).all(axis=1))[flat]
    return float(cover.mean())
