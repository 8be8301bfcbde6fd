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


def _weights(tq=len(TGT), tk=len(SRC), seed=0):  # noqa: B008  (the labels' lengths)
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
    return [np.stack([_weights(seed=100 * seed + 10 * l + h) for h in range(heads)])[None] for l in range(layers)]


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


def test_heads_accepts_every_documented_form():
    ws = _head_weights(2, 3)  # a list of (1, heads, Tq, Tk): one example's need_weights output
    last = ws[1][0, -1]
    for arg, shape in (
        (ws, (2, 3)),
        ([w[0] for w in ws], (2, 3)),  # unbatched (heads, Tq, Tk) per layer
        ([w.tolist() for w in ws], (2, 3)),
        (ws[1], (1, 3)),  # one layer, (1, heads, Tq, Tk)
        (ws[1][0], (1, 3)),  # one layer, (heads, Tq, Tk)
    ):
        axes = plot.heads(arg)
        assert axes.shape == shape
        np.testing.assert_array_equal(np.asarray(axes[-1, -1].images[0].get_array()), last)
        plt.close("all")
    # per-layer (Tq, Tk): one panel per layer, titled without a head
    axes = plot.heads([w[0, 0] for w in ws])
    assert axes.shape == (2, 1) and [ax.get_title() for ax in axes.flat] == ["layer 0", "layer 1"]
    np.testing.assert_array_equal(np.asarray(axes[1, 0].images[0].get_array()), ws[1][0, 0])
    # a (layers, heads, Tq, Tk) stack reads as a batch: the error says what to do
    with pytest.raises(ValueError, match=r"batch of 2 examples.*batch=0\.\.1.*list\(weights\)"):
        plot.heads(np.concatenate(ws))


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
    with pytest.raises(ValueError, match=r"^weights\[0\] holds a batch of 2 examples.*batch=0\.\.1$"):
        plot.heads([np.concatenate([w, w]) for w in ws])
    with pytest.raises(ValueError, match=r"^weights must be one layer's .*\(1, 2, 3, 4, 7\)"):
        plot.heads(np.concatenate(ws)[None])
    with pytest.raises(ValueError, match="same"):
        plot.heads([ws[0], _head_weights(1, 2)[0]])
    with pytest.raises(ValueError, match="empty"):
        plot.heads([])
    with pytest.raises(ValueError, match=r"\(7,\)"):
        plot.heads(np.zeros(7))
    with pytest.raises(TypeError, match=r"^weights is a dict \(keys 'self', 'cross'\): pass one of its lists"):
        plot.heads({"self": ws, "cross": ws})
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


def _panel(ax):
    return np.asarray(ax.images[0].get_array())


def _gpt_weights(batch=3):
    from attnc.models import GPT

    gpt = GPT(4, 9, n_layer=2, n_head=3, seed=0).eval()
    idx = np.random.default_rng(0).integers(0, 4, (batch, 7))
    _, weights = gpt(idx, need_weights=True)
    return weights


def test_heads_takes_a_models_batch_with_a_batch_index():
    ws = _gpt_weights(3)  # 2 layers of (3, 3, 7, 7), as GPT returns them
    assert [w.shape for w in ws] == [(3, 3, 7, 7)] * 2
    for b in (1, -1):
        axes = plot.heads(ws, batch=b)
        assert axes.shape == (2, 3)
        for l in range(2):
            for h in range(3):
                np.testing.assert_array_equal(_panel(axes[l, h]), ws[l][b % 3, h])
        plt.close("all")


def test_heads_takes_encoder_decoder_and_transformer_outputs():
    import attnc

    rng = np.random.default_rng(1)
    src, tgt = rng.random((2, 6, 8)).astype(np.float32), rng.random((2, 4, 8)).astype(np.float32)
    encoder = attnc.nn.TransformerEncoder(attnc.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, seed=0), 2)
    _, ws = encoder.eval()(src, need_weights=True)
    axes = plot.heads(ws, batch=1)
    np.testing.assert_array_equal(_panel(axes[1, 1]), ws[1][1, 1])
    decoder = attnc.nn.TransformerDecoder(attnc.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, seed=0), 2)
    _, w = decoder.eval()(tgt, src, need_weights=True)
    with pytest.raises(TypeError, match="dict"):
        plot.heads(w, batch=0)
    axes = plot.heads(w["cross"], batch=0, title="cross")
    assert axes.shape == (2, 2) and _panel(axes[0, 0]).shape == (4, 6)
    np.testing.assert_array_equal(_panel(axes[1, 0]), w["cross"][1][0, 0])
    model = attnc.nn.Transformer(8, 2, 1, 1, dim_feedforward=16, seed=0).eval()
    _, w = model(src, tgt, need_weights=True)
    axes = plot.heads(w["decoder_self"], batch=1)
    np.testing.assert_array_equal(_panel(axes[0, 1]), w["decoder_self"][0][1, 1])


