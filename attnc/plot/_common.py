"""What every plot shares: importing matplotlib only when drawing, reading
arrays and token labels, grids of panels with one colour bar."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
else:  # matplotlib is imported only when drawing; at run time these annotations resolve to Any
    Axes = Colormap = Any

# The argument cmap: a colormap name ("viridis") or a matplotlib Colormap.
Cmap = Union[str, Colormap]

_INSTALL_HINT = (
    'attnc.plot needs matplotlib, which is not installed. Install the plotting extra with: pip install "attnc[plot]"'
)


def _import_pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - exercised via monkeypatch
        raise ImportError(_INSTALL_HINT) from exc
    return plt


# Figures the plots create: sharp on a projector or a high-resolution screen (matplotlib's
# default, 100, blurs single-character tick labels), and laid out so colour bars fit.
DPI = 130


def _subplots(*args, **kwargs):
    """plt.subplots with attnc's figure defaults (DPI, constrained layout)."""
    return _import_pyplot().subplots(*args, dpi=DPI, layout="constrained", **kwargs)


def _real_array(value, name, what):
    """``value`` as a real-valued array; TypeError for non-numeric, ValueError when unconvertible."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # e.g. ragged nested lists
        raise ValueError(f"{name} must be array-like of shape {what}; could not convert it: {exc}") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype} (shape {tuple(arr.shape)})")
    if np.iscomplexobj(arr):
        raise TypeError(f"{name} must be real, got dtype {arr.dtype}")
    return arr


def _squeezed(value, name, what, ndim):
    """(float64 copy of ``value`` without the leading size-1 dims beyond
    ndim, the shape it was given): the caller checks the copy's shape and
    names the given one."""
    arr = _real_array(value, name, what)
    return np.array(_squeeze_leading(arr, ndim), dtype=np.float64, copy=True), tuple(arr.shape)


def _squeeze_leading(arr, ndim):
    """arr without the leading size-1 dims beyond ndim (one example of a batch of one)."""
    while arr.ndim > ndim and arr.shape[0] == 1:
        arr = arr[0]
    return arr


def _as_tokens(tokens, expected, name, axis_name):
    """Validate a token list against the matrix size; return a list of str."""
    if tokens is None:
        return None
    if isinstance(tokens, (str, bytes)):
        raise TypeError(
            f"{name} must be a sequence of tokens (e.g. a list of str), "
            f"not a single {type(tokens).__name__}; use {name}=text.split() "
            f"or {name}=list(text)"
        )
    try:
        labels = [str(t) for t in tokens]
    except TypeError as exc:
        raise TypeError(f"{name} must be a sequence of tokens, got {type(tokens).__name__}") from exc
    if len(labels) != expected:
        raise ValueError(
            f"{name} has {len(labels)} tokens but weights has {expected} {axis_name} "
            f"(weights shape is (Tq, Tk); {name} must have length "
            f"{'Tk' if axis_name == 'columns' else 'Tq'} = {expected})"
        )
    return labels


def _empty_mappable(cmap):
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    return ScalarMappable(norm=Normalize(vmin=0.0, vmax=1.0), cmap=cmap)


def _panel_grid(n, ax, ncols, what):
    """(figure, ndarray of n Axes): the given ``ax`` (at least n of them) or a
    new figure with ``ncols`` panels per row."""
    if ax is None:
        per_row = max(1, min(int(ncols), n))
        lines = max(1, -(-n // per_row))
        fig, grid_axes = _subplots(lines, per_row, figsize=(2.2 * per_row + 0.8, 2.4 * lines), squeeze=False)
        flat = grid_axes.ravel()
        for extra in flat[n:]:
            extra.remove()
        return fig, np.array(list(flat[:n]), dtype=object)
    given = np.ravel(np.asarray(ax, dtype=object))
    if given.size < n:
        raise ValueError(f"ax holds {given.size} Axes, {n} {what} need one each")
    panels = given[:n]
    return (panels[0].figure if n else None), panels


def _picture(img):
    """(array to show, imshow extent) of an (H, W) / (H, W, 1|3|4) image."""
    height, width = img.shape[:2]
    shown = img[..., 0] if img.ndim == 3 and img.shape[2] == 1 else img
    return shown, (0, width, height, 0)


def _overlay(panel, shown, extent, weights, cmap, alpha):
    """The picture with a (rows, cols) map of 0–1 weights laid over it, no ticks."""
    from matplotlib.colors import Normalize

    panel.imshow(shown, extent=extent, interpolation="nearest", cmap="gray" if shown.ndim == 2 else None)
    panel.imshow(
        weights, extent=extent, cmap=cmap, norm=Normalize(vmin=0.0, vmax=1.0), alpha=alpha, interpolation="nearest"
    )
    panel.set_xticks([])
    panel.set_yticks([])


def _finish_panels(fig, panels, cmap, colorbar, label, title):
    if colorbar and fig is not None:
        # an opaque mappable on the same scale: the overlays' transparency would wash out the bar
        cbar = fig.colorbar(_empty_mappable(cmap), ax=list(panels), shrink=0.8, pad=0.02)
        cbar.set_label(label)
    if title is not None and fig is not None:
        fig.suptitle(title)


def _channels_last(image, name):
    """An (H, W) or (H, W, 1|3|4) float64 copy of ``image``; (1|3, H, W) channel-first
    arrays (the layout of attnc's convolutions) are moved to channels last."""
    img = _squeeze_leading(_real_array(image, name, "(H, W), (H, W, 3) or (3, H, W)"), 3).astype(np.float64)
    if img.ndim == 3 and img.shape[2] not in (1, 3, 4) and img.shape[0] in (1, 3):
        img = np.moveaxis(img, 0, -1)
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (1, 3, 4)):
        raise ValueError(f"{name} must be (H, W), (H, W, 3) or (3, H, W), got shape {tuple(np.shape(image))}")
    return img
