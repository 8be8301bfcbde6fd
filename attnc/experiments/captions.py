"""Show, attend and tell: a Captioner learns to describe images of shapes.

    python -m attnc.experiments.captions [--attention soft|hard | --compare [--penalties 1,...]] [--seed N]
        [--quick] [--threads N] [--save PATH]

The images (attnc.datasets.captions) hold one or two coloured shapes on a
3 × 3 grid; the captioner attends over the 9 cells' descriptor features and
writes "a red circle above a blue square". Trained on fresh draws of the
train split; scored by greedy decoding (in C) on distinct held-out images of
the test split (no image content is in both): exact match = the whole
caption and its end token right. Target (soft attention): >= 95% exact match
within 3 minutes on 2 cores. Hard attention (REINFORCE, Xu et al. eq. 12,
with the expected context for half of the images) trains for 2,000 steps
and decodes with the argmax location.

``--compare`` (Xu et al.'s soft against hard attention, with and without
the doubly stochastic penalty): four models, soft and hard attention each
with λ = 0 and with every λ of ``--penalties`` (default 1, Xu et al.'s),
trained on the same images in the same order from the same initial weights
for the same number of steps (2,000: hard attention's budget; a step costs
the same for both), scored on the held-out images every ``--eval-every``
steps (default 100) and at the end: exact match, token accuracy and how
the attention looks (``attention_measures``, teacher-forced on the
held-out captions): its mean entropy per word in nats (log 9 = 2.20 is
uniform over the 9 cells, 0 one cell), the attention accuracy (the share
of shape words whose most-weighted cell holds the object the word names),
and the doubly stochastic property: the RMS distance of each cell's
attention summed over the caption's steps (words and EOS, τ of them) from
τ / 9, the even share (0: every cell gets the same), and the penalty's own
term Σ_i (1 − Σ_t α_ti)² (mean per image). The JSON (``compare``) holds
"results" {configuration: measures}, "curves" {configuration: {"steps":
[...], measure: [...]}}, the timings, threads and CPU, and "paper" (Xu et
al.'s claims and Table 1). ``summarise(results)`` gives medians over
several seeds' runs (a sweep: ``python -m attnc.experiments sweep captions
--seeds 0,1,2 --compare``) and ``plot_compare`` draws the curves
(compare.png in the run folder). ``--save PATH`` saves the soft model
there and each other one beside it (ROOT_hard+ds1.npz for PATH = ROOT.npz).

Measured (``--compare --penalties 1,0.01``, seeds 0-2, medians; one thread
a run, 8 to 16 minutes of training per seed on 2 cores shared with other
jobs, about 2 minutes of CPU time): without the penalty soft and hard
attention both reach 100% exact match (soft from step 300, hard from 900);
the entropy of α per word is 0.31 nats for soft, 0.73 for hard (hard feeds
one sampled cell, but the distribution it samples from is wider);
attention accuracy 1.00 and 0.87. The penalty hurts: λ = 1 leaves 58%
(soft) and 16% (hard) exact match with near-uniform weights (1.76 and 2.20
nats); λ = 0.01 keeps soft at 100% (from step 900) but its attention
leaves the named object after the colour word (attention accuracy 0.00 on
shape words), and hard at 45%. Xu et al. report hard attention a little
ahead in BLEU and the penalty improving BLEU (PAPER); neither shows here.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import attnc
from attnc.datasets import captions
from attnc.datasets.captions import COLOURS, SHAPES, VOCAB
from attnc.models import Captioner

from . import _common
from ._sweep import aggregate

HELDOUT_SEED = 20240602  # the held-out images are the same for every --seed

# No doubly stochastic penalty: a caption here looks at 1 or 2 of the 9 cells,
# and λ = 1 (Xu et al.'s value, which asks every cell to get about one unit of
# attention over the caption) keeps the model from learning the relations;
# --compare measures it (λ = 1: 58% exact match after 2,000 steps; λ = 0.01:
# 100%, later, with the attention off the named objects; λ = 0: 100% from step 300).
FULL = dict(
    steps=1000,
    batch_size=64,
    lr=1e-2,
    warmup=50,
    final_lr=0.01,
    clip=5.0,
    heldout=600,
    embed_size=64,
    hidden_size=64,
    attention_size=32,
    doubly_stochastic=0.0,
)
QUICK = dict(FULL, steps=60, batch_size=32, heldout=64)
HARD = dict(reinforce=1.0, entropy=0.01, expected_context=0.5)
HARD_STEPS = 2000  # REINFORCE learns more slowly: 86-95% exact match after 1,000 steps
COMPARE = dict(FULL, steps=HARD_STEPS, eval_every=100)  # every configuration: hard attention's budget
COMPARE_QUICK = dict(QUICK, eval_every=20)
MEASURES = (
    "exact_match",
    "token_accuracy",
    "attention_entropy",
    "attention_accuracy",
    "coverage_deviation",
    "coverage_penalty",
)
SHAPE_IDS = np.array([VOCAB.id(w) for w in SHAPES])
PAPER = {
    "source": "Xu et al. 2015, Show, attend and tell (ICML), Table 1 and sec. 4",
    "table1": {  # BLEU-1..4 and METEOR, single models, as the paper reports them
        "columns": ["bleu1", "bleu2", "bleu3", "bleu4", "meteor"],
        "flickr8k": {"soft": [67, 44.8, 29.9, 19.5, 18.93], "hard": [67, 45.7, 31.4, 21.3, 20.30]},
        "flickr30k": {"soft": [66.7, 43.4, 28.8, 19.1, 18.49], "hard": [66.9, 43.9, 29.6, 19.9, 18.46]},
        "coco": {"soft": [70.7, 49.2, 34.4, 24.3, 23.90], "hard": [71.8, 50.4, 35.7, 25.0, 23.04]},
    },
    "claims": [
        "hard attention scores a little higher BLEU than soft on all three data sets (Table 1); METEOR is "
        "higher for hard on Flickr8k and for soft on Flickr30k and COCO",
        "the doubly stochastic penalty (λ Σ_i (1 − Σ_t α_ti)², sec. 4.2.1) improved the overall BLEU score and "
        "qualitatively gave richer, more descriptive captions (no ablation numbers given)",
        "hard attention looks at one location per word, soft attention spreads its weights (Figures 2-3: "
        "qualitative; the paper gives no entropy)",
    ],
}


def exact_match(model, task, batch_size=256):
    """(exact-match rate, word accuracy) of greedy captions of a CaptionsTask."""
    targets = task.targets_padded()  # words, EOS, PAD after
    width = targets.shape[1]
    correct, words_right, words = 0, 0, 0
    for start in range(0, len(task), batch_size):
        idx = np.arange(start, min(start + batch_size, len(task)))
        tokens, _ = model.generate(task.features[idx], width, bos=task.bos, eos=task.eos)
        got = np.full((len(idx), width), -1, np.int64)
        got[:, : tokens.shape[1]] = tokens
        want = targets[idx]
        valid = np.arange(width)[None, :] <= task.caption_lengths[idx][:, None]  # the words and the EOS
        right = (got == want) | ~valid
        correct += int(right.all(axis=1).sum())
        words_right += int(((got == want) & valid).sum())
        words += int(valid.sum())
    return correct / len(task), words_right / words


def named_cells(task) -> np.ndarray:
    """(n, 8) int64: for each word of each caption of a CaptionsTask, the
    cell (0-8, row-major) of the object the word names when it is a colour
    or a shape word, else -1 (the captions name the object of the smaller
    cell code first; each "a" starts the next object's name)."""
    out = np.full(task.caption_ids.shape, -1, np.int64)
    naming = set(COLOURS) | set(SHAPES)
    for i, caption in enumerate(task.captions):
        codes = task.grid[i].reshape(-1)
        cells = sorted(np.flatnonzero(codes), key=lambda cell: codes[cell])  # in the order the caption names them
        obj = -1
        for j, word in enumerate(caption.split()):
            obj += word == "a"
            if word in naming:
                out[i, j] = cells[obj]
    return out


def attention_measures(alphas, caption_ids, caption_lengths, cells) -> dict:
    """How the attention of a batch of captions looks.

    Parameters
    ----------
    alphas : (B, T, L) float, the weights before each decoder step (step t
        emits word t; step = length emits EOS), T > the longest caption
    caption_ids : (B, W) int, the words (PAD after)
    caption_lengths : (B,) int, words per caption
    cells : (B, W) int, the cell each word names, -1 for none (``named_cells``)

    Returns
    -------
    dict of floats: "attention_entropy" (the mean over words of -Σ_i α log α,
    nats), "attention_accuracy" (the share of shape words whose argmax cell
    is the named object's), "coverage_deviation" (per caption, the RMS over
    cells of Σ_t α_ti − τ/L over its τ = length + 1 steps; the mean), and
    "coverage_penalty" (per caption Σ_i (1 − Σ_t α_ti)², the doubly
    stochastic penalty without λ; the mean)

    Example
    -------
    >>> a = np.zeros((1, 3, 9)); a[0, :, 4] = 1.0       # every step on the middle cell
    >>> m = attention_measures(a, np.array([[4, 5, 9]]), np.array([3]), np.array([[-1, 4, 4]]))
    >>> m["attention_entropy"], m["attention_accuracy"], round(m["coverage_penalty"], 6)
    (0.0, 1.0, 12.0)
    """
    a = np.asarray(alphas, np.float64)
    B, T, L = a.shape
    lengths = np.asarray(caption_lengths)
    steps = np.arange(T)[None, :]
    words, counted = steps < lengths[:, None], steps <= lengths[:, None]  # the words; the words and EOS
    entropy = -(a * np.log(np.where(a > 0, a, 1.0))).sum(axis=-1)
    ids = np.asarray(caption_ids)
    W = ids.shape[1]
    shape_words = np.isin(ids, SHAPE_IDS) & (np.arange(W)[None, :] < lengths[:, None])
    picked = a[:, :W].argmax(axis=-1)
    coverage = (a * counted[:, :, None]).sum(axis=1)  # (B, L)
    even = (lengths + 1)[:, None] / L
    return {
        "attention_entropy": float(entropy[words].mean()),
        "attention_accuracy": float((picked == np.asarray(cells))[shape_words].mean()),
        "coverage_deviation": float(np.sqrt(((coverage - even) ** 2).mean(axis=1)).mean()),
        "coverage_penalty": float(((1.0 - coverage) ** 2).sum(axis=1).mean()),
    }


def scores(model, task) -> dict:
    """MEASURES of a model on a CaptionsTask: greedy captions' exact match and
    token accuracy, and attention_measures of the teacher-forced weights."""
    em, token_acc = exact_match(model, task)
    batch = task.batch(np.arange(len(task)))
    _, alphas = model(batch.features, batch.tgt_in, return_alphas=True)
    measures = attention_measures(alphas, task.caption_ids, task.caption_lengths, named_cells(task))
    return {"exact_match": em, "token_accuracy": token_acc, **measures}


def penalties(text: str) -> tuple:
    """--penalties: distinct comma-separated λ > 0 (finite)."""
    try:
        values = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        values = ()
    if not values or any(not np.isfinite(v) or v <= 0 for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"takes distinct comma-separated numbers > 0, got {text!r}")
    return values


def _penalties_flag(text: str) -> str:
    """argparse's type of --penalties: the text (as config.json records it), checked."""
    penalties(text)
    return text


def add_flags(parser):
    """This experiment's own flags."""
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--attention",
        choices=("soft", "hard"),
        default="soft",
        help="soft (deterministic) or hard (REINFORCE) attention",
    )
    kind.add_argument(
        "--compare",
        action="store_true",
        help="soft and hard attention, each without and with the doubly stochastic penalty, on one budget",
    )
    parser.add_argument(
        "--penalties",
        type=_penalties_flag,
        default=None,
        help="with --compare: the penalty's λ values besides 0 (comma-separated; default 1, Xu et al.'s)",
    )


