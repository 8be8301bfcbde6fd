"""A Neural Turing Machine and an LSTM of about its size on longer sequences,
more repeats and more items than any seen in training (Graves et al. 2014,
the generalisation figures of sec. 4.1-4.3: Figures 4-6 for copy).

    python -m attnc.experiments.ntm_generalisation [--task copy|repeat_copy|recall|all]
        [--model ntm|lstm|both] [--eval-memory N] [--seed N] [--quick] [--threads N] [--steps N]

Tasks (attnc.datasets): copy trained on lengths 1-20, scored at lengths 10,
20, 30, 50, 80 and 120; repeat copy trained on lengths 1-10 and 1-10
repeats, scored at length 10 with 1, 5, 10, 15 and 20 repeats (the count is
given as repeats / 10, so above 1 beyond training); associative recall
trained on 2-6 items of 3 x 6 bits, scored with 2 to 20 items. Each point:
50 held-out sequences (the same for every --seed).

Models: the NTM of attnc/experiments/_ntm.py (LSTM controller 100, memory
128 x 20, one read and one write head; about 63,000 parameters), trained on
30,000 (copy), 40,000 (repeat copy) and 50,000 (recall) sequences, one at a
time, with RMSprop; and an LSTM baseline of about the same parameter count,
3 layers of 56 units and a linear read-out (about 66,000; Graves et al.'s
had 3 layers of 256, 1.35 million parameters, twenty times the NTM's and
over the time budget here), trained on twice the NTM's sequences in batches
of 16 with Adam 3e-3 (not tuned beyond one comparison: 3 x 56 units
learnt copy faster than 1 x 120 in 32,000 sequences). ``--eval-memory N`` (default 128, the training memory; at least
that) scores the NTM with N memory slots: the learned initial weighting puts
zero weight on the added slots. --task and --model run a part (a sweep over
seeds, tasks and models can run the parts in parallel).

Measured (seed 0, the full run: 34 minutes of training on 2 cores shared
with other jobs, load about 18; the copy task 5.4 of them): copy
reproduces the paper: the NTM's cost is 0.0 bits at lengths 10 to 80 and
4.3 bits at 120 (0.56 wrong bits of 960); the LSTM's is 34 bits at 10, 116
at 20 (it has not learnt the training range at this size) and 2,465 at 120.
Copy over seeds 0, 1, 2: the NTM's median cost 0.0 bits to length 80 and
4.3 at 120, but seed 1 had not fully converged in 30,000 sequences (27
bits at length 20, 315 at 80); the LSTM's median 116 bits at 20, 2,465 at 120.
Repeat copy and associative recall are not learnt by either model in this
budget (the NTM's recall cost is 1.5 bits with 2 items, about 18, guessing's,
from 6 on): they need the 100,000 sequences and more of ntm_repeat_copy and
ntm_recall, over the 30-minute budget here.

JSON (flat, one array per model and measure, keyed by the x axis, so that
runs of several seeds give medians element by element; ``summarise(results)``
does that): "lengths", "copy_bits_ntm", "copy_bits_lstm" (the paper's cost:
binary cross-entropy in bits summed over a sequence's output bits, mean
over sequences), "copy_wrong_bits_ntm", "copy_wrong_bits_lstm" (wrong bits
per sequence); "repeats", "repeat_copy_*"; "items", "recall_*"; per task
and model "*_parameters_*", "*_sequences_*", "*_train_seconds_*",
"*_final_loss_*"; "paper_*" the paper's claims (qualitative: read from its
figures and text). The run folder also holds copy_weightings.npz and
copy_weightings.png: the NTM's write and read weightings on a length-80
copy (the paper's Figure 6).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

import attnc
from attnc import nn
from attnc._args import child_seeds
from attnc.datasets import AssociativeRecallTask, CopyTask, RepeatCopyTask, bits_per_sequence, cost_per_sequence
from attnc.models import NTM
from attnc.models.ntm import masked_bce

from . import _common, _ntm

TASKS = ("copy", "repeat_copy", "recall")
MODELS = ("ntm", "lstm")
FULL = dict(
    steps=None,  # --steps: every training (NTM: sequences, LSTM: batches) that many steps
    copy_sequences=30000,
    repeat_copy_sequences=40000,
    recall_sequences=50000,
    lstm_data=2,  # the LSTM sees this many times the NTM's sequences
    lstm_batch=16,
    lstm_hidden=56,
    lstm_layers=3,
    lstm_lr=3e-3,
    lstm_warmup=100,
    eval_rows=50,
    lengths=[10, 20, 30, 50, 80, 120],
    repeats=[1, 5, 10, 15, 20],
    repeat_length=10,
    items=[2, 4, 6, 8, 10, 12, 15, 20],
    figure_length=80,
)
QUICK = dict(FULL, copy_sequences=24, repeat_copy_sequences=16, recall_sequences=16, lstm_warmup=1, eval_rows=3)
X_AXIS = {"copy": "lengths", "repeat_copy": "repeats", "recall": "items"}
PAPER = {
    "copy": "NTM (trained on lengths 1-20): near-perfect copies to length 50 or so, a few errors at 120 "
    "(Figure 4); LSTM: errors grow quickly beyond length 20 (Figure 5); writes and reads follow one diagonal "
    "(Figure 6). Qualitative, from the figures.",
    "repeat_copy": "NTM: copies a length-10 sequence 20 times and a length-20 one 10 times correctly but for "
    "the end marker, which it cannot place beyond the trained counts; LSTM fails at both. Qualitative.",
    "recall": "NTM (trained on 2-6 items): low cost far beyond 6 items, nearly perfect at twice the length "
    "with a feedforward controller; LSTM: cost rises fast beyond 6 items. Qualitative.",
}


def add_flags(parser):
    """This experiment's own flags."""
    parser.add_argument("--task", choices=(*TASKS, "all"), default="all", help="the task(s) to run")
    parser.add_argument("--model", choices=(*MODELS, "both"), default="both", help="the model(s) to train")
    parser.add_argument(
        "--eval-memory",
        type=_common.positive_int,
        default=_ntm.MODEL["memory_slots"],
        help="the NTM's memory slots when scored (>= the 128 it trains with)",
    )


