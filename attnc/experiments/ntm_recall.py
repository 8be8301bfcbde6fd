"""The Neural Turing Machine learns associative recall (Graves et al. 2014, sec. 4.3).

    python -m attnc.experiments.ntm_recall [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.AssociativeRecallTask: 2-6 items of three 6-bit
vectors, each after an item delimiter; then a query item between two query
delimiters; the NTM must output the item that followed the query in the
sequence. Model and training: attnc/experiments/_ntm.py, 100,000 sequences.
Scored on 500 held-out sequences drawn like the training ones (20 batches
of 25, each batch one number of items), and on 100 with 6 items (the
longest). JSON: "bits_per_sequence", "bits_per_sequence_6_items",
"sequences_seen", "train_seconds".
"""

from __future__ import annotations

from attnc.datasets import AssociativeRecallTask

from . import _common, _ntm

FULL = dict(steps=100000, batches=20, rows=25, longest=100)
QUICK = dict(steps=200, batches=2, rows=5, longest=5)


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    task = AssociativeRecallTask(bits=6, item_len=3, min_items=2, max_items=6)
    model, result = _ntm.train_ntm("ntm_recall", args, task, cfg["steps"])

    def metrics(m):
        held = [task.batch(cfg["rows"], seed=_ntm.HELDOUT_SEED + i) for i in range(cfg["batches"])]
        six = [task.batch(cfg["longest"], items=6, seed=_ntm.HELDOUT_SEED - 1)]
        return {
            "bits_per_sequence": _ntm.score(m, held),
            "bits_per_sequence_6_items": _ntm.score(m, six),
            "heldout_size": cfg["batches"] * cfg["rows"],
        }

    return _ntm.finish("ntm_recall", args, model, result, metrics)


if __name__ == "__main__":
    main()
