"""Attention sinks (StreamingLLM, Xiao et al. 2024): decoding 8x past the training length
with a sliding-window cache, with and without the first tokens kept.

    python -m attnc.experiments.streaming [--seed N] [--quick] [--threads N] [--steps N]

Data: Guo et al. 2024's bigram-backcopy task ("Active-dormant attention
heads", arXiv 2410.13835), on which they report a sink forming on BOS in
transformers of one to three layers: every sequence opens with a BOS token,
then follows a random Markov chain of order 1 over 16 tokens (Dirichlet(1)
rows, the chain fixed), except after each of the 2 trigger tokens (0 and
1), where the next token copies the one before the trigger. The head that
copies has work only at a trigger; at every other query it must add
nothing, and the one place it can always find that holds nothing is BOS
(the "dormant" head, whose weight the sink takes). The chain's own loss
per position is known (0 on a copy).

Models: Guo et al.'s one-layer form, attention only (MixerLM with
``mlp=False``, one layer, one RoPE softmax head, d 32), trained at length
64 for 1500 steps of length_extrapolation's schedule at a learning rate of
1e-2: "vanilla", and "sink_logits" with a learned sink logit per head
(sdpa's ``sinks=``: a logit that joins each row's softmax normaliser, as
gpt-oss; a learnable place to put attention, the remedy StreamingLLM's
section 3.3 proposes as a sink token).

What makes the sink form, and matter, measured on 600-step probes (the
same task, 8 streams of 160 tokens, cache 32; the weight on token 0 of
queries 16 .. 63, per head; those of non-trigger queries where said):

- length_extrapolation's model (two layers of 2 heads with MLPs,
  Dirichlet(0.1) rows, learning rate 2e-3): 0.02 to 0.04 in every head, what
  uniform attention gives, and the window cost nothing (the previous full
  run: 1.085 nats with and without sinks). One head per layer: 0.02 to 0.03;
  1e-2: at most 0.04; 4 heads, 64 tokens with 3 triggers, a 32-wide MLP: at
  most 0.10; no MLP: at most 0.05 (0.10 at 1e-2; 0.19 with 4 heads). Gu et
  al. 2024 ("When attention sink emerges in language models", arXiv
  2410.10781) find sinks after enough optimisation (steps, learning rate):
  1e-2 helped here, more steps little.
- A less predictable chain (Dirichlet(1)): a stray output costs more where
  the prediction is uncertain. Attention only, two layers of 2 heads: the
  first layer's heads 0.27 and 0.31 on non-trigger queries, the second's
  at most 0.06, and the window cost nothing.
- One head per layer, as Guo et al.: the head that copies puts 0.79 of the
  non-trigger queries' weight on BOS (one layer), 0.85 in the second of two
  layers (1500 steps).
- The sink matters only if nothing cleans up after its eviction: with an
  MLP (one layer, one head, 0.75 on BOS) the window cost 0.002 nats; two
  attention-only layers: 0.021 nats at 600 steps, 0.006 at 1500 (the full
  run, 0.66 on token 0 in the second layer: 0.005); one attention-only
  layer: 0.13 on the probe's streams, 0.03 on the full run's.
- Without BOS (a chain token first) no sink formed on the first token (0.01).

The full run (seed 0, 1 thread; 410 s of training for both models and 56
s of evaluation on a shared AMD EPYC): the vanilla model puts 0.74 of its
weight on token 0 (the sink_logits model 0.005); past the eviction the
window decodes 0.032 nats above the chain's own, sinks_window 0.003, the
vanilla model within its training length 0.002; the sink_logits model's
window 0.007, as its sinks_window and as within its training length. The
window's cost, ten times the sinks', stays below the 0.05 nats that
"window_breaks" asks (at 600 steps, seeds 0 and 1: 0.027 and 0.028; with a
cache of 16: 0.032 and 0.035): the finding's direction, not its size
(StreamingLLM's windows lose orders of magnitude in perplexity).

Each model then decodes 32 held-out streams of 512 tokens (8x the training
length) token by token, under the paper's cache policies:

- "dense": every past token cached, at its true position (RoPE past 64:
  what the model never saw);
- "window": the last 32 tokens only;
- "sinks_window": the first 4 tokens (the attention sinks) and the last 28;
- "recompute": the last 32 tokens re-encoded from scratch for every new
  token (the paper's "sliding window with re-computation"). The paper's
  quality reference, it is not one here: the sink is BOS's content, which a
  re-encoded window lacks (in LLMs any first token serves), and with one
  layer, whose keys depend on their tokens only, it is the window exactly.

As StreamingLLM, positions are assigned within the cache: its keys are
cached before RoPE and turned by their rank in the cache at every step,
the new query by the cache's length. The kept keys and values are gathered
and attended with attnc.scaled_dot_product_attention directly (the cache
changes its positions, which attnc.KVCache's fixed positions do not allow).

Metrics: "loss_by_position" {model: {policy: [mean loss over the streams
at each position 0 .. 511]}} with "optimal_by_position" (the chain's own);
"loss" {model: {policy: mean loss over positions 64 .. 511}} (past the
training length) and "loss_evicted" (over positions 32 .. 511, once the
window has evicted the first tokens), "excess_evicted" (the same above the
chain's own loss of the same tokens) and "excess_within_training" {model:
dense decoding's excess over positions 32 .. 63, the model within its
training length}; "first_token_attention" {model: [per layer, the mean
attention weight on token 0 of queries 16 .. 63 of length-64 sequences]}
(the sink the paper measures; "first_token_attention_by_head" per head);
and the paper's finding as booleans (finding()): "window_breaks",
"sinks_flat" and "sink_logits_window_flat". The plot (streaming.png in the
run folder): the loss above the chain's own against position. Budget:
about 8 minutes on 2 busy cores; --quick (5 steps, streams of 48 over a
window of 8) seconds.
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc import nn

from . import _common
from ._mixers import _merge, token_losses
from .length_extrapolation import FULL as LE_FULL
from .length_extrapolation import QUICK as LE_QUICK
from .length_extrapolation import position_curve, train_lm_on

MODELS = {"vanilla": False, "sink_logits": True}  # name: sink_logits
POLICIES = ("dense", "window", "sinks_window", "recompute")
TOLERANCE = 0.05

# the data, cache and the model's shape (the schedule is length_extrapolation's, its learning rate 5x)
TASK = dict(triggers=2, concentration=1.0, bos=True, lr=1e-2, num_layers=1, num_heads=1, mlp=False)
FULL = dict(LE_FULL, **TASK, steps=1500, stream=512, heldout=32, cache=32, sinks=4, sink_probe=(16, 64))
QUICK = dict(LE_QUICK, **TASK, stream=48, heldout=4, cache=8, sinks=2, sink_probe=(4, 16))
HELDOUT_SEED = 20261130


def backcopy_rows(cfg, n, length, seed, nll=False):
    """n rows of the bigram-backcopy task: (inputs, targets) (n, length)
    int64, token cfg["vocab_size"] the BOS that opens each row; with nll,
    also the chain's own loss of each target (n, length) float64 (log V for
    the first, drawn uniformly; 0 for a copy)."""
    V = cfg["vocab_size"]
    chain = np.random.default_rng(cfg["chain_seed"]).dirichlet(np.full(V, float(cfg["concentration"])), V)
    cdf = np.cumsum(chain, axis=1)
    cdf[:, -1] = 1.0  # rounding: a uniform draw always lands in some bin
    rng = np.random.default_rng(seed)
    x = np.empty((n, length + 1), np.int64)
    x[:, 0] = V if cfg["bos"] else rng.integers(0, V, n)
    x[:, 1] = rng.integers(0, V, n)
    u = rng.random((n, length + 1))
    copy = np.zeros(x.shape, bool)
    for t in range(2, length + 1):
        copy[:, t] = (t >= 3) & (x[:, t - 1] < cfg["triggers"])  # the token before a trigger is never BOS
        x[:, t] = np.where(copy[:, t], x[:, t - 2], (u[:, t, None] > cdf[x[:, t - 1]]).sum(axis=1))
    if not nll:
        return x[:, :-1], x[:, 1:]
    chain_nll = np.where(copy[:, 2:], 0.0, -np.log(chain[x[:, 1:-1], x[:, 2:]]))
    return x[:, :-1], x[:, 1:], np.concatenate([np.full((n, 1), np.log(V)), chain_nll], axis=1)


def heldout_rows(cfg, length, salt):
    """Held-out rows with their chain loss, the same for every --seed."""
    seed = int(np.random.SeedSequence([HELDOUT_SEED, length, salt]).generate_state(1)[0])
    return backcopy_rows(cfg, cfg["heldout"], length, seed, nll=True)


def kept(t: int, policy: str, cache: int, sinks: int) -> np.ndarray:
    """The positions cached when token t is decoded (t included)."""
    if policy == "dense" or t < cache:
        return np.arange(t + 1)
    if policy == "window":
        return np.arange(t - cache + 1, t + 1)
    return np.concatenate([np.arange(sinks), np.arange(t - cache + sinks + 1, t + 1)])


def decode(lm, ids, policy, cache, sinks):
    """(B, N) logits' token losses of decoding ids token by token under a
    cache policy (not "recompute"), positions within the cache."""
    B, N = ids.shape
    L = len(lm.blocks)
    keys = [None] * L  # (B, H, N, E) per layer: every token's key before RoPE, and its value
    values = [None] * L
    logits = []
    for t in range(N):
        x = lm.embed(ids[:, t : t + 1])
        idx = kept(t, policy, cache, sinks)
        for i, block in enumerate(lm.blocks):
            n = block.norm1
            h = nn.layer_norm(x, n.normalized_shape, n.weight, n.bias, n.eps)
            q, k, v = block.attn.project(h)
            if keys[i] is None:
                keys[i] = np.zeros(k.shape[:2] + (N, k.shape[3]), k.dtype)
                values[i] = np.zeros(keys[i].shape, v.dtype)
            keys[i][:, :, t], values[i][:, :, t] = k[:, :, 0], v[:, :, 0]
            o = block.attn.attend(
                q, keys[i][:, :, idx], values[i][:, :, idx], len(idx) - 1, np.arange(len(idx)), causal=False
            )
            x = x + nn.linear(_merge(o), block.attn.out.weight, block.attn.out.bias)
            x = x + block.mlp(x)
        n = lm.norm
        logits.append(
            nn.linear(nn.layer_norm(x, n.normalized_shape, n.weight, n.bias, n.eps), lm.head.weight, lm.head.bias)
        )
    return np.concatenate(logits, axis=1)


def recompute(lm, ids, cache):
    """(B, N) logits of re-encoding the last `cache` tokens for every token."""
    N = ids.shape[1]
    return np.concatenate([lm(ids[:, max(0, t - cache + 1) : t + 1])[:, -1:] for t in range(N)], axis=1)


def first_token_attention(lm, ids, lo, hi):
    """[per layer [per head, the mean weight (over the rows and queries lo .. hi - 1) on token 0]]."""
    out, x = [], lm.embed(ids)
    for block in lm.blocks:
        n = block.norm1
        h = nn.layer_norm(x, n.normalized_shape, n.weight, n.bias, n.eps)
        q, k, v = block.attn.project(h)
        q, k = nn.rotary_embedding(q), nn.rotary_embedding(k)
        sinks = {} if block.attn.sinks is None else {"sinks": block.attn.sinks}
        o, w = attnc.scaled_dot_product_attention(q, k, v, is_causal=True, return_weights=True, **sinks)
        out.append([round(float(v), 4) for v in w[:, :, lo:hi, 0].mean(axis=(0, 2))])
        x = block(x)
    return out


def finding(excess: dict, within: dict) -> dict:
    """The paper's finding as booleans, from each model's loss above the
    chain's own once the window has evicted the first tokens, ``excess``
    {model: {policy: nats}}, and within the training length under the dense
    cache, ``within`` {model: nats}: the vanilla model's window above its
    sinks_window by more than TOLERANCE ("window_breaks"); its sinks_window
    no more than TOLERANCE above its loss within the training length
    ("sinks_flat"); the sink_logits model's window no more than TOLERANCE
    above its own ("sink_logits_window_flat": it needs no first tokens).

    >>> finding({"vanilla": {"window": 0.2, "sinks_window": 0.03},
    ...          "sink_logits": {"window": 0.04}}, {"vanilla": 0.01, "sink_logits": 0.02})
    {'window_breaks': True, 'sinks_flat': True, 'sink_logits_window_flat': True}
    """
    vanilla, learned = excess["vanilla"], excess["sink_logits"]
    return {
        "window_breaks": bool(vanilla["window"] - vanilla["sinks_window"] > TOLERANCE),
        "sinks_flat": bool(vanilla["sinks_window"] - within["vanilla"] <= TOLERANCE),
        "sink_logits_window_flat": bool(learned["window"] - within["sink_logits"] <= TOLERANCE),
    }


def plot(curves: dict, floor, cfg: dict, args):
    """The loss above the chain's own against position (a running mean over
    16 positions: the chain's own varies more from one position to the next
    than the policies differ), one panel per model and a line per policy,
    saved as streaming.png in the run folder (its name; None without a
    folder or matplotlib)."""
    fig = _common.run_figure(args, figsize=(6 * len(curves), 4))
    if fig is None:
        return None
    axes = fig.subplots(1, len(curves), sharey=True, squeeze=False)
    smooth = np.ones(16) / 16
    for ax, (name, by_policy) in zip(axes[0], curves.items()):
        for policy, curve in by_policy.items():
            style = "--" if policy == "recompute" else "-"  # with one layer it is the window exactly
            ax.plot(np.convolve(np.subtract(curve, floor), smooth, mode="valid"), style, label=policy)
        ax.axvline(cfg["cache"], color="grey", lw=0.8, ls=":")
        ax.axvline(cfg["length"], color="grey", lw=0.8, ls="--")
        ax.set(title=name, xlabel="position (running mean of 16)", ylabel="loss above the chain's own (nats)")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    fig.suptitle("attnc.experiments.streaming (cf. Xiao et al. 2024, Figure 3)")
    fig.tight_layout()
    fig.savefig(args.run.dir / "streaming.png", dpi=120)
    return "streaming.png"


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    ids, targets, chain_nll = heldout_rows(cfg, cfg["stream"], 1)
    probe = heldout_rows(cfg, cfg["length"], 2)[0]
    seeds = np.random.SeedSequence(args.seed).spawn(len(MODELS))
    curves, loss, evicted, excess, within, sink_mass, finals = {}, {}, {}, {}, {}, {}, {}
    seconds, eval_seconds, lm, result = 0.0, 0.0, None, None
    past, gone = cfg["length"], cfg["cache"]
    for (name, sink_logits), seed in zip(MODELS.items(), seeds):
        lm, result = train_lm_on(
            cfg,
            args,
            f"streaming_{name}",
            seed,
            backcopy_rows,
            cfg["vocab_size"] + 1,
            positions="rope",
            sink_logits=sink_logits,
            mlp=cfg["mlp"],
        )
        seconds += result["train_seconds"]
        finals[name] = result["final_loss"]
        start = time.perf_counter()
        curves[name], loss[name], evicted[name], excess[name] = {}, {}, {}, {}
        for policy in POLICIES:
            logits = (
                recompute(lm, ids, cfg["cache"])
                if policy == "recompute"
                else decode(lm, ids, policy, cfg["cache"], cfg["sinks"])
            )
            tl = token_losses(logits, targets)
            curves[name][policy] = position_curve(tl)
            loss[name][policy] = round(float(tl[:, past:].mean()), 5)
            evicted[name][policy] = round(float(tl[:, gone:].mean()), 5)
            excess[name][policy] = round(float((tl - chain_nll)[:, gone:].mean()), 5)
            if policy == "dense":  # within the training length: what the model was trained to do
                within[name] = round(float((tl - chain_nll)[:, gone:past].mean()), 5)
        sink_mass[name] = first_token_attention(lm, probe, *cfg["sink_probe"])
        eval_seconds += time.perf_counter() - start
    floor = chain_nll.mean(axis=0)
    print(f"loss at positions {past} .. {cfg['stream'] - 1} (cache {cfg['cache']}, {cfg['sinks']} sinks)")
    print(f"{'model':<13}" + "".join(f"{p:>14}" for p in POLICIES))
    for name, row in loss.items():
        print(f"{name:<13}" + "".join(f"{row[p]:>14.4f}" for p in POLICIES))
    mean_mass = {name: [round(float(np.mean(heads)), 4) for heads in layers] for name, layers in sink_mass.items()}
    print(f"optimal {float(floor[past:].mean()):.4f}; weight on token 0 per layer and head: {sink_mass}")
    summary = dict(result, train_seconds=round(seconds, 3))
    return _common.report(
        "streaming",
        args,
        lm,
        summary,
        cfg["batch_size"],
        eval_seconds,
        train_length=cfg["length"],
        stream_length=cfg["stream"],
        cache=cfg["cache"],
        sink_tokens=cfg["sinks"],
        policies=list(POLICIES),
        loss=loss,
        loss_evicted=evicted,
        excess_evicted=excess,
        excess_within_training=within,
        optimal_loss=round(float(floor[past:].mean()), 5),
        loss_by_position=curves,
        optimal_by_position=[round(float(v), 5) for v in floor],
        first_token_attention=mean_mass,
        first_token_attention_by_head=sink_mass,
        final_losses=finals,
        **finding(excess, within),
        plot=plot(curves, floor, cfg, args),
        cpu=_common.cpu_name(),
    )


if __name__ == "__main__":
    from attnc.experiments.streaming import main as _main

    _main()
