"""NumPy float64 reference of attnc.ntm (independent of csrc/)."""

import numpy as np


def content_weights(key, memory, beta):
    key, memory, beta = (np.asarray(a, np.float64) for a in (key, memory, beta))
    dot = np.einsum("bhm,bnm->bhn", key, memory)
    den = np.linalg.norm(key, axis=-1)[:, :, None] * np.linalg.norm(memory, axis=-1)[:, None, :]
    z = beta[:, :, None] * dot / np.maximum(den, 1e-8)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def interpolate(w_content, w_prev, g):
    g = np.asarray(g, np.float64)[:, :, None]
    return g * np.asarray(w_content, np.float64) + (1 - g) * np.asarray(w_prev, np.float64)


def shift(w, s):
    w, s = np.asarray(w, np.float64), np.asarray(s, np.float64)
    K, c = s.shape[-1], (s.shape[-1] - 1) // 2
    out = np.zeros_like(w)
    for k in range(K):
        out += s[:, :, k : k + 1] * np.roll(w, k - c, axis=-1)
    return out


def sharpen(w, gamma):
    w, gamma = np.asarray(w, np.float64), np.asarray(gamma, np.float64)
    u = np.where(w > 0, np.abs(w) ** gamma[:, :, None], 0.0)
    tot = u.sum(-1, keepdims=True)
    return np.where(tot > 0, u / np.where(tot > 0, tot, 1), 0.0)


def read(memory, w):
    return np.einsum("bhn,bnm->bhm", np.asarray(w, np.float64), np.asarray(memory, np.float64))


def write(memory, w, erase, add):
    memory, w, erase, add = (np.asarray(a, np.float64) for a in (memory, w, erase, add))
    keep = np.prod(1 - w[:, :, :, None] * erase[:, :, None, :], axis=1)
    return memory * keep + np.einsum("bhn,bhm->bnm", w, add)


def address(key, beta, g, s, gamma, w_prev, memory):
    wc = content_weights(key, memory, beta)
    wg = interpolate(wc, w_prev, g)
    wt = shift(wg, s)
    return sharpen(wt, gamma), (wc, wg, wt)
