"""attnc.ntm addressing: content weights, interpolation, shift, sharpening and
the whole pipeline (Graves et al. 2014, section 3.3). Sizes: B batch, H heads,
N memory slots, M slot width, K shift width (odd)."""

from __future__ import annotations

import numpy as np

from .. import _core as core
from ..grad import register
from ._common import arrays, at_least, check_3d, check_shape, grad_or_zeros, odd_shifts


# ------------------------------------------------------------------ content
def _content_forward(key, memory, beta):
    key, memory, beta = arrays(key=key, memory=memory, beta=beta)
    B, H, M = check_3d(key, "key", "(B, H, M)")
    check_shape(memory, "memory", (B, None, M), "(B, N, M)")
    N = memory.shape[1]
    check_shape(beta, "beta", (B, H), "(B, H)")
    at_least(beta, "beta", 0)
    w = np.empty((B, H, N), dtype=key.dtype)
    core.ntm_content_forward(w, key, memory, beta)
    return w, (key, memory, beta, w)


def _content_backward(saved, cotangents):
    key, memory, beta, w = saved
    dw = grad_or_zeros(cotangents[0], w)
    dkey, dmemory, dbeta = np.empty_like(key), np.empty_like(memory), np.empty_like(beta)
    core.ntm_content_backward(dkey, dmemory, dbeta, dw, key, memory, beta, w)
    return {"key": dkey, "memory": dmemory, "beta": dbeta}


def content_weights(key, memory, beta):
    """Content addressing: w_c[b, h, i] = softmax_i(beta[b, h] cos(key[b, h], memory[b, i])).

    key (B, H, M), memory (B, N, M), beta (B, H) >= 0; cos(k, m) =
    k.m / max(|k| |m|, 1e-8); a stable softmax. Returns w_c (B, H, N).
    """
    return _content_forward(key, memory, beta)[0]


register(content_weights, _content_forward, _content_backward)


# ------------------------------------------------------------------ interpolate
def _interp_forward(w_content, w_prev, g):
    w_content, w_prev, g = arrays(w_content=w_content, w_prev=w_prev, g=g)
    B, H, N = check_3d(w_content, "w_content", "(B, H, N)")
    check_shape(w_prev, "w_prev", (B, H, N), "(B, H, N)")
    check_shape(g, "g", (B, H), "(B, H)")
    w = np.empty_like(w_content)
    core.ntm_interpolate_forward(w, w_content, w_prev, g)
    return w, (w_content, w_prev, g)


def _interp_backward(saved, cotangents):
    w_content, w_prev, g = saved
    dw = grad_or_zeros(cotangents[0], w_content)
    dwc, dwp, dg = np.empty_like(w_content), np.empty_like(w_prev), np.empty_like(g)
    core.ntm_interpolate_backward(dwc, dwp, dg, dw, w_content, w_prev, g)
    return {"w_content": dwc, "w_prev": dwp, "g": dg}


def interpolate(w_content, w_prev, g):
    """Interpolation gate: w_g = g w_content + (1 - g) w_prev.

    w_content, w_prev (B, H, N); g (B, H). Returns w_g (B, H, N).
    """
    return _interp_forward(w_content, w_prev, g)[0]


register(interpolate, _interp_forward, _interp_backward)


# ------------------------------------------------------------------ shift
def _shift_forward(w, s):
    w, s = arrays(w=w, s=s)
    B, H, _ = check_3d(w, "w", "(B, H, N)")
    check_shape(s, "s", (B, H, None), "(B, H, K)")
    odd_shifts(s)
    out = np.empty_like(w)
    core.ntm_shift_forward(out, w, s)
    return out, (w, s)


def _shift_backward(saved, cotangents):
    w, s = saved
    dout = grad_or_zeros(cotangents[0], w)
    dw, ds = np.empty_like(w), np.empty_like(s)
    core.ntm_shift_backward(dw, ds, dout, w, s)
    return {"w": dw, "s": ds}


def shift(w, s):
    """Circular convolution with a shift distribution.

    w (B, H, N), s (B, H, K) with K odd:
    out[i] = sum_k s[k] w[(i - (k - (K-1)/2)) mod N]; a one-hot s at index
    (K-1)/2 + 1 moves every weight one slot toward higher addresses.
    """
    return _shift_forward(w, s)[0]


