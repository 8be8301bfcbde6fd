"""attnc.experiments.sweep: a sweep's runs, made in processes of this machine
or on a local Dask cluster of 2 workers, have the bits of the same runs made
alone in this process; a sweep run again skips its finished runs and resumes
the unfinished ones; its table's medians and spreads match a reference
written here; bad sweeps are refused before any run starts; a failed run is
reported with its seed and options, the others' results kept.

distributed is imported at module level: CI installs it (the test extra
takes attnc[sweep]), so without it this file fails rather than skips."""

import csv
import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import distributed
import numpy as np
import pytest
from test_experiment_runs import ENV, _untimed, assert_same_run, quiet_run

import attnc.experiments as E
from attnc.experiments import SweepError, SweepTable

NAME = "pointer_sort"
FLAGS = dict(quick=True, steps=3, eval_every=2)  # a checkpoint at steps 2 and 3: the last is kept
SEEDS = [0, 1]
GRID = {"n": [3, 4]}
RUNS = [(n, seed) for n in GRID["n"] for seed in SEEDS]  # the sweep's order: grid point, then seed


def folder(root, n, seed):
    return Path(root) / f"n={n},seed={seed}"


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """{(n, seed): the run's folder}, each run made alone in this process with attnc.experiments.run."""
    root = tmp_path_factory.mktemp("alone")
    for n, seed in RUNS:
        quiet_run(NAME, seed=seed, n=n, run_dir=str(folder(root, n, seed)), **FLAGS)
    return {key: folder(root, *key) for key in RUNS}


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """(root, table) of the sweep made in 2 processes of this machine."""
    root = tmp_path_factory.mktemp("local") / "sweep"
    return root, E.sweep(NAME, SEEDS, GRID, root=root, workers=2, progress=False, **FLAGS)


def result(run_dir):
    return json.loads((Path(run_dir) / "result.json").read_text())


def untimed_rows(table):
    return [{k: v for k, v in _untimed(row).items() if k != "run_dir"} for row in table.rows]


def assert_runs_alone(table, root, alone):
    """Each row is its run's: its folder, the options and seed, its result.json
    flattened; the folder has the bits of the run made alone."""
    assert [(row["n"], row["seed"]) for row in table.rows] == RUNS
    for row, (n, seed) in zip(table.rows, RUNS):
        assert row["run_dir"] == str(folder(root, n, seed).absolute())
        assert_same_run(row["run_dir"], alone[n, seed])
        metrics = result(row["run_dir"])
        assert row["threads"] == 1  # the sweep's threads per run
        assert row["exact_match"] == metrics["exact_match"] and row[f"exact_match_by_n.{n}"] == metrics["exact_match"]
        assert {k: v for k, v in _untimed(metrics).items() if k != "exact_match_by_n"} == {
            k: row[k] for k in _untimed(metrics) if k != "exact_match_by_n"
        }


# --------------------------------------------------------------------------- where the runs run


def test_a_sweep_in_processes_has_the_bits_of_the_runs_made_alone(local, alone):
    root, table = local
    assert table.options == ["n"] and len(table) == 4
    assert_runs_alone(table, root, alone)


def test_a_sweep_on_a_dask_cluster_has_the_bits_of_the_runs_made_alone(tmp_path, alone):
    root = tmp_path / "sweep"
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as stream:
            table = E.sweep(NAME, SEEDS, GRID, root=root, client=client, progress=False, **FLAGS)
        assert_runs_alone(table, root, alone)
        # the runs ran on the cluster, one task each
        assert sorted(t["key"] for t in stream.data) == sorted(f"attnc-sweep-{folder(root, *key)}" for key in RUNS)
        # a run failing on a worker: reported, the others (skipped: finished) kept
        corrupt(folder(root, 4, 0))
        with pytest.raises(SweepError, match=r"1 of the 4 runs of pointer_sort failed.*\n  n=4, seed=0: ") as err:
            E.sweep(NAME, SEEDS, GRID, root=root, client=client, progress=False, **FLAGS)
    assert [options for options, _ in err.value.failures] == [{"n": 4, "seed": 0}]
    assert untimed_rows(err.value.table) == [r for r, key in zip(untimed_rows(table), RUNS) if key != (4, 0)]


