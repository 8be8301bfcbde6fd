"""attnc.experiments' runs: run() and the command line share each
experiment's flags; every run writes its folder (config.json,
metrics.jsonl, result.json, checkpoints, TensorBoard events); a killed run
and a run cut short by --steps resume to the same bits as the run never
interrupted; compare() and plot_losses() read the folders back."""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import attnc
import attnc.experiments as E
from attnc.experiments import _common, _runs

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def quiet_run(name, **config):
    with contextlib.redirect_stdout(io.StringIO()):
        return E.run(name, no_progress=True, **config)


def command(name, *args, cwd):
    return [sys.executable, "-m", f"attnc.experiments.{name}", "--no-progress", *args]


def records(run_dir):
    """metrics.jsonl without its wall-clock fields."""
    with open(Path(run_dir) / "metrics.jsonl") as f:
        return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in f]


def final_parameters(run_dir):
    """The parameters of each phase's last checkpoint (the trained models)."""
    out = {}
    for folder in sorted((Path(run_dir) / "checkpoints").glob("*-*")):
        model = attnc.load(folder / "model.npz")
        out.update({f"{folder.name}/{k}": v for k, v in model.state_dict().items()})
    return out


def untimed(run_dir):
    return _untimed(json.loads((Path(run_dir) / "result.json").read_text()))


def _untimed(value):
    """result.json without its wall-clock fields, at any depth."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not _runs.is_timing(k)}
    return value


def assert_same_run(a, b):
    """The same bits: parameters, metrics.jsonl but its wall clock, result.json but its timings."""
    pa, pb = final_parameters(a), final_parameters(b)
    assert sorted(pa) == sorted(pb) and pa
    for k in pa:
        assert pa[k].dtype == pb[k].dtype and pa[k].tobytes() == pb[k].tobytes(), k
    assert records(a) == records(b)
    assert untimed(a) == untimed(b)


# --------------------------------------------------------------------------- resuming

KINDS = [("transformer_reverse", []), ("dates", ["--attention", "luong-general"])]


@pytest.mark.parametrize("name,own", KINDS)
def test_a_killed_run_resumes_to_the_same_bits(name, own, tmp_path):
    args = ["--quick", "--seed", "1", "--steps", "40", "--eval-every", "5", *own]
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    subprocess.run(
        command(name, *args, "--run-dir", str(reference), cwd=tmp_path),
        env=ENV,
        check=True,
        capture_output=True,
        timeout=300,
    )
    proc = subprocess.Popen(
        command(name, *args, "--run-dir", str(killed), cwd=tmp_path),
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    latest = killed / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 120
    while not latest.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    step = json.loads(latest.read_text())["step"]
    assert 5 <= step < 40 and not (killed / "result.json").exists()
    with open(killed / "metrics.jsonl", "a") as f:  # what a kill in the middle of a write leaves
        f.write('{"phase": "' + name + '", "step": 999, "lo')
    # a kill between a checkpoint's folder and latest.json leaves latest.json one behind: resuming reads the folders
    latest.write_text(json.dumps({"phase": name, "step": 0, "dir": None, "metrics_bytes": 0}))
    resumed = subprocess.run(
        command(name, "--resume", str(killed), cwd=tmp_path), env=ENV, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_run(killed, reference)
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["steps"] == 40


@pytest.mark.parametrize("name,own", KINDS)
def test_a_run_cut_short_resumes_to_the_run_of_its_plan(name, own, tmp_path):
    """--steps 7 --schedule-steps 20, then --resume --steps 20, equals --steps 20 (a cosine schedule over 20)."""
    kw = dict(quick=True, seed=2, eval_every=5, **({"attention": own[1]} if own else {}))
    reference = quiet_run(name, steps=20, run_dir=tmp_path / "reference", **kw)
    # the experiment's own measure at each evaluation interval, among the per-step records
    assert [r["step"] for r in reference.history if "exact_match" in r] == [5, 10, 15, 20]
    short = quiet_run(name, steps=7, schedule_steps=20, run_dir=tmp_path / "short", **kw)
    assert short.metrics["steps"] == 7 and [r["step"] for r in short.history if "loss" in r] == list(range(1, 8))
    # the same first 7 steps as the reference, learning rates included (the schedule is the plan's)
    assert records(tmp_path / "short") == records(tmp_path / "reference")[:8]  # 7 steps, the evaluation at 5
    resumed = quiet_run(name, resume=tmp_path / "short", steps=20)
    assert_same_run(tmp_path / "short", tmp_path / "reference")
    assert resumed.metrics == json.loads((tmp_path / "short" / "result.json").read_text())
    for k, v in reference.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[k], v)
    # a run cut short without a plan for more is refused more steps: its schedule ended at its --steps
    quiet_run(name, steps=3, run_dir=tmp_path / "unplanned", **kw)
    with pytest.raises(ValueError, match="exceeds the run's planned 3 steps"):
        quiet_run(name, resume=tmp_path / "unplanned", steps=5)


@pytest.mark.parametrize("name", E.EXPERIMENTS)
def test_every_experiment_resumes_in_quick_mode(name, tmp_path):
    """Cut short after 2 of 4 planned steps and resumed: the 4-step run's bits."""
    kw = dict(quick=True, seed=1, eval_every=2, schedule_steps=4)
    quiet_run(name, steps=4, run_dir=tmp_path / "reference", **kw)
    quiet_run(name, steps=2, run_dir=tmp_path / "resumed", **kw)
    quiet_run(name, resume=tmp_path / "resumed")  # to the plan's end
    assert_same_run(tmp_path / "resumed", tmp_path / "reference")


