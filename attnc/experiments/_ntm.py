"""What the three NTM experiments (ntm_copy, ntm_repeat_copy, ntm_recall)
share: the model, the training recipe, the stability check and the scoring.

The recipe is pytorch-ntm's (and Graves et al.'s optimiser): one sequence
per step (batch 1), RMSprop (lr 1e-4, α 0.95, momentum 0.9), every gradient
entry clamped to ±10, the loss the mean binary cross-entropy of the scored
outputs. The model is the issue's: an LSTM controller of 100 units, a 128 ×
20 memory, one read and one write head, shifts −1, 0, +1, head parameters
clipped to ±20 and the memory initialised to the constant 1e-6 (Collier &
Beel 2018). Every loss and every gradient is checked to be finite at every
step: a NaN or an infinity stops the run with FloatingPointError.
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc.datasets import bits_per_sequence
from attnc.models import NTM

from . import _common

MODEL = dict(
    controller="lstm",
    controller_size=100,
    memory_slots=128,
    memory_width=20,
    read_heads=1,
    write_heads=1,
    shifts=3,
    memory_init="constant",
)
OPTIMISER = dict(lr=1e-4, alpha=0.95, momentum=0.9)
GRAD_CLAMP = 10.0
HELDOUT_SEED = 20241122  # the held-out sequences are the same for every --seed


CHECK_EVERY = 1000  # sequences between the convergence checks
CONVERGED = 0.1  # wrong bits per sequence on the check set


def train_ntm(name, args, task, steps, model_kw=None, check=None):
    """Train an NTM on task (batches of one sequence from task.batch) for
    `steps` sequences; returns (model, the result of _common.train).

    check: a list of held-out batches scored every CHECK_EVERY sequences;
    the result then has "sequences_to_converge", the sequences seen when its
    error first fell below CONVERGED wrong bits per sequence (None: never),
    and "checks", the [sequences, bits] history."""
    data_seed, model_seed = np.random.SeedSequence(args.seed).generate_state(2)
    model = NTM(task.input_size, task.output_size, **dict(MODEL, **(model_kw or {})), seed=int(model_seed))
    opt = attnc.optim.RMSprop(model, **OPTIMISER)
    rng = np.random.default_rng(int(data_seed))

    def batches(step):
        return task.batch(1, seed=rng)

    def loss_and_grads(batch):
        loss, grads = model.loss_and_grad(batch)
        bad = [k for k, g in grads.items() if not np.all(np.isfinite(g))]
        if bad:
            raise FloatingPointError(f"non-finite gradients of {bad}")
        attnc.optim.clip_grad_value_(grads, GRAD_CLAMP, model)
        return loss, grads

    def evaluate():
        return {"bits_per_sequence": round(score(model, check), 4)}

    result = _common.train(
        model,
        opt,
        loss_and_grads,
        batches,
        steps,
        clip=0,
        desc=name,
        disable_progress=args.no_progress,
        run=args.run,
        rngs={"data": rng},
        evaluate=evaluate if check is not None else None,
        eval_every=CHECK_EVERY,
    )
    if check is not None:
        history = [[e["step"], e["bits_per_sequence"]] for e in result["evaluations"]]
        result["checks"] = history
        result["sequences_to_converge"] = next((n for n, bits in history if bits < CONVERGED), None)
    return model, result


def score(model, batches, chunk=50):
    """Mean wrong bits per sequence over held-out batches."""
    total = sum(bits_per_sequence(predict(model, b, chunk), b) * len(b) for b in batches)
    return total / sum(len(b) for b in batches)


def predict(model, batch, chunk=50):
    """model's logits of a batch, run in chunks of rows (every logit checked finite)."""
    parts = []
    for start in range(0, len(batch), chunk):
        logits = model(batch.inputs[start : start + chunk])
        if not np.all(np.isfinite(logits)):
            raise FloatingPointError("non-finite logits on held-out data")
        parts.append(logits)
    return np.concatenate(parts)


def finish(name, args, model, result, metrics_fn, **extra):
    """Score with metrics_fn(model) -> dict, then report the run."""
    start = time.perf_counter()
    metrics = metrics_fn(model)
    if "checks" in result:
        extra.update(sequences_to_converge=result["sequences_to_converge"], checks=result["checks"])
    return _common.report(
        name,
        args,
        model,
        result,
        1,
        time.perf_counter() - start,
        **metrics,
        sequences_seen=result["steps"],
        finite=True,
        **extra,
    )
