"""attnc.save / attnc.load: every registered module class round-trips, and a
file is untrusted data.

A file is checked before anything is allocated (its arrays' headers, then the
module built as shapes only against a budget of what the file stores), so
every malformed file is refused with attnc.FileFormatError, quickly and in a
few MiB (tracemalloc is the witness: NumPy reports its arrays to it), and
nothing in a file is executed or imported. Loading a good file takes the
memory of its parameters, once.
"""

import copy
import importlib
import importlib.util
import io
import json
import os
import pkgutil
import subprocess
import sys
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

import attnc
from attnc.nn import module as module_py

for _info in pkgutil.walk_packages(attnc.__path__, "attnc."):  # every class attnc defines is registered
    if importlib.util.find_spec(_info.name).origin.endswith(".py"):  # not the compiled cores
        importlib.import_module(_info.name)

nn, models = attnc.nn, attnc.models
from attnc.experiments._mixers import MixerAttention, MixerBlock, MixerLM  # noqa: E402
from attnc.experiments.attention_attribution import CLSClassifier  # noqa: E402
from attnc.experiments.attention_pooling import MarkerClassifier  # noqa: E402
from attnc.experiments.lstmn_recall import RecallClassifier  # noqa: E402
from attnc.experiments.ntm_generalisation import LSTMBaseline  # noqa: E402
from attnc.experiments.sagan_shapes import ShapeClassifier  # noqa: E402
from attnc.models.captioner import _Attention as CaptionerAttention  # noqa: E402
from attnc.models.rnn_seq2seq import _Attention as Seq2SeqAttention  # noqa: E402
from attnc.models.rnn_seq2seq import _Position  # noqa: E402
from attnc.nn.normalization import _RMSWeight  # noqa: E402

MiB = 2**20


def _encoder(seed):
    layer = nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, norm_first=True, seed=seed)
    return nn.TransformerEncoder(layer, 2, nn.LayerNorm(8))


def _decoder(seed):
    return nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 12, activation="gelu", seed=seed), 1)


