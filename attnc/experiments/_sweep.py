"""Sweeps: the runs of an experiment over seeds and a grid of its options, in
parallel processes on this machine or on a Dask cluster, each run in its own
folder; the table of their results, and medians and spreads over seeds.

    python -m attnc.experiments sweep NAME [--seeds 0,1,2] [--grid KEY=V1,V2 ...] [--root DIR]
        [--workers N] [--threads N] [--scheduler ADDRESS] [--spread iqr|range] [the experiment's flags]

A sweep's folder (``root``) holds one run folder per run, named by its grid
point and seed (``n=5,seed=0``). A run whose folder holds result.json is
finished: a sweep run again skips it and reads its result; a folder without
result.json (a run killed or failed) is resumed from its last checkpoint
(see attnc.experiments._common: the resumed run ends with the bits of the
run never interrupted). Every run is the run ``attnc.experiments.run`` makes
with the same flags: its bits (parameters, metrics.jsonl and result.json but
their wall-clock fields) do not depend on where it ran, nor on its thread count.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import itertools
import json
import multiprocessing
import numbers
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _common
from ._compare import _flat
from ._runs import RUNS

# the flags a sweep sets itself for every run, and the argument that sets each
OWN = {
    "seed": "seeds",
    "run_dir": "root",
    "resume": "root (a sweep resumes its unfinished runs)",
    "save": "root (each run's checkpoints hold its model)",
    "no_progress": "progress",
    "threads": "threads",
}
# the flags two runs may differ in and still be the same run (what --resume may change, but --steps)
UNCOMPARED = (_common.RESUMABLE - {"steps"}) | {"run"}
SPREADS = ("iqr", "range")


@dataclass(frozen=True)
class _Task:
    """One run of a sweep: its grid point (the options' parsed values), seed,
    flags (run()'s keyword arguments, without its folder) and folder."""

    point: tuple
    seed: int
    flags: tuple
    run_dir: Path
    state: str  # "new", "resume" (a folder without result.json) or "done"

    def where(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in (*self.point, ("seed", self.seed)))


class SweepError(RuntimeError):
    """Runs of a sweep failed; the others finished (their folders are kept).

    Attributes: ``table`` (SweepTable, the finished runs' rows), ``failures``
    (list of (options: dict with "seed", exception), one per failed run, in the
    sweep's order). Running the sweep again skips the finished runs and
    resumes the failed ones from their last checkpoint.

    Parameters
    ----------
    message : str
    table : SweepTable, the finished runs
    failures : list of (dict, BaseException)

    Example
    -------
    >>> from attnc.experiments import SweepError, SweepTable
    >>> err = SweepError("1 of the 2 runs failed", SweepTable([{"seed": 0, "loss": 0.5}], []),
    ...                  [({"seed": 1}, FloatingPointError("the loss is nan at step 3"))])
    >>> len(err.table), [(options["seed"], str(e)) for options, e in err.failures]
    (1, [(1, 'the loss is nan at step 3')])
    """

    def __init__(self, message: str, table: SweepTable, failures: list) -> None:
        super().__init__(message)
        self.table, self.failures = table, failures


class SweepTable:
    """The table of a sweep's results: one row (dict) per run, or per grid
    point for ``summary()``.

    A run's row: its grid options, "seed", every metric of its result.json
    (nested dicts flattened as "a.b"; curves kept as lists) and "run_dir".
    ``pandas.DataFrame(table.rows)`` makes a DataFrame of it.

    Parameters
    ----------
    rows : list of dict, the rows
    options : list of str, the grid's options (the columns that name a grid point)

    Methods
    -------
    summary(metrics=None, spread="iqr") : per grid point, scalar metrics' median, low and high over the seeds
    curve(metric, spread="iqr") : per grid point, an array-valued metric's elementwise median, low, high
    to_csv(path=None) : the rows as CSV text (lists as JSON); written to path if given
    to_markdown(columns=None) : the rows as a Markdown table

    Example
    -------
    >>> from attnc.experiments import SweepTable
    >>> table = SweepTable(
    ...     [{"n": 5, "seed": 0, "acc": 0.5, "curve": [1, 2]}, {"n": 5, "seed": 1, "acc": 0.7, "curve": [3, 6]},
    ...      {"n": 5, "seed": 2, "acc": 0.9, "curve": [2, 4]}], options=["n"])
    >>> table.summary(["acc"], spread="range").rows
    [{'n': 5, 'runs': 3, 'acc_median': 0.7, 'acc_low': 0.5, 'acc_high': 0.9}]
    >>> [c["median"].tolist() for c in table.curve("curve")]
    [[2.0, 4.0]]
    >>> print(table.to_markdown(["n", "seed", "acc"]))
    | n | seed | acc |
    |---|---|---|
    | 5 | 0 | 0.5 |
    | 5 | 1 | 0.7 |
    | 5 | 2 | 0.9 |
    """

    def __init__(self, rows: list, options: Sequence[str]) -> None:
        self.rows, self.options = list(rows), list(options)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"SweepTable({len(self.rows)} rows, options {self.options})"

    def columns(self) -> list:
        """Every key of the rows, in the order they first appear."""
        return list(dict.fromkeys(k for row in self.rows for k in row))

    def groups(self) -> list:
        """[(grid point dict, its rows)], in the order the points first appear."""
        out: dict = {}
        for row in self.rows:
            point = tuple((k, row.get(k)) for k in self.options)
            out.setdefault(json.dumps(point, default=str), (dict(point), []))[1].append(row)
        return list(out.values())

    def summary(self, metrics: Sequence[str] | None = None, spread: str = "iqr") -> SweepTable:
        """Per grid point: "runs" (how many) and, for each metric, its median
        over them ("M_median") and spread ("M_low", "M_high": the 25th and 75th
        percentiles for spread="iqr", the minimum and maximum for "range"; see
        aggregate()). metrics: the scalar metrics to summarise (default: every
        number that is not the same in every row); a point whose runs lack one has none."""
        if metrics is None:
            metrics = [k for k in self.columns() if k not in self.options and k != "seed" and self._varies(k)]
        rows = []
        for point, group in self.groups():
            row = {**point, "runs": len(group)}
            for key in metrics:
                values = [r.get(key) for r in group]
                if not all(_is_number(v) for v in values):
                    continue
                stats = aggregate(values, spread)
                row.update({f"{key}_{stat}": float(value) for stat, value in stats.items()})
            rows.append(row)
        return SweepTable(rows, self.options)

    def _varies(self, key: str) -> bool:
        """Whether the rows having the key hold numbers there, not all the same (when there are two or more)."""
        values = [row[key] for row in self.rows if key in row]
        return all(_is_number(v) for v in values) and (len(self.rows) < 2 or len(set(values)) > 1)

    def curve(self, metric: str, spread: str = "iqr") -> list:
        """Per grid point: {options..., "runs", "median", "low", "high"}, the
        array-valued metric (a curve: one list per run, of one length)
        aggregated elementwise over the point's runs (float64 arrays; see aggregate())."""
        out = []
        for point, group in self.groups():
            missing = [r.get("seed") for r in group if metric not in r]
            if missing:
                raise ValueError(f"metric {metric!r}: the runs of {point} with seeds {missing} do not have it")
            try:
                stats = aggregate([r[metric] for r in group], spread)
            except ValueError as err:
                raise ValueError(f"metric {metric!r} at {point}: {err}") from None
            out.append({**point, "runs": len(group), **stats})
        return out

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """The rows as CSV (a header of every column; lists written as JSON); also written to path if given."""
        text = io.StringIO()
        writer = csv.DictWriter(text, self.columns(), lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
        if path is not None:
            Path(path).write_text(text.getvalue())
        return text.getvalue()

    def to_markdown(self, columns: Sequence[str] | None = None) -> str:
        """The rows as a Markdown table of the given columns (default: all);
        floats to 4 significant digits, lists as "[N values]"."""
        columns = self.columns() if columns is None else list(columns)
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_cell(row.get(k)) for k in columns) + " |" for row in self.rows]
        return "\n".join(lines)


def aggregate(values: Iterable[Any], spread: str = "iqr") -> dict:
    """The median and spread over runs of a metric, elementwise.

    Parameters
    ----------
    values : one value per run: numbers, or array-likes of one shape (curves)
    spread : "iqr" (default: low, high = the 25th and 75th percentiles, linearly
        interpolated as numpy.percentile does) or "range" (the minimum and maximum)

    Returns
    -------
    {"median", "low", "high"}: float64 arrays of the values' shape (0-d for numbers)

    Raises
    ------
    ValueError for no values, values of different shapes or not numbers, or an unknown spread.

    Example
    -------
    >>> stats = attnc.experiments.aggregate([[0.0, 1.0], [0.0, 3.0], [1.0, 2.0]], spread="range")
    >>> {k: v.tolist() for k, v in stats.items()}
    {'median': [0.0, 2.0], 'low': [0.0, 1.0], 'high': [1.0, 3.0]}
    """
    if spread not in SPREADS:
        raise ValueError(f"spread must be one of {SPREADS}, got {spread!r}")
    runs = [np.asarray(v) for v in values]
    if not runs:
        raise ValueError("no values to aggregate")
    shapes = {r.shape for r in runs}
    if len(shapes) > 1:
        raise ValueError(f"the runs' values have different shapes {sorted(shapes)}")
    if not all(r.dtype.kind in "biuf" for r in runs):
        raise ValueError(f"the values are not numbers (dtypes {sorted({str(r.dtype) for r in runs})})")
    stack = np.stack(runs).astype(np.float64)
    if spread == "iqr":
        low, high = np.percentile(stack, [25, 75], axis=0)
    else:
        low, high = stack.min(axis=0), stack.max(axis=0)
    return {"median": np.median(stack, axis=0), "low": np.asarray(low), "high": np.asarray(high)}


def sweep(
    name: str,
    seeds: Iterable[int] = (0, 1, 2),
    grid: Mapping[str, Iterable[Any]] | None = None,
    *,
    root: str | os.PathLike | None = None,
    threads: int = 1,
    workers: int | None = None,
    client: Any = None,
    progress: bool = True,
    **config: Any,
) -> SweepTable:
    """Run an experiment for every seed and every combination of the grid's
    option values, in parallel, each run in its own folder; the table of their results.

    Each run is ``attnc.experiments.run(name, seed=SEED, **config,
    **grid_point, threads=threads)`` in a process of its own (processes, not
    threads: each run sets its process's thread count), writing its folder
    ROOT/OPTION=VALUE,...,seed=SEED. On this machine: ``workers`` processes
    (started afresh, "spawn": a script calling sweep needs ``if __name__ ==
    "__main__":``). With ``client`` (a dask.distributed Client, ``pip install
    attnc[sweep]``): Dask's scheduler places the runs on the cluster's workers,
    which need attnc, one thread each (``threads_per_worker=1``, ``dask worker
    --nthreads 1``) and ``root`` on a file system they all see.

    Every option is checked before any run starts. Resuming: a run whose
    folder holds result.json is skipped (its result read back); a folder
    without it is resumed from its last checkpoint. A folder written with
    other flags is refused (use another root).

    Parameters
    ----------
    name : str, one of attnc.experiments.EXPERIMENTS
    seeds : iterable of int >= 0, default (0, 1, 2); distinct, at least one
    grid : dict {option: list of values}, optional: the experiment's flags
        (as run() takes them, e.g. {"n": [5, 10]}) and the values to sweep
    root : str or Path, the sweep's folder (default runs/sweep-NAME: the same call resumes it)
    threads : int >= 1, default 1: attnc's threads in each run
    workers : int >= 1, optional: how many runs at once on this machine
        (default: the cores this process may use // threads); not with client
    client : dask.distributed.Client, optional: run on its cluster instead
    progress : bool, default True: a progress bar over the runs (stderr)
    **config : the flags every run takes (e.g. quick=True, steps=100)

    Returns
    -------
    SweepTable: ``.rows`` one dict per run (grid options, "seed", the
    metrics of result.json, "run_dir"), in grid order then seed order;
    ``.summary()`` medians and spreads over seeds per grid point,
    ``.curve(metric)`` the same elementwise for curves, ``.to_csv()``, ``.to_markdown()``

    Raises
    ------
    ValueError: an unknown experiment, no seeds, a bad seed, grid option or
    value, a flag the sweep sets itself (seed, run_dir, resume, save,
    no_progress, threads), a folder of another run; TypeError: an option
    that is not one of the experiment's flags; SweepError: runs failed
    (``.table`` holds the others', ``.failures`` each failed run's options and exception)

    Example
    -------
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> table = attnc.experiments.sweep("pointer_sort", seeds=[0, 1], grid={"n": [4]}, root=root,
    ...                                 quick=True, steps=2, progress=False)
    >>> [(row["n"], row["seed"], row["steps"], os.path.basename(row["run_dir"])) for row in table.rows]
    [(4, 0, 2, 'n=4,seed=0'), (4, 1, 2, 'n=4,seed=1')]
    >>> table.summary().rows[0]["runs"], "exact_match_median" in table.summary().rows[0]
    (2, True)
    >>> from distributed import Client, LocalCluster    # doctest: +SKIP
    >>> client = Client(LocalCluster(n_workers=2, threads_per_worker=1))   # doctest: +SKIP
    >>> table = attnc.experiments.sweep("ntm_copy", seeds=range(10), root="runs/ntm", client=client)  # doctest: +SKIP
    """
    tasks = plan(name, seeds, grid, config, Path(root) if root is not None else Path(RUNS) / f"sweep-{name}")
    options = list(grid or {})
    todo = [t for t in tasks if t.state != "done"]
    if client is not None:
        if workers is not None:
            raise ValueError("workers is for runs on this machine; with a client, its cluster's workers run them")
        runner = _on_dask(client, name, todo, _checked_threads(threads))
    else:
        runner = _in_processes(name, todo, _checked_threads(threads), _workers(workers, threads, len(todo)))
    results = {t: _read_result(t.run_dir) for t in tasks if t.state == "done"}
    failures = []
    with _common.progress(len(tasks), f"sweep {name}", not progress, initial=len(results)) as bar:
        for task, outcome in runner:
            if isinstance(outcome, BaseException):
                failures.append((task, outcome))
            else:
                results[task] = outcome
            bar.update(1)
    table = SweepTable([_row(t, results[t]) for t in tasks if t in results], options)
    if failures:
        failures.sort(key=lambda f: tasks.index(f[0]))
        lines = [f"  {t.where()}: {type(e).__name__}: {e}" for t, e in failures]
        raise SweepError(
            f"{len(failures)} of the {len(tasks)} runs of {name} failed (the others' rows are in .table;"
            " running the sweep again resumes the failed ones):\n" + "\n".join(lines),
            table,
            [({**dict(t.point), "seed": t.seed}, e) for t, e in failures],
        )
    return table


def plan(name: str, seeds, grid, config: dict, root: Path) -> list:
    """The sweep's runs (_Task), every option checked and every existing folder read; nothing run."""
    from . import _module

    parser = _common.build_parser(_module(name), raising=True)
    flags = {a.dest for a in parser._actions if a.option_strings and a.dest != "help"}
    seeds = _checked_seeds(seeds)
    grid = _checked_grid(grid, flags, name)
    for key in config:
        _check_option(key, flags, name, "")
        if key in grid:
            raise ValueError(f"{key!r} is both a grid option and a flag of every run")
    root = root.absolute()
    tasks: list[_Task] = []
    folders: dict[Path, tuple] = {}
    for values in itertools.product(*grid.values()):
        for seed in seeds:
            given = {**config, **dict(zip(grid, values))}
            args = _common.parse(parser, _common.to_argv(parser, name, {**given, "seed": seed}))
            point = tuple((k, getattr(args, k)) for k in grid)
            folder = root / ",".join(f"{k}={_label(v)}" for k, v in (*point, ("seed", seed)))
            if folder in folders:
                raise ValueError(f"grid points {folders[folder]} and {point} share the folder name {folder.name}")
            folders[folder] = point
            state = _state(folder, _comparable(vars(args)))
            tasks.append(_Task(point, seed, tuple(given.items()), folder, state))
    return tasks


def _checked_seeds(seeds) -> list:
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds is empty: a sweep needs at least one seed")
    for s in seeds:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool) or s < 0:
            raise ValueError(f"seeds must be ints >= 0, got {s!r}")
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"seeds has repeats: {seeds}")
    return [int(s) for s in seeds]


