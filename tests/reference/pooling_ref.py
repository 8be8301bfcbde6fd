"""NumPy float64 reference of attention pooling (independent of csrc/):
u_t = tanh(W h_t + b), e_t = v . u_t, alpha = masked softmax_t(e), c = sum_t alpha_t h_t."""

import numpy as np


def attention_pool_ref(input, weight, bias=None, v=None, mask=None):
    h = np.asarray(input, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    u = h @ w.T
    if bias is not None:
        u = u + np.asarray(bias, dtype=np.float64)
    e = np.tanh(u) @ np.asarray(v, dtype=np.float64)  # (B, T)
    m = np.ones(e.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), e.shape)
    alpha = np.zeros_like(e)
    for b in range(e.shape[0]):
        if m[b].any():
            x = e[b][m[b]]
            x = np.exp(x - x.max())
            alpha[b][m[b]] = x / x.sum()
    c = np.einsum("bt,btd->bd", alpha, h)
    return c, alpha
