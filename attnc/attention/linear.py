"""attnc.linear_attention: linear attention (Katharopoulos et al. 2020) and
Performer's FAVOR+ (Choromanski et al. 2021) in C (csrc/ops/linear), with
attnc.performer_projection for FAVOR+'s random features and
attnc.LinearAttentionState for recurrent decoding."""

from __future__ import annotations

import math

import numpy as np

from .. import _core
from .._args import as_array, choice, elementwise_ready, float_array, int_arg, same_dtype, shape_str
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import register

FEATURE_MAPS = {"elu": 0, "favor+": 1}
NAMES = ("query", "key", "value")


def performer_projection(
    num_features: int, dim: int, *, seed: int | None = None, orthogonal: bool = True, dtype: DTypeLike = np.float64
) -> Array:
    """FAVOR+'s random projection: num_features (M) rows w_m in R^dim (E),
    each marginally a standard Gaussian vector.

    With ``orthogonal`` (the paper's orthogonal random features, as
    google-research/performer draws them): blocks of E rows, each the Q of
    the QR decomposition of an (E, E) Gaussian matrix (its columns' signs
    fixed by R's diagonal, so that Q is Haar-distributed), transposed; the
    last block cut to the rows left; then each row rescaled by the norm of
    an independent Gaussian vector in R^E (chi-distributed with E degrees of
    freedom). Rows of one block are exactly orthogonal. Without: i.i.d.
    Gaussian rows. The same seed gives the same bits (NumPy's
    ``default_rng(seed)``).

    Returns
    -------
    projection : array (M, E) of dtype (float32 or float64; drawn in float64)

    Example
    -------
    >>> w = attnc.performer_projection(8, 4, seed=0)
    >>> w.shape
    (8, 4)
    >>> g = w[:4] @ w[:4].T  # one block: orthogonal rows
    >>> bool(np.allclose(g, np.diag(np.diag(g))))
    True
    """
    m, e = int_arg("num_features", num_features, 0), int_arg("dim", dim, 0)
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    rng = np.random.default_rng(seed)
    if not orthogonal or e == 0:
        return rng.standard_normal((m, e)).astype(dtype)
    blocks = []
    for start in range(0, m, e):
        q, r = np.linalg.qr(rng.standard_normal((e, e)))
        q = q * np.where(np.diag(r) < 0, -1.0, 1.0)  # Haar: R's diagonal positive
        blocks.append(q.T[: m - start])
    w = np.concatenate(blocks) if blocks else np.zeros((0, e))
    norms = np.linalg.norm(rng.standard_normal((m, e)), axis=1)
    return (w * norms[:, None]).astype(dtype)


def _options(dtype, batch, keys, feature_map, projection, key_padding_mask, causal, eps):
    """The C call's options: feature map, projection (favor+ only, of the
    call's dtype), key padding mask (bool, (B, S) = (batch, keys)), causal, eps."""
    choice(feature_map, FEATURE_MAPS, "feature_map")
    opts = {"feature_map": FEATURE_MAPS[feature_map], "causal": bool(causal), "eps": eps}
    if feature_map == "favor+":
        if projection is None:
            raise TypeError(
                "feature_map='favor+' needs a projection (M, E): attnc.performer_projection(M, E, seed=...)"
            )
        w = float_array(projection, "projection")
        same_dtype(dtype, projection=w)
        opts["projection"] = np.ascontiguousarray(w)
    elif projection is not None:
        raise ValueError("projection is only used by feature_map='favor+'")
    if key_padding_mask is not None:
        m = as_array(key_padding_mask, "key_padding_mask")
        if m.dtype != np.bool_:
            raise TypeError(f"key_padding_mask must be a boolean array (True = ignore), got dtype {m.dtype}")
        if m.shape != (batch, keys):
            raise ValueError(f"key_padding_mask has shape {shape_str(m.shape)}, expected (B, S) = ({batch}, {keys})")
        opts["key_padding_mask"] = elementwise_ready(m)
    return opts


