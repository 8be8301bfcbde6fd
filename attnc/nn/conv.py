"""attnc.nn.conv1d / conv2d and the modules Conv1d, Conv2d, CausalConv1d (in C:
csrc/ops/conv).

A convolution here is torch's: a cross-correlation of (B, Cin, H, W) with a
weight (Cout, Cin / groups, kH, kW), output channel o reading the input
channels of its group. A 1-d convolution is the H = 1 case of the same C
kernel.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, Union

import numpy as np

from .. import _core
from .._args import float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import _LOADING, Module, _settings

Size1 = Union[int, tuple[int]]
Size2 = Union[int, tuple[int, int]]
Padding1 = Union[int, tuple[int], Literal["valid", "same"]]
Padding2 = Union[int, tuple[int, int], Literal["valid", "same"]]


def _pair(value, name, n, low):
    """An int or a tuple of n ints, each >= low, as a tuple of n ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {value!r}")
        items = tuple(value)
    else:
        items = (value,) * n
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be an int or a tuple of {n} ints, got {value!r}")
        if v < low:
            raise ValueError(f"{name} must be >= {low}, got {value!r}")
        out.append(int(v))
    return tuple(out)


def _padding(padding, n, kernel, stride, dilation):
    """torch's padding argument (int, tuple, "same", "valid") as (before, after)
    pairs per spatial dim. "same" pads d (k - 1) in all, the extra one (for an
    even total) after, as torch does; it needs stride 1."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation))
        raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    return tuple((p, p) for p in _pair(padding, "padding", n, 0))


def _out_len(n, pads, k, dilation, stride):
    """Output positions along a dim of n inputs (torch's formula), or None
    when the padded input is shorter than the dilated kernel; an empty input
    has none then (where torch refuses it)."""
    room = n + sum(pads) - dilation * (k - 1) - 1
    if room < 0:
        return None if n else 0
    return room // stride + 1


def _conv_forward(nd, input, weight, bias, stride, padding, dilation, groups, pads=None):
    """The shared forward of conv1d (nd = 1) and conv2d (nd = 2); pads, if
    given, are (before, after) pairs per spatial dim overriding padding."""
    x = float_array(input, "input")
    w = float_array(weight, "weight")
    same_dtype(x.dtype, weight=w)
    groups = int_arg("groups", groups)
    if w.ndim != nd + 2:
        raise ValueError(
            f"weight has shape {shape_str(w.shape)}, expected {nd + 2} dims (out, in, {'k' if nd == 1 else 'kH, kW'})"
        )
    if x.ndim not in (nd + 1, nd + 2):
        raise ValueError(
            f"input has shape {shape_str(x.shape)}, expected (batch, channels, "
            f"{'length' if nd == 1 else 'H, W'}) or the same without batch"
        )
    batched = x.ndim == nd + 2
    xb = x if batched else x[None]
    if w.shape[0] % groups:
        raise ValueError(
            f"weight {shape_str(w.shape)} has {w.shape[0]} output channels, not divisible by groups={groups}"
        )
    if xb.shape[1] != w.shape[1] * groups:
        raise ValueError(
            f"input {shape_str(x.shape)} has {xb.shape[1]} channels but weight "
            f"{shape_str(w.shape)} with groups={groups} expects {w.shape[1] * groups}"
        )
    if min(w.shape[2:], default=1) < 1:
        raise ValueError(f"weight {shape_str(w.shape)} has an empty kernel")
    b = None
    if bias is not None:
        b = np.ascontiguousarray(float_array(bias, "bias"))  # C checks its shape, (out_channels,)
        same_dtype(x.dtype, bias=b)
    stride = _pair(stride, "stride", nd, 1)
    dilation = _pair(dilation, "dilation", nd, 1)
    if pads is None:
        pads = _padding(padding, nd, w.shape[2:], stride, dilation)
    if nd == 1:  # the H = 1 case of the 2-d kernel
        xb, w = xb[:, :, None, :], w[:, :, None, :]
        stride, dilation, pads = (1,) + stride, (1,) + dilation, ((0, 0),) + pads
    sizes = [_out_len(xb.shape[2 + d], pads[d], w.shape[2 + d], dilation[d], stride[d]) for d in range(2)]
    for d in range(2):
        if sizes[d] is None:
            span = dilation[d] * (w.shape[2 + d] - 1) + 1
            raise ValueError(
                f"input {shape_str(x.shape)}, padded, is smaller than the dilated kernel "
                f"(span {span}) of weight {shape_str(np.shape(weight))}"
            )
    xb, w = np.ascontiguousarray(xb), np.ascontiguousarray(w)
    pad4 = pads[0] + pads[1]
    y = np.empty((xb.shape[0], w.shape[0], *sizes), x.dtype)
    _core.conv2d_forward(
        output=y, input=xb, weight=w, bias=b, stride=stride, padding=pad4, dilation=dilation, groups=groups
    )
    out = y[:, :, 0, :] if nd == 1 else y
    saved = (x.shape, np.shape(weight), xb, w, b is not None, stride, pad4, dilation, groups)
    return (out if batched else out[0]), saved


def _conv_backward(saved, cotangents):
    x_shape, w_shape, xb, w, has_bias, stride, pad4, dilation, groups = saved
    (dy,) = cotangents
    shape = (
        xb.shape[0],
        w.shape[0],
        *(_out_len(xb.shape[2 + d], pad4[2 * d : 2 * d + 2], w.shape[2 + d], dilation[d], stride[d]) for d in range(2)),
    )
    dy4 = np.zeros(shape, xb.dtype) if dy is None else np.ascontiguousarray(dy).reshape(shape)
    dx, dw = np.empty(xb.shape, xb.dtype), np.empty(w.shape, w.dtype)
    db = np.empty(w.shape[0], w.dtype) if has_bias else None
    _core.conv2d_backward(
        dinput=dx,
        dweight=dw,
        dbias=db,
        doutput=dy4,
        input=xb,
        weight=w,
        stride=stride,
        padding=pad4,
        dilation=dilation,
        groups=groups,
    )
    grads = {"input": dx.reshape(x_shape), "weight": dw.reshape(w_shape)}
    if has_bias:
        grads["bias"] = db
    return grads


def _forward1(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv_forward(1, input, weight, bias, stride, padding, dilation, groups)


def _forward2(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv_forward(2, input, weight, bias, stride, padding, dilation, groups)


def conv1d(
    input: ArrayLike,
    weight: ArrayLike,
    bias: ArrayLike | None = None,
    stride: Size1 = 1,
    padding: Padding1 = 0,
    dilation: Size1 = 1,
    groups: int = 1,
) -> Array:
    """``torch.nn.functional.conv1d``: a cross-correlation over the last axis.

    Lout = (L + 2 padding - dilation (k - 1) - 1) // stride + 1; 0 for an
    empty input shorter than the kernel, padded (torch refuses it). Cin = 0
    gives the bias. Differentiable by ``attnc.vjp`` (gradients "input",
    "weight", "bias").

    Parameters
    ----------
    input : array (B, Cin, L) or (Cin, L), float32 or float64
    weight : array (Cout, Cin / groups, k), same dtype
    bias : array (Cout,), same dtype, or None
    stride, dilation : int >= 1
    padding : int >= 0 (zeros on both sides), "valid" (0) or "same" (stride 1)
    groups : int >= 1 dividing Cin and Cout: output channels [g Cout / groups,
        (g + 1) Cout / groups) see input channels [g Cin / groups, (g + 1) Cin / groups)

    Returns
    -------
    output : array (B, Cout, Lout), or (Cout, Lout) for an unbatched input; the input's dtype

    Example
    -------
    >>> attnc.nn.conv1d(np.ones((2, 3, 10)), np.ones((4, 3, 3)), padding="same").shape
    (2, 4, 10)
    """
    return _forward1(input, weight, bias, stride, padding, dilation, groups)[0]


def conv2d(
    input: ArrayLike,
    weight: ArrayLike,
    bias: ArrayLike | None = None,
    stride: Size2 = 1,
    padding: Padding2 = 0,
    dilation: Size2 = 1,
    groups: int = 1,
) -> Array:
    """``torch.nn.functional.conv2d``: a 2-d cross-correlation.

    Ho = (H + 2 padding - dilation (kH - 1) - 1) // stride + 1, Wo likewise.
    Differentiable by ``attnc.vjp`` (gradients "input", "weight", "bias").

    Parameters
    ----------
    input : array (B, Cin, H, W) or (Cin, H, W), float32 or float64
    weight : array (Cout, Cin / groups, kH, kW), same dtype
    bias : array (Cout,), same dtype, or None
    stride, dilation : int >= 1 or a pair (along H, along W)
    padding : int or pair >= 0 (zeros on both sides), "valid" (0) or "same" (stride 1)
    groups : int >= 1 dividing Cin and Cout: output channels [g Cout / groups,
        (g + 1) Cout / groups) see input channels [g Cin / groups, (g + 1) Cin / groups)
        (groups = Cin: a depthwise convolution)

    Returns
    -------
    output : array (B, Cout, Ho, Wo), or (Cout, Ho, Wo) for an unbatched input; the input's dtype

    Example
    -------
    >>> attnc.nn.conv2d(np.ones((2, 3, 8, 8)), np.ones((4, 3, 3, 3)), stride=2, padding=1).shape
    (2, 4, 4, 4)
    >>> attnc.nn.conv2d(np.ones((2, 4, 8, 8)), np.ones((8, 1, 3, 3)), groups=4).shape    # depthwise
    (2, 8, 6, 6)
    """
    return _forward2(input, weight, bias, stride, padding, dilation, groups)[0]


register(conv1d, _forward1, _conv_backward)
register(conv2d, _forward2, _conv_backward)


def _init_bound(fan_in):
    """torch's default initialisation, kaiming_uniform_(a=sqrt(5)): U(+-1/sqrt(fan_in)),
    the bias likewise; 0 without inputs (torch leaves such a bias unset)."""
    return 1 / math.sqrt(fan_in) if fan_in else 0.0


class _ConvNd(Module, abstract=True):
    _nd = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Size2,
        stride: Size2 = 1,
        padding: Padding2 = 0,
        dilation: Size2 = 1,
        groups: int = 1,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        nd = self._nd
        self.in_channels = int_arg("in_channels", in_channels, 0)  # 0: the output is the bias
        self.out_channels = int_arg("out_channels", out_channels)
        self.kernel_size = _pair(kernel_size, "kernel_size", nd, 1)
        self.stride = _pair(stride, "stride", nd, 1)
        self.dilation = _pair(dilation, "dilation", nd, 1)
        pads = _padding(padding, nd, self.kernel_size, self.stride, self.dilation)  # checks it
        full = tuple(d * (k - 1) for k, d in zip(self.kernel_size, self.dilation))
        if _LOADING.get() is not None and any(before > f for (before, _), f in zip(pads, full)):
            # torch takes any padding, but a file's would size every output: columns
            # beyond dilation (k - 1) see no input, and no file needs them
            raise ValueError(
                f"padding {padding!r} exceeds dilation * (kernel_size - 1) = {full}, "
                "which attnc.load does not take from a file"
            )
        self.padding = padding if isinstance(padding, str) else _pair(padding, "padding", nd, 0)
        self.groups = int_arg("groups", groups)
        for name, n in (("in_channels", self.in_channels), ("out_channels", self.out_channels)):
            if n % self.groups:
                raise ValueError(f"{name} ({n}) must be divisible by groups ({self.groups})")
        bound = _init_bound(self.in_channels // self.groups * math.prod(self.kernel_size))
        rng = np.random.default_rng(seed)
        uniform = lambda shape: rng.uniform(-bound, bound, shape)  # noqa: E731
        self._init_parameter("weight", (self.out_channels, self.in_channels // self.groups) + self.kernel_size, uniform)
        self._init_parameter("bias", (self.out_channels,), uniform if bias else None)

    def _args(self):
        return self.bias, self.stride, self.padding, self.dilation, self.groups

    def forward(self, input: ArrayLike) -> Array:
        return self._vjp_forward(input)[0]

    def _vjp_forward(self, input):
        return _conv_forward(self._nd, input, self.weight, *self._args())

    _vjp_backward = staticmethod(_conv_backward)

    def extra_repr(self) -> str:
        nd = self._nd
        leading = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        return _settings(
            leading,
            padding=(self.padding, (0,) * nd),
            dilation=(self.dilation, (1,) * nd),
            groups=(self.groups, 1),
            bias=(self.bias is not None, True),
        )


class Conv1d(_ConvNd):
    """``torch.nn.Conv1d``: ``attnc.nn.conv1d`` with its own weight and bias.

    Parameters
    ----------
    in_channels, out_channels : int, Cin (>= 0: with 0 the output is the bias) and Cout
    kernel_size : int, k
    stride, dilation : int >= 1
    padding : int >= 0, "valid" or "same" (stride 1)
    groups : int >= 1 dividing Cin and Cout (see ``attnc.nn.conv1d``)
    bias : bool, whether there is a ``bias``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for torch's default initialisation (uniform in +-1/sqrt(Cin / groups k))

    Forward: input (B, Cin, L) or (Cin, L) -> (B, Cout, Lout) or (Cout, Lout),
    Lout = (L + 2 padding - dilation (k - 1) - 1) // stride + 1.

    ``state_dict()``: ``weight`` (Cout, Cin / groups, k), ``bias`` (Cout,), as torch's.

    Example
    -------
    >>> conv = attnc.nn.Conv1d(3, 8, 5, padding="same", seed=0)
    >>> conv(np.ones((2, 3, 20), np.float32)).shape
    (2, 8, 20)
    >>> {k: v.shape for k, v in conv.state_dict().items()}
    {'weight': (8, 3, 5), 'bias': (8,)}
    """

    _nd = 1


class Conv2d(_ConvNd):
    """``torch.nn.Conv2d``: ``attnc.nn.conv2d`` with its own weight and bias.

    Parameters
    ----------
    in_channels, out_channels : int, Cin (>= 0: with 0 the output is the bias) and Cout
    kernel_size : int or pair (kH, kW)
    stride, dilation : int >= 1 or a pair
    padding : int or pair >= 0, "valid" or "same" (stride 1)
    groups : int >= 1 dividing Cin and Cout (see ``attnc.nn.conv2d``)
    bias : bool, whether there is a ``bias``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for torch's default initialisation (uniform in +-1/sqrt(Cin / groups kH kW))

    Forward: input (B, Cin, H, W) or (Cin, H, W) -> (B, Cout, Ho, Wo) or (Cout, Ho, Wo),
    Ho = (H + 2 padding - dilation (kH - 1) - 1) // stride + 1, Wo likewise.

    ``state_dict()``: ``weight`` (Cout, Cin / groups, kH, kW), ``bias`` (Cout,), as torch's.

    Example
    -------
    >>> conv = attnc.nn.Conv2d(3, 8, 3, padding=1, seed=0)
    >>> conv(np.ones((2, 3, 16, 16), np.float32)).shape
    (2, 8, 16, 16)
    >>> {k: v.shape for k, v in conv.state_dict().items()}
    {'weight': (8, 3, 3, 3), 'bias': (8,)}
    """

    _nd = 2


class CausalConv1d(Module):
    """A dilated causal 1-d convolution (WaveNet, SNAIL): the input is padded on
    the left by (kernel_size - 1) dilation, so output t sees inputs <= t
    only and the output has the input's length.

    Parameters
    ----------
    in_channels, out_channels : int, Cin (>= 0: with 0 the output is the bias) and Cout
    kernel_size : int, k
    dilation : int >= 1
    bias : bool, whether there is a ``bias``
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for torch.nn.Conv1d's initialisation (uniform in +-1/sqrt(Cin k))

    Forward: input (B, Cin, T) or (Cin, T) -> (B, Cout, T) or (Cout, T) (T = 0: empty).

    ``state_dict()``: ``weight`` (Cout, Cin, k) and ``bias`` (Cout,), as
    ``torch.nn.Conv1d``'s, so the module equals ``torch.nn.Conv1d(...,
    padding=0)`` applied to ``F.pad(x, ((kernel_size - 1) dilation, 0))``.

    Example
    -------
    >>> conv = attnc.nn.CausalConv1d(4, 8, kernel_size=2, dilation=4, seed=0)
    >>> conv(np.ones((3, 4, 10), np.float32)).shape
    (3, 8, 10)
    >>> {k: v.shape for k, v in conv.state_dict().items()}
    {'weight': (8, 4, 2), 'bias': (8,)}
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 2,
        dilation: int = 1,
        bias: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        self.in_channels = int_arg("in_channels", in_channels, 0)  # 0: the output is the bias
        self.out_channels = int_arg("out_channels", out_channels)
        self.kernel_size = int_arg("kernel_size", kernel_size)
        self.dilation = int_arg("dilation", dilation)
        bound = _init_bound(self.in_channels * self.kernel_size)
        rng = np.random.default_rng(seed)
        uniform = lambda shape: rng.uniform(-bound, bound, shape)  # noqa: E731
        self._init_parameter("weight", (self.out_channels, self.in_channels, self.kernel_size), uniform)
        self._init_parameter("bias", (self.out_channels,), uniform if bias else None)

    def forward(self, input: ArrayLike) -> Array:
        return self._vjp_forward(input)[0]

    def _vjp_forward(self, input):
        return causal_conv1d_forward(input, self.weight, self.bias, self.dilation)

    _vjp_backward = staticmethod(_conv_backward)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, bias={self.bias is not None}"
        )


def causal_conv1d_forward(input, weight, bias=None, dilation=1):
    """(output, saved) of a causal 1-d convolution, input (B, Cin, T) or
    (Cin, T), weight (Cout, Cin, k): the C kernel's asymmetric padding of
    (k - 1) dilation on the left and none on the right (no copy of the
    input). For composite modules that chain its pullback:
    ``conv_backward(saved, (doutput,))``."""
    dilation = int_arg("dilation", dilation)
    k = np.shape(weight)[-1] if np.ndim(weight) == 3 else 1
    return _conv_forward(1, input, weight, bias, 1, 0, dilation, 1, pads=(((k - 1) * dilation, 0),))


conv_backward = _conv_backward
