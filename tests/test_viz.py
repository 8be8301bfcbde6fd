"""attnc.viz, the Python side: what each view ships (its spec and its
float32 weights, checked against the arrays or the model's own
need_weights output), the errors bad input gets, the standalone page's
contents (decoded back here), and the notebook widget's traitlets. The
pages themselves run in a browser in tests/test_viz_browser.py."""

import base64
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import attnc
import attnc.models
import attnc.viz as viz
from attnc.viz import _views

VIEWS = [viz.head_view, viz.model_view, viz.matrix_view]


def dirichlet(rng, *shape):
    """Attention-like weights: rows on the simplex, shape[:-1] rows of shape[-1]."""
    return rng.dirichlet(np.ones(shape[-1]), shape[:-1])


def page_parts(page: str):
    """The spec and the weights a saved page carries, read back from its text."""
    spec = re.search(r'<script type="application/json" id="attnc-spec">(.*?)</script>', page, re.S).group(1)
    data = re.search(r'<script type="application/octet-stream" id="attnc-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(spec), np.frombuffer(base64.b64decode(data), "<f4")


# --------------------------------------------------------------------------- what the views ship


@pytest.mark.parametrize("view", VIEWS, ids=lambda f: f.__name__)
def test_a_layer_list_ships_the_chosen_batch_items_weights_as_float32(view):
    rng = np.random.default_rng(0)
    layers = [dirichlet(rng, 3, 2, 4, 5) for _ in range(3)]  # (B, H, L, S) per layer, float64
    v = view(layers, list("vwxyz"), target_tokens=list("abcd"), batch=-2)
    expected = np.stack([w[1] for w in layers]).astype(np.float32)
    np.testing.assert_array_equal(v.data, expected.ravel())
    (a,) = v.spec["attentions"]
    assert (a["layers"], a["heads"], a["offset"]) == (3, 2, 0)
    assert a["rows"] == list("abcd") and a["cols"] == list("vwxyz")
    np.testing.assert_array_equal(a["vmax"], expected.max(axis=(2, 3)))
    assert a["layer_ids"] == [0, 1, 2] and a["head_ids"] == [0, 1]


def test_one_array_is_one_layer_and_h_l_s_is_one_sequence():
    rng = np.random.default_rng(1)
    w = dirichlet(rng, 2, 3, 3).astype(np.float32)  # (H, L, S)
    for given in (w, w[None], [w], [w[None]]):
        v = viz.head_view(given)
        np.testing.assert_array_equal(v.data, w.ravel())
        assert v.spec["attentions"][0]["rows"] == ["0", "1", "2"]  # positions without tokens


def test_the_inputs_are_not_modified():
    rng = np.random.default_rng(2)
    layers = [dirichlet(rng, 1, 2, 3, 3) for _ in range(2)]
    copies = [w.copy() for w in layers]
    viz.matrix_view(layers, ["a", "b", "c"], scale="shared").to_html()
    for w, c in zip(layers, copies):
        np.testing.assert_array_equal(w, c)


def test_matrix_view_ships_only_the_chosen_layers_and_heads():
    rng = np.random.default_rng(3)
    layers = [dirichlet(rng, 1, 4, 6, 6) for _ in range(3)]
    v = viz.matrix_view(layers, layers=[2, 0], heads=[-1])
    np.testing.assert_array_equal(v.data, np.stack([layers[2][0, 3], layers[0][0, 3]]).astype(np.float32).ravel())
    a = v.spec["attentions"][0]
    assert (a["layers"], a["heads"], a["layer_ids"], a["head_ids"]) == (2, 1, [2, 0], [3])
    assert v.spec["options"] == {"scale": "head", "pool": "max"}


def test_a_dict_of_attentions_labels_each_from_its_side():
    """attnc.nn.Transformer's dict: the encoder within the source, the decoder's
    self-attention within the target, cross-attention from target to source."""
    rng = np.random.default_rng(4)
    src, tgt = ["s0", "s1", "s2", "s3"], ["t0", "t1"]
    weights = {
        "encoder": [dirichlet(rng, 1, 2, 4, 4)],
        "decoder_self": [dirichlet(rng, 1, 2, 2, 2)],
        "decoder_cross": [dirichlet(rng, 1, 2, 2, 4)],
    }
    v = viz.head_view(weights, src, target_tokens=tgt)
    got = {a["name"]: (a["rows"], a["cols"], a["offset"]) for a in v.spec["attentions"]}
    assert got == {"encoder": (src, src, 0), "decoder_self": (tgt, tgt, 32), "decoder_cross": (tgt, src, 40)}
    expected = np.concatenate([weights[k][0][0].ravel() for k in weights]).astype(np.float32)
    np.testing.assert_array_equal(v.data, expected)


def test_torch_multihead_attention_weights_go_in_as_they_come(torch):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 5, 8)
    _, w = mha(x, x, x, need_weights=True, average_attn_weights=False)  # (B, H, L, S), requires grad
    v = viz.head_view([w, w], list("abcde"), batch=1)
    np.testing.assert_array_equal(v.data, np.stack([w[1].detach().numpy()] * 2).ravel())


