"""attnc.nn.LSTMN: the long short-term memory-network of Cheng, Dong & Lapata
(2016), an LSTM that reads its own past hidden states by intra-attention.
The whole sequence, forward and backward through time, runs in C
(csrc/models/lstmn/lstmn.c)."""

from __future__ import annotations

import math

import numpy as np

from .. import _core
from .._args import as_array, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from .linear import Linear
from .module import Module

__all__ = ["LSTMN"]


def _mask_lengths(mask, input_shape):
    """lengths (B,) from a (B, T) boolean prefix mask (True = a valid step)."""
    m = as_array(mask, "mask")
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be a boolean array (True = a valid step), got dtype {m.dtype}")
    if len(input_shape) != 3 or m.shape != tuple(input_shape[:2]):
        raise ValueError(
            f"mask has shape {shape_str(m.shape)}, expected (B, T) of the input {shape_str(tuple(input_shape))}"
        )
    lengths = m.sum(axis=1)
    if np.any(m != (np.arange(m.shape[1])[None, :] < lengths[:, None])):
        raise ValueError(
            "mask must be a prefix in every row (True steps, then False steps): "
            "the LSTMN reads its sequence from the start"
        )
    return lengths.astype(np.int64)


class LSTMN(Module):
    r"""Long short-term memory-network (Cheng, Dong & Lapata 2016, eqs. 3–7):
    an LSTM whose single memory cell is replaced by a tape of every earlier
    hidden state h_1..h_{t−1} and cell c_1..c_{t−1}, read by attention.

    Step t (1-based) of a sequence x_1..x_T::

        a_i^t = vᵀ tanh(W_h h_i + W_x x_t + W_h̃ h̃_{t−1})     i < t
        s^t   = softmax(a^t) over i < t
        h̃_t = Σ_i s_i^t h_i ,   c̃_t = Σ_i s_i^t c_i            (adaptive summaries)
        i, f, o = σ(·), ĉ = tanh(·) of  W_ih x_t + W_hh h̃_t + b
        c_t = f ⊙ c̃_t + i ⊙ ĉ_t ,   h_t = o ⊙ tanh(c_t)

    At t = 1 the tape is empty: h̃_1 = c̃_1 = 0 (no learned initial slot), so
    the first step is an LSTM step from a zero state, and its attention row is
    all zero. The paper writes one matrix W over [h̃_t; x_t]; here it is split
    into ``weight_ih`` and ``weight_hh`` with torch's gate order (i, f, g = ĉ,
    o) and a single ``bias``. The attention has no bias (as in the paper).

    Parameters
    ----------
    input_size : int >= 0, I ("in" below)
    hidden_size : int, H
    attention_size : int or None, A, the width of the attention's tanh layer (None: H)
    bias : bool, whether there is the gates' ``bias``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation

    ``state_dict()`` names: ``weight_ih`` (4H, in), ``weight_hh``
    (4H, H) acting on h̃_t, ``bias`` (4H) (absent with ``bias=False``),
    ``attn_v`` (A,) = v, ``attn_h.weight`` (A, H) = W_h, ``attn_x.weight``
    (A, in) = W_x, ``attn_tilde.weight`` (A, H) = W_h̃. Initialised uniform in
    ±1/sqrt(H) (the gates, as torch's LSTM) and ±1/sqrt(fan-in) (attention)
    from ``seed``; A = ``attention_size`` (default H).

    ``forward(input (B, T, in) float32/float64, *, lengths=None, mask=None, return_attention=False)`` →
    output (B, T, H) (the h_t; zero at steps past a row's length), and with
    ``return_attention`` also the intra-attention weights (B, T, T): row t
    holds s^t over the positions before t (zero on and after the diagonal,
    and for padded steps). ``lengths`` (B,) ints in [0, T]: each row's valid
    prefix (padding is never read by the recurrence); or ``mask`` (B, T) bool,
    True on the valid steps, which must be a prefix of each row.
    ``attnc.vjp(lstmn, input, lengths=..., return_attention=...)``: the
    pullback takes the cotangent of the output (that of the attention must be
    None: it is for looking at) and returns "input" and every parameter's
    gradient.

    Example
    -------
    >>> m = attnc.nn.LSTMN(8, 16, seed=0)
    >>> out, attn = m(np.random.rand(2, 5, 8).astype(np.float32), return_attention=True)
    >>> out.shape, attn.shape, attn[0].sum(-1).round(6).tolist()
    ((2, 5, 16), (2, 5, 5), [0.0, 1.0, 1.0, 1.0, 1.0])
    >>> {k: v.shape for k, v in m.state_dict().items()}
    {'weight_ih': (64, 8), 'weight_hh': (64, 16), 'bias': (64,), 'attn_v': (16,), 'attn_h.weight': (16, 16),
     'attn_x.weight': (16, 8), 'attn_tilde.weight': (16, 16)}
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        attention_size: int | None = None,
        bias: bool = True,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        I = int_arg("input_size", input_size, 0)  # 0: the gates from h and the bias alone
        H = int_arg("hidden_size", hidden_size, 1)
        A = H if attention_size is None else int_arg("attention_size", attention_size, 1)
        self.input_size, self.hidden_size, self.attention_size = I, H, A
        rng = np.random.default_rng(seed)
        k = 1 / math.sqrt(H)
        uniform = lambda shape: rng.uniform(-k, k, shape)  # noqa: E731
        self._init_parameter("weight_ih", (4 * H, I), uniform)
        self._init_parameter("weight_hh", (4 * H, H), uniform)
        self._init_parameter("bias", (4 * H,), uniform if bias else None)
        self._init_parameter("attn_v", (A,), lambda shape: rng.uniform(-1 / math.sqrt(A), 1 / math.sqrt(A), shape))
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        self.attn_h = Linear(H, A, bias=False, dtype=dtype, seed=sub())
        self.attn_x = Linear(I, A, bias=False, dtype=dtype, seed=sub())
        self.attn_tilde = Linear(H, A, bias=False, dtype=dtype, seed=sub())

    # attnc_lstmn_params' members and their state_dict names
    _NAMES = {
        "weight_ih": "weight_ih",
        "weight_hh": "weight_hh",
        "bias": "bias",
        "attn_h": "attn_h.weight",
        "attn_x": "attn_x.weight",
        "attn_tilde": "attn_tilde.weight",
        "attn_v": "attn_v",
    }

    def _params(self):
        """The parameters by attnc_lstmn_params' member names (no "bias" without one)."""
        p = dict(self.named_parameters())
        return {k: p[n] for k, n in self._NAMES.items() if n in p}

    # -- arguments ---------------------------------------------------------------------------
    def _prepare(self, input, lengths, mask=None):
        if mask is not None:
            if lengths is not None:
                raise ValueError("give lengths or mask, not both")
            lengths = _mask_lengths(mask, np.shape(input))
        x = float_array(input, "input")
        same_dtype(self.dtype, input=x)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"input has shape {shape_str(x.shape)}, expected (B, T, {self.input_size})")
        B, T, _ = x.shape
        x = np.array(x, order="C", copy=True)  # C never sees the caller's array
        lens = None
        if lengths is not None:
            lens = as_array(lengths, "lengths")
            if lens.dtype.kind not in "iu":
                raise TypeError(f"lengths must be integers, got dtype {lens.dtype}")
            if lens.shape != (B,):
                raise ValueError(f"lengths must have shape ({B},), got {shape_str(lens.shape)}")
            lens = np.array(lens, dtype=np.int64, order="C")  # C checks each is in [0, T]
            x[np.arange(T)[None, :] >= lens[:, None]] = 0  # padding is only ever multiplied by zero
        return x, lens

    # -- the C calls -------------------------------------------------------------------------
    def _run(self, input, lengths, mask, attention):
        x, lens = self._prepare(input, lengths, mask)
        B, T, _ = x.shape
        H, A = self.hidden_size, self.attention_size
        out = np.empty((B, T, H), self.dtype)
        attn = np.empty((B, T, T), self.dtype) if attention else None
        saved = np.empty(_core.lstmn_saved_size(B=B, T=T, H=H, A=A), self.dtype)
        params = self._params()
        _core.lstmn_forward(output=out, attention=attn, saved=saved, input=x, lengths=lens, params=params)
        return out, attn, (saved, x, lens, params)

    def forward(
        self,
        input: ArrayLike,
        *,
        lengths: ArrayLike | None = None,
        mask: ArrayLike | None = None,
        return_attention: bool = False,
    ) -> Array | tuple[Array, Array]:
        out, attn, _ = self._run(input, lengths, mask, return_attention)
        return (out, attn) if return_attention else out

    def _vjp_forward(self, input, *, lengths=None, mask=None, return_attention=False):
        out, attn, state = self._run(input, lengths, mask, return_attention)
        return ((out, attn) if return_attention else out), (state, return_attention)

    def _vjp_backward(self, saved, cotangents):
        state, return_attention = saved
        if return_attention and cotangents[1] is not None:
            raise ValueError("the attention weights are not differentiated: their cotangent must be None")
        return self.backward_from(state, cotangents[0])

    def backward_from(self, state: tuple, doutput: ArrayLike | None) -> dict[str, Array]:
        """Gradients ({"input", parameter names...}) from a forward's state
        and the output's cotangent (B, T, H) (None: zeros). For composite
        models that keep the state of :meth:`_vjp_forward`."""
        saved, x, lens, params = state
        dout = (
            np.zeros(x.shape[:2] + (self.hidden_size,), self.dtype)
            if doutput is None
            else np.ascontiguousarray(doutput, dtype=self.dtype)
        )
        grads = {k: np.empty_like(p) for k, p in params.items()}
        dx = np.empty_like(x)
        _core.lstmn_backward(grads=grads, dinput=dx, doutput=dout, saved=saved, input=x, lengths=lens, params=params)
        named = {self._NAMES[k]: g for k, g in grads.items()}
        named["input"] = dx
        return named

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, attention_size={self.attention_size}, bias={self.bias is not None}"
        )
