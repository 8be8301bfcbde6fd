"""The Neural Turing Machine: its addressing pipeline, and a trace of reads
and writes over a sequence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .._typing import ArrayLike
from ._common import Axes, Cmap, _figure_dpi, _import_pyplot, _real_array, _squeezed, _subplots

if TYPE_CHECKING:
    from ..models import NTMTrace
else:  # the models are imported only for the annotation: at run time it resolves to Any
    NTMTrace = Any


def _as_weighting(value, name, n=None):
    """A 1-D float64 copy of one head's weighting (leading size-1 dims squeezed)."""
    arr, shape = _squeezed(value, name, "(N,)", 1)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(
            f"{name} must be one head's weighting, a 1-D array of length N >= 1 (select one row and head, "
            f"e.g. {name}[0, 0] of address()'s (B, H, N) outputs), got shape {shape}"
        )
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} slots but w_content has {n}: every stage must have length N = {n}")
    return arr


def ntm_addressing(
    w_content: ArrayLike,
    w_gated: ArrayLike,
    w_shifted: ArrayLike,
    w: ArrayLike,
    *,
    w_prev: ArrayLike | None = None,
    axes: Sequence[Axes] | None = None,
    title: str | None = None,
    dpi: float | None = None,
) -> np.ndarray:
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
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``axes`` are given (set it on their figure).

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
    fig_dpi = _figure_dpi(dpi, axes is not None)

    _import_pyplot()  # the install hint, before any work
    from matplotlib.ticker import MaxNLocator

    if axes is None:
        width = min(max(0.22 * n + 1.0, 2.4), 4.5)
        fig, grid = _subplots(1, k, figsize=(width * k, 2.6 + (0.3 if title else 0.0)), squeeze=False, dpi=fig_dpi)
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
            raise ValueError(
                f"{name} must have shape (B, T, C) = ({B}, {T}, C) like the trace, or (T, C), got shape {shape}"
            )
        arr = arr[row]
    elif arr.ndim == 2:
        if arr.shape[0] != T:
            raise ValueError(
                f"{name} must have shape (T, C) with T = {T} steps like the trace, or (B, T, C), got shape {shape}"
            )
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
        raise ValueError(
            f"slots must select a non-empty range within 0..{n} (N = {n} slots), got start {start}, stop {stop}"
        )
    return start, stop


def ntm_trace(
    trace: NTMTrace | tuple[ArrayLike, ...],
    *,
    row: int = 0,
    inputs: ArrayLike | None = None,
    targets: ArrayLike | None = None,
    outputs: ArrayLike | None = None,
    axes: Sequence[Axes] | None = None,
    slots: tuple[int, int] | range | slice | None = None,
    heads: Literal["all", "first"] = "all",
    colorbar: bool = True,
    title: str | None = None,
    cmap: Cmap = "viridis",
    dpi: float | None = None,
) -> np.ndarray:
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
    dpi : float, optional
        Resolution of the new figure (default 200 dpi);
        ``ValueError`` when ``axes`` are given (set it on their figure).

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
            panels.append(
                (f"{kind} weights (head {h})", np.array(arr[row, :, h, start:stop].T, dtype=np.float64), "slot", start)
            )
    if not panels:
        raise ValueError("nothing to draw: the trace has no heads and no inputs, targets or outputs were given")
    k = len(panels)
    fig_dpi = _figure_dpi(dpi, axes is not None)

    _import_pyplot()  # the install hint, before any work
    from matplotlib.colors import Normalize
    from matplotlib.ticker import MaxNLocator

    if axes is None:
        ratios = [min(max(m.shape[0], 3), 40) for _, m, _, _ in panels]
        width = min(max(0.16 * T + 2.5, 6.0), 16.0)
        height = min(0.13 * sum(ratios) + 0.45 * k + (0.3 if title else 0.0), 16.0)
        fig, grid = _subplots(
            k,
            1,
            figsize=(width, height),
            sharex=True,
            squeeze=False,
            gridspec_kw={"height_ratios": ratios},
            dpi=fig_dpi,
        )
        out = grid[:, 0]
    else:
        out = np.ravel(np.asarray(axes, dtype=object))
        if out.size != k:
            raise ValueError(
                f"axes holds {out.size} Axes, expected {k}: one per panel (" + ", ".join(p[0] for p in panels) + ")"
            )
        fig = out[0].figure

    norm = Normalize(vmin=0.0, vmax=1.0)
    for ax, (label, mat, ylabel, first) in zip(out, panels):
        rows = mat.shape[0]
        ax.imshow(
            mat,
            cmap=cmap,
            norm=norm,
            aspect="auto",
            interpolation="nearest",
            origin="upper",
            extent=(-0.5, T - 0.5, first + rows - 0.5, first - 0.5),
        )
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
