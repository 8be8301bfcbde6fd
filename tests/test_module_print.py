"""print(module) shows the module tree as torch prints the same module, and
module.summary() adds each module's parameter count and the total.

attnc's modules that mirror torch's print torch's text, with two
differences of structure: attnc fuses dropout into the layers that use it
(torch's Dropout children are not modules here), and MultiheadAttention's
out_proj is a plain Linear (torch's NonDynamicallyQuantizableLinear is a
Linear marked for its quantisation tools)."""

import re

import numpy as np
import pytest

import attnc
import attnc.models
from attnc.nn.module import ModuleList

A = attnc.nn

# (attnc module, the same torch module) builders: (args, kwargs) shared by both.
PAIRS = {
    "Linear": ("Linear", (4, 3), {}),
    "Linear no bias": ("Linear", (4, 3), {"bias": False}),
    "LayerNorm": ("LayerNorm", (8,), {}),
    "LayerNorm no bias": ("LayerNorm", ((2, 8),), {"eps": 1e-6, "bias": False}),
    "LayerNorm no affine": ("LayerNorm", (8,), {"elementwise_affine": False}),
    "MultiheadAttention": ("MultiheadAttention", (8, 2), {"batch_first": True}),
    "TransformerEncoderLayer": ("TransformerEncoderLayer", (8, 2, 16), {"batch_first": True}),
    "TransformerEncoderLayer gelu": (
        "TransformerEncoderLayer",
        (8, 2, 16),
        {"activation": "gelu", "norm_first": True, "batch_first": True},
    ),
    "TransformerDecoderLayer": ("TransformerDecoderLayer", (8, 2, 16), {"batch_first": True}),
    "Transformer": ("Transformer", (8, 2, 2, 1, 16), {"batch_first": True}),
    "LSTM": ("LSTM", (4, 8), {"batch_first": True}),
    "LSTM deep": ("LSTM", (4, 8, 2), {"batch_first": True, "dropout": 0.25, "bidirectional": True, "bias": False}),
    "GRU": ("GRU", (4, 8), {"batch_first": True, "num_layers": 3}),
    "LSTMCell": ("LSTMCell", (4, 8), {}),
    "GRUCell no bias": ("GRUCell", (4, 8), {"bias": False}),
    "Conv1d": ("Conv1d", (3, 4, 3), {}),
    "Conv1d dilated": ("Conv1d", (4, 6, 3), {"dilation": 2, "groups": 2, "bias": False, "padding": "same"}),
    "Conv2d": ("Conv2d", (3, 4, (3, 5)), {"padding": 1, "stride": 2}),
    "Embedding": ("Embedding", (10, 4), {}),
    "Embedding padded": ("Embedding", (10, 4), {"padding_idx": 0, "max_norm": 1.0, "norm_type": 3.0}),
    "GELU": ("GELU", (), {"approximate": "tanh"}),
    "ReLU": ("ReLU", (), {}),
}


def build(torch, name):
    cls, args, kwargs = PAIRS[name]
    ours = getattr(A, cls)(*args, **kwargs)
    theirs_kwargs = dict(kwargs)
    if cls == "Transformer":  # torch's Transformer takes the layer counts by name
        theirs_kwargs.update(num_encoder_layers=args[2], num_decoder_layers=args[3], dim_feedforward=args[4])
        args = args[:2]
    return ours, getattr(torch.nn, cls)(*args, **theirs_kwargs)


def torch_text(module) -> str:
    """torch's repr of module, without the two differences of structure."""
    lines = [line for line in repr(module).split("\n") if not re.fullmatch(r"\s*\(dropout\d?\): Dropout\(.*\)", line)]
    return "\n".join(lines).replace("NonDynamicallyQuantizableLinear", "Linear")


def summary_rows(text: str) -> tuple[list[tuple[int | None, str]], str]:
    """([(count or None, repr line) for each line of a summary], its total line)."""
    *body, total = text.split("\n")
    width = len(body[0]) - len(body[0].lstrip()) + len(body[0].split()[0])  # the first count's column
    rows = [(int(line[:width].replace(",", "")) if line[:width].strip() else None, line[width + 2 :]) for line in body]
    return rows, total


def torch_counts(module) -> list[int]:
    """The parameter count of each module torch's repr names, in its order
    (one per group of equal copies in a ModuleList, as printed)."""
    counts = [sum(p.numel() for p in module.parameters())]
    children = list(module.named_children())
    if type(module).__name__ == "ModuleList":
        reprs = [repr(m) for _, m in children]
        children = [c for i, c in enumerate(children) if i == 0 or reprs[i] != reprs[i - 1]]
    for _, child in children:
        if type(child).__name__ != "Dropout":
            counts += torch_counts(child)
    return counts


@pytest.mark.parametrize("name", PAIRS)
def test_repr_is_torchs(torch, name):
    ours, theirs = build(torch, name)
    assert repr(ours) == torch_text(theirs)
    assert str(ours) == repr(ours)


@pytest.mark.parametrize("name", PAIRS)
def test_summary_counts_every_modules_parameters(torch, name):
    ours, theirs = build(torch, name)
    rows, total = summary_rows(ours.summary())
    assert "\n".join(text for _, text in rows) == repr(ours)
    assert [c for c, _ in rows if c is not None] == torch_counts(theirs)
    assert total == f"Total parameters: {sum(p.numel() for p in theirs.parameters()):,}"


def test_module_list_groups_equal_copies_as_torch(torch):
    ours = ModuleList([A.Linear(2, 3), A.Linear(2, 3), A.Linear(2, 3), A.Linear(3, 3), A.Linear(2, 3)])
    theirs = torch.nn.ModuleList([torch.nn.Linear(2, 3)] * 3 + [torch.nn.Linear(3, 3), torch.nn.Linear(2, 3)])
    assert repr(ours) == repr(theirs)
    assert "(0-2): 3 x Linear(in_features=2, out_features=3, bias=True)" in repr(ours)
    rows, _ = summary_rows(ours.summary())
    assert [c for c, _ in rows] == [9 * 3 + 12 + 9, 9, 12, 9, None]


def test_summary_of_a_model_totals_its_state_dict():
    """A model of attnc's own (no torch twin): its tree, each line's count,
    and a total that is the size of everything in its state_dict."""
    model = attnc.models.PointerNet(2, 16, seed=0)
    rows, total = summary_rows(model.summary())
    state = model.state_dict()
    assert total == f"Total parameters: {sum(v.size for v in state.values()):,}"
    assert rows[0][1] == "PointerNet(" and rows[-1] == (None, ")")
    for count, text in rows[1:-1]:
        if text.startswith("  (") and count is not None:  # a direct child: its state_dict prefix
            name = text[3 : text.index(")")]
            assert count == sum(v.size for k, v in state.items() if k.startswith(name + "."))


def test_summary_aligns_counts_of_a_million_and_more():
    layer = A.Linear(1000, 1000, dtype=np.float32)
    assert layer.summary() == (
        "1,001,000  Linear(in_features=1000, out_features=1000, bias=True)\nTotal parameters: 1,001,000"
    )
