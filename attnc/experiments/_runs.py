"""An experiment's run folder: config.json, metrics.jsonl, result.json,
checkpoints (the model, the optimiser's and schedule's state, every random
generator) and TensorBoard events; and what a run returns (Result). The
command line and the training loop that fill it are in _common."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import attnc

RUNS = "runs"  # where runs go without --run-dir (relative to the working directory)


def is_timing(key: str) -> bool:
    """Whether a metric's name is a wall-clock field (or the thread count): the
    fields a resumed run or another thread count need not reproduce."""
    return "seconds" in key or key == "threads"


@dataclass
class Result:
    """What a run returns (``attnc.experiments.run``, or an experiment's main()).

    metrics : dict, the final metrics (result.json, the last line printed)
    history : list of dict, the records of metrics.jsonl (per step: "phase",
        "step", "loss", "lr", "seconds"; at the evaluation interval the
        experiment's own measures)
    model : attnc.nn.Module, the trained model (the main one when a run trains
        several; None for dates' attention="all")
    run_dir : pathlib.Path, the run's folder (None for a run without one)

    Example
    -------
    >>> import contextlib, io, tempfile
    >>> with contextlib.redirect_stdout(io.StringIO()):
    ...     res = attnc.experiments.run("pointer_sort", quick=True, steps=2, no_progress=True,
    ...                                 run_dir=tempfile.mkdtemp() + "/run")
    >>> res.metrics["steps"], [r["step"] for r in res.history], type(res.model).__name__, res.run_dir.name
    (2, [1, 2], 'PointerNet', 'run')
    """

    metrics: dict
    history: list = field(repr=False)
    model: attnc.nn.Module | None = field(repr=False)
    run_dir: Path | None


class Run:
    """A run's folder: config.json, metrics.jsonl, result.json, checkpoints/
    (one folder per training phase and step) and TensorBoard events (events/,
    when the tensorboard package is installed)."""

    def __init__(self, name: str, args: argparse.Namespace) -> None:
        self.name, self.args = name, args
        self.settings: dict[str, Any] = {}
        self.dir = Path(args.run_dir) if args.run_dir else _new_run_dir(name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.resuming = args.resume is not None
        self._phases: list[str] = []
        metrics = self.dir / "metrics.jsonl"
        if self.resuming:  # what the interrupted run wrote after its last checkpoint goes
            with open(metrics, "a+b") as f:
                f.truncate(_checkpointed_bytes(self.dir / "checkpoints"))
        self._metrics = open(metrics, "ab")  # noqa: SIM115 (open for the run: close() closes it)
        self._events = _events_writer(self.dir / "events")
        self.write_config()

    # -- what is recorded
    def record(self, settings: dict) -> None:
        """Add the experiment's settings (its configuration dict) to config.json."""
        self.settings.update(settings)
        self.write_config()

    def write_config(self) -> None:
        flags = {k: v for k, v in vars(self.args).items() if k != "run"}
        info = attnc.show_config(mode="dicts")
        assert info is not None  # mode="dicts" returns them
        _write_json(
            self.dir / "config.json",
            {
                "experiment": self.name,
                "seed": self.args.seed,
                "flags": flags,
                "settings": self.settings,
                "threads": attnc.get_num_threads(),
                "simd_path": info["simd"]["path"],
                "versions": {
                    "attnc": info["attnc"]["version"],
                    "numpy": np.__version__,
                    "python": platform.python_version(),
                },
                "show_config": info,
                "started": datetime.datetime.now(datetime.UTC).isoformat(),
            },
        )

    def log(self, record: dict) -> None:
        """One line of metrics.jsonl (and its numbers as TensorBoard scalars)."""
        self._metrics.write((json.dumps(record) + "\n").encode())
        if self._events is not None:
            for key, value in record.items():
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                if key not in ("phase", "step", "seconds") and number:
                    self._events.add_scalar(f"{record['phase']}/{key}", value, record["step"])

    def history(self) -> list:
        self._metrics.flush()
        with open(self.dir / "metrics.jsonl", encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def finish(self, metrics: dict) -> None:
        _write_json(self.dir / "result.json", metrics)
        self._metrics.close()
        if self._events is not None:
            self._events.close()

    # -- phases, checkpoints
    def phase(self, desc: str) -> str:
        """A name for a training loop of this run, unique within it (its checkpoints' folder)."""
        base = re.sub(r"[^A-Za-z0-9_.-]+", "_", desc).strip("_") or "train"
        name = base if base not in self._phases else f"{base}_{len(self._phases)}"
        self._phases.append(name)
        return name

    def stop(self, total: int) -> int:
        """Where a training loop of `total` planned steps stops (--steps with --schedule-steps)."""
        return total if self.args.steps is None or self.args.schedule_steps is None else min(total, self.args.steps)

    def checkpoint(self, phase: str, loop: _Loop) -> None:
        """Write the loop's state in a new folder (hidden until whole), then
        point latest.json at it (for people and tools; resuming reads the folders)."""
        self._metrics.flush()
        root = self.dir / "checkpoints"
        final = root / f"{phase}-{loop.step:08d}"
        tmp = root / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        attnc.save(tmp / "model.npz", loop.model)
        state = loop.state()
        arrays = state.pop("arrays")
        np.savez(tmp / "arrays.npz", **arrays)
        _write_json(tmp / "state.json", {**state, "metrics_bytes": self._metrics.tell()})
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _write_json(
            root / "latest.json",
            {"phase": phase, "step": loop.step, "dir": final.name, "metrics_bytes": self._metrics.tell()},
        )
        for old in _checkpoints(root, phase):
            if old != final:
                shutil.rmtree(old)

    def restore(self, phase: str, loop: _Loop, stop: int) -> None:
        """Load the phase's last checkpoint into the loop, when resuming and
        there is one. A phase that goes on training (a run of several cut
        short by --steps) drops what the later phases wrote: they train
        again after it, in the order of a run never interrupted."""
        if not self.resuming:
            return
        root = self.dir / "checkpoints"
        found = _checkpoints(root, phase)
        if not found:
            return
        folder = found[-1]
        state = _read_json(folder / "state.json")
        with np.load(folder / "arrays.npz") as arrays:
            state["arrays"] = {k: arrays[k] for k in arrays.files}
        loop.model.load_state_dict(attnc.load(folder / "model.npz").state_dict())
        loop.load(state)
        if loop.step < stop:
            self._metrics.flush()
            self._metrics.truncate(state["metrics_bytes"])
            for later in root.iterdir():
                if later.is_dir() and later != folder and later.name.rsplit("-", 1)[0] not in self._phases:
                    shutil.rmtree(later)


class _Loop:
    """The state of one training loop: what a checkpoint holds and restores."""

    def __init__(self, model, optimizer, scheduler, rngs):
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        # every generator the run draws from: the data's (given) and the modules' own (dropout, sampling)
        self.rngs = dict(rngs or {})
        for i, m in enumerate(model._walk()):
            for attr, value in vars(m).items():
                if isinstance(value, np.random.Generator):
                    self.rngs[f"module{i}.{attr}"] = value
        self.step, self.losses, self.evaluations, self.seconds = 0, [], [], 0.0
        self.cpu_seconds: float | None = 0.0  # the process's CPU time in the loop, every thread
        self.lr = optimizer.lr

    def state(self) -> dict:
        opt = self.optimizer.state_dict()
        arrays, scalars = {}, {}
        for i, entry in opt["state"].items():
            for k, v in entry.items():
                if isinstance(v, np.ndarray):
                    arrays[f"{i}/{k}"] = v
                else:
                    scalars[f"{i}/{k}"] = v
        arrays["losses"] = np.array(self.losses, np.float64)  # float64 holds each loss exactly
        return {
            "step": self.step,
            "evaluations": self.evaluations,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "optimizer": {"param_groups": opt["param_groups"], "steps": opt["steps"], "scalars": scalars},
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "rngs": {k: g.bit_generator.state for k, g in self.rngs.items()},
            "arrays": arrays,
        }

    def load(self, state: dict) -> None:
        entries: dict = {}
        arrays = dict(state["arrays"])
        losses = arrays.pop("losses").tolist()
        for key, value in [*state["optimizer"]["scalars"].items(), *arrays.items()]:
            i, k = key.split("/")
            entries.setdefault(int(i), {})[k] = value
        groups = [dict(g, betas=tuple(g["betas"])) if "betas" in g else g for g in state["optimizer"]["param_groups"]]
        self.optimizer.load_state_dict({"state": entries, "param_groups": groups, "steps": state["optimizer"]["steps"]})
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if set(state["rngs"]) != set(self.rngs):
            raise ValueError(
                f"the checkpoint's generators {sorted(state['rngs'])} are not the run's {sorted(self.rngs)}"
            )
        for k, g in self.rngs.items():
            g.bit_generator.state = state["rngs"][k]
        self.step, self.losses, self.evaluations, self.seconds = (
            state["step"],
            losses,
            state["evaluations"],
            state["seconds"],
        )
        self.cpu_seconds = state.get("cpu_seconds")  # None: a checkpoint from before it was kept


def _checkpoints(root: Path, phase: str) -> list:
    """The phase's checkpoint folders, oldest first."""
    pattern = re.compile(re.escape(phase) + r"-\d{8}")
    return sorted(p for p in root.glob(f"{phase}-*") if pattern.fullmatch(p.name))


def _checkpointed_bytes(root: Path) -> int:
    """How much of metrics.jsonl the newest checkpoint covers. Every folder
    not hidden is whole (each is written hidden and renamed); latest.json,
    written after the rename, may lag one behind."""
    return max(
        (
            _read_json(p / "state.json")["metrics_bytes"]
            for p in root.glob("*-*")
            if p.is_dir() and not p.name.startswith(".")
        ),
        default=0,
    )


def _new_run_dir(name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = Path(RUNS) / (f"{name}-{stamp}" + (f"-{i}" if i else ""))
        if not path.exists():
            return path
    raise FileExistsError(f"no free run folder under {RUNS}/ for {name}-{stamp}")


def _write_json(path: Path, value) -> None:
    """Write whole or not at all (a kill between checkpoints leaves the previous file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=1, default=json_default))
    os.replace(tmp, path)


def json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def _events_writer(folder: Path):
    """TensorBoard's own writer (``tensorboard.summary.Writer``, no torch or
    TensorFlow needed) when the tensorboard package is installed, else None.
    A resumed run writes a new events file in the same folder; TensorBoard
    drops the interrupted run's points past the checkpoint (a step going back
    purges the later ones)."""
    try:
        from tensorboard.summary import Writer
    except ImportError:
        return None
    return Writer(str(folder))