def check_flags(args):
    """What is wrong with the flags together (None: nothing)."""
    if args.penalties is not None and not args.compare:
        return "--penalties sets the λ values of --compare: give --compare too"
    return None


def configurations(lams: tuple) -> list:
    """[(name, attention, λ)] of --compare: soft and hard, λ = 0 then each of lams."""
    return [(kind if lam == 0 else f"{kind}+ds{lam:g}", kind, lam) for kind in ("soft", "hard") for lam in (0.0, *lams)]


def compare(args):
    """--compare: the configurations trained on one budget and scored; the run's Result."""
    cfg = _common.config(COMPARE, COMPARE_QUICK, args)
    heldout, train_set, model_seed = _data(cfg, args.seed)
    configs = configurations(penalties(args.penalties or "1"))
    results, curves, models = {}, {}, {}
    for name, kind, lam in configs:
        model = models[name] = _model(train_set, cfg, kind, lam, model_seed)  # the same initial weights for all
        result = _train(model, train_set, cfg, args, name, evaluate=lambda m=model: scores(m, heldout))
        results[name] = {
            "attention": kind,
            "doubly_stochastic": lam,
            **scores(model, heldout),
            "final_loss": result["final_loss"],
            "train_seconds": result["train_seconds"],
        }
        evaluations = result["evaluations"]
        curves[name] = {"steps": [e["step"] for e in evaluations]}
        curves[name].update({k: [e[k] for e in evaluations] for k in MEASURES})
    metrics = {
        "experiment": "captions",
        "compare": True,
        "seed": args.seed,
        "quick": args.quick,
        "threads": attnc.get_num_threads(),
        "cpu": _common.cpu_name(),
        "configurations": [name for name, _, _ in configs],
        "results": results,
        "curves": curves,
        "steps": cfg["steps"],
        "batch_size": cfg["batch_size"],
        "heldout_size": len(heldout),
        "train_seconds": round(sum(r["train_seconds"] for r in results.values()), 3),
        "paper": PAPER,
    }
    print(table(metrics), file=sys.stderr)
    if args.run is not None:
        (args.run.dir / "table.md").write_text(table(metrics), encoding="utf-8")
        plot_compare(metrics, args.run.dir / "compare.png")
    first, *others = configs  # --save PATH: the first model there, the others as PATH's ROOT_NAME.npz
    for name, _, _ in others:
        _common.save_beside(args.save, name, models[name])
    return _common.conclude(args, models[first[0]], metrics)


