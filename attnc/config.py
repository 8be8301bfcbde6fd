"""Threads and build information."""

from __future__ import annotations

import numbers

from . import _core


def set_num_threads(n: int) -> None:
    """Use n threads (n >= 1) for all of attnc's parallel work.

    OpenBLAS runs single-threaded inside attnc, so attnc's threads and
    OpenBLAS's never oversubscribe the cores. Results are bitwise identical
    for any n."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    """The number of threads attnc uses."""
    return _core.get_num_threads()


def blas_info() -> str:
    """The OpenBLAS build attnc links (bundled from scipy-openblas32)."""
    return _core.blas_info()
