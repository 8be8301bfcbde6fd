"""Pointer network (attnc.models.PointerNet): training step and beam-search decoding,
attnc against the same network in PyTorch (CPU).

    python benchmarks/pointer.py                  # full run, a minute or two
    python benchmarks/pointer.py --quick          # tiny sizes, seconds (the CI smoke test)
    python benchmarks/pointer.py --threads 1 --repeats 15 --json out.json

What is timed (float32): the pointer network of Vinyals et al. (2015) on
TSP-like instances, B = 128 instances of n = 10 points drawn uniformly in the
unit square (input size 2), hidden size 128, the "tour" constraint, the same
weights on both sides:
  1. training step, teacher forcing on random permutation targets: forward,
     the mean negative log-likelihood of the n target steps and the end step,
     the gradient of every parameter.
       attnc  loss, grads = model.loss_and_grad(batch, constraint="tour"),
              model = attnc.models.PointerNet(2, 128), batch (inputs,
              lengths, targets)
       torch  tests/reference/pointer_torch.py's TorchPointerNet
              (torch.nn.LSTM(batch_first=True) encoder and decoder, nn.Linear
              W1, W2, v, the masked log-softmax in torch operations, batched
              over the whole sequence), .loss(...) then loss.backward(),
              every parameter's gradient reset to None before the step, as
              zero_grad does.
  2. beam search of width 10 under the "tour" constraint:
       attnc  model.generate(inputs, constraint="tour", beam_size=10)
              (decoding in C; it also recomputes the pointer distributions
              of the decoded sequences)
       torch  TorchPointerNet.beam_search(...): a Python loop over the n + 1
              steps, batched over the 128 x 10 hypotheses (one nn.LSTM step,
              masked log-softmax, topk, reordering by gather), under
              torch.no_grad().
The training step's matrix products are counted and set against the
machine's float32 matrix-product rate, measured in the same run (numpy's and
torch's sgemm on the recurrent step's shape, (B, H) x (H, 4H), and on a
2048-cube, the best rate seen being the practical peak): per LSTM 3 x 2 B
(n + 1) (D + H) 4H (forward, the state's and input's gradients, the weights'),
and W1, W2's projections 3 x 2 B (n + 1) H H each. The additive score's tanh
and every gate's sigmoid are not counted, so the time these products would
take at the peak is a floor under any implementation's step; the table gives
each side's rate against it, and the share of the peak a 3x speed-up would
need.
A check process compares attnc with torch on the same float32 weights and
inputs, torch running in float64: the training loss and every parameter's
gradient; the decoded tours' log-probabilities (under torch's float64
teacher-forced forward) against torch's float64 beam search's best, attnc's
reported log_probs against the same, and that every row is a closed tour.
Largest |attnc - torch| over max |torch| of each: attnc's float32 model (the
one timed) within 1e-2 for the gradients (the decoder's gradients are sums of
many cancelling terms: torch's own float32 run is ~1e-3 off too, and is
reported) and 1e-4 for decoding; attnc run in float64 within 1e-9, with the
very same tours as torch's float64 beam search. The share of instances for
which attnc's float32 decoder chose torch's tour is reported (an untrained
model has near-ties that float32 rounding settles either way).

Process model, output and statistics are those of benchmarks/transformer.py,
whose helpers (and through them benchmarks/attention.py's) this file reuses:
attnc imported from a private copy of its package (unless --no-snapshot),
this process single-threaded, one forked child per (case, implementation,
round) at --threads threads (default: the machine's cores), rounds alternating
which implementation goes first, medians over all samples of all rounds,
"speed-up" = torch's median time / attnc's (> 1: attnc is faster), "per round"
the range of that ratio over the rounds' own medians, and a warning when other
processes kept the machine busy.

When attnc has no PointerNet yet, its column reads "not available" and the run
goes on. The exit status is 1 when a correctness check fails or a child errs,
not when a target is missed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# The checkout this file lives in, when it is built, before an installed attnc: an editable
# install of another checkout (or worktree) would otherwise be the one measured.
if any((REPO / "attnc").glob("_core*")) and str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import transformer as tf  # benchmarks/transformer.py: timing, formatting, weights

_f, _rel = tf._f, tf._rel

common = tf.common  # benchmarks/attention.py: imports, forking, memory, load

np = torch = attnc = ref = None  # set by _import_libs(), after the thread count is known

# B instances of n points in the plane (D = 2), H hidden units, K beam width
SIZES = {"B": 128, "n": 10, "D": 2, "H": 128, "K": 10}
QUICK_SIZES = {"B": 8, "n": 5, "D": 2, "H": 16, "K": 3}
CONSTRAINT = "tour"
TARGETS = {"pointer_train": 3.0, "pointer_beam": 3.0}
TOLERANCE = 1e-9  # attnc in float64 against torch in float64
TOLERANCE32 = {"train": 1e-2, "beam": 1e-4}  # the timed float32 model against torch in float64
SEED = tf.SEED


# --------------------------------------------------------------------------- libraries
def _import_libs(snapshot):
    global np, torch, attnc, ref
    tf._import_libs(snapshot)
    np, torch, attnc = tf.np, tf.torch, tf.attnc
    ref = tf.reference("pointer_torch")  # attnc.models is imported by tf._import_libs


def have_pointer():
    cls = getattr(getattr(attnc, "models", None), "PointerNet", None)
    return hasattr(cls, "loss_and_grad") and hasattr(cls, "generate")


# --------------------------------------------------------------------------- the case
def state(sz):
    """float32 weights U(±1/sqrt(H)) for the LSTMs and W1, W2, v; start and end U(-1, 1)."""
    return ref.random_state(sz["D"], sz["H"], seed=SEED, dtype=np.float32)


def batch(sz, seed=1):
    """TSP-like instances: B x n points uniform in the unit square, random permutation
    targets (every instance has all n points: lengths n)."""
    rng = np.random.default_rng(seed)
    B, n = sz["B"], sz["n"]
    x = rng.random((B, n, sz["D"]), dtype=np.float32)
    targets = np.stack([rng.permutation(n) for _ in range(B)]).astype(np.int64)
    return SimpleNamespace(inputs=x, lengths=np.full(B, n, np.int64), targets=targets)


def attnc_model(sz):
    if not have_pointer():
        raise tf.NotAvailable("attnc.models.PointerNet")
    m = attnc.models.PointerNet(sz["D"], sz["H"], dtype=np.float32, seed=SEED)
    got = {k: tuple(np.shape(v)) for k, v in m.state_dict().items()}
    want = ref.state_shapes(sz["D"], sz["H"])
    if got != want:
        diff = sorted(set(got.items()) ^ set(want.items()))
        raise ValueError(f"attnc.models.PointerNet's state dict differs from the reference's: {diff}")
    m.load_state_dict(state(sz))
    return m


def torch_model(sz, dtype=None):
    return ref.TorchPointerNet.from_state(state(sz), dtype=torch.float32 if dtype is None else dtype)


def train_flops(sz):
    """The matrix products of one training step (see the module docstring)."""
    B, n, D, H = sz["B"], sz["n"], sz["D"], sz["H"]
    T = n + 1  # the encoder reads the end token and n points, the decoder start and n points
    lstm = 3 * 2 * B * T * (D + H) * 4 * H
    projections = 3 * 2 * B * T * H * H
    return 2 * lstm + 2 * projections


def product_floor(sz, threads, quick, errors):
    """{"peak": best sgemm GFLOP/s seen, "rates": {lib shape: GFLOP/s}} from
    benchmarks/transformer.py's sgemm job, numpy and torch each in a child."""
    B, H = sz["B"], sz["H"]
    sq = 256 if quick else 2048
    rates = {}
    for lib in ("numpy", "torch") if torch is not None else ("numpy",):
        res = common.run_forked(tf.job_sgemm, lib, [(B, H, 4 * H), (sq, sq, sq)], threads, 3 if quick else 7)
        if res["ok"]:
            rates.update({k: v["gflops_best"] for k, v in res["result"].items()})
        else:
            errors.append(f"sgemm {lib}: {res['error']}")
    return {"peak": max(rates.values(), default=None), "rates": rates}


