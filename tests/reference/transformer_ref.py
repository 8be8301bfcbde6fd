"""Plain NumPy float64 reference for attnc.nn.Transformer* (batch first).

Written from torch's documented formulas (torch.nn.TransformerEncoderLayer and friends,
torch.nn.functional.multi_head_attention_forward), independently of attnc and torch.
Parameters come as a flat state dict keyed by torch's names; every function takes the
prefix of its submodule ("layers.0." ...).

Masks keep torch's meanings: bool True = NOT allowed, float = added to the scores. An
attn_mask is (L, S) or (B * H, L, S); a key_padding_mask is (B, S). A row with no
allowed key gets zero weights and a zero context (attnc's convention; torch gives NaN).
is_causal is only a hint here: the mask passed with it is what counts.
Dropout is not modelled (eval mode).

Every attention returns its per-head softmax probabilities (B, H, L, S).
"""

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _f64(x):
    return None if x is None else np.asarray(x, dtype=np.float64)


def layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    y = y * weight
    return y if bias is None else y + bias


def linear(x, weight, bias):
    y = x @ weight.T
    return y if bias is None else y + bias


def activation(x, name):
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    raise ValueError(name)


def _additive(mask, shape):
    """A torch mask as (allowed bool, additive float) broadcast to shape."""
    m = np.asarray(mask)
    if m.dtype == bool:
        return np.broadcast_to(~m, shape), np.zeros(shape)
    m = m.astype(np.float64)
    return np.broadcast_to(m != -np.inf, shape), np.broadcast_to(np.where(np.isneginf(m), 0.0, m), shape)


def mha(sd, prefix, query, kv, nhead, attn_mask=None, key_padding_mask=None):
    """torch.nn.MultiheadAttention(E, nhead, batch_first=True)(query, kv, kv) with the
    in_proj_weight / in_proj_bias / out_proj.* parameters of sd under prefix.
    Returns (output (B, L, E), per-head weights (B, H, L, S))."""
    q_in, kv_in = _f64(query), _f64(kv)
    B, L, E = q_in.shape
    S = kv_in.shape[1]
    H = nhead
    d = E // H
    w = _f64(sd[prefix + "in_proj_weight"])
    b = _f64(sd.get(prefix + "in_proj_bias"))
    bq, bk, bv = (None, None, None) if b is None else (b[:E], b[E : 2 * E], b[2 * E :])
    q = linear(q_in, w[:E], bq)
    k = linear(kv_in, w[E : 2 * E], bk)
    v = linear(kv_in, w[2 * E :], bv)
    q = q.reshape(B, L, H, d).transpose(0, 2, 1, 3)
    k = k.reshape(B, S, H, d).transpose(0, 2, 1, 3)
    v = v.reshape(B, S, H, d).transpose(0, 2, 1, 3)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)  # (B, H, L, S)
    shape = scores.shape
    allowed = np.ones(shape, bool)
    if attn_mask is not None:
        am = np.asarray(attn_mask)
        if am.ndim == 3:
            am = am.reshape(B, H, L, S)
        a, add = _additive(am, shape)
        allowed &= a
        scores = scores + add
    if key_padding_mask is not None:
        kp = np.asarray(key_padding_mask)[:, None, None, :]
        a, add = _additive(kp, shape)
        allowed &= a
        scores = scores + add
    scores = np.where(allowed, scores, -np.inf)
    any_allowed = allowed.any(-1, keepdims=True)
    mx = np.where(any_allowed, np.max(np.where(allowed, scores, -np.inf), -1, keepdims=True), 0.0)
    e = np.where(allowed, np.exp(np.where(allowed, scores - mx, 0.0)), 0.0)
    den = e.sum(-1, keepdims=True)
    probs = np.where(any_allowed, e / np.where(den == 0, 1.0, den), 0.0)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, L, E)
    out = linear(ctx, _f64(sd[prefix + "out_proj.weight"]), _f64(sd.get(prefix + "out_proj.bias")))
    return out, probs


def _ln(sd, name, x, eps):
    return layer_norm(x, _f64(sd[name + ".weight"]), _f64(sd.get(name + ".bias")), eps)


def _ff(sd, prefix, x, act):
    h = activation(linear(x, _f64(sd[prefix + "linear1.weight"]), _f64(sd.get(prefix + "linear1.bias"))), act)
    return linear(h, _f64(sd[prefix + "linear2.weight"]), _f64(sd.get(prefix + "linear2.bias")))


