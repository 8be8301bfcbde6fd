"""Text from a random Markov chain of order k, with the best possible loss
known exactly: seeded NumPy only.

A language model trained on it must learn the chain's transition table from
the last k tokens; since the table is known, so is the lowest cross-entropy
any model can reach on a given sequence (the true model's own), which the
task reports next to a model's loss. The next token depends only on the
last k, so a model that has learned to look back k tokens can predict
sequences of any length: what breaks when a model is run past the length it
was trained on (issue 30's length-extrapolation and streaming experiments)
is its handling of positions, not the data.

The chain: every context of k tokens (V**k of them) has its own next-token
distribution, drawn from a symmetric Dirichlet(concentration) (small
concentrations give peaked, predictable rows); the first k tokens of a
sequence are uniform. The chain is drawn from ``chain_seed`` and the
sequences from ``seed``, so a training and a held-out set share one chain.
"""

from __future__ import annotations

import numpy as np

from .._typing import Array, ArrayLike
from .sequences import _check_int, _TokenRows

__all__ = ["MarkovTask", "markov_task"]

# V**k contexts each hold V probabilities: at most 2**24 of them (128 MiB of float64).
MAX_TABLE = 2**24


class MarkovTask(_TokenRows):
    """Sequences of a Markov chain of order k (built by :func:`markov_task`).

    Attributes
    ----------
    inputs     (n, length) int64: a causal model's idx (tokens 0 .. length - 1)
    targets    (n, length) int64: the next tokens (tokens 1 .. length)
    log_probs  (n, length) float64: log p(target | the k tokens before it)
               under the true chain; nan where fewer than k tokens precede
               (the first k - 1 targets, drawn uniformly, not by the chain)
    transition (V**k, V) float64: row c is the next-token distribution of
               context c = sum_i token_i V**(k-1-i) (oldest token first)
    ``vocab_size = V``, ``order = k``, ``length``.
    ``batch(indices)`` -> (inputs, targets) rows; ``batches(batch_size)``;
    ``optimal_loss(positions=None)`` the true chain's mean cross-entropy.

    Example
    -------
    >>> task = attnc.datasets.markov_task(4, 16, vocab_size=5, order=2, seed=0)
    >>> task.inputs.shape, task.transition.shape
    ((4, 16), (25, 5))
    >>> bool(np.all(task.inputs[:, 1:] == task.targets[:, :-1]))
    True
    """

    def __init__(self, tokens: Array, transition: Array, order: int):
        self.inputs = np.ascontiguousarray(tokens[:, :-1])
        self.targets = np.ascontiguousarray(tokens[:, 1:])
        self.transition, self.order = transition, order
        self.vocab_size = transition.shape[1]
        self.length = self.inputs.shape[1]
        n, T = tokens.shape
        lp = np.full((n, T - 1), np.nan)
        if T - 1 >= order:
            ctx = _contexts(tokens, order, self.vocab_size)[:, : T - order]  # the contexts of tokens k .. T-1
            lp[:, order - 1 :] = np.log(transition[ctx, tokens[:, order:]])
        self.log_probs = lp

    def optimal_loss(self, positions: ArrayLike | None = None) -> float | Array:
        """The true chain's cross-entropy (nats per token), the least any
        model's expected loss can be: its mean over every target with k
        tokens before it, or with ``positions`` (ints of target positions)
        its mean at each of them over the sequences."""
        nll = -self.log_probs
        if positions is None:
            return float(np.nanmean(nll))
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < self.order - 1 or pos.max() >= self.length):
            raise ValueError(f"positions must be in [order - 1, length) = [{self.order - 1}, {self.length})")
        return nll[:, pos].mean(axis=0)

    def __repr__(self):
        return f"MarkovTask(n={len(self)}, length={self.length}, vocab_size={self.vocab_size}, order={self.order})"


def _contexts(tokens: Array, k: int, V: int) -> Array:
    """(n, T - k + 1) int64: the index of every window of k tokens (oldest first)."""
    n, T = tokens.shape
    ctx = np.zeros((n, T - k + 1), np.int64)
    for i in range(k):
        ctx = ctx * V + tokens[:, i : T - k + 1 + i]
    return ctx


def markov_task(
    n: int,
    length: int,
    vocab_size: int = 32,
    order: int = 2,
    *,
    concentration: float = 0.1,
    seed: int | None = 0,
    chain_seed: int = 0,
) -> MarkovTask:
    """n sequences of ``length + 1`` tokens from a random Markov chain of order k.

    Parameters
    ----------
    n : int, the number of sequences
    length : int >= 1, the model's sequence length (inputs and targets are
        (n, length): the sequence without its last / first token)
    vocab_size : int V >= 2
    order : int k >= 1, the tokens the next one depends on (V**k <= 2**24 contexts)
    concentration : float > 0, the Dirichlet parameter of each context's
        next-token distribution (0.1: a few likely successors per context)
    seed : int or None, draws the sequences
    chain_seed : int, draws the chain (keep it fixed across splits)

    Returns
    -------
    MarkovTask (``inputs``, ``targets``, the true ``log_probs``, ``optimal_loss()``).

    Example
    -------
    >>> train = attnc.datasets.markov_task(1000, 64, seed=1)
    >>> test = attnc.datasets.markov_task(100, 256, seed=2)  # the same chain, longer sequences
    >>> bool(np.array_equal(train.transition, test.transition)), round(test.optimal_loss(), 2)
    (True, 1.76)
    """
    n = _check_int("n", n, 0)
    length = _check_int("length", length, 1)
    V = _check_int("vocab_size", vocab_size, 2)
    k = _check_int("order", order, 1)
    if V**k > MAX_TABLE:
        raise ValueError(f"vocab_size ** order = {V}**{k} contexts exceeds {MAX_TABLE} (the transition table's rows)")
    if not (np.isfinite(concentration) and concentration > 0):
        raise ValueError(f"concentration must be a positive number, got {concentration}")
    transition = np.random.default_rng(chain_seed).dirichlet(np.full(V, float(concentration)), V**k)
    cdf = np.cumsum(transition, axis=1)
    cdf[:, -1] = 1.0  # rounding: a uniform draw always lands in some bin
    rng = np.random.default_rng(seed)
    tokens = np.empty((n, length + 1), np.int64)
    tokens[:, : min(k, length + 1)] = rng.integers(0, V, (n, min(k, length + 1)))
    u = rng.random((n, max(length + 1 - k, 0)))
    ctx = _contexts(tokens[:, :k], k, V)[:, 0] if length + 1 > k else None
    for t in range(k, length + 1):  # one step for all sequences: the next token by inverse CDF
        nxt = (u[:, t - k, None] > cdf[ctx]).sum(axis=1)
        tokens[:, t] = nxt
        ctx = (ctx * V + nxt) % V**k
    return MarkovTask(tokens, transition, k)
