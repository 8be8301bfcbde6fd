"""attnc.datasets: seeded synthetic tasks for the experiments (NumPy only)."""

from .captions import CaptionBatch, CaptionsTask, caption_of, caption_split, captions
from .dates import DatesTask, date_split, dates, format_date
from .ntm_tasks import (
    AssociativeRecallTask,
    CopyTask,
    NTMBatch,
    RepeatCopyTask,
    bits_per_sequence,
)
from .sequences import (
    IGNORE_INDEX,
    ReverseTask,
    Seq2SeqBatch,
    SortTask,
    pad_sequences,
    reverse_task,
    sort_split,
    sort_task,
    special_tokens,
)
from .vocab import Padded, TeacherForcing, TextBatch, Vocab

__all__ = [
    "AssociativeRecallTask",
    "CaptionBatch",
    "CaptionsTask",
    "CopyTask",
    "DatesTask",
    "IGNORE_INDEX",
    "NTMBatch",
    "Padded",
    "RepeatCopyTask",
    "ReverseTask",
    "Seq2SeqBatch",
    "SortTask",
    "TeacherForcing",
    "TextBatch",
    "Vocab",
    "bits_per_sequence",
    "caption_of",
    "caption_split",
    "captions",
    "date_split",
    "dates",
    "format_date",
    "pad_sequences",
    "reverse_task",
    "sort_split",
    "sort_task",
    "special_tokens",
]
