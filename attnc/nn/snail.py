r"""SNAIL's building blocks (Mishra, Rohaninejad, Chen & Abbeel 2017, "A
Simple Neural Attentive Meta-Learner", appendix): the dense block, the
temporal-convolution (TC) block and the causal attention block. Each block
reads a sequence and returns it with new channels concatenated, so later
blocks see everything earlier ones computed.

Layouts: the convolution blocks take and return (B, C, T) (channels first, as
``torch.nn.Conv1d``); the attention block takes and returns (B, T, C) (as
every attention function of attnc). ``attnc.models.SNAIL`` transposes
between them (NumPy).

Every block is a chain of C operations (causal convolutions, the gated
activation, linear maps, the fused causal attention) whose pullbacks are
called in reverse order: ``attnc.vjp(block, x)`` gives the gradient of the
input ("input") and of every parameter (``state_dict()`` names).
"""

from __future__ import annotations

import math

import numpy as np

from .._args import float_array, same_dtype, shape_str, size_arg
from .._typing import Array, ArrayLike, DTypeLike
from ..attention.sdpa import scaled_dot_product_attention
from ..grad import vjp
from .conv import CausalConv1d, causal_conv1d_forward, conv_backward
from .gated import gated_activation
from .linear import Linear, linear
from .module import Module, ModuleList

__all__ = ["AttentionBlock", "DenseBlock", "TCBlock", "tc_depth"]


def _call(fn, *args, **kwargs):
    return fn(*args, **kwargs), None


def _runner(keep):
    """vjp when the pullbacks are wanted, else a plain call."""
    return vjp if keep else _call


def _input(module, x, layout, channels):
    """x checked as a (B, ., .) array of the module's dtype with `channels` on its channel axis."""
    a = float_array(x, "input")
    same_dtype(module.dtype, input=a)
    axis = 1 if layout == "BCT" else 2
    if a.ndim != 3 or a.shape[axis] != channels:
        want = f"(B, {channels}, T)" if layout == "BCT" else f"(B, T, {channels})"
        raise ValueError(f"input has shape {shape_str(a.shape)}, expected {want}")
    return a


def tc_depth(seq_len: int) -> int:
    """The number of dense blocks of a TC block over seq_len steps:
    ⌈log2 seq_len⌉ (at least 1), so the dilations 1, 2, ..., 2^(n−1) reach
    back over the whole sequence (receptive field 2^n ≥ seq_len)."""
    seq_len = size_arg("seq_len", seq_len)
    return max(1, math.ceil(math.log2(seq_len)))


# --------------------------------------------------------------------------- dense block


