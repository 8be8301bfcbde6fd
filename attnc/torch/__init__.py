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
from ._ops import (
    attention,
    gru,
    hard_attention,
    kernel_regression,
    kv_cache_attend,
    layer_norm,
    local_attention,
    lstm,
    ntm_address,
    ntm_content_weights,
    ntm_interpolate,
    ntm_read,
    ntm_sharpen,
    ntm_shift,
    ntm_write,
    score,
    softmax,
)
from ._tensors import from_tensor, to_tensor
from ._wrap import Module, function

__all__ = [
    # the fused family as torch ops (_fused.py) and torch's modules on them (nn.py)
    "scaled_dot_product_attention",
    "multi_head_attention",
    "nn",
    # the classic family and the rest, as torch ops (_ops.py)
    "attention",
    "score",
    "softmax",
    "hard_attention",
    "local_attention",
    "kernel_regression",
    "kv_cache_attend",
    "ntm_address",
    "ntm_content_weights",
    "ntm_interpolate",
    "ntm_read",
    "ntm_sharpen",
    "ntm_shift",
    "ntm_write",
    "layer_norm",
    "lstm",
    "gru",
    # any attnc function or module inside torch autograd (_wrap.py)
    "function",
    "Module",
    # the crossing (_tensors.py)
    "from_tensor",
    "to_tensor",
]
