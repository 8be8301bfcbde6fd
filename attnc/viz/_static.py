"""The views' matplotlib form (View.plot, View.savefig): each kind drawn as
its page draws it, from the spec and float32 weights the page gets, with
attnc.plot's heatmaps, heads grid and overlays where they draw the thing."""

from __future__ import annotations

import colorsys
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import plot
from ..plot._common import _figure_dpi, _subplots
from ..plot.pointer import _plane_axes

# The page's head colours (static/viz.js's PALETTE and headColour).
PALETTE = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
]  # fmt: skip
# Token labels are drawn up to this many a side (the matrix view's ticks, one a token, stop being readable).
MAX_LABELS = 64
# The matrix view's largest side drawn cell by cell: longer inputs are pooled (max or mean, as the page
# pools when zoomed out) into blocks, so a 4,096-token heatmap stays a few MiB.
MAX_CELLS = 1024
# The notebook's PNG is drawn only for views quick to draw (see quick): 8 panels
# (a 2 x 4 grid; constrained layout of many colour bars is slow) and 20,000 lines take about a second.
QUICK_PANELS, QUICK_LINES, QUICK_FLOATS = 8, 20_000, 2**22
# What each kind selects: the others raise.
SELECTORS = {
    "head": ("attention", "layer", "head"),
    "model": ("attention", "layer", "head"),
    "matrix": ("attention", "layer", "head"),
    "alignment": ("step",),
    "ntm": ("step",),
    "pointer": ("step",),
    "image": ("step",),
}


def head_colour(h: int, n: int) -> tuple[float, float, float]:
    """Head h of n shown: the page's colour (its palette, or hues around the circle past 12 heads)."""
    from matplotlib.colors import to_rgb

    return to_rgb(PALETTE[h]) if n <= len(PALETTE) else colorsys.hls_to_rgb(h / n, 0.45, 0.65)


def draw(view: Any, ax: Any, dpi: float | None, selected: dict[str, Any]) -> Any:
    """View.plot's work: the selectors checked against the view's kind, then its drawing."""
    kind = view.spec["kind"]
    for name in selected:
        if name not in ("attention", "layer", "head", "step"):
            raise TypeError(f"{name} is not a selector: the views take attention, layer, head and step")
    for name, value in selected.items():
        if value is not None and name not in SELECTORS[kind]:
            raise ValueError(f"{name} does not apply to a {kind} view: it takes {', '.join(SELECTORS[kind])}")
    fig_dpi = _figure_dpi(dpi, ax is not None)
    return DRAW[kind](view, ax, fig_dpi, **{name: selected.get(name) for name in SELECTORS[kind]})


def quick(view: Any) -> bool:
    """Whether the view's matplotlib form is quick to draw (a second or so)
    and small, for the notebook's static fallback: at most QUICK_PANELS
    heads in a grid and QUICK_LINES lines, and at most QUICK_FLOATS weights."""
    if view.data.size > QUICK_FLOATS:
        return False
    if view.spec["kind"] not in ("head", "model", "matrix"):
        return True
    a = view.spec["attentions"][0]
    size = len(a["rows"]) * len(a["cols"])
    if view.spec["kind"] == "head":
        return a["heads"] * size <= QUICK_LINES
    return a["layers"] * a["heads"] <= QUICK_PANELS and a["layers"] * a["heads"] * size <= QUICK_LINES


def figure_of(drawn: Any) -> Any:
    """The figure of what View.plot returns (one Axes or an array of them)."""
    if isinstance(drawn, np.ndarray):
        if not drawn.size:
            raise ValueError("nothing to draw: the view holds no heads")
        return drawn.flat[0].figure
    return drawn.figure


# --------------------------------------------------------------------------- selectors


def _attention(view: Any, attention: int | str | None) -> dict[str, Any]:
    """The spec of the attention selected by name or index (the first when None)."""
    found = view.spec["attentions"]
    names = [a["name"] for a in found]
    if attention is None:
        return found[0]
    if isinstance(attention, str):
        if attention not in names:
            raise ValueError(f"attention={attention!r} is not in this view: it holds {names}")
        return found[names.index(attention)]
    if isinstance(attention, bool) or not isinstance(attention, numbers.Integral):
        raise TypeError(f"attention must be a name or an index, got {attention!r}")
    if not -len(found) <= attention < len(found):
        raise ValueError(f"attention={attention} is out of range: this view holds {len(found)} ({names})")
    return found[attention]


