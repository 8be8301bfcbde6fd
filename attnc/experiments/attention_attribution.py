"""Attention rollout and flow (Abnar & Zuidema 2020) against raw attention: what a classifier's [CLS] draws on.

    python -m attnc.experiments.attention_attribution [--seed N] [--quick] [--threads N] [--steps N] [--layers N]

The paper's setting, on a task whose true source is known. Task:
attnc.datasets.CueTask: [CLS], then 12 words of 2 classes (4 words each);
a cue token marks the one word (the next) whose class is the label, every
other word is drawn from both classes (attractors, as in subject-verb
agreement). Model (CLSClassifier): token and position embeddings, a
4-layer (--layers) pre-norm attnc.nn.TransformerEncoder (d_model 64, 4 heads,
feed-forward 128, no dropout) and a linear classifier on the [CLS]
position's output, trained from scratch (800 steps of fresh batches of 64, Adam 2e-3
with a warm-up and a cosine decay, gradients clipped to norm 1).

Scored on 500 held-out sequences (a seed of their own), in float64. The
blank-out importance of input position j (1..12) is the drop in the true
class's probability when j's token is replaced by PAD, whose embedding row
is zero: the token's embedding is removed, its position embedding kept.
Each method's attribution of the [CLS] output over positions 1..12: the
[CLS] row of raw attention (mean over heads) of each layer
("raw_attention_layer1", ...; "raw_attention" is the last layer's), of
attention rollout, of attention flow, and gradient-weighted relevance
(Chefer et al. 2021) of the true class's logit. Per sequence, Spearman's
correlation of each with the importance; the metrics are their medians
("spearman") and means ("spearman_mean"), next to the paper's Table 1
numbers for blank-out on subject-verb agreement ("paper_spearman"); the
share of sequences where a method's correlation beats the last layer's raw
attention ("above_raw_attention"); and how often each method's (and the
importance's own, "blank_out") strongest position is the source word
("source_accuracy") or the cue or the source ("evidence_accuracy": removing
either takes the label's evidence away), and the share of the positions
that tie at a method's maximum ("tied_at_max": flow's maximum flow is 1 for
many tokens at once). A reference row,
"evidence_indicator", correlates the importance with 1 at the cue and the
source and 0 elsewhere: an attribution that knows the rule and nothing
else. Only two positions matter here, so the ranks of the other ten (tiny
probability drops) weigh heavily in any Spearman correlation: that
indicator gets about 0.65, not 1.
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc import attribution, nn
from attnc._args import child_seeds
from attnc.datasets import CueTask
from attnc.models._common import _Tape

from . import _common

FULL = dict(
    steps=800,
    batch_size=64,
    lr=2e-3,
    warmup=50,
    final_lr=0.05,
    length=12,
    num_classes=2,
    words_per_class=4,
    num_layers=4,
    d_model=64,
    nhead=4,
    dim_feedforward=128,
    heldout=500,
    eval_batch=100,
)
QUICK = dict(FULL, steps=20, heldout=12, eval_batch=6)
# Abnar & Zuidema 2020, Table 1 (subject-verb agreement, Spearman's rho with
# blank-out importance): raw attention 0.12-0.29 over the layers, rollout and flow about 0.7.
PAPER = {"raw_attention": "0.12-0.29", "rollout": "~0.7", "flow": "~0.7"}


def add_flags(parser) -> None:
    parser.add_argument(
        "--layers", type=_common.positive_int, default=None, help=f"the encoder's depth (default {FULL['num_layers']})"
    )


class CLSClassifier(nn.Module):
    """Token and position embeddings -> TransformerEncoder -> Linear on the
    first ([CLS]) position.

    ``forward(ids, *, need_weights=False)``: ids (B, T) int, T <= max_len ->
    logits (B, num_classes), or (logits, [weights (B, nhead, T, T) per
    layer]). ``attnc.vjp(model, ids, need_weights=True)``'s pullback gives
    the parameters' gradients and ``"attn_weights"`` (what
    ``attnc.attribution.attention_gradients`` reads). Token 0 is padding: a
    zero embedding row that gets no gradient. ``loss_and_grads(batch)`` ->
    (mean cross-entropy, gradients by state_dict name) for a CueBatch."""

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        num_classes: int,
        d_model: int = 64,
        nhead: int = 4,
        num_layers: int = 4,
        dim_feedforward: int = 128,
        *,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__(dtype)
        seeds = child_seeds(seed, 4)
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=0, dtype=dtype, seed=seeds[0])
        self.positions = nn.Embedding(max_len, d_model, dtype=dtype, seed=seeds[1])
        layer = nn.TransformerEncoderLayer(
            d_model, nhead, dim_feedforward=dim_feedforward, dropout=0.0, norm_first=True, dtype=dtype, seed=seeds[2]
        )
        norm = nn.LayerNorm(d_model, dtype=dtype)
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=norm, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes, dtype=dtype, seed=seeds[3])

    def _run(self, grad, ids, need_weights):
        tape = _Tape(grad)
        x = tape("tokens", nn.embedding, ids, self.tokens.weight, 0)
        x = x + tape("positions", nn.embedding, np.arange(ids.shape[1], dtype=np.int64), self.positions.weight)
        h = tape("encoder", self.encoder, x, need_weights=need_weights)
        h, weights = h if need_weights else (h, None)
        logits = tape("head", self.head, np.ascontiguousarray(h[:, 0]))
        return ((logits, weights) if need_weights else logits), (tape.pullbacks, need_weights, h.shape)

    def forward(self, ids, *, need_weights=False):
        return self._run(False, np.asarray(ids), need_weights)[0]

    def _vjp_forward(self, ids, *, need_weights=False):
        return self._run(True, np.asarray(ids), need_weights)

    @staticmethod
    def _vjp_backward(saved, cotangents):
        pullbacks, need_weights, shape = saved
        g = pullbacks["head"](cotangents[0])
        grads = {"head.weight": g["weight"], "head.bias": g["bias"]}
        dh = np.zeros(shape, g["input"].dtype)
        dh[:, 0] = g["input"]
        g = pullbacks["encoder"](dh, None) if need_weights else pullbacks["encoder"](dh)
        dx = g.pop("src")
        if need_weights:
            grads["attn_weights"] = g.pop("attn_weights")
        grads.update({f"encoder.{k}": v for k, v in g.items()})
        grads["tokens.weight"] = pullbacks["tokens"](dx)["weight"]
        grads["positions.weight"] = pullbacks["positions"](np.ascontiguousarray(dx.sum(axis=0)))["weight"]
        return grads

    def loss_and_grads(self, batch):
        logits, pullback = attnc.vjp(self, batch.ids)
        loss, ce_pullback = attnc.vjp(nn.cross_entropy, logits, batch.labels)
        return float(loss), pullback(ce_pullback(np.ones((), self.dtype))["input"])


def spearman(a, b) -> float:
    """Spearman's rank correlation of two 1-d arrays (ties get their average
    rank, as scipy.stats.spearmanr); nan when either is constant."""
    ra, rb = _ranks(np.asarray(a, np.float64)), _ranks(np.asarray(b, np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")


def _ranks(x):
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):  # ties: the mean of their ranks
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def _true_class_probability(model, ids, labels):
    z = model(ids)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return p[np.arange(len(labels)), labels]


def blank_out_importance(model, ids, labels):
    """(B, T): [b, j] = p(label b) - p(label b | token j replaced by PAD), for
    j >= 1 (column 0, [CLS], is 0)."""
    B, T = ids.shape
    blanked = np.repeat(ids, T - 1, axis=0)  # row b (T - 1) + j - 1: sequence b with token j blanked
    blanked[np.arange(B * (T - 1)), np.tile(np.arange(1, T), B)] = CueTask.PAD
    dropped = _true_class_probability(model, blanked, np.repeat(labels, T - 1)).reshape(B, T - 1)
    imp = np.zeros((B, T))
    imp[:, 1:] = _true_class_probability(model, ids, labels)[:, None] - dropped
    return imp


def attributions(model, ids, labels):
    """{method: (B, T)}: the [CLS] output's attribution over the positions."""
    logits, ws = model(ids, need_weights=True)
    one_hot = np.zeros_like(logits)
    one_hot[np.arange(len(ids)), labels] = 1  # the true class's logit
    ws_g, gs = attribution.attention_gradients(model, ids, one_hot)
    out = {
        "raw_attention": ws[-1].mean(axis=1)[:, 0],
        "rollout": attribution.rollout(ws)[:, 0],
        "flow": attribution.flow(ws)[:, 0],
        "relevance": attribution.relevance(ws_g, gs)[:, 0],
    }
    out.update({f"raw_attention_layer{l}": w.mean(axis=1)[:, 0] for l, w in enumerate(ws, 1)})  # the paper's per layer
    return out