def _data(cfg, seed):
    """(the held-out task, the training task, the model's seed) of a run's --seed."""
    data_seed, model_seed = np.random.SeedSequence(seed).generate_state(2)
    heldout = captions(cfg["heldout"], seed=HELDOUT_SEED, split="test", unique=True)
    train_set = captions(cfg["steps"] * cfg["batch_size"], seed=int(data_seed), split="train")
    return heldout, train_set, int(model_seed)


def _model(train_set, cfg, kind, lam, seed):
    return Captioner(
        train_set.feature_size,
        len(train_set.vocab),
        cfg["embed_size"],
        cfg["hidden_size"],
        cfg["attention_size"],
        attention=kind,
        doubly_stochastic=lam,
        seed=seed,
        **(HARD if kind == "hard" else {}),
    )


def _train(model, train_set, cfg, args, desc, evaluate=None):
    """Train a model on train_set's images in order (cfg's budget); _common.train's result."""
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], cfg["warmup"], cfg["steps"], cfg["final_lr"])
    bs = cfg["batch_size"]

    def batches(step):
        return train_set.batch(np.arange(step * bs, (step + 1) * bs))

    return _common.train(
        model,
        opt,
        model.loss_and_grad,
        batches,
        cfg["steps"],
        scheduler=sched,
        clip=cfg["clip"],
        desc=desc,
        disable_progress=args.no_progress,
        run=args.run,
        evaluate=evaluate,
        eval_every=cfg.get("eval_every"),
    )


