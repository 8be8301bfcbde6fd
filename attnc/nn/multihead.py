"""attnc.nn.MultiheadAttention: torch.nn.MultiheadAttention (batch first)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._args import int_arg
from .._typing import Array, ArrayLike, DTypeLike
from ..attention import multihead
from ..attention._spec import variant_options
from ..attention.multihead import kv_heads
from ..attention.sdpa import alibi_slopes
from .linear import Linear
from .module import Module


class MultiheadAttention(Module):
    """``torch.nn.MultiheadAttention(embed_dim, num_heads, ..., batch_first=True)``.

    Parameters
    ----------
    embed_dim : int, E, the width of the queries and of the output
    num_heads : int, H, divides E
    dropout : float in [0, 1], on the attention weights (training mode only)
    bias : bool, whether there are ``in_proj_bias`` and ``out_proj.bias``
    add_bias_kv : bool, learned ``bias_k``/``bias_v`` appended to the keys and values
    add_zero_attn : bool, a zero key and value appended
    kdim, vdim : int or None (E), the widths of key and value
    batch_first : must be True (attnc's modules are batch first)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation and the dropout streams
    num_kv_heads : int dividing num_heads, or None (num_heads): grouped-query
        attention (1: multi-query attention), as attnc.multi_head_attention
        takes it: num_kv_heads key and value heads of width E / H, E_kv =
        num_kv_heads E / H
    sinks : bool, a learned attention sink per head (gpt-oss's ``sinks``):
        the parameter ``sinks`` (H,), initialised to 0, joins each row's
        softmax normaliser (attnc.scaled_dot_product_attention's ``sinks``)
    alibi : bool, ALiBi (Press et al. 2022): the fixed slopes
        attnc.alibi_slopes(H) (not a parameter) as ``alibi_slopes``
    window : (left, right) or None, a sliding window: query i attends keys
        i - left <= j <= i + right (either side None: unbounded); Gemma 2's
        ``sliding_window`` W with causal attention is ``window=(W - 1, 0)``
    softcap : float > 0 or None, the scores capped to softcap tanh(s / softcap)
        (Gemma 2's ``attn_logit_softcapping``)
    activation : "softmax" or "sigmoid", sigmoid_bias : float or None (-log S
        for S keys): sigmoid attention, p = sigmoid(s + sigmoid_bias) without
        normalisation (Ramapuram et al. 2024); not with sinks

    ``state_dict()`` (torch's names): ``in_proj_weight``
    (3E, E) or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when kdim
    or vdim differ from E, ``in_proj_bias`` (3E,), ``out_proj.weight`` (E, E),
    ``out_proj.bias`` (E,), and ``bias_k``/``bias_v`` (1, 1, E) with
    add_bias_kv. With num_kv_heads < num_heads the projections are always
    separate (torch's names, Hugging Face Llama's ``q_proj``/``k_proj``/
    ``v_proj`` weights): ``q_proj_weight`` (E, E), ``k_proj_weight``
    (E_kv, kdim), ``v_proj_weight`` (E_kv, vdim), ``in_proj_bias``
    (E + 2 E_kv,), ``bias_k``/``bias_v`` (1, 1, E_kv). Initialised as torch does, from ``seed``. Dropout applies in
    training mode only; each call draws its dropout seed from the module's
    generator, so a seeded module replays the same dropout masks.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False, **options)``: query
    (B, L, E), key (B, S, kdim), value (B, S, vdim), float32 or float64 (or
    unbatched, without B) -> ``(output (B, L, E), weights or None)``, the
    weights (B, L, S) averaged over heads or (B, H, L, S), with torch's
    meanings (boolean masks: True = ignore); options: further keyword
    options of attnc.multi_head_attention's fused kernel for this call, other
    than those the module sets: the block masks ``segment_ids`` (B, L) or a
    pair ((B, L), (B, S)), ``prefix_lengths`` (B,) (with is_causal=True and
    no attn_mask), ``block_mask`` (B or 1, H or 1, ceil(L / bq), ceil(S / bk))
    with ``block_size`` (without B for unbatched input), as
    attnc.multi_head_attention takes them. ``attnc.vjp(module, query, key, value, ...)`` gives the gradients
    of the inputs and of every parameter, keyed by state_dict name.

    Example
    -------
    >>> mha = attnc.nn.MultiheadAttention(16, 4, seed=0)
    >>> x = np.random.rand(2, 5, 16).astype(np.float32)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape, float(w.sum(-1).round(6).min())
    ((2, 5, 16), (2, 5, 5), 1.0)
    >>> {k: v.shape for k, v in mha.state_dict().items()}
    {'in_proj_weight': (48, 16), 'in_proj_bias': (48,), 'out_proj.weight': (16, 16), 'out_proj.bias': (16,)}
    >>> mqa = attnc.nn.MultiheadAttention(16, 4, num_kv_heads=1, seed=0)    # multi-query attention
    >>> mqa(x, x, x)[0].shape, mqa.state_dict()["k_proj_weight"].shape
    ((2, 5, 16), (4, 16))
    >>> oss = attnc.nn.MultiheadAttention(16, 4, sinks=True, window=(2, 0), softcap=30.0, seed=0)
    >>> out, w = oss(x, x, x, average_attn_weights=False)
    >>> oss.state_dict()["sinks"].shape, int((w[0, 0, 4] > 0).sum())
    ((4,), 3)
    >>> grads = attnc.vjp(oss, x, x, x, need_weights=False)[1](np.ones_like(out), None)
    >>> grads["sinks"].shape
    (4,)
    >>> sig = attnc.nn.MultiheadAttention(16, 4, activation="sigmoid", sigmoid_bias=-2.0, seed=0)
    >>> out, w = sig(x, x, x, segment_ids=np.array([0, 0, 1, 1, 1]))      # two packed sequences
    >>> int((w[0, 0] > 0).sum()), int((w[0, 4] > 0).sum())                 # keys 0, 1; keys 2..4
    (2, 3)
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = True,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
        num_kv_heads: int | None = None,
        sinks: bool = False,
        alibi: bool = False,
        window: tuple[int | None, int | None] | None = None,
        softcap: float | None = None,
        activation: str = "softmax",
        sigmoid_bias: float | None = None,
    ) -> None:
        super().__init__(dtype)
        if not batch_first:
            raise ValueError("attnc's modules are always batch first (batch_first=True)")
        embed_dim, num_heads = int_arg("embed_dim", embed_dim), int_arg("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        if not 0 <= dropout <= 1:
            raise ValueError(f"dropout must be in [0, 1], got {dropout}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.num_kv_heads = kv_heads(num_kv_heads, num_heads)
        self.kdim = int_arg("kdim", kdim) if kdim is not None else embed_dim
        self.vdim = int_arg("vdim", vdim) if vdim is not None else embed_dim
        self.add_zero_attn = add_zero_attn
        grouped = self.num_kv_heads != num_heads
        self._qkv_same = self.kdim == embed_dim and self.vdim == embed_dim and not grouped
        rng = np.random.default_rng(seed)
        E = embed_dim
        Ekv = self.num_kv_heads * (E // num_heads)

        def xavier_uniform(shape):
            bound = math.sqrt(6.0 / (shape[0] + shape[1]))
            return rng.uniform(-bound, bound, shape)

        if self._qkv_same:
            self._init_parameter("in_proj_weight", (3 * E, E), xavier_uniform)
        else:
            self._init_parameter("q_proj_weight", (E, E), xavier_uniform)
            self._init_parameter("k_proj_weight", (Ekv, self.kdim), xavier_uniform)
            self._init_parameter("v_proj_weight", (Ekv, self.vdim), xavier_uniform)
        self._init_parameter("in_proj_bias", (E + 2 * Ekv,), np.zeros if bias else None)
        std = math.sqrt(2.0 / (2 * Ekv))  # torch's xavier_normal_ on (1, 1, E)
        normal = (lambda shape: rng.normal(0, std, shape)) if add_bias_kv else None
        self._init_parameter("bias_k", (1, 1, Ekv), normal)
        self._init_parameter("bias_v", (1, 1, Ekv), normal)
        self.out_proj = Linear(E, E, bias=bias, dtype=dtype, seed=rng.integers(2**63))
        self.out_proj._initialise(lambda name, p: np.zeros(p.shape) if name == "bias" else None)
        self._rng = rng
        self._init_parameter("sinks", (num_heads,), np.zeros if sinks else None)
        # Fixed options, checked here once (and again, cheaply, by each call).
        self.alibi, self.window, self.softcap = bool(alibi), window, softcap
        self.activation, self.sigmoid_bias = activation, sigmoid_bias
        variant_options(num_heads, self.dtype, kernel=((), 0, 0), **self._fixed)

    @property
    def _fixed(self) -> dict:
        """The fixed options by attnc's argument names (None: off), ALiBi's
        slopes in the module's dtype (it may change: .to)."""
        slopes = alibi_slopes(self.num_heads, self.dtype) if self.alibi else None
        return {
            "alibi_slopes": slopes,
            "window": self.window,
            "softcap": self.softcap,
            "activation": self.activation,
            "sigmoid_bias": self.sigmoid_bias,
        }

    def _variants(self, options: dict) -> dict:
        """The kernel's options of a call: the module's (its sinks parameter,
        ALiBi's slopes, window, softcap, activation, sigmoid_bias) and the
        call's own, which may not repeat one the module sets."""
        mine = {n: v for n, v in self._fixed.items() if v is not None}
        if self._parameters["sinks"] is not None:
            mine["sinks"] = self._parameters["sinks"]
        for name in options.keys() & mine.keys():
            raise TypeError(f"{name} is set by the module (its constructor); do not pass it to forward")
        return {**mine, **options}

    def _kwargs(self, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal, options):
        p = self._parameters
        dropout = self.dropout if self.training else 0.0
        return dict(
            key_padding_mask=key_padding_mask,
            attn_mask=attn_mask,
            need_weights=need_weights,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
            q_proj_weight=p.get("q_proj_weight"),
            k_proj_weight=p.get("k_proj_weight"),
            v_proj_weight=p.get("v_proj_weight"),
            bias_k=p["bias_k"],
            bias_v=p["bias_v"],
            add_zero_attn=self.add_zero_attn,
            dropout_p=dropout,
            seed=int(self._rng.integers(2**63)) if dropout else None,
            num_kv_heads=self.num_kv_heads,
            **self._variants(options),
        )

    def _args(self, query, key, value):
        p = self._parameters
        return (
            query,
            key,
            value,
            self.num_heads,
            p.get("in_proj_weight"),
            p["in_proj_bias"],
            self.out_proj.weight,
            self.out_proj.bias,
        )

    def forward(
        self,
        query: ArrayLike,
        key: ArrayLike,
        value: ArrayLike,
        key_padding_mask: ArrayLike | None = None,
        need_weights: bool = True,
        attn_mask: ArrayLike | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
        **options: Any,
    ) -> tuple[Array, Array | None]:
        return multihead.multi_head_attention(
            *self._args(query, key, value),
            **self._kwargs(key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal, options),
        )

    def _vjp_forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
        **options,
    ):
        return multihead._forward(
            *self._args(query, key, value),
            **self._kwargs(key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal, options),
        )

    @staticmethod
    def _vjp_backward(saved, cotangents):
        grads = multihead._backward(saved, cotangents)
        grads.pop("alibi_slopes", None)  # fixed slopes: not a parameter
        for name in ("weight", "bias"):
            if f"out_proj_{name}" in grads:
                grads[f"out_proj.{name}"] = grads.pop(f"out_proj_{name}")
        return grads