# One small instance of every module class attnc defines, with non-default
# arguments where there are some; a class missing here fails the test below.
FACTORIES = {
    "attnc.experiments.attention_attribution.CLSClassifier": lambda: CLSClassifier(11, 7, 3, 8, 2, 2, 12, seed=9),
    "attnc.experiments.ntm_generalisation.LSTMBaseline": lambda: LSTMBaseline(5, 4, 6, 2, seed=3),
    "attnc.nn.differential.DifferentialAttention": lambda: nn.DifferentialAttention(
        8, 2, 3, num_kv_heads=1, bias=True, rotary=nn.RotaryEmbedding(2, interleaved=True), seed=10
    ),
    "attnc.nn.latent.MultiheadLatentAttention": lambda: nn.MultiheadLatentAttention(
        16, 2, kv_lora_rank=4, q_lora_rank=6, qk_rope_head_dim=2, seed=11
    ),
    "attnc.nn.linear_attention.LinearAttention": lambda: nn.LinearAttention(
        8, 2, "favor+", num_features=6, kdim=5, seed=12, projection_seed=3
    ),
    "attnc.nn.normalization._RMSWeight": lambda: _RMSWeight(5, np.float64),
    "attnc.nn.rotary.RotaryEmbedding": lambda: nn.RotaryEmbedding(8, base=500.0, rotary_dim=4, interleaved=True),
    "attnc.nn.activation.ReLU": lambda: nn.ReLU(dtype=np.float64),
    "attnc.nn.activation.GELU": lambda: nn.GELU(approximate="tanh"),
    "attnc.nn.conv.Conv1d": lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1, dilation=1, seed=1),
    "attnc.nn.conv.Conv2d": lambda: nn.Conv2d(2, 3, (3, 2), padding="same", bias=False, seed=2),
    "attnc.nn.conv.CausalConv1d": lambda: nn.CausalConv1d(3, 2, 2, dilation=3, dtype=np.float64, seed=3),
    "attnc.nn.linear.Linear": lambda: nn.Linear(5, 3, seed=4),
    "attnc.nn.lstmn.LSTMN": lambda: nn.LSTMN(4, 6, attention_size=5, seed=5),
    "attnc.nn.module.ModuleList": lambda: module_py.ModuleList(
        [nn.Linear(2, 3, seed=6), nn.ReLU(), nn.LayerNorm((3,), eps=1e-3)]
    ),
    "attnc.nn.multihead.MultiheadAttention": lambda: nn.MultiheadAttention(
        6, 2, add_bias_kv=True, kdim=4, vdim=5, seed=7, sinks=True, alibi=True, window=(3, None), softcap=9.0
    ),
    "attnc.nn.normalization.LayerNorm": lambda: nn.LayerNorm((2, 3), bias=False, dtype=np.float64),
    "attnc.nn.pooling.AttentionPooling": lambda: nn.AttentionPooling(5, 4, bias=False, seed=8),
    "attnc.nn.rnn.GRU": lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True, seed=9),
    "attnc.nn.rnn.GRUCell": lambda: nn.GRUCell(3, 4, bias=False, seed=10),
    "attnc.nn.rnn.LSTM": lambda: nn.LSTM(3, 4, num_layers=2, dropout=0.5, seed=11),
    "attnc.nn.rnn.LSTMCell": lambda: nn.LSTMCell(3, 4, dtype=np.float64, seed=12),
    "attnc.nn.self_attention2d.SelfAttention2d": lambda: nn.SelfAttention2d(8, 4, seed=13),
    "attnc.nn.snail.AttentionBlock": lambda: nn.AttentionBlock(4, 3, 2, seed=14),
    "attnc.nn.snail.DenseBlock": lambda: nn.DenseBlock(4, 3, 2, seed=15),
    "attnc.nn.snail.TCBlock": lambda: nn.TCBlock(4, 9, 2, seed=16),
    "attnc.nn.sparse.Embedding": lambda: nn.Embedding(7, 3, padding_idx=-1, seed=17),
    "attnc.nn.transformer.Transformer": lambda: nn.Transformer(8, 2, 1, 2, 12, custom_encoder=_encoder(18), seed=18),
    "attnc.nn.transformer.TransformerDecoder": lambda: _decoder(19),
    "attnc.nn.transformer.TransformerDecoderLayer": lambda: nn.TransformerDecoderLayer(
        8, 4, 16, bias=False, seed=20, attention="sigmoid", sigmoid_bias=-1.5
    ),
    "attnc.nn.transformer.TransformerEncoder": lambda: _encoder(21),
    "attnc.nn.transformer.TransformerEncoderLayer": lambda: nn.TransformerEncoderLayer(8, 2, 16, seed=22),
    "attnc.models.bert.BERT": lambda: models.BERT(
        9, 6, 2, num_hidden_layers=2, num_attention_heads=2, hidden_size=8, intermediate_size=12, seed=35
    ),
    "attnc.models.bert.BERTPooler": lambda: models.BERTPooler(8, seed=36),
    "attnc.models.captioner.Captioner": lambda: models.Captioner(6, 9, 4, 5, 3, attention="hard", gate=False, seed=23),
    "attnc.models.captioner._Attention": lambda: CaptionerAttention(6, 5, 3, seed=24),
    "attnc.models.decomposable.DecomposableAttention": lambda: models.DecomposableAttention(
        9, 4, 5, 3, padding_idx=None, context=1, project=False, seed=25
    ),
    "attnc.models.decomposable.FeedForward": lambda: models.decomposable.FeedForward(4, 5, 0.2, seed=26),
    "attnc.models.gpt.GPT": lambda: models.GPT(7, 6, n_layer=2, n_head=2, n_embd=8, seed=27),
    "attnc.models.ntm.NTM": lambda: models.NTM(
        3, 2, "feedforward", 6, 5, 4, read_heads=2, memory_init="learned", seed=28
    ),
    "attnc.models.pointer.PointerNet": lambda: models.PointerNet(2, 5, embedding_size=4, bidirectional=True, seed=29),
    "attnc.models.rnn_seq2seq.Seq2Seq": lambda: models.Seq2Seq(7, 8, 4, 5, "luong-location", max_source_len=6, seed=30),
    "attnc.models.rnn_seq2seq._Attention": lambda: Seq2SeqAttention("local-p", 4, 8, 3, None, seed=31),
    "attnc.models.rnn_seq2seq._Position": lambda: _Position(4, 3, dtype=np.float64, seed=32),
    "attnc.models.seq2seq_transformer.Seq2SeqTransformer": lambda: models.Seq2SeqTransformer(
        7, 9, 8, 2, 1, 2, 12, max_len=10, norm_first=True, seed=33
    ),
    "attnc.models.snail.SNAIL": lambda: models.SNAIL(3, 1, 4, 6, 3, ((4, 3), (5, 2)), seed=34),
    "attnc.experiments.attention_pooling.MarkerClassifier": lambda: MarkerClassifier(9, 3, 4, 5, 3, seed=35),
    "attnc.experiments.lstmn_recall.RecallClassifier": lambda: RecallClassifier((5, 6), 4, 3, 5, 4, seed=36),
    "attnc.experiments.sagan_shapes.ShapeClassifier": lambda: ShapeClassifier(8, 4, reduction=2, seed=37),
    "attnc.experiments._mixers.MixerAttention": lambda: MixerAttention(8, 2, "window", "alibi", 3, True, seed=38),
    "attnc.experiments._mixers.MixerBlock": lambda: MixerBlock(8, 2, "performer", "rope", projection_seed=4, seed=39),
    "attnc.experiments._mixers.MixerLM": lambda: MixerLM(
        9, 6, 8, 2, 1, "differential", "learned", dim_feedforward=12, dtype=np.float64, seed=40
    ),
}