def test_dask_workers_of_several_threads_are_refused(tmp_path):
    class Client:  # what the sweep asks a client before submitting (submit is absent: nothing may run)
        def nthreads(self):
            return {"tcp://10.0.0.1:1234": 1, "tcp://10.0.0.2:1234": 2}

    with pytest.raises(ValueError, match=r"workers \['tcp://10.0.0.2:1234'\] run several threads"):
        E.sweep(NAME, SEEDS, GRID, root=tmp_path / "s", client=Client(), progress=False, **FLAGS)
    with pytest.raises(ValueError, match="workers is for runs on this machine"):
        E.sweep(NAME, SEEDS, GRID, root=tmp_path / "s", client=Client(), workers=2, **FLAGS)
    assert not (tmp_path / "s").exists()


# --------------------------------------------------------------------------- resuming


def corrupt(run_dir):
    """A run folder whose checkpoint cannot be read, and no result: resuming it fails."""
    (run_dir / "result.json").unlink()
    for model in (run_dir / "checkpoints").glob("*/model.npz"):
        model.write_bytes(b"not an npz file")


def stamps(run_dir):
    return {p: p.stat().st_mtime_ns for p in Path(run_dir).rglob("*") if p.is_file()}


def test_a_sweep_run_again_skips_its_finished_runs_and_resumes_the_others(local, alone, tmp_path):
    source, table = local
    root = tmp_path / "sweep"
    shutil.copytree(source, root)
    shutil.rmtree(folder(root, 4, 1))  # never started
    (folder(root, 3, 1) / "result.json").unlink()  # killed after its last checkpoint
    checkpoint = next((folder(root, 3, 1) / "checkpoints").glob("*/model.npz"))
    shutil.rmtree(folder(root, 4, 0) / "checkpoints")  # killed before its first checkpoint
    (folder(root, 4, 0) / "result.json").unlink()
    before = {key: stamps(folder(root, *key)) for key in RUNS}
    again = E.sweep(NAME, SEEDS, GRID, root=root, progress=False, **FLAGS)
    assert stamps(folder(root, 3, 0)) == before[3, 0]  # finished: not run again
    assert checkpoint.stat().st_mtime_ns == before[3, 1][checkpoint]  # resumed from it, not trained again
    assert untimed_rows(again) == untimed_rows(table)
    assert_runs_alone(again, root, alone)


def test_a_failed_run_is_reported_with_its_options_and_the_others_kept(local, tmp_path):
    source, table = local
    root = tmp_path / "sweep"
    shutil.copytree(source, root)
    corrupt(folder(root, 3, 1))
    with pytest.raises(SweepError) as err:
        E.sweep(NAME, SEEDS, GRID, root=root, progress=False, **FLAGS)
    assert "n=3, seed=1: " in str(err.value) and "the others' rows are in .table" in str(err.value)
    (options, error), *more = err.value.failures
    assert options == {"n": 3, "seed": 1} and not more and isinstance(error, Exception)
    assert untimed_rows(err.value.table) == [r for r, key in zip(untimed_rows(table), RUNS) if key != (3, 1)]


def test_a_folder_of_another_run_is_refused_before_any_run(local, tmp_path):
    source, _ = local
    root = tmp_path / "sweep"
    shutil.copytree(source, root)
    shutil.rmtree(folder(root, 4, 1))
    before = stamps(root)
    with pytest.raises(ValueError, match=r"n=3,seed=0 holds a run with other flags \(steps: \(3, 3\) there, \(2, 2\)"):
        E.sweep(NAME, SEEDS, GRID, root=root, progress=False, **dict(FLAGS, steps=2))
    (root / "n=4,seed=1").mkdir()
    (root / "n=4,seed=1" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"n=4,seed=1 is not empty and holds no run's config.json"):
        E.sweep(NAME, SEEDS, GRID, root=root, progress=False, **FLAGS)
    assert {p: t for p, t in stamps(root).items() if p.name != "notes.txt"} == before  # nothing ran


