"""attnc.models.NTM: the Neural Turing Machine (Graves, Wayne & Danihelka
2014) with Collier & Beel's (2018) clipping and memory initialisation. The
whole sequence, forward and backward through time, runs in C
(csrc/models/ntm/model.c), built from the addressing operations of ``attnc.ntm``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal, NamedTuple

import numpy as np

from .. import _core, nn
from .._args import as_array, float_array, same_dtype, shape_str, size_arg
from .._typing import Array, ArrayLike, DTypeLike

__all__ = ["NTM", "NTMTrace"]

_CONTROLLERS = ("lstm", "feedforward")
_MEMORY_INITS = ("constant", "learned", "random")
CONSTANT_MEMORY = 1e-6


def masked_bce(logits: Array, batch: Any) -> tuple[float, Array]:
    """(the mean binary cross-entropy with logits over every channel of the
    scored steps, its gradient with respect to the logits in their dtype):
    the loss of a batch with ``targets`` (B, T, O) and ``mask`` (B, T) bool
    for logits (B, T, O) (NTM.loss_and_grad's, and its baselines')."""
    B, T, O = logits.shape
    targets = as_array(batch.targets, "targets").astype(np.float64, copy=False)
    mask = as_array(batch.mask, "mask")
    if targets.shape != (B, T, O):
        raise ValueError(f"targets has shape {shape_str(targets.shape)}, expected {shape_str((B, T, O))}")
    if mask.shape != (B, T) or mask.dtype != bool:
        raise ValueError(
            f"mask must be a bool array of shape {shape_str((B, T))}, got {mask.dtype} {shape_str(mask.shape)}"
        )
    y = logits.astype(np.float64)
    m = mask[:, :, None]
    count = max(int(mask.sum()) * O, 1)
    # BCE with logits, stable: max(y, 0) − y t + log(1 + e^{−|y|})
    loss = float((m * (np.maximum(y, 0) - y * targets + np.log1p(np.exp(-np.abs(y))))).sum()) / count
    return loss, (m * (1.0 / (1.0 + np.exp(-y)) - targets) / count).astype(logits.dtype)


class NTMTrace(NamedTuple):
    """What an NTM did at every step of a forward (``return_trace=True``): a named tuple.

    Fields, each in the model's dtype (float32 or float64):

    read_weights : array (B, T, R, N), each read head's weighting w_t over the N slots
    write_weights : array (B, T, W, N), each write head's weighting w_t
    memory : array (B, T, N, M), the memory after step t's write

    Example
    -------
    >>> m = attnc.models.NTM(3, 2, controller_size=8, memory_slots=6, memory_width=4, seed=0)
    >>> logits, trace = m(np.random.rand(2, 5, 3).astype(np.float32), return_trace=True)
    >>> type(trace).__name__, trace._fields
    ('NTMTrace', ('read_weights', 'write_weights', 'memory'))
    >>> trace.read_weights.shape, trace.write_weights.shape, trace.memory.shape
    ((2, 5, 1, 6), (2, 5, 1, 6), (2, 5, 6, 4))
    >>> trace.read_weights.sum(-1).round(5).min().item()
    1.0
    """

    read_weights: Array
    write_weights: Array
    memory: Array


def _softmax_rows(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class NTM(nn.Module):
    r"""A Neural Turing Machine: a controller (LSTM or feedforward) that reads
    from and writes to an N × M memory through R read heads and W write heads.

    Equations (B rows, T steps; h_0 = c_0 = 0)::

        z_t = [x_t ; r_{t−1}]                                   (I + R·M)
        LSTM:        h_t, c_t = LSTMCell(z_t, (h_{t−1}, c_{t−1}))   (torch's gates i, f, g, o)
        feedforward: h_t = tanh(W z_t + b)
        p_t = clamp(W_head h_t + b_head, −clip, clip)          (Collier & Beel 2018: clip = 20)
        per head, from its chunk of p_t: key k (as is), β = softplus, g = σ, s = softmax (K shifts),
            γ = 1 + softplus; write heads also erase e = σ (M), add a = tanh (M)
        w_t = attnc.ntm.address(k, β, g, s, γ, w_{t−1}, M_{t−1})  (content, interpolation, shift, sharpening)
        r_t = Σ_i w_t[i] M_{t−1}[i]                             (read heads; the memory before the write)
        M_t = M_{t−1} ∘ Π_write (1 − w eᵀ) + Σ_write w aᵀ
        y_t = W_out [h_t ; r_t] + b_out                         (logits; the prediction is σ(y_t))

    The initial state is learned: r_0 = ``read_init``, w_0 = softmax(``weight_init``)
    per head; M_0 is 1e-6 everywhere (``memory_init="constant"``, Collier &
    Beel's recommendation), the parameter ``memory_init`` (``"learned"``), or
    a fixed random tensor drawn from the seed (``"random"``: in state_dict()
    so it saves and loads, but never given a gradient).

    Parameters
    ----------
    input_size : int, I
    output_size : int, O, the logits per step
    controller : "lstm" or "feedforward"
    controller_size : int, C, the controller's width
    memory_slots : int, N
    memory_width : int, M
    read_heads, write_heads : int >= 0, R and W (R + W >= 1)
    shifts : int, K, odd: the shifts −(K−1)/2 … (K−1)/2 of the location addressing
    memory_init : "constant", "learned" or "random", M_0 (see above)
    clip : float > 0, the controller outputs' clamp
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation

    ``state_dict()`` names: ``controller.weight_ih`` (4C, I + R·M),
    ``controller.weight_hh`` (4C, C), ``controller.bias_ih``/``bias_hh`` (4C)
    (torch.nn.LSTMCell's layout), or ``controller.weight`` (C, I + R·M) and
    ``controller.bias`` (C) (feedforward); ``heads.weight`` (P, C) and
    ``heads.bias`` (P), P = R(M + K + 3) + W(3M + K + 3), one chunk per head,
    read heads first, each [key (M), β, g, s (K), γ] and then, for write
    heads, [erase (M), add (M)]; ``output.weight`` (O, C + R·M),
    ``output.bias`` (O); ``read_init`` (R, M); ``weight_init`` (R + W, N);
    ``memory_init`` (N, M) for "learned" and "random".

    ``forward(inputs (B, T, I) float32/float64, *, return_trace=False)`` → logits (B, T, O),
    and with ``return_trace`` an :class:`NTMTrace` of every step's read and
    write weights and memory. ``attnc.vjp(model, inputs)``: the pullback takes
    the cotangent of the logits (the trace's must be None: it is for looking
    at) and returns the gradients of "inputs" and every trained parameter.
    ``loss_and_grad(batch)`` → (the mean binary cross-entropy of the logits
    over the scored steps ``batch.mask``, gradients by state_dict name).

    Example
    -------
    >>> m = attnc.models.NTM(9, 8, memory_slots=16, memory_width=5, controller_size=12, seed=0)
    >>> logits = m(np.random.rand(2, 7, 9).astype(np.float32))
    >>> logits.shape, logits.dtype
    ((2, 7, 8), dtype('float32'))
    >>> batch = attnc.datasets.CopyTask(bits=8, max_len=3).batch(2, seed=0)
    >>> loss, grads = m.loss_and_grad(batch)
    >>> grads["heads.weight"].shape, m.state_dict()["weight_init"].shape
    ((32, 12), (2, 16))
    """

    def __init__(
        self,
        input_size: int,
        output_size: int,
        controller: Literal["lstm", "feedforward"] = "lstm",
        controller_size: int = 100,
        memory_slots: int = 128,
        memory_width: int = 20,
        read_heads: int = 1,
        write_heads: int = 1,
        shifts: int = 3,
        memory_init: Literal["constant", "learned", "random"] = "constant",
        *,
        clip: float = 20.0,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        I, O = size_arg("input_size", input_size), size_arg("output_size", output_size)
        C, N, M = (
            size_arg("controller_size", controller_size),
            size_arg("memory_slots", memory_slots),
            size_arg("memory_width", memory_width),
        )
        R, W = size_arg("read_heads", read_heads, 0), size_arg("write_heads", write_heads, 0)
        K = size_arg("shifts", shifts)
        if R + W < 1:
            raise ValueError("an NTM needs at least one head: read_heads + write_heads >= 1")
        if K % 2 == 0:
            raise ValueError(f"shifts must be odd (shifts −(K−1)/2 … (K−1)/2), got {shifts}")
        if controller not in _CONTROLLERS:
            raise ValueError(f"controller must be one of {_CONTROLLERS}, got {controller!r}")
        if memory_init not in _MEMORY_INITS:
            raise ValueError(f"memory_init must be one of {_MEMORY_INITS}, got {memory_init!r}")
        if isinstance(clip, bool) or not isinstance(clip, numbers.Real) or not (0 < clip < math.inf):
            raise ValueError(f"clip must be a finite number > 0, got {clip!r}")
        self.input_size, self.output_size, self.controller_size = I, O, C
        self.memory_slots, self.memory_width = N, M
        self.read_heads, self.write_heads, self.shifts = R, W, K
        self.controller_kind, self.memory_init_kind, self.clip = controller, memory_init, float(clip)
        rng = np.random.default_rng(seed)
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        Z, P = I + R * M, R * (M + K + 3) + W * (3 * M + K + 3)
        if controller == "lstm":
            self.controller = nn.LSTMCell(Z, C, dtype=dtype, seed=sub())
        else:
            self.controller = nn.Linear(Z, C, dtype=dtype, seed=sub())
        self.heads = nn.Linear(C, P, dtype=dtype, seed=sub())
        self.output = nn.Linear(C + R * M, O, dtype=dtype, seed=sub())
        init = np.random.default_rng(sub())
        # Small random initial reads and weight logits break the symmetry of a
        # constant memory, on which content addressing alone is uniform.
        self._init_parameter("read_init", (R, M), lambda shape: init.normal(0.0, 0.01, shape))
        self._init_parameter("weight_init", (R + W, N), lambda shape: init.uniform(-0.2, 0.2, shape))
        if memory_init != "constant":
            bound = 1.0 / math.sqrt(N + M)
            self._init_parameter("memory_init", (N, M), lambda shape: init.uniform(-bound, bound, shape))

    # -- arguments ---------------------------------------------------------------------------
    def _core_config(self):
        """attnc_ntm_config's members: keyword arguments of the ntm_* calls."""
        return {
            "lstm": self.controller_kind == "lstm",
            "read_heads": self.read_heads,
            "write_heads": self.write_heads,
            "clip": self.clip,
        }

    # attnc_ntm_params' members and their state_dict names, by controller
    # (the feedforward one has no w_hh, b_hh)
    _PARAM_NAMES = {
        "lstm": {
            "w_ih": "controller.weight_ih",
            "w_hh": "controller.weight_hh",
            "b_ih": "controller.bias_ih",
            "b_hh": "controller.bias_hh",
            "head_w": "heads.weight",
            "head_b": "heads.bias",
            "out_w": "output.weight",
            "out_b": "output.bias",
        },
        "feedforward": {
            "w_ih": "controller.weight",
            "b_ih": "controller.bias",
            "head_w": "heads.weight",
            "head_b": "heads.bias",
            "out_w": "output.weight",
            "out_b": "output.bias",
        },
    }

    def _params(self):
        """The parameters by attnc_ntm_params' member names."""
        p = dict(self.named_parameters())
        return {k: p[n] for k, n in self._PARAM_NAMES[self.controller_kind].items()}

    def _inputs(self, inputs):
        x = float_array(inputs, "inputs")
        same_dtype(self.dtype, inputs=x)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"inputs has shape {shape_str(x.shape)}, expected (B, T, {self.input_size})")
        return np.array(x, order="C")  # a copy: C never sees the caller's array

    def _initial_state(self, B):
        """attnc_ntm_state's members memory (B, N, M), reads (B, R, M), weights
        (B, R + W, N): the same for every row."""
        N, M = self.memory_slots, self.memory_width
        if self.memory_init_kind == "constant":
            mem = np.full((N, M), CONSTANT_MEMORY, self.dtype)
        else:
            mem = self.memory_init
        w0 = _softmax_rows(self.weight_init.astype(np.float64)).astype(self.dtype)
        rep = lambda a: np.ascontiguousarray(np.broadcast_to(a, (B,) + a.shape))  # noqa: E731
        return {"memory": rep(mem), "reads": rep(self.read_init), "weights": rep(w0)}

    # -- the C calls -------------------------------------------------------------------------
    def _run(self, inputs, keep, trace):
        x = self._inputs(inputs)
        B, T, _ = x.shape
        N, M, R, W = self.memory_slots, self.memory_width, self.read_heads, self.write_heads
        params, config = self._params(), self._core_config()
        init = self._initial_state(B)
        logits = np.empty((B, T, self.output_size), self.dtype)
        weights = np.empty((B, T, R + W, N), self.dtype) if trace else None
        memories = np.empty((B, T, N, M), self.dtype) if trace else None
        saved = None
        if keep:
            n = _core.ntm_saved_size(
                B=B, T=T, I=self.input_size, C=self.controller_size, N=N, M=M, P=self.heads.weight.shape[0], **config
            )
            saved = np.empty(n, self.dtype)
        _core.ntm_forward(
            logits=logits, weights=weights, memories=memories, saved=saved, inputs=x, init=init, params=params, **config
        )
        tr = NTMTrace(weights[:, :, :R], weights[:, :, R:], memories) if trace else None
        return logits, tr, (saved, x, init, params, config)

    def forward(self, inputs: ArrayLike, *, return_trace: bool = False) -> Array | tuple[Array, NTMTrace]:
        logits, tr, _ = self._run(inputs, keep=False, trace=return_trace)
        return (logits, tr) if return_trace else logits

    def _vjp_forward(self, inputs, *, return_trace=False):
        logits, tr, state = self._run(inputs, keep=True, trace=return_trace)
        return ((logits, tr) if return_trace else logits), (state, return_trace)

    def _vjp_backward(self, saved, cotangents):
        state, return_trace = saved
        if return_trace and cotangents[1] is not None:
            raise ValueError("the trace is not differentiated: its cotangent must be None")
        return self._backward_call(state, cotangents[0])

    def _backward_call(self, state, dlogits):
        saved, x, init, params, config = state
        B, T, _ = x.shape
        if dlogits is None:
            dlogits = np.zeros((B, T, self.output_size), self.dtype)
        grads = {k: np.empty_like(p) for k, p in params.items()}
        dinit = {k: np.empty_like(a) for k, a in init.items()}
        dinputs = np.empty_like(x)
        _core.ntm_backward(
            grads=grads,
            dinit=dinit,
            dinputs=dinputs,
            dlogits=np.ascontiguousarray(dlogits, self.dtype),
            saved=saved,
            inputs=x,
            init=init,
            params=params,
            **config,
        )
        names = self._PARAM_NAMES[self.controller_kind]
        out = {names[k]: g for k, g in grads.items()}
        dmem, dreads, dweights = (a.astype(np.float64).sum(axis=0) for a in dinit.values())
        out["read_init"] = dreads.astype(self.dtype)
        w0 = _softmax_rows(self.weight_init.astype(np.float64))
        out["weight_init"] = (w0 * (dweights - (w0 * dweights).sum(axis=-1, keepdims=True))).astype(self.dtype)
        if self.memory_init_kind == "learned":
            out["memory_init"] = dmem.astype(self.dtype)
        out["inputs"] = dinputs
        return out

    def loss_and_grad(self, batch: Any) -> tuple[float, dict[str, Array]]:
        """(loss, gradients by state_dict name) of one batch with ``inputs``
        (B, T, I), ``targets`` (B, T, O) and ``mask`` (B, T) bool (the scored
        steps), such as ``attnc.datasets.CopyTask().batch(...)``: the mean
        binary cross-entropy with logits over every channel of the scored steps."""
        logits, _, state = self._run(batch.inputs, keep=True, trace=False)
        loss, dlogits = masked_bce(logits, batch)
        grads = self._backward_call(state, dlogits)
        grads.pop("inputs")
        return loss, grads

    loss_and_grads = loss_and_grad

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, output_size={self.output_size}, "
            f"controller={self.controller_kind!r}, controller_size={self.controller_size}, "
            f"memory={self.memory_slots}x{self.memory_width}, read_heads={self.read_heads}, "
            f"write_heads={self.write_heads}, shifts={self.shifts}, memory_init={self.memory_init_kind!r}"
        )