def attnc_classes():
    """The registered classes that attnc's own modules define."""
    return {
        name: cls
        for name, cls in module_py.Module._registry.items()
        if cls.__module__.startswith("attnc.")
        and getattr(sys.modules[cls.__module__], cls.__name__, None) is cls
        and name == f"{cls.__module__}.{cls.__qualname__}"
    }  # not the names of files saved before a move


def test_a_file_saved_before_its_class_moved_loads(tmp_path):
    """Seq2SeqTransformer moved from attnc.models.seq2seq; a file that names
    its former place builds the same model."""
    m = FACTORIES["attnc.models.seq2seq_transformer.Seq2SeqTransformer"]().eval()
    attnc.save(tmp_path / "m.npz", m)
    with np.load(tmp_path / "m.npz") as f:
        members = dict(f)
    header = json.loads(str(members.pop("__attnc__")))
    header["class"] = "attnc.models.seq2seq.Seq2SeqTransformer"
    loaded = attnc.load(write(tmp_path / "old.npz", header, members))
    assert type(loaded) is models.Seq2SeqTransformer
    src, tgt = np.array([[1, 2, 3]]), np.array([[0, 4]])
    assert np.asarray(loaded(src, tgt)).tobytes() == np.asarray(m(src, tgt)).tobytes()


def test_every_registered_class_has_a_factory_here():
    assert set(FACTORIES) == set(attnc_classes())


def test_abstract_bases_are_not_registered():
    for name in (
        "attnc.nn.conv._ConvNd",
        "attnc.nn.rnn._RNNBase",
        "attnc.nn.rnn._CellBase",
        "attnc.nn.transformer._Layer",
    ):
        assert name not in module_py.Module._registry


def test_classes_are_imported_only_from_attnc_modules_that_define_them():
    """attnc.load imports at most one of _MODULE_SOURCES: together with what
    ``import attnc`` imports, they are where every class is defined."""
    for name, cls in attnc_classes().items():
        assert cls.__module__.startswith("attnc.nn.") or any(
            name.startswith(m + ".") for m in module_py._MODULE_SOURCES
        ), name


def _parameters_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and sa[k].shape == sb[k].shape, k
        assert sa[k].tobytes() == sb[k].tobytes(), k


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_every_class_round_trips(name, tmp_path):
    """Class, configuration, dtype (also one cast after construction) and
    every parameter's bits come back; the loaded module is in eval mode and
    saves to the same file contents."""
    for cast in (False, True):
        m = FACTORIES[name]()
        assert f"{type(m).__module__}.{type(m).__qualname__}" == name
        if cast:
            m.to(np.float64 if m.dtype == np.float32 else np.float32)
        path = tmp_path / f"{cast}.npz"
        attnc.save(path, m)
        loaded = attnc.load(path)
        assert type(loaded) is type(m) and loaded.dtype == m.dtype and not loaded.training
        assert all(p.flags.c_contiguous and p.flags.writeable for p in loaded.parameters())
        _parameters_equal(loaded, m)
        assert module_py._describe(loaded) == json.loads(json.dumps(module_py._describe(m)))
        attnc.save(tmp_path / "again.npz", loaded)
        with np.load(path) as a, np.load(tmp_path / "again.npz") as b:
            assert sorted(a.files) == sorted(b.files)
            assert all(a[k].tobytes() == b[k].tobytes() for k in a.files)


