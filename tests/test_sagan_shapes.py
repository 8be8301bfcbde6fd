"""attnc.datasets.SameColourShapes and the sagan_shapes experiment (its model's
gradients, the quick run as a subprocess: exit status, JSON, reproducibility,
--save)."""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import attnc
from attnc.datasets import PALETTE, SHAPE_KINDS, SameColourShapes
from attnc.experiments import sagan_shapes
from helpers import same_bits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMING = {"train_seconds", "eval_seconds", "threads", "train_seconds_no_attention"}


def test_dataset_batches():
    task = SameColourShapes(size=12, colours=6, gap=6, max_radius=1)
    b = task.batch(401, seed=0)
    assert b.images.shape == (401, 3, 12, 12) and b.images.dtype == np.float32
    assert b.labels.dtype == np.int64 and abs(int(b.labels.sum()) - 200) <= 1  # balanced
    assert np.array_equal(b.labels, (b.colours[:, 0] == b.colours[:, 1]).astype(np.int64))
    assert b.colours.max() < 6 and b.kinds.max() < len(SHAPE_KINDS) and set(np.unique(b.radii)) == {1}
    for s in range(2):  # each mask is the shape drawn at its centre, in its part of the image
        assert b.masks[:, s].sum((1, 2)).min() >= 4
        cols = np.where(b.masks[:, s].any(1))
        assert (cols[1].max() < 3) if s == 0 else (cols[1].min() >= 9)
        rows, cc = b.centres[:, s, 0], b.centres[:, s, 1]
        assert np.all(np.abs(np.argwhere(b.masks[:, s])[:, 1] - rows[np.argwhere(b.masks[:, s])[:, 0]]) <= 1)
        assert np.all(np.abs(np.argwhere(b.masks[:, s])[:, 2] - cc[np.argwhere(b.masks[:, s])[:, 0]]) <= 1)
    # the shapes are in their colours, the background dark
    palette = np.array([c for _, c in PALETTE])
    n = np.arange(401)
    for s in range(2):
        m = b.masks[:, s]
        mean = (b.images * m[:, None]).sum((2, 3)) / m.sum((1, 2))[:, None]
        assert np.abs(mean - palette[b.colours[:, s]]).max() < 0.3
    background = ~(b.masks.any(1))
    assert np.abs(b.images.transpose(1, 0, 2, 3)[:, background]).mean() < 0.06
    # every colour and kind appears; same seed, same bits; float64 on request
    assert set(np.unique(b.colours)) == set(range(6)) and set(np.unique(b.kinds)) == set(range(len(SHAPE_KINDS)))
    again = task.batch(401, seed=0)
    same_bits(again.images, b.images)
    assert not np.array_equal(task.batch(401, seed=1).images, b.images)
    assert task.batch(3, seed=0, dtype=np.float64).images.dtype == np.float64
    assert n.size == 401


def test_dataset_larger_shapes_and_gap():
    task = SameColourShapes(size=24, colours=8, gap=8, max_radius=2)
    b = task.batch(200, seed=2)
    left = np.where(b.masks[:, 0].any(1))[1].max()
    right = np.where(b.masks[:, 1].any(1))[1].min()
    assert right - left > 8 and set(np.unique(b.radii)) == {1, 2}


def test_dataset_clutter():
    """clutter=k adds k single pixels of palette colours between the two parts, nowhere else."""
    plain = SameColourShapes(size=12, colours=6, gap=6, max_radius=1, noise=0)
    cluttered = SameColourShapes(size=12, colours=6, gap=6, max_radius=1, noise=0, clutter=5)
    b = cluttered.batch(50, seed=4)
    lit = np.abs(b.images).sum(1) > 0.1
    outside = lit & ~b.masks.any(1)
    assert np.all(outside.sum((1, 2)) == 5) and not outside[:, :, :3].any() and not outside[:, :, 9:].any()
    palette = np.array([c for _, c in PALETTE])
    spots = b.images.transpose(0, 2, 3, 1)[outside]  # (250, 3)
    assert np.abs(spots[:, None] - palette[None, :6]).max(-1).min(-1).max() < 1e-6
    assert plain.batch(50, seed=4).images.shape == b.images.shape


def test_dataset_bad_arguments():
    with pytest.raises(ValueError, match="size"):
        SameColourShapes(size=10, gap=6, max_radius=1)
    with pytest.raises(ValueError, match="colours"):
        SameColourShapes(colours=9)
    with pytest.raises(ValueError, match="colours"):
        SameColourShapes(colours=1)
    with pytest.raises(ValueError, match="noise"):
        SameColourShapes(noise=-1)
    with pytest.raises(ValueError, match="clutter"):
        SameColourShapes(size=12, gap=6, max_radius=1, clutter=73)
    with pytest.raises(ValueError, match="n must be"):
        SameColourShapes().batch(0)
    with pytest.raises(TypeError, match="dtype"):
        SameColourShapes().batch(2, dtype=np.int32)


