"""minGPT's demo: a tiny GPT learns to sort sequences of {0, 1, 2}.

    python -m attnc.experiments.gpt_sort [--seed N] [--quick] [--threads N] [--save PATH]

3 layers, 3 heads, n_embd 48, sequences of length 6 over 3 digits (minGPT's
SortDataset: train and test split by a hash of the sequence, so the test
sequences are never trained on). Scored as minGPT scores it: greedy
generation of the sorted half for 5,000 test draws (and 5,000 train draws);
target: 5000/5000 test sequences right.
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc.datasets import sort_task
from attnc.models import GPT

from . import _common

FULL = dict(
    steps=2000,
    batch_size=64,
    lr=5e-4,
    warmup=0,
    final_lr=1.0,
    weight_decay=0.1,
    dropout=0.1,
    clip=1.0,
    eval_size=5000,
    length=6,
    num_digits=3,
    n_layer=3,
    n_head=3,
    n_embd=48,
)
QUICK = dict(FULL, steps=25, eval_size=100)


def exact_match(model, task, batch_size=1000):
    """Fraction of the task's sequences whose greedy continuation is their sorted version."""
    correct = 0
    for start in range(0, len(task), batch_size):
        rows = slice(start, min(start + batch_size, len(task)))
        out = model.generate(task.sequences[rows], max_new_tokens=task.length)
        correct += int((out == task.solutions[rows]).all(axis=1).sum())
    return correct / len(task), correct


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    train_seed, model_seed, test_seed, eval_train_seed = np.random.SeedSequence(args.seed).generate_state(4)
    L, D = cfg["length"], cfg["num_digits"]
    train_set = sort_task(cfg["steps"] * cfg["batch_size"], L, D, seed=int(train_seed), split="train")
    test_set = sort_task(cfg["eval_size"], L, D, seed=int(test_seed), split="test")
    train_eval = sort_task(cfg["eval_size"], L, D, seed=int(eval_train_seed), split="train")
    model = GPT(
        D,
        train_set.block_size,
        n_layer=cfg["n_layer"],
        n_head=cfg["n_head"],
        n_embd=cfg["n_embd"],
        dropout=cfg["dropout"],
        seed=int(model_seed),
    )
    opt = attnc.optim.AdamW(model, lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=cfg["weight_decay"])
    sched = None
    if cfg["warmup"] or cfg["final_lr"] != 1.0:
        sched = attnc.optim.LambdaLR(opt, _common.warmup_cosine(max(1, cfg["warmup"]), cfg["steps"], cfg["final_lr"]))
    bs = cfg["batch_size"]

    def batches(step):
        return train_set.batch(np.arange(step * bs, (step + 1) * bs))

    def loss_and_grads(batch):
        return model.loss_and_grads(*batch)

    result = _common.train(
        model,
        opt,
        loss_and_grads,
        batches,
        cfg["steps"],
        scheduler=sched,
        clip=cfg["clip"],
        desc="gpt_sort",
        disable_progress=args.no_progress,
        run=args.run,
    )
    start = time.perf_counter()
    em, correct = exact_match(model, test_set)
    train_em, _ = exact_match(model, train_eval)
    eval_seconds = time.perf_counter() - start
    return _common.report(
        "gpt_sort",
        args,
        model,
        result,
        bs,
        eval_seconds,
        exact_match=em,
        correct=correct,
        heldout_size=len(test_set),
        train_exact_match=train_em,
    )


if __name__ == "__main__":
    main()
