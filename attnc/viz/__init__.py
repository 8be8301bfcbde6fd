"""Interactive attention views for notebooks and for the browser, offline.

Each view takes attention weights as arrays, or a model and its input, and
returns a :class:`View`: in Jupyter (JupyterLab, Notebook 7, VS Code) it
shows itself as an anywidget widget (``pip install "attnc[viz]"``), and
``view.save("x.html")`` writes one HTML file that opens in any browser with
no network: the script and style ship inside attnc (attnc/viz/static/) and
are inlined, the weights travel as base64 float32.

- :func:`head_view`: the tokens in two columns joined by lines weighted by
  attention, a layer selector and coloured heads to toggle; hover a token to
  see its lines only (bertviz's head view).
- :func:`model_view`: every layer x head as a thumbnail; click one to open it.
- :func:`matrix_view`: a zoomable heatmap (max or mean pooled into screen
  pixels when zoomed out, exact cells when zoomed in), the value under the
  pointer, token labels, a per-head or shared colour scale; long inputs
  (4,096 tokens) stay responsive.

Beyond transformers, a step slider over a model's run (one core draws them):
:func:`alignment_view` (a seq2seq decoder's alignment, local windows
marked), :func:`ntm_view` (an NTM's memory, read and write weightings and
addressing stages), :func:`pointer_view` (a pointer network's choices over
its points) and :func:`image_view` (a caption's word or a self-attention
position, its map over the image).

Every view also has a static, matplotlib form for papers:
``view.plot(layer=..., head=..., step=...)`` draws it as the page does and
``view.savefig("x.pdf", dpi=300)`` writes PNG, SVG or PDF. In a notebook the
view's output also carries that PNG, which GitHub's notebook view (where
widgets do not run) shows in the widget's place.

Weights are what attnc's transformers return with ``need_weights=True`` (a
list of (B, H, L, S) per layer, or a dict of such lists from
``attnc.nn.Transformer``), torch's ``nn.MultiheadAttention(...,
average_attn_weights=False)`` output, or one (B, H, L, S) or (H, L, S) array;
row i of each (L, S) matrix is what query i gives every key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._steps import alignment_view, image_view, ntm_view, pointer_view
from ._views import View, build

__all__ = ["View", "alignment_view", "head_view", "image_view", "matrix_view", "model_view", "ntm_view", "pointer_view"]


def _lines(min_weight: float) -> dict[str, float]:
    """The options of the views that draw weights as lines."""
    if not 0 <= min_weight <= 1:
        raise ValueError(f"min_weight must be in [0, 1], got {min_weight}")
    return dict(min_weight=float(min_weight))


def head_view(
    weights: Any,
    tokens: Any = None,
    *,
    target_tokens: Sequence[object] | None = None,
    batch: int = 0,
    decode: Callable[[int], object] | None = None,
    min_weight: float = 0.01,
    tokenizer: Any = None,
) -> View:
    """The head view: tokens in two columns, lines weighted by attention.

    The left column holds the attending (query) tokens, the right the
    attended (key) tokens; a line joins query i and key j with opacity
    w[i, j], one colour per head. A layer selector, the heads to toggle
    (click; double-click shows one head alone) and, when ``weights`` holds
    several attentions (encoder, decoder self- and cross-attention), one
    selector for them. Hover a token to show its lines only.

    Parameters
    ----------
    weights : per-layer list of (B, H, L, S) arrays (float32 or float64, >= 0),
        one (B, H, L, S) or (H, L, S) array, a dict of named such lists (as
        attnc.nn.Transformer returns), or an attnc model (attnc.models.GPT,
        Seq2SeqTransformer, attnc.nn's transformer modules, MultiheadAttention),
        which is run once with ``need_weights=True`` in its present mode
        (call ``model.eval()`` first for weights without dropout).
    tokens : the S key tokens' labels (default: positions); with a model, its
        input instead: ids (B, T) int, or a tuple of the forward's arguments
        (a seq2seq model's (src, tgt_in)); integer inputs label the tokens.
        With a model and ``tokenizer``, also a text (str).
    target_tokens : the L query tokens' labels for cross-attention (L != S, or
        the decoder's attentions in a dict); default ``tokens``.
    batch : which batch item to show (the others are not shipped).
    decode : with a model, maps an input id (int) to its label.
    min_weight : lines below this weight are not drawn (they would be invisible).
    tokenizer : with a model, its tokenizer: any object with the
        ``transformers`` tokenizer interface (``tokenizer(text)["input_ids"]``,
        ``convert_ids_to_tokens(id)``). A text is tokenized into one sequence
        (with the special tokens it adds: BERT's [CLS] and [SEP]), and the
        tokenizer's tokens label the ids (in place of ``decode``).

    Example
    -------
    >>> w = [np.random.dirichlet(np.ones(4), (2, 3, 4)) for layer in range(2)]  # 2 layers of (B, H, L, S)
    >>> view = attnc.viz.head_view(w, ["the", "cat", "sat", "."], batch=1)
    >>> [(a["layers"], a["heads"]) for a in view.spec["attentions"]]
    [(2, 3)]
    >>> view.save("heads.html")
    >>> gpt = attnc.models.GPT(10, 8, n_layer=2, n_head=2, n_embd=8, seed=0)
    >>> attnc.viz.head_view(gpt, np.array([[1, 2, 3]]), decode="abcdefghij".__getitem__).spec["attentions"][0]["rows"]
    ['b', 'c', 'd']
    >>> class Words:  # the tokenizer interface: text -> input_ids, an id -> its token
    ...     vocab = ["<s>", "the", "cat", "sat"]
    ...     def __call__(self, text):
    ...         return {"input_ids": [0] + [self.vocab.index(w) for w in text.split()]}
    ...     def convert_ids_to_tokens(self, i):
    ...         return self.vocab[i]
    >>> attnc.viz.head_view(gpt, "the cat sat", tokenizer=Words()).spec["attentions"][0]["cols"]
    ['<s>', 'the', 'cat', 'sat']
    """
    return build("head", weights, tokens, target_tokens, batch, decode, _lines(min_weight), tokenizer=tokenizer)


def model_view(
    weights: Any,
    tokens: Any = None,
    *,
    target_tokens: Sequence[object] | None = None,
    batch: int = 0,
    decode: Callable[[int], object] | None = None,
    min_weight: float = 0.01,
    tokenizer: Any = None,
) -> View:
    """The model view: every layer x head as a thumbnail; click one to open
    it as a head view (and go back to the grid from there).

    Arguments as :func:`head_view`'s: weights a per-layer list of (B, H, L, S)
    arrays (float32 or float64, >= 0), one (B, H, L, S) or (H, L, S) array, a
    dict of them, or an attnc model (with ``tokens`` its input ids, (B, T)
    int, or a text with ``tokenizer``).

    Example
    -------
    >>> w = [np.random.dirichlet(np.ones(5), (1, 4, 5)) for layer in range(3)]
    >>> view = attnc.viz.model_view(w, list("hello"))
    >>> view.spec["kind"], view.data.size
    ('model', 300)
    """
    return build("model", weights, tokens, target_tokens, batch, decode, _lines(min_weight), tokenizer=tokenizer)


def matrix_view(
    weights: Any,
    tokens: Any = None,
    *,
    target_tokens: Sequence[object] | None = None,
    batch: int = 0,
    decode: Callable[[int], object] | None = None,
    scale: str = "head",
    pool: str = "max",
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    tokenizer: Any = None,
) -> View:
    """A zoomable heatmap of each layer's and head's (L, S) weights, readable
    at thousands of tokens.

    Zoomed out, several cells share a screen pixel: the page draws their max
    (or mean) from a pyramid it builds once per head, so every zoom and pan
    redraws only the pixels on screen. Zoomed in, each cell is exact and the
    readout gives the value under the pointer; token labels appear once the
    cells are tall enough to hold them. Wheel to zoom (about the pointer),
    drag to pan, double-click to fit; selectors for the layer, head, colour
    scale and pooling.

    Parameters
    ----------
    weights, tokens, target_tokens, batch, decode, tokenizer : as
        :func:`head_view`'s (weights (B, H, L, S) per layer, float32 or
        float64, >= 0; a model's input ids or, with tokenizer, its text).
    scale : "head" (each head's own maximum is the top colour) or "shared"
        (one maximum over every layer and head shown); switchable in the page.
    pool : "max" or "mean", how cells sharing a pixel combine; switchable.
    layers, heads : the layer and head indices to ship (default all). The
        page holds at most 256 MiB of float32: 4 heads at 4,096 tokens.

    Example
    -------
    >>> w = np.random.dirichlet(np.ones(64), (1, 2, 64))  # (B, H, L, S)
    >>> view = attnc.viz.matrix_view([w, w], scale="shared", layers=[1], heads=[0])
    >>> view.spec["attentions"][0]["layers"], view.spec["attentions"][0]["heads"], view.data.shape
    (1, 1, (4096,))
    """
    if scale not in ("head", "shared"):
        raise ValueError(f'scale must be "head" or "shared", got {scale!r}')
    if pool not in ("max", "mean"):
        raise ValueError(f'pool must be "max" or "mean", got {pool!r}')
    return build(
        "matrix", weights, tokens, target_tokens, batch, decode, dict(scale=scale, pool=pool), layers, heads, tokenizer
    )
