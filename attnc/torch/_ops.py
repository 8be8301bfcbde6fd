"""attnc's classic operations as torch ops: the score family, soft, hard and
local attention, kernel regression, a KV cache's attention, the NTM's
addressing and memory, layer norm, LSTM and GRU.

Each is a pair of custom ops made by one builder (`_Op`) from a schema, the
attnc function it runs and the shapes of its outputs: ``attnc::NAME`` runs
the attnc function (so its results are attnc's, bit for bit) and
``attnc::NAME_backward`` takes the forward's inputs and the cotangents, runs
attnc's registered ``_vjp_forward`` again and its ``_vjp_backward`` (the C
backward), and returns the gradient of every floating-point tensor input.
Recomputing the forward inside the backward op, rather than keeping attnc's
saved state on the autograd context, is what lets ``torch.compile`` trace
the backward: a compiled graph can only carry tensors from the forward to
the backward. It costs one more forward per backward.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .. import attention as _attention
from .. import hard_attention as _hard_attention
from .. import kernel_regression as _kernel_regression
from .. import local_attention as _local_attention
from .. import ntm as _ntm
from .. import score as _score_fn
from .. import softmax as _softmax_fn
from ..attention.kv_cache import KVCache
from ..grad import _cotangent
from ..nn import GRU, LSTM
from ..nn import layer_norm as _layer_norm
from ._eager import eager, run
from ._tensors import from_tensor, seed_int, seed_tensor, to_tensor

_EMPTY = (0,)  # the shape of an output attnc did not compute (None)


def _parse(schema: str) -> list[tuple[str, str]]:
    """[(type, name)] of a schema's arguments ("Tensor query, str score")."""
    return [tuple(arg.rsplit(" ", 1)) for arg in schema.split(", ")]  # type: ignore[misc]


def _flatten(x: Any) -> list:
    """attnc's outputs (nested tuples, such as an LSTM's (out, (h, c))) as a flat list."""
    if isinstance(x, (tuple, list)):
        return [leaf for item in x for leaf in _flatten(item)]
    return [x]


def _nest(flat: list, like: Any) -> Any:
    """flat's items (consumed from its front) in the structure of like."""
    if isinstance(like, (tuple, list)):
        return tuple(_nest(flat, item) for item in like)
    return flat.pop(0)


