"""NumPy float64 references for attnc.nn.conv1d / conv2d: direct loops over
output positions and kernel taps (no im2col, no BLAS), written from the
definition y[b, o, r, c] = bias[o] + sum_{i, p, q} w[o, i, p, q] x[b, i, r sh - pt + p dh, c sw - pl + q dw]."""

import numpy as np


def conv2d(x, w, bias=None, stride=(1, 1), pads=((0, 0), (0, 0)), dilation=(1, 1), groups=1):
    """x (B, Cin, H, W), w (Cout, Cin / groups, kH, kW); pads ((top, bottom), (left, right)).
    With groups, each group's outputs are the convolution of its own input channels."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    if groups > 1:
        xs, ws = np.split(x, groups, axis=1), np.split(w, groups, axis=0)
        y = np.concatenate([conv2d(xg, wg, None, stride, pads, dilation) for xg, wg in zip(xs, ws)], axis=1)
        return y if bias is None else y + np.asarray(bias, np.float64)[None, :, None, None]
    B, Cin, H, W = x.shape
    Cout, _, kh, kw = w.shape
    (pt, pb), (pl, pr) = pads
    sh, sw = stride
    dh, dw = dilation
    Ho = (H + pt + pb - dh * (kh - 1) - 1) // sh + 1
    Wo = (W + pl + pr - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((B, Cout, Ho, Wo))
    for r in range(Ho):
        for c in range(Wo):
            for p in range(kh):
                for q in range(kw):
                    i, j = r * sh - pt + p * dh, c * sw - pl + q * dw
                    if 0 <= i < H and 0 <= j < W:
                        y[:, :, r, c] += x[:, :, i, j] @ w[:, :, p, q].T
    if bias is not None:
        y += np.asarray(bias, np.float64)[None, :, None, None]
    return y


def conv1d(x, w, bias=None, stride=1, pads=(0, 0), dilation=1, groups=1):
    """x (B, Cin, L), w (Cout, Cin / groups, k); pads (left, right)."""
    y = conv2d(
        np.asarray(x)[:, :, None, :],
        np.asarray(w)[:, :, None, :],
        bias,
        (1, stride),
        ((0, 0), tuple(pads)),
        (1, dilation),
        groups,
    )
    return y[:, :, 0, :]


def causal_conv1d(x, w, bias=None, dilation=1):
    """Left-padded by (k - 1) dilation: output t reads inputs t - m dilation, m = 0..k-1."""
    k = np.shape(w)[-1]
    return conv1d(x, w, bias, 1, ((k - 1) * dilation, 0), dilation)
