"""Draws docs/images/pointer_curves.png, the pointer page's figure of
Vinyals et al.'s Tables 1-2: hull accuracy against n for the models trained
on 50 and on 5-50 points, and the TSP-20 tour lengths beside the optimum's
and the paper's. It reads the runs' result.json files, copied to
notebooks/data/pointer_curves/ (hull_50, hull_5-50, tsp_20; notebook 05
section (d) reads the same files); nothing trains here.

    python docs/images/pointer_curves.py
"""

import json
from pathlib import Path

from matplotlib.figure import Figure

from attnc.experiments import pointer_hull

DATA = Path(__file__).resolve().parents[2] / "notebooks" / "data" / "pointer_curves"
OUT = Path(__file__).with_suffix(".png")


def load(name):
    return json.loads((DATA / f"{name}.json").read_text())


def tsp_bars(ax, t):
    """The TSP-20 mean tour lengths as bars, each labelled with its value."""
    bars = [
        ("optimum (Held-Karp)", t["optimal_tour_length"], "0.3"),
        ("training tours (Or-opt)", t["training_tour_length"], "0.6"),
        ("attnc greedy", t["tour_length_greedy"], "C0"),
        ("attnc beam 10", t["tour_length_beam10"], "C1"),
        ("paper's optimum", t["paper_optimal"], "0.3"),
        ("paper's Ptr-Net", t["paper_tour_length"], "k"),
    ]
    labels, values, colours = zip(*bars)
    drawn = ax.bar(range(len(bars)), values, color=colours)
    ax.bar_label(drawn, fmt="%.2f", fontsize=8)
    ax.set_xticks(range(len(bars)), labels, rotation=30, ha="right", fontsize=8)
    ax.set(ylim=(0.9 * min(values), 1.05 * max(values)), ylabel="mean tour length")
    ax.set_title(f"TSP n = 20 ({t['steps']:,} steps, {t['heldout_size']} held-out instances)")


def main():
    fig = Figure(figsize=(15, 4), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, name in zip(axes, ("hull_50", "hull_5-50")):
        c = load(name)
        pointer_hull.draw_curve(c, ax)
        trained = c["train_n"].replace("50-50", "50")
        ax.set_title(f"hull, trained on n = {trained} ({c['steps']:,} steps)\n" + ax.get_title(), fontsize=10)
    tsp_bars(axes[2], load("tsp_20"))
    fig.savefig(OUT, dpi=100)


if __name__ == "__main__":
    main()