class _Op:
    """The description of one attnc operation as a torch op.

    schema: its arguments in torch's schema language; a ``Tensor[] NAME``
        comes with a ``str[] NAME_names``, the attnc argument (or parameter)
        name of each tensor.
    call: arguments (a dict of NumPy arrays, lists and options) -> (the attnc
        callable, args, kwargs); the callable is registered with attnc.vjp.
    fake: the same dict of fake tensors -> the outputs (empty tensors of
        their shapes and dtypes).
    outputs: how many tensors the op returns; attnc's outputs are
        flattened, and one it did not compute (None) is an empty tensor.
    """

    def __init__(self, name: str, schema: str, call: Callable, fake: Callable, outputs: int) -> None:
        self.name, self.call, self.fake, self.outputs = name, call, fake, outputs
        self.args = _parse(schema)
        results = "Tensor" if outputs == 1 else "(" + ", ".join(["Tensor"] * outputs) + ")"
        self.forward = torch.library.custom_op(
            f"attnc::{name}", self._forward, mutates_args=(), schema=f"({schema}) -> {results}"
        )
        self.backward = torch.library.custom_op(
            f"attnc::{name}_backward",
            self._backward,
            mutates_args=(),
            schema=f"({schema}, Tensor?[] cotangents) -> Tensor[]",
        )
        self.forward.register_fake(self._fake_forward)
        self.backward.register_fake(self._fake_backward)
        self.forward.register_autograd(self._autograd_backward, setup_context=self._setup_context)

    # -- crossing ------------------------------------------------------------------
    def _numpy(self, args: Sequence) -> dict:
        out = {}
        for (kind, name), value in zip(self.args, args):
            if kind == "Tensor[]":
                value = [from_tensor(t, f"{name}[{i}]") for i, t in enumerate(value)]
            elif kind.startswith("Tensor") and value is not None:
                value = from_tensor(value, name, floats_only=False)
            out[name] = value
        return out

    def _slots(self, args: Sequence) -> list[tuple[int, int | None]]:
        """Where the differentiable inputs are: (argument index, list index or
        None) of every floating-point tensor, in argument order."""
        slots: list[tuple[int, int | None]] = []
        for i, ((kind, _), value) in enumerate(zip(self.args, args)):
            if kind == "Tensor[]":
                slots += [(i, j) for j, t in enumerate(value) if t.is_floating_point()]
            elif kind.startswith("Tensor") and value is not None and value.is_floating_point():
                slots.append((i, None))
        return slots

    @staticmethod
    def _at(args: Sequence, slot: tuple[int, int | None]) -> torch.Tensor:
        """The tensor in a slot."""
        i, j = slot
        return args[i] if j is None else args[i][j]

    def _grad_name(self, args: Sequence, slot: tuple[int, int | None]) -> str:
        i, j = slot
        name = self.args[i][1]
        return name if j is None else args[[n for _, n in self.args].index(f"{name}_names")][j]

    # -- the two kernels -----------------------------------------------------------------
    def _attnc(self, args: Sequence) -> tuple[Callable, tuple, dict]:
        """(the attnc callable, args, kwargs) on the tensors' memory."""
        fn, a, kw = self.call(self._numpy(args))
        return fn, tuple(a), kw

    @staticmethod
    def _registered(fn: Callable, a: tuple) -> tuple:
        """The arguments of fn's registered forward: a method's take self first."""
        return (fn.__self__,) + a if isinstance(fn, types.MethodType) else a

    def _tensors(self, outputs: Any, like: torch.Tensor) -> list[torch.Tensor]:
        """attnc's outputs as the op's flat list of tensors (one it did not compute: empty)."""
        flat = _flatten(outputs)
        flat += [None] * (self.outputs - len(flat))
        return [like.new_empty(_EMPTY) if r is None else to_tensor(r) for r in flat]

    def _pullback(self, args: Sequence, fn: Any, saved: Any, outputs: Any, cotangents: Sequence) -> list:
        """The gradient (an array, or None where attnc gives none) of every
        floating-point tensor argument, by fn's registered C backward."""
        flat = _flatten(outputs)
        cots = [
            None if c is None or o is None or o.dtype.kind != "f" else from_tensor(c, f"cotangent {k}")
            for k, (c, o) in enumerate(zip(cotangents, flat))
        ]
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        nested = _nest(cots, outs)
        grads = fn._vjp_backward(saved, tuple(_cotangent(c, o, k) for k, (c, o) in enumerate(zip(nested, outs))))
        return [grads.get(self._grad_name(args, slot)) for slot in self._slots(args)]

    def _forward(self, *args):
        """attnc::NAME: the attnc function on the tensors' memory."""
        fn, a, kw = self._attnc(args)
        out = self._tensors(fn(*a, **kw), args[0])
        return out[0] if self.outputs == 1 else tuple(out)

    def _backward(self, *args):
        """attnc::NAME_backward: the forward's arguments and one cotangent per
        output -> the gradient of every floating-point tensor argument (zeros
        for one attnc gives none), by attnc's registered forward and C backward."""
        *args, cotangents = args
        fn, a, kw = self._attnc(args)
        outputs, saved = fn._vjp_forward(*self._registered(fn, a), **kw)
        grads = self._pullback(args, fn, saved, outputs, cotangents)
        return [
            torch.zeros_like(self._at(args, slot)) if g is None else to_tensor(g)
            for slot, g in zip(self._slots(args), grads)
        ]

    def __call__(self, *args):
        """The op's outputs: attnc called directly on the eager path (see
        _eager), the registered op under torch.compile."""
        tensors = [t for t in args if isinstance(t, torch.Tensor)]
        tensors += [t for v in args if isinstance(v, list) for t in v if isinstance(t, torch.Tensor)]
        if not eager(*tensors):
            return self.forward(*args)

        def call(differentiable):
            fn, a, kw = self._attnc(args)
            if not differentiable:
                return self._tensors(fn(*a, **kw), args[0]), (), None
            outputs, saved = fn._vjp_forward(*self._registered(fn, a), **kw)
            out = self._tensors(outputs, args[0])
            frozen = [i for i, t in enumerate(out) if not t.is_floating_point()]

            def pullback(cotangents, needs):
                grads = self._pullback(args, fn, saved, outputs, cotangents)
                return [None if g is None else to_tensor(g) for g in grads]

            return out, frozen, pullback

        out = run(call, [self._at(args, slot) for slot in self._slots(args)])
        return out[0] if self.outputs == 1 else tuple(out)

    # -- fakes and autograd ------------------------------------------------------------------
    def _fake_forward(self, *args):
        out = self.fake(dict(zip([n for _, n in self.args], args)))
        return out[0] if self.outputs == 1 else tuple(out)

    def _fake_backward(self, *args):
        *args, _ = args
        return [torch.empty_like(self._at(args, slot)) for slot in self._slots(args)]

    def _setup_context(self, ctx, inputs, output):
        tensors, layout = [], []
        for value in inputs:
            if isinstance(value, torch.Tensor):
                layout.append(len(tensors))
                tensors.append(value)
            elif isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
                layout.append(list(range(len(tensors), len(tensors) + len(value))))
                tensors.extend(value)
            else:
                layout.append(("value", value))
        ctx.save_for_backward(*tensors)
        ctx.layout = layout

    def _autograd_backward(self, ctx, *cotangents):
        saved = ctx.saved_tensors
        args = [
            saved[x] if isinstance(x, int) else [saved[k] for k in x] if isinstance(x, list) else x[1]
            for x in ctx.layout
        ]
        grads = self.backward(*args, list(cotangents))
        # torch wants a list where it found one: a list of tensors (an empty list too)
        out: list[Any] = [
            [None] * len(v) if kind == "Tensor[]" or (isinstance(v, list) and not v) else None
            for (kind, _), v in zip(self.args, args)
        ]
        for (i, j), g in zip(self._slots(args), grads):
            if j is None:
                out[i] = g
            else:
                out[i][j] = g
        return tuple(out)


