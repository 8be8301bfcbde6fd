"""attnc.datasets: seeded synthetic tasks for the experiments (NumPy only)."""

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

__all__ = [
    "IGNORE_INDEX",
    "ReverseTask",
    "Seq2SeqBatch",
    "SortTask",
    "pad_sequences",
    "reverse_task",
    "sort_split",
    "sort_task",
    "special_tokens",
]
