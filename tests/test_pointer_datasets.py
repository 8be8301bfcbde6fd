"""attnc.datasets.pointer_tasks: the Pointer Networks tasks (sort, convex
hull, TSP) and their scores. Held-Karp tours against brute force over all
permutations (and against a NumPy Held-Karp to n = 15), 2-opt tours against
the optimum and against 2-opt optimality checked here, 2-opt + Or-opt tours
against the same heuristic written here in plain Python, hull targets against a brute-force vertex test and an angular
order written here, the metrics on hand-made cases, seeding and errors.
Well under a few seconds."""

import itertools

import numpy as np
import pytest

import attnc
from attnc import datasets
from attnc.datasets import (
    ConvexHullTask,
    PointerBatch,
    PointerSortTask,
    TSPTask,
    hull_accuracy,
    hull_area_coverage,
    sort_exact_match,
    tour_length,
    tsp_tours,
)

# --------------------------------------------------------------------------- references


def np_tour_length(points, tour):
    """Closed length of one tour (n,) over points (n, 2), NumPy."""
    p = np.asarray(points, np.float64)[np.asarray(tour)]
    return float(np.sqrt(((p - np.roll(p, -1, axis=0)) ** 2).sum(axis=1)).sum())


def brute_force_tsp(points):
    """(length, tour) of the shortest closed tour from city 0, canonical direction."""
    n = len(points)
    best = None
    for perm in itertools.permutations(range(1, n)):
        if n >= 3 and perm[0] > perm[-1]:
            continue  # each tour once, in its canonical direction
        tour = (0, *perm)
        length = np_tour_length(points, tour)
        if best is None or length < best[0]:
            best = (length, tour)
    return best


def cross(o, a, b):
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def on_segment(p, a, b):
    return (
        cross(a, b, p) == 0
        and min(a[0], b[0]) <= p[0] <= max(a[0], b[0])
        and min(a[1], b[1]) <= p[1] <= max(a[1], b[1])
    )


def in_closed_triangle(p, a, b, c):
    s1, s2, s3 = cross(a, b, p), cross(b, c, p), cross(c, a, p)
    return cross(a, b, c) != 0 and ((s1 >= 0 and s2 >= 0 and s3 >= 0) or (s1 <= 0 and s2 <= 0 and s3 <= 0))


def brute_force_hull(points):
    """The hull's vertices, CCW from the lowest index. Point i (the lowest
    index among equal points) is a vertex iff it is neither on a closed
    segment between two other points nor in a closed triangle of three
    (Caratheodory); the order is by angle around the vertices' centroid."""
    pts = [tuple(map(float, p)) for p in points]
    n = len(pts)
    vertices = []
    for i in range(n):
        if any(pts[j] == pts[i] for j in range(i)):
            continue
        others = [q for q in set(pts) if q != pts[i]]
        inside = any(on_segment(pts[i], *seg) for seg in itertools.combinations(others, 2)) or any(
            in_closed_triangle(pts[i], *tri) for tri in itertools.combinations(others, 3)
        )
        if not inside:
            vertices.append(i)
    centre = np.mean([pts[i] for i in vertices], axis=0)
    angles = [np.arctan2(pts[i][1] - centre[1], pts[i][0] - centre[0]) for i in vertices]
    ccw = [vertices[k] for k in np.argsort(angles)]
    start = ccw.index(min(ccw))
    return ccw[start:] + ccw[:start]


def signed_area(points, cycle):
    p = np.asarray(points, np.float64)[cycle]
    q = np.roll(p, -1, axis=0)
    return 0.5 * float((p[:, 0] * q[:, 1] - q[:, 0] * p[:, 1]).sum())


def hull_batch(points, targets):
    """A PointerBatch over hand-made points and hand-made targets (lists)."""
    points = np.asarray(points, np.float64)
    B, n = points.shape[:2]
    T = max(len(t) for t in targets)
    tg = np.full((B, T), -1, np.int64)
    for r, t in enumerate(targets):
        tg[r, : len(t)] = t
    return PointerBatch(points, np.full(B, n, np.int64), tg, np.array([len(t) for t in targets], np.int64))


