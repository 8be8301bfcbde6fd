"""NumPy float64 reference of attnc.nn.LSTMN (Cheng, Dong & Lapata 2016):
a plain step-by-step loop over rows and steps, independent of csrc/."""

from __future__ import annotations

import numpy as np


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstmn_ref(x, params, lengths=None):
    """x (B, T, I); params: dict by state_dict name; lengths (B,) or None.

    Returns (output (B, T, H), attention (B, T, T)) in float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(x, np.float64)
    B, T, _ = x.shape
    H = p["weight_hh"].shape[1]
    b = p.get("bias")
    out = np.zeros((B, T, H))
    attn = np.zeros((B, T, T))
    for r in range(B):
        L = T if lengths is None else int(lengths[r])
        hs, cs = [], []
        h_tilde_prev = np.zeros(H)
        for t in range(L):
            xt = x[r, t]
            if t == 0:  # empty tape
                h_tilde, c_tilde = np.zeros(H), np.zeros(H)
            else:
                scores = np.array(
                    [
                        p["attn_v"]
                        @ np.tanh(
                            p["attn_h.weight"] @ hs[i] + p["attn_x.weight"] @ xt + p["attn_tilde.weight"] @ h_tilde_prev
                        )
                        for i in range(t)
                    ]
                )
                e = np.exp(scores - scores.max())
                s = e / e.sum()
                attn[r, t, :t] = s
                h_tilde = sum(s[i] * hs[i] for i in range(t))
                c_tilde = sum(s[i] * cs[i] for i in range(t))
            z = p["weight_ih"] @ xt + p["weight_hh"] @ h_tilde + (0 if b is None else b)
            i_, f_, g_, o_ = _sigmoid(z[:H]), _sigmoid(z[H : 2 * H]), np.tanh(z[2 * H : 3 * H]), _sigmoid(z[3 * H :])
            c = f_ * c_tilde + i_ * g_
            h = o_ * np.tanh(c)
            hs.append(h)
            cs.append(c)
            out[r, t] = h
            h_tilde_prev = h_tilde
    return out, attn