def test_heads_takes_multihead_attention_weights_averaged_or_per_head(torch):
    import attnc

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(3, 4, 8, requires_grad=True)  # the weights need grad: they are detached
    kv = torch.randn(3, 5, 8)
    _, averaged = mha(q, kv, kv)  # (B, L, S)
    _, per_head = mha(q, kv, kv, average_attn_weights=False)  # (B, H, L, S)
    assert averaged.shape == (3, 4, 5) and per_head.shape == (3, 2, 4, 5) and averaged.requires_grad
    axes = plot.heads(averaged, batch=2)
    assert axes.shape == (1, 1) and axes[0, 0].get_title() == "layer 0"
    np.testing.assert_allclose(_panel(axes[0, 0]), averaged[2].detach().numpy())
    with pytest.raises(ValueError, match="^head selects heads, but the weights have none"):
        plot.heads(averaged, batch=2, head=0)
    axes = plot.heads(per_head, batch=0)
    assert axes.shape == (1, 2)
    for h in range(2):
        np.testing.assert_allclose(_panel(axes[0, h]), per_head[0, h].detach().numpy())
    ours = attnc.nn.MultiheadAttention(8, 2, seed=0)
    _, w = ours(q.detach().numpy(), kv.numpy(), kv.numpy(), average_attn_weights=False)
    np.testing.assert_array_equal(_panel(plot.heads(w, batch=1)[0, 1]), w[1, 1])


def test_heads_selects_layers_and_heads_and_titles_them_by_their_indices():
    ws = _head_weights(3, 4)
    for layer, head, expected in (
        (1, [2, 0], [(1, 2), (1, 0)]),
        ([2, 0], 3, [(2, 3), (0, 3)]),
        (slice(None, None, -2), slice(1, 3), [(2, 1), (2, 2), (0, 1), (0, 2)]),
        (-1, np.array([-1]), [(2, 3)]),
    ):
        axes = plot.heads(ws, layer=layer, head=head)
        rows = len({l for l, _ in expected})
        assert axes.shape == (rows, len(expected) // rows)
        for ax, (l, h) in zip(axes.flat, expected):
            assert ax.get_title() == f"layer {l}, head {h}"
            np.testing.assert_array_equal(_panel(ax), ws[l][0, h])
        plt.close("all")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(layer=3), ValueError, r"^layer 3 is out of range: there are 3 layers \(0\.\.2, or -3\.\.-1\)$"),
        (dict(head=-5), ValueError, r"^head -5 is out of range: there are 4 heads"),
        (dict(layer=[0, 7]), ValueError, r"^layer 7 is out of range"),
        (dict(layer=slice(5, None)), ValueError, r"^layer=slice\(5, None, None\) selects none of the 3 layers$"),
        (dict(head=[]), ValueError, r"^head is an empty list"),
        (dict(layer="0"), TypeError, r"^layer must be an int, a list of ints or a slice, got str$"),
        (dict(head=[0.5]), TypeError, r"^head must be .*got an element 0\.5$"),
        (dict(head=True), TypeError, r"^head must be an int"),
        (dict(batch=1), ValueError, r"^batch 1 is out of range: weights\[0\] holds B = 1 examples"),
        (dict(batch=0.0), TypeError, r"^batch must be an int"),
        (dict(vmax=0), ValueError, r"^vmax must be a positive finite number"),
        (dict(vmax=np.nan), ValueError, r"^vmax must be a positive finite number"),
        (dict(vmax="1"), TypeError, r"^vmax must be a number"),
        (dict(normalize="layer"), ValueError, r"^normalize must be None .* or \"head\" .*got 'layer'$"),
        (dict(normalize="head", vmax=0.5), ValueError, r"^vmax sets one scale .*pass one of them$"),
        (dict(dpi=0), ValueError, r"^dpi must be in \(0, 1200\]"),
    ],
)
def test_heads_bad_selections_name_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        plot.heads(_head_weights(3, 4), **kwargs)
    assert not plt.get_fignums()  # refused before drawing


def test_heads_batch_needs_a_batch_axis():
    with pytest.raises(ValueError, match=r"^with batch given, weights\[0\] must be \(B, heads, Tq, Tk\).*\(4, 7\)"):
        plot.heads([_weights(), _weights()], batch=0)


def test_heads_vmax_sets_the_shared_scale():
    ws = _head_weights(2, 2)
    axes = plot.heads(ws, vmax=0.3)
    cmap = plt.get_cmap("viridis")
    for l in range(2):
        for h in range(2):
            im = axes[l, h].images[0]
            assert im.get_clim() == (0.0, 0.3)
            w = ws[l][0, h]
            np.testing.assert_array_equal(np.asarray(im.get_array()), w)  # the weights, not rescaled
            # a weight at or above 0.3 draws in the top colour; one of 0.15 half-way up
            high = w >= 0.3
            assert high.any()
            np.testing.assert_allclose(im.to_rgba(w)[high], np.tile(cmap(1.0), (high.sum(), 1)))
    bar = axes[0, 0].images[0].colorbar
    assert tuple(bar.ax.get_ylim()) == (0.0, 0.3) and bar.ax.get_ylabel() == "attention weight"
    ax = plot.alignment(_weights(), vmax=0.5)
    assert ax.images[0].get_clim() == (0.0, 0.5) and tuple(ax.images[0].colorbar.ax.get_ylim()) == (0.0, 0.5)


