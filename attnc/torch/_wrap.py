"""Any attnc function or module inside torch autograd, through attnc.vjp.

``function(fn)`` wraps one differentiable attnc function; ``Module(m)`` an
attnc module, its parameters torch Parameters sharing the module's arrays.
Both run one torch.autograd.Function, ``_VJP``: its forward views the
tensors as NumPy arrays (no copy) and calls ``attnc.vjp``; its backward
calls the pullback. The gradients are attnc's C backward's, unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from .. import grad as _grad
from ..nn.module import Module as _AttncModule
from ._tensors import from_tensor, to_tensor

# --------------------------------------------------------------------------- nested arguments and outputs


def _flatten(x: Any, path: str, leaves: list) -> Any:
    """x with every tensor (or array) inside tuples and lists replaced by its
    index in leaves, to which (path, the tensor) is appended."""
    if isinstance(x, (torch.Tensor, np.ndarray, np.generic)):
        leaves.append((path, x))
        return _Leaf(len(leaves) - 1)
    if isinstance(x, (tuple, list)):
        return _rebuild(x, [_flatten(item, f"{path}[{i}]", leaves) for i, item in enumerate(x)])
    return x


class _Leaf(int):
    """The index of a flattened leaf (a type of its own: an int argument is no leaf)."""


def _fill(tree: Any, values: list) -> Any:
    """_flatten's inverse: every _Leaf of tree replaced by values[leaf]."""
    if isinstance(tree, _Leaf):
        return values[tree]
    if isinstance(tree, (tuple, list)):
        return _rebuild(tree, [_fill(item, values) for item in tree])
    return tree


def _rebuild(like: tuple | list, items: list) -> Any:
    """items in like's type: a tuple, a list or a named tuple (NTMTrace)."""
    return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)


def _names(fn: Callable, n: int) -> list[str]:
    """The names of fn's first n positional arguments (a module's: its
    forward's), for gradients and error messages."""
    try:
        params = list(inspect.signature(fn.forward if isinstance(fn, _AttncModule) else fn).parameters.values())
    except (TypeError, ValueError):  # no signature to read
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")
    return (names + [f"{rest}[{i}]" for i in range(n - len(names))])[:n]


# --------------------------------------------------------------------------- the autograd function


