"""attnc.datasets for the recurrent experiments: the Vocab helper (ids,
round trips, padding, masks, teacher-forcing targets), dates (formats, ISO
targets checked with datetime, held-out splits) and captions (sentences
checked against shapes and colours recovered from the pixels, feature grids,
held-out splits). NumPy only, a few seconds."""

import datetime
import re

import numpy as np
import pytest

import attnc
from attnc.datasets import (
    IGNORE_INDEX,
    CaptionBatch,
    CaptionsTask,
    DatesTask,
    Seq2SeqBatch,
    TextBatch,
    Vocab,
    caption_of,
    caption_split,
    captions,
    date_split,
    dates,
    format_date,
)
from attnc.datasets.captions import COLOURS, SHAPES, WORDS
from attnc.datasets.dates import FORMATS, MAX_INPUT_LEN

# --------------------------------------------------------------------------- Vocab


def test_vocab_ids_and_round_trips():
    v = Vocab.chars("abc ")
    assert (v.pad, v.bos, v.eos, v.unk, len(v)) == (0, 1, 2, None, 7)
    assert v.tokens == ["<pad>", "<bos>", "<eos>", "a", "b", "c", " "]
    assert v.encode("cab a").tolist() == [5, 3, 4, 6, 3] and v.encode("cab a").dtype == np.int64
    assert v.encode("ab", bos=True, eos=True).tolist() == [1, 3, 4, 2]
    assert v.encode(["a", "c"]).tolist() == [3, 5] and v.encode("").tolist() == []
    for s in ["", "a", "abc cba", "  b"]:
        assert v.decode(v.encode(s)) == s
        assert v.decode(v.encode(s, bos=True, eos=True)) == s
    # decode stops at the first EOS and drops PAD, BOS and ignored targets
    assert v.decode([1, 3, 0, 4, IGNORE_INDEX, 2, 5]) == "ab"
    assert v.decode([3, 2, 5], stop_at_eos=False) == "ac"
    assert v.decode([3, 2, 5], stop_at_eos=False, skip_special=False) == "a<eos>c"
    with pytest.raises(KeyError):
        v.encode("abd")
    assert Vocab.chars("abc", unk=True).encode("adb").tolist() == [4, 3, 5]
    # the same alphabet gives the same ids, whatever data follows
    assert Vocab.chars("abc ") == v and v.encode("cab").tolist() == Vocab.chars("abc ").encode("cab").tolist()

    w = Vocab.words(["a", "red", "square"])
    assert (w.pad, w.bos, w.eos, w.unk, len(w)) == (0, 1, 2, 3, 7)
    assert w.encode("a red  square").tolist() == [4, 5, 6]
    assert w.decode(w.encode(" a  red square ")) == "a red square"
    assert w.encode("a blue square").tolist() == [4, 3, 6] and w.decode([4, 3, 6]) == "a <unk> square"
    assert w["red"] == 5 and "red" in w and "blue" not in w and w.token(6) == "square"
    assert w.decode_batch(np.array([[4, 5, 2, 0], [6, 2, 0, 0]])) == ["a red", "square"]
    for bad in (["a", "a"], ["<pad>"], ["two words"]):
        with pytest.raises(ValueError):
            Vocab.words(bad)
    with pytest.raises(ValueError):
        Vocab(["ab"], kind="char")


