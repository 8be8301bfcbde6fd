"""Neural Turing Machine training sequence: attnc.models.NTM against the same NTM in PyTorch (CPU).

    python benchmarks/ntm.py                  # full run, a minute or two
    python benchmarks/ntm.py --quick          # tiny sizes, seconds (the CI smoke test)
    python benchmarks/ntm.py --threads 1 --repeats 15 --json out.json

What is timed (float32): one training sequence of the copy task, forward and
backward through time with the gradient of every parameter, the issue's model
(LSTM controller of 100 units, memory 128 x 20, 1 read and 1 write head, 3
shifts, constant initial memory, head parameters clipped to ±20), input 9
(8 bits and a delimiter), output 8, sequence length 20 so T = 41 steps, the
same weights on both sides:
  rows:
    copy, B=1     one sequence, the case of the issue's target
    copy, B=16    16 sequences of the same length (information only)
  attnc  loss, grads = model.loss_and_grad(batch), model =
         attnc.models.NTM(9, 8, "lstm", 100, 128, 20, 1, 1, 3), batch an
         attnc.datasets.CopyTask(bits=8) batch (inputs, targets, mask)
  torch  the same model as torch modules: tests/reference/ntm_torch.py's
         TorchNTM (nn.LSTMCell controller, nn.Linear heads and output, the
         addressing, reads and writes in torch operations batched over rows and
         heads, a Python loop over the 41 steps), then
         F.binary_cross_entropy_with_logits over the scored steps and
         loss.backward(), every parameter's gradient reset to None before the
         step, as zero_grad does. Inputs are torch tensors made once, outside
         the timed step.
A check process compares attnc with torch on every row: the loss, every
parameter's gradient, the logits and the read and write weights of every
step, against the torch model run in float64 on the same float32 weights and
inputs; largest |attnc - torch| over max |torch| of each must be <= 1e-4.
torch's own float32 run is compared with the same reference and reported for
information (it is no tighter: over 41 steps the float32 rounding of either
side reaches ~1e-4 of the float64 result).

Process model, output and statistics are those of benchmarks/transformer.py,
whose helpers (and through them benchmarks/attention.py's) this file reuses:
attnc imported from a private copy of its package (unless --no-snapshot),
this process single-threaded, one forked child per (case, implementation,
round) at --threads threads (default: the machine's cores), rounds alternating
which implementation goes first, medians over all samples of all rounds,
"speed-up" = torch's median time / attnc's (> 1: attnc is faster), "per round"
the range of that ratio over the rounds' own medians, and a warning when other
processes kept the machine busy.

When attnc has no NTM yet, its column reads "not available" and the run goes
on. The exit status is 1 when a correctness check fails or a child errs, not
when a target is missed.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# The checkout this file lives in, when it is built, before an installed attnc: an editable
# install of another checkout (or worktree) would otherwise be the one measured.
if any((REPO / "attnc").glob("_core*")) and str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import transformer as tf  # benchmarks/transformer.py: timing, formatting, weights

_rel = tf._rel

common = tf.common  # benchmarks/attention.py: imports, forking, memory, load

np = torch = attnc = ref = None  # set by _import_libs(), after the thread count is known

# L sequence length (T = 2L + 1), bits (I = bits + 1, O = bits), C controller, N x M memory,
# R read and W write heads, K shifts
SIZES = {"L": 20, "bits": 8, "C": 100, "N": 128, "M": 20, "R": 1, "W": 1, "K": 3}
QUICK_SIZES = {"L": 3, "bits": 4, "C": 8, "N": 8, "M": 4, "R": 1, "W": 1, "K": 3}
# (label, batch, target key)
CASES = (("copy, B=1", 1, "ntm_train"), ("copy, B=16", 16, None))
TARGETS = {"ntm_train": 10.0}
TOLERANCE = 1e-4
CONTROLLER, MEMORY_INIT, CLIP = "lstm", "constant", 20.0
SEED = tf.SEED


# --------------------------------------------------------------------------- libraries
def _import_libs(snapshot):
    global np, torch, attnc, ref
    tf._import_libs(snapshot)
    np, torch, attnc = tf.np, tf.torch, tf.attnc
    try:  # attnc.models is imported by tf._import_libs
        importlib.import_module("attnc.datasets")
    except ImportError:
        pass
    ref = tf.reference("ntm_torch")


def have_ntm():
    return hasattr(getattr(getattr(attnc, "models", None), "NTM", None), "loss_and_grad")


# --------------------------------------------------------------------------- cases
def make_cases(sizes):
    return [
        {
            "label": label,
            "B": B,
            "target": target,
            "T": 2 * sizes["L"] + 1,
            "I": sizes["bits"] + 1,
            "O": sizes["bits"],
            **sizes,
        }
        for label, B, target in CASES
    ]


def shapes(case):
    """{state_dict key: shape}, as the spec lays the model out."""
    return ref.state_shapes(
        case["I"], case["O"], CONTROLLER, case["C"], case["N"], case["M"], case["R"], case["W"], case["K"], MEMORY_INIT
    )


def state(case):
    """float32 weights (matrices U(±1/sqrt(fan_in)), biases U(±0.1), read_init N(0, 0.5²),
    weight_init N(0, 1)), drawn per name, the same for both implementations."""
    return ref.random_state(shapes(case), seed=SEED, dtype=np.float32)


class _Batch:
    """inputs (B, T, bits+1), targets (B, T, bits), mask (B, T): the copy task's layout."""

    def __init__(self, inputs, targets, mask):
        self.inputs, self.targets, self.mask = inputs, targets, mask