def test_pooled_colour_features_are_not_linearly_separable():
    """The argument behind the task, on exact features: per-colour pixel counts
    of each part (what any local, pooled, linear model could at best read) give
    a least-squares linear classifier near chance."""
    task = SameColourShapes(size=12, colours=6, gap=6, max_radius=1, noise=0, jitter=0)
    b = task.batch(4000, seed=3)
    onehot = np.eye(6)[b.colours]  # (n, 2, 6)
    area = b.masks.sum((2, 3))[..., None]
    feats = np.concatenate([(onehot * area).reshape(len(b.labels), -1), np.ones((len(b.labels), 1))], 1)
    w, *_ = np.linalg.lstsq(feats[:3000], 2.0 * b.labels[:3000] - 1, rcond=None)
    acc = np.mean((feats[3000:] @ w > 0) == (b.labels[3000:] == 1))
    assert acc < 0.65
    # while a non-linear function of the same features (colour equality) is exact
    assert np.array_equal(b.labels, (b.colours[:, 0] == b.colours[:, 1]).astype(np.int64))


@pytest.mark.parametrize("attention", [True, False])
def test_classifier_gradients(rng, attention):
    m = sagan_shapes.ShapeClassifier(channels=8, hidden=4, attention=attention, reduction=2, dtype=np.float64, seed=0)
    if attention:
        m.attn.gamma = np.array([0.8])
        assert {"attn.gamma", "attn.f.weight", "attn.v.bias"} <= set(m.state_dict())
    x = rng.standard_normal((2, 3, 5, 6))
    out, pullback = attnc.vjp(m, x)
    dy = rng.standard_normal(out.shape)
    grads = pullback(dy)
    assert set(grads) == set(m.state_dict())
    for name, p in m.named_parameters():
        for _ in range(3):
            i = np.unravel_index(rng.integers(p.size), p.shape)
            old = p[i]
            p[i] = old + 1e-6
            lp = float((m(x) * dy).sum())
            p[i] = old - 1e-6
            lm = float((m(x) * dy).sum())
            p[i] = old
            assert abs(grads[name][i] - (lp - lm) / 2e-6) <= 1e-6 * max(1, abs(grads[name][i])), name
    logits, attn = m(x, return_attention=True)
    assert (attn is None) != attention and logits.shape == (2, 2)
    if attention:
        assert attn.shape == (2, 30, 30)


def _centre_rows(b, which):
    return b.centres[:, which, 0] * 12 + b.centres[:, which, 1]


def test_attention_scores_on_known_maps():
    task = SameColourShapes(size=12, gap=6, max_radius=1, noise=0)
    b = task.batch(6, seed=0)
    n, N = 6, 144
    rows = np.arange(n)
    own = [b.masks[:, w].reshape(n, -1) for w in (0, 1)]
    # 1) each centre looks only at the other shape's pixels
    maps = np.zeros((n, N, N))
    for which in (0, 1):
        other = own[1 - which]
        maps[rows, _centre_rows(b, which)] = other / other.sum(-1, keepdims=True)
    scores = sagan_shapes.attention_scores(None, b, maps)
    by_label = scores.pop("attention_by_label")
    assert by_label["different_colours"]["attention_on_other"] == 1.0
    assert by_label["same_colour"]["attention_mass_on_other"] == pytest.approx(1.0)
    uniform = np.mean([own[1 - w].sum(-1) / (N - own[w].sum(-1)) for w in (0, 1)])
    assert scores == {
        "attention_on_other": 1.0,
        "attention_on_other_chance": pytest.approx(uniform),
        "attention_near_other": 1.0,
        "attention_mass_on_other": pytest.approx(1.0),
        "attention_mass_on_other_uniform": pytest.approx(uniform),
        "attention_mass_on_own": 0.0,
        "attention_argmax_on_other_any": 1.0,
    }
    assert 0.03 < uniform < 0.07
    img = sagan_shapes.query_attention(None, b, 0, maps)
    assert img.shape == (n, 12, 12) and np.allclose(img.sum((1, 2)), 1)
    # 2) most of the mass on the own shape, the rest on the other shape: the own shape is left out of the check
    maps2 = np.zeros((n, N, N))
    for which in (0, 1):
        maps2[rows, _centre_rows(b, which)] = 0.8 * own[which] / own[which].sum(-1, keepdims=True) + 0.2 * own[
            1 - which
        ] / own[1 - which].sum(-1, keepdims=True)
    s2 = sagan_shapes.attention_scores(None, b, maps2)
    assert s2["attention_on_other"] == 1.0 and s2["attention_argmax_on_other_any"] == 0.0
    assert s2["attention_mass_on_other"] == pytest.approx(1.0) and s2["attention_mass_on_own"] == pytest.approx(0.8)
    # 3) the measure can fail: uniform attention, and a map on a background pixel far from both shapes
    s3 = sagan_shapes.attention_scores(None, b, np.full((n, N, N), 1.0 / N))
    assert s3["attention_mass_on_other"] == pytest.approx(s3["attention_mass_on_other_uniform"])
    assert s3["attention_on_other"] == 0.0  # a flat map has no peak
    maps4 = np.full((n, N, N), 0.5 / (N - 1))
    background = np.argmax(
        ~b.masks.any(1).reshape(n, -1) & ~(np.arange(N) % 12 < 4)[None] & ~(np.arange(N) % 12 > 7), -1
    )  # a background pixel in the gap
    maps4[rows, :, background] = 0.5 + 0.5 / (N - 1)
    maps4 /= maps4.sum(-1, keepdims=True)
    s4 = sagan_shapes.attention_scores(None, b, maps4)
    assert s4["attention_on_other"] == 0.0 and s4["attention_near_other"] == 0.0
    assert s4["attention_mass_on_other"] < s4["attention_mass_on_other_uniform"]