def _checked_grid(grid, flags: set, name: str) -> dict:
    if grid is None:
        return {}
    if not isinstance(grid, Mapping):
        raise ValueError(f"grid must be a dict {{option: list of values}}, got {type(grid).__name__}")
    out = {}
    for key, values in grid.items():
        _check_option(key, flags, name, "grid option ")
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise ValueError(f"grid option {key!r}: a list of values, got {values!r}")
        out[key] = list(values)
        if not out[key]:
            raise ValueError(f"grid option {key!r} has no values")
    return out


def _check_option(key, flags: set, name: str, what: str) -> None:
    if key in OWN:
        raise ValueError(f"{what}{key!r} is set by the sweep itself (its argument {OWN[key]})")
    if key not in flags:
        raise TypeError(f"{what}{key!r} is not a flag of {name}; its flags: {', '.join(sorted(flags - set(OWN)))}")


def _checked_threads(threads) -> int:
    if not isinstance(threads, numbers.Integral) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")
    return int(threads)


def _workers(workers, threads: int, runs: int) -> int:
    if workers is None:
        return max(1, min(runs, len(os.sched_getaffinity(0)) // threads))
    if not isinstance(workers, numbers.Integral) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    return int(workers)


def _label(value) -> str:
    """A value as it appears in a folder's name."""
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", str(value))


def _comparable(flags: dict) -> dict:
    """The flags that make a run what it is: not those a resumed run may
    change, and --steps/--schedule-steps as (where it stops, its plan) (a
    resumed run records its plan in both)."""
    out = {k: v for k, v in flags.items() if k not in UNCOMPARED}
    plan = out.pop("schedule_steps") or out["steps"]
    out["steps"] = (out["steps"] or plan, plan)
    return out


def _state(folder: Path, flags: dict) -> str:
    """ "new", "resume" or "done" for a run folder; refused if it holds another run."""
    if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
        return "new"
    try:
        stored = json.loads((folder / "config.json").read_text())["flags"]
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{folder} is not empty and holds no run's config.json ({err}); move it away") from None
    stored = _comparable({**flags, **stored})
    differ = [f"{k}: {stored[k]!r} there, {flags[k]!r} here" for k in flags if stored[k] != flags[k]]
    if differ:
        raise ValueError(f"{folder} holds a run with other flags ({'; '.join(differ)}): give the sweep another root")
    return "done" if (folder / "result.json").exists() else "resume"


def _read_result(folder: Path) -> dict:
    return json.loads((folder / "result.json").read_text())


def _row(task: _Task, metrics: dict) -> dict:
    row = {**dict(task.point), "seed": task.seed}
    row.update({k: v for k, v in _flat(metrics).items() if k not in row})
    row["run_dir"] = str(task.run_dir)
    return row


def _run_flags(task: _Task, threads: int) -> dict:
    """run()'s keyword arguments for the task: a new run, or the folder's run resumed (to its --steps)."""
    common = {"threads": threads, "no_progress": True}
    if task.state == "resume":
        return {"resume": str(task.run_dir), "steps": dict(task.flags).get("steps"), **common}
    return {**dict(task.flags), "seed": task.seed, "run_dir": str(task.run_dir), **common}


def _run_one(name: str, flags: dict) -> dict:
    """One run in a worker process (its printed JSON line swallowed): its result.json."""
    from . import run

    with contextlib.redirect_stdout(io.StringIO()):
        return run(name, **flags).metrics


def _in_processes(name: str, tasks: list, threads: int, workers: int) -> Iterator:
    """(task, metrics or the exception it raised), as the runs end, from a pool of fresh processes."""
    if not tasks:
        return
    context = multiprocessing.get_context("spawn")  # not fork: attnc's thread pool does not survive a fork
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {pool.submit(_run_one, name, _run_flags(t, threads)): t for t in tasks}
        try:
            for future in as_completed(futures):
                yield futures[future], future.exception() or future.result()
        finally:
            pool.shutdown(cancel_futures=True)  # interrupted: the runs not started do not start


def _on_dask(client, name: str, tasks: list, threads: int) -> Iterator:
    """(task, metrics or the exception it raised), as the runs end, from a Dask cluster."""
    from distributed import as_completed as dask_completed

    shared = {w: n for w, n in client.nthreads().items() if n > 1}
    if shared:
        raise ValueError(
            f"the Dask workers {sorted(shared)} run several threads each; a run sets its process's thread "
            "count, so give each worker one thread (LocalCluster(threads_per_worker=1), dask worker --nthreads 1)"
        )
    if not tasks:
        return
    futures = {
        client.submit(_run_one, name, _run_flags(t, threads), key=f"attnc-sweep-{t.run_dir}", pure=False): t
        for t in tasks
    }
    try:
        for future in dask_completed(futures):
            yield futures[future], future.exception() if future.status == "error" else future.result()
    finally:
        client.cancel(list(futures))  # interrupted: the runs not started do not start


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return f"[{len(value)} values]"
    return "" if value is None else str(value)


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """python -m attnc.experiments sweep: run a sweep, print its summary as
    Markdown, write ROOT/runs.csv and ROOT/summary.csv; the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m attnc.experiments sweep",
        description="Run an experiment over seeds and a grid of its flags; other flags go to every run.",
        allow_abbrev=False,  # an abbreviation could take one of the experiment's flags
    )
    parser.add_argument("name", help="the experiment")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument(
        "--grid", action="append", default=[], metavar="FLAG=V1,V2", help="a flag and its values (repeatable)"
    )
    parser.add_argument("--root", default=None, help="the sweep's folder (default runs/sweep-NAME)")
    parser.add_argument("--threads", type=_common.positive_int, default=1, help="threads per run (default 1)")
    parser.add_argument("--workers", type=_common.positive_int, default=None, help="runs at once on this machine")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None, help="a Dask scheduler to run on")
    parser.add_argument("--spread", choices=SPREADS, default="iqr", help="the summary's spread (default iqr)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args, rest = parser.parse_known_args(argv)
    try:
        config, grid, seeds = _from_command_line(parser, args, rest)
        client = _client(args.scheduler)
        table = sweep(
            args.name,
            seeds,
            grid,
            root=args.root,
            threads=args.threads,
            workers=args.workers,
            client=client,
            progress=not args.no_progress,
            **config,
        )
        status = 0
    except SweepError as err:
        print(err, file=sys.stderr)
        table, status = err.table, 1
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    root = Path(args.root) if args.root is not None else Path(RUNS) / f"sweep-{args.name}"
    table.to_csv(root / "runs.csv")
    summary = table.summary(spread=args.spread)
    summary.to_csv(root / "summary.csv")
    print(summary.to_markdown())
    print(f"\nthe runs: {root / 'runs.csv'}; their summary: {root / 'summary.csv'}", file=sys.stderr)
    return status


def _from_command_line(parser, args, rest) -> tuple:
    """(the flags of every run, the grid, the seeds) from the command line."""
    from . import _module

    experiment = _common.build_parser(_module(args.name), raising=True)
    parsed = experiment.parse_args(rest)
    config = {k: v for k, v in vars(parsed).items() if v != experiment.get_default(k)}
    switches = {a.dest for a in experiment._actions if isinstance(a, argparse._StoreTrueAction)}
    grid = {}
    for item in args.grid:
        key, sep, values = item.partition("=")
        if not sep or not values:
            raise ValueError(f"--grid {item}: give FLAG=V1,V2,...")
        key = key.strip().lstrip("-").replace("-", "_")
        grid[key] = [_switch(key, v) if key in switches else v for v in values.split(",")]
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise ValueError(f"--seeds {args.seeds}: comma-separated ints") from None
    return config, grid, seeds


def _switch(key: str, text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(f"--grid {key}: a switch takes true or false, got {text!r}")
    return text.lower() == "true"


def _client(address):
    if address is None:
        return None
    from distributed import Client

    return Client(address)