class LSTMBaseline(nn.Module):
    """The NTM's baseline: a stacked LSTM and a linear read-out at every step.

    ``forward(inputs (B, T, I))`` → logits (B, T, O), the module's dtype;
    ``loss_and_grad(batch)`` → (loss, gradients by state_dict name), the
    loss ``attnc.models.NTM.loss_and_grad``'s (mean binary cross-entropy of
    the scored steps). state_dict: ``rnn.*`` (attnc.nn.LSTM's), ``out.weight``
    (O, H), ``out.bias`` (O).

    Example
    -------
    >>> task = CopyTask(bits=8, max_len=5)
    >>> model = LSTMBaseline(task.input_size, task.output_size, 16, 2, seed=0)
    >>> batch = task.batch(3, length=4, seed=0)
    >>> model(batch.inputs).shape, sorted(model.loss_and_grad(batch)[1])[:2]
    ((3, 9, 8), ['out.bias', 'out.weight'])
    """

    def __init__(self, input_size, output_size, hidden_size, num_layers, *, dtype=np.float32, seed=None):
        super().__init__(dtype)
        seeds = child_seeds(seed, 2)
        self.rnn = nn.LSTM(input_size, hidden_size, num_layers, dtype=dtype, seed=seeds[0])
        self.out = nn.Linear(hidden_size, output_size, dtype=dtype, seed=seeds[1])
        self.input_size, self.output_size = input_size, output_size

    def forward(self, inputs):
        return self.out(self.rnn(inputs)[0])

    def loss_and_grad(self, batch):
        """(the mean binary cross-entropy of the scored steps, gradients by state_dict name)."""
        (h, _), pb_rnn = attnc.vjp(self.rnn, batch.inputs)
        logits, pb_out = attnc.vjp(self.out, h)
        loss, dlogits = masked_bce(logits, batch)
        grads = {f"out.{k}": g for k, g in pb_out(dlogits).items()}
        grads.update({f"rnn.{k}": g for k, g in pb_rnn(grads.pop("out.input"), None).items() if k != "input"})
        return loss, grads


def make_task(name):
    """The task's training distribution (attnc.datasets)."""
    if name == "copy":
        return CopyTask(bits=8, min_len=1, max_len=20)
    if name == "repeat_copy":
        return RepeatCopyTask(bits=8, min_len=1, max_len=10, min_repeats=1, max_repeats=10)
    return AssociativeRecallTask(bits=6, item_len=3, min_items=2, max_items=6)


def heldout(name, task, cfg):
    """{x: the held-out batch scored at that point of the x axis}: the same for every --seed."""
    rows, seed = cfg["eval_rows"], _ntm.HELDOUT_SEED
    if name == "copy":
        return {n: task.batch(rows, length=n, seed=seed + n) for n in cfg["lengths"]}
    if name == "repeat_copy":
        length = cfg["repeat_length"]
        return {r: task.batch(rows, length=length, repeats=r, seed=seed + r) for r in cfg["repeats"]}
    return {n: task.batch(rows, items=n, seed=seed + n) for n in cfg["items"]}


