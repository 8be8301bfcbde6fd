"""The views: what each ships to the page (a JSON spec and the weights as
float32 bytes), and the two ways it is shown (a notebook widget, a
standalone HTML file)."""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import numpy as np

from ._inputs import MAX_BYTES, attentions, is_model, model_weights, pick

STATIC = resources.files(__package__).joinpath("static")


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

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """Jupyter shows the widget; without anywidget, the page in an iframe."""
        try:
            return self.widget()._repr_mimebundle_(**kwargs)
        except ImportError:
            page = html.escape(self.to_html(), quote=True)
            frame = f'<iframe srcdoc="{page}" style="width:100%;height:720px;border:0"></iframe>'
            return {"text/html": frame, "text/plain": repr(self)}


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
) -> View:
    """Every view's construction: a model run (when weights is a model),
    the inputs checked, the layers and heads chosen, the spec and payload laid out."""
    if is_model(weights):
        if target_tokens is not None:
            raise ValueError(
                "target_tokens labels weights given as arrays; a model's labels are its input ids (decode=)"
            )
        weights, tokens, target_tokens = model_weights(weights, tokens, batch, decode)
    elif decode is not None:
        raise ValueError("decode names a model's input ids; with weights as arrays give tokens as strings")
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
