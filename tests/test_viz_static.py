"""attnc.viz's matplotlib form (View.plot, View.savefig) and the notebook's
static fallback: every kind of view saves valid, non-blank PNG, SVG and PDF
at the dpi asked, and what each draws is read back from the Axes and
compared with the weights given (the selected layer, head or step's), so
drawing the wrong one fails; bad selectors raise naming the argument."""

import base64
import io
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import attnc
import attnc.models
import attnc.viz as viz

mpl = pytest.importorskip("matplotlib")  # attnc[plot]: installed where these tests run
mpl.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def dirichlet(rng, *shape):
    return rng.dirichlet(np.ones(shape[-1]), shape[:-1])


def layers(seed=0, n=3, H=4, L=5, S=5):
    """n layers of (1, H, L, S) float32 weights."""
    rng = np.random.default_rng(seed)
    return [dirichlet(rng, 1, H, L, S).astype(np.float32) for _ in range(n)]


def ntm_trace():
    m = attnc.models.NTM(3, 2, controller_size=8, memory_slots=6, memory_width=4, seed=0)
    _, trace = m(np.random.default_rng(1).random((2, 5, 3)).astype(np.float32), return_trace=True)
    return trace


def pointer_inputs():
    rng = np.random.default_rng(2)
    points = rng.random((7, 2))
    pointers = dirichlet(rng, 5, 8)  # 5 steps over 7 points and the end token
    return points, pointers, np.array([3, 0, 6, 7, -1])


def image_inputs():
    rng = np.random.default_rng(3)
    return rng.random((16, 16, 3)), dirichlet(rng, 3, 16).reshape(3, 4, 4)


KINDS = {
    "head": lambda: viz.head_view(layers(), list("abcde")),
    "model": lambda: viz.model_view(layers(), list("abcde")),
    "matrix": lambda: viz.matrix_view(layers(n=2, H=2), list("abcde")),
    "alignment": lambda: viz.alignment_view(dirichlet(np.random.default_rng(4), 4, 6), windows=[[0, 2]] * 4),
    "ntm": lambda: viz.ntm_view(ntm_trace()),
    "pointer": lambda: viz.pointer_view(*pointer_inputs()),
    "image": lambda: viz.image_view(*image_inputs(), ["a", "red", "ball"]),
}


# --------------------------------------------------------------------------- the files


@pytest.mark.parametrize("kind", KINDS)
def test_every_view_saves_png_svg_and_pdf_at_the_dpi_asked(kind, tmp_path):
    view = KINDS[kind]()
    sizes = {}
    for dpi in (40, 80):
        view.savefig(tmp_path / f"v{dpi}.png", dpi=dpi)
        pixels = mpl.image.imread(tmp_path / f"v{dpi}.png")
        assert pixels[..., :3].std() > 0.02, "a blank image"
        sizes[dpi] = np.array(pixels.shape[:2])
    np.testing.assert_allclose(sizes[80], 2 * sizes[40], atol=2)  # the pixel size follows dpi
    view.savefig(tmp_path / "v.svg")
    root = ET.parse(tmp_path / "v.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and len(list(root.iter())) > 20
    view.savefig(tmp_path / "v.PDF")
    pdf = (tmp_path / "v.PDF").read_bytes()
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF") and len(pdf) > 2000
    assert plt.get_fignums() == []  # savefig closes its figure


def test_plot_makes_its_figure_at_dpi_and_draws_into_given_axes():
    view = KINDS["head"]()
    assert view.plot(dpi=123).figure.dpi == 123
    fig, ax = plt.subplots()
    assert view.plot(ax) is ax
    with pytest.raises(ValueError, match="dpi sets the resolution of the figure"):
        view.plot(ax, dpi=100)


# --------------------------------------------------------------------------- what is drawn


def line_weights(ax, gid):
    """The (row, col) -> opacity of the lines of the collection with this gid."""
    (c,) = [c for c in ax.collections if c.get_gid() == gid]
    segments = c.get_segments()
    return {(int(s[0, 1] - 0.5), int(s[1, 1] - 0.5)): a for s, a in zip(segments, c.get_colors()[:, 3])}


def expected_lines(w, min_weight=0.01):
    return {(i, j): min(1.0, w[i, j]) for i, j in zip(*np.nonzero(w >= min_weight))}


def assert_lines(ax, gid, w):
    got, expected = line_weights(ax, gid), expected_lines(w)
    assert got.keys() == expected.keys()
    np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), rtol=1e-6)