# --------------------------------------------------------------------------- a model and its input


def test_a_gpt_is_run_once_with_need_weights_and_its_ids_label_the_tokens():
    gpt = attnc.models.GPT(10, 8, n_layer=2, n_head=3, n_embd=12, dropout=0.0, seed=0)
    ids = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    _, weights = gpt(ids, need_weights=True)
    v = viz.model_view(gpt, ids, batch=1, decode="abcdefghij".__getitem__)
    np.testing.assert_array_equal(v.data, np.stack([w[1] for w in weights]).ravel())
    assert v.spec["attentions"][0]["rows"] == v.spec["attentions"][0]["cols"] == list("fghi")
    assert viz.head_view(gpt, ids).spec["attentions"][0]["rows"] == ["1", "2", "3", "4"]


def test_a_seq2seq_transformer_gives_its_three_attentions():
    m = attnc.models.Seq2SeqTransformer(
        9, 7, d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16, dropout=0.0, seed=0
    )
    src, tgt = np.array([[3, 4, 5, 6, 7]]), np.array([[1, 2, 3]])
    _, weights = m(src, tgt, need_weights=True)
    v = viz.head_view(m, (src, tgt))
    names = [a["name"] for a in v.spec["attentions"]]
    assert names == ["encoder", "decoder_self", "decoder_cross"]
    cross = v.spec["attentions"][2]
    assert cross["rows"] == ["1", "2", "3"] and cross["cols"] == ["3", "4", "5", "6", "7"]
    expected = np.concatenate([np.stack([w[0] for w in weights[k]]).ravel() for k in names])
    np.testing.assert_array_equal(v.data, expected)


def test_a_transformer_on_embeddings_gives_positions_and_each_decoder_layers_weights():
    m = attnc.nn.Transformer(8, 2, 2, 1, dim_feedforward=16, seed=0).eval()
    rng = np.random.default_rng(12)
    src, tgt = rng.random((2, 4, 8)).astype(np.float32), rng.random((2, 3, 8)).astype(np.float32)
    _, weights = m(src, tgt, need_weights=True)
    v = viz.matrix_view(m, (src, tgt), batch=1)
    got = {a["name"]: (a["layers"], a["rows"], a["cols"]) for a in v.spec["attentions"]}
    p4, p3 = ["0", "1", "2", "3"], ["0", "1", "2"]
    assert got == {"encoder": (2, p4, p4), "decoder_self": (1, p3, p3), "decoder_cross": (1, p3, p4)}
    expected = np.concatenate([np.stack([w[1] for w in weights[k]]).ravel() for k in got])
    np.testing.assert_array_equal(v.data, expected)


def test_multihead_attention_shows_every_head_not_their_average():
    mha = attnc.nn.MultiheadAttention(8, 4, batch_first=True, seed=0)
    x = np.random.default_rng(5).standard_normal((1, 6, 8)).astype(np.float32)
    _, w = mha(x, x, x, need_weights=True, average_attn_weights=False)
    v = viz.head_view(mha, (x, x, x))
    assert v.spec["attentions"][0]["heads"] == 4 and v.spec["attentions"][0]["rows"] == [str(i) for i in range(6)]
    np.testing.assert_array_equal(v.data, w[0].ravel())


