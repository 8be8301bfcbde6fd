"""Per-call overhead of attnc on tiny inputs, against PyTorch in the same run.

Tiny inputs (Tq = Tk = 8, d = 16) make the arithmetic negligible, so the time
measured is the cost of a call: argument parsing, buffer access, allocation of
the outputs, dispatch. Every attnc call is paired with the equivalent PyTorch
call(s) on the same data with the same number of threads, timed in alternation.

    python benchmarks/overhead.py                # ~30 s, writes benchmarks/results/overhead.json
    python benchmarks/overhead.py --quick        # a few seconds
    python benchmarks/overhead.py --json out.json --dtype float64 --threads 1

Each timing: calibrate a loop count so one repeat lasts about --target seconds,
time the loop with time.perf_counter_ns, repeat 7 times, report the median per
call in microseconds. "ratio" is torch time / attnc time (> 1: attnc is faster).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import machine  # benchmarks/machine.py: what the run ran on

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

try:
    import attnc
except ImportError:  # running from a source checkout that is built but not installed
    sys.path.insert(0, str(REPO))
    import attnc

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the table then has attnc columns only
    torch = None
    F = None

TQ = TK = 8
D = 16


# --------------------------------------------------------------------------- timing
def _time_loop(fn, n):
    """Wall time in ns of n calls of fn (loop overhead included, it is tiny)."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return time.perf_counter_ns() - t0


def _calibrate(fn, target_s):
    """Loop count such that one repeat takes about target_s seconds."""
    n = 1
    while True:
        elapsed = _time_loop(fn, n)
        if elapsed >= target_s * 1e9 * 0.2 or n >= 1 << 24:
            break
        n *= 4
    per_call = max(elapsed / n, 1.0)
    return max(1, int(target_s * 1e9 / per_call))


def measure(fns, target_s, repeats):
    """Median microseconds per call for each callable in ``fns`` (dict label -> fn).

    The callables are timed in alternation inside every repeat, so slow drifts
    of the machine affect all of them alike.
    """
    for fn in fns.values():  # warm-up: caches, lazy initialisation, JIT paths
        for _ in range(20):
            fn()
    loops = {label: _calibrate(fn, target_s) for label, fn in fns.items()}
    samples = {label: [] for label in fns}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            for label, fn in fns.items():
                ns = _time_loop(fn, loops[label])
                samples[label].append(ns / loops[label] / 1e3)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {
        label: {
            "median_us": statistics.median(samples[label]),
            "min_us": min(samples[label]),
            "samples_us": samples[label],
            "loops": loops[label],
        }
        for label in fns
    }