def test_heads_normalize_head_gives_each_panel_its_maximum_and_colour_bar():
    ws = _head_weights(2, 2)
    ws[1] = ws[1].copy()
    ws[1][0, 0] = 1 / SRC.__len__() + 0.01 * ws[1][0, 0]  # a diffuse head: weights near 1/7 everywhere
    ws[1][0, 1] = 0.0  # a head of zeros: its scale stays 0..1
    cmap = plt.get_cmap("viridis")
    default = plot.heads(ws)
    diffuse = default[1, 0].images[0]
    assert np.all(diffuse.to_rgba(ws[1][0, 0])[..., 1] < 0.5)  # on the 0..1 scale: uniformly dark
    plt.close("all")
    axes = plot.heads(ws, normalize="head")
    fig = axes[0, 0].figure
    bars = [a for a in fig.axes if a not in set(axes.flat)]
    assert len(bars) == 4  # one colour bar per panel
    for l in range(2):
        for h in range(2):
            w = ws[l][0, h]
            im = axes[l, h].images[0]
            np.testing.assert_array_equal(np.asarray(im.get_array()), w)
            top = w.max() if w.max() > 0 else 1.0
            assert im.get_clim() == (0.0, top)
            assert tuple(im.colorbar.ax.get_ylim()) == (0.0, top)
            assert [t.get_text() for t in im.colorbar.ax.get_yticklabels()] == ["0", f"{top:.2g}"]
            if w.max() > 0:  # each panel's largest weight draws in the top colour
                np.testing.assert_allclose(im.to_rgba(np.array([[w.max()]]))[0, 0], cmap(1.0))


# --------------------------------------------------------------------------- NTM: addressing stages and traces


