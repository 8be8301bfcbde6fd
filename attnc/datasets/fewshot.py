"""N-way K-shot classification episodes over synthetic classes, seeded (the
few-shot task of SNAIL, Mishra et al. 2017, without images).

Every episode draws N new classes: class c is a prototype p_c ~ N(0, I_d),
and an example of it is p_c + noise * e, e ~ N(0, I_d). The episode shows K
labelled examples of each class (the support set, N·K examples in a random
order) and then one unlabelled example (the query) of a class drawn uniformly
from the N; the learner names the query's class from the support set alone.
Classes never repeat across episodes, so nothing about a particular class can
be memorised: only how to compare a query with labelled examples.

``nearest_prototype`` classifies the query by the nearest class mean of the
support set (the prototypical-network rule with the identity embedding). With
isotropic Gaussian classes and the same K for every class it is close to the
Bayes-optimal rule, so its accuracy on the same episodes is the ceiling to
compare a learner with. The defaults (d = 32, noise = 1.2) make the task hard
but learnable: about 84% for that rule at 1 shot and 98% at 5 shots.

``seed`` is an int, ``None`` (fresh entropy) or a ``np.random.Generator``
(consumed: successive draws from one generator differ). The same seed gives
the same arrays, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._args import size_arg as _check_int
from .._typing import Array, ArrayLike, DTypeLike
from .ntm_tasks import SeedLike, _dtype, _rng

__all__ = ["FewShotEpisodes", "FewShotTask", "fewshot_accuracy", "nearest_prototype"]


@dataclass(frozen=True)
class FewShotEpisodes:
    """A batch of B episodes of one N-way K-shot task (what
    ``FewShotTask.episodes`` returns).

    Fields
    ------
    features    (B, N·K + 1, d) float32 or float64 (float32 by default): the
                support examples in their shuffled order, then the query (last row)
    labels      (B, N·K) int64 in [0, N): the support examples' classes
    targets     (B,) int64 in [0, N): the query's class
    prototypes  (B, N, d) float64: each episode's class prototypes (for plots and checks)

    ``len(episodes)`` is B, ``n_way`` N, ``k_shot`` K; ``episodes[i]`` or
    ``episodes[a:b]`` selects episodes (an int keeps a batch of one).

    Example
    -------
    >>> ep = attnc.datasets.FewShotTask(n_way=3, k_shot=2, dim=4).episodes(5, seed=0)
    >>> ep.features.shape, ep.features.dtype, ep.labels.shape, ep.prototypes.dtype
    ((5, 7, 4), dtype('float32'), (5, 6), dtype('float64'))
    >>> len(ep[1:3]), ep[0].features.shape, ep.n_way, ep.k_shot
    (2, (1, 7, 4), 3, 2)
    """

    features: Array
    labels: Array
    targets: Array
    prototypes: Array

    def __len__(self) -> int:
        return self.features.shape[0]

    @property
    def n_way(self) -> int:
        """N, the classes per episode."""
        return self.prototypes.shape[1]

    @property
    def k_shot(self) -> int:
        """K, the support examples per class."""
        return self.labels.shape[1] // self.prototypes.shape[1]

    def __getitem__(self, index: int | slice | Array) -> FewShotEpisodes:
        """The episodes at index (an int keeps a batch of one), e.g. ``episodes[:8]``."""
        if isinstance(index, (int, np.integer)):
            index = slice(int(index), int(index) + 1 if index != -1 else None)
        return FewShotEpisodes(self.features[index], self.labels[index], self.targets[index], self.prototypes[index])


class FewShotTask:
    """N-way K-shot episodes over Gaussian classes (see the module docstring).

    Parameters
    ----------
    n_way : int, N classes per episode (>= 2)
    k_shot : int, K labelled examples per class
    dim : int, the feature size d
    noise : float, the examples' standard deviation around their prototype
        (the prototypes have unit variance per feature)

    ``seq_len = n_way * k_shot + 1`` (the sequence a model like SNAIL reads);
    ``episodes(batch_size, seed=None, dtype=np.float32)`` ->
    ``FewShotEpisodes`` (features (B, N·K + 1, d) float, labels (B, N·K)
    int64, targets (B,) int64).

    Example
    -------
    >>> task = attnc.datasets.FewShotTask(n_way=5, k_shot=1, dim=8)
    >>> ep = task.episodes(4, seed=0)
    >>> ep.features.shape, ep.labels.shape, ep.targets.shape
    ((4, 6, 8), (4, 5), (4,))
    >>> sorted(ep.labels[0].tolist())
    [0, 1, 2, 3, 4]
    """

    def __init__(self, n_way: int = 5, k_shot: int = 5, dim: int = 32, noise: float = 1.2):
        self.n_way = _check_int("n_way", n_way, 2)
        self.k_shot = _check_int("k_shot", k_shot, 1)
        self.dim = _check_int("dim", dim, 1)
        if (
            isinstance(noise, bool)
            or not isinstance(noise, (int, float, np.floating, np.integer))
            or not (0 <= float(noise) < np.inf)
        ):
            raise ValueError(f"noise must be a finite float >= 0, got {noise!r}")
        self.noise = float(noise)

    @property
    def seq_len(self) -> int:
        """N·K + 1: the support examples and the query."""
        return self.n_way * self.k_shot + 1

    def episodes(self, batch_size: int, *, seed: SeedLike = None, dtype: DTypeLike = np.float32) -> FewShotEpisodes:
        """batch_size episodes, each with its own N new classes.

        Drawn in this order from one generator: prototypes (B, N, d), the
        support noise (B, N, K, d), the query classes (B,), the query noise
        (B, d), then one shuffle of the N·K support examples per episode."""
        B = _check_int("batch_size", batch_size, 1)
        dt = _dtype(dtype)
        rng = _rng(seed)
        N, K, d = self.n_way, self.k_shot, self.dim
        protos = rng.standard_normal((B, N, d))
        support = protos[:, :, None, :] + self.noise * rng.standard_normal((B, N, K, d))
        targets = rng.integers(0, N, B).astype(np.int64)
        query = protos[np.arange(B), targets] + self.noise * rng.standard_normal((B, d))
        order = rng.permuted(np.broadcast_to(np.arange(N * K), (B, N * K)), axis=1)
        labels = (order // K).astype(np.int64)  # example j of class c is at c * K + j
        feats = np.take_along_axis(support.reshape(B, N * K, d), order[:, :, None], axis=1)
        features = np.ascontiguousarray(np.concatenate([feats, query[:, None, :]], axis=1), dtype=dt)
        return FewShotEpisodes(features, labels, targets, protos)

    def __repr__(self) -> str:
        return f"FewShotTask(n_way={self.n_way}, k_shot={self.k_shot}, dim={self.dim}, noise={self.noise})"


def nearest_prototype(features: ArrayLike, labels: ArrayLike, n_way: int) -> Array:
    """The class of each episode's query by the nearest support-class mean
    (squared Euclidean distance, computed in float64).

    Parameters
    ----------
    features : array (B, N·K + 1, d), any real dtype; the query last
    labels : int array (B, N·K) in [0, N)
    n_way : int, N

    Returns
    -------
    array (B,), int64 predictions. Ties go to the lower class; a class with
    no support example is never predicted.

    Example
    -------
    >>> feats = np.array([[[0.0], [1.0], [10.0], [9.0], [8.0]]])  # 4 support examples, query 8
    >>> attnc.datasets.nearest_prototype(feats, [[0, 0, 1, 1]], 2)  # means 0.5 and 9.5
    array([1])
    >>> ep = attnc.datasets.FewShotTask(5, 5, dim=16, noise=0.1).episodes(10, seed=1)
    >>> bool((attnc.datasets.nearest_prototype(ep.features, ep.labels, 5) == ep.targets).all())
    True
    """
    x = np.asarray(features, np.float64)
    y = np.asarray(labels)
    N = _check_int("n_way", n_way, 1)
    if x.ndim != 3 or y.ndim != 2 or y.shape != (x.shape[0], x.shape[1] - 1):
        raise ValueError(f"features (B, T + 1, d) and labels (B, T) do not fit: got {x.shape} and {y.shape}")
    if y.dtype.kind not in "iu" or (y.size and (y.min() < 0 or y.max() >= N)):
        raise ValueError(f"labels must be integers in [0, {N})")
    N = int(y.max()) + 1 if y.size else 1  # classes above every label have no support: never predicted
    onehot = (y[:, :, None] == np.arange(N)).astype(np.float64)  # (B, T, N)
    counts = onehot.sum(axis=1)  # (B, N)
    means = np.einsum("btn,btd->bnd", onehot, x[:, :-1]) / np.maximum(counts, 1)[:, :, None]
    dist = ((means - x[:, -1:, :]) ** 2).sum(axis=-1)
    dist[counts == 0] = np.inf
    return dist.argmin(axis=1).astype(np.int64)


def fewshot_accuracy(predictions: ArrayLike, targets: ArrayLike) -> float:
    """The fraction of episodes whose query class was predicted.

    Parameters
    ----------
    predictions : int array (B,) of classes, or float logits (B, N) (their argmax)
    targets : int array (B,)

    Returns
    -------
    float in [0, 1] (0.0 when B = 0)

    Example
    -------
    >>> attnc.datasets.fewshot_accuracy([0, 2, 1, 1], [0, 2, 2, 1])
    0.75
    >>> attnc.datasets.fewshot_accuracy(np.array([[0.1, 0.9], [0.8, 0.2]]), [1, 1])
    0.5
    """
    p = np.asarray(predictions)
    t = np.asarray(targets)
    if p.ndim == 2:
        p = p.argmax(axis=1)
    if p.shape != t.shape or p.ndim != 1:
        raise ValueError(f"predictions (B,) or (B, N) and targets (B,) do not fit: got {p.shape} and {t.shape}")
    return float((p == t).mean()) if t.size else 0.0