def train_lstm(desc, args, task, steps, cfg):
    """An LSTMBaseline trained on batches of cfg["lstm_batch"] sequences
    (Adam, warm-up and cosine decay, gradient norm clipped to 1)."""
    data_seed, model_seed = np.random.SeedSequence(args.seed).generate_state(2)
    model = LSTMBaseline(
        task.input_size, task.output_size, cfg["lstm_hidden"], cfg["lstm_layers"], seed=int(model_seed)
    )
    opt, sched = _common.adam_warmup_cosine(model, cfg["lstm_lr"], cfg["lstm_warmup"], steps, 0.05)
    rng = np.random.default_rng(int(data_seed))

    def loss_and_grads(batch):
        loss, grads = model.loss_and_grad(batch)
        if not math.isfinite(loss):
            raise FloatingPointError(f"{desc}: non-finite loss")
        return loss, grads

    result = _common.train(
        model,
        opt,
        loss_and_grads,
        lambda step: task.batch(cfg["lstm_batch"], seed=rng),
        steps,
        scheduler=sched,
        desc=desc,
        disable_progress=args.no_progress,
        run=args.run,
        rngs={"data": rng},
    )
    return model, result


def resized(model, slots):
    """The NTM with `slots` memory slots (>= its own): the same parameters, the
    learned initial weighting giving the added slots zero weight."""
    if slots == model.memory_slots:
        return model
    bigger = NTM(
        model.input_size,
        model.output_size,
        **dict(_ntm.MODEL, memory_slots=slots),
        dtype=model.dtype,
    )
    state = dict(model.state_dict())
    w0 = state["weight_init"]
    # logits of -1e4 below the largest: exactly zero weight after the softmax (float64)
    pad = np.full((w0.shape[0], slots - w0.shape[1]), w0.max() - 1e4, w0.dtype)
    state["weight_init"] = np.concatenate([w0, pad], axis=1)
    bigger.load_state_dict(state)
    bigger.eval()
    return bigger


def curve(model, batches):
    """(cost in bits per sequence, wrong bits per sequence) at each x of batches."""
    cost, wrong = [], []
    for batch in batches.values():
        logits = _ntm.predict(model, batch)
        cost.append(round(cost_per_sequence(logits, batch), 4))
        wrong.append(round(bits_per_sequence(logits, batch), 4))
    return cost, wrong


def weightings_figure(model, length, folder):
    """The NTM's write and read weightings on one copy of `length` vectors
    (Graves et al.'s Figure 6): folder/copy_weightings.npz (inputs, targets,
    outputs (T, 8) and 9, write_weights and read_weights (T, N)) and
    folder/copy_weightings.png. Returns the arrays."""
    batch = make_task("copy").batch(1, length=length, seed=_ntm.HELDOUT_SEED - length)
    logits, trace = model(batch.inputs, return_trace=True)
    arrays = {
        "inputs": batch.inputs[0],
        "targets": batch.targets[0],
        "outputs": 1 / (1 + np.exp(-logits[0].astype(np.float64))),
        "write_weights": trace.write_weights[0, :, 0],
        "read_weights": trace.read_weights[0, :, 0],
    }
    if folder is not None:
        np.savez(Path(folder) / "copy_weightings.npz", **arrays)
        fig = _common.figure(figsize=(10, 8), layout="constrained")
        if fig is not None:
            draw_weightings(arrays, fig.subplots(4, 1, sharex=True))
            fig.savefig(Path(folder) / "copy_weightings.png", dpi=120)
    return arrays


def draw_weightings(arrays, axes=None):
    """Draw copy_weightings.npz's arrays as Graves et al.'s Figure 6: the
    inputs and outputs above, the write and read weightings (slots × steps)
    below, on the slots the heads used; on 4 given Axes or a new figure's.
    Returns the 4 Axes."""
    import matplotlib.pyplot as plt

    w, r = arrays["write_weights"], arrays["read_weights"]
    used = np.flatnonzero((w.max(axis=0) > 0.05) | (r.max(axis=0) > 0.05))
    lo, hi = (int(used.min()), int(used.max()) + 1) if used.size else (0, w.shape[1])
    if axes is None:
        _, axes = plt.subplots(4, 1, figsize=(10, 8), sharex=True, constrained_layout=True)
    panels = [
        ("inputs", arrays["inputs"].T),
        ("outputs", arrays["outputs"].T),
        ("write weightings", w[:, lo:hi].T),
        ("read weightings", r[:, lo:hi].T),
    ]
    for a, (title, image) in zip(axes, panels):
        extent = None if "weightings" not in title else (-0.5, image.shape[1] - 0.5, hi - 0.5, lo - 0.5)
        a.imshow(
            image,
            aspect="auto",
            cmap="gray_r" if "weightings" not in title else "viridis",
            vmin=0,
            vmax=1,
            extent=extent,
            interpolation="nearest",
        )
        a.set_title(title)
        a.set_ylabel("slot" if "weightings" in title else "channel")
    axes[-1].set_xlabel("time step")
    return axes