def _weighting(n=10, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random(n) ** 4
    return w / w.sum()


def _bar_heights(ax):
    return np.array([p.get_height() for p in ax.patches])


def test_ntm_addressing_panels_bars_and_titles():
    stages = [_weighting(seed=s) for s in range(4)]
    axes = plot.ntm_addressing(*stages, title="one head")
    assert isinstance(axes, np.ndarray) and axes.shape == (4,)
    assert all(isinstance(ax, Axes) for ax in axes)
    assert axes[0].figure.get_suptitle() == "one head"
    titles = [ax.get_title() for ax in axes]
    for word, t in zip(("content", "interpolated", "shifted", "sharpened"), titles):
        assert word in t
    for ax, w in zip(axes, stages):
        assert len(ax.patches) == 10
        np.testing.assert_allclose(_bar_heights(ax), w)
        assert ax.get_ylim() == (0.0, 1.0)  # a fixed scale, comparable across panels
    assert axes[0].get_xlabel() == "slot"


def test_ntm_addressing_with_previous_and_address_outputs():
    import attnc

    rng = np.random.default_rng(1)
    memory = rng.standard_normal((1, 10, 4))
    key = memory[:, None, 3] + 0.05
    w_prev = np.eye(10)[None, None, 7]
    s = np.array([[[0.0, 0.1, 0.9]]])
    w, (w_c, w_g, w_t) = attnc.ntm.address(
        key, np.array([[5.0]]), np.array([[0.8]]), s, np.array([[3.0]]), w_prev, memory, return_intermediates=True
    )
    # (1, 1, N) arrays are squeezed to (N,)
    axes = plot.ntm_addressing(w_c, w_g[0], w_t[0, 0], w[0, 0], w_prev=w_prev[0, 0])
    assert axes.shape == (5,)
    assert "previous" in axes[1].get_title()
    for ax, arr in zip(axes, (w_c, w_prev, w_g, w_t, w)):
        np.testing.assert_allclose(_bar_heights(ax), arr[0, 0])


def test_ntm_addressing_draws_into_given_axes_and_keeps_inputs():
    stages = [_weighting(seed=s) for s in range(5)]
    before = [a.copy() for a in stages]
    _, row = plt.subplots(1, 5)
    axes = plot.ntm_addressing(*stages[:4], w_prev=stages[4], axes=row)
    assert all(a is b for a, b in zip(axes, row))
    for a, b in zip(stages, before):
        np.testing.assert_array_equal(a, b)
    _, four = plt.subplots(1, 4)
    with pytest.raises(ValueError, match="axes"):
        plot.ntm_addressing(*stages[:4], w_prev=stages[4], axes=four)


@pytest.mark.parametrize("position,name", [(0, "w_content"), (1, "w_gated"), (2, "w_shifted"), (3, "w")])
def test_ntm_addressing_bad_shapes_name_the_argument(position, name):
    stages = [_weighting() for _ in range(4)]
    bad = list(stages)
    bad[position] = np.zeros((2, 10))  # two rows: not one head
    with pytest.raises(ValueError, match=rf"^{name} .*\(2, 10\)"):
        plot.ntm_addressing(*bad)
    if position:
        bad[position] = _weighting(9)  # a different N
        with pytest.raises(ValueError, match=rf"^{name} has 9 slots"):
            plot.ntm_addressing(*bad)
    with pytest.raises(ValueError, match="^w_prev"):
        plot.ntm_addressing(*stages, w_prev=_weighting(11))
    with pytest.raises(TypeError, match="w_content"):
        plot.ntm_addressing(np.array(["a"] * 10), *stages[1:])


def _trace(B=2, T=9, R=1, W=1, N=12, M=3, seed=0):
    from attnc.models import NTMTrace

    rng = np.random.default_rng(seed)

    def weights(h):
        x = rng.random((B, T, h, N)) ** 6
        return x / x.sum(-1, keepdims=True)

    return NTMTrace(weights(R), weights(W), rng.standard_normal((B, T, N, M)))


def test_ntm_trace_weights_only():
    tr = _trace()
    axes = plot.ntm_trace(tr, row=1)
    assert axes.shape == (2,)
    assert [ax.get_title() for ax in axes] == ["write weights (head 0)", "read weights (head 0)"]
    np.testing.assert_array_equal(np.asarray(axes[0].images[0].get_array()), tr.write_weights[1, :, 0].T)
    np.testing.assert_array_equal(np.asarray(axes[1].images[0].get_array()), tr.read_weights[1, :, 0].T)
    for ax in axes:
        assert ax.images[0].get_clim() == (0.0, 1.0)
    assert axes[-1].get_xlabel() == "time step"
    # one shared colour bar
    fig = axes[0].figure
    assert len([a for a in fig.axes if a not in set(axes)]) == 1


def test_ntm_trace_with_sequences_and_slot_range():
    tr = _trace(T=7)
    rng = np.random.default_rng(3)
    inputs = rng.integers(0, 2, (2, 7, 5)).astype(np.float32)
    targets = rng.integers(0, 2, (2, 7, 4)).astype(np.float32)
    outputs = rng.random((7, 4))  # (T, C): already one row
    axes = plot.ntm_trace(tr, row=0, inputs=inputs, targets=targets, outputs=outputs, slots=(3, 8), title="copy")
    assert axes.shape == (5,)
    assert [ax.get_title() for ax in axes] == [
        "inputs",
        "targets",
        "outputs",
        "write weights (head 0)",
        "read weights (head 0)",
    ]
    assert axes[0].figure.get_suptitle() == "copy"
    np.testing.assert_array_equal(np.asarray(axes[0].images[0].get_array()), inputs[0].T)
    np.testing.assert_array_equal(np.asarray(axes[1].images[0].get_array()), targets[0].T)
    np.testing.assert_array_equal(np.asarray(axes[2].images[0].get_array()), outputs.T)
    np.testing.assert_array_equal(np.asarray(axes[3].images[0].get_array()), tr.write_weights[0, :, 0, 3:8].T)
    np.testing.assert_array_equal(np.asarray(axes[4].images[0].get_array()), tr.read_weights[0, :, 0, 3:8].T)
    # the y axis keeps the true slot numbers (slot 3 at the top)
    bottom, top = axes[3].get_ylim()
    assert (top, bottom) == (2.5, 7.5)
    for sl in (slice(3, 8), range(3, 8), [3, 8]):
        axes = plot.ntm_trace(tr, slots=sl)
        np.testing.assert_array_equal(np.asarray(axes[0].images[0].get_array()), tr.write_weights[0, :, 0, 3:8].T)
        plt.close("all")


def test_ntm_trace_every_head_or_the_first():
    tr = _trace(R=2, W=3)
    axes = plot.ntm_trace(tr)
    assert axes.shape == (5,)
    assert [ax.get_title() for ax in axes] == [f"write weights (head {h})" for h in range(3)] + [
        f"read weights (head {h})" for h in range(2)
    ]
    np.testing.assert_array_equal(np.asarray(axes[2].images[0].get_array()), tr.write_weights[0, :, 2].T)
    np.testing.assert_array_equal(np.asarray(axes[4].images[0].get_array()), tr.read_weights[0, :, 1].T)
    axes = plot.ntm_trace(tr, heads="first")
    assert axes.shape == (2,)
    # a plain (read, write, memory) tuple works too, and given axes are used
    _, col = plt.subplots(5, 1)
    axes = plot.ntm_trace(tuple(tr), axes=col)
    assert all(a is b for a, b in zip(axes, col))
    with pytest.raises(ValueError, match="axes"):
        plot.ntm_trace(tr, axes=col[:4])


def test_ntm_trace_from_a_model():
    from attnc.datasets import CopyTask
    from attnc.models import NTM

    task = CopyTask(bits=4)
    batch = task.batch(1, length=4, seed=0)
    model = NTM(task.input_size, task.output_size, controller_size=8, memory_slots=10, memory_width=3, seed=0)
    logits, trace = model(batch.inputs, return_trace=True)
    axes = plot.ntm_trace(trace, inputs=batch.inputs, targets=batch.targets, outputs=1 / (1 + np.exp(-logits)))
    assert axes.shape == (5,)
    np.testing.assert_allclose(np.asarray(axes[3].images[0].get_array()), trace.write_weights[0, :, 0].T)


def test_ntm_trace_bad_inputs_name_the_argument():
    tr = _trace(T=9, N=12)
    with pytest.raises(ValueError, match=r"^inputs .*\(2, 8, 5\)"):
        plot.ntm_trace(tr, inputs=np.zeros((2, 8, 5)))
    with pytest.raises(ValueError, match=r"^targets .*\(8, 4\)"):
        plot.ntm_trace(tr, targets=np.zeros((8, 4)))
    with pytest.raises(ValueError, match=r"^outputs .*\(9,\)"):
        plot.ntm_trace(tr, outputs=np.zeros(9))
    with pytest.raises(ValueError, match="^row"):
        plot.ntm_trace(tr, row=2)
    with pytest.raises(ValueError, match="^slots"):
        plot.ntm_trace(tr, slots=(5, 13))
    with pytest.raises(ValueError, match="^slots"):
        plot.ntm_trace(tr, slots=(4, 4))
    with pytest.raises(ValueError, match="^slots"):
        plot.ntm_trace(tr, slots="all")
    with pytest.raises(ValueError, match="^heads"):
        plot.ntm_trace(tr, heads="last")
    with pytest.raises(ValueError, match=r"^trace.read_weights .*\(2, 9, 12\)"):
        plot.ntm_trace(tr._replace(read_weights=tr.read_weights[:, :, 0]))
    with pytest.raises(ValueError, match="^trace.write_weights"):
        plot.ntm_trace(tr._replace(write_weights=tr.write_weights[..., :10]))
    with pytest.raises(TypeError, match="trace"):
        plot.ntm_trace(np.zeros((2, 9, 1, 12)))
    with pytest.raises(TypeError, match="inputs"):
        plot.ntm_trace(tr, inputs=np.full((9, 3), "x"))


def test_ntm_trace_input_not_modified_and_saves(tmp_path):
    tr = _trace()
    before = [a.copy() for a in tr]
    axes = plot.ntm_trace(tr, inputs=np.ones((2, 9, 3)))
    for a, b in zip(tr, before):
        np.testing.assert_array_equal(a, b)
    path = tmp_path / "trace.png"
    axes[0].figure.savefig(path)
    assert path.read_bytes()[:4] == b"\x89PNG"


# --------------------------------------------------------------------------- pointer networks: tours and hulls


def _points(n=7, seed=0):
    return np.random.default_rng(seed).random((n, 2))


def _line(ax, gid):
    (line,) = [ln for ln in ax.lines if ln.get_gid() == gid]
    return line


def _xy(line):
    return np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])


