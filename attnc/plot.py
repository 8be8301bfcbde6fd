"""Plotting helpers for attention weights (optional; needs matplotlib).

Install the extra with ``pip install "attnc[plot]"``. matplotlib is imported
only when a plotting function is called, so ``import attnc`` never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np

from ._typing import ArrayLike

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap

    from .models import NTMTrace
else:  # matplotlib is imported only when drawing; at run time these annotations resolve to Any
    Axes = Colormap = NTMTrace = Any

# The argument cmap: a colormap name ("viridis") or a matplotlib Colormap.
Cmap = Union[str, Colormap]

__all__ = ["alignment", "heads"]

_INSTALL_HINT = (
    'attnc.plot needs matplotlib, which is not installed. '
    'Install the plotting extra with: pip install "attnc[plot]"'
)


def _import_pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - exercised via monkeypatch
        raise ImportError(_INSTALL_HINT) from exc
    return plt


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


def _squeeze_leading(arr, ndim):
    """arr without the leading size-1 dims beyond ndim (one example of a batch of one)."""
    while arr.ndim > ndim and arr.shape[0] == 1:
        arr = arr[0]
    return arr


def _as_matrix(weights):
    """Return ``weights`` as a 2-D float64 array, squeezing leading size-1 dims."""
    arr = _real_array(weights, "weights", "(Tq, Tk)")
    shape = tuple(arr.shape)
    arr = _squeeze_leading(arr, 2)
    if arr.ndim != 2:
        raise ValueError(
            "weights must be a 2-D alignment matrix of shape (Tq, Tk) "
            f"(a leading batch dim of size 1 is allowed), got weights with shape {shape}"
        )
    return np.array(arr, dtype=np.float64, copy=True)


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


def alignment(
    weights: ArrayLike,
    source_tokens: Sequence[object] | None = None,
    target_tokens: Sequence[object] | None = None,
    ax: Axes | None = None,
    *,
    title: str | None = None,
    cmap: Cmap = "viridis",
    colorbar: bool = True,
    annotate: bool = False,
) -> Axes:
    """Draw an attention (alignment) matrix as a heatmap.

    Row ``i`` holds the weights query/target token ``i`` gives to every
    key/source token, so each row of a softmax output sums to 1 (or is all
    zero when the query could attend to nothing).

    Parameters
    ----------
    weights : array-like, shape (Tq, Tk) or (1, Tq, Tk)
        Attention weights, e.g. the second output of :func:`attnc.attention`.
        Any array-like works (NumPy array, nested lists, memoryview, CPU
        tensor). Leading dims of size 1 are squeezed; anything else that is not
        2-D raises ``ValueError``. The colour scale is fixed to [0, 1] so plots
        can be compared with each other; values outside that range saturate.
    source_tokens : sequence, length Tk, optional
        Labels of the keys (source sequence), drawn on the x axis, one tick per
        token, rotated so that long words do not overlap.
    target_tokens : sequence, length Tq, optional
        Labels of the queries (target sequence), drawn on the y axis, one tick
        per token. Without tokens, the axes show integer positions.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into. By default a new figure sized to the matrix is made.
    title : str, optional
        Axes title.
    cmap : str or matplotlib colormap, default "viridis"
    colorbar : bool, default True
        Add a colour bar (0 to 1) next to the axes.
    annotate : bool, default False
        Write each weight (two decimals) inside its cell; useful for small
        matrices.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn into; ``ax.figure.savefig("a.png")`` (or ``.svg``)
        saves it. The heatmap is ``ax.images[0]`` and its colour bar
        ``ax.images[0].colorbar``.

    Raises
    ------
    ValueError
        ``weights`` is not (Tq, Tk) after squeezing, or a token list's length
        does not match the matrix.
    TypeError
        ``weights`` is not numeric, or a token list is a plain string.
    ImportError
        matplotlib is missing (``pip install "attnc[plot]"``).

    Examples
    --------
    >>> import numpy as np, attnc
    >>> import attnc.plot
    >>> src = "the cat sat on the mat".split()
    >>> tgt = "le chat est assis".split()
    >>> rng = np.random.default_rng(0)
    >>> q = rng.standard_normal((len(tgt), 8))
    >>> k = rng.standard_normal((len(src), 8))
    >>> context, w = attnc.attention(q, k, score="scaled_dot")
    >>> ax = attnc.plot.alignment(w, src, tgt, title="scaled dot")
    >>> ax.figure.savefig("alignment.png", bbox_inches="tight")
    >>> type(ax).__name__, ax.get_title(), ax.images[0].get_array().shape
    ('Axes', 'scaled dot', (4, 6))
    """
    mat = _as_matrix(weights)
    tq, tk = mat.shape
    xlabels = _as_tokens(source_tokens, tk, "source_tokens", "columns")
    ylabels = _as_tokens(target_tokens, tq, "target_tokens", "rows")

    plt = _import_pyplot()
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        # About 0.4 inch per cell, within sane bounds; room for labels.
        width = min(max(0.4 * tk + 2.5, 3.5), 14.0)
        height = min(max(0.4 * tq + 1.5, 2.5), 12.0)
        _, ax = plt.subplots(figsize=(width, height), layout="constrained")

    norm = Normalize(vmin=0.0, vmax=1.0)
    if mat.size:
        mappable = ax.imshow(
            mat, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest",
            origin="upper",
        )
    else:
        # Nothing to draw (Tq = 0 or Tk = 0); keep the axes and the colour bar.
        mappable = ScalarMappable(norm=norm, cmap=cmap)
        ax.set_xlim(-0.5, tk - 0.5 if tk else 0.5)
        ax.set_ylim(tq - 0.5 if tq else 0.5, -0.5)

    if xlabels is not None:
        ax.set_xticks(np.arange(tk))
        ax.set_xticklabels(xlabels, rotation=90)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ylabels is not None:
        ax.set_yticks(np.arange(tq))
        ax.set_yticklabels(ylabels)
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(length=0)
    ax.set_xlabel("source (keys)")
    ax.set_ylabel("target (queries)")
    if title is not None:
        ax.set_title(title)

    if annotate and mat.size:
        fontsize = 8 if max(tq, tk) <= 12 else 6
        for i in range(tq):
            for j in range(tk):
                value = mat[i, j]
                if not np.isfinite(value):
                    text, color = "nan", "red"
                else:
                    text = f"{value:.2f}"
                    # Light text on the dark end of the scale, dark on the light end.
                    r, g, b, _ = mappable.cmap(norm(value))
                    color = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
                ax.text(j, i, text, ha="center", va="center", color=color, fontsize=fontsize)

    if colorbar:
        cbar = ax.figure.colorbar(mappable, ax=ax, fraction=0.05, pad=0.03)
        cbar.set_label("attention weight")
    return ax


def _as_head_stack(weights):
    """Return ``weights`` as a float64 array (layers, heads, Tq, Tk).

    A list/tuple holds one array per layer, each (heads, Tq, Tk) after
    squeezing leading size-1 dims (so a model's per-layer (1, H, Tq, Tk)
    weights work as they are); an array is (layers, heads, Tq, Tk) after
    squeezing leading size-1 dims beyond four, or (heads, Tq, Tk) for one layer.
    """
    if isinstance(weights, (list, tuple)):
        if not weights:
            raise ValueError("weights is an empty list: give one (heads, Tq, Tk) array per layer")
        layers = []
        for i, w in enumerate(weights):
            try:
                arr = np.asarray(w)
            except Exception as exc:
                raise ValueError(f"weights[{i}] could not be converted to an array: {exc}") from exc
            shape = tuple(arr.shape)
            arr = _squeeze_leading(arr, 3)
            if arr.ndim != 3:
                raise ValueError(
                    f"weights[{i}] must be one layer's weights of shape (heads, Tq, Tk) (leading dims of "
                    f"size 1 are allowed; pick one example of a batch first), got shape {shape}"
                )
            layers.append(arr)
        shapes = {a.shape for a in layers}
        if len(shapes) != 1:
            raise ValueError(
                "every layer of weights must have the same (heads, Tq, Tk) shape, got "
                + ", ".join(str(a.shape) for a in layers)
            )
        arr = np.stack(layers)
    else:
        try:
            arr = np.asarray(weights)
        except Exception as exc:
            raise ValueError(f"weights could not be converted to an array: {exc}") from exc
        shape = tuple(arr.shape)
        arr = _squeeze_leading(arr, 4)
        if arr.ndim == 3:
            arr = arr[None]
        if arr.ndim != 4:
            raise ValueError(
                "weights must be (layers, heads, Tq, Tk), (heads, Tq, Tk) or a list of per-layer "
                f"(heads, Tq, Tk) arrays (pick one example of a batch first), got weights with shape {shape}"
            )
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"weights must hold real numbers, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        raise TypeError(f"weights must be real, got dtype {arr.dtype}")
    return np.array(arr, dtype=np.float64, copy=True)


def heads(
    weights: ArrayLike | Sequence[ArrayLike],
    source_tokens: Sequence[object] | None = None,
    target_tokens: Sequence[object] | None = None,
    axes: np.ndarray | Sequence[Axes] | None = None,
    *,
    title: str | None = None,
    row_label: str = "layer",
    cmap: Cmap = "viridis",
    colorbar: bool = True,
    annotate: bool = False,
    panel_size: float = 2.4,
) -> np.ndarray:
    """Draw every head of every layer as a grid of alignment heatmaps.

    Row ``l`` of the grid is layer ``l``, column ``h`` is head ``h`` (both
    counted from 0, as in ``weights[l][0, h]`` and the state_dict's
    ``layers.{l}``). Each panel is drawn by :func:`alignment` on the same fixed
    [0, 1] colour scale, so panels can be compared with each other; one colour
    bar serves the whole grid.

    Parameters
    ----------
    weights : list of array-likes, or array-like
        A list with one array per layer, each (heads, Tq, Tk); leading dims of
        size 1 are squeezed, so the per-layer ``(1, H, Tq, Tk)`` weights of a
        one-example batch (e.g. ``model(..., need_weights=True)`` of
        :class:`attnc.models.GPT`, or the ``"encoder"``, ``"decoder_self"`` and
        ``"decoder_cross"`` lists of :class:`attnc.models.Seq2SeqTransformer`)
        can be passed as they are. Or one array (layers, heads, Tq, Tk), or
        (heads, Tq, Tk) for a single layer. Batches of more than one example
        raise ``ValueError``: select one first (``[w[i] for w in weights]``).
    source_tokens : sequence, length Tk, optional
        Key labels (x axis of every panel).
    target_tokens : sequence, length Tq, optional
        Query labels (y axis of every panel).
    axes : array-like of matplotlib Axes, shape (layers, heads), optional
        Axes to draw into. By default a new figure with a (layers, heads) grid
        of panels, each about ``panel_size`` inches wide, is made.
    title : str, optional
        Title of the figure (``fig.suptitle``).
    row_label : str, default "layer"
        Word used in the panel titles: ``f"{row_label} {l}, head {h}"``.
    cmap : str or matplotlib colormap, default "viridis"
    colorbar : bool, default True
        One colour bar (0 to 1) for the whole grid.
    annotate : bool, default False
        Write each weight inside its cell (see :func:`alignment`).
    panel_size : float, default 2.4
        Width of one panel in inches when a new figure is made (its height
        follows the matrix's aspect ratio, between half and twice the width).

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes, shape (layers, heads)
        ``axes[l, h]`` shows head ``h`` of layer ``l`` (its heatmap is
        ``axes[l, h].images[0]``). The axis labels ("source (keys)", "target
        (queries)") are kept on the bottom row and left column only. The figure
        is ``axes[0, 0].figure``; the shared colour bar is
        ``axes[0, 0].images[0].colorbar``.

    Raises
    ------
    ValueError
        ``weights`` does not have one of the shapes above, the layers differ
        in shape, a token list does not match Tq / Tk, or ``axes`` is not
        (layers, heads).
    TypeError
        ``weights`` is not numeric, or a token list is a plain string.
    ImportError
        matplotlib is missing (``pip install "attnc[plot]"``).

    Examples
    --------
    >>> import numpy as np, attnc
    >>> import attnc.plot
    >>> from attnc.models import GPT
    >>> gpt = GPT(3, 11, n_layer=2, n_head=3, seed=0).eval()
    >>> idx = np.array([[2, 0, 1, 1, 0, 2]])
    >>> logits, weights = gpt(idx, need_weights=True)   # 2 layers of (1, 3, 6, 6)
    >>> tokens = [str(t) for t in idx[0]]
    >>> axes = attnc.plot.heads(weights, tokens, tokens, title="GPT self-attention")
    >>> axes.shape
    (2, 3)
    """
    stack = _as_head_stack(weights)
    n_layers, n_heads, tq, tk = stack.shape
    # check the token lists once, before drawing anything
    _as_tokens(source_tokens, tk, "source_tokens", "columns")
    _as_tokens(target_tokens, tq, "target_tokens", "rows")

    plt = _import_pyplot()
    if axes is None:
        width = float(panel_size)
        height = width * min(max(tq / tk, 0.5), 2.0) if tq and tk else width
        fig, axes = plt.subplots(
            n_layers, n_heads, squeeze=False, layout="constrained",
            figsize=(width * n_heads + (1.0 if colorbar else 0.2), height * n_layers + (0.5 if title else 0.2)),
        )
    else:
        axes = np.asarray(axes, dtype=object)
        if axes.shape != (n_layers, n_heads):
            if axes.size == n_layers * n_heads and axes.ndim <= 1:
                axes = axes.reshape(n_layers, n_heads)
            else:
                raise ValueError(
                    f"axes has shape {axes.shape}, expected (layers, heads) = {(n_layers, n_heads)}"
                )
        fig = axes[0, 0].figure

    for l in range(n_layers):
        for h in range(n_heads):
            ax = axes[l, h]
            alignment(stack[l, h], source_tokens, target_tokens, ax=ax, title=f"{row_label} {l}, head {h}",
                      cmap=cmap, colorbar=False, annotate=annotate)
            if l != n_layers - 1:
                ax.set_xlabel("")
            if h != 0:
                ax.set_ylabel("")
    if colorbar:
        cbar = fig.colorbar(axes[0, 0].images[0] if axes[0, 0].images else _empty_mappable(cmap),
                            ax=axes.ravel().tolist(), shrink=min(1.0, 0.5 + 0.25 * n_layers), pad=0.02)
        cbar.set_label("attention weight")
    if title is not None:
        fig.suptitle(title)
    return axes


def _empty_mappable(cmap):
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    return ScalarMappable(norm=Normalize(vmin=0.0, vmax=1.0), cmap=cmap)


def _panel_grid(n, ax, ncols, what):
    """(figure, ndarray of n Axes): the given ``ax`` (at least n of them) or a
    new figure with ``ncols`` panels per row."""
    if ax is None:
        plt = _import_pyplot()
        per_row = max(1, min(int(ncols), n))
        lines = max(1, -(-n // per_row))
        fig, grid_axes = plt.subplots(lines, per_row, figsize=(2.2 * per_row + 0.8, 2.4 * lines), squeeze=False,
                                      layout="constrained")
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
    panel.imshow(weights, extent=extent, cmap=cmap, norm=Normalize(vmin=0.0, vmax=1.0), alpha=alpha,
                 interpolation="nearest")
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


def caption_attention(image: ArrayLike, words: Sequence[str], alphas: ArrayLike, *, grid: tuple[int, int] = (3, 3),
                      ax: Axes | Sequence[Axes] | None = None, cmap: Cmap = "viridis", overlay_alpha: float = 0.6,
                      ncols: int = 5, colorbar: bool = True, title: str | None = None) -> np.ndarray:
    """Show where a captioner looked for each word (as Xu et al. 2015, Fig. 3).

    The image is drawn once per word with that word's attention weights over
    the grid cells laid over it (a fixed 0–1 colour scale), the word as the
    panel's title.

    Parameters
    ----------
    image : array-like, (H, W, 3) or (H, W)
        The picture, e.g. ``attnc.datasets.captions(...).image(i)``.
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
    cmap, overlay_alpha : the weights' colour map and opacity.
    colorbar : bool, default True
        One colour bar (0 to 1) for all panels.
    title : str, optional
        The figure's title.

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
    weights = np.asarray(alphas, dtype=np.float64)
    if weights.ndim == 3:
        weights = weights.reshape(weights.shape[0], -1)
    if weights.ndim != 2 or weights.shape != (n, rows * cols):
        raise ValueError(f"alphas must be (n words = {n}, {rows * cols} cells) for grid {rows} × {cols}, "
                         f"got shape {tuple(np.shape(alphas))}")
    fig, panels = _panel_grid(n, ax, ncols, "words")
    shown, extent = _picture(img)
    for k, (panel, word) in enumerate(zip(panels, words)):
        _overlay(panel, shown, extent, weights[k].reshape(rows, cols), cmap, overlay_alpha)
        panel.set_title(word)
    _finish_panels(fig, panels, cmap, colorbar, "attention weight", title)
    return panels


__all__.append("caption_attention")


def image_attention(image: ArrayLike, attention: ArrayLike, queries: Sequence[tuple[int, int]] | Sequence[int], *,
                    grid: tuple[int, int] | None = None, ax: Axes | Sequence[Axes] | None = None,
                    scale: Literal["max", "fixed"] = "max", cmap: Cmap = "viridis", overlay_alpha: float = 0.6,
                    ncols: int = 4, colorbar: bool = True, title: str | None = None,
                    marker_color: str = "red") -> np.ndarray:
    """Show where chosen positions of a feature map attend: self-attention maps
    over an image (SAGAN, Zhang et al. 2018, Fig. 1; non-local networks).

    One panel per query position: the image with that position's attention
    over all positions laid over it, and the query marked with a cross.

    Parameters
    ----------
    image : array-like, (H, W), (H, W, 3) or channel-first (3, H, W)
        The picture (a leading batch of one is squeezed).
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
    cmap, overlay_alpha, marker_color : colours and opacity.
    colorbar : bool, default True
    title : str, optional, the figure's title.

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
        raise ValueError(f"attention is ({n_pos}, {n_pos}) but grid {rows} × {cols} has {rows * cols} positions"
                         + ("; pass grid=(rows, cols)" if grid is None else ""))
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
    fig, panels = _panel_grid(len(flat), ax, ncols, "queries")
    shown, extent = _picture(img)
    height, width = img.shape[:2]
    for panel, (r, c) in zip(panels, flat):
        w = att[r * cols + c].reshape(rows, cols)
        if scale == "max":
            peak = w.max()
            w = w / peak if peak > 0 else w
        _overlay(panel, shown, extent, w, cmap, overlay_alpha)
        panel.plot([(c + 0.5) * width / cols], [(r + 0.5) * height / rows], marker="x", markersize=9,
                   markeredgewidth=2.5, color=marker_color)
        panel.set_title(f"query ({r}, {c})")
    label = "attention / its maximum" if scale == "max" else "attention weight"
    _finish_panels(fig, panels, cmap, colorbar, label, title)
    return panels


__all__.append("image_attention")


# --------------------------------------------------------------------------- Neural Turing Machine

def _as_weighting(value, name, n=None):
    """A 1-D float64 copy of one head's weighting (leading size-1 dims squeezed)."""
    arr = _real_array(value, name, "(N,)")
    shape = tuple(arr.shape)
    arr = _squeeze_leading(arr, 1)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(
            f"{name} must be one head's weighting, a 1-D array of length N >= 1 (select one row and head, "
            f"e.g. {name}[0, 0] of address()'s (B, H, N) outputs), got shape {shape}"
        )
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} slots but w_content has {n}: every stage must have length N = {n}")
    return np.array(arr, dtype=np.float64, copy=True)


def ntm_addressing(w_content: ArrayLike, w_gated: ArrayLike, w_shifted: ArrayLike, w: ArrayLike, *,
                   w_prev: ArrayLike | None = None, axes: Sequence[Axes] | None = None,
                   title: str | None = None) -> np.ndarray:
    r"""Draw the addressing stages of one NTM head as a row of bar plots.

    Graves et al. (2014, sec. 3.3) compute a head's weighting over the N
    memory slots in four stages; one panel each, slots on the x axis, weights
    on a fixed 0–1 y scale shared by every panel::

        content       w_c[i] = softmax_i(β cos(k, M[i]))
        (previous     w_{t−1}, drawn only when ``w_prev`` is given)
        interpolated  w_g = g w_c + (1 − g) w_{t−1}
        shifted       w̃[i] = Σ_j w_g[j] s[(i − j) mod N]
        sharpened     w[i] = w̃[i]^γ / Σ_j w̃[j]^γ

    The largest weight of each panel is drawn in a darker colour.

    Parameters
    ----------
    w_content, w_gated, w_shifted, w : array-like, shape (N,)
        The content, interpolated (gated), shifted and sharpened weightings of
        ONE head, e.g. ``w_c[0, 0]``, ``w_g[0, 0]``, ``w_t[0, 0]``, ``w[0, 0]``
        of ``w, (w_c, w_g, w_t) = attnc.ntm.address(..., return_intermediates=True)``
        (leading dims of size 1 are squeezed, so ``w_c[:1, :1]`` works too).
        All four must have the same length N.
    w_prev : array-like, shape (N,), optional
        The head's previous weighting w_{t−1}; when given, a panel for it is
        drawn between the content and the interpolated weights.
    axes : sequence of matplotlib Axes, optional
        Axes to draw into, one per panel (4, or 5 with ``w_prev``). By default
        a new figure with one row of panels is made.
    title : str, optional
        Title of the figure (``fig.suptitle``).

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes, shape (4,) or (5,)
        The panels, left to right: content, [previous,] interpolated, shifted,
        sharpened. Each panel's bars are ``axes[k].patches`` (one per slot,
        heights equal to the weights).

    Raises
    ------
    ValueError
        A weighting is not 1-D after squeezing, the lengths differ, or
        ``axes`` does not hold one Axes per panel.
    TypeError
        A weighting is not numeric.
    ImportError
        matplotlib is missing (``pip install "attnc[plot]"``).

    Examples
    --------
    >>> import numpy as np, attnc
    >>> import attnc.plot
    >>> rng = np.random.default_rng(0)
    >>> memory = rng.standard_normal((1, 10, 4))
    >>> key = memory[:, None, 3] + 0.1                      # close to slot 3
    >>> w_prev = np.eye(10)[None, None, 7]                  # previous focus on slot 7
    >>> s = np.array([[[0.0, 0.1, 0.9]]])                   # mostly a shift by +1
    >>> w, (w_c, w_g, w_t) = attnc.ntm.address(
    ...     key, np.array([[5.0]]), np.array([[0.8]]), s, np.array([[3.0]]), w_prev, memory,
    ...     return_intermediates=True)
    >>> axes = attnc.plot.ntm_addressing(w_c[0, 0], w_g[0, 0], w_t[0, 0], w[0, 0], w_prev=w_prev[0, 0])
    >>> len(axes)
    5
    """
    wc = _as_weighting(w_content, "w_content")
    n = wc.shape[0]
    stages = [("content $w^c$", wc)]
    if w_prev is not None:
        stages.append(("previous $w_{t-1}$", _as_weighting(w_prev, "w_prev", n)))
    stages += [
        ("interpolated $w^g$", _as_weighting(w_gated, "w_gated", n)),
        (r"shifted $\tilde w$", _as_weighting(w_shifted, "w_shifted", n)),
        ("sharpened $w$", _as_weighting(w, "w", n)),
    ]
    k = len(stages)

    plt = _import_pyplot()
    from matplotlib.ticker import MaxNLocator

    if axes is None:
        width = min(max(0.22 * n + 1.0, 2.4), 4.5)
        fig, grid = plt.subplots(1, k, figsize=(width * k, 2.6 + (0.3 if title else 0.0)), squeeze=False,
                                 layout="constrained")
        panels = grid[0]
    else:
        panels = np.ravel(np.asarray(axes, dtype=object))
        if panels.size != k:
            raise ValueError(
                f"axes holds {panels.size} Axes, expected {k}: one per panel (content, "
                f"{'previous, ' if w_prev is not None else ''}interpolated, shifted, sharpened)"
            )
        fig = panels[0].figure
    slots = np.arange(n)
    for j, (ax, (label, values)) in enumerate(zip(panels, stages)):
        colours = np.full(n, "#7fa7d6", dtype=object)
        if np.isfinite(values).any():
            colours[int(np.nanargmax(values))] = "#1f4e8c"
        ax.bar(slots, values, width=0.8, color=list(colours))
        ax.set_ylim(0.0, 1.0)
        ax.set_xlim(-0.6, n - 0.4)
        if n <= 16:
            ax.set_xticks(slots)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(label)
        ax.set_xlabel("slot")
        if j == 0:
            ax.set_ylabel("weight")
        else:
            ax.tick_params(labelleft=False)
    if title is not None:
        fig.suptitle(title)
    return np.array(list(panels), dtype=object)


def _trace_weights(trace, field):
    """One (B, T, H, N) weight array of an NTMTrace-like object."""
    if isinstance(trace, (tuple, list)) and not hasattr(trace, field) and len(trace) >= 2:
        value = trace[0 if field == "read_weights" else 1]
    elif hasattr(trace, field):
        value = getattr(trace, field)
    else:
        raise TypeError(
            "trace must be an attnc.models.NTMTrace (the second output of NTM.forward(inputs, "
            f"return_trace=True)) or a (read_weights, write_weights[, memory]) tuple, got {type(trace).__name__}"
        )
    arr = _real_array(value, f"trace.{field}", "(B, T, H, N)")
    if arr.ndim != 4:
        raise ValueError(f"trace.{field} must have shape (B, T, heads, N), got shape {tuple(arr.shape)}")
    return arr


def _trace_channels(value, name, B, T, row):
    """(T, C) float64 copy of inputs / targets / outputs, given (B, T, C) or (T, C)."""
    arr = _real_array(value, name, "(B, T, C) or (T, C)")
    shape = tuple(arr.shape)
    if arr.ndim == 3:
        if arr.shape[0] != B or arr.shape[1] != T:
            raise ValueError(f"{name} must have shape (B, T, C) = ({B}, {T}, C) like the trace, or (T, C), "
                             f"got shape {shape}")
        arr = arr[row]
    elif arr.ndim == 2:
        if arr.shape[0] != T:
            raise ValueError(f"{name} must have shape (T, C) with T = {T} steps like the trace, or (B, T, C), "
                             f"got shape {shape}")
    else:
        raise ValueError(f"{name} must have shape (B, T, C) = ({B}, {T}, C) or (T, C) = ({T}, C), got shape {shape}")
    return np.array(arr, dtype=np.float64, copy=True)


def _slot_range(slots, n):
    """(start, stop) of the displayed slots."""
    if slots is None:
        return 0, n
    if isinstance(slots, slice):
        if slots.step not in (None, 1):
            raise ValueError(f"slots must be a contiguous range (step 1), got {slots!r}")
        start, stop, _ = slots.indices(n)
    elif isinstance(slots, range):
        if slots.step != 1:
            raise ValueError(f"slots must be a contiguous range (step 1), got {slots!r}")
        start, stop = slots.start, slots.stop
    else:
        try:
            start, stop = (int(v) for v in slots)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"slots must be None, a (start, stop) pair, a range or a slice, got {slots!r}") from exc
    if not (0 <= start < stop <= n):
        raise ValueError(f"slots must select a non-empty range within 0..{n} (N = {n} slots), got "
                         f"start {start}, stop {stop}")
    return start, stop


