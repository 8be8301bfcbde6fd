"""The notebook side: one anywidget class for every view (the page's script
picks the view from the spec), imported only when a widget is asked for."""

from __future__ import annotations

try:
    import anywidget
    import traitlets
except ImportError as e:  # the optional extra
    raise ImportError('attnc.viz\'s notebook widgets need anywidget: pip install "attnc[viz]"') from e

from ._views import static_file


class AttentionWidget(anywidget.AnyWidget):
    """An attnc.viz view in a notebook: ``spec`` (the view's JSON) and
    ``data`` (its weights, little-endian float32 bytes, sent as a binary buffer)."""

    _esm = static_file("viz.js")
    _css = static_file("viz.css")
    spec = traitlets.Dict().tag(sync=True)
    data = traitlets.Bytes().tag(sync=True)
