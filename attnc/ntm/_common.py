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


def check_3d(a: np.ndarray, name: str, what: str) -> tuple:
    """a's three sizes, which size the outputs (C checks how they fit the other arguments)."""
    if a.ndim != 3:
        raise ValueError(f"{name} must have shape {what}, got {shape_str(a.shape)}")
    return a.shape


def at_least(a: np.ndarray, name: str, lo: float) -> None:
    if a.size and not (a >= lo).all():
        bad = a[~(a >= lo)].flat[0]
        raise ValueError(f"{name} must be >= {lo:g} everywhere, got {bad}")


def grad_or_zeros(c, like: np.ndarray):
    return np.zeros_like(like) if c is None else np.ascontiguousarray(c)
