"""Sizes that another argument bounds are refused before anything is
allocated for them: a ValueError naming the argument and the bound, quickly
and in little memory (tracemalloc is the witness: NumPy reports its arrays
to it), where these calls used to allocate first (a MemoryError for 14.6
TiB, 764 MiB, minutes of drawing) or never return.
"""

import datetime
import importlib
import itertools
import time
import tracemalloc

import numpy as np
import pytest

import attnc
import attnc.datasets
import attnc.models
from attnc.experiments import _common

MiB = 2**20
captions_module = importlib.import_module("attnc.datasets.captions")  # attnc.datasets.captions is the function
dates_module = importlib.import_module("attnc.datasets.dates")


def refused(call, match, *, seconds=2.0, peak=2 * MiB):
    """call() raises ValueError (matching) within seconds, its tracemalloc peak under peak."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=match):
            call()
        elapsed = time.perf_counter() - start
        used = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < seconds, f"refused after {elapsed:.2f} s"
    assert used < peak, f"refusing took {used / MiB:.1f} MiB"


def _gpt():
    return attnc.models.GPT(7, 6, n_layer=1, n_head=2, n_embd=8, seed=0).eval()


def test_decode_refuses_max_new_tokens_beyond_the_positions_first():
    """nn.decode allocated its (B, max_new_tokens) output before the C check:
    10**12 was a MemoryError for 14.6 TiB instead of this ValueError."""
    m = _gpt()
    layers, emb, pos = list(m.encoder.layers), m.wte.weight, m.wpe.weight
    prompt = np.zeros((2, 2), np.int64)
    decode = lambda n, p=prompt, **kw: attnc.nn.decode(layers, emb, pos, emb, p, n, norm=m.ln_f, **kw)  # noqa: E731
    for n in (10**12, 2**62, 6):
        refused(lambda: decode(n), r"prompt length 2 \+ max_new_tokens \d+ - 1 exceeds the 6 rows of positions")
    assert decode(5).shape[0] == 2  # 2 + 5 - 1 = 6 positions: allowed
    # what does not size the output is checked once, by the C call
    refused(lambda: decode(5, eos=7), r"eos 7 is outside the output's vocabulary \[0, 7\)")
    refused(lambda: decode(5, np.array([[0, 7]])), r"prompt holds token 7, outside the embedding's \[0, 7\)")
    refused(lambda: decode(5, np.array([[0, -1]])), "prompt holds token -1")
    refused(lambda: decode(10**12, np.zeros((2, 0), np.int64)), "at least one token")
    with pytest.raises(ValueError, match="positions must be 2-d"):
        attnc.nn.decode(layers, emb, pos[0], emb, prompt, 1)


def test_models_generate_refuse_before_allocating():
    m = _gpt()
    refused(lambda: m.generate(np.zeros((3, 1), np.int64), 10**12), "block_size=6")
    s2s = attnc.models.Seq2SeqTransformer(5, 6, 8, 2, 1, 1, 8, max_len=4, seed=0)
    refused(lambda: s2s.generate(np.zeros((3, 2), np.int64), 10**12, bos=1), "exceeds max_len=4")


def test_seq2seq_positional_table_is_not_sized_by_max_len():
    """max_len only bounds the lengths: a model with a huge max_len builds no
    table of max_len rows, and decodes with the rows it needs."""
    tracemalloc.start()
    try:
        m = attnc.models.Seq2SeqTransformer(5, 6, 8, 2, 1, 1, 8, max_len=10**12, seed=0).eval()
        used = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert used < MiB, f"{used / MiB:.1f} MiB"
    small = attnc.models.Seq2SeqTransformer(5, 6, 8, 2, 1, 1, 8, max_len=6, seed=0).eval()
    src = np.array([[1, 2, 3], [4, 0, 0]])
    np.testing.assert_array_equal(m.generate(src, 5, bos=1), small.generate(src, 5, bos=1))
    np.testing.assert_array_equal(m(src, src[:, :2]), small(src, src[:, :2]))
    np.testing.assert_array_equal(m._positions(3), attnc.nn.sinusoidal_encoding(3, 8))


def test_embedding_checks_ids_before_its_output():
    """An id outside the table was refused by C after the (n, D) output was
    allocated: 764 MiB for 100,000 int8 ids and D = 1000."""
    w = np.ones((10, 1000))
    ids = np.full(100_000, 3, np.int8)
    for bad, i in ((50, 99_999), (-1, 5)):
        ids_bad = ids.copy()
        ids_bad[i] = bad
        refused(lambda: attnc.nn.embedding(ids_bad, w), rf"input\[{i}\] = {bad} is outside \[0, 10\)")
        refused(lambda: attnc.vjp(attnc.nn.embedding, ids_bad, w), rf"input\[{i}\]")
    layer = attnc.nn.Embedding(10, 1000)
    refused(lambda: layer(np.full((300, 300), 10)), r"input\[0\] = 10")
    np.testing.assert_array_equal(
        attnc.nn.embedding(np.array([[9, 0]]), np.arange(20.0).reshape(10, 2)), [[[18.0, 19.0], [0.0, 1.0]]]
    )


def test_reverse_task_refuses_more_distinct_sequences_than_exist():
    """unique=True with n above the number of sequences drew until the space
    was exhausted (or forever: 10**8 of the 7.2 million sequences over 3
    digits of lengths 1..14 ran for minutes, gigabytes)."""
    refused(
        lambda: attnc.datasets.reverse_task(10**8, vocab=3, min_len=1, max_len=14, unique=True),
        r"n \(100000000\) exceeds the 7174452 distinct sequences of lengths 1..14 over 3 digits",
    )
    space = sum(2**k for k in range(1, 7))  # 126
    refused(
        lambda: attnc.datasets.reverse_task(space + 1, vocab=2, min_len=1, max_len=6, unique=True),
        "exceeds the 126 distinct",
    )
    every = attnc.datasets.reverse_task(space, vocab=2, min_len=1, max_len=6, unique=True)
    assert len(set(every.keys().tolist())) == space
    refused(lambda: attnc.datasets.reverse_task(6, vocab=1, min_len=1, max_len=5, unique=True), "the 5 distinct")
    assert len(attnc.datasets.reverse_task(10**3, vocab=1, min_len=1, max_len=5)) == 10**3  # with repeats: any n


def test_sort_task_refuses_an_empty_split():
    """A split no sequence belongs to made sort_task draw forever."""
    for length, digits in ((1, 1), (2, 1), (1, 2), (3, 1)):
        splits = {attnc.datasets.sort_split(s) for s in itertools.product(range(digits), repeat=length)}
        for split in ("train", "test"):
            if split in splits:
                assert len(attnc.datasets.sort_task(5, length, digits, split=split)) == 5
            else:
                refused(
                    lambda: attnc.datasets.sort_task(5, length, digits, split=split),
                    rf"the {split} split of the {digits}\*\*{length} sequences is empty",
                )
    assert len(attnc.datasets.sort_task(0, 1, 1, split="test")) == 0


def test_dates_refuse_more_distinct_sources_than_days_times_formats():
    """dates(10**9, unique=True) drew for 210 s and 89 MiB before refusing."""
    days = datetime.date(2049, 12, 31).toordinal() - datetime.date(1950, 1, 1).toordinal() + 1
    bound = days * len(dates_module.FORMATS)
    refused(lambda: attnc.datasets.dates(10**9, unique=True), rf"exceeds the {bound} distinct sources")
    two = datetime.date(1951, 12, 31).toordinal() - datetime.date(1950, 1, 1).toordinal() + 1
    refused(
        lambda: attnc.datasets.dates(two * 2 + 1, unique=True, years=(1950, 1951), formats=dates_module.FORMATS[:2]),
        f"the {two * 2} distinct",
    )


def test_captions_refuse_more_distinct_images_than_exist():
    """The bound is the number of distinct images the draw rules make, counted
    here by enumerating them."""
    G, objects = captions_module.GRID, captions_module.NUM_OBJECTS
    grids = set()
    for obj in range(objects):
        for cell in range(G * G):
            g = np.zeros(G * G, np.int64)
            g[cell] = obj + 1
            grids.add(g.tobytes())
    for o1, o2 in itertools.permutations(range(objects), 2):
        for vertical, line, a, b in itertools.product((False, True), range(G), range(G), range(G)):
            if a != b:
                g = np.zeros(G * G, np.int64)
                g[a * G + line if vertical else line * G + a] = o1 + 1
                g[b * G + line if vertical else line * G + b] = o2 + 1
                grids.add(g.tobytes())
    refused(lambda: attnc.datasets.captions(len(grids) + 1, unique=True), rf"exceeds the {len(grids)} distinct images")
    refused(lambda: attnc.datasets.captions(10**9, split="test", unique=True), "distinct images")


def test_nearest_prototype_is_not_sized_by_n_way():
    """Classes above every label have no support and are never predicted: a
    huge n_way gives the same predictions, in the same memory."""
    ep = attnc.datasets.FewShotTask(3, 2, dim=4, noise=0.5).episodes(50, seed=0)
    want = attnc.datasets.nearest_prototype(ep.features, ep.labels, 3)
    tracemalloc.start()
    try:
        got = attnc.datasets.nearest_prototype(ep.features, ep.labels, 10**9)
        used = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, want)
    assert used < MiB
    assert attnc.datasets.nearest_prototype(np.zeros((2, 1, 3)), np.zeros((2, 0), np.int64), 10**9).tolist() == [0, 0]


def test_experiments_refuse_a_save_path_before_training(tmp_path, capsys):
    """--save into a missing directory failed only after the whole run."""
    import attnc.experiments.gpt_sort as experiment

    with pytest.raises(SystemExit):
        _common.parse(_common.build_parser(experiment), ["--save", str(tmp_path / "missing" / "model.npz")])
    assert "is not a writable directory" in capsys.readouterr().err
    parsed = _common.parse(_common.build_parser(experiment), ["--save", str(tmp_path / "model.npz")])
    assert parsed.save.endswith("model.npz")