def batch(case, seed=1):
    """A copy-task batch of one length: attnc.datasets.CopyTask's when it exists, else the
    same layout drawn here (L bit vectors, a delimiter step, L scored steps)."""
    B, L, bits = case["B"], case["L"], case["bits"]
    task = getattr(getattr(attnc, "datasets", None), "CopyTask", None)
    if task is not None:
        return task(bits=bits, min_len=1, max_len=max(L, 1)).batch(B, length=L, seed=seed, dtype=np.float32)
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, 2, (B, L, bits)).astype(np.float32)
    T = 2 * L + 1
    x = np.zeros((B, T, bits + 1), np.float32)
    x[:, :L, :bits] = seq
    x[:, L, bits] = 1
    y = np.zeros((B, T, bits), np.float32)
    y[:, L + 1 :] = seq
    mask = np.zeros((B, T), bool)
    mask[:, L + 1 :] = True
    return _Batch(x, y, mask)


def attnc_model(case):
    if not have_ntm():
        raise tf.NotAvailable("attnc.models.NTM")
    m = attnc.models.NTM(
        case["I"],
        case["O"],
        controller=CONTROLLER,
        controller_size=case["C"],
        memory_slots=case["N"],
        memory_width=case["M"],
        read_heads=case["R"],
        write_heads=case["W"],
        shifts=case["K"],
        memory_init=MEMORY_INIT,
        clip=CLIP,
        dtype=np.float32,
        seed=SEED,
    )
    got = {k: tuple(np.shape(v)) for k, v in m.state_dict().items()}
    want = shapes(case)
    if got != want:
        diff = sorted(set(got.items()) ^ set(want.items()))
        raise ValueError(f"attnc.models.NTM's state dict differs from the spec: {diff}")
    m.load_state_dict(state(case))
    return m


def torch_model(case, dtype=None):
    return ref.TorchNTM(
        state(case),
        controller=CONTROLLER,
        read_heads=case["R"],
        write_heads=case["W"],
        shifts=case["K"],
        memory_init_kind=MEMORY_INIT,
        clip=CLIP,
        dtype=torch.float32 if dtype is None else dtype,
    )


def _torch_inputs(b):
    return torch.from_numpy(b.inputs), torch.from_numpy(b.targets), torch.from_numpy(b.mask)


# --------------------------------------------------------------------------- builders
def build_train(impl, case):
    b = batch(case)
    if impl == "torch":
        m = torch_model(case).train()
        x, targets, mask = _torch_inputs(b)
        params = list(m.parameters())

        def step():
            for p in params:
                p.grad = None
            loss = m.loss(x, targets, mask)
            loss.backward()
            return loss.detach()

        return step
    m = attnc_model(case).train()
    return lambda: m.loss_and_grad(b)


# transformer.job_time (which transformer.measure forks) looks its builders up here
tf.BUILDERS.update({"ntm_train": build_train})


# --------------------------------------------------------------------------- check
def _torch_reference(case, b, dtype):
    """torch's loss, gradients, logits and read and write weights in dtype (the float32
    weights and inputs, cast)."""
    m = torch_model(case, dtype)
    x, targets, mask = (t.to(dtype) if t.is_floating_point() else t for t in _torch_inputs(b))
    loss = m.loss(x, targets, mask)
    loss.backward()
    grads = {n: p.grad.double().numpy() for n, p in m.named_parameters()}
    with torch.no_grad():
        logits, trace = m(x, return_trace=True)
    outs = {"logits": logits, "read weights": trace.read_weights, "write weights": trace.write_weights}
    return float(loss.detach()), grads, {k: v.double().numpy() for k, v in outs.items()}


def _rel_all(loss, grads, outs, ref_loss, ref_grads, ref_outs):
    rel = {"loss": abs(float(loss) - ref_loss) / max(abs(ref_loss), 1e-30)}
    for name, g in ref_grads.items():
        rel["grad " + name] = _rel(grads[name], g) if name in grads else float("inf")
    for name, o in ref_outs.items():
        rel[name] = _rel(outs[name], o)
    return rel


