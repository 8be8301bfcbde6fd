"""attnc.experiments: training runs that reproduce known results.

Each runs as ``python -m attnc.experiments.NAME [--seed N] [--quick]
[--threads N] [--save PATH] [--steps N] [--run-dir DIR | --resume RUN_DIR] ...``
(``--help`` lists every flag), shows a progress bar on stderr and prints one
JSON object of metrics as the last line of stdout (at least "train_seconds",
and the task's own measure: "exact_match", "bits_per_sequence", "gap", ...).

- ``transformer_reverse``: an encoder-decoder Transformer reverses digit sequences.
- ``gpt_sort``: minGPT's demo, a tiny GPT sorts sequences of {0, 1, 2}.
- ``dates``: a recurrent encoder-decoder (``--attention KIND|all``) turns
  human-readable dates into ISO dates.
- ``captions``: show-attend-tell (``--attention soft|hard``) captions images of
  coloured shapes.
- ``ntm_copy``, ``ntm_repeat_copy``, ``ntm_recall``: a Neural Turing Machine
  learns Graves et al.'s copy, repeat-copy and associative-recall tasks.
- ``ntm_generalisation`` (``--task``, ``--model``, ``--eval-memory``): an NTM
  against an LSTM of about its size beyond the training range (longer copies,
  more repeats, more items): the cost curves of Graves et al.'s figures.
- ``pointer_sort``, ``pointer_tsp --n N``, ``pointer_hull``: pointer networks
  (Vinyals et al. 2015) sort numbers, find planar TSP tours and convex hulls.
- ``attention_pooling``: attention pooling (Raffel & Ellis 2015) finds the marker
  words that set a sequence's class ("accuracy", "marker_attention_mass").
- ``entailment``: decomposable attention (Parikh et al. 2016) classifies
  premise / hypothesis pairs about scenes of coloured animals as entailment,
  contradiction or neutral ("alignment_accuracy": word-to-word alignments).
- ``snail_fewshot`` (``--shots 1|5|all``): SNAIL (Mishra et al. 2017) learns 5-way
  1-shot and 5-shot classification of synthetic classes, new in every episode.
- ``sagan_shapes``: a small convolutional classifier with SAGAN's self-attention
  (``--no-attention``: without it) tells whether two distant shapes share a colour.
- ``lstmn_recall``: an LSTMN (intra-attention, Cheng et al. 2016) against an LSTM on key-value recall.
- ``attention_attribution`` (``--layers N``): attention rollout, flow and
  gradient-weighted relevance against raw attention, scored by their
  Spearman correlation with blank-out importance on a [CLS] classifier whose
  deciding word is known (Abnar & Zuidema 2020's setting).
- ``mqar`` (``--mixers a,b``): multi-query associative recall (Zoology) with
  softmax, sliding-window, linear, Performer, differential (and sigmoid)
  attention at two widths.
- ``length_extrapolation``: a causal LM trained at length 64 and evaluated
  up to 512 with sinusoidal, learned, RoPE and ALiBi positions.
- ``streaming``: decoding 8x past the training length with a sliding-window
  cache, with and without attention sinks (StreamingLLM).
- ``bahdanau_length`` (``--train-max-len 30,50``): BLEU, exact match and token
  accuracy against source length for encoder-decoders with and without
  attention on a synthetic language pair (Bahdanau et al. 2015, Figure 2).
- ``luong_comparison`` (``--variants``): Luong et al.'s global dot, general,
  concat, local-m and local-p attention, with and without input feeding,
  under one budget (Luong et al. 2015, Table 4).

``python -m attnc.experiments`` lists them. From Python, ``run(name,
**flags)`` runs one and returns its Result (metrics, history, model,
run_dir); ``compare(run_dirs)`` tabulates runs and ``plot_losses(run_dirs)``
draws their loss curves. ``sweep(name, seeds, grid)`` (or ``python -m
attnc.experiments sweep NAME --seeds 0,1,2 --grid FLAG=V1,V2``) runs one over
seeds and a grid of its flags in parallel processes or on a Dask cluster,
and tables the results with medians and spreads over the seeds.

Every run writes a folder (``--run-dir``, default a new one under runs/):
config.json (every setting, the seed, versions, threads, SIMD path),
metrics.jsonl (each step's loss and learning rate; the experiment's own
measures at its evaluation interval), result.json (the final metrics),
checkpoints/ (model, optimiser, schedule and every generator's state, at
every evaluation interval and at the end; ``--resume RUN_DIR`` continues
from the last one) and, when the tensorboard package is installed,
TensorBoard events (events/). attnc.experiments._common's docstring says
what a resumed run equals.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import _common, _compare
from ._common import Result
from ._sweep import SweepError, SweepTable, aggregate, sweep

__all__ = [
    "EXPERIMENTS",
    "Result",
    "SweepError",
    "SweepTable",
    "aggregate",
    "compare",
    "describe",
    "plot_losses",
    "run",
    "sweep",
]

EXPERIMENTS = (
    "transformer_reverse",
    "gpt_sort",
    "dates",
    "captions",
    "ntm_copy",
    "ntm_repeat_copy",
    "ntm_recall",
    "ntm_generalisation",
    "pointer_sort",
    "pointer_tsp",
    "pointer_hull",
    "sagan_shapes",
    "attention_pooling",
    "entailment",
    "snail_fewshot",
    "lstmn_recall",
    "attention_attribution",
    "mqar",
    "length_extrapolation",
    "streaming",
    "bahdanau_length",
    "luong_comparison",
)


def _module(name: str):
    if name not in EXPERIMENTS:
        raise ValueError(f"no experiment {name!r}; the experiments: {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"{__name__}.{name}")


def describe() -> dict[str, str]:
    """{name: one-line description} of every experiment (``python -m attnc.experiments`` prints them).

    Example
    -------
    >>> attnc.experiments.describe()["dates"]
    'A recurrent encoder-decoder learns to turn human-readable dates into ISO dates.'
    """
    return {name: _common.summary(_module(name)) for name in EXPERIMENTS}


def run(name: str, **config: Any) -> Result:
    """Run an experiment in this process, as ``python -m attnc.experiments.NAME`` does.

    The config keys are the command line's flags with "_" for "-": ``quick``,
    ``seed``, ``steps``, ``schedule_steps``, ``eval_every``, ``threads``,
    ``run_dir``, ``resume``, ``save``, ``no_progress`` and the experiment's
    own (``python -m attnc.experiments.NAME --help`` lists them, e.g. dates'
    ``attention`` and ``epochs``). The run writes its folder (``run_dir``,
    default a new one under runs/) and prints its JSON line as the command
    does. See attnc.experiments._common for what resuming guarantees.

    Parameters
    ----------
    name : str, one of attnc.experiments.EXPERIMENTS (e.g. "dates")
    **config : the flags' values (True/False for switches)

    Returns
    -------
    Result: ``.metrics`` (dict, as result.json), ``.history`` (list of
    dicts, metrics.jsonl's records), ``.model`` (the trained
    attnc.nn.Module; None for dates' attention="all"), ``.run_dir`` (Path)

    Raises
    ------
    TypeError for a key that is not one of the experiment's flags;
    ValueError for a bad value (as the command line would refuse it).

    Example
    -------
    >>> import tempfile, contextlib, io
    >>> folder = tempfile.mkdtemp()
    >>> with contextlib.redirect_stdout(io.StringIO()):
    ...     res = attnc.experiments.run("transformer_reverse", quick=True, steps=4, eval_every=2,
    ...                                 no_progress=True, run_dir=folder + "/run")
    >>> res.metrics["steps"], [r["step"] for r in res.history if "loss" in r], sorted(res.history[0])
    (4, [1, 2, 3, 4], ['loss', 'lr', 'phase', 'seconds', 'step'])
    >>> [(r["step"], sorted(r)) for r in res.history if "exact_match" in r][0]   # its evaluation interval
    (2, ['exact_match', 'phase', 'seconds', 'step', 'token_accuracy'])
    >>> attnc.experiments.run("dates", atention="luong-dot")
    Traceback (most recent call last):
    TypeError: dates has no flag 'atention'; its flags: seed, quick, threads, save, steps, schedule_steps, ...
    """
    module = _module(name)
    parser = _common.build_parser(module, raising=True)
    return module.main(_common.parse(parser, _common.to_argv(parser, name, config)))


def compare(run_dirs: Iterable[str | os.PathLike], plot: bool = False) -> Any:
    """A table of runs: the settings in which they differ and their final metrics.

    Reads each folder's config.json (its flags and the experiment's
    settings) and result.json. Each row: "run_dir", "experiment", every
    setting whose value is not the same in all runs, then every number (or
    string) of result.json except wall-clock fields (nested dicts flattened as
    "a.b"). Runs without result.json (unfinished) have only their settings.

    Parameters
    ----------
    run_dirs : iterable of str or Path, run folders (config.json, result.json); int and float metrics
    plot : bool, default False. True: also draw the loss curves
        (``plot_losses``) and return (table, Axes)

    Returns
    -------
    a pandas DataFrame (when pandas is installed) or a list of dicts, one row
    per run; with plot=True, (table, matplotlib Axes)

    Example
    -------
    >>> import tempfile, contextlib, io
    >>> folder = tempfile.mkdtemp()
    >>> with contextlib.redirect_stdout(io.StringIO()):
    ...     for seed in (0, 1):
    ...         _ = attnc.experiments.run("gpt_sort", quick=True, steps=2, seed=seed, no_progress=True,
    ...                                   run_dir=f"{folder}/seed{seed}")
    >>> table = attnc.experiments.compare([f"{folder}/seed0", f"{folder}/seed1"])
    >>> [row["seed"] for row in (table.to_dict("records") if hasattr(table, "to_dict") else table)]
    [0, 1]
    """
    rows = _compare.table([Path(d) for d in run_dirs])
    try:
        import pandas
    except ImportError:
        table = rows
    else:
        table = pandas.DataFrame(rows)
    return (table, plot_losses(run_dirs)) if plot else table


def plot_losses(run_dirs: Iterable[str | os.PathLike], ax: Any = None, smooth: int = 1) -> Any:
    """Draw each run's training loss against the step, one line per run (and phase).

    Parameters
    ----------
    run_dirs : iterable of str or Path, run folders (their metrics.jsonl: float losses by int step)
    ax : matplotlib Axes, optional (default: a new figure's)
    smooth : int >= 1, default 1: a moving mean over that many steps

    Returns
    -------
    the matplotlib Axes

    Example
    -------
    >>> import tempfile, contextlib, io
    >>> folder = tempfile.mkdtemp()
    >>> with contextlib.redirect_stdout(io.StringIO()):
    ...     _ = attnc.experiments.run("gpt_sort", quick=True, steps=4, no_progress=True, run_dir=folder + "/a")
    >>> ax = attnc.experiments.plot_losses([folder + "/a"])
    >>> len(ax.lines), ax.lines[0].get_xdata().tolist()
    (1, [1, 2, 3, 4])
    """
    return _compare.plot_losses([Path(d) for d in run_dirs], ax, smooth)