def _rows(t, *trailing, dtype=None):
    """A fake output: t's leading dims (all but two), then the trailing sizes."""
    return t.new_empty(tuple(t.shape[:-2]) + trailing, dtype=dtype)


# -- the score family ----------------------------------------------------------------------------
_PARAMS = "Tensor[] params, str[] params_names, str[] constants_names, float[] constants"
_MASKS = "Tensor? mask, Tensor? key_lengths"


def _params(a: dict) -> dict:
    """The score parameters, tensors (differentiable) and floats, by name."""
    return {**dict(zip(a["params_names"], a["params"])), **dict(zip(a["constants_names"], a["constants"]))}


def _split(params: dict) -> tuple[list, list, list, list]:
    """A user's score parameters as the op's four lists: tensors (which get
    gradients) and Python numbers (constants)."""
    tensors = {k: v for k, v in params.items() if isinstance(v, torch.Tensor)}
    constants = {k: v for k, v in params.items() if k not in tensors}
    for k, v in constants.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{k} must be a torch.Tensor or a Python float, got {type(v).__name__}")
    return list(tensors.values()), list(tensors), list(constants), [float(v) for v in constants.values()]


def _keys_values(a: dict) -> tuple:
    return a["keys"] if a["values"] is None else a["values"]


_score = _Op(
    "score",
    f"Tensor query, Tensor keys, str score, {_PARAMS}",
    lambda a: (_score_fn, (a["query"], a["keys"]), {"score": a["score"], **_params(a)}),
    lambda a: [_rows(a["query"], a["query"].shape[-2], a["keys"].shape[-2])],
    1,
)
_softmax = _Op(
    "softmax",
    f"Tensor scores, {_MASKS}, bool causal",
    lambda a: (_softmax_fn, (a["scores"],), {k: a[k] for k in ("mask", "key_lengths", "causal")}),
    lambda a: [torch.empty_like(a["scores"])],
    1,
)


def _attention_fake(a, extra=None):
    """context (..., Tq, dv), weights (..., Tq, Tk), and a third output
    (..., Tq) of dtype extra (hard attention's indices, local attention's
    positions)."""
    q = a["query"]
    tq = q.shape[-2]
    out = [_rows(q, tq, _keys_values(a).shape[-1]), _rows(q, tq, a["keys"].shape[-2])]
    return out if extra is None else out + [_rows(q, tq, dtype=extra)]


_soft = _Op(
    "attention",
    f"Tensor query, Tensor keys, Tensor? values, str score, {_MASKS}, bool causal, {_PARAMS}",
    lambda a: (
        _attention,
        (a["query"], a["keys"], a["values"]),
        {"score": a["score"], "mask": a["mask"], "key_lengths": a["key_lengths"], "causal": a["causal"], **_params(a)},
    ),
    _attention_fake,
    2,
)


def score(query: torch.Tensor, keys: torch.Tensor, *, score: str = "dot", **params: Any) -> torch.Tensor:
    """``attnc.score`` on tensors, differentiable (torch op ``attnc::score``).

    Parameters
    ----------
    query : Tensor (..., Tq, dq), float32 or float64, on the CPU
    keys : Tensor (..., Tk, dk), the same dtype and leading dims
    score : one of ``attnc.score``'s kinds
    **params : the score's parameters (``weight``, ``w_query``, ``w_key``,
        ``v``, ``beta``, ``scale``, ``bandwidth``): tensors of the call's
        dtype, which get gradients, or Python floats (constants)

    Returns
    -------
    scores : Tensor (..., Tq, Tk), the input dtype

    Example
    -------
    >>> q = torch.rand(3, 4, dtype=torch.float64, requires_grad=True)
    >>> w = torch.rand(4, 4, dtype=torch.float64, requires_grad=True)
    >>> s = attnc.torch.score(q, torch.rand(5, 4, dtype=torch.float64), score="general", weight=w)
    >>> s.sum().backward()
    >>> s.shape, w.grad.shape
    (torch.Size([3, 5]), torch.Size([4, 4]))
    """
    return _score(query, keys, score, *_split(params))


