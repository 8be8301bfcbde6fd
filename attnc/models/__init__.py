"""attnc.models: whole models built from attnc.nn modules, with gradients
through attnc.vjp (keyed by state_dict name) and decoding."""

from .bert import BERT, BERTPooler
from .captioner import Captioner
from .decomposable import DecomposableAttention
from .gpt import GPT
from .hf import from_pretrained
from .ntm import NTM, NTMTrace
from .pointer import PointerNet, PointerOutput
from .rnn_seq2seq import Seq2Seq
from .seq2seq_transformer import Seq2SeqTransformer
from .snail import SNAIL

__all__ = [
    "BERT",
    "BERTPooler",
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
    "from_pretrained",
]