def test_loaded_modules_compute_as_the_saved_ones(tmp_path):
    """The loaded parameters are the ones used (a cell shares its inner layer's, a
    stack's layers are distinct): same outputs, bit for bit."""
    rng = np.random.default_rng(0)
    cases = [
        (FACTORIES["attnc.nn.rnn.LSTMCell"](), (rng.standard_normal((2, 3)),)),
        (FACTORIES["attnc.nn.transformer.TransformerEncoder"](), (rng.standard_normal((2, 5, 8)).astype(np.float32),)),
        (FACTORIES["attnc.models.gpt.GPT"](), (rng.integers(0, 7, (2, 6)),)),
        (
            FACTORIES["attnc.models.seq2seq_transformer.Seq2SeqTransformer"](),
            (rng.integers(0, 7, (2, 4)), rng.integers(0, 9, (2, 3))),
        ),
    ]
    for i, (m, args) in enumerate(cases):
        m.eval()
        attnc.save(tmp_path / f"{i}.npz", m)
        loaded = attnc.load(tmp_path / f"{i}.npz")
        assert np.asarray(loaded(*args)).tobytes() == np.asarray(m(*args)).tobytes(), type(m).__name__


def test_classes_load_in_a_fresh_interpreter(tmp_path):
    """A file names classes of modules not imported yet (attnc.models, the
    experiments'): attnc.load imports them from _MODULE_SOURCES."""
    paths = []
    for i, name in enumerate(sorted(FACTORIES)):
        paths.append(str(tmp_path / f"{i}.npz"))
        attnc.save(paths[-1], FACTORIES[name]())
    code = (
        "import sys, attnc\n"
        "for p in sys.argv[1:]:\n"
        "    m = attnc.load(p)\n"
        "    print(f'{type(m).__module__}.{type(m).__qualname__}')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *paths],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(attnc.__file__)),
    )
    assert out.stdout.split() == sorted(FACTORIES)


# --------------------------------------------------------------------------- refusing files


def refused(path, match=None, *, seconds=2.0, slack=4 * MiB):
    """attnc.load(path) raises FileFormatError (matching), within seconds and
    with a tracemalloc peak under the file's size plus slack."""
    size = os.path.getsize(path)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(attnc.FileFormatError, match=match) as info:
            attnc.load(path)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, ValueError) and str(path) in str(info.value)
    assert elapsed < seconds, f"refused after {elapsed:.2f} s"
    assert peak < size + slack, f"refusing took {peak / MiB:.1f} MiB for a file of {size / MiB:.2f} MiB"
    return info.value


def write(path, header, arrays=None, **kw):
    """An archive as attnc.save writes it, with any header (a dict is JSON-encoded) and arrays."""
    members = (
        {} if header is None else {"__attnc__": np.array(json.dumps(header) if isinstance(header, dict) else header)}
    )
    members.update(arrays or {})
    np.savez(path, **members, **kw)
    return path


def header_of(module):
    return dict(module_py._describe(module), dtype=module.dtype.name)


def linear_file(tmp_path, config=(), arrays=(), name="linear.npz"):
    """A good Linear(3, 2) file, with changes to its configuration and to its
    arrays (None: left out)."""
    m = nn.Linear(3, 2, seed=0)
    header = header_of(m)
    header["config"].update(config)
    state = m.state_dict()
    state.update(arrays)
    return write(tmp_path / name, header, {k: v for k, v in state.items() if v is not None})