def softmax(
    scores: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    key_lengths: torch.Tensor | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """``attnc.softmax`` on tensors, differentiable (torch op ``attnc::softmax``).

    Parameters
    ----------
    scores : Tensor (..., Tq, Tk), float32 or float64, on the CPU
    mask : bool Tensor broadcastable to (..., Tq, Tk), optional; True = may attend
    key_lengths : int Tensor broadcastable to (...), optional
    causal : bool

    Returns
    -------
    weights : Tensor (..., Tq, Tk), rows summing to 1 (0 when fully masked)

    Example
    -------
    >>> w = attnc.torch.softmax(torch.tensor([[1.0, 2.0, 3.0]]), key_lengths=torch.tensor(2))
    >>> w
    tensor([[0.2689, 0.7311, 0.0000]])
    """
    return _softmax(scores, mask, key_lengths, causal)


def attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor | None = None,
    *,
    score: str = "dot",
    mask: torch.Tensor | None = None,
    key_lengths: torch.Tensor | None = None,
    causal: bool = False,
    **params: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``attnc.attention`` on tensors, differentiable in every float input
    and in both outputs (torch op ``attnc::attention``).

    Parameters
    ----------
    query : Tensor (..., Tq, dq), float32 or float64, on the CPU
    keys : Tensor (..., Tk, dk); values : Tensor (..., Tk, dv) or None (the keys)
    score, mask, key_lengths, causal, **params : as in ``attnc.attention``;
        array parameters are tensors (they get gradients), floats constants

    Returns
    -------
    context : Tensor (..., Tq, dv); weights : Tensor (..., Tq, Tk)

    Example
    -------
    >>> q = torch.rand(2, 3, 8, requires_grad=True); k = torch.rand(2, 5, 8)
    >>> context, weights = attnc.torch.attention(q, k, score="scaled_dot", causal=True)
    >>> context.sum().backward()
    >>> context.shape, weights.shape, q.grad.shape
    (torch.Size([2, 3, 8]), torch.Size([2, 3, 5]), torch.Size([2, 3, 8]))
    """
    return _soft(query, keys, values, score, mask, key_lengths, causal, *_split(params))


_hard = _Op(
    "hard_attention",
    f"Tensor query, Tensor keys, Tensor? values, str mode, float temperature, Tensor seed, str score, {_MASKS}, "
    f"bool causal, {_PARAMS}",
    lambda a: (
        _hard_attention,
        (a["query"], a["keys"], a["values"]),
        {k: a[k] for k in ("mode", "temperature", "score", "mask", "key_lengths", "causal")}
        | {"seed": seed_int(a["seed"])}
        | _params(a),
    ),
    lambda a: _attention_fake(a, torch.int64),
    3,
)
_local = _Op(
    "local_attention",
    f"Tensor query, Tensor keys, Tensor? values, float window, str mode, Tensor? positions, Tensor? w_p, "
    f"Tensor? v_p, str score, {_MASKS}, {_PARAMS}",
    lambda a: (
        _local_attention,
        (a["query"], a["keys"], a["values"]),
        {k: a[k] for k in ("window", "mode", "positions", "w_p", "v_p", "score", "mask", "key_lengths")} | _params(a),
    ),
    lambda a: _attention_fake(a, a["query"].dtype),
    3,
)
_regression = _Op(
    "kernel_regression",
    f"Tensor x_query, Tensor x_train, Tensor y_train, {_PARAMS}",
    lambda a: (_kernel_regression, (a["x_query"], a["x_train"], a["y_train"]), _params(a)),
    lambda a: [
        a["y_train"].new_empty((a["x_query"].shape[0],) + tuple(a["y_train"].shape[1:])),
        a["x_query"].new_empty((a["x_query"].shape[0], a["x_train"].shape[0])),
    ],
    2,
)


def hard_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor | None = None,
    *,
    mode: str = "argmax",
    temperature: float = 1.0,
    seed: int | None = None,
    score: str = "dot",
    mask: torch.Tensor | None = None,
    key_lengths: torch.Tensor | None = None,
    causal: bool = False,
    **params: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``attnc.hard_attention`` on tensors (torch op ``attnc::hard_attention``),
    with attnc's straight-through gradient: values get theirs through the
    one-hot weights in every mode; in ``"gumbel"`` mode query, keys and the
    score's parameters get the gradient of softmax((s + g) / temperature)
    with the forward's noise g.

    Parameters
    ----------
    query, keys, values, score, mask, key_lengths, causal, **params
        As in ``attnc.torch.attention``.
    mode : ``"argmax"``, ``"sample"`` or ``"gumbel"``
    temperature : float > 0 (the Gumbel backward's)
    seed : int, or None to draw one from torch's generator (``torch.manual_seed``
        then makes the picks repeatable)

    Returns
    -------
    context : Tensor (..., Tq, dv); weights : Tensor (..., Tq, Tk), one-hot rows;
    indices : int64 Tensor (..., Tq), -1 where nothing may be attended

    Example
    -------
    >>> q = torch.rand(4, 8, dtype=torch.float64); k = torch.rand(6, 8, dtype=torch.float64, requires_grad=True)
    >>> context, weights, idx = attnc.torch.hard_attention(q, k, mode="gumbel", seed=0)
    >>> bool((context == k[idx]).all()), idx.dtype
    (True, torch.int64)
    >>> context.sum().backward(); k.grad.shape
    torch.Size([6, 8])
    """
    return _hard(
        query, keys, values, mode, temperature, seed_tensor(seed), score, mask, key_lengths, causal, *_split(params)
    )


def local_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor | None = None,
    *,
    window: float,
    mode: str = "monotonic",
    positions: torch.Tensor | None = None,
    w_p: torch.Tensor | None = None,
    v_p: torch.Tensor | None = None,
    score: str = "dot",
    mask: torch.Tensor | None = None,
    key_lengths: torch.Tensor | None = None,
    **params: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``attnc.local_attention`` on tensors, differentiable (torch op
    ``attnc::local_attention``): query, keys, values, the score's tensor
    parameters, float ``positions`` (``"monotonic"``) and ``w_p``, ``v_p``
    (``"predictive"``) get gradients.

    Parameters
    ----------
    As ``attnc.local_attention``, with tensors for arrays.

    Returns
    -------
    context : Tensor (..., Tq, dv); weights : Tensor (..., Tq, Tk);
    positions : Tensor (..., Tq), the windows' centres

    Example
    -------
    >>> q = torch.rand(5, 8, dtype=torch.float64); k = torch.rand(9, 8, dtype=torch.float64)
    >>> w_p = torch.rand(8, 4, dtype=torch.float64, requires_grad=True); v_p = torch.rand(4, dtype=torch.float64)
    >>> context, weights, p = attnc.torch.local_attention(q, k, window=2, mode="predictive", w_p=w_p, v_p=v_p)
    >>> p.sum().backward(); w_p.grad.shape
    torch.Size([8, 4])
    """
    return _local(
        query, keys, values, float(window), mode, positions, w_p, v_p, score, mask, key_lengths, *_split(params)
    )


def kernel_regression(
    x_query: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor, *, bandwidth: float | torch.Tensor = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``attnc.kernel_regression`` (Nadaraya-Watson) on tensors, differentiable
    (torch op ``attnc::kernel_regression``); a 0-d tensor ``bandwidth`` gets a
    gradient, a float is a constant.

    Parameters
    ----------
    x_query : Tensor (m,) or (m, d), float32 or float64; x_train : (n,) or (n, d);
    y_train : (n,) or (n, dy); bandwidth : float > 0 or a 0-d Tensor

    Returns
    -------
    y_pred : Tensor (m,) or (m, dy); weights : Tensor (m, n)

    Example
    -------
    >>> x = torch.linspace(0, 5, 50, dtype=torch.float64)
    >>> h = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    >>> y_pred, w = attnc.torch.kernel_regression(x[[10, 20]], x, x.sin(), bandwidth=h)
    >>> y_pred.sum().backward(); y_pred.shape, h.grad.shape
    (torch.Size([2]), torch.Size([]))
    """
    return _regression(x_query, x_train, y_train, *_split({"bandwidth": bandwidth}))


# -- a KV cache's attention ---------------------------------------------------------------------------


def _cache(keys: np.ndarray, values: np.ndarray) -> KVCache:
    """A KVCache holding exactly these keys and values (b, h, L, e)."""
    for name, a in (("keys", keys), ("values", values)):
        if a.ndim != 4:
            raise ValueError(f"{name} must have shape (batch, heads, length, dim), got {tuple(a.shape)}")
    b, h, length, e = keys.shape
    cache = KVCache(b, h, length, e, keys.dtype, value_dim=values.shape[3])
    cache.append(keys, values)
    return cache


_kv = _Op(
    "kv_cache_attend",
    "Tensor query, Tensor keys, Tensor values, float? scale, bool return_weights",
    lambda a: (
        _cache(a["keys"], a["values"]).attend,
        (a["query"],),
        {"scale": a["scale"], "return_weights": a["return_weights"]},
    ),
    lambda a: [
        a["query"].new_empty(tuple(a["query"].shape[:3]) + (a["values"].shape[3],)),
        a["query"].new_empty(tuple(a["query"].shape[:3]) + (a["keys"].shape[2],) if a["return_weights"] else _EMPTY),
    ],
    2,
)


def kv_cache_attend(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    *,
    scale: float | None = None,
    return_weights: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``attnc.KVCache.attend`` as a function of the cache's tensors
    (torch op ``attnc::kv_cache_attend``): t new queries against the L
    cached positions, the last t of which are the queries' own (causal among
    them: query i sees positions up to L - t + i). Differentiable in query,
    keys and values (and in the weights with ``return_weights``).

    Parameters
    ----------
    query : Tensor (batch, H, t, head_dim), float32 or float64, H a multiple of heads
    keys : Tensor (batch, heads, L, head_dim), L >= t, the cached keys
    values : Tensor (batch, heads, L, value_dim)
    scale : float or None (1/sqrt(head_dim))
    return_weights : bool

    Returns
    -------
    output : Tensor (batch, H, t, value_dim); with return_weights, also
    weights : Tensor (batch, H, t, L)

    Example
    -------
    >>> k = torch.rand(1, 2, 5, 8); v = torch.rand(1, 2, 5, 8)
    >>> q = torch.rand(1, 4, 1, 8, requires_grad=True)   # 4 query heads share 2 cached heads
    >>> out, w = attnc.torch.kv_cache_attend(q, k, v, return_weights=True)
    >>> out.shape, w.shape
    (torch.Size([1, 4, 1, 8]), torch.Size([1, 4, 1, 5]))
    """
    out, weights = _kv(query, keys, values, scale, return_weights)
    return (out, weights) if return_weights else out


# -- the NTM ----------------------------------------------------------------------------------------


def _ntm_op(name: str, arrays: str, fake: Callable, outputs: int = 1, **options: Any) -> _Op:
    """An attnc.ntm function of tensors only (and fixed options)."""
    fn, names = getattr(_ntm, name), arrays.split()
    return _Op(
        f"ntm_{name}",
        ", ".join(f"Tensor {n}" for n in names),
        lambda a: (fn, tuple(a[n] for n in names), options),
        fake,
        outputs,
    )


def _slots_fake(a):  # (B, H, N) from key (B, H, M) and memory (B, N, M)
    return a["key"].new_empty(tuple(a["key"].shape[:2]) + (a["memory"].shape[1],))


_content = _ntm_op("content_weights", "key memory beta", lambda a: [_slots_fake(a)])
_interpolate = _ntm_op("interpolate", "w_content w_prev g", lambda a: [torch.empty_like(a["w_content"])])
_shift = _ntm_op("shift", "w s", lambda a: [torch.empty_like(a["w"])])
_sharpen = _ntm_op("sharpen", "w gamma", lambda a: [torch.empty_like(a["w"])])
_address = _ntm_op(
    "address",
    "key beta g s gamma w_prev memory",
    lambda a: [_slots_fake(a) for _ in range(4)],
    4,
    return_intermediates=True,
)
_read = _ntm_op(
    "read",
    "memory w",
    lambda a: [a["memory"].new_empty((a["memory"].shape[0], a["w"].shape[1], a["memory"].shape[2]))],
)
_write = _ntm_op("write", "memory w erase add", lambda a: [torch.empty_like(a["memory"])])


# -- layer norm, LSTM, GRU ------------------------------------------------------------------------------

_norm = _Op(
    "layer_norm",
    "Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps",
    lambda a: (_layer_norm, (a["input"], tuple(a["normalized_shape"]), a["weight"], a["bias"], a["eps"]), {}),
    lambda a: [torch.empty_like(a["input"])],
    1,
)


@functools.lru_cache(maxsize=32)
def _rnn_template(
    mode: str,
    input_size: int,
    hidden_size: int,
    num_layers: int,
    bias: bool,
    bidirectional: bool,
    dropout: float,
    dtype: str,
):
    """An attnc LSTM or GRU of this configuration, whose parameters each call replaces."""
    cls = LSTM if mode == "lstm" else GRU
    return cls(input_size, hidden_size, num_layers, bias, dropout=dropout, bidirectional=bidirectional, dtype=dtype)


def _rnn(a: dict):
    """The attnc module running one call: a copy of the configuration's
    template with the call's weights (views, no copies), mode and seed."""
    x, names, weights = a["input"], a["weights_names"], a["weights"]
    if "weight_hh_l0" not in names:
        raise ValueError(
            f"weights have no 'weight_hh_l0' (got {', '.join(names) or 'none'}): "
            f"pass dict(named_parameters()) of a torch.nn.{a['mode'].upper()}"
        )
    hidden = weights[names.index("weight_hh_l0")].shape[1]
    template = _rnn_template(
        a["mode"],
        x.shape[-1],
        hidden,
        a["num_layers"],
        "bias_ih_l0" in names,
        a["bidirectional"],
        a["dropout"],
        x.dtype.name,
    )
    expected = dict(template.named_parameters())
    if set(names) != set(expected):
        raise ValueError(
            f"weights are {', '.join(sorted(names))}; this {a['mode'].upper()} needs {', '.join(sorted(expected))}"
        )
    params = {}
    for name, w in zip(names, weights):
        if w.dtype != x.dtype:
            raise TypeError(f"weights[{name!r}] has dtype {w.dtype}, but input has dtype {x.dtype}")
        if w.shape != expected[name].shape:
            raise ValueError(f"weights[{name!r}] has shape {tuple(w.shape)}, expected {expected[name].shape}")
        params[name] = np.ascontiguousarray(w)
    module = copy.copy(template)
    object.__setattr__(module, "_parameters", {n: params.get(n) for n in template._parameters})
    object.__setattr__(module, "training", a["training"])
    object.__setattr__(module, "_rng", np.random.default_rng(seed_int(a["seed"])))
    h0, c0 = a["h0"], a["c0"]
    if a["mode"] == "lstm":
        hx = None if h0 is None and c0 is None else (h0, c0)
    else:
        hx = h0
    return module, (x, hx), {"lengths": a["lengths"]}


def _rnn_fake(a):
    x, names = a["input"], a["weights_names"]
    hidden = a["weights"][names.index("weight_hh_l0")].shape[1]
    d = 2 if a["bidirectional"] else 1
    state = (a["num_layers"] * d,) + tuple(x.shape[:-2]) + (hidden,)
    h_n = x.new_empty(state)
    return [
        x.new_empty(tuple(x.shape[:-1]) + (d * hidden,)),
        h_n,
        torch.empty_like(h_n) if a["mode"] == "lstm" else x.new_empty(_EMPTY),
    ]


_recurrent = _Op(
    "rnn",
    "Tensor input, Tensor? h0, Tensor? c0, Tensor[] weights, str[] weights_names, Tensor? lengths, str mode, "
    "int num_layers, bool bidirectional, float dropout, bool training, Tensor seed",
    _rnn,
    _rnn_fake,
    3,
)


def layer_norm(
    input: torch.Tensor,
    normalized_shape: int | Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``attnc.nn.layer_norm`` on tensors, as ``torch.nn.functional.layer_norm``
    (torch op ``attnc::layer_norm``), differentiable in input, weight and bias.

    Parameters
    ----------
    input : Tensor (..., *normalized_shape), float32 or float64
    normalized_shape : int or tuple of ints
    weight, bias : Tensors of shape normalized_shape, or None
    eps : float >= 0

    Returns
    -------
    output : Tensor, the input's shape and dtype

    Example
    -------
    >>> x = torch.rand(2, 5, 8)
    >>> y = attnc.torch.layer_norm(x, 8, torch.ones(8), torch.zeros(8))
    >>> bool(torch.allclose(y, torch.nn.functional.layer_norm(x, (8,)), atol=1e-5))
    True
    """
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    return _norm(input, shape, weight, bias, float(eps))


def _recurrent_call(mode, input, h0, c0, weights, num_layers, bidirectional, dropout, training, lengths, seed):
    if not isinstance(weights, dict):
        raise TypeError(
            f"weights must be a dict of tensors by torch's names (dict(named_parameters()) of a "
            f"torch.nn.{mode.upper()}), got {type(weights).__name__}"
        )
    return _recurrent(
        input,
        h0,
        c0,
        list(weights.values()),
        list(weights),
        lengths,
        mode,
        num_layers,
        bidirectional,
        float(dropout),
        training,
        seed_tensor(seed if training and dropout else 0),
    )


def lstm(
    input: torch.Tensor,
    hx: tuple[torch.Tensor, torch.Tensor] | None,
    weights: dict[str, torch.Tensor],
    *,
    num_layers: int = 1,
    bidirectional: bool = False,
    dropout: float = 0.0,
    training: bool = False,
    lengths: torch.Tensor | None = None,
    seed: int | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """A batch-first LSTM over a whole sequence in attnc's C loop (torch op
    ``attnc::rnn``), with torch's weights: ``weights`` is a ``torch.nn.LSTM``'s
    ``dict(named_parameters())`` (``weight_ih_l0``, ``weight_hh_l0``,
    ``bias_ih_l0``, ...; the biases may be absent), each of which gets a
    gradient, as input, h0 and c0 do.

    Parameters
    ----------
    input : Tensor (B, T, I) or (T, I), float32 or float64
    hx : (h0, c0), each (num_layers * D, B, H) (or (num_layers * D, H)), or None (zeros)
    weights : dict of Tensors by torch's names; H is weight_hh_l0's width
    num_layers, bidirectional : as the module's (D = 2 if bidirectional)
    dropout, training : dropout between layers, applied only when training
    lengths : int Tensor (B,), each row's valid prefix (in [1, T]), or None
    seed : the dropout's seed; None draws one from torch's generator

    Returns
    -------
    output : Tensor (B, T, D * H); (h_n, c_n) : Tensors (num_layers * D, B, H)

    Example
    -------
    >>> ref = torch.nn.LSTM(3, 4, batch_first=True)
    >>> x = torch.rand(2, 5, 3)
    >>> out, (h, c) = attnc.torch.lstm(x, None, dict(ref.named_parameters()))
    >>> bool(torch.allclose(out, ref(x)[0], atol=1e-6)), h.shape
    (True, torch.Size([1, 2, 4]))
    """
    h0, c0 = (None, None) if hx is None else hx
    out, h_n, c_n = _recurrent_call(
        "lstm", input, h0, c0, weights, num_layers, bidirectional, dropout, training, lengths, seed
    )
    return out, (h_n, c_n)


def gru(
    input: torch.Tensor,
    hx: torch.Tensor | None,
    weights: dict[str, torch.Tensor],
    *,
    num_layers: int = 1,
    bidirectional: bool = False,
    dropout: float = 0.0,
    training: bool = False,
    lengths: torch.Tensor | None = None,
    seed: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch-first GRU over a whole sequence in attnc's C loop (torch op
    ``attnc::rnn``), with a ``torch.nn.GRU``'s ``dict(named_parameters())``
    as ``weights``: as ``attnc.torch.lstm``, with hx = h0.

    Parameters
    ----------
    input : Tensor (B, T, I) or (T, I), float32 or float64
    hx : Tensor (num_layers * D, B, H) or None
    weights, num_layers, bidirectional, dropout, training, lengths, seed
        As in ``attnc.torch.lstm``.

    Returns
    -------
    output : Tensor (B, T, D * H); h_n : Tensor (num_layers * D, B, H)

    Example
    -------
    >>> ref = torch.nn.GRU(3, 4, batch_first=True)
    >>> x = torch.rand(2, 5, 3)
    >>> out, h = attnc.torch.gru(x, None, dict(ref.named_parameters()))
    >>> bool(torch.allclose(out, ref(x)[0], atol=1e-6)), h.shape
    (True, torch.Size([1, 2, 4]))
    """
    out, h_n, _ = _recurrent_call(
        "gru", input, hx, None, weights, num_layers, bidirectional, dropout, training, lengths, seed
    )
    return out, h_n


# -- the NTM's public functions -----------------------------------------------------------------------


def ntm_content_weights(key: torch.Tensor, memory: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``attnc.ntm.content_weights`` on tensors (torch op ``attnc::ntm_content_weights``).

    key (B, H, M), memory (B, N, M), beta (B, H), float32 or float64 -> w_c (B, H, N).

    Example
    -------
    >>> memory = torch.rand(1, 6, 4)
    >>> attnc.torch.ntm_content_weights(memory[:, [2]], memory, torch.tensor([[50.0]])).argmax().item()
    2
    """
    return _content(key, memory, beta)


def ntm_interpolate(w_content: torch.Tensor, w_prev: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """``attnc.ntm.interpolate`` on tensors (torch op ``attnc::ntm_interpolate``).

    w_content (B, H, N), w_prev (B, H, N), g (B, H), float32 or float64 -> w_g (B, H, N).

    Example
    -------
    >>> attnc.torch.ntm_interpolate(torch.ones(1, 1, 2), torch.zeros(1, 1, 2), torch.tensor([[0.25]]))
    tensor([[[0.2500, 0.2500]]])
    """
    return _interpolate(w_content, w_prev, g)


def ntm_shift(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``attnc.ntm.shift`` on tensors (torch op ``attnc::ntm_shift``).

    w (B, H, N), s (B, H, K) with K odd, float32 or float64 -> (B, H, N).

    Example
    -------
    >>> attnc.torch.ntm_shift(torch.eye(5)[None, None, 4], torch.tensor([[[0.0, 0.0, 1.0]]])).argmax().item()
    0
    """
    return _shift(w, s)


def ntm_sharpen(w: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """``attnc.ntm.sharpen`` on tensors (torch op ``attnc::ntm_sharpen``).

    w (B, H, N) >= 0, gamma (B, H) >= 1, float32 or float64 -> (B, H, N).

    Example
    -------
    >>> attnc.torch.ntm_sharpen(torch.tensor([[[0.25, 0.25, 0.5]]]), torch.tensor([[2.0]]))
    tensor([[[0.1667, 0.1667, 0.6667]]])
    """
    return _sharpen(w, gamma)


def ntm_address(
    key: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    s: torch.Tensor,
    gamma: torch.Tensor,
    w_prev: torch.Tensor,
    memory: torch.Tensor,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``attnc.ntm.address`` on tensors, the whole addressing pipeline in one
    C call (torch op ``attnc::ntm_address``), with its intermediates.

    key (B, H, M), beta, g, gamma (B, H), s (B, H, K), w_prev (B, H, N),
    memory (B, N, M), float32 or float64 -> (w, (w_c, w_g, w_t)), each (B, H, N).

    Example
    -------
    >>> memory = torch.rand(2, 8, 4); ones = torch.ones(2, 1)
    >>> s = torch.tensor([0.0, 1.0, 0.0]).expand(2, 1, 3)
    >>> w_prev = torch.full((2, 1, 8), 0.125)
    >>> w, _ = attnc.torch.ntm_address(memory[:, [5]], 100 * ones, ones, s, 10 * ones, w_prev, memory)
    >>> w.argmax(-1).tolist()
    [[5], [5]]
    """
    w, w_c, w_g, w_t = _address(key, beta, g, s, gamma, w_prev, memory)
    return w, (w_c, w_g, w_t)


def ntm_read(memory: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``attnc.ntm.read`` on tensors (torch op ``attnc::ntm_read``).

    memory (B, N, M), w (B, H, N), float32 or float64 -> r (B, H, M).

    Example
    -------
    >>> attnc.torch.ntm_read(torch.arange(6.0).reshape(1, 3, 2), torch.tensor([[[0.0, 1.0, 0.0]]]))
    tensor([[[2., 3.]]])
    """
    return _read(memory, w)


def ntm_write(memory: torch.Tensor, w: torch.Tensor, erase: torch.Tensor, add: torch.Tensor) -> torch.Tensor:
    """``attnc.ntm.write`` on tensors (torch op ``attnc::ntm_write``); memory is not modified.

    memory (B, N, M), w (B, H, N), erase and add (B, H, M), float32 or float64 -> memory' (B, N, M).

    Example
    -------
    >>> w = torch.tensor([[[0.0, 1.0, 0.0]]])
    >>> attnc.torch.ntm_write(torch.ones(1, 3, 2), w, torch.ones(1, 1, 2), torch.tensor([[[5.0, 7.0]]]))
    tensor([[[1., 1.],
             [5., 7.],
             [1., 1.]]])
    """
    return _write(memory, w, erase, add)
