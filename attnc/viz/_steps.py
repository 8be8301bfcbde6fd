"""The step views, beyond transformers: a model's run step by step (a step
slider and the panels each step shows, drawn by one core in static/viz.js)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._inputs import as_array, batch_index, checked, is_model, labels
from ._views import View, pack


def _one(arr: np.ndarray, batch: int, ndim: int) -> np.ndarray:
    """Batch item ``batch`` of arr when it has a leading batch axis (ndim + 1 dims)."""
    return arr[batch_index(batch, len(arr))] if arr.ndim == ndim + 1 else arr


def _decoded(model: Any, src: Any, batch: int, decode: Callable[[int], object] | None) -> tuple:
    """A recurrent seq2seq model's greedy decoding of src (B, S) int: (its
    alignments (B, L, S), the source's and the output's labels of batch item
    ``batch``, local attention's windows: the span of each step's nonzero weights)."""
    ids = np.asarray(src)
    tokens, align = model.generate(ids)
    b = batch_index(batch, len(ids))
    name = (lambda i: decode(int(i))) if decode else (lambda i: int(i))
    windows = None
    if str(getattr(model, "attention_kind", "")).startswith("local"):
        spans = [np.flatnonzero(row) for row in align[b]]
        windows = np.array([[s[0], s[-1] + 1] if len(s) else [0, 0] for s in spans], np.int64).reshape(-1, 2)
    return align, [name(i) for i in ids[b]], [name(i) for i in tokens[b]], windows


def alignment_view(
    weights: Any,
    source_tokens: Any = None,
    target_tokens: Sequence[object] | None = None,
    *,
    batch: int = 0,
    windows: Any = None,
    decode: Callable[[int], object] | None = None,
) -> View:
    """A seq2seq alignment as the decoder steps through its output.

    A slider walks the output: at step t the output so far, the source
    tokens with bars of step t's weights over them (and, for local
    attention, its window marked), and the whole alignment with row t
    outlined.

    Parameters
    ----------
    weights : (T, S) or (B, T, S) float, >= 0: step t's weights over the S
        source positions (an RNN seq2seq model's attention, Bahdanau or
        Luong); or an attnc.models.Seq2Seq, which decodes ``source_tokens``
        (then its input ids, (B, S) int) greedily with ``generate``, its ids
        (through ``decode``) labelling source and output, and local
        attention's windows found as the span of each step's weights
    source_tokens, target_tokens : S and T labels (default positions)
    batch : the batch item shown, when weights has a batch axis
    windows : optional (T, 2) or (B, T, 2) int, step t's local window
        [start, end) over the source (Luong's local attention)
    decode : with a model, maps an id (int) to its label

    Example
    -------
    >>> w = np.random.dirichlet(np.ones(5), 3)  # (T, S)
    >>> view = attnc.viz.alignment_view(w, list("abcde"), ["x", "y", "z"], windows=[[0, 3], [1, 4], [2, 5]])
    >>> view.spec["steps"], view.spec["arrays"]["windows"]["shape"]
    (3, [3, 2])
    >>> m = attnc.models.Seq2Seq(20, 12, embed_size=8, hidden_size=16, attention="local-p", window=1, seed=0)
    >>> view = attnc.viz.alignment_view(m, np.array([[3, 4, 5, 6, 7]]))
    >>> view.spec["cols"], "windows" in view.spec["arrays"]
    (['3', '4', '5', '6', '7'], True)
    """
    if is_model(weights):
        if target_tokens is not None:
            raise ValueError(
                "target_tokens labels weights given as arrays; a model's output labels are its ids (decode=)"
            )
        weights, source_tokens, target_tokens, found = _decoded(weights, source_tokens, batch, decode)
        windows = found if windows is None else windows
    elif decode is not None:
        raise ValueError("decode names a model's ids; with weights as arrays give the tokens as strings")
    w = _one(checked(weights, "weights", "(T, S) or (B, T, S)", (2, 3)), batch, 2)
    T, S = w.shape
    arrays = dict(weights=w)
    if windows is not None:
        win = _one(as_array(windows, "windows"), batch, 2)
        if win.shape != (T, 2) or win.dtype.kind not in "iu":
            raise ValueError(
                f"windows must be int (T, 2) = ({T}, 2), one [start, end) a step, got {win.dtype} {win.shape}"
            )
        if ((win[:, 0] < 0) | (win[:, 0] > win[:, 1]) | (win[:, 1] > S)).any():
            raise ValueError(f"windows must hold 0 <= start <= end <= S = {S}")
        arrays["windows"] = win
    rows = labels(target_tokens, T, "target_tokens", f"weights has T = {T} output steps (its axis -2)")
    cols = labels(source_tokens, S, "source_tokens", f"weights has S = {S} source positions (its last axis)")
    return pack("alignment", arrays, steps=T, rows=rows, cols=cols)


def ntm_view(trace: Any, *, batch: int = 0, stages: dict[str, Any] | None = None) -> View:
    """A Neural Turing Machine's run with a step slider: at step t the memory
    (N slots x M), each write head's and each read head's weighting over the
    slots, and, when given, one head's addressing stages (content,
    interpolated, shifted, sharpened).

    Parameters
    ----------
    trace : attnc.models.NTMTrace (``NTM.forward(..., return_trace=True)``'s
        second output) or its fields (read_weights (B, T, R, N), write_weights
        (B, T, W, N), memory (B, T, N, M)), float, batch axis optional
    batch : the batch item shown
    stages : optional {stage name: (T, N) or (B, T, N)} weightings of one head
        (``attnc.ntm.address(..., return_intermediates=True)``'s stages)

    Example
    -------
    >>> m = attnc.models.NTM(3, 2, controller_size=8, memory_slots=6, memory_width=4, seed=0)
    >>> logits, trace = m(np.random.rand(2, 5, 3).astype(np.float32), return_trace=True)
    >>> view = attnc.viz.ntm_view(trace, batch=1)
    >>> view.spec["steps"], view.spec["arrays"]["memory"]["shape"]
    (5, [5, 6, 4])
    """
    if len(trace) != 3:
        raise ValueError(f"trace must be an NTMTrace or (read_weights, write_weights, memory), got {len(trace)} items")
    read = _one(checked(trace[0], "trace.read_weights", "(B, T, R, N) or (T, R, N)", (3, 4)), batch, 3)
    write = _one(checked(trace[1], "trace.write_weights", "(B, T, W, N) or (T, W, N)", (3, 4)), batch, 3)
    memory = _one(checked(trace[2], "trace.memory", "(B, T, N, M) or (T, N, M)", (3, 4), weights=False), batch, 3)
    T, N = memory.shape[:2]
    for name, a in (("trace.read_weights", read), ("trace.write_weights", write)):
        if (a.shape[0], a.shape[2]) != (T, N):
            raise ValueError(f"{name} has shape {a.shape}: memory's (T, N) = ({T}, {N}) needs (T, heads, N)")
    arrays = dict(read=read, write=write, memory=memory)
    for name, a in (stages or {}).items():
        stage = _one(checked(a, f"stages[{name!r}]", "(T, N) or (B, T, N)", (2, 3)), batch, 2)
        if stage.shape != (T, N):
            raise ValueError(f"stages[{name!r}] has shape {stage.shape}, memory's (T, N) is ({T}, {N})")
        arrays[f"stage:{name}"] = stage
    return pack("ntm", arrays, steps=T, stages=list(stages or {}))


def pointer_view(points: Any, pointers: Any, indices: Any = None, *, batch: int = 0) -> View:
    """A pointer network's decoding, step by step over its 2-D points: at step
    t every point drawn by its probability, the choice made and the path
    chosen so far, and the end token's probability.

    Parameters
    ----------
    points : (n, 2) or (B, n, 2) float, the inputs
    pointers : (T, n) or (T, n + 1) float >= 0 (the last column the end
        token), or batched, each step's distribution; or a
        attnc.models.PointerOutput (``PointerNet.generate``'s), which also
        gives the indices
    indices : (T,) or (B, T) int, the choice at each step (-1 after the end);
        default each step's most probable point
    batch : the batch item shown

    Example
    -------
    >>> m = attnc.models.PointerNet(2, 8, seed=0)
    >>> pts = np.random.rand(1, 5, 2).astype(np.float32)
    >>> view = attnc.viz.pointer_view(pts, m.generate(pts, constraint="tour"))
    >>> view.spec["steps"], view.spec["end"], view.spec["arrays"]["points"]["shape"]
    (6, True, [5, 2])
    """
    if hasattr(pointers, "pointers") and hasattr(pointers, "indices"):
        pointers, indices = pointers.pointers, pointers.indices if indices is None else indices
    xy = _one(checked(points, "points", "(n, 2) or (B, n, 2)", (2, 3), weights=False), batch, 2)
    n = xy.shape[0]
    if xy.shape[1] != 2:
        raise ValueError(f"points must be (n, 2) or (B, n, 2): planar points, got shape {xy.shape}")
    p = _one(checked(pointers, "pointers", "(T, n) or (T, n + 1), or batched", (2, 3)), batch, 2)
    if p.shape[1] not in (n, n + 1):
        raise ValueError(f"pointers has {p.shape[1]} columns: n = {n} points (and one end token) need {n} or {n + 1}")
    if indices is None:
        chosen = p.argmax(1)
    else:
        chosen = _one(as_array(indices, "indices"), batch, 1)
        if chosen.shape != (p.shape[0],) or chosen.dtype.kind not in "iu" or ((chosen < -1) | (chosen > n)).any():
            raise ValueError(
                f"indices must be int (T,) = ({p.shape[0]},) in [-1, {n}], got {chosen.dtype} {chosen.shape}"
            )
    return pack("pointer", dict(points=xy, pointers=p, indices=chosen), steps=p.shape[0], end=p.shape[1] == n + 1)


def image_view(image: Any, maps: Any, tokens: Sequence[object] | None = None, *, grid: Any = None) -> View:
    """Attention over an image: pick a word (a caption's step, with a slider)
    or click a position (self-attention) to see its map over the picture.
    The map is drawn as light: the picture stays as it is where attention is
    high and fades to dark where it is low, so no colour of the map can be
    confused with the picture's.

    Parameters
    ----------
    image : (H, W), (H, W, 3) or (3, H, W); float in [0, 1] or integers 0-255
    maps : (T, h, w) float >= 0, step t's map over an h x w feature grid (a
        captioner's attention per word); or (N, N) self-attention over N = h w
        positions in row-major order (SAGAN's map of one image): click a
        position to see where it attends
    tokens : T labels of the steps (the caption's words), for (T, h, w) maps
    grid : (h, w) of (N, N) maps; default the image's (H, W) when N = H W

    Example
    -------
    >>> img = np.random.rand(32, 32, 3)
    >>> caption = np.random.dirichlet(np.ones(16), 3).reshape(3, 4, 4)  # (T, h, w)
    >>> attnc.viz.image_view(img, caption, ["a", "red", "ball"]).spec["arrays"]["maps"]["shape"]
    [3, 4, 4]
    >>> sagan = np.random.dirichlet(np.ones(64), 64)  # (N, N), N = 8 x 8
    >>> attnc.viz.image_view(img, sagan, grid=(8, 8)).spec["positions"]
    True
    """
    img = as_array(image, "image")
    scale = 255.0 if img.dtype.kind in "iu" else 1.0
    img = checked(img, "image", "(H, W), (H, W, 3) or (3, H, W)", (2, 3), weights=False) / scale
    if img.ndim == 3 and img.shape[0] == 3 and img.shape[2] != 3:
        img = img.transpose(1, 2, 0)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    if img.shape[2] != 3:
        raise ValueError(f"image must be (H, W), (H, W, 3) or (3, H, W), got shape {as_array(image, 'image').shape}")
    m = checked(maps, "maps", "(T, h, w) or (N, N)", (2, 3))
    positions = m.ndim == 2
    if positions:
        h, w = grid if grid is not None else img.shape[:2]
        if m.shape != (h * w, h * w):
            raise ValueError(f"maps of shape {m.shape} must be (N, N) with N = h w = {h * w} (grid={grid!r})")
        m = m.reshape(h * w, h, w)
    names = labels(tokens, m.shape[0], "tokens", f"maps has T = {m.shape[0]} steps (its first axis)")
    return pack("image", dict(image=np.clip(img, 0, 1), maps=m), steps=m.shape[0], rows=names, positions=positions)
