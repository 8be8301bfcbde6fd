"""attnc.nn.SelfAttention2d: the self-attention block of SAGAN (Zhang et al.
2018, "Self-Attention Generative Adversarial Networks") over feature maps.

On x (B, C, H, W), N = H W positions x_1..x_N (each a C-vector):

    f(x) = W_f x + b_f,  g(x) = W_g x + b_g,  h(x) = W_h x + b_h     (1x1 convolutions, C -> C/r)
    s_ij = f(x_i)^T g(x_j)
    beta_{j,i} = exp(s_ij) / sum_k exp(s_kj)                        (softmax over i, for each j)
    o_j = v( sum_i beta_{j,i} h(x_i) )                               (v: a 1x1 convolution C/r -> C)
    y_j = gamma o_j + x_j                                            (gamma a scalar, 0 at the start)

beta_{j,i} is "how much position j attends to position i" (the paper's
notation): position j's query is g(x_j), the keys are f(x_i), the values
h(x_i); each row j of the returned attention map (B, N, N) sums to 1 over i.
h has C/r channels as in the paper (W_h is C-bar x C, C-bar = C/8 there);
SAGAN's released code gives h C/2 channels instead: with r = 2 for all three
you get a wider value path, but f, g and h share one width here.

In C: the three projections are one linear (csrc/ops/nn/linear.c) over the N B
rows, the attention is attnc's fused scaled-dot-product kernel with scale 1
(csrc/ops/attention/flash.c), v one more linear; the backward chains their C
pullbacks. Positions are flattened row-major: position index = r W + c.
"""

from __future__ import annotations

import numpy as np

from .._args import child_seeds, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..attention import sdpa as _sdpa
from .conv import Conv2d
from .linear import linear_rows, linear_rows_backward
from .module import Module


