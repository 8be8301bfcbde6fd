"""Pointer networks: tours over points (with the optimal one), convex hulls."""

from __future__ import annotations

import numpy as np

from .._typing import ArrayLike
from ._common import Axes, _figure_dpi, _import_pyplot, _squeeze_leading, _squeezed, _subplots


def _as_points(points):
    """(n, 2) float64 copy of ``points`` (leading size-1 dims squeezed), finite, n >= 1."""
    arr, shape = _squeezed(points, "points", "(n, 2)", 2)
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
        raise ValueError(
            "points must be the planar points of ONE instance, shape (n, 2) with n >= 1 (select a row of a "
            f"(B, n, 2) batch first, e.g. points[b]), got shape {shape}"
        )
    if not np.isfinite(arr).all():
        raise ValueError("points must be finite (no nan or inf)")
    return arr


def _as_indices(value, name, n, *, until_first_pad):
    """The point indices of one tour / polygon as an int64 array (-1 padding dropped).

    ``value`` is 1-D (leading size-1 dims squeezed), integers in [-1, n).
    With ``until_first_pad`` everything from the first -1 on is dropped,
    otherwise every -1 is."""
    try:
        arr = np.asarray(value)
    except Exception as exc:
        raise ValueError(f"{name} must be a 1-D array of point indices; could not convert it: {exc}") from exc
    shape = tuple(arr.shape)
    arr = _squeeze_leading(arr, 1)
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D array of point indices (one instance: select a row of a (B, T) batch first, "
            f"e.g. {name}[b]), got shape {shape}"
        )
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # an empty list becomes float64
        else:
            raise TypeError(f"{name} must hold integer point indices, got dtype {arr.dtype}")
    idx = np.array(arr, dtype=np.int64, copy=True)
    bad = (idx < -1) | (idx >= n)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} must hold indices into points (0..{n - 1}) or -1 for padding, got {int(idx[k])} at position {k}"
        )
    if until_first_pad:
        pads = np.flatnonzero(idx < 0)
        return idx[: pads[0]] if pads.size else idx
    return idx[idx >= 0]


def _closed(idx):
    """The vertex order of the closed polygon through idx (first vertex repeated at the end)."""
    if idx.size == 0:
        return idx
    if idx.size > 1 and idx[-1] == idx[0]:
        return idx  # already closed
    return np.append(idx, idx[0])


def _polygon_length(pts, closed_idx):
    if closed_idx.size < 2:
        return 0.0
    return float(np.sum(np.hypot(*np.diff(pts[closed_idx], axis=0).T)))


def _plane_axes(ax, pts, figsize, dpi):
    fig_dpi = _figure_dpi(dpi, ax is not None)
    _import_pyplot()  # the install hint, before any work
    if ax is None:
        _, ax = _subplots(figsize=figsize, dpi=fig_dpi)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    pad = 0.08 * max(float(np.max(hi - lo)), 1e-9)
    ax.set_xlim(lo[0] - pad, hi[0] + pad)
    ax.set_ylim(lo[1] - pad, hi[1] + pad)
    ax.set_aspect("equal", adjustable="box")
    return ax


def tours(
    points: ArrayLike,
    tours: ArrayLike,
    *,
    optimal: ArrayLike | None = None,
    ax: Axes | None = None,
    labels: bool = True,
    title: str | None = None,
    dpi: float | None = None,
) -> Axes:
    """Draw a tour through planar points (e.g. a pointer network's TSP tour),
    over the optimal tour.

    The tour is drawn as a closed polygon, from ``points[tours[0]]`` through
    every listed point and back, its start marked with a square; the optimal
    tour, when given, is drawn underneath as a wide light line, so where the
    two agree the tour lies on it and where they differ both show.

    Parameters
    ----------
    points : array-like, shape (n, 2)
        The points (cities) of one instance, e.g. ``batch.inputs[b]`` of
        :class:`attnc.datasets.TSPTask` (leading dims of size 1 are squeezed).
    tours : array-like of int, shape (T,)
        The tour: indices into ``points`` in visiting order; ``-1`` entries
        (padding) are ignored. Open (``[0, 3, 1, 2]``) or closed, the last
        index repeating the first (``[0, 3, 1, 2, 0]``, as
        ``PointerNet.generate(..., constraint="tour").indices[b]`` returns it):
        both are drawn as the same closed polygon.
    optimal : array-like of int, shape (T',), optional
        The optimal tour (e.g. ``batch.targets[b]``), in the same format.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; by default a new figure.
    labels : bool, default True
        Write each point's index next to it.
    title : str, optional
        Axes title. The legend gives both tours' closed lengths.
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``ax`` is given (set it on its figure).

    Returns
    -------
    matplotlib.axes.Axes
        With equal aspect. The tour's line is the ``ax.lines`` entry with
        ``get_gid() == "tour"``, its data the points in visiting order, the
        first repeated at the end; the optimal tour's has gid ``"optimal"``
        (drawn first, below the tour) and the start marker's ``"start"``; the
        points are the collection ``ax.collections[0]``.

    Raises
    ------
    ValueError
        ``points`` is not (n, 2) or not finite, or a tour is not 1-D or holds
        an index outside ``-1 .. n-1``.
    TypeError
        ``points`` is not numeric, or a tour does not hold integers.

    Examples
    --------
    >>> import numpy as np
    >>> import attnc.plot
    >>> from attnc.datasets import TSPTask
    >>> batch = TSPTask(n=6).batch(1, seed=0)
    >>> ax = attnc.plot.tours(batch.inputs[0], [0, 1, 2, 3, 4, 5, 0], optimal=batch.targets[0])
    >>> [line.get_gid() for line in ax.lines]
    ['optimal', 'tour', 'start']
    """
    pts = _as_points(points)
    n = pts.shape[0]
    tour = _closed(_as_indices(tours, "tours", n, until_first_pad=False))
    best = None if optimal is None else _closed(_as_indices(optimal, "optimal", n, until_first_pad=False))

    ax = _plane_axes(ax, pts, (4.0, 4.0), dpi)
    if best is not None:
        ax.plot(
            pts[best, 0],
            pts[best, 1],
            color="#f4a261",
            lw=6.0,
            alpha=0.55,
            solid_joinstyle="round",
            solid_capstyle="round",
            zorder=1,
            gid="optimal",
            label=f"optimal ({_polygon_length(pts, best):.3f})",
        )
    ax.plot(
        pts[tour, 0],
        pts[tour, 1],
        color="#1d3557",
        lw=1.6,
        zorder=2,
        gid="tour",
        label=f"tour ({_polygon_length(pts, tour):.3f})",
    )
    ax.scatter(pts[:, 0], pts[:, 1], s=22, color="#e63946", zorder=3)
    if tour.size:
        ax.plot(pts[tour[0], 0], pts[tour[0], 1], "s", ms=8, mfc="none", mec="#1d3557", mew=1.5, zorder=4, gid="start")
    if labels:
        for i, (x, y) in enumerate(pts):
            ax.annotate(str(i), (x, y), xytext=(4, 4), textcoords="offset points", fontsize="small", zorder=5)
    ax.legend(loc="best", fontsize="small", framealpha=0.8, handlelength=1.5)
    if title is not None:
        ax.set_title(title)
    return ax