def job_check(cases, threads):
    """Child: for every case, attnc's (float32) loss, gradients, logits and read and write
    weights against torch's in float64 with the same float32 weights and inputs (relative
    differences); torch's own float32 run against the same, for information (over 41 steps
    the float32 rounding of either side grows to ~1e-4 of the float64 result)."""
    common._set_threads(threads, numpy_blas=False)
    res = {"cases": {}}
    for case in cases:
        if not have_ntm():
            continue
        b = batch(case)
        a_m = attnc_model(case)
        t64 = _torch_reference(case, b, torch.float64)
        t32 = _torch_reference(case, b, torch.float32)
        a_loss, a_grads = a_m.loss_and_grad(b)
        a_logits, a_trace = a_m(b.inputs, return_trace=True)
        a_outs = {"logits": a_logits, "read weights": a_trace.read_weights, "write weights": a_trace.write_weights}
        rel = _rel_all(a_loss, a_grads, a_outs, *t64)
        extra = sorted(set(a_grads) - set(t64[1]) - {"inputs"})
        if extra:
            rel["unexpected gradients " + ", ".join(extra)] = float("inf")
        rel_t32 = _rel_all(*t32, *t64)
        res["cases"][case["label"]] = {
            "loss_attnc": float(a_loss),
            "loss_torch": t32[0],
            "loss_torch64": t64[0],
            "rel": rel,
            "rel_torch32": rel_t32,
        }
    return res


# --------------------------------------------------------------------------- main
def main(argv=None):
    args, st = tf.parse_common("ntm", __doc__.split("\n\n")[0], argv)
    quick, repeats, rounds, threads = st["quick"], st["repeats"], st["rounds"], st["threads"]
    json_path, min_sample_s, warmup_s = st["json_path"], st["min_sample_s"], st["warmup_s"]
    sizes = QUICK_SIZES if quick else SIZES

    errors, failed_checks = [], []
    impls, parent_threads, load, t_start = tf.begin(_import_libs, not args.no_snapshot, threads, repeats, rounds, quick)
    cases = make_cases(sizes)
    c0 = cases[0]
    print(f"attnc from {common.SNAPSHOT_SRC or Path(attnc.__file__).parent}")
    print(
        f"copy task: length {c0['L']} (T = {c0['T']} steps), input {c0['I']}, output {c0['O']}; "
        f"{CONTROLLER} controller {c0['C']}, memory {c0['N']} x {c0['M']}, {c0['R']} read and {c0['W']} write "
        f"head(s), {c0['K']} shifts, memory_init {MEMORY_INIT}, clip {CLIP:g}"
    )
    result = {
        "benchmark": "NTM training sequence (attnc.models.NTM), attnc vs torch",
        "config": {
            "threads": threads,
            "quick": quick,
            "repeats": repeats,
            "rounds": rounds,
            "min_sample_s": min_sample_s,
            "warmup_s": warmup_s,
            "sizes": sizes,
            "batches": [c["B"] for c in cases],
            "controller": CONTROLLER,
            "memory_init": MEMORY_INIT,
            "clip": CLIP,
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
        print("\n== training sequence: forward + loss + backward of every parameter ==")
        tf.speed_head(14)
        rows = []
        for case in cases:
            got = tf.measure(
                "ntm_train",
                (case,),
                impls,
                threads,
                repeats,
                rounds,
                min_sample_s,
                warmup_s,
                errors,
                f"{case['label']} training sequence",
            )
            rel = check.get("cases", {}).get(case["label"], {}).get("rel")
            worst = tf.checked_worst(rel, case["label"], TOLERANCE, failed_checks)
            target = TARGETS.get(case["target"]) if case["target"] else None
            fields = tf.speed_row(case["label"], got, worst, target, 14)
            rows.append({"case": case["label"], "B": case["B"], "T": case["T"], **fields})
            summary.append((f"NTM {case['label']} training", fields["speedup"], target))
        result["train"] = {"rows": rows}
        if not have_ntm():
            print("attnc: not available (attnc.models.NTM)")
        print(
            f"check: largest relative difference from torch in float64 with the same float32 weights and inputs "
            f"(loss, every parameter's gradient, logits, read and write weights), tolerance {TOLERANCE:.0e}"
        )
        for case in cases:
            t32 = check.get("cases", {}).get(case["label"], {}).get("rel_torch32")
            if t32:
                name = max(t32, key=t32.get)
                print(f"  (information: torch's own float32 run, {case['label']}: {t32[name]:.1e} ({name}))")
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
        {"attnc_ntm": have_ntm(), "parent_threads_at_fork": parent_threads},
        json_path,
        width=30,
    )


if __name__ == "__main__":
    sys.exit(main())