def _inputs(query, key, value):
    q, k, v = (float_array(a, n) for a, n in zip((query, key, value), NAMES))
    same_dtype(q.dtype, key=k, value=v)
    for a, n, dims in zip((q, k, v), NAMES, ("(B, H, L, E)", "(B, H, S, E)", "(B, H, S, Ev)")):
        if a.ndim != 4:
            raise ValueError(f"{n} has shape {shape_str(a.shape)}; expected {dims}")
    return tuple(elementwise_ready(a) for a in (q, k, v))


def _forward(query, key, value, *, causal=False, feature_map="elu", projection=None, key_padding_mask=None, eps=1e-6):
    q, k, v = _inputs(query, key, value)
    opts = _options(q.dtype, q.shape[0], k.shape[2], feature_map, projection, key_padding_mask, causal, eps)
    out = np.empty(q.shape[:3] + v.shape[3:], q.dtype)
    _core.linear_attention_forward(out=out, query=q, key=k, value=v, **opts)
    return out, (q, k, v, opts)


def _backward(saved, cotangents):
    q, k, v, opts = saved
    (dout,) = cotangents
    grads = {name: np.zeros(a.shape, a.dtype) for name, a in zip(NAMES, (q, k, v))}
    if "projection" in opts:
        grads["projection"] = np.zeros(opts["projection"].shape, q.dtype)
    if dout is not None:
        _core.linear_attention_backward(
            dquery=grads["query"],
            dkey=grads["key"],
            dvalue=grads["value"],
            dprojection=grads.get("projection"),
            dout=dout,
            query=q,
            key=k,
            value=v,
            **opts,
        )
    return grads


def linear_attention(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    *,
    causal: bool = False,
    feature_map: str = "elu",
    projection: ArrayLike | None = None,
    key_padding_mask: ArrayLike | None = None,
    eps: float = 1e-6,
) -> Array:
    r"""Linear attention: softmax's exp(q . k) replaced by a kernel phi(q) . phi(k).

    .. math:: \mathrm{out}_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j) v_j^\top}
              {\phi(q_i)^\top \sum_j \phi(k_j) + \varepsilon}

    j over every key not padded, or j <= i with ``causal`` (then the sums are
    running sums: an O(F Ev) state per batch and head, never an L x S
    matrix; the backward is the paper's Algorithm 1, O(L F (E + Ev))).

    - ``feature_map="elu"`` (Katharopoulos et al. 2020): phi(x) = elu(x) + 1,
      F = E features.
    - ``feature_map="favor+"`` (Performer, Choromanski et al. 2021): positive
      random features phi(x) = exp(w_m . x' - |x'|^2 / 2) / sqrt(M), x' = x
      E^-1/4, w_m the rows of ``projection`` (M, E)
      (:func:`attnc.performer_projection`), F = M: phi(q) . phi(k) is an
      unbiased estimate of exp(q . k / sqrt(E)), so the output approximates
      softmax attention, better as M grows. Computed stabilised: each query
      row's features divided by its largest, the keys' by the largest over
      the keys summed (per batch and head; the running maximum when causal).
      Both factors cancel in the ratio exactly, eps included (it is added in
      the unstabilised scale), so the result does not depend on them; the
      gradient treats them as the constants they are (exact: the output
      does not depend on them).

    ``eps`` (>= 0) is added to every denominator (as in the paper's code);
    a row whose denominator is 0 (no key: every key padded, or S = 0) gives
    zeros, also with eps = 0. ``key_padding_mask`` (B, S) bool, True =
    ignore (PyTorch's meaning).

    ``attnc.vjp(linear_attention, query, key, value, ...)`` gives "query",
    "key", "value" and, for favor+, "projection" (Performer redraws it rather
    than learning it; the gradient is there for those who learn it).

    Parameters
    ----------
    query : (B, H, L, E), float32 or float64, any strides
    key : (B, H, S, E), the same dtype (S = L when causal)
    value : (B, H, S, Ev)

    Returns
    -------
    out : (B, H, L, Ev)

    Example
    -------
    >>> q = k = v = np.ones((1, 1, 3, 2))
    >>> attnc.linear_attention(q, k, v, causal=True, eps=0.0)[0, 0]
    array([[1., 1.],
           [1., 1.],
           [1., 1.]])
    >>> w = attnc.performer_projection(16, 2, seed=0)
    >>> attnc.linear_attention(q, k, v, feature_map="favor+", projection=w).shape
    (1, 1, 3, 2)
    """
    return _forward(
        query,
        key,
        value,
        causal=causal,
        feature_map=feature_map,
        projection=projection,
        key_padding_mask=key_padding_mask,
        eps=eps,
    )[0]