def print_floor(sz, got, floor):
    """The training step's products against the sgemm peak; returns the JSON fields."""
    fl, peak = train_flops(sz), floor["peak"]
    rates = ", ".join(f"{k} {v:.0f}" for k, v in floor["rates"].items())
    print(f"products: {fl / 1e9:.3g} GFLOP per step; sgemm GFLOP/s (best of repeats): {rates}")
    out = {"gflop": fl / 1e9, "sgemm_gflops": floor["rates"], "sgemm_peak_gflops": peak}
    if not peak:
        return out
    floor_ms = fl / peak / 1e6
    print(f"  at the peak ({peak:.0f} GFLOP/s) the products alone take {floor_ms:.3g} ms")
    for impl in ("attnc", "torch"):
        g = got.get(impl)
        if tf._ok(g):
            rate = fl / g["median_s"] / 1e9
            out[f"{impl}_pct_peak"] = 100 * rate / peak
            print(f"  {impl}: {rate:.0f} GFLOP/s of products, {100 * rate / peak:.0f}% of the peak")
    t = got.get("torch")
    if tf._ok(t):
        need = 100 * TARGETS["pointer_train"] * floor_ms / (t["median_s"] * 1e3)
        out["pct_peak_for_target"] = need
        print(
            f"  {TARGETS['pointer_train']:.0f}x torch ({t['median_s'] * 1e3 / TARGETS['pointer_train']:.2f} ms)"
            f" needs the step's products at {need:.0f}% of the peak, with nothing else in the step"
        )
    return out


