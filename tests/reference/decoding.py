"""The decoding oracle the C decoders are held to: greedy and beam search in
plain Python and NumPy over any next-token log-probability function
(``reference_decode``), and, per model, decoding by re-running the model's
whole teacher-forced forward on every prefix, in eval mode.
"""

from __future__ import annotations

import math

import numpy as np

from attnc.models._common import _EvalMode, _ids
from attnc.nn.decoding import _decoding_ints


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-softmax over the last axis (the decoders' next-token log-probabilities)."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def reference_decode(
    next_logprobs, batch: int, max_new_tokens: int, eos=None, beam_size: int = 1, length_penalty: float = 0.0
) -> np.ndarray:
    """Greedy (beam_size=1) or beam search, one batch of independent rows.

    next_logprobs(prefixes (N, t) int64, rows (N,) int64) -> (N, V) float64
    log-probabilities of the next token after each prefix of generated tokens
    (the row says which batch element the prefix belongs to).

    Returns int64 (batch, L), L <= max_new_tokens: the generated tokens. A row
    that produced ``eos`` ends with it, and every later position holds ``eos``
    too; L is the longest row (rows stop at eos; with eos=None every row has
    max_new_tokens tokens).

    Greedy: the most probable token at each step (the lowest id on ties).

    Beam search (beam_size = K > 1): each step extends every live hypothesis
    by every token. A candidate that ends in eos is finished, with score
    ``sum(log p) / length ** length_penalty`` (length = its tokens, eos
    included); finished hypotheses are all kept and take no beam slot. Of the
    other candidates the K best by ``sum(log p)`` stay live (ties: earlier
    hypothesis, then lower token id). Live hypotheses reaching max_new_tokens
    are finished with their length. The answer is the best finished
    hypothesis (the first found on ties). A row stops early only when no live
    hypothesis can still beat its best finished one (an exact bound), so with
    K at least the number of live candidates the search is exhaustive: for
    max_new_tokens = 2, K = V suffices.
    """
    if max_new_tokens == 0:
        return np.zeros((batch, 0), np.int64)
    if beam_size == 1:
        seqs = np.zeros((batch, 0), np.int64)
        done = np.zeros(batch, bool)
        rows = np.arange(batch)
        for _ in range(max_new_tokens):
            lp = next_logprobs(seqs, rows)
            tok = lp.argmax(axis=-1).astype(np.int64)
            if eos is not None:
                tok[done] = eos
                done |= tok == eos
            seqs = np.concatenate([seqs, tok[:, None]], axis=1)
            if eos is not None and done.all():
                break
        return seqs

    K, T, alpha = int(beam_size), int(max_new_tokens), float(length_penalty)
    live = [[((), 0.0)] for _ in range(batch)]  # per row: (tokens, sum of log p)
    best = [(-math.inf, None) for _ in range(batch)]
    for t in range(T):
        rows = [r for r in range(batch) if live[r]]
        if not rows:
            break
        prefixes = [h[0] for r in rows for h in live[r]]
        row_ids = np.array([r for r in rows for _ in live[r]], np.int64)
        lp = next_logprobs(np.array(prefixes, np.int64).reshape(len(prefixes), t), row_ids)
        V = lp.shape[1]
        L = t + 1
        offset = 0
        for r in rows:
            hyps = live[r]
            n = len(hyps)
            cand = np.array([h[1] for h in hyps], np.float64)[:, None] + lp[offset : offset + n]
            offset += n
            if eos is not None:
                for i in range(n):
                    score = cand[i, eos] / L**alpha
                    if score > best[r][0]:
                        best[r] = (score, hyps[i][0] + (eos,))
                cand[:, eos] = -math.inf
            flat = cand.reshape(-1)
            order = np.argsort(-flat, kind="stable")[:K]
            new = [(hyps[j // V][0] + (int(j % V),), float(flat[j])) for j in order if flat[j] > -math.inf]
            if L == T:
                for tokens, s in new:
                    score = s / L**alpha
                    if score > best[r][0]:
                        best[r] = (score, tokens)
                new = []
            elif new and best[r][1] is not None:
                # the best any extension of a live hypothesis could still score
                bound = max(max(s / (L + 1) ** alpha, s / T**alpha) for _, s in new)
                if best[r][0] >= bound:
                    new = []
            live[r] = new
    length = max(len(b[1]) for b in best)
    fill = eos if eos is not None else 0
    out = np.full((batch, length), fill, np.int64)
    for r, (_, tokens) in enumerate(best):
        out[r, : len(tokens)] = tokens
    return out


def _bos_prefixed(bos, prefixes):
    return np.concatenate([np.full((len(prefixes), 1), bos, np.int64), prefixes], axis=1)


def seq2seq_transformer(
    model, src, max_new_tokens, bos, eos=None, beam_size=1, length_penalty=0.0, *, src_key_padding_mask=None
):
    """Seq2SeqTransformer.generate's tokens."""
    src, kpm = model._decoding_args(src, src_key_padding_mask, max_new_tokens, bos, eos, beam_size, length_penalty)

    def next_logprobs(prefixes, rows):
        mask = None if kpm is None else kpm[rows]
        return log_softmax(model.forward(src[rows], _bos_prefixed(bos, prefixes), mask)[:, -1])

    with _EvalMode(model):
        return reference_decode(next_logprobs, src.shape[0], max_new_tokens, eos, beam_size, length_penalty)


def gpt(model, idx, max_new_tokens, eos=None, beam_size=1, length_penalty=0.0):
    """GPT.generate's tokens; the context is cropped to the last block_size
    tokens (GPT.generate refuses contexts that do not fit instead)."""
    idx = _ids(idx, "idx")
    _decoding_ints(max_new_tokens, eos, beam_size)

    def next_logprobs(prefixes, rows):
        ctx = np.concatenate([idx[rows], prefixes], axis=1)[:, -model.block_size :]
        return log_softmax(model.forward(ctx)[:, -1])

    with _EvalMode(model):
        return reference_decode(next_logprobs, idx.shape[0], max_new_tokens, eos, beam_size, length_penalty)


def rnn_seq2seq(model, src, src_lengths=None, max_len=30, bos=1, eos=2, beam_size=1, length_penalty=0.0):
    """Seq2Seq.generate's tokens (not its alignments)."""
    src, _, lens = model._inputs(src, None, src_lengths)
    _decoding_ints(max_len, eos, beam_size, "max_len")

    def next_logprobs(prefixes, rows):
        return log_softmax(model.forward(src[rows], _bos_prefixed(bos, prefixes), lens[rows])[:, -1])

    with _EvalMode(model):
        return reference_decode(next_logprobs, src.shape[0], max_len, eos, beam_size, length_penalty)


def captioner(model, features, max_len, bos, eos=None, beam_size=1, length_penalty=0.0):
    """Captioner.generate's (tokens, alphas). Greedy is written out; beam
    search is reference_decode's. The weights come from the teacher-forced
    passes (0 after a row's end)."""
    a, max_len, K = model._decoding_args(features, max_len, bos, eos, beam_size, length_penalty)
    B, L, _ = a.shape
    with _EvalMode(model):
        if K > 1:

            def next_logprobs(prefixes, rows):
                return log_softmax(model.forward(a[rows], _bos_prefixed(bos, prefixes))[:, -1])

            seqs = reference_decode(next_logprobs, B, max_len, eos, K, length_penalty)
            alphas = np.zeros(seqs.shape + (L,), model.dtype)
            if seqs.shape[1]:
                _, al = model.forward(a, _bos_prefixed(bos, seqs[:, :-1]), return_alphas=True)
                width = seqs.shape[1]
                ends = (
                    np.full(B, width)
                    if eos is None
                    else np.minimum(np.argmax(np.c_[seqs == eos, np.ones(B, bool)], axis=1) + 1, width)
                )
                keep = np.arange(width)[None, :] < ends[:, None]
                alphas = np.where(keep[..., None], al, 0).astype(model.dtype)
            return seqs, alphas
        seqs = np.zeros((B, 0), np.int64)
        alphas = np.zeros((B, 0, L), model.dtype)
        done = np.zeros(B, bool)
        for _ in range(max_len):
            logits, al = model.forward(a, _bos_prefixed(bos, seqs), return_alphas=True)
            tok = logits[:, -1].argmax(axis=-1).astype(np.int64)
            al = np.where(done[:, None, None], 0, al[:, -1:]).astype(model.dtype)  # 0 after a row's end
            if eos is not None:
                tok[done] = eos
                done |= tok == eos
            seqs = np.concatenate([seqs, tok[:, None]], axis=1)
            alphas = np.concatenate([alphas, al], axis=1)
            if eos is not None and done.all():
                break
    return seqs, alphas
