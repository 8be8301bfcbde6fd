"""Attention pooling finds the marker words that decide a sequence's class.

    python -m attnc.experiments.attention_pooling [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.MarkerTask: 20-50 tokens, 40 distractor words drawn
uniformly, and 1-3 marker words of the label's class (3 classes, 3 marker
words each) at random positions; the markers are the only evidence. Model
(MarkerClassifier): Embedding(V, 32) -> position-wise Linear(32, 32) + ReLU ->
AttentionPooling(32, 32) (Raffel & Ellis 2015; Yang et al. 2016) -> Linear(32,
3), cross-entropy. Training: fresh batches of 64, Adam 5e-3 with a short
warm-up and a cosine decay, gradients clipped to norm 1. Scored on 2,000
held-out sequences (a fixed seed): accuracy, and the marker attention mass:
the attention weight on the marker tokens, summed per sequence and averaged.
Targets (issue 8): >= 98% accuracy and >= 0.80 marker attention mass.

For a notebook: ``model, task, metrics = train_model(seed=0)`` then
``pooling_weights(model, task, sentence)`` -> (words, weights, class
probabilities).
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc import nn
from attnc._args import child_seeds
from attnc.datasets import MarkerTask

from . import _common

HELDOUT_SEED = 20261122
FULL = dict(steps=600, batch_size=64, lr=5e-3, warmup=30, final_lr=0.05, heldout=2000, embed=32, hidden=32, attn=32)
QUICK = dict(FULL, steps=150, heldout=200)


class MarkerClassifier(nn.Module):
    """Embedding -> Linear + ReLU (position-wise) -> AttentionPooling -> Linear.

    ``forward(ids, mask=None, return_weights=False)``: ids (B, T) int, mask
    (B, T) bool (True = real token; default ids != 0) -> logits (B, classes),
    or (logits, weights (B, T)). ``loss_and_grad(batch)`` -> (mean
    cross-entropy, gradients by state_dict name)."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        embed: int = 32,
        hidden: int = 32,
        attn: int = 32,
        *,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__(dtype)
        seeds = child_seeds(seed, 4)
        self.embedding = nn.Embedding(vocab_size, embed, padding_idx=0, dtype=dtype, seed=seeds[0])
        self.hidden = nn.Linear(embed, hidden, dtype=dtype, seed=seeds[1])
        self.pool = nn.AttentionPooling(hidden, attn, dtype=dtype, seed=seeds[2])
        self.out = nn.Linear(hidden, num_classes, dtype=dtype, seed=seeds[3])

    def _run(self, ids, mask):
        ids = np.asarray(ids)
        mask = ids != 0 if mask is None else mask
        x, pe = attnc.vjp(self.embedding, ids)
        y, pl = attnc.vjp(self.hidden, x)
        z, pr = attnc.vjp(nn.relu, y)
        (c, alpha), pp = attnc.vjp(self.pool, z, mask=mask)
        logits, po = attnc.vjp(self.out, c)
        return logits, alpha, (pe, pl, pr, pp, po)

    def forward(self, ids, mask=None, return_weights=False):
        logits, alpha, _ = self._run(ids, mask)
        return (logits, alpha) if return_weights else logits

    def _vjp_forward(self, ids, mask=None):
        logits, _, pbs = self._run(ids, mask)
        return logits, pbs

    def _vjp_backward(self, pbs, cotangents):
        (dlogits,) = cotangents
        pe, pl, pr, pp, po = pbs
        grads = {}
        g = po(dlogits)
        grads.update({f"out.{k}": v for k, v in g.items() if k != "input"})
        g2 = pp(g["input"], None)
        grads.update({f"pool.{k}": v for k, v in g2.items() if k != "input"})
        g3 = pr(g2["input"])
        g4 = pl(g3["input"])
        grads.update({f"hidden.{k}": v for k, v in g4.items() if k != "input"})
        grads.update({f"embedding.{k}": v for k, v in pe(g4["input"]).items()})
        return grads

    def loss_and_grad(self, batch):
        logits, pbs = self._vjp_forward(batch.ids, batch.mask)
        loss, pc = attnc.vjp(nn.cross_entropy, logits, batch.labels)
        dlogits = pc(np.ones((), self.dtype))["input"]
        return float(loss), self._vjp_backward(pbs, (dlogits,))


def evaluate(model, batch, chunk=500) -> dict:
    """accuracy and marker attention mass of model on a MarkerBatch."""
    right, mass = 0, 0.0
    for start in range(0, len(batch), chunk):
        sl = slice(start, start + chunk)
        logits, alpha = model(batch.ids[sl], batch.mask[sl], return_weights=True)
        right += int((logits.argmax(axis=1) == batch.labels[sl]).sum())
        mass += float((alpha * batch.marker_mask[sl]).sum())
    return {"accuracy": right / len(batch), "marker_attention_mass": mass / len(batch)}


def train_model(seed=0, quick=False, steps=None, disable_progress=True, dtype=np.float32):
    """Train a MarkerClassifier; returns (model, task, metrics) with metrics
    {"accuracy", "marker_attention_mass", "heldout_size", "train" (the
    training loop's summary)}. For notebooks."""
    return _train(_common.plain_args(seed, quick, steps, disable_progress), dtype)


def _train(args, dtype=np.float32):
    cfg = _common.config(FULL, QUICK, args)
    data_seed, model_seed = np.random.SeedSequence(args.seed).generate_state(2)
    task = MarkerTask()
    model = MarkerClassifier(
        task.vocab_size, task.num_classes, cfg["embed"], cfg["hidden"], cfg["attn"], dtype=dtype, seed=int(model_seed)
    )
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], cfg["warmup"], cfg["steps"], cfg["final_lr"])
    rng = np.random.default_rng(int(data_seed))

    def batches(step):
        return task.batch(cfg["batch_size"], seed=rng)

    result = _common.train(
        model,
        opt,
        model.loss_and_grad,
        batches,
        cfg["steps"],
        scheduler=sched,
        clip=1.0,
        desc="attention_pooling",
        disable_progress=args.no_progress,
        run=args.run,
        rngs={"data": rng},
    )
    heldout = task.batch(cfg["heldout"], seed=HELDOUT_SEED)
    start = time.perf_counter()
    metrics = evaluate(model, heldout)
    metrics.update(
        heldout_size=cfg["heldout"],
        train=result,
        eval_seconds=time.perf_counter() - start,
        batch_size=cfg["batch_size"],
    )
    return model, task, metrics


def pooling_weights(model, task, sentence):
    """(words, weights (T,), class probabilities (C,)) of one sentence: a
    string of the task's words, a list of words or an array of ids."""
    if isinstance(sentence, str):
        sentence = sentence.split()
    ids = np.array([task.index[w] if isinstance(w, str) else int(w) for w in sentence], np.int64)[None]
    logits, alpha = model(ids, return_weights=True)
    p = np.exp(logits[0] - logits[0].max())
    return task.decode(ids[0]), alpha[0], p / p.sum()


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    model, task, m = _train(args)
    return _common.report(
        "attention_pooling",
        args,
        model,
        m["train"],
        m["batch_size"],
        m["eval_seconds"],
        accuracy=m["accuracy"],
        marker_attention_mass=m["marker_attention_mass"],
        heldout_size=m["heldout_size"],
        num_classes=task.num_classes,
    )


if __name__ == "__main__":
    # run the imported module's main, so that a saved model's class is
    # attnc.experiments.attention_pooling.MarkerClassifier (attnc.load finds it), not __main__'s
    from attnc.experiments.attention_pooling import main as _main

    _main()