# --------------------------------------------------------------------------- bad input


def layers_of(*shapes):
    return [np.full(s, 0.25) for s in shapes]


BAD = [
    (
        "ragged layers",
        lambda: viz.head_view(layers_of((1, 2, 4, 4), (1, 3, 4, 4))),
        ValueError,
        r"weights\[1\] has shape \(1, 3, 4, 4\) but weights\[0\] has \(1, 2, 4, 4\)",
    ),
    (
        "a layer of the wrong ndim",
        lambda: viz.head_view(layers_of((1, 2, 4, 4), (2, 4, 4, 1, 1))),
        ValueError,
        r"weights\[1\] must be \(B, H, L, S\) or \(H, L, S\), got shape \(2, 4, 4, 1, 1\)",
    ),
    (
        "a matrix",
        lambda: viz.matrix_view(np.eye(3)),
        ValueError,
        r"weights must be a list .* got an array of shape \(3, 3\)",
    ),
    ("no layers", lambda: viz.model_view([]), ValueError, "weights is an empty list"),
    (
        "too few tokens",
        lambda: viz.head_view(layers_of((1, 2, 4, 4)), list("abc")),
        ValueError,
        r"tokens has 3 entries but weights has S = 4 key positions \(its last axis\)",
    ),
    (
        "target tokens of the wrong length",
        lambda: viz.head_view(layers_of((2, 3, 4)), list("abcd"), target_tokens=["x", "y"]),
        ValueError,
        r"target_tokens has 2 entries but weights has L = 3 query positions",
    ),
    (
        "cross-attention without target tokens",
        lambda: viz.head_view(layers_of((2, 3, 4)), list("abcd")),
        ValueError,
        r"attends from L = 3 positions to S = 4: give target_tokens",
    ),
    (
        "a string as tokens",
        lambda: viz.head_view(layers_of((2, 4, 4)), "abcd"),
        TypeError,
        "tokens must be a sequence of tokens",
    ),
    (
        "nan",
        lambda: viz.head_view([np.full((1, 2, 2), 0.5), np.full((1, 2, 2), np.nan)]),
        ValueError,
        r"weights\[1\] has non-finite values",
    ),
    ("inf", lambda: viz.matrix_view(np.full((1, 2, 2), np.inf)), ValueError, "weights has non-finite values"),
    ("negative", lambda: viz.model_view(np.full((1, 2, 2), -0.5)), ValueError, "weights has negative values"),
    (
        "a dict's bad entry",
        lambda: viz.head_view({"cross": [np.full((1, 2, 2), np.nan)]}),
        ValueError,
        r"weights\['cross'\]\[0\] has non-finite values",
    ),
    ("strings", lambda: viz.head_view(np.array([[["a"]]])), TypeError, "weights must hold real numbers"),
    (
        "batch out of range",
        lambda: viz.head_view(layers_of((2, 1, 3, 3)), batch=2),
        ValueError,
        r"batch=2 is out of range for weights with a batch of 2",
    ),
    ("a float batch", lambda: viz.head_view(layers_of((2, 1, 3, 3)), batch=1.0), TypeError, "batch must be an int"),
    ("a bad scale", lambda: viz.matrix_view(layers_of((1, 3, 3)), scale="global"), ValueError, "scale must be"),
    ("a bad pool", lambda: viz.matrix_view(layers_of((1, 3, 3)), pool="min"), ValueError, "pool must be"),
    (
        "a layer out of range",
        lambda: viz.matrix_view(layers_of((1, 3, 3)), layers=[1]),
        ValueError,
        "layers holds 1, out of range for 1 layers",
    ),
    (
        "a head that is not an int",
        lambda: viz.matrix_view(layers_of((1, 3, 3)), heads=[0.0]),
        TypeError,
        "heads must be a sequence of ints",
    ),
    (
        "min_weight",
        lambda: viz.head_view(layers_of((1, 3, 3)), min_weight=2),
        ValueError,
        r"min_weight must be in \[0, 1\]",
    ),
    (
        "decode without a model",
        lambda: viz.head_view(layers_of((1, 3, 3)), decode=str),
        ValueError,
        "decode names a model",
    ),
]


