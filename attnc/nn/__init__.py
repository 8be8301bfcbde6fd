"""attnc.nn: PyTorch-compatible modules whose parameters are NumPy arrays
named as in torch's state_dict(), with C forward and backward."""

from .activation import GELU, ReLU, gelu, relu, relu_dropout
from .conv import CausalConv1d, Conv1d, Conv2d, conv1d, conv2d
from .decoding import decode
from .differential import DifferentialAttention
from .gated import gated_activation
from .latent import LatentCache, MultiheadLatentAttention
from .linear import Linear, linear
from .linear_attention import LinearAttention
from .lstmn import LSTMN
from .module import Module
from .multihead import MultiheadAttention
from .normalization import LayerNorm, layer_norm
from .pooling import AttentionPooling, attention_pool
from .rnn import GRU, LSTM, GRUCell, LSTMCell
from .rotary import RotaryEmbedding, rotary_embedding
from .self_attention2d import SelfAttention2d
from .snail import AttentionBlock, DenseBlock, TCBlock
from .sparse import (
    Embedding,
    cross_entropy,
    embedding,
    log_softmax,
    sinusoidal_encoding,
)
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "GRU",
    "LSTM",
    "LSTMN",
    "AttentionBlock",
    "AttentionPooling",
    "CausalConv1d",
    "Conv1d",
    "Conv2d",
    "DenseBlock",
    "DifferentialAttention",
    "Embedding",
    "GELU",
    "GRUCell",
    "LSTMCell",
    "LatentCache",
    "LayerNorm",
    "Linear",
    "LinearAttention",
    "Module",
    "MultiheadAttention",
    "MultiheadLatentAttention",
    "ReLU",
    "RotaryEmbedding",
    "SelfAttention2d",
    "TCBlock",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "attention_pool",
    "conv1d",
    "conv2d",
    "cross_entropy",
    "decode",
    "embedding",
    "gated_activation",
    "gelu",
    "layer_norm",
    "linear",
    "log_softmax",
    "relu",
    "relu_dropout",
    "rotary_embedding",
    "sinusoidal_encoding",
]
