"""Tests for attnc.plot (headless, Agg backend; plain NumPy inputs)."""

import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from attnc import plot  # noqa: E402

SRC = ["the", "cat", "sat", "on", "the", "mat", "today"]
TGT = ["le", "chat", "était", "assis"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _weights(tq=len(TGT), tk=len(SRC), seed=0):
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((tq, tk))
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _labels(ticklabels):
    return [t.get_text() for t in ticklabels]


def test_returns_axes_with_token_ticks():
    w = _weights()
    ax = plot.alignment(w, SRC, TGT)
    assert isinstance(ax, Axes)
    assert list(ax.get_xticks()) == list(range(len(SRC)))
    assert list(ax.get_yticks()) == list(range(len(TGT)))
    assert _labels(ax.get_xticklabels()) == SRC
    assert _labels(ax.get_yticklabels()) == TGT
    # source labels are rotated so words do not overlap
    assert all(t.get_rotation() in (45.0, 90.0) for t in ax.get_xticklabels())


def test_image_matches_weights_and_orientation():
    w = _weights()
    ax = plot.alignment(w, SRC, TGT)
    (im,) = ax.images
    np.testing.assert_array_equal(np.asarray(im.get_array()), w)
    # first query at the top, first key at the left
    bottom, top = ax.get_ylim()
    assert bottom > top
    left, right = ax.get_xlim()
    assert left < right


def test_colour_scale_is_zero_one_and_colorbar_exists():
    w = _weights() * 0.3  # max well below 1: the scale must not adapt
    ax = plot.alignment(w, SRC, TGT)
    (im,) = ax.images
    assert im.get_clim() == (0.0, 1.0)
    assert im.colorbar is not None
    cb_ax = im.colorbar.ax
    assert cb_ax in ax.figure.axes
    assert tuple(cb_ax.get_ylim()) == (0.0, 1.0)


def test_no_colorbar_when_disabled():
    ax = plot.alignment(_weights(), colorbar=False)
    assert ax.images[0].colorbar is None
    assert len(ax.figure.axes) == 1


def test_without_tokens_uses_integer_positions():
    w = _weights(3, 5)
    ax = plot.alignment(w)
    ticks = [t for t in ax.get_xticks() if -0.5 <= t <= 4.5]
    assert all(float(t).is_integer() for t in ticks)
    assert ax.images[0].get_clim() == (0.0, 1.0)


def test_draws_into_given_axes_and_title():
    fig, axes = plt.subplots(1, 2)
    out = plot.alignment(_weights(), SRC, TGT, ax=axes[1], title="dot")
    assert out is axes[1]
    assert out.get_title() == "dot"
    assert len(axes[0].images) == 0 and len(axes[1].images) == 1


@pytest.mark.parametrize("ext,magic", [("png", b"\x89PNG"), ("svg", b"<svg")])
def test_save_png_and_svg(tmp_path, ext, magic):
    ax = plot.alignment(_weights(), SRC, TGT, title="saved", annotate=True)
    path = tmp_path / f"alignment.{ext}"
    ax.figure.savefig(path, bbox_inches="tight")
    data = path.read_bytes()
    assert len(data) > 1000
    assert magic in data[:2000]


def test_squeezes_leading_batch_of_one():
    w = _weights()
    ax = plot.alignment(w[None], SRC, TGT)
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), w)


@pytest.mark.parametrize("shape", [(2, 4, 7), (7,), (), (1, 2, 4, 7), (4, 1, 7)])
def test_bad_shapes_raise_value_error_naming_weights(shape):
    w = np.full(shape, 0.5)
    with pytest.raises(ValueError, match=r"weights") as info:
        plot.alignment(w)
    assert str(shape) in str(info.value)


def test_token_length_mismatch_names_argument():
    w = _weights()
    with pytest.raises(ValueError, match="source_tokens"):
        plot.alignment(w, SRC[:-1], TGT)
    with pytest.raises(ValueError, match="target_tokens"):
        plot.alignment(w, SRC, TGT + ["extra"])
    # swapped lists: the source list must match the columns
    with pytest.raises(ValueError, match="source_tokens"):
        plot.alignment(w, TGT, SRC)


def test_string_tokens_rejected():
    w = _weights(3, 3)
    with pytest.raises(TypeError, match="source_tokens"):
        plot.alignment(w, "abc", ["x", "y", "z"])


def test_non_numeric_weights_rejected():
    with pytest.raises(TypeError, match="weights"):
        plot.alignment(np.array([["a", "b"], ["c", "d"]]))


def test_array_likes_and_non_string_tokens():
    w = _weights(2, 3)
    ax = plot.alignment(w.tolist(), [1, 2, 3], np.array(["a", "b"]))
    assert _labels(ax.get_xticklabels()) == ["1", "2", "3"]
    assert _labels(ax.get_yticklabels()) == ["a", "b"]
    ax = plot.alignment(memoryview(np.ascontiguousarray(w, dtype=np.float32)))
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), w, rtol=1e-6)
    # non-contiguous view
    big = _weights(4, 6)
    ax = plot.alignment(big[::2, ::-2])
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), big[::2, ::-2])


def test_input_not_modified():
    w = _weights()
    before = w.copy()
    plot.alignment(w, SRC, TGT, annotate=True)
    np.testing.assert_array_equal(w, before)


