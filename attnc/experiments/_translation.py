"""What bahdanau_length and luong_comparison share: the synthetic language
pair (attnc.datasets.translation), a held-out set stratified by source
length, one recurrent encoder-decoder trained on it, greedy decoding, the
scores by length bucket (exact match, token accuracy, BLEU by sacrebleu,
perplexity) and the machine the run timed."""

from __future__ import annotations

import itertools

import numpy as np

import attnc
import attnc.models
from attnc.datasets import TranslationTask, translation_task
from attnc.models.rnn_seq2seq import AttentionKind

from . import _common

HELDOUT_SEED = 20150901  # the held-out sentences are the same for every --seed
EDGES = tuple(range(6, 62, 5))  # length buckets 6-10, 11-15, ..., 56-60 (a sentence has 6 words or more)
# what both experiments train with (each adds its steps and held-out size): 40,000 sentences,
# batches of 64, Adam at 3e-3 with 100 warm-up steps and a cosine decay to 5%, gradients
# clipped to norm 1, embeddings 32, hidden (and attention) size 64, local window D = 10
FULL = dict(
    train_size=40000,
    batch_size=64,
    lr=3e-3,
    warmup=100,
    final_lr=0.05,
    clip=1.0,
    embed_size=32,
    hidden_size=64,
    window=10.0,
)
QUICK = dict(FULL, train_size=400, steps=12, batch_size=16, warmup=3, embed_size=8, hidden_size=16)


def stratified(per_bucket: int, edges=EDGES, seed: int = HELDOUT_SEED) -> TranslationTask:
    """per_bucket test-split sentences of every length bucket [edges[i],
    edges[i + 1]), the first ones drawn (translation_task's draws are a prefix
    of a longer draw's), in bucket order."""
    lo, hi = edges[0], edges[-1] - 1
    n = 4 * per_bucket * (len(edges) - 1)
    while True:
        draw = translation_task(n, seed=seed, min_len=lo, max_len=hi, split="test")
        picks = [
            np.flatnonzero((draw.lengths >= a) & (draw.lengths < b))[:per_bucket] for a, b in itertools.pairwise(edges)
        ]
        if all(p.size == per_bucket for p in picks):
            return TranslationTask([draw.sources[i] for p in picks for i in p], "test")
        n *= 2


def bucket_labels(edges=EDGES) -> dict:
    """The buckets' lower and upper lengths and centres (the curves' x-axis)."""
    lo, hi = np.asarray(edges[:-1]), np.asarray(edges[1:]) - 1
    return {"lengths": ((lo + hi) / 2).tolist(), "length_lo": lo.tolist(), "length_hi": hi.tolist()}


def build(kind: AttentionKind, task: TranslationTask, cfg: dict, seed: int, input_feeding: bool = True):
    """A Seq2Seq of the run's sizes for the task."""
    return attnc.models.Seq2Seq(
        len(task.src_vocab),
        len(task.tgt_vocab),
        cfg["embed_size"],
        cfg["hidden_size"],
        kind,
        attention_size=cfg["hidden_size"],
        window=cfg["window"],
        input_feeding=input_feeding,
        seed=seed,
    )


def train(model, train_set: TranslationTask, cfg: dict, order_seed: int, args, desc: str) -> dict:
    """Train on train_set (reshuffled every epoch from order_seed: models given
    the same seed see the same sentences in the same order); _common.train's
    result."""
    steps = cfg["steps"]
    batches = _common.epoch_batches(train_set, cfg["batch_size"], order_seed)
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], cfg["warmup"], steps, cfg["final_lr"])
    return _common.train(
        model,
        opt,
        model.loss_and_grad,
        batches,
        steps,
        scheduler=sched,
        clip=cfg["clip"],
        desc=desc,
        disable_progress=args.no_progress,
        run=args.run,
    )


def decode(model, task: TranslationTask, batch_size: int = 256):
    """Greedy translations of every sentence, at most 5 words longer than the
    longest source (a target has its source's length): ids (n, L) int64, EOS
    after each row's end; batched by length (a row's tokens do not depend
    on the batch)."""
    order = np.argsort(task.lengths, kind="stable")
    rows: list = [None] * len(task)
    max_len = int(task.lengths.max(initial=0)) + 5
    for start in range(0, len(task), batch_size):
        idx = order[start : start + batch_size]
        b = task.batch(idx)
        tokens, _ = model.generate(b.src, b.src_lengths, max_len=max_len, bos=task.bos, eos=task.eos)
        for i, row in zip(idx, tokens):
            rows[i] = row
    width = max((r.size for r in rows), default=0)
    ids = np.full((len(task), width), task.eos, np.int64)
    for i, r in enumerate(rows):
        ids[i, : r.size] = r
    return ids


def token_nll(model, task: TranslationTask, batch_size: int = 256):
    """(summed negative log-likelihood, target tokens with EOS) per sentence,
    teacher-forced: the parts of the perplexity."""
    nll, count = np.zeros(len(task)), task.lengths + 1.0
    for start in range(0, len(task), batch_size):
        idx = np.arange(start, min(start + batch_size, len(task)))
        b = task.batch(idx)
        logp = attnc.nn.log_softmax(model(b.src, b.tgt_in, b.src_lengths).astype(np.float64))
        keep = b.tgt_out >= 0
        picked = np.take_along_axis(logp, np.where(keep, b.tgt_out, 0)[..., None], -1)[..., 0]
        nll[idx] = -(picked * keep).sum(1)
    return nll, count


def bleu(hypotheses: list, references: list) -> float:
    """Corpus BLEU (0-100) by sacrebleu: 4-grams, its default exponential
    smoothing, the words as they are (tokenize="none"; force=True: no warning
    about the final "." left as a word). Needs the sacrebleu
    package (``pip install attnc[experiments]``)."""
    try:
        from sacrebleu.metrics import BLEU
    except ImportError as err:
        raise ImportError("BLEU needs the sacrebleu package: pip install 'attnc[experiments]'") from err
    return float(BLEU(tokenize="none", force=True).corpus_score(hypotheses, [references]).score)


def scores(model, task: TranslationTask, edges=None) -> dict:
    """The model's scores on the task: over all of it, and with edges, per
    length bucket (lists in bucket order, None for an empty bucket):
    "exact_match", "token_accuracy" (greedy decoding), "bleu" (corpus BLEU of
    the greedy translations), "perplexity" (teacher-forced, per target word
    and EOS)."""
    ids = decode(model, task)
    hyps = task.decode(ids)
    exact, tokens = task.exact_match(ids), task.token_accuracy(ids)
    nll, count = token_nll(model, task)

    def measures(inside):
        if not inside.any():
            return dict.fromkeys(("exact_match", "token_accuracy", "bleu", "perplexity"))
        return {
            "exact_match": float(exact[inside].mean()),
            "token_accuracy": float(tokens[inside].mean()),
            "bleu": round(
                bleu([hyps[i] for i in np.flatnonzero(inside)], [task.targets[i] for i in np.flatnonzero(inside)]), 4
            ),
            "perplexity": float(np.exp(nll[inside].sum() / count[inside].sum())),
        }

    out = measures(np.ones(len(task), bool))
    if edges is not None:
        per = [measures((task.lengths >= a) & (task.lengths < b)) for a, b in itertools.pairwise(edges)]
        out.update({f"{k}_by_length": [p[k] for p in per] for k in out})
    return out


def machine() -> dict:
    """What the timings were measured on."""
    return {"threads": attnc.get_num_threads(), "cpu": _common.cpu_name()}