# --------------------------------------------------------------------------- bad sweeps


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(name="pointer_sorts"), ValueError, "no experiment 'pointer_sorts'"),
        (dict(seeds=[]), ValueError, "seeds is empty"),
        (dict(seeds=[0, -1]), ValueError, r"seeds must be ints >= 0, got -1"),
        (dict(seeds=[0, 1.5]), ValueError, r"seeds must be ints >= 0, got 1.5"),
        (dict(seeds=[True]), ValueError, r"seeds must be ints >= 0, got True"),
        (dict(seeds=[1, 1]), ValueError, r"seeds has repeats: \[1, 1\]"),
        (dict(grid={"m": [3]}), TypeError, r"grid option 'm' is not a flag of pointer_sort; its flags: .*\bn\b"),
        (dict(grid={"seed": [3]}), ValueError, r"grid option 'seed' is set by the sweep itself \(its argument seeds\)"),
        (dict(grid={"n": []}), ValueError, "grid option 'n' has no values"),
        (dict(grid={"n": "34"}), ValueError, "grid option 'n': a list of values, got '34'"),
        (dict(grid={"n": 3}), ValueError, "grid option 'n': a list of values, got 3"),
        (dict(grid=[("n", [3])]), ValueError, r"grid must be a dict"),
        (dict(grid={"n": [3, 1]}), ValueError, "argument --n: must be >= 2, got 1"),  # the second point
        (dict(grid={"n": [3, "3"]}), ValueError, "share the folder name n=3,seed=0"),
        (dict(run_dir="x"), ValueError, r"'run_dir' is set by the sweep itself \(its argument root\)"),
        (dict(save="x.npz"), ValueError, r"'save' is set by the sweep itself"),
        (dict(nosuch=1), TypeError, "'nosuch' is not a flag of pointer_sort"),
        (dict(n=3), ValueError, "'n' is both a grid option and a flag of every run"),
        (dict(threads=0), ValueError, "threads must be an int >= 1, got 0"),
        (dict(workers=0), ValueError, "workers must be an int >= 1, got 0"),
    ],
)
def test_a_bad_sweep_is_refused_before_any_run(kwargs, error, match, tmp_path):
    args = dict(name=NAME, seeds=SEEDS, grid=GRID, root=tmp_path / "sweep", progress=False, **FLAGS)
    with pytest.raises(error, match=match):
        E.sweep(**{**args, **kwargs})
    assert not (tmp_path / "sweep").exists()


# --------------------------------------------------------------------------- medians and spreads