class DenseBlock(Module):
    r"""SNAIL's dense block: two causal dilated convolutions (kernel 2) and the
    gated activation, concatenated to the input along the channels::

        xf = CausalConv1d(C, F, 2, dilation)(x)        (filter_conv)
        xg = CausalConv1d(C, F, 2, dilation)(x)        (gate_conv)
        y  = concat([x, tanh(xf) ⊙ sigmoid(xg)], channel axis)

    Parameters
    ----------
    in_channels : int >= 0, C
    filters : int, F, the channels added
    dilation : int >= 1, of both convolutions
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (torch.nn.Conv1d's)

    Forward: x (B, C, T), the module's dtype → y (B, C + F, T); y[..., t]
    depends on x[..., ≤ t] only. Both convolutions run as one C call, their
    weights stacked along the output channels, and so do their backwards.

    ``state_dict()``: ``filter_conv.weight`` (F, C, 2), ``filter_conv.bias``
    (F,), ``gate_conv.weight`` (F, C, 2), ``gate_conv.bias`` (F,)
    (``torch.nn.Conv1d``'s layout; two ``attnc.nn.CausalConv1d``).

    Example
    -------
    >>> block = attnc.nn.DenseBlock(4, 8, dilation=2, seed=0)
    >>> x = np.random.rand(2, 4, 10).astype(np.float32)
    >>> y = block(x)
    >>> y.shape, bool(np.array_equal(y[:, :4], x))
    ((2, 12, 10), True)
    >>> {k: v.shape for k, v in block.state_dict().items()}
    {'filter_conv.weight': (8, 4, 2), 'filter_conv.bias': (8,), 'gate_conv.weight': (8, 4, 2), 'gate_conv.bias': (8,)}
    """

    def __init__(
        self,
        in_channels: int,
        filters: int,
        dilation: int = 1,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        self.in_channels = size_arg("in_channels", in_channels, 0)
        self.filters = size_arg("filters", filters)
        self.dilation = size_arg("dilation", dilation)
        rng = np.random.default_rng(seed)
        self.filter_conv = CausalConv1d(
            self.in_channels, self.filters, 2, self.dilation, dtype=dtype, seed=int(rng.integers(2**63))
        )
        self.gate_conv = CausalConv1d(
            self.in_channels, self.filters, 2, self.dilation, dtype=dtype, seed=int(rng.integers(2**63))
        )

    @property
    def out_channels(self) -> int:
        return self.in_channels + self.filters

    def _run(self, x, keep):
        x = _input(self, x, "BCT", self.in_channels)
        F = self.filters
        # both convolutions as one C call: the weights stacked along the output channels
        w = np.concatenate([self.filter_conv.weight, self.gate_conv.weight])
        b = np.concatenate([self.filter_conv.bias, self.gate_conv.bias])
        xfg, conv_saved = causal_conv1d_forward(x, w, b, self.dilation)
        xf, xg = np.ascontiguousarray(xfg[:, :F]), np.ascontiguousarray(xfg[:, F:])
        act, act_pb = _runner(keep)(gated_activation, xf, xg)
        return np.concatenate([x, act], axis=1), ((conv_saved, act_pb) if keep else None)

    def forward(self, input: ArrayLike) -> Array:
        """input (B, C, T) → (B, C + F, T)."""
        return self._run(input, keep=False)[0]

    def _vjp_forward(self, input):
        return self._run(input, keep=True)

    def _vjp_backward(self, state, cotangents):
        (dy,) = cotangents
        if dy is None:
            raise ValueError("the pullback needs the cotangent of the output")
        return self._grads(state, dy)

    def _grads(self, state, dy):
        conv_saved, act_pb = state
        C, F = self.in_channels, self.filters
        ga = act_pb(np.ascontiguousarray(dy[:, C:]))
        gc = conv_backward(conv_saved, (np.concatenate([ga["input"], ga["gate"]], axis=1),))
        grads = {"input": dy[:, :C] + gc["input"]}
        for name, rows in (("filter_conv", slice(0, F)), ("gate_conv", slice(F, None))):
            grads[f"{name}.weight"] = np.ascontiguousarray(gc["weight"][rows])
            grads[f"{name}.bias"] = np.ascontiguousarray(gc["bias"][rows])
        return grads

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, filters={self.filters}, dilation={self.dilation}"


# --------------------------------------------------------------------------- TC block


class TCBlock(Module):
    r"""SNAIL's temporal-convolution block: dense blocks with dilations 1, 2,
    4, ..., 2^(n−1), n = ⌈log2 seq_len⌉ (``tc_depth``), each adding
    ``filters`` channels::

        x (B, C, T) → (B, C + n·F, T)

    The receptive field, 2^n steps, covers sequences of up to seq_len steps
    (longer ones are accepted; their outputs then see only the last 2^n steps
    through this block).

    Parameters
    ----------
    in_channels : int >= 0, C
    seq_len : int, the sequence length the receptive field must cover
    filters : int, F, the channels each dense block adds
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation

    Forward: x (B, C, T), the module's dtype → (B, C + n·F, T), causal.

    ``state_dict()``: for each block i (dilation 2^i, C + i·F channels in),
    ``blocks.{i}.filter_conv.weight`` (F, C + i·F, 2), ``blocks.{i}.filter_conv.bias``
    (F,), and the same for ``gate_conv`` (see DenseBlock).

    Example
    -------
    >>> tc = attnc.nn.TCBlock(4, seq_len=26, filters=8, seed=0)
    >>> len(tc.blocks), tc.out_channels
    (5, 44)
    >>> tc(np.random.rand(2, 4, 26).astype(np.float32)).shape
    (2, 44, 26)
    >>> tc.state_dict()["blocks.4.gate_conv.weight"].shape
    (8, 36, 2)
    """

    def __init__(
        self, in_channels: int, seq_len: int, filters: int, *, dtype: DTypeLike = np.float32, seed: int | None = None
    ) -> None:
        super().__init__(dtype)
        self.in_channels = size_arg("in_channels", in_channels, 0)
        self.seq_len = size_arg("seq_len", seq_len)
        self.filters = size_arg("filters", filters)
        rng = np.random.default_rng(seed)
        blocks = [
            DenseBlock(
                self.in_channels + i * self.filters, self.filters, 2**i, dtype=dtype, seed=int(rng.integers(2**63))
            )
            for i in range(tc_depth(self.seq_len))
        ]
        self.blocks = ModuleList(blocks, dtype)

    @property
    def out_channels(self) -> int:
        return self.in_channels + len(self.blocks) * self.filters

    def _run(self, x, keep):
        x = _input(self, x, "BCT", self.in_channels)
        states = []
        for block in self.blocks:
            x, state = block._run(x, keep)
            states.append(state)
        return x, states

    def forward(self, input: ArrayLike) -> Array:
        """input (B, C, T) → (B, C + n·F, T)."""
        return self._run(input, keep=False)[0]

    def _vjp_forward(self, input):
        return self._run(input, keep=True)

    def _vjp_backward(self, states, cotangents):
        (dy,) = cotangents
        if dy is None:
            raise ValueError("the pullback needs the cotangent of the output")
        return self._grads(states, dy)

    def _grads(self, states, dy):
        grads = {}
        for i in reversed(range(len(self.blocks))):
            g = self.blocks[i]._grads(states[i], dy)
            dy = g.pop("input")
            grads.update({f"blocks.{i}.{k}": v for k, v in g.items()})
        grads["input"] = dy
        return grads

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, seq_len={self.seq_len}, filters={self.filters}"


# --------------------------------------------------------------------------- attention block


class AttentionBlock(Module):
    r"""SNAIL's causal key-value attention block::

        q = x Wq^T + bq,  k = x Wk^T + bk   (key_size)        v = x Wv^T + bv   (value_size)
        A = softmax(q k^T / sqrt(key_size), masked to j ≤ i)    (B, T, T)
        y = concat([x, A v], channel axis)

    Parameters
    ----------
    in_channels : int >= 0, C
    key_size : int, the width of queries and keys
    value_size : int, the width of the values (the channels added)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation (torch.nn.Linear's)

    x (B, T, C), the module's dtype → y (B, T, C + value_size); position t
    attends to positions ≤ t. The three projections run as one C linear call
    (their weights stacked), the attention as one call of the fused causal
    kernel (``attnc.scaled_dot_product_attention(is_causal=True)``).

    ``state_dict()``: ``query.weight`` (key_size, C), ``query.bias``
    (key_size,), ``key.weight`` (key_size, C), ``key.bias`` (key_size,),
    ``value.weight`` (value_size, C), ``value.bias`` (value_size,) (each a ``Linear``).

    ``forward(input, return_attention=False)`` → y, or (y, A (B, T, T)) with
    ``return_attention=True``. ``attnc.vjp(block, x, return_attention=True)``
    takes a cotangent for A too.

    Example
    -------
    >>> att = attnc.nn.AttentionBlock(8, key_size=4, value_size=6, seed=0)
    >>> y, A = att(np.random.rand(2, 5, 8).astype(np.float32), return_attention=True)
    >>> y.shape, A.shape, bool(np.allclose(np.triu(A[0], 1), 0))
    ((2, 5, 14), (2, 5, 5), True)
    """

    def __init__(
        self,
        in_channels: int,
        key_size: int,
        value_size: int,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        self.in_channels = size_arg("in_channels", in_channels, 0)
        self.key_size = size_arg("key_size", key_size)
        self.value_size = size_arg("value_size", value_size)
        rng = np.random.default_rng(seed)
        C, K, V = self.in_channels, self.key_size, self.value_size
        self.query = Linear(C, K, dtype=dtype, seed=int(rng.integers(2**63)))
        self.key = Linear(C, K, dtype=dtype, seed=int(rng.integers(2**63)))
        self.value = Linear(C, V, dtype=dtype, seed=int(rng.integers(2**63)))

    @property
    def out_channels(self) -> int:
        return self.in_channels + self.value_size

    def _run(self, x, return_attention, keep):
        x = _input(self, x, "BTC", self.in_channels)
        K = self.key_size
        run = _runner(keep)
        w = np.concatenate([self.query.weight, self.key.weight, self.value.weight])
        b = np.concatenate([self.query.bias, self.key.bias, self.value.bias])
        qkv, lin_pb = run(linear, x, w, b)
        q, k, v = qkv[..., :K], qkv[..., K : 2 * K], qkv[..., 2 * K :]
        out, att_pb = run(
            scaled_dot_product_attention,
            q,
            k,
            v,
            is_causal=True,
            scale=1.0 / math.sqrt(K),
            return_weights=bool(return_attention),
        )
        read, weights = out if return_attention else (out, None)
        y = np.concatenate([x, read], axis=-1)
        outputs = (y, weights) if return_attention else y
        return outputs, (lin_pb, att_pb, bool(return_attention), y.shape)

    def forward(self, input: ArrayLike, return_attention: bool = False) -> Array | tuple[Array, Array]:
        """input (B, T, C) → (B, T, C + value_size) [, attention (B, T, T)]."""
        return self._run(input, return_attention, keep=False)[0]

    def _vjp_forward(self, input, return_attention=False):
        return self._run(input, return_attention, keep=True)

    def _vjp_backward(self, state, cotangents):
        dy = cotangents[0]
        dweights = cotangents[1] if len(cotangents) > 1 else None
        if dy is None:  # only the attention's cotangent
            dy = np.zeros(state[3], self.dtype)
        return self._grads(state, dy, dweights)

    def _grads(self, state, dy, dweights=None):
        lin_pb, att_pb, with_weights, _ = state
        C, K = self.in_channels, self.key_size
        dread = np.ascontiguousarray(dy[..., C:])
        g = att_pb(dread, dweights) if with_weights else att_pb(dread)
        gl = lin_pb(np.concatenate([g["query"], g["key"], g["value"]], axis=-1))
        grads = {"input": dy[..., :C] + gl["input"]}
        for name, rows in (("query", slice(0, K)), ("key", slice(K, 2 * K)), ("value", slice(2 * K, None))):
            grads[f"{name}.weight"] = np.ascontiguousarray(gl["weight"][rows])
            grads[f"{name}.bias"] = np.ascontiguousarray(gl["bias"][rows])
        return grads

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, key_size={self.key_size}, value_size={self.value_size}"
