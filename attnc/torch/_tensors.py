"""Tensors to attnc's arrays and back, without copies.

A CPU tensor with a strided layout is viewed as a NumPy array sharing its
memory (``Tensor.numpy()``, which keeps the strides); attnc's results, fresh
NumPy arrays, become tensors that own them (``torch.from_numpy``). Everything
attnc cannot read is refused here, naming the argument: another device, a
dtype other than float32/float64 (or the bool/int64 of masks and indices), a
sparse or nested layout.
"""

from __future__ import annotations

from typing import overload

import numpy as np
import torch

from .._args import seed_bits

_FLOATS = (torch.float32, torch.float64)
_OTHERS = (torch.bool, torch.int64, torch.int32)


def from_tensor(t: torch.Tensor, name: str, *, floats_only: bool = True) -> np.ndarray:
    """The NumPy view of a CPU tensor's memory (no copy; autograd is torch's
    business, so a tensor that requires grad is read through ``detach()``).

    Parameters
    ----------
    t : torch.Tensor, on the CPU, strided, float32 or float64 (with
        ``floats_only=False`` also bool, int32 or int64: masks, lengths, indices)
    name : the argument's name, for the error messages

    Returns
    -------
    numpy.ndarray sharing t's memory, with t's shape, strides and dtype

    Raises
    ------
    TypeError naming the argument for a tensor attnc cannot read.

    Example
    -------
    >>> t = torch.arange(6.0).reshape(2, 3).T
    >>> a = attnc.torch.from_tensor(t, "query")
    >>> a.shape, np.shares_memory(a, t.numpy())
    ((3, 2), True)
    """
    check_tensor(t, name, floats_only=floats_only)
    return view(t)


def view(t: torch.Tensor) -> np.ndarray:
    """from_tensor without its checks, for a tensor check_tensor passed."""
    if t.requires_grad:
        t = t.detach()
    if t.is_neg():  # a lazily negated view (torch._neg_view): numpy() needs the values
        t = t.resolve_neg()
    return t.numpy()  # (the dtypes allowed are real: no conjugate bit)


def check_tensor(t: torch.Tensor, name: str, *, floats_only: bool = True) -> None:
    """Raise from_tensor's TypeError for a tensor attnc cannot read; reads
    only the tensor's device, layout and dtype, so torch.compile traces it
    (attnc.torch's ops check their arguments here before dispatching: a meta
    or CUDA tensor would otherwise reach the ops' fake implementations)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_cpu:
        raise TypeError(f"{name} is on {t.device}: attnc runs on the CPU only (move it with {name}.cpu())")
    if t.layout != torch.strided or t.is_nested:
        raise TypeError(f"{name} has layout {t.layout}: attnc takes dense (strided) tensors ({name}.to_dense())")
    allowed = _FLOATS if floats_only else _FLOATS + _OTHERS
    if t.dtype not in allowed:
        kinds = "float32 or float64" if floats_only else "float32, float64, bool, int32 or int64"
        raise TypeError(f"{name} has dtype {t.dtype}: attnc takes {kinds} tensors")


@overload
def to_tensor(a: np.ndarray) -> torch.Tensor: ...
@overload
def to_tensor(a: None) -> None: ...
def to_tensor(a: np.ndarray | None) -> torch.Tensor | None:
    """A tensor owning (sharing) the NumPy array attnc returned; None stays None.

    Example
    -------
    >>> a = np.ones((2, 3), np.float32)
    >>> t = attnc.torch.to_tensor(a)
    >>> t.dtype, t.data_ptr() == a.ctypes.data
    (torch.float32, True)
    """
    if a is None:
        return None
    return torch.from_numpy(np.asarray(a))


def seed_tensor(seed: int | None) -> torch.Tensor:
    """A seed as attnc.torch's ops carry it: a 0-d int64 tensor holding its
    64 bits (attnc takes seeds modulo 2**64); None draws one from torch's
    default generator (so torch.manual_seed repeats a call), inside the graph
    under torch.compile (no .item())."""
    if seed is None:
        return torch.randint(0, 2**62, ())
    bits = seed_bits(seed)
    return torch.tensor(bits - 2**64 if bits >= 2**63 else bits, dtype=torch.int64)


def seed_int(seed: torch.Tensor) -> int:
    """seed_tensor's inverse: the seed attnc takes (0 <= seed < 2**64)."""
    return int(seed) % 2**64