# --------------------------------------------------------------------------- TSP


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7])
def test_held_karp_equals_brute_force(n):
    points = np.random.default_rng(n).random((6, n, 2))
    tours, lengths = tsp_tours(points)
    assert tours.dtype == np.int64 and tours.shape == (6, n) and lengths.dtype == np.float64
    for b in range(6):
        best_length, best_tour = brute_force_tsp(points[b])
        assert lengths[b] == pytest.approx(best_length, rel=1e-12, abs=1e-12)
        assert tuple(tours[b]) == best_tour
        assert tours[b, 0] == 0 and tours[b, 1] < tours[b, -1]
        assert lengths[b] == pytest.approx(np_tour_length(points[b], tours[b]), rel=1e-13)


def test_small_and_symmetric_cases():
    for n in (1, 2):
        tours, lengths = tsp_tours(np.random.default_rng(0).random((3, n, 2)))
        assert tours.tolist() == [list(range(n))] * 3
    assert tsp_tours(np.zeros((2, 1, 2)))[1].tolist() == [0.0, 0.0]
    # a square given out of order; a regular hexagon whose optimal tour is its boundary
    square = np.array([[[0, 0], [1, 1], [1, 0], [0, 1]]], float)
    for exact in (True, False):
        tours, lengths = tsp_tours(square, exact=exact)
        assert tours.tolist() == [[0, 2, 1, 3]] and lengths.tolist() == [4.0]
    angles = np.array([0, 3, 1, 5, 2, 4]) * np.pi / 3
    hexagon = np.stack([np.cos(angles), np.sin(angles)], -1)[None]
    tours, lengths = tsp_tours(hexagon)
    assert tours.tolist() == [[0, 2, 4, 1, 5, 3]]
    assert lengths[0] == pytest.approx(6.0, rel=1e-12)


def two_opt_move_exists(points, tour, eps=1e-9):
    n = len(tour)
    d = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    for i in range(n - 2):
        for j in range(i + 2, n):
            if i == 0 and j == n - 1:
                continue
            a, b, c, e = tour[i], tour[i + 1], tour[j], tour[(j + 1) % n]
            if d[a, b] + d[c, e] - d[a, c] - d[b, e] > eps:
                return True
    return False


def test_two_opt_is_valid_near_optimal_and_two_opt_optimal():
    rng = np.random.default_rng(1)
    for n in (5, 8, 10):
        points = rng.random((30, n, 2))
        _, opt = tsp_tours(points, exact=True)
        tours, lengths = tsp_tours(points, exact=False)
        assert (np.sort(tours, axis=1) == np.arange(n)).all()
        assert (tours[:, 0] == 0).all() and (tours[:, 1] < tours[:, -1]).all()
        assert (lengths >= opt - 1e-12).all() and (lengths <= 1.3 * opt).all()
        assert lengths.mean() <= 1.05 * opt.mean()
    points = rng.random((4, 40, 2))
    tours, lengths = tsp_tours(points)  # n > 12: 2-opt
    for b in range(4):
        assert sorted(tours[b]) == list(range(40)) and tours[b, 0] == 0 and tours[b, 1] < tours[b, -1]
        assert not two_opt_move_exists(points[b], tours[b])
        assert lengths[b] == pytest.approx(np_tour_length(points[b], tours[b]), rel=1e-13)
        assert lengths[b] < np_tour_length(points[b], np.arange(40))


def test_tours_do_not_depend_on_threads(restore_threads):
    points = np.random.default_rng(2).random((300, 9, 2))
    attnc.set_num_threads(1)
    one = [tsp_tours(points, exact=e) for e in (True, False)]
    attnc.set_num_threads(3)
    three = [tsp_tours(points, exact=e) for e in (True, False)]
    for (t1, l1), (t3, l3) in zip(one, three):
        np.testing.assert_array_equal(t1, t3)
        np.testing.assert_array_equal(l1, l3)


def test_tour_length_against_numpy():
    rng = np.random.default_rng(3)
    points = rng.random((7, 9, 2)).astype(np.float32)
    tours = np.stack([rng.permutation(9) for _ in range(7)])
    expected = [np_tour_length(points[b], tours[b]) for b in range(7)]
    np.testing.assert_allclose(tour_length(points, tours), expected, rtol=1e-13)
    closed = np.concatenate([tours, tours[:, :1]], axis=1)
    np.testing.assert_array_equal(tour_length(points, closed), tour_length(points, tours))
    np.testing.assert_allclose(tour_length(points, tours[:, ::-1].astype(np.int32)), expected, rtol=1e-13)
    assert tour_length(points[:0], tours[:0]).shape == (0,)