class _Call:
    """One wrapped call: fn, its arguments with their tensors taken out, and
    the names the pullback's gradients come under."""

    def __init__(self, fn: Callable, params: list[str], args: tuple, kwargs: dict) -> None:
        self.fn, self.params = fn, params
        self.leaves: list = []
        names = _names(fn, len(args))
        self.args = tuple(_flatten(a, name, self.leaves) for a, name in zip(args, names))
        self.kwargs = {k: _flatten(v, k, self.leaves) for k, v in kwargs.items()}
        self.outputs: Any = None  # the output tree, set by the forward

    def names(self) -> list[str]:
        """The parameters' names, then the tensor arguments' paths."""
        return self.params + [path for path, t in self.leaves if isinstance(t, torch.Tensor)]

    def tensors(self) -> list[torch.Tensor]:
        return [t for _, t in self.leaves if isinstance(t, torch.Tensor)]

    def run(self, tensors: tuple[torch.Tensor, ...], vjp: bool) -> Any:
        """fn on NumPy views of the tensors (parameters first: a module reads
        them from its own arrays, which Module._share made views of them);
        (outputs, pullback) through attnc.vjp, else (outputs, None)."""
        n = len(self.params)
        views = iter([_view(t, name) for name, t in zip(self.names()[n:], tensors[n:])])
        leaves = [next(views) if isinstance(t, torch.Tensor) else t for _, t in self.leaves]
        args = _fill(self.args, leaves)
        kwargs = {k: _fill(v, leaves) for k, v in self.kwargs.items()}
        if vjp:
            return _grad.vjp(self.fn, *args, **kwargs)
        return self.fn(*args, **kwargs), None

    def gradients(self, grads: dict[str, np.ndarray], params: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """The pullback's gradients in the order of (parameters, tensor arguments).
        Most come under their argument's name; a state a function names its
        own way (a GRU's hx is "h0", an LSTM's hx = (h0, c0)) is matched in
        order with the gradients left, when they are as many and shaped alike."""
        grads = dict(grads)
        out = [_tensor_grad(grads.pop(n, None), p) for n, p in zip(self.params, params)]
        found = [grads.pop(path, None) for path, _ in self.leaves]
        owner = getattr(self.fn, "__self__", None)  # a bound method's object: KVCache.attend's cache
        left = [g for name, g in grads.items() if not hasattr(owner, name)]
        unmatched = [i for i, ((_, leaf), g) in enumerate(zip(self.leaves, found)) if g is None and _floating(leaf)]
        if len(left) == len(unmatched) and all(
            g.shape == tuple(self.leaves[i][1].shape) for i, g in zip(unmatched, left)
        ):
            for i, g in zip(unmatched, left):
                found[i] = g
        else:
            for i in unmatched:
                path, leaf = self.leaves[i]
                if getattr(leaf, "requires_grad", False):
                    raise RuntimeError(
                        f"attnc.torch: attnc.vjp({_name(self.fn)}) gave gradients {sorted(grads)}, "
                        f"and none can be told to belong to {path}"
                    )
        out += [_tensor_grad(g, t) for (_, t), g in zip(self.leaves, found) if isinstance(t, torch.Tensor)]
        return out


def _name(fn: Callable) -> str:
    return type(fn).__name__ if isinstance(fn, _AttncModule) else getattr(fn, "__qualname__", repr(fn))


def _floating(x: Any) -> bool:
    return x.is_floating_point() if isinstance(x, torch.Tensor) else np.asarray(x).dtype.kind == "f"


def _tensor_grad(g: np.ndarray | None, t: torch.Tensor) -> torch.Tensor | None:
    return None if g is None or not t.requires_grad else to_tensor(g)


def _view(t: torch.Tensor, name: str) -> np.ndarray:
    """A tensor argument as attnc reads it (float tensors float32/float64 only)."""
    return from_tensor(t, name, floats_only=t.is_floating_point() or t.is_complex())


def _outputs(outputs: Any) -> tuple[Any, list]:
    """(outputs with each array replaced by its index, the arrays as tensors)."""
    leaves: list = []
    tree = _flatten(outputs, "output", leaves)
    return tree, [to_tensor(np.asarray(a)) for _, a in leaves]


class _VJP(torch.autograd.Function):
    """forward(call, *tensors): call.fn through attnc.vjp; backward: its pullback."""

    @staticmethod
    def forward(ctx, call: _Call, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs, ctx.pullback = call.run(tensors, vjp=True)
        call.outputs, flat = _outputs(outputs)
        ctx.call, ctx.params = call, tensors[: len(call.params)]
        ctx.kinds = [t.is_floating_point() for t in flat]
        ctx.mark_non_differentiable(*[t for t in flat if not t.is_floating_point()])
        ctx.set_materialize_grads(False)
        return tuple(flat)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *cotangents: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        cots = [
            None if c is None or not floating else _view(c, f"the gradient of output {i}")
            for i, (c, floating) in enumerate(zip(cotangents, ctx.kinds))
        ]
        tree = ctx.call.outputs
        cot_tree = _fill(tree, cots)
        grads = ctx.pullback(*(cot_tree if isinstance(tree, tuple) else (cot_tree,)))
        return (None, *ctx.call.gradients(grads, list(ctx.params)))


def _apply(fn: Callable, params: Mapping[str, torch.Tensor], args: tuple, kwargs: dict) -> Any:
    call = _Call(fn, list(params), args, kwargs)
    tensors = list(params.values()) + call.tensors()
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        flat = _VJP.apply(call, *tensors)
        return _fill(call.outputs, list(flat))
    tree, flat = _outputs(call.run(tuple(tensors), vjp=False)[0])  # no graph to record: a plain call
    return _fill(tree, flat)


# --------------------------------------------------------------------------- the public wrappers


def _differentiable(fn: Callable) -> None:
    if not hasattr(fn, "_vjp_forward"):
        names = ", ".join(sorted(f.__qualname__ for f in _grad._REGISTERED))
        raise TypeError(f"attnc.vjp cannot differentiate {fn!r}, so attnc.torch cannot wrap it; it wraps: {names}")


def function(fn: Callable) -> Callable:
    """``fn`` (a differentiable attnc function) as a function of tensors that
    torch autograd differentiates, with attnc's C backward (``attnc.vjp``).

    Tensor arguments (also inside tuples and lists) are read in place as
    NumPy arrays: CPU, strided, float32/float64 (masks bool, indices and
    lengths integer); other arguments pass through. The outputs are fn's,
    each array a tensor sharing its memory, nested tuples kept. Gradients
    reach every float tensor argument that requires grad; integer outputs
    (indices) are not differentiable. Double backward is not supported.

    Parameters
    ----------
    fn : a function ``attnc.vjp`` differentiates (``attnc.attention``,
        ``attnc.ntm.address``, ``attnc.nn.attention_pool``, a bound method
        such as ``KVCache.attend``, ...)

    Returns
    -------
    callable taking fn's arguments with tensors in place of arrays

    Raises
    ------
    TypeError if attnc.vjp cannot differentiate fn; when called, TypeError
    naming the argument for a tensor attnc cannot read (another device, a
    float16/bfloat16 dtype, a sparse layout).

    Example
    -------
    >>> attention = attnc.torch.function(attnc.attention)
    >>> q = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    >>> k = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    >>> context, weights = attention(q, k, score="scaled_dot")
    >>> context.sum().backward()
    >>> q.grad.shape, k.grad.dtype
    (torch.Size([2, 3, 4]), torch.float64)
    """
    _differentiable(fn)

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return _apply(fn, {}, args, kwargs)

    return wrapped


class Module(torch.nn.Module):
    """An attnc module as a torch.nn.Module: its parameters are
    torch.nn.Parameters sharing memory with the attnc module's arrays (a
    torch optimiser's in-place step trains the attnc module in place), named
    as its ``state_dict()``; ``forward`` runs the module through
    ``attnc.vjp``, so ``loss.backward()`` fills each Parameter's ``.grad``
    with attnc's C backward's gradient. ``train()`` / ``eval()`` set the
    attnc module's mode too.

    Each forward checks that the two still share memory: if the attnc
    module's parameter was replaced (its ``load_state_dict``), its values
    are copied into the Parameter; if the Parameter's data was replaced,
    the attnc module reads the new tensor.

    Parameters
    ----------
    module : an ``attnc.nn.Module`` that ``attnc.vjp`` differentiates (its
        layers and models: NTM, PointerNet, Seq2Seq, SNAIL, LSTMN, GPT, ...)

    Attributes
    ----------
    attnc_module : the wrapped module

    Example
    -------
    >>> layer = attnc.nn.Linear(4, 3, dtype=np.float64, seed=0)
    >>> model = attnc.torch.Module(layer)
    >>> list(model.state_dict()) == list(layer.state_dict())
    True
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> model(torch.ones(2, 4, dtype=torch.float64)).sum().backward()
    >>> before = layer.bias.copy()
    >>> opt.step()
    >>> np.allclose(layer.bias, before - 0.1 * 2)   # the attnc module, trained in place
    True
    """

    def __init__(self, module: _AttncModule) -> None:
        if not isinstance(module, _AttncModule):
            raise TypeError(f"module must be an attnc.nn.Module, got {type(module).__name__}")
        _differentiable(module)
        super().__init__()
        self.attnc_module = module
        self._shared: dict[str, np.ndarray] = {}  # name -> the attnc array a Parameter shares
        for name, p in module.named_parameters():
            holder = self
            for part in name.split(".")[:-1]:
                if part not in holder._modules:
                    holder.add_module(part, torch.nn.Module())
                holder = holder._modules[part]  # type: ignore[assignment]
            holder.register_parameter(name.rsplit(".", 1)[-1], torch.nn.Parameter(to_tensor(p)))
            self._shared[name] = p

    def _share(self) -> dict[str, torch.nn.Parameter]:
        """The Parameters, after making each share memory with the attnc
        module's parameter again if either side was replaced."""
        params = dict(self.named_parameters())
        for name, p in params.items():
            owner, leaf = self.attnc_module._owner(name)
            current = owner._parameters[leaf]
            if current is not self._shared[name]:  # the attnc side was replaced: its values win
                with torch.no_grad():
                    p.copy_(to_tensor(current))
            elif p.data_ptr() == current.ctypes.data:  # new data (another dtype too) has another pointer
                continue
            view = _view(p, name)
            if view.dtype != self.attnc_module.dtype or not view.flags.c_contiguous:
                raise TypeError(
                    f"parameter {name!r} is a {p.dtype} tensor of strides {p.stride()}, but the attnc module "
                    f"takes contiguous {self.attnc_module.dtype} arrays: convert the attnc module instead "
                    "(attnc_module.to(dtype)) and wrap it again"
                )
            owner._parameters[leaf] = self._shared[name] = view
        return params

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The attnc module's forward on tensors (its arguments and outputs as its own)."""
        return _apply(self.attnc_module, self._share(), args, kwargs)

    def train(self, mode: bool = True) -> Module:
        """torch's train(mode), and the attnc module's (dropout on or off)."""
        super().train(mode)
        self.attnc_module.train(mode)
        return self
