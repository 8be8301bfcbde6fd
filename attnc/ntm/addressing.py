"""attnc.ntm addressing: content weights, interpolation, shift, sharpening and
the whole pipeline (Graves et al. 2014, section 3.3). Sizes: B batch, H heads,
N memory slots, M slot width, K shift width (odd)."""

from __future__ import annotations

from typing import Literal, overload

import numpy as np

from .. import _core as core
from .._typing import Array, ArrayLike
from ..grad import register
from ._common import arrays, at_least, check_3d, grad_or_zeros


# ------------------------------------------------------------------ content
def _content_forward(key, memory, beta):
    key, memory, beta = arrays(key=key, memory=memory, beta=beta)
    B, H, _ = check_3d(key, "key", "(B, H, M)")  # the sizes of w: C checks the rest
    N = check_3d(memory, "memory", "(B, N, M)")[1]
    w = np.empty((B, H, N), dtype=key.dtype)
    core.ntm_content_forward(w=w, key=key, memory=memory, beta=beta)
    return w, (key, memory, beta, w)


def _content_backward(saved, cotangents):
    key, memory, beta, w = saved
    dw = grad_or_zeros(cotangents[0], w)
    dkey, dmemory, dbeta = np.empty_like(key), np.empty_like(memory), np.empty_like(beta)
    core.ntm_content_backward(dkey=dkey, dmemory=dmemory, dbeta=dbeta, dw=dw, key=key, memory=memory, beta=beta, w=w)
    return {"key": dkey, "memory": dmemory, "beta": dbeta}


def content_weights(key: ArrayLike, memory: ArrayLike, beta: ArrayLike) -> Array:
    """Content addressing: w_c[b, h, i] = softmax_i(beta[b, h] cos(key[b, h], memory[b, i])).

    cos(k, m) = k.m / max(|k| |m|, 1e-8); a stable softmax over the N slots.

    Parameters
    ----------
    key : array (B, H, M), float32 or float64, one key per head
    memory : array (B, N, M), the same dtype
    beta : array (B, H), the same dtype, >= 0: the key strength (0 = uniform)

    Returns
    -------
    w_c : array (B, H, N), the input dtype, rows summing to 1

    Example
    -------
    >>> memory = np.random.rand(1, 6, 4)
    >>> w_c = attnc.ntm.content_weights(memory[:, [2]], memory, np.array([[50.0]]))
    >>> w_c.shape, int(w_c.argmax()), round(float(w_c.sum()), 6)
    ((1, 1, 6), 2, 1.0)
    """
    return _content_forward(key, memory, beta)[0]


register(content_weights, _content_forward, _content_backward)


# ------------------------------------------------------------------ interpolate
def _interp_forward(w_content, w_prev, g):
    w_content, w_prev, g = arrays(w_content=w_content, w_prev=w_prev, g=g)
    w = np.empty_like(w_content)  # C checks the shapes
    core.ntm_interpolate_forward(w=w, w_content=w_content, w_prev=w_prev, g=g)
    return w, (w_content, w_prev, g)


def _interp_backward(saved, cotangents):
    w_content, w_prev, g = saved
    dw = grad_or_zeros(cotangents[0], w_content)
    dwc, dwp, dg = np.empty_like(w_content), np.empty_like(w_prev), np.empty_like(g)
    core.ntm_interpolate_backward(dw_content=dwc, dw_prev=dwp, dg=dg, dw=dw, w_content=w_content, w_prev=w_prev, g=g)
    return {"w_content": dwc, "w_prev": dwp, "g": dg}


def interpolate(w_content: ArrayLike, w_prev: ArrayLike, g: ArrayLike) -> Array:
    """Interpolation gate: w_g = g w_content + (1 - g) w_prev.

    Parameters
    ----------
    w_content : array (B, H, N), float32 or float64, the content weights
    w_prev : array (B, H, N), the same dtype, the previous step's weights
    g : array (B, H), the same dtype, the gate (in [0, 1] for a weighting)

    Returns
    -------
    w_g : array (B, H, N), the input dtype

    Example
    -------
    >>> w_c, w_prev = np.eye(4)[None, None, 0], np.eye(4)[None, None, 3]
    >>> attnc.ntm.interpolate(w_c, w_prev, np.array([[0.25]]))
    array([[[0.25, 0.  , 0.  , 0.75]]])
    """
    return _interp_forward(w_content, w_prev, g)[0]


