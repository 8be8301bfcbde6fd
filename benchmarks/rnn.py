"""Recurrent layers (LSTM, GRU): attnc against PyTorch (CPU) in one run.

    python benchmarks/rnn.py                  # full run, a few minutes
    python benchmarks/rnn.py --quick          # tiny sizes, seconds (the CI smoke test)
    python benchmarks/rnn.py --threads 1 --repeats 15 --json out.json

What is timed (float32, batch first, B = 64, T = 50, input size 256, hidden
size 256, the same weights on both sides, no initial state):
  rows, for LSTM and GRU each:
    1 layer                       the case of issue 5's target
    2 layers bidirectional        an extra row (dropout 0)
    ragged lengths, 1 layer       lengths drawn in [T/5, T] (the first is T):
                                    attnc  module(x, lengths=lengths)
                                    torch  pack_padded_sequence(x, lengths,
                                           batch_first=True, enforce_sorted=False),
                                           the module, pad_packed_sequence(...,
                                           total_length=T), packing included
  1. forward, eval mode:
       attnc  attnc.nn.LSTM(...)(x) / attnc.nn.GRU(...)(x)
       torch  torch.nn.LSTM(..., batch_first=True)(x) under torch.inference_mode()
  2. forward + backward, training mode (the gradient of the input and of
     every parameter, none of the final states'):
       attnc  (out, states), pull = attnc.vjp(module, x); pull(dout, None)
       torch  out, states = module(x); out.backward(dout), x a leaf with
              requires_grad, parameter and input gradients reset to None
              before every step, as zero_grad does.
  GFLOP/s count the matrix products only: per layer and direction
  2 * (valid steps) * (input width + H) * G, G = 4H (LSTM) or 3H (GRU);
  forward + backward = 3 x that.
  A check process compares every case's outputs (output, h_n, c_n) and
  gradients (input, every parameter) with torch's: largest |attnc - torch| over
  max |torch| must be <= 1e-4. It also records which of torch's operators ran
  (whether torch used oneDNN's RNN kernel), for information.

Process model, output and statistics are those of benchmarks/transformer.py,
whose helpers (and through them benchmarks/attention.py's) this file reuses:
attnc imported from a private copy of its package (unless --no-snapshot),
this process single-threaded, one forked child per (case, implementation,
round) at --threads threads (default: the machine's cores), rounds alternating
which implementation goes first, medians over all samples of all rounds,
"speed-up" = torch's median time / attnc's (> 1: attnc is faster), "per round"
the range of that ratio over the rounds' own medians, and a warning when other
processes kept the machine busy.

When attnc has no LSTM or GRU yet, its column reads "not available" and the
run goes on. The exit status is 1 when a correctness check fails or a child
errs, not when a target is missed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# The checkout this file lives in, when it is built, before an installed attnc: an editable
# install of another checkout (or worktree) would otherwise be the one measured.
ROOT = HERE.parent
if any((ROOT / "attnc").glob("_core*")) and str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))

import transformer as tf  # benchmarks/transformer.py: timing, formatting, weights

_f, _ok, _range, _rel, _verdict = tf._f, tf._ok, tf._range, tf._rel, tf._verdict
_round_speedups, _speedup, _status = tf._round_speedups, tf._speedup, tf._status

common = tf.common  # benchmarks/attention.py: imports, forking, memory, load

np = torch = attnc = None  # set by _import_libs(), after the thread count is known

SIZES = {"B": 64, "T": 50, "I": 256, "H": 256}
QUICK_SIZES = {"B": 4, "T": 6, "I": 16, "H": 16}
CELLS = ("LSTM", "GRU")
# (label suffix, layers, bidirectional, ragged)
VARIANTS = (("", 1, False, False), (", 2 layers bidir", 2, True, False), (", ragged lengths", 1, False, True))
TARGETS = {"lstm_train": 1.0}
TOLERANCE = 1e-4
SEED = tf.SEED


# --------------------------------------------------------------------------- libraries
def _import_libs(snapshot):
    global np, torch, attnc
    tf._import_libs(snapshot)
    np, torch, attnc = tf.np, tf.torch, tf.attnc


def have_cell(cell):
    return hasattr(getattr(attnc, "nn", None), cell)


# --------------------------------------------------------------------------- cases
def make_cases(sizes):
    return [
        {"cell": cell, "label": cell + suffix, "layers": layers, "bidirectional": bidir, "ragged": ragged, **sizes}
        for cell in CELLS
        for suffix, layers, bidir, ragged in VARIANTS
    ]


def lengths(case, seed=3):
    """The ragged rows' lengths (B,) int64 in [T/5, T], the first T (so the
    padded output has T steps on both sides); None for the other rows."""
    if not case["ragged"]:
        return None
    B, T = case["B"], case["T"]
    lens = np.random.default_rng(seed).integers(max(1, T // 5), T + 1, B).astype(np.int64)
    lens[0] = T
    return lens


def inputs(case, seed=1):
    rng = np.random.default_rng(seed)
    B, T = case["B"], case["T"]
    D = 2 if case["bidirectional"] else 1
    x = rng.standard_normal((B, T, case["I"]), dtype=np.float32)
    dout = rng.standard_normal((B, T, D * case["H"]), dtype=np.float32)
    lens = lengths(case)
    if lens is not None:  # zero cotangents on padding (both sides ignore them anyway)
        dout *= (np.arange(T)[None, :] < lens[:, None])[..., None]
    return x, dout, lens


def module(impl, case):
    """The recurrent layer of ``impl`` with make_state() weights."""
    args = (case["I"], case["H"], case["layers"])
    kw = {"batch_first": True, "bidirectional": case["bidirectional"]}
    if impl == "torch":
        m = getattr(torch.nn, case["cell"])(*args, **kw)
    else:
        if not have_cell(case["cell"]):
            raise tf.NotAvailable(f"attnc.nn.{case['cell']}")
        m = getattr(attnc.nn, case["cell"])(*args, **kw, seed=SEED)
    return tf.load_state(m, tf.make_state(tf._shapes(m)))


def flops(case):
    """Forward matrix-product FLOPs, valid steps only."""
    B, T, I, H = case["B"], case["T"], case["I"], case["H"]
    G = (4 if case["cell"] == "LSTM" else 3) * H
    D = 2 if case["bidirectional"] else 1
    lens = lengths(case)
    steps = float(lens.sum()) if lens is not None else float(B * T)
    total = 0.0
    for layer in range(case["layers"]):
        width = I if layer == 0 else D * H
        total += D * 2.0 * steps * (width + H) * G
    return total


def torch_run(m, tx, tlens, T):
    """torch's module on a batch-first input, packed when tlens is given.
    Returns (output (B, T, D*H), states)."""
    if tlens is None:
        return m(tx)
    nnu = torch.nn.utils.rnn
    packed = nnu.pack_padded_sequence(tx, tlens, batch_first=True, enforce_sorted=False)
    out, states = m(packed)
    out, _ = nnu.pad_packed_sequence(out, batch_first=True, total_length=T)
    return out, states


def _attnc_kw(lens):
    return {} if lens is None else {"lengths": lens}


# --------------------------------------------------------------------------- builders
def build_forward(impl, case):
    m = module(impl, case).eval()
    x, _, lens = inputs(case)
    if impl == "torch":
        tx = torch.from_numpy(x)
        tl = None if lens is None else torch.from_numpy(lens)

        def fwd():
            with torch.inference_mode():
                return torch_run(m, tx, tl, case["T"])

        return fwd
    kw = _attnc_kw(lens)
    return lambda: m(x, **kw)


def build_train(impl, case):
    m = module(impl, case).train()
    x, dout, lens = inputs(case)
    if impl == "torch":
        tx = torch.from_numpy(x).requires_grad_(True)
        tdout = torch.from_numpy(dout)
        tl = None if lens is None else torch.from_numpy(lens)
        params = list(m.parameters())

        def step():
            for p in params:
                p.grad = None
            tx.grad = None
            out, _ = torch_run(m, tx, tl, case["T"])
            out.backward(tdout)
            return out.detach(), tx.grad

        return step
    kw = _attnc_kw(lens)

    def step():
        (out, _), pullback = attnc.vjp(m, x, **kw)
        return out, pullback(dout, None)

    return step


# transformer.job_time (which transformer.measure forks) looks its builders up here
tf.BUILDERS.update({"rnn_forward": build_forward, "rnn_train": build_train})


# --------------------------------------------------------------------------- check
def _states_dict(cell, states):
    if cell == "LSTM":
        return {"h_n": states[0], "c_n": states[1]}
    return {"h_n": states}


def job_check(cases, threads):
    """Child: for every case, attnc's eval outputs and training gradients
    against torch's (relative differences); torch's operators of one forward."""
    common._set_threads(threads, numpy_blas=False)
    res = {"cases": {}, "torch_ops": {}}
    for case in cases:
        cell = case["cell"]
        x, dout, lens = inputs(case)
        tx = torch.from_numpy(x)
        tl = None if lens is None else torch.from_numpy(lens)
        t_m = module("torch", case).eval()
        with torch.inference_mode():
            t_out, t_st = torch_run(t_m, tx, tl, case["T"])
        if not case["ragged"] and case["layers"] == 1:
            with tf._quiet_stderr(), torch.autograd.profiler.profile() as prof, torch.inference_mode():
                torch_run(t_m, tx, tl, case["T"])
            res["torch_ops"][cell] = sorted(
                {e.name for e in prof.function_events if any(s in e.name.lower() for s in ("rnn", "lstm", "gru"))}
            )
        if not have_cell(cell):
            continue
        a_m = module("attnc", case).eval()
        a_out, a_st = a_m(x, **_attnc_kw(lens))
        fwd = {"output": _rel(a_out, t_out.numpy())}
        t_sd = _states_dict(cell, t_st)
        for name, a in _states_dict(cell, a_st).items():
            fwd[name] = _rel(a, t_sd[name].numpy())

        t_m.train()
        a_m.train()
        txg = torch.from_numpy(x.copy()).requires_grad_(True)
        t_out, _ = torch_run(t_m, txg, tl, case["T"])
        t_out.backward(torch.from_numpy(dout))
        ref = {"input": txg.grad.numpy()}
        ref.update({n: p.grad.numpy() for n, p in t_m.named_parameters()})
        (a_out, _), pullback = attnc.vjp(a_m, x, **_attnc_kw(lens))
        grads = pullback(dout, None)
        grad = {"output": _rel(a_out, t_out.detach().numpy())}
        for name, r in ref.items():
            grad[name] = _rel(grads[name], r) if name in grads else float("inf")
        res["cases"][case["label"]] = {"forward": fwd, "train": grad}
    return res


# --------------------------------------------------------------------------- main
def main(argv=None):
    args, st = tf.parse_common("rnn", __doc__.split("\n\n")[0], argv, skip=("forward", "train"))
    quick, repeats, rounds, threads = st["quick"], st["repeats"], st["rounds"], st["threads"]
    json_path, min_sample_s, warmup_s = st["json_path"], st["min_sample_s"], st["warmup_s"]
    sizes = QUICK_SIZES if quick else SIZES

    errors, failed_checks = [], []
    impls, parent_threads, load, t_start = tf.begin(_import_libs, not args.no_snapshot, threads, repeats, rounds, quick)
    cases = make_cases(sizes)
    print(f"attnc from {common.SNAPSHOT_SRC or Path(attnc.__file__).parent}")
    print(
        f"B={sizes['B']} T={sizes['T']} input={sizes['I']} hidden={sizes['H']}, batch first; ragged rows: "
        f"lengths in [{max(1, sizes['T'] // 5)}, {sizes['T']}], mean "
        f"{float(np.mean(lengths(cases[2]))):.1f}"
    )
    result = {
        "benchmark": "recurrent layers (LSTM, GRU), attnc vs torch",
        "config": {
            "threads": threads,
            "quick": quick,
            "repeats": repeats,
            "rounds": rounds,
            "min_sample_s": min_sample_s,
            "warmup_s": warmup_s,
            "sizes": sizes,
            "ragged_lengths": lengths(cases[2]).tolist(),
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

    sections = (
        ("forward", "1. forward, eval (torch under inference_mode)", "rnn_forward", 1),
        ("train", "2. forward + backward, training mode (input and parameter gradients)", "rnn_train", 3),
    )
    for key, title, kind, mult in sections:
        if key in args.skip or torch is None:
            continue
        print(f"\n== {title} ==")
        head = (
            f"{'case':<24}{'attnc ms':>9}{'torch ms':>9}{'speed-up':>9}{'per round':>11}{'attnc GF/s':>11}"
            f"{'torch GF/s':>11}{'MiB attnc':>10}{'torch':>7}{'check':>10}"
        )
        print(head)
        print("-" * len(head))
        rows = []
        for case in cases:
            fl = mult * flops(case)
            got = tf.measure(
                kind, (case,), impls, threads, repeats, rounds, min_sample_s, warmup_s, errors, f"{case['label']} {key}"
            )
            a, t = got.get("attnc"), got.get("torch")
            for g in (a, t):
                if _ok(g):
                    g["gflops"] = fl / g["median_s"] / 1e9
            sp = _speedup(got)
            rs = _round_speedups(got)
            rel = check.get("cases", {}).get(case["label"], {}).get(key)
            worst = tf.checked_worst(rel, f"{case['label']} {key}", TOLERANCE, failed_checks)
            rows.append(
                {
                    "case": case["label"],
                    "cell": case["cell"],
                    "layers": case["layers"],
                    "bidirectional": case["bidirectional"],
                    "ragged": case["ragged"],
                    "flops": fl,
                    "impl": got,
                    "speedup": sp,
                    "speedup_per_round": rs,
                    "check_worst": None if worst is None else {"name": worst[0], "rel": worst[1]},
                }
            )
            a_ok, t_ok = _ok(a), _ok(t)
            print(
                f"{case['label']:<24}"
                f"{(_f(a['median_s'] * 1e3, '{:.2f}', 9) if a_ok else (_status(a) or '-').rjust(9))}"
                f"{_f(t['median_s'] * 1e3 if t_ok else None, '{:.2f}', 9)}{_f(sp, '{:.2f}x', 9)}"
                f" {_range(rs):>10}{_f(a['gflops'] if a_ok else None, '{:.1f}', 11)}"
                f"{_f(t['gflops'] if t_ok else None, '{:.1f}', 11)}"
                f"{_f(a.get('peak_increase_mb') if a_ok else None, '{:.1f}', 10)}"
                f"{_f(t.get('peak_increase_mb') if t_ok else None, '{:.1f}', 7)}"
                f"{_f(worst[1] if worst else None, '{:.1e}', 10)}"
            )
            if case["label"] == "LSTM":
                summary.append(
                    (
                        f"LSTM layer {'forward + backward' if key == 'train' else 'forward'}",
                        sp,
                        TARGETS["lstm_train"] if key == "train" else None,
                    )
                )
        result[key] = {"rows": rows}
        missing = [c for c in CELLS if not have_cell(c)]
        if missing:
            print("attnc: not available (" + ", ".join(f"attnc.nn.{c}" for c in missing) + ")")
        print(
            f"check: largest relative difference from torch "
            f"({'output, h_n, c_n' if key == 'forward' else 'output, input and parameter gradients'}), "
            f"tolerance {TOLERANCE:.0e}"
        )

    if "error" not in check and check.get("torch_ops"):
        ops = check["torch_ops"]
        print(
            "\ntorch's recurrent operators (1 layer, forward): "
            + "; ".join(f"{c}: {', '.join(v) or '?'}" for c, v in ops.items())
        )
    if torch is None:
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
        {"attnc_rnn": {c: have_cell(c) for c in CELLS}, "parent_threads_at_fork": parent_threads},
        json_path,
        width=34,
    )


if __name__ == "__main__":
    sys.exit(main())
