"""Threads, build and CPU information."""

from __future__ import annotations

import numbers
import os
import sys
from typing import Any, Literal

from . import _core, _dispatch


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (an int >= 1) for all of attnc's parallel work.

    OpenBLAS runs single-threaded inside attnc, so attnc's threads and
    OpenBLAS's never oversubscribe the cores. Results are bitwise identical
    for any ``n``. At import attnc takes ``ATTNC_NUM_THREADS`` if set, else
    the cores the process may run on.

    Parameters
    ----------
    n : int, the number of threads (>= 1)

    Example
    -------
    >>> old = attnc.get_num_threads()
    >>> attnc.set_num_threads(1); attnc.get_num_threads()
    1
    >>> attnc.set_num_threads(old)
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    """The number of threads attnc uses (an int >= 1; see ``set_num_threads``).

    Example
    -------
    >>> attnc.get_num_threads() >= 1
    True
    """
    return _core.get_num_threads()


def blas_info() -> str:
    """The configuration string of the OpenBLAS attnc links (bundled, from
    scipy-openblas32): its version, build options and the CPU kernel it chose.

    Example
    -------
    >>> attnc.blas_info().startswith("OpenBLAS")
    True
    """
    return _core.blas_info()


def show_config(mode: Literal["stdout", "dicts"] = "stdout") -> dict[str, Any] | None:
    """Print (or return) what this attnc runs with: its version, the BLAS and
    its threads, the SIMD path of the loaded C core and the paths this CPU
    runs, and attnc's thread count. Paste it into bug reports.

    The SIMD path is the best one the CPU runs (``baseline``, ``avx2`` or
    ``avx512``) unless the environment variable ``ATTNC_CPU`` names one.

    Parameters
    ----------
    mode : ``"stdout"`` prints the configuration and returns None (as
        ``numpy.show_config``); ``"dicts"`` returns it as a dict instead.

    Example
    -------
    >>> info = attnc.show_config(mode="dicts")
    >>> sorted(info)
    ['attnc', 'blas', 'python', 'simd', 'threads']
    >>> info["simd"]["path"] in info["simd"]["cpu_paths"]
    True
    """
    from . import __version__

    info = {
        "attnc": {"version": __version__, "location": os.path.dirname(os.path.abspath(__file__))},
        "python": {"version": sys.version.split()[0], "executable": sys.executable},
        "blas": {"name": "scipy-openblas32 (bundled)", "config": _core.blas_info(), "threads": _core.blas_threads()},
        "simd": {
            "path": _core.simd_path(),
            "cpu_paths": list(_dispatch.supported_paths()),
            "ATTNC_CPU": os.environ.get("ATTNC_CPU") or None,
        },
        "threads": {"attnc": _core.get_num_threads(), "ATTNC_NUM_THREADS": os.environ.get("ATTNC_NUM_THREADS") or None},
    }
    if mode == "dicts":
        return info
    if mode != "stdout":
        raise ValueError(f"mode must be 'stdout' or 'dicts', got {mode!r}")
    for section, entries in info.items():
        print(f"{section}:")
        for key, value in entries.items():
            print(f"  {key}: {value}")
    return None
