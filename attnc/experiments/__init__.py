"""attnc.experiments: training runs that reproduce known results.

Each runs as ``python -m attnc.experiments.NAME [--seed N] [--quick]
[--threads N] [--save PATH]``, shows a progress bar on stderr and prints one
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
"""

EXPERIMENTS = ("transformer_reverse", "gpt_sort", "dates", "captions", "ntm_copy", "ntm_repeat_copy", "ntm_recall",
               "pointer_sort", "pointer_tsp", "pointer_hull", "sagan_shapes", "attention_pooling", "entailment",
               "snail_fewshot", "lstmn_recall")
