"""Argument checking shared by every public function.

Everything a user can get wrong is caught here, with a message naming the
argument, before any C code runs; the C core checks again (it never trusts its
caller) but its messages are the last line of defence, not the interface.
"""

from __future__ import annotations

import math
import numbers
import secrets
import sys
import types
from typing import Any

import numpy as np

from . import _core

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def is_constant(x) -> bool:
    """Python numbers (and NumPy scalars) are constants; arrays are differentiable."""
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, np.ndarray)


# DLPack's device types (dlpack.h's DLDeviceType) other than the CPU's, 1.
_DEVICES = {
    2: "CUDA",
    3: "CUDA host",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    9: "VPI",
    10: "ROCm",
    13: "CUDA managed",
    14: "oneAPI",
}


def host_array(value: Any) -> Any:
    """value as something NumPy converts: a torch tensor (which may need grad
    or live on a GPU, as torch.nn.MultiheadAttention's weights do) detached
    and copied to the CPU. For what only draws weights (attnc.plot,
    attnc.viz), never for arithmetic, which refuses such tensors."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu()
    return value


def as_array(x, name: str) -> np.ndarray:
    """x as a NumPy array, the one door every array argument comes in by:
    an ndarray as it is; an object with ``__dlpack__`` (a torch CPU tensor,
    a JAX array) viewed in place (np.from_dlpack), once its device is the
    CPU; anything else through ``__array__`` or NumPy's conversions. A
    tensor that requires grad is refused, naming the fix (attnc's NumPy
    functions would silently drop its gradient)."""
    if type(x) is np.ndarray:
        return x
    if getattr(x, "requires_grad", False) is True:
        raise TypeError(
            f"{name} is a tensor that requires grad, and attnc's NumPy functions do not differentiate: "
            f"use attnc.torch ({_torch_fix()}), or pass {name}.detach()"
        )
    device = getattr(x, "__dlpack_device__", None)
    if device is not None and not isinstance(x, np.ndarray):
        try:
            kind = device()[0]
        except Exception as exc:  # torch's meta tensors: no DLPack device at all
            raise TypeError(f"{name} is on a device DLPack cannot name ({exc}): attnc takes CPU arrays only") from exc
        if kind != 1:
            where = _DEVICES.get(kind, f"DLPack device type {kind}")
            raise TypeError(f"{name} is on a {where} device: attnc takes CPU arrays only (copy it to the host first)")
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError):  # a dtype NumPy lacks (bfloat16): __array__ says
            pass
    try:
        return np.asarray(x)
    except Exception as exc:
        if not hasattr(x, "dtype"):  # a Python object (a ragged list): NumPy's own error
            raise
        raise TypeError(
            f"{name} cannot be read as an array ({type(x).__name__}, dtype {getattr(x, 'dtype', '?')}): {exc}"
        ) from exc


def ours(module: str | None) -> bool:
    """Whether a module's name is attnc's (attnc or attnc.something)."""
    return module is not None and (module == "attnc" or module.startswith("attnc."))


def _torch_fix() -> str:
    """What to call instead of the attnc function or module the user called
    (the outermost attnc frame on the stack), for as_array's message."""
    frame: types.FrameType | None = sys._getframe(1)
    entry = None
    while frame is not None and ours(frame.f_globals.get("__name__")):
        frame, entry = frame.f_back, frame
    name = entry.f_code.co_name if entry is not None else ""
    owner = entry.f_locals.get("self") if entry is not None else None
    if name in ("__call__", "forward") and hasattr(owner, "named_parameters"):  # an attnc module
        return f"attnc.torch.Module(your {type(owner).__name__})"
    for space in ("attnc", "attnc.nn", "attnc.ntm"):
        public = getattr(sys.modules.get(space), name, None)
        if entry is not None and getattr(public, "__code__", None) is entry.f_code and hasattr(public, "_vjp_forward"):
            return f"attnc.torch.function({space}.{name}), or attnc.torch's op of that name where it has one"
    return "attnc.torch.function(fn) or attnc.torch.Module(module)"


def float_array(x, name: str) -> np.ndarray:
    """x as a float32 or float64 ndarray (any array object works: as_array)."""
    if type(x) is np.ndarray and x.dtype in FLOAT_DTYPES:
        return x
    a = as_array(x, name)
    if a.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {a.dtype}; attnc takes float32 or float64 arrays")
    return a


def same_dtype(dtype: np.dtype, **arrays) -> None:
    """Every float array of one call shares one dtype."""
    for name, a in arrays.items():
        if a is not None and a.dtype != dtype:
            raise TypeError(
                f"{name} has dtype {a.dtype} but the call's dtype is {dtype}; "
                "every float array of one call must have the same dtype"
            )


def _copy(a: np.ndarray) -> np.ndarray:
    """An explicit, aligned, C-contiguous copy (np.ascontiguousarray would
    return a misaligned contiguous array as it is)."""
    return np.array(a, order="C", copy=True)


def _strides_ok(a: np.ndarray) -> bool:
    """Aligned, with strides in whole elements (what the C views need)."""
    isz = a.itemsize
    return a.flags.aligned and all(s % isz == 0 for s in a.strides)


