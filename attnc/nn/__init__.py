"""attnc.nn: PyTorch-compatible modules whose parameters are NumPy arrays
named as in torch's state_dict(), with C forward and backward."""

from .decoding import decode
from .gated import gated_activation
from .linear import Linear, linear
from .module import Module
from .multihead import MultiheadAttention
from .normalization import LayerNorm, layer_norm
from .rnn import GRU, LSTM, GRUCell, LSTMCell
from .snail import AttentionBlock, DenseBlock, TCBlock
from .sparse import Embedding, cross_entropy, embedding, log_softmax, sinusoidal_encoding
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "AttentionBlock",
    "DenseBlock",
    "TCBlock",
    "gated_activation",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
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
    "log_softmax",
    "linear",
    "sinusoidal_encoding",
]
