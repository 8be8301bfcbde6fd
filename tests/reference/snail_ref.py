"""SNAIL (Mishra et al. 2017) written independently of attnc: a NumPy float64
reference for the values (forward) and the same network composed of torch
operations (conv1d, scaled_dot_product_attention, autograd) for the
gradients. Both read a state dict named as attnc's modules name their
parameters (``filter_conv.weight``, ``query.bias``, ``blocks.1.blocks.0...``).

Layouts as in attnc: convolution blocks (B, C, T), attention blocks (B, T, C).
"""

import math

import numpy as np

# --------------------------------------------------------------------------- NumPy float64


def gated(a, b):
    """tanh(a) * sigmoid(b)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.tanh(a) / (1.0 + np.exp(-b))


def causal_conv1d(x, w, b, dilation):
    """x (B, C, T), w (F, C, K), b (F,) -> (B, F, T): y[t] = b + sum_k w[:, :, k] x[t - (K-1-k) d]
    (zeros before the start), as torch's conv1d after a left padding of (K-1) d."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    B, C, T = x.shape
    F, _, K = w.shape
    y = np.zeros((B, F, T)) + np.asarray(b, np.float64)[None, :, None]
    for k in range(K):
        shift = (K - 1 - k) * dilation
        if shift >= T:
            continue
        xs = np.zeros_like(x)
        xs[:, :, shift:] = x[:, :, : T - shift]
        y += np.einsum("fc,bct->bft", w[:, :, k], xs)
    return y


def dense_block(x, p, prefix, dilation):
    """(B, C, T) -> (B, C + F, T)."""
    xf = causal_conv1d(x, p[prefix + "filter_conv.weight"], p[prefix + "filter_conv.bias"], dilation)
    xg = causal_conv1d(x, p[prefix + "gate_conv.weight"], p[prefix + "gate_conv.bias"], dilation)
    return np.concatenate([np.asarray(x, np.float64), gated(xf, xg)], axis=1)


def tc_depth(seq_len):
    n, reach = 0, 1
    while reach < seq_len:  # the smallest n with 2^n >= seq_len
        n, reach = n + 1, reach * 2
    return max(n, 1)


def tc_block(x, p, prefix, seq_len):
    """(B, C, T) -> (B, C + n F, T), dilations 1, 2, 4, ..."""
    for i in range(tc_depth(seq_len)):
        x = dense_block(x, p, f"{prefix}blocks.{i}.", 2**i)
    return x


def attention_block(x, p, prefix):
    """(B, T, C) -> ((B, T, C + V), weights (B, T, T)): causal softmax attention."""
    x = np.asarray(x, np.float64)

    def lin(name):
        return x @ np.asarray(p[prefix + name + ".weight"], np.float64).T + np.asarray(p[prefix + name + ".bias"])

    q, k, v = lin("query"), lin("key"), lin("value")
    T = x.shape[1]
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(axis=-1, keepdims=True)
    return np.concatenate([x, a @ v], axis=-1), a


def snail_inputs(features, labels, n_way):
    """[features ; onehot(labels)], the last position's label part zero."""
    x = np.asarray(features, np.float64)
    B, T, _ = x.shape
    onehot = np.zeros((B, T, n_way))
    for b in range(B):
        for t in range(T - 1):
            onehot[b, t, labels[b, t]] = 1
    return np.concatenate([x, onehot], axis=-1)


def snail(features, labels, p, n_way, seq_len, n_attention):
    """SNAIL's query logits (B, N) and each attention block's weights: embedding,
    then attention, (TC, attention) * (n_attention - 1), then the classifier at
    the last position."""
    x = snail_inputs(features, labels, n_way)
    h = x @ np.asarray(p["embedding.weight"], np.float64).T + p["embedding.bias"]
    weights, i = [], 0
    for j in range(2 * n_attention - 1):
        if j % 2:
            h = tc_block(h.transpose(0, 2, 1), p, f"blocks.{j}.", seq_len).transpose(0, 2, 1)
        else:
            h, a = attention_block(h, p, f"blocks.{j}.")
            weights.append(a)
            i += 1
    logits = h[:, -1] @ np.asarray(p["classifier.weight"], np.float64).T + p["classifier.bias"]
    return logits, weights


# --------------------------------------------------------------------------- torch


def torch_params(torch, p):
    """The state dict as float64 torch leaves that require grad."""
    return {k: torch.tensor(np.asarray(v, np.float64), requires_grad=True) for k, v in p.items()}


def torch_dense_block(torch, x, p, prefix, dilation):
    F = torch.nn.functional
    xp = F.pad(x, (dilation, 0))
    xf = F.conv1d(xp, p[prefix + "filter_conv.weight"], p[prefix + "filter_conv.bias"], dilation=dilation)
    xg = F.conv1d(xp, p[prefix + "gate_conv.weight"], p[prefix + "gate_conv.bias"], dilation=dilation)
    return torch.cat([x, torch.tanh(xf) * torch.sigmoid(xg)], dim=1)


def torch_tc_block(torch, x, p, prefix, seq_len):
    for i in range(tc_depth(seq_len)):
        x = torch_dense_block(torch, x, p, f"{prefix}blocks.{i}.", 2**i)
    return x


def torch_attention_block(torch, x, p, prefix):
    F = torch.nn.functional
    q = F.linear(x, p[prefix + "query.weight"], p[prefix + "query.bias"])
    k = F.linear(x, p[prefix + "key.weight"], p[prefix + "key.bias"])
    v = F.linear(x, p[prefix + "value.weight"], p[prefix + "value.bias"])
    T = x.shape[1]
    s = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    a = torch.softmax(s, dim=-1)
    return torch.cat([x, a @ v], dim=-1), a


def torch_snail(torch, features, labels, p, n_way, seq_len, n_attention):
    F = torch.nn.functional
    B, T, _ = features.shape
    onehot = torch.zeros(B, T, n_way, dtype=torch.float64)
    onehot[:, :-1] = F.one_hot(torch.as_tensor(np.asarray(labels, np.int64)), n_way).double()
    h = F.linear(torch.cat([features, onehot], dim=-1), p["embedding.weight"], p["embedding.bias"])
    weights = []
    for j in range(2 * n_attention - 1):
        if j % 2:
            h = torch_tc_block(torch, h.transpose(1, 2), p, f"blocks.{j}.", seq_len).transpose(1, 2)
        else:
            h, a = torch_attention_block(torch, h, p, f"blocks.{j}.")
            weights.append(a)
    return F.linear(h[:, -1], p["classifier.weight"], p["classifier.bias"]), weights
