"""attnc: attention mechanisms in C, driven from Python.

Pass NumPy arrays (float32 or float64, batch first), get NumPy arrays back:
the context, the alignment matrix and, with ``attnc.vjp``, the gradient of
every input and parameter. All the work happens in attnc's C core.
"""

__version__ = "0.1.0"

import importlib as _importlib
import os as _os
import typing as _typing_module

import numpy as _np  # noqa: F401  (first: its own OpenBLAS reads the user's settings)

from . import _core  # noqa: F401  (the build for this CPU's best SIMD path, or ATTNC_CPU's)

# isort: split

from . import attribution, nn, ntm, optim
from ._pretrained import pretrained  # cheap: it imports attnc.models only when loading
from .attention import (
    KVCache,
    LinearAttentionState,
    alibi_slopes,
    attention,
    hard_attention,
    kernel_regression,
    linear_attention,
    local_attention,
    multi_head_attention,
    performer_projection,
    scaled_dot_product_attention,
    score,
    softmax,
)
from .config import blas_info, get_num_threads, set_num_threads, show_config
from .grad import vjp
from .nn.module import FileFormatError, load, save

# Imported on first use (attnc.models.GPT, ...), not by `import attnc`: the
# models, data sets and experiments are most of the package, and plot is for
# drawing. A type checker sees them as plain imports (and still catches a
# misspelt attribute, which a module __getattr__ would hide from it).
_LAZY = ("datasets", "experiments", "models", "plot", "viz")
if _typing_module.TYPE_CHECKING:  # (mypy reads an aliased TYPE_CHECKING as a plain variable)
    from . import datasets, experiments, models, plot, viz
else:

    def __getattr__(name: str):
        if name in _LAZY:
            return _importlib.import_module(f"{__name__}.{name}")  # which also sets it here
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _default_threads() -> int:
    env = _os.environ.get("ATTNC_NUM_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(_os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, _os.cpu_count() or 1)


set_num_threads(_default_threads())

__all__ = [
    "FileFormatError",
    "KVCache",
    "LinearAttentionState",
    "alibi_slopes",
    "attention",
    "attribution",
    "blas_info",
    "datasets",
    "experiments",
    "get_num_threads",
    "hard_attention",
    "kernel_regression",
    "linear_attention",
    "local_attention",
    "multi_head_attention",
    "load",
    "models",
    "nn",
    "ntm",
    "optim",
    "performer_projection",
    "plot",
    "pretrained",
    "save",
    "scaled_dot_product_attention",
    "score",
    "set_num_threads",
    "show_config",
    "softmax",
    "viz",
    "vjp",
]
