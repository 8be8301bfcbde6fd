"""Alignment matrices: one heatmap, or a layer x head grid on one colour scale."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._typing import ArrayLike
from ._common import Axes, Cmap, _as_tokens, _empty_mappable, _import_pyplot, _squeeze_leading, _squeezed, _subplots


def _as_matrix(weights):
    """Return ``weights`` as a 2-D float64 array, squeezing leading size-1 dims."""
    arr, shape = _squeezed(weights, "weights", "(Tq, Tk)", 2)
    if arr.ndim != 2:
        raise ValueError(
            "weights must be a 2-D alignment matrix of shape (Tq, Tk) "
            f"(a leading batch dim of size 1 is allowed), got weights with shape {shape}"
        )
    return arr


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

    _import_pyplot()  # the install hint, before any work
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        # About 0.4 inch per cell, within sane bounds; room for labels.
        width = min(max(0.4 * tk + 2.5, 3.5), 14.0)
        height = min(max(0.4 * tq + 1.5, 2.5), 12.0)
        _, ax = _subplots(figsize=(width, height))

    norm = Normalize(vmin=0.0, vmax=1.0)
    if mat.size:
        mappable = ax.imshow(
            mat,
            cmap=cmap,
            norm=norm,
            aspect="auto",
            interpolation="nearest",
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
        fontsize = 9 if max(tq, tk) <= 12 else 7
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

    _import_pyplot()  # the install hint, before any work
    if axes is None:
        width = float(panel_size)
        height = width * min(max(tq / tk, 0.5), 2.0) if tq and tk else width
        fig, axes = _subplots(
            n_layers,
            n_heads,
            squeeze=False,
            figsize=(width * n_heads + (1.0 if colorbar else 0.2), height * n_layers + (0.5 if title else 0.2)),
        )
    else:
        axes = np.asarray(axes, dtype=object)
        if axes.shape != (n_layers, n_heads):
            if axes.size == n_layers * n_heads and axes.ndim <= 1:
                axes = axes.reshape(n_layers, n_heads)
            else:
                raise ValueError(f"axes has shape {axes.shape}, expected (layers, heads) = {(n_layers, n_heads)}")
        fig = axes[0, 0].figure

    for l in range(n_layers):
        for h in range(n_heads):
            ax = axes[l, h]
            alignment(
                stack[l, h],
                source_tokens,
                target_tokens,
                ax=ax,
                title=f"{row_label} {l}, head {h}",
                cmap=cmap,
                colorbar=False,
                annotate=annotate,
            )
            if l != n_layers - 1:
                ax.set_xlabel("")
            if h != 0:
                ax.set_ylabel("")
    if colorbar:
        cbar = fig.colorbar(
            axes[0, 0].images[0] if axes[0, 0].images else _empty_mappable(cmap),
            ax=axes.ravel().tolist(),
            shrink=min(1.0, 0.5 + 0.25 * n_layers),
            pad=0.02,
        )
        cbar.set_label("attention weight")
    if title is not None:
        fig.suptitle(title)
    return axes
