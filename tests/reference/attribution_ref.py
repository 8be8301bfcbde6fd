"""NumPy float64 references of attention rollout and relevance (independent
of csrc/), from the papers' definitions:

- rollout (Abnar & Zuidema 2020): A_l = rows_normalised((1 - r) fuse_h(W_l) + r I),
  rollout = A_N ... A_1;
- relevance (Chefer, Gur & Wolf 2021): R = I, R <- R + mean_h((G_l * W_l)^+) R.

Weights are lists of (B, H, L, L) arrays, first layer first."""

import numpy as np

FUSE = {"mean": lambda w: w.mean(axis=1), "max": lambda w: w.max(axis=1), "min": lambda w: w.min(axis=1)}


def mixed_ref(weights, head_fusion="mean", residual=0.5):
    """Every layer's A_l, (B, L, L) each."""
    out = []
    for w in weights:
        w = np.asarray(w, dtype=np.float64)
        a = (1 - residual) * FUSE[head_fusion](w) + residual * np.eye(w.shape[-1])
        s = a.sum(axis=-1, keepdims=True)
        out.append(np.divide(a, s, out=np.zeros_like(a), where=s > 0))
    return out


def rollout_ref(weights, head_fusion="mean", residual=0.5):
    mixed = mixed_ref(weights, head_fusion, residual)
    r = mixed[0]
    for a in mixed[1:]:
        r = a @ r
    return r


def relevance_ref(weights, grads):
    w0 = np.asarray(weights[0])
    r = np.broadcast_to(np.eye(w0.shape[-1]), (w0.shape[0],) + w0.shape[-2:]).copy()
    for w, g in zip(weights, grads):
        abar = np.maximum(np.asarray(g, np.float64) * np.asarray(w, np.float64), 0).mean(axis=1)
        r = r + abar @ r
    return r
