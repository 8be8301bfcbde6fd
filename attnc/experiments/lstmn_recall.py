"""Intra-attention learns key–value recall: an LSTMN against an LSTM.

    python -m attnc.experiments.lstmn_recall [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]

Task: attnc.datasets.KeyValueRecallTask: 6–10 steps each showing a (key,
value) pair over 16 keys and 16 values, then a query step naming one of
the keys; predict its value (16 classes; chance 1/16). Models (the same
sizes): a step's input is the sum of a key embedding (33 × 32) and a value
embedding (17 × 32) → LSTMN(32, 64, attention 32) or LSTM(32, 64) →
Linear(64, 16) on the query step's hidden state. Training: fresh batches
of 64, Adam 3e-3 with 100 warm-up steps and a cosine decay, gradients
clipped to norm 1, the same data for both models, 3,000 steps each; the
LSTM also once more with 12,000 steps ("accuracy_lstm_long": more compute
than the LSTMN gets). Scored on 2,000 held-out rows: "accuracy" (LSTMN),
"accuracy_lstm", and "attention_on_key": the LSTMN's mean attention mass,
at the query step, on the step of the queried key's pair (uniform
attention would put 1/n there: "attention_uniform"), and
"attention_argmax_on_key", how often that step has the largest weight.

The issue sets no number; the point is the comparison, reported as measured.
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc import nn
from attnc._args import child_seeds
from attnc.datasets import KeyValueRecallTask

from . import _common

FULL = dict(
    steps=3000,
    lstm_long_steps=12000,
    batch_size=64,
    embed=32,
    hidden=64,
    attention=32,
    lr=3e-3,
    warmup=100,
    heldout=2000,
    num_keys=16,
    num_values=16,
    min_pairs=6,
    max_pairs=10,
)
QUICK = dict(FULL, steps=30, lstm_long_steps=60, batch_size=16, hidden=16, attention=8, heldout=64)
HELDOUT_SEED = 20261122  # the held-out rows are the same for every --seed


class RecallClassifier(nn.Module):
    """Embeddings (key + value) → recurrent layer (``"lstmn"`` or ``"lstm"``)
    → Linear, read at each row's last step. ``forward(tokens (B, T, 2) int,
    lengths (B,))`` →
    logits (B, classes); ``attention(tokens, lengths)`` → the LSTMN's
    intra-attention weights (B, T, T) (what a notebook draws, with
    ``KeyValueRecallTask.step_labels`` on the axes).

    Example
    -------
    >>> task = KeyValueRecallTask(8, 4, 2, 4)
    >>> model = RecallClassifier(task.vocab_sizes, task.num_classes, 8, 8, 4, seed=0)
    >>> b = task.batch(3, seed=0)
    >>> model(b.tokens, b.lengths).shape, model.attention(b.tokens, b.lengths).shape[0]
    ((3, 4), 3)
    """

    def __init__(self, vocabs, classes, embed, hidden, attention, kind="lstmn", *, dtype=np.float32, seed=None):
        super().__init__(dtype)
        if kind not in ("lstmn", "lstm"):
            raise ValueError(f"kind must be 'lstmn' or 'lstm', got {kind!r}")
        self.kind = kind
        seeds = child_seeds(seed, 4)
        self.embed_key = nn.Embedding(vocabs[0], embed, dtype=dtype, seed=seeds[0])
        self.embed_value = nn.Embedding(vocabs[1], embed, dtype=dtype, seed=seeds[3])
        if kind == "lstmn":
            self.rnn = nn.LSTMN(embed, hidden, attention_size=attention, dtype=dtype, seed=seeds[1])
        else:
            self.rnn = nn.LSTM(embed, hidden, dtype=dtype, seed=seeds[1])
        self.out = nn.Linear(hidden, classes, dtype=dtype, seed=seeds[2])

    def _rnn(self, x, lengths, vjp):
        if self.kind == "lstmn":
            return attnc.vjp(self.rnn, x, lengths=lengths) if vjp else (self.rnn(x, lengths=lengths), None)
        if vjp:
            (h, _), pb = attnc.vjp(self.rnn, x, lengths=lengths)
            return h, (lambda dh: pb(dh, None))
        return self.rnn(x, lengths=lengths)[0], None

    def _embed(self, tokens):
        tokens = np.asarray(tokens)
        return self.embed_key(tokens[..., 0]) + self.embed_value(tokens[..., 1])

    def forward(self, tokens, lengths):
        x = self._embed(tokens)
        h, _ = self._rnn(x, lengths, False)
        rows = np.arange(len(tokens))
        return self.out(h[rows, np.asarray(lengths) - 1])

    def attention(self, tokens, lengths):
        if self.kind != "lstmn":
            raise ValueError("only the LSTMN has intra-attention weights")
        return self.rnn(self._embed(tokens), lengths=lengths, return_attention=True)[1]

    def loss_and_grad(self, batch):
        """(mean cross-entropy of the query step, gradients by state_dict name)."""
        xk, pb_key = attnc.vjp(self.embed_key, batch.tokens[..., 0])
        xv, pb_value = attnc.vjp(self.embed_value, batch.tokens[..., 1])
        x = xk + xv
        h, pb_rnn = self._rnn(x, batch.lengths, True)
        rows, last = np.arange(len(batch)), batch.lengths - 1
        logits, pb_out = attnc.vjp(self.out, h[rows, last])
        loss, pb_loss = attnc.vjp(nn.cross_entropy, logits, batch.targets)
        dlogits = pb_loss(np.ones((), logits.dtype))["input"]
        g_out = pb_out(dlogits)
        dh = np.zeros_like(h)
        dh[rows, last] = g_out.pop("input")
        g_rnn = pb_rnn(dh)
        dx = g_rnn.pop("input")
        g_rnn.pop("h0", None), g_rnn.pop("c0", None)
        grads = {"embed_key.weight": pb_key(dx)["weight"], "embed_value.weight": pb_value(dx)["weight"]}
        grads.update({f"rnn.{k}": v for k, v in g_rnn.items()})
        grads.update({f"out.{k}": v for k, v in g_out.items()})
        return float(loss), grads


def _train(kind, args, cfg, task, desc, steps=None):
    data_seed, model_seed = np.random.SeedSequence(args.seed).generate_state(2)
    model = RecallClassifier(
        task.vocab_sizes, task.num_classes, cfg["embed"], cfg["hidden"], cfg["attention"], kind, seed=int(model_seed)
    )
    steps = steps or cfg["steps"]
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], cfg["warmup"], steps, 0.05)
    rng = np.random.default_rng(int(data_seed))  # the same batches for both models
    result = _common.train(
        model,
        opt,
        model.loss_and_grad,
        lambda step: task.batch(cfg["batch_size"], seed=rng),
        steps,
        scheduler=sched,
        desc=desc,
        disable_progress=args.no_progress,
        run=args.run,
        rngs={"data": rng},
    )
    return model, result


def _accuracy(model, held):
    return float(np.mean(model(held.tokens, held.lengths).argmax(-1) == held.targets))


def attention_at_query(model, held):
    """The LSTMN's attention row at each row's query step (B, T), the mean
    mass it puts on the queried key's step, and how often that step has the
    largest weight: ``q, on_key, argmax_on_key = attention_at_query(model,
    task.batch(100, seed=0))``."""
    w = model.attention(held.tokens, held.lengths)
    rows = np.arange(len(held))
    q = w[rows, held.lengths - 1]
    return (q, float(np.mean(q[rows, held.key_positions])), float(np.mean(q.argmax(-1) == held.key_positions)))


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    task = KeyValueRecallTask(cfg["num_keys"], cfg["num_values"], cfg["min_pairs"], cfg["max_pairs"])
    held = task.batch(cfg["heldout"], seed=HELDOUT_SEED)
    model, result = _train("lstmn", args, cfg, task, "LSTMN")
    lstm, result_lstm = _train("lstm", args, cfg, task, "LSTM")
    # the LSTM again with 4x the steps (more compute than the LSTMN's run): is it only slower to learn?
    lstm_long, result_long = _train("lstm", args, cfg, task, "LSTM, long", cfg["lstm_long_steps"])
    start = time.perf_counter()
    acc, acc_lstm, acc_long = _accuracy(model, held), _accuracy(lstm, held), _accuracy(lstm_long, held)
    _, on_key, argmax_on_key = attention_at_query(model, held)
    uniform = float(np.mean(1.0 / (held.lengths - 1)))
    return _common.report(
        "lstmn_recall",
        args,
        model,
        result,
        cfg["batch_size"],
        time.perf_counter() - start,
        accuracy=acc,
        accuracy_lstm=acc_lstm,
        attention_on_key=on_key,
        attention_argmax_on_key=argmax_on_key,
        attention_uniform=uniform,
        chance=1.0 / task.num_classes,
        heldout_size=cfg["heldout"],
        final_loss_lstm=result_lstm["final_loss"],
        train_seconds_lstm=result_lstm["train_seconds"],
        accuracy_lstm_long=acc_long,
        steps_lstm_long=cfg["lstm_long_steps"],
        train_seconds_lstm_long=result_long["train_seconds"],
        parameters_lstm=int(sum(p.size for p in lstm.parameters())),
    )


if __name__ == "__main__":
    # the imported module's main, so that --save records attnc.experiments.lstmn_recall.RecallClassifier
    # (attnc.load finds it), not __main__'s
    import attnc.experiments.lstmn_recall as _module

    _module.main()
