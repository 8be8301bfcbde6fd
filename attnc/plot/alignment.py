"""Alignment matrices: one heatmap, or a layer x head grid on one colour scale."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from .._typing import ArrayLike
from ._common import (
    Axes,
    Cmap,
    _as_tokens,
    _empty_mappable,
    _figure_dpi,
    _import_pyplot,
    _real_array,
    _squeezed,
    _subplots,
)


def _as_matrix(weights):
    """Return ``weights`` as a 2-D float64 array, squeezing leading size-1 dims."""
    arr, shape = _squeezed(weights, "weights", "(Tq, Tk)", 2)
    if arr.ndim != 2:
        raise ValueError(
            "weights must be a 2-D alignment matrix of shape (Tq, Tk) "
            f"(a leading batch dim of size 1 is allowed), got weights with shape {shape}"
        )
    return arr


def _as_vmax(vmax):
    """The top of a colour scale: 1 when None, else a positive finite number."""
    if vmax is None:
        return 1.0
    if isinstance(vmax, bool) or not isinstance(vmax, (int, float, np.integer, np.floating)):
        raise TypeError(f"vmax must be a number, got {type(vmax).__name__}")
    if not (np.isfinite(vmax) and vmax > 0):
        raise ValueError(f"vmax must be a positive finite number (the top of the colour scale), got {vmax}")
    return float(vmax)


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
    vmax: float | None = None,
    dpi: float | None = None,
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
        2-D raises ``ValueError``. The colour scale is fixed to [0, 1] (or
        [0, vmax]) so plots can be compared with each other; values outside
        that range saturate.
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
        Add a colour bar (0 to 1, or to ``vmax``) next to the axes.
    annotate : bool, default False
        Write each weight (two decimals) inside its cell; useful for small
        matrices.
    vmax : float > 0, optional
        The top of the colour scale (default 1): e.g. the largest weight, so
        that a diffuse matrix is not uniformly dark.
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``ax`` is given (set it on its figure).

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn into; ``ax.figure.savefig("a.png")`` (or ``.svg``)
        saves it. The heatmap is ``ax.images[0]`` and its colour bar
        ``ax.images[0].colorbar``.

    Raises
    ------
    ValueError
        ``weights`` is not (Tq, Tk) after squeezing, a token list's length
        does not match the matrix, ``vmax`` is not a positive finite number,
        or ``dpi`` is out of range or given with ``ax``.
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
    top = _as_vmax(vmax)
    fig_dpi = _figure_dpi(dpi, ax is not None)

    _import_pyplot()  # the install hint, before any work
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        # About 0.4 inch per cell, within sane bounds; room for labels.
        width = min(max(0.4 * tk + 2.5, 3.5), 14.0)
        height = min(max(0.4 * tq + 1.5, 2.5), 12.0)
        _, ax = _subplots(figsize=(width, height), dpi=fig_dpi)

    norm = Normalize(vmin=0.0, vmax=top)
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


def _index_list(selection, n, name, what):
    """The indices an int, a list of ints or a slice selects among n (negative ints count from
    the end); errors name the argument."""
    if selection is None:
        return list(range(n))
    if isinstance(selection, slice):
        picked = list(range(n))[selection]
        if not picked:
            raise ValueError(f"{name}={selection!r} selects none of the {n} {what}")
        return picked
    single = isinstance(selection, (int, np.integer)) and not isinstance(selection, (bool, np.bool_))
    items = [selection] if single else selection
    if isinstance(selection, (str, bytes, bool, np.bool_)) or not isinstance(items, (list, tuple, range, np.ndarray)):
        raise TypeError(f"{name} must be an int, a list of ints or a slice, got {type(selection).__name__}")
    picked = []
    for i in np.asarray(items, dtype=object).ravel() if isinstance(items, np.ndarray) else items:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"{name} must be an int, a list of ints or a slice, got an element {i!r}")
        if not -n <= i < n:
            raise ValueError(f"{name} {int(i)} is out of range: there are {n} {what} (0..{n - 1}, or -{n}..-1)")
        picked.append(int(i) % n)
    if not picked:
        raise ValueError(f"{name} is an empty list: select at least one of the {n} {what}")
    return picked


def _one_layer(value, name, batch, single):
    """One layer's weights as an (H, Tq, Tk) array of the given dtype, and whether it had a head
    axis: (B, H, Tq, Tk) or head-averaged (B, Tq, Tk) indexed by ``batch``, or without it one
    example: (1, H, Tq, Tk), (H, Tq, Tk) or (Tq, Tk)."""
    arr = _real_array(value, name, "(B, heads, Tq, Tk)")
    shape = tuple(arr.shape)
    if batch is None:
        if arr.ndim == 4 and shape[0] != 1:
            raise ValueError(
                f"{name} holds a batch of {shape[0]} examples (shape {shape} read as (B, heads, Tq, Tk)): pick "
                f"one with batch=0..{shape[0] - 1}"
                + ("; if its first axis is layers, pass list(weights), one array per layer" if single else "")
            )
        arr = arr[0] if arr.ndim == 4 else arr
        if arr.ndim not in (2, 3):
            raise ValueError(
                f"{name} must be one layer's weights (B, heads, Tq, Tk) with B = 1, (heads, Tq, Tk) or (Tq, Tk), "
                f"got shape {shape}"
            )
    else:
        if arr.ndim not in (3, 4):
            raise ValueError(
                f"with batch given, {name} must be (B, heads, Tq, Tk), or (B, Tq, Tk) averaged over the heads "
                f"(torch.nn.MultiheadAttention's default), got shape {shape}"
            )
        if not -shape[0] <= batch < shape[0]:
            raise ValueError(f"batch {batch} is out of range: {name} holds B = {shape[0]} examples (shape {shape})")
        arr = arr[batch]
    return (arr if arr.ndim == 3 else arr[None]), arr.ndim == 3


def _as_head_stack(weights, batch, layer):
    """(float64 array (layers, heads, Tq, Tk) of the selected layers, their indices, whether the
    weights have a head axis)."""
    if isinstance(weights, dict):
        keys = ", ".join(repr(k) for k in weights)
        raise TypeError(f"weights is a dict (keys {keys}): pass one of its lists of per-layer weights")
    if batch is not None and (isinstance(batch, (bool, np.bool_)) or not isinstance(batch, (int, np.integer))):
        raise TypeError(f"batch must be an int (the example to draw) or None, got {type(batch).__name__}")
    single = not isinstance(weights, (list, tuple))
    if not single and not weights:
        raise ValueError("weights is an empty list: give one (B, heads, Tq, Tk) array per layer")
    given = [weights] if single else list(weights)
    picked = _index_list(layer, len(given), "layer", "layers")
    named = [(i, "weights" if single else f"weights[{i}]") for i in picked]
    layers = [_one_layer(given[i], name, batch, single) for i, name in named]
    shapes = {arr.shape for arr, _ in layers}
    if len(shapes) != 1 or len({has for _, has in layers}) != 1:
        raise ValueError(
            "every layer of weights must have the same shape, got "
            + ", ".join(f"{name} {arr.shape}" for (_, name), (arr, _) in zip(named, layers))
        )
    return np.array([arr for arr, _ in layers], dtype=np.float64), picked, layers[0][1]


def _panel_tops(stack, vmax, normalize):
    """(layers, heads) tops of the panels' colour scales: vmax (1 by default) for all, or with
    normalize="head" each panel's largest weight (1 for a panel of zeros)."""
    if normalize is None:
        return np.full(stack.shape[:2], _as_vmax(vmax))
    if normalize != "head":
        raise ValueError(f'normalize must be None (one scale 0..vmax) or "head" (each head its own), got {normalize!r}')
    if vmax is not None:
        raise ValueError('vmax sets one scale for every panel; normalize="head" gives each its own: pass one of them')
    tops = np.zeros(stack.shape[:2])
    for index in np.ndindex(*tops.shape):
        panel = stack[index]
        finite = panel[np.isfinite(panel)]
        peak = float(finite.max()) if finite.size else 0.0
        tops[index] = peak if peak > 0 else 1.0
    return tops


