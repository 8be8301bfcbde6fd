"""attnc.models.Captioner: show, attend and tell (Xu et al. 2015), an LSTM
decoder that attends over a grid of image features while it writes a
caption. The whole teacher-forced sequence, forward and backward through
time, and decoding (greedy or beam search, through the library's one search
in csrc/core/search.c) run in C (csrc/models/captioner/captioner.c).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal

import numpy as np

from .. import _core, nn
from .._args import as_array, float_array, same_dtype, shape_str, size_arg
from .._typing import Array, ArrayLike, DTypeLike
from ..grad import internal, vjp

__all__ = ["Captioner"]

IGNORE_INDEX = -100
_SOFT, _HARD_SAMPLE, _HARD_ARGMAX, _HARD_GIVEN = 0, 1, 2, 3

# The decoder's parameters: attnc_captioner_params' members and their state_dict
# names (the gate's are absent without the gate).
PARAM_NAMES = {
    "embedding": "embedding.weight",
    "init_h_w": "init_h.weight",
    "init_h_b": "init_h.bias",
    "init_c_w": "init_c.weight",
    "init_c_b": "init_c.bias",
    "att_feat_w": "attention.feature.weight",
    "att_feat_b": "attention.feature.bias",
    "att_hidden_w": "attention.hidden.weight",
    "att_score_w": "attention.score.weight",
    "gate_w": "gate.weight",
    "gate_b": "gate.bias",
    "w_ih": "decoder.weight_ih",
    "w_hh": "decoder.weight_hh",
    "b_ih": "decoder.bias_ih",
    "b_hh": "decoder.bias_hh",
    "out_h_w": "out_hidden.weight",
    "out_z_w": "out_context.weight",
    "out_w": "output.weight",
    "out_b": "output.bias",
}


def _nonneg(name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    return float(v)


def _int_ids(x, name, shape=None):
    a = as_array(x, name)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"{name} must be (batch, steps), got shape {shape_str(a.shape)}")
    if shape is not None and a.shape != shape:
        raise ValueError(f"{name} has shape {shape_str(a.shape)}, expected {shape_str(shape)}")
    return np.array(a, dtype=np.int64, order="C")  # a copy: C never sees the caller's array


class _Attention(nn.Module):
    """The additive attention's parameters: e_i = score(tanh(feature(a_i) + hidden(h)))."""

    def __init__(self, feature_size, hidden_size, attention_size, *, dtype=np.float32, seed=None):
        super().__init__(dtype)
        rng = np.random.default_rng(seed)
        self.feature = nn.Linear(feature_size, attention_size, dtype=dtype, seed=int(rng.integers(2**63)))
        self.hidden = nn.Linear(hidden_size, attention_size, bias=False, dtype=dtype, seed=int(rng.integers(2**63)))
        self.score = nn.Linear(attention_size, 1, bias=False, dtype=dtype, seed=int(rng.integers(2**63)))


