"""Translation quality against sentence length, with attention and without (Bahdanau et al. 2015,
Figure 2).

    python -m attnc.experiments.bahdanau_length [--seed N] [--quick] [--threads N]
        [--train-max-len 30,50] [--hidden-size H] [--steps N]

Data: attnc.datasets.translation, a synthetic language pair (seeded, made
by attnc: clauses of a small English, and a target language with its own
made-up words, the verb last and noun phrases backwards, so every word
moves and copying scores nothing). For each --train-max-len L (the paper's
RNNsearch-30 and -50 were trained on sentences of up to 30 and 50 words)
the training set is 40,000 train-split sentences of 6 to L words (1 to L // 8
clauses, uniformly: most sentences short, as in a corpus). The held-out set
is the same for every seed: 100 test-split sentences in each length bucket
6-10, 11-15, ..., 56-60 (attnc.datasets.translation_split keeps the splits
apart), so the longer buckets hold sentences longer than any trained on.

Models: attnc.models.Seq2Seq with attention="none" (the encoder-decoder of
Cho et al. / Sutskever et al.: the decoder sees the encoder's final state
only, "RNNencdec") and attention="bahdanau" (a bidirectional encoder and
additive attention, "RNNsearch"); embeddings 32, hidden size 64 for both
(the same budget; the JSON gives each one's parameter count: RNNsearch's
encoder is bidirectional, as in the paper). Training: 2,000 steps of 64
sentences for every model, Adam at 3e-3 with 100 warm-up steps and a cosine
decay to 5%, gradients clipped to norm 1; the models of one L see the same
sentences in the same order. Scored by greedy decoding on the held-out set,
per length bucket: exact match, token accuracy and corpus BLEU (sacrebleu,
tokenize="none").

JSON: "lengths" (bucket centres; "length_lo", "length_hi"), then per model
M = {none, attention}_{L}: "bleu_M", "exact_match_M", "token_accuracy_M"
(lists over the buckets), "parameters_M", "train_seconds_M",
"train_cpu_seconds_M"; "train_seconds" (all models), "threads", "cpu"; a
plot (bahdanau_length.png) in the run folder.

The paper's finding (Figure 2, BLEU against sentence length on WMT'14
English-French): the encoder-decoder without attention degrades steadily
as sentences grow longer (past about 20 words), while RNNsearch-50 shows no
deterioration up to and beyond 50 words; RNNsearch-30 beats even
RNNencdec-50. The figure's points are not quoted here (no verified numbers).

Budget: the full run trains 4 models (2,000 steps each) in about 25 minutes on
2 idle cores (see "train_seconds_*"); --train-max-len 30 halves it.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from attnc.datasets import translation_task

from . import _common, _translation

FULL = dict(_translation.FULL, steps=2000, per_bucket=100)
QUICK = dict(_translation.QUICK, per_bucket=3)
MODELS = {"none": "RNNencdec", "bahdanau": "RNNsearch"}
KEYS = {"none": "none", "bahdanau": "attention"}

PAPER = {
    "paper": "Bahdanau, Cho & Bengio 2015, Figure 2 (WMT'14 English-French, BLEU against sentence length)",
    "paper_claim": "without attention (RNNencdec-30/50) BLEU falls as sentences grow longer; RNNsearch-50 does "
    "not deteriorate up to and past 50 words, and RNNsearch-30 beats RNNencdec-50 (the figure's points are not "
    "quoted: no verified numbers)",
}


def max_lengths(text: str) -> tuple:
    """--train-max-len's lengths: comma-separated distinct ints in [8, 60] (8: a clause at least)."""
    try:
        values = tuple(int(v) for v in str(text).split(","))
    except ValueError:
        values = ()
    if not values or any(v < 8 or v > 60 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"takes distinct lengths from 8 to 60, comma-separated; got {text!r}")
    return values


def _max_lengths_flag(text: str) -> str:
    """argparse's type of --train-max-len: the text (as config.json records it), checked."""
    max_lengths(text)
    return text


def add_flags(parser):
    """This experiment's own flags."""
    parser.add_argument(
        "--train-max-len",
        default="30,50",
        type=_max_lengths_flag,
        help="the training sentences' longest length; comma-separated for several pairs of models (default 30,50)",
    )
    parser.add_argument("--hidden-size", type=_common.positive_int, default=None, help="both models' hidden size")


