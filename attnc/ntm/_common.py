"""Argument checks shared by attnc.ntm's functions."""

from __future__ import annotations

import numpy as np

from .._args import _copy, float_array, same_dtype, shape_str


def arrays(**named) -> tuple:
    """Each argument as a C-contiguous, aligned float array (copied only when
    it is not), all of one dtype (the first's)."""
    out = [float_array(a, name) for name, a in named.items()]
    same_dtype(out[0].dtype, **dict(zip(named, out)))
    return tuple(a if (a.flags.c_contiguous and a.flags.aligned) else _copy(a) for a in out)


def check_shape(a: np.ndarray, name: str, expected: tuple, what: str) -> None:
    """a.shape == expected (None entries: any size)."""
    ok = a.ndim == len(expected) and all(e is None or s == e for s, e in zip(a.shape, expected))
    if not ok:
        want = "(" + ", ".join("?" if e is None else str(e) for e in expected) + ")"
        raise ValueError(f"{name} must have shape {what} = {want}, got {shape_str(a.shape)}")


def check_3d(a: np.ndarray, name: str, what: str) -> tuple:
    if a.ndim != 3:
        raise ValueError(f"{name} must have shape {what}, got {shape_str(a.shape)}")
    return a.shape


def at_least(a: np.ndarray, name: str, lo: float) -> None:
    if a.size and not (a >= lo).all():
        bad = a[~(a >= lo)].flat[0]
        raise ValueError(f"{name} must be >= {lo:g} everywhere, got {bad}")


def odd_shifts(s: np.ndarray) -> None:
    k = s.shape[-1]
    if k % 2 == 0:
        raise ValueError(f"s must have an odd number K of shifts (its last dim), got K = {k}")


def grad_or_zeros(c, like: np.ndarray):
    return np.zeros_like(like) if c is None else np.ascontiguousarray(c)
