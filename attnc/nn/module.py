"""attnc.nn.Module: parameters as NumPy arrays, named as in torch's state_dict()."""

from __future__ import annotations

import contextvars
import copy
import functools
import importlib
import inspect
import json
import math
import numbers
import os
import struct
import zipfile
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .._args import FLOAT_DTYPES, shape_str
from .._typing import Array, ArrayLike, DTypeLike

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class FileFormatError(ValueError):
    """A file ``attnc.load`` refuses: not an archive written by ``attnc.save``,
    damaged, or describing a module that its stored arrays do not fit.

    Example
    -------
    >>> np.savez("weights.npz", weight=np.zeros(3))
    >>> try:
    ...     attnc.load("weights.npz")
    ... except attnc.FileFormatError as e:
    ...     print(e)
    weights.npz: no __attnc__ header: not written by attnc.save
    """

    def __init__(self, message: str) -> None:  # annotated, as every public signature (test_docs.py)
        super().__init__(message)


class _Budget:
    """What an archive stores: its parameter arrays' count and elements. While
    attnc.load builds a module from the archive's description, every parameter
    a constructor declares is charged here, and construction stops (a
    FileFormatError) as soon as it has declared more than the archive holds:
    a description cannot make it build more than the file brings."""

    def __init__(self, count: int, elements: int) -> None:
        self.stored = f"{count} arrays of {elements} elements in all"
        self.count, self.elements = count, elements

    def charge(self, shapes, sign: int = 1) -> None:
        shapes = list(shapes)
        self.count -= sign * len(shapes)
        self.elements -= sign * sum(math.prod(s) for s in shapes)
        if self.count < 0 or self.elements < 0:
            raise FileFormatError(f"its description declares more parameters than the file stores ({self.stored})")

    def placeholder(self, shape, dtype) -> np.ndarray:
        """A parameter of this shape that holds no memory (a read-only
        broadcast of one zero), charged first; its shape's entries are checked."""
        shape = tuple(shape)
        for n in shape:
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
                raise ValueError(f"a parameter's shape must be ints >= 0, got {shape!r}")
        self.charge([shape])
        return np.broadcast_to(np.zeros((), dtype), shape)


# Set by attnc.load while it builds a module from a file's description: then
# parameters are placeholders charged to the file's budget (see _Budget).
_LOADING: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("attnc_loading", default=None)


