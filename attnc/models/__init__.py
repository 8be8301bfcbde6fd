"""attnc.models: whole models built from attnc.nn modules, with gradients
through attnc.vjp (keyed by state_dict name) and decoding."""

from .captioner import Captioner
from .gpt import GPT
from .ntm import NTM, NTMTrace
from .pointer import PointerNet, PointerOutput
from .rnn_seq2seq import Seq2Seq
from .seq2seq import Seq2SeqTransformer
from .snail import SNAIL

__all__ = ["Captioner", "GPT", "NTM", "NTMTrace", "PointerNet", "PointerOutput", "Seq2Seq", "Seq2SeqTransformer",
           "SNAIL"]