# --------------------------------------------------------------------------- builders
def build_train(impl, sz):
    b = batch(sz)
    if impl == "torch":
        m = torch_model(sz).train()
        x = torch.from_numpy(b.inputs)
        params = list(m.parameters())

        def step():
            for p in params:
                p.grad = None
            loss = m.loss(x, b.targets, None, CONSTRAINT)
            loss.backward()
            return loss.detach()

        return step
    m = attnc_model(sz).train()
    return lambda: m.loss_and_grad(b, constraint=CONSTRAINT)


def build_beam(impl, sz):
    b = batch(sz)
    K = sz["K"]
    if impl == "torch":
        m = torch_model(sz).eval()
        x = torch.from_numpy(b.inputs)
        return lambda: m.beam_search(x, None, CONSTRAINT, beam_size=K)
    m = attnc_model(sz).eval()
    return lambda: m.generate(b.inputs, constraint=CONSTRAINT, beam_size=K)


# transformer.job_time (which transformer.measure forks) looks its builders up here
tf.BUILDERS.update({"pointer_train": build_train, "pointer_beam": build_beam})


# --------------------------------------------------------------------------- check
def attnc_model64(sz):
    """attnc's model in float64 on the same (float32) weights."""
    m = attnc.models.PointerNet(sz["D"], sz["H"], dtype=np.float64, seed=SEED)
    m.load_state_dict({k: v.astype(np.float64) for k, v in state(sz).items()})
    return m


def _torch_train(sz, b, dtype):
    m = torch_model(sz, dtype)
    loss = m.loss(torch.from_numpy(b.inputs).to(dtype), b.targets, None, CONSTRAINT)
    loss.backward()
    return float(loss.detach()), {n: p.grad.double().numpy() for n, p in m.named_parameters()}


def _rel_train(loss, grads, ref_loss, ref_grads):
    rel = {"loss": abs(float(loss) - ref_loss) / max(abs(ref_loss), 1e-30)}
    for name, g in ref_grads.items():
        rel["grad " + name] = _rel(grads[name], g) if name in grads else float("inf")
    extra = sorted(set(grads) - set(ref_grads))
    if extra:
        rel["unexpected gradients " + ", ".join(extra)] = float("inf")
    return rel