def test_annotate_writes_every_cell():
    w = _weights(3, 4)
    w[0, 0] = np.nan
    ax = plot.alignment(w, annotate=True)
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 12
    assert texts[0] == "nan"
    assert texts[1] == f"{w[0, 1]:.2f}"


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_empty_matrices_do_not_crash(shape, tmp_path):
    w = np.zeros(shape)
    ax = plot.alignment(w, ["k"] * shape[1], ["q"] * shape[0])
    ax.figure.savefig(tmp_path / "empty.png")


def test_missing_matplotlib_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r'pip install "attnc\[plot\]"'):
        plot.alignment(_weights())


# --------------------------------------------------------------------------- heads: a layer x head grid

def _head_weights(layers=2, heads=3, seed=0):
    """Per-layer weights (1, heads, Tq, Tk), as the models return them for one example."""
    return [np.stack([_weights(seed=100 * seed + 10 * l + h) for h in range(heads)])[None]
            for l in range(layers)]


def test_heads_returns_layer_by_head_axes_with_titles_and_tokens():
    ws = _head_weights(2, 3)
    axes = plot.heads(ws, SRC, TGT, title="cross-attention")
    assert isinstance(axes, np.ndarray) and axes.shape == (2, 3)
    assert all(isinstance(ax, Axes) for ax in axes.flat)
    fig = axes[0, 0].figure
    assert all(ax.figure is fig for ax in axes.flat)
    assert fig.get_suptitle() == "cross-attention"
    for l in range(2):
        for h in range(3):
            ax = axes[l, h]
            assert ax.get_title() == f"layer {l}, head {h}"
            assert _labels(ax.get_xticklabels()) == SRC
            assert _labels(ax.get_yticklabels()) == TGT
            # axis labels only on the outer panels
            assert ax.get_xlabel() == ("source (keys)" if l == 1 else "")
            assert ax.get_ylabel() == ("target (queries)" if h == 0 else "")


def test_heads_draws_each_head_on_a_fixed_zero_one_scale():
    ws = _head_weights(2, 3)
    ws[1] = ws[1] * 0.2  # a faint layer: the scale must not adapt to it
    axes = plot.heads(ws, SRC, TGT)
    for l in range(2):
        for h in range(3):
            (im,) = axes[l, h].images
            np.testing.assert_array_equal(np.asarray(im.get_array()), ws[l][0, h])
            assert im.get_clim() == (0.0, 1.0)
            if (l, h) != (0, 0):
                assert im.colorbar is None  # one shared colour bar, not one per panel
    fig = axes[0, 0].figure
    cbar_axes = [ax for ax in fig.axes if ax not in set(axes.flat)]
    assert len(cbar_axes) == 1
    assert axes[0, 0].images[0].colorbar.ax is cbar_axes[0]
    assert tuple(cbar_axes[0].get_ylim()) == (0.0, 1.0)


def test_heads_no_colorbar_and_row_label():
    axes = plot.heads(_head_weights(1, 2), colorbar=False, row_label="block")
    assert len(axes[0, 0].figure.axes) == 2
    assert [ax.get_title() for ax in axes.flat] == ["block 0, head 0", "block 0, head 1"]


def test_heads_accepts_arrays_of_every_documented_shape():
    ws = _head_weights(2, 3)
    stacked = np.concatenate(ws)  # (layers, heads, Tq, Tk)
    for arg, shape in ((stacked, (2, 3)), (stacked[None], (2, 3)), (stacked[0], (1, 3)),
                       ([w[0] for w in ws], (2, 3)), ([w.tolist() for w in ws], (2, 3))):
        axes = plot.heads(arg)
        assert axes.shape == shape
        np.testing.assert_array_equal(np.asarray(axes[-1, -1].images[0].get_array()),
                                      stacked[shape[0] - 1, -1])
        plt.close("all")


def test_heads_draws_into_given_axes():
    _, grid = plt.subplots(2, 3)
    axes = plot.heads(_head_weights(2, 3), SRC, TGT, axes=grid)
    assert axes.shape == (2, 3)
    assert all(a is b for a, b in zip(axes.flat, grid.flat))
    # a flat row of axes for a single layer
    _, row = plt.subplots(1, 3)
    axes = plot.heads(_head_weights(1, 3), axes=row)
    assert axes.shape == (1, 3) and axes[0, 2] is row[2]
    _, wrong = plt.subplots(3, 2)
    with pytest.raises(ValueError, match="axes"):
        plot.heads(_head_weights(2, 3), axes=wrong)


def test_heads_bad_inputs():
    ws = _head_weights(2, 3)
    with pytest.raises(ValueError, match="one example"):  # a batch of two
        plot.heads([np.concatenate([w, w]) for w in ws])
    with pytest.raises(ValueError, match="same"):
        plot.heads([ws[0], _head_weights(1, 2)[0]])
    with pytest.raises(ValueError, match="empty"):
        plot.heads([])
    with pytest.raises(ValueError, match=r"\(7,\)"):
        plot.heads(np.zeros(7))
    with pytest.raises(ValueError, match="source_tokens"):
        plot.heads(ws, SRC[:-1], TGT)
    with pytest.raises(ValueError, match="target_tokens"):
        plot.heads(ws, SRC, TGT[:-1])
    with pytest.raises(TypeError, match="weights"):
        plot.heads(np.full((1, 2, 2, 2), "x"))


def test_heads_input_not_modified_and_saves(tmp_path):
    ws = _head_weights(2, 2)
    before = [w.copy() for w in ws]
    axes = plot.heads(ws, SRC, TGT, annotate=True)
    for w, b in zip(ws, before):
        np.testing.assert_array_equal(w, b)
    path = tmp_path / "heads.png"
    axes[0, 0].figure.savefig(path)
    assert path.read_bytes()[:4] == b"\x89PNG"
