"""NumPy float64 reference of SAGAN's self-attention block (Zhang et al. 2018),
written from the paper's equations position by position:
s_ij = f(x_i)^T g(x_j), beta_{j,i} = softmax over i of s_ij, o_j = v(sum_i beta_{j,i} h(x_i)),
y = gamma o + x. Parameters by attnc's state_dict names."""

import numpy as np


def self_attention2d(x, params):
    """x (B, C, H, W); params: f/g/h.weight (c, C, 1, 1), f/g/h.bias (c,),
    v.weight (C, c, 1, 1), v.bias (C,), gamma (1,). Returns (y, beta (B, N, N))."""
    x = np.asarray(x, np.float64)
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    B, C, H, W = x.shape
    N = H * W
    y = np.empty_like(x)
    beta = np.empty((B, N, N))
    for b in range(B):
        pos = [x[b, :, r, cc] for r in range(H) for cc in range(W)]  # x_i, i = r W + c

        def conv1(name, v):
            return p[name + ".weight"][:, :, 0, 0] @ v + p[name + ".bias"]

        f = np.array([conv1("f", xi) for xi in pos])
        g = np.array([conv1("g", xi) for xi in pos])
        h = np.array([conv1("h", xi) for xi in pos])
        for j in range(N):
            s = np.array([f[i] @ g[j] for i in range(N)])
            e = np.exp(s - s.max())
            beta[b, j] = e / e.sum()
            read = sum(beta[b, j, i] * h[i] for i in range(N))
            o = conv1("v", read)
            y[b, :, j // W, j % W] = p["gamma"][0] * o + pos[j]
    return y, beta