def _run(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as cwd:  # its run folder goes under runs/ there
        proc = subprocess.run(
            [sys.executable, "-m", "attnc.experiments.sagan_shapes", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_quick_run(tmp_path):
    path = tmp_path / "sagan.npz"
    first, stderr = _run("--quick", "--seed", "2", "--threads", "1", "--save", str(path))
    assert "it/s" in stderr or "s/it" in stderr
    for key in (
        "accuracy",
        "accuracy_no_attention",
        "accuracy_gain",
        "attention_on_other",
        "attention_mass_on_other",
        "attention_mass_on_own",
        "train_seconds",
        "train_seconds_no_attention",
        "gamma",
        "heldout_size",
    ):
        assert key in first, key
    assert 0 <= first["accuracy"] <= 1 and 0 <= first["attention_on_other"] <= 1 and first["quick"] is True
    second, _ = _run("--quick", "--seed", "2", "--threads", "2")
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    model = attnc.load(path)
    assert isinstance(model, sagan_shapes.ShapeClassifier) and model.attention and not model.training
    held = sagan_shapes.heldout(2, 64)
    assert sagan_shapes.accuracy(model, held) == first["accuracy"]
    baseline = attnc.load(tmp_path / "sagan_baseline.npz")  # saved beside the model with attention
    assert isinstance(baseline, sagan_shapes.ShapeClassifier) and not baseline.attention
    assert sagan_shapes.accuracy(baseline, held) == first["accuracy_no_attention"]
    only, _ = _run("--quick", "--seed", "2", "--threads", "1", "--no-attention")
    assert only["attention"] is False and only["accuracy"] == only["accuracy_no_attention"]
    assert only["accuracy_no_attention"] == first["accuracy_no_attention"]
    assert "attention_on_other" not in only


def test_tied_query_key_projections():
    """tie_qk (the default): g starts as f and both get the summed gradient, so they stay equal;
    without it they differ."""
    model, result = sagan_shapes.train_model(1, quick=True)
    assert np.array_equal(model.attn.f.weight, model.attn.g.weight)
    assert np.array_equal(model.attn.f.bias, model.attn.g.bias)
    assert result["final_loss"] == result["final_loss"]  # finite
    untied, _ = sagan_shapes.train_model(1, quick=True, tie_qk=False)
    assert not np.array_equal(untied.attn.f.weight, untied.attn.g.weight)
    with pytest.raises(TypeError, match="frame"):
        sagan_shapes.train_model(1, quick=True, frame=True)


def test_initialisation_and_fg_decay():
    """At the start the background has zero features and a zero key, the keys are non-negative;
    fg_decay shrinks f and g (only) after each step by 1 - lr fg_decay."""
    model, _ = sagan_shapes.train_model(0, steps=1, quick=True, fg_decay=0.0, lr=1e-12)
    assert np.abs(model.conv1.bias).max() < 1e-9 and np.abs(model.conv2.bias).max() < 1e-9
    assert model.attn.f.weight.min() > -1e-9 and np.abs(model.attn.f.bias).max() < 1e-9
    decayed, _ = sagan_shapes.train_model(0, steps=1, quick=True, fg_decay=1000.0, lr=1e-4)
    plain, _ = sagan_shapes.train_model(0, steps=1, quick=True, fg_decay=0.0, lr=1e-4)
    factor = 1 - 0.05e-4 * 1000  # the learning rate after the step: the cosine's end, 5% of 1e-4
    np.testing.assert_allclose(decayed.attn.f.weight, plain.attn.f.weight * factor, rtol=1e-5)
    np.testing.assert_allclose(decayed.attn.g.weight, plain.attn.g.weight * factor, rtol=1e-5)
    same_bits(decayed.attn.h.weight, plain.attn.h.weight)
    same_bits(decayed.conv3.weight, plain.conv3.weight)