def test_the_issues_files_are_refused_at_once(tmp_path):
    """A 1 KB file declaring Linear(20000, 20000) took 3.2 GB, a 30,000-layer
    encoder seconds and 530 MB: now both are refused from the headers."""
    refused(
        linear_file(tmp_path, {"in_features": 20000, "out_features": 20000}), "more parameters than the file stores"
    )
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1)
    for layers in (30_000, 10**6, 10**15):
        header = header_of(enc)
        header["config"]["num_layers"] = layers
        refused(
            write(tmp_path / "deep.npz", header, enc.state_dict()), "more parameters than the file stores", seconds=0.5
        )
    gpt = models.GPT(5, 4, n_layer=1, n_head=1, n_embd=4)
    header = header_of(gpt)
    header["config"]["n_layer"] = 10**9
    refused(write(tmp_path / "gpt.npz", header, gpt.state_dict()), "more parameters", seconds=0.5)


def test_damaged_archives(tmp_path):
    good = linear_file(tmp_path)
    data = good.read_bytes()
    for i, damaged in enumerate(
        [data[: len(data) // 2], data[:-10], b"", b"not a zip file at all", data[:100] + bytes(200) + data[300:]]
    ):
        path = tmp_path / f"damaged{i}.npz"
        path.write_bytes(damaged)
        refused(path)
    # a flipped bit in an array's data: the zip's CRC
    offset = data.index(np.load(good)["weight"].tobytes())
    path = tmp_path / "crc.npz"
    path.write_bytes(data[:offset] + bytes([data[offset] ^ 1]) + data[offset + 1 :])
    refused(path, "CRC")


def test_headers_that_are_not_a_description(tmp_path):
    refused(write(tmp_path / "none.npz", None, {"weight": np.zeros(3)}), "no __attnc__ header")
    cases = [
        ("not json {", "not JSON"),
        ("[" * 100_000 + "]" * 100_000, "not JSON|nests"),  # the JSON parser's recursion
        ("[1, 2]", "not a JSON object"),
        ('"Linear"', "not a JSON object"),
        ('{"class": 5, "config": {}}', "class must be a name"),
        ('{"class": "attnc.nn.linear.Linear"}', "described as"),
        ('{"class": "attnc.nn.linear.Linear", "config": [3, 2]}', "described as"),
        ('{"class": "attnc.nn.linear.Linear", "config": {}, "other": 1}', "described as"),
        (
            '{"class": "attnc.nn.linear.Linear", "config": {"in_features": 3, "out_features": 2}, "dtype": "float16"}',
            "dtype must be",
        ),
        (
            '{"class": "attnc.nn.linear.Linear", "config": {"in_features": 3, "out_features": 2}, "dtype": null}',
            "dtype must be",
        ),
        (
            '{"class": "attnc.nn.linear.Linear", "config": {"in_features": 1' + "0" * 5000 + ', "out_features": 2}}',
            "not JSON",
        ),  # Python's limit on an int's digits
    ]
    for i, (text, match) in enumerate(cases):
        refused(write(tmp_path / f"h{i}.npz", text, {"weight": np.zeros((2, 3), np.float32)}), match)
    refused(write(tmp_path / "float.npz", None, {"__attnc__": np.zeros(3)}), "not a string")
    not_unicode = np.frombuffer(np.array([0xFFFFFFFF, 0x7B], np.uint32).tobytes(), "<U2").reshape(())
    refused(write(tmp_path / "codes.npz", None, {"__attnc__": not_unicode}), "not JSON")
    refused(write(tmp_path / "2d.npz", None, {"__attnc__": np.array([["a", "b"]])}), "not a string")


def test_classes_outside_the_registry(tmp_path, monkeypatch):
    """Names are looked up in the registry: nothing else is imported, called or built."""
    imported = []
    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name) or real_import(name, *a))
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    before = set(sys.modules)
    for name in (
        "attnc.os.system",
        "builtins.eval",
        "os.system",
        "subprocess.run",
        "attnc.nn.module.Module",
        "attnc.nn.rnn._RNNBase",
        "attnc.nn.linear.Nope",
        "attnc.models.os.system",
        "attnc.experiments.ntm_copy.main",
        "attnc.nn.linear.Linear.__init__",
        "",
        "attnc.",
    ):
        refused(write(tmp_path / "c.npz", {"class": name, "config": {"command": "touch x"}}), "unknown module class")
    assert not calls and set(sys.modules) == before
    assert set(imported) <= set(module_py._MODULE_SOURCES)
    assert not (tmp_path / "x").exists()


