"""Load the C core built for the best SIMD path this CPU runs.

attnc's C core is compiled once per path (csrc/core/cpu.h): ``baseline``
(any x86-64 CPU), ``avx2`` (x86-64-v3: AVX2 and FMA) and ``avx512``
(x86-64-v4). The baseline build runs everywhere, so it is loaded first and
asked which paths the CPU (and its OS) runs; then the best of them, or the
one the environment variable ``ATTNC_CPU`` names, is loaded and becomes
``attnc._core``. A forced path the CPU cannot run is an error, not a crash
("illegal instruction") later.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

PATHS = ("baseline", "avx2", "avx512")


def _load(path: str):
    """attnc._core_<path>, with its bundled OpenBLAS told to start no threads
    of its own (attnc parallelises around OpenBLAS, which runs one thread
    inside attnc); the user's environment is restored after."""
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        return importlib.import_module(f"attnc._core_{path}")
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved


def _built(path: str) -> bool:
    return importlib.util.find_spec(f"attnc._core_{path}") is not None


def supported_paths() -> tuple[str, ...]:
    """The paths this CPU runs that this installation has a build for, slowest first."""
    cpu = _load("baseline").cpu_paths().split()
    return tuple(p for p in PATHS if p in cpu and _built(p))


def choose(requested: str | None) -> str:
    """The path to load: ``requested`` (ATTNC_CPU's value) if set, else the best supported."""
    supported = supported_paths()
    if not requested:
        return supported[-1]
    if requested not in PATHS:
        raise ValueError(f"ATTNC_CPU={requested!r} is not a SIMD path; use one of {', '.join(PATHS)}")
    if requested not in supported:
        why = "this installation has no build for it" if not _built(requested) else "this CPU does not run it"
        raise RuntimeError(f"ATTNC_CPU={requested!r}: {why}; the paths available here are {', '.join(supported)}")
    return requested


def load_core():
    """The chosen build (attnc._core re-exports its functions)."""
    return _load(choose(os.environ.get("ATTNC_CPU", "").strip().lower() or None))
