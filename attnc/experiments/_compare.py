"""Reading run folders back: the table of attnc.experiments.compare and the
loss curves of attnc.experiments.plot_losses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ._runs import is_timing


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested dicts as "a.b" keys; lists kept as they are."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def table(run_dirs: list) -> list:
    """compare()'s rows: run_dir, experiment, the settings that differ, the final metrics."""
    configs, results = [], []
    for d in run_dirs:
        config = _read(d / "config.json")
        if config is None:
            raise ValueError(f"{d} is not a run folder (no config.json)")
        flags = {k: v for k, v in config["flags"].items() if k not in ("run_dir", "resume", "no_progress", "save")}
        configs.append({**flags, **_flat(config.get("settings", {}))})
        results.append(_flat(_read(d / "result.json") or {}))
    keys = list(dict.fromkeys(k for c in configs for k in c))
    differ = [k for k in keys if len({json.dumps(c.get(k)) for c in configs}) > 1]
    rows = []
    for d, config, result in zip(run_dirs, configs, results):
        row = {"run_dir": str(d), "experiment": result.get("experiment", config.get("experiment"))}
        row.update({k: config.get(k) for k in differ})
        row.update(
            {
                k: v
                for k, v in result.items()
                if not is_timing(k.rsplit(".", 1)[-1]) and k not in row and not isinstance(v, list)
            }
        )
        rows.append(row)
    return rows


def losses(run_dir: Path) -> dict:
    """{phase: (steps, losses)} from a run's metrics.jsonl."""
    curves: dict = {}
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if "loss" in record:
                steps, values = curves.setdefault(record["phase"], ([], []))
                steps.append(record["step"])
                values.append(record["loss"])
    return curves


def plot_losses(run_dirs: list, ax=None, smooth: int = 1):
    if int(smooth) < 1:
        raise ValueError(f"smooth must be >= 1, got {smooth}")
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7, 4))
    for d in run_dirs:
        curves = losses(d)
        for phase, (steps, values) in curves.items():
            kernel = np.ones(int(smooth)) / int(smooth)
            y = np.convolve(values, kernel, mode="valid") if len(values) >= smooth else np.asarray(values)
            label = d.name if len(curves) == 1 else f"{d.name}: {phase}"
            ax.plot(steps[len(steps) - len(y) :], y, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss" + (f" (mean of {smooth} steps)" if smooth > 1 else ""))
    ax.legend(fontsize="small")
    return ax
