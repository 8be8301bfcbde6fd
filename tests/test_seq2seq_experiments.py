"""attnc.experiments.bahdanau_length and luong_comparison: their --quick runs
(the curves' and the table's arrays, sane values, the same bits for the same
seed on 1 and 2 threads, the plot and the table in the run folder) and the
pieces they share (attnc.experiments._translation): the length-stratified
held-out set, BLEU against a hand-checked example, the perplexity against the
model's own loss, batched greedy decoding against one sentence at a time."""

import argparse
import contextlib
import io
import json

import numpy as np
import pytest

import attnc
import attnc.experiments as E
from attnc.experiments import _runs, _translation, bahdanau_length, luong_comparison


def quiet_run(name, **config):
    with contextlib.redirect_stdout(io.StringIO()):
        return E.run(name, no_progress=True, **config)


def untimed(metrics):
    return {k: v for k, v in metrics.items() if not _runs.is_timing(k)}


def test_bleu_of_a_hand_checked_sentence():
    # hyp "the cat sat on the mat ." against "the cat sat on a mat .": clipped n-gram matches
    # 6/7 (the second "the" unmatched), 4/6, 2/5, 1/4; equal lengths, so no brevity penalty
    want = 100 * (6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** 0.25
    assert _translation.bleu(["the cat sat on the mat ."], ["the cat sat on a mat ."]) == pytest.approx(want, rel=1e-12)
    assert _translation.bleu(["a b c d e"], ["a b c d e"]) == pytest.approx(100)
    # corpus BLEU pools the counts: not the mean of the sentences' scores
    pooled = 100 * ((6 + 5) / 12 * (4 + 4) / 10 * (2 + 3) / 8 * (1 + 2) / 6) ** 0.25
    got = _translation.bleu(["the cat sat on the mat .", "a b c d e"], ["the cat sat on a mat .", "a b c d e"])
    assert got == pytest.approx(pooled, rel=1e-12)


def test_stratified_heldout_set():
    task = _translation.stratified(4)
    assert len(task) == 4 * 11 and task.split == "test"
    for i, (lo, hi) in enumerate(zip(_translation.EDGES, _translation.EDGES[1:])):
        assert ((task.lengths[4 * i : 4 * i + 4] >= lo) & (task.lengths[4 * i : 4 * i + 4] < hi)).all()
    assert all(attnc.datasets.translation_split(s) == "test" for s in task.sources)
    assert _translation.stratified(4).sources == task.sources
    assert _translation.bucket_labels()["lengths"][:2] == [8.0, 13.0]
    assert _translation.bucket_labels()["length_hi"][-1] == 60


def test_scores_against_independent_computations():
    task = attnc.datasets.translation_task(40, seed=5, max_len=24)
    cfg = dict(embed_size=8, hidden_size=12, window=4.0)
    model = _translation.build("luong-general", task, cfg, seed=1, input_feeding=False)
    model.eval()
    ids = _translation.decode(model, task, batch_size=16)
    assert ids.shape[1] <= task.lengths.max() + 5
    for i in (0, 7, 39):  # one sentence at a time, unpadded
        alone, _ = model.generate(task.batch([i]).src, max_len=task.lengths.max() + 5, bos=task.bos, eos=task.eos)
        row = alone[0]
        np.testing.assert_array_equal(ids[i, : row.size], row)
        assert (ids[i, row.size :] == task.eos).all()
    s = _translation.scores(model, task, edges=(6, 15, 25))
    nll, count = _translation.token_nll(model, task)
    whole = task.batch(np.arange(40))
    assert s["perplexity"] == pytest.approx(np.exp(model.loss(whole)), rel=1e-5)  # loss: the mean over tokens
    assert s["exact_match"] == task.exact_match(ids).mean()
    assert s["token_accuracy"] == pytest.approx(task.token_accuracy(ids).mean(), rel=1e-12)
    short = task.lengths < 15
    assert s["bleu_by_length"][0] == pytest.approx(
        _translation.bleu(
            [h for h, k in zip(task.decode(ids), short) if k], [t for t, k in zip(task.targets, short) if k]
        ),
        abs=1e-4,
    )
    assert s["perplexity_by_length"][1] == pytest.approx(np.exp(nll[~short].sum() / count[~short].sum()))


def test_bahdanau_length_quick_run(tmp_path, restore_threads):
    import matplotlib

    backend = matplotlib.get_backend()
    matplotlib.use("svg")  # the experiment saves its plot without touching pyplot's backend (a notebook's inline one)
    try:
        runs = [quiet_run("bahdanau_length", quick=True, seed=3, threads=t, run_dir=tmp_path / f"t{t}") for t in (1, 2)]
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(backend)
    m = runs[0].metrics
    n = len(_translation.EDGES) - 1
    assert len(m["lengths"]) == n and m["train_max_len"] == [30, 50]
    for key in ("none_30", "attention_30", "none_50", "attention_50"):
        assert len(m[f"bleu_{key}"]) == n and all(0 <= v <= 100 for v in m[f"bleu_{key}"])
        for score in ("exact_match", "token_accuracy"):
            assert len(m[f"{score}_{key}"]) == n and all(0 <= v <= 1 for v in m[f"{score}_{key}"])
        assert m[f"train_seconds_{key}"] > 0 and np.isfinite(m[f"final_loss_{key}"])
    assert m["parameters_attention_30"] > m["parameters_none_30"] == m["parameters_none_50"]
    assert m["threads"] == 1 and m["cpu"] and "Figure 2" in m["paper"]
    assert isinstance(m["attention_degrades_less_50"], bool)
    assert (tmp_path / "t1" / m["plot"]).stat().st_size > 1000
    # the same seed, the same bits on 1 and 2 threads (the models' too)
    assert runs[1].metrics["threads"] == 2 and untimed(runs[1].metrics) == untimed(m)
    for k, v in runs[0].model.state_dict().items():
        assert v.tobytes() == runs[1].model.state_dict()[k].tobytes(), k
    assert json.loads((tmp_path / "t1" / "result.json").read_text()) == m
    other = quiet_run("bahdanau_length", quick=True, seed=4, train_max_len="20", run_dir=tmp_path / "s4")
    assert other.metrics["train_max_len"] == [20] and "bleu_none_50" not in other.metrics
    assert other.metrics["bleu_none_20"] != m["bleu_none_30"]
    with pytest.raises(ValueError, match="--train-max-len: takes distinct lengths"):
        quiet_run("bahdanau_length", quick=True, train_max_len="30,70", run_dir=tmp_path / "bad")


def test_luong_comparison_quick_run(tmp_path, restore_threads):
    runs = [quiet_run("luong_comparison", quick=True, seed=2, threads=t, run_dir=tmp_path / f"t{t}") for t in (1, 2)]
    m = runs[0].metrics
    assert m["variants"] == list(luong_comparison.ALL) and len(m["variants"]) == 10
    for key in ("bleu", "exact_match", "token_accuracy", "perplexity", "parameters", "train_seconds_by_variant"):
        assert len(m[key]) == 10, key
    assert all(0 <= v <= 100 for v in m["bleu"]) and all(0 <= v <= 1 for v in m["exact_match"] + m["token_accuracy"])
    # a perplexity above 1 and below a uniform guess's (the vocabulary and EOS... every id)
    assert all(1 < v < 2 * len(attnc.datasets.translation.TARGET_VOCAB) for v in m["perplexity"])
    best = int(np.argmax(m["bleu"]))
    assert m["best"] == m["variants"][best] and m["best_margin_bleu"] >= 0
    i, j = m["variants"].index("local-p"), m["variants"].index("local-p-no-feed")
    assert m["feeding_gain_bleu_local-p"] == pytest.approx(m["bleu"][i] - m["bleu"][j], abs=1e-3)
    assert m["parameters"][i] > m["parameters"][j]  # input feeding widens the decoder's LSTM input
    table = (tmp_path / "t1" / "table.md").read_text()
    assert table.count("\n") == 12 and "| local-p-no-feed |" in table
    assert runs[1].metrics["threads"] == 2 and untimed(runs[1].metrics) == untimed(m)
    two = quiet_run("luong_comparison", quick=True, variants="global-dot,local-p", run_dir=tmp_path / "two")
    assert two.metrics["variants"] == ["global-dot", "local-p"] and "feeding_gain_bleu_local-p" not in two.metrics
    with pytest.raises(ValueError, match="--variants: takes 'all'"):
        quiet_run("luong_comparison", quick=True, variants="global-cosine", run_dir=tmp_path / "bad")


def test_flag_parsers():
    assert bahdanau_length.max_lengths("30,50") == (30, 50)
    for bad in ("7", "61", "30,30", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            bahdanau_length.max_lengths(bad)
    assert luong_comparison.variants("all") == luong_comparison.ALL
    assert luong_comparison.variants("local-m-no-feed") == ("local-m-no-feed",)
    for bad in ("local-q", "local-m,local-m", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            luong_comparison.variants(bad)