def test_tsp_task():
    task = TSPTask(n=6)
    assert (task.input_size, task.constraint) == (2, "tour")
    b = task.batch(50, seed=0)
    assert isinstance(b, PointerBatch) and len(b) == 50
    assert b.inputs.shape == (50, 6, 2) and b.inputs.dtype == np.float32
    assert b.targets.shape == (50, 6) and b.targets.dtype == np.int64
    assert b.lengths.tolist() == [6] * 50 and b.target_lengths.tolist() == [6] * 50
    assert ((b.inputs >= 0) & (b.inputs < 1)).all()
    tours, lengths = tsp_tours(b.inputs.astype(np.float64))
    np.testing.assert_array_equal(b.targets, tours)
    np.testing.assert_array_equal(b.tour_lengths, lengths)
    np.testing.assert_array_equal(tour_length(b.inputs, b.targets), b.tour_lengths)
    for r in range(5):
        assert b.tour_lengths[r] == pytest.approx(brute_force_tsp(b.inputs[r].astype(np.float64))[0], rel=1e-12)
    big = task.batch(3, n=20, seed=1, dtype=np.float64)  # 2-opt above 12
    assert big.targets.shape == (3, 20) and big.inputs.dtype == np.float64
    assert (np.sort(big.targets, 1) == np.arange(20)).all()
    assert PointerSortTask().batch(2, seed=0).tour_lengths is None


# --------------------------------------------------------------------------- convex hull


def test_hull_targets_against_brute_force():
    task = ConvexHullTask(min_n=5, max_n=10)
    assert (task.input_size, task.constraint) == (2, "hull")
    for n, seed in ((5, 0), (8, 1), (10, 2), (3, 3)):
        b = task.batch(25, n=n, seed=seed)
        assert b.inputs.shape == (25, n, 2) and b.lengths.tolist() == [n] * 25
        assert b.targets.shape == (25, int(b.target_lengths.max()))
        for r in range(25):
            t = b.targets[r, : b.target_lengths[r]].tolist()
            assert (b.targets[r, b.target_lengths[r] :] == -1).all()
            assert t == brute_force_hull(b.inputs[r])
            assert signed_area(b.inputs[r], t) > 0
            assert t[0] == min(t)


def test_hull_degenerate_cases_by_hand():
    # a square with points on its edges (not vertices), an inside point and a duplicate corner
    pts = [[0.5, 0.5], [1, 0], [0.5, 0], [1, 1], [0, 1], [0, 0.5], [1, 1], [0, 0]]
    from attnc.datasets.pointer_tasks import _hull_targets

    targets, sizes = _hull_targets(np.array([pts], float))
    assert targets.tolist() == [[1, 3, 4, 7]] and sizes.tolist() == [4]
    assert brute_force_hull(pts) == [1, 3, 4, 7]
    # all collinear: the two ends; all equal: one point
    targets, sizes = _hull_targets(np.array([[[0, 0], [2, 2], [1, 1]], [[3, 3], [3, 3], [3, 3]]], float))
    assert targets.tolist() == [[0, 1], [0, -1]] and sizes.tolist() == [2, 1]


def test_hull_many_rows_match_row_by_row():
    from attnc.datasets.pointer_tasks import _hull_targets

    points = np.random.default_rng(4).integers(0, 5, (400, 12, 2)).astype(float)  # collinear and repeated points, exact
    targets, sizes = _hull_targets(points)
    for r in range(0, 400, 7):
        one, s = _hull_targets(points[r : r + 1])
        assert one[0, : s[0]].tolist() == targets[r, : sizes[r]].tolist() == brute_force_hull(points[r])


def test_hull_larger_n_and_threads(restore_threads):
    """n = 24, uniform and on a grid (collinear and repeated points): brute
    force's hulls, the same bits with 1 and 2 threads."""
    from attnc.datasets.pointer_tasks import _hull_targets

    rng = np.random.default_rng(6)
    uniform = rng.random((300, 24, 2))
    grid = rng.integers(0, 7, (300, 24, 2)).astype(float)
    for p in (uniform, grid):
        attnc.set_num_threads(1)
        one = _hull_targets(p)
        attnc.set_num_threads(2)
        two = _hull_targets(p)
        np.testing.assert_array_equal(one[0], two[0])
        np.testing.assert_array_equal(one[1], two[1])
        for r in range(4):
            assert one[0][r, : one[1][r]].tolist() == brute_force_hull(p[r])


