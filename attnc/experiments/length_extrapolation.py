"""Train short, test long (ALiBi, Press et al. 2022): a causal LM trained at length 64,
evaluated at 64-512 with four position schemes.

    python -m attnc.experiments.length_extrapolation [--seed N] [--quick] [--threads N] [--steps N]

Data: attnc.datasets.markov_task, a random Markov chain of order 2 over 16
tokens (Dirichlet(0.1) rows; the chain fixed, chain_seed 0), whose best
possible loss is known ("optimal_loss"): the next token depends on the last
two only, so nothing but the handling of positions keeps a model from
predicting sequences of any length. Models (attnc.experiments._mixers.MixerLM):
two pre-norm layers of softmax attention, d 32, 2 heads, a ReLU MLP of 128,
with sinusoidal or learned position tables added to the embeddings, RoPE, or
ALiBi (the paper's slopes, no position embedding), each trained from its own
seed on fresh batches of 32 sequences of 64 tokens (600 steps of AdamW 2e-3,
weight decay 0.1, 50 warm-up steps, a cosine decay to 0.1 of it, gradients
clipped to norm 1).

Evaluated on 64 held-out sequences of each length 64, 128, 256 and 512 (the
same chain, the same rows for every model and seed), the loss being the mean
cross-entropy over every token of the sequence, as the paper scores
(non-overlapping) sequences of its evaluation lengths. The learned table has
no rows past 64: as in the paper, which compares sinusoidal, rotary, T5 bias
and ALiBi only, the learned model is a reference at the training length, its
losses past it null. Metrics: "eval_lengths"; "loss" {positions: [loss at
each length]}; "optimal_loss" [the chain's own at each length]; "loss_by_position"
{positions: [loss at each position 0 .. 511 of the 512-token sequences,
mean over them]} (learned: 0 .. 63) with "optimal_by_position" (null at
position 0, where one token precedes); "alibi_flat" (ALiBi's loss at 512
within 0.05 nats of its loss at 64) and "sinusoidal_degrades" (sinusoidal's
loss at 512 above its loss at 64 by more than 0.05 nats). Budget: about 15
minutes on 2 busy cores; --quick (5 steps, lengths 16 and 32, 4 sequences) seconds.
"""

from __future__ import annotations

import time

import numpy as np

from attnc.datasets import markov_task

from . import _common
from ._mixers import MixerLM, train_lm

HELDOUT_SEED = 20261129
SCHEMES = ("sinusoidal", "learned", "rope", "alibi")
TOLERANCE = 0.05  # nats: what "flat" and "degrades" mean in the summary booleans

FULL = dict(
    steps=600,
    batch_size=32,
    lr=2e-3,
    weight_decay=0.1,
    warmup=50,
    final_lr=0.1,
    length=64,
    vocab_size=16,
    order=2,
    chain_seed=0,
    d_model=32,
    num_layers=2,
    num_heads=2,
    eval_lengths=(64, 128, 256, 512),
    heldout=64,
)
QUICK = dict(FULL, steps=5, batch_size=8, warmup=2, length=16, d_model=16, eval_lengths=(16, 32), heldout=4)


def markov_rows(cfg, n, length, seed):
    """(inputs, targets) of n sequences of cfg's Markov chain."""
    task = markov_task(n, length, cfg["vocab_size"], cfg["order"], seed=seed, chain_seed=cfg["chain_seed"])
    return task.inputs, task.targets


def train_lm_on(cfg, args, desc, seed, rows=markov_rows, vocab_size=None, **model):
    """A MixerLM (settings cfg's and `model`'s) trained at length
    cfg["length"] on batches rows(cfg, n, length, seed) -> (inputs, targets)
    drawn from its own generator (default: cfg's Markov chain)."""
    data_seed, model_seed = seed.generate_state(2)
    lm = MixerLM(
        vocab_size or cfg["vocab_size"],
        cfg["length"],
        cfg["d_model"],
        cfg["num_layers"],
        cfg["num_heads"],
        seed=int(model_seed),
        **model,
    )
    rng = np.random.default_rng(int(data_seed))

    def batch(step):
        return rows(cfg, cfg["batch_size"], cfg["length"], int(rng.integers(2**63)))

    return lm, train_lm(lm, cfg, batch, args, desc, rngs={"data": rng})


def heldout(cfg, length, salt=0):
    """cfg's held-out sequences of this length (the same for every --seed)."""
    seed = int(np.random.SeedSequence([HELDOUT_SEED, length, salt]).generate_state(1)[0])
    return markov_task(cfg["heldout"], length, cfg["vocab_size"], cfg["order"], seed=seed, chain_seed=cfg["chain_seed"])


def position_curve(losses):
    """(B, L) token losses -> [mean over the rows at each position], rounded."""
    return [round(float(v), 5) for v in np.nanmean(losses, axis=0)]


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    lengths = list(cfg["eval_lengths"])
    tasks = {n: heldout(cfg, n) for n in lengths}
    longest = tasks[lengths[-1]]
    seeds = np.random.SeedSequence(args.seed).spawn(len(SCHEMES))
    loss, by_position, finals = {}, {}, {}
    seconds, eval_seconds, lm, result = 0.0, 0.0, None, None
    for scheme, seed in zip(SCHEMES, seeds):
        lm, result = train_lm_on(cfg, args, f"length_extrapolation_{scheme}", seed, positions=scheme)
        seconds += result["train_seconds"]
        finals[scheme] = result["final_loss"]
        start = time.perf_counter()
        defined = [n for n in lengths if scheme != "learned" or n <= cfg["length"]]
        losses = {n: lm.token_losses(tasks[n].inputs, tasks[n].targets) for n in defined}
        loss[scheme] = [round(float(losses[n].mean()), 5) if n in losses else None for n in lengths]
        curve = losses.get(lengths[-1], losses[defined[-1]])
        by_position[scheme] = position_curve(curve)
        eval_seconds += time.perf_counter() - start
    optimal = [round(tasks[n].optimal_loss(), 5) for n in lengths]
    floor = longest.optimal_loss(np.arange(longest.order - 1, longest.length))
    print(f"{'positions':<12}" + "".join(f"{f'L={n}':>9}" for n in lengths))
    for scheme, row in [*loss.items(), ("optimal", optimal)]:
        print(f"{scheme:<12}" + "".join(f"{v:>9.4f}" if v is not None else f"{'-':>9}" for v in row))
    summary = dict(result, train_seconds=round(seconds, 3))
    return _common.report(
        "length_extrapolation",
        args,
        lm,
        summary,
        cfg["batch_size"],
        eval_seconds,
        train_length=cfg["length"],
        eval_lengths=lengths,
        loss=loss,
        optimal_loss=optimal,
        loss_by_position=by_position,
        optimal_by_position=[None] * (longest.order - 1) + [round(float(v), 5) for v in floor],
        final_losses=finals,
        alibi_flat=bool(abs(loss["alibi"][-1] - loss["alibi"][0]) < TOLERANCE),
        sinusoidal_degrades=bool(loss["sinusoidal"][-1] - loss["sinusoidal"][0] > TOLERANCE),
    )


if __name__ == "__main__":
    # the imported module's main, so a saved model's class is attnc.experiments._mixers.MixerLM
    from attnc.experiments.length_extrapolation import main as _main

    _main()
