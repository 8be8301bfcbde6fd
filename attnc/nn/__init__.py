"""attnc.nn: PyTorch-compatible modules whose parameters are NumPy arrays
named as in torch's state_dict(), with C forward and backward."""

from .activation import ReLU, relu, relu_dropout
from .decoding import decode
from .linear import Linear, linear
from .lstmn import LSTMN
from .module import Module
from .multihead import MultiheadAttention
from .normalization import LayerNorm, layer_norm
from .pooling import AttentionPooling, attention_pool
from .rnn import GRU, LSTM, GRUCell, LSTMCell
from .sparse import Embedding, cross_entropy, embedding, log_softmax, sinusoidal_encoding
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "AttentionPooling",
    "ReLU",
    "attention_pool",
    "relu",
    "relu_dropout",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "LSTMN",
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
