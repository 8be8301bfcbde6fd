"""captions --compare (Xu et al.'s soft against hard attention, with and
without the doubly stochastic penalty): the attention measures against
loops written here on hand-made attention maps, the penalty term against the
Captioner's own loss, the quick run's JSON, table and plot (the same bits on
1 and 2 threads), the medians over seeds, and the argument errors."""

import contextlib
import io
import math

import numpy as np
import pytest

import attnc
import attnc.experiments as E
from attnc.datasets import CaptionsTask
from attnc.experiments import captions as C

SHAPE_WORDS = {"square", "circle", "triangle"}


def quiet_run(**config):
    with contextlib.redirect_stdout(io.StringIO()):
        return E.run("captions", no_progress=True, **config)


def hand_task():
    """Three images: "a red square above a blue circle", "a green triangle",
    "a yellow circle right of a red circle" (the red circle is named second: it has the larger code)."""
    grid = np.zeros((3, 3, 3), np.int64)
    grid[0, 0, 0], grid[0, 2, 0] = 1, 1 + 3 * 2 + 1  # red square top left, blue circle bottom left
    grid[1, 1, 2] = 1 + 3 * 1 + 2  # green triangle, middle right
    grid[2, 1, 2], grid[2, 1, 0] = 1 + 3 * 3 + 1, 1 + 3 * 0 + 1  # yellow circle middle right, red circle middle left
    return CaptionsTask(grid, "test")


def test_named_cells_follow_the_captions_order():
    task = hand_task()
    assert task.captions == [
        "a red square above a blue circle",
        "a green triangle",
        "a red circle left of a yellow circle",
    ]
    want = np.full((3, 8), -1)
    want[0, :7] = [-1, 0, 0, -1, -1, 6, 6]  # red square in cell 0, blue circle in cell 6
    want[1, :3] = [-1, 5, 5]  # the triangle in cell 5 (row 1, column 2)
    want[2, :8] = [-1, 3, 3, -1, -1, -1, 5, 5]  # red circle in cell 3, yellow circle in cell 5
    np.testing.assert_array_equal(C.named_cells(task), want)


def reference_measures(alphas, task):
    """The measures with plain loops over captions, steps and cells (float64)."""
    L = alphas.shape[2]
    entropies, hits, deviations, penalties = [], [], [], []
    for b, caption in enumerate(task.captions):
        words = caption.split()
        cells = {}
        codes = task.grid[b].reshape(-1)
        named = sorted((int(codes[c]), c) for c in range(L) if codes[c])
        obj = -1
        for t, word in enumerate(words):
            if word == "a":
                obj += 1
            p = [float(x) for x in alphas[b, t]]
            entropies.append(-sum(x * math.log(x) for x in p if x > 0))
            if word in SHAPE_WORDS:
                cells[t] = named[obj][1]
                hits.append(max(range(L), key=lambda i: (p[i], -i)) == cells[t])
        tau = len(words) + 1  # the words and EOS
        cover = [sum(float(alphas[b, t, i]) for t in range(tau)) for i in range(L)]
        deviations.append(math.sqrt(sum((c - tau / L) ** 2 for c in cover) / L))
        penalties.append(sum((1 - c) ** 2 for c in cover))
    return {
        "attention_entropy": sum(entropies) / len(entropies),
        "attention_accuracy": sum(hits) / len(hits),
        "coverage_deviation": sum(deviations) / len(deviations),
        "coverage_penalty": sum(penalties) / len(penalties),
    }


def measures_of(alphas, task):
    return C.attention_measures(alphas, task.caption_ids, task.caption_lengths, C.named_cells(task))