def encoder_layer(
    sd, prefix, src, nhead, *, norm_first=False, activation="relu", eps=1e-5, src_mask=None, src_key_padding_mask=None
):
    """torch.nn.TransformerEncoderLayer (eval). Returns (out, weights (B, H, L, L))."""
    x = _f64(src)

    def sa(y):
        return mha(sd, prefix + "self_attn.", y, y, nhead, src_mask, src_key_padding_mask)

    if norm_first:
        a, w = sa(_ln(sd, prefix + "norm1", x, eps))
        x = x + a
        x = x + _ff(sd, prefix, _ln(sd, prefix + "norm2", x, eps), activation)
    else:
        a, w = sa(x)
        x = _ln(sd, prefix + "norm1", x + a, eps)
        x = _ln(sd, prefix + "norm2", x + _ff(sd, prefix, x, activation), eps)
    return x, w


def decoder_layer(
    sd,
    prefix,
    tgt,
    memory,
    nhead,
    *,
    norm_first=False,
    activation="relu",
    eps=1e-5,
    tgt_mask=None,
    memory_mask=None,
    tgt_key_padding_mask=None,
    memory_key_padding_mask=None,
):
    """torch.nn.TransformerDecoderLayer (eval). Returns (out, self weights, cross weights)."""
    x = _f64(tgt)
    mem = _f64(memory)

    def sa(y):
        return mha(sd, prefix + "self_attn.", y, y, nhead, tgt_mask, tgt_key_padding_mask)

    def ca(y):
        return mha(sd, prefix + "multihead_attn.", y, mem, nhead, memory_mask, memory_key_padding_mask)

    if norm_first:
        a, ws = sa(_ln(sd, prefix + "norm1", x, eps))
        x = x + a
        a, wc = ca(_ln(sd, prefix + "norm2", x, eps))
        x = x + a
        x = x + _ff(sd, prefix, _ln(sd, prefix + "norm3", x, eps), activation)
    else:
        a, ws = sa(x)
        x = _ln(sd, prefix + "norm1", x + a, eps)
        a, wc = ca(x)
        x = _ln(sd, prefix + "norm2", x + a, eps)
        x = _ln(sd, prefix + "norm3", x + _ff(sd, prefix, x, activation), eps)
    return x, ws, wc


def encoder(
    sd, prefix, src, nhead, num_layers, *, final_norm=False, eps=1e-5, mask=None, src_key_padding_mask=None, **layer_kw
):
    """torch.nn.TransformerEncoder. Returns (out, [weights per layer])."""
    x = _f64(src)
    ws = []
    for i in range(num_layers):
        x, w = encoder_layer(
            sd,
            f"{prefix}layers.{i}.",
            x,
            nhead,
            eps=eps,
            src_mask=mask,
            src_key_padding_mask=src_key_padding_mask,
            **layer_kw,
        )
        ws.append(w)
    if final_norm:
        x = _ln(sd, prefix + "norm", x, eps)
    return x, ws


def decoder(
    sd,
    prefix,
    tgt,
    memory,
    nhead,
    num_layers,
    *,
    final_norm=False,
    eps=1e-5,
    tgt_mask=None,
    memory_mask=None,
    tgt_key_padding_mask=None,
    memory_key_padding_mask=None,
    **layer_kw,
):
    """torch.nn.TransformerDecoder. Returns (out, {"self": [...], "cross": [...]})."""
    x = _f64(tgt)
    ws, wc = [], []
    for i in range(num_layers):
        x, a, c = decoder_layer(
            sd,
            f"{prefix}layers.{i}.",
            x,
            memory,
            nhead,
            eps=eps,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            **layer_kw,
        )
        ws.append(a)
        wc.append(c)
    if final_norm:
        x = _ln(sd, prefix + "norm", x, eps)
    return x, {"self": ws, "cross": wc}


def transformer(
    sd,
    src,
    tgt,
    nhead,
    num_encoder_layers,
    num_decoder_layers,
    *,
    eps=1e-5,
    src_mask=None,
    tgt_mask=None,
    memory_mask=None,
    src_key_padding_mask=None,
    tgt_key_padding_mask=None,
    memory_key_padding_mask=None,
    **layer_kw,
):
    """torch.nn.Transformer (both final norms present). Returns (out, weights dict)."""
    mem, we = encoder(
        sd,
        "encoder.",
        src,
        nhead,
        num_encoder_layers,
        final_norm=True,
        eps=eps,
        mask=src_mask,
        src_key_padding_mask=src_key_padding_mask,
        **layer_kw,
    )
    out, wd = decoder(
        sd,
        "decoder.",
        tgt,
        mem,
        nhead,
        num_decoder_layers,
        final_norm=True,
        eps=eps,
        tgt_mask=tgt_mask,
        memory_mask=memory_mask,
        tgt_key_padding_mask=tgt_key_padding_mask,
        memory_key_padding_mask=memory_key_padding_mask,
        **layer_kw,
    )
    return out, {"encoder": we, "decoder_self": wd["self"], "decoder_cross": wd["cross"]}
