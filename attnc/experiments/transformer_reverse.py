"""An encoder-decoder Transformer learns to reverse digit sequences.

    python -m attnc.experiments.transformer_reverse [--seed N] [--quick] [--threads N] [--save PATH]

d_model 64, 2 encoder + 2 decoder layers, 4 heads, digits 0-9, lengths 5-12
(plus PAD, BOS, EOS). Trained on fresh random sequences that never include
the 1,000 held-out ones; scored by greedy decoding on the held-out set
(exact match: every token and the EOS right). Target: >= 99.5% exact match,
trained in under 3 minutes on 2 cores. At each evaluation interval (a tenth
of the run, --eval-every) metrics.jsonl records the held-out exact match and
token accuracy.
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc.datasets import reverse_task
from attnc.models import Seq2SeqTransformer

from . import _common

HELDOUT_SEED = 20240601  # the held-out set is the same for every --seed

FULL = dict(
    steps=1200,
    batch_size=64,
    lr=1e-3,
    warmup=120,
    final_lr=0.02,
    weight_decay=0.01,
    dropout=0.0,
    label_smoothing=0.0,
    clip=1.0,
    heldout=1000,
    d_model=64,
    nhead=4,
    layers=2,
    dim_feedforward=256,
)
QUICK = dict(FULL, steps=25, batch_size=32, warmup=10, heldout=64)


def exact_match(model, task, batch_size=500):
    """(exact-match rate, token accuracy) of greedy decoding on a ReverseTask."""
    targets = task.targets_padded()  # reversal + EOS, PAD after
    width = targets.shape[1]
    correct, tokens_right, tokens = 0, 0, 0
    for start in range(0, len(task), batch_size):
        idx = np.arange(start, min(start + batch_size, len(task)))
        b = task.batch(idx)
        out = model.generate(
            b.src, max_new_tokens=width, bos=task.bos, eos=task.eos, src_key_padding_mask=b.src_key_padding_mask
        )
        got = np.full((len(idx), width), -1, np.int64)
        got[:, : out.shape[1]] = out[:, :width]
        want = targets[idx]
        valid = np.arange(width)[None, :] <= task.lengths[idx][:, None]  # the reversal and its EOS
        right = (got == want) | ~valid
        correct += int(right.all(axis=1).sum())
        tokens_right += int(((got == want) & valid).sum())
        tokens += int(valid.sum())
    return correct / len(task), tokens_right / tokens


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    data_seed, model_seed = np.random.SeedSequence(args.seed).generate_state(2)

    heldout = reverse_task(cfg["heldout"], seed=HELDOUT_SEED, unique=True)
    train_set = reverse_task(cfg["steps"] * cfg["batch_size"], seed=int(data_seed), exclude=heldout)
    V = heldout.num_tokens
    model = Seq2SeqTransformer(
        V,
        V,
        d_model=cfg["d_model"],
        nhead=cfg["nhead"],
        num_encoder_layers=cfg["layers"],
        num_decoder_layers=cfg["layers"],
        dim_feedforward=cfg["dim_feedforward"],
        dropout=cfg["dropout"],
        max_len=32,
        seed=int(model_seed),
    )
    opt = attnc.optim.AdamW(model, lr=cfg["lr"], betas=(0.9, 0.98), eps=1e-9, weight_decay=cfg["weight_decay"])
    sched = attnc.optim.LambdaLR(opt, _common.warmup_cosine(cfg["warmup"], cfg["steps"], cfg["final_lr"]))
    bs = cfg["batch_size"]

    def batches(step):
        return train_set.batch(np.arange(step * bs, (step + 1) * bs))

    def loss_and_grads(b):
        return model.loss_and_grads(
            b.src,
            b.tgt_in,
            b.tgt_out,
            b.src_key_padding_mask,
            b.tgt_key_padding_mask,
            label_smoothing=cfg["label_smoothing"],
        )

    def measures():
        em, tok_acc = exact_match(model, heldout)
        return {"exact_match": em, "token_accuracy": tok_acc}

    result = _common.train(
        model,
        opt,
        loss_and_grads,
        batches,
        cfg["steps"],
        scheduler=sched,
        clip=cfg["clip"],
        desc="transformer_reverse",
        disable_progress=args.no_progress,
        run=args.run,
        evaluate=measures,
    )
    start = time.perf_counter()
    em, tok_acc = exact_match(model, heldout)
    eval_seconds = time.perf_counter() - start
    return _common.report(
        "transformer_reverse",
        args,
        model,
        result,
        bs,
        eval_seconds,
        exact_match=em,
        token_accuracy=tok_acc,
        heldout_size=len(heldout),
        train_sequences=len(train_set),
    )


if __name__ == "__main__":
    main()
