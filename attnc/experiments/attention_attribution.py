"""Attention rollout and flow (Abnar & Zuidema 2020) against raw attention, on what a trained GPT's outputs use.

    python -m attnc.experiments.attention_attribution [--seed N] [--quick] [--threads N] [--train]

The model is gpt_sort's (attnc.pretrained("gpt_sort"): 3 layers, 3 heads,
sorting 6 digits of {0, 1, 2}; with --train, a fresh one trained by
gpt_sort's recipe). On held-out sequences (the test split, never trained on),
for each output position (each digit of the sorted half) and each earlier
position q, the input-ablation importance of q is the drop in the
probability of the right next digit when q's token embedding is removed
(its position embedding kept). Over the positions an output sees, the
Spearman correlation of that importance with (a) the last layer's raw
attention (mean over heads), (b) attention rollout, (c) attention flow and
(d) gradient-weighted relevance (Chefer et al. 2021), and of each layer's raw
attention ("raw_attention_layer1", ...: the paper reports raw attention per
layer) is taken per (sequence, output position); the metrics are their
medians ("spearman"), next to the
paper's Table 1 numbers for input ablation on subject-verb agreement
("paper_spearman"), and how often each method's strongest input digit holds
the output's value, the output's true source ("source_accuracy").
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc import attribution
from attnc.datasets import sort_task

from . import _common

FULL = dict(examples=500, batch_size=100)
QUICK = dict(FULL, examples=12, batch_size=6)
# Abnar & Zuidema 2020, Table 1 (subject-verb agreement, Spearman's rho with
# input-ablation importance), as quoted in attnc's issue 29: raw attention
# 0.12-0.29 over the layers, rollout and flow about 0.7.
PAPER = {"raw_attention": "0.12-0.29", "rollout": "~0.7", "flow": "~0.7"}


def add_flags(parser) -> None:
    parser.add_argument(
        "--train", action="store_true", help="train a fresh GPT by gpt_sort's recipe instead of loading its checkpoint"
    )


def spearman(a, b) -> float:
    """Spearman's rank correlation of two 1-d arrays (ties get their average
    rank, as scipy.stats.spearmanr); nan when either is constant."""
    ra, rb = _ranks(np.asarray(a, np.float64)), _ranks(np.asarray(b, np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")


def _ranks(x):
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):  # ties: the mean of their ranks
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _logits(model, idx, ablate):
    """The GPT's logits for idx (B, T), the token embedding of (row, position)
    pairs in `ablate` removed (their position embedding kept)."""
    T = idx.shape[1]
    x = model.wte.weight[idx] + model.wpe.weight[:T]
    rows, cols = ablate
    x[rows, cols] = model.wpe.weight[cols]
    mask = attnc.nn.Transformer.generate_square_subsequent_mask(T, model.dtype)
    h = model.encoder(x, mask=mask, is_causal=True)
    return model.lm_head(model.ln_f(h))


def _probs(logits, targets):
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    return np.take_along_axis(p, targets[..., None], -1)[..., 0]


def ablation_importance(model, idx, targets):
    """(B, T, T): [b, t, q] = p(target t) - p(target t | q's token removed),
    for q <= t (0 above the diagonal: a causal model's later tokens)."""
    B, T = idx.shape
    base = _probs(_logits(model, idx, ([], [])), targets)
    rep = np.repeat(idx, T, axis=0)  # row b T + q: sequence b without token q
    ablated = _probs(_logits(model, rep, (np.arange(B * T), np.tile(np.arange(T), B))), np.repeat(targets, T, 0))
    imp = base[:, :, None] - ablated.reshape(B, T, T).transpose(0, 2, 1)
    return np.tril(imp)


def attributions(model, idx, targets, outputs):
    """{method: (B, T, T)}: row t is output position t's attribution over
    the positions; relevance's rows are filled at the output positions."""
    logits, ws = model(idx, need_weights=True)
    out = {
        "raw_attention": ws[-1].mean(axis=1),
        "rollout": attribution.rollout(ws),
        "flow": attribution.flow(ws),
        "relevance": np.zeros_like(ws[0][:, 0]),
    }
    out.update({f"raw_attention_layer{l}": w.mean(axis=1) for l, w in enumerate(ws, 1)})  # the paper's per layer
    for t in outputs:
        cot = np.zeros_like(logits)
        cot[np.arange(len(idx)), t, targets[:, t]] = 1
        ws_t, gs = attribution.attention_gradients(model, idx, cot)
        out["relevance"][:, t] = attribution.relevance(ws_t, gs)[:, t]
    return out


def evaluate(model, task, batch_size):
    """Per method: every (sequence, output position)'s Spearman correlation
    and whether its strongest input digit is a true source."""
    L = task.length
    outputs = range(L - 1, 2 * L - 1)  # positions predicting the sorted digits
    rho: dict = {}
    hits: dict = {}
    for start in range(0, len(task), batch_size):
        idx = task.inputs[start : start + batch_size]
        targets = np.maximum(task.targets[start : start + batch_size], 0)  # -100 (no target) at the unsorted half
        imp = ablation_importance(model, idx, targets)
        att = attributions(model, idx, targets, outputs)
        for b in range(len(idx)):
            for t in outputs:
                for m, a in att.items():
                    rho.setdefault(m, []).append(spearman(imp[b, t, : t + 1], a[b, t, : t + 1]))
                    strongest = int(np.argmax(a[b, t, :L]))  # among the unsorted input digits
                    hits.setdefault(m, []).append(idx[b, strongest] == targets[b, t])
    return rho, hits


def _model(args):
    """The checkpoint, or (--train) a GPT trained by gpt_sort in a run folder
    inside this run's, and that run's metrics."""
    if not args.train:
        return attnc.pretrained("gpt_sort"), None
    from . import gpt_sort

    argv = ["--seed", str(args.seed), "--run-dir", str(args.run.dir / "gpt_sort")]
    argv += ["--quick"] * args.quick + ["--no-progress"] * args.no_progress
    result = gpt_sort.main(argv)
    return result.model.eval(), result.metrics


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    model, trained = _model(args)
    model = model.to(np.float64)  # a confident model's probability drops are small: measured in float64
    task = sort_task(
        cfg["examples"], 6, 3, seed=int(np.random.SeedSequence(args.seed).generate_state(1)[0]), split="test"
    )
    start = time.perf_counter()
    rho, hits = evaluate(model, task, cfg["batch_size"])
    seconds = time.perf_counter() - start
    finite = {m: np.array([r for r in rho[m] if np.isfinite(r)]) for m in rho}
    metrics = {
        "experiment": "attention_attribution",
        "seed": args.seed,
        "quick": args.quick,
        "threads": attnc.get_num_threads(),
        "model": "trained (gpt_sort's recipe)" if trained else "attnc.pretrained('gpt_sort')",
        "heldout_size": len(task),
        "pairs": len(rho["rollout"]),
        "spearman": {m: round(float(np.median(finite[m])), 4) for m in rho},
        "spearman_mean": {m: round(float(finite[m].mean()), 4) for m in rho},
        "undefined_pairs": {m: int(len(rho[m]) - len(finite[m])) for m in rho},
        "source_accuracy": {m: round(float(np.mean(hits[m])), 4) for m in rho},
        "paper_spearman": PAPER,
        "rollout_and_flow_beat_raw": bool(
            min(np.median(finite["rollout"]), np.median(finite["flow"])) > np.median(finite["raw_attention"])
        ),
        "train_metrics": trained,
        "eval_seconds": round(seconds, 3),
    }
    return _common.conclude(args, model, metrics)


if __name__ == "__main__":
    main()