def test_the_captions_comparison_resumes_to_the_same_bits(tmp_path):
    """captions --compare trains its models one after the other (a phase each, evaluated
    on the way): cut short in its first model and resumed, it ends with the uninterrupted run's bits."""
    kw = dict(quick=True, seed=1, eval_every=2, schedule_steps=4, compare=True)
    quiet_run("captions", steps=4, run_dir=tmp_path / "reference", **kw)
    quiet_run("captions", steps=2, run_dir=tmp_path / "resumed", **kw)
    resumed = quiet_run("captions", resume=tmp_path / "resumed")
    assert_same_run(tmp_path / "resumed", tmp_path / "reference")
    assert resumed.metrics["curves"]["soft"]["steps"] == [2, 4]


def test_a_run_killed_between_its_phases_resumes(tmp_path):
    """sagan_shapes trains with attention, then without: killed in the second
    training after its lines reached metrics.jsonl but before its first
    checkpoint, what the first checkpoint did not record is dropped."""
    kw = dict(quick=True, steps=4, eval_every=2)
    quiet_run("sagan_shapes", run_dir=tmp_path / "reference", **kw)
    killed = tmp_path / "killed"
    quiet_run("sagan_shapes", run_dir=killed, **kw)
    first = killed / "checkpoints" / "sagan_shapes-00000004"
    for later in (killed / "checkpoints").glob("sagan_shapes_no_attention-*"):
        shutil.rmtree(later)
    (killed / "result.json").unlink()
    state = json.loads((first / "state.json").read_text())
    (killed / "checkpoints" / "latest.json").write_text(
        json.dumps({"phase": "sagan_shapes", "step": 4, "dir": first.name, "metrics_bytes": state["metrics_bytes"]})
    )
    assert len(records(killed)) == 8  # the second training's 4 lines are there
    quiet_run("sagan_shapes", resume=killed)
    assert_same_run(killed, tmp_path / "reference")


def test_resuming_refuses_other_settings(tmp_path):
    quiet_run("gpt_sort", quick=True, steps=2, run_dir=tmp_path / "a")
    with pytest.raises(ValueError, match="--seed 5 differs from the run's 0"):
        quiet_run("gpt_sort", resume=tmp_path / "a", seed=5)
    with pytest.raises(ValueError, match="no run's config.json"):
        quiet_run("gpt_sort", resume=tmp_path / "nothing")
    with pytest.raises(ValueError, match="is not empty"):
        quiet_run("gpt_sort", quick=True, steps=2, run_dir=tmp_path / "a")
    with pytest.raises(ValueError, match="--steps 9 exceeds --schedule-steps 4"):
        quiet_run("gpt_sort", quick=True, steps=9, schedule_steps=4, run_dir=tmp_path / "b")


