"""What the pointer-network experiments (pointer_sort, pointer_tsp,
pointer_hull) share: the command line (--n), the model (a PointerNet whose
inputs are first embedded linearly to the hidden size: with raw coordinates
the TSP model sat on a plateau, pointing by position only, for thousands
of steps; its encoder bidirectional when the configuration says
``bidirectional=True``), the training loop (fresh batches from the task
every step, Adam with a warm-up and a cosine decay, gradients clipped to
norm 1) and batched decoding of held-out sets.
"""

from __future__ import annotations

import argparse

import numpy as np

from attnc.models import PointerNet

from . import _common

HELDOUT_SEED = 20151122  # the held-out instances are the same for every --seed
MAX_N = 1000  # the largest size --n and --eval-n take (the paper's largest: 500)


def n_flag(default):
    """An experiment's add_flags: --n (the problem size), default `default`."""

    def add_flags(parser):
        parser.add_argument(
            "--n",
            type=_common.at_least(2),
            default=default,
            help="the problem size" + (f" (default {default})" if default else " (default: 5 to 10)"),
        )

    return add_flags


def heldout_flag(parser) -> None:
    """Add --heldout N: the held-out instances per size (default: the configuration's)."""
    parser.add_argument(
        "--heldout",
        type=_common.at_least(1),
        default=None,
        help="held-out instances per size (default: the experiment's; fewer evaluate sooner)",
    )


def size_range(text) -> str:
    """An argparse type: "N" or "LO-HI" (3 <= LO <= HI), normalised."""
    lo, hi = parse_range(text)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def parse_range(text) -> tuple:
    """(LO, HI) of "N" (N, N) or "LO-HI"; argparse's error when neither."""
    parts = str(text).split("-")
    try:
        lo, hi = int(parts[0]), int(parts[-1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or LO-HI, got {text!r}") from None
    if len(parts) > 2 or not 3 <= lo <= hi <= MAX_N:
        raise argparse.ArgumentTypeError(f"expected N or LO-HI with 3 <= LO <= HI <= {MAX_N}, got {text!r}")
    return lo, hi


def size_list(text) -> str:
    """An argparse type: sizes N,N,... (each >= 3, increasing), normalised."""
    return ",".join(map(str, parse_list(text)))


def parse_list(text) -> list:
    """[N, ...] of "N,N,..." (each >= 3, increasing); argparse's error else."""
    try:
        ns = [int(part) for part in str(text).split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes N,N,..., got {text!r}") from None
    if ns != sorted(set(ns)) or not 3 <= ns[0] <= ns[-1] <= MAX_N:
        raise argparse.ArgumentTypeError(f"expected increasing sizes from 3 to {MAX_N}, got {text!r}")
    return ns


def sizes(args, lo=5, hi=10):
    """The problem sizes of a run: --n N alone, else lo..hi."""
    return range(args.n, args.n + 1) if args.n else range(lo, hi + 1)


def heldout(task, ns, count):
    """{str(n): a held-out batch of count instances of size n} for n in ns,
    the same for every --seed."""
    return {str(n): task.batch(count, n=n, seed=HELDOUT_SEED + n) for n in ns}


def train(name, args, task, cfg, constraint):
    """Train a PointerNet on fresh batches of task; returns (model, result)."""
    data_seed, model_seed = np.random.SeedSequence(args.seed).generate_state(2)
    model = PointerNet(
        task.input_size,
        cfg["hidden_size"],
        embedding_size=cfg["hidden_size"],
        bidirectional=cfg.get("bidirectional", False),
        seed=int(model_seed),
    )
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], cfg["warmup"], cfg["steps"], cfg["final_lr"])
    rng = np.random.default_rng(int(data_seed))

    def batches(step):
        return task.batch(cfg["batch_size"], seed=rng)

    def loss_and_grads(batch):
        return model.loss_and_grad(batch, constraint=constraint)

    result = _common.train(
        model,
        opt,
        loss_and_grads,
        batches,
        cfg["steps"],
        scheduler=sched,
        clip=1.0,
        desc=name,
        disable_progress=args.no_progress,
        run=args.run,
        rngs={"data": rng},
    )
    return model, result


def decode(model, batch, constraint, beam_size=1, chunk=500):
    """Indices of model.generate over a held-out batch, in chunks of rows."""
    parts = []
    for start in range(0, len(batch.inputs), chunk):
        sl = slice(start, start + chunk)
        out = model.generate(batch.inputs[sl], lengths=batch.lengths[sl], constraint=constraint, beam_size=beam_size)
        parts.append(out.indices)
    width = max(p.shape[1] for p in parts)
    return np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1])), constant_values=-1) for p in parts])