register(interpolate, _interp_forward, _interp_backward)


# ------------------------------------------------------------------ shift
def _shift_forward(w, s):
    w, s = arrays(w=w, s=s)
    out = np.empty_like(w)  # C checks the shapes and that K is odd
    core.ntm_shift_forward(out=out, w=w, s=s)
    return out, (w, s)


def _shift_backward(saved, cotangents):
    w, s = saved
    dout = grad_or_zeros(cotangents[0], w)
    dw, ds = np.empty_like(w), np.empty_like(s)
    core.ntm_shift_backward(dw=dw, ds=ds, dout=dout, w=w, s=s)
    return {"w": dw, "s": ds}


def shift(w: ArrayLike, s: ArrayLike) -> Array:
    """Circular convolution with a shift distribution.

    out[i] = sum_k s[k] w[(i - (k - (K-1)/2)) mod N]; a one-hot s at index
    (K-1)/2 + 1 moves every weight one slot toward higher addresses.

    Parameters
    ----------
    w : array (B, H, N), float32 or float64, the weights to shift
    s : array (B, H, K), the same dtype, K odd: the weights of the shifts
        -(K-1)/2 ... (K-1)/2 (a distribution, e.g. a softmax)

    Returns
    -------
    out : array (B, H, N), the input dtype

    Example
    -------
    >>> w = np.eye(5)[None, None, 4]                         # all on slot 4
    >>> out = attnc.ntm.shift(w, np.array([[[0.0, 0.0, 1.0]]]))   # shift by +1
    >>> out.shape, int(out.argmax())                         # wraps around to slot 0
    ((1, 1, 5), 0)
    """
    return _shift_forward(w, s)[0]


register(shift, _shift_forward, _shift_backward)


# ------------------------------------------------------------------ sharpen
def _sharpen_forward(w, gamma):
    w, gamma = arrays(w=w, gamma=gamma)
    at_least(w, "w", 0)
    out = np.empty_like(w)  # C checks the shapes and gamma >= 1
    core.ntm_sharpen_forward(out=out, w=w, gamma=gamma)
    return out, (w, gamma, out)


def _sharpen_backward(saved, cotangents):
    w, gamma, out = saved
    dout = grad_or_zeros(cotangents[0], w)
    dw, dgamma = np.empty_like(w), np.empty_like(gamma)
    core.ntm_sharpen_backward(dw=dw, dgamma=dgamma, dout=dout, w=w, gamma=gamma, out=out)
    return {"w": dw, "gamma": dgamma}


def sharpen(w: ArrayLike, gamma: ArrayLike) -> Array:
    """Sharpening: out[i] = w[i]^gamma / sum_j w[j]^gamma.

    Parameters
    ----------
    w : array (B, H, N), float32 or float64, >= 0 (exact zeros allowed; a row
        of zeros gives zeros)
    gamma : array (B, H), the same dtype, >= 1

    Returns
    -------
    out : array (B, H, N), the input dtype, rows summing to 1

    Example
    -------
    >>> attnc.ntm.sharpen(np.array([[[0.25, 0.25, 0.5]]]), np.array([[2.0]]))
    array([[[0.16666667, 0.16666667, 0.66666667]]])
    """
    return _sharpen_forward(w, gamma)[0]


register(sharpen, _sharpen_forward, _sharpen_backward)


# ------------------------------------------------------------------ address
def _address_forward(key, beta, g, s, gamma, w_prev, memory, *, return_intermediates=False):
    key, beta, g, s, gamma, w_prev, memory = arrays(
        key=key, beta=beta, g=g, s=s, gamma=gamma, w_prev=w_prev, memory=memory
    )
    B, H, _ = check_3d(key, "key", "(B, H, M)")  # the sizes of w: C checks the rest
    N = check_3d(memory, "memory", "(B, N, M)")[1]
    w, wc, wg, wt = (np.empty((B, H, N), dtype=key.dtype) for _ in range(4))
    inputs = {"key": key, "beta": beta, "g": g, "s": s, "gamma": gamma, "w_prev": w_prev, "memory": memory}
    core.ntm_address_forward(w=w, w_c=wc, w_g=wg, w_t=wt, **inputs)
    out = (w, (wc, wg, wt)) if return_intermediates else w
    return out, (inputs, (w, wc, wg, wt), return_intermediates)