def table(m: dict) -> str:
    """--compare's results (one run's, or summarise()'s medians) as a Markdown table."""
    lines = [
        "| configuration | λ | exact match | token accuracy | entropy (nats) | attention accuracy "
        "| coverage RMS | Σ(1 − Σα)² | train s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in m["configurations"]:
        r = m["results"][name]
        lines.append(
            f"| {name} | {r['doubly_stochastic']:g} | {r['exact_match']:.3f} | {r['token_accuracy']:.3f} "
            f"| {r['attention_entropy']:.3f} | {r['attention_accuracy']:.3f} | {r['coverage_deviation']:.3f} "
            f"| {r['coverage_penalty']:.2f} | {r['train_seconds']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def summarise(results) -> dict:
    """The medians over several --compare runs (seeds) of the same configurations.

    Parameters
    ----------
    results : list of dicts, the runs' result.json (or Result.metrics)

    Returns
    -------
    dict shaped as one run's metrics ("configurations", "results",
    "curves", "paper", ...) holding the medians, plus "seeds", per
    configuration "M_low" and "M_high" (the minimum and maximum over the
    runs) beside each measure M of "results", and "train_seconds_by_seed"

    Example
    -------
    >>> one = lambda seed, em: {"seed": seed, "configurations": ["soft"], "steps": 10, "train_seconds": 1.0,
    ...     "results": {"soft": {"attention": "soft", "doubly_stochastic": 0.0, "exact_match": em}},
    ...     "curves": {"soft": {"steps": [10], "exact_match": [em]}}}
    >>> s = summarise([one(0, 0.5), one(1, 0.9), one(2, 0.7)])
    >>> s["seeds"], s["results"]["soft"]["exact_match"], s["results"]["soft"]["exact_match_low"]
    ([0, 1, 2], 0.7, 0.5)
    >>> s["curves"]["soft"]["exact_match"]
    [0.7]
    """
    results = list(results)
    first = results[0]
    names = first["configurations"]
    if any(r["configurations"] != names for r in results):
        raise ValueError("the runs compare different configurations")
    out = dict(first, seeds=[r["seed"] for r in results], results={}, curves={})
    out["train_seconds_by_seed"] = [r["train_seconds"] for r in results]
    out["train_seconds"] = float(np.median(out["train_seconds_by_seed"]))
    for name in names:
        rows = [r["results"][name] for r in results]
        summary = {}
        for key, value in rows[0].items():
            if isinstance(value, (int, float)) and key not in ("doubly_stochastic",):
                stats = aggregate([row[key] for row in rows], "range")
                summary.update({key: float(stats["median"]), f"{key}_low": float(stats["low"])})
                summary[f"{key}_high"] = float(stats["high"])
            else:
                summary[key] = value
        out["results"][name] = summary
        curves = [r["curves"][name] for r in results]
        out["curves"][name] = {"steps": curves[0]["steps"]}
        for key in curves[0]:
            if key != "steps":
                stats = aggregate([c[key] for c in curves], "range")
                out["curves"][name].update({key: stats["median"].tolist(), f"{key}_low": stats["low"].tolist()})
                out["curves"][name][f"{key}_high"] = stats["high"].tolist()
    return out


def plot_compare(m: dict, path=None):
    """Held-out exact match and attention entropy over training, one line per
    configuration (with the min-max band over seeds for summarise()'s
    output); saved to path if given. Returns the matplotlib axes."""
    if path is None:  # pyplot's figure: shown in a notebook
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(14, 4), layout="constrained")
    else:  # a figure of its own, whatever pyplot's backend
        from matplotlib.figure import Figure

        fig = Figure(figsize=(14, 4), layout="constrained")
    axes = fig.subplots(1, 3)
    panels = [
        ("exact_match", "held-out exact match"),
        ("attention_entropy", "attention entropy per word (nats)"),
        ("attention_accuracy", "attention accuracy (shape words)"),
    ]
    for ax, (key, label) in zip(axes, panels):
        for name in m["configurations"]:
            c = m["curves"][name]
            line = ax.plot(c["steps"], c[key], "--" if "+ds" in name else "-", label=name)[0]
            if f"{key}_low" in c:
                ax.fill_between(c["steps"], c[f"{key}_low"], c[f"{key}_high"], color=line.get_color(), alpha=0.15)
        ax.set(xlabel="training step", ylabel=label)
    axes[1].axhline(np.log(9), color="0.5", lw=0.8, ls=":")
    axes[1].annotate(
        "uniform over the 9 cells", (0.02, np.log(9)), xycoords=("axes fraction", "data"), va="top", fontsize=8
    )
    axes[0].legend(fontsize=8)
    if path is not None:
        fig.savefig(path, dpi=110)
    return axes


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    if args.compare:
        return compare(args)
    hard = args.attention == "hard" and not args.quick
    cfg = _common.config(FULL, QUICK, args, steps=HARD_STEPS if hard else None)
    heldout, train_set, model_seed = _data(cfg, args.seed)
    extra = HARD if args.attention == "hard" else {}
    model = _model(train_set, cfg, args.attention, cfg["doubly_stochastic"], model_seed)
    result = _train(model, train_set, cfg, args, f"captions ({args.attention})")
    start = time.perf_counter()
    em, word_acc = exact_match(model, heldout)
    eval_seconds = time.perf_counter() - start
    return _common.report(
        "captions",
        args,
        model,
        result,
        cfg["batch_size"],
        eval_seconds,
        exact_match=em,
        word_accuracy=word_acc,
        attention=args.attention,
        heldout_size=len(heldout),
        train_images=len(train_set),
        doubly_stochastic=cfg["doubly_stochastic"],
        lr=cfg["lr"],
        sizes=[cfg["embed_size"], cfg["hidden_size"], cfg["attention_size"]],
        **extra,
    )


if __name__ == "__main__":
    main()
