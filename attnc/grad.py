"""attnc.vjp: gradients from the C backward kernels.

Every differentiable function registers a forward, which runs the C forward
and keeps what the backward needs, and a backward, which runs the C backward.
`vjp` calls the forward and hands back a pullback that calls the backward.
This is not a general autograd engine: one call, one pullback.

Forwards keep the caller's arrays by reference (no copies), so `vjp` records
a fingerprint of each array the caller holds after the forward, and the
pullback first checks that none it reads has changed (`_Unchanged`).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import _core
from ._args import as_array, blas_ready, ours, shape_str
from ._typing import Array

_REGISTERED: list = []  # the functions register() made differentiable, for vjp's error message
_NESTED = threading.local()  # depth of internal() blocks running on this thread


def register(
    fn: Callable[..., Any], forward: Callable[..., tuple[Any, Any]], backward: Callable[[Any, tuple], dict[str, Array]]
) -> Callable[..., Any]:
    """Make fn differentiable: forward(*args, **kwargs) -> (outputs, saved);
    backward(saved, cotangents) -> {argument name: gradient}.

    The one rule vjp follows: a differentiable callable carries
    ``_vjp_forward`` and ``_vjp_backward``. Modules define them as methods;
    register gives a function (or a method, whose forward then takes self
    first) the same two attributes."""
    fn._vjp_forward, fn._vjp_backward = forward, backward
    _REGISTERED.append(fn)
    return fn


def _cotangent(c, out, index):
    if c is None:
        return None
    if isinstance(out, (tuple, list)):  # a nested output, such as an LSTM's (h_n, c_n)
        if not isinstance(c, (tuple, list)) or len(c) != len(out):
            raise TypeError(f"cotangent {index} must be None or a tuple of {len(out)}, like output {index}")
        return tuple(_cotangent(ci, oi, f"{index}.{i}") for i, (ci, oi) in enumerate(zip(c, out)))
    if out is None:
        raise TypeError(f"cotangent {index} must be None: output {index} is None (not computed)")
    if out.dtype.kind != "f":
        raise TypeError(f"output {index} is an integer array ({out.dtype}); its cotangent must be None")
    c = as_array(c, f"cotangent {index}")
    if c.shape != out.shape:
        raise ValueError(
            f"cotangent {index} has shape {shape_str(c.shape)}, but output {index} has shape {shape_str(out.shape)}"
        )
    if c.dtype != out.dtype:
        raise TypeError(f"cotangent {index} has dtype {c.dtype}, but output {index} has dtype {out.dtype}")
    return blas_ready(c)


def _cells(f: types.FunctionType) -> Iterator[tuple[str, Any]]:
    """(name, value) of each filled cell of f's closure."""
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        with contextlib.suppress(ValueError):  # a cell not yet filled
            yield name, cell.cell_contents


# What _arrays never looks into: scalars, strings, dtypes, classes.
_LEAVES = (int, float, complex, str, bytes, bool, type(None), np.dtype, np.generic, type)
_LEAF_TYPES = frozenset(_LEAVES)


def _arrays(root: Any) -> dict[tuple, np.ndarray]:
    """Every NumPy array reachable from root through tuples, lists, dicts,
    attnc's modules (their parameters), objects and functions (their
    closures) and bound methods, each once, keyed by its path from root (the
    first found, in a fixed order)."""
    if isinstance(root, np.ndarray):
        return {(): root}
    if isinstance(root, _LEAVES):
        return {}
    found: dict[tuple, np.ndarray] = {}
    seen: set[int] = set()
    stack: list[tuple[tuple, Any]] = [((), root)]
    while stack:
        path, x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        kind = type(x)
        if kind is tuple or kind is list:
            children = enumerate(x)
        elif kind is dict:
            children = x.items()
        elif isinstance(x, np.ndarray):
            found[path] = x
            continue
        elif isinstance(x, (tuple, list)):  # a named tuple
            children = enumerate(x)
        elif kind is types.MethodType:
            children = (("__self__", x.__self__), ("__func__", x.__func__))
        elif kind is types.FunctionType:
            children = _cells(x) if ours(x.__module__) else ()
        elif not ours(kind.__module__):
            continue
        elif hasattr(x, "named_parameters"):  # a module: its parameters
            children = x.named_parameters()
        else:
            children = vars(x).items() if hasattr(x, "__dict__") else ()
        stack.extend([(path + (key,), child) for key, child in children if type(child) not in _LEAF_TYPES])
    return found