def test_head_view_draws_the_selected_layers_heads_as_lines_with_alpha_the_weight():
    w = layers()
    w[1][0, 2, 0, 1] = 0.001  # under min_weight: no line
    ax = viz.head_view(w, list("abcde")).plot(layer=1, head=[2, 0])
    assert [c.get_gid() for c in ax.collections] == ["head 2", "head 0"]
    assert_lines(ax, "head 2", w[1][0, 2])
    assert_lines(ax, "head 0", w[1][0, 0])
    assert (0, 1) not in line_weights(ax, "head 2")
    assert ax.get_title() == "layer 1"
    assert [t.get_text() for t in ax.texts] == list("abcde") * 2
    # the page's colours: head h of 4 is PALETTE[h]
    assert mpl.colors.to_hex(ax.collections[0].get_colors()[0, :3]) == "#2ca02c"


def test_head_view_of_a_dict_selects_the_attention_and_labels_its_sides():
    rng = np.random.default_rng(5)
    weights = {"encoder": [dirichlet(rng, 1, 2, 3, 3)], "decoder_cross": [dirichlet(rng, 1, 2, 2, 3)]}
    view = viz.head_view(weights, ["s0", "s1", "s2"], target_tokens=["t0", "t1"])
    ax = view.plot(attention="decoder_cross", head=1)
    assert_lines(ax, "head 1", weights["decoder_cross"][0][0, 1])
    assert [t.get_text() for t in ax.texts] == ["t0", "t1", "s0", "s1", "s2"]
    assert ax.get_title() == "decoder_cross, layer 0"
    assert_lines(view.plot(attention=0, head=0), "head 0", weights["encoder"][0][0, 0])


def test_model_view_draws_every_layer_and_heads_thumbnail():
    w = layers(n=2, H=3)
    grid = viz.model_view(w).plot()
    assert grid.shape == (2, 3)
    for l in range(2):
        for h in range(3):
            assert_lines(grid[l, h], f"head {h}", w[l][0, h])
    sub = viz.model_view(w).plot(layer=[1], head=[2, 1])
    assert sub.shape == (1, 2)
    assert_lines(sub[0, 0], "head 2", w[1][0, 2])


def test_matrix_view_draws_the_heads_as_shipped_on_the_views_scale():
    w = layers(H=3)
    view = viz.matrix_view(w, list("abcde"), layers=[2, 0], heads=[1, 2])
    axes = view.plot(layer=0, head=2)
    assert axes.shape == (1, 1) and axes[0, 0].get_title() == "layer 0, head 2"
    np.testing.assert_array_equal(axes[0, 0].images[0].get_array(), w[0][0, 2])
    assert axes[0, 0].images[0].get_clim() == (0.0, pytest.approx(w[0][0, 2].max()))  # per head
    assert [t.get_text() for t in axes[0, 0].get_xticklabels()] == list("abcde")
    shared = viz.matrix_view(w, scale="shared").plot()
    assert shared.shape == (3, 3)
    top = max(x[0].max() for x in w)
    for l in range(3):
        for h in range(3):
            np.testing.assert_array_equal(shared[l, h].images[0].get_array(), w[l][0, h])
            assert shared[l, h].images[0].get_clim() == (0.0, pytest.approx(top))


@pytest.mark.parametrize("pool", ["max", "mean"])
def test_a_long_matrix_is_pooled_as_the_page_pools_it(pool):
    n = 1030  # past 1,024: 2 x 2 blocks, ragged at the edge
    rng = np.random.default_rng(6)
    w = dirichlet(rng, 1, 1, n, n).astype(np.float32)
    (ax,) = viz.matrix_view(w, pool=pool).plot().ravel()
    padded = np.full((1030, 1030), np.nan)
    padded[:n, :n] = w[0, 0]
    blocks = padded.reshape(515, 2, 515, 2)
    expected = np.nanmax(blocks, axis=(1, 3)) if pool == "max" else np.nanmean(blocks, axis=(1, 3))
    np.testing.assert_allclose(ax.images[0].get_array(), expected, rtol=1e-6)
    assert ax.images[0].get_extent() == [-0.5, n - 0.5, n - 0.5, -0.5]