def _rel_beam(out, n, a_score, best):
    """The decoded tours' log-probabilities (a_score, torch's float64 forward) against
    torch's float64 beam search's best, attnc's reported log_probs against a_score, and
    whether every row is a closed tour of its n points."""
    tours = out.indices[:, :n]
    closed = out.indices.shape[1] == n + 1 and bool((out.indices[:, n] == out.indices[:, 0]).all())
    valid = all(sorted(row) == list(range(n)) for row in tours)
    scale = max(float(np.abs(best.score).max()), 1e-30)
    return {
        "tour log-probability vs torch beam": float(np.abs(a_score - best.score).max()) / scale,
        "reported log_probs vs forward": float(np.abs(out.log_probs.astype(np.float64).sum(1) - a_score).max()) / scale,
        "valid closed tours": 0.0 if (valid and closed) else float("inf"),
    }


def job_check(sz, threads):
    """Child: attnc against torch in float64 on the same float32 weights and inputs
    (training loss and gradients; beam search tours, which must be identical), and
    attnc's float32 model, the one timed, against the same float64 torch (torch's own
    float32 run for information: the decoder's gradients are sums of many cancelling
    terms, and float32 rounding of either side reaches ~1e-3 of their size)."""
    common._set_threads(threads, numpy_blas=False)
    res = {}
    if not have_pointer():
        return res
    b = batch(sz)
    n, K = sz["n"], sz["K"]
    a32, a64 = attnc_model(sz), attnc_model64(sz)
    t64 = _torch_train(sz, b, torch.float64)
    t32 = _torch_train(sz, b, torch.float32)
    b64 = SimpleNamespace(inputs=b.inputs.astype(np.float64), lengths=b.lengths, targets=b.targets)
    l64, g64 = a64.loss_and_grad(b64, constraint=CONSTRAINT)
    l32, g32 = a32.loss_and_grad(b, constraint=CONSTRAINT)
    res["train"] = {
        "loss_attnc": float(l32),
        "loss_torch": t32[0],
        "loss_torch64": t64[0],
        "rel64": _rel_train(l64, g64, *t64),
        "rel32": _rel_train(l32, g32, *t64),
        "rel_torch32": _rel_train(*t32, *t64),
    }

    tm64 = torch_model(sz, torch.float64)
    x64 = b64.inputs
    best64 = tm64.beam_search(x64, None, CONSTRAINT, beam_size=K)
    best32 = torch_model(sz).beam_search(b.inputs, None, CONSTRAINT, beam_size=K)
    o64 = a64.generate(x64, constraint=CONSTRAINT, beam_size=K)
    o32 = a32.generate(b.inputs, constraint=CONSTRAINT, beam_size=K)
    s64, _ = ref.sequence_scores(tm64, x64, None, o64.indices[:, :n], CONSTRAINT)
    s32, _ = ref.sequence_scores(tm64, x64, None, o32.indices[:, :n], CONSTRAINT)
    rel64 = _rel_beam(o64, n, s64, best64)
    rel64["share of tours differing"] = float((o64.indices[:, :n] != best64.indices).any(1).mean())
    res["beam"] = {
        "rel64": rel64,
        "rel32": _rel_beam(o32, n, s32, best64),
        "same_tour_float32_vs_torch64": float((o32.indices[:, :n] == best64.indices).all(1).mean()),
        "same_tour_torch32_vs_torch64": float((best32.indices == best64.indices).all(1).mean()),
        "mean_log_prob_attnc32": float(s32.mean()),
        "mean_log_prob_torch64": float(best64.score.mean()),
    }
    return res


# --------------------------------------------------------------------------- main
SECTIONS = (
    ("pointer_train", "train", "1. training step: forward + loss + backward of every parameter", "training step"),
    ("pointer_beam", "beam", "2. beam-search decoding", "beam decoding"),
)


