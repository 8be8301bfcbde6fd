"""A pointer network learns to sort real numbers.

    python -m attnc.experiments.pointer_sort [--n N] [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.PointerSortTask: 5-10 numbers uniform in [0, 1) (one n
per batch; --n N: always N); the network points at them in increasing
order ("permutation" decoding). Model: PointerNet, hidden size 128,
inputs embedded to 128. Training: fresh batches of 128, Adam 2e-3 with 100
warm-up steps and a cosine decay, gradients clipped to norm 1. Scored by greedy decoding (in C) on 500
held-out sequences of each length: exact match of the whole order.
Target (issue 7): >= 99% exact match, trained within 10 minutes on 2 cores.
"""

from __future__ import annotations

import time

import numpy as np

from attnc.datasets import PointerSortTask, sort_exact_match

from . import _common, _pointer

FULL = dict(steps=8000, batch_size=128, hidden_size=128, lr=2e-3, warmup=100, final_lr=0.02, heldout=500)
QUICK = dict(FULL, steps=40, batch_size=32, hidden_size=32, heldout=20)


add_flags = _pointer.n_flag(None)


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    ns = _pointer.sizes(args)
    task = PointerSortTask(min_n=ns[0], max_n=ns[-1])
    model, result = _pointer.train("pointer_sort", args, task, cfg, "permutation")
    start = time.perf_counter()
    by_n = {
        n: sort_exact_match(_pointer.decode(model, held, "permutation"), held)
        for n, held in _pointer.heldout(task, ns, cfg["heldout"]).items()
    }
    return _common.report(
        "pointer_sort",
        args,
        model,
        result,
        cfg["batch_size"],
        time.perf_counter() - start,
        exact_match=float(np.mean(list(by_n.values()))),
        exact_match_by_n=by_n,
        heldout_size=cfg["heldout"] * len(by_n),
    )


if __name__ == "__main__":
    main()