def elementwise_ready(a: np.ndarray) -> np.ndarray:
    """An array the C core reads element by element: any stride is fine,
    as long as it is aligned and counted in whole elements."""
    return a if _strides_ok(a) else _copy(a)


def blas_ready(a: np.ndarray) -> np.ndarray:
    """An array the C kernels read as matrices in place: a unit stride in one
    of its last two dims (leading dims may have any stride; C decides, in
    attnc_has_unit_stride). Otherwise an explicit copy."""
    flags = a.flags
    if flags.c_contiguous and flags.aligned:
        return a
    if a.ndim < 2 or not _strides_ok(a):
        return _copy(a)
    return a if _core.has_unit_stride(a) else _copy(a)


def as_rows(a: np.ndarray, ndim: int = 1) -> np.ndarray:
    """a (..., *cols) as a matrix (N, prod(cols)), its last ndim dims the
    columns: N is given, not inferred, so that zero-width rows (a last dim of
    0, where reshape(-1, 0) cannot infer N) keep their count."""
    return a.reshape(math.prod(a.shape[: a.ndim - ndim]), math.prod(a.shape[a.ndim - ndim :]))


def default_scale(e: int) -> float:
    """The scaled dot product's default scale for width e: 1/sqrt(e), as
    torch; 1 for e = 0, whose products are sums of nothing, 0 at any scale
    (1/sqrt(0) would make them 0 * inf = NaN)."""
    return 1.0 / math.sqrt(e) if e else 1.0


def heads_share(h: int, hkv: int) -> bool:
    """Whether h query heads share hkv key/value heads evenly (grouped-query
    attention): h a multiple of hkv; no heads at all (an empty call) too."""
    return h % hkv == 0 if hkv else h == 0


def shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def bool_mask(mask, shape: tuple, name: str = "mask") -> np.ndarray:
    """mask broadcast (without copying) to shape; must be boolean."""
    m = as_array(mask, name)
    if m.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array (True = may attend), got dtype {m.dtype}")
    return _broadcast(m, shape, name, f"(..., Tq, Tk) = {shape_str(shape)}")


def integer_array(x, name: str, shape: tuple, to: str) -> np.ndarray:
    """x, integers, as int64 broadcast (without copying, where it is int64
    already) to shape; `to` says what shape means in the error."""
    a = as_array(x, name)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} does not fit in int64")
    return _broadcast(a.astype(np.int64, copy=False), shape, name, to)


def lengths(key_lengths, batch_shape: tuple) -> np.ndarray:
    """key_lengths as int64, broadcast to the leading (batch) dims (C checks they are >= 0)."""
    return integer_array(key_lengths, "key_lengths", batch_shape, f"the leading dims {shape_str(batch_shape)}")


def _broadcast(a: np.ndarray, shape: tuple, name: str, to: str) -> np.ndarray:
    """a broadcast to shape without copying; ValueError naming it and `to` (what shape means) if it cannot be."""
    try:
        return elementwise_ready(np.broadcast_to(a, shape))
    except ValueError:
        raise ValueError(f"{name} with shape {shape_str(a.shape)} does not broadcast to {to}") from None


def mask_arrays(mask, key_lengths, batch_shape: tuple, tq: int, tk: int) -> tuple:
    """(mask, key_lengths) as the C binding's keyword arguments of those names
    take them (attnc_mask, with causal): broadcast and checked; None stays None.
    Passed as keywords, not merged from a dict: the call builds no dict."""
    m = None if mask is None else bool_mask(mask, batch_shape + (tq, tk))
    kl = None if key_lengths is None else lengths(key_lengths, batch_shape)
    return m, kl


def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum grad over the dims a broadcast to grad.shape added or stretched."""
    extra = grad.ndim - len(shape)
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(axis=stretched, keepdims=True)
    return grad.reshape(shape)


def choice(value, valid, name: str):
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(map(repr, valid))}")
    return value


def child_seeds(seed, n: int) -> list:
    """n independent integer seeds drawn from ``seed`` (None: n Nones, so
    every child is freshly random): one per submodule of a composite model."""
    if seed is None:
        return [None] * n
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(n)]


def seed_bits(seed) -> int:
    """A user's seed as the 64 bits the C generator takes; None draws fresh ones."""
    if seed is None:
        return secrets.randbits(64)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    return int(seed) % 2**64


def torch_mask(mask, name, shape, dtype):
    """A torch-style mask (bool True = ignore, or float added) as attnc's
    kernel takes it (bool True = takes part, or float), broadcast to shape."""
    m = as_array(mask, name)
    if m.dtype == np.bool_:
        kernel = ~m
    else:
        m = float_array(m, name)
        same_dtype(dtype, **{name: m})
        kernel = m
    try:
        return m, np.broadcast_to(kernel, shape)
    except ValueError:
        raise ValueError(f"{name} with shape {shape_str(m.shape)} does not fit {shape_str(shape)}") from None


def size_arg(name, v, low=1):
    """v as an int >= low, or ValueError naming the argument (a model's sizes
    and counts: a float or a bool is as wrong as a too-small int)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    return int(v)


def int_arg(name, n, low=1):
    """n as an int >= low, or TypeError / ValueError naming the argument."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(n).__name__}")
    if n < low:
        raise ValueError(f"{name} must be >= {low}, got {n}")
    return int(n)
