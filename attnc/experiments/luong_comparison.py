"""Luong et al.'s attention variants under one budget: global dot, general and concat, local-m and local-p,
with and without input feeding (Luong et al. 2015, Table 4).

    python -m attnc.experiments.luong_comparison [--seed N] [--quick] [--threads N]
        [--variants all|NAME,...] [--hidden-size H] [--steps N]

Data: attnc.datasets.translation (the synthetic language pair of
bahdanau_length: every word translated and moved, the verb last, noun
phrases backwards): 40,000 train-split sentences of 6 to 30 words; held out,
the same 1,000 test-split sentences of that range for every seed.

Models: attnc.models.Seq2Seq with Luong's attention on a unidirectional
encoder, embeddings 32, hidden size 64: "global-dot", "global-general",
"global-concat" (attention="luong-dot", "luong-general", "luong-concat"),
"local-m" and "local-p" (the general score in a window of half-width D = 10
around p_t = t, or around a predicted p_t times a Gaussian: the paper's D),
each with input feeding (h̃_{t-1} fed to the decoder's LSTM with y_t: the
paper's default) and without it ("-no-feed"). Ten variants, each trained
1,200 steps of 64 sentences on the same sentences in the same order (Adam at
3e-3, 100 warm-up steps, cosine decay to 5%, gradients clipped to norm 1).

Scored on the held-out set: corpus BLEU of the greedy translations
(sacrebleu, tokenize="none"), exact match, token accuracy and the
teacher-forced perplexity per target word. The JSON is the table, one list
per column in the order of "variants": "bleu", "exact_match",
"token_accuracy", "perplexity", "parameters", "train_seconds_by_variant",
"train_cpu_seconds_by_variant"; "best" (by BLEU) and its margin over the
runner-up ("best_margin_bleu"), and over its own variant without input
feeding ("feeding_gain_bleu": one value per score). table.md in the run
folder is the table in the paper's shape.

The paper's findings (Table 4, WMT'14 English-German; perplexity and BLEU):
local-p with the general score and input feeding is best; for global
attention dot works well; concat performs poorly; input feeding helps
(Table 1). The paper's numbers are not quoted here (not verified).

Budget: ten variants of 1,200 steps: about 25 minutes on 2 idle cores
("train_seconds_by_variant" gives each one's time).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from attnc.datasets import translation_task

from . import _common, _translation

VARIANTS = {
    "global-dot": "luong-dot",
    "global-general": "luong-general",
    "global-concat": "luong-concat",
    "local-m": "local-m",
    "local-p": "local-p",
}
ALL = tuple(f"{v}{tail}" for v in VARIANTS for tail in ("", "-no-feed"))
HELDOUT_SEED = 20150902
FULL = dict(_translation.FULL, max_len=30, steps=1200, heldout=1000)
QUICK = dict(_translation.QUICK, max_len=30, heldout=24)
PAPER = {
    "paper": "Luong, Pham & Manning 2015, Table 4 (WMT'14 English-German, perplexity and BLEU)",
    "paper_claim": "local-p with the general score (and input feeding) is best; dot works well for global "
    "attention; concat performs poorly; input feeding helps (Table 1) (the paper's numbers are not quoted: "
    "not verified)",
}


def variants(text: str) -> tuple:
    """--variants: "all" or comma-separated names of ALL."""
    if text == "all":
        return ALL
    names = tuple(str(text).split(","))
    wrong = [n for n in names if n not in ALL]
    if wrong or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"takes 'all' or distinct names of {', '.join(ALL)}; got {text!r}")
    return names


def _variants_flag(text: str) -> str:
    """argparse's type of --variants: the text (as config.json records it), checked."""
    variants(text)
    return text


def add_flags(parser):
    """This experiment's own flags."""
    parser.add_argument(
        "--variants", default="all", type=_variants_flag, help=f"'all' or comma-separated: {', '.join(ALL)}"
    )
    parser.add_argument("--hidden-size", type=_common.positive_int, default=None, help="every model's hidden size")


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    names = variants(args.variants)
    cfg = _common.config(FULL, QUICK, args, hidden_size=args.hidden_size)
    data_seed, order_seed = np.random.SeedSequence([args.seed, cfg["max_len"]]).generate_state(2)
    train_set = translation_task(cfg["train_size"], seed=int(data_seed), max_len=cfg["max_len"])
    heldout = translation_task(cfg["heldout"], seed=HELDOUT_SEED, max_len=cfg["max_len"], split="test")
    columns: dict = {k: [] for k in ("bleu", "exact_match", "token_accuracy", "perplexity", "parameters")}
    columns.update(train_seconds_by_variant=[], train_cpu_seconds_by_variant=[], final_loss=[])
    model = None
    for name in names:
        kind, feeding = VARIANTS[name.removesuffix("-no-feed")], not name.endswith("-no-feed")
        seed = int(np.random.SeedSequence([args.seed, ALL.index(name)]).generate_state(1)[0])
        model = _translation.build(kind, train_set, cfg, seed, input_feeding=feeding)
        result = _translation.train(model, train_set, cfg, int(order_seed), args, name)
        s = _translation.scores(model, heldout)
        for key in ("bleu", "exact_match", "token_accuracy", "perplexity"):
            columns[key].append(s[key])
        columns["parameters"].append(int(sum(p.size for p in model.parameters())))
        columns["train_seconds_by_variant"].append(result["train_seconds"])
        columns["train_cpu_seconds_by_variant"].append(result["train_cpu_seconds"])
        columns["final_loss"].append(result["final_loss"])
        print(f"{name}: BLEU {s['bleu']:.2f}, perplexity {s['perplexity']:.3f}", file=sys.stderr)
    metrics = {
        "experiment": "luong_comparison",
        "seed": args.seed,
        "quick": args.quick,
        **_translation.machine(),
        "variants": list(names),
        **columns,
        **verdict(names, columns),
        "steps": cfg["steps"],
        "batch_size": cfg["batch_size"],
        "hidden_size": cfg["hidden_size"],
        "heldout_size": len(heldout),
        "train_seconds": round(sum(columns["train_seconds_by_variant"]), 3),
        **PAPER,
    }
    if args.run is not None:
        (args.run.dir / "table.md").write_text(table(metrics), encoding="utf-8")
    print(table(metrics), file=sys.stderr)
    return _common.conclude(args, model, metrics)


def verdict(names: tuple, columns: dict) -> dict:
    """The best variant by BLEU, its margin over the runner-up, and what input
    feeding gains (BLEU with it minus without) for each variant run both ways."""
    bleu = np.asarray(columns["bleu"])
    order = np.argsort(-bleu, kind="stable")
    gains = {
        f"feeding_gain_bleu_{n}": round(float(bleu[names.index(n)] - bleu[names.index(f"{n}-no-feed")]), 4)
        for n in VARIANTS
        if n in names and f"{n}-no-feed" in names
    }
    return {
        "best": names[order[0]],
        "best_margin_bleu": round(float(bleu[order[0]] - bleu[order[1]]), 4) if len(names) > 1 else None,
        **gains,
    }


def table(m: dict) -> str:
    """The results as a Markdown table in the shape of the paper's Table 4."""
    lines = [
        "| variant | BLEU | exact match | token accuracy | perplexity | parameters |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for i, name in enumerate(m["variants"]):
        lines.append(
            f"| {name} | {m['bleu'][i]:.2f} | {m['exact_match'][i]:.3f} | {m['token_accuracy'][i]:.3f} "
            f"| {m['perplexity'][i]:.3f} | {m['parameters'][i]:,} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
