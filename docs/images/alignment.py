"""Draws docs/images/alignment.png, the README's picture: where a recurrent
encoder-decoder with Bahdanau's attention looks while it turns a date into
its ISO form. The model is trained here as the recurrent seq2seq guide's
example trains it (60,000 dates, 2 epochs, Adam 3e-3, seed 0; about 20 s on
two cores, minutes on a busy machine), then decodes one held-out date.

    python docs/images/alignment.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import attnc
import attnc.models
import attnc.plot
from attnc.datasets import dates

OUT = Path(__file__).with_suffix(".png")


def train():
    task = dates(60000, seed=0)
    model = attnc.models.Seq2Seq(len(task.src_vocab), len(task.tgt_vocab), attention="bahdanau", seed=0)
    opt = attnc.optim.Adam(model, lr=3e-3)
    for _ in range(2):
        for batch in task.batches(64, shuffle=True, seed=0):
            loss, grads = model.loss_and_grad(batch)
            attnc.optim.clip_grad_norm_(grads, 1.0)
            opt.step(grads)
    return task, model


def main():
    task, model = train()
    test = dates(50, seed=1, split="test")
    i = max(range(len(test.sources)), key=lambda j: len(test.sources[j]) if len(test.sources[j]) <= 26 else 0)
    b = test.batch([i])
    tokens, alignments = model.generate(b.src, b.src_lengths, max_len=11)
    n = int(b.src_lengths[0])
    words = [task.tgt_vocab.tokens[t] for t in tokens[0]]
    fig, ax = plt.subplots(figsize=(9, 4.2), dpi=150)
    attnc.plot.alignment(
        alignments[0, : len(words), :n],
        list(test.sources[i]),
        words,
        ax=ax,
        title=f"Bahdanau attention: {test.sources[i]!r} -> {''.join(w for w in words if len(w) == 1)!r}",
    )
    fig.tight_layout()
    fig.savefig(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