def _buffer(x: Any) -> dict[tuple, np.ndarray]:
    """{(): the array viewing x's memory} for a buffer that is not an array
    (a memoryview, a torch tensor), which forwards read in place; else {}."""
    if isinstance(x, (np.ndarray, list, tuple, dict) + _LEAVES) or ours(type(x).__module__):
        return {}
    with contextlib.suppress(Exception):
        view = as_array(x, "")
        if view.base is not None:
            return {(): view}
    return {}


def _label(fn: Callable, kind: str, key: Any, path: tuple) -> str:
    """How an error names what changed: an argument by its name where the
    signature tells it, a parameter by its state_dict name, an output by
    its index; then where inside it (an item of a tuple, an attribute)."""
    if kind == "argument" and isinstance(key, int):
        target = getattr(fn, "_vjp_forward", None) or getattr(fn, "__func__", fn)
        with contextlib.suppress(TypeError, ValueError):
            params = list(inspect.signature(target).parameters.values())
            if key < len(params) and params[key].kind in (
                params[key].POSITIONAL_ONLY,
                params[key].POSITIONAL_OR_KEYWORD,
            ):
                key = params[key].name
    inside = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in path)
    return (f"{kind} {key!r}" if isinstance(key, str) else f"{kind} {key}") + inside


class _Unchanged:
    """The arrays the caller holds after a forward (the call's arguments and
    outputs, a module's parameters) with their fingerprints. check() raises
    if one of them changed since (or a parameter was set to an array of
    other values) while the pullback reads memory it shares: as torch, which
    counts changes per tensor storage. Only then is the pullback's state
    walked (everything reachable from the forward's saved state and the
    backward), so an unchanged call costs two fingerprints per array."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, outputs: Any, needed: tuple) -> None:
        roots = [(("argument", i), a) for i, a in enumerate(args)]
        roots += [(("argument", k), a) for k, a in kwargs.items()]
        roots += [(("output", i), o) for i, o in enumerate(outputs if isinstance(outputs, tuple) else (outputs,))]
        self.params = dict(fn.named_parameters()) if hasattr(fn, "named_parameters") else {}  # a module's
        roots += [(("parameter", n), p) for n, p in self.params.items()]
        self.fn, self.needed = fn, needed
        self.wheres, self.arrays = [], []
        for where, root in roots:
            for path, a in (_arrays(root) or _buffer(root)).items():
                self.wheres.append(where + (path,))
                self.arrays.append(a)
        self.fingerprints = _core.fingerprints(self.arrays)

    def check(self) -> None:
        now = _core.fingerprints(self.arrays)
        changed = [(where, a) for where, a, f0, f1 in zip(self.wheres, self.arrays, self.fingerprints, now) if f0 != f1]
        if self.params:  # a parameter set to a new array of other values
            then = dict(zip([id(a) for a in self.arrays], self.fingerprints))
            new = [(n, p) for n, p in self.fn.named_parameters() if p is not self.params.get(n)]
            changed += [
                (("parameter", n, ()), p)
                for (n, p), f in zip(new, _core.fingerprints([p for _, p in new]))
                if n not in self.params or f != then[id(self.params[n])]
            ]
        if not changed:
            return
        read = list(_arrays(self.needed).values())
        for where, a in changed:
            if any(np.may_share_memory(a, r) for r in read):
                raise RuntimeError(
                    f"attnc.vjp: {_label(self.fn, *where)} was modified after the forward, and the pullback "
                    "needs its value at the forward (as torch, which raises when a variable needed for "
                    "gradient computation was modified in place): call attnc.vjp again after changing it, "
                    "or change a copy"
                )


@contextlib.contextmanager
def internal() -> Iterator[None]:
    """vjp calls inside (on this thread) skip the check of their pullbacks:
    for attnc's own code that calls a pullback with nothing able to run in
    between (a model's loss_and_grad, a training step), where the check would
    cost two passes over the parameters a step, and for vjp calls inside
    another's forward or pullback, which that one's check covers. A
    decorator too."""
    _NESTED.depth = getattr(_NESTED, "depth", 0) + 1
    try:
        yield
    finally:
        _NESTED.depth -= 1


def vjp(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Callable[..., dict[str, Array]]]:
    """Run ``fn(*args, **kwargs)`` and return ``(outputs, pullback)``.

    For outputs y = fn(x, ...), ``pullback(dy)`` returns dL/dx = dy^T dy/dx
    (the vector-Jacobian product) for every float-array argument x.

    ``outputs`` is exactly what ``fn`` returns. ``pullback(*cotangents)`` takes
    one cotangent per output, each shaped and typed like that output (``None``
    for an output you do not use; integer outputs such as ``indices`` take
    ``None``), and returns a dict from the name of every float-array argument
    of the call (for a module: its inputs and its state_dict() names)
    (``"query"``, ``"keys"``, ``"values"``, ``"weight"``, ...) to its gradient,
    with that argument's shape and dtype. Python floats are constants and get
    no entry. The pullback may be called many times.

    The pullback computes the gradients at the forward's point, reading the
    call's arrays where they are (no copy is made: a copy would double the
    memory of large inputs). So it first checks that the arrays you hold
    after the forward (its array arguments, arrays inside tuple arguments,
    its outputs, a module's parameters) still hold the forward's values,
    and if one changed and the pullback reads memory it shares, raises
    RuntimeError naming it, as torch does for a "variable needed for
    gradient computation modified by an inplace operation": after an
    optimiser step, call vjp again. Arrays the backward does not read (a
    linear layer's bias, most outputs) may change; a parameter set to a new
    array counts as changed if its values differ. The check costs a
    fingerprint of those arrays (a pass at memory speed) at the forward and
    at each pullback call.

    Parameters
    ----------
    fn : a function of attnc (``attnc.attention``, ``attnc.ntm.address``, ...),
        an ``attnc.nn.Module`` or a bound method such as ``KVCache.attend``
    *args, **kwargs : its arguments; arrays float32 or float64

    Returns
    -------
    outputs : whatever ``fn`` returns
    pullback : callable(*cotangents) -> dict[str, array], gradients with the
        shape and dtype of their arguments

    Example
    -------
    >>> q, k = np.random.rand(3, 4), np.random.rand(5, 4)
    >>> (ctx, w), pullback = attnc.vjp(attnc.attention, q, k, score="scaled_dot")
    >>> grads = pullback(np.ones_like(ctx), None)
    >>> sorted(grads), grads["query"].shape, grads["keys"].dtype
    (['keys', 'query'], (3, 4), dtype('float64'))
    >>> q += 1                       # the forward's query is gone
    >>> pullback(np.ones_like(ctx), None)
    Traceback (most recent call last):
    ...
    RuntimeError: attnc.vjp: argument 'query' was modified after the forward, ...
    """
    if not hasattr(fn, "_vjp_forward"):
        names = ", ".join(sorted(f.__qualname__ for f in _REGISTERED))
        raise TypeError(f"attnc.vjp has no gradient rule for {fn!r}; it differentiates: {names}")
    forward, backward = fn._vjp_forward, fn._vjp_backward
    if isinstance(fn, types.MethodType):  # a registered method, reached through its function: self first
        args = (fn.__self__,) + args
    # A vjp inside another's forward or pullback (a model's layers) is
    # covered by the outer one's check, which reaches its pullback.
    outer = getattr(_NESTED, "depth", 0) == 0
    with internal():
        outputs, saved = forward(*args, **kwargs)
    unchanged = _Unchanged(fn, args, kwargs, outputs, (saved, backward)) if outer else None
    outs = outputs if isinstance(outputs, tuple) else (outputs,)

    def pullback(*cotangents):
        if len(cotangents) != len(outs):
            raise TypeError(f"pullback takes {len(outs)} cotangent(s), one per output, got {len(cotangents)}")
        cots = tuple(_cotangent(c, o, i) for i, (c, o) in enumerate(zip(cotangents, outs)))
        if unchanged is not None:
            unchanged.check()
        with internal():
            return backward(saved, cots)

    return outputs, pullback
