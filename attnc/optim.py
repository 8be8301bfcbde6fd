"""attnc.optim: optimisers that step a module's parameters with the gradient
dicts of ``attnc.vjp``, with torch.optim's update rules.

    opt = attnc.optim.Adam(model, lr=1e-3)
    out, pullback = attnc.vjp(model, x)
    grads = pullback(dout)                 # {"weight": ..., "input": ..., ...}
    attnc.optim.clip_grad_norm_(grads, 1.0, model)
    opt.step(grads)                        # parameters updated in place

Gradients of names that are not parameters (the inputs) are ignored;
parameters without a gradient in the dict are left alone. Adam and AdamW
update each parameter in one pass in C (csrc/ops/optim/adam.c); SGD and RMSprop
are a few NumPy operations in place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Union

import numpy as np

from . import _core
from ._typing import Array
from .nn.module import Module

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LambdaLR", "clip_grad_norm_", "clip_grad_value_", "transformer_lr"]

# What an optimiser steps: a module (its named_parameters()) or a dict of live arrays, by name.
Params = Union[Module, dict[str, Array]]


def _params(params: Params) -> dict[str, Array]:
    """The live parameter arrays, by name: a Module or a dict of arrays."""
    if hasattr(params, "named_parameters"):
        return dict(params.named_parameters())
    if isinstance(params, dict):
        return dict(params)
    raise TypeError("params must be an attnc.nn.Module or a dict of name -> array")


class Optimizer:
    """Base: keeps the parameters' owner, the learning rate and per-name state.

    ``lr`` is the current learning rate (a scheduler sets it), ``base_lr`` the
    one given, ``state`` each parameter's buffers by name (torch's names:
    "step", "exp_avg", "momentum_buffer", ...), ``steps`` the number of
    ``step`` calls so far.

    ``state_dict()`` / ``load_state_dict()`` use torch.optim's layout, so the
    state of the same torch optimiser over the same parameters (in the order
    of ``named_parameters()``) loads into attnc's and back."""

    _hyper: tuple[str, ...] = ()  # torch's param_group keys of the hyperparameters, besides lr
    _flags: dict = {}  # torch's switches attnc implements one value of: that value
    # torch's param_group keys that say how torch computes, not what: any value loads
    _how = ("foreach", "capturable", "differentiable", "fused", "initial_lr", "params")

    def __init__(self, params: Params, lr: float) -> None:
        self._owner = params
        _params(params)  # check the kind now
        self.lr = self.base_lr = _check_lr(lr)
        self.state: dict[str, dict] = {}
        self.steps = 0

    def step(self, grads: dict[str, Array]) -> None:
        """Update every parameter that has a gradient in grads, in place.

        grads maps names to arrays of the parameters' shapes (as
        ``attnc.vjp``'s pullback returns them); other names are ignored."""
        params = _params(self._owner)
        self.steps += 1
        for name, p in params.items():
            g = grads.get(name)
            if g is None:
                continue
            g = np.asarray(g)
            if g.shape != p.shape:
                raise ValueError(f"gradient of {name} has shape {g.shape}, the parameter {p.shape}")
            self._update(name, p, g.astype(p.dtype, copy=False), self.state.setdefault(name, {}))

    def _update(self, name, p, g, state):  # pragma: no cover - every optimiser defines it
        raise NotImplementedError

    @staticmethod
    def _check(hyper: dict) -> dict:
        """The hyperparameters (the keys of _hyper) checked and normalised."""
        return hyper

    def _set(self, hyper: dict) -> None:
        """Set the hyperparameters, checked by _check, as attributes."""
        for k, v in hyper.items():
            setattr(self, k, v)

    def _buffers(self, hyper: dict) -> set:
        """The keys of a parameter's state under these hyperparameters."""
        raise NotImplementedError  # pragma: no cover - every optimiser defines it

    def state_dict(self) -> dict:
        """The optimiser's state in torch.optim's layout (copies, nothing shared).

        Returns ``{"state": {index: {key: array or int}}, "param_groups":
        [{"lr", the hyperparameters, torch's switches, "initial_lr"
        (base_lr), "params": [0, ..., n-1]}], "steps": int}``: index i is the
        i-th parameter of ``named_parameters()`` (or of the dict), keys are
        torch's ("step" an int, the buffers arrays of the parameter's shape
        and dtype); parameters never stepped have no entry. torch ignores
        "steps" (attnc's count of ``step`` calls). To load it into torch,
        turn the arrays into tensors (and "step" into a float tensor).

        Example
        -------
        >>> p = {"w": np.zeros(2)}
        >>> opt = attnc.optim.Adam(p, lr=0.1)
        >>> opt.step({"w": np.ones(2)})
        >>> sd = opt.state_dict()
        >>> sorted(sd["state"][0]), sd["state"][0]["step"], sd["param_groups"][0]["betas"]
        (['exp_avg', 'exp_avg_sq', 'step'], 1, (0.9, 0.999))
        >>> opt2 = attnc.optim.Adam({"w": np.zeros(2)}); opt2.load_state_dict(sd); opt2.lr
        0.1
        """
        names = list(_params(self._owner))
        state = {
            i: {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in self.state[n].items()}
            for i, n in enumerate(names)
            if self.state.get(n)
        }
        group = {
            "lr": self.lr,
            **{k: getattr(self, k) for k in self._hyper},
            **self._flags,
            "initial_lr": self.base_lr,
            "params": list(range(len(names))),
        }
        return {"state": state, "param_groups": [group], "steps": self.steps}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a ``state_dict()`` of this optimiser or of the same torch.optim optimiser.

        Sets the learning rate, base_lr (the group's "initial_lr" when there
        is one), the hyperparameters and every parameter's state, copied to the
        parameter's dtype (torch tensors are read with ``np.asarray``; nothing
        given is kept). Checked first, nothing changed on error: one param
        group listing as many parameters as the optimiser steps; the state's
        indices among them; each entry's keys those this optimiser keeps under
        the given hyperparameters; arrays of the parameter's shape; torch
        switches attnc does not implement (amsgrad, maximize) off.
        Raises ValueError naming what was wrong.

        Example
        -------
        >>> opt = attnc.optim.SGD({"w": np.zeros(2)}, lr=0.1, momentum=0.9)
        >>> opt.load_state_dict({"state": {0: {"momentum_buffer": np.zeros(3)}},
        ...                      "param_groups": [dict(lr=0.1, momentum=0.9, dampening=0, weight_decay=0,
        ...                                            nesterov=False, params=[0])]})
        Traceback (most recent call last):
        ValueError: state[0]['momentum_buffer'] (parameter w) has shape (3,), the parameter (2,)
        """
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
            raise ValueError("state_dict must be a dict with 'state' and 'param_groups' (an optimiser's state_dict())")
        groups = state_dict["param_groups"]
        if len(groups) != 1:
            raise ValueError(f"state_dict has {len(groups)} param_groups; attnc's optimisers step one group")
        group, params, kind = groups[0], _params(self._owner), type(self).__name__
        names = list(params)
        unknown = set(group) - {"lr", *self._hyper, *self._flags, *self._how}
        missing = {"lr", "params", *self._hyper} - set(group)
        if unknown or missing:
            raise ValueError(f"param_groups[0] of {kind}: unknown keys {sorted(unknown)}, missing {sorted(missing)}")
        for k, v in self._flags.items():
            if k in group and group[k] != v:
                raise ValueError(f"param_groups[0][{k!r}] is {group[k]!r}: attnc's {kind} implements only {v!r}")
        ids = list(group["params"])
        if len(ids) != len(names):
            raise ValueError(f"param_groups[0]['params'] lists {len(ids)} parameters, the optimiser has {len(names)}")
        lr, base_lr = _check_lr(group["lr"]), _check_lr(group.get("initial_lr", group["lr"]))
        hyper = self._check({k: group[k] for k in self._hyper})
        state = {}
        for key, saved in state_dict["state"].items():
            if key not in ids:
                raise ValueError(f"state has an entry {key!r}, not among param_groups[0]['params']")
            name = names[ids.index(key)]
            state[name] = _load_entry(saved, params[name], self._buffers(hyper), f"state[{key!r}]", name)
        steps = state_dict.get("steps", max([s.get("step", 0) for s in state.values()], default=0))
        self.lr, self.base_lr, self.state, self.steps = lr, base_lr, state, _count(steps, "steps")
        self._set(hyper)


def _check_lr(lr) -> float:
    if not float(lr) >= 0:
        raise ValueError(f"lr must be >= 0, got {lr}")
    return float(lr)


def _count(value, what: str) -> int:
    """A saved step count (an int, or torch's float tensor) as an int >= 0."""
    f = float(np.asarray(value))
    if not (f >= 0 and f == int(f)):
        raise ValueError(f"{what} must be a whole number >= 0, got {value!r}")
    return int(f)


def _load_entry(saved, p, buffers: set, where: str, name: str) -> dict:
    """A parameter's saved state, checked against p and copied to p's dtype (C order: the kernels read it so)."""
    if not isinstance(saved, dict) or set(saved) != buffers:
        keys = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
        raise ValueError(f"{where} (parameter {name}) has keys {keys}, expected {sorted(buffers)}")
    entry: dict[str, Any] = {}
    for k, v in saved.items():
        if k == "step":
            entry[k] = _count(v, f"{where}['step']")
            continue
        a = np.asarray(v)
        if a.shape != p.shape:
            raise ValueError(f"{where}[{k!r}] (parameter {name}) has shape {a.shape}, the parameter {p.shape}")
        entry[k] = np.array(a, dtype=p.dtype, order="C", copy=True)
    return entry


class SGD(Optimizer):
    """Stochastic gradient descent, as ``torch.optim.SGD`` (with momentum, dampening, Nesterov).

    g <- g + weight_decay p; with momentum b <- momentum b + (1 - dampening) g
    (b = g at the first step) and g <- b (Nesterov: g <- g + momentum b);
    then p <- p - lr g.

    ``step(grads)`` updates every parameter with a gradient in ``grads`` (a
    dict name -> array of the parameter's shape, e.g. from ``attnc.vjp``'s
    pullback); other names (the inputs') are ignored.

    Parameters
    ----------
    params : attnc.nn.Module or dict of name -> array (float32 or float64)
        The parameters to update in place: a module's ``named_parameters()``
        (the names of its ``state_dict()``), or the arrays of a dict.
    lr : float >= 0, default 1e-3
    momentum, dampening, weight_decay : float, default 0
    nesterov : bool, default False (needs momentum > 0 and dampening 0)

    Example
    -------
    >>> p = {"w": np.zeros(3)}
    >>> attnc.optim.SGD(p, lr=0.5).step({"w": np.array([1.0, -2.0, 0.0])})
    >>> p["w"]
    array([-0.5,  1. ,  0. ])
    >>> lin = attnc.nn.Linear(3, 2, seed=0); bias = lin.bias.copy()
    >>> out, pullback = attnc.vjp(lin, np.random.rand(4, 3).astype(np.float32))
    >>> attnc.optim.SGD(lin, lr=0.1).step(pullback(np.ones_like(out)))   # d(sum out)/d bias = 4
    >>> np.allclose(lin.bias, bias - 0.4)
    True
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(params, lr)
        self._set(
            self._check(dict(momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov))
        )

    _hyper = ("momentum", "dampening", "weight_decay", "nesterov")
    _flags = {"maximize": False}

    @staticmethod
    def _check(hyper):
        if hyper["nesterov"] and (hyper["momentum"] <= 0 or hyper["dampening"] != 0):
            raise ValueError("nesterov needs momentum > 0 and dampening 0")
        return {k: bool(v) if k == "nesterov" else float(v) for k, v in hyper.items()}

    def _buffers(self, hyper):
        return {"momentum_buffer"} if hyper["momentum"] else set()

    def _update(self, name, p, g, state):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = g.copy()
            else:
                buf *= self.momentum
                buf += (1 - self.dampening) * g
            g = g + self.momentum * buf if self.nesterov else buf
        p -= self.lr * g


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (weight decay added to the gradient, L2).

    m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2,
    p <- p - lr m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps).

    ``step(grads)`` updates every parameter with a gradient in ``grads`` (a
    dict name -> array of the parameter's shape, e.g. from ``attnc.vjp``'s
    pullback); other names (the inputs') are ignored.

    Parameters
    ----------
    params : attnc.nn.Module or dict of name -> array (float32 or float64)
        The parameters to update in place: a module's ``named_parameters()``
        (the names of its ``state_dict()``), or the arrays of a dict.
    lr : float >= 0, default 1e-3
    betas : (float, float) in [0, 1), default (0.9, 0.999)
    eps : float, default 1e-8
    weight_decay : float, default 0 (L2: g <- g + weight_decay p)

    Example
    -------
    >>> p = {"w": np.zeros(3, np.float32)}
    >>> opt = attnc.optim.Adam(p, lr=0.1)
    >>> opt.step({"w": np.array([1.0, -2.0, 0.0], np.float32)})   # the first step moves by lr * sign(g)
    >>> p["w"].round(4), p["w"].dtype
    (array([-0.1,  0.1,  0. ], dtype=float32), dtype('float32'))
    """

    decoupled = False

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr)
        self._set(self._check(dict(betas=betas, eps=eps, weight_decay=weight_decay)))

    _hyper = ("betas", "eps", "weight_decay")
    _flags = {"amsgrad": False, "maximize": False, "decoupled_weight_decay": False}

    @staticmethod
    def _check(hyper):
        betas = tuple(float(b) for b in hyper["betas"])
        if not (len(betas) == 2 and 0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must be two numbers in [0, 1), got {hyper['betas']}")
        return dict(betas=betas, eps=float(hyper["eps"]), weight_decay=float(hyper["weight_decay"]))

    def _buffers(self, hyper):
        return {"step", "exp_avg", "exp_avg_sq"}

    def _update(self, name, p, g, state):
        if not state:  # C-ordered, as the kernel reads them (zeros_like would copy a view's order)
            state.update(step=0, exp_avg=np.zeros(p.shape, p.dtype), exp_avg_sq=np.zeros(p.shape, p.dtype))
        state["step"] += 1
        # one pass in C (csrc/ops/optim/adam.c): torch.optim.Adam(W)'s update,
        # each operation rounded to p's dtype; a strided parameter (a view in
        # a dict of arrays) through a contiguous copy
        work = p if p.flags.c_contiguous else np.ascontiguousarray(p)
        _core.adam_step(
            param=work,
            grad=np.ascontiguousarray(g),
            exp_avg=state["exp_avg"],
            exp_avg_sq=state["exp_avg_sq"],
            lr=self.lr,
            beta1=self.betas[0],
            beta2=self.betas[1],
            eps=self.eps,
            weight_decay=self.weight_decay,
            decoupled=self.decoupled,
            step=state["step"],
        )
        if work is not p:
            p[...] = work


class AdamW(Adam):
    """AdamW, as ``torch.optim.AdamW``: Adam with decoupled weight decay.

    p <- p (1 - lr weight_decay) before Adam's step (which then sees the
    gradient without decay).

    ``step(grads)`` updates every parameter with a gradient in ``grads`` (a
    dict name -> array of the parameter's shape, e.g. from ``attnc.vjp``'s
    pullback); other names (the inputs') are ignored.

    Parameters
    ----------
    params : attnc.nn.Module or dict of name -> array (float32 or float64)
        The parameters to update in place: a module's ``named_parameters()``
        (the names of its ``state_dict()``), or the arrays of a dict.
    lr : float >= 0, default 1e-3
    betas : (float, float) in [0, 1), default (0.9, 0.999)
    eps : float, default 1e-8
    weight_decay : float, default 1e-2

    Example
    -------
    >>> p = {"w": np.ones(2)}
    >>> attnc.optim.AdamW(p, lr=0.1, weight_decay=0.5).step({"w": np.zeros(2)})   # only the decay: 1 - 0.05
    >>> p["w"].round(6)
    array([0.95, 0.95])
    """

    decoupled = True
    _flags = {**Adam._flags, "decoupled_weight_decay": True}

    def __init__(
        self,
        params: Params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)


class RMSprop(Optimizer):
    """RMSprop, as ``torch.optim.RMSprop``; the optimiser of Graves et al. 2014 and of pytorch-ntm.

    v ← αv + (1 − α)g², step g / (√v + ε) (centered: √(v − ḡ²) with ḡ the
    running mean of g), through a momentum buffer when momentum > 0.

    ``step(grads)`` updates every parameter with a gradient in ``grads`` (a
    dict name -> array of the parameter's shape, e.g. from ``attnc.vjp``'s
    pullback); other names (the inputs') are ignored.

    Parameters
    ----------
    params : attnc.nn.Module or dict of name -> array (float32 or float64)
        The parameters to update in place: a module's ``named_parameters()``
        (the names of its ``state_dict()``), or the arrays of a dict.
    lr : float >= 0, default 1e-2
    alpha : float in [0, 1], default 0.99, the decay of the running mean of g²
    eps : float >= 0, default 1e-8
    weight_decay : float, default 0 (L2)
    momentum : float >= 0, default 0
    centered : bool, default False

    Example
    -------
    >>> p = {"w": np.zeros(2)}
    >>> attnc.optim.RMSprop(p, lr=0.01, alpha=0.75).step({"w": np.array([3.0, -3.0])})   # v = g² / 4
    >>> p["w"].round(6)
    array([-0.02,  0.02])
    """

    def __init__(
        self,
        params: Params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ) -> None:
        super().__init__(params, lr)
        self._set(
            self._check(dict(alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered))
        )

    _hyper = ("alpha", "eps", "weight_decay", "momentum", "centered")
    _flags = {"maximize": False}

    @staticmethod
    def _check(hyper):
        if not 0 <= hyper["alpha"] <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {hyper['alpha']}")
        if hyper["momentum"] < 0 or hyper["eps"] < 0:
            raise ValueError(f"momentum and eps must be >= 0, got {hyper['momentum']} and {hyper['eps']}")
        return {k: bool(v) if k == "centered" else float(v) for k, v in hyper.items()}

    def _buffers(self, hyper):
        return (
            {"step", "square_avg"}
            | ({"momentum_buffer"} if hyper["momentum"] > 0 else set())
            | ({"grad_avg"} if hyper["centered"] else set())
        )

    def _update(self, name, p, g, state):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if not state:
            state.update({k: 0 if k == "step" else np.zeros(p.shape, p.dtype) for k in self._buffers(vars(self))})
        state["step"] += 1
        a = self.alpha
        v = state["square_avg"]
        v *= a
        v += (1 - a) * g * g
        if self.centered:
            mean = state["grad_avg"]
            mean *= a
            mean += (1 - a) * g
            denom = np.sqrt(v - mean * mean) + self.eps
        else:
            denom = np.sqrt(v) + self.eps
        if self.momentum > 0:
            buf = state["momentum_buffer"]
            buf *= self.momentum
            buf += g / denom
            p -= self.lr * buf
        else:
            p -= self.lr * g / denom


def clip_grad_norm_(grads: dict[str, Array], max_norm: float, params: Params | None = None) -> float:
    """Scale the gradients in place so that their global L2 norm is at most max_norm.

    As ``torch.nn.utils.clip_grad_norm_``: norm = sqrt(sum of every squared
    entry); when norm > max_norm every gradient is multiplied by
    max_norm / (norm + 1e-6).

    Parameters
    ----------
    grads : dict of name -> float array (float32 or float64), modified in place
    max_norm : float
    params : attnc.nn.Module or dict of arrays, optional. Given, only the
        gradients of its parameters count (and are scaled); otherwise every
        array in grads.

    Returns
    -------
    float, the global norm before clipping

    Example
    -------
    >>> grads = {"w": np.array([3.0, 4.0]), "b": np.zeros(1)}
    >>> attnc.optim.clip_grad_norm_(grads, 1.0)
    5.0
    >>> grads["w"].round(6)
    array([0.6, 0.8])
    """
    names = list(_params(params)) if params is not None else list(grads)
    arrays = [grads[n] for n in names if grads.get(n) is not None]
    total = math.sqrt(sum(float(np.vdot(g, g)) for g in arrays))
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in arrays:
            g *= coef
    return total


def clip_grad_value_(grads: dict[str, Array], clip_value: float, params: Params | None = None) -> None:
    """Clamp every gradient entry to [−clip_value, clip_value] in place.

    As ``torch.nn.utils.clip_grad_value_``.

    Parameters
    ----------
    grads : dict of name -> float array (float32 or float64), modified in place
    clip_value : float > 0
    params : attnc.nn.Module or dict of arrays, optional. Given, only the
        gradients of its parameters are clamped; otherwise every array in grads.

    Example
    -------
    >>> grads = {"w": np.array([-3.0, 0.5, 2.0])}
    >>> attnc.optim.clip_grad_value_(grads, 1.0)
    >>> grads["w"]
    array([-1. ,  0.5,  1. ])
    """
    if not clip_value > 0:
        raise ValueError(f"clip_value must be > 0, got {clip_value}")
    names = list(_params(params)) if params is not None else list(grads)
    for n in names:
        if grads.get(n) is not None:
            np.clip(grads[n], -clip_value, clip_value, out=grads[n])


class LambdaLR:
    """A learning-rate schedule, as ``torch.optim.lr_scheduler.LambdaLR``.

    lr = base_lr * lr_lambda(epoch), epoch = 0 at construction (which sets
    it) and one more at each ``step()``; call ``step()`` after each
    optimiser step. ``get_last_lr()`` is ``[optimizer.lr]``.

    Parameters
    ----------
    optimizer : an attnc.optim optimiser (SGD, Adam, AdamW, RMSprop)
    lr_lambda : callable(int) -> float, the factor at each epoch (e.g.
        ``attnc.optim.transformer_lr(d_model)``)

    Example
    -------
    >>> opt = attnc.optim.SGD({"w": np.zeros(2)}, lr=1.0)
    >>> sched = attnc.optim.LambdaLR(opt, lambda epoch: 0.5 ** epoch)
    >>> sched.step(); sched.step()
    >>> sched.get_last_lr()
    [0.25]
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]) -> None:
        self.optimizer, self.lr_lambda, self.last_epoch = optimizer, lr_lambda, 0
        optimizer.lr = optimizer.base_lr * lr_lambda(0)

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.lr = self.optimizer.base_lr * self.lr_lambda(self.last_epoch)

    def get_last_lr(self) -> list[float]:
        return [self.optimizer.lr]

    # torch's LambdaLR.state_dict() keys; lr_lambdas is [None] for functions (neither saves them)
    _torch_keys = {
        "base_lrs",
        "last_epoch",
        "_step_count",
        "_is_initial",
        "_get_lr_called_within_step",
        "_last_lr",
        "lr_lambdas",
        "verbose",
    }

    def state_dict(self) -> dict:
        """The schedule's position in torch's LambdaLR layout (the factor
        function is not saved: the loader brings its own, as in torch).

        Returns ``{"base_lrs": [base_lr], "last_epoch": int, "_step_count",
        "_is_initial", "_get_lr_called_within_step", "_last_lr": [lr],
        "lr_lambdas": [None]}``.

        Example
        -------
        >>> opt = attnc.optim.SGD({"w": np.zeros(2)}, lr=1.0)
        >>> sched = attnc.optim.LambdaLR(opt, lambda epoch: 0.5 ** epoch); sched.step()
        >>> sd = sched.state_dict(); sd["last_epoch"], sd["_last_lr"]
        (1, [0.5])
        >>> opt2 = attnc.optim.SGD({"w": np.zeros(2)}, lr=1.0)
        >>> sched2 = attnc.optim.LambdaLR(opt2, lambda epoch: 0.5 ** epoch); sched2.load_state_dict(sd)
        >>> sched2.step(); sched2.get_last_lr()
        [0.25]
        """
        return {
            "base_lrs": [self.optimizer.base_lr],
            "last_epoch": self.last_epoch,
            "_step_count": self.last_epoch + 1,
            "_is_initial": False,
            "_get_lr_called_within_step": False,
            "_last_lr": [self.optimizer.lr],
            "lr_lambdas": [None],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue from a ``state_dict()`` of this schedule or of torch's LambdaLR.

        Sets ``last_epoch``, the optimiser's base_lr (``base_lrs[0]``) and its
        lr (``_last_lr[0]``, else base_lr * lr_lambda(last_epoch)). Raises
        ValueError for unknown or missing keys, more than one base lr, or a
        negative or fractional last_epoch.

        Example
        -------
        >>> sched = attnc.optim.LambdaLR(attnc.optim.SGD({"w": np.zeros(2)}, lr=1.0), lambda e: 1.0)
        >>> sched.load_state_dict({"last_epoch": 3})
        Traceback (most recent call last):
        ValueError: LambdaLR state_dict: unknown keys [], missing ['base_lrs']
        """
        if not isinstance(state_dict, dict):
            raise ValueError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        unknown, missing = set(state_dict) - self._torch_keys, {"base_lrs", "last_epoch"} - set(state_dict)
        if unknown or missing:
            raise ValueError(f"LambdaLR state_dict: unknown keys {sorted(unknown)}, missing {sorted(missing)}")
        for key in ("base_lrs", "_last_lr"):
            if key in state_dict and len(state_dict[key]) != 1:
                raise ValueError(f"{key} has {len(state_dict[key])} entries; attnc's optimisers step one group")
        epoch, base_lr = _count(state_dict["last_epoch"], "last_epoch"), _check_lr(state_dict["base_lrs"][0])
        lr = _check_lr(state_dict["_last_lr"][0]) if "_last_lr" in state_dict else base_lr * self.lr_lambda(epoch)
        self.last_epoch, self.optimizer.base_lr, self.optimizer.lr = epoch, base_lr, lr


def transformer_lr(d_model: int, warmup_steps: int = 4000) -> Callable[[int], float]:
    """The learning rate of Vaswani et al. 2017 as a LambdaLR factor (use base lr 1).

    factor(epoch) = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5),
    step = epoch + 1: a linear warm-up over warmup_steps, then 1/sqrt(step).

    Parameters
    ----------
    d_model : int, the model width
    warmup_steps : int, default 4000

    Returns
    -------
    callable(int) -> float, for ``attnc.optim.LambdaLR``

    Example
    -------
    >>> factor = attnc.optim.transformer_lr(64, warmup_steps=10)
    >>> peak = max(range(30), key=factor)
    >>> peak, round(factor(peak), 6)
    (9, 0.039528)
    """

    def factor(epoch: int) -> float:
        step = epoch + 1
        return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)

    return factor
