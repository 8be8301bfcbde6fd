"""PyTorch reference for attnc.models.PointerNet: the same pointer network written in torch.

Written from PointerNet's docstring (Vinyals, Fortunato & Jaitly 2015), independently of
attnc (no attnc import): torch.nn.LSTM(batch_first=True) for the encoder and the decoder,
nn.Linear for W1, W2 and v, the masks built here from the rules below. Parameters come
from an attnc state dict (NumPy arrays, attnc's names); `load_state_dict` is strict, so a
wrong key or shape fails loudly.

Sizes: B rows, n inputs of width D (row b has its first n_b real, 1 <= n_b <= n), H hidden,
T target steps. Positions as the user sees them: columns 0..n-1 are the inputs, column n
is the end token (its encoder state is the one of the learned `end` vector, read first).

    e_end, e_0..e_{n-1}, (h, c) = LSTM_enc([end; x_0; ...; x_{n-1}])   (row b over its n_b + 1 steps)
    d_i = LSTM_dec(x_{t_{i-1}}, (d_{i-1}, c_{i-1}))    (x_{t_{-1}} = start; initial state: the encoder's final)
    u_ij = v . tanh(W1 e_j + W2 d_i)
    log p(t_i = j) = log_softmax_j(u_ij, masked to -inf)

With an embedding (state dict keys embedding.weight (E, D), embedding.bias (E)), the
LSTMs read W_e z + b_e of every input vector z (x_j, start and end) instead of z.

Bidirectional (state dict keys encoder.*_l0_reverse, W1.weight (H, 2H)): the encoder is
nn.LSTM(bidirectional=True) over the same packed sequence, e_j is the concatenation of
its two directions' outputs at position j, and the decoder starts from the forward
direction's final state (h[:1], c[:1]).

Masked at step i: inputs j >= n_b (padding); inputs among t_0..t_{i-1} (already chosen);
the end token, for "permutation" and "tour" while fewer than n_b inputs are chosen (then
it is the only choice: log p = 0), for "hull" at step 0 only; and every column of the
steps after a row's end step (step T_b, T_b = the row's target count).

    m = TorchPointerNet.from_state(state_dict)                 # float64 by default
    logp = m(x, targets, lengths, constraint)                  # (B, T + 1, n + 1), end token last
    loss = m.loss(x, targets, lengths, constraint)             # mean NLL of the target and end steps
    out = m.greedy(x, lengths, constraint)                     # Decoded
    out = m.beam_search(x, lengths, constraint, beam_size=K, length_penalty=alpha)
    best = exhaustive(m, x, lengths, constraint, length_penalty=alpha)   # tiny n only

Decoding (greedy and beam search) is a Python loop over steps batched over rows and
beams (B K decoder rows), one decoder step of nn.LSTM at a time. Beam search keeps the K
best unfinished hypotheses by summed log-probability (hypotheses end by choosing the end
token: they are scored sum / length ** length_penalty, length counting the end step, and
the best of them is kept aside); it stops when no unfinished hypothesis can beat the best
finished one (an exact bound: log-probabilities are <= 0).
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

CONSTRAINTS = ("permutation", "tour", "hull")


class Decoded(NamedTuple):
    """indices (B, n) int64: the chosen inputs in order, -1 after the row's last (the
    end token is not listed; for "tour" the closing index is not appended);
    count (B,): inputs chosen; score (B,) float64: the summed log-probability of the
    choices and the end step; normalized (B,): score / (count + 1) ** length_penalty."""

    indices: np.ndarray
    count: np.ndarray
    score: np.ndarray
    normalized: np.ndarray


def state_shapes(
    input_size: int, hidden_size: int, embedding_size: int | None = None, bidirectional: bool = False
) -> dict:
    D, H, E = input_size, hidden_size, embedding_size
    shapes = {"start": (D,), "end": (D,)}
    if E:
        shapes.update({"embedding.weight": (E, D), "embedding.bias": (E,)})
    for part in ("encoder", "decoder"):
        for suffix in ("", "_reverse") if part == "encoder" and bidirectional else ("",):
            shapes.update(
                {
                    f"{part}.weight_ih_l0{suffix}": (4 * H, E or D),
                    f"{part}.weight_hh_l0{suffix}": (4 * H, H),
                    f"{part}.bias_ih_l0{suffix}": (4 * H,),
                    f"{part}.bias_hh_l0{suffix}": (4 * H,),
                }
            )
    shapes.update({"W1.weight": (H, 2 * H if bidirectional else H), "W2.weight": (H, H), "v.weight": (1, H)})
    return shapes


def random_state(
    input_size, hidden_size, seed=0, dtype=np.float64, scale=1.0, embedding_size=None, bidirectional=False
) -> dict:
    """Weights U(±scale/sqrt(H)) for the LSTMs and W1, W2, v, U(±scale/sqrt(D)) for the
    embedding, U(-1, 1) for start and end."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, shape in state_shapes(input_size, hidden_size, embedding_size, bidirectional).items():
        bound = 1.0 if name in ("start", "end") else scale / np.sqrt(input_size if "embedding" in name else hidden_size)
        state[name] = rng.uniform(-bound, bound, shape).astype(dtype)
    return state


