"""Plotting helpers for attention weights (optional; needs matplotlib).

Install the extra with ``pip install "attnc[plot]"``. matplotlib is imported
only when a plotting function is called, so ``import attnc`` never needs it;
without it every plotting function raises ImportError saying what to install.

Each subject has its module; their functions are all here:
- alignment: ``alignment`` (one alignment matrix), ``heads`` (layer x head grid);
- images: ``caption_attention``, ``image_attention``;
- ntm: ``ntm_addressing``, ``ntm_trace``;
- pointer: ``tours``, ``hull``.
Every function draws on a given or new matplotlib Axes and returns it (its
figure is ``ax.figure``). New figures are made at 200 dpi, or the ``dpi``
every function takes; ``fig.savefig`` writes PNG, SVG or PDF. Every heatmap
has a colour bar.
"""

from .alignment import alignment, heads
from .images import caption_attention, image_attention
from .ntm import ntm_addressing, ntm_trace
from .pointer import hull, tours

__all__ = ["alignment", "caption_attention", "heads", "hull", "image_attention", "ntm_addressing", "ntm_trace", "tours"]


def __dir__() -> list[str]:
    """The plotting functions only (not the modules they live in)."""
    return list(__all__)
