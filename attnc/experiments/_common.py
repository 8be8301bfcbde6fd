"""What every experiment shares: the command line, threads, the training loop
with its progress bar (stderr), and the JSON line of metrics (the last line
of stdout).

    python -m attnc.experiments.NAME [--seed N] [--quick] [--threads N] [--save PATH] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

import attnc


def parse_args(description: str, argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, initialisation and dropout")
    parser.add_argument("--quick", action="store_true", help="a seconds-long run (CI); need not reach the target")
    parser.add_argument("--threads", type=int, default=None, help="attnc.set_num_threads(N)")
    parser.add_argument("--save", metavar="PATH", default=None, help="save the trained model with attnc.save")
    parser.add_argument("--steps", type=int, default=None, help="override the number of training steps")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be >= 1")
        attnc.set_num_threads(args.threads)
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be >= 1")
    if args.save is not None:  # refused now, not after the training run
        folder = os.path.dirname(os.path.abspath(args.save))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            parser.error(f"--save {args.save}: {folder} is not a writable directory")
    return args


def progress(total: int, desc: str, disable: bool = False):
    """A tqdm progress bar on stderr."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, disable=disable, dynamic_ncols=True, mininterval=0.5,
                leave=False)


def warmup_cosine(warmup: int, total: int, final: float = 0.0):
    """LambdaLR factor: linear warm-up over `warmup` steps to 1, then a cosine
    decay to `final` at step `total`."""

    def factor(epoch: int) -> float:
        step = epoch + 1
        if step <= warmup:
            return step / warmup
        t = min(1.0, (step - warmup) / max(1, total - warmup))
        return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * t))

    return factor


def config(full: dict, quick: dict, is_quick: bool, steps=None) -> dict:
    """A copy of the run's configuration (``quick`` or ``full``), with
    ``steps`` (e.g. --steps) replacing its number of steps when given."""
    cfg = dict(quick if is_quick else full)
    if steps is not None:
        cfg["steps"] = int(steps)
    return cfg


def adam_warmup_cosine(model, lr: float, warmup: int, total: int, final: float = 0.0):
    """(Adam on model's parameters at lr, a LambdaLR with warmup_cosine's
    factor): the optimiser most experiments train with."""
    opt = attnc.optim.Adam(model, lr=lr)
    return opt, attnc.optim.LambdaLR(opt, warmup_cosine(warmup, total, final))


def train(model, optimizer, loss_and_grads, batches, steps: int, *, scheduler=None, clip=1.0, desc="train",
          disable_progress=False, after_step=None) -> dict:
    """The training loop: for each step, loss, grads = loss_and_grads(batch);
    clip the global gradient norm; step the optimiser and the scheduler;
    then after_step(step) if given (e.g. a periodic evaluation).

    batches(step) -> the step's batch. Returns {"steps", "final_loss" (mean of
    the last 5% of steps), "first_loss", "losses", "train_seconds"} (the time
    of the whole loop, data included)."""
    model.train()
    losses = []
    start = time.perf_counter()
    with progress(steps, desc, disable_progress) as bar:
        for step in range(steps):
            batch = batches(step)
            with attnc.grad.internal():  # its pullbacks run inside: nothing can change what they read
                loss, grads = loss_and_grads(batch)
            if not math.isfinite(loss):
                raise FloatingPointError(f"the loss is {loss} at step {step}")
            if clip:
                attnc.optim.clip_grad_norm_(grads, clip, model)
            optimizer.step(grads)
            if scheduler is not None:
                scheduler.step()
            losses.append(loss)
            if after_step is not None:
                after_step(step)
            bar.update(1)
            if step % 20 == 0 or step == steps - 1:
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", lr=f"{optimizer.lr:.2e}", refresh=False)
    seconds = time.perf_counter() - start
    model.eval()
    tail = max(1, steps // 20)
    return {
        "steps": steps,
        "first_loss": float(losses[0]) if losses else None,
        "final_loss": float(np.mean(losses[-tail:])) if losses else None,
        "losses": losses,
        "train_seconds": round(seconds, 3),
    }


def report(name, args, model, result, batch_size, eval_seconds, **metrics) -> None:
    """Save the model if asked, then emit the run's metrics with what every
    experiment reports (seed, threads, training curve ends, size, timings)."""
    save_model(args.save, model)
    emit({
        "experiment": name, "seed": args.seed, "quick": args.quick, "threads": attnc.get_num_threads(),
        **metrics,
        "steps": result["steps"], "batch_size": batch_size,
        "first_loss": result["first_loss"], "final_loss": result["final_loss"],
        "parameters": int(sum(p.size for p in model.parameters())),
        "train_seconds": result["train_seconds"], "eval_seconds": round(eval_seconds, 3),
    })


def emit(metrics: dict) -> None:
    """Print the metrics as one JSON object: the last line of stdout."""
    sys.stdout.flush()
    print(json.dumps(metrics), flush=True)


def save_model(path, model) -> None:
    if path:
        attnc.save(path, model)
        print(f"saved the model to {path}", file=sys.stderr)
