"""attnc.nn: PyTorch-compatible modules whose parameters are NumPy arrays
named as in torch's state_dict(), with C forward and backward."""

from .conv import CausalConv1d, Conv1d, Conv2d, ReLU, conv1d, conv2d, relu
from .decoding import decode
from .gated import gated_activation
from .linear import Linear, linear
from .module import Module
from .multihead import MultiheadAttention
from .normalization import LayerNorm, layer_norm
from .rnn import GRU, LSTM, GRUCell, LSTMCell
from .self_attention2d import SelfAttention2d
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
    "CausalConv1d",
    "Conv1d",
    "Conv2d",
    "ReLU",
    "conv1d",
    "conv2d",
    "relu",
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
    "SelfAttention2d",
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
