"""The views: what each ships to the page (a JSON spec and the weights as
float32 bytes), and the two ways it is shown (a notebook widget, a
standalone HTML file)."""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import numpy as np

from ._inputs import MAX_BYTES, attentions, is_model, model_weights, pick, tokenized

STATIC = resources.files(__package__).joinpath("static")
# The notebook's static fallback: matplotlib's own default resolution keeps a stored output small.
NOTEBOOK_DPI = 100


def static_file(name: str) -> str:
    """The text of one of the views' shipped files (static/viz.js, static/viz.css)."""
    return STATIC.joinpath(name).read_text(encoding="utf-8")


class View:
    """An attention view: shows itself in Jupyter (a widget, with the ``viz``
    extra installed) and saves as one HTML file that needs no network.

    Made by :func:`head_view`, :func:`model_view` and :func:`matrix_view`.
    ``spec`` is the JSON the page reads (the view's kind, every attention's
    name, layer and head counts, token labels and colour-scale maxima);
    ``data`` the weights it draws, float32, every attention's (layers, H, L, S)
    flattened one after the other.

    Example
    -------
    >>> w = np.full((2, 3, 3), 1 / 3, np.float32)  # (H, L, S)
    >>> view = attnc.viz.head_view(w, ["a", "b", "c"])
    >>> view.spec["kind"], view.data.dtype, view.data.shape
    ('head', dtype('float32'), (18,))
    >>> view.save("heads.html")
    >>> "<script" in open("heads.html").read()
    True
    """

    def __init__(self, spec: dict[str, Any], data: np.ndarray) -> None:
        if data.nbytes > MAX_BYTES:
            raise ValueError(
                f"the weights take {data.nbytes / 2**20:.0f} MiB as float32, more than a page holds "
                f"({MAX_BYTES // 2**20} MiB): choose fewer layers or heads (matrix_view's layers= and heads=) "
                "or a shorter input"
            )
        self.spec = spec
        self.data = data

    def __repr__(self) -> str:
        return f"<attnc.viz {self.spec['kind']} view: {self.data.nbytes} bytes of weights>"

    def payload(self) -> bytes:
        """The weights as little-endian float32 bytes (what the page decodes)."""
        return self.data.astype("<f4").tobytes()

    def to_html(self) -> str:
        """The standalone page: the view's script, style, spec and weights
        (base64) inline, nothing fetched."""
        spec = json.dumps(self.spec).replace("</", "<\\/")  # a token "</script>" cannot close the tag
        title = html.escape(f"attnc {self.spec['kind']} view")
        return (
            f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title>\n'
            f"<style>\n{static_file('viz.css')}</style>\n</head><body>\n"
            '<div id="attnc-view"></div>\n'
            f'<script type="application/json" id="attnc-spec">{spec}</script>\n'
            '<script type="application/octet-stream" id="attnc-data">'
            f"{base64.b64encode(self.payload()).decode('ascii')}</script>\n"
            f'<script type="module">\n{static_file("viz.js")}\nmountPage(document);\n</script>\n'
            "</body></html>\n"
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the view as one standalone HTML file (see :meth:`to_html`)."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_html())

    def widget(self) -> Any:
        """The view as an anywidget widget (needs ``pip install "attnc[viz]"``):
        its traitlets ``spec`` (this spec) and ``data`` (:meth:`payload`)."""
        from ._widget import AttentionWidget

        return AttentionWidget(spec=self.spec, data=self.payload())

    def plot(
        self,
        ax: Any = None,
        *,
        attention: int | str | None = None,
        layer: int | Sequence[int] | None = None,
        head: int | Sequence[int] | None = None,
        step: int | None = None,
        dpi: float | None = None,
    ) -> Any:
        """The view's matplotlib form, drawn as the page draws it, for papers.

        - head view: the query tokens (left) and key tokens (right) joined by
          lines whose opacity is the weight, one colour per head (the page's),
          lines under ``min_weight`` left out; ``layer`` (one, default the
          first) and ``head`` (default all). Returns the Axes; head h's lines
          are the LineCollection with gid ``"head h"``, their colours' alpha
          the weights.
        - model view: the layer x head grid of those thumbnails. Returns an
          array of Axes (layers, heads).
        - matrix view: the heatmaps, drawn by :func:`attnc.plot.heads` on the
          view's colour scale (per head or shared) with colour bars, token
          labels up to 64 a side; past 1,024 tokens pooled into blocks (the
          view's max or mean). Returns an array of Axes (layers, heads).
        - alignment view: the alignment up to ``step`` (later rows blank),
          local windows outlined white, the step's row red. Returns the Axes.
        - NTM view: at ``step`` the memory (a heatmap) and each write and
          read head's and stage's weighting (bars). Returns an array of Axes.
        - pointer view: at ``step`` the points, each one's area its
          probability, the choice ringed red, the path chosen so far. Returns
          the Axes (the points' sizes ``ax.collections[0].get_sizes()``).
        - image view: the map of word or position ``step`` over the image,
          drawn by :func:`attnc.plot.caption_attention` (a caption's word, on
          the 0-1 scale) or :func:`attnc.plot.image_attention` (a position,
          scaled by its maximum). Returns the Axes.

        Parameters
        ----------
        ax : matplotlib Axes to draw into (for the multi-panel views a
            sequence of them, one a panel); default a new figure
        attention : which attention (a name such as "decoder_cross", or an
            index) of a view holding several; default the first
        layer, head : int or list of ints, the layers and heads to draw, as
            the weights index them (those the view holds)
        step : int, the step of a step view (default the last; the image
            view's first word or position)
        dpi : the new figure's resolution (default 200); ValueError with ``ax``

        Raises ValueError naming the selector that is out of range or does
        not apply to the view's kind.

        Example
        -------
        >>> w = np.random.dirichlet(np.ones(4), (2, 3, 4))  # (H, L, S): 2 heads
        >>> ax = attnc.viz.head_view(w, ["the", "cat", "sat", "."]).plot(head=1, dpi=100)
        >>> [c.get_gid() for c in ax.collections], ax.figure.dpi
        (['head 1'], 100.0)
        """
        from ._static import draw

        return draw(self, ax, dpi, dict(attention=attention, layer=layer, head=head, step=step))

    def savefig(self, path: str | os.PathLike[str], *, dpi: float = 200, **selectors: Any) -> None:
        """Save the view's matplotlib form (:meth:`plot`, with the same
        selectors) as PNG, SVG or PDF, by the path's suffix, at ``dpi``.

        Example
        -------
        >>> view = attnc.viz.matrix_view(np.random.dirichlet(np.ones(6), (1, 2, 6)))
        >>> view.savefig("heads.pdf", head=[1])
        >>> view.savefig("heads.png", dpi=300, layer=0, head=0)
        >>> open("heads.pdf", "rb").read(5)
        b'%PDF-'
        """
        suffix = os.path.splitext(os.fspath(path))[1].lower()
        if suffix not in (".png", ".svg", ".pdf"):
            raise ValueError(f"path must end in .png, .svg or .pdf (the format), got {os.fspath(path)!r}")
        self._write(path, dpi, selectors)

    def _write(self, target: Any, dpi: float, selectors: dict[str, Any], **kwargs: Any) -> None:
        """The matplotlib form saved to target (a path or a file), its figure closed."""
        from ._static import draw, figure_of

        fig = figure_of(draw(self, None, dpi, selectors))
        try:
            fig.savefig(target, dpi=dpi, **kwargs)
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """Jupyter shows the widget (without anywidget, the page in an
        iframe); the bundle also carries the matplotlib form as a PNG, which
        what runs no widgets and strips iframes (GitHub's notebook view,
        nbviewer without the widget state) shows instead."""
        try:
            found = self.widget()._repr_mimebundle_(**kwargs)
        except ImportError:
            page = html.escape(self.to_html(), quote=True)
            frame = f'<iframe srcdoc="{page}" style="width:100%;height:720px;border:0"></iframe>'
            found = {"text/html": frame, "text/plain": repr(self)}
        data, metadata = found if isinstance(found, tuple) else (found, {})  # ipywidgets 8 gives both
        from ._static import quick

        if quick(self):  # a large grid would stall the notebook and swell its file
            try:
                png = io.BytesIO()
                self._write(png, NOTEBOOK_DPI, {}, format="png")
                data = {**data, "image/png": base64.b64encode(png.getvalue()).decode("ascii")}
            except (ImportError, ValueError):  # no matplotlib, or nothing to draw (a view with no steps)
                pass
        return (data, metadata) if isinstance(found, tuple) else data


def build(
    kind: str,
    weights: Any,
    tokens: Any,
    target_tokens: Sequence[object] | None,
    batch: int,
    decode: Callable[[int], object] | None,
    options: dict[str, Any],
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    tokenizer: Any = None,
) -> View:
    """Every view's construction: a model run (when weights is a model),
    the inputs checked, the layers and heads chosen, the spec and payload laid out."""
    if is_model(weights):
        if target_tokens is not None:
            raise ValueError(
                "target_tokens labels weights given as arrays; a model's labels are its input ids (decode=)"
            )
        tokens, decode = tokenized(tokens, tokenizer, decode)
        weights, tokens, target_tokens = model_weights(weights, tokens, batch, decode)
    elif decode is not None or tokenizer is not None:
        name = "decode" if decode is not None else "tokenizer"
        raise ValueError(f"{name} names a model's input ids; with weights as arrays give tokens as strings")
    found = attentions(weights, tokens, target_tokens, batch)
    specs, chunks, offset = [], [], 0
    for a in found:
        layer_ids = pick(layers, a.weights.shape[0], "layers")
        head_ids = pick(heads, a.weights.shape[1], "heads")
        w = a.weights[layer_ids][:, head_ids]
        nl, H, L, S = w.shape
        vmax = w.max(axis=(2, 3)) if L and S else np.zeros((nl, H))
        spec = dict(name=a.name, layers=nl, heads=H, rows=a.rows, cols=a.cols, offset=offset, vmax=vmax.tolist())
        specs.append(dict(spec, layer_ids=layer_ids, head_ids=head_ids))
        chunks.append(w.ravel())
        offset += w.size
    return View(dict(kind=kind, attentions=specs, options=options), np.concatenate(chunks))


def pack(kind: str, arrays: dict[str, np.ndarray], **spec: Any) -> View:
    """A step view's page data: each array's offset and shape in the spec
    (``spec["arrays"][name]``), the arrays as float32 one after the other."""
    found, offset = {}, 0
    for name, a in arrays.items():
        found[name] = dict(offset=offset, shape=list(a.shape))
        offset += a.size
    data = np.concatenate([np.ravel(a).astype(np.float32) for a in arrays.values()] or [np.zeros(0, np.float32)])
    return View(dict(kind=kind, arrays=found, **spec), data)