def ntm_trace(trace: NTMTrace | tuple[ArrayLike, ...], *, row: int = 0, inputs: ArrayLike | None = None,
              targets: ArrayLike | None = None, outputs: ArrayLike | None = None,
              axes: Sequence[Axes] | None = None, slots: tuple[int, int] | range | slice | None = None,
              heads: Literal["all", "first"] = "all", colorbar: bool = True, title: str | None = None,
              cmap: Cmap = "viridis") -> np.ndarray:
    r"""Draw what an NTM's heads did over time (as Graves et al. 2014, Fig. 6).

    For one row of a batch, heat maps with time on the x axis: optionally the
    inputs, targets and outputs (channels × steps), then each write head's
    weighting and each read head's weighting (slots × steps: column t is
    w_t). On the copy task a trained NTM's write weights step down one slot
    per input step, a diagonal, and the read weights retrace the same
    diagonal while it writes the sequence back. Every panel uses a fixed 0–1
    colour scale (values outside saturate) and one colour bar serves them all.

    Parameters
    ----------
    trace : attnc.models.NTMTrace
        The second output of ``NTM.forward(inputs, return_trace=True)``:
        ``read_weights`` (B, T, R, N) and ``write_weights`` (B, T, W, N) are
        drawn (``memory`` is not). A ``(read_weights, write_weights[, memory])``
        tuple works too.
    row : int, default 0
        The row of the batch to draw.
    inputs, targets, outputs : array-like, (B, T, C) or (T, C), optional
        Drawn above the weights, one panel each, in that order, as
        channels × steps. (B, T, C) arrays are indexed by ``row``. Pass
        predictions in [0, 1] as ``outputs``, e.g. ``1 / (1 + np.exp(-logits))``
        of the model's logits.
    axes : sequence of matplotlib Axes, optional
        One Axes per panel, in the order of the returned array. By default a
        new figure with one column of panels sharing the time axis is made.
    slots : None, (start, stop), range or slice, optional
        The slots to show (e.g. the ones the heads actually used); default all
        N. The y axis keeps the true slot numbers.
    heads : "all" or "first", default "all"
        Draw every write and read head (one panel each, stacked: write heads
        first, then read heads), or only the first write head and the first
        read head.
    colorbar : bool, default True
        One colour bar (0 to 1) for all panels.
    title : str, optional
        Title of the figure (``fig.suptitle``).
    cmap : str or matplotlib colormap, default "viridis"

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes, shape (panels,)
        Top to bottom: [inputs], [targets], [outputs], write head 0 … W−1,
        read head 0 … R−1 (titled accordingly). Each panel's heat map is
        ``axes[k].images[0]``; for a weight panel its array is
        ``trace.write_weights[row, :, h, start:stop].T`` (slots × steps), for
        the inputs ``inputs[row].T`` (channels × steps).

    Raises
    ------
    ValueError
        The trace's weights are not (B, T, heads, N) with matching B, T and N,
        ``row`` is out of range, inputs / targets / outputs do not have T
        steps, ``slots`` is not a non-empty range within 0..N, ``heads`` is
        neither "all" nor "first", or ``axes`` does not hold one Axes per panel.
    TypeError
        ``trace`` has no weights, or an array is not numeric.
    ImportError
        matplotlib is missing (``pip install "attnc[plot]"``).

    Examples
    --------
    >>> import numpy as np, attnc
    >>> import attnc.plot
    >>> from attnc.datasets import CopyTask
    >>> from attnc.models import NTM
    >>> task = CopyTask(bits=8)
    >>> batch = task.batch(1, length=10, seed=0)
    >>> model = NTM(task.input_size, task.output_size, controller_size=32, memory_slots=32,
    ...             memory_width=8, seed=0)
    >>> logits, trace = model(batch.inputs, return_trace=True)
    >>> axes = attnc.plot.ntm_trace(trace, inputs=batch.inputs, targets=batch.targets,
    ...                             outputs=1 / (1 + np.exp(-logits)), slots=(0, 16))
    >>> [ax.get_title() for ax in axes]
    ['inputs', 'targets', 'outputs', 'write weights (head 0)', 'read weights (head 0)']
    """
    read = _trace_weights(trace, "read_weights")
    write = _trace_weights(trace, "write_weights")
    B, T, _, N = read.shape
    if write.shape[0] != B or write.shape[1] != T or write.shape[3] != N:
        raise ValueError(
            f"trace.write_weights has shape {tuple(write.shape)} but trace.read_weights has {tuple(read.shape)}: "
            "both must be (B, T, heads, N) with the same B, T and N"
        )
    if isinstance(row, bool) or not isinstance(row, (int, np.integer)):
        raise TypeError(f"row must be an int, got {type(row).__name__}")
    if not -B <= row < B:
        raise ValueError(f"row must be in range for a batch of B = {B}, got {row}")
    row = int(row) % B
    if heads not in ("all", "first"):
        raise ValueError(f'heads must be "all" or "first", got {heads!r}')
    start, stop = _slot_range(slots, N)

    panels = []  # (title, matrix (rows, T), ylabel, first row label)
    for name, value in (("inputs", inputs), ("targets", targets), ("outputs", outputs)):
        if value is not None:
            panels.append((name, _trace_channels(value, name, B, T, row).T, "channel", 0))
    n_write = write.shape[2] if heads == "all" else min(1, write.shape[2])
    n_read = read.shape[2] if heads == "all" else min(1, read.shape[2])
    for kind, arr, count in (("write", write, n_write), ("read", read, n_read)):
        for h in range(count):
            panels.append((f"{kind} weights (head {h})", np.array(arr[row, :, h, start:stop].T, dtype=np.float64),
                           "slot", start))
    if not panels:
        raise ValueError("nothing to draw: the trace has no heads and no inputs, targets or outputs were given")
    k = len(panels)

    plt = _import_pyplot()
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    if axes is None:
        ratios = [min(max(m.shape[0], 3), 40) for _, m, _, _ in panels]
        width = min(max(0.16 * T + 2.5, 6.0), 16.0)
        height = min(0.13 * sum(ratios) + 0.45 * k + (0.3 if title else 0.0), 16.0)
        fig, grid = plt.subplots(k, 1, figsize=(width, height), sharex=True, squeeze=False, layout="constrained",
                                 gridspec_kw={"height_ratios": ratios})
        out = grid[:, 0]
    else:
        out = np.ravel(np.asarray(axes, dtype=object))
        if out.size != k:
            raise ValueError(f"axes holds {out.size} Axes, expected {k}: one per panel ("
                             + ", ".join(p[0] for p in panels) + ")")
        fig = out[0].figure

    norm = Normalize(vmin=0.0, vmax=1.0)
    for ax, (label, mat, ylabel, first) in zip(out, panels):
        rows = mat.shape[0]
        ax.imshow(mat, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest", origin="upper",
                  extent=(-0.5, T - 0.5, first + rows - 0.5, first - 0.5))
        ax.set_title(label, fontsize="medium")
        ax.set_ylabel(ylabel)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=min(rows, 6)))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    out[-1].set_xlabel("time step")
    if colorbar:
        cbar = fig.colorbar(out[0].images[0], ax=list(out), shrink=min(1.0, 0.3 + 0.1 * k), pad=0.02)
        cbar.set_label("value / weight (0–1)")
    if title is not None:
        fig.suptitle(title)
    return np.array(list(out), dtype=object)