class Module:
    """Base of attnc's modules, as ``torch.nn.Module``.

    Parameters are NumPy arrays registered with ``register_parameter`` (and
    read and set as attributes); submodules are attributes that are Modules.
    ``state_dict()`` names them as torch does (``"out_proj.weight"``), so a
    torch module's state dict loads here and ours loads there. Gradients
    come from ``attnc.vjp(module, *inputs)``, keyed by the same names.
    Calling a module calls its ``forward``. Every subclass records its
    constructor arguments, so ``attnc.save`` / ``attnc.load`` can rebuild it.
    ``print(module)`` shows its tree as torch prints it (a module mirroring a
    torch one prints torch's text, but for the Dropout children torch has
    where attnc fuses dropout into the layer); ``summary()`` adds each
    module's parameter count and the total.

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
    >>> print(attnc.nn.MultiheadAttention(8, 2).summary())
    288  MultiheadAttention(
     72    (out_proj): Linear(in_features=8, out_features=8, bias=True)
         )
    Total parameters: 288
    """

    _registry: dict = {}

    def __init_subclass__(cls, abstract: bool = False, **kwargs):
        """Record every module class (but abstract bases, which are never built
        themselves), and the arguments each instance was built with, so that
        attnc.save / attnc.load can rebuild it."""
        super().__init_subclass__(**kwargs)
        if not abstract:
            Module._registry[f"{cls.__module__}.{cls.__qualname__}"] = cls
            for name in cls.__dict__.get("_former_names", ()):  # files saved before the class moved still load
                Module._registry[name] = cls
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
        budget = _LOADING.get()
        if value is None:
            self._parameters[name] = None
        elif budget is not None:  # attnc.load replaces it with the file's array
            self._parameters[name] = budget.placeholder(np.shape(value), self._dtype)
        else:
            self._parameters[name] = np.ascontiguousarray(value, dtype=self._dtype)

    def _init_parameter(self, name: str, shape: tuple, init: Callable[[tuple], ArrayLike] | None) -> None:
        """Add a parameter of this shape with the values init(shape) (cast to
        the module's dtype), or an absent one (None) if init is None. While
        attnc.load builds the module, init is not called: the parameter is a
        placeholder that holds no memory, charged to the file's budget, and
        the file's array replaces it."""
        budget = _LOADING.get()
        if init is None:
            self._parameters[name] = None
        elif budget is None:
            self.register_parameter(name, init(shape))
        else:
            self._parameters[name] = budget.placeholder(shape, self._dtype)

    def _initialise(self, init: Callable[[str, Array], ArrayLike | None]) -> None:
        """Give each parameter (in state_dict() order) the values init(name,
        parameter), or keep it where init returns None: a model's own
        initialisation of its submodules' parameters. Nothing while attnc.load
        builds the module (the file's values replace them)."""
        if _LOADING.get() is not None:
            return
        for name, p in list(self.named_parameters()):
            value = init(name, p)
            if value is not None:
                self._set_by_name(name, value)

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
            raise KeyError(
                f"state_dict does not fit {type(self).__name__}: missing keys {missing}, unexpected keys {unexpected}"
            )
        for name, value in state_dict.items():
            if name not in own:
                continue
            a = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
            if a.shape != own[name].shape:
                raise ValueError(
                    f"state_dict[{name!r}] has shape {shape_str(a.shape)}, the module's is {shape_str(own[name].shape)}"
                )
            self._set_by_name(name, a)
        return IncompatibleKeys(missing, unexpected)

    def _owner(self, name: str) -> tuple[Module, str]:
        """The submodule holding the parameter of this state_dict name, and the parameter's own name."""
        owner, _, leaf = name.rpartition(".")
        module = self
        for part in owner.split(".") if owner else ():
            module = module._modules[part]
        return module, leaf

    def _set_by_name(self, name: str, value) -> None:
        module, leaf = self._owner(name)
        module._parameters[leaf] = np.array(value, dtype=module._dtype, order="C")

    def _walk(self) -> Iterator[Module]:
        """This module and every submodule, depth first."""
        yield self
        for m in self._modules.values():
            yield from m._walk()

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

    # -- printing ------------------------------------------------------------
    def __repr__(self) -> str:
        return "\n".join(text for _, text in self._tree())

    def extra_repr(self) -> str:
        """This module's own settings, as the line inside its parentheses
        (torch's extra_repr: a module mirroring a torch one prints the same)."""
        return ""

    def num_parameters(self) -> int:
        """The number of values in every present parameter, submodules included.

        Example
        -------
        >>> attnc.nn.Linear(4, 3).num_parameters()  # weight (3, 4) and bias (3,)
        15
        """
        return sum(p.size for _, p in self.named_parameters())

    def summary(self) -> str:
        """The module tree as ``repr`` prints it (torch's layout), each
        module's line led by its parameter count (its submodules' included;
        for torch's grouped copies, ``(0-1): 2 x Layer(``, each copy's),
        then the total.

        Example
        -------
        >>> print(attnc.nn.MultiheadAttention(8, 2).summary())
        288  MultiheadAttention(
         72    (out_proj): Linear(in_features=8, out_features=8, bias=True)
             )
        Total parameters: 288
        """
        tree = self._tree()
        width = len(f"{tree[0][0]:,}")
        lines = [f"{count:>{width},}  {text}" if count is not None else f"{'':{width}}  {text}" for count, text in tree]
        return "\n".join([*lines, f"Total parameters: {tree[0][0]:,}"])

    def _tree(self) -> list[tuple[int | None, str]]:
        """(parameter count, or None on a line that starts no module; text)
        for each line of the repr, laid out as torch's Module.__repr__: the
        extra_repr alone in the parentheses, or it and the children
        ``(name): Child(...)`` on lines indented by two."""
        own = self.extra_repr()
        extra = own.split("\n") if own else []
        children = self._children_trees()
        head = f"{type(self).__name__}("
        if not children and len(extra) <= 1:
            return [(self.num_parameters(), head + "".join(extra) + ")")]
        body = [(None, line) for line in extra] + [line for child in children for line in child]
        return [(self.num_parameters(), head), *((c, "  " + t) for c, t in body), (None, ")")]

    def _children_trees(self) -> list[list[tuple[int | None, str]]]:
        """Each child's tree, its first line labelled ``(name): ``."""
        return [_labelled(f"({name}): ", m._tree()) for name, m in self._modules.items()]

    def _saved_config(self) -> dict:
        """The constructor arguments attnc.save writes (those it was built with)."""
        return self._config


