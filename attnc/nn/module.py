"""attnc.nn.Module: parameters as NumPy arrays, named as in torch's state_dict()."""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
from collections import OrderedDict, namedtuple
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .._args import FLOAT_DTYPES, shape_str
from .._typing import Array, ArrayLike, DTypeLike

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base of attnc's modules, as ``torch.nn.Module``.

    Parameters are NumPy arrays registered with ``register_parameter`` (and
    read and set as attributes); submodules are attributes that are Modules.
    ``state_dict()`` names them as torch does (``"out_proj.weight"``), so a
    torch module's state dict loads here and ours loads there. Gradients
    come from ``attnc.vjp(module, *inputs)``, keyed by the same names.
    Calling a module calls its ``forward``. Every subclass records its
    constructor arguments, so ``attnc.save`` / ``attnc.load`` can rebuild it.

    Parameters
    ----------
    dtype : float32 or float64, the dtype of every parameter (``to(dtype)``
        casts them later); inputs must have the same dtype.

    Example
    -------
    >>> class Scale(attnc.nn.Module):
    ...     def __init__(self, n: int, *, dtype=np.float32):
    ...         super().__init__(dtype)
    ...         self.register_parameter("weight", np.ones(n))
    ...     def forward(self, x):
    ...         return x * self.weight
    >>> m = Scale(3)
    >>> {k: (v.shape, v.dtype.name) for k, v in m.state_dict().items()}
    {'weight': ((3,), 'float32')}
    >>> m(np.ones((2, 3), np.float32)).shape
    (2, 3)
    >>> m.to(np.float64).weight.dtype, m.eval().training
    (dtype('float64'), False)
    """

    _registry: dict = {}

    def __init_subclass__(cls, **kwargs):
        """Record every module class, and the arguments each instance was built
        with, so that attnc.save / attnc.load can rebuild it."""
        super().__init_subclass__(**kwargs)
        Module._registry[f"{cls.__module__}.{cls.__qualname__}"] = cls
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)

        @functools.wraps(init)
        def recording_init(self, *args, **kw):
            bound = signature.bind(self, *args, **kw)
            bound.apply_defaults()
            config = {k: v for k, v in list(bound.arguments.items())[1:] if k != "seed"}
            if "dtype" in config:
                config["dtype"] = np.dtype(config["dtype"]).name
            init(self, *args, **kw)
            object.__setattr__(self, "_config", config)  # the outermost __init__ sets it last

        cls.__init__ = recording_init

    def __init__(self, dtype: DTypeLike = np.float32) -> None:
        dtype = np.dtype(dtype)
        if dtype not in FLOAT_DTYPES:
            raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_dtype", dtype)

    # -- attributes -------------------------------------------------------
    def __getattr__(self, name):
        params = self.__dict__.get("_parameters", {})
        if name in params:
            return params[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in self.__dict__.get("_parameters", {}):
            self._parameters[name] = self._as_parameter(name, value, self._parameters[name])
            return
        if isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_parameter(self, name: str, value: ArrayLike | None) -> None:
        """Add a parameter (None for an absent optional one, such as a bias)."""
        self._parameters[name] = None if value is None else np.ascontiguousarray(value, dtype=self._dtype)

    def _as_parameter(self, name, value, old):
        if value is None:
            return None
        a = np.ascontiguousarray(value, dtype=self._dtype)
        if old is not None and a.shape != old.shape:
            raise ValueError(f"{name} has shape {shape_str(old.shape)}, got {shape_str(a.shape)}")
        return a

    # -- traversal --------------------------------------------------------
    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Array]]:
        """(name, array) for every present parameter, submodules included."""
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, p
        for mname, m in self._modules.items():
            yield from m.named_parameters(prefix + mname + ".")

    def parameters(self) -> list[Array]:
        """Every present parameter, in state_dict() order."""
        return [p for _, p in self.named_parameters()]

    def state_dict(self) -> OrderedDict[str, Array]:
        """Copies of every parameter, named as in torch's state_dict()."""
        return OrderedDict((name, p.copy()) for name, p in self.named_parameters())

    def load_state_dict(self, state_dict: Mapping[str, ArrayLike], strict: bool = True) -> IncompatibleKeys:
        """Load parameters from a dict of arrays (torch tensors work too:
        anything NumPy can read). Shapes must match; values are cast to the
        module's dtype. With strict, missing or unexpected keys raise."""
        own = dict(self.named_parameters())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"state_dict does not fit {type(self).__name__}: missing keys {missing}, "
                           f"unexpected keys {unexpected}")
        for name, value in state_dict.items():
            if name not in own:
                continue
            a = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
            if a.shape != own[name].shape:
                raise ValueError(f"state_dict[{name!r}] has shape {shape_str(a.shape)}, "
                                 f"the module's is {shape_str(own[name].shape)}")
            self._set_by_name(name, a)
        return IncompatibleKeys(missing, unexpected)

    def _set_by_name(self, name: str, value) -> None:
        owner, _, leaf = name.rpartition(".")
        module = self
        for part in owner.split(".") if owner else ():
            module = module._modules[part]
        module._parameters[leaf] = np.array(value, dtype=module._dtype, order="C")

    # -- modes and dtype -------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout on) here and in every submodule; returns self."""
        object.__setattr__(self, "training", bool(mode))
        for m in self._modules.values():
            m.train(mode)
        return self

    def eval(self) -> Module:
        """``train(False)``: dropout off; returns self."""
        return self.train(False)

    @property
    def dtype(self) -> np.dtype:
        """The parameters' dtype (float32 or float64)."""
        return self._dtype

    def to(self, dtype: DTypeLike) -> Module:
        """Cast every parameter to dtype (float32 or float64); returns self."""
        dtype = np.dtype(dtype)
        if dtype not in FLOAT_DTYPES:
            raise TypeError(f"dtype must be float32 or float64, got {dtype}")
        object.__setattr__(self, "_dtype", dtype)
        for name, p in list(self._parameters.items()):
            if p is not None:
                self._parameters[name] = p.astype(dtype)
        for m in self._modules.values():
            m.to(dtype)
        return self

    # -- calling ------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - every module defines it
        raise NotImplementedError

    # attnc.vjp(module, ...) calls _vjp_forward(*args, **kwargs) -> (outputs,
    # saved) and _vjp_backward(saved, cotangents) -> {input or state_dict
    # name: gradient}; modules that support gradients define both.

    def __repr__(self):
        return f"{type(self).__name__}({self.extra_repr()})"

    def extra_repr(self) -> str:
        return ""


