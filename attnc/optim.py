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
from typing import Union

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
    one given, ``state`` each parameter's buffers by name, ``steps`` the
    number of ``step`` calls so far."""

    def __init__(self, params: Params, lr: float) -> None:
        if not lr >= 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        self._owner = params
        _params(params)  # check the kind now
        self.lr = float(lr)
        self.base_lr = float(lr)
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

    def __init__(self, params: Params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params, lr)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("nesterov needs momentum > 0 and dampening 0")
        self.momentum, self.dampening, self.weight_decay, self.nesterov = momentum, dampening, weight_decay, nesterov

    def _update(self, name, p, g, state):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = state.get("momentum")
            if buf is None:
                buf = state["momentum"] = g.copy()
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

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr)
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        self.betas, self.eps, self.weight_decay = (float(betas[0]), float(betas[1])), float(eps), float(weight_decay)

    def _update(self, name, p, g, state):
        if not state:   # C-ordered, as the kernel reads them (zeros_like would copy a view's order)
            state.update(step=0, m=np.zeros(p.shape, p.dtype), v=np.zeros(p.shape, p.dtype))
        state["step"] += 1
        # one pass in C (csrc/ops/optim/adam.c): torch.optim.Adam(W)'s update,
        # each operation rounded to p's dtype; a strided parameter (a view in
        # a dict of arrays) through a contiguous copy
        work = p if p.flags.c_contiguous else np.ascontiguousarray(p)
        _core.adam_step(param=work, grad=np.ascontiguousarray(g), exp_avg=state["m"], exp_avg_sq=state["v"],
                        lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], eps=self.eps,
                        weight_decay=self.weight_decay, decoupled=self.decoupled, step=state["step"])
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

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2) -> None:
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

    def __init__(self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False) -> None:
        super().__init__(params, lr)
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if momentum < 0 or eps < 0:
            raise ValueError(f"momentum and eps must be >= 0, got {momentum} and {eps}")
        self.alpha, self.eps, self.weight_decay = float(alpha), float(eps), float(weight_decay)
        self.momentum, self.centered = float(momentum), bool(centered)

    def _update(self, name, p, g, state):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if not state:
            state.update(v=np.zeros_like(p), mean=np.zeros_like(p), buf=np.zeros_like(p))
        a = self.alpha
        v = state["v"]
        v *= a
        v += (1 - a) * g * g
        if self.centered:
            mean = state["mean"]
            mean *= a
            mean += (1 - a) * g
            denom = np.sqrt(v - mean * mean) + self.eps
        else:
            denom = np.sqrt(v) + self.eps
        if self.momentum > 0:
            buf = state["buf"]
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
