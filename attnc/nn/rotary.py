"""attnc.nn.rotary_embedding and attnc.nn.RotaryEmbedding: rotary position
embeddings (RoPE; Su et al. 2021, RoFormer) in C (csrc/ops/nn/rotary.c),
forward and backward, in the two layouts checkpoints use."""

from __future__ import annotations

import numbers

import numpy as np

from .. import _core
from .._args import as_array, float_array, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register
from .module import Module

Positions = ArrayLike | int | None


def _positions(positions, x_shape):
    """positions as the C kernel takes them: float64 with x's dims but D,
    each leading dim x's or 1. None is 0..L-1, an int n is n..n+L-1 (the
    new tokens after a cache of n), an array (L,) or (..., L) broadcasts."""
    L = x_shape[-2]
    lead = len(x_shape) - 1
    if positions is None or (isinstance(positions, numbers.Integral) and not isinstance(positions, bool)):
        offset = 0 if positions is None else int(positions)
        if offset < 0:
            raise ValueError(f"positions (an offset) must be >= 0, got {offset}")
        return np.arange(offset, offset + L, dtype=np.float64).reshape((1,) * (lead - 1) + (L,))
    p = as_array(positions, "positions")
    if p.dtype.kind not in "iuf":
        raise TypeError(f"positions must be an int offset or an array of numbers, got dtype {p.dtype}")
    if p.ndim < 1 or p.ndim > lead or p.shape[-1] not in (1, L):
        raise ValueError(
            f"positions has shape {shape_str(p.shape)}: expected (L,) or (..., L) with L = {L}, "
            f"broadcasting to x's {shape_str(x_shape[:-1])}"
        )
    p = p.astype(np.float64).reshape((1,) * (lead - p.ndim) + p.shape)
    if not np.isfinite(p).all():
        raise ValueError("positions must be finite")
    return p


def _rotary_dim(rotary_dim, D):
    if rotary_dim is None:
        rotary_dim = D
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, numbers.Integral):
        raise TypeError(f"rotary_dim must be an int or None, got {type(rotary_dim).__name__}")
    if rotary_dim < 0 or rotary_dim > D or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even and in [0, D = {D}], got {rotary_dim}")
    return int(rotary_dim)


def _forward(x, positions=None, *, base=10000.0, rotary_dim=None, interleaved=False):
    a = float_array(x, "x")
    if a.ndim < 2:
        raise ValueError(f"x must be (..., L, D), got shape {shape_str(a.shape)}")
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not (0 < base < np.inf):
        raise ValueError(f"base must be a positive finite number, got {base!r}")
    options = dict(
        positions=_positions(positions, a.shape),
        base=float(base),
        rotary_dim=_rotary_dim(rotary_dim, a.shape[-1]),
        interleaved=bool(interleaved),
    )
    y = np.empty(a.shape, a.dtype)
    if y.size:
        _core.rotary_forward(output=y, input=a, **options)
    return y, (a.shape, a.dtype, options)


def _backward(saved, cotangents):
    shape, dtype, options = saved
    (dy,) = cotangents
    if dy is None:
        return {"x": np.zeros(shape, dtype)}
    dx = np.empty(shape, dy.dtype)
    if dx.size:
        _core.rotary_backward(dinput=dx, doutput=dy, **options)
    return {"x": dx}