class SelfAttention2d(Module):
    """SAGAN's self-attention block (Zhang et al. 2019): y = gamma o + x.

    o is the attention of the positions over each other: queries g(x), keys
    f(x), values h(x) (1x1 convolutions to C/r channels), read back to C
    channels by the 1x1 convolution v.

    Parameters
    ----------
    channels : int, C
    reduction : int, r, divides C
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation

    ``forward(input, return_attention=False)``: input (B, C, H, W), the
    module's dtype -> y (B, C, H, W), and with return_attention the (B, N, N)
    attention map (N = H W; row j = where position j looks; position index
    r W + c). B, H or W may be 0: the results are then empty.

    ``state_dict()``: ``f.weight``, ``g.weight``, ``h.weight``
    (C/r, C, 1, 1) and ``f.bias``, ``g.bias``, ``h.bias`` (C/r,): the key,
    query and value 1x1 convolutions; ``v.weight`` (C, C/r, 1, 1) and
    ``v.bias`` (C,): the output 1x1 convolution; ``gamma`` (1,): the
    residual gate, initialised to 0 (so the block starts as the identity).
    f, g, h and v are ``attnc.nn.Conv2d`` modules with torch's default
    initialisation from ``seed``. ``reduction`` r divides C (C/r >= 1).

    Example
    -------
    >>> sa = attnc.nn.SelfAttention2d(16, reduction=8, seed=0)
    >>> x = np.random.rand(2, 16, 6, 6).astype(np.float32)
    >>> y, attn = sa(x, return_attention=True)
    >>> y.shape, attn.shape, bool(np.array_equal(y, x))  # gamma starts at 0
    ((2, 16, 6, 6), (2, 36, 36), True)
    >>> {k: v.shape for k, v in sa.state_dict().items() if not k.endswith("bias")}
    {'gamma': (1,), 'f.weight': (2, 16, 1, 1), 'g.weight': (2, 16, 1, 1), 'h.weight': (2, 16, 1, 1),
     'v.weight': (16, 2, 1, 1)}
    """

    def __init__(
        self, channels: int, reduction: int = 8, *, dtype: DTypeLike = np.float32, seed: int | None = None
    ) -> None:
        super().__init__(dtype)
        self.channels = int_arg("channels", channels)
        self.reduction = int_arg("reduction", reduction)
        if channels % reduction:
            raise ValueError(f"reduction ({reduction}) must divide channels ({channels})")
        self.inner = channels // reduction
        seeds = child_seeds(seed, 4)
        self._init_parameter("gamma", (1,), np.zeros)
        self.f = Conv2d(channels, self.inner, 1, dtype=dtype, seed=seeds[0])
        self.g = Conv2d(channels, self.inner, 1, dtype=dtype, seed=seeds[1])
        self.h = Conv2d(channels, self.inner, 1, dtype=dtype, seed=seeds[2])
        self.v = Conv2d(self.inner, channels, 1, dtype=dtype, seed=seeds[3])

    def extra_repr(self) -> str:
        return f"channels={self.channels}, reduction={self.reduction}"

    def forward(self, input: ArrayLike, return_attention: bool = False) -> Array | tuple[Array, Array]:
        return self._vjp_forward(input, return_attention)[0]

    def _vjp_forward(self, input, return_attention: bool = False):
        x = float_array(input, "input")
        same_dtype(self.dtype, input=x)
        if x.ndim != 4 or x.shape[1] != self.channels:
            raise ValueError(f"input has shape {shape_str(x.shape)}, expected (batch, {self.channels}, H, W)")
        B, C, H, W = x.shape
        N, c = H * W, self.inner
        # rows (B N, C): position-major, so 1x1 convolutions are linears over rows
        rows = np.ascontiguousarray(x.reshape(B, C, N).transpose(0, 2, 1)).reshape(B * N, C)
        w_qkv = np.concatenate([self.g.weight.reshape(c, C), self.f.weight.reshape(c, C), self.h.weight.reshape(c, C)])
        b_qkv = np.concatenate([self.g.bias, self.f.bias, self.h.bias])
        qkv = linear_rows(rows, w_qkv, b_qkv).reshape(B, N, 3 * c)
        q, k, val = qkv[..., :c], qkv[..., c : 2 * c], qkv[..., 2 * c :]  # g (queries), f (keys), h (values)
        attn_out, sdpa_saved = _sdpa._forward(q, k, val, scale=1.0, return_weights=return_attention)
        read, weights = attn_out if return_attention else (attn_out, None)
        read2 = read.reshape(B * N, c)
        wv = self.v.weight.reshape(C, c)
        o_rows = linear_rows(read2, wv, self.v.bias)  # (B N, C)
        o = o_rows.reshape(B, N, C).transpose(0, 2, 1).reshape(B, C, H, W)
        y = self.gamma[0] * o + x
        saved = (x.shape, rows, w_qkv, sdpa_saved, read2, wv, o, self.gamma[0], return_attention)
        return ((y, weights) if return_attention else y), saved

    @staticmethod
    def _vjp_backward(saved, cotangents):
        shape, rows, w_qkv, sdpa_saved, read2, wv, o, gamma, with_weights = saved
        B, C, H, W = shape
        N, c = H * W, read2.shape[1]
        dy = cotangents[0]
        dweights = cotangents[1] if with_weights else None
        if dy is None:
            dy = np.zeros(shape, o.dtype)
        dgamma = np.array([np.sum(dy * o, dtype=np.float64)], o.dtype)
        do_rows = np.ascontiguousarray((gamma * dy).reshape(B, C, N).transpose(0, 2, 1)).reshape(B * N, C)
        dread, dwv, dbv = linear_rows_backward(do_rows, read2, wv, True)
        g = _sdpa._backward(sdpa_saved, (dread.reshape(B, N, c), dweights))
        dqkv = np.concatenate([g["query"], g["key"], g["value"]], axis=-1).reshape(B * N, 3 * c)
        drows, dw_qkv, db_qkv = linear_rows_backward(dqkv, rows, w_qkv, True)
        dx = dy + drows.reshape(B, N, C).transpose(0, 2, 1).reshape(shape)
        grads = {"input": dx, "gamma": dgamma}
        for i, name in enumerate("gfh"):
            grads[f"{name}.weight"] = dw_qkv[i * c : (i + 1) * c].reshape(c, C, 1, 1)
            grads[f"{name}.bias"] = db_qkv[i * c : (i + 1) * c]
        grads["v.weight"] = dwv.reshape(C, c, 1, 1)
        grads["v.bias"] = dbv
        return grads