def heads(
    weights: ArrayLike | Sequence[ArrayLike],
    source_tokens: Sequence[object] | None = None,
    target_tokens: Sequence[object] | None = None,
    axes: np.ndarray | Sequence[Axes] | None = None,
    *,
    batch: int | None = None,
    layer: int | Sequence[int] | slice | None = None,
    head: int | Sequence[int] | slice | None = None,
    vmax: float | None = None,
    normalize: Literal["head"] | None = None,
    title: str | None = None,
    row_label: str = "layer",
    cmap: Cmap = "viridis",
    colorbar: bool = True,
    annotate: bool = False,
    panel_size: float = 2.4,
    dpi: float | None = None,
) -> np.ndarray:
    """Draw heads of a transformer's layers as a grid of alignment heatmaps.

    Row ``l`` of the grid is a layer, column ``h`` a head; panel titles give
    their true indices (``layer 3, head 1``, counted from 0 as in
    ``weights[l][b, h]`` and the state_dict's ``layers.{l}``). Each panel is
    drawn by :func:`alignment`. By default every panel is on the same
    colour scale, 0 to ``vmax`` (1), so panels can be compared with each other
    and one colour bar serves the grid; ``normalize="head"`` gives each panel
    its own scale, 0 to its largest weight, and its own colour bar showing it.

    Parameters
    ----------
    weights : list of array-likes, or one array-like
        The ``need_weights=True`` output as it comes: a list with one array
        per layer, each (B, heads, Tq, Tk), from
        :class:`attnc.nn.TransformerEncoder` (``ws``),
        :class:`attnc.nn.TransformerDecoder` (``w["self"]``, ``w["cross"]``),
        :class:`attnc.models.GPT`, or the ``"encoder"``, ``"decoder_self"``
        and ``"decoder_cross"`` lists of :class:`attnc.models.Seq2SeqTransformer`
        and :class:`attnc.nn.Transformer`. One array is one layer: (B, heads,
        Tq, Tk), as :class:`attnc.nn.MultiheadAttention`, torch's
        ``nn.MultiheadAttention(..., average_attn_weights=False)`` (batch
        first) or a ``TransformerEncoderLayer`` return it. Without ``batch``,
        each layer must be one example: (1, heads, Tq, Tk), (heads, Tq, Tk)
        (an unbatched input's) or (Tq, Tk). NumPy arrays, nested lists and
        torch tensors (detached and copied to the CPU) are accepted.
    source_tokens : sequence, length Tk, optional
        Key labels (x axis of every panel).
    target_tokens : sequence, length Tq, optional
        Query labels (y axis of every panel).
    axes : array-like of matplotlib Axes, shape (layers, heads) drawn, optional
        Axes to draw into. By default a new figure with a grid of panels, each
        about ``panel_size`` inches wide, is made.
    batch : int, optional
        The example to draw (negative counts from the end): each layer is then
        (B, heads, Tq, Tk), or (B, Tq, Tk) averaged over the heads (torch's
        ``nn.MultiheadAttention`` default; one panel per layer, titled without
        a head). Without it, a batch of more than one example raises
        ``ValueError``.
    layer, head : int, list of ints or slice, optional
        The layers (indices into the list) and heads to draw; default all.
        An int still gives a 2-D grid (one row or column).
    vmax : float > 0, optional
        The top of the shared colour scale (default 1): e.g. 0.3 to see
        diffuse heads, whose weights over many keys are all small.
    normalize : None or "head", default None
        None: one scale, 0 to ``vmax``, for every panel (panels comparable).
        "head": each panel from 0 to its own largest weight, so a diffuse head
        is not uniformly dark; each panel gets its own colour bar, its top
        tick the panel's maximum (panels are then not comparable by colour).
        Cannot be combined with ``vmax``.
    title : str, optional
        Title of the figure (``fig.suptitle``).
    row_label : str, default "layer"
        Word used in the panel titles: ``f"{row_label} {l}, head {h}"``.
    cmap : str or matplotlib colormap, default "viridis"
    colorbar : bool, default True
        The colour bar(s): one for the grid, or one per panel with
        ``normalize="head"``.
    annotate : bool, default False
        Write each weight inside its cell (see :func:`alignment`).
    panel_size : float, default 2.4
        Width of one panel in inches when a new figure is made (its height
        follows the matrix's aspect ratio, between half and twice the width).
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``axes`` are given (set it on their figure).

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes, shape (layers, heads) drawn
        ``axes[i, j]`` shows the i-th selected layer's j-th selected head (its
        heatmap is ``axes[i, j].images[0]``, the weights as given, on the
        scale ``images[0].get_clim()``). The axis labels ("source (keys)",
        "target (queries)") are kept on the bottom row and left column only.
        The figure is ``axes[0, 0].figure``; the colour bar of a panel's scale
        is ``axes[i, j].images[0].colorbar`` (``axes[0, 0]``'s for the shared
        one).

    Raises
    ------
    ValueError
        ``weights`` does not have one of the shapes above, holds a batch of
        more than one without ``batch``, the layers differ in shape, ``batch``,
        ``layer`` or ``head`` selects outside the weights or nothing, ``vmax``
        is not positive or is given with ``normalize="head"``, ``normalize``
        is neither None nor "head", a token list does not match Tq / Tk,
        ``axes`` does not match the panels, or ``dpi`` is out of range or
        given with ``axes``.
    TypeError
        ``weights`` is not numeric or is a dict (pass one of its lists),
        ``batch`` is not an int, ``layer`` / ``head`` is not an int, a list
        of ints or a slice, or a token list is a plain string.

    Examples
    --------
    >>> import numpy as np, attnc
    >>> import attnc.plot
    >>> from attnc.models import GPT
    >>> gpt = GPT(3, 11, n_layer=2, n_head=3, seed=0).eval()
    >>> idx = np.array([[2, 0, 1, 1, 0, 2], [1, 1, 2, 0, 0, 1]])
    >>> logits, weights = gpt(idx, need_weights=True)   # 2 layers of (2, 3, 6, 6)
    >>> tokens = [str(t) for t in idx[1]]
    >>> axes = attnc.plot.heads(weights, tokens, tokens, batch=1, title="GPT self-attention")
    >>> axes.shape
    (2, 3)
    >>> axes = attnc.plot.heads(weights, tokens, tokens, batch=1, layer=1, head=[0, 2], normalize="head")
    >>> [ax.get_title() for ax in axes.flat], axes[0, 1].images[0].get_clim() == (0.0, weights[1][1, 2].max())
    (['layer 1, head 0', 'layer 1, head 2'], True)
    """
    stack, layer_ids, has_heads = _as_head_stack(weights, batch, layer)
    if not has_heads and head is not None:
        raise ValueError("head selects heads, but the weights have none (averaged over the heads: (B, Tq, Tk))")
    head_ids = _index_list(head, stack.shape[1], "head", "heads")
    stack = stack[:, head_ids]
    n_layers, n_heads, tq, tk = stack.shape
    tops = _panel_tops(stack, vmax, normalize)
    # check the token lists once, before drawing anything
    _as_tokens(source_tokens, tk, "source_tokens", "columns")
    _as_tokens(target_tokens, tq, "target_tokens", "rows")
    fig_dpi = _figure_dpi(dpi, axes is not None)
    per_panel_bars = colorbar and normalize == "head"

    _import_pyplot()  # the install hint, before any work
    if axes is None:
        width = float(panel_size) * (1.2 if per_panel_bars else 1.0)
        height = float(panel_size) * min(max(tq / tk, 0.5), 2.0) if tq and tk else float(panel_size)
        fig, axes = _subplots(
            n_layers,
            n_heads,
            squeeze=False,
            figsize=(width * n_heads + (1.0 if colorbar else 0.2), height * n_layers + (0.5 if title else 0.2)),
            dpi=fig_dpi,
        )
    else:
        axes = np.asarray(axes, dtype=object)
        if axes.shape != (n_layers, n_heads):
            if axes.size == n_layers * n_heads and axes.ndim <= 1:
                axes = axes.reshape(n_layers, n_heads)
            else:
                raise ValueError(f"axes has shape {axes.shape}, expected (layers, heads) = {(n_layers, n_heads)}")
        fig = axes[0, 0].figure

    for i, l in enumerate(layer_ids):
        for j, h in enumerate(head_ids):
            ax = axes[i, j]
            alignment(
                stack[i, j],
                source_tokens,
                target_tokens,
                ax=ax,
                title=f"{row_label} {l}, head {h}" if has_heads else f"{row_label} {l}",
                cmap=cmap,
                colorbar=False,
                annotate=annotate,
                vmax=tops[i, j],
            )
            if i != n_layers - 1:
                ax.set_xlabel("")
            if j != 0:
                ax.set_ylabel("")
            if per_panel_bars:
                _colour_bar(fig, [ax], cmap, tops[i, j], fraction=0.08, pad=0.02).set_ticks(
                    [0.0, tops[i, j]], labels=["0", f"{tops[i, j]:.2g}"]
                )
    if colorbar and not per_panel_bars:
        cbar = _colour_bar(
            fig, axes.ravel().tolist(), cmap, tops[0, 0], shrink=min(1.0, 0.5 + 0.25 * n_layers), pad=0.02
        )
        cbar.set_label("attention weight")
    if title is not None:
        fig.suptitle(title)
    return axes


def _colour_bar(fig, panels, cmap, top, **kwargs):
    """A colour bar for panels whose first has the image of the scale 0..top (or none: empty)."""
    mappable = panels[0].images[0] if panels[0].images else _empty_mappable(cmap, top)
    return fig.colorbar(mappable, ax=panels, **kwargs)