def test_hull_targets_refuse_bad_points():
    from attnc.datasets.pointer_tasks import _hull_targets

    with pytest.raises(ValueError, match=r"points\[0, 1, 0\] is nan"):
        _hull_targets(np.array([[[0, 0], [np.nan, 1], [1, 0]]]))


# --------------------------------------------------------------------------- sort


def test_sort_targets():
    task = PointerSortTask(min_n=5, max_n=10)
    assert (task.input_size, task.constraint) == (1, "permutation")
    b = task.batch(40, seed=0)
    n = b.inputs.shape[1]
    assert 5 <= n <= 10 and b.inputs.shape == (40, n, 1) and b.targets.shape == (40, n)
    np.testing.assert_array_equal(b.targets, np.argsort(b.inputs[..., 0], axis=1, kind="stable"))
    assert (np.diff(np.take_along_axis(b.inputs[..., 0], b.targets, 1), axis=1) >= 0).all()
    assert b.target_lengths.tolist() == [n] * 40 and b.lengths.tolist() == [n] * 40
    assert {task.batch(2, seed=s).inputs.shape[1] for s in range(60)} == set(range(5, 11))
    assert task.batch(2, n=30, seed=0).targets.shape == (2, 30)


# --------------------------------------------------------------------------- metrics


def test_sort_exact_match():
    b = PointerSortTask().batch(4, n=5, seed=0)
    assert sort_exact_match(b.targets, b) == 1.0
    assert sort_exact_match(b.targets[:, ::-1], b) == 0.0
    longer = np.concatenate([b.targets, np.full((4, 2), -1)], axis=1)
    assert sort_exact_match(longer, b) == 1.0
    longer[0, 6] = 2
    assert sort_exact_match(longer, b) == 0.75
    wrong = b.targets.copy()
    wrong[1, [0, 1]] = wrong[1, [1, 0]]
    assert sort_exact_match(wrong, b) == 0.75


SQUARE = [[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5], [0.5, 0.2]]


def test_hull_accuracy_by_hand():
    b = hull_batch([SQUARE, SQUARE], [[0, 1, 2, 3], [0, 1, 2, 3]])
    assert hull_accuracy(b.targets, b) == 1.0
    assert hull_accuracy([[0, 1, 2, 3, -1, 5], [0, 1, 2, 3, -1, -1]], b) == 1.0  # after -1: ignored
    assert hull_accuracy([[1, 2, 3, 0], [0, 3, 2, 1]], b) == 0.0  # another start, clockwise
    assert hull_accuracy([[0, 1, 2, -1], [0, 1, 2, 3]], b) == 0.5
    assert hull_accuracy([[0, 1, 2, 3, 4], [0, 1, 2, 3, -1]], b) == 0.5
    assert hull_accuracy([[0], [0]], b) == 0.0


def test_hull_area_coverage_by_hand():
    b = hull_batch([SQUARE], [[0, 1, 2, 3]])
    assert hull_area_coverage([[0, 1, 2, 3]], b) == 1.0
    assert hull_area_coverage([[0, 3, 2, 1]], b) == 1.0  # clockwise: the same polygon
    assert hull_area_coverage([[0, 1, 2]], b) == pytest.approx(0.5)
    assert hull_area_coverage([[0, 1, 2, -1, 3]], b) == pytest.approx(0.5)
    assert hull_area_coverage([[0, 1, 4]], b) == pytest.approx(0.25)
    assert hull_area_coverage([[0, 1, 2, 3, 5]], b) == pytest.approx(0.75)  # a dent: still simple
    assert hull_area_coverage([[0, 2, 1, 3]], b) == 0.0  # a bow tie: self-intersecting
    assert hull_area_coverage([[0, 1]], b) == 0.0
    assert hull_area_coverage([[0, 1, 2, 0]], b) == 0.0  # a repeated vertex
    assert hull_area_coverage([[0, 4, 2]], b) == 0.0  # collinear: folds onto itself
    # edges that touch: 0-1-2 and back through the centre 4 to 3 then the midpoint of 0-1 (on edge 0-1)
    touch = hull_batch([[[0, 0], [2, 0], [2, 2], [0, 2], [1, 0], [1, 1]]], [[0, 1, 2, 3]])
    assert hull_area_coverage([[0, 1, 2, 3]], touch) == 1.0
    assert hull_area_coverage([[0, 4, 1, 2, 3]], touch) == 1.0  # a point on an edge, straight through: simple
    assert hull_area_coverage([[0, 1, 2, 5, 4, 3]], touch) == 0.0  # 5-4 ends on edge 0-1
    # over a generated batch: the targets cover everything, and mean over rows
    g = ConvexHullTask().batch(30, n=9, seed=5)
    assert hull_area_coverage(g.targets, g) == pytest.approx(1.0)
    bad = g.targets.copy()
    bad[:10] = -1
    assert hull_area_coverage(bad, g) == pytest.approx(2 / 3)