# --------------------------------------------------------------------------- cases
def _max_abs_diff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def build_cases(dtype, batched):
    """Yield (op, attnc_fn, {torch_label: torch_fn}, check) for one input layout.

    ``check()`` returns the largest absolute difference between the attnc and
    the torch results (a sanity check that the two sides compute the same thing).
    """
    rng = np.random.default_rng(0)
    lead = (1,) if batched else ()
    q = rng.standard_normal(lead + (TQ, D)).astype(dtype)
    k = rng.standard_normal(lead + (TK, D)).astype(dtype)
    v = rng.standard_normal(lead + (TK, D)).astype(dtype)
    s = rng.standard_normal(lead + (TQ, TK)).astype(dtype)
    dc = rng.standard_normal(lead + (TQ, D)).astype(dtype)  # cotangent of the context
    dw = rng.standard_normal(lead + (TQ, TK)).astype(dtype)  # cotangent of weights/scores
    scale = 1.0 / math.sqrt(D)
    cases = []

    have_torch = torch is not None
    if have_torch:
        tq, tk, tv, ts = (torch.from_numpy(x) for x in (q, k, v, s))
        tdc, tdw = torch.from_numpy(dc), torch.from_numpy(dw)
        gq, gk, gv, gs = (torch.from_numpy(x.copy()).requires_grad_(True) for x in (q, k, v, s))

    # ---- forward: score
    def a_score_dot():
        return attnc.score(q, k, score="dot")

    def a_score_sdot():
        return attnc.score(q, k, score="scaled_dot")

    torch_score_dot = torch_score_sdot = {}
    if have_torch:

        def t_score_dot():
            return torch.matmul(tq, tk.transpose(-2, -1))

        def t_score_sdot():
            return torch.matmul(tq, tk.transpose(-2, -1)) * scale

        torch_score_dot = {"q @ k.T": t_score_dot}
        torch_score_sdot = {"(q @ k.T) * scale": t_score_sdot}
    cases.append(
        ("score dot", a_score_dot, torch_score_dot, lambda: _max_abs_diff(a_score_dot(), t_score_dot().numpy()))
    )
    cases.append(
        (
            "score scaled_dot",
            a_score_sdot,
            torch_score_sdot,
            lambda: _max_abs_diff(a_score_sdot(), t_score_sdot().numpy()),
        )
    )

    # ---- forward: softmax
    def a_softmax():
        return attnc.softmax(s)

    torch_softmax = {}
    if have_torch:

        def t_softmax():
            return torch.softmax(ts, dim=-1)

        torch_softmax = {"torch.softmax": t_softmax}
    cases.append(("softmax", a_softmax, torch_softmax, lambda: _max_abs_diff(a_softmax(), t_softmax().numpy())))

    # ---- forward: attention
    def a_att_dot():
        return attnc.attention(q, k, v, score="dot")

    def a_att_sdot():
        return attnc.attention(q, k, v, score="scaled_dot")

    torch_att_dot = torch_att_sdot = {}
    if have_torch:

        def t_att_dot():
            w = torch.softmax(torch.matmul(tq, tk.transpose(-2, -1)), dim=-1)
            return torch.matmul(w, tv), w

        def t_att_sdot():
            w = torch.softmax(torch.matmul(tq, tk.transpose(-2, -1)) * scale, dim=-1)
            return torch.matmul(w, tv), w

        def t_sdpa():
            return F.scaled_dot_product_attention(tq, tk, tv)

        torch_att_dot = {"softmax(q @ k.T) @ v": t_att_dot}
        torch_att_sdot = {"softmax(q @ k.T * scale) @ v": t_att_sdot, "F.sdpa": t_sdpa}
    cases.append(
        (
            "attention dot",
            a_att_dot,
            torch_att_dot,
            lambda: max(
                _max_abs_diff(a_att_dot()[0], t_att_dot()[0].numpy()),
                _max_abs_diff(a_att_dot()[1], t_att_dot()[1].numpy()),
            ),
        )
    )
    cases.append(
        (
            "attention scaled_dot",
            a_att_sdot,
            torch_att_sdot,
            lambda: max(
                _max_abs_diff(a_att_sdot()[0], t_att_sdot()[0].numpy()),
                _max_abs_diff(a_att_sdot()[1], t_att_sdot()[1].numpy()),
                _max_abs_diff(a_att_sdot()[0], t_sdpa().numpy()),
            ),
        )
    )

    # ---- gradients: vjp + pullback vs autograd (forward and backward both timed)
    def a_grad_score():
        _, pullback = attnc.vjp(attnc.score, q, k, score="scaled_dot")
        return pullback(dw)

    def a_grad_softmax():
        _, pullback = attnc.vjp(attnc.softmax, s)
        return pullback(dw)

    def a_grad_att_dot():
        _, pullback = attnc.vjp(attnc.attention, q, k, v, score="dot")
        return pullback(dc, None)

    def a_grad_att_sdot():
        _, pullback = attnc.vjp(attnc.attention, q, k, v, score="scaled_dot")
        return pullback(dc, None)

    tg_score = tg_softmax = tg_att_dot = tg_att_sdot = {}
    if have_torch:

        def t_grad_score():
            out = torch.matmul(gq, gk.transpose(-2, -1)) * scale
            return torch.autograd.grad(out, (gq, gk), tdw)

        def t_grad_softmax():
            out = torch.softmax(gs, dim=-1)
            return torch.autograd.grad(out, (gs,), tdw)

        def t_grad_att_dot():
            w = torch.softmax(torch.matmul(gq, gk.transpose(-2, -1)), dim=-1)
            return torch.autograd.grad(torch.matmul(w, gv), (gq, gk, gv), tdc)

        def t_grad_att_sdot():
            w = torch.softmax(torch.matmul(gq, gk.transpose(-2, -1)) * scale, dim=-1)
            return torch.autograd.grad(torch.matmul(w, gv), (gq, gk, gv), tdc)

        def t_grad_sdpa():
            out = F.scaled_dot_product_attention(gq, gk, gv)
            return torch.autograd.grad(out, (gq, gk, gv), tdc)

        tg_score = {"autograd (q @ k.T) * scale": t_grad_score}
        tg_softmax = {"autograd softmax": t_grad_softmax}
        tg_att_dot = {"autograd softmax(q @ k.T) @ v": t_grad_att_dot}
        tg_att_sdot = {"autograd softmax(q @ k.T * scale) @ v": t_grad_att_sdot, "autograd F.sdpa": t_grad_sdpa}

    def _grad_diff(a_fn, t_fn, names):
        got = a_fn()
        ref = t_fn()
        return max(_max_abs_diff(got[n], r.numpy()) for n, r in zip(names, ref))

    cases.append(
        (
            "grad score scaled_dot",
            a_grad_score,
            tg_score,
            lambda: _grad_diff(a_grad_score, t_grad_score, ("query", "keys")),
        )
    )
    cases.append(
        ("grad softmax", a_grad_softmax, tg_softmax, lambda: _grad_diff(a_grad_softmax, t_grad_softmax, ("scores",)))
    )
    cases.append(
        (
            "grad attention dot",
            a_grad_att_dot,
            tg_att_dot,
            lambda: _grad_diff(a_grad_att_dot, t_grad_att_dot, ("query", "keys", "values")),
        )
    )
    cases.append(
        (
            "grad attention scaled_dot",
            a_grad_att_sdot,
            tg_att_sdot,
            lambda: max(
                _grad_diff(a_grad_att_sdot, t_grad_att_sdot, ("query", "keys", "values")),
                _grad_diff(a_grad_att_sdot, t_grad_sdpa, ("query", "keys", "values")),
            ),
        )
    )
    if not have_torch:
        cases = [(op, a, t, None) for op, a, t, _ in cases]
    return cases