def _chosen(value: Any, ids: list[int], name: str, *, one: bool = False) -> list[int]:
    """The positions, among the layer or head indices ``ids`` a view holds,
    of those ``value`` names (an int or a list of them; all when None, or
    the first when ``one``)."""
    if value is None:
        return [0] if one else list(range(len(ids)))
    single = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if one and not single:
        raise TypeError(f"{name} must be one int (the head view draws one {name}), got {value!r}")
    items = [value] if single else value
    if isinstance(value, (str, bytes, bool)) or not isinstance(items, (list, tuple, range)):
        raise TypeError(f"{name} must be an int or a list of ints, got {value!r}")
    out = []
    for i in items:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"{name} must be an int or a list of ints, got {value!r}")
        if i not in ids:
            raise ValueError(f"{name}={i} is not in this view: it holds {name}s {ids}")
        out.append(ids.index(int(i)))
    if not out:
        raise ValueError(f"{name} is an empty list: select at least one of {ids}")
    return out


def _step(view: Any, step: Any, default: int) -> int:
    steps = view.spec["steps"]
    if step is None:
        if not steps:
            raise ValueError("the view has no steps to draw")
        return default % steps
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"step must be an int, got {step!r}")
    if not -steps <= step < steps:
        raise ValueError(f"step={step} is out of range: the view has {steps} steps")
    return int(step) % steps


def _weights(view: Any, a: dict[str, Any]) -> np.ndarray:
    """One attention's shipped (layers, H, L, S) float32 weights."""
    shape = (a["layers"], a["heads"], len(a["rows"]), len(a["cols"]))
    return view.data[a["offset"] : a["offset"] + int(np.prod(shape))].reshape(shape)


def _array(view: Any, name: str) -> np.ndarray:
    """A step view's array by name, as shipped."""
    a = view.spec["arrays"][name]
    return view.data[a["offset"] : a["offset"] + int(np.prod(a["shape"]))].reshape(a["shape"])


def _panels(ax: Any, shape: tuple[int, int], figsize: tuple[float, float], dpi: float, what: str) -> np.ndarray:
    """A (rows, cols) array of Axes: the given ones (one a panel) or a new figure's (none for no panels)."""
    if ax is None and not shape[0] * shape[1]:
        return np.empty(shape, dtype=object)
    if ax is None:
        return _subplots(*shape, figsize=figsize, squeeze=False, dpi=dpi)[1]
    given = np.ravel(np.asarray(ax, dtype=object))
    if given.size != shape[0] * shape[1]:
        raise ValueError(f"ax holds {given.size} Axes, the view draws {shape[0] * shape[1]} ({what}): one each")
    return given.reshape(shape)


# --------------------------------------------------------------------------- transformer views


def _lines(ax: Any, w: np.ndarray, heads: list[int], a: dict[str, Any], min_weight: float) -> None:
    """The head view's lines over x from 0 (queries, row i at height i + 0.5)
    to 1 (keys): w (len(heads), L, S) the weights of the heads at positions
    ``heads`` of attention ``a``'s, one LineCollection each (gid and label
    "head h"), its colour's opacity the weight, lines under min_weight left
    out, as the page draws them."""
    from matplotlib.collections import LineCollection

    for m, k in enumerate(heads):
        i, j = np.nonzero(w[m] >= min_weight)
        segments = np.stack([np.stack([np.zeros(i.size), i + 0.5], 1), np.stack([np.ones(j.size), j + 0.5], 1)], 1)
        colours = np.tile([*head_colour(k, a["heads"]), 1.0], (i.size, 1))
        colours[:, 3] = np.minimum(1.0, w[m][i, j])
        name = f"head {a['head_ids'][k]}"
        ax.add_collection(LineCollection(list(segments), colors=colours, linewidths=1.2, gid=name, label=name))
    L, S = w.shape[1:]
    ax.set_xlim(0, 1)
    ax.set_ylim(max(L, S, 1), 0)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)


def _head(view: Any, ax: Any, dpi: float, attention: Any, layer: Any, head: Any) -> Any:
    a = _attention(view, attention)
    l = _chosen(layer, a["layer_ids"], "layer", one=True)[0]
    heads = _chosen(head, a["head_ids"], "head")
    w = _weights(view, a)[l]
    n = max(len(a["rows"]), len(a["cols"]), 1)
    if ax is None:
        _, ax = _subplots(figsize=(4.5, min(max(0.22 * n + 1.0, 2.5), 30.0)), dpi=dpi)
    _lines(ax, w[heads], heads, a, view.spec["options"]["min_weight"])
    size = min(9.0, max(2.0, 0.8 * 72 * ax.get_position().height * ax.figure.get_figheight() / n))
    for x, ha, names in ((-0.03, "right", a["rows"]), (1.03, "left", a["cols"])):
        for i, t in enumerate(names):
            ax.text(x, i + 0.5, t if len(t) <= 16 else t[:15] + "…", ha=ha, va="center", fontsize=size)
    name = f"{a['name']}, " if len(view.spec["attentions"]) > 1 else ""
    ax.set_title(f"{name}layer {a['layer_ids'][l]}")
    if heads:  # the heads' colours at full strength (a collection's first line may be faint)
        from matplotlib.lines import Line2D

        keys = [Line2D([], [], color=head_colour(k, a["heads"]), lw=2, label=f"head {a['head_ids'][k]}") for k in heads]
        ax.legend(
            handles=keys, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=min(len(heads), 6), fontsize="small"
        )
    return ax


