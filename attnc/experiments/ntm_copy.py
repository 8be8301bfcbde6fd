"""The Neural Turing Machine learns to copy (Graves et al. 2014, sec. 4.1).

    python -m attnc.experiments.ntm_copy [--memory-init constant|learned|random] [--seed N] [--quick]
                                         [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.CopyTask: random 8-bit vectors, lengths 1-20, then a
delimiter; the NTM must write the sequence back. Model and training: see
attnc/experiments/_ntm.py (LSTM 100, memory 128 × 20, one read and one write
head, constant memory init, batch 1, RMSprop), 30,000 sequences. Scored on
held-out sequences of length 20 (the target: below 0.1 wrong bits per
sequence) and, for generalisation, of lengths 40 and 80, longer than any
seen in training. JSON: "bits_per_sequence" (length 20),
"bits_per_sequence_40", "bits_per_sequence_80", "sequences_seen",
"train_seconds", and "sequences_to_converge": the sequences seen when the
error on 50 other length-20 sequences, checked every 1,000, first fell
below 0.1 bits ("checks": that history). --memory-init compares Collier &
Beel's memory initialisations (constant, their recommendation and the
default; learned; random).
"""

from __future__ import annotations

from attnc.datasets import CopyTask

from . import _common, _ntm

FULL = dict(steps=30000, heldout=500, long=100)
QUICK = dict(steps=300, heldout=20, long=4)


def add_flags(parser):
    """This experiment's own flags."""
    parser.add_argument(
        "--memory-init",
        choices=("constant", "learned", "random"),
        default="constant",
        help="the memory's initial contents",
    )


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    task = CopyTask(bits=8, min_len=1, max_len=20)
    check = [task.batch(50, length=20, seed=_ntm.HELDOUT_SEED - 20)]
    model, result = _ntm.train_ntm("ntm_copy", args, task, cfg["steps"], {"memory_init": args.memory_init}, check=check)

    def metrics(m):
        held = lambda length, n: [task.batch(n, length=length, seed=_ntm.HELDOUT_SEED + length)]  # noqa: E731
        return {
            "bits_per_sequence": _ntm.score(m, held(20, cfg["heldout"])),
            "bits_per_sequence_40": _ntm.score(m, held(40, cfg["long"])),
            "bits_per_sequence_80": _ntm.score(m, held(80, cfg["long"])),
            "heldout_size": cfg["heldout"],
        }

    return _ntm.finish("ntm_copy", args, model, result, metrics, memory_init=args.memory_init)


if __name__ == "__main__":
    main()
