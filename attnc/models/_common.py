"""What the models share: calling functions and modules through attnc.vjp
(_Tape), NumPy dropout, masks and token-id checks."""

from __future__ import annotations

import numpy as np

from .._args import as_array
from ..grad import vjp


class _Tape:
    """Calls functions and modules, through attnc.vjp when gradients are wanted,
    keeping each call's pullback under a name."""

    def __init__(self, grad: bool):
        self.grad = grad
        self.pullbacks: dict = {}

    def __call__(self, name, fn, *args, **kwargs):
        if not self.grad:
            return fn(*args, **kwargs)
        out, pullback = vjp(fn, *args, **kwargs)
        self.pullbacks[name] = pullback
        return out


def _dropout(x: np.ndarray, p: float, rng, training: bool):
    """Inverted dropout in NumPy: (x * mask, mask) with mask in {0, 1/(1-p)},
    or (x, None) outside training or for p = 0."""
    if not training or p == 0:
        return x, None
    if p >= 1:
        mask = np.zeros(x.shape, x.dtype)
    else:
        mask = (rng.random(x.shape) >= p).astype(x.dtype) / x.dtype.type(1 - p)
    return x * mask, mask


def _causal_mask(T: int) -> np.ndarray:
    """(T, T) bool, True above the diagonal: position i may not attend to j > i (torch's meaning)."""
    return np.triu(np.ones((T, T), dtype=bool), 1)


def _ids(x, name):
    a = as_array(x, name)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array of token ids, got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"{name} must be (batch, length), got shape {a.shape}")
    return a.astype(np.int64, copy=False)


def _in_range(ids, name, n):
    """Token ids must index a table of n rows."""
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise ValueError(f"{name} has token ids outside [0, {n})")


class _EvalMode:
    """Run a block in eval mode, restoring every submodule's own mode after
    (one left in eval mode by the user stays so)."""

    def __init__(self, module):
        self.training = []  # the modules in training mode, found once
        stack = [module]
        while stack:
            m = stack.pop()
            if m.training:
                self.training.append(m)
            stack.extend(m._modules.values())

    def __enter__(self):
        for m in self.training:
            object.__setattr__(m, "training", False)

    def __exit__(self, *exc):
        for m in self.training:
            object.__setattr__(m, "training", True)