register(shift, _shift_forward, _shift_backward)


# ------------------------------------------------------------------ sharpen
def _sharpen_forward(w, gamma):
    w, gamma = arrays(w=w, gamma=gamma)
    B, H, _ = check_3d(w, "w", "(B, H, N)")
    check_shape(gamma, "gamma", (B, H), "(B, H)")
    at_least(gamma, "gamma", 1)
    at_least(w, "w", 0)
    out = np.empty_like(w)
    core.ntm_sharpen_forward(out, w, gamma)
    return out, (w, gamma, out)


def _sharpen_backward(saved, cotangents):
    w, gamma, out = saved
    dout = grad_or_zeros(cotangents[0], w)
    dw, dgamma = np.empty_like(w), np.empty_like(gamma)
    core.ntm_sharpen_backward(dw, dgamma, dout, w, gamma, out)
    return {"w": dw, "gamma": dgamma}


def sharpen(w, gamma):
    """Sharpening: w^gamma / sum_j w_j^gamma.

    w (B, H, N) >= 0 (exact zeros allowed; a row of zeros gives zeros),
    gamma (B, H) >= 1. Returns (B, H, N).
    """
    return _sharpen_forward(w, gamma)[0]


register(sharpen, _sharpen_forward, _sharpen_backward)


# ------------------------------------------------------------------ address
_NAMES = ("key", "beta", "g", "s", "gamma", "w_prev", "memory")


def _address_forward(key, beta, g, s, gamma, w_prev, memory, *, return_intermediates=False):
    key, beta, g, s, gamma, w_prev, memory = arrays(
        key=key, beta=beta, g=g, s=s, gamma=gamma, w_prev=w_prev, memory=memory)
    B, H, M = check_3d(key, "key", "(B, H, M)")
    check_shape(memory, "memory", (B, None, M), "(B, N, M)")
    N = memory.shape[1]
    check_shape(beta, "beta", (B, H), "(B, H)")
    check_shape(g, "g", (B, H), "(B, H)")
    check_shape(s, "s", (B, H, None), "(B, H, K)")
    odd_shifts(s)
    check_shape(gamma, "gamma", (B, H), "(B, H)")
    check_shape(w_prev, "w_prev", (B, H, N), "(B, H, N)")
    at_least(beta, "beta", 0)
    at_least(gamma, "gamma", 1)
    w, wc, wg, wt = (np.empty((B, H, N), dtype=key.dtype) for _ in range(4))
    core.ntm_address_forward(w, wc, wg, wt, key, beta, g, s, gamma, w_prev, memory)
    inputs = (key, beta, g, s, gamma, w_prev, memory)
    out = (w, (wc, wg, wt)) if return_intermediates else w
    return out, (inputs, (w, wc, wg, wt), return_intermediates)


def _address_backward(saved, cotangents):
    inputs, outs, inter = saved
    w = outs[0]
    dw = grad_or_zeros(cotangents[0], w)
    dwc = dwg = dwt = None
    if inter and len(cotangents) > 1 and cotangents[1] is not None:
        dwc, dwg, dwt = (None if c is None else np.ascontiguousarray(c) for c in cotangents[1])
    grads = tuple(np.empty_like(a) for a in inputs)
    core.ntm_address_backward(*grads, dw, dwc, dwg, dwt, *inputs, *outs)
    return dict(zip(_NAMES, grads))


def address(key, beta, g, s, gamma, w_prev, memory, *, return_intermediates=False):
    """The NTM's whole addressing pipeline in one C call:
    content -> interpolate -> shift -> sharpen.

    key (B, H, M), beta (B, H) >= 0, g (B, H), s (B, H, K) with K odd,
    gamma (B, H) >= 1, w_prev (B, H, N), memory (B, N, M).

    Returns w (B, H, N), or with ``return_intermediates=True`` the pair
    (w, (w_c, w_g, w_t)) of the final weights and the content, gated and
    shifted weights.
    """
    return _address_forward(key, beta, g, s, gamma, w_prev, memory,
                            return_intermediates=return_intermediates)[0]


register(address, _address_forward, _address_backward)
