"""Recurrent encoder-decoder training step (issue 5): attnc.models.Seq2Seq against PyTorch (CPU).

    python benchmarks/seq2seq.py                  # full run, a minute or two
    python benchmarks/seq2seq.py --quick          # tiny sizes, seconds (the CI smoke test)
    python benchmarks/seq2seq.py --threads 1 --repeats 15 --json out.json

What is timed (float32, batch first): one training step of the date model of
issue 5, B = 64, source length S = 30 (ragged: lengths in [S/4, S], the first
S), T = 10 decoder steps, embeddings 32, hidden size 64, attention size 64,
source vocabulary 44 and target vocabulary 14 (attnc.datasets.dates'),
random token ids, every target token counted, the same weights on both sides:
  rows:
    Bahdanau      bidirectional encoder (He = 128), the case of issue 5's target
    Luong-general unidirectional encoder, input feeding (information only)
  attnc  loss, grads = model.loss_and_grad(batch), model =
         attnc.models.Seq2Seq(44, 14, 32, 64, attention, attention_size=64)
         in training mode, batch an attnc.datasets TextBatch
  torch  the same model as torch modules: tests/reference/seq2seq_ref.py's
         TorchSeq2Seq (nn.Embedding, nn.LSTM over pack_padded_sequence(...,
         enforce_sorted=False) / pad_packed_sequence, nn.Linear bridge, the
         decoder an nn.LSTMCell stepped in a Python loop with the attention
         written in torch operations, keys projected once), then
         F.cross_entropy(..., ignore_index=-100) and loss.backward(), every
         parameter's gradient reset to None before the step, as zero_grad does.
         Inputs are torch tensors made once, outside the timed step.
A check process compares attnc with torch on every row: the loss, every
parameter's gradient (training mode) and the eval-mode logits and alignments;
largest |attnc - torch| over max |torch| of each must be <= 1e-4.

Process model, output and statistics are those of benchmarks/transformer.py,
whose helpers (and through them benchmarks/attention.py's) this file reuses:
attnc imported from a private copy of its package (unless --no-snapshot),
this process single-threaded, one forked child per (case, implementation,
round) at --threads threads (default: the machine's cores), rounds alternating
which implementation goes first, medians over all samples of all rounds,
"speed-up" = torch's median time / attnc's (> 1: attnc is faster), "per round"
the range of that ratio over the rounds' own medians, and a warning when other
processes kept the machine busy.

When attnc has no Seq2Seq yet, its column reads "not available" and the run
goes on. The exit status is 1 when a correctness check fails or a child errs,
not when a target is missed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import transformer as tf  # benchmarks/transformer.py: timing, formatting, weights

_rel = tf._rel

common = tf.common  # benchmarks/attention.py: imports, forking, memory, load

np = torch = attnc = ref = None  # set by _import_libs(), after the thread count is known

SIZES = {"B": 64, "S": 30, "T": 10, "E": 32, "H": 64, "A": 64, "Vs": 44, "Vt": 14}
QUICK_SIZES = {"B": 4, "S": 7, "T": 4, "E": 8, "H": 8, "A": 8, "Vs": 12, "Vt": 9}
# (label, attention, target key)
CASES = (("Bahdanau", "bahdanau", "bahdanau_train"), ("Luong-general", "luong-general", None))
TARGETS = {"bahdanau_train": 3.0}
TOLERANCE = 1e-4
SEED = tf.SEED
BOS = 1


# --------------------------------------------------------------------------- libraries
def _import_libs(snapshot):
    global np, torch, attnc, ref
    tf._import_libs(snapshot)
    np, torch, attnc = tf.np, tf.torch, tf.attnc
    ref = tf.reference("seq2seq_ref")


def have_seq2seq():
    return hasattr(getattr(getattr(attnc, "models", None), "Seq2Seq", None), "loss_and_grad")


# --------------------------------------------------------------------------- cases
def make_cases(sizes):
    return [{"label": label, "attention": kind, "target": target, **sizes} for label, kind, target in CASES]


def shapes(case):
    """{state_dict key: shape}, as the spec lays the model out."""
    return ref.state_shapes(case["Vs"], case["Vt"], case["E"], case["H"], case["attention"], attention_size=case["A"])


def state(case):
    """float32 weights (embeddings N(0, 1), matrices U(±1/sqrt(fan_in)), vectors U(±0.1)),
    drawn per name, the same for both implementations."""
    return ref.random_state(shapes(case), seed=SEED, dtype=np.float32)


def lengths(case, seed=3):
    B, S = case["B"], case["S"]
    lens = np.random.default_rng(seed).integers(max(1, S // 4), S + 1, B).astype(np.int64)
    lens[0] = S
    return lens


def batch(case, seed=1):
    """An attnc.datasets.TextBatch of random ids: src (PAD = 0 after each row's
    length), tgt_in (BOS first), tgt_out (every token counted)."""
    from attnc.datasets.vocab import TextBatch

    rng = np.random.default_rng(seed)
    B, S, T = case["B"], case["S"], case["T"]
    lens = lengths(case)
    pad = np.arange(S)[None, :] >= lens[:, None]
    src = np.where(pad, 0, rng.integers(3, case["Vs"], (B, S))).astype(np.int64)
    tgt_in = rng.integers(3, case["Vt"], (B, T)).astype(np.int64)
    tgt_in[:, 0] = BOS
    tgt_out = rng.integers(2, case["Vt"], (B, T)).astype(np.int64)
    return TextBatch(src, pad, tgt_in, tgt_out, np.zeros((B, T), bool), lens, np.full(B, T, np.int64))


def attnc_model(case):
    if not have_seq2seq():
        raise tf.NotAvailable("attnc.models.Seq2Seq")
    m = attnc.models.Seq2Seq(
        case["Vs"],
        case["Vt"],
        case["E"],
        case["H"],
        case["attention"],
        attention_size=case["A"],
        dtype=np.float32,
        seed=SEED,
    )
    got = {k: tuple(np.shape(v)) for k, v in m.state_dict().items()}
    want = shapes(case)
    if got != want:
        diff = sorted(set(got.items()) ^ set(want.items()))
        raise ValueError(f"attnc.models.Seq2Seq's state dict differs from the spec: {diff}")
    m.load_state_dict(state(case))
    return m


def torch_model(case):
    return ref.TorchSeq2Seq(state(case), case["attention"], dtype=torch.float32)


def _torch_inputs(b):
    return (
        torch.from_numpy(b.src),
        torch.from_numpy(b.src_lengths),
        torch.from_numpy(b.tgt_in),
        torch.from_numpy(b.tgt_out),
    )


# --------------------------------------------------------------------------- builders
def build_train(impl, case):
    b = batch(case)
    if impl == "torch":
        m = torch_model(case).train()
        src, lens, tgt_in, tgt_out = _torch_inputs(b)
        params = list(m.parameters())

        def step():
            for p in params:
                p.grad = None
            loss = m.loss(src, lens, tgt_in, tgt_out)
            loss.backward()
            return loss.detach()

        return step
    m = attnc_model(case).train()
    return lambda: m.loss_and_grad(b)


# transformer.job_time (which transformer.measure forks) looks its builders up here
tf.BUILDERS.update({"seq2seq_train": build_train})


# --------------------------------------------------------------------------- check
def job_check(cases, threads):
    """Child: for every case, attnc's loss and gradients (training mode) and
    eval logits and alignments against torch's (relative differences)."""
    common._set_threads(threads, numpy_blas=False)
    res = {"cases": {}}
    for case in cases:
        if not have_seq2seq():
            continue
        b = batch(case)
        t_m = torch_model(case)
        a_m = attnc_model(case)
        t_loss, t_grads = t_m.train().loss_and_grad(*_torch_inputs(b))
        a_loss, a_grads = a_m.train().loss_and_grad(b)
        rel = {"loss": abs(float(a_loss) - t_loss) / max(abs(t_loss), 1e-30)}
        for name, g in t_grads.items():
            rel["grad " + name] = _rel(a_grads[name], g) if name in a_grads else float("inf")
        extra = sorted(set(a_grads) - set(t_grads))
        if extra:
            rel["unexpected gradients " + ", ".join(extra)] = float("inf")
        t_m.eval()
        a_m.eval()
        with torch.no_grad():
            t_logits, t_al = t_m(*_torch_inputs(b)[:3], return_alignments=True)
        a_logits, a_al = a_m(b.src, b.tgt_in, b.src_lengths, return_alignments=True)
        rel["eval logits"] = _rel(a_logits, t_logits.numpy())
        rel["eval alignments"] = _rel(a_al, t_al.numpy())
        res["cases"][case["label"]] = {"loss_attnc": float(a_loss), "loss_torch": t_loss, "rel": rel}
    return res