def test_files_never_unpickle(tmp_path):
    """Object arrays (pickles) are refused from their headers: a pickle that
    would create a file when unpickled creates nothing."""
    marker = tmp_path / "unpickled"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = np.array([Evil()], dtype=object)
    refused(linear_file(tmp_path, arrays={"weight": evil}), "dtype object")
    refused(write(tmp_path / "h.npz", None, {"__attnc__": evil}), "dtype object")
    assert not marker.exists()


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"in_features": "3"}, "in_features must be an int"),
        ({"in_features": 3.0}, "in_features must be an int"),
        ({"in_features": True}, "in_features must be an int"),
        ({"in_features": -3}, "in_features must be >= 0"),
        ({"in_features": [3]}, "in_features must be an int"),
        ({"in_features": {"__module__": {"class": "attnc.nn.activation.ReLU", "config": {}}}}, "in_features"),
        ({"in_features": {"__module__": 5}}, "described as"),
        ({"in_features": 10**12}, "more parameters"),
        ({"in_features": 2**64, "out_features": 0}, "Maximum allowed dimension"),
        ({"in_features": 10**300}, "more parameters"),
        ({"bias": None}, r"unexpected \['bias'\]"),
        ({"unknown": 1}, "unexpected keyword"),
        ({"dtype": "object"}, "dtype must be float32 or float64"),
        ({"dtype": "no such type"}, "TypeError"),
        ({"seed": "abc"}, "Linear"),
    ],
)
def test_configurations_constructors_refuse(tmp_path, changes, match):
    refused(linear_file(tmp_path, changes), match)


def test_configurations_of_other_classes(tmp_path):
    """Sizes, kinds and counts of models, every one checked before anything is made."""
    cases = [
        (nn.Embedding(4, 3), {"num_embeddings": -1}, "num_embeddings"),
        (nn.Embedding(4, 3), {"padding_idx": 9}, "padding_idx"),
        (nn.LayerNorm(3), {"normalized_shape": [10**6, 10**6]}, "more parameters"),
        (nn.LayerNorm(3), {"normalized_shape": "abc"}, "normalized_shape"),
        (nn.LayerNorm(3), {"eps": "small"}, "eps"),
        (nn.LayerNorm(3), {"eps": -1}, "eps"),
        (nn.MultiheadAttention(4, 2), {"kdim": -5}, "kdim"),
        (nn.MultiheadAttention(4, 2), {"num_heads": 3}, "divisible"),
        (nn.LSTM(2, 3), {"num_layers": 10**6}, "num_layers must be <= 64"),
        (nn.LSTM(2, 3), {"dropout": "high"}, "dropout"),
        (nn.Conv1d(2, 3, 3), {"kernel_size": 10**9}, "more parameters"),
        (nn.Conv1d(2, 3, 3), {"stride": 0}, "stride"),
        (nn.Conv1d(2, 3, 3), {"padding": 10**12}, "padding"),  # it would size every output
        (nn.Conv2d(2, 3, 3, dilation=2), {"padding": [4, 5]}, "padding"),
        (nn.TCBlock(2, 4, 2), {"seq_len": 10**200}, "more parameters"),
        (models.SNAIL(2, 1, 3, 4, 2, ((2, 2),)), {"attention_sizes": [[2, 2]] * 10**4}, "more parameters"),
        (models.Seq2Seq(5, 5, 3, 4, "luong-location", max_source_len=4), {"max_source_len": 10**9}, "more parameters"),
        (models.Seq2Seq(5, 5, 3, 4), {"attention": "none of these"}, "attention"),
        (models.NTM(2, 2, "feedforward", 4, 3, 2), {"memory_slots": 10**12}, "more parameters"),
        (models.NTM(2, 2, "feedforward", 4, 3, 2), {"clip": float("nan")}, "clip"),
        (models.GPT(5, 4, 1, 1, 4), {"dropout": 1.5}, "dropout"),
        (nn.TransformerEncoderLayer(4, 2, 8), {"activation": "os.system"}, "activation"),
        (
            module_py.ModuleList([nn.ReLU()]),
            {"modules": [{"__module__": {"class": "builtins.eval", "config": {}}}]},
            "unknown module class",
        ),
        (module_py.ModuleList([nn.ReLU()]), {"modules": [1, "os.system"]}, r"modules\[0\] must be an attnc.nn.Module"),
        (module_py.ModuleList([nn.ReLU()]), {"modules": 5}, "ModuleList"),
    ]
    for i, (m, changes, match) in enumerate(cases):
        header = header_of(m)
        header["config"].update(changes)
        refused(write(tmp_path / f"{i}.npz", header, m.state_dict()), match)


