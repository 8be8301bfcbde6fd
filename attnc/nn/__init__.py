"""attnc.nn: PyTorch-compatible modules whose parameters are NumPy arrays
named as in torch's state_dict(), with C forward and backward."""

from .linear import Linear, linear
from .module import Module
from .multihead import MultiheadAttention
from .normalization import LayerNorm, layer_norm
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from .decoding import decode
from .sparse import Embedding, cross_entropy, embedding, sinusoidal_encoding

__all__ = [
    "Embedding",
    "LayerNorm",
    "Linear",
    "Module",
    "MultiheadAttention",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "cross_entropy",
    "decode",
    "embedding",
    "layer_norm",
    "linear",
    "sinusoidal_encoding",
]