# --------------------------------------------------------------------------- the folder


def test_the_run_folder(tmp_path):
    res = quiet_run(
        "ntm_copy",
        quick=True,
        steps=6,
        eval_every=3,
        seed=4,
        memory_init="learned",
        run_dir=tmp_path / "run",
        threads=1,
    )
    folder = tmp_path / "run"
    assert res.run_dir == folder
    config = json.loads((folder / "config.json").read_text())
    assert config["experiment"] == "ntm_copy" and config["seed"] == 4 and config["threads"] == 1
    assert config["flags"]["memory_init"] == "learned" and config["flags"]["steps"] == 6
    assert config["settings"]["steps"] == 6 and config["settings"]["heldout"] == 20  # QUICK's, the plan
    assert config["versions"] == {
        "attnc": attnc.__version__,
        "numpy": np.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
    }
    assert config["simd_path"] == attnc._core.simd_path() == config["show_config"]["simd"]["path"]
    steps = [r for r in res.history if "loss" in r]
    evals = [r for r in res.history if "bits_per_sequence" in r]
    assert [r["step"] for r in steps] == list(range(1, 7)) and [r["step"] for r in evals] == [3, 6]
    assert all(r["lr"] == 1e-4 and r["phase"] == "ntm_copy" for r in steps)
    losses = [r["loss"] for r in records(folder) if "loss" in r]
    assert res.metrics["first_loss"] == losses[0] and res.metrics["final_loss"] == losses[-1]  # tail of 6 // 20 → 1
    assert res.metrics["checks"] == [[3, evals[0]["bits_per_sequence"]], [6, evals[1]["bits_per_sequence"]]]
    assert json.loads((folder / "result.json").read_text()) == res.metrics
    # checkpoints: the last one of the phase (attnc.load reads its model), the optimiser and generators
    (ck,) = [p for p in (folder / "checkpoints").iterdir() if p.is_dir()]
    assert ck.name == "ntm_copy-00000006"
    for k, v in attnc.load(ck / "model.npz").state_dict().items():
        np.testing.assert_array_equal(v, res.model.state_dict()[k])
    state = json.loads((ck / "state.json").read_text())
    assert state["step"] == 6 and state["optimizer"]["param_groups"][0]["alpha"] == 0.95
    assert "data" in state["rngs"] and state["scheduler"] is None


def test_run_takes_the_flags_names(tmp_path):
    with pytest.raises(TypeError, match="dates has no flag 'atention'"):
        E.run("dates", atention="luong-dot")
    with pytest.raises(ValueError, match="invalid choice: 'luong'"):
        E.run("dates", attention="luong", run_dir=tmp_path / "x")
    with pytest.raises(ValueError, match="must be >= 1"):
        E.run("gpt_sort", steps=0, run_dir=tmp_path / "x")
    with pytest.raises(ValueError, match="quick is a switch"):
        E.run("gpt_sort", quick="yes", run_dir=tmp_path / "x")
    with pytest.raises(ValueError, match="no experiment 'nope'"):
        E.run("nope")
    assert not (tmp_path / "x").exists()
    res = quiet_run("pointer_tsp", quick=True, steps=2, n=6, run_dir=tmp_path / "tsp")
    assert res.metrics["n"] == 6 and res.metrics["steps"] == 2
    assert isinstance(res.model, attnc.models.PointerNet)