def test_nesting(tmp_path):
    m = module_py.ModuleList([])
    header = header_of(m)
    deep = {"class": "attnc.nn.module.ModuleList", "config": {"modules": []}}
    for _ in range(100):
        deep = {"class": "attnc.nn.module.ModuleList", "config": {"modules": [{"__module__": deep}]}}
    refused(write(tmp_path / "modules.npz", deep), "nests more than")
    header["config"]["modules"] = json.loads("[" * 500 + "]" * 500)
    refused(write(tmp_path / "lists.npz", header), "nests more than")


@pytest.mark.parametrize(
    "arrays,match",
    [
        ({"bias": None}, "more parameters than the file stores"),  # the budget notices first
        ({"weights": np.zeros((2, 3), np.float32), "weight": None}, r"missing \['weight'\], unexpected \['weights'\]"),
        ({"extra": np.zeros(2, np.float32)}, r"unexpected \['extra'\]"),
        ({"weight": np.zeros((3, 2), np.float32)}, r"shape \(3, 2\), the module's is \(2, 3\)"),
        ({"weight": np.zeros((2, 3), np.float64)}, "dtype float64, the file's header says float32"),
        ({"weight": np.zeros((2, 3), np.float16)}, "not float32 or float64"),
        ({"weight": np.zeros((2, 3), np.int32)}, "not float32 or float64"),
        ({"weight": np.zeros((2, 3), np.complex64)}, "not float32 or float64"),
        ({"weight": np.zeros((2, 3), [("a", np.float32)])}, "not float32 or float64"),
        ({"weight": np.array("text")}, "not float32 or float64"),
    ],
)
def test_arrays_that_do_not_fit(tmp_path, arrays, match):
    refused(linear_file(tmp_path, arrays=arrays), match)


def _zip(path, members):
    """An archive with exactly these (name, bytes) members, stored."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def _npy(array, shape=None):
    """array's .npy bytes, its header claiming shape if given."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf,
        {
            "descr": np.lib.format.dtype_to_descr(array.dtype),
            "fortran_order": False,
            "shape": array.shape if shape is None else shape,
        },
    )
    return buf.getvalue() + array.tobytes()


def test_members_the_archive_lies_about(tmp_path):
    """Array headers claiming more (or less) than their member holds, members
    that are not arrays, named twice, compressed, overlapping: refused
    before any array is read."""
    m = nn.Linear(3, 2, seed=0)
    head = ("__attnc__.npy", _npy(np.array(json.dumps(header_of(m)))))
    w, b = m.weight, m.bias
    cases = [
        ([head, ("weight.npy", _npy(w, (10**6, 10**6))), ("bias.npy", _npy(b))], "holds 24 bytes"),
        ([head, ("weight.npy", _npy(w, (2**40,))), ("bias.npy", _npy(b))], "holds 24 bytes"),
        ([head, ("weight.npy", _npy(w, (2, 3))[:-4]), ("bias.npy", _npy(b))], "holds 20 bytes"),
        ([head, ("weight.npy", _npy(w, (2, -3))), ("bias.npy", _npy(b))], "weight.npy"),
        ([head, ("weight.npy", b"\x93NUMPY\x01\x00" + b"\xff" * 20), ("bias.npy", _npy(b))], "weight.npy"),
        ([head, ("weight.npy", _npy(w)), ("bias.npy", _npy(b)), ("notes.txt", b"hello")], "not a .npy array"),
        ([head, ("weight.npy", _npy(w)), ("weight.npy", _npy(w)), ("bias.npy", _npy(b))], "appears twice"),
        ([head, head, ("weight.npy", _npy(w)), ("bias.npy", _npy(b))], "appears twice"),
    ]
    for i, (members, match) in enumerate(cases):
        with pytest.warns(UserWarning, match="Duplicate") if "twice" in match else _nothing():
            path = _zip(tmp_path / f"{i}.npz", members)
        refused(path, match)
    np.savez_compressed(tmp_path / "compressed.npz", __attnc__=np.array(json.dumps(header_of(m))), **m.state_dict())
    refused(tmp_path / "compressed.npz", "compressed")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_overlapping_members(tmp_path):
    """A zip bomb's trick: many directory entries for one member's data. The
    members' sizes add up to more than the file, which is refused."""
    big = nn.Linear(64, 64, seed=0)
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("__attnc__.npy", _npy(np.array(json.dumps(header_of(big)))))
        zf.writestr("weight.npy", _npy(big.weight))
        info = zf.getinfo("weight.npy")
        for i in range(20):
            twin = copy.copy(info)
            twin.filename = f"w{i}.npy"
            zf.filelist.append(twin)
    refused(path, "more bytes than the file has")