def _address_backward(saved, cotangents):
    inputs, outs, inter = saved
    w = outs[0]
    dw = grad_or_zeros(cotangents[0], w)
    dwc = dwg = dwt = None
    if inter and len(cotangents) > 1 and cotangents[1] is not None:
        dwc, dwg, dwt = (None if c is None else np.ascontiguousarray(c) for c in cotangents[1])
    grads = {name: np.empty_like(a) for name, a in inputs.items()}
    core.ntm_address_backward(
        grads=grads, dw=dw, dw_c=dwc, dw_g=dwg, dw_t=dwt, w=outs[0], w_c=outs[1], w_g=outs[2], w_t=outs[3], **inputs
    )
    return grads


@overload
def address(
    key: ArrayLike,
    beta: ArrayLike,
    g: ArrayLike,
    s: ArrayLike,
    gamma: ArrayLike,
    w_prev: ArrayLike,
    memory: ArrayLike,
    *,
    return_intermediates: Literal[False] = ...,
) -> Array: ...
@overload
def address(
    key: ArrayLike,
    beta: ArrayLike,
    g: ArrayLike,
    s: ArrayLike,
    gamma: ArrayLike,
    w_prev: ArrayLike,
    memory: ArrayLike,
    *,
    return_intermediates: Literal[True],
) -> tuple[Array, tuple[Array, Array, Array]]: ...
@overload
def address(
    key: ArrayLike,
    beta: ArrayLike,
    g: ArrayLike,
    s: ArrayLike,
    gamma: ArrayLike,
    w_prev: ArrayLike,
    memory: ArrayLike,
    *,
    return_intermediates: bool = ...,
) -> Array | tuple[Array, tuple[Array, Array, Array]]: ...
def address(
    key: ArrayLike,
    beta: ArrayLike,
    g: ArrayLike,
    s: ArrayLike,
    gamma: ArrayLike,
    w_prev: ArrayLike,
    memory: ArrayLike,
    *,
    return_intermediates: bool = False,
) -> Array | tuple[Array, tuple[Array, Array, Array]]:
    """The NTM's whole addressing pipeline in one C call:
    content -> interpolate -> shift -> sharpen.

    w = sharpen(shift(interpolate(content_weights(key, memory, beta), w_prev, g), s), gamma)

    Parameters
    ----------
    key : array (B, H, M), float32 or float64 (every array has this dtype)
    beta : array (B, H), >= 0, the key strength
    g : array (B, H), the interpolation gate
    s : array (B, H, K), K odd, the shift weights
    gamma : array (B, H), >= 1, the sharpening exponent
    w_prev : array (B, H, N), the previous weights
    memory : array (B, N, M)
    return_intermediates : bool, also return the stages' weights

    Returns
    -------
    w : array (B, H, N), the input dtype; or with ``return_intermediates=True``
    the pair (w, (w_c, w_g, w_t)) of the final weights and the content, gated
    and shifted weights, each (B, H, N).

    Example
    -------
    >>> B, H, N, M = 2, 1, 8, 4
    >>> memory = np.random.rand(B, N, M); key = memory[:, [5]]       # the key is slot 5
    >>> w_prev = np.full((B, H, N), 1 / N); s = np.tile([0.0, 1.0, 0.0], (B, H, 1))
    >>> ones = np.ones((B, H))
    >>> w, (w_c, w_g, w_t) = attnc.ntm.address(key, 100 * ones, ones, s, 10 * ones, w_prev, memory,
    ...                                         return_intermediates=True)
    >>> w.shape, w.argmax(axis=-1).tolist(), w.sum(axis=-1).round(6).tolist()
    ((2, 1, 8), [[5], [5]], [[1.0], [1.0]])
    """
    return _address_forward(key, beta, g, s, gamma, w_prev, memory, return_intermediates=return_intermediates)[0]


register(address, _address_forward, _address_backward)
