"""attnc.nn.MultiheadLatentAttention: multi-head latent attention (MLA;
DeepSeek-AI 2024, "DeepSeek-V2", sec. 2.1) on attnc's fused kernel, with its
latent KV cache (attnc.nn.LatentCache) and the absorbed form."""

from __future__ import annotations

import numbers

import numpy as np

from .. import _core
from .._args import float_array, int_arg, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..attention.sdpa import scaled_dot_product_attention
from ..grad import vjp
from .linear import Linear, linear
from .module import Module
from .normalization import _rms_norm, _rms_norm_backward, _RMSWeight
from .rotary import rotary_embedding


class LatentCache:
    """The KV cache of a MultiheadLatentAttention layer: per token only the
    compressed latent c_KV (kv_lora_rank) and the shared RoPE key
    (qk_rope_head_dim), not every head's keys and values.

    ``latent`` (B, T, kv_lora_rank) and ``rope_key`` (B, T, qk_rope_head_dim)
    (read-only views; None before the first call), ``length`` T, ``nbytes``
    the bytes of the T cached tokens. Both live side by side in one buffer
    that doubles when full, so a decoding step copies nothing already cached.

    Example
    -------
    >>> mla = attnc.nn.MultiheadLatentAttention(32, 4, kv_lora_rank=8, qk_rope_head_dim=4, seed=0)
    >>> cache = attnc.nn.LatentCache()
    >>> x = np.random.rand(1, 6, 32).astype(np.float32)
    >>> _ = mla(x[:, :5], cache=cache); _ = mla(x[:, 5:], cache=cache)
    >>> cache.length, cache.latent.shape, cache.rope_key.shape, cache.nbytes
    (6, (1, 6, 8), (1, 6, 4), 288)
    """

    def __init__(self) -> None:
        self._buffer: Array | None = None  # (B, capacity, kv_lora_rank + qk_rope_head_dim)
        self._width = 0  # kv_lora_rank: where the RoPE keys start
        self.length = 0

    def _joint(self) -> Array | None:
        """The cached tokens' [latent, RoPE key] rows, (B, T, d_c + d_h^R), read-only."""
        return None if self._buffer is None else _read_only(self._buffer[:, : self.length])

    @property
    def latent(self) -> Array | None:
        joint = self._joint()
        return None if joint is None else joint[..., : self._width]

    @property
    def rope_key(self) -> Array | None:
        joint = self._joint()
        return None if joint is None else joint[..., self._width :]

    @property
    def nbytes(self) -> int:
        joint = self._joint()
        return 0 if joint is None else joint.nbytes

    def _append(self, latent, rope_key) -> Array:
        """Cache t more tokens' latents (B, t, d_c) and RoPE keys (B, t, d_h^R);
        -> every cached token's [latent, RoPE key], (B, T, d_c + d_h^R)."""
        B, t, dc = latent.shape
        width = dc + rope_key.shape[2]
        buf = self._buffer
        if buf is not None and (
            buf.shape[0] != B or self._width != dc or buf.shape[2] != width or buf.dtype != latent.dtype
        ):
            rope = buf.shape[2] - self._width
            held = f"({buf.shape[0]}, T, {self._width}) {buf.dtype} latents with {rope}-wide RoPE keys"
            raise ValueError(
                f"cache holds {held}: this call's are {shape_str(latent.shape)} {latent.dtype} with "
                f"{rope_key.shape[2]}-wide RoPE keys (a cache serves one layer and one batch)"
            )
        if buf is None or self.length + t > buf.shape[1]:
            grown = np.empty((B, max(2 * self.length, self.length + t, 16), width), latent.dtype)
            if buf is not None:
                grown[:, : self.length] = buf[:, : self.length]
            buf = self._buffer = grown
            self._width = dc
        buf[:, self.length : self.length + t, :dc] = latent
        buf[:, self.length : self.length + t, dc:] = rope_key
        self.length += t
        return _read_only(buf[:, : self.length])

    def __repr__(self) -> str:
        return f"LatentCache(length={self.length}, nbytes={self.nbytes})"


