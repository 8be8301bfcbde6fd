"""Decomposable attention learns entailment, contradiction and neutrality.

    python -m attnc.experiments.entailment [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.EntailmentTask: premise / hypothesis pairs from
templates over a small world (8 colours, 8 animals, 4 relations, 8
locations, 2 sizes, 5 activities; the templates are in that module's
docstring), three balanced classes. Training pairs never use the 8 held-out
(colour, animal) combinations; the 3,000 held-out pairs (a fixed seed) use
only them. Model: attnc.models.DecomposableAttention (Parikh et al. 2016),
embeddings of 32 projected to 64, F, G, H two-layer ReLU networks of width
64. Training: fresh batches of 64, Adam 3e-3 with a short warm-up and a cosine
decay, gradients clipped to norm 1. Target (issue 8): >= 95% held-out
accuracy.

For a notebook: ``model, task, metrics = train_model(seed=0)`` then
``alignment(model, task, premise, hypothesis)`` -> (premise words,
hypothesis words, the (La, Lb) alignment matrix, class probabilities).
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc.datasets import EntailmentTask
from attnc.models import DecomposableAttention

from . import _common

HELDOUT_SEED = 20261123
FULL = dict(steps=1500, batch_size=64, lr=3e-3, warmup=50, final_lr=0.05, heldout=3000, embed=32, hidden=64,
            dropout=0.0, project=True)
QUICK = dict(FULL, steps=150, heldout=300)


def evaluate(model, batch, chunk=1000) -> dict:
    """accuracy and per-class accuracy of model on an EntailmentBatch."""
    pred = np.concatenate([
        model(batch.premise[s], batch.hypothesis[s], batch.premise_lengths[s], batch.hypothesis_lengths[s]).argmax(1)
        for s in (slice(i, i + chunk) for i in range(0, len(batch), chunk))])
    right = pred == batch.labels
    per_class = {name: float(right[batch.labels == k].mean()) for k, name in enumerate(EntailmentTask().labels)}
    return {"accuracy": float(right.mean()), "per_class_accuracy": per_class}


def train_model(seed=0, quick=False, steps=None, disable_progress=True, dtype=np.float32, **overrides):
    """Train a DecomposableAttention model; returns (model, task, metrics)
    with metrics {"accuracy", "per_class_accuracy", "heldout_size", "train"
    (the training loop's summary), ...}. For notebooks. ``overrides``
    replace entries of the configuration (FULL or QUICK: lr, dropout, ...)."""
    cfg = dict(QUICK if quick else FULL)
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise ValueError(f"unknown configuration entries {sorted(unknown)}; valid: {sorted(cfg)}")
    cfg.update(overrides)
    if steps is not None:
        cfg["steps"] = steps
    data_seed, model_seed = np.random.SeedSequence(seed).generate_state(2)
    task = EntailmentTask()
    model = DecomposableAttention(task.vocab_size, cfg["embed"], cfg["hidden"], len(task.labels),
                                  project=cfg["project"], dropout=cfg["dropout"], dtype=dtype,
                                  seed=int(model_seed))
    opt = attnc.optim.Adam(model, lr=cfg["lr"])
    sched = attnc.optim.LambdaLR(opt, _common.warmup_cosine(cfg["warmup"], cfg["steps"], cfg["final_lr"]))
    rng = np.random.default_rng(int(data_seed))

    def batches(step):
        return task.batch(cfg["batch_size"], seed=rng, split="train")

    result = _common.train(model, opt, model.loss_and_grad, batches, cfg["steps"], scheduler=sched, clip=1.0,
                           desc="entailment", disable_progress=disable_progress)
    heldout = task.batch(cfg["heldout"], seed=HELDOUT_SEED, split="test")
    start = time.perf_counter()
    metrics = evaluate(model, heldout)
    metrics.update(heldout_size=cfg["heldout"], train=result, eval_seconds=time.perf_counter() - start,
                   batch_size=cfg["batch_size"])
    return model, task, metrics


def alignment(model, task, premise: str, hypothesis: str):
    """(premise words, hypothesis words, alignment (La, Lb) = softmax over the
    hypothesis of e_ij, class probabilities {label: p}) of one pair of
    sentences written in the task's words."""
    p, h = task.encode(premise)[None], task.encode(hypothesis)[None]
    logits, att = model(p, h, return_attention=True)
    z = np.exp(logits[0] - logits[0].max())
    return premise.split(), hypothesis.split(), att[0], dict(zip(task.labels, (z / z.sum()).tolist()))


def main(argv=None):
    args = _common.parse_args(__doc__.strip().splitlines()[0], argv)
    model, task, m = train_model(args.seed, args.quick, args.steps, disable_progress=args.no_progress)
    _common.report("entailment", args, model, m["train"], m["batch_size"], m["eval_seconds"],
                   accuracy=m["accuracy"], per_class_accuracy=m["per_class_accuracy"],
                   heldout_size=m["heldout_size"], heldout_pairs="unseen (colour, animal) combinations")


if __name__ == "__main__":
    main()