def rotary_embedding(
    x: ArrayLike,
    positions: Positions = None,
    *,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    interleaved: bool = False,
) -> Array:
    """Rotary position embedding (RoPE; Su et al. 2021) of queries or keys, in C.

    Feature pair i of the first ``rotary_dim`` features of x[..., l, :] turns by
    the angle θ = p_l · base^(−2i / rotary_dim), p_l the position of row l:
    (a, b) → (a cos θ − b sin θ, b cos θ + a sin θ). The other features pass
    through. Two layouts pair the features differently:

    - ``interleaved=False`` (the default): pair i is (x[i], x[i + rotary_dim/2])
      ("rotate_half"), the layout of GPT-NeoX and of Hugging Face's Llama,
      Mistral and Qwen checkpoints (``apply_rotary_pos_emb``);
    - ``interleaved=True``: pair i is (x[2i], x[2i + 1]), the original
      RoFormer's and GPT-J's (``rotate_every_two``) and Meta's own Llama code.

    Since a rotation by θ_m then by −θ_n is one by θ_m − θ_n, the dot product
    of a query turned at position m and a key turned at n depends on m − n
    only. The angles, their cosines and sines are computed in float64 and
    then rounded to x's dtype, so float32 and float64 agree to float32's
    precision. ``attnc.vjp(rotary_embedding, x, ...)`` gives "x": the
    cotangent turned back.

    Parameters
    ----------
    x : (..., L, D) array, float32 or float64, any strides, e.g. (B, H, L, E)
    positions : None (0, ..., L − 1); an int n (n, ..., n + L − 1: the new
        tokens after a KV cache of n); or an array of positions, (L,) or
        (..., L) broadcasting to x's dims without D (one row per sequence, for
        left-padded batches), ints or floats (scaled positions)
    base : float > 0, the wavelengths' base (10000 in RoFormer and Llama 1/2,
        500000 in Llama 3)
    rotary_dim : even int in [0, D], or None (D): how many leading features
        turn (GPT-NeoX's rotary_pct, GPT-J's rotary_dim)
    interleaved : bool, the pairing (above)

    Returns
    -------
    array, x's shape and dtype, C-contiguous

    Example
    -------
    >>> x = np.ones((1, 3, 4))
    >>> attnc.nn.rotary_embedding(x, base=1.0).round(3)    # every pair turns by the position
    array([[[ 1.   ,  1.   ,  1.   ,  1.   ],
            [-0.301, -0.301,  1.382,  1.382],
            [-1.325, -1.325,  0.493,  0.493]]])
    >>> q = np.random.rand(2, 4, 5, 8); k = np.random.rand(2, 4, 5, 8)
    >>> s1 = attnc.nn.rotary_embedding(q) @ attnc.nn.rotary_embedding(k).swapaxes(-1, -2)
    >>> s2 = attnc.nn.rotary_embedding(q, 7) @ attnc.nn.rotary_embedding(k, 7).swapaxes(-1, -2)
    >>> bool(np.allclose(s1, s2))    # shifting every position changes no score
    True
    """
    return _forward(x, positions, base=base, rotary_dim=rotary_dim, interleaved=interleaved)[0]


register(rotary_embedding, _forward, _backward)


class RotaryEmbedding(Module):
    """``attnc.nn.rotary_embedding`` as a module (no parameters).

    Parameters
    ----------
    dim : int, D, the width of the arrays it turns (a head's width)
    base : float > 0, the wavelengths' base
    rotary_dim : even int in [0, dim] or None (dim): the features that turn
    interleaved : bool, the pairing: False pairs (x[i], x[i + rotary_dim/2])
        (GPT-NeoX, Hugging Face Llama), True pairs (x[2i], x[2i + 1])
        (RoFormer, GPT-J)
    dtype : float32 or float64 (``state_dict()`` is empty)

    ``forward(x, positions=None)``: x (..., L, dim) float32 or float64 ->
    the same shape and dtype; positions as rotary_embedding takes them (an int
    is the cache length). ``attnc.vjp(module, x)`` gives "x".

    Example
    -------
    >>> rope = attnc.nn.RotaryEmbedding(8, rotary_dim=4)
    >>> q = np.random.rand(2, 4, 5, 8).astype(np.float32)
    >>> out = rope(q)
    >>> out.shape, out.dtype, bool((out[..., 4:] == q[..., 4:]).all())
    ((2, 4, 5, 8), dtype('float32'), True)
    >>> bool(np.allclose(rope(q[:, :, 3:], 3), out[:, :, 3:]))    # positions after a cache of 3
    True
    """

    dim: int
    base: float
    rotary_dim: int
    interleaved: bool

    def __init__(
        self,
        dim: int,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        interleaved: bool = False,
        *,
        dtype: DTypeLike = np.float32,
    ) -> None:
        super().__init__(dtype)
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or dim < 0:
            raise ValueError(f"dim must be an int >= 0, got {dim!r}")
        if isinstance(base, bool) or not isinstance(base, numbers.Real) or not (0 < base < np.inf):
            raise ValueError(f"base must be a positive finite number, got {base!r}")
        self.dim, self.base = int(dim), float(base)
        self.rotary_dim = _rotary_dim(rotary_dim, self.dim)
        self.interleaved = bool(interleaved)

    def _checked(self, x):
        """x as an array whose last dim is the module's, and the options."""
        a = float_array(x, "x")
        if a.shape[-1:] != (self.dim,):
            raise ValueError(f"x has shape {shape_str(a.shape)}: its last dim must be dim = {self.dim}")
        return a, dict(base=self.base, rotary_dim=self.rotary_dim, interleaved=self.interleaved)

    def forward(self, x: ArrayLike, positions: Positions = None) -> Array:
        a, options = self._checked(x)
        return rotary_embedding(a, positions, **options)

    def _vjp_forward(self, x, positions=None):
        a, options = self._checked(x)
        return _forward(a, positions, **options)

    _vjp_backward = staticmethod(_backward)

    def extra_repr(self) -> str:
        return f"{self.dim}, base={self.base:g}, rotary_dim={self.rotary_dim}, interleaved={self.interleaved}"