class ModuleList(Module):
    """Submodules named ``0``, ``1``, ... (torch's ModuleList naming, so a
    parent's state_dict has ``layers.0.…``, ``blocks.1.…``); indexable,
    iterable and sized."""

    def __init__(self, modules: Iterable[Module], dtype: DTypeLike = np.float32) -> None:
        super().__init__(dtype)
        for i, module in enumerate(modules):
            if not isinstance(module, Module):
                raise TypeError(f"modules[{i}] must be an attnc.nn.Module, got {type(module).__name__}")
            setattr(self, str(i), module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def _saved_config(self) -> dict:
        return dict(self._config, modules=list(self))  # the modules it holds (an iterator given is spent)

    def _children_trees(self) -> list[list[tuple[int | None, str]]]:
        """As torch's ModuleList prints: a run of equal copies once, labelled
        ``(first-last): n x ``."""
        runs: list[tuple[int, int, list]] = []  # (first index, last index, tree)
        for i, m in enumerate(self):
            tree = m._tree()
            if runs and [t for _, t in runs[-1][2]] == [t for _, t in tree]:
                runs[-1] = (runs[-1][0], i, runs[-1][2])
            else:
                runs.append((i, i, tree))
        return [_labelled(f"({a}): " if a == b else f"({a}-{b}): {b - a + 1} x ", tree) for a, b, tree in runs]


def _settings(leading: str, **settings: tuple[Any, Any]) -> str:
    """An extra_repr as torch's modules write theirs: the leading text, then
    name=value for each setting (value, default) whose value is not the default."""
    return ", ".join([leading, *(f"{k}={v}" for k, (v, default) in settings.items() if v != default)])


def _labelled(label: str, tree: list[tuple[int | None, str]]) -> list[tuple[int | None, str]]:
    """tree with label before its first line."""
    (count, first), *rest = tree
    return [(count, label + first), *rest]


def _copies(module: Module, n: int) -> list[Module]:
    """n deep copies of module. While attnc.load builds from a file, each
    copy is charged to the file's budget before it is made (the module
    itself, spent on them, is refunded), and the copies share the module's
    placeholder parameters: copying those would allocate them."""
    budget = _LOADING.get()
    if budget is None:
        return [copy.deepcopy(module) for _ in range(n)]
    shapes = [p.shape for p in module.parameters()]
    budget.charge(shapes, sign=-1)
    copies = []
    for _ in range(n):
        budget.charge(shapes)
        copies.append(copy.deepcopy(module, {id(p): p for p in module.parameters()}))
    return copies


# Where attnc's module classes are defined: attnc.load imports one of these
# (and nothing else) when a file names a class not imported yet.
_MODULE_SOURCES = (
    "attnc.models",
    "attnc.experiments._mixers",
    "attnc.experiments.attention_attribution",
    "attnc.experiments.attention_pooling",
    "attnc.experiments.lstmn_recall",
    "attnc.experiments.ntm_generalisation",
    "attnc.experiments.sagan_shapes",
)
_HEADER = "__attnc__"
_NESTING = 32  # modules and lists within a description, at most this deep


def _describe(module: Module) -> dict:
    """A module's class and constructor arguments, as JSON: arguments that are
    modules themselves (a TransformerEncoder's layer, a ModuleList's items)
    are described in turn."""
    config = dict(module._saved_config())
    if "dtype" in config:
        config["dtype"] = module.dtype.name
    return {
        "class": f"{type(module).__module__}.{type(module).__qualname__}",
        "config": {k: _encode(v) for k, v in config.items()},
    }


def _encode(value):
    if isinstance(value, Module):
        return {"__module__": _describe(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    return value


def _module_class(name) -> type:
    """The registered module class a description names; importing at most
    one of attnc's own modules that define classes (never the file's choice
    of module)."""
    if not isinstance(name, str):
        raise FileFormatError(f"a module's class must be a name, got {name!r}")
    if name not in Module._registry:
        source = next((m for m in _MODULE_SOURCES if name.startswith(m + ".")), None)
        if source is not None:
            importlib.import_module(source)
    cls = Module._registry.get(name)
    if cls is None:
        raise FileFormatError(f"unknown module class {name!r}")
    return cls


def _build(description, depth: int = 0) -> Module:
    """The module a description names, built from its (decoded) arguments;
    any error of its constructor (a wrong type or value) is the file's."""
    if (
        not isinstance(description, dict)
        or set(description) - {"class", "config", "dtype"}
        or not isinstance(description.get("config"), dict)
    ):
        raise FileFormatError('a module is described as {"class": name, "config": {argument: value}}')
    cls = _module_class(description.get("class"))
    config = {k: _decode(v, depth + 1) for k, v in description["config"].items()}
    try:
        return cls(**config)
    except (FileFormatError, MemoryError):
        raise
    except Exception as e:  # whatever a constructor refuses, the file is wrong
        raise FileFormatError(f"{cls.__name__}: {type(e).__name__}: {e}") from e


def _decode(value, depth: int):
    if depth > _NESTING:
        raise FileFormatError(f"its description nests more than {_NESTING} deep")
    if isinstance(value, dict) and "__module__" in value:
        if len(value) != 1:
            raise FileFormatError('a module argument is described as {"__module__": description}')
        return _build(value["__module__"], depth)
    if isinstance(value, list):
        return [_decode(v, depth + 1) for v in value]
    return value


def save(path: str | os.PathLike, module: Module) -> None:
    """Write a module (its class, constructor arguments and parameters) to an .npz file.

    The file is an ordinary, uncompressed ``np.savez`` archive: one array per
    ``state_dict()`` entry (same names, shapes and dtype, float32 or float64)
    and a JSON header ``__attnc__`` with the class and its constructor
    arguments. ``attnc.load`` rebuilds the module from it;
    ``np.load(path)[name]`` reads a parameter.

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
    np.savez(path, **{_HEADER: np.array(header)}, **module.state_dict())


def load(path: str | os.PathLike) -> Module:
    """Rebuild a module written by attnc.save, in eval mode.

    The class is built again with the saved constructor arguments, cast to the
    saved dtype (float32 or float64) and given the saved parameters (the
    ``state_dict()`` arrays, same names and shapes).

    A file is data, never code: nothing in it is unpickled or executed, and
    the class it names must be one of the registered module classes
    (attnc's, or your own ``attnc.nn.Module`` subclasses once imported).
    The file is checked before anything is allocated: its arrays' headers
    (names, shapes, dtypes, sizes) are read without reading the arrays; the
    module is first built as shapes only (its parameters hold no memory,
    construction stops as soon as it declares more parameters than the file
    stores); its ``state_dict()`` names, shapes and dtype must then be
    exactly the file's, and only then are the arrays read. Loading takes the
    memory of the module's parameters (at most the file's size) and a few
    MiB, whatever the file claims. (Your own classes' constructors run as
    written: their parameters are checked the same way, but what they
    allocate themselves before registering one, they allocate.)

    Parameters
    ----------
    path : str or os.PathLike, an .npz file written by ``attnc.save``

    Returns
    -------
    module : the rebuilt attnc.nn.Module, with ``training`` False

    Raises
    ------
    attnc.FileFormatError (a ValueError) for every file it refuses: not a
    zip archive, damaged or truncated, compressed, encrypted or with
    duplicate or overlapping members; no ``__attnc__`` header, or one that is
    not JSON describing a registered class with arguments its constructor
    accepts; arrays missing, extra, of another shape, or not float32 /
    float64 (object arrays included). OSError if the file cannot be read.

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
    with open(path, "rb") as file:
        try:
            return _load(file, os.fstat(file.fileno()).st_size)
        except FileFormatError as e:
            raise FileFormatError(f"{os.fspath(path)}: {e}") from e.__cause__


_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    struct.error,
)


def _load(file, size: int) -> Module:
    try:
        zf = zipfile.ZipFile(file)
    except _ZIP_ERRORS as e:
        raise FileFormatError(f"not a zip archive ({e})") from e
    with zf:
        members = _members(zf, size)
        if _HEADER not in members:
            raise FileFormatError(f"no {_HEADER} header: not written by attnc.save")
        header = _header(zf, members.pop(_HEADER))
        for name, m in members.items():
            if m.dtype.kind != "f" or m.dtype.newbyteorder("=") not in FLOAT_DTYPES:
                raise FileFormatError(f"array {name!r} has dtype {m.dtype}, not float32 or float64")
        token = _LOADING.set(_Budget(len(members), sum(math.prod(m.shape) for m in members.values())))
        try:
            module = _build(header)
        except RecursionError as e:
            raise FileFormatError("its description nests too deep") from e
        finally:
            _LOADING.reset(token)
        dtype = np.dtype(header.get("dtype", module.dtype))  # save writes the dtype at saving (after any .to())
        _check_fit(module, members, dtype)
        for m in module._walk():
            object.__setattr__(m, "_dtype", dtype)
        for name, _ in list(module.named_parameters()):
            owner, leaf = module._owner(name)
            owner._parameters[leaf] = _read(zf, members[name])
    return module.eval()


class _Member:
    """One .npy member of the archive, from its header: shape, dtype, order,
    and where its data starts."""

    def __init__(self, info, shape, fortran_order, dtype, offset):
        self.info, self.shape, self.fortran_order, self.dtype, self.offset = info, shape, fortran_order, dtype, offset


def _members(zf: zipfile.ZipFile, size: int) -> dict[str, _Member]:
    """Every member's header, checked: stored (not compressed: no member
    holds more than its bytes in the file), not encrypted, named once,
    ``name.npy`` with a version 1 or 2 header whose shape and dtype account
    for exactly the member's size, all of them fitting in the file."""
    infos = zf.infolist()
    if sum(i.file_size for i in infos) > size:  # members overlap: the file holds less than they claim
        raise FileFormatError("its members add up to more bytes than the file has")
    members: dict[str, _Member] = {}
    for info in infos:
        name = info.filename
        if not name.endswith(".npy"):
            raise FileFormatError(f"member {name!r} is not a .npy array")
        key = name[: -len(".npy")]
        if key in members:
            raise FileFormatError(f"member {name!r} appears twice")
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1 or info.compress_size != info.file_size:
            raise FileFormatError(f"member {name!r} is compressed or encrypted (attnc.save stores arrays as they are)")
        try:
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version not in ((1, 0), (2, 0)):
                    raise ValueError(f"unsupported .npy version {version}")
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, fortran_order, dtype = read(f)
                offset = f.tell()
        except _ZIP_ERRORS as e:
            raise FileFormatError(f"member {name!r}: {e}") from e
        if dtype.hasobject or dtype.itemsize == 0:
            raise FileFormatError(f"member {name!r} has dtype {dtype}: attnc files hold numbers only")
        if any(n < 0 for n in shape) or info.file_size != offset + math.prod(shape) * dtype.itemsize:
            raise FileFormatError(
                f"member {name!r} declares shape {shape_str(shape)} of {dtype} but holds "
                f"{info.file_size - offset} bytes of data"
            )
        members[key] = _Member(info, shape, fortran_order, dtype, offset)
    return members


def _read(zf: zipfile.ZipFile, m: _Member) -> np.ndarray:
    """A member's array, read in 256 KiB pieces into a new array of exactly
    its size (then C order, native byte order)."""
    a = np.empty(m.shape[::-1] if m.fortran_order else m.shape, m.dtype)
    view, filled = memoryview(a.reshape(-1).view(np.uint8)), 0
    try:
        with zf.open(m.info) as f:
            f.seek(m.offset)
            while filled < len(view):
                piece = f.read(min(1 << 18, len(view) - filled))
                if not piece:
                    raise EOFError("it ends early")
                view[filled : filled + len(piece)] = piece
                filled += len(piece)
            f.read(1)  # at the member's end: zipfile checks its CRC
    except _ZIP_ERRORS as e:
        raise FileFormatError(f"member {m.info.filename!r}: {e}") from e
    if m.fortran_order:
        a = a.T
    if not a.flags.c_contiguous or not a.dtype.isnative:
        a = np.ascontiguousarray(a, a.dtype.newbyteorder("="))
    return a


def _header(zf: zipfile.ZipFile, m: _Member) -> dict:
    """The JSON description in the __attnc__ member (a 0-d unicode array)."""
    if m.dtype.kind != "U" or m.shape != ():
        raise FileFormatError(f"its {_HEADER} header is a {m.dtype} array of shape {shape_str(m.shape)}, not a string")
    try:
        text = str(_read(zf, m)[()])
        header = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise FileFormatError(f"its {_HEADER} header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise FileFormatError(f"its {_HEADER} header is not a JSON object")
    if header.get("dtype", "float32") not in ("float32", "float64"):
        raise FileFormatError(f"its dtype must be 'float32' or 'float64', got {header['dtype']!r}")
    return header


def _check_fit(module: Module, members: dict[str, _Member], dtype: np.dtype) -> None:
    """The module's state_dict() (names and shapes, as built) and the file's
    arrays (dtype the header's) must be the same."""
    own = {name: p.shape for name, p in module.named_parameters()}
    missing, extra = [k for k in own if k not in members], [k for k in members if k not in own]
    if missing or extra:
        raise FileFormatError(f"its arrays do not fit {type(module).__name__}: missing {missing}, unexpected {extra}")
    for name, shape in own.items():
        m = members[name]
        if m.shape != shape:
            raise FileFormatError(f"array {name!r} has shape {shape_str(m.shape)}, the module's is {shape_str(shape)}")
        if m.dtype.newbyteorder("=") != dtype:
            raise FileFormatError(f"array {name!r} has dtype {m.dtype}, the file's header says {dtype}")
