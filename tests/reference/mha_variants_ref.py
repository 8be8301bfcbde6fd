"""Plain NumPy float64 multi-head self-attention (torch.nn.MultiheadAttention's
stacked in_proj layout, batch first) with issue 30's options applied by
sdpa_variants_ref, and a Transformer encoder layer built on it; independent
of attnc."""

import numpy as np

from . import sdpa_variants_ref as ref
from . import transformer_ref as tr


def mha(x, in_w, in_b, out_w, out_b, heads, kv_heads=None, *, is_causal=False, **options):
    """x (B, L, E) -> (output (B, L, E), weights (B, H, L, L)); in_w
    (E + 2 E_kv, E), E_kv = kv_heads E / heads."""
    kv_heads = kv_heads or heads
    B, L, E = x.shape
    hd = E // heads
    ekv = kv_heads * hd
    qkv = x @ in_w.T + in_b
    q, k, v = qkv[..., :E], qkv[..., E : E + ekv], qkv[..., E + ekv :]

    def split(a, n):
        return a.reshape(B, L, n, hd).transpose(0, 2, 1, 3)

    out, w = ref.scaled_dot_product_attention(
        split(q, heads), split(k, kv_heads), split(v, kv_heads), is_causal=is_causal, return_weights=True, **options
    )
    return out.transpose(0, 2, 1, 3).reshape(B, L, E) @ out_w.T + out_b, w


def encoder_layer(sd, x, heads, kv_heads=None, *, norm_first=False, is_causal=False, activation="relu", **options):
    """torch.nn.TransformerEncoderLayer (eval) from its state_dict sd
    (stacked in_proj_weight), the options on its self-attention."""
    x = np.asarray(x, np.float64)
    p = {n: np.asarray(a, np.float64) for n, a in sd.items()}
    names = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")

    def attend(h):
        weights = (p["self_attn." + n] for n in names)
        return mha(h, *weights, heads, kv_heads, is_causal=is_causal, **options)[0]

    if norm_first:
        x = x + attend(tr._ln(p, "norm1", x, 1e-5))
        return x + tr._ff(p, "", tr._ln(p, "norm2", x, 1e-5), activation)
    x = tr._ln(p, "norm1", x + attend(x), 1e-5)
    return tr._ln(p, "norm2", x + tr._ff(p, "", x, activation), 1e-5)
