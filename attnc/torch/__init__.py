"""attnc inside PyTorch: attnc's operations as torch ops with autograd.

``import attnc.torch`` needs PyTorch (``pip install "attnc[torch]"``);
``import attnc`` never imports torch. Tensors cross to attnc's C core without
a copy (a CPU tensor's memory is viewed as a NumPy array) and results come
back as tensors that own attnc's buffers.
"""

try:
    import torch as _torch  # noqa: F401  (the one place attnc imports torch)
except ImportError as _exc:  # pragma: no cover - CI installs torch
    raise ImportError(
        'attnc.torch needs PyTorch, which is not installed: pip install "attnc[torch]" (or pip install torch)'
    ) from _exc

from . import nn
from ._fused import multi_head_attention, scaled_dot_product_attention
from ._tensors import from_tensor, to_tensor

__all__ = ["from_tensor", "to_tensor", "scaled_dot_product_attention", "multi_head_attention", "nn"]