def test_attention_measures_match_loops_on_a_hand_made_map(rng):
    task = hand_task()
    T, L = 9, 9  # the longest caption has 8 words, then EOS
    alphas = rng.dirichlet(np.full(L, 0.3), size=(3, T))
    alphas[0, 2] = np.eye(L)[0]  # "square" on the red square: entropy 0, a hit
    alphas[0, 6] = np.eye(L)[2]  # "circle" (the blue one, cell 6) on cell 2: a miss
    alphas[1, :] = 1.0 / L  # the one-object caption uniform: entropy log 9, argmax the first cell (a miss)
    alphas[2, 7, 5] += 5.0  # "circle" (yellow, cell 5): a hit
    alphas[2, 7] /= alphas[2, 7].sum()
    alphas[:, :, :] = np.where(alphas < 1e-300, 0.0, alphas)
    got = measures_of(alphas, task)
    want = reference_measures(alphas, task)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key
    assert set(got) == set(want)
    # the steps after a caption's EOS are not counted: changing them changes nothing
    alphas[1, 4:] = np.eye(L)[3]
    assert measures_of(alphas, task) == got


def test_attention_measures_of_extreme_maps():
    task = hand_task()
    L = 9
    uniform = np.full((3, 9, L), 1.0 / L)
    m = measures_of(uniform, task)
    assert m["attention_entropy"] == pytest.approx(math.log(9), rel=1e-12)
    assert m["coverage_deviation"] == pytest.approx(0.0, abs=1e-12)  # every cell gets the even share
    # on the named cells at every step: entropy 0 and every shape word a hit
    focused = np.zeros((3, 9, L))
    cells = C.named_cells(task)
    for b in range(3):
        for t in range(9):
            named = cells[b, t] if t < 8 and cells[b, t] >= 0 else 4
            focused[b, t, named] = 1.0
    m = measures_of(focused, task)
    assert m["attention_entropy"] == 0.0 and m["attention_accuracy"] == 1.0


def test_the_coverage_penalty_is_the_captioners_own_term():
    """λ · coverage_penalty is what Captioner.loss_and_grad adds to the cross-entropy (soft attention)."""
    task = attnc.datasets.captions(12, seed=3, dtype=np.float64)
    model = attnc.models.Captioner(13, 17, 8, 16, 8, doubly_stochastic=0.7, dtype=np.float64, seed=1)
    batch = task.batch(np.arange(len(task)))
    loss, _ = model.loss_and_grad(batch)
    logits, alphas = model(batch.features, batch.tgt_in, return_alphas=True)
    real = batch.tgt_out != -100
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp, np.where(real, batch.tgt_out, 0)[..., None], -1)[..., 0][real].mean()
    m = C.attention_measures(alphas, task.caption_ids, task.caption_lengths, C.named_cells(task))
    assert loss - ce == pytest.approx(0.7 * m["coverage_penalty"], rel=1e-9)


def untimed(value):
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if "seconds" not in k}
    return value


def test_the_quick_comparison(tmp_path):
    res = quiet_run(compare=True, quick=True, steps=4, eval_every=2, threads=2, run_dir=tmp_path / "a")
    m = res.metrics
    names = ["soft", "soft+ds1", "hard", "hard+ds1"]
    assert m["configurations"] == names and list(m["results"]) == names and list(m["curves"]) == names
    assert m["steps"] == 4 and m["threads"] == 2 and m["cpu"] and m["paper"]["table1"]["coco"]["hard"][3] == 25.0
    for name in names:
        r, c = m["results"][name], m["curves"][name]
        assert r["attention"] == name[:4] and r["doubly_stochastic"] == (1.0 if "+ds" in name else 0.0)
        assert c["steps"] == [2, 4]
        for key in C.MEASURES:
            assert len(c[key]) == 2 and c[key][-1] == r[key], (name, key)  # the final scores are the step-4 ones
        assert 0 <= r["exact_match"] <= r["token_accuracy"] <= 1 and 0 <= r["attention_accuracy"] <= 1
        assert 0 <= r["attention_entropy"] <= math.log(9) + 1e-6
    # the penalty pulls the coverage towards one unit per cell already in 4 steps
    assert m["results"]["soft+ds1"]["coverage_penalty"] < m["results"]["soft"]["coverage_penalty"]
    assert (tmp_path / "a" / "compare.png").stat().st_size > 10_000
    assert (tmp_path / "a" / "table.md").read_text().count("\n") == 2 + len(names)
    # the same bits on one thread
    one = quiet_run(compare=True, quick=True, steps=4, eval_every=2, threads=1, run_dir=tmp_path / "b")
    assert untimed({**one.metrics, "threads": 2}) == untimed(m)


