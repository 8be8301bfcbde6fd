"""What every experiment shares: the command line (one parser for the CLI and
``attnc.experiments.run``), threads, the training loop with its progress bar
(stderr) and resumption, and the JSON line of metrics (the last line of
stdout). The run's folder (config, metrics, checkpoints, TensorBoard events)
is _runs.py's.

    python -m attnc.experiments.NAME [--seed N] [--quick] [--threads N] [--save PATH] [--steps N]
        [--schedule-steps N] [--eval-every N] [--run-dir DIR | --resume RUN_DIR] [--no-progress] [own flags]

Steps and resumption. ``--schedule-steps N`` is the run's planned length:
what depends on the length (the learning-rate schedule's total, the training
data drawn up front) is defined by it; ``--steps K`` stops training after K
steps (without ``--schedule-steps``, K is also the plan). ``--resume RUN_DIR``
continues from the last checkpoint with the run's own settings (only
``--steps``, ``--threads``, ``--no-progress`` and ``--save`` may be given
again), up to ``--steps`` if given, else to the planned length. A resumed run
ends with the same bits (parameters, metrics.jsonl except its wall-clock
"seconds" fields, result.json except timings) as the run never interrupted
with the same plan: a killed run resumed equals the run not killed; a run of
``--steps K --schedule-steps N`` resumed with ``--steps N`` equals a run of
``--steps N``. The plan cannot grow on resumption (the schedule and the data
already seen were defined by it): ``--steps`` beyond it is refused.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import attnc

from ._runs import RUNS, Result, Run, _Loop, json_default

# the flags a resumed run may change: they do not change what is computed
RESUMABLE = {"steps", "threads", "no_progress", "save", "resume", "run_dir"}


class _Parser(argparse.ArgumentParser):
    """argparse, raising ValueError instead of exiting when used by run()."""

    raising = False
    check: Callable[[argparse.Namespace], str | None] | None = None  # the module's check_flags

    def error(self, message):
        if self.raising:
            raise ValueError(message)
        super().error(message)


def at_least(low: int):
    """An argparse type: an int >= low."""

    def convert(text) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value

    convert.__name__ = f"int >= {low}"  # what argparse's error message calls it
    return convert


positive_int = at_least(1)


def build_parser(module, raising: bool = False) -> argparse.ArgumentParser:
    """An experiment module's parser: the flags every experiment takes, then
    its own (``module.add_flags(parser)``); described by its docstring's first line."""
    parser = _Parser(prog=f"python -m {_name(module)}", description=summary(module))
    parser.raising = raising
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, initialisation and dropout")
    parser.add_argument("--quick", action="store_true", help="a seconds-long run (CI); need not reach the target")
    parser.add_argument("--threads", type=positive_int, default=None, help="attnc.set_num_threads(N)")
    parser.add_argument("--save", metavar="PATH", default=None, help="save the trained model with attnc.save")
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="stop after N training steps (and, without --schedule-steps, plan the run for N)",
    )
    parser.add_argument(
        "--schedule-steps",
        type=positive_int,
        default=None,
        help="the planned length: the LR schedule's total and the data drawn (default: --steps)",
    )
    parser.add_argument(
        "--eval-every",
        type=positive_int,
        default=None,
        help="evaluate and checkpoint every N steps (default: the experiment's, or a tenth of the run)",
    )
    parser.add_argument(
        "--run-dir",
        metavar="DIR",
        default=None,
        help=f"the run's folder (default: a new one under {RUNS}/); must be new or empty",
    )
    parser.add_argument("--resume", metavar="RUN_DIR", default=None, help="continue that run from its last checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    if hasattr(module, "add_flags"):
        module.add_flags(parser)
    parser.check = getattr(module, "check_flags", None)  # check_flags(args) -> what is wrong, or None
    return parser


def parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """Parse and check argv; with --resume, the resumed run's settings."""
    args = parser.parse_args(argv)
    check = getattr(parser, "check", None)  # build_parser's: the module's check_flags
    wrong = check(args) if check is not None else None
    if wrong:
        parser.error(wrong)
    if args.schedule_steps is not None and args.steps is not None and args.steps > args.schedule_steps:
        parser.error(f"--steps {args.steps} exceeds --schedule-steps {args.schedule_steps}")
    if args.resume is not None:
        _resumed(parser, args)
    if args.save is not None:  # refused now, not after the training run
        folder = os.path.dirname(os.path.abspath(args.save))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            parser.error(f"--save {args.save}: {folder} is not a writable directory")
    if args.resume is None and args.run_dir is not None and os.path.isdir(args.run_dir) and os.listdir(args.run_dir):
        parser.error(f"--run-dir {args.run_dir} is not empty (resume it with --resume {args.run_dir})")
    return args


def to_argv(parser: argparse.ArgumentParser, name: str, config: dict) -> list:
    """The command line of run()'s keyword arguments (a flag's dest is its
    key; True/False for switches; None: the default)."""
    actions = {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}
    argv = []
    for key, value in config.items():
        action = actions.get(key)
        if action is None:
            raise TypeError(f"{name} has no flag {key!r}; its flags: {', '.join(actions)}")
        if value is None:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{key} is a switch: True or False, got {value!r}")
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    return argv


def _resumed(parser, args) -> None:
    """Take the resumed run's settings; refuse others given again."""
    if args.run_dir is not None and os.path.abspath(args.run_dir) != os.path.abspath(args.resume):
        parser.error("--run-dir and --resume name different folders")
    try:
        stored = json.loads((Path(args.resume) / "config.json").read_text())["flags"]
    except (OSError, ValueError, KeyError) as err:
        parser.error(f"--resume {args.resume}: no run's config.json there ({err})")
    for key, value in vars(args).items():
        if key in RESUMABLE or key == "schedule_steps":
            continue
        if value != parser.get_default(key) and value != stored.get(key):
            parser.error(f"--resume: --{key.replace('_', '-')} {value} differs from the run's {stored.get(key)}")
        setattr(args, key, stored.get(key, value))
    plan = stored.get("schedule_steps") or stored.get("steps")
    if args.schedule_steps is not None and args.schedule_steps != plan:
        parser.error(f"--resume: the run's plan is {plan} steps; --schedule-steps cannot change it")
    if plan is not None and args.steps is not None and args.steps > plan:
        parser.error(
            f"--resume: --steps {args.steps} exceeds the run's planned {plan} steps "
            "(start a run with --schedule-steps to plan a longer one)"
        )
    args.schedule_steps, args.steps = plan, args.steps if args.steps is not None else plan
    args.run_dir = args.resume


def parse_args(module_name: str, argv=None) -> argparse.Namespace:
    """The run's settings (argv, or the Namespace run() parsed) for the
    experiment module of that name; threads set and its folder (args.run, a Run) opened."""
    module = sys.modules[module_name]
    if isinstance(argv, argparse.Namespace):
        args = argv
    else:
        args = parse(build_parser(module), argv)
    if args.threads is not None:
        attnc.set_num_threads(args.threads)
    args.run = Run(_name(module).rsplit(".", 1)[-1], args)
    return args


def summary(module) -> str:
    """The first sentence (paragraph) of an experiment module's docstring, on one line."""
    return " ".join(module.__doc__.strip().split("\n\n")[0].split())


def _name(module) -> str:
    """The module's import name, also when run as ``python -m`` (then __name__ is "__main__")."""
    return module.__spec__.name if getattr(module, "__spec__", None) else module.__name__


def progress(total: int, desc: str, disable: bool = False, initial: int = 0):
    """A tqdm progress bar on stderr."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        file=sys.stderr,
        disable=disable,
        dynamic_ncols=True,
        mininterval=0.5,
        leave=False,
    )


def warmup_cosine(warmup: int, total: int, final: float = 0.0):
    """LambdaLR factor: linear warm-up over `warmup` steps to 1, then a cosine
    decay to `final` at step `total`."""

    def factor(epoch: int) -> float:
        step = epoch + 1
        if step <= warmup:
            return step / warmup
        t = min(1.0, (step - warmup) / max(1, total - warmup))
        return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * t))

    return factor


def config(full: dict, quick: dict, args, **overrides) -> dict:
    """A copy of the run's configuration (``quick`` or ``full``, with the
    overrides that are not None), its "steps" the planned length
    (--schedule-steps, else --steps, else the configuration's), recorded in
    the run's config.json."""
    cfg = dict(quick if args.quick else full)
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    plan = args.schedule_steps or args.steps
    if plan is not None:
        cfg["steps"] = int(plan)
    record(args, cfg)
    return cfg


def plain_args(seed=0, quick=False, steps=None, disable_progress=True) -> argparse.Namespace:
    """The settings of a run without a folder (a notebook's train_model call)."""
    return argparse.Namespace(
        seed=seed,
        quick=quick,
        steps=steps,
        schedule_steps=None,
        eval_every=None,
        no_progress=disable_progress,
        run=None,
    )


def record(args, settings: dict) -> None:
    """Add settings to the run's config.json (when there is a run)."""
    if getattr(args, "run", None) is not None:
        args.run.record(settings)


def epoch_batches(train_set, batch_size: int, order_seed: int):
    """batches(step) -> the step's batch of train_set (``train_set.batch(indices)``):
    passes over it in a new order each (drawn from [order_seed, pass]), the
    last incomplete batch of a pass left out."""
    per_epoch = len(train_set) // batch_size
    order: dict = {}

    def batches(step):
        epoch, i = divmod(step, per_epoch)
        if epoch not in order:
            order.clear()
            order[epoch] = np.random.default_rng([order_seed, epoch]).permutation(len(train_set))
        return train_set.batch(order[epoch][i * batch_size : (i + 1) * batch_size])

    return batches


def adam_warmup_cosine(model, lr: float, warmup: int, total: int, final: float = 0.0):
    """(Adam on model's parameters at lr, a LambdaLR with warmup_cosine's
    factor): the optimiser most experiments train with."""
    opt = attnc.optim.Adam(model, lr=lr)
    return opt, attnc.optim.LambdaLR(opt, warmup_cosine(warmup, total, final))


def train(
    model,
    optimizer,
    loss_and_grads,
    batches,
    steps: int,
    *,
    scheduler=None,
    clip=1.0,
    desc="train",
    disable_progress=False,
    after_step=None,
    run: Run | None = None,
    rngs: dict | None = None,
    evaluate=None,
    eval_every: int | None = None,
) -> dict:
    """The training loop: for each step, loss, grads = loss_and_grads(batch);
    clip the global gradient norm; step the optimiser and the scheduler;
    then after_step(step) if given; every eval_every steps evaluate() -> dict
    of measures (in eval mode).

    batches(step) -> the step's batch; `steps` is the planned length. With a
    run (a Run), training stops where it says (--steps of a longer plan), each
    step's loss and lr and each evaluation go to its metrics.jsonl, and a
    checkpoint is written every eval_every steps (the run's --eval-every, else
    the given one, else a tenth of the plan) and at the end; resuming, the
    loop starts from the phase's last checkpoint. rngs: {name: Generator}, the
    generators batches() draws from (the modules' own are found).

    Returns {"steps" (trained), "final_loss" (mean of the last 5% of steps),
    "first_loss", "losses", "evaluations" ([{"step", measures...}]),
    "train_seconds", "train_cpu_seconds"} (the time of the loop, data included,
    evaluations and checkpoints not, in wall-clock and in the process's CPU
    time over every thread; a resumed run's includes the time before it, and
    its CPU time is None if its checkpoint did not record it)."""
    loop = _Loop(model, optimizer, scheduler, rngs)
    phase, stop = (run.phase(desc), run.stop(steps)) if run is not None else (None, steps)
    every = (run.args.eval_every if run is not None else None) or eval_every or max(1, steps // 10)
    if run is not None:
        assert phase is not None  # run.phase() names it
        run.restore(phase, loop, stop)
        if loop.step > stop:
            raise ValueError(f"{phase}: the run has trained {loop.step} steps already, more than --steps {stop}")
    model.train()
    start = time.perf_counter() - loop.seconds
    cpu_start = time.process_time() - (loop.cpu_seconds or 0.0)
    with progress(stop, desc, disable_progress, initial=loop.step) as bar:
        while loop.step < stop:
            _one_step(loop, loss_and_grads, batches, clip, after_step)
            loop.seconds = time.perf_counter() - start
            if loop.cpu_seconds is not None:
                loop.cpu_seconds = time.process_time() - cpu_start
            if run is not None:
                run.log(
                    {
                        "phase": phase,
                        "step": loop.step,
                        "loss": loop.losses[-1],
                        "lr": loop.lr,
                        "seconds": round(loop.seconds, 3),
                    }
                )
            # evaluations and checkpoints are not training time
            aside, cpu_aside = time.perf_counter(), time.process_time()
            if evaluate is not None and loop.step % every == 0:
                model.eval()
                measures = evaluate()
                model.train()
                loop.evaluations.append({"step": loop.step, **measures})
                if run is not None:
                    run.log({"phase": phase, "step": loop.step, **measures, "seconds": round(loop.seconds, 3)})
            if run is not None and phase is not None and (loop.step % every == 0 or loop.step == stop):
                run.checkpoint(phase, loop)
            start += time.perf_counter() - aside
            cpu_start += time.process_time() - cpu_aside
            bar.update(1)
            if loop.step % 20 == 1 or loop.step == stop:
                bar.set_postfix(loss=f"{np.mean(loop.losses[-20:]):.4f}", lr=f"{loop.lr:.2e}", refresh=False)
    model.eval()
    losses = loop.losses
    tail = max(1, stop // 20)
    return {
        "steps": stop,
        "first_loss": float(losses[0]) if losses else None,
        "final_loss": float(np.mean(losses[-tail:])) if losses else None,
        "losses": losses,
        "evaluations": loop.evaluations,
        "train_seconds": round(time.perf_counter() - start, 3),
        "train_cpu_seconds": None if loop.cpu_seconds is None else round(time.process_time() - cpu_start, 3),
    }


def _one_step(loop: _Loop, loss_and_grads, batches, clip, after_step) -> None:
    step = loop.step
    batch = batches(step)
    with attnc.grad.internal():  # its pullbacks run inside: nothing can change what they read
        loss, grads = loss_and_grads(batch)
    loss = float(loss)
    if not math.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss} at step {step}")
    if clip:
        attnc.optim.clip_grad_norm_(grads, clip, loop.model)
    loop.lr = loop.optimizer.lr  # the step's learning rate
    loop.optimizer.step(grads)
    if loop.scheduler is not None:
        loop.scheduler.step()
    loop.losses.append(loss)
    loop.step += 1
    if after_step is not None:
        after_step(step)


def report(name, args, model, result, batch_size, eval_seconds, **metrics) -> Result:
    """Save the model if asked, then emit the run's metrics with what every
    experiment reports (seed, threads, training curve ends, size, timings)."""
    return conclude(
        args,
        model,
        {
            "experiment": name,
            "seed": args.seed,
            "quick": args.quick,
            "threads": attnc.get_num_threads(),
            **metrics,
            "steps": result["steps"],
            "batch_size": batch_size,
            "first_loss": result["first_loss"],
            "final_loss": result["final_loss"],
            "parameters": int(sum(p.size for p in model.parameters())),
            "train_seconds": result["train_seconds"],
            "eval_seconds": round(eval_seconds, 3),
        },
    )


def conclude(args, model, metrics: dict) -> Result:
    """Save the model (--save), write result.json, print the metrics' JSON
    line; the run's Result."""
    save_model(args.save, model)
    run = getattr(args, "run", None)
    if run is None:
        emit(metrics)
        return Result(metrics, [], model, None)
    metrics = json.loads(json.dumps(metrics, default=json_default))  # what result.json holds, read back
    history = run.history()
    run.finish(metrics)
    emit(metrics)
    return Result(metrics, history, model, run.dir)


def emit(metrics: dict) -> None:
    """Print the metrics as one JSON object: the last line of stdout."""
    sys.stdout.flush()
    print(json.dumps(metrics), flush=True)


def save_model(path, model) -> None:
    if path and model is not None:
        attnc.save(path, model)
        print(f"saved the model to {path}", file=sys.stderr)


def save_beside(path, tag: str, model) -> None:
    """Save a run's second model next to its main one (--save PATH): as
    ROOT_TAG.npz for PATH = ROOT.npz; nothing without a path."""
    if path:
        root, ext = os.path.splitext(path)
        save_model(f"{root}_{tag}{ext or '.npz'}", model)


def figure(**kwargs):
    """A matplotlib Figure (Figure(**kwargs)) for a plot an experiment saves;
    None without matplotlib. A Figure of its own, not pyplot's: drawing it
    neither shows it nor changes the pyplot backend of the notebook or script
    that ran the experiment, and it is freed with its last reference."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure(**kwargs)


def run_figure(args, **kwargs):
    """figure(**kwargs) for a plot saved in the run's folder; None without a
    folder or without matplotlib."""
    return None if getattr(args, "run", None) is None else figure(**kwargs)


def cpu_name() -> str:
    """The CPU's model name, which experiments record beside their timings
    (/proc/cpuinfo on Linux, where platform.processor() is empty; else platform's)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
