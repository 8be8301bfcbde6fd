"""attnc.nn.LSTMN's equations in torch autograd (vectorised over the batch,
a Python loop over steps): the gradients of every input and parameter that
attnc's C backward is tested against."""

from __future__ import annotations

import numpy as np


def lstmn_torch(x, params, lengths=None, dtype=None):
    """x (B, T, I), params by state_dict name (NumPy); returns (output,
    attention, tensors) with tensors = {"input": x, name: parameter}, all
    torch leaves with requires_grad (in x's dtype unless dtype is given)."""
    import torch

    dt = torch.float64 if (dtype or x.dtype) == np.float64 else torch.float32
    leaf = lambda a: torch.tensor(np.asarray(a), dtype=dt, requires_grad=True)  # noqa: E731
    tensors = {"input": leaf(x)}
    tensors.update({k: leaf(v) for k, v in params.items() if v is not None})
    X = tensors["input"]
    B, T, _ = X.shape
    W_ih, W_hh, v = tensors["weight_ih"], tensors["weight_hh"], tensors["attn_v"]
    W_h, W_x, W_t = tensors["attn_h.weight"], tensors["attn_x.weight"], tensors["attn_tilde.weight"]
    bias = tensors.get("bias")
    H = W_hh.shape[1]
    lens = torch.full((B,), T) if lengths is None else torch.as_tensor(np.asarray(lengths))
    hs, cs, keys, outs, rows = [], [], [], [], []
    h_tilde_prev = torch.zeros(B, H, dtype=dt)
    for t in range(T):
        xt = X[:, t]
        if t == 0:
            h_tilde, c_tilde = torch.zeros(B, H, dtype=dt), torch.zeros(B, H, dtype=dt)
            s = torch.zeros(B, 0, dtype=dt)
        else:
            q = xt @ W_x.T + h_tilde_prev @ W_t.T  # (B, A)
            K = torch.stack(keys, 1)  # (B, t, A)
            a = torch.tanh(K + q[:, None]) @ v  # (B, t)
            s = torch.softmax(a, dim=1)
            h_tilde = (s[:, :, None] * torch.stack(hs, 1)).sum(1)
            c_tilde = (s[:, :, None] * torch.stack(cs, 1)).sum(1)
        z = xt @ W_ih.T + h_tilde @ W_hh.T + (0 if bias is None else bias)
        i, f, g, o = z.chunk(4, 1)
        c = torch.sigmoid(f) * c_tilde + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        alive = (t < lens).to(dt)[:, None]
        h, c = h * alive, c * alive  # padded steps: zeros (never read by alive steps of the row)
        hs.append(h)
        cs.append(c)
        keys.append(h @ W_h.T)
        outs.append(h)
        rows.append(torch.cat([s * alive, torch.zeros(B, T - s.shape[1], dtype=dt)], 1))
        h_tilde_prev = h_tilde
    return torch.stack(outs, 1), torch.stack(rows, 1), tensors