def test_tours_draws_closed_polygon_in_order_over_optimal():
    pts = _points()
    tour = [0, 3, 1, 6, 2, 5, 4]
    best = [0, 1, 2, 3, 4, 5, 6]
    ax = plot.tours(pts, tour, optimal=best, title="tsp")
    assert isinstance(ax, Axes)
    assert ax.get_title() == "tsp"
    np.testing.assert_array_equal(_xy(_line(ax, "tour")), pts[tour + [0]])
    np.testing.assert_array_equal(_xy(_line(ax, "optimal")), pts[best + [0]])
    # the optimal tour is drawn underneath the tour
    assert _line(ax, "optimal").get_zorder() < _line(ax, "tour").get_zorder()
    assert [ln.get_gid() for ln in ax.lines][:2] == ["optimal", "tour"]
    np.testing.assert_array_equal(_xy(_line(ax, "start")), pts[[0]])
    np.testing.assert_array_equal(np.asarray(ax.collections[0].get_offsets()), pts)
    # the point labels, and the lengths in the legend
    assert sorted(t.get_text() for t in ax.texts) == sorted(str(i) for i in range(len(pts)))
    length = np.sum(np.hypot(*np.diff(pts[tour + [0]], axis=0).T))
    assert f"{length:.3f}" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert ax.get_aspect() == 1.0


def test_tours_closed_open_and_padded_tours_draw_the_same_polygon():
    pts = _points(5)
    expected = pts[[2, 0, 4, 1, 3, 2]]
    for tour in ([2, 0, 4, 1, 3], [2, 0, 4, 1, 3, 2], np.array([[2, 0, 4, 1, 3, 2, -1, -1]]), [2, 0, -1, 4, 1, 3]):
        ax = plot.tours(pts, tour, labels=False)
        np.testing.assert_array_equal(_xy(_line(ax, "tour")), expected)
        assert not ax.texts
        assert [ln.get_gid() for ln in ax.lines] == ["tour", "start"]


def test_tours_from_a_pointer_net_and_given_axes():
    from attnc.datasets import TSPTask
    from attnc.models import PointerNet

    batch = TSPTask(n=6).batch(2, seed=0)
    out = PointerNet(2, 16, seed=0).generate(batch.inputs, constraint="tour")
    fig, axes = plt.subplots(1, 2)
    for b, ax in enumerate(axes):
        assert plot.tours(batch.inputs[b], out.indices[b], optimal=batch.targets[b], ax=ax) is ax
        line = _xy(_line(ax, "tour"))
        assert line.shape == (7, 2)
        np.testing.assert_array_equal(line[0], line[-1])
        np.testing.assert_array_equal(line, batch.inputs[b][out.indices[b][:7]].astype(float))


def test_hull_draws_predicted_until_the_end_token_over_target():
    pts = _points(10)
    target = np.array([0, 4, 7, 2, -1, -1])
    predicted = np.array([0, 4, 2, -1, 7, 5])  # everything from the first -1 on is ignored
    ax = plot.hull(pts, predicted, target=target, title="hull")
    assert isinstance(ax, Axes)
    assert ax.get_title() == "hull"
    np.testing.assert_array_equal(_xy(_line(ax, "predicted")), pts[[0, 4, 2, 0]])
    np.testing.assert_array_equal(_xy(_line(ax, "target")), pts[[0, 4, 7, 2, 0]])
    assert _line(ax, "target").get_zorder() < _line(ax, "predicted").get_zorder()
    assert [ln.get_gid() for ln in ax.lines] == ["target", "predicted"]
    (fill,) = ax.patches
    np.testing.assert_allclose(fill.get_xy()[:4], pts[[0, 4, 7, 2]])
    np.testing.assert_array_equal(np.asarray(ax.collections[0].get_offsets()), pts)
    assert ax.get_aspect() == 1.0


def test_hull_without_target_closed_and_empty_predictions():
    pts = _points(6)
    ax = plot.hull(pts, [1, 3, 5, 1])
    np.testing.assert_array_equal(_xy(_line(ax, "predicted")), pts[[1, 3, 5, 1]])
    assert [ln.get_gid() for ln in ax.lines] == ["predicted"]
    assert not ax.patches
    ax = plot.hull(pts, [-1, 2, 3])
    assert _xy(_line(ax, "predicted")).shape == (0, 2)


def test_hull_from_a_pointer_net():
    from attnc.datasets import ConvexHullTask
    from attnc.models import PointerNet

    batch = ConvexHullTask().batch(3, n=8, seed=1)
    out = PointerNet(2, 16, seed=0).generate(batch.inputs, constraint="hull")
    for b in range(3):
        ax = plot.hull(batch.inputs[b], out.indices[b], target=batch.targets[b])
        k = int(np.argmax(np.append(out.indices[b], -1) < 0))
        expected = batch.inputs[b][np.append(out.indices[b][:k], out.indices[b][0])].astype(float)
        np.testing.assert_array_equal(_xy(_line(ax, "predicted")), expected)
        t = batch.target_lengths[b]
        np.testing.assert_array_equal(
            _xy(_line(ax, "target")), batch.inputs[b][np.append(batch.targets[b][:t], batch.targets[b][0])]
        )


