"""attnc.ntm memory: reading and writing with H heads (Graves et al. 2014,
sections 3.1-3.2). Sizes: B batch, H heads, N memory slots, M slot width."""

from __future__ import annotations

import numpy as np

from .. import _core as core
from ..grad import register
from ._common import arrays, check_3d, check_shape, grad_or_zeros


def _read_forward(memory, w):
    memory, w = arrays(memory=memory, w=w)
    B, N, M = check_3d(memory, "memory", "(B, N, M)")
    check_shape(w, "w", (B, None, N), "(B, H, N)")
    r = np.empty((B, w.shape[1], M), dtype=memory.dtype)
    core.ntm_read_forward(r, memory, w)
    return r, (memory, w)


def _read_backward(saved, cotangents):
    memory, w = saved
    H = w.shape[1]
    dr = cotangents[0]
    if dr is None:
        dr = np.zeros((memory.shape[0], H, memory.shape[2]), dtype=memory.dtype)
    dmemory, dw = np.empty_like(memory), np.empty_like(w)
    core.ntm_read_backward(dmemory, dw, np.ascontiguousarray(dr), memory, w)
    return {"memory": dmemory, "w": dw}


def read(memory, w):
    """Read heads: r[b, h] = sum_i w[b, h, i] memory[b, i].

    memory (B, N, M), w (B, H, N). Returns r (B, H, M).
    """
    return _read_forward(memory, w)[0]


register(read, _read_forward, _read_backward)


def _write_forward(memory, w, erase, add):
    memory, w, erase, add = arrays(memory=memory, w=w, erase=erase, add=add)
    B, N, M = check_3d(memory, "memory", "(B, N, M)")
    check_shape(w, "w", (B, None, N), "(B, H, N)")
    H = w.shape[1]
    check_shape(erase, "erase", (B, H, M), "(B, H, M)")
    check_shape(add, "add", (B, H, M), "(B, H, M)")
    out = np.empty_like(memory)
    core.ntm_write_forward(out, memory, w, erase, add)
    return out, (memory, w, erase, add)


def _write_backward(saved, cotangents):
    memory, w, erase, add = saved
    dout = grad_or_zeros(cotangents[0], memory)
    grads = tuple(np.empty_like(a) for a in saved)
    core.ntm_write_backward(*grads, dout, memory, w, erase, add)
    return dict(zip(("memory", "w", "erase", "add"), grads))


def write(memory, w, erase, add):
    """Write heads, all at once and order-free (as in the paper):
    M' = M o prod_h (1 - w_h e_h^T) + sum_h w_h a_h^T.

    memory (B, N, M), w (B, H, N), erase and add (B, H, M). Returns (B, N, M).
    """
    return _write_forward(memory, w, erase, add)[0]


register(write, _write_forward, _write_backward)