def test_vocab_padding_masks_and_teacher_forcing():
    v = Vocab.chars("0123456789")
    texts = ["123", "4", "56789", ""]
    p = v.pad_batch(texts)
    assert p.ids.shape == (4, 5) and p.ids.dtype == np.int64
    assert p.lengths.tolist() == [3, 1, 5, 0]
    assert p.key_padding_mask.dtype == bool
    assert np.array_equal(p.key_padding_mask, np.arange(5)[None, :] >= p.lengths[:, None])  # True = padding
    assert np.all(p.ids[p.key_padding_mask] == v.pad)
    assert v.decode_batch(p.ids) == texts
    assert v.pad_batch(texts, length=7).ids.shape == (4, 7)
    assert v.pad_batch(["12"], bos=True, eos=True).ids.tolist() == [[1, 4, 5, 2]]
    with pytest.raises(ValueError):
        v.pad_batch(texts, length=4)

    tf = v.teacher_forcing(texts)
    T = 6
    assert tf.tgt_in.shape == tf.tgt_out.shape == tf.key_padding_mask.shape == (4, T)
    assert tf.lengths.tolist() == [4, 2, 6, 1]
    for row, s in enumerate(texts):
        ids, n = v.encode(s), len(s)
        assert tf.tgt_in[row, 0] == v.bos and np.array_equal(tf.tgt_in[row, 1 : n + 1], ids)
        assert np.all(tf.tgt_in[row, n + 1 :] == v.pad)
        assert np.array_equal(tf.tgt_out[row, :n], ids) and tf.tgt_out[row, n] == v.eos
        assert np.all(tf.tgt_out[row, n + 1 :] == IGNORE_INDEX)
        assert np.array_equal(tf.key_padding_mask[row], np.arange(T) >= n + 1)
    # the decoder input is the output shifted right by one
    real = ~tf.key_padding_mask[:, 1:]
    assert np.array_equal(tf.tgt_in[:, 1:][real], tf.tgt_out[:, :-1][real])
    assert np.array_equal(tf.tgt_out != IGNORE_INDEX, ~tf.key_padding_mask)
    assert v.teacher_forcing(texts, length=9).tgt_out.shape == (4, 9)

    b = v.batch(["12", "345"], ["9", "87"])
    assert isinstance(b, TextBatch) and isinstance(b, Seq2SeqBatch)
    assert b.src.tolist() == [[4, 5, 0], [6, 7, 8]] and b.src_lengths.tolist() == [2, 3]
    assert b.src_key_padding_mask.tolist() == [[False, False, True], [False, False, False]]
    assert b.tgt_in.tolist() == [[1, 12, 0], [1, 11, 10]]
    assert b.tgt_out.tolist() == [[12, 2, IGNORE_INDEX], [11, 10, 2]]
    assert b.tgt_lengths.tolist() == [2, 3] and b.num_tokens == 5

    # ignored targets count for nothing in attnc.nn.cross_entropy
    logits = np.random.default_rng(0).standard_normal((4, T, len(v)))
    loss = attnc.nn.cross_entropy(logits.reshape(-1, len(v)), tf.tgt_out.reshape(-1))
    keep = tf.tgt_out.reshape(-1) != IGNORE_INDEX
    lp = logits.reshape(-1, len(v))[keep]
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    assert np.isclose(float(loss), -lp[np.arange(keep.sum()), tf.tgt_out.reshape(-1)[keep]].mean())


# --------------------------------------------------------------------------- dates

_STRPTIME = {
    "weekday_d_month_y": "%A %d %B %Y",
    "dd/mm/yy": "%d/%m/%y",
    "mon_d,_y": "%b %d, %Y",
    "yyyy.mm.dd": "%Y.%m.%d",
    "d_mon_y": "%d %b %Y",
    "month_dth,_y": "%B %d, %Y",
    "mm/dd/yyyy": "%m/%d/%Y",
    "dd-mm-yyyy": "%d-%m-%Y",
    "d_month_y": "%d %B %Y",
    "wkd,_mon_d,_y": "%a, %b %d, %Y",
    "the_dth_of_month_y": "the %d of %B %Y",
    "month_d,_y": "%B %d, %Y",
    "d.m.yy": "%d.%m.%y",
    "yyyymmdd": "%Y%m%d",
    "dth_month_y": "%d %B %Y",
    "yyyy-mm-dd": "%Y-%m-%d",
}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_SUFFIX = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}


def _parse(source: str, fmt: str) -> datetime.date:
    """The date a source string names, read back with strptime (ordinal
    suffixes checked and dropped; two-digit years in 1950-2049)."""
    for m in re.finditer(r"\b(\d+)(st|nd|rd|th)\b", source):
        assert _SUFFIX.get(int(m.group(1)), "th") == m.group(2), source
    plain = re.sub(r"\b(\d+)(?:st|nd|rd|th)\b", r"\1", source)
    d = datetime.datetime.strptime(plain, _STRPTIME[fmt]).date()
    if "%y" in _STRPTIME[fmt] and d.year > 2049:  # strptime puts 50-68 in 20xx
        d = d.replace(year=d.year - 100)
    first = source.split()[0].rstrip(",")
    if first in _WEEKDAYS or first in [w[:3] for w in _WEEKDAYS]:
        assert _WEEKDAYS[d.weekday()].startswith(first), f"{source}: wrong weekday"
    return d