class Captioner(nn.Module):
    r"""Show, attend and tell (Xu et al. 2015): an LSTM decoder with soft or
    hard attention over L feature vectors a_1..a_L (F each) of an image.

    Equations (B images, T steps; tokens y_0 = BOS, y_1, ...)::

        h_0 = tanh(W_h · mean_i a_i + b_h)          c_0 = tanh(W_c · mean_i a_i + b_c)
        e_ti = vᵀ tanh(W_a a_i + b_a + U_a h_{t−1})  (W_a a_i + b_a computed once per image)
        α_t  = softmax_i(e_t)                        (stable: the max is subtracted)
        β_t  = σ(w_β · h_{t−1} + b_β)                (gate=True; else β_t = 1)
        soft: z_t = β_t Σ_i α_ti a_i                 hard: z_t = β_t a_{s_t}, s_t ~ Categorical(α_t)
        h_t, c_t = LSTMCell([E y_{t−1}; z_t], (h_{t−1}, c_{t−1}))     (torch's gates i, f, g, o)
        logits_t = L_o (E y_{t−1} + L_h h_t + L_z z_t) + b_o           (deep output, eq. 7)

    Parameters
    ----------
    feature_size : int, F, the width of each feature vector
    vocab_size : int, V
    embed_size : int, Ed, the token embeddings' width
    hidden_size : int, H, the LSTM's
    attention_size : int, A, the additive attention's
    attention : "soft" or "hard"
    doubly_stochastic : float >= 0, λ of the doubly stochastic penalty
    gate : bool, the gating scalar β_t
    reinforce : float >= 0, λ_r (hard attention)
    entropy : float >= 0, λ_e (hard attention)
    expected_context : float in [0, 1], the share of training rows that use the
        expected context (hard attention)
    dtype : float32 or float64, the parameters' dtype
    seed : int or None, for the initialisation and the samples

    ``state_dict()`` names: ``embedding.weight`` E (V, Ed);
    ``init_h.weight/bias``, ``init_c.weight/bias`` (H, F), (H);
    ``attention.feature.weight/bias`` W_a (A, F), b_a (A);
    ``attention.hidden.weight`` U_a (A, H); ``attention.score.weight`` v (1, A);
    ``gate.weight/bias`` (1, H), (1) (with ``gate=True``);
    ``decoder.weight_ih`` (4H, Ed + F), ``decoder.weight_hh`` (4H, H),
    ``decoder.bias_ih/bias_hh`` (4H) (torch.nn.LSTMCell's layout: the input
    is [embedding; context]); ``out_hidden.weight`` L_h (Ed, H);
    ``out_context.weight`` L_z (Ed, F); ``output.weight/bias`` L_o (V, Ed), b_o (V).

    Loss (``loss_and_grad``), over the real target tokens (tgt_out ≠ −100)::

        loss = mean cross-entropy + λ · (1/B) Σ_b Σ_i (1 − Σ_{t real} α_bti)²     (λ = doubly_stochastic)

    Hard attention (``attention="hard"``): in training mode each call draws
    s_t from α_t with a counter-based generator (Philox keyed by a seed the
    model draws from its own generator, and by (row, step)), so a seeded
    model replays the same samples on any number of threads. The gradient
    is Xu et al.'s eq. 12 estimator, summed over the batch and divided by
    the number of real tokens N (like the cross-entropy)::

        ∇ log p(y|s) + λ_r (log p(y|s) − b) ∇ log p(s) + λ_e ∇ H[α]

    (λ_r = ``reinforce``, λ_e = ``entropy``), with log p(y|s) the row's
    summed token log-likelihood, log p(s) = Σ_t
    log α_{t,s_t} and H the entropies of α_t over the real steps; the
    doubly stochastic penalty is added as in soft attention. The baseline b
    (``model.baseline``) is a moving average: set to the first batch's mean
    log p(y|s), then b ← 0.9 b + 0.1 · mean_b log p(y|s) after each
    training step (the step's gradient uses the old b). As Xu et al. (sec.
    4.1) do to cut the estimator's variance, each image in training uses the
    expected context (soft attention's z_t, location −1) instead of samples
    with probability ``expected_context`` (0.5); such rows get the plain
    gradient, no score-function term, and do not move the baseline. In eval
    mode (and in ``generate``) hard attention is deterministic: s_t = argmax_i α_ti, the
    most likely location (not the expectation, so the decoder sees the
    single-location contexts it was trained on). ``samples=`` fixes the
    locations (the tests use it).

    ``forward(features (B, L, F), tgt_in (B, T) int, *, return_alphas=False,
    samples=None, return_samples=False)`` returns logits (B, T, V), plus the
    weights α (B, T, L) and, for hard attention, the locations (B, T) int64
    (−1: the expected context).
    ``attnc.vjp(model, features, tgt_in, ...)``: the pullback takes the
    cotangents of logits (and α) and returns the gradients of "features" and
    every parameter (with the locations held fixed in hard mode).
    ``loss_and_grad(batch)`` → (loss, gradients by state_dict name).
    ``generate(features, max_len, bos, eos=None, beam_size=1,
    length_penalty=0.0)`` → (tokens (B, ≤ max_len), α (B, steps, L), zero
    after a row's end): greedy decoding or beam search in C.

    Example
    -------
    >>> m = attnc.models.Captioner(13, 17, embed_size=8, hidden_size=16, attention_size=8, seed=0)
    >>> features = np.random.rand(2, 9, 13).astype(np.float32)
    >>> logits, alphas = m(features, np.ones((2, 4), np.int64), return_alphas=True)
    >>> logits.shape, alphas.shape, alphas.sum(-1).round(5).tolist()
    ((2, 4, 17), (2, 4, 9), [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    >>> tokens, alphas = m.eval().generate(features, max_len=5, bos=1, beam_size=2)
    >>> tokens.dtype, tokens.shape[0], alphas.shape[2]
    (dtype('int64'), 2, 9)
    >>> m.state_dict()["decoder.weight_ih"].shape
    (64, 21)
    """

    def __init__(
        self,
        feature_size: int,
        vocab_size: int,
        embed_size: int = 32,
        hidden_size: int = 128,
        attention_size: int = 64,
        *,
        attention: Literal["soft", "hard"] = "soft",
        doubly_stochastic: float = 1.0,
        gate: bool = True,
        reinforce: float = 1.0,
        entropy: float = 0.01,
        expected_context: float = 0.5,
        dtype: DTypeLike = np.float32,
        seed: int | None = None,
    ) -> None:
        super().__init__(dtype)
        F, V = size_arg("feature_size", feature_size), size_arg("vocab_size", vocab_size)
        Ed, H, A = (
            size_arg("embed_size", embed_size),
            size_arg("hidden_size", hidden_size),
            size_arg("attention_size", attention_size),
        )
        if attention not in ("soft", "hard"):
            raise ValueError(f"attention must be 'soft' or 'hard', got {attention!r}")
        self.feature_size, self.vocab_size, self.embed_size, self.hidden_size, self.attention_size = F, V, Ed, H, A
        self.attention_kind, self.gate_enabled = attention, bool(gate)
        self.doubly_stochastic = _nonneg("doubly_stochastic", doubly_stochastic)
        self.reinforce, self.entropy = _nonneg("reinforce", reinforce), _nonneg("entropy", entropy)
        self.expected_context = _nonneg("expected_context", expected_context)
        if self.expected_context > 1:
            raise ValueError(f"expected_context must be a probability in [0, 1], got {expected_context!r}")
        rng = np.random.default_rng(seed)
        sub = lambda: int(rng.integers(2**63))  # noqa: E731
        self.embedding = nn.Embedding(V, Ed, dtype=dtype, seed=sub())
        self.init_h = nn.Linear(F, H, dtype=dtype, seed=sub())
        self.init_c = nn.Linear(F, H, dtype=dtype, seed=sub())
        self.attention = _Attention(F, H, A, dtype=dtype, seed=sub())
        self.gate = nn.Linear(H, 1, dtype=dtype, seed=sub()) if gate else None
        self.decoder = nn.LSTMCell(Ed + F, H, dtype=dtype, seed=sub())
        self.out_hidden = nn.Linear(H, Ed, bias=False, dtype=dtype, seed=sub())
        self.out_context = nn.Linear(F, Ed, bias=False, dtype=dtype, seed=sub())
        self.output = nn.Linear(Ed, V, dtype=dtype, seed=sub())
        self.baseline = None
        self._rng = rng

    # -- arguments ----------------------------------------------------------------------
    def _params(self):
        p = dict(self.named_parameters())
        return {k: p[n] for k, n in PARAM_NAMES.items() if n in p}

    def _decoder_config(self, mode, seed=0, expect_prob=0.0):
        """attnc_captioner_config's members: keyword arguments of the captioner_* calls."""
        return {"mode": mode, "gate": self.gate_enabled, "seed": seed, "expect_prob": expect_prob}

    def _features(self, features):
        a = float_array(features, "features")
        same_dtype(self.dtype, features=a)
        if a.ndim != 3 or a.shape[2] != self.feature_size or a.shape[1] < 1:
            raise ValueError(
                f"features has shape {shape_str(a.shape)}, expected (B, L, {self.feature_size}) with L >= 1"
            )
        return np.ascontiguousarray(a)

    def _tokens(self, tgt_in, B):
        t = _int_ids(tgt_in, "tgt_in")
        if t.shape[0] != B:
            raise ValueError(f"tgt_in has batch size {t.shape[0]}, features {B}")
        if t.size and (t.min() < 0 or t.max() >= self.vocab_size):
            raise ValueError(f"tgt_in has token ids outside [0, {self.vocab_size}): from {t.min()} to {t.max()}")
        return t

    def _call_config(self, samples, shape, L):
        """(C config, samples array) of one call."""
        if self.attention_kind == "soft":
            if samples is not None:
                raise ValueError("samples= needs hard attention")
            return self._decoder_config(_SOFT), None
        if samples is not None:
            s = _int_ids(samples, "samples", shape)
            if s.size and (s.min() < -1 or s.max() >= L):
                raise ValueError(
                    f"samples must be locations in [0, {L}) or -1 (the expected context), got "
                    f"values from {s.min()} to {s.max()}"
                )
            return self._decoder_config(_HARD_GIVEN), s
        if self.training:
            seed = int(self._rng.integers(2**63))
            return self._decoder_config(_HARD_SAMPLE, seed, self.expected_context), np.empty(shape, np.int64)
        return self._decoder_config(_HARD_ARGMAX), np.empty(shape, np.int64)

    # -- the C calls ------------------------------------------------------------------------
    def _run(self, features, tgt_in, samples, keep):
        a = self._features(features)
        t = self._tokens(tgt_in, a.shape[0])
        B, L, F = a.shape
        T = t.shape[1]
        config, s = self._call_config(samples, (B, T), L)
        logits = np.empty((B, T, self.vocab_size), self.dtype)
        alphas = np.empty((B, T, L), self.dtype)
        saved = None
        if keep:
            n = _core.captioner_saved_size(
                B=B, T=T, L=L, F=F, E=self.embed_size, H=self.hidden_size, A=self.attention_size
            )
            saved = np.empty(n, self.dtype)
        params = self._params()
        _core.captioner_forward(
            logits=logits, alphas=alphas, samples=s, saved=saved, features=a, tokens=t, params=params, **config
        )
        return logits, alphas, s, (saved, a, t, s, params, config)

    @staticmethod
    def _backward_call(state, dlogits, dalphas=None, dlogp=None):
        saved, a, t, s, params, config = state
        grads = {k: np.empty_like(p) for k, p in params.items()}
        dfeatures = np.empty_like(a)
        if dlogits is None:
            dlogits = np.zeros((a.shape[0], t.shape[1], params["out_b"].shape[0]), a.dtype)
        _core.captioner_backward(
            grads=grads,
            dfeatures=dfeatures,
            dlogits=np.ascontiguousarray(dlogits, a.dtype),
            dalphas=None if dalphas is None else np.ascontiguousarray(dalphas, a.dtype),
            dlogp=None if dlogp is None else np.ascontiguousarray(dlogp, a.dtype),
            saved=saved,
            features=a,
            tokens=t,
            samples=s,
            params=params,
            **config,
        )
        out = {PARAM_NAMES[k]: g for k, g in grads.items()}
        out["features"] = dfeatures
        return out

    @staticmethod
    def _outputs(logits, alphas, samples, return_alphas, return_samples):
        out = (logits,)
        if return_alphas:
            out += (alphas,)
        if return_samples:
            out += (samples,)
        return out if len(out) > 1 else logits

    # -- the computation --------------------------------------------------------------------
    def forward(
        self,
        features: ArrayLike,
        tgt_in: ArrayLike,
        *,
        return_alphas: bool = False,
        samples: ArrayLike | None = None,
        return_samples: bool = False,
    ) -> Array | tuple[Array, ...]:
        logits, alphas, s, _ = self._run(features, tgt_in, samples, keep=False)
        return self._outputs(logits, alphas, s, return_alphas, return_samples)

    def _vjp_forward(self, features, tgt_in, *, return_alphas=False, samples=None, return_samples=False):
        logits, alphas, s, state = self._run(features, tgt_in, samples, keep=True)
        return self._outputs(logits, alphas, s, return_alphas, return_samples), (state, return_alphas)

    @classmethod
    def _vjp_backward(cls, saved, cotangents):
        state, return_alphas = saved
        dalphas = cotangents[1] if return_alphas else None
        return cls._backward_call(state, cotangents[0], dalphas)

    @internal()
    def loss_and_grad(self, batch: Any, *, samples: ArrayLike | None = None) -> tuple[float, dict[str, Array]]:
        """(loss, gradients by state_dict name) of one batch: anything with
        ``features`` (B, L, F), ``tgt_in`` (B, T) and ``tgt_out`` (B, T) (−100
        = ignored), such as ``attnc.datasets.captions(...).batch(...)``. The
        loss is the mean cross-entropy plus λ times the doubly stochastic
        penalty; in hard attention's training mode the gradient is the eq. 12
        estimator (see the class docstring) and the baseline moves."""
        logits, alphas, s, state = self._run(batch.features, batch.tgt_in, samples, keep=True)
        B, T, V = logits.shape
        tgt_out = _int_ids(batch.tgt_out, "tgt_out", (B, T))
        real = tgt_out != IGNORE_INDEX
        if np.any(real & ((tgt_out < 0) | (tgt_out >= V))):
            raise ValueError(f"tgt_out has targets outside [0, {V}) that are not {IGNORE_INDEX}")
        n = max(int(real.sum()), 1)
        ce, ce_pullback = vjp(nn.cross_entropy, logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=IGNORE_INDEX)
        dlogits = ce_pullback(np.ones((), self.dtype))["input"].reshape(B, T, V)
        al = alphas.astype(np.float64)
        m = real[:, :, None].astype(np.float64)
        lam = self.doubly_stochastic
        cover = 1.0 - (al * m).sum(axis=1)  # (B, L)
        penalty = lam * float((cover**2).sum()) / max(B, 1)
        dalphas = -2.0 * lam / max(B, 1) * cover[:, None, :] * m
        dlogp = None
        if self.attention_kind == "hard" and self.training:
            logp_y = self._row_log_likelihood(logits, tgt_out, real)
            sampled = real & (s >= 0)  # the score-function term needs a sampled location
            rows = sampled.any(axis=1)
            if self.baseline is None and rows.any():
                self.baseline = float(logp_y[rows].mean())
            reward = logp_y - (self.baseline or 0.0)
            dlogp = (-self.reinforce / n) * reward[:, None] * sampled
            dalphas = dalphas + (self.entropy / n) * (np.log(np.maximum(al, 1e-30)) + 1.0) * m
            if rows.any():
                self.baseline = 0.9 * self.baseline + 0.1 * float(logp_y[rows].mean())
        grads = self._backward_call(
            state, dlogits, dalphas.astype(self.dtype), None if dlogp is None else dlogp.astype(self.dtype)
        )
        grads.pop("features")
        return float(ce) + penalty, grads

    loss_and_grads = loss_and_grad

    @staticmethod
    def _row_log_likelihood(logits, tgt_out, real):
        """(B,) float64: Σ_t log p(y_t | ...) over each row's real tokens."""
        x = logits.astype(np.float64)
        x = x - x.max(axis=-1, keepdims=True)
        logp = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
        picked = np.take_along_axis(logp, np.where(real, tgt_out, 0)[:, :, None], axis=-1)[:, :, 0]
        return (picked * real).sum(axis=1)

    # -- decoding -----------------------------------------------------------------------------
    def _decoding_args(self, features, max_len, bos, eos, beam_size=1, length_penalty=0.0):
        a = self._features(features)
        max_len = size_arg("max_len", max_len, 0)
        beam_size = size_arg("beam_size", beam_size, 1)
        for name, v in (("bos", bos), ("eos", eos)):
            if v is None and name == "eos":
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v < self.vocab_size:
                raise ValueError(f"{name} must be a token id in [0, {self.vocab_size}), got {v!r}")
        if (
            isinstance(length_penalty, bool)
            or not isinstance(length_penalty, numbers.Real)
            or not math.isfinite(length_penalty)
        ):
            raise ValueError(f"length_penalty must be a finite number, got {length_penalty!r}")
        return a, max_len, beam_size

    def generate(
        self,
        features: ArrayLike,
        max_len: int,
        bos: int,
        eos: int | None = None,
        beam_size: int = 1,
        length_penalty: float = 0.0,
    ) -> tuple[Array, Array]:
        """Captions of features (B, L, F), decoded in C (the search of
        ``attnc.models.Seq2Seq.generate``). Every row starts from ``bos``.
        Returns (tokens int64 (B, n), alphas (B, n, L)), n <= max_len the
        longest row: a row that emits ``eos`` ends with it and has eos after
        it (eos=None: no end token). alphas[b, t] are the weights the decoder
        used to emit tokens[b, t], zero after the row's end.

        Greedy (beam_size=1): the most probable next token (lowest id on
        ties); decoding stops when every row has ended.

        Beam search (beam_size=K >= 2): the rules of ``attnc.nn.decode``
        (finished hypotheses scored
        sum(log p) / length ** length_penalty); each row's best hypothesis.

        Hard attention decodes with s_t = argmax α_t."""
        a, max_len, K = self._decoding_args(features, max_len, bos, eos, beam_size, length_penalty)
        B, L, _ = a.shape
        tokens, lengths = np.empty((B, max_len), np.int64), np.empty(B, np.int64)
        alphas = np.empty((B, max_len, L), self.dtype)
        mode = _SOFT if self.attention_kind == "soft" else _HARD_ARGMAX
        _core.captioner_generate(
            tokens=tokens,
            lengths=lengths,
            alphas=alphas,
            features=a,
            params=self._params(),
            bos=int(bos),
            eos=-1 if eos is None else int(eos),
            beam_size=K,
            length_penalty=float(length_penalty),
            **self._decoder_config(mode),
        )
        n = int(lengths.max()) if B else 0
        return tokens[:, :n].copy(), alphas[:, :n].copy()

    def extra_repr(self) -> str:
        return (
            f"feature_size={self.feature_size}, vocab_size={self.vocab_size}, embed_size={self.embed_size}, "
            f"hidden_size={self.hidden_size}, attention_size={self.attention_size}, "
            f"attention={self.attention_kind!r}, gate={self.gate_enabled}"
        )