# --------------------------------------------------------------------------- seeding


@pytest.mark.parametrize("task", [PointerSortTask(), ConvexHullTask(), TSPTask(n=5)])
def test_reproducible(task):
    a, b = task.batch(8, seed=11), task.batch(8, seed=11)
    for f in ("inputs", "lengths", "targets", "target_lengths"):
        assert getattr(a, f).tobytes() == getattr(b, f).tobytes()
    other = task.batch(8, seed=12).inputs
    assert not np.array_equal(a.inputs, other) or a.inputs.shape != other.shape
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    x1, y1 = task.batch(4, seed=g1), task.batch(4, seed=g1)
    x2 = task.batch(4, seed=g2)
    assert x1.inputs.tobytes() == x2.inputs.tobytes()
    assert x1.inputs.shape != y1.inputs.shape or not np.array_equal(x1.inputs, y1.inputs)
    c = task.batch(4, seed=11, dtype=np.float64)
    assert c.inputs.dtype == np.float64


# --------------------------------------------------------------------------- errors


def test_errors():
    with pytest.raises(ValueError, match="min_n"):
        PointerSortTask(min_n=0)
    with pytest.raises(ValueError, match="max_n"):
        ConvexHullTask(min_n=8, max_n=5)
    with pytest.raises(ValueError, match="min_n"):
        ConvexHullTask(min_n=2)
    with pytest.raises(ValueError, match="n must"):
        TSPTask(n=2)
    with pytest.raises(ValueError, match="batch_size"):
        TSPTask().batch(0)
    with pytest.raises(ValueError, match="n must"):
        ConvexHullTask().batch(2, n=2)
    with pytest.raises(TypeError, match="dtype"):
        PointerSortTask().batch(2, dtype=np.int32)
    with pytest.raises(TypeError, match="seed"):
        PointerSortTask().batch(2, seed="0")
    with pytest.raises(ValueError, match="n <= 20"):
        tsp_tours(np.zeros((1, 21, 2)), exact=True)
    with pytest.raises(TypeError, match="exact"):
        tsp_tours(np.zeros((1, 4, 2)), exact=1)
    with pytest.raises(ValueError, match=r"points must have shape \(B, n, 2\)"):
        tsp_tours(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="finite"):
        tsp_tours(np.full((1, 4, 2), np.nan))
    points = np.random.default_rng(0).random((2, 4, 2))
    with pytest.raises(ValueError, match=r"tours\[1\] is not a permutation"):
        tour_length(points, [[0, 1, 2, 3], [0, 1, 1, 3]])
    with pytest.raises(ValueError, match=r"tours\[0\] is not a permutation"):
        tour_length(points, [[0, 1, 2, 4], [0, 1, 2, 3]])
    with pytest.raises(ValueError, match="row 1"):
        tour_length(points, [[0, 1, 2, 3, 0], [0, 1, 2, 3, 1]])
    with pytest.raises(ValueError, match="tours must have shape"):
        tour_length(points, [[0, 1, 2], [0, 1, 2]])
    with pytest.raises(TypeError, match="tours"):
        tour_length(points, np.zeros((2, 4)))
    b = PointerSortTask().batch(2, n=5, seed=0)
    with pytest.raises(ValueError, match="indices must have shape"):
        sort_exact_match(b.targets[:, :4], b)
    with pytest.raises(ValueError, match=r"\[-1, 4\]"):
        sort_exact_match(b.targets + 1, b)
    with pytest.raises(TypeError, match="indices"):
        hull_accuracy(b.targets.astype(float), b)
    with pytest.raises(TypeError, match="batch"):
        hull_area_coverage(b.targets, b.inputs)
    with pytest.raises(ValueError, match="indices must have shape"):
        hull_area_coverage(b.targets[:1], b)


