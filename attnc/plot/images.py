"""Where an image's positions attend: the captioner's words over the image,
SAGAN's queries over a feature map."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from .._typing import ArrayLike
from ._common import (
    Axes,
    Cmap,
    _channels_last,
    _check_alpha,
    _figure_dpi,
    _finish_panels,
    _overlay,
    _overlay_cmap,
    _panel_grid,
    _real_array,
    _squeeze_leading,
)


def caption_attention(
    image: ArrayLike,
    words: Sequence[str],
    alphas: ArrayLike,
    *,
    grid: tuple[int, int] = (3, 3),
    ax: Axes | Sequence[Axes] | None = None,
    cmap: Cmap | None = None,
    overlay_alpha: float = 0.75,
    ncols: int = 5,
    colorbar: bool = True,
    title: str | None = None,
    dpi: float | None = None,
) -> np.ndarray:
    """Show where a captioner looked for each word (as Xu et al. 2015, Fig. 3).

    The image is drawn in grey once per word, with that word's attention
    weights over the grid cells laid over it in one colour whose opacity grows
    with the weight (a fixed 0–1 scale), the word as the panel's title: a grey
    picture has no hue that could be taken for attention.

    Parameters
    ----------
    image : array-like, (H, W, 3) or (H, W)
        The picture, e.g. ``attnc.datasets.captions(...).image(i)``, drawn
        in grey (its luminance; values in [0, 1] on that scale, others from
        their minimum to their maximum).
    words : sequence of str, length n
        The caption's words (or tokens), one panel each.
    alphas : array-like, (n, rows · cols) or (n, rows, cols)
        The weights of each word's step over the cells, in row-major order
        (the second output of ``Captioner.generate``, one row of it).
    grid : (rows, cols), default (3, 3)
        How the cells tile the image.
    ax : sequence of at least n matplotlib Axes, optional
        Axes to draw into (a single Axes when n = 1); by default a new
        figure with ``ncols`` panels per row.
    cmap : str, matplotlib colormap or None, default None
        The weights' colours. None draws them all in one orange-red, the
        weight shown by opacity alone; with a colour map the opacity still
        rises with the weight.
    overlay_alpha : float in (0, 1], default 0.75
        The overlay's opacity at weight 1 (it is 0 at weight 0).
    colorbar : bool, default True
        One colour bar (0 to 1) for all panels, drawn with the overlay's
        colours and opacities (as a weight looks over white).
    title : str, optional
        The figure's title.
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``ax`` is given (set it on that figure).

    Returns
    -------
    numpy.ndarray of matplotlib Axes, shape (n,): the panels drawn into.

    With a trained ``attnc.models.Captioner`` ``model``::

        tokens, alphas = model.generate(task.features, 9, bos=task.bos, eos=task.eos)
        words = task.vocab.decode(tokens[0]).split() + ["<eos>"]
        attnc.plot.caption_attention(task.image(0), words, alphas[0, :len(words)])

    Example
    -------
    >>> task = attnc.datasets.captions(1, seed=0)
    >>> alphas = np.eye(9)[[0, 4, 8]]                 # the words look at cells 0, 4 and 8 of the 3 × 3 grid
    >>> panels = attnc.plot.caption_attention(task.image(0), ["top", "centre", "bottom"], alphas)
    >>> panels.shape, [panel.get_title() for panel in panels]
    ((3,), ['top', 'centre', 'bottom'])
    """
    img = _channels_last(image, "image")
    rows, cols = (int(g) for g in grid)
    if isinstance(words, (str, bytes)):
        raise TypeError("words must be a sequence of words, not one string")
    words = [str(w) for w in words]
    n = len(words)
    weights = _real_array(alphas, "alphas", "(n, rows · cols)").astype(np.float64)
    if weights.ndim == 3:
        weights = weights.reshape(weights.shape[0], -1)
    if weights.ndim != 2 or weights.shape != (n, rows * cols):
        raise ValueError(
            f"alphas must be (n words = {n}, {rows * cols} cells) for grid {rows} × {cols}, "
            f"got shape {tuple(np.shape(alphas))}"
        )
    overlay = _overlay_cmap(cmap, _check_alpha(overlay_alpha))
    fig, panels = _panel_grid(n, ax, ncols, "words", _figure_dpi(dpi, ax is not None))
    for k, (panel, word) in enumerate(zip(panels, words)):
        _overlay(panel, img, weights[k].reshape(rows, cols), overlay)
        panel.set_title(word)
    _finish_panels(fig, panels, overlay, colorbar, "attention weight", title)
    return panels


def image_attention(
    image: ArrayLike,
    attention: ArrayLike,
    queries: Sequence[tuple[int, int]] | Sequence[int],
    *,
    grid: tuple[int, int] | None = None,
    ax: Axes | Sequence[Axes] | None = None,
    scale: Literal["max", "fixed"] = "max",
    cmap: Cmap | None = None,
    overlay_alpha: float = 0.75,
    ncols: int = 4,
    colorbar: bool = True,
    title: str | None = None,
    marker_color: str = "#0050ff",
    dpi: float | None = None,
) -> np.ndarray:
    """Show where chosen positions of a feature map attend: self-attention maps
    over an image (SAGAN, Zhang et al. 2018, Fig. 1; non-local networks).

    One panel per query position: the image in grey with that position's
    attention over all positions laid over it in one colour whose opacity
    grows with the weight, and the query marked with a cross.

    Parameters
    ----------
    image : array-like, (H, W), (H, W, 3) or channel-first (3, H, W)
        The picture (a leading batch of one is squeezed), drawn in grey (its
        luminance; values in [0, 1] on that scale, others from their minimum
        to their maximum).
    attention : array-like, (N, N), N = rows · cols
        Row q is how much position q attends to each position, in row-major
        order over the feature map (``SelfAttention2d(..., return_attention=True)``'s
        map of one image).
    queries : sequence of (row, col) pairs or of flat indices
        The query positions, in feature-map coordinates.
    grid : (rows, cols), optional
        The feature map's size; by default the image's (H, W) when N = H · W.
    ax : sequence of at least len(queries) matplotlib Axes, optional
        Axes to draw into; by default a new figure with ``ncols`` panels per row.
    scale : "max" (default) or "fixed"
        "max" divides each query's map by its largest weight (a map over
        hundreds of positions has small weights everywhere); "fixed" draws the
        weights themselves on the 0–1 scale.
    cmap : str, matplotlib colormap or None, default None
        The weights' colours over the image, drawn in grey. None draws them
        all in one orange-red, the weight shown by opacity alone; with a
        colour map the opacity still rises with the weight.
    overlay_alpha : float in (0, 1], default 0.75
        The overlay's opacity at the top of the scale (it is 0 at weight 0).
    marker_color : matplotlib colour, default "#0050ff" (blue)
        The query's cross (outlined in white).
    colorbar : bool, default True
        One colour bar for all panels, with the overlay's colours and opacities.
    title : str, optional, the figure's title.
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``ax`` is given (set it on that figure).

    Returns
    -------
    numpy.ndarray of matplotlib Axes, shape (len(queries),).

    With a SAGAN layer ``layer = attnc.nn.SelfAttention2d(...)`` over images
    (B, C, 24, 24)::

        y, att = layer(images[:1], return_attention=True)
        attnc.plot.image_attention(images[0], att[0], [(4, 4), (18, 20)], grid=(24, 24))

    Example
    -------
    >>> image = np.random.rand(8, 8, 3)
    >>> att = attnc.softmax(np.random.rand(64, 64))    # each of the 8 × 8 positions over all 64
    >>> panels = attnc.plot.image_attention(image, att, [(1, 2), 63])
    >>> panels.shape, [panel.get_title() for panel in panels]
    ((2,), ['query (1, 2)', 'query (7, 7)'])
    """
    img = _channels_last(image, "image")
    att = _squeeze_leading(_real_array(attention, "attention", "(N, N)"), 2).astype(np.float64)
    if att.ndim != 2 or att.shape[0] != att.shape[1]:
        raise ValueError(f"attention must be a square (N, N) map, got shape {tuple(np.shape(attention))}")
    n_pos = att.shape[0]
    rows, cols = img.shape[:2] if grid is None else (int(g) for g in grid)
    if rows * cols != n_pos:
        raise ValueError(
            f"attention is ({n_pos}, {n_pos}) but grid {rows} × {cols} has {rows * cols} positions"
            + ("; pass grid=(rows, cols)" if grid is None else "")
        )
    if scale not in ("max", "fixed"):
        raise ValueError(f"scale must be 'max' or 'fixed', got {scale!r}")
    if isinstance(queries, (str, bytes)):
        raise TypeError("queries must be a sequence of (row, col) pairs or flat indices")
    flat = []
    for q in queries:
        r, c = divmod(int(q), cols) if np.ndim(q) == 0 else (int(q[0]), int(q[1]))
        if not (0 <= r < rows and 0 <= c < cols):
            raise ValueError(f"query {q!r} is outside the {rows} × {cols} grid")
        flat.append((r, c))
    overlay = _overlay_cmap(cmap, _check_alpha(overlay_alpha))
    fig, panels = _panel_grid(len(flat), ax, ncols, "queries", _figure_dpi(dpi, ax is not None))
    from matplotlib.patheffects import withStroke

    height, width = img.shape[:2]
    for panel, (r, c) in zip(panels, flat):
        w = att[r * cols + c].reshape(rows, cols)
        if scale == "max":
            peak = w.max()
            w = w / peak if peak > 0 else w
        _overlay(panel, img, w, overlay)
        panel.plot(
            [(c + 0.5) * width / cols],
            [(r + 0.5) * height / rows],
            marker="x",
            markersize=9,
            markeredgewidth=2.5,
            color=marker_color,
            path_effects=[withStroke(linewidth=4.5, foreground="white")],  # seen over dark and light alike
        )
        panel.set_title(f"query ({r}, {c})")
    label = "attention / its maximum" if scale == "max" else "attention weight"
    _finish_panels(fig, panels, overlay, colorbar, label, title)
    return panels