# --------------------------------------------------------------------------- main
def main(argv=None):
    args, st = tf.parse_common("seq2seq", __doc__.split("\n\n")[0], argv)
    quick, repeats, rounds, threads = st["quick"], st["repeats"], st["rounds"], st["threads"]
    json_path, min_sample_s, warmup_s = st["json_path"], st["min_sample_s"], st["warmup_s"]
    sizes = QUICK_SIZES if quick else SIZES

    errors, failed_checks = [], []
    impls, parent_threads, load, t_start = tf.begin(_import_libs, not args.no_snapshot, threads, repeats, rounds, quick)
    cases = make_cases(sizes)
    lens = lengths(cases[0])
    print(
        f"B={sizes['B']} S={sizes['S']} T={sizes['T']} embed={sizes['E']} hidden={sizes['H']} "
        f"attention={sizes['A']} vocab {sizes['Vs']} -> {sizes['Vt']}, batch first; source lengths in "
        f"[{max(1, sizes['S'] // 4)}, {sizes['S']}], mean {float(np.mean(lens)):.1f}"
    )
    result = {
        "benchmark": "recurrent encoder-decoder training step (attnc.models.Seq2Seq), attnc vs torch",
        "config": {
            "threads": threads,
            "quick": quick,
            "repeats": repeats,
            "rounds": rounds,
            "min_sample_s": min_sample_s,
            "warmup_s": warmup_s,
            "sizes": sizes,
            "source_lengths": lens.tolist(),
            "targets_speedup": TARGETS,
            "tolerance_relative": TOLERANCE,
            "statistic": "median over samples of all rounds",
        },
    }
    summary = []

    check = {}
    if torch is not None:
        check = tf.forked_check(job_check, errors, "check", cases, threads)
    result["check"] = check

    if torch is not None:
        print("\n== training step: forward + loss + backward of every parameter ==")
        tf.speed_head(16)
        rows = []
        for case in cases:
            got = tf.measure(
                "seq2seq_train",
                (case,),
                impls,
                threads,
                repeats,
                rounds,
                min_sample_s,
                warmup_s,
                errors,
                f"{case['label']} training step",
            )
            rel = check.get("cases", {}).get(case["label"], {}).get("rel")
            worst = tf.checked_worst(rel, case["label"], TOLERANCE, failed_checks)
            target = TARGETS.get(case["target"]) if case["target"] else None
            fields = tf.speed_row(case["label"], got, worst, target, 16)
            rows.append({"case": case["label"], "attention": case["attention"], **fields})
            summary.append((f"{case['label']} training step", fields["speedup"], target))
        result["train"] = {"rows": rows}
        if not have_seq2seq():
            print("attnc: not available (attnc.models.Seq2Seq)")
        print(
            f"check: largest relative difference from torch (loss, every parameter's gradient, eval logits "
            f"and alignments), tolerance {TOLERANCE:.0e}"
        )
    else:
        print("torch is not installed: nothing to compare")

    # ---- summary
    elapsed = time.perf_counter() - t_start
    others = common._load_share(load, elapsed)
    return tf.finish(
        result,
        summary,
        quick,
        errors,
        failed_checks,
        load,
        others,
        elapsed,
        {"attnc_seq2seq": have_seq2seq(), "parent_threads_at_fork": parent_threads},
        json_path,
        width=30,
    )


if __name__ == "__main__":
    sys.exit(main())