@pytest.mark.parametrize("func,arg", [(plot.tours, "tours"), (plot.hull, "predicted")])
def test_tours_and_hull_bad_inputs_name_the_argument(func, arg):
    pts = _points(5)
    other = "optimal" if func is plot.tours else "target"
    with pytest.raises(ValueError, match="points"):
        func(np.zeros((5, 3)), [0, 1])
    with pytest.raises(ValueError, match="points"):
        func(np.zeros((2, 5, 2)), [0, 1])
    with pytest.raises(ValueError, match="points"):
        func(np.zeros(10), [0, 1])
    with pytest.raises(ValueError, match="points"):
        func(np.full((5, 2), np.nan), [0, 1])
    with pytest.raises(TypeError, match="points"):
        func(np.array([["a", "b"]] * 5), [0, 1])
    with pytest.raises(ValueError, match=arg):
        func(pts, [[0, 1], [2, 3]])
    with pytest.raises(ValueError, match=rf"{arg}.*0\.\.4.*got 5"):
        func(pts, [0, 5])
    with pytest.raises(ValueError, match=rf"{arg}.*got -2"):
        func(pts, [0, -2])
    with pytest.raises(TypeError, match=arg):
        func(pts, [0.0, 1.0])
    with pytest.raises(TypeError, match=arg):
        func(pts, np.array([True, False]))
    with pytest.raises(ValueError, match=other):
        func(pts, [0, 1, 2], **{other: [0, 1, 9]})
    with pytest.raises(ValueError, match=other):
        func(pts, [0, 1, 2], **{other: np.zeros((2, 3), int)})


def test_tours_and_hull_inputs_not_modified_and_save(tmp_path):
    pts = _points(6).astype(np.float32)
    tour = np.array([0, 2, 4, 1, 3, 5, 0])
    best = np.array([0, 1, 2, 3, 4, 5])
    pred = np.array([0, 2, 4, -1, -1])
    copies = [a.copy() for a in (pts, tour, best, pred)]
    ax = plot.tours(pts, tour, optimal=best)
    ax.figure.savefig(tmp_path / "tour.png")
    ax = plot.hull(pts, pred, target=best)
    ax.figure.savefig(tmp_path / "hull.png")
    for a, c in zip((pts, tour, best, pred), copies):
        np.testing.assert_array_equal(a, c)
        assert a.dtype == c.dtype
    assert (tmp_path / "tour.png").stat().st_size > 0 and (tmp_path / "hull.png").stat().st_size > 0


# --------------------------------------------------------------------------- image self-attention maps


def _image_and_attention(rows=4, cols=6, seed=0):
    rng = np.random.default_rng(seed)
    image = rng.uniform(size=(3, rows, cols))  # channel-first, as attnc's convolutions
    att = rng.uniform(size=(rows * cols, rows * cols))
    return image, att / att.sum(1, keepdims=True)


def _luminance(rgb):
    return 0.2126 * rgb[..., 0] + 0.7152 * rgb[..., 1] + 0.0722 * rgb[..., 2]


def _overlay_data(panel):
    return np.asarray(panel.get_images()[1].get_array())


def test_image_attention_one_panel_per_query_scaled_by_its_maximum():
    image, att = _image_and_attention()
    panels = plot.image_attention(image, att, [(1, 2), 20])
    assert panels.shape == (2,) and all(isinstance(p, Axes) for p in panels)
    assert [p.get_title() for p in panels] == ["query (1, 2)", "query (3, 2)"]
    for panel, q in zip(panels, (1 * 6 + 2, 20)):
        expected = att[q].reshape(4, 6) / att[q].max()
        np.testing.assert_allclose(_overlay_data(panel), expected)
        # the picture in grey (Rec. 709 luminance), under the weights
        base = panel.get_images()[0]
        np.testing.assert_allclose(np.asarray(base.get_array()), _luminance(np.moveaxis(image, 0, -1)))
        assert base.get_cmap().name == "gray" and base.get_clim() == (0.0, 1.0)
    # the query's cross sits at the centre of its cell, in image coordinates
    x, y = panels[0].get_lines()[0].get_data()
    assert (x[0], y[0]) == (2.5, 1.5)
    assert panels[0].figure.axes[-1].get_ylabel() == "attention / its maximum"
    plt.close("all")


