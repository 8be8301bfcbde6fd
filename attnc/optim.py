"""attnc.optim: optimisers that step a module's parameters with the gradient
dicts of ``attnc.vjp``, with torch.optim's update rules.

    opt = attnc.optim.Adam(model, lr=1e-3)
    out, pullback = attnc.vjp(model, x)
    grads = pullback(dout)                 # {"weight": ..., "input": ..., ...}
    attnc.optim.clip_grad_norm_(grads, 1.0, model)
    opt.step(grads)                        # parameters updated in place

Gradients of names that are not parameters (the inputs) are ignored;
parameters without a gradient in the dict are left alone. The update of
each parameter is a few NumPy operations in place (memory-bound work that
BLAS-free C would not speed up).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LambdaLR", "clip_grad_norm_", "clip_grad_value_", "transformer_lr"]


def _params(params) -> dict:
    """The live parameter arrays, by name: a Module or a dict of arrays."""
    if hasattr(params, "named_parameters"):
        return dict(params.named_parameters())
    if isinstance(params, dict):
        return dict(params)
    raise TypeError("params must be an attnc.nn.Module or a dict of name -> array")


class Optimizer:
    """Base: keeps the parameters' owner, the learning rate and per-name state."""

    def __init__(self, params, lr):
        if not lr >= 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        self._owner = params
        _params(params)  # check the kind now
        self.lr = float(lr)
        self.base_lr = float(lr)
        self.state: dict[str, dict] = {}
        self.steps = 0

    def step(self, grads: dict) -> None:
        """Update every parameter that has a gradient in grads, in place."""
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
    """``torch.optim.SGD(params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False)``."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
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
    """``torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)``
    (weight decay added to the gradient, L2)."""

    decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr)
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        self.betas, self.eps, self.weight_decay = (float(betas[0]), float(betas[1])), float(eps), float(weight_decay)

    def _update(self, name, p, g, state):
        b1, b2 = self.betas
        if self.weight_decay:
            if self.decoupled:
                p *= 1 - self.lr * self.weight_decay
            else:
                g = g + self.weight_decay * p
        if not state:
            state.update(step=0, m=np.zeros_like(p), v=np.zeros_like(p))
        state["step"] += 1
        m, v, t = state["m"], state["v"], state["step"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        denom = np.sqrt(v) / math.sqrt(1 - b2**t) + self.eps
        p -= (self.lr / (1 - b1**t)) * m / denom


class AdamW(Adam):
    """``torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)``
    (decoupled weight decay)."""

    decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


class RMSprop(Optimizer):
    """``torch.optim.RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False)``:
    v ← αv + (1 − α)g², step g / (√v + ε) (centered: √(v − ḡ²) with ḡ the
    running mean of g), through a momentum buffer when momentum > 0. The
    optimiser of Graves et al. 2014 and of pytorch-ntm."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
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


def clip_grad_norm_(grads: dict, max_norm: float, params=None) -> float:
    """Scale the gradients in place so that their global L2 norm is at most
    max_norm (as ``torch.nn.utils.clip_grad_norm_``: by max_norm / (norm + 1e-6));
    returns the norm before clipping. With params (a Module or dict), only
    the gradients of parameters count; otherwise every array in grads."""
    names = list(_params(params)) if params is not None else list(grads)
    arrays = [grads[n] for n in names if grads.get(n) is not None]
    total = math.sqrt(sum(float(np.vdot(g, g)) for g in arrays))
    coef = max_norm / (total + 1e-6)
    if coef < 1:
        for g in arrays:
            g *= coef
    return total


def clip_grad_value_(grads: dict, clip_value: float, params=None) -> None:
    """Clamp every gradient entry to [−clip_value, clip_value] in place (as
    ``torch.nn.utils.clip_grad_value_``). With params (a Module or dict), only
    the gradients of parameters; otherwise every array in grads."""
    if not clip_value > 0:
        raise ValueError(f"clip_value must be > 0, got {clip_value}")
    names = list(_params(params)) if params is not None else list(grads)
    for n in names:
        if grads.get(n) is not None:
            np.clip(grads[n], -clip_value, clip_value, out=grads[n])


class LambdaLR:
    """``torch.optim.lr_scheduler.LambdaLR``: lr = base_lr * lr_lambda(epoch);
    call ``step()`` after each optimiser step."""

    def __init__(self, optimizer: Optimizer, lr_lambda):
        self.optimizer, self.lr_lambda, self.last_epoch = optimizer, lr_lambda, 0
        optimizer.lr = optimizer.base_lr * lr_lambda(0)

    def step(self) -> None:
        self.last_epoch += 1
        self.optimizer.lr = self.optimizer.base_lr * self.lr_lambda(self.last_epoch)

    def get_last_lr(self) -> list:
        return [self.optimizer.lr]


def transformer_lr(d_model: int, warmup_steps: int = 4000):
    """The learning rate of Vaswani et al. 2017 as a LambdaLR factor (use base lr 1):
    d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), counting steps from 1."""

    def factor(epoch: int) -> float:
        step = epoch + 1
        return d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)

    return factor
