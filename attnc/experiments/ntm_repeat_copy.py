"""The Neural Turing Machine learns to repeat a sequence a given number of
times (Graves et al. 2014, sec. 4.2).

    python -m attnc.experiments.ntm_repeat_copy [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.RepeatCopyTask: random 8-bit vectors, lengths 1-10,
a delimiter, then the number of copies (1-10, on its own channel, as
copies / 10); the NTM writes the sequence that many times and then an end
marker. Model and training: attnc/experiments/_ntm.py, 100,000 sequences.
Scored on 500 held-out sequences drawn like the training ones (20 batches
of 25, each batch one length and one number of copies). JSON:
"bits_per_sequence", "sequences_seen", "train_seconds".
"""

from __future__ import annotations

from attnc.datasets import RepeatCopyTask

from . import _common, _ntm

FULL = dict(steps=100000, batches=20, rows=25)
QUICK = dict(steps=200, batches=2, rows=5)


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    task = RepeatCopyTask(bits=8, min_len=1, max_len=10, min_repeats=1, max_repeats=10)
    model, result = _ntm.train_ntm("ntm_repeat_copy", args, task, cfg["steps"])

    def metrics(m):
        held = [task.batch(cfg["rows"], seed=_ntm.HELDOUT_SEED + i) for i in range(cfg["batches"])]
        return {"bits_per_sequence": _ntm.score(m, held), "heldout_size": cfg["batches"] * cfg["rows"]}

    return _ntm.finish("ntm_repeat_copy", args, model, result, metrics)


if __name__ == "__main__":
    main()
