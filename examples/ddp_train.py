"""Train a small transformer language model built on attnc.torch with torch's
DistributedDataParallel (gloo backend, CPU processes).

    torchrun --nproc_per_node 2 examples/ddp_train.py [--steps N] [--batch-size B]
        [--threads N] [--dtype float32|float64] [--seed S] [--dump DIR]

The model is attnc.models.GPT (minGPT's layout: attnc's fused attention and
layers, forward and backward in C) wrapped by attnc.torch.Module, so its
parameters are torch Parameters sharing the GPT's arrays: DDP all-reduces
their gradients and torch.optim.AdamW steps them in place. The data is
minGPT's sorting demo (attnc.datasets.sort_task): given 6 digits, continue
with them sorted. Every step draws one global batch; each process takes its
own contiguous rows of it (the batch size must be a multiple of the number
of processes), so the averaged gradient is the whole batch's.

Each process runs attnc's C kernels on ``--threads`` threads
(attnc.set_num_threads; by default the cores divided among the local
processes), and torch's few ops (the loss) likewise.

Rank 0 prints one JSON line at the end: the first and last loss and the
exact match of greedy continuations on held-out sequences. With ``--dump
DIR`` each rank writes DIR/rank<r>.npz: the all-reduced gradients of the
first step (``grad.<name>``) and the parameters after the last
(``param.<name>``); tests/test_ddp.py compares them with one process's
gradients over the whole batch.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import attnc
import attnc.torch
from attnc.datasets import sort_task
from attnc.models import GPT

LENGTH, DIGITS = 6, 3


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=64, help="the global batch (all processes together)")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--threads", type=int, default=None, help="attnc's (and torch's) threads per process")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dump", default=None, help="a folder for each rank's gradients and parameters")
    return p.parse_args(argv)


def build_model(dtype: str, seed: int) -> attnc.torch.Module:
    """A 2-layer GPT (its block holds the digits and their sorted continuation)."""
    block = 2 * LENGTH - 1
    gpt = GPT(DIGITS, block, n_layer=2, n_head=2, n_embd=32, dropout=0.0, dtype=dtype, seed=seed)
    return attnc.torch.Module(gpt)


def global_batch(train, step: int, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The step's batch over all processes: (idx, targets), int64 (batch_size, 11)."""
    return train.batch(np.arange(step * batch_size, (step + 1) * batch_size))


def shard(batch: tuple[np.ndarray, np.ndarray], rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's contiguous rows of a global batch, as tensors."""
    rows = batch[0].shape[0] // world
    return tuple(torch.from_numpy(np.ascontiguousarray(a[rank * rows : (rank + 1) * rows])) for a in batch)


def loss_of(model: torch.nn.Module, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of the continuation (the prompt's targets are -100).
    Every row has the same number of scored targets, so the mean of the
    processes' means is the whole batch's mean."""
    logits = model(idx)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def exact_match(gpt: GPT, n: int, seed: int) -> float:
    test = sort_task(n, LENGTH, DIGITS, seed=seed, split="test")
    out = gpt.generate(test.sequences, max_new_tokens=LENGTH)
    return float((out == test.solutions).all(axis=1).mean())


def train(args: argparse.Namespace) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        raise ValueError(f"--batch-size {args.batch_size} must be a multiple of the {world} processes")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    threads = args.threads or max(1, (os.cpu_count() or 1) // local)
    attnc.set_num_threads(threads)
    torch.set_num_threads(threads)

    model = build_model(args.dtype, args.seed)
    ddp = DistributedDataParallel(model)  # CPU: no device_ids; broadcasts rank 0's parameters
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    train_set = sort_task(args.steps * args.batch_size, LENGTH, DIGITS, seed=args.seed, split="train")
    losses, first_grads, start = [], None, time.perf_counter()
    for step in range(args.steps):
        idx, targets = shard(global_batch(train_set, step, args.batch_size), rank, world)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(ddp, idx, targets)
        loss.backward()  # DDP averages the gradients over the processes here
        if step == 0:
            first_grads = {n: p.grad.detach().clone().numpy() for n, p in model.named_parameters()}
        opt.step()  # in place: the GPT's arrays move with the Parameters
        summed = loss.detach().clone()
        dist.all_reduce(summed)
        losses.append(float(summed) / world)
    seconds = time.perf_counter() - start
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        arrays = {f"grad.{n}": g for n, g in first_grads.items()}
        arrays.update({f"param.{n}": p for n, p in model.attnc_module.named_parameters()})
        np.savez(os.path.join(args.dump, f"rank{rank}.npz"), **arrays)
    return dict(
        processes=world,
        threads_per_process=threads,
        steps=args.steps,
        first_loss=losses[0],
        last_loss=losses[-1],
        seconds=round(seconds, 2),
        exact_match=exact_match(model.attnc_module, 500, args.seed + 1) if rank == 0 else None,
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo")  # torchrun's environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    try:
        result = train(args)
        if dist.get_rank() == 0:
            print(json.dumps(result), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
