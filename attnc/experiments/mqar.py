"""Multi-query associative recall (Zoology, Arora et al. 2023): softmax attention recalls
at small width, linear attention needs more.

    python -m attnc.experiments.mqar [--seed N] [--quick] [--threads N] [--steps N] [--mixers a,b,...]

Task: attnc.datasets.mqar_task, rows of 32 tokens over a vocabulary of 32
(keys 1-15, values 16-31; Zoology's power-law query gaps, random filler):
P key-value pairs, then every key again, where the model must predict its
value. Models (attnc.experiments._mixers.MixerLM): two pre-norm layers,
2 heads, RoPE on queries and keys, a ReLU MLP of 4 d, at widths d = 32 and
64, with the mixers softmax, window (a causal sliding window of 8 keys:
two layers see 14 tokens back at most, less than the 16 tokens of 8
pairs), linear (elu + 1), performer (FAVOR+, round(e log e) fixed random
features per head of width e), differential and sigmoid (``activation="sigmoid"``, Ramapuram et al.
2024; ``--mixers`` picks some). Each of the 12 models trains on its own fresh batches of 32 rows whose number of
pairs cycles through 2, 4 and 8 (800 steps of AdamW 3e-3, weight decay 0.1,
50 warm-up steps, a cosine decay to 0.1 of it, gradients clipped to norm 1),
then is scored on 500 held-out rows per number of pairs (the same rows for
every model and seed); the held-out accuracies are also logged at every
evaluation interval. Accuracy: the share of queries whose value is the
argmax prediction. The models train in the order of their widths (every
mixer at 32, then at 64).

Zoology's finding (its Figure 2): attention solves MQAR at every width
while the gated-convolution and linear-attention models need a width
growing with the number of pairs. The metrics: "accuracy"
{mixer: {width: [accuracy at each of "num_kv_pairs"]}}, "mean_accuracy"
{mixer: {width: mean over the pairs}}, and "softmax_beats_linear_at_small_width" (softmax's mean
accuracy above linear's and performer's at the smaller width). Budget: about
20 minutes on 2 busy cores; --quick (widths 16 and 32, 6 steps of 8 rows,
24 held-out rows) seconds.
"""

from __future__ import annotations

import time

import numpy as np

from attnc.datasets import mqar_task

from . import _common
from ._mixers import MIXERS, MixerLM, train_lm

HELDOUT_SEED = 20261128  # the held-out rows are the same for every --seed

FULL = dict(
    steps=800,
    batch_size=32,
    lr=3e-3,
    weight_decay=0.1,
    warmup=50,
    final_lr=0.1,
    length=32,
    vocab_size=32,
    pairs=(2, 4, 8),
    widths=(32, 64),
    num_layers=2,
    num_heads=2,
    window=8,
    heldout=500,
)
QUICK = dict(FULL, steps=6, batch_size=8, warmup=2, widths=(16, 32), heldout=24)


def add_flags(parser) -> None:
    parser.add_argument(
        "--mixers",
        default=",".join(MIXERS),
        help=f"comma-separated mixers of {', '.join(MIXERS)} (default: all)",
    )


def mixers_of(text: str) -> list:
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in MIXERS]
    if bad or not names:
        raise ValueError(f"--mixers: {bad or text!r} not among {', '.join(MIXERS)}")
    return names


def train_one(cfg, args, mixer, width, seed):
    """A model of this mixer and width trained on its own batches."""
    data_seed, model_seed = seed.generate_state(2)
    model = MixerLM(
        cfg["vocab_size"],
        cfg["length"],
        width,
        cfg["num_layers"],
        cfg["num_heads"],
        mixer,
        "rope",
        cfg["window"],
        seed=int(model_seed),
    )
    rng = np.random.default_rng(int(data_seed))
    pairs = cfg["pairs"]

    def batch(step):
        task = mqar_task(
            cfg["batch_size"],
            pairs[step % len(pairs)],
            cfg["length"],
            cfg["vocab_size"],
            seed=int(rng.integers(2**63)),
        )
        return task.inputs, task.targets

    tests = heldout_sets(cfg)

    def measures():  # a run stopped early still shows how far each model got
        return {f"accuracy_P{p}": accuracy(model, t) for p, t in tests.items()}

    result = train_lm(model, cfg, batch, args, f"mqar_{mixer}_d{width}", rngs={"data": rng}, evaluate=measures)
    return model, result


def heldout_sets(cfg):
    seeds = np.random.SeedSequence(HELDOUT_SEED).generate_state(len(cfg["pairs"]))
    return {
        p: mqar_task(cfg["heldout"], p, cfg["length"], cfg["vocab_size"], seed=int(s))
        for p, s in zip(cfg["pairs"], seeds)
    }


def accuracy(model, task, chunk=100):
    preds = np.concatenate([model(task.inputs[i : i + chunk]).argmax(-1) for i in range(0, len(task), chunk)])
    return round(task.accuracy(preds), 4)


def table(acc, pairs) -> str:
    head = f"{'mixer':<14}{'d':>4}" + "".join(f"{f'P={p}':>8}" for p in pairs)
    rows = [
        f"{mixer:<14}{width:>4}" + "".join(f"{a:>8.3f}" for a in accs)
        for mixer, by_width in acc.items()
        for width, accs in by_width.items()
    ]
    return "\n".join([head, *rows])


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    mixers = mixers_of(args.mixers)
    cfg = _common.config(FULL, QUICK, args)
    tests = heldout_sets(cfg)
    acc: dict = {m: {} for m in mixers}
    results, seconds, eval_seconds, model = [], 0.0, 0.0, None
    seeds = np.random.SeedSequence(args.seed).spawn(len(mixers) * len(cfg["widths"]))
    for i, (mixer, width) in enumerate(_pairs(mixers, cfg)):
        model, result = train_one(cfg, args, mixer, width, seeds[i])
        results.append(result)
        seconds += result["train_seconds"]
        start = time.perf_counter()
        acc[mixer][str(width)] = [accuracy(model, tests[p]) for p in cfg["pairs"]]
        eval_seconds += time.perf_counter() - start
    print(table(acc, cfg["pairs"]))
    mean = {m: {w: round(float(np.mean(a)), 4) for w, a in by.items()} for m, by in acc.items()}
    small = str(min(cfg["widths"]))
    linear = [mean[m][small] for m in ("linear", "performer") if m in mean]
    summary = {"steps": results[-1]["steps"], "train_seconds": round(seconds, 3)}
    summary.update(first_loss=results[-1]["first_loss"], final_loss=results[-1]["final_loss"])
    return _common.report(
        "mqar",
        args,
        model,
        summary,
        cfg["batch_size"],
        eval_seconds,
        mixers=mixers,
        widths=list(cfg["widths"]),
        num_kv_pairs=list(cfg["pairs"]),
        length=cfg["length"],
        heldout_size=cfg["heldout"],
        accuracy=acc,
        mean_accuracy=mean,
        final_losses={f"{m}_d{w}": r["final_loss"] for (m, w), r in zip(_pairs(mixers, cfg), results)},
        softmax_beats_linear_at_small_width=(
            bool(mean["softmax"][small] > max(linear)) if "softmax" in mean and linear else None
        ),
    )


def _pairs(mixers, cfg):
    """(mixer, width) of each model, the smaller width's first."""
    return [(m, w) for w in cfg["widths"] for m in mixers]


if __name__ == "__main__":
    main()