def median_ref(values):
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def percentile_ref(values, q):
    """Linear interpolation between the order statistics at rank q/100 * (n - 1) (numpy's default)."""
    v = sorted(values)
    rank = q / 100 * (len(v) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def stats_ref(values, spread):
    if spread == "range":
        return median_ref(values), min(values), max(values)
    return median_ref(values), percentile_ref(values, 25), percentile_ref(values, 75)


@pytest.mark.parametrize("runs", [1, 2, 3, 4, 5, 10])
@pytest.mark.parametrize("spread", ["iqr", "range"])
def test_aggregate_is_the_elementwise_median_and_spread(runs, spread, rng):
    curves = rng.standard_normal((runs, 7)).round(2)  # ties among the values too
    curves[:, 3] = 0.5
    got = E.aggregate([list(c) for c in curves], spread)
    expected = [stats_ref(curves[:, j].tolist(), spread) for j in range(7)]
    for i, stat in enumerate(("median", "low", "high")):
        assert got[stat].dtype == np.float64 and got[stat].shape == (7,)
        np.testing.assert_allclose(got[stat], [e[i] for e in expected], rtol=1e-15, atol=1e-15, err_msg=stat)
    scalar = E.aggregate(curves[:, 0], spread)  # numbers: 0-d results
    assert [scalar[s].shape for s in ("median", "low", "high")] == [()] * 3
    assert scalar["median"] == pytest.approx(expected[0][0], abs=1e-15)


def test_aggregate_refuses_what_it_cannot_aggregate():
    with pytest.raises(ValueError, match="no values"):
        E.aggregate([])
    with pytest.raises(ValueError, match=r"different shapes \[\(2,\), \(3,\)\]"):
        E.aggregate([[1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match="not numbers"):
        E.aggregate([["a"], ["b"]])
    with pytest.raises(ValueError, match="spread must be one of"):
        E.aggregate([1.0], spread="std")


def test_the_table_summarises_each_grid_point_over_its_seeds(rng):
    rows = []
    for n, seed in itertools.product([5, 10], range(3)):
        rows.append(
            {"n": n, "seed": seed, "acc": float(rng.random()), "parameters": 100, "curve": rng.random(4).tolist()}
        )
    rows[-1]["extra"] = 1.0  # a metric one run lacks: its point has none, the other has it
    rows[-2]["extra"] = 2.0
    rows[0]["extra"] = 3.0
    table = SweepTable(rows, ["n"])
    for spread in ("iqr", "range"):
        summary = table.summary(spread=spread)
        assert [list(r)[:2] for r in summary.rows] == [["n", "runs"]] * 2
        for row, n in zip(summary.rows, (5, 10)):
            group = [r for r in rows if r["n"] == n]
            assert row["n"] == n and row["runs"] == 3
            expected = stats_ref([r["acc"] for r in group], spread)
            assert [row["acc_median"], row["acc_low"], row["acc_high"]] == pytest.approx(expected, abs=1e-15)
            assert "parameters_median" not in row  # the same in every run: not summarised by default
            assert "extra_median" not in row
            curves = {c["n"]: c for c in table.curve("curve", spread)}
            for j in range(4):
                expected = stats_ref([r["curve"][j] for r in group], spread)
                got = [curves[n][s][j] for s in ("median", "low", "high")]
                assert got == pytest.approx(expected, abs=1e-15)
    assert table.summary(["parameters"]).rows[0] == {
        "n": 5,
        "runs": 3,
        "parameters_median": 100.0,
        "parameters_low": 100.0,
        "parameters_high": 100.0,
    }
    with pytest.raises(ValueError, match=r"metric 'extra': the runs of \{'n': 5\} with seeds \[1, 2\] do not have it"):
        table.curve("extra")


def test_the_table_as_csv_and_markdown(tmp_path):
    table = SweepTable([{"n": 5, "seed": 0, "acc": 0.123456, "curve": [1, 2]}, {"n": 5, "seed": 1, "acc": 1}], ["n"])
    text = table.to_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text() == text
    assert list(csv.DictReader(text.splitlines())) == [
        {"n": "5", "seed": "0", "acc": "0.123456", "curve": "[1, 2]"},
        {"n": "5", "seed": "1", "acc": "1", "curve": ""},
    ]
    assert table.to_markdown().splitlines() == [
        "| n | seed | acc | curve |",
        "|---|---|---|---|",
        "| 5 | 0 | 0.1235 | [2 values] |",
        "| 5 | 1 | 1 |  |",
    ]


# --------------------------------------------------------------------------- the command line


def command(*args):
    return subprocess.run(
        [sys.executable, "-m", "attnc.experiments", "sweep", *args], env=ENV, capture_output=True, text=True
    )


def test_the_command_line_runs_and_tables_a_sweep(local, alone, tmp_path):
    source, table = local
    root = tmp_path / "sweep"
    shutil.copytree(source, root)
    shutil.rmtree(folder(root, 4, 1))  # the command line runs it, and reads the others back
    done = command(
        NAME, "--seeds", "0,1", "--grid", "n=3,4", "--quick", "--steps", "3", "--eval-every", "2",
        "--root", str(root), "--no-progress", "--spread", "range",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_run(folder(root, 4, 1), alone[4, 1])
    with open(root / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert [(int(r["n"]), int(r["seed"]), float(r["exact_match"])) for r in runs] == [
        (n, seed, result(alone[n, seed])["exact_match"]) for n, seed in RUNS
    ]
    with open(root / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    expected = table.summary(spread="range").rows
    assert len(summary) == len(expected) == 2
    for got, want in zip(summary, expected):  # timings differ, and so whether they vary
        assert {k: float(v) for k, v in got.items() if "seconds" not in k and v != ""} == {
            k: v for k, v in want.items() if "seconds" not in k
        }
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| n | runs | exact_match_median | exact_match_low | exact_match_high |")
    assert [line.split(" | ")[:2] for line in lines[2:]] == [["| 3", "2"], ["| 4", "2"]]


def test_the_command_line_refuses_a_bad_sweep(tmp_path):
    for args, message in [
        (["--grid", "m=3,4"], "grid option 'm' is not a flag of pointer_sort"),
        (["--nosuch"], "unrecognized arguments: --nosuch"),
        (["--grid", "n"], "--grid n: give FLAG=V1,V2,..."),
        (["--seeds", "0,a"], "--seeds 0,a: comma-separated ints"),
    ]:
        done = command(NAME, "--quick", "--root", str(tmp_path / "s"), *args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
    assert not (tmp_path / "s").exists()


def test_importing_the_experiments_imports_no_dask():
    code = (
        "import attnc.experiments, sys; print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
