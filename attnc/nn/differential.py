"""attnc.nn.DifferentialAttention: multi-head differential attention (Ye et
al. 2024, "Differential Transformer", ICLR 2025) on attnc's fused kernel."""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._args import float_array, int_arg, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..attention.multihead import kv_heads
from ..attention.sdpa import scaled_dot_product_attention
from ..grad import vjp
from .linear import Linear, linear
from .module import Module
from .normalization import _rms_norm, _rms_norm_backward, _RMSWeight
from .rotary import RotaryEmbedding


def lambda_init(layer_index: int) -> float:
    """The paper's λ_init = 0.8 − 0.6 exp(−0.3 (l − 1)) of layer l = 1, 2, ...

    (The reference code, microsoft/unilm's multihead_diffattn.py, writes it
    as ``lambda_init_fn(depth)`` with the 0-based depth = l − 1.)

    Example
    -------
    >>> round(attnc.nn.differential.lambda_init(1), 6), round(attnc.nn.differential.lambda_init(12), 4)
    (0.2, 0.7779)
    """
    return 0.8 - 0.6 * math.exp(-0.3 * (layer_index - 1))


class DifferentialAttention(Module):
    """Multi-head differential attention (Ye et al. 2024), self-attention.

    Each of the H heads splits its queries and keys in two halves of width
    d = E / (2H) and attends twice on the values (width 2d):

        A = softmax(Q1 K1^T / sqrt(d)) − λ softmax(Q2 K2^T / sqrt(d)),
        λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init,

    λ_init = 0.8 − 0.6 exp(−0.3 (layer_index − 1)) (``lambda_init``); each
    head's A V is normalised by RMSNorm (``subln``, one weight of width 2d
    shared by the heads, the paper's GroupNorm), scaled by (1 − λ_init), and
    the heads are concatenated into ``out_proj``. The two maps come from one
    call of attnc's fused kernel on 2H heads of width d (GQA when
    num_kv_heads < H). Layout and names are the reference code's
    (microsoft/unilm, Diff-Transformer/multihead_diffattn.py): the query and
    key projections' heads are interleaved (2h, 2h + 1) = (half 1, half 2) of
    head h.

    Parameters
    ----------
    embed_dim : int, E, divisible by 2 num_heads
    num_heads : int, H, the differential heads (the paper compares H against a
        Transformer with 2H heads)
    layer_index : int >= 1, l, the layer's depth (1 for the first layer): λ_init's schedule
    num_kv_heads : int dividing H, or None (H): grouped-query attention, as
        the reference code's repeat_kv shares the 2 num_kv_heads key half-heads:
        query half-head i reads key half-head i // (H / num_kv_heads), head h
        value head h // (H / num_kv_heads)
    bias : bool, biases on the four projections (the reference has none)
    eps : float, the RMSNorm's eps
    rotary : attnc.nn.RotaryEmbedding of dim d, or None: RoPE on every half head's
        queries and keys (the reference's: interleaved=True)
    dtype : float32 or float64
    seed : int or None, for the initialisation (λ vectors N(0, 0.1²), as the reference)

    ``state_dict()``: ``q_proj.weight`` (E, E), ``k_proj.weight``,
    ``v_proj.weight`` (E_kv, E), E_kv = E num_kv_heads / H, ``out_proj.weight``
    (E, E) (and ``*.bias`` with bias), ``lambda_q1``, ``lambda_k1``,
    ``lambda_q2``, ``lambda_k2`` (d,), ``subln.weight`` (2d,).

    ``forward(x, attn_mask=None, is_causal=False, need_weights=False)``: x
    (B, L, E) float32 or float64; attn_mask (L, L) or broadcasting to
    (B, 2H, L, L), bool (True = may attend, as attnc.scaled_dot_product_attention)
    or float (added); -> output (B, L, E), or (output, the differential map A
    (B, H, L, L)) with need_weights. ``attnc.vjp(module, x, ...)`` gives "x"
    and every parameter's gradient by state_dict name (with need_weights, the
    map's cotangent counts too).

    Example
    -------
    >>> attn = attnc.nn.DifferentialAttention(16, 2, layer_index=1, seed=0)
    >>> x = np.random.rand(2, 5, 16).astype(np.float32)
    >>> out, a = attn(x, is_causal=True, need_weights=True)
    >>> out.shape, a.shape, round(attn.lambda_init, 3)
    ((2, 5, 16), (2, 2, 5, 5), 0.2)
    >>> bool(np.allclose(a.sum(-1), 1 - attn.lambda_full()))    # each row sums to 1 − λ
    True
    """

    embed_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    layer_index: int
    lambda_init: float
    eps: float

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        layer_index: int = 1,
        *,
        num_kv_heads: int | None = None,
        bias: bool = False,
        eps: float = 1e-5,
        rotary: RotaryEmbedding | None = None,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        E, H = int_arg("embed_dim", embed_dim), int_arg("num_heads", num_heads)
        if E % (2 * H):
            raise ValueError(f"embed_dim ({E}) must be divisible by 2 num_heads ({2 * H})")
        self.layer_index = int_arg("layer_index", layer_index)
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0:
            raise ValueError(f"eps must be a number >= 0, got {eps!r}")
        self.embed_dim, self.num_heads, self.eps = E, H, float(eps)
        self.num_kv_heads = kv_heads(num_kv_heads, H)
        self.head_dim = d = E // (2 * H)
        if rotary is not None and (not isinstance(rotary, RotaryEmbedding) or rotary.dim != d):
            raise ValueError(f"rotary must be an attnc.nn.RotaryEmbedding of dim head_dim = {d}")
        self.rotary = rotary
        self.lambda_init = lambda_init(self.layer_index)
        rng = np.random.default_rng(seed)
        Ekv = E * self.num_kv_heads // H
        for name, rows in (("q_proj", E), ("k_proj", Ekv), ("v_proj", Ekv), ("out_proj", E)):
            setattr(self, name, Linear(E, rows, bias=bias, dtype=dtype, seed=int(rng.integers(2**63))))
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            self._init_parameter(name, (d,), lambda shape: rng.normal(0.0, 0.1, shape))
        self.subln = _RMSWeight(2 * d, dtype)

    def lambda_full(self) -> float:
        """λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init, from the parameters now."""
        p = self._parameters
        e1 = np.exp(np.dot(p["lambda_q1"], p["lambda_k1"]))
        e2 = np.exp(np.dot(p["lambda_q2"], p["lambda_k2"]))
        return float(e1 - e2 + self.lambda_init)

    def _check(self, x):
        a = float_array(x, "x")
        if a.ndim != 3 or a.shape[-1] != self.embed_dim:
            raise ValueError(f"x has shape {shape_str(a.shape)}, expected (B, L, E) with E = {self.embed_dim}")
        if a.dtype != self.dtype:
            raise TypeError(f"x has dtype {a.dtype}, but the module's parameters are {self.dtype}")
        return a

    def _run(self, x, attn_mask, is_causal, need_weights):
        """The forward with every piece's pullback: (outputs, saved)."""
        x = self._check(x)
        B, L, E = x.shape
        H, Hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        pb = {}

        def call(name, fn, *args, **kwargs):
            out, pb[name] = vjp(fn, *args, **kwargs)
            return out

        bias = lambda m: m.bias  # noqa: E731
        q = call("q", linear, x, self.q_proj.weight, bias(self.q_proj))
        k = call("k", linear, x, self.k_proj.weight, bias(self.k_proj))
        v = call("v", linear, x, self.v_proj.weight, bias(self.v_proj))
        q = q.reshape(B, L, 2 * H, d).transpose(0, 2, 1, 3)  # (B, 2H, L, d): halves interleaved
        k = k.reshape(B, L, 2 * Hkv, d).transpose(0, 2, 1, 3)
        # value head j of the kernel's 2Hkv serves query heads j (H / Hkv) ...: both halves of
        # differential head h read value head h // (H / Hkv), which is j // 2
        v2 = np.repeat(v.reshape(B, L, Hkv, 2 * d).transpose(0, 2, 1, 3), 2, axis=1)
        if self.rotary is not None:
            q, k = call("rope_q", self.rotary, q), call("rope_k", self.rotary, k)
        o = call(
            "sdpa",
            scaled_dot_product_attention,
            q,
            k,
            v2,
            attn_mask,
            is_causal=is_causal,
            enable_gqa=True,
            return_weights=need_weights,
        )
        o, w = o if need_weights else (o, None)
        lam = self.lambda_full()
        a = o[:, 0::2] - lam * o[:, 1::2]  # (B, H, L, 2d)
        n, norm_saved = _rms_norm(a, self.subln.weight, self.eps)
        heads = (n * (1 - self.lambda_init)).astype(x.dtype).transpose(0, 2, 1, 3).reshape(B, L, E)
        out = call("out", linear, heads, self.out_proj.weight, bias(self.out_proj))
        amap = None if w is None else w[:, 0::2] - lam * w[:, 1::2]
        saved = (pb, o, w, lam, norm_saved, x.shape)
        return ((out, amap) if need_weights else out), saved

    def forward(
        self, x: ArrayLike, attn_mask: ArrayLike | None = None, is_causal: bool = False, need_weights: bool = False
    ) -> Array | tuple[Array, Array]:
        return self._run(x, attn_mask, is_causal, need_weights)[0]

    def _vjp_forward(self, x, attn_mask=None, is_causal=False, need_weights=False):
        outputs, saved = self._run(x, attn_mask, is_causal, need_weights)
        return outputs, (self, saved)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, (pb, o, w, lam, norm_saved, shape) = saved
        B, L, E = shape
        H, Hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        dout = cotangents[0]
        dmap = cotangents[1] if len(cotangents) > 1 else None
        if dout is None:
            dout = np.zeros(shape, o.dtype)
        g = pb["out"](dout)
        grads = {f"out_proj.{k}": v for k, v in g.items() if k != "input"}
        dn = g["input"].reshape(B, L, H, 2 * d).transpose(0, 2, 1, 3) * (1 - self.lambda_init)
        da, grads["subln.weight"] = _rms_norm_backward(norm_saved, dn)
        do = np.empty(o.shape, o.dtype)
        do[:, 0::2], do[:, 1::2] = da, -lam * da
        dlam = -np.sum(da * o[:, 1::2])
        if w is not None:
            dw = np.zeros(w.shape, w.dtype)
            if dmap is not None:
                dw[:, 0::2], dw[:, 1::2] = dmap, -lam * dmap
                dlam -= np.sum(dmap * w[:, 1::2])
            g = pb["sdpa"](do.astype(o.dtype), dw)
        else:
            g = pb["sdpa"](do.astype(o.dtype))
        dq, dk, dv2 = g["query"], g["key"], g["value"]
        if self.rotary is not None:
            dq, dk = pb["rope_q"](dq)["x"], pb["rope_k"](dk)["x"]
        dv = dv2.reshape(B, Hkv, 2, L, 2 * d).sum(axis=2).transpose(0, 2, 1, 3).reshape(B, L, Hkv * 2 * d)
        dx = np.zeros(shape, o.dtype)
        for name, dproj in (("q", dq.transpose(0, 2, 1, 3)), ("k", dk.transpose(0, 2, 1, 3)), ("v", dv)):
            g = pb[name](np.ascontiguousarray(dproj.reshape(B, L, math.prod(dproj.shape[2:]))))
            dx += g["input"]
            grads.update({f"{name}_proj.{k}": v for k, v in g.items() if k != "input"})
        p = self._parameters
        e1 = np.exp(np.dot(p["lambda_q1"], p["lambda_k1"]))
        e2 = np.exp(np.dot(p["lambda_q2"], p["lambda_k2"]))
        dtype = o.dtype
        grads["lambda_q1"] = (dlam * e1 * p["lambda_k1"]).astype(dtype)
        grads["lambda_k1"] = (dlam * e1 * p["lambda_q1"]).astype(dtype)
        grads["lambda_q2"] = (-dlam * e2 * p["lambda_k2"]).astype(dtype)
        grads["lambda_k2"] = (-dlam * e2 * p["lambda_q2"]).astype(dtype)
        grads["subln.weight"] = grads["subln.weight"].astype(dtype)
        grads["x"] = dx
        return grads

    def extra_repr(self) -> str:
        return (
            f"{self.embed_dim}, num_heads={self.num_heads}, layer_index={self.layer_index}, "
            f"num_kv_heads={self.num_kv_heads}, lambda_init={self.lambda_init:.4f}"
        )
