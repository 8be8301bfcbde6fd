"""attnc.nn.LinearAttention: multi-head linear attention (elu + 1) or
Performer's FAVOR+, with MultiheadAttention's projections."""

from __future__ import annotations

import numpy as np

from .._args import choice, float_array, int_arg, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..attention import linear as lin
from .linear import Linear
from .module import Module


class LinearAttention(Module):
    """Multi-head linear attention: ``out_proj(linear_attention(q_proj(query),
    k_proj(key), v_proj(value)))`` with the heads split as
    ``torch.nn.MultiheadAttention`` splits them (E = H x head_dim).

    Parameters
    ----------
    embed_dim : int, E, the width of the queries and of the output
    num_heads : int, H, divides E
    feature_map : "elu" (Katharopoulos et al. 2020) or "favor+" (Performer)
    num_features : int or None, FAVOR+'s M (random features per head; default
        round(d log d) for head width d, Performer's usual choice)
    bias : bool, biases in the four projections
    eps : float >= 0, added to each denominator (:func:`attnc.linear_attention`)
    kdim, vdim : int or None (E), the widths of key and value
    dtype : float32 or float64
    seed : int or None, for the projections' initialisation (torch.nn.Linear's)
    projection_seed : int, FAVOR+'s random projection
        (:func:`attnc.performer_projection`, orthogonal), shared by the heads;
        a fixed function of the seed, so a saved module loads with the same
        features. It is no parameter: it gets no gradient.

    ``state_dict()``: ``q_proj.weight`` (E, E), ``k_proj.weight`` (E, kdim),
    ``v_proj.weight`` (E, vdim), ``out_proj.weight`` (E, E) and their biases
    (E,).

    ``forward(query, key, value, key_padding_mask=None, is_causal=False)``:
    query (B, L, E), key (B, S, kdim), value (B, S, vdim), float32 or float64
    -> output (B, L, E); key_padding_mask (B, S) bool, True = ignore (torch's
    meaning); is_causal: position i attends to j <= i (L = S).
    ``attnc.vjp(module, query, key, value, ...)`` gives the gradients of the
    inputs and of every parameter, keyed by state_dict name.

    Example
    -------
    >>> m = attnc.nn.LinearAttention(8, 2, feature_map="favor+", seed=0)
    >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    >>> m(x, x, x, is_causal=True).shape
    (2, 5, 8)
    >>> sorted(m.state_dict())[:2], m.projection.shape
    (['k_proj.bias', 'k_proj.weight'], (5, 4))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        feature_map: str = "elu",
        num_features: int | None = None,
        bias: bool = True,
        eps: float = 1e-6,
        kdim: int | None = None,
        vdim: int | None = None,
        *,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
        projection_seed: int = 0,
    ) -> None:
        super().__init__(dtype)
        embed_dim, num_heads = int_arg("embed_dim", embed_dim), int_arg("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.feature_map = choice(feature_map, lin.FEATURE_MAPS, "feature_map")
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        self.embed_dim, self.num_heads, self.eps = embed_dim, num_heads, eps
        self.head_dim = embed_dim // num_heads
        self.kdim = int_arg("kdim", kdim) if kdim is not None else embed_dim
        self.vdim = int_arg("vdim", vdim) if vdim is not None else embed_dim
        rng = np.random.default_rng(seed)
        E = embed_dim
        self.q_proj = Linear(E, E, bias=bias, dtype=dtype, seed=int(rng.integers(2**63)))
        self.k_proj = Linear(self.kdim, E, bias=bias, dtype=dtype, seed=int(rng.integers(2**63)))
        self.v_proj = Linear(self.vdim, E, bias=bias, dtype=dtype, seed=int(rng.integers(2**63)))
        self.out_proj = Linear(E, E, bias=bias, dtype=dtype, seed=int(rng.integers(2**63)))
        self._projection = None
        if feature_map == "favor+":
            m = (
                lin.default_num_features(self.head_dim)
                if num_features is None
                else int_arg("num_features", num_features)
            )
            self._projection = lin.performer_projection(m, self.head_dim, seed=projection_seed)

    @property
    def projection(self) -> Array | None:
        """FAVOR+'s random projection (M, head_dim) in the module's dtype (None for elu)."""
        return None if self._projection is None else self._projection.astype(self.dtype)

    def _heads(self, x):
        """(B, T, E) -> (B, H, T, head_dim)."""
        B, T, _ = x.shape
        return np.ascontiguousarray(x.reshape(B, T, self.num_heads, self.head_dim).transpose(0, 2, 1, 3))

    def _merge(self, x):
        """(B, H, T, head_dim) -> (B, T, E)."""
        B, _, T, _ = x.shape
        return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(B, T, self.embed_dim)

    def _vjp_forward(self, query, key, value, key_padding_mask=None, is_causal=False):
        arrays = []
        for a, name, width in ((query, "query", self.embed_dim), (key, "key", self.kdim), (value, "value", self.vdim)):
            a = float_array(a, name)
            if a.ndim != 3 or a.shape[2] != width:
                raise ValueError(f"{name} has shape {shape_str(a.shape)}, expected (B, T, {width})")
            if a.dtype != self.dtype:
                raise TypeError(f"{name} has dtype {a.dtype}, the module's is {self.dtype}")
            arrays.append(a)
        projected, saved = [], []
        for a, layer in zip(arrays, (self.q_proj, self.k_proj, self.v_proj)):
            y, s = layer._vjp_forward(a)
            projected.append(self._heads(y))
            saved.append(s)
        heads, attn_saved = lin._forward(
            *projected,
            causal=is_causal,
            feature_map=self.feature_map,
            projection=self.projection,
            key_padding_mask=key_padding_mask,
            eps=self.eps,
        )
        out, out_saved = self.out_proj._vjp_forward(self._merge(heads))
        return out, (saved, attn_saved, out_saved)

    def _layer_backward(self, grads, layer, saved, d):
        """The input's gradient of projection `layer` for d; its parameters' into grads."""
        g = getattr(self, layer)._vjp_backward(saved, (d,))
        grads.update({f"{layer}.{n}": g[n] for n in ("weight", "bias") if n in g})
        return g["input"]

    def _vjp_backward(self, saved, cotangents):
        proj_saved, attn_saved, out_saved = saved
        grads: dict = {}
        dmerged = self._layer_backward(grads, "out_proj", out_saved, cotangents[0])
        dattn = lin._backward(attn_saved, (self._heads(dmerged),))
        for name, layer, s in zip(lin.NAMES, ("q_proj", "k_proj", "v_proj"), proj_saved):
            grads[name] = self._layer_backward(grads, layer, s, self._merge(dattn[name]))
        return grads

    def forward(
        self,
        query: ArrayLike,
        key: ArrayLike,
        value: ArrayLike,
        key_padding_mask: ArrayLike | None = None,
        is_causal: bool = False,
    ) -> Array:
        return self._vjp_forward(query, key, value, key_padding_mask, is_causal)[0]

    def extra_repr(self) -> str:
        m = "" if self._projection is None else f", num_features={self._projection.shape[0]}"
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, feature_map={self.feature_map!r}{m}"
