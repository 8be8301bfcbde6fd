"""What every plot shares: importing matplotlib only when drawing, reading
arrays and token labels, grids of panels with one colour bar."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .._args import host_array

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


# Figures the plots create: 200 dpi. A figure put in a paper at its own size (a column is
# 3.3-3.5 in) is then about 700 pixels wide: sharp in print's usual 150-300 dpi and on a
# high-resolution screen (matplotlib's 100 blurs one-character tick labels). A journal's 300 is
# dpi=300 away; as the default it would make the notebooks' stored outputs larger again
# (notebook 02's 2 x 4 head grid: 227 KB of PNG against 160 KB at 200, 103 KB at 130).
# SVG and PDF are vector whatever the dpi.
DPI = 200.0
# Larger figures are refused: a 30-inch grid at 1200 dpi is already 36,000 pixels a side.
_MAX_DPI = 1200.0


def _figure_dpi(dpi, given):
    """The dpi of a new figure: ``dpi`` (checked), or DPI when None. ``given`` is true when
    the caller drew into Axes it was given: then there is no new figure to set it on."""
    if dpi is None:
        return DPI
    if given:
        raise ValueError(
            "dpi sets the resolution of the figure attnc.plot creates, but Axes to draw into were given: "
            "set it on their figure (fig.set_dpi) or when saving (fig.savefig(..., dpi=...))"
        )
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float, np.integer, np.floating)):
        raise TypeError(f"dpi must be a number (dots per inch), got {type(dpi).__name__}")
    if not 0 < dpi <= _MAX_DPI:
        raise ValueError(f"dpi must be in (0, {_MAX_DPI:g}] dots per inch, got {dpi}")
    return float(dpi)


def _subplots(*args, dpi, **kwargs):
    """plt.subplots with attnc's figure defaults (constrained layout) at a dpi _figure_dpi checked."""
    return _import_pyplot().subplots(*args, dpi=dpi, layout="constrained", **kwargs)


def _real_array(value, name, what):
    """``value`` as a real-valued array; TypeError for non-numeric, ValueError when unconvertible."""
    try:
        arr = np.asarray(host_array(value))
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


def _empty_mappable(cmap, vmax=1.0):
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    return ScalarMappable(norm=Normalize(vmin=0.0, vmax=vmax), cmap=cmap)


def _panel_grid(n, ax, ncols, what, dpi):
    """(figure, ndarray of n Axes): the given ``ax`` (at least n of them) or a
    new figure with ``ncols`` panels per row."""
    if ax is None:
        per_row = max(1, min(int(ncols), n))
        lines = max(1, -(-n // per_row))
        fig, grid_axes = _subplots(lines, per_row, figsize=(2.2 * per_row + 0.8, 2.4 * lines), squeeze=False, dpi=dpi)
        flat = grid_axes.ravel()
        for extra in flat[n:]:
            extra.remove()
        return fig, np.array(list(flat[:n]), dtype=object)
    given = np.ravel(np.asarray(ax, dtype=object))
    if given.size < n:
        raise ValueError(f"ax holds {given.size} Axes, {n} {what} need one each")
    panels = given[:n]
    return (panels[0].figure if n else None), panels


# The overlay's default colour: one saturated hue (orange-red) whose opacity grows with the
# weight, over the picture drawn in grey. A grey picture has no hue, so nothing in it can be
# taken for attention, whatever the object's colour (viridis over the colour picture drew high
# attention yellow over a yellow object); and opacity from 0 means low weights leave the
# picture as it is instead of tinting all of it. Orange-red stays visible over black and white
# alike and, for red-green colour-blind readers, still differs from grey in saturation.
OVERLAY_COLOUR = "#ff4500"


def _grey(img):
    """(H, W) luminance of an (H, W) or (H, W, 1|3|4) image (Rec. 709 weights; alpha ignored),
    and the (vmin, vmax) to draw it with: 0-1 when it lies there (a dim photo stays dim), else
    its own range."""
    grey = img[..., 0] if img.ndim == 3 and img.shape[2] == 1 else img
    if grey.ndim == 3:
        grey = grey[..., :3] @ np.array([0.2126, 0.7152, 0.0722])
    finite = grey[np.isfinite(grey)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    return grey, ((0.0, 1.0) if 0.0 <= lo and hi <= 1.0 else (lo, hi if hi > lo else lo + 1.0))


def _overlay_cmap(cmap, alpha):
    """The overlay's colour map: ``cmap``'s colours (OVERLAY_COLOUR throughout when None) with
    opacity rising linearly from 0 at weight 0 to ``alpha`` at the top of the scale. The
    colour bar uses it too, so it shows what a weight looks like (over white)."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap, to_rgba

    ramp = np.linspace(0.0, 1.0, 256)
    if cmap is None:
        colours = np.tile(to_rgba(OVERLAY_COLOUR), (ramp.size, 1))
    else:
        try:
            colours = np.array((colormaps[cmap] if isinstance(cmap, str) else cmap)(ramp))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"cmap must be None, a colormap name or a matplotlib Colormap, got {cmap!r}") from exc
    colours[:, 3] = alpha * ramp
    return ListedColormap(colours, name="attention overlay")


def _overlay(panel, img, weights, cmap):
    """The picture in grey with a (rows, cols) map of 0-1 weights laid over it in the overlay
    colour map ``cmap``, no ticks."""
    from matplotlib.colors import Normalize

    height, width = img.shape[:2]
    grey, (lo, hi) = _grey(img)
    extent = (0, width, height, 0)
    panel.imshow(grey, extent=extent, interpolation="nearest", cmap="gray", vmin=lo, vmax=hi)
    panel.imshow(weights, extent=extent, cmap=cmap, norm=Normalize(vmin=0.0, vmax=1.0), interpolation="nearest")
    panel.set_xticks([])
    panel.set_yticks([])


def _check_alpha(alpha):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)) or not 0 < alpha <= 1:
        raise ValueError(f"overlay_alpha must be a number in (0, 1], got {alpha!r}")
    return float(alpha)


def _finish_panels(fig, panels, cmap, colorbar, label, title):
    if colorbar and fig is not None:
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