def test_image_attention_fixed_scale_grid_and_given_axes():
    image, att = _image_and_attention(2, 3)
    big = np.kron(np.moveaxis(image, 0, -1), np.ones((4, 4, 1)))  # (8, 12, 3): the map is coarser than the image
    fig, given = plt.subplots(1, 3)
    out = plot.image_attention(
        big[None], att[None], [(0, 0)], grid=(2, 3), ax=given, scale="fixed", colorbar=False, title="t"
    )
    assert out[0] is given[0] and fig._suptitle.get_text() == "t"
    np.testing.assert_allclose(_overlay_data(out[0]), att[0].reshape(2, 3))
    x, y = out[0].get_lines()[0].get_data()
    assert (x[0], y[0]) == (2.0, 2.0)
    plt.close("all")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(attention=np.ones((5, 5))), ValueError, "grid 4 × 6 has 24 positions; pass grid"),
        (dict(attention=np.ones((24, 23))), ValueError, "attention must be a square"),
        (dict(queries=[(4, 0)]), ValueError, r"query \(4, 0\) is outside the 4 × 6 grid"),
        (dict(queries="ab"), TypeError, "queries must be a sequence"),
        (dict(scale="log"), ValueError, "scale must be 'max' or 'fixed'"),
        (dict(image=np.ones((4, 6, 5))), ValueError, "image must be"),
        (dict(image=[["a"]]), TypeError, "image must hold real numbers"),
        (dict(ax=[None]), ValueError, "ax holds 1 Axes, 2 queries need one each"),
    ],
)
def test_image_attention_bad_inputs_name_the_argument(kwargs, error, match):
    image, att = _image_and_attention()
    args = dict(image=image, attention=att, queries=[(0, 0), (1, 1)])
    args.update(kwargs)
    with pytest.raises(error, match=match):
        plot.image_attention(args.pop("image"), args.pop("attention"), args.pop("queries"), **args)
    plt.close("all")


def test_image_attention_inputs_not_modified_and_saves(tmp_path):
    image, att = _image_and_attention()
    image_copy, att_copy = image.copy(), att.copy()
    panels = plot.image_attention(image, att, [(0, 0)])
    panels[0].figure.savefig(tmp_path / "maps.png")
    assert (tmp_path / "maps.png").read_bytes()[:4] == b"\x89PNG"
    assert np.array_equal(image, image_copy) and np.array_equal(att, att_copy)
    plt.close("all")


def _pixel(fig, panel, x, y):
    """The RGB (0-255) drawn at data point (x, y) of panel."""
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    px, py = panel.transData.transform((x, y))
    return rgba[round(rgba.shape[0] - py), round(px), :3].astype(int)


def test_overlay_cannot_be_taken_for_the_picture():
    # a yellow square (cell (1, 1) of a 3 x 3 grid) on blue; the word looks at cell (0, 2)
    image = np.zeros((30, 30, 3))
    image[..., 2] = 0.6
    image[10:20, 10:20] = (1.0, 0.9, 0.0)
    alphas = np.eye(9)[[2, 4]]
    panels = plot.caption_attention(image, ["away", "on it"], alphas)
    fig = panels[0].figure
    # the picture is grey everywhere, the yellow object too: no hue but the weights'
    for x, y in ((15, 15), (5, 25), (25, 25)):
        r, g, b = _pixel(fig, panels[0], x, y)
        assert max(r, g, b) - min(r, g, b) <= 2, (x, y, (r, g, b))
    # the attended cell is the overlay's orange-red, and so is the object when looked at
    for panel, (x, y) in ((panels[0], (25, 5)), (panels[1], (15, 15))):
        r, g, b = _pixel(fig, panel, x, y)
        assert r - g > 60 and g - b > 20, (r, g, b)


def test_overlay_opacity_grows_with_the_weight_in_one_hue():
    from matplotlib.colors import to_rgb

    image, words, alphas = _caption_example()
    weights = np.linspace(0, 1, 11)
    for kwargs, alpha in ((dict(), 0.75), (dict(overlay_alpha=0.5), 0.5)):
        panels = plot.caption_attention(image, words, alphas, **kwargs)
        base, over = panels[0].get_images()
        np.testing.assert_allclose(np.asarray(base.get_array()), _luminance(image))
        np.testing.assert_allclose(np.asarray(over.get_array()), alphas[0].reshape(3, 3))
        rgba = over.to_rgba(weights)
        np.testing.assert_allclose(rgba[:, 3], alpha * weights, atol=1 / 255)  # transparent at 0
        np.testing.assert_allclose(rgba[:, :3], np.tile(to_rgb("#ff4500"), (11, 1)))  # one hue
        (bar,) = [a._colorbar for a in panels[0].figure.axes if getattr(a, "_colorbar", None)]
        np.testing.assert_allclose(bar.cmap(weights), rgba)  # the colour bar shows the same colours
        plt.close("all")
    panels = plot.image_attention(*_image_and_attention(), [0], cmap="viridis", overlay_alpha=0.9)
    rgba = panels[0].get_images()[1].to_rgba(weights)
    np.testing.assert_allclose(rgba[:, :3], plt.get_cmap("viridis")(weights)[:, :3], atol=1 / 255)
    np.testing.assert_allclose(rgba[:, 3], 0.9 * weights, atol=1 / 255)


@pytest.mark.parametrize("alpha", [0, 1.5, -0.1, np.nan, "0.5", True])
def test_overlay_alpha_out_of_range(alpha):
    with pytest.raises(ValueError, match=r"^overlay_alpha must be a number in \(0, 1\]"):
        plot.caption_attention(*_caption_example(), overlay_alpha=alpha)
    with pytest.raises(ValueError, match=r"^overlay_alpha must be a number in \(0, 1\]"):
        plot.image_attention(*_image_and_attention(), [0], overlay_alpha=alpha)


@pytest.mark.parametrize("cmap", ["no such map", 3])
def test_overlay_cmap_must_be_a_colour_map(cmap):
    with pytest.raises(ValueError, match=r"^cmap must be None, a colormap name or a matplotlib Colormap"):
        plot.caption_attention(*_caption_example(), cmap=cmap)


# ------------------------------------------------------------------ every heatmap: a colour bar; every plot: exports


def _caption_example():
    rng = np.random.default_rng(3)
    alphas = rng.uniform(size=(3, 9))
    return rng.uniform(size=(6, 6, 3)), ["a", "red", "square"], alphas / alphas.sum(1, keepdims=True)


