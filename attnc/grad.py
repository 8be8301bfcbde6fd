"""attnc.vjp: gradients from the C backward kernels.

Every differentiable function registers a forward, which runs the C forward
and keeps what the backward needs, and a backward, which runs the C backward.
`vjp` calls the forward and hands back a pullback that calls the backward.
This is not a general autograd engine: one call, one pullback.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._args import blas_ready, shape_str
from ._typing import Array

_RULES: dict = {}


def register(fn: Callable[..., Any], forward: Callable[..., tuple[Any, Any]],
             backward: Callable[[Any, tuple], dict[str, Array]]) -> Callable[..., Any]:
    """Make fn differentiable: forward(*args, **kwargs) -> (outputs, saved);
    backward(saved, cotangents) -> {argument name: gradient}."""
    _RULES[fn] = (forward, backward)
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
    c = np.asarray(c)
    if c.shape != out.shape:
        raise ValueError(
            f"cotangent {index} has shape {shape_str(c.shape)}, but output {index} has shape "
            f"{shape_str(out.shape)}"
        )
    if c.dtype != out.dtype:
        raise TypeError(f"cotangent {index} has dtype {c.dtype}, but output {index} has dtype {out.dtype}")
    return blas_ready(c)


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
    """
    if hasattr(fn, "_vjp_forward"):  # a module
        rule = (fn._vjp_forward, fn._vjp_backward)
    elif hasattr(fn, "__self__") and getattr(fn, "__func__", None) in _RULES:  # a bound method
        rule = _RULES[fn.__func__]
        args = (fn.__self__,) + args
    else:
        rule = _RULES.get(fn)
    if rule is None:
        names = ", ".join(sorted(f.__qualname__ for f in _RULES))
        raise TypeError(f"attnc.vjp has no gradient rule for {fn!r}; it differentiates: {names}")
    forward, backward = rule
    outputs, saved = forward(*args, **kwargs)
    outs = outputs if isinstance(outputs, tuple) else (outputs,)

    def pullback(*cotangents):
        if len(cotangents) != len(outs):
            raise TypeError(f"pullback takes {len(outs)} cotangent(s), one per output, got {len(cotangents)}")
        cots = tuple(_cotangent(c, o, i) for i, (c, o) in enumerate(zip(cotangents, outs)))
        return backward(saved, cots)

    return outputs, pullback
