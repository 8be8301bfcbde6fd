"""attnc.models: whole models built from attnc.nn modules, with gradients
through attnc.vjp (keyed by state_dict name) and decoding."""

from .captioner import Captioner
from .decomposable import DecomposableAttention
from .gpt import GPT
from .ntm import NTM, NTMTrace
from .pointer import PointerNet, PointerOutput
from .rnn_seq2seq import Seq2Seq
from .seq2seq_transformer import Seq2SeqTransformer
from .snail import SNAIL

__all__ = [
    "Captioner",
    "DecomposableAttention",
    "GPT",
    "NTM",
    "NTMTrace",
    "PointerNet",
    "PointerOutput",
    "SNAIL",
    "Seq2Seq",
    "Seq2SeqTransformer",
]