__all__ += ["ntm_addressing", "ntm_trace"]


# --------------------------------------------------------------------------- pointer networks: tours and hulls

def _as_points(points):
    """(n, 2) float64 copy of ``points`` (leading size-1 dims squeezed), finite, n >= 1."""
    arr = _real_array(points, "points", "(n, 2)")
    shape = tuple(arr.shape)
    arr = _squeeze_leading(arr, 2)
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
        raise ValueError(
            "points must be the planar points of ONE instance, shape (n, 2) with n >= 1 (select a row of a "
            f"(B, n, 2) batch first, e.g. points[b]), got shape {shape}"
        )
    arr = np.array(arr, dtype=np.float64, copy=True)
    if not np.isfinite(arr).all():
        raise ValueError("points must be finite (no nan or inf)")
    return arr


def _as_indices(value, name, n, *, until_first_pad):
    """The point indices of one tour / polygon as an int64 array (-1 padding dropped).

    ``value`` is 1-D (leading size-1 dims squeezed), integers in [-1, n).
    With ``until_first_pad`` everything from the first -1 on is dropped,
    otherwise every -1 is."""
    try:
        arr = np.asarray(value)
    except Exception as exc:
        raise ValueError(f"{name} must be a 1-D array of point indices; could not convert it: {exc}") from exc
    shape = tuple(arr.shape)
    arr = _squeeze_leading(arr, 1)
    if arr.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D array of point indices (one instance: select a row of a (B, T) batch first, "
            f"e.g. {name}[b]), got shape {shape}"
        )
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)  # an empty list becomes float64
        else:
            raise TypeError(f"{name} must hold integer point indices, got dtype {arr.dtype}")
    idx = np.array(arr, dtype=np.int64, copy=True)
    bad = (idx < -1) | (idx >= n)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} must hold indices into points (0..{n - 1}) or -1 for padding, got {int(idx[k])} at position {k}"
        )
    if until_first_pad:
        pads = np.flatnonzero(idx < 0)
        return idx[: pads[0]] if pads.size else idx
    return idx[idx >= 0]