# --------------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--json",
        default=str(HERE / "results" / "overhead.json"),
        help="where to write the results (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument(
        "--threads", type=int, default=None, help="threads for attnc and torch (default: attnc's current setting)"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="seconds per repeat per timed call (default 0.05, 0.004 with --quick)",
    )
    args = parser.parse_args(argv)
    target = args.target if args.target is not None else (0.004 if args.quick else 0.05)

    if args.threads is not None:
        attnc.set_num_threads(args.threads)
    threads = attnc.get_num_threads()
    if torch is not None:
        torch.set_num_threads(threads)

    dtype = np.dtype(args.dtype)
    # Timings of microsecond calls are meaningless on a busy machine (with
    # several threads, torch's parallel regions wait for descheduled threads).
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    ncpu = os.cpu_count() or 1
    busy = load_before is not None and load_before > 0.5 * ncpu
    rows = []
    t_start = time.perf_counter()
    for batched in (False, True):
        layout = "(1, 8, 16)" if batched else "(8, 16)"
        for op, a_fn, t_fns, check in build_cases(dtype, batched):
            diff = check() if check is not None else None
            timed = measure({"attnc": a_fn, **t_fns}, target, args.repeats)
            a_us = timed["attnc"]["median_us"]
            row = {
                "op": op,
                "input": layout,
                "attnc_us": a_us,
                "attnc_min_us": timed["attnc"]["min_us"],
                "attnc_samples_us": timed["attnc"]["samples_us"],
                "max_abs_diff_vs_torch": diff,
                "torch": [],
            }
            for label in t_fns:
                t_us = timed[label]["median_us"]
                row["torch"].append(
                    {
                        "impl": label,
                        "median_us": t_us,
                        "min_us": timed[label]["min_us"],
                        "samples_us": timed[label]["samples_us"],
                        "ratio_torch_over_attnc": t_us / a_us,
                    }
                )
            rows.append(row)
    elapsed = time.perf_counter() - t_start

    # ---- table
    header = f"{'op':<27} {'input':<11} {'attnc us':>9} {'torch us':>9} {'torch/attnc':>11}  torch call"
    print(machine.line(attnc))
    print(
        f"attnc {getattr(attnc, '__version__', '?')} vs torch "
        f"{torch.__version__ if torch is not None else '(not installed)'}; "
        f"{dtype}, Tq=Tk={TQ}, d={D}, threads={threads}, "
        f"median of {args.repeats} repeats{' (quick)' if args.quick else ''}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        t_rows = row["torch"] or [None]
        for i, t in enumerate(t_rows):
            first = i == 0
            op = row["op"] if first else ""
            inp = row["input"] if first else ""
            a = f"{row['attnc_us']:9.2f}" if first else " " * 9
            if t is None:
                print(f"{op:<27} {inp:<11} {a} {'-':>9} {'-':>11}")
            else:
                print(f"{op:<27} {inp:<11} {a} {t['median_us']:9.2f} {t['ratio_torch_over_attnc']:11.2f}  {t['impl']}")
    bad = [
        r
        for r in rows
        if r["max_abs_diff_vs_torch"] is not None
        and not r["max_abs_diff_vs_torch"] <= (1e-4 if dtype == np.float32 else 1e-10)
    ]
    for r in bad:
        print(f"WARNING: {r['op']} {r['input']}: attnc and torch differ by {r['max_abs_diff_vs_torch']:.3g}")
    if busy:
        print(
            f"WARNING: the machine was busy (1-minute load average {load_before:.2f} "
            f"on {ncpu} CPUs); the timings above are unreliable"
        )
    print(f"({elapsed:.1f} s)")

    # ---- json
    result = {
        "benchmark": "per-call overhead, tiny inputs",
        "config": {
            "Tq": TQ,
            "Tk": TK,
            "d": D,
            "dtype": str(dtype),
            "threads": threads,
            "repeats": args.repeats,
            "target_s_per_repeat": target,
            "quick": args.quick,
            "statistic": "median over repeats of mean per-call time in a loop (microseconds)",
        },
        "environment": {
            "attnc": getattr(attnc, "__version__", None),
            "torch": torch.__version__ if torch is not None else None,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "machine": machine.describe(attnc),
            "cpu_count": os.cpu_count(),
            "load_average_1min_before": load_before,
        },
        "results": rows,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