def test_every_experiment_lists_its_flags(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "attnc.experiments"], env=ENV, capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout
    for name, line in E.describe().items():
        assert f"  {name}" in out and line in out and len(line) > 20
    own = {
        "dates": ["--attention", "--epochs"],
        "captions": ["--attention", "--compare", "--penalties"],
        "ntm_copy": ["--memory-init"],
        "ntm_generalisation": ["--task", "--model", "--eval-memory"],
        "pointer_sort": ["--n"],
        "pointer_tsp": ["--n", "--heldout"],
        "pointer_hull": ["--n", "--eval-n", "--heldout"],
        "snail_fewshot": ["--shots"],
        "sagan_shapes": ["--no-attention", "--attention-only", "--coords"],
        "mqar": ["--mixers"],
    }
    common = [
        "--seed",
        "--quick",
        "--threads",
        "--save",
        "--steps",
        "--schedule-steps",
        "--eval-every",
        "--run-dir",
        "--resume",
        "--no-progress",
    ]
    for name in E.EXPERIMENTS:
        text = _common.build_parser(E._module(name)).format_help()
        for flag in common + own.get(name, []):
            assert flag in text, (name, flag)
    # the command line's --help is that parser's (dates' own flags were hidden by a two-stage parser)
    out = subprocess.run(
        [sys.executable, "-m", "attnc.experiments.dates", "--help"],
        env=ENV,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert "--attention" in out and "--epochs" in out and "--resume RUN_DIR" in out
    assert not (tmp_path / "runs").exists()


def test_tensorboard_events(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    quiet_run("gpt_sort", quick=True, steps=5, run_dir=tmp_path / "run")
    acc = EventAccumulator(str(tmp_path / "run" / "events"))
    acc.Reload()
    assert set(acc.Tags()["tensors"]) == {"gpt_sort/loss", "gpt_sort/lr"}
    for key in ("loss", "lr"):
        events = acc.Tensors(f"gpt_sort/{key}")
        want = [r[key] for r in records(tmp_path / "run")]
        assert [e.step for e in events] == [1, 2, 3, 4, 5]
        np.testing.assert_array_equal([tensor_util.make_ndarray(e.tensor_proto) for e in events], np.float32(want))


# --------------------------------------------------------------------------- compare


def test_compare_and_plot(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    for seed, d in enumerate(dirs):
        quiet_run("attention_pooling", quick=True, steps=4, seed=seed, run_dir=d)
    quiet_run("attention_pooling", quick=True, steps=2, seed=0, run_dir=tmp_path / "short")
    monkeypatch.setitem(sys.modules, "pandas", None)  # without pandas: a list of dicts
    rows = E.compare(dirs + [tmp_path / "short"])
    assert [r["seed"] for r in rows] == [0, 1, 0] and [r["steps"] for r in rows] == [4, 4, 2]
    assert [r["run_dir"] for r in rows] == [str(d) for d in dirs + [tmp_path / "short"]]
    assert "warmup" not in rows[0] and "eval_every" not in rows[0]  # settings the same in every run
    for r, d in zip(rows, dirs):
        result = json.loads((d / "result.json").read_text())
        assert r["accuracy"] == result["accuracy"] and r["final_loss"] == result["final_loss"]
        assert "train_seconds" not in r
    monkeypatch.delitem(sys.modules, "pandas")
    import pandas

    frame, ax = E.compare(dirs, plot=True)
    assert isinstance(frame, pandas.DataFrame) and list(frame["seed"]) == [0, 1]
    assert [line.get_label() for line in ax.lines] == ["s0", "s1"]
    for line, d in zip(ax.lines, dirs):
        assert list(line.get_ydata()) == [r["loss"] for r in records(d)]
    ax = E.plot_losses(dirs, smooth=2)
    np.testing.assert_allclose(
        ax.lines[0].get_ydata(), np.convolve([r["loss"] for r in records(dirs[0])], [0.5, 0.5], "valid")
    )
    with pytest.raises(ValueError, match="not a run folder"):
        E.compare([tmp_path])


def test_a_resumed_run_counts_the_cpu_time_before_it(tmp_path):
    """train_cpu_seconds, like train_seconds, includes the time before a resume (it is kept in the checkpoints)."""
    kw = dict(quick=True, seed=0, variants="global-dot", eval_every=5)
    first = quiet_run("luong_comparison", steps=7, schedule_steps=20, run_dir=tmp_path / "r", **kw)
    (cpu,) = first.metrics["train_cpu_seconds_by_variant"]
    state = json.loads(next((tmp_path / "r" / "checkpoints").glob("global-dot-*/state.json")).read_text())
    assert cpu > 0 and state["cpu_seconds"] == pytest.approx(cpu, abs=0.02)  # the checkpoint's is the last step's
    again = quiet_run("luong_comparison", resume=tmp_path / "r", steps=7)  # nothing left to train
    assert again.metrics["train_cpu_seconds_by_variant"][0] == pytest.approx(cpu, abs=0.05)


def test_pointer_hull_curve_and_tsp_against_held_karp(tmp_path):
    """pointer_hull --n LO-HI --eval-n: the curve's arrays are the per-size
    scores (one recomputed here from the saved model), beside the paper's
    rows; pointer_tsp above n = 12: Or-opt training tours, scored against
    Held-Karp's optimum (both recomputed here); the plots saved, on Figures
    of their own (none left open in pyplot, where a notebook would show them)."""
    import matplotlib.pyplot as plt

    from attnc.datasets import ConvexHullTask, TSPTask, hull_accuracy, tsp_tours
    from attnc.experiments import _pointer

    open_figures = plt.get_fignums()
    res = quiet_run("pointer_hull", quick=True, steps=3, n="5-8", eval_n="5,12", run_dir=tmp_path / "hull")
    m = res.metrics
    assert m["train_n"] == "5-8" and m["n"] == [5, 12] and m["heldout_size"] == 40
    assert m["accuracy_greedy"] == [m["accuracy_by_n"]["5"], m["accuracy_by_n"]["12"]]
    assert m["accuracy"] == pytest.approx(np.mean(m["accuracy_greedy"]))
    assert m["beam10"]["area_coverage"] == pytest.approx(np.mean(m["area_coverage_beam10"]))
    assert m["paper_accuracy"] == [0.92, None] and m["paper_area_coverage"] == [0.999, None]
    held = ConvexHullTask(5, 8).batch(20, n=12, seed=_pointer.HELDOUT_SEED + 12)
    assert hull_accuracy(_pointer.decode(res.model, held, "hull"), held) == m["accuracy_greedy"][1]
    assert (tmp_path / "hull" / "hull_curve.png").stat().st_size > 0
    for flags, message in [
        ({"n": "8-5"}, "LO <= HI"),
        ({"n": "2"}, "3 <= LO"),
        ({"n": "5-x"}, "N or LO-HI"),
        ({"eval_n": "5,5"}, "increasing"),
        ({"eval_n": "5,2000"}, "from 3 to 1000"),
    ]:
        with pytest.raises(ValueError, match=message):
            E.run("pointer_hull", quick=True, run_dir=tmp_path / "bad", **flags)

    res = quiet_run("pointer_tsp", quick=True, steps=2, n=14, run_dir=tmp_path / "tsp")
    m = res.metrics
    held = TSPTask(14).batch(50, seed=_pointer.HELDOUT_SEED + 14)
    assert m["exact_optimum"] and m["optimal_tour_length"] == tsp_tours(held.inputs, exact=True)[1].mean()
    heuristic = tsp_tours(held.inputs, or_opt=True)[1].mean()
    assert m["training_tour_length"] == heuristic >= m["optimal_tour_length"]
    assert m["training_tour_gap"] == pytest.approx(heuristic / m["optimal_tour_length"] - 1)
    assert m["tour_length_greedy"] == m["tour_length"] >= m["optimal_tour_length"]
    assert m["tour_length_beam10"] == m["beam10"]["tour_length"] and m["paper_tour_length"] is None
    assert (tmp_path / "tsp" / "tsp_tours.png").stat().st_size > 0
    assert plt.get_fignums() == open_figures
    m = quiet_run("pointer_tsp", quick=True, steps=2, n=5, run_dir=tmp_path / "tsp5").metrics
    assert m["training_tour_length"] is None and (m["paper_tour_length"], m["paper_optimal"]) == (2.12, 2.12)