def _model(view: Any, ax: Any, dpi: float, attention: Any, layer: Any, head: Any) -> np.ndarray:
    a = _attention(view, attention)
    layers = _chosen(layer, a["layer_ids"], "layer")
    heads = _chosen(head, a["head_ids"], "head")
    w = _weights(view, a)
    grid = _panels(
        ax, (len(layers), len(heads)), (1.3 * len(heads) + 0.6, 1.3 * len(layers) + 0.4), dpi, "layer x head"
    )
    for r, l in enumerate(layers):
        for c, k in enumerate(heads):
            panel = grid[r, c]
            _lines(panel, w[l][[k]], [k], a, view.spec["options"]["min_weight"])
            panel.set_xlim(-0.3, 1.3)  # the thumbnail's lines run over its middle (viz.js's thumbnail)
            if r == 0:
                panel.set_title(f"head {a['head_ids'][k]}", fontsize="small")
            if c == 0:
                panel.set_ylabel(f"layer {a['layer_ids'][l]}", fontsize="small")
    return grid


def _pooled(m: np.ndarray, f: int, mean: bool) -> np.ndarray:
    """m pooled over f x f blocks (ragged at the edges), by max or mean."""
    L, S = m.shape
    padded = np.full((-(-L // f) * f, -(-S // f) * f), np.nan, np.float32)
    padded[:L, :S] = m
    blocks = padded.reshape(padded.shape[0] // f, f, padded.shape[1] // f, f)
    return np.nanmean(blocks, axis=(1, 3)) if mean else np.nanmax(blocks, axis=(1, 3))


def _matrix(view: Any, ax: Any, dpi: float, attention: Any, layer: Any, head: Any) -> np.ndarray:
    from matplotlib.ticker import MaxNLocator

    a = _attention(view, attention)
    layers = _chosen(layer, a["layer_ids"], "layer")
    heads = _chosen(head, a["head_ids"], "head")
    w = _weights(view, a)
    L, S = w.shape[2:]
    if not heads:  # a view of no heads: no panels
        return np.empty((len(layers), 0), dtype=object)
    f = max(1, -(-max(L, S) // MAX_CELLS))
    shown = [np.stack([_pooled(w[l, k], f, view.spec["options"]["pool"] == "mean") for k in heads]) for l in layers]
    labelled = max(L, S) <= MAX_LABELS
    shared = view.spec["options"]["scale"] == "shared"
    top = max((v for row in a["vmax"] for v in row), default=0.0)
    axes = plot.heads(
        shown,
        a["cols"] if labelled else None,
        a["rows"] if labelled else None,
        None if ax is None else _panels(ax, (len(layers), len(heads)), (0, 0), dpi, "layer x head"),
        vmax=(top if top > 0 else 1.0) if shared else None,
        normalize=None if shared else "head",
        dpi=dpi if ax is None else None,
    )
    for r, l in enumerate(layers):
        for c, k in enumerate(heads):
            axes[r, c].set_title(f"layer {a['layer_ids'][l]}, head {a['head_ids'][k]}")
            if f > 1:  # the pooled image over the true positions
                axes[r, c].images[0].set_extent((-0.5, S - 0.5, L - 0.5, -0.5))
                axes[r, c].xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
                axes[r, c].yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    if f > 1:
        axes[0, 0].figure.suptitle(f"{view.spec['options']['pool']} over {f} x {f} cells")
    return axes


# --------------------------------------------------------------------------- step views


def _alignment(view: Any, ax: Any, dpi: float, step: Any) -> Any:
    from matplotlib.patches import Rectangle

    t = _step(view, step, -1)
    w = _array(view, "weights").astype(np.float64)
    upto = np.where(np.arange(len(w))[:, None] <= t, w, np.nan)  # the rows to come left blank
    top = float(w.max()) if w.size and w.max() > 0 else 1.0
    labelled = max(w.shape) <= MAX_LABELS
    ax = plot.alignment(
        upto,
        view.spec["cols"] if labelled else None,
        view.spec["rows"] if labelled else None,
        ax=ax if ax is not None else _subplots(figsize=(6, 5), dpi=dpi)[1],
        vmax=top,
    )
    if "windows" in view.spec["arrays"]:
        for r, (start, end) in enumerate(_array(view, "windows")[: t + 1]):
            box = Rectangle((start - 0.5, r - 0.5), end - start, 1, fill=False, ec="white", lw=1.2, gid="window")
            ax.add_patch(box)
    ax.add_patch(Rectangle((-0.5, t - 0.5), w.shape[1], 1, fill=False, ec="#e00", lw=2, gid="step"))
    ax.set_title(f"step {t}: {view.spec['rows'][t]}")
    return ax


def _ntm(view: Any, ax: Any, dpi: float, step: Any) -> np.ndarray:
    t = _step(view, step, -1)
    memory, read, write = (_array(view, k) for k in ("memory", "read", "write"))
    bars = [(f"write head {k}", write[t, k]) for k in range(write.shape[1])]
    bars += [(f"read head {k}", read[t, k]) for k in range(read.shape[1])]
    bars += [(f"stage: {s}", _array(view, f"stage:{s}")[t]) for s in view.spec["stages"]]
    panels = _panels(ax, (1 + len(bars), 1), (6.0, 2.6 + 1.3 * len(bars)), dpi, "the memory and each weighting")[:, 0]
    lo = min(float(memory.min()), 0.0)
    hi = max(float(memory.max()), lo + 1e-12)
    image = panels[0].imshow(memory[t], cmap="viridis", vmin=lo, vmax=hi, aspect="auto", interpolation="nearest")
    panels[0].figure.colorbar(image, ax=panels[0], fraction=0.05, pad=0.02)
    panels[0].set(title=f"step {t}: memory ({memory.shape[1]} slots x {memory.shape[2]})", ylabel="slot", xlabel="cell")
    for panel, (title, weights) in zip(panels[1:], bars):
        panel.bar(np.arange(len(weights)), weights, color="#1f77b4")
        panel.set(title=title, ylim=(0, 1), xlim=(-0.5, len(weights) - 0.5), ylabel="weight")
    panels[-1].set_xlabel("slot")
    return panels


def _pointer(view: Any, ax: Any, dpi: float, step: Any) -> Any:
    t = _step(view, step, -1)
    points, p, chosen = _array(view, "points"), _array(view, "pointers"), _array(view, "indices").astype(int)
    n = len(points)
    ax = _plane_axes(ax if ax is not None else _subplots(figsize=(4.5, 4.5), dpi=dpi)[1], points, None, None)
    path = [i for i in chosen[: t + 1] if 0 <= i < n]
    ax.plot(points[path, 0], points[path, 1], color="#1d3557", lw=1.6, gid="path", zorder=2)
    # area as the page's (radius 3 + 14 sqrt(p) pixels): p[t, i] readable from the sizes
    sizes = (0.75 * (3 + 14 * np.sqrt(p[t, :n]))) ** 2
    ax.scatter(points[:, 0], points[:, 1], s=sizes, c="#457b9d", alpha=0.8, linewidths=0, zorder=3)
    if 0 <= chosen[t] < n:  # the step's choice ringed
        x, y = points[chosen[t]]
        ax.plot(
            [x], [y], "o", ms=np.sqrt(sizes[chosen[t]]) + 4, mfc="none", mec="#e63946", mew=2, gid="choice", zorder=4
        )
    what = "ended" if chosen[t] < 0 else "end" if chosen[t] == n else f"point {chosen[t]}"
    end = f", end token {p[t, n]:.3g}" if view.spec["end"] else ""
    ax.set_title(f"step {t}: {what}{end}")
    return ax


def _image(view: Any, ax: Any, dpi: float, step: Any) -> Any:
    t = _step(view, step, 0)
    image, maps = _array(view, "image"), _array(view, "maps")
    T, h, w = maps.shape
    ax = [ax] if ax is not None else None
    if view.spec["positions"]:  # SAGAN's map: the position's row, scaled by its maximum (as the page)
        panels = plot.image_attention(
            image, maps.reshape(T, T), [t], grid=(h, w), ax=ax, dpi=dpi if ax is None else None
        )
    else:  # a captioner's word: its weights on attnc.plot's fixed 0-1 scale
        panels = plot.caption_attention(
            image, [view.spec["rows"][t]], maps[t][None], grid=(h, w), ax=ax, dpi=dpi if ax is None else None
        )
    return panels[0]


DRAW: dict[str, Callable[..., Any]] = dict(
    head=_head, model=_model, matrix=_matrix, alignment=_alignment, ntm=_ntm, pointer=_pointer, image=_image
)