def test_dates_formats_and_iso_targets():
    assert set(_STRPTIME) == set(FORMATS) and len(FORMATS) >= 10
    task = dates(4000, seed=7)
    assert isinstance(task, DatesTask) and len(task) == 4000
    assert set(task.formats.tolist()) == set(range(len(FORMATS)))  # every format appears
    assert task.input_lengths.max() <= MAX_INPUT_LEN == 30
    assert np.array_equal(task.input_lengths, [len(s) for s in task.sources])
    mapping = {}
    for s, t, d, f in zip(task.sources, task.targets, task.dates, task.formats):
        iso = datetime.date.fromisoformat(t)
        assert t == iso.isoformat() and len(t) == 10
        assert iso == d.astype(datetime.date)
        assert 1950 <= iso.year <= 2049
        assert _parse(s, FORMATS[f]) == iso, (s, FORMATS[f], t)
        assert format_date(iso, FORMATS[f]) == s
        assert mapping.setdefault(s, t) == t  # a source names one date
    # the examples of the issue
    d = datetime.date(2026, 11, 22)
    assert format_date(d, "dd/mm/yy") == "22/11/26" and format_date(d, "mon_d,_y") == "nov 22, 2026"
    assert format_date(d, "weekday_d_month_y") == "sunday 22 november 2026"  # a Sunday
    assert format_date("2022-11-22", "weekday_d_month_y") == "tuesday 22 november 2022"
    assert format_date(datetime.date(1955, 3, 1), "dd/mm/yy") == "01/03/55"
    assert format_date(datetime.date(2011, 3, 12), "dth_month_y") == "12th march 2011"
    # the longest day and month names stay within 30 characters
    longest = datetime.date(2025, 9, 30)  # a Tuesday; check Wednesday too
    for day in (longest, datetime.date(2026, 9, 30)):
        assert max(len(format_date(day, f)) for f in FORMATS) <= MAX_INPUT_LEN
    # a subset of formats and years
    few = dates(300, seed=1, formats=["yyyymmdd", "dd/mm/yy"], years=(1990, 1999))
    assert set(few.formats.tolist()) == {FORMATS.index("yyyymmdd"), FORMATS.index("dd/mm/yy")}
    assert all(t.startswith("199") for t in few.targets)
    with pytest.raises(ValueError):
        dates(3, formats=["nope"])
    with pytest.raises(ValueError):
        dates(3, years=(1900, 2000))


def test_dates_reproducible_and_heldout_disjoint():
    a, b = dates(1000, seed=3), dates(1000, seed=3)
    assert a.sources == b.sources and np.array_equal(a.src_ids, b.src_ids) and np.array_equal(a.formats, b.formats)
    assert dates(1000, seed=4).sources != a.sources
    assert dates(5000, seed=3).sources[:1000] == a.sources  # a smaller set is a prefix of a larger one

    test = dates(2000, seed=1, split="test", unique=True)
    train = dates(10000, seed=2)
    assert len(set(test.sources)) == 2000
    assert not set(test.sources) & set(train.sources)
    assert all(date_split(s) == "test" for s in test.sources)
    assert all(date_split(s) == "train" for s in train.sources[:2000])
    assert set(test.formats.tolist()) == set(range(len(FORMATS)))
    # held-out dates: no date of the test split in any training format
    test_d = dates(500, seed=1, split="test", split_by="date")
    train_d = dates(5000, seed=2, split_by="date")
    assert not set(test_d.targets) & set(train_d.targets)


def test_dates_batches_and_scoring():
    task = dates(300, seed=5)
    assert task.src_vocab.decode_batch(task.src_ids) == task.sources
    assert task.tgt_vocab.decode_batch(task.tgt_ids) == task.targets
    assert (task.pad, task.bos, task.eos) == (0, 1, 2) and len(task.tgt_vocab) == 14
    idx = np.arange(40, 104)
    b = task.batch(idx)
    S = int(task.input_lengths[idx].max())
    assert isinstance(b, TextBatch) and b.src.shape == (64, S) and b.tgt_in.shape == b.tgt_out.shape == (64, 11)
    assert np.array_equal(b.src_lengths, task.input_lengths[idx])
    assert np.array_equal(b.src_key_padding_mask, np.arange(S)[None, :] >= b.src_lengths[:, None])
    assert np.all(b.src[b.src_key_padding_mask] == task.pad)
    assert [task.src_vocab.decode(r) for r in b.src] == [task.sources[i] for i in idx]
    assert np.all(b.tgt_in[:, 0] == task.bos) and np.all(b.tgt_out[:, 10] == task.eos)
    assert np.array_equal(b.tgt_in[:, 1:], b.tgt_out[:, :-1]) and not b.tgt_key_padding_mask.any()
    assert task.decode(b.tgt_out) == [task.targets[i] for i in idx] and b.num_tokens == 64 * 11
    assert sum(len(x) for x in task.batches(64)) == 300
    assert [len(x) for x in task.batches(64, shuffle=True, seed=0, drop_last=True)] == [64] * 4
    targets = task.targets_padded()
    assert targets.shape == (300, 11) and np.all(targets[:, -1] == task.eos)
    assert task.exact_match(targets).all()
    wrong = targets.copy()
    wrong[:10, 0] = task.tgt_vocab["0"] if wrong[0, 0] != task.tgt_vocab["0"] else task.tgt_vocab["9"]
    correct = task.exact_match(wrong)
    assert not correct[0] and correct[10:].all()
    by_len = task.accuracy_by(correct)
    assert set(by_len) == set(task.input_lengths.tolist()) and all(0 <= x <= 1 for x in by_len.values())
    assert set(task.accuracy_by(correct, by="format")) <= set(FORMATS)