def test_penalties_add_configurations_and_save_saves_each_model(tmp_path):
    save = tmp_path / "cap.npz"
    res = quiet_run(compare=True, penalties="0.5,2", quick=True, steps=2, run_dir=tmp_path / "a", save=str(save))
    m = res.metrics
    for name in m["configurations"]:
        path = save if name == "soft" else tmp_path / f"cap_{name}.npz"
        model = attnc.load(path)
        assert model.attention_kind == name[:4] and model.doubly_stochastic == m["results"][name]["doubly_stochastic"]
        last = sorted((tmp_path / "a" / "checkpoints").glob(f"{name.replace('+', '_')}-*"))[-1]
        for k, v in attnc.load(last / "model.npz").state_dict().items():
            np.testing.assert_array_equal(model.state_dict()[k], v)
    assert m["configurations"] == ["soft", "soft+ds0.5", "soft+ds2", "hard", "hard+ds0.5", "hard+ds2"]
    assert [m["results"][n]["doubly_stochastic"] for n in m["configurations"]] == [0, 0.5, 2, 0, 0.5, 2]


def fake_run(seed, em, curve):
    r = {"attention": "soft", "doubly_stochastic": 0.0, "exact_match": em, "train_seconds": 1.0 + seed}
    return {
        "seed": seed,
        "configurations": ["soft"],
        "train_seconds": 2.0 * seed,
        "results": {"soft": r},
        "curves": {"soft": {"steps": [5, 10], "exact_match": curve}},
    }


def test_summarise_takes_medians_and_ranges_over_seeds():
    runs = [fake_run(0, 0.2, [0.1, 0.2]), fake_run(1, 0.9, [0.5, 0.9]), fake_run(2, 0.4, [0.3, 0.4])]
    s = C.summarise(runs)
    assert s["seeds"] == [0, 1, 2] and s["train_seconds_by_seed"] == [0.0, 2.0, 4.0] and s["train_seconds"] == 2.0
    r = s["results"]["soft"]
    assert (r["exact_match"], r["exact_match_low"], r["exact_match_high"]) == (0.4, 0.2, 0.9)
    assert r["doubly_stochastic"] == 0.0 and r["attention"] == "soft" and r["train_seconds"] == 2.0
    c = s["curves"]["soft"]
    assert c["steps"] == [5, 10] and c["exact_match"] == [0.3, 0.4]
    assert c["exact_match_low"] == [0.1, 0.2] and c["exact_match_high"] == [0.5, 0.9]
    other = fake_run(3, 0.5, [0.1, 0.1])
    other["configurations"] = ["hard"]
    with pytest.raises(ValueError, match="different configurations"):
        C.summarise(runs + [other])


@pytest.mark.parametrize(
    "config,match",
    [
        (dict(penalties="1"), "--penalties sets the λ values of --compare"),
        (dict(compare=True, penalties="0"), "distinct comma-separated numbers > 0"),
        (dict(compare=True, penalties="-1"), "distinct comma-separated numbers > 0"),
        (dict(compare=True, penalties="1,1"), "distinct comma-separated numbers > 0"),
        (dict(compare=True, penalties="x"), "distinct comma-separated numbers > 0"),
        (dict(compare=True, penalties="nan"), "distinct comma-separated numbers > 0"),
        (dict(compare=True, attention="hard"), "not allowed with argument"),
    ],
)
def test_argument_errors(config, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        quiet_run(quick=True, steps=1, run_dir=tmp_path / "x", **config)
    assert not (tmp_path / "x").exists()  # refused before the run's folder is made


def test_the_modules_examples_run():
    import doctest

    failures, tried = doctest.testmod(C, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert tried >= 5 and failures == 0
