"""Decomposable attention learns entailment, contradiction and neutrality.

    python -m attnc.experiments.entailment [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.EntailmentTask: a premise lists a scene of 2 or 3
coloured animals ("the red cat and the blue dog"), the hypothesis names 1
or 2 of them or another animal ("a dog and the blue cat"); three balanced
classes, and contradictions that swap colours between the scene's animals,
so the label depends on which colour goes with which animal, not on which
words occur. Training sentences never use the 8 held-out (colour, animal)
combinations; the 3,000 held-out pairs (a fixed seed) are scenes made only
of them. Model: attnc.models.DecomposableAttention (Parikh et al. 2016),
embeddings of 32, each token's window [x_{i-1}; x_i; x_{i+1}] projected to
64 (context=1: the local context F needs to tell "the red cat" from "the
red dog"), F, G, H two-layer ReLU networks of width 64. Training: fresh
batches of 64, Adam 1.5e-3 for 2,000 steps with a short warm-up and a cosine decay, gradients
clipped to norm 1. Target (issue 8): >= 95% held-out accuracy. Reported too:
"alignment_accuracy", the fraction of hypothesis animals and colours whose
strongest-aligned premise word (argmax_i e_ij) is the corresponding premise
word (the same animal; that animal's colour), and
"premise_alignment_accuracy", the same correspondences read in the other
direction (argmax_j of softmax_j(e_ij), the matrix ``alignment`` returns).

For a notebook: ``model, task, metrics = train_model(seed=0)`` then
``alignment(model, task, "the red cat and the blue dog", "the blue cat")``
-> (premise words, hypothesis words, the (La, Lb) alignment matrix
softmax_j(e_ij), class probabilities).
"""

from __future__ import annotations

import time

import numpy as np

from attnc.datasets import EntailmentTask
from attnc.models import DecomposableAttention

from . import _common

HELDOUT_SEED = 20261123
FULL = dict(
    steps=2000,
    batch_size=64,
    lr=1.5e-3,
    warmup=50,
    final_lr=0.05,
    heldout=3000,
    embed=32,
    hidden=64,
    dropout=0.0,
    project=True,
    context=1,
)
QUICK = dict(FULL, steps=150, heldout=300)


def evaluate(model, batch, chunk=1000) -> dict:
    """accuracy and per-class accuracy of model on an EntailmentBatch."""
    pred = np.concatenate(
        [
            model(batch.premise[s], batch.hypothesis[s], batch.premise_lengths[s], batch.hypothesis_lengths[s]).argmax(
                1
            )
            for s in (slice(i, i + chunk) for i in range(0, len(batch), chunk))
        ]
    )
    right = pred == batch.labels
    per_class = {name: float(right[batch.labels == k].mean()) for k, name in enumerate(EntailmentTask().labels)}
    return {"accuracy": float(right.mean()), "per_class_accuracy": per_class}


def alignment_accuracy(model, batch, chunk=1000) -> dict:
    """How word-to-word the learned alignments are, over the hypothesis words
    that the world compares with a premise word (batch.targets >= 0: the
    described animal's colour, animal, relation or location, repeated or
    changed). "alignment_accuracy": the fraction of those words whose
    strongest-aligned premise word (argmax_i e_ij, the largest weight of
    softmax_i) is the corresponding premise word; "premise_alignment_accuracy":
    the fraction of those corresponding premise words whose largest weight in
    softmax_j(e_ij) (the matrix ``alignment`` returns) falls on that
    hypothesis word."""
    hits = rev = total = 0
    for s in (slice(i, i + chunk) for i in range(0, len(batch), chunk)):
        al = model.align(batch.premise[s], batch.hypothesis[s], batch.premise_lengths[s], batch.hypothesis_lengths[s])
        t = batch.targets[s]
        n, j = np.nonzero(t >= 0)
        i = t[n, j]
        hits += int(np.sum(al["hypothesis_to_premise"][n, :, j].argmax(1) == i))
        rev += int(np.sum(al["premise_to_hypothesis"][n, i, :].argmax(1) == j))
        total += len(n)
    return {"alignment_accuracy": hits / max(total, 1), "premise_alignment_accuracy": rev / max(total, 1)}


def train_model(seed=0, quick=False, steps=None, disable_progress=True, dtype=np.float32, **overrides):
    """Train a DecomposableAttention model; returns (model, task, metrics)
    with metrics {"accuracy", "per_class_accuracy", "heldout_size", "train"
    (the training loop's summary), ...}. For notebooks. ``overrides``
    replace entries of the configuration (FULL or QUICK: lr, dropout, ...)."""
    unknown = set(overrides) - set(QUICK if quick else FULL)
    if unknown:
        raise ValueError(f"unknown configuration entries {sorted(unknown)}; valid: {sorted(QUICK if quick else FULL)}")
    return _train(_common.plain_args(seed, quick, steps, disable_progress), dtype, **overrides)


def _train(args, dtype=np.float32, **overrides):
    cfg = _common.config(FULL, QUICK, args, **overrides)
    data_seed, model_seed = np.random.SeedSequence(args.seed).generate_state(2)
    task = EntailmentTask()
    model = DecomposableAttention(
        task.vocab_size,
        cfg["embed"],
        cfg["hidden"],
        len(task.labels),
        project=cfg["project"],
        context=cfg["context"],
        dropout=cfg["dropout"],
        dtype=dtype,
        seed=int(model_seed),
    )
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], cfg["warmup"], cfg["steps"], cfg["final_lr"])
    rng = np.random.default_rng(int(data_seed))

    def batches(step):
        return task.batch(cfg["batch_size"], seed=rng, split="train")

    result = _common.train(
        model,
        opt,
        model.loss_and_grad,
        batches,
        cfg["steps"],
        scheduler=sched,
        clip=1.0,
        desc="entailment",
        disable_progress=args.no_progress,
        run=args.run,
        rngs={"data": rng},
    )
    heldout = task.batch(cfg["heldout"], seed=HELDOUT_SEED, split="test")
    start = time.perf_counter()
    metrics = evaluate(model, heldout)
    metrics.update(alignment_accuracy(model, heldout))
    metrics.update(
        heldout_size=cfg["heldout"],
        train=result,
        eval_seconds=time.perf_counter() - start,
        batch_size=cfg["batch_size"],
    )
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
    args = _common.parse_args(__name__, argv)
    model, task, m = _train(args)
    return _common.report(
        "entailment",
        args,
        model,
        m["train"],
        m["batch_size"],
        m["eval_seconds"],
        accuracy=m["accuracy"],
        per_class_accuracy=m["per_class_accuracy"],
        alignment_accuracy=m["alignment_accuracy"],
        premise_alignment_accuracy=m["premise_alignment_accuracy"],
        heldout_size=m["heldout_size"],
        heldout_pairs="scenes of unseen (colour, animal) combinations",
    )


if __name__ == "__main__":
    main()
