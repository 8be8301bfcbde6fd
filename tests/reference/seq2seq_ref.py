"""PyTorch reference for attnc.models.Seq2Seq (recurrent encoder-decoder, batch first).

Written from /work/notes/seq2seq_spec.md, independently of attnc: torch.nn modules for
the pieces torch has (nn.Embedding, nn.LSTM with pack_padded_sequence, nn.LSTMCell,
nn.Linear) and every attention written out from the spec in a Python loop over the
decoder steps. Parameters come from an attnc state dict (NumPy arrays, the spec's keys);
`TorchSeq2Seq.load_state_dict` is strict, so a wrong key or shape fails loudly.

Symbols: E embed size, H hidden size, D = 2 (bidirectional encoder) or 1, He = D·H,
A attention size, D_w the local window half-width, S source steps, T target steps.

    enc, (h_n, c_n) = LSTM(src_embedding[src]) over each row's first len_b steps
    final = [h_n forward ; h_n reverse]      h_{-1} = tanh(bridge(final)), c_{-1} = 0
    "none":     h_t = LSTMCell([y_t ; final]);                     o_t = h_t
    "bahdanau": e = v·tanh(W_q h_{t-1} + K_s), K = enc W_kᵀ;  α = softmax over s < len
                h_t = LSTMCell([y_t ; ctx_t]);                     o_t = [h_t ; ctx_t]
    Luong:      h_t = LSTMCell([y_t ; h̃_{t-1}]), h̃_{-1} = 0 (input feeding; without it
                h_t = LSTMCell(y_t), decoder.weight_ih (4H, E)); scores on h_t
                dot h_t·enc_s, general / local h_t·(W enc_s), concat v·tanh(W_q h_t + K_s),
                location (W h_t + b)[s];  ctx_t = Σ α enc;  h̃_t = tanh(C [ctx_t ; h_t]); o_t = h̃_t
    local-m:    p_t = t;  local-p: p_t = len_b · σ(v_p·tanh(W_p h_t))
                allowed: s < len_b and ceil(p_t − D_w) ≤ s ≤ floor(p_t + D_w);
                α = softmax of the general score over the allowed positions, local-p times
                exp(−(s − p_t)² / (2 (D_w/2)²)) (not renormalised); none allowed: α = 0, ctx = 0
    logits_t = out(o_t);  loss = cross-entropy(logits, tgt_out, ignore_index=-100), mean
    over the counted tokens.

Masked softmax: scores at disallowed positions are set to -inf before torch.softmax; a
row with no allowed position (only the local kinds can have one) gets zero weights and
a zero gradient, never NaN. The window bounds are not differentiated (the spec's
ceil/floor); local-p's gradient reaches W_p, v_p through the Gaussian factor.

greedy(): bos first, argmax each step, a row that emits eos ends with it and is filled
with eos after (alignments 0 there); stops when every row has ended or after max_len
steps. Tokens (B, L) int64 without bos, alignments (B, L, S) — the conventions of
attnc.models.Seq2SeqTransformer.generate.

Run `python tests/reference/seq2seq_ref.py` for the reference's own checks (gradcheck in
float64 for every attention kind, padding, windows, local-p's Gaussian, the loss's
mean, the encoder against tests/reference/rnn_ref.py, greedy against teacher forcing).
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

KINDS = ("none", "bahdanau", "luong-dot", "luong-general", "luong-concat", "luong-location", "local-m", "local-p")
LUONG = ("luong-dot", "luong-general", "luong-concat", "luong-location", "local-m", "local-p")
IGNORE_INDEX = -100


# --------------------------------------------------------------------------- shapes from the spec
def state_shapes(
    src_vocab,
    tgt_vocab,
    embed_size=32,
    hidden_size=64,
    attention="bahdanau",
    *,
    bidirectional=None,
    attention_size=None,
    max_source_len=None,
    input_feeding=True,
):
    """{state_dict key: shape} of the spec's model (the spec's defaults)."""
    if attention not in KINDS:
        raise ValueError(f"unknown attention {attention!r}")
    E, H = embed_size, hidden_size
    D = (2 if attention == "bahdanau" else 1) if bidirectional is None else (2 if bidirectional else 1)
    He = D * H
    A = H if attention_size is None else attention_size
    if attention == "luong-dot" and He != H:
        raise ValueError("luong-dot needs D·H == H (a unidirectional encoder)")
    if attention == "luong-location" and max_source_len is None:
        raise ValueError("luong-location needs max_source_len")
    shapes = {"src_embedding.weight": (src_vocab, E), "tgt_embedding.weight": (tgt_vocab, E)}
    for sfx in ("", "_reverse")[:D]:
        shapes.update(
            {
                f"encoder.weight_ih_l0{sfx}": (4 * H, E),
                f"encoder.weight_hh_l0{sfx}": (4 * H, H),
                f"encoder.bias_ih_l0{sfx}": (4 * H,),
                f"encoder.bias_hh_l0{sfx}": (4 * H,),
            }
        )
    shapes.update({"bridge.weight": (H, He), "bridge.bias": (H,)})
    fin = He if attention in ("none", "bahdanau") else H if input_feeding else 0
    shapes.update(
        {
            "decoder.weight_ih": (4 * H, E + fin),
            "decoder.weight_hh": (4 * H, H),
            "decoder.bias_ih": (4 * H,),
            "decoder.bias_hh": (4 * H,),
        }
    )
    if attention in ("bahdanau", "luong-concat"):
        shapes.update({"attention.query.weight": (A, H), "attention.key.weight": (A, He), "attention.v": (A,)})
    if attention in ("luong-general", "local-m", "local-p"):
        shapes["attention.weight"] = (H, He)
    if attention == "luong-location":
        shapes.update({"attention.weight": (max_source_len, H), "attention.bias": (max_source_len,)})
    if attention == "local-p":
        shapes.update({"attention.position.weight": (A, H), "attention.position.v": (A,)})
    if attention in LUONG:
        shapes["combine.weight"] = (H, He + H)
    out_in = {"none": H, "bahdanau": He + H}.get(attention, H)
    shapes.update({"out.weight": (tgt_vocab, out_in), "out.bias": (tgt_vocab,)})
    return shapes


def random_state(shapes, seed=0, dtype=np.float64, scale=1.0):
    """A state dict for `shapes`, each value drawn from a generator keyed by (seed, name):
    matrices U(-scale/sqrt(fan_in), +), vectors U(-0.1, 0.1)·scale, embeddings N(0, 1)."""
    out = {}
    for name, shape in shapes.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if "embedding" in name:
            a = rng.standard_normal(shape)
        elif len(shape) == 2:
            b = scale / math.sqrt(shape[1])
            a = rng.uniform(-b, b, shape)
        else:
            a = rng.uniform(-0.1, 0.1, shape) * scale
        out[name] = a.astype(dtype)
    return out


# --------------------------------------------------------------------------- the model
class _Params(nn.Module):
    """A bag of named parameters (attention.v, attention.position.weight, ...)."""

    def __init__(self, **shapes):
        super().__init__()
        for name, shape in shapes.items():
            self.register_parameter(name, nn.Parameter(torch.zeros(shape)))


def masked_softmax(scores, allowed, may_be_empty):
    """softmax over the last axis of scores where allowed; -inf elsewhere. Rows with
    no allowed position (possible only when may_be_empty) give zeros, not NaN."""
    s = scores.masked_fill(~allowed, float("-inf"))
    if not may_be_empty:
        return torch.softmax(s, -1)
    some = allowed.any(-1, keepdim=True)
    s = torch.where(some, s, torch.zeros_like(s))
    return torch.where(allowed, torch.softmax(s, -1), torch.zeros_like(s))


def _long(x):
    return x.long() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x, dtype=np.int64))


class TorchSeq2Seq(nn.Module):
    """The spec's model in torch, built from an attnc state dict.

    TorchSeq2Seq(state, attention, window=5, input_feeding=True, dtype=torch.float64):
    sizes, D and max_source_len are read from the state dict's shapes. Parameters require grad.
    forward(src, src_lengths, tgt_in, return_alignments=False, sample_mask=None)
        -> logits (B, T, Vt) [, alignments (B, T, S)]
    sample_mask (B, T) bool, optional: scheduled sampling with a given choice — where
    True (t >= 1) the input token is argmax(logits_{t-1}) instead of tgt_in[:, t].
    """

    def __init__(self, state, attention="bahdanau", *, window=5, input_feeding=True, dtype=torch.float64):
        super().__init__()
        if attention not in KINDS:
            raise ValueError(f"unknown attention {attention!r}")
        self.kind = attention
        self.input_feeding = input_feeding
        self.window = float(window)
        sd = {k: np.asarray(v) for k, v in state.items()}
        Vs, E = sd["src_embedding.weight"].shape
        Vt = sd["tgt_embedding.weight"].shape[0]
        H = sd["encoder.weight_hh_l0"].shape[1]
        D = 2 if "encoder.weight_ih_l0_reverse" in sd else 1
        He = D * H
        self.E, self.H, self.D, self.He = E, H, D, He
        self.src_embedding = nn.Embedding(Vs, E)
        self.tgt_embedding = nn.Embedding(Vt, E)
        self.encoder = nn.LSTM(E, H, batch_first=True, bidirectional=D == 2)
        self.bridge = nn.Linear(He, H)
        fin = He if attention in ("none", "bahdanau") else H if input_feeding else 0
        self.decoder = nn.LSTMCell(E + fin, H)
        if attention in ("bahdanau", "luong-concat"):
            A = sd["attention.v"].shape[0]
            self.attention = nn.Module()
            self.attention.query = nn.Linear(H, A, bias=False)
            self.attention.key = nn.Linear(He, A, bias=False)
            self.attention.v = nn.Parameter(torch.zeros(A))
        elif attention in ("luong-general", "local-m", "local-p"):
            self.attention = _Params(weight=(H, He))
            if attention == "local-p":
                A = sd["attention.position.v"].shape[0]
                self.attention.position = _Params(weight=(A, H), v=(A,))
        elif attention == "luong-location":
            self.max_source_len = sd["attention.weight"].shape[0]
            self.attention = nn.Linear(H, self.max_source_len)
        if attention in LUONG:
            self.combine = nn.Linear(He + H, H, bias=False)
        self.out = nn.Linear(He + H if attention == "bahdanau" else H, Vt)
        self.to(dtype)
        self.dtype = dtype
        self.load_state_dict({k: torch.from_numpy(v.astype(np.float64)).to(dtype) for k, v in sd.items()})
        self.record = False  # set True to keep per-step h_t, context and p_t in self.trace

    # ------------------------------------------------------------------ pieces
    def encode(self, src, src_lengths=None):
        """enc (B, S, He) zero at padding, final (B, He), lengths (B,) int64."""
        src = _long(src)
        B, S = src.shape
        lengths = torch.full((B,), S, dtype=torch.long) if src_lengths is None else _long(src_lengths)
        if lengths.shape != (B,) or int(lengths.min()) < 1 or int(lengths.max()) > S:
            raise ValueError("src_lengths must be (B,) with 1 <= len <= S")
        nnu = nn.utils.rnn
        packed = nnu.pack_padded_sequence(self.src_embedding(src), lengths, batch_first=True, enforce_sorted=False)
        out, (h_n, _) = self.encoder(packed)
        enc, _ = nnu.pad_packed_sequence(out, batch_first=True, total_length=S)
        final = torch.cat([h_n[0], h_n[1]], -1) if self.D == 2 else h_n[0]
        return enc, final, lengths

    def _keys(self, enc):
        if self.kind in ("bahdanau", "luong-concat"):
            return F.linear(enc, self.attention.key.weight)
        if self.kind in ("luong-general", "local-m", "local-p"):
            return F.linear(enc, self.attention.weight)
        if self.kind == "luong-dot":
            return enc
        return None

    def _start(self, src, src_lengths):
        enc, final, lengths = self.encode(src, src_lengths)
        B, S, _ = enc.shape
        st = {
            "enc": enc,
            "final": final,
            "lengths": lengths,
            "keys": self._keys(enc),
            "valid": torch.arange(S)[None, :] < lengths[:, None],
            "h": torch.tanh(self.bridge(final)),
            "c": enc.new_zeros(B, self.H),
            "feed": enc.new_zeros(B, self.H) if self.kind in LUONG else None,
        }
        return st

    def _attend(self, st, q, t):
        """(α (B, S), ctx (B, He), p (B,) or None) for query q (B, H) at step t."""
        kind, enc, K, valid = self.kind, st["enc"], st["keys"], st["valid"]
        S = enc.shape[1]
        p = None
        if kind in ("bahdanau", "luong-concat"):
            e = torch.tanh(F.linear(q, self.attention.query.weight)[:, None, :] + K) @ self.attention.v
            alpha = masked_softmax(e, valid, False)
        elif kind in ("luong-dot", "luong-general"):
            alpha = masked_softmax(torch.einsum("bh,bsh->bs", q, K), valid, False)
        elif kind == "luong-location":
            alpha = masked_softmax(self.attention(q)[:, :S], valid, False)
        else:  # local-m, local-p
            e = torch.einsum("bh,bsh->bs", q, K)
            if kind == "local-m":
                p = torch.full((q.shape[0],), float(t), dtype=q.dtype)
            else:
                pw = self.attention.position
                p = st["lengths"].to(q.dtype) * torch.sigmoid(torch.tanh(F.linear(q, pw.weight)) @ pw.v)
            pd = p.detach()
            s = torch.arange(S, dtype=q.dtype)[None, :]
            lo = torch.ceil(pd - self.window)[:, None]
            hi = torch.floor(pd + self.window)[:, None]
            allowed = valid & (s >= lo) & (s <= hi)
            alpha = masked_softmax(e, allowed, True)
            if kind == "local-p":
                sigma = self.window / 2.0
                alpha = alpha * torch.exp(-((s - p[:, None]) ** 2) / (2.0 * sigma * sigma))
        ctx = torch.bmm(alpha[:, None, :], enc)[:, 0]
        return alpha, ctx, p

    def _step(self, st, y, t):
        """One decoder step from embedded input y (B, E): (logits (B, Vt), α (B, S) or None)."""
        kind = self.kind
        h, c = st["h"], st["c"]
        alpha, ctx, p = None, None, None
        if kind == "none":
            h, c = self.decoder(torch.cat([y, st["final"]], -1), (h, c))
            o = h
        elif kind == "bahdanau":
            alpha, ctx, _ = self._attend(st, h, t)
            h, c = self.decoder(torch.cat([y, ctx], -1), (h, c))
            o = torch.cat([h, ctx], -1)
        else:
            h, c = self.decoder(torch.cat([y, st["feed"]], -1) if self.input_feeding else y, (h, c))
            alpha, ctx, p = self._attend(st, h, t)
            o = torch.tanh(F.linear(torch.cat([ctx, h], -1), self.combine.weight))
            st["feed"] = o
        st["h"], st["c"] = h, c
        if self.record:
            self.trace["h"].append(h.detach())
            self.trace["ctx"].append(None if ctx is None else ctx.detach())
            self.trace["p"].append(None if p is None else p.detach())
        return self.out(o), alpha

    def _new_trace(self):
        self.trace = {"h": [], "ctx": [], "p": []}

    # ------------------------------------------------------------------ API
    def forward(self, src, src_lengths=None, tgt_in=None, return_alignments=False, sample_mask=None):
        tgt_in = _long(tgt_in)
        st = self._start(src, src_lengths)
        B, T = tgt_in.shape
        S = st["enc"].shape[1]
        if self.record:
            self._new_trace()
        emb = self.tgt_embedding(tgt_in)
        logits, alphas = [], []
        tokens = tgt_in
        if sample_mask is not None:
            sample_mask = torch.as_tensor(np.asarray(sample_mask, dtype=bool))
        for t in range(T):
            y = emb[:, t]
            if sample_mask is not None and t >= 1:
                prev = logits[-1].detach().argmax(-1)
                tokens = torch.where(sample_mask[:, t], prev, tgt_in[:, t])
                y = self.tgt_embedding(tokens)
            lg, a = self._step(st, y, t)
            logits.append(lg)
            alphas.append(a if a is not None else st["enc"].new_zeros(B, S))
        logits = torch.stack(logits, 1)
        if return_alignments:
            return logits, torch.stack(alphas, 1)
        return logits

    def loss(self, src, src_lengths, tgt_in, tgt_out, sample_mask=None):
        """Mean cross-entropy over the tokens of tgt_out that are not -100 (a torch scalar)."""
        logits = self(src, src_lengths, tgt_in, sample_mask=sample_mask)
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), _long(tgt_out).reshape(-1), ignore_index=IGNORE_INDEX
        )

    def loss_and_grad(self, src, src_lengths, tgt_in, tgt_out, sample_mask=None):
        """(loss float, {state_dict key: gradient as NumPy}); gradients reset first."""
        for p in self.parameters():
            p.grad = None
        loss = self.loss(src, src_lengths, tgt_in, tgt_out, sample_mask)
        loss.backward()
        return float(loss.detach()), {
            n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy().copy()
            for n, p in self.named_parameters()
        }

    def grads(self, src, src_lengths, tgt_in, tgt_out, sample_mask=None):
        """{state_dict key: gradient of the mean loss (NumPy)}."""
        return self.loss_and_grad(src, src_lengths, tgt_in, tgt_out, sample_mask)[1]

    @torch.no_grad()
    def greedy(self, src, src_lengths=None, max_len=20, bos=1, eos=2):
        """Greedy decoding as a plain step loop: (tokens (B, L) int64, alignments (B, L, S))
        as NumPy, bos not included, eos after a row's end, L <= max_len."""
        st = self._start(src, src_lengths)
        B, S = st["enc"].shape[:2]
        tok = torch.full((B,), bos, dtype=torch.long)
        done = torch.zeros(B, dtype=torch.bool)
        toks, alphas = [], []
        for t in range(max_len):
            lg, a = self._step(st, self.tgt_embedding(tok), t)
            a = st["enc"].new_zeros(B, S) if a is None else a
            tok = torch.where(done, torch.full_like(tok, eos), lg.argmax(-1))
            toks.append(tok)
            alphas.append(torch.where(done[:, None], torch.zeros_like(a), a))
            done = done | (tok == eos)
            if bool(done.all()):
                break
        if not toks:
            return np.zeros((B, 0), np.int64), np.zeros((B, 0, S))
        return torch.stack(toks, 1).numpy(), torch.stack(alphas, 1).numpy()


