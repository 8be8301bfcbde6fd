"""A pointer network learns planar travelling-salesman tours from optimal or near-optimal ones.

    python -m attnc.experiments.pointer_tsp [--n N] [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.TSPTask(n): n points uniform in the unit square, the
target tour from point 0 in a canonical direction: the optimal tour
(Held-Karp in C) for n <= 12; above, nearest neighbour then 2-opt and
Or-opt moves until neither shortens it (``TSPTask(n, or_opt=True)``: an
optimal tour costs about 0.2 s at n = 20, too slow for fresh batches of
128). Model: PointerNet, hidden size 128, inputs embedded to 128, "tour"
decoding (a permutation closed back to its start). Training: fresh batches
of 128, Adam with a warm-up and a cosine decay, gradients clipped to norm 1.
Scored on 1,000 held-out instances (500 at n = 20; --heldout N: N) against their optimal
tours (Held-Karp, n <= 20; the heuristic's above, "exact_optimum" False):
the mean tour length of greedy decoding (beam 1, the default:
"tour_length", "gap" = tour_length / optimal_tour_length - 1) and of beam
10 ("beam10"); for n > 12 also the training tours' mean length on the
held-out instances and its gap to the optimum ("training_tour_length",
"training_tour_gap"). Targets (issue 7): n = 5 within 1% of the optimum,
n = 10 within 3% (Vinyals et al. 2015, Table 2: 2.12 / 2.12 and 2.87 /
2.88), each trained within 10 minutes on 2 cores; n = 20 (issue 31; the
paper: 3.88 against the optimum's 3.82) 23,000 steps, about 25 minutes
on 2 quiet threads (64 ms a step there, AMD EPYC Zen 3, measured over 100
steps; docs/experiments/pointer.md says what was run).

JSON: "n", "tour_length", "optimal_tour_length", "gap", "beam10"
({"tour_length", "gap"}), "tour_length_greedy", "tour_length_beam10",
"training_tour_length", "training_tour_gap" (None for n <= 12),
"paper_tour_length", "paper_optimal" (None where the paper has no row),
"exact_optimum", "cpu". The run folder also holds tsp_tours.png
(``draw_tours``: four held-out instances, the greedy tour over the optimal).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from attnc.datasets import TSPTask, tour_length, tsp_tours
from attnc.datasets.pointer_tasks import EXACT_BY_DEFAULT_MAX_N, HELD_KARP_MAX_N

from . import _common, _pointer

FULL = {5: dict(steps=5000, lr=1e-3), 10: dict(steps=10000, lr=1e-3), 20: dict(steps=23000, lr=1e-3, heldout=500)}
BASE = dict(batch_size=128, hidden_size=128, warmup=100, final_lr=0.02, heldout=1000)
QUICK = dict(BASE, steps=30, batch_size=32, hidden_size=32, lr=1e-3, heldout=50)
# Vinyals et al. 2015, Table 2 (trained and tested on n): {n: (Ptr-Net's mean tour, the optimum's)}
PAPER = {5: (2.12, 2.12), 10: (2.88, 2.87), 20: (3.88, 3.82)}


def add_flags(parser):
    """This experiment's own flags: --n, --heldout."""
    _pointer.n_flag(5)(parser)
    _pointer.heldout_flag(parser)


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(dict(BASE, **FULL.get(args.n, FULL[10])), QUICK, args, heldout=args.heldout)
    heuristic = args.n > EXACT_BY_DEFAULT_MAX_N
    task = TSPTask(n=args.n, or_opt=heuristic)
    model, result = _pointer.train("pointer_tsp", args, task, cfg, "tour")
    start = time.perf_counter()
    held = task.batch(cfg["heldout"], seed=_pointer.HELDOUT_SEED + args.n)
    exact = args.n <= HELD_KARP_MAX_N
    # the tours scored against (and drawn): the targets where they are optimal or nothing better is known
    optimal_tours, best = (
        tsp_tours(held.inputs, exact=True) if heuristic and exact else (held.targets, held.tour_lengths)
    )
    optimal = float(best.mean())
    scores, tours = {}, {}
    for beam in (1, 10):
        tours[beam] = _pointer.decode(model, held, "tour", beam_size=beam)
        length = float(tour_length(held.inputs, tours[beam]).mean())
        scores[beam] = {"tour_length": length, "gap": length / optimal - 1}
    training = float(held.tour_lengths.mean()) if heuristic else None
    shown = held.inputs[:4]
    fig = _common.run_figure(args, figsize=(3 * len(shown), 3.2), layout="constrained")
    if fig is not None:
        draw_tours(
            shown, tours[1][: len(shown)], optimal_tours[: len(shown)], fig.subplots(1, len(shown), squeeze=False)
        )
        fig.savefig(Path(args.run.dir) / "tsp_tours.png", dpi=120)
    paper = PAPER.get(args.n, (None, None))
    return _common.report(
        "pointer_tsp",
        args,
        model,
        result,
        cfg["batch_size"],
        time.perf_counter() - start,
        n=args.n,
        tour_length=scores[1]["tour_length"],
        optimal_tour_length=optimal,
        gap=scores[1]["gap"],
        beam10=scores[10],
        tour_length_greedy=scores[1]["tour_length"],
        tour_length_beam10=scores[10]["tour_length"],
        training_tour_length=training,
        training_tour_gap=None if training is None else training / optimal - 1,
        paper_tour_length=paper[0],
        paper_optimal=paper[1],
        heldout_size=cfg["heldout"],
        exact_optimum=exact,
        cpu=_common.cpu_name(),
    )


def draw_tours(points, tours, optimal, axes=None):
    """Instances (k, n, 2) with the model's tours (k, n) drawn over the
    optimal ones (k, n; grey, dashed), one panel each, titled with both
    lengths; on k given Axes or a new figure's. Returns the Axes (an array)."""
    import matplotlib.pyplot as plt

    points = np.asarray(points, np.float64)
    if axes is None:
        _, axes = plt.subplots(1, len(points), figsize=(3 * len(points), 3.2), constrained_layout=True, squeeze=False)
    axes = np.asarray(axes).reshape(-1)
    mine, best = tour_length(points, tours), tour_length(points, optimal)
    for ax, p, t, o, a, b in zip(axes, points, tours, optimal, mine, best):
        for tour, style in ((o, "--"), (t, "-")):
            closed = np.append(tour, tour[0])
            ax.plot(p[closed, 0], p[closed, 1], style, color="0.6" if style == "--" else "C0")
        ax.plot(p[:, 0], p[:, 1], "k.")
        ax.set(xticks=[], yticks=[], aspect="equal", title=f"model {a:.3f}, optimum {b:.3f}")
    return axes


if __name__ == "__main__":
    main()