# --------------------------------------------------------------------------- good files


def test_loading_takes_the_parameters_memory_once(tmp_path):
    """A 16 MiB module loads in 16 MiB and a little: no random initialisation,
    no inflated copy, no cast copy (it took three times that)."""
    m = nn.Linear(1024, 2048, bias=False, dtype=np.float64, seed=0)
    attnc.save(tmp_path / "big.npz", m)
    tracemalloc.start()
    try:
        loaded = attnc.load(tmp_path / "big.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert loaded.weight.tobytes() == m.weight.tobytes()
    assert peak < m.weight.nbytes + 2 * MiB, f"{peak / MiB:.1f} MiB"


def test_values_a_file_sets_size_nothing_but_parameters(tmp_path):
    """Seq2SeqTransformer's max_len bounds its inputs' length and sizes no
    table: a file may set it to anything and loads in its own memory."""
    m = models.Seq2SeqTransformer(5, 6, 8, 2, 1, 1, 8, max_len=4, seed=0).eval()
    header = header_of(m)
    header["config"]["max_len"] = 10**12
    path = write(tmp_path / "long.npz", header, m.state_dict())
    tracemalloc.start()
    try:
        loaded = attnc.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert loaded.max_len == 10**12 and peak < os.path.getsize(path) + 2 * MiB
    src, tgt = np.array([[1, 2, 3]]), np.array([[0, 4]])
    assert loaded(src, tgt).tobytes() == m(src, tgt).tobytes()


def test_fortran_order_and_big_endian_arrays_load(tmp_path):
    """Any .npy a NumPy writes of the right shape and float dtype is read right."""
    m = nn.Linear(3, 2, dtype=np.float64, seed=0)
    path = linear_file(
        tmp_path,
        arrays={
            "weight": np.asfortranarray(m.weight.astype(np.float32)),
            "bias": m.bias.astype(np.float32).astype(">f4"),
        },
    )
    loaded = attnc.load(path)
    np.testing.assert_array_equal(loaded.weight, m.weight.astype(np.float32))
    np.testing.assert_array_equal(loaded.bias, m.bias.astype(np.float32))
    assert loaded.weight.flags.c_contiguous and loaded.bias.dtype == np.dtype(np.float32)


def test_files_with_custom_module_classes(tmp_path):
    """A subclass of attnc.nn.Module defined by the user loads once defined,
    its own parameters checked as attnc's are."""

    class Scale(nn.Module):
        def __init__(self, n: int, *, dtype=np.float32):
            super().__init__(dtype)
            self.register_parameter("weight", np.ones(n))

    try:
        m = Scale(4)
        m.weight = np.arange(4.0)
        attnc.save(tmp_path / "scale.npz", m)
        np.testing.assert_array_equal(attnc.load(tmp_path / "scale.npz").weight, np.arange(4.0))
        header = header_of(m)
        header["config"]["n"] = 5
        refused(write(tmp_path / "scale5.npz", header, m.state_dict()), "more parameters")
    finally:
        del module_py.Module._registry[f"{Scale.__module__}.{Scale.__qualname__}"]


def test_missing_files_are_os_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        attnc.load(tmp_path / "absent.npz")