def evidence_indicator(batch, rows):
    """(B, T): 1 at the cue and the source of batch's rows, 0 elsewhere: the
    attribution of an oracle that knows the task's rule, the reference for
    what a Spearman correlation can reach when only the evidence matters."""
    out = np.zeros(batch.ids[rows].shape)
    index = np.arange(len(out))
    out[index, batch.cue[rows]] = out[index, batch.source[rows]] = 1
    return out


def evaluate(model, batch, chunk):
    """Per method, each sequence's Spearman correlation with the blank-out
    importance over positions 1..T-1 (also of the evidence indicator), its
    strongest position and the share of positions tied at its maximum (also
    the importance's own, "blank_out")."""
    rho: dict = {}
    top: dict = {}
    tied: dict = {}
    for start in range(0, len(batch), chunk):
        rows = slice(start, start + chunk)
        ids, labels = batch.ids[rows], batch.labels[rows]
        imp = blank_out_importance(model, ids, labels)
        att = attributions(model, ids, labels)
        for m, a in {**att, "blank_out": imp}.items():
            top.setdefault(m, []).extend(1 + np.argmax(a[:, 1:], axis=1))
            tied.setdefault(m, []).extend(np.isclose(a[:, 1:], a[:, 1:].max(axis=1, keepdims=True), 1e-9, 0).mean(1))
        att["evidence_indicator"] = evidence_indicator(batch, rows)
        for m, a in att.items():
            rho.setdefault(m, []).extend(spearman(i[1:], r[1:]) for i, r in zip(imp, a))
    return rho, {m: np.array(t) for m, t in top.items()}, tied


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args, num_layers=args.layers)
    data_seed, model_seed, heldout_seed = np.random.SeedSequence(args.seed).generate_state(3)
    task = CueTask(cfg["length"], cfg["num_classes"], cfg["words_per_class"])
    model = CLSClassifier(
        task.vocab_size,
        1 + task.length,
        task.num_classes,
        cfg["d_model"],
        cfg["nhead"],
        cfg["num_layers"],
        cfg["dim_feedforward"],
        seed=int(model_seed),
    )
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], cfg["warmup"], cfg["steps"], cfg["final_lr"])
    rng = np.random.default_rng(int(data_seed))
    result = _common.train(
        model,
        opt,
        model.loss_and_grads,
        lambda step: task.batch(cfg["batch_size"], seed=rng),
        cfg["steps"],
        scheduler=sched,
        clip=1.0,
        desc="attention_attribution",
        disable_progress=args.no_progress,
        run=args.run,
        rngs={"data": rng},
    )
    heldout = task.batch(cfg["heldout"], seed=int(heldout_seed))
    start = time.perf_counter()
    model.to(np.float64)  # in place: a confident model's probability drops are small, measured in float64
    accuracy = float(np.mean(model(heldout.ids).argmax(axis=1) == heldout.labels))
    rho, top, tied = evaluate(model, heldout, cfg["eval_batch"])
    finite = {m: np.array([r for r in rho[m] if np.isfinite(r)]) for m in rho}
    median = {m: round(float(np.median(finite[m])), 4) for m in rho}
    return _common.report(
        "attention_attribution",
        args,
        model,
        result,
        cfg["batch_size"],
        time.perf_counter() - start,
        accuracy=accuracy,
        heldout_size=len(heldout),
        spearman=median,
        spearman_mean={m: round(float(finite[m].mean()), 4) for m in rho},
        undefined=({m: int(len(rho[m]) - len(finite[m])) for m in rho}),
        source_accuracy={m: round(float(np.mean(t == heldout.source)), 4) for m, t in top.items()},
        evidence_accuracy={
            m: round(float(np.mean((t == heldout.source) | (t == heldout.cue))), 4) for m, t in top.items()
        },
        tied_at_max={m: round(float(np.mean(t)), 4) for m, t in tied.items()},
        above_raw_attention={  # paired: the share of sequences where the method's rho beats the last layer's
            m: round(float(np.mean(np.array(r) > np.array(rho["raw_attention"]))), 4) for m, r in rho.items()
        },
        paper_spearman=PAPER,
        rollout_and_flow_beat_raw=bool(min(median["rollout"], median["flow"]) > median["raw_attention"]),
    )


if __name__ == "__main__":
    # run the imported module's main, so that a saved model's class is
    # attnc.experiments.attention_attribution.CLSClassifier (attnc.load finds it), not __main__'s
    from attnc.experiments.attention_attribution import main as _main

    _main()
