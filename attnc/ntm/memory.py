"""attnc.ntm memory: reading and writing with H heads (Graves et al. 2014,
sections 3.1-3.2). Sizes: B batch, H heads, N memory slots, M slot width."""

from __future__ import annotations

import numpy as np

from .. import _core as core
from .._typing import Array, ArrayLike
from ..grad import register
from ._common import arrays, check_3d, grad_or_zeros


def _read_forward(memory, w):
    memory, w = arrays(memory=memory, w=w)
    B, _, M = check_3d(memory, "memory", "(B, N, M)")  # the sizes of r: C checks the rest
    H = check_3d(w, "w", "(B, H, N)")[1]
    r = np.empty((B, H, M), dtype=memory.dtype)
    core.ntm_read_forward(r=r, memory=memory, w=w)
    return r, (memory, w)


def _read_backward(saved, cotangents):
    memory, w = saved
    H = w.shape[1]
    dr = cotangents[0]
    if dr is None:
        dr = np.zeros((memory.shape[0], H, memory.shape[2]), dtype=memory.dtype)
    dmemory, dw = np.empty_like(memory), np.empty_like(w)
    core.ntm_read_backward(dmemory=dmemory, dw=dw, dr=np.ascontiguousarray(dr), memory=memory, w=w)
    return {"memory": dmemory, "w": dw}


def read(memory: ArrayLike, w: ArrayLike) -> Array:
    """Read heads: r[b, h] = sum_i w[b, h, i] memory[b, i].

    Parameters
    ----------
    memory : array (B, N, M), float32 or float64
    w : array (B, H, N), the same dtype, each head's weights over the N slots

    Returns
    -------
    r : array (B, H, M), the input dtype, one read vector per head

    Example
    -------
    >>> memory = np.arange(12.0).reshape(1, 3, 4)
    >>> attnc.ntm.read(memory, np.array([[[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]]))
    array([[[4., 5., 6., 7.],
            [4., 5., 6., 7.]]])
    """
    return _read_forward(memory, w)[0]


register(read, _read_forward, _read_backward)


def _write_forward(memory, w, erase, add):
    memory, w, erase, add = arrays(memory=memory, w=w, erase=erase, add=add)
    out = np.empty_like(memory)  # C checks the shapes
    core.ntm_write_forward(out=out, memory=memory, w=w, erase=erase, add=add)
    return out, (memory, w, erase, add)


def _write_backward(saved, cotangents):
    memory, w, erase, add = saved
    dout = grad_or_zeros(cotangents[0], memory)
    dmemory, dw, derase, dadd = (np.empty_like(a) for a in saved)
    core.ntm_write_backward(
        dmemory=dmemory, dw=dw, derase=derase, dadd=dadd, dout=dout, memory=memory, w=w, erase=erase, add=add
    )
    return {"memory": dmemory, "w": dw, "erase": derase, "add": dadd}


def write(memory: ArrayLike, w: ArrayLike, erase: ArrayLike, add: ArrayLike) -> Array:
    """Write heads, all at once and order-free (as in the paper):
    M' = M o prod_h (1 - w_h e_h^T) + sum_h w_h a_h^T.

    Parameters
    ----------
    memory : array (B, N, M), float32 or float64
    w : array (B, H, N), the same dtype, each write head's weights
    erase : array (B, H, M), the same dtype, erase vectors (in [0, 1])
    add : array (B, H, M), the same dtype, add vectors

    Returns
    -------
    memory' : array (B, N, M), the input dtype, a new array (memory is not modified)

    Example
    -------
    >>> memory = np.ones((1, 3, 2))
    >>> w = np.array([[[0.0, 1.0, 0.0]]])                    # write to slot 1
    >>> attnc.ntm.write(memory, w, erase=np.ones((1, 1, 2)), add=np.array([[[5.0, 7.0]]]))
    array([[[1., 1.],
            [5., 7.],
            [1., 1.]]])
    """
    return _write_forward(memory, w, erase, add)[0]


register(write, _write_forward, _write_backward)