def hull(
    points: ArrayLike,
    predicted: ArrayLike,
    *,
    target: ArrayLike | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    dpi: float | None = None,
) -> Axes:
    """Draw a predicted convex hull (e.g. a pointer network's) over the true one.

    The predicted polygon joins ``points[predicted[0]]``, ``points[predicted[1]]``,
    ... up to the first ``-1`` (the end token) and closes back to the start;
    its vertices are ringed. The true hull, when given, is drawn underneath as
    a light filled polygon with a wide outline: a correct prediction traces
    its outline exactly.

    Parameters
    ----------
    points : array-like, shape (n, 2)
        The points of one instance, e.g. ``batch.inputs[b]`` of
        :class:`attnc.datasets.ConvexHullTask` (leading dims of size 1 are
        squeezed).
    predicted : array-like of int, shape (T,)
        The predicted vertices in order, indices into ``points``; everything
        from the first ``-1`` on is ignored, as in
        ``PointerNet.generate(..., constraint="hull").indices[b]``. A last
        index repeating the first is allowed.
    target : array-like of int, shape (T',), optional
        The true hull's vertices (e.g. ``batch.targets[b]``), in the same format.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; by default a new figure.
    title : str, optional
        Axes title.
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``ax`` is given (set it on its figure).

    Returns
    -------
    matplotlib.axes.Axes
        With equal aspect. The predicted polygon is the ``ax.lines`` entry
        with ``get_gid() == "predicted"``, its data the vertices in order, the
        first repeated at the end (empty when ``predicted`` starts with -1);
        the true hull's outline has gid ``"target"`` (drawn first, below) and
        its fill is ``ax.patches[0]``; the points are ``ax.collections[0]``.

    Raises
    ------
    ValueError
        ``points`` is not (n, 2) or not finite, or ``predicted`` / ``target``
        is not 1-D or holds an index outside ``-1 .. n-1``.
    TypeError
        ``points`` is not numeric, or an index array does not hold integers.

    Examples
    --------
    >>> import attnc.plot
    >>> from attnc.datasets import ConvexHullTask
    >>> batch = ConvexHullTask().batch(1, n=10, seed=0)
    >>> ax = attnc.plot.hull(batch.inputs[0], batch.targets[0], target=batch.targets[0])
    >>> [line.get_gid() for line in ax.lines]
    ['target', 'predicted']
    """
    pts = _as_points(points)
    n = pts.shape[0]
    pred = _closed(_as_indices(predicted, "predicted", n, until_first_pad=True))
    true = None if target is None else _closed(_as_indices(target, "target", n, until_first_pad=True))

    ax = _plane_axes(ax, pts, (4.0, 4.0), dpi)
    if true is not None:
        from matplotlib.patches import Polygon

        if true.size:
            ax.add_patch(Polygon(pts[true], closed=True, facecolor="#a8dadc", edgecolor="none", alpha=0.5, zorder=0))
        ax.plot(
            pts[true, 0],
            pts[true, 1],
            color="#f4a261",
            lw=6.0,
            alpha=0.55,
            solid_joinstyle="round",
            solid_capstyle="round",
            zorder=1,
            gid="target",
            label=f"true hull ({max(true.size - 1, 0)})",
        )
    ax.scatter(pts[:, 0], pts[:, 1], s=18, color="#6c757d", zorder=3)
    ax.plot(
        pts[pred, 0],
        pts[pred, 1],
        color="#1d3557",
        lw=1.6,
        marker="o",
        ms=8,
        mfc="none",
        mec="#e63946",
        mew=1.5,
        zorder=2,
        gid="predicted",
        label=f"predicted ({max(pred.size - 1, 0)})",
    )
    ax.legend(loc="best", fontsize="small", framealpha=0.8, handlelength=1.5)
    if title is not None:
        ax.set_title(title)
    return ax