def _closed(idx):
    """The vertex order of the closed polygon through idx (first vertex repeated at the end)."""
    if idx.size == 0:
        return idx
    if idx.size > 1 and idx[-1] == idx[0]:
        return idx  # already closed
    return np.append(idx, idx[0])


def _polygon_length(pts, closed_idx):
    if closed_idx.size < 2:
        return 0.0
    return float(np.sum(np.hypot(*np.diff(pts[closed_idx], axis=0).T)))


def _plane_axes(ax, pts, figsize):
    plt = _import_pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    pad = 0.08 * max(float(np.max(hi - lo)), 1e-9)
    ax.set_xlim(lo[0] - pad, hi[0] + pad)
    ax.set_ylim(lo[1] - pad, hi[1] + pad)
    ax.set_aspect("equal", adjustable="box")
    return ax


def tours(points: ArrayLike, tours: ArrayLike, *, optimal: ArrayLike | None = None, ax: Axes | None = None,
          labels: bool = True, title: str | None = None) -> Axes:
    """Draw a tour through planar points (e.g. a pointer network's TSP tour),
    over the optimal tour.

    The tour is drawn as a closed polygon, from ``points[tours[0]]`` through
    every listed point and back, its start marked with a square; the optimal
    tour, when given, is drawn underneath as a wide light line, so where the
    two agree the tour lies on it and where they differ both show.

    Parameters
    ----------
    points : array-like, shape (n, 2)
        The points (cities) of one instance, e.g. ``batch.inputs[b]`` of
        :class:`attnc.datasets.TSPTask` (leading dims of size 1 are squeezed).
    tours : array-like of int, shape (T,)
        The tour: indices into ``points`` in visiting order; ``-1`` entries
        (padding) are ignored. Open (``[0, 3, 1, 2]``) or closed, the last
        index repeating the first (``[0, 3, 1, 2, 0]``, as
        ``PointerNet.generate(..., constraint="tour").indices[b]`` returns it):
        both are drawn as the same closed polygon.
    optimal : array-like of int, shape (T',), optional
        The optimal tour (e.g. ``batch.targets[b]``), in the same format.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; by default a new figure.
    labels : bool, default True
        Write each point's index next to it.
    title : str, optional
        Axes title. The legend gives both tours' closed lengths.

    Returns
    -------
    matplotlib.axes.Axes
        With equal aspect. The tour's line is the ``ax.lines`` entry with
        ``get_gid() == "tour"``, its data the points in visiting order, the
        first repeated at the end; the optimal tour's has gid ``"optimal"``
        (drawn first, below the tour) and the start marker's ``"start"``; the
        points are the collection ``ax.collections[0]``.

    Raises
    ------
    ValueError
        ``points`` is not (n, 2) or not finite, or a tour is not 1-D or holds
        an index outside ``-1 .. n-1``.
    TypeError
        ``points`` is not numeric, or a tour does not hold integers.
    ImportError
        matplotlib is missing (``pip install "attnc[plot]"``).

    Examples
    --------
    >>> import numpy as np
    >>> import attnc.plot
    >>> from attnc.datasets import TSPTask
    >>> batch = TSPTask(n=6).batch(1, seed=0)
    >>> ax = attnc.plot.tours(batch.inputs[0], [0, 1, 2, 3, 4, 5, 0], optimal=batch.targets[0])
    >>> [line.get_gid() for line in ax.lines]
    ['optimal', 'tour', 'start']
    """
    pts = _as_points(points)
    n = pts.shape[0]
    tour = _closed(_as_indices(tours, "tours", n, until_first_pad=False))
    best = None if optimal is None else _closed(_as_indices(optimal, "optimal", n, until_first_pad=False))

    ax = _plane_axes(ax, pts, (4.0, 4.0))
    if best is not None:
        ax.plot(pts[best, 0], pts[best, 1], color="#f4a261", lw=6.0, alpha=0.55, solid_joinstyle="round",
                solid_capstyle="round", zorder=1, gid="optimal",
                label=f"optimal ({_polygon_length(pts, best):.3f})")
    ax.plot(pts[tour, 0], pts[tour, 1], color="#1d3557", lw=1.6, zorder=2, gid="tour",
            label=f"tour ({_polygon_length(pts, tour):.3f})")
    ax.scatter(pts[:, 0], pts[:, 1], s=22, color="#e63946", zorder=3)
    if tour.size:
        ax.plot(pts[tour[0], 0], pts[tour[0], 1], "s", ms=8, mfc="none", mec="#1d3557", mew=1.5, zorder=4,
                gid="start")
    if labels:
        for i, (x, y) in enumerate(pts):
            ax.annotate(str(i), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8, zorder=5)
    ax.legend(loc="best", fontsize=7, framealpha=0.8, handlelength=1.5)
    if title is not None:
        ax.set_title(title)
    return ax