def main(argv=None):
    args, st = tf.parse_common("pointer", __doc__.split("\n\n")[0], argv)
    quick, repeats, rounds, threads = st["quick"], st["repeats"], st["rounds"], st["threads"]
    json_path, min_sample_s, warmup_s = st["json_path"], st["min_sample_s"], st["warmup_s"]
    sz = QUICK_SIZES if quick else SIZES

    errors, failed_checks = [], []
    impls, parent_threads, load, t_start = tf.begin(_import_libs, not args.no_snapshot, threads, repeats, rounds, quick)
    print(f"attnc from {common.SNAPSHOT_SRC or Path(attnc.__file__).parent}")
    print(
        f"{sz['B']} instances of {sz['n']} points in the unit square, hidden size {sz['H']}, constraint "
        f"{CONSTRAINT!r}; training on random permutation targets, beam width {sz['K']}"
    )
    result = {
        "benchmark": "pointer network (attnc.models.PointerNet) training step and beam search, attnc vs torch",
        "config": {
            "threads": threads,
            "quick": quick,
            "repeats": repeats,
            "rounds": rounds,
            "min_sample_s": min_sample_s,
            "warmup_s": warmup_s,
            "sizes": sz,
            "constraint": CONSTRAINT,
            "targets_speedup": TARGETS,
            "tolerance_relative_float64": TOLERANCE,
            "tolerance_relative_float32": TOLERANCE32,
            "statistic": "median over samples of all rounds",
        },
    }
    summary = []

    check = {}
    if torch is not None:
        check = tf.forked_check(job_check, errors, "check", sz, threads)
    result["check"] = check
    floor = product_floor(sz, threads, quick, errors)

    if torch is None:
        print("torch is not installed: nothing to compare")
    else:
        for kind, key, title, label in SECTIONS:
            title = title if kind != "pointer_beam" else f"{title}, beam width {sz['K']}"
            print(f"\n== {title} ==")
            tf.speed_head(22, 10, 10)
            case = f"B={sz['B']}, n={sz['n']}"
            got = tf.measure(
                kind, (sz,), impls, threads, repeats, rounds, min_sample_s, warmup_s, errors, f"{label} {case}"
            )
            chk = check.get(key, {})
            worst = tf.checked_worst(chk.get("rel32"), f"{label} (float32)", TOLERANCE32[key], failed_checks)
            worst64 = tf.checked_worst(chk.get("rel64"), f"{label} (float64)", TOLERANCE, failed_checks)
            target = TARGETS[kind]
            fields = tf.speed_row(case, got, worst, target, 22, 10, 10)
            result[key] = {
                "rows": [
                    {
                        "case": case,
                        **fields,
                        "check_worst_float64": None if worst64 is None else {"name": worst64[0], "rel": worst64[1]},
                    }
                ]
            }
            summary.append((f"pointer {label}", fields["speedup"], target))
            if not have_pointer():
                print("attnc: not available (attnc.models.PointerNet)")
            what = (
                "the loss and every parameter's gradient"
                if key == "train"
                else "the decoded tours' log-probabilities (torch's float64 forward) against torch's float64 beam "
                "search's best, attnc's reported log_probs, closed tours"
            )
            print(
                f"check: {what}; largest relative difference of the float32 model from torch in float64 on the "
                f"same float32 weights and inputs (tolerance {TOLERANCE32[key]:.0e}): "
                f"{_f(worst[1] if worst else None, '{:.1e}', 0)}"
                f"{f' ({worst[0]})' if worst else ''}"
            )
            print(
                f"  attnc in float64 against torch in float64 (tolerance {TOLERANCE:.0e}"
                f"{', and the very same tours' if key == 'beam' else ''}): "
                f"{_f(worst64[1] if worst64 else None, '{:.1e}', 0)}{f' ({worst64[0]})' if worst64 else ''}"
            )
            if key == "train" and chk.get("rel_torch32"):
                t32 = chk["rel_torch32"]
                name = max(t32, key=t32.get)
                print(f"  (information: torch's own float32 run: {t32[name]:.1e} ({name}))")
            if key == "train":
                result[key]["products"] = print_floor(sz, got, floor)
            if key == "beam" and chk:
                print(
                    f"  (information: attnc float32 chose torch float64's tour for "
                    f"{100 * chk['same_tour_float32_vs_torch64']:.1f}% of instances, torch float32 for "
                    f"{100 * chk['same_tour_torch32_vs_torch64']:.1f}% (near-ties of an untrained model); mean "
                    f"log-probability {chk['mean_log_prob_attnc32']:.6f} attnc float32, "
                    f"{chk['mean_log_prob_torch64']:.6f} torch float64)"
                )

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
        {"attnc_pointer": have_pointer(), "parent_threads_at_fork": parent_threads},
        json_path,
        width=30,
    )


if __name__ == "__main__":
    sys.exit(main())