@pytest.mark.parametrize("call,error,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_target_tokens_with_a_model_is_refused():
    gpt = attnc.models.GPT(5, 4, n_layer=1, n_head=1, n_embd=4, seed=0)
    with pytest.raises(ValueError, match="target_tokens labels weights given as arrays"):
        viz.head_view(gpt, np.array([[1, 2]]), target_tokens=["a", "b"])


def test_a_payload_too_large_for_a_page_is_refused(monkeypatch):
    monkeypatch.setattr(_views, "MAX_BYTES", 4 * 8 * 8 - 1)
    with pytest.raises(ValueError, match=r"the weights take 0 MiB as float32, more than a page holds .* heads="):
        viz.matrix_view(np.full((1, 8, 8), 0.125))
    assert viz.matrix_view(np.full((1, 8, 7), 0.125)).data.size == 56  # one float under the limit


def test_empty_inputs_give_empty_views():
    for shape in [(1, 0, 3, 3), (1, 2, 0, 0), (1, 2, 0, 3)]:
        v = viz.matrix_view([np.zeros(shape)], target_tokens=[] if shape[2] == 0 and shape[3] else None)
        assert v.data.size == 0 and v.spec["attentions"][0]["vmax"] == np.zeros(shape[:2]).tolist()
        assert page_parts(v.to_html())[1].size == 0


# --------------------------------------------------------------------------- the page and the widget


def test_the_page_carries_the_spec_and_the_exact_weights_and_no_address(tmp_path):
    rng = np.random.default_rng(6)
    w = dirichlet(rng, 2, 3, 5, 5).astype(np.float32)
    tokens = ["</script><script>alert(1)</script>", "<b>", "&amp;", '"', "ü"]
    v = viz.head_view([w, w], tokens)
    v.save(tmp_path / "v.html")
    page = (tmp_path / "v.html").read_text(encoding="utf-8")
    spec, data = page_parts(page)
    assert spec == v.spec and spec["attentions"][0]["cols"] == tokens
    np.testing.assert_array_equal(data, v.data)
    assert "</script><script>alert(1)" not in page  # the token cannot close the spec's element
    assert "<\\/script><script>alert(1)<\\/script>" in page
    assert viz._views.static_file("viz.js") in page and viz._views.static_file("viz.css") in page
    addresses = set(re.findall(r"(?:https?|wss?)://[^\s\"'<>)]+", page))
    assert addresses == {"http://www.w3.org/2000/svg"}, addresses  # SVG's namespace name, never fetched


def test_the_widget_holds_the_views_spec_and_weights():
    rng = np.random.default_rng(7)
    v = viz.model_view([dirichlet(rng, 1, 2, 3, 3) for _ in range(2)], list("abc"))
    w = v.widget()
    import anywidget

    assert isinstance(w, anywidget.AnyWidget)
    assert w.spec == v.spec
    np.testing.assert_array_equal(np.frombuffer(w.data, "<f4"), v.data)
    assert w._esm == viz._views.static_file("viz.js") and w._css == viz._views.static_file("viz.css")
    bundle = v._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle  # (data, metadata) from ipywidgets 8
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"]  # a fresh widget's


def test_without_anywidget_the_notebook_gets_the_page_in_a_frame_and_import_attnc_viz_needs_nothing():
    code = (
        "import sys; sys.modules['anywidget'] = None\n"  # an import of it fails, as when it is not installed
        "import numpy as np, attnc.viz as viz\n"
        "v = viz.head_view(np.full((1, 2, 2), 0.5))\n"
        "b = v._repr_mimebundle_()\n"
        "assert b['text/html'].startswith('<iframe srcdoc=\"&lt;!DOCTYPE html&gt;'), b['text/html'][:80]\n"
        "try:\n    v.widget()\nexcept ImportError as e:\n    print(e)\n"
        "print('traitlets' in sys.modules, 'anywidget' in sys.modules and sys.modules['anywidget'] is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ['attnc.viz\'s notebook widgets need anywidget: pip install "attnc[viz]"', "False False"]


# --------------------------------------------------------------------------- the step views


def arrays_of(view):
    """A step view's arrays by name, read back from its payload and spec."""
    return {
        name: view.data[a["offset"] : a["offset"] + int(np.prod(a["shape"]))].reshape(a["shape"])
        for name, a in view.spec["arrays"].items()
    }


def test_alignment_view_ships_the_batch_items_alignment_and_windows():
    rng = np.random.default_rng(8)
    w = dirichlet(rng, 2, 3, 5)  # (B, T, S)
    windows = np.array([[[0, 2], [1, 3], [2, 5]]] * 2)
    v = viz.alignment_view(w, list("abcde"), ["x", "y", "z"], batch=1, windows=windows)
    got = arrays_of(v)
    np.testing.assert_array_equal(got["weights"], w[1].astype(np.float32))
    np.testing.assert_array_equal(got["windows"], windows[1])
    assert (v.spec["steps"], v.spec["rows"], v.spec["cols"]) == (3, ["x", "y", "z"], list("abcde"))


def test_alignment_view_decodes_with_a_seq2seq_model_and_finds_local_windows():
    m = attnc.models.Seq2Seq(20, 12, embed_size=8, hidden_size=16, attention="local-m", window=1, seed=0)
    src = np.array([[3, 4, 5, 6, 7, 8], [9, 8, 7, 6, 5, 4]])
    tokens, align = m.generate(src)
    v = viz.alignment_view(m, src, batch=1, decode=lambda i: f"w{i}")
    got = arrays_of(v)
    np.testing.assert_array_equal(got["weights"], align[1])
    assert v.spec["cols"] == [f"w{i}" for i in src[1]] and v.spec["rows"] == [f"w{i}" for i in tokens[1]]
    for row, (start, end) in zip(align[1], got["windows"].astype(int)):
        if not row.any():  # a step after the end
            assert start == end == 0
            continue
        assert (row[:start] == 0).all() and (row[end:] == 0).all() and row[start] > 0 < row[end - 1]
        assert end - start <= 3  # local-m's window: the step's position +- 1
    with pytest.raises(ValueError, match="target_tokens labels weights given as arrays"):
        viz.alignment_view(m, src, ["a"])


def test_ntm_view_ships_a_real_runs_trace():
    m = attnc.models.NTM(3, 2, controller_size=8, memory_slots=6, memory_width=4, read_heads=2, seed=0)
    _, trace = m(np.random.default_rng(9).random((2, 5, 3)).astype(np.float32), return_trace=True)
    stage = trace.read_weights[:, :, 1]
    v = viz.ntm_view(trace, batch=1, stages={"sharpened": stage})
    got = arrays_of(v)
    for name, field in (("read", "read_weights"), ("write", "write_weights"), ("memory", "memory")):
        np.testing.assert_array_equal(got[name], getattr(trace, field)[1])
    np.testing.assert_array_equal(got["stage:sharpened"], stage[1])
    assert v.spec["stages"] == ["sharpened"] and v.spec["steps"] == 5


def test_pointer_view_takes_generates_output():
    m = attnc.models.PointerNet(2, 8, seed=0)
    pts = np.random.default_rng(10).random((2, 5, 2)).astype(np.float32)
    out = m.generate(pts, constraint="tour")
    v = viz.pointer_view(pts, out, batch=1)
    got = arrays_of(v)
    np.testing.assert_array_equal(got["points"], pts[1])
    np.testing.assert_array_equal(got["pointers"], out.pointers[1])
    np.testing.assert_array_equal(got["indices"], out.indices[1])
    assert v.spec["end"] is True and v.spec["steps"] == out.pointers.shape[1]
    plain = viz.pointer_view(pts[0], out.pointers[0][:, :5])  # no end column, indices the argmax
    np.testing.assert_array_equal(arrays_of(plain)["indices"], out.pointers[0][:, :5].argmax(1))
    assert plain.spec["end"] is False


def test_image_view_scales_integers_and_reorders_channels():
    rng = np.random.default_rng(11)
    rgb = rng.integers(0, 256, (3, 6, 4), dtype=np.uint8)  # channel first
    maps = dirichlet(rng, 2, 6).reshape(2, 2, 3)
    got = arrays_of(viz.image_view(rgb, maps, ["a", "b"]))
    np.testing.assert_allclose(got["image"], rgb.transpose(1, 2, 0) / 255, rtol=1e-6)
    np.testing.assert_array_equal(got["maps"], maps.astype(np.float32))
    grey = arrays_of(viz.image_view(rng.random((4, 4)), dirichlet(rng, 16, 16)))  # (N, N) over the image's grid
    assert grey["image"].shape == (4, 4, 3) and grey["maps"].shape == (16, 4, 4)
    np.testing.assert_array_equal(grey["image"][..., 0], grey["image"][..., 2])


STEP_BAD = [
    ("windows past the source", lambda: viz.alignment_view(np.full((2, 3), 1 / 3), windows=[[0, 2], [1, 4]]),
     ValueError, r"windows must hold 0 <= start <= end <= S = 3"),
    ("float windows", lambda: viz.alignment_view(np.full((2, 3), 1 / 3), windows=[[0, 2.0], [1, 3]]),
     ValueError, r"windows must be int \(T, 2\) = \(2, 2\)"),
    ("alignment tokens", lambda: viz.alignment_view(np.full((2, 3), 1 / 3), ["a", "b"]), ValueError,
     "source_tokens has 2 entries but weights has S = 3 source positions"),
    ("alignment of the wrong ndim", lambda: viz.alignment_view(np.ones(3)), ValueError,
     r"weights must be \(T, S\) or \(B, T, S\), got shape \(3,\)"),
    ("a trace of two", lambda: viz.ntm_view((np.ones((2, 1, 3)), np.ones((2, 1, 3)))), ValueError,
     "trace must be an NTMTrace"),
    ("read heads over other slots", lambda: viz.ntm_view((np.ones((2, 1, 4)), np.ones((2, 1, 3)), np.ones((2, 3, 5)))),
     ValueError, r"trace.read_weights has shape \(2, 1, 4\)"),
    ("a stage of the wrong shape", lambda: viz.ntm_view((np.ones((2, 1, 3)),) * 2 + (np.ones((2, 3, 5)),),
                                                        stages={"content": np.ones((3, 3))}),
     ValueError, r"stages\['content'\] has shape \(3, 3\)"),
    ("3-d points", lambda: viz.pointer_view(np.ones((4, 3)), np.full((2, 4), 0.25)), ValueError,
     "points must be .* planar points"),
    ("pointers over other points", lambda: viz.pointer_view(np.ones((4, 2)), np.full((2, 3), 0.25)), ValueError,
     "pointers has 3 columns: n = 4 points"),
    ("indices out of range", lambda: viz.pointer_view(np.ones((4, 2)), np.full((2, 4), 0.25), [0, 7]), ValueError,
     r"indices must be int \(T,\) = \(2,\) in \[-1, 4\]"),
    ("maps off the grid", lambda: viz.image_view(np.ones((4, 4)), np.full((9, 9), 1 / 9)), ValueError,
     r"maps of shape \(9, 9\) must be \(N, N\) with N = h w = 16"),
    ("an image of 4 channels", lambda: viz.image_view(np.ones((4, 4, 4)), np.ones((1, 2, 2))), ValueError,
     r"image must be \(H, W\), \(H, W, 3\) or \(3, H, W\)"),
    ("negative maps", lambda: viz.image_view(np.ones((4, 4)), -np.ones((1, 2, 2))), ValueError,
     "maps has negative values"),
]  # fmt: skip


@pytest.mark.parametrize("call,error,match", [b[1:] for b in STEP_BAD], ids=[b[0] for b in STEP_BAD])
def test_step_views_refuse_bad_input_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