# --------------------------------------------------------------------------- self-checks
def _inputs(rng, B, S, T, Vs, Vt, lengths=None, ignore=True):
    src = rng.integers(3, Vs, (B, S))
    lengths = np.asarray(lengths if lengths is not None else rng.integers(1, S + 1, B))
    lengths[0] = S
    src[np.arange(S)[None, :] >= lengths[:, None]] = 0
    tgt_in = rng.integers(1, Vt, (B, T))
    tgt_out = rng.integers(0, Vt, (B, T))
    if ignore:
        tgt_out[1, T - 2 :] = IGNORE_INDEX
    return src, lengths, tgt_in, tgt_out


def _tiny(kind, bidirectional=None, seed=0, window=1.5, S=5, scale=2.0):
    Vs, Vt, E, H, A = 7, 5, 3, 4, 3
    shapes = state_shapes(
        Vs,
        Vt,
        E,
        H,
        kind,
        bidirectional=bidirectional,
        attention_size=A,
        max_source_len=S + 2 if kind == "luong-location" else None,
    )
    state = random_state(shapes, seed=seed, scale=scale)
    return state, TorchSeq2Seq(state, kind, window=window, dtype=torch.float64)


def self_check(verbose=True):
    """The reference's own checks (no attnc involved). Raises AssertionError on failure."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location(
        "rnn_ref", os.path.join(os.path.dirname(os.path.abspath(__file__)), "rnn_ref.py")
    )
    rnn_ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rnn_ref)

    torch.manual_seed(0)
    rng = np.random.default_rng(7)
    log = print if verbose else (lambda *a, **k: None)
    B, S, T = 3, 5, 8  # T > len + window: local-m has steps with no allowed position
    lengths = np.array([S, 2, 3])
    variants = [(k, None) for k in KINDS] + [("bahdanau", False), ("luong-general", True), ("none", True)]

    # 1. gradcheck in float64: logits, alignments and the loss against every parameter
    for kind, bidir in variants:
        state, m = _tiny(kind, bidir)
        src, lens, tgt_in, tgt_out = _inputs(rng, B, S, T, 7, 5, lengths)
        names = [n for n, _ in m.named_parameters()]
        params = [p for _, p in m.named_parameters()]

        def fn(*ps):
            return torch.func.functional_call(m, dict(zip(names, ps)), (src, lens, tgt_in, True))

        def lossfn(*ps):
            return _loss_call(m, names, ps, src, lens, tgt_in, tgt_out)

        # the loss: every entry of every parameter's gradient; logits and alignments: the
        # Jacobian along random directions (fast_mode), which covers every output
        assert torch.autograd.gradcheck(lossfn, tuple(params), eps=1e-6, atol=1e-6, rtol=1e-5)
        assert torch.autograd.gradcheck(fn, tuple(params), eps=1e-6, atol=1e-6, rtol=1e-5, fast_mode=True)
        g = m.grads(src, lens, tgt_in, tgt_out)
        assert sorted(g) == sorted(state) and all(g[k].shape == state[k].shape for k in state)
        assert all(np.isfinite(v).all() for v in g.values())
        log(
            f"gradcheck float64 ok: {kind}{'' if bidir is None else f' (bidirectional={bidir})'} "
            f"({sum(p.numel() for p in params)} parameters)"
        )

    # 2. encoder against the NumPy reference (packed semantics, final state = [fwd ; rev])
    for bidir in (False, True):
        state, m = _tiny("none", bidir)
        src, lens, tgt_in, _ = _inputs(rng, 4, 6, 3, 7, 5, [6, 1, 4, 2])
        with torch.no_grad():
            enc, final, _ = m.encode(src, lens)
        sd = {k[len("encoder.") :]: v for k, v in state.items() if k.startswith("encoder.")}
        x = state["src_embedding.weight"][src]
        out, (h_n, _) = rnn_ref.rnn("lstm", sd, x, lengths=lens, bidirectional=bidir)
        want_final = np.concatenate(list(h_n), -1)
        assert np.abs(enc.numpy() - out).max() < 1e-12 and np.abs(final.numpy() - want_final).max() < 1e-12
    log("encoder = tests/reference/rnn_ref.py (ragged, uni- and bidirectional, final state)")

    # 3. alignments: 0 at padding; rows sum to 1 (global kinds); local windows exact
    for kind, bidir in variants:
        state, m = _tiny(kind, bidir, window=1.5)
        src, lens, tgt_in, _ = _inputs(rng, B, S, T, 7, 5, lengths)
        m.record = True
        with torch.no_grad():
            _, al = m(src, lens, tgt_in, return_alignments=True)
        al = al.numpy()
        pad = np.arange(S)[None, None, :] >= lens[:, None, None]
        assert np.all(al[np.broadcast_to(pad, al.shape)] == 0.0), kind
        assert np.isfinite(al).all()
        if kind == "none":
            assert np.all(al == 0)
        elif kind in ("bahdanau",) or kind.startswith("luong"):
            assert np.abs(al.sum(-1) - 1).max() < 1e-12, kind
        else:
            p = torch.stack(m.trace["p"], 1).numpy()  # (B, T)
            s = np.arange(S)[None, None, :]
            win = (s >= np.ceil(p - 1.5)[..., None]) & (s <= np.floor(p + 1.5)[..., None]) & ~pad
            assert np.all(al[~win] == 0.0), kind
            h = torch.stack(m.trace["h"], 1).numpy()
            ctx = torch.stack(m.trace["ctx"], 1).numpy()
            enc = m.encode(src, lens)[0].detach().numpy()
            K = enc @ state["attention.weight"].T  # (B, S, H)
            e = np.einsum("bth,bsh->bts", h, K)
            e = np.where(win, e, -np.inf)
            mx = np.where(win.any(-1, keepdims=True), e.max(-1, keepdims=True), 0.0)
            w = np.where(win, np.exp(e - mx), 0.0)
            den = w.sum(-1, keepdims=True)
            soft = np.where(den > 0, w / np.where(den > 0, den, 1.0), 0.0)
            if kind == "local-m":
                assert np.array_equal(p, np.broadcast_to(np.arange(T, dtype=float), p.shape))
                assert np.abs(al - soft).max() < 1e-12
                empty = ~win.any(-1)
                assert empty.any(), "the check needs steps with no allowed position"
                assert np.all(al[empty] == 0) and np.all(ctx[empty] == 0)
            else:
                wp, vp = state["attention.position.weight"], state["attention.position.v"]
                want_p = lens[:, None] / (1 + np.exp(-(np.tanh(h @ wp.T) @ vp)))
                assert np.abs(p - want_p).max() < 1e-12
                gauss = np.exp(-((s - p[..., None]) ** 2) / (2 * (1.5 / 2) ** 2))
                assert np.abs(al - soft * gauss).max() < 1e-12, "local-p = softmax x Gaussian"
                assert np.all(al.sum(-1) <= 1 + 1e-12)
            assert np.abs(ctx - np.einsum("bts,bsd->btd", al, enc)).max() < 1e-12
        m.record = False
    log(
        "alignments: 0 at padding, global rows sum to 1, local-m window [ceil(t-D), floor(t+D)] with "
        "empty windows -> alpha = 0 and ctx = 0, local-p = softmax x Gaussian recomputed in NumPy"
    )

    # 4. the loss is the mean cross-entropy over the counted tokens
    for kind in ("bahdanau", "luong-general", "local-p"):
        _, m = _tiny(kind)
        src, lens, tgt_in, tgt_out = _inputs(rng, B, S, T, 7, 5, lengths)
        tgt_out[2, :3] = IGNORE_INDEX
        with torch.no_grad():
            loss = float(m.loss(src, lens, tgt_in, tgt_out))
            lg = m(src, lens, tgt_in).numpy()
        lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
        keep = tgt_out != IGNORE_INDEX
        nll = lse[keep] - np.take_along_axis(lg, np.where(keep, tgt_out, 0)[..., None], -1)[..., 0][keep]
        assert abs(loss - nll.mean()) < 1e-12 and keep.sum() < keep.size
    log("loss = mean over non-ignored tokens (ignore_index -100)")

    # 5. greedy = argmax of teacher forcing on its own tokens; alignments match; float32 ~ float64
    for kind in KINDS:
        state, m = _tiny(kind, scale=3.0)
        src, lens, _, _ = _inputs(rng, 4, S, 2, 7, 5, [S, 2, 3, 1])
        toks, al = m.greedy(src, lens, max_len=7, bos=1, eos=2)
        L = toks.shape[1]
        tgt_in = np.concatenate([np.full((4, 1), 1), toks[:, :-1]], 1)
        with torch.no_grad():
            lg, al_tf = m(src, lens, tgt_in, return_alignments=True)
        live = np.ones((4, L), bool)
        for b in range(4):
            hit = np.flatnonzero(toks[b] == 2)
            if hit.size:
                live[b, hit[0] + 1 :] = False
                assert np.all(toks[b, hit[0] :] == 2)
        assert np.array_equal(lg.numpy().argmax(-1)[live], toks[live])
        assert np.abs(al_tf.numpy()[live] - al[live]).max() < 1e-12 and np.all(al[~live] == 0)
        m32 = TorchSeq2Seq(state, kind, window=1.5, dtype=torch.float32)
        with torch.no_grad():
            lg32 = m32(src, lens, tgt_in).numpy()
        assert np.abs(lg32 - lg.numpy()).max() < 1e-4 * max(1.0, np.abs(lg.numpy()).max())
    log("greedy = argmax of teacher forcing on its own tokens (alignments too); float32 ~ float64")

    # 6. scheduled sampling with an explicit choice = teacher forcing on the chosen tokens
    _, m = _tiny("bahdanau")
    src, lens, tgt_in, _ = _inputs(rng, B, S, T, 7, 5, lengths)
    mask = rng.random((B, T)) < 0.5
    with torch.no_grad():
        lg = m(src, lens, tgt_in, sample_mask=mask).numpy()
    fed = tgt_in.copy()
    for t in range(1, T):
        fed[:, t] = np.where(mask[:, t], lg[:, t - 1].argmax(-1), tgt_in[:, t])
    with torch.no_grad():
        assert np.abs(m(src, lens, fed).numpy() - lg).max() < 1e-12
    log("scheduled sampling (given choices) = teacher forcing on the chosen tokens")
    return True


def _loss_call(m, names, ps, src, lens, tgt_in, tgt_out):
    logits = torch.func.functional_call(m, dict(zip(names, ps)), (src, lens, tgt_in))
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.from_numpy(tgt_out).reshape(-1), ignore_index=IGNORE_INDEX
    )


if __name__ == "__main__":
    self_check()
    print("seq2seq_ref: all self-checks passed")
