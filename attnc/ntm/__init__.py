"""attnc.ntm: the Neural Turing Machine's addressing and memory operations,
forward and backward in C, batched over B and H heads, float32 and float64,
differentiable with ``attnc.vjp``."""

from .addressing import address, content_weights, interpolate, sharpen, shift
from .memory import read, write

__all__ = ["address", "content_weights", "interpolate", "read", "sharpen", "shift", "write"]