def test_exported():
    for name in (
        "PointerBatch",
        "PointerSortTask",
        "ConvexHullTask",
        "TSPTask",
        "sort_exact_match",
        "hull_accuracy",
        "hull_area_coverage",
        "tour_length",
        "tsp_tours",
    ):
        assert name in datasets.__all__ and hasattr(datasets, name)


# --------------------------------------------------------------------------- Held-Karp to n = 20, Or-opt


def np_held_karp(points):
    """Length of the shortest closed tour, by Held-Karp written here in NumPy:
    cost[S, j] over subsets S of cities 1..n-1 (bit j-1) ending at j, filled
    by subset size, each layer vectorised over its subsets."""
    p = np.asarray(points, np.float64)
    n = len(p)
    d = np.sqrt(((p[:, None] - p[None]) ** 2).sum(-1))
    m = n - 1
    cost = np.full((1 << m, m), np.inf)
    for j in range(m):
        cost[1 << j, j] = d[0, j + 1]
    subsets = np.arange(1 << m)
    sizes = np.array([bin(s).count("1") for s in subsets])
    for size in range(2, m + 1):
        S = subsets[sizes == size]
        for j in range(m):
            has = S[(S >> j) & 1 == 1]
            prev = has ^ (1 << j)
            cost[has, j] = (cost[prev] + d[1:, j + 1][None]).min(axis=1)
    return float((cost[(1 << m) - 1] + d[1:, 0]).min())


def py_local_search(points, or_opt=True, eps=1e-12):
    """The heuristic of tsp_tours(exact=False, or_opt=...) written here in
    plain Python from its description: the nearest-neighbour tour from city 0
    (ties: the lowest index), first-improvement 2-opt until no move gains
    more than eps, then (or_opt) the first Or-opt move that gains (segments
    of 1, 2, 3 cities from position 1 on, each between t[k] and t[k+1] for
    k = 0, 1, ..., forwards then reversed), 2-opt again, until no Or-opt
    move gains; canonical direction."""
    import math

    pts = [tuple(map(float, q)) for q in points]
    n = len(pts)

    def dist(i, j):
        dx, dy = pts[i][0] - pts[j][0], pts[i][1] - pts[j][1]
        return math.sqrt(dx * dx + dy * dy)

    t, left = [0], set(range(1, n))
    while left:
        t.append(min(left, key=lambda c: (dist(t[-1], c), c)))
        left.remove(t[-1])

    def two_opt():
        improved = True
        while improved:
            improved = False
            for i in range(n - 2):
                for j in range(i + 2, n):
                    if i == 0 and j == n - 1:
                        continue
                    a, b, c, e = t[i], t[i + 1], t[j], t[(j + 1) % n]
                    if (dist(a, b) + dist(c, e)) - (dist(a, c) + dist(b, e)) > eps:
                        t[i + 1 : j + 1] = t[i + 1 : j + 1][::-1]
                        improved = True

    def or_move():
        for L in (1, 2, 3):
            for s in range(1, n - L + 1):
                p, f, last, q = t[s - 1], t[s], t[s + L - 1], t[(s + L) % n]
                removed = (dist(p, f) + dist(last, q)) - dist(p, q)
                for k in range(n):
                    if s - 1 <= k <= s + L - 1:
                        continue
                    u, v = t[k], t[(k + 1) % n]
                    fwd = (dist(u, f) + dist(last, v)) - dist(u, v)
                    rev = (dist(u, last) + dist(f, v)) - dist(u, v)
                    if removed - fwd > eps or removed - rev > eps:
                        seg = t[s : s + L] if removed - fwd > eps else t[s : s + L][::-1]
                        rest = t[:s] + t[s + L :]
                        at = rest.index(u) + 1
                        t[:] = rest[:at] + seg + rest[at:]
                        return True
        return False

    two_opt()
    while or_opt and or_move():
        two_opt()
    if n >= 3 and t[1] > t[-1]:
        t[1:] = t[1:][::-1]
    return t