register(linear_attention, _forward, _backward)


class LinearAttentionState:
    """Recurrent decoding with causal linear attention: the running sums
    (kv (B, H, F, Ev), k (B, H, F), and FAVOR+'s stabiliser (B, H)) of the
    keys seen so far, so each new token costs O(F (E + Ev)) whatever the
    length. :meth:`step` gives, bit for bit, the rows that
    ``linear_attention(..., causal=True)`` gives for the whole sequence
    (the same C code runs over the same sums in the same order). The sums
    take the first step's dtype (float32 or float64) and sizes; later steps
    must match them.

    Parameters
    ----------
    feature_map, projection, eps : as :func:`attnc.linear_attention`

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 1, 2, 5, 4))
    >>> state = attnc.LinearAttentionState()
    >>> rows = [state.step(q[:, :, t], k[:, :, t], v[:, :, t]) for t in range(5)]
    >>> full = attnc.linear_attention(q, k, v, causal=True)
    >>> bool((np.stack(rows, axis=2) == full).all()), state.length
    (True, 5)
    """

    def __init__(self, *, feature_map: str = "elu", projection: ArrayLike | None = None, eps: float = 1e-6) -> None:
        choice(feature_map, FEATURE_MAPS, "feature_map")
        self.feature_map, self.projection, self.eps = feature_map, projection, eps
        self.kv: Array | None = None
        self.k: Array | None = None
        self.max: Array | None = None
        self.length = 0

    def _fresh(self, q, v, features):
        B, H = q.shape[:2]
        self.kv = np.zeros((B, H, features, v.shape[3]), q.dtype)
        self.k = np.zeros((B, H, features), q.dtype)
        self.max = np.full((B, H), -np.inf if self.feature_map == "favor+" else 0.0, q.dtype)

    def step(
        self, query: ArrayLike, key: ArrayLike, value: ArrayLike, key_padding_mask: ArrayLike | None = None
    ) -> Array:
        """The outputs of the next token(s): query, key (B, H, E) and value
        (B, H, Ev) for one token, giving (B, H, Ev); or (B, H, T, E), (B, H,
        T, Ev) for T tokens, giving (B, H, T, Ev). key_padding_mask: (B,) or
        (B, T) bool, True = leave this key out."""
        arrays = [float_array(a, n) for a, n in zip((query, key, value), NAMES)]
        one = arrays[0].ndim == 3
        if one:
            arrays = [a[:, :, None] for a in arrays]
            if key_padding_mask is not None:
                key_padding_mask = as_array(key_padding_mask, "key_padding_mask")[:, None]
        q, k, v = _inputs(*arrays)
        opts = _options(
            q.dtype, q.shape[0], k.shape[2], self.feature_map, self.projection, key_padding_mask, True, self.eps
        )
        features = opts["projection"].shape[0] if "projection" in opts else q.shape[3]
        if self.kv is None:
            self._fresh(q, v, features)
        assert self.kv is not None and self.k is not None and self.max is not None
        want = (q.shape[0], q.shape[1], features, v.shape[3])
        if self.kv.shape != want or self.kv.dtype != q.dtype:
            raise ValueError(
                f"this state holds (B, H, F, Ev) = {shape_str(self.kv.shape)} of {self.kv.dtype}; "
                f"the step gives {shape_str(want)} of {q.dtype}"
            )
        kv, ks, mx = self.kv.copy(), self.k.copy(), self.max.copy()  # kept as they were if the call fails
        out = np.empty(q.shape[:3] + v.shape[3:], q.dtype)
        _core.linear_attention_forward(out=out, state_kv=kv, state_k=ks, state_max=mx, query=q, key=k, value=v, **opts)
        self.kv, self.k, self.max = kv, ks, mx
        self.length += q.shape[2]
        return out[:, :, 0] if one else out


def default_num_features(head_dim: int) -> int:
    """Performer's usual number of random features for head width d:
    round(d log d), at least 1."""
    return max(1, int(head_dim * math.log(head_dim))) if head_dim > 1 else 1
