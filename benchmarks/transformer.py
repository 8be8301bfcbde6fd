"""Transformer layers and greedy decoding: attnc against PyTorch (CPU) in one run.

    python benchmarks/transformer.py                  # full run, a few minutes
    python benchmarks/transformer.py --quick          # tiny sizes, seconds (the CI smoke test)
    python benchmarks/transformer.py --threads 1 --repeats 15 --json out.json

What is timed (float32, batch first, the same weights on both sides):
  1. encoder layer forward, eval, B = 8, L = 512, d = 512, 8 heads, feed-forward
     2048, post-norm, ReLU:
       attnc  attnc.nn.TransformerEncoderLayer(...).eval()(x)
       torch  torch.nn.TransformerEncoderLayer(..., batch_first=True).eval()(x)
              under torch.inference_mode(): torch's fused fast path
              (aten::_transformer_encoder_layer_fwd). A check process records
              torch's operators with torch.autograd.profiler and reports whether
              that operator ran.
     GFLOP/s count the matrix products only: B*L*(8 d^2 + 4 d ff) + 4 B L^2 d.
     "% sgemm" is that rate over the practical sgemm peak: the best rate of
     numpy.matmul (numpy's OpenBLAS) and torch.matmul (torch's BLAS) at the
     layer's own product shapes ((B*L, d) @ (d, 3d), (d, ff), (ff, d)) and
     at 2048^3, measured in the same run.
  2. training step of the same layer in training mode, dropout 0.1 and 0:
       attnc  out, pull = attnc.vjp(layer, x); pull(dout)
       torch  out = layer(x); out.backward(dout), x a leaf with requires_grad
              (so both sides compute the input's gradient too); parameter and
              input gradients reset to None before every step, as zero_grad does.
     FLOPs = 3 x the forward's.
  3. greedy decoding with a small encoder-decoder (d = 64, 4 heads, 2 encoder
     and 2 decoder layers, feed-forward 256, vocabulary 128, source length 32,
     64 new tokens, no eos so every call makes all 64), batch 1 and batch 8:
       attnc  attnc.models.Seq2SeqTransformer(...).eval().generate(src, 64, bos)
       torch  the same model as torch modules (nn.Embedding x sqrt(d) +
              sinusoidal encoding, nn.Transformer, nn.Linear) under
              torch.inference_mode(): the source encoded once by
              nn.TransformerEncoder, the cross-attention keys and values of
              each decoder layer projected once, then one step per token that
              runs each decoder layer on the newest position only (F.linear,
              F.layer_norm, F.scaled_dot_product_attention), with the
              self-attention keys and values appended to a preallocated cache
              per layer. A check process verifies this loop against a full
              teacher-forced nn.Transformer forward on the tokens it produced.
     Both timings include encoding the source. Reported as tokens per second
     (batch x 64 / time per call).

Process model (as benchmarks/attention.py, whose helpers this file reuses):
this process imports the libraries (attnc from a private copy of its package,
so that rebuilding attnc does not disturb a run), stays single-threaded and
forks one child per (case, implementation, round). A child sets attnc's and
torch's threads to --threads (default: the machine's cores), builds its case,
warms up, measures the peak RSS increase of one call (VmHWM - VmRSS), then
times --repeats / --rounds samples; a sample is one call, or the mean of
consecutive calls lasting at least 0.1 s for short calls. The rounds alternate
which implementation goes first, so drifts of the machine hit both alike
(default: 3 rounds for the layer, one sample per round for decoding, whose
calls are short and whose speed was seen to drift by 2x within seconds on a
shared VM). Medians are over all samples of all rounds; "speed-up" is torch's
median time over attnc's (> 1: attnc is faster); "per round" is the range of
that ratio computed from each round's own medians.

When attnc does not have a layer or model yet, its column reads "not
available" and the run goes on. The exit status is 1 when a check fails or a
child errs, not when a target is missed.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import platform
import statistics
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import attention as common  # benchmarks/attention.py: imports, forking, memory, load
import machine  # benchmarks/machine.py: what the run ran on

np = torch = F = attnc = None  # set by _import_libs(), after the thread count is known

ENCODER = {"B": 8, "L": 512, "d": 512, "H": 8, "ff": 2048}
DECODER = {"V": 128, "d": 64, "H": 4, "layers": 2, "ff": 256, "S": 32, "new": 64, "batches": (1, 8)}
QUICK_ENCODER = {"B": 2, "L": 32, "d": 32, "H": 4, "ff": 64}
QUICK_DECODER = {"V": 16, "d": 16, "H": 2, "layers": 2, "ff": 32, "S": 8, "new": 8, "batches": (1, 2)}
DROPOUTS = (0.1, 0.0)
BOS = 1
TARGETS = {"encoder_forward": 1.2, "train_step": 1.3, "decode": 3.0}
FAST_PATH_OP = "aten::_transformer_encoder_layer_fwd"
SEED = 0


# --------------------------------------------------------------------------- libraries
def _import_libs(snapshot):
    global np, torch, F, attnc
    common._import_libs(snapshot=snapshot)
    np, torch, F, attnc = common.np, common.torch, common.F, common.attnc
    try:  # attnc.models comes later than attnc.nn
        importlib.import_module("attnc.models")
    except ImportError:
        pass


def reference(name):
    """The tests' torch reference module tests/reference/NAME (the same
    network written in torch), or None without torch."""
    if torch is None:
        return None
    path = str(REPO / "tests" / "reference")
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(name)


def have_encoder_layer():
    return hasattr(getattr(attnc, "nn", None), "TransformerEncoderLayer")


def have_seq2seq():
    models = getattr(attnc, "models", None)
    return hasattr(getattr(models, "Seq2SeqTransformer", None), "generate") and hasattr(
        getattr(attnc, "nn", None), "Transformer"
    )


class NotAvailable(Exception):
    """The attnc side of a case does not exist yet."""


# --------------------------------------------------------------------------- weights and inputs
def make_state(shapes, seed=SEED):
    """Parameters for a state dict given {name: shape}, the same whichever
    library's module supplied the names: every value is drawn from a generator
    keyed by (seed, name). Linear weights U(-1/sqrt(fan_in), +), biases and
    layer-norm shifts U(-0.1, 0.1), layer-norm scales 1 + U(-0.1, 0.1),
    embeddings N(0, 1)."""
    state = {}
    for name, shape in shapes.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        shape = tuple(shape)
        if name.endswith("embed.weight"):
            a = rng.standard_normal(shape)
        elif len(shape) == 2:
            bound = 1.0 / math.sqrt(shape[1])
            a = rng.uniform(-bound, bound, shape)
        elif "norm" in name and name.endswith("weight"):
            a = 1.0 + rng.uniform(-0.1, 0.1, shape)
        else:
            a = rng.uniform(-0.1, 0.1, shape)
        state[name] = a.astype(np.float32)
    return state


def load_state(module, state):
    """Load a make_state() dict into a torch or an attnc module (strict)."""
    if torch is not None and isinstance(module, torch.nn.Module):
        module.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    else:
        module.load_state_dict(state)
    return module


def _shapes(module):
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def encoder_inputs(cfg, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((cfg["B"], cfg["L"], cfg["d"]), dtype=np.float32)
    dout = rng.standard_normal((cfg["B"], cfg["L"], cfg["d"]), dtype=np.float32)
    return x, dout


def encoder_layer(impl, cfg, dropout):
    """The encoder layer of ``impl`` with make_state() weights, in training mode."""
    args = (cfg["d"], cfg["H"], cfg["ff"], dropout)
    if impl == "torch":
        layer = torch.nn.TransformerEncoderLayer(*args, batch_first=True)
    else:
        if not have_encoder_layer():
            raise NotAvailable("attnc.nn.TransformerEncoderLayer")
        layer = attnc.nn.TransformerEncoderLayer(*args, batch_first=True, seed=SEED)
    return load_state(layer, make_state(_shapes(layer)))


def encoder_flops(cfg):
    B, L, d, ff = cfg["B"], cfg["L"], cfg["d"], cfg["ff"]
    return B * L * (8.0 * d * d + 4.0 * d * ff) + 4.0 * B * L * L * d


# --------------------------------------------------------------------------- 1 and 2: encoder layer
def build_encoder_forward(impl, cfg):
    layer = encoder_layer(impl, cfg, 0.1).eval()
    x, _ = encoder_inputs(cfg)
    if impl == "torch":
        tx = torch.from_numpy(x)

        def fwd():
            with torch.inference_mode():
                return layer(tx)

        return fwd
    return lambda: layer(x)


def build_train_step(impl, cfg, dropout):
    layer = encoder_layer(impl, cfg, dropout).train()
    x, dout = encoder_inputs(cfg)
    if impl == "torch":
        tx = torch.from_numpy(x).requires_grad_(True)
        tdout = torch.from_numpy(dout)
        params = list(layer.parameters())

        def step():
            for p in params:
                p.grad = None
            tx.grad = None
            out = layer(tx)
            out.backward(tdout)
            return out.detach(), tx.grad

        return step

    def step():
        out, pullback = attnc.vjp(layer, x)
        return out, pullback(dout)

    return step


def job_check_encoder(cfg, threads):
    """Child: torch's fast path, and attnc against torch (eval output; gradients
    of a training step with dropout 0; dropout 0.1 active in training mode)."""
    common._set_threads(threads, numpy_blas=False)
    res = {}
    fwd = build_encoder_forward("torch", cfg)
    fwd()
    with _quiet_stderr(), torch.autograd.profiler.profile() as prof:
        ref = fwd()
    names = sorted({e.name for e in prof.function_events})
    res["torch_fast_path"] = FAST_PATH_OP in names
    res["torch_ops"] = names
    if not have_encoder_layer():
        return res
    ref = ref.numpy()
    got = build_encoder_forward("attnc", cfg)()
    res["forward_max_abs_diff"] = float(np.max(np.abs(got.astype(np.float64) - ref)))
    res["forward_max_abs_torch"] = float(np.max(np.abs(ref)))

    # gradients, dropout 0
    t_layer = encoder_layer("torch", cfg, 0.0).train()
    a_layer = encoder_layer("attnc", cfg, 0.0).train()
    x, dout = encoder_inputs(cfg)
    tx = torch.from_numpy(x).requires_grad_(True)
    t_out = t_layer(tx)
    t_out.backward(torch.from_numpy(dout))
    ref_g = {"src": tx.grad.numpy()}
    ref_g.update({n: p.grad.numpy() for n, p in t_layer.named_parameters()})
    a_out, pullback = attnc.vjp(a_layer, x)
    grads = pullback(dout)
    rel = {"out": _rel(a_out, t_out.detach().numpy())}
    for name, r in ref_g.items():
        rel[name] = _rel(grads[name], r) if name in grads else float("inf")
    res["train_rel_diff"] = rel

    # dropout 0.1 must act in training mode (else the timing compares different work)
    d_layer = encoder_layer("attnc", cfg, 0.1)
    train_out = d_layer.train()(x)
    eval_out = d_layer.eval()(x)
    res["attnc_dropout_changes_output"] = bool(not np.allclose(train_out, eval_out, atol=1e-6))
    return res


class _quiet_stderr:
    """Silence file descriptor 2 (the profiler's start/stop lines from C++)."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)


def _rel(got, ref):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


# --------------------------------------------------------------------------- 3: decoding
def sinusoidal(length, d):
    """The Transformer's sinusoidal positional encoding, (length, d) float32."""
    t = np.arange(length, dtype=np.float64)[:, None]
    angle = t / np.power(10000.0, np.arange(0, d, 2, dtype=np.float64) / d)
    p = np.empty((length, d))
    p[:, 0::2] = np.sin(angle)
    p[:, 1::2] = np.cos(angle[:, : d // 2])
    return p.astype(np.float32)


def decoder_max_len(dc):
    return max(64, dc["S"], dc["new"] + 1)


def torch_seq2seq(dc):
    """The encoder-decoder as torch modules, state dict keys as attnc.models.Seq2SeqTransformer's."""
    nn = torch.nn
    m = nn.Module()
    m.src_embed = nn.Embedding(dc["V"], dc["d"])
    m.tgt_embed = nn.Embedding(dc["V"], dc["d"])
    m.transformer = nn.Transformer(
        dc["d"], dc["H"], dc["layers"], dc["layers"], dc["ff"], dropout=0.1, batch_first=True
    )
    m.generator = nn.Linear(dc["d"], dc["V"])
    load_state(m, make_state(_shapes(m)))
    m.pe = torch.from_numpy(sinusoidal(decoder_max_len(dc), dc["d"]))
    return m.eval()


def torch_encode(m, src):
    d = m.pe.shape[1]
    S = src.shape[1]
    return m.transformer.encoder(m.src_embed(src) * math.sqrt(d) + m.pe[:S])


def torch_greedy(m, src, n_new, bos, logits_out=None):
    """Greedy decoding with a key/value cache; call under torch.inference_mode().
    src (B, S) int64 -> (B, n_new) int64. With logits_out (B, n_new, V), also the logits."""
    B, S = src.shape
    pe = m.pe
    d = pe.shape[1]
    layers = m.transformer.decoder.layers
    H = layers[0].self_attn.num_heads
    dh = d // H
    memory = torch_encode(m, src)
    plan = []
    for lay in layers:
        sa, ca = lay.self_attn, lay.multihead_attn
        w, b = ca.in_proj_weight, ca.in_proj_bias
        # cross-attention keys and values, once per call: (2, B, H, S, dh)
        mkv = F.linear(memory, w[d:], b[d:]).view(B, S, 2, H, dh).permute(2, 0, 3, 1, 4)
        # self-attention cache, keys and values together: (B, 2, H, n_new, dh)
        cache = torch.empty(B, 2, H, n_new, dh)
        plan.append(
            (
                sa.in_proj_weight,
                sa.in_proj_bias,
                sa.out_proj.weight,
                sa.out_proj.bias,
                w[:d],
                b[:d],
                mkv[0],
                mkv[1],
                ca.out_proj.weight,
                ca.out_proj.bias,
                lay.linear1.weight,
                lay.linear1.bias,
                lay.linear2.weight,
                lay.linear2.bias,
                lay.norm1.weight,
                lay.norm1.bias,
                lay.norm2.weight,
                lay.norm2.bias,
                lay.norm3.weight,
                lay.norm3.bias,
                lay.norm1.eps,
                cache,
            )
        )
    norm = m.transformer.decoder.norm
    gen_w, gen_b = m.generator.weight, m.generator.bias
    emb = m.tgt_embed.weight * math.sqrt(d)
    shape = (d,)
    out = torch.empty(B, n_new, dtype=torch.long)
    tok = torch.full((B,), bos, dtype=torch.long)
    for t in range(n_new):
        x = F.embedding(tok, emb) + pe[t]  # (B, d)
        for (
            wi,
            bi,
            wo,
            bo,
            cwq,
            cbq,
            mk,
            mv,
            cwo,
            cbo,
            w1,
            b1,
            w2,
            b2,
            n1w,
            n1b,
            n2w,
            n2b,
            n3w,
            n3b,
            eps,
            cache,
        ) in plan:
            qkv = F.linear(x, wi, bi).view(B, 3, H, 1, dh)
            cache[:, :, :, t : t + 1] = qkv[:, 1:]
            kv = cache[:, :, :, : t + 1]
            a = F.scaled_dot_product_attention(qkv[:, 0], kv[:, 0], kv[:, 1])  # (B, H, 1, dh)
            x = F.layer_norm(x + F.linear(a.view(B, d), wo, bo), shape, n1w, n1b, eps)
            q = F.linear(x, cwq, cbq).view(B, H, 1, dh)
            a = F.scaled_dot_product_attention(q, mk, mv)
            x = F.layer_norm(x + F.linear(a.view(B, d), cwo, cbo), shape, n2w, n2b, eps)
            x = F.layer_norm(x + F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), shape, n3w, n3b, eps)
        logits = F.linear(F.layer_norm(x, shape, norm.weight, norm.bias, norm.eps), gen_w, gen_b)
        if logits_out is not None:
            logits_out[:, t] = logits
        tok = logits.argmax(-1)
        out[:, t] = tok
    return out


def torch_teacher_forced(m, src, tgt_in):
    """Logits (B, T, V) of the whole target prefix at once (nn.Transformer, causal mask)."""
    d = m.pe.shape[1]
    T = tgt_in.shape[1]
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T)
    h = m.transformer(
        m.src_embed(src) * math.sqrt(d) + m.pe[: src.shape[1]],
        m.tgt_embed(tgt_in) * math.sqrt(d) + m.pe[:T],
        tgt_mask=mask,
        tgt_is_causal=True,
    )
    return m.generator(h)


def attnc_seq2seq(dc):
    if not have_seq2seq():
        raise NotAvailable("attnc.models.Seq2SeqTransformer.generate")
    m = attnc.models.Seq2SeqTransformer(
        dc["V"],
        dc["V"],
        d_model=dc["d"],
        nhead=dc["H"],
        num_encoder_layers=dc["layers"],
        num_decoder_layers=dc["layers"],
        dim_feedforward=dc["ff"],
        dropout=0.1,
        max_len=decoder_max_len(dc),
        seed=SEED,
    )
    return load_state(m, make_state(_shapes(m))).eval()


def decoder_source(dc, batch, seed=2):
    return np.random.default_rng(seed).integers(0, dc["V"], (batch, dc["S"]), dtype=np.int64)


def _attnc_generate(m, src, dc):
    try:
        return m.generate(src, dc["new"], BOS, eos=None)
    except NotImplementedError as e:
        raise NotAvailable(f"attnc.models.Seq2SeqTransformer.generate: {e}") from e


def build_decode(impl, dc, batch):
    src = decoder_source(dc, batch)
    if impl == "torch":
        m = torch_seq2seq(dc)
        tsrc = torch.from_numpy(src)

        def gen():
            with torch.inference_mode():
                return torch_greedy(m, tsrc, dc["new"], BOS)

        return gen
    m = attnc_seq2seq(dc)
    _attnc_generate(m, src, dc)
    return lambda: m.generate(src, dc["new"], BOS, eos=None)


def job_check_decode(dc, threads):
    """Child: the torch cached loop against a teacher-forced nn.Transformer forward;
    attnc's tokens (and teacher-forced logits) against torch's."""
    common._set_threads(threads, numpy_blas=False)
    res = {}
    m = torch_seq2seq(dc)
    batch = max(dc["batches"])
    src = decoder_source(dc, batch)
    tsrc = torch.from_numpy(src)
    with torch.inference_mode():
        logits = torch.empty(batch, dc["new"], dc["V"])
        tokens = torch_greedy(m, tsrc, dc["new"], BOS, logits)
        tgt_in = torch.cat([torch.full((batch, 1), BOS, dtype=torch.long), tokens[:, :-1]], 1)
        full = torch_teacher_forced(m, tsrc, tgt_in)
    res["torch_cache_vs_full_max_abs_diff"] = float((logits - full).abs().max())
    res["torch_cache_tokens_match_full_argmax"] = bool((full.argmax(-1) == tokens).all())
    if not have_seq2seq():
        return res
    a = attnc_seq2seq(dc)
    try:
        got = np.asarray(_attnc_generate(a, src, dc))
    except NotAvailable:
        return res
    if got.shape[1] == dc["new"] + 1 and np.all(got[:, 0] == BOS):  # bos included
        got = got[:, 1:]
    ref = tokens.numpy()
    res["attnc_tokens_shape"] = list(got.shape)
    if got.shape != ref.shape:
        res["attnc_tokens_agree"] = 0.0
        res["attnc_tokens_ok"] = False
        return res
    res["attnc_tokens_agree"] = float(np.mean(got == ref))
    ok = True
    mism = np.argwhere(got != ref)
    if len(mism):
        # The first mismatch of each row is a bug unless torch's top two logits nearly tie.
        lg = logits.numpy()
        for b in np.unique(mism[:, 0]):
            t = int(mism[mism[:, 0] == b][:, 1].min())
            top2 = np.sort(lg[b, t])[-2:]
            if top2[1] - top2[0] > 1e-3:
                ok = False
    res["attnc_tokens_ok"] = ok
    if hasattr(a, "forward"):
        try:
            a_logits = a(src, tgt_in.numpy())
            res["attnc_teacher_forced_rel_diff"] = _rel(a_logits, full.numpy())
        except (TypeError, NotImplementedError) as e:  # informative only
            res["attnc_teacher_forced_error"] = f"{type(e).__name__}: {e}"
    return res


# --------------------------------------------------------------------------- timing
BUILDERS = {"encoder_forward": build_encoder_forward, "train_step": build_train_step, "decode": build_decode}


def job_time(kind, impl, args, threads, n_samples, min_sample_s, warmup_s, memory):
    """Child: build one case, warm up, peak RSS increase of one call, time n_samples."""
    common._set_threads(threads, numpy_blas=False)
    try:
        fn = BUILDERS[kind](impl, *args)
    except NotAvailable as e:
        return {"not_available": str(e)}
    t0, n = time.perf_counter(), 0
    while n < 2 or (time.perf_counter() - t0 < warmup_s and n < 50):
        fn()
        n += 1
    t_call = (time.perf_counter() - t0) / n
    res = {
        "warmup_calls": n,
        "threads": {"attnc": attnc.get_num_threads(), "torch": torch.get_num_threads() if torch is not None else None},
    }
    if memory:
        common._trim()
        base_kb = common._status_kb("VmRSS")
        reset = common._reset_peak()
        out = fn()
        res["peak_increase_mb"] = (common._peak_kb() - base_kb) / 1024.0 if reset else None
        del out
        common._trim()
    inner = max(1, min(1000, math.ceil(min_sample_s / max(t_call, 1e-7))))
    res["samples_s"] = _samples(fn, inner, n_samples)
    res["calls_per_sample"] = inner
    return res


def _samples(fn, inner, n_samples):
    """n_samples times per call of fn, each the mean over inner calls."""
    samples = []
    for _ in range(n_samples):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return samples


def job_sgemm(lib, shapes, threads, n_samples):
    """Child: GFLOP/s of float32 (m, k) @ (k, n) with numpy.matmul or torch.matmul
    (one library per process: idle BLAS threads of the other would spin)."""
    common._set_threads(threads, numpy_blas=lib == "numpy")
    rng = np.random.default_rng(3)
    out = {}
    for m, k, n in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.empty((m, n), dtype=np.float32)
        if lib == "numpy":
            fn = functools.partial(np.matmul, a, b, out=c)
        else:
            fn = functools.partial(torch.matmul, torch.from_numpy(a), torch.from_numpy(b), out=torch.from_numpy(c))
        for _ in range(2):
            fn()
        t0 = time.perf_counter()
        fn()
        inner = max(1, math.ceil(0.05 / max(time.perf_counter() - t0, 1e-7)))
        samples = _samples(fn, inner, n_samples)
        fl = 2.0 * m * k * n
        out[f"{lib} {m}x{k}x{n}"] = {
            "lib": lib,
            "shape": [m, k, n],
            "gflops_best": fl / min(samples) / 1e9,
            "gflops_median": fl / statistics.median(samples) / 1e9,
        }
    return out


def measure(kind, args, impls, threads, repeats, rounds, min_sample_s, warmup_s, errors, label):
    """Time every implementation of one case over `rounds` alternating rounds of
    forked children. Returns {impl: result or None}; result["median_s"] etc."""
    per_round = max(1, math.ceil(repeats / rounds))
    got = {impl: {"samples_s": [], "rounds": []} for impl in impls}
    dead = set()
    for r in range(rounds):
        order = impls if r % 2 == 0 else impls[::-1]
        for impl in order:
            if impl in dead:
                continue
            res = common.run_forked(job_time, kind, impl, args, threads, per_round, min_sample_s, warmup_s, r == 0)
            if not res["ok"]:
                errors.append(f"{label} {impl}: {res['error']}")
                dead.add(impl)
                got[impl] = None
                continue
            res = res["result"]
            if "not_available" in res:
                dead.add(impl)
                got[impl] = {"not_available": res["not_available"]}
                continue
            got[impl]["samples_s"].extend(res["samples_s"])
            got[impl]["rounds"].append(
                {"median_s": statistics.median(res["samples_s"]), **{k: v for k, v in res.items() if k != "samples_s"}}
            )
            if r == 0:
                got[impl]["peak_increase_mb"] = res.get("peak_increase_mb")
    for g in got.values():
        if g and g.get("samples_s"):
            s = g["samples_s"]
            g["median_s"] = statistics.median(s)
            g["min_s"] = min(s)
            g["max_s"] = max(s)
    return got


def _ok(g):
    return bool(g) and "median_s" in g


def _speedup(got):
    a, t = got.get("attnc"), got.get("torch")
    return t["median_s"] / a["median_s"] if _ok(a) and _ok(t) else None


def _round_speedups(got):
    """torch / attnc of each round's medians (the two ran close in time)."""
    a, t = got.get("attnc"), got.get("torch")
    if not (_ok(a) and _ok(t)):
        return []
    return [rt["median_s"] / ra["median_s"] for ra, rt in zip(a["rounds"], t["rounds"])]


def _range(xs):
    return f"{min(xs):.2f}-{max(xs):.2f}" if len(xs) > 1 else "-"


# --------------------------------------------------------------------------- formatting
def _f(x, fmt="{:.1f}", width=9):
    return (fmt.format(x) if x is not None else "-").rjust(width)


def _status(g):
    if g is None:
        return "failed"
    if "not_available" in g:
        return "not available"
    return None


def _verdict(speedup, target):
    if target is None:
        return "(no target)"
    if speedup is None:
        return "-"
    return f"{'met' if speedup >= target else 'MISSED'} (target >= {target}x)"


def finish(result, summary, quick, errors, failed_checks, load, others, elapsed, environment, json_path, width=30):
    """The end of a benchmark run (here and in rnn.py): the targets table,
    errors and failed checks, how busy the machine was, the JSON file. Returns
    the exit status: 1 when a check failed or a child erred."""
    print("\n== targets (speed-up = torch median time / attnc median time) ==")
    if quick:
        print("(a quick run: sizes far too small for the targets to mean anything)")
    for name, sp, target in summary:
        print(f"{name:<{width}} {_f(sp, '{:.2f}x', 7)}  {_verdict(sp, target)}")
    result["summary"] = [
        {"case": n, "speedup": sp, "target": t, "met": None if sp is None or t is None else sp >= t}
        for n, sp, t in summary
    ]
    for e in errors:
        print(f"ERROR: {e}")
    for c in failed_checks:
        print(f"CHECK FAILED: {c}")
    common._load_report(load, others)
    print(f"({elapsed:.0f} s)")
    result["environment"] = {
        "attnc": getattr(attnc, "__version__", None),
        "attnc_blas": attnc.blas_info(),
        "machine": machine.describe(attnc),
        "attnc_loaded_from": attnc.__file__,
        "attnc_source": common.SNAPSHOT_SRC,
        "attnc_git": common._git_rev(),
        **environment,
        "torch": torch.__version__ if torch is not None else None,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count() or 1,
        "load_average_1min_before": load["load_before"],
        "other_processes_cpu_share": others,
    }
    result["errors"] = errors
    result["failed_checks"] = failed_checks
    result["elapsed_s"] = elapsed
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {json_path}")
    return 1 if (errors or failed_checks) else 0


# --------------------------------------------------------------------------- main
def parse_common(name, description, argv, rounds_help="default 3; 1 with --quick", skip=None):
    """The options every benchmark takes (and --skip when `skip` lists its
    sections); returns (args, settings): quick, repeats, rounds (the default
    split, before --rounds), threads, json_path, min_sample_s, warmup_s."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (seconds)")
    parser.add_argument(
        "--threads", type=int, default=None, help="threads for attnc and torch (default: the machine's cores)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed samples per implementation and case (default 9; 2 with --quick)",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help=f"alternating rounds the samples are split over ({rounds_help})"
    )
    parser.add_argument(
        "--json",
        default=None,
        help=f"where to write the results (default benchmarks/results/{name}.json, {name}-quick.json with --quick)",
    )
    if skip:
        parser.add_argument("--skip", action="append", default=[], choices=skip, help="skip a section")
    parser.add_argument(
        "--no-snapshot", action="store_true", help="import attnc in place instead of from a private copy"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    repeats = args.repeats if args.repeats is not None else (2 if quick else 9)
    if repeats < 1 or (args.rounds is not None and args.rounds < 1):
        parser.error("--repeats and --rounds must be >= 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    settings = {
        "quick": quick,
        "repeats": repeats,
        "rounds": min(args.rounds or (1 if quick else 3), repeats),
        "threads": args.threads or len(os.sched_getaffinity(0)),
        "json_path": Path(args.json)
        if args.json
        else HERE / "results" / (f"{name}-quick.json" if quick else f"{name}.json"),
        "min_sample_s": 0.01 if quick else 0.1,
        "warmup_s": 0.0 if quick else 0.5,
    }
    return args, settings


def begin(import_libs, snapshot, threads, repeats, rounds, quick, rounds_note=""):
    """Import the libraries (the calling benchmark's import_libs, which sets
    this module's too) and print what runs; returns (impls, parent_threads,
    load, t_start) for the rest of the run and finish()."""
    import_libs(snapshot)
    parent_threads = common._parent_threads()
    impls = ["attnc"] + (["torch"] if torch is not None else [])
    t_start = time.perf_counter()
    load = common._load_start()
    print(machine.line(attnc))
    print(
        f"attnc {getattr(attnc, '__version__', '?')} (BLAS: {attnc.blas_info()}), "
        f"torch {torch.__version__ if torch is not None else '(not installed)'}, numpy {np.__version__}; "
        f"float32, {threads} threads for attnc and torch, {repeats} samples per case in {rounds} "
        f"round(s){rounds_note}, medians{' (quick)' if quick else ''}"
    )
    return impls, parent_threads, load, t_start


def forked_check(job, errors, label, *args):
    """job(*args) in a forked child: its result, or {"error": ...} (also added to errors)."""
    chk = common.run_forked(job, *args)
    if not chk["ok"]:
        errors.append(f"{label}: {chk['error']}")
    return chk["result"] if chk["ok"] else {"error": chk["error"]}


def checked_worst(rel, label, tolerance, failed_checks):
    """The worst (name, relative difference) of a case's check, recorded in
    failed_checks when it exceeds tolerance; None without a check."""
    if not rel:
        return None
    name = max(rel, key=rel.get)
    w = (name, rel[name])
    if not w[1] <= tolerance:
        failed_checks.append(f"{label}: attnc and torch differ by {w[1]:.3g} ({w[0]})")
    return w


def speed_head(case_width, attnc_width=14, torch_width=9):
    """Print the header of a speed table, the one the training and decoding
    benchmarks of the recurrent models (seq2seq.py, ntm.py, pointer.py) share:
    case, median times, speed-up, its range over rounds, peak memory, check,
    target."""
    head = (
        f"{'case':<{case_width}}{'attnc ms':>{attnc_width}}{'torch ms':>{torch_width}}{'speed-up':>9}"
        f"{'per round':>11}{'MiB attnc':>10}{'torch':>7}{'check':>10}  target"
    )
    print(head)
    print("-" * len(head))


def speed_row(label, got, worst, target, case_width, attnc_width=14, torch_width=9):
    """Print one row of a speed_head table for measure()'s result got and the
    check's worst (name, rel) or None; returns the row's JSON fields."""
    a, t = got.get("attnc"), got.get("torch")
    sp, rs = _speedup(got), _round_speedups(got)
    a_ok, t_ok = _ok(a), _ok(t)
    print(
        f"{label:<{case_width}}"
        f"{(_f(a['median_s'] * 1e3, '{:.2f}', attnc_width) if a_ok else (_status(a) or '-').rjust(attnc_width))}"
        f"{_f(t['median_s'] * 1e3 if t_ok else None, '{:.2f}', torch_width)}{_f(sp, '{:.2f}x', 9)}"
        f" {_range(rs):>10}"
        f"{_f(a.get('peak_increase_mb') if a_ok else None, '{:.1f}', 10)}"
        f"{_f(t.get('peak_increase_mb') if t_ok else None, '{:.1f}', 7)}"
        f"{_f(worst[1] if worst else None, '{:.1e}', 10)}  {_verdict(sp, target)}"
    )
    return {
        "impl": got,
        "speedup": sp,
        "speedup_per_round": rs,
        "check_worst": None if worst is None else {"name": worst[0], "rel": worst[1]},
    }


def main(argv=None):
    args, st = parse_common(
        "transformer",
        __doc__.split("\n\n")[0],
        argv,
        "default 3 for the layer, --repeats for decoding; 1 with --quick",
        skip=("encoder_forward", "train_step", "decode"),
    )
    quick, repeats, rounds, threads = st["quick"], st["repeats"], st["rounds"], st["threads"]  # rounds: the layer's
    dec_rounds = min(args.rounds or (1 if quick else repeats), repeats)  # decoding
    json_path, min_sample_s, warmup_s = st["json_path"], st["min_sample_s"], st["warmup_s"]
    enc = QUICK_ENCODER if quick else ENCODER
    dec = QUICK_DECODER if quick else DECODER

    errors, failed_checks = [], []
    impls, parent_threads, load, t_start = begin(
        _import_libs, not args.no_snapshot, threads, repeats, rounds, quick, f" ({dec_rounds} for decoding)"
    )
    result = {
        "benchmark": "transformer layers and greedy decoding, attnc vs torch",
        "config": {
            "threads": threads,
            "quick": quick,
            "repeats": repeats,
            "rounds": rounds,
            "decode_rounds": dec_rounds,
            "min_sample_s": min_sample_s,
            "warmup_s": warmup_s,
            "encoder": enc,
            "decoder": {**dec, "batches": list(dec["batches"])},
            "dropouts": list(DROPOUTS),
            "targets_speedup": TARGETS,
            "statistic": "median over samples of all rounds",
        },
    }
    summary = []

    # ---- sgemm peak
    sg_shapes = [
        (enc["B"] * enc["L"], enc["d"], 3 * enc["d"]),
        (enc["B"] * enc["L"], enc["d"], enc["ff"]),
        (enc["B"] * enc["L"], enc["ff"], enc["d"]),
    ]
    sq = 256 if quick else 2048
    sg_shapes.append((sq, sq, sq))
    sgemm = {}
    for lib in ("numpy", "torch") if torch is not None else ("numpy",):
        res = common.run_forked(job_sgemm, lib, sg_shapes, threads, 3 if quick else 7)
        if res["ok"]:
            sgemm.update(res["result"])
        else:
            errors.append(f"sgemm {lib}: {res['error']}")
    peak = max((s["gflops_best"] for s in sgemm.values()), default=None)
    result["sgemm"] = sgemm
    result["sgemm_practical_peak_gflops"] = peak

    def pct(gf):
        return 100.0 * gf / peak if gf is not None and peak else None

    # ---- 1. encoder forward
    if "encoder_forward" not in args.skip and torch is not None:
        fl = encoder_flops(enc)
        print(
            f"\n== 1. encoder layer forward, eval: B={enc['B']} L={enc['L']} d={enc['d']} "
            f"heads={enc['H']} ff={enc['ff']}, {fl / 1e9:.1f} GFLOP =="
        )
        check = forked_check(job_check_encoder, errors, "encoder check", enc, threads)
        got = measure(
            "encoder_forward",
            (enc,),
            impls,
            threads,
            repeats,
            rounds,
            min_sample_s,
            warmup_s,
            errors,
            "encoder forward",
        )
        head = f"{'impl':<7}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'GFLOP/s':>9}{'% sgemm':>9}{'peak MiB':>10}"
        print(head)
        print("-" * len(head))
        for impl in impls:
            g = got.get(impl)
            st = _status(g)
            if st:
                print(f"{impl:<7}  {st}")
                continue
            g["gflops"] = fl / g["median_s"] / 1e9
            g["pct_sgemm_peak"] = pct(g["gflops"])
            print(
                f"{impl:<7}{g['median_s'] * 1e3:10.1f}{g['min_s'] * 1e3:9.1f}{g['max_s'] * 1e3:9.1f}"
                f"{g['gflops']:9.1f}{_f(g['pct_sgemm_peak'], '{:.0f}%', 9)}"
                f"{_f(g.get('peak_increase_mb'), '{:.1f}', 10)}"
            )
        sp = _speedup(got)
        fast = check.get("torch_fast_path")
        rs = _round_speedups(got)
        print(
            f"speed-up torch/attnc: {_f(sp, '{:.2f}x', 0)} (per round {_range(rs)})  "
            f"{_verdict(sp, TARGETS['encoder_forward'])}"
        )
        print(f"torch fast path ({FAST_PATH_OP}) taken: {'yes' if fast else 'NO' if fast is not None else '?'}")
        if fast is False:
            failed_checks.append("torch's encoder layer did not take its fast path")
        if "forward_max_abs_diff" in check:
            diff = check["forward_max_abs_diff"]
            print(
                f"check: max |attnc - torch| of the output = {diff:.2e} (max |torch| "
                f"{check['forward_max_abs_torch']:.2f})"
            )
            if not diff <= 1e-3:
                failed_checks.append(f"encoder forward: attnc and torch differ by {diff:.3g}")
        result["encoder_forward"] = {"flops": fl, "impl": got, "speedup": sp, "speedup_per_round": rs, "check": check}
        summary.append(("encoder layer forward", sp, TARGETS["encoder_forward"]))

    # ---- 2. training step
    if "train_step" not in args.skip and torch is not None:
        fl = 3 * encoder_flops(enc)
        print(f"\n== 2. training step (forward + backward, train mode), same layer, {fl / 1e9:.1f} GFLOP ==")
        head = (
            f"{'dropout':<8}{'attnc ms':>9}{'torch ms':>9}{'speed-up':>9}{'per round':>13}{'attnc GF/s':>11}"
            f"{'torch GF/s':>11}{'a %sgemm':>9}{'MiB attnc':>10}{'torch':>7}  target"
        )
        rows = []
        lines = []
        for p in DROPOUTS:
            got = measure(
                "train_step",
                (enc, p),
                impls,
                threads,
                repeats,
                rounds,
                min_sample_s,
                warmup_s,
                errors,
                f"train step dropout={p}",
            )
            a, t = got.get("attnc"), got.get("torch")
            for g in (a, t):
                if _ok(g):
                    g["gflops"] = fl / g["median_s"] / 1e9
                    g["pct_sgemm_peak"] = pct(g["gflops"])
            sp = _speedup(got)
            rs = _round_speedups(got)
            rows.append({"dropout": p, "flops": fl, "impl": got, "speedup": sp, "speedup_per_round": rs})
            a_ok, t_ok = _ok(a), _ok(t)
            lines.append(
                f"{p:<8}{(_f(a['median_s'] * 1e3, '{:.1f}', 9) if a_ok else (_status(a) or '-').rjust(9))}"
                f"{_f(t['median_s'] * 1e3 if t_ok else None, '{:.1f}', 9)}{_f(sp, '{:.2f}x', 9)}"
                f" {_range(rs):>12}{_f(a['gflops'] if a_ok else None, '{:.1f}', 11)}"
                f"{_f(t['gflops'] if t_ok else None, '{:.1f}', 11)}"
                f"{_f(a['pct_sgemm_peak'] if a_ok else None, '{:.0f}%', 9)}"
                f"{_f(a.get('peak_increase_mb') if a_ok else None, '{:.0f}', 10)}"
                f"{_f(t.get('peak_increase_mb') if t_ok else None, '{:.0f}', 7)}  "
                f"{_verdict(sp, TARGETS['train_step'])}"
            )
            summary.append((f"training step, dropout {p}", sp, TARGETS["train_step"]))
        print(head)
        print("-" * len(head))
        for line in lines:
            print(line)
        if not have_encoder_layer():
            print("attnc: not available (attnc.nn.TransformerEncoderLayer)")
        check = result.get("encoder_forward", {}).get("check")
        if check is None:  # section 1 skipped
            check = forked_check(job_check_encoder, errors, "encoder check", enc, threads)
        if "train_rel_diff" in check:
            rel = check["train_rel_diff"]
            worst = max(rel, key=rel.get)
            print(
                f"check (dropout 0): output and {len(rel) - 1} gradients vs torch, largest relative "
                f"difference {rel[worst]:.2e} ({worst})"
            )
            if not rel[worst] <= 1e-3:
                failed_checks.append(f"training step: attnc and torch differ by {rel[worst]:.3g} ({worst})")
            act = check.get("attnc_dropout_changes_output")
            print(f"check (dropout 0.1): attnc's training-mode output differs from eval: {'yes' if act else 'NO'}")
            if not act:
                failed_checks.append("attnc's dropout 0.1 does not change the training-mode output")
        result["train_step"] = {"rows": rows, "check": check}

    # ---- 3. greedy decoding
    if "decode" not in args.skip and torch is not None:
        print(
            f"\n== 3. greedy decoding: encoder-decoder d={dec['d']} heads={dec['H']} "
            f"layers={dec['layers']}+{dec['layers']} ff={dec['ff']} vocab={dec['V']}, source length "
            f"{dec['S']}, {dec['new']} new tokens (tokens/s, median) =="
        )
        check = forked_check(job_check_decode, errors, "decode check", dec, threads)
        head = (
            f"{'batch':<6}{'attnc tok/s':>12}{'torch tok/s':>12}{'attnc ms':>9}{'torch ms':>9}"
            f"{'speed-up':>9}{'per round':>13}  target"
        )
        print(head)
        print("-" * len(head))
        rows = []
        for b in dec["batches"]:
            got = measure(
                "decode",
                (dec, b),
                impls,
                threads,
                repeats,
                dec_rounds,
                min_sample_s,
                warmup_s,
                errors,
                f"decode batch={b}",
            )
            for g in got.values():
                if _ok(g):
                    g["tokens_per_s"] = b * dec["new"] / g["median_s"]
            a, t = got.get("attnc"), got.get("torch")
            sp = _speedup(got)
            rs = _round_speedups(got)
            rows.append({"batch": b, "impl": got, "speedup": sp, "speedup_per_round": rs})
            a_ok, t_ok = _ok(a), _ok(t)
            print(
                f"{b:<6}{(_f(a['tokens_per_s'], '{:.0f}', 12) if a_ok else (_status(a) or '-').rjust(12))}"
                f"{_f(t['tokens_per_s'] if t_ok else None, '{:.0f}', 12)}"
                f"{_f(a['median_s'] * 1e3 if a_ok else None, '{:.2f}', 9)}"
                f"{_f(t['median_s'] * 1e3 if t_ok else None, '{:.2f}', 9)}{_f(sp, '{:.2f}x', 9)}"
                f" {_range(rs):>12}  "
                f"{_verdict(sp, TARGETS['decode'])}"
            )
            summary.append((f"greedy decoding, batch {b}", sp, TARGETS["decode"]))
        if not have_seq2seq():
            print("attnc: not available (attnc.models.Seq2SeqTransformer.generate, attnc.nn.Transformer)")
        if "torch_cache_vs_full_max_abs_diff" in check:
            d = check["torch_cache_vs_full_max_abs_diff"]
            same = check["torch_cache_tokens_match_full_argmax"]
            print(
                f"check: torch's cached loop vs a full nn.Transformer forward: logits differ by {d:.1e}, "
                f"tokens {'agree' if same else 'DISAGREE'}"
            )
            if not (d <= 1e-4 and same):
                failed_checks.append(f"torch's cached decoding loop is wrong (logits differ by {d:.3g})")
        if "attnc_tokens_agree" in check:
            print(
                f"check: attnc's tokens agree with torch's at {100 * check['attnc_tokens_agree']:.1f}% "
                f"of positions"
                + ("" if check["attnc_tokens_ok"] else " (NOT explained by near-ties)")
                + (
                    f"; teacher-forced logits relative difference {check['attnc_teacher_forced_rel_diff']:.1e}"
                    if "attnc_teacher_forced_rel_diff" in check
                    else ""
                )
            )
            if not check["attnc_tokens_ok"]:
                failed_checks.append("attnc's greedy tokens differ from torch's")
        result["decode"] = {"rows": rows, "check": check}

    if torch is None:
        print("torch is not installed: nothing to compare")

    # ---- summary
    elapsed = time.perf_counter() - t_start
    others = common._load_share(load, elapsed)
    if peak:
        best = max(sgemm.values(), key=lambda s: s["gflops_best"])
        print(
            f"\nsgemm practical peak: {peak:.1f} GFLOP/s ({best['lib']}.matmul "
            f"{'x'.join(map(str, best['shape']))}, best sample, {threads} threads); at the layer's "
            "shapes (median): "
            + ", ".join(
                f"{s['lib']} {'x'.join(map(str, s['shape']))} {s['gflops_median']:.0f}"
                for s in sgemm.values()
                if s["shape"] != [sq, sq, sq]
            )
        )
    return finish(
        result,
        summary,
        quick,
        errors,
        failed_checks,
        load,
        others,
        elapsed,
        {"attnc_encoder_layer": have_encoder_layer(), "parent_threads_at_fork": parent_threads},
        json_path,
    )


if __name__ == "__main__":
    sys.exit(main())