def test_alignment_view_draws_the_rows_up_to_the_step_and_its_windows():
    rng = np.random.default_rng(7)
    w = dirichlet(rng, 4, 6)
    windows = np.array([[0, 2], [1, 3], [2, 5], [3, 6]])
    view = viz.alignment_view(w, list("abcdef"), ["x", "y", "z", "w"], windows=windows)
    ax = view.plot(step=2)
    drawn = ax.images[0].get_array()
    np.testing.assert_allclose(drawn[:3], w[:3].astype(np.float32), rtol=1e-6)
    assert drawn.mask[3].all() and not drawn.mask[:3].any()
    boxes = [(p.get_x(), p.get_width()) for p in ax.patches if p.get_gid() == "window"]
    assert boxes == [(s - 0.5, e - s) for s, e in windows[:3]]
    (step,) = [p for p in ax.patches if p.get_gid() == "step"]
    assert step.get_y() == 1.5 and ax.get_title() == "step 2: z"
    assert not view.plot().images[0].get_array().mask.any()  # the last step by default: every row


def test_ntm_view_draws_the_memory_and_weightings_at_the_step():
    trace = ntm_trace()
    stage = dirichlet(np.random.default_rng(8), 5, 6)
    panels = viz.ntm_view(trace, batch=1, stages={"content": stage}).plot(step=3)
    assert [p.get_title() for p in panels] == [
        "step 3: memory (6 slots x 4)",
        "write head 0",
        "read head 0",
        "stage: content",
    ]
    np.testing.assert_allclose(panels[0].images[0].get_array(), trace.memory[1, 3], rtol=1e-6)
    for panel, expected in zip(panels[1:], [trace.write_weights[1, 3, 0], trace.read_weights[1, 3, 0], stage[3]]):
        np.testing.assert_allclose([b.get_height() for b in panel.patches], expected, rtol=1e-6)


def test_pointer_view_draws_the_steps_distribution_and_the_path_so_far():
    points, pointers, indices = pointer_inputs()
    ax = viz.pointer_view(points, pointers, indices).plot(step=2)
    sizes = ax.collections[0].get_sizes()
    np.testing.assert_allclose(np.sqrt(sizes) / 0.75, 3 + 14 * np.sqrt(pointers[2, :7]), rtol=1e-5)
    (path,) = [line for line in ax.lines if line.get_gid() == "path"]
    np.testing.assert_allclose(np.transpose(path.get_data()), points[[3, 0, 6]], rtol=1e-6)
    (choice,) = [line for line in ax.lines if line.get_gid() == "choice"]
    np.testing.assert_allclose(np.ravel(choice.get_data()), points[6], rtol=1e-6)  # the step's choice ringed
    assert ax.get_title() == f"step 2: point 6, end token {pointers[2, 7]:.3g}"


def test_image_view_draws_the_words_map_and_the_positions_map():
    image, maps = image_inputs()
    ax = viz.image_view(image, maps, ["a", "red", "ball"]).plot(step=1)
    assert ax.get_title() == "red"
    np.testing.assert_allclose(ax.images[1].get_array(), maps[1], rtol=1e-6)
    sagan = dirichlet(np.random.default_rng(9), 16, 16)
    ax = viz.image_view(image, sagan, grid=(4, 4)).plot(step=6)
    assert ax.get_title() == "query (1, 2)"
    np.testing.assert_allclose(ax.images[1].get_array(), sagan[6].reshape(4, 4) / sagan[6].max(), rtol=1e-6)


# --------------------------------------------------------------------------- bad selectors


BAD = [
    ("layer out of range", "head", dict(layer=3), ValueError, r"layer=3 is not in this view: it holds layers \[0, 1"),
    ("head out of range", "model", dict(head=[0, 4]), ValueError, r"head=4 is not in this view"),
    ("one layer in a head view", "head", dict(layer=[0, 1]), TypeError, "layer must be one int"),
    ("head a string", "matrix", dict(head="0"), TypeError, "head must be an int or a list of ints"),
    ("no heads", "matrix", dict(head=[]), ValueError, "head is an empty list"),
    ("attention unknown", "head", dict(attention="cross"), ValueError, r"attention='cross' is not in this view"),
    ("attention index", "head", dict(attention=1), ValueError, "attention=1 is out of range"),
    ("step on a head view", "head", dict(step=0), ValueError, "step does not apply to a head view"),
    ("layer on a step view", "ntm", dict(layer=0), ValueError, "layer does not apply to a ntm view: it takes step"),
    ("step out of range", "alignment", dict(step=4), ValueError, "step=4 is out of range: the view has 4 steps"),
    ("step a float", "pointer", dict(step=1.0), TypeError, "step must be an int"),
    ("an unknown selector", "image", dict(word=1), TypeError, "word is not a selector|argument 'word'"),
]  # fmt: skip


