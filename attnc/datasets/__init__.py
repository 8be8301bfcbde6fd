"""attnc.datasets: seeded synthetic tasks for the experiments (NumPy only)."""

from .captions import CaptionBatch, CaptionsTask, caption_of, caption_split, captions
from .cue_task import CueBatch, CueTask
from .dates import DatesTask, date_split, dates, format_date
from .fewshot import FewShotEpisodes, FewShotTask, fewshot_accuracy, nearest_prototype
from .markov import MarkovTask, markov_task
from .mqar import MQARTask, mqar_task
from .ntm_tasks import (
    AssociativeRecallTask,
    CopyTask,
    NTMBatch,
    RepeatCopyTask,
    bits_per_sequence,
    cost_per_sequence,
)
from .pointer_tasks import (
    ConvexHullTask,
    PointerBatch,
    PointerSortTask,
    TSPTask,
    hull_accuracy,
    hull_area_coverage,
    sort_exact_match,
    tour_length,
    tsp_tours,
)
from .recall_tasks import KeyValueRecallTask, RecallBatch
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
from .shapes import PALETTE, SHAPE_KINDS, SameColourShapes, ShapePairBatch
from .text_tasks import EntailmentBatch, EntailmentTask, MarkerBatch, MarkerTask
from .translation import TranslationTask, translation_split, translation_task
from .vocab import Padded, TeacherForcing, TextBatch, Vocab

__all__ = [
    "FewShotEpisodes",
    "FewShotTask",
    "fewshot_accuracy",
    "nearest_prototype",
    "AssociativeRecallTask",
    "CaptionBatch",
    "CaptionsTask",
    "ConvexHullTask",
    "CopyTask",
    "CueBatch",
    "CueTask",
    "DatesTask",
    "EntailmentBatch",
    "EntailmentTask",
    "IGNORE_INDEX",
    "KeyValueRecallTask",
    "MarkerBatch",
    "MarkerTask",
    "MarkovTask",
    "MQARTask",
    "NTMBatch",
    "PALETTE",
    "Padded",
    "PointerBatch",
    "PointerSortTask",
    "RecallBatch",
    "RepeatCopyTask",
    "ReverseTask",
    "SHAPE_KINDS",
    "SameColourShapes",
    "Seq2SeqBatch",
    "ShapePairBatch",
    "SortTask",
    "TSPTask",
    "TeacherForcing",
    "TranslationTask",
    "TextBatch",
    "Vocab",
    "bits_per_sequence",
    "caption_of",
    "caption_split",
    "captions",
    "cost_per_sequence",
    "date_split",
    "dates",
    "format_date",
    "hull_accuracy",
    "hull_area_coverage",
    "markov_task",
    "mqar_task",
    "pad_sequences",
    "reverse_task",
    "sort_exact_match",
    "sort_split",
    "sort_task",
    "special_tokens",
    "tour_length",
    "translation_split",
    "translation_task",
    "tsp_tours",
]
