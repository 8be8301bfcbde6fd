"""attnc.datasets.FewShotTask (N-way K-shot episodes over Gaussian classes), the
nearest-prototype rule, and the snail_fewshot experiment (its --quick runs as
subprocesses: exit status, the JSON line, reproducibility, --shots, --save, and the
functions a notebook calls)."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import attnc
import attnc.models
from attnc.datasets import (
    FewShotEpisodes,
    FewShotTask,
    fewshot_accuracy,
    nearest_prototype,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = {"train_seconds", "eval_seconds", "threads"}


# --------------------------------------------------------------------------- the task


@pytest.mark.parametrize("n,k,d", [(5, 1, 32), (5, 5, 32), (3, 4, 7), (2, 1, 1)])
def test_episode_shapes_and_labels(n, k, d):
    task = FewShotTask(n, k, dim=d)
    ep = task.episodes(50, seed=1)
    assert isinstance(ep, FewShotEpisodes) and len(ep) == 50 and task.seq_len == n * k + 1
    assert ep.features.shape == (50, n * k + 1, d) and ep.features.dtype == np.float32
    assert ep.features.flags.c_contiguous
    assert ep.labels.shape == (50, n * k) and ep.labels.dtype == np.int64
    assert ep.targets.shape == (50,) and ep.targets.dtype == np.int64
    assert ep.prototypes.shape == (50, n, d) and ep.n_way == n and ep.k_shot == k
    # every class has exactly K support examples
    counts = (ep.labels[:, :, None] == np.arange(n)).sum(axis=1)
    assert (counts == k).all()
    assert ep.targets.min() >= 0 and ep.targets.max() < n
    assert task.episodes(3, seed=0, dtype=np.float64).features.dtype == np.float64


def test_examples_are_prototype_plus_noise():
    task = FewShotTask(5, 5, dim=16, noise=0.7)
    ep = task.episodes(400, seed=2, dtype=np.float64)
    protos = np.take_along_axis(ep.prototypes, ep.labels[:, :, None], axis=1)  # (B, NK, d)
    noise = ep.features[:, :-1] - protos
    qnoise = ep.features[:, -1] - ep.prototypes[np.arange(400), ep.targets]
    assert abs(noise.std() - 0.7) < 0.01 and abs(noise.mean()) < 0.01
    assert abs(qnoise.std() - 0.7) < 0.02
    assert abs(ep.prototypes.std() - 1) < 0.02 and abs(ep.prototypes.mean()) < 0.02
    # new classes every episode: prototypes are not shared
    flat = ep.prototypes.reshape(-1, 16)
    assert len(np.unique(flat.round(6), axis=0)) == flat.shape[0]
    exact = FewShotTask(5, 2, dim=4, noise=0.0).episodes(10, seed=3, dtype=np.float64)
    np.testing.assert_array_equal(
        exact.features[:, :-1], np.take_along_axis(exact.prototypes, exact.labels[:, :, None], 1)
    )


def test_order_is_shuffled_and_query_uniform():
    ep = FewShotTask(5, 5).episodes(4000, seed=4)
    # the first support example's class and the query's are uniform over the 5
    for col in (ep.labels[:, 0], ep.targets):
        freq = np.bincount(col, minlength=5) / 4000
        assert np.abs(freq - 0.2).max() < 0.03
    # orders differ between episodes, and are not sorted by class
    assert len({tuple(row) for row in ep.labels[:200].tolist()}) == 200
    assert not (np.diff(ep.labels, axis=1) >= 0).all(axis=1).any()


def test_seeds():
    task = FewShotTask(5, 1)
    a, b = task.episodes(8, seed=7), task.episodes(8, seed=7)
    for name in ("features", "labels", "targets", "prototypes"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.features, task.episodes(8, seed=8).features)
    rng = np.random.default_rng(0)
    first, second = task.episodes(8, seed=rng), task.episodes(8, seed=rng)
    assert not np.array_equal(first.features, second.features)
    again = np.random.default_rng(0)
    np.testing.assert_array_equal(task.episodes(8, seed=again).features, first.features)
    # float32 is the float64 draw, rounded
    np.testing.assert_array_equal(task.episodes(8, seed=7, dtype=np.float64).features.astype(np.float32), a.features)
    sub = a[2:5]
    assert len(sub) == 3 and np.array_equal(sub.labels, a.labels[2:5]) and len(a[0]) == 1


def test_nearest_prototype():
    task = FewShotTask(5, 5, dim=32, noise=0.05)
    ep = task.episodes(200, seed=5)
    assert fewshot_accuracy(nearest_prototype(ep.features, ep.labels, 5), ep.targets) == 1.0
    # against a plain loop
    ep = FewShotTask(4, 3, dim=6, noise=1.5).episodes(100, seed=6, dtype=np.float64)
    pred = nearest_prototype(ep.features, ep.labels, 4)
    for b in range(100):
        means = [ep.features[b, :-1][ep.labels[b] == c].mean(axis=0) for c in range(4)]
        dist = [((m - ep.features[b, -1]) ** 2).sum() for m in means]
        assert pred[b] == int(np.argmin(dist))
    # the default task: hard but learnable (about 84% at 1 shot, 98% at 5)
    acc1 = fewshot_accuracy(
        nearest_prototype(*_fl(FewShotTask(5, 1).episodes(4000, seed=9)), 5),
        FewShotTask(5, 1).episodes(4000, seed=9).targets,
    )
    acc5 = fewshot_accuracy(
        nearest_prototype(*_fl(FewShotTask(5, 5).episodes(4000, seed=9)), 5),
        FewShotTask(5, 5).episodes(4000, seed=9).targets,
    )
    assert 0.80 < acc1 < 0.88 and 0.96 < acc5 < 0.995
    # a class without support examples is never predicted
    f = np.zeros((1, 3, 2))
    f[0, 2] = [5, 5]
    assert nearest_prototype(f, np.array([[0, 0]]), 3)[0] == 0


def _fl(ep):
    return ep.features, ep.labels


def test_accuracy_helper():
    assert fewshot_accuracy(np.array([0, 1, 2]), np.array([0, 1, 1])) == pytest.approx(2 / 3)
    assert fewshot_accuracy(np.array([[0.1, 0.9], [2.0, 1.0]]), np.array([1, 0])) == 1.0
    with pytest.raises(ValueError, match="do not fit"):
        fewshot_accuracy(np.zeros(3), np.zeros(4))


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_way must be an int >= 2"):
        FewShotTask(1, 5)
    with pytest.raises(ValueError, match="k_shot must be an int >= 1"):
        FewShotTask(5, 0)
    with pytest.raises(ValueError, match="noise must be a finite float >= 0"):
        FewShotTask(5, 1, noise=-1)
    with pytest.raises(ValueError, match="noise must be a finite float >= 0"):
        FewShotTask(5, 1, noise=float("nan"))
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        FewShotTask(5, 1).episodes(0)
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        FewShotTask(5, 1).episodes(2, dtype=np.int32)
    with pytest.raises(TypeError, match="seed must be"):
        FewShotTask(5, 1).episodes(2, seed="x")
    with pytest.raises(ValueError, match="labels must be integers in"):
        nearest_prototype(np.zeros((1, 3, 2)), np.array([[0, 5]]), 3)
    with pytest.raises(ValueError, match="do not fit"):
        nearest_prototype(np.zeros((1, 3, 2)), np.array([[0, 1, 2]]), 3)


# --------------------------------------------------------------------------- the experiment


def run_experiment(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as cwd:  # its run folder goes under runs/ there
        proc = subprocess.run(
            [sys.executable, "-m", "attnc.experiments.snail_fewshot", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output; stderr: {proc.stderr[-2000:]}"
    return json.loads(lines[-1]), proc.stderr


def test_quick_run(tmp_path):
    path = tmp_path / "snail.npz"
    first, stderr = run_experiment("--quick", "--seed", "4", "--threads", "1", "--save", str(path))
    assert "it/s" in stderr or "s/it" in stderr
    for key in (
        "accuracy",
        "accuracy_1shot",
        "accuracy_5shot",
        "nearest_prototype_1shot",
        "nearest_prototype_5shot",
        "train_seconds",
        "final_loss",
        "by_shots",
    ):
        assert key in first, key
    assert first["accuracy"] == first["accuracy_5shot"] and first["shots"] == [1, 5]
    assert all(0 <= first[k] <= 1 for k in ("accuracy_1shot", "accuracy_5shot"))
    assert first["nearest_prototype_5shot"] > first["nearest_prototype_1shot"] > 0.5
    assert first["train_seconds"] > 0 and first["by_shots"]["1shot"]["train_seconds"] > 0
    for k in ("1shot", "5shot"):
        d = first["by_shots"][k]
        assert np.isfinite(d["final_loss"]) and d["final_loss"] < 2 * np.log(5)  # 40 steps: no divergence
    second, _ = run_experiment("--quick", "--seed", "4", "--threads", "2")
    strip = lambda m: {k: v for k, v in m.items() if k not in TIMING and k != "by_shots"}  # noqa: E731
    assert strip(first) == strip(second)
    model = attnc.load(path)
    assert isinstance(model, attnc.models.SNAIL) and model.k_shot == 5 and model.n_way == 5
    other = attnc.load(tmp_path / "snail_1shot.npz")
    assert other.k_shot == 1
    ep = FewShotTask(5, 1).episodes(2, seed=0)
    assert other(ep.features, ep.labels).shape == (2, 5)


def test_quick_run_one_shot_only():
    out, _ = run_experiment("--quick", "--shots", "1", "--threads", "1", "--no-progress")
    assert out["shots"] == [1] and out["accuracy"] == out["accuracy_1shot"]
    assert "accuracy_5shot" not in out and "nearest_prototype_1shot" in out


def test_notebook_helpers():
    from attnc.experiments import snail_fewshot

    model, task = snail_fewshot.trained_model(5, quick=True, steps=3)
    assert isinstance(model, attnc.models.SNAIL) and task.k_shot == 5 and not model.training
    ep = task.episodes(3, seed=1)
    out = snail_fewshot.episode_attention(model, ep)
    assert out["logits"].shape == (3, 5) and len(out["attention"]) == 3
    for a in out["attention"]:
        assert a.shape == (3, 26, 26) and np.allclose(a.sum(-1), 1) and np.all(np.triu(a, 1) == 0)
    assert out["predictions"].shape == out["targets"].shape == out["nearest_prototype"].shape == (3,)
    assert out["labels"].shape == (3, 25)