class TorchPointerNet(nn.Module):
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        dtype=torch.float64,
        embedding_size: int | None = None,
        bidirectional: bool = False,
    ):
        super().__init__()
        D, H, E = input_size, hidden_size, embedding_size
        self.input_size, self.hidden_size, self.embedding_size = D, H, E
        self.bidirectional = bidirectional
        # optional: every input vector (start and end too) through a linear embedding first
        self.embedding = nn.Linear(D, E, dtype=dtype) if E else None
        self.encoder = nn.LSTM(E or D, H, batch_first=True, bidirectional=bidirectional, dtype=dtype)
        self.decoder = nn.LSTM(E or D, H, batch_first=True, dtype=dtype)
        self.W1 = nn.Linear(2 * H if bidirectional else H, H, bias=False, dtype=dtype)
        self.W2 = nn.Linear(H, H, bias=False, dtype=dtype)
        self.v = nn.Linear(H, 1, bias=False, dtype=dtype)
        self.start = nn.Parameter(torch.zeros(D, dtype=dtype))
        self.end = nn.Parameter(torch.zeros(D, dtype=dtype))

    @classmethod
    def from_state(cls, state_dict: dict, dtype=torch.float64) -> TorchPointerNet:
        D = np.shape(state_dict["start"])[0]
        H = np.shape(state_dict["W1.weight"])[0]
        E = np.shape(state_dict["embedding.weight"])[0] if "embedding.weight" in state_dict else None
        m = cls(D, H, dtype, embedding_size=E, bidirectional="encoder.weight_ih_l0_reverse" in state_dict)
        m.load_state_dict({k: torch.as_tensor(np.array(v)).to(dtype) for k, v in state_dict.items()})
        return m

    @property
    def dtype(self):
        return self.start.dtype

    def embed(self, z):
        """What the LSTMs read of input vectors z (..., D)."""
        return z if self.embedding is None else self.embedding(z)

    # ----------------------------------------------------------------------- pieces
    def _tensor(self, x):
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        return x.to(self.dtype)

    @staticmethod
    def _lengths(lengths, B, n):
        if lengths is None:
            return torch.full((B,), n, dtype=torch.int64)
        return torch.as_tensor(np.asarray(lengths), dtype=torch.int64)

    def encode(self, x, nl=None):
        """x (B, n, D), nl (B,) or None (every row has n inputs) -> keys W1 e (B, n + 1, H)
        in the user's column order (inputs, then the end token), the decoder's initial
        state (h, c) each (1, B, H): the (forward) encoder's final. Ragged rows go through
        a packed sequence."""
        B, n, D = x.shape
        seq = self.embed(torch.cat([self.end.expand(B, 1, D), x], dim=1))
        if nl is None:
            enc, (h, c) = self.encoder(seq)
        else:
            packed = pack_padded_sequence(seq, nl + 1, batch_first=True, enforce_sorted=False)
            out, (h, c) = self.encoder(packed)
            enc, _ = pad_packed_sequence(out, batch_first=True, total_length=n + 1)
        keys = self.W1(torch.cat([enc[:, 1:], enc[:, :1]], dim=1))
        return keys, (h[:1], c[:1])

    def scores(self, keys, d):
        """keys (B, P, H), d (B, S, H) -> u (B, S, P) = v . tanh(keys_j + W2 d_i)."""
        q = self.W2(d)
        return self.v(torch.tanh(keys[:, None, :, :] + q[:, :, None, :])).squeeze(-1)

    @staticmethod
    def masks(targets, nl, n, constraint):
        """targets (B, T) int64 (-1 padding), nl (B,) -> (mask (B, T + 1, n + 1) True =
        -inf, counts (B,))."""
        if constraint not in CONSTRAINTS:
            raise ValueError(f"unknown constraint {constraint!r}")
        B, T = targets.shape
        counts = (targets >= 0).sum(dim=1)
        steps = torch.arange(T + 1)
        mask = torch.zeros(B, T + 1, n + 1, dtype=torch.bool)
        # padding inputs
        mask[:, :, :n] |= (torch.arange(n)[None, :] >= nl[:, None])[:, None, :]
        # inputs chosen before step i: step i sees targets[:, :i]
        real = targets >= 0
        onehot = F.one_hot(targets.clamp(min=0), n + 1) * real[:, :, None]  # (B, T, n + 1)
        chosen = torch.cat([torch.zeros(B, 1, n + 1, dtype=onehot.dtype), onehot.cumsum(dim=1)], dim=1) > 0
        mask |= chosen
        n_chosen = chosen[:, :, :n].sum(dim=2)  # (B, T + 1)
        if constraint == "hull":
            mask[:, 0, n] = True
        else:
            mask[:, :, n] |= n_chosen < nl[:, None]
        mask |= (steps[None, :] > counts[:, None])[:, :, None]  # nothing after the end step
        return mask, counts

    # ----------------------------------------------------------------------- teacher forcing
    def forward(self, x, targets, lengths=None, constraint="permutation"):
        x = self._tensor(x)
        targets = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
        B, n, D = x.shape
        T = targets.shape[1]
        nl = self._lengths(lengths, B, n)
        keys, state = self.encode(x, None if lengths is None else nl)
        fed = torch.gather(x, 1, targets.clamp(min=0)[:, :, None].expand(B, T, D))
        dec_in = self.embed(torch.cat([self.start.expand(B, 1, D), fed], dim=1))
        d, _ = self.decoder(dec_in, state)  # causal: steps after a row's end are unused
        u = self.scores(keys, d)
        mask, _ = self.masks(targets, nl, n, constraint)
        dead = mask.all(dim=2, keepdim=True)  # steps after the end: all -inf, no NaN
        safe = torch.where(dead, torch.zeros_like(u), u.masked_fill(mask, float("-inf")))
        logp = F.log_softmax(safe, dim=-1)
        return logp.masked_fill(mask, float("-inf"))

    def loss(self, x, targets, lengths=None, constraint="permutation"):
        """The mean negative log-likelihood of every row's target steps and its end step."""
        logp = self.forward(x, targets, lengths, constraint)
        targets = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
        B = targets.shape[0]
        n = logp.shape[2] - 1
        counts = (targets >= 0).sum(dim=1)
        full = torch.cat([targets, torch.full((B, 1), -1, dtype=torch.int64)], dim=1)
        full[torch.arange(B), counts] = n  # the end step
        keep = full >= 0
        picked = torch.gather(logp, 2, full.clamp(min=0)[:, :, None])[:, :, 0]
        return -picked[keep].sum() / keep.sum()

    # ----------------------------------------------------------------------- decoding
    def _prepare(self, x, lengths, K):
        x = self._tensor(x)
        B, n, _ = x.shape
        nl = self._lengths(lengths, B, n)
        keys, (h, c) = self.encode(x, None if lengths is None else nl)
        R = B * K
        keys = keys.repeat_interleave(K, dim=0)  # (R, n + 1, H)
        h, c = h.repeat_interleave(K, dim=1), c.repeat_interleave(K, dim=1)
        pad = torch.arange(n)[None, :] >= nl.repeat_interleave(K)[:, None]
        return x, nl, keys, (h, c), pad, R, self.embed(x), self.embed(self.start)

    def _step(self, inp, state, keys, chosen, pad, nlr, constraint, step):
        """One decoder step of every row: log-probabilities (R, n + 1), the new state."""
        out, state = self.decoder(inp[:, None, :], state)
        u = self.scores(keys, out)[:, 0]  # (R, n + 1)
        n = pad.shape[1]
        mask = torch.cat([pad | chosen, torch.zeros_like(pad[:, :1])], dim=1)
        taken = (chosen & ~pad).sum(dim=1)
        if constraint == "hull":
            mask[:, n] = step == 0
        else:
            mask[:, n] = taken < nlr
        return F.log_softmax(u.masked_fill(mask, float("-inf")), dim=-1), state

    @torch.no_grad()
    def greedy(self, x, lengths=None, constraint="permutation") -> Decoded:
        if constraint not in CONSTRAINTS:
            raise ValueError(f"unknown constraint {constraint!r}")
        x, nl, keys, state, pad, B, feed, start = self._prepare(x, lengths, 1)
        n = x.shape[1]
        chosen = torch.zeros(B, n, dtype=torch.bool)
        done = torch.zeros(B, dtype=torch.bool)
        count = torch.zeros(B, dtype=torch.int64)
        score = torch.zeros(B, dtype=torch.float64)
        indices = torch.full((B, n), -1, dtype=torch.int64)
        inp = start.expand(B, start.shape[0])
        rows = torch.arange(B)
        for step in range(n + 1):
            lp, state = self._step(inp, state, keys, chosen, pad, nl, constraint, step)
            tok = lp.argmax(dim=1)
            live = ~done
            score += torch.where(live, lp[rows, tok].double(), torch.zeros((), dtype=torch.float64))
            ends = tok == n
            pick = live & ~ends
            indices[rows[pick], count[pick]] = tok[pick]
            chosen[rows[pick], tok[pick]] = True
            count += pick.long()
            done |= ends
            if bool(done.all()):
                break
            inp = feed[rows, tok.clamp(max=n - 1)]
        c = count.numpy()
        return Decoded(indices.numpy(), c, score.numpy(), score.numpy().copy())

    @torch.no_grad()
    def beam_search(self, x, lengths=None, constraint="permutation", beam_size=3, length_penalty=0.0) -> Decoded:
        if constraint not in CONSTRAINTS:
            raise ValueError(f"unknown constraint {constraint!r}")
        if beam_size < 1:
            raise ValueError("beam_size must be >= 1")
        K, alpha = int(beam_size), float(length_penalty)
        x, nl, keys, (h, c), pad, R, feed, start = self._prepare(x, lengths, K)
        B, n, _ = x.shape
        T = n + 1  # the most steps a sequence takes
        nlr = nl.repeat_interleave(K)
        ninf = float("-inf")
        scores = torch.full((B, K), ninf, dtype=self.dtype)
        scores[:, 0] = 0  # one live hypothesis to begin with
        hist = torch.zeros(B, K, 0, dtype=torch.int64)
        chosen = torch.zeros(R, n, dtype=torch.bool)
        best = torch.full((B,), ninf, dtype=torch.float64)
        best_raw = torch.full((B,), ninf, dtype=torch.float64)
        best_seq = torch.full((B, n), -1, dtype=torch.int64)
        best_count = torch.zeros(B, dtype=torch.int64)
        inp = start.expand(R, start.shape[0])
        state = (h, c)
        rows = torch.arange(B)
        base = (rows * K)[:, None]  # (B, 1): each row's first decoder row
        for step in range(T):
            lp, state = self._step(inp, state, keys, chosen, pad, nlr, constraint, step)
            lp = lp.view(B, K, n + 1)
            L = step + 1
            # hypotheses that end now
            fin_raw = scores + lp[:, :, n]
            fin = fin_raw.double() / float(L) ** alpha
            fbest, fk = fin.max(dim=1)
            better = fbest > best
            if bool(better.any()):
                b = rows[better]
                best[b] = fbest[b]
                best_raw[b] = fin_raw[b, fk[b]].double()
                best_count[b] = step
                best_seq[b] = -1
                if step:
                    best_seq[b, :step] = hist[b, fk[b]]
            # the K best continuations by an input
            cand = (scores[:, :, None] + lp[:, :, :n]).reshape(B, K * n)
            top, idx = cand.topk(K, dim=1)
            parent, tok = idx // n, idx % n
            scores = top
            hist = torch.cat([torch.gather(hist, 1, parent[:, :, None].expand(B, K, step)), tok[:, :, None]], dim=2)
            src = (base + parent).reshape(R)
            state = (state[0][:, src], state[1][:, src])
            chosen = chosen[src]
            flat_tok = tok.reshape(R)
            chosen[torch.arange(R), flat_tok] = True
            inp = feed[src // K, flat_tok]
            # can an unfinished hypothesis still beat the best finished one?
            live = scores > ninf
            if not bool(live.any()):
                break
            s = scores.double()
            hi = torch.maximum(s / float(L + 1) ** alpha, s / float(T) ** alpha)
            bound = torch.where(live, hi, torch.full_like(hi, ninf)).max(dim=1).values
            if bool((best >= bound).all()):
                break
        return Decoded(best_seq.numpy(), best_count.numpy(), best_raw.numpy(), best.numpy())


# --------------------------------------------------------------------------- exhaustive search
def candidates(nb: int, constraint: str):
    """Every valid sequence of input indices (the end token not listed) of a row with nb inputs."""
    if constraint in ("permutation", "tour"):
        return [list(p) for p in itertools.permutations(range(nb))]
    return [list(p) for k in range(1, nb + 1) for p in itertools.permutations(range(nb), k)]


def sequence_scores(model: TorchPointerNet, x, lengths, targets, constraint):
    """(total (B,) float64, count (B,)): the summed log-probability (target steps and end
    step) of each row's sequence targets (B, T) (input indices, -1 after the last; for
    "tour" without the closing index) under the teacher-forced forward."""
    t = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    with torch.no_grad():
        logp = model(x, t.numpy(), lengths, constraint)
    S, n = t.shape[0], logp.shape[2] - 1
    counts = (t >= 0).sum(1)
    full = torch.cat([t, torch.full((S, 1), -1)], dim=1)
    full[torch.arange(S), counts] = n
    keep = full >= 0
    picked = torch.gather(logp, 2, full.clamp(min=0)[:, :, None])[:, :, 0]
    return torch.where(keep, picked, torch.zeros_like(picked)).sum(1).double().numpy(), counts.numpy()


def exhaustive(model: TorchPointerNet, x, lengths=None, constraint="permutation", length_penalty=0.0) -> Decoded:
    """The best sequence of every row over all valid sequences (score / (count + 1) **
    length_penalty); tiny n only (n! or more sequences per row)."""
    x = np.asarray(x)
    B, n, _ = x.shape
    nl = np.full(B, n) if lengths is None else np.asarray(lengths)
    indices = np.full((B, n), -1, np.int64)
    count = np.zeros(B, np.int64)
    score = np.zeros(B)
    norm = np.zeros(B)
    for b in range(B):
        seqs = candidates(int(nl[b]), constraint)
        targets = np.full((len(seqs), n), -1, np.int64)
        for i, s in enumerate(seqs):
            targets[i, : len(s)] = s
        raw, counts = sequence_scores(
            model, np.repeat(x[b : b + 1], len(seqs), 0), np.full(len(seqs), nl[b]), targets, constraint
        )
        normed = raw / (counts + 1.0) ** length_penalty
        i = int(np.argmax(normed))
        indices[b, : counts[i]] = seqs[i]
        count[b], score[b], norm[b] = counts[i], raw[i], normed[i]
    return Decoded(indices, count, score, norm)