def or_opt_move_exists(points, tour, eps=1e-9):
    """Whether moving a segment of 1-3 cities elsewhere (either way round)
    shortens the closed tour: every such tour measured whole, in NumPy."""
    n, base = len(tour), np_tour_length(points, tour)
    for L in (1, 2, 3):
        for s in range(n):
            seg = [tour[(s + q) % n] for q in range(L)]
            rest = [c for c in tour if c not in seg]
            if len(rest) < 2:
                continue
            for at in range(1, len(rest) + 1):
                for piece in (seg, seg[::-1]):
                    if np_tour_length(points, rest[:at] + piece + rest[at:]) < base - eps:
                        return True
    return False


@pytest.mark.parametrize("n", [13, 15])
def test_held_karp_beyond_12_equals_numpy_held_karp(n):
    points = np.random.default_rng(n).random((3, n, 2))
    tours, lengths = tsp_tours(points, exact=True)
    for b in range(3):
        assert sorted(tours[b]) == list(range(n)) and tours[b, 0] == 0 and tours[b, 1] < tours[b, -1]
        assert lengths[b] == pytest.approx(np_held_karp(points[b]), rel=1e-12)
        assert lengths[b] == pytest.approx(np_tour_length(points[b], tours[b]), rel=1e-13)


def test_held_karp_at_20_beats_every_heuristic():
    points = np.random.default_rng(20).random((2, 20, 2))
    tours, optimal = tsp_tours(points, exact=True)
    _, two = tsp_tours(points, exact=False)
    _, orr = tsp_tours(points, exact=False, or_opt=True)
    assert (sorted(tours[0]) == np.arange(20)).all() and (tours[:, 0] == 0).all()
    np.testing.assert_allclose(optimal, [np_tour_length(p, t) for p, t in zip(points, tours)], rtol=1e-13)
    assert (optimal <= orr + 1e-12).all() and (orr <= two + 1e-12).all()
    for p, t in zip(points, tours):  # no local move improves the optimum
        assert not two_opt_move_exists(p, t) and not or_opt_move_exists(p, list(t))


@pytest.mark.parametrize("n", [5, 8, 12, 20, 30])
def test_or_opt_equals_the_python_heuristic(n):
    points = np.random.default_rng(100 + n).random((6, n, 2))
    tours, lengths = tsp_tours(points, exact=False, or_opt=True)
    for b in range(6):
        assert tours[b].tolist() == py_local_search(points[b])
        assert lengths[b] == pytest.approx(np_tour_length(points[b], tours[b]), rel=1e-13)
    two, _ = tsp_tours(points, exact=False)
    assert [t.tolist() for t in two] == [py_local_search(p, or_opt=False) for p in points]


def test_or_opt_is_locally_optimal_and_near_the_optimum():
    rng = np.random.default_rng(7)
    for n in (4, 6, 8):
        points = rng.random((10, n, 2))
        tours, lengths = tsp_tours(points, exact=False, or_opt=True)
        _, two = tsp_tours(points, exact=False)
        for b in range(10):
            best, _ = brute_force_tsp(points[b])
            assert best - 1e-12 <= lengths[b] <= two[b] + 1e-12
            assert not two_opt_move_exists(points[b], tours[b])
            assert not or_opt_move_exists(points[b], list(tours[b]))


def test_tsp_task_or_opt_and_the_new_limits(restore_threads):
    b = TSPTask(n=16, or_opt=True).batch(4, seed=3, dtype=np.float64)
    tours, lengths = tsp_tours(b.inputs, or_opt=True)
    np.testing.assert_array_equal(b.targets, tours)
    np.testing.assert_array_equal(b.tour_lengths, lengths)
    assert repr(TSPTask(7, or_opt=True)) == "TSPTask(n=7, or_opt=True)"
    points = np.random.default_rng(5).random((40, 20, 2))
    attnc.set_num_threads(1)
    one = tsp_tours(points, exact=False, or_opt=True)
    attnc.set_num_threads(2)
    two = tsp_tours(points, exact=False, or_opt=True)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])
    with pytest.raises(ValueError, match=r"n <= 20 .* got n = 21"):
        tsp_tours(np.zeros((1, 21, 2)), exact=True)
    with pytest.raises(TypeError, match="or_opt"):
        tsp_tours(points, or_opt=1)
    with pytest.raises(TypeError, match="or_opt"):
        TSPTask(20, or_opt="yes")