def hull(points: ArrayLike, predicted: ArrayLike, *, target: ArrayLike | None = None, ax: Axes | None = None,
         title: str | None = None) -> Axes:
    """Draw a predicted convex hull (e.g. a pointer network's) over the true one.

    The predicted polygon joins ``points[predicted[0]]``, ``points[predicted[1]]``,
    ... up to the first ``-1`` (the end token) and closes back to the start;
    its vertices are ringed. The true hull, when given, is drawn underneath as
    a light filled polygon with a wide outline: a correct prediction traces
    its outline exactly.

    Parameters
    ----------
    points : array-like, shape (n, 2)
        The points of one instance, e.g. ``batch.inputs[b]`` of
        :class:`attnc.datasets.ConvexHullTask` (leading dims of size 1 are
        squeezed).
    predicted : array-like of int, shape (T,)
        The predicted vertices in order, indices into ``points``; everything
        from the first ``-1`` on is ignored, as in
        ``PointerNet.generate(..., constraint="hull").indices[b]``. A last
        index repeating the first is allowed.
    target : array-like of int, shape (T',), optional
        The true hull's vertices (e.g. ``batch.targets[b]``), in the same format.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; by default a new figure.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.axes.Axes
        With equal aspect. The predicted polygon is the ``ax.lines`` entry
        with ``get_gid() == "predicted"``, its data the vertices in order, the
        first repeated at the end (empty when ``predicted`` starts with -1);
        the true hull's outline has gid ``"target"`` (drawn first, below) and
        its fill is ``ax.patches[0]``; the points are ``ax.collections[0]``.

    Raises
    ------
    ValueError
        ``points`` is not (n, 2) or not finite, or ``predicted`` / ``target``
        is not 1-D or holds an index outside ``-1 .. n-1``.
    TypeError
        ``points`` is not numeric, or an index array does not hold integers.
    ImportError
        matplotlib is missing (``pip install "attnc[plot]"``).

    Examples
    --------
    >>> import attnc.plot
    >>> from attnc.datasets import ConvexHullTask
    >>> batch = ConvexHullTask().batch(1, n=10, seed=0)
    >>> ax = attnc.plot.hull(batch.inputs[0], batch.targets[0], target=batch.targets[0])
    >>> [line.get_gid() for line in ax.lines]
    ['target', 'predicted']
    """
    pts = _as_points(points)
    n = pts.shape[0]
    pred = _closed(_as_indices(predicted, "predicted", n, until_first_pad=True))
    true = None if target is None else _closed(_as_indices(target, "target", n, until_first_pad=True))

    ax = _plane_axes(ax, pts, (4.0, 4.0))
    if true is not None:
        from matplotlib.patches import Polygon

        if true.size:
            ax.add_patch(Polygon(pts[true], closed=True, facecolor="#a8dadc", edgecolor="none", alpha=0.5, zorder=0))
        ax.plot(pts[true, 0], pts[true, 1], color="#f4a261", lw=6.0, alpha=0.55, solid_joinstyle="round",
                solid_capstyle="round", zorder=1, gid="target", label=f"true hull ({max(true.size - 1, 0)})")
    ax.scatter(pts[:, 0], pts[:, 1], s=18, color="#6c757d", zorder=3)
    ax.plot(pts[pred, 0], pts[pred, 1], color="#1d3557", lw=1.6, marker="o", ms=8, mfc="none", mec="#e63946",
            mew=1.5, zorder=2, gid="predicted", label=f"predicted ({max(pred.size - 1, 0)})")
    ax.legend(loc="best", fontsize=7, framealpha=0.8, handlelength=1.5)
    if title is not None:
        ax.set_title(title)
    return ax


__all__ += ["hull", "tours"]
