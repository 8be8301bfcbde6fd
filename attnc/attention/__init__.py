"""The classic attention family: scores, masked softmax, soft, hard and local
attention, and kernel regression as attention."""

from .hard import hard_attention
from .kernel_regression import kernel_regression
from .kv_cache import KVCache
from .linear import LinearAttentionState, linear_attention, performer_projection
from .local import local_attention
from .multihead import multi_head_attention
from .score import score
from .sdpa import alibi_slopes, scaled_dot_product_attention
from .soft import attention
from .softmax import softmax

__all__ = [
    "KVCache",
    "LinearAttentionState",
    "alibi_slopes",
    "attention",
    "hard_attention",
    "kernel_regression",
    "linear_attention",
    "local_attention",
    "multi_head_attention",
    "performer_projection",
    "scaled_dot_product_attention",
    "score",
    "softmax",
]