@pytest.mark.parametrize("kind,selectors,error,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_selectors_are_refused_naming_the_argument(kind, selectors, error, match, tmp_path):
    view = KINDS[kind]()
    with pytest.raises(error, match=match):
        view.plot(**selectors)
    with pytest.raises(error, match=match):
        view.savefig(tmp_path / "v.png", **selectors)


def test_savefig_refuses_other_formats_and_bad_dpi(tmp_path):
    view = KINDS["head"]()
    with pytest.raises(ValueError, match=r"path must end in .png, .svg or .pdf"):
        view.savefig(tmp_path / "v.jpg")
    with pytest.raises(ValueError, match="dpi must be in"):
        view.savefig(tmp_path / "v.png", dpi=0)


# --------------------------------------------------------------------------- the notebook's static fallback


def png_of(bundle):
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    return mpl.image.imread(io.BytesIO(base64.b64decode(data["image/png"])), format="png")


def test_the_notebook_bundle_carries_the_widget_and_the_views_png():
    view = viz.model_view(layers(n=2, H=3))
    bundle = view._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert "text/html" not in data  # an iframe that GitHub would strip, shown in place of the PNG
    pixels = png_of(bundle)
    assert pixels[..., :3].std() > 0.02
    fig = viz._static.figure_of(view.plot(dpi=100))
    assert pixels.shape[:2] == tuple(round(x) for x in fig.get_size_inches()[::-1] * 100)
    assert len(data["image/png"]) < 200_000
    assert plt.get_fignums() == [fig.number]  # the bundle's figure closed


def test_without_anywidget_the_bundle_has_the_page_and_the_png():
    code = (
        "import sys, base64; sys.modules['anywidget'] = None\n"
        "import numpy as np, attnc.viz as viz\n"
        "b = viz.head_view(np.full((1, 2, 2), 0.5))._repr_mimebundle_()\n"
        "print(sorted(b), b['text/html'][:20], base64.b64decode(b['image/png'])[:4])\n"
    )
    env = {"MPLBACKEND": "Agg", **__import__("os").environ}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "['image/png', 'text/html', 'text/plain'] <iframe srcdoc=\"&lt; b'\\x89PNG'"


def test_empty_views_draw_empty_plots():
    for shape in [(1, 2, 0, 0), (1, 2, 0, 3)]:
        w = [np.zeros(shape)]
        tgt = [] if shape[3] else None
        assert viz.head_view(w, target_tokens=tgt).plot().collections[0].get_segments() == []
        assert len(viz.matrix_view(w, target_tokens=tgt).plot()[0, 0].images) == 0  # alignment's empty heatmap
    no_heads = viz.model_view([np.zeros((1, 0, 3, 3))])
    assert no_heads.plot().shape == (1, 0) and viz.matrix_view([np.zeros((1, 0, 3, 3))]).plot().shape == (1, 0)
    with pytest.raises(ValueError, match="nothing to draw: the view holds no heads"):
        no_heads.savefig("never.png")
    with pytest.raises(ValueError, match="the view has no steps to draw"):
        viz.alignment_view(np.zeros((0, 4))).plot()


def test_the_notebook_png_is_left_out_of_views_slow_to_draw():
    """A grid past 8 panels or a head view past 20,000 lines: drawing it
    would stall the notebook (a 12 x 12 matrix grid takes minutes)."""

    def keys(view):
        bundle = view._repr_mimebundle_()
        return sorted(bundle[0] if isinstance(bundle, tuple) else bundle)

    widget_only = ["application/vnd.jupyter.widget-view+json", "text/plain"]
    assert keys(viz.matrix_view(layers(n=3, H=3))) == widget_only  # 9 panels
    assert keys(viz.head_view(layers(n=1, H=2, L=100, S=101))) == widget_only  # 20,200 lines
    assert keys(viz.head_view(layers(n=1, H=2, L=100, S=100))) == sorted([*widget_only, "image/png"])