# --------------------------------------------------------------------------- captions

_RGB_NAMES = {(1.0, 0.0, 0.0): "red", (0.0, 1.0, 0.0): "green", (0.0, 0.0, 1.0): "blue", (1.0, 1.0, 0.0): "yellow"}


def _read_cell(cell):
    """(colour, shape) of an 8 × 8 × 3 cell from its pixels, or None when empty."""
    mask = cell.max(axis=-1) > 0
    if not mask.any():
        return None
    colours = {tuple(float(x) for x in px) for px in cell[mask]}
    assert len(colours) == 1, "one colour per shape"
    rows, cols = np.nonzero(mask)
    box = mask[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
    widths = box.sum(axis=1)
    # every row of a shape is one contiguous run
    for r in box:
        on = np.flatnonzero(r)
        assert on[-1] - on[0] + 1 == len(on)
    if box.all():
        shape = "square"
    elif widths[0] < widths[-1]:
        shape = "triangle"  # widens downwards
    else:
        assert widths[0] == widths[-1] < widths.max()
        shape = "circle"  # narrow at top and bottom, wide in the middle
    return _RGB_NAMES[colours.pop()], shape


def _describe(image):
    """The caption of an image by the documented rule, from its pixels."""
    found = []
    for r in range(3):
        for c in range(3):
            obj = _read_cell(image[8 * r : 8 * r + 8, 8 * c : 8 * c + 8])
            if obj is not None:
                found.append((COLOURS.index(obj[0]), SHAPES.index(obj[1]), r, c, obj))
    assert 1 <= len(found) <= 2
    if len(found) == 1:
        return "a {} {}".format(*found[0][4])
    (_, _, r1, c1, o1), (_, _, r2, c2, o2) = sorted(found)
    assert o1 != o2
    if c1 == c2:
        rel = "above" if r1 < r2 else "below"
    else:
        assert r1 == r2, "two objects share a row or a column"
        rel = "left of" if c1 < c2 else "right of"
    return f"a {o1[0]} {o1[1]} {rel} a {o2[0]} {o2[1]}"


def test_captions_match_the_pixels():
    task = captions(1500, seed=11, dtype=np.float64)
    assert isinstance(task, CaptionsTask)
    images = task.images()
    assert images.shape == (1500, 24, 24, 3) and images.dtype == np.float64
    assert set(np.unique(images).tolist()) <= {0.0, 1.0}
    for i in range(len(task)):
        assert _describe(images[i]) == task.captions[i], (i, task.captions[i])
        assert caption_of(task.grid[i]) == task.captions[i]
    words = {w for c in task.captions for w in c.split()}
    assert words == set(WORDS)  # every colour, shape and relation appears
    assert set(task.num_objects.tolist()) == {1, 2}
    assert task.images([3]).shape == (1, 24, 24, 3) and np.array_equal(task.image(3), images[3])
    assert task.objects(0) == [
        (r, c, *_read_cell(images[0, 8 * r : 8 * r + 8, 8 * c : 8 * c + 8]))
        for r in range(3)
        for c in range(3)
        if _read_cell(images[0, 8 * r : 8 * r + 8, 8 * c : 8 * c + 8])
    ]


def test_captions_feature_grid():
    task = captions(600, seed=2)
    assert task.features.shape == (600, 9, 13) and task.features.dtype == np.float32
    images = task.images()
    cells = images.reshape(600, 3, 8, 3, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(600, 9, 8, 8, 3)
    codes = task.grid.reshape(600, 9)
    # position one-hots: row then column of cell l = 3 row + col
    pos = task.features[..., 7:]
    assert np.array_equal(pos[..., :3].argmax(-1), np.broadcast_to(np.arange(9) // 3, (600, 9)))
    assert np.array_equal(pos[..., 3:].argmax(-1), np.broadcast_to(np.arange(9) % 3, (600, 9)))
    assert np.all(pos.sum(-1) == 2)
    # the features identify the content of every cell: equal features <=> equal cells
    content = task.features[..., :7].reshape(-1, 7)
    table = {}
    for f, code in zip(map(tuple, content.tolist()), codes.reshape(-1).tolist()):
        assert table.setdefault(f, code) == code
    assert len(table) == 13 and len(set(table)) == 13
    occupied = task.features[..., 0] == 1
    assert np.array_equal(occupied, codes > 0)
    mean_rgb = np.where(occupied[..., None], cells.reshape(600, 9, -1, 3).max(axis=2), 0)
    assert np.allclose(task.features[..., 1:4], mean_rgb)
    assert np.allclose(task.features[..., 4], (cells.max(-1) > 0).sum((-1, -2)) / 64)
    # the pixel features are the cells' pixels
    pix = captions(600, seed=2, features="pixels")
    assert pix.features.shape == (600, 9, 198) and np.array_equal(pix.grid, task.grid)
    assert np.array_equal(pix.features[..., :192], cells.reshape(600, 9, 192))
    assert np.array_equal(pix.features[..., 192:], task.features[..., 7:])
    with pytest.raises(ValueError):
        captions(3, features="cnn")


def test_captions_reproducible_and_heldout_disjoint():
    a, b = captions(800, seed=3), captions(800, seed=3)
    assert np.array_equal(a.grid, b.grid) and a.captions == b.captions and np.array_equal(a.features, b.features)
    assert not np.array_equal(captions(800, seed=4).grid, a.grid)
    assert np.array_equal(captions(5000, seed=3).grid[:800], a.grid)
    test = captions(400, seed=1, split="test", unique=True)
    train = captions(8000, seed=2)
    assert len(set(test.keys().tolist())) == 400
    assert not set(test.keys().tolist()) & set(train.keys().tolist())
    assert not {im.tobytes() for im in test.images()} & {im.tobytes() for im in train.images(np.arange(2000))}
    assert all(caption_split(g) == "test" for g in test.grid)
    assert all(caption_split(g) == "train" for g in train.grid[:1000])
    with pytest.raises(ValueError):
        captions(5000, seed=0, split="test", unique=True)  # only ~620 test images exist


def test_captions_batches():
    task = captions(200, seed=9)
    v = task.vocab
    assert (v.pad, v.bos, v.eos, v.unk) == (0, 1, 2, 3) and len(v) == 17 and v["a"] == 4
    assert task.vocab.decode_batch(task.caption_ids) == task.captions
    idx = np.arange(20, 52)
    b = task.batch(idx)
    T = int(task.caption_lengths[idx].max()) + 1
    assert isinstance(b, CaptionBatch) and len(b) == 32
    assert b.features.shape == (32, 9, 13) and np.array_equal(b.features, task.features[idx])
    assert b.tgt_in.shape == b.tgt_out.shape == b.tgt_key_padding_mask.shape == (32, T)
    for row, i in enumerate(idx):
        ids, n = v.encode(task.captions[i]), len(task.captions[i].split())
        assert b.tgt_in[row, 0] == v.bos and np.array_equal(b.tgt_in[row, 1 : n + 1], ids)
        assert np.all(b.tgt_in[row, n + 1 :] == v.pad)
        assert np.array_equal(b.tgt_out[row, :n], ids) and b.tgt_out[row, n] == v.eos
        assert np.all(b.tgt_out[row, n + 1 :] == IGNORE_INDEX)
        assert np.array_equal(b.tgt_key_padding_mask[row], np.arange(T) >= n + 1)
        assert b.tgt_lengths[row] == n + 1
    assert b.num_tokens == int((task.caption_lengths[idx] + 1).sum())
    assert task.decode(b.tgt_out) == [task.captions[i] for i in idx]
    targets = task.targets_padded()
    assert targets.shape == (200, 9) and task.exact_match(targets).all()
    assert not task.exact_match(["a red square"] * 200).all()
    assert sum(len(x) for x in task.batches(64)) == 200