def model_seed(seed: int, kind: str, max_len: int) -> int:
    return int(np.random.SeedSequence([seed, list(MODELS).index(kind), max_len]).generate_state(1)[0])


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    lengths = max_lengths(args.train_max_len)
    cfg = _common.config(FULL, QUICK, args, hidden_size=args.hidden_size)
    heldout = _translation.stratified(cfg["per_bucket"])
    metrics = {
        "experiment": "bahdanau_length",
        "seed": args.seed,
        "quick": args.quick,
        **_translation.machine(),
        **_translation.bucket_labels(),
        "bucket_size": cfg["per_bucket"],
        "train_max_len": list(lengths),
        "steps": cfg["steps"],
        "batch_size": cfg["batch_size"],
        "hidden_size": cfg["hidden_size"],
    }
    seconds, model = 0.0, None
    for max_len in lengths:
        data_seed, order_seed = np.random.SeedSequence([args.seed, max_len]).generate_state(2)
        train_set = translation_task(cfg["train_size"], seed=int(data_seed), max_len=max_len)
        for kind, key in KEYS.items():
            name = f"{key}_{max_len}"
            model = _translation.build(kind, train_set, cfg, model_seed(args.seed, kind, max_len))
            result = _translation.train(model, train_set, cfg, int(order_seed), args, f"{MODELS[kind]}-{max_len}")
            s = _translation.scores(model, heldout, _translation.EDGES)
            metrics.update(
                {
                    f"bleu_{name}": s["bleu_by_length"],
                    f"exact_match_{name}": s["exact_match_by_length"],
                    f"token_accuracy_{name}": s["token_accuracy_by_length"],
                    f"bleu_all_{name}": s["bleu"],
                    f"final_loss_{name}": result["final_loss"],
                    f"parameters_{name}": int(sum(p.size for p in model.parameters())),
                    f"train_seconds_{name}": result["train_seconds"],
                    f"train_cpu_seconds_{name}": result["train_cpu_seconds"],
                }
            )
            seconds += result["train_seconds"]
            print(f"{MODELS[kind]}-{max_len}: BLEU {s['bleu']:.1f}, {result['train_seconds']:.0f} s", file=sys.stderr)
    metrics["train_seconds"] = round(seconds, 3)
    metrics.update(PAPER)
    metrics.update(finding(metrics, lengths))
    metrics["plot"] = plot(metrics, lengths, args)
    return _common.conclude(args, model, metrics)


def finding(m: dict, lengths: tuple) -> dict:
    """BLEU on the shortest and the longest bucket per model, and whether
    attention holds up better: the drop from the first to the last bucket."""
    out = {}
    for max_len in lengths:
        for key in KEYS.values():
            curve = m[f"bleu_{key}_{max_len}"]
            out[f"bleu_drop_{key}_{max_len}"] = round(curve[0] - curve[-1], 4)
        out[f"attention_degrades_less_{max_len}"] = bool(
            out[f"bleu_drop_attention_{max_len}"] < out[f"bleu_drop_none_{max_len}"]
        )
    return out


def plot(m: dict, lengths: tuple, args):
    """BLEU and exact match against the source length, one line per model,
    saved as bahdanau_length.png in the run folder (its name; None without a
    folder or matplotlib)."""
    fig = _common.run_figure(args, figsize=(10, 4))
    if fig is None:
        return None
    axes = fig.subplots(1, 2)
    for max_len in lengths:
        for kind, key in KEYS.items():
            style = dict(marker="o" if kind == "bahdanau" else "x", ls="-" if max_len == lengths[-1] else "--")
            label = f"{MODELS[kind]}-{max_len}"
            axes[0].plot(m["lengths"], m[f"bleu_{key}_{max_len}"], label=label, **style)
            axes[1].plot(m["lengths"], m[f"exact_match_{key}_{max_len}"], label=label, **style)
    for ax, what in zip(axes, ("BLEU", "exact match")):
        ax.set_xlabel("source length (words)")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
        for max_len in lengths:
            ax.axvline(max_len, color="grey", lw=0.8, ls=":")
    axes[0].legend()
    fig.suptitle("attnc.experiments.bahdanau_length (cf. Bahdanau et al. 2015, Figure 2)")
    fig.tight_layout()
    fig.savefig(args.run.dir / "bahdanau_length.png", dpi=120)
    return "bahdanau_length.png"


if __name__ == "__main__":
    main()
