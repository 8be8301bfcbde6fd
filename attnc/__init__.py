"""attnc: attention mechanisms in C, driven from Python.

Pass NumPy arrays (float32 or float64, batch first), get NumPy arrays back:
the context, the alignment matrix and, with ``attnc.vjp``, the gradient of
every input and parameter. All the work happens in attnc's C core.
"""

__version__ = "0.1.0"

import os as _os

import numpy as _np  # noqa: F401  (first: its own OpenBLAS reads the user's settings)

from . import _core  # the build for this CPU's best SIMD path (or ATTNC_CPU's)

from .attention import (  # noqa: E402
    KVCache,
    attention,
    hard_attention,
    kernel_regression,
    local_attention,
    multi_head_attention,
    scaled_dot_product_attention,
    score,
    softmax,
)
from .config import blas_info, get_num_threads, set_num_threads, show_config  # noqa: E402
from .grad import vjp  # noqa: E402
from . import nn, ntm, optim, plot  # noqa: E402  (plot imports matplotlib only when drawing)
from .nn.module import FileFormatError, load, save  # noqa: E402
from ._pretrained import pretrained  # noqa: E402  (cheap: it imports attnc.models only when loading)


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
    "attention",
    "blas_info",
    "get_num_threads",
    "hard_attention",
    "kernel_regression",
    "local_attention",
    "multi_head_attention",
    "load",
    "nn",
    "ntm",
    "optim",
    "plot",
    "pretrained",
    "save",
    "scaled_dot_product_attention",
    "score",
    "set_num_threads",
    "show_config",
    "softmax",
    "vjp",
]