def run_task(name, args, cfg, models):
    """Train the task's models and score them: the task's flat metrics."""
    task = make_task(name)
    batches = heldout(name, task, cfg)
    out: dict = {X_AXIS[name]: list(batches)}
    trained = {}
    for kind in models:
        sequences = cfg[f"{name}_sequences"]
        if kind == "ntm":
            steps = cfg["steps"] or sequences
            model, result = _ntm.train_ntm(f"{name} NTM", args, task, steps)
            scored, seen = resized(model, args.eval_memory), result["steps"]
        else:
            steps = cfg["steps"] or math.ceil(cfg["lstm_data"] * sequences / cfg["lstm_batch"])
            model, result = train_lstm(f"{name} LSTM", args, task, steps, cfg)
            scored, seen = model, result["steps"] * cfg["lstm_batch"]
        start = time.perf_counter()
        points = curve(scored, batches)
        out.update(
            {
                f"{name}_bits_{kind}": points[0],
                f"{name}_wrong_bits_{kind}": points[1],
                f"{name}_parameters_{kind}": int(sum(p.size for p in model.parameters())),
                f"{name}_sequences_{kind}": seen,
                f"{name}_final_loss_{kind}": result["final_loss"],
                f"{name}_train_seconds_{kind}": result["train_seconds"],
                f"{name}_eval_seconds_{kind}": round(time.perf_counter() - start, 3),
            }
        )
        trained[kind] = (model, result)
        if name == "copy" and kind == "ntm":
            folder = args.run.dir if args.run is not None else None
            weightings_figure(resized(model, args.eval_memory), cfg["figure_length"], folder)
    out[f"paper_{name}"] = PAPER[name]
    return out, trained


def summarise(results):
    """The median, min and max over runs (several seeds) of every array of
    their metrics, element by element: {"KEY_median": [...], "KEY_min":
    [...], "KEY_max": [...]} for each list of numbers KEY that every run
    has, and the x axes as they are.

    Parameters
    ----------
    results : iterable of dicts (result.json's, or Result.metrics) with the same arrays

    Example
    -------
    >>> summarise([{"lengths": [10, 20], "copy_bits_ntm": [0.0, 1.0]},
    ...            {"lengths": [10, 20], "copy_bits_ntm": [2.0, 3.0]},
    ...            {"lengths": [10, 20], "copy_bits_ntm": [0.5, 9.0]}])["copy_bits_ntm_median"]
    [0.5, 3.0]
    """
    results = list(results)
    out: dict = {}
    for key, value in results[0].items():
        if not isinstance(value, list) or any(key not in r for r in results):
            continue
        if key in X_AXIS.values():
            out[key] = value
            continue
        stacked = np.array([r[key] for r in results], np.float64)
        for stat in ("median", "min", "max"):
            out[f"{key}_{stat}"] = getattr(np, stat)(stacked, axis=0).tolist()
    return out


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args, eval_memory=args.eval_memory)
    if args.eval_memory < _ntm.MODEL["memory_slots"]:
        raise ValueError(f"--eval-memory {args.eval_memory} is below the {_ntm.MODEL['memory_slots']} training slots")
    tasks = TASKS if args.task == "all" else (args.task,)
    models = MODELS if args.model == "both" else (args.model,)
    metrics: dict = {"tasks": args.task, "models": args.model, "cpu": _common.cpu_name()}
    trained = {}
    for name in tasks:
        out, models_of = run_task(name, args, cfg, models)
        metrics.update(out)
        trained.update({(name, kind): pair for kind, pair in models_of.items()})
    (first, (model, result)), *others = trained.items()
    for (name, kind), (other, _) in others:
        _common.save_beside(args.save, f"{name}_{kind}", other)
    train_seconds = sum(r["train_seconds"] for _, r in trained.values())
    result = dict(result, train_seconds=round(train_seconds, 3))
    return _common.report("ntm_generalisation", args, model, result, 1, 0.0, **metrics)


if __name__ == "__main__":
    # the imported module's main, so that --save records attnc.experiments.ntm_generalisation.LSTMBaseline
    import attnc.experiments.ntm_generalisation as _module

    _module.main()