HEATMAPS = {
    "alignment": lambda: plot.alignment(_weights(), SRC, TGT),
    "heads": lambda: plot.heads(_head_weights()),
    "heads normalized": lambda: plot.heads(_head_weights(), normalize="head"),
    "ntm_trace": lambda: plot.ntm_trace(_trace()),
    "image_attention": lambda: plot.image_attention(*_image_and_attention(), [0, 5]),
    "caption_attention": lambda: plot.caption_attention(*_caption_example()),
}


@pytest.mark.parametrize("name", HEATMAPS)
def test_every_heatmap_has_a_colour_bar_for_each_scale(name):
    panels = list(np.ravel(np.asarray(HEATMAPS[name](), dtype=object)))
    fig = panels[0].figure
    bars = [a._colorbar for a in fig.axes if getattr(a, "_colorbar", None) is not None]
    assert bars, f"{name} drew no colour bar"
    for panel in panels:
        heat = panel.get_images()[-1]  # the weights (over a picture, when there is one)
        assert any(
            bar.cmap.name == heat.get_cmap().name and (bar.norm.vmin, bar.norm.vmax) == heat.get_clim() for bar in bars
        ), f"{name}: no colour bar for the scale of {panel.get_title()!r}"
        fig.canvas.draw()
        for label in panel.get_xticklabels() + panel.get_yticklabels():
            assert label.get_fontsize() >= 8  # readable at the default size


def _tsp():
    pts = _points(6)
    return pts, [0, 2, 4, 1, 3, 5]


# every plot function, drawing into a new figure; each takes dpi
PLOTS = {
    "alignment": lambda **kw: plot.alignment(_weights(), SRC, TGT, annotate=True, **kw),
    "heads": lambda **kw: plot.heads(_head_weights(), SRC, TGT, **kw),
    "ntm_addressing": lambda **kw: plot.ntm_addressing(*[_weighting(seed=s) for s in range(4)], **kw),
    "ntm_trace": lambda **kw: plot.ntm_trace(_trace(), inputs=np.ones((2, 9, 3)), **kw),
    "tours": lambda **kw: plot.tours(*_tsp(), optimal=[0, 1, 2, 3, 4, 5], **kw),
    "hull": lambda **kw: plot.hull(_points(6), [0, 2, 4, -1], target=[0, 1, 2], **kw),
    "image_attention": lambda **kw: plot.image_attention(*_image_and_attention(), [0, 5], **kw),
    "caption_attention": lambda **kw: plot.caption_attention(*_caption_example(), **kw),
}


def test_plots_cover_every_function():
    assert set(PLOTS) == set(plot.__all__)


def _figure(drawn):
    return np.ravel(np.asarray(drawn, dtype=object))[0].figure


def _png_size(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.parametrize("name", PLOTS)
def test_every_plot_saves_png_svg_and_pdf_at_its_dpi(name, tmp_path):
    import xml.etree.ElementTree as ET

    from matplotlib.image import imread

    for dpi in (None, 90):
        fig = _figure(PLOTS[name]() if dpi is None else PLOTS[name](dpi=dpi))
        assert fig.dpi == (200 if dpi is None else dpi)  # 200 by default: sharp in a paper at its own size
        width_in, height_in = fig.get_size_inches()
        for ext in ("png", "svg", "pdf"):
            fig.savefig(tmp_path / f"{name}.{ext}")
        # dpi x figsize, whole pixels (Agg drops the fraction)
        width, height = int(width_in * fig.dpi + 1e-6), int(height_in * fig.dpi + 1e-6)
        assert _png_size((tmp_path / f"{name}.png").read_bytes()) == (width, height)
        pixels = imread(tmp_path / f"{name}.png")
        assert pixels.shape[:2] == (height, width)
        assert pixels[..., :3].var() > 1e-3  # not blank
        root = ET.parse(tmp_path / f"{name}.svg").getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert float(root.get("width").removesuffix("pt")) == pytest.approx(72 * width_in)
        assert len(list(root.iter("{http://www.w3.org/2000/svg}path"))) > 10  # drawn, not an empty page
        pdf = (tmp_path / f"{name}.pdf").read_bytes()
        assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF") and len(pdf) > 2000
        plt.close("all")


@pytest.mark.parametrize("name", PLOTS)
def test_every_plot_checks_dpi(name):
    for dpi, error, match in (
        (0, ValueError, r"^dpi must be in \(0, 1200\] dots per inch, got 0$"),
        (1201, ValueError, r"^dpi must be in \(0, 1200\]"),
        (np.nan, ValueError, r"^dpi must be in \(0, 1200\]"),
        ("300", TypeError, r"^dpi must be a number \(dots per inch\), got str$"),
        (True, TypeError, r"^dpi must be a number"),
    ):
        with pytest.raises(error, match=match):
            PLOTS[name](dpi=dpi)
    assert not plt.get_fignums()  # refused before a figure was made
    # given Axes: the figure is the caller's, dpi has nothing to set
    drawn = PLOTS[name]()
    given = np.ravel(np.asarray(drawn, dtype=object))
    if name == "heads":
        given = given.reshape(drawn.shape)
    keyword = "axes" if name in ("heads", "ntm_addressing", "ntm_trace") else "ax"
    with pytest.raises(ValueError, match=r"^dpi sets the resolution of the figure attnc.plot creates"):
        PLOTS[name](dpi=300, **{keyword: given if given.size > 1 else given[0]})