class ModuleList(Module):
    """Submodules named ``0``, ``1``, ... (torch's ModuleList naming, so a
    parent's state_dict has ``layers.0.…``, ``blocks.1.…``); indexable,
    iterable and sized."""

    def __init__(self, modules: Iterable[Module], dtype: DTypeLike = np.float32) -> None:
        super().__init__(dtype)
        for i, module in enumerate(modules):
            setattr(self, str(i), module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]


def _describe(module: Module) -> dict:
    """A module's class and constructor arguments, as JSON: arguments that are
    modules themselves (a TransformerEncoder's layer) are described in turn."""
    config = dict(module._config, dtype=module.dtype.name) if "dtype" in module._config else dict(module._config)
    encoded = {k: {"__module__": _describe(v)} if isinstance(v, Module) else v for k, v in config.items()}
    return {"class": f"{type(module).__module__}.{type(module).__qualname__}", "config": encoded}


def _build(description: dict) -> Module:
    name = description["class"]
    if name not in Module._registry and name.startswith("attnc."):  # e.g. attnc.models, not imported yet
        importlib.import_module(name.rsplit(".", 1)[0])
    cls = Module._registry.get(name)
    if cls is None:
        raise ValueError(f"unknown module class {description['class']!r}")
    config = {k: _build(v["__module__"]) if isinstance(v, dict) and "__module__" in v else v
              for k, v in description["config"].items()}
    return cls(**config)


def save(path: str | os.PathLike, module: Module) -> None:
    """Write a module (its class, constructor arguments and parameters) to an .npz file.

    The file is an ordinary ``np.savez`` archive: one array per ``state_dict()``
    entry (same names, shapes and dtype, float32 or float64) and a JSON header
    ``__attnc__`` with the class and its constructor arguments. ``attnc.load``
    rebuilds the module from it; ``np.load(path)[name]`` reads a parameter.

    Parameters
    ----------
    path : str or os.PathLike, the file (NumPy adds ``.npz`` if missing)
    module : attnc.nn.Module (any of attnc.nn's or attnc.models' modules)

    Example
    -------
    >>> layer = attnc.nn.Linear(3, 2, seed=0)
    >>> attnc.save("linear.npz", layer)
    >>> sorted(k for k in np.load("linear.npz").files)
    ['__attnc__', 'bias', 'weight']
    """
    header = json.dumps(dict(_describe(module), dtype=module.dtype.name))
    np.savez(path, __attnc__=np.array(header), **module.state_dict())


def load(path: str | os.PathLike) -> Module:
    """Rebuild a module written by attnc.save, in eval mode.

    The class is built again with the saved constructor arguments, cast to the
    saved dtype (float32 or float64) and given the saved parameters (the
    ``state_dict()`` arrays, same names and shapes).

    Parameters
    ----------
    path : str or os.PathLike, an .npz file written by ``attnc.save``

    Returns
    -------
    module : the rebuilt attnc.nn.Module, with ``training`` False

    Example
    -------
    >>> layer = attnc.nn.Linear(3, 2, dtype=np.float64, seed=0)
    >>> attnc.save("linear.npz", layer)
    >>> again = attnc.load("linear.npz")
    >>> again, again.dtype, again.training
    (Linear(in_features=3, out_features=2, bias=True), dtype('float64'), False)
    >>> bool(np.array_equal(again(np.ones((4, 3))), layer(np.ones((4, 3)))))
    True
    """
    with np.load(path, allow_pickle=False) as data:
        if "__attnc__" not in data:
            raise ValueError(f"{path} was not written by attnc.save")
        header = json.loads(str(data["__attnc__"]))
        try:
            module = _build(header)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        module.to(header.get("dtype", module.dtype.name))  # after any .to() (arguments record the original)
        module.load_state_dict({k: data[k] for k in data.files if k != "__attnc__"})
    return module.eval()
