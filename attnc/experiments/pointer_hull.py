"""A pointer network learns planar convex hulls.

    python -m attnc.experiments.pointer_hull [--n N] [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.ConvexHullTask: 5-10 points uniform in the unit square
(one n per batch; --n N: always N); the target is the hull's vertices
counter-clockwise from the lowest index, then the end token ("hull"
decoding: no repeats, stop at the end token). Model: PointerNet, hidden size
128, inputs embedded to 128, a bidirectional encoder (whether a point is a
vertex depends on the points after it as well as before: a unidirectional
encoder's early keys cannot know it; at 5,000 steps the bidirectional model
scores 81% against 76%). Training: 45,000 fresh batches of 128, Adam 3e-3
with a warm-up and a cosine decay, gradients clipped to norm 1 (400-420 s on
2 threads on a quiet machine, the two encoder directions then running at
once). Scored on 500 held-out point sets of each size: "accuracy" (the exact
vertices in the exact order) and "area_coverage" (the predicted polygon's
area over the true hull's; 0 for a polygon that is not simple), of greedy
decoding (beam 1, the default) and of beam 10 ("beam10"). Seed 0 scores
91.2% (beam 10: 91.2%) and 99.87%, seed 1 91.3% (91.7%) and 99.86%; 36,000
steps gave 90.2% and 90.3%, 30,000 steps 89.8% with an earlier build, and a
peak rate of 4e-3 or 6e-3 scores less.
Targets (issue 7): accuracy >= 90% and area coverage >= 99% (Vinyals et
al.: 92.0% at n = 5), trained within 10 minutes on 2 cores.
"""

from __future__ import annotations

import time

import numpy as np

from attnc.datasets import ConvexHullTask, hull_accuracy, hull_area_coverage

from . import _common, _pointer

FULL = dict(
    steps=45000, batch_size=128, hidden_size=128, bidirectional=True, lr=3e-3, warmup=100, final_lr=0.02, heldout=500
)
QUICK = dict(FULL, steps=150, batch_size=32, hidden_size=32, heldout=20)


add_flags = _pointer.n_flag(None)


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    ns = _pointer.sizes(args)
    task = ConvexHullTask(min_n=ns[0], max_n=ns[-1])
    model, result = _pointer.train("pointer_hull", args, task, cfg, "hull")
    start = time.perf_counter()
    acc, cover = {1: {}, 10: {}}, {1: {}, 10: {}}
    for n, held in _pointer.heldout(task, ns, cfg["heldout"]).items():
        for beam in (1, 10):
            pred = _pointer.decode(model, held, "hull", beam_size=beam)
            acc[beam][n], cover[beam][n] = hull_accuracy(pred, held), hull_area_coverage(pred, held)
    mean = lambda d: float(np.mean(list(d.values())))  # noqa: E731
    return _common.report(
        "pointer_hull",
        args,
        model,
        result,
        cfg["batch_size"],
        time.perf_counter() - start,
        accuracy=mean(acc[1]),
        area_coverage=mean(cover[1]),
        accuracy_by_n=acc[1],
        area_coverage_by_n=cover[1],
        beam10={"accuracy": mean(acc[10]), "area_coverage": mean(cover[10])},
        heldout_size=cfg["heldout"] * len(acc[1]),
    )


if __name__ == "__main__":
    main()