def _read_only(view: Array) -> Array:
    view.flags.writeable = False
    return view


def _causal(L, S):
    """(L, S) bool, True = may attend: the L new queries are the last L of S positions."""
    return np.arange(S)[None, :] <= np.arange(S - L, S)[:, None]


class MultiheadLatentAttention(Module):
    """Multi-head latent attention (DeepSeek-V2, sec. 2.1), causal self-attention.

    Keys and values come from a low-rank joint compression of the input,
    c_KV = RMSNorm(W_DKV h) (kv_lora_rank wide): k_C = W_UK c_KV, v = W_UV
    c_KV, per head. Queries optionally from their own compression c_Q =
    RMSNorm(W_DQ h), q_C = W_UQ c_Q (q_lora_rank; else q_C = W_Q h). RoPE is
    decoupled: q_R = RoPE(W_QR c_Q) per head and one key k_R = RoPE(W_KR h)
    shared by the heads; head i attends with [q_C,i; q_R,i] · [k_C,i; k_R] /
    sqrt(qk_nope_head_dim + qk_rope_head_dim). A cache (LatentCache) keeps
    only c_KV and k_R per token. The layout and names are DeepSeek's released
    code's (and Hugging Face's DeepseekV3Attention's, whose RMSNorms on the
    latents the paper's equations leave out): W_UQ and W_QR are the rows of
    ``q_b_proj`` (``q_proj``), W_DKV and W_KR of ``kv_a_proj_with_mqa``, W_UK
    and W_UV of ``kv_b_proj``, per head.

    ``absorbed=True`` computes the same attention in the absorbed form: W_UK
    folded into the queries (q_C,i W_UK,i is compared with c_KV directly)
    and W_UV into the output projection (W_O,i W_UV,i), so keys and values
    are never up-projected: one key/value head of width kv_lora_rank +
    qk_rope_head_dim (multi-query attention on the latent), the form that
    makes decoding from the small cache cheap. Both forms give the same
    outputs (to rounding).

    Parameters
    ----------
    embed_dim : int, E
    num_heads : int, H
    kv_lora_rank : int, d_c, the latent's width
    q_lora_rank : int or None, d_c', the queries' compression (None: none)
    qk_nope_head_dim : int or None (E / H), d_h, the compressed part of a head's queries and keys
    qk_rope_head_dim : int or None (E / H / 2, even), d_h^R, the RoPE part
    v_head_dim : int or None (E / H), a head's values
    rope_base : float, RoPE's base
    rope_interleaved : bool, RoPE on pairs (2i, 2i + 1) (DeepSeek's, the default) or (i, i + d/2)
    eps : float, the latents' RMSNorm eps
    dtype : float32 or float64
    seed : int or None, for the initialisation (torch's Linear's)

    ``state_dict()``: ``q_a_proj.weight`` (d_c', E), ``q_a_layernorm.weight``
    (d_c',), ``q_b_proj.weight`` (H (d_h + d_h^R), d_c') (or ``q_proj.weight``
    (H (d_h + d_h^R), E) without q_lora_rank), ``kv_a_proj_with_mqa.weight``
    (d_c + d_h^R, E), ``kv_a_layernorm.weight`` (d_c,), ``kv_b_proj.weight``
    (H (d_h + v_head_dim), d_c), ``o_proj.weight`` (E, H v_head_dim).

    ``forward(x, *, cache=None, absorbed=False, is_causal=True)``: x (B, L, E)
    float32 or float64 -> (B, L, E); with a cache the new tokens' positions
    start at cache.length and they attend to the cached ones (the cache grows
    by L). ``attnc.vjp(module, x)`` (without a cache, naive form) gives "x"
    and every parameter's gradient by state_dict name.

    Example
    -------
    >>> mla = attnc.nn.MultiheadLatentAttention(32, 4, kv_lora_rank=8, q_lora_rank=12, seed=0, dtype=np.float64)
    >>> x = np.random.rand(2, 5, 32)
    >>> out = mla(x)
    >>> out.shape, bool(np.allclose(mla(x, absorbed=True), out, atol=1e-12))
    ((2, 5, 32), True)
    """

    embed_dim: int
    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    kv_b_proj: Linear
    o_proj: Linear

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        kv_lora_rank: int,
        *,
        q_lora_rank: int | None = None,
        qk_nope_head_dim: int | None = None,
        qk_rope_head_dim: int | None = None,
        v_head_dim: int | None = None,
        rope_base: float = 10000.0,
        rope_interleaved: bool = True,
        eps: float = 1e-6,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        E, H = int_arg("embed_dim", embed_dim), int_arg("num_heads", num_heads)
        hd = E // H
        self.embed_dim, self.num_heads = E, H
        self.kv_lora_rank = int_arg("kv_lora_rank", kv_lora_rank)
        self.q_lora_rank = None if q_lora_rank is None else int_arg("q_lora_rank", q_lora_rank)
        self.qk_nope_head_dim = int_arg("qk_nope_head_dim", hd if qk_nope_head_dim is None else qk_nope_head_dim)
        dr = hd // 2 // 2 * 2 if qk_rope_head_dim is None else qk_rope_head_dim
        self.qk_rope_head_dim = int_arg("qk_rope_head_dim", dr, low=0)
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim must be even, got {self.qk_rope_head_dim}")
        self.v_head_dim = int_arg("v_head_dim", hd if v_head_dim is None else v_head_dim)
        if isinstance(rope_base, bool) or not isinstance(rope_base, numbers.Real) or not 0 < rope_base < np.inf:
            raise ValueError(f"rope_base must be a positive finite number, got {rope_base!r}")
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0:
            raise ValueError(f"eps must be a number >= 0, got {eps!r}")
        self.rope_base, self.rope_interleaved, self.eps = float(rope_base), bool(rope_interleaved), float(eps)
        rng = np.random.default_rng(seed)
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        dqk, dc, dr = self.qk_nope_head_dim + self.qk_rope_head_dim, self.kv_lora_rank, self.qk_rope_head_dim
        if self.q_lora_rank is None:
            self.q_proj = Linear(E, H * dqk, bias=False, dtype=dtype, seed=sub())
        else:
            self.q_a_proj = Linear(E, self.q_lora_rank, bias=False, dtype=dtype, seed=sub())
            self.q_a_layernorm = _RMSWeight(self.q_lora_rank, dtype)
            self.q_b_proj = Linear(self.q_lora_rank, H * dqk, bias=False, dtype=dtype, seed=sub())
        self.kv_a_proj_with_mqa = Linear(E, dc + dr, bias=False, dtype=dtype, seed=sub())
        self.kv_a_layernorm = _RMSWeight(dc, dtype)
        self.kv_b_proj = Linear(dc, H * (self.qk_nope_head_dim + self.v_head_dim), bias=False, dtype=dtype, seed=sub())
        self.o_proj = Linear(H * self.v_head_dim, E, bias=False, dtype=dtype, seed=sub())

    # -- the pieces -----------------------------------------------------------------

    def _latents(self, x, call, offset):
        """(q_nope (B, H, L, d_h), q_pe (B, H, L, d_h^R), c_KV (B, L, d_c),
        k_R (B, L, d_h^R), saved norms)."""
        B, L, _ = x.shape
        H, dn, dc = self.num_heads, self.qk_nope_head_dim, self.kv_lora_rank
        norms = {}
        if self.q_lora_rank is None:
            q = call("q", linear, x, self.q_proj.weight)
        else:
            qa = call("q_a", linear, x, self.q_a_proj.weight)
            qn, norms["q"] = _rms_norm(qa, self.q_a_layernorm.weight, self.eps)
            q = call("q_b", linear, qn, self.q_b_proj.weight)
        q = q.reshape(B, L, H, dn + self.qk_rope_head_dim).transpose(0, 2, 1, 3)
        kva = call("kv_a", linear, x, self.kv_a_proj_with_mqa.weight)
        c, norms["kv"] = _rms_norm(kva[..., :dc], self.kv_a_layernorm.weight, self.eps)
        rope = dict(base=self.rope_base, interleaved=self.rope_interleaved)
        q_pe = call("rope_q", rotary_embedding, q[..., dn:], offset, **rope)
        k_pe = call("rope_k", rotary_embedding, kva[:, None, :, dc:], offset, **rope)[:, 0]
        return q[..., :dn], q_pe, c, k_pe, norms

    def _naive(self, q_nope, q_pe, c, k_pe, mask, call):
        """Keys and values up-projected from the latent: (B, L, E)."""
        B, H, L, dn = q_nope.shape
        S = c.shape[1]
        kv = call("kv_b", linear, c, self.kv_b_proj.weight).reshape(B, S, H, dn + self.v_head_dim).transpose(0, 2, 1, 3)
        k = np.concatenate([kv[..., :dn], np.broadcast_to(k_pe[:, None], (B, H, S, k_pe.shape[-1]))], axis=-1)
        q = np.concatenate([q_nope, q_pe], axis=-1)
        scale = 1.0 / np.sqrt(q.shape[-1])
        o = call("sdpa", scaled_dot_product_attention, q, k, kv[..., dn:], mask, scale=scale)
        return call("o", linear, o.transpose(0, 2, 1, 3).reshape(B, L, H * self.v_head_dim), self.o_proj.weight)

    def absorbed_weights(self) -> tuple[Array, Array]:
        """The absorbed form's matrices: W_UK (H, d_h, d_c), the query side's
        per-head fold, and the output projection with W_UV folded in (E, H d_c).
        Read-only; folded once and again only when kv_b_proj's or o_proj's
        weights change (a decoding step would otherwise fold them each time)."""
        weights = [self.kv_b_proj.weight, self.o_proj.weight]
        stamp = _core.fingerprints(weights) + tuple(w.shape for w in weights)
        folded = self.__dict__.get("_folded")
        if folded is None or folded[0] != stamp:
            H, dn, dc, E = self.num_heads, self.qk_nope_head_dim, self.kv_lora_rank, self.embed_dim
            w = weights[0].reshape(H, dn + self.v_head_dim, dc)
            wo = weights[1].reshape(E, H, self.v_head_dim).transpose(1, 0, 2)
            w_uk, w_out = w[:, :dn].copy(), np.matmul(wo, w[:, dn:]).transpose(1, 0, 2).reshape(E, H * dc)
            w_uk.flags.writeable = w_out.flags.writeable = False
            folded = self._folded = (stamp, w_uk, w_out)
        return folded[1], folded[2]

    def _absorbed(self, q_nope, q_pe, ck, mask):
        """Attention on the latent itself (one key/value head): (B, L, E);
        ck (B, S, d_c + d_h^R) the tokens' [latent, RoPE key]."""
        B, H, L, _ = q_nope.shape
        w_uk, w_out = self.absorbed_weights()
        q = np.concatenate([np.matmul(q_nope, w_uk), q_pe], axis=-1)
        scale = 1.0 / np.sqrt(self.qk_nope_head_dim + self.qk_rope_head_dim)
        k, v = ck[:, None], ck[:, None, :, : self.kv_lora_rank]
        o = scaled_dot_product_attention(q, k, v, mask, scale=scale, enable_gqa=True)
        return linear(o.transpose(0, 2, 1, 3).reshape(B, L, H * self.kv_lora_rank), w_out)

    def _run(self, x, cache, absorbed, is_causal, pb):
        a = float_array(x, "x")
        if a.ndim != 3 or a.shape[-1] != self.embed_dim:
            raise ValueError(f"x has shape {shape_str(a.shape)}, expected (B, L, E) with E = {self.embed_dim}")
        if a.dtype != self.dtype:
            raise TypeError(f"x has dtype {a.dtype}, but the module's parameters are {self.dtype}")
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(f"cache must be an attnc.nn.LatentCache or None, got {type(cache).__name__}")

        def call(name, fn, *args, **kwargs):
            if pb is None:
                return fn(*args, **kwargs)
            out, pb[name] = vjp(fn, *args, **kwargs)
            return out

        offset = 0 if cache is None else cache.length
        q_nope, q_pe, c, k_pe, norms = self._latents(a, call, offset)
        ck = None if cache is None else cache._append(c, k_pe)
        if ck is not None:
            c, k_pe = ck[..., : self.kv_lora_rank], ck[..., self.kv_lora_rank :]
        L, S = a.shape[1], c.shape[1]
        mask = _causal(L, S) if is_causal and L > 1 else None  # one new query: it sees every cached token
        if not absorbed:
            return self._naive(q_nope, q_pe, c, k_pe, mask, call), norms
        ck = np.concatenate([c, k_pe], axis=-1) if ck is None else ck
        return self._absorbed(q_nope, q_pe, ck, mask), norms

    def forward(
        self, x: ArrayLike, *, cache: LatentCache | None = None, absorbed: bool = False, is_causal: bool = True
    ) -> Array:
        return self._run(x, cache, absorbed, is_causal, None)[0]

    def _vjp_forward(self, x, *, is_causal=True):
        pb: dict = {}
        out, norms = self._run(x, None, False, is_causal, pb)
        return out, (self, pb, norms, np.shape(x))

    @staticmethod
    def _vjp_backward(saved, cotangents):
        self, pb, norms, shape = saved
        B, L, E = shape
        H, dn = self.num_heads, self.qk_nope_head_dim
        (dout,) = cotangents
        dout = np.zeros(shape, self.dtype) if dout is None else dout
        grads = {}

        def back(name, d, param):
            g = pb[name](np.ascontiguousarray(d))
            grads[f"{param}.weight"] = g["weight"]
            return g["input"]

        do = back("o", dout, "o_proj").reshape(B, L, H, self.v_head_dim).transpose(0, 2, 1, 3)
        g = pb["sdpa"](do)
        dq, dk = g["query"], g["key"]
        dkv = np.concatenate([dk[..., :dn], g["value"]], axis=-1).transpose(0, 2, 1, 3)
        dkv = dkv.reshape(B, L, H * (dn + self.v_head_dim))
        dc_lat = back("kv_b", dkv, "kv_b_proj")
        dk_pe = pb["rope_k"](np.ascontiguousarray(dk[..., dn:].sum(axis=1)[:, None]))["x"][:, 0]
        dc_raw, grads["kv_a_layernorm.weight"] = _rms_norm_backward(norms["kv"], dc_lat)
        dx = back("kv_a", np.concatenate([dc_raw, dk_pe], axis=-1), "kv_a_proj_with_mqa")
        dq_pe = pb["rope_q"](np.ascontiguousarray(dq[..., dn:]))["x"]
        dq = np.concatenate([dq[..., :dn], dq_pe], axis=-1).transpose(0, 2, 1, 3)
        dq = dq.reshape(B, L, H * (dn + self.qk_rope_head_dim))
        if self.q_lora_rank is None:
            dx = dx + back("q", dq, "q_proj")
        else:
            dqn = back("q_b", dq, "q_b_proj")
            dqa, grads["q_a_layernorm.weight"] = _rms_norm_backward(norms["q"], dqn)
            dx = dx + back("q_a", dqa, "q_a_proj")
        grads["x"] = dx
        return grads

    def extra_repr(self) -> str:
        return (
            f"{self.embed_dim}, num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, "
            f"q_lora_rank={self.q_lora_rank}, qk_nope_head_dim={self.qk_nope_head_dim}, "
            f"qk_rope_head_dim={self.qk_rope_head_dim}, v_head_dim={self.v_head_dim}"
        )
