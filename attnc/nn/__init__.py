"""attnc.nn: PyTorch-compatible modules whose parameters are NumPy arrays
named as in torch's state_dict(), with C forward and backward."""

from .linear import Linear, linear
from .module import Module
from .multihead import MultiheadAttention

__all__ = ["Linear", "Module", "MultiheadAttention", "linear"]
