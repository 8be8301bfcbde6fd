"""attnc's SIMD paths against each other: the same calls on the baseline,
AVX2 and AVX-512 builds of the C core (every path this CPU runs), in one run.

attnc's C core is compiled once per path and attnc loads the best one the CPU
runs (ATTNC_CPU forces one). This measures what each path is worth, so a
regression of the dispatch (a newer CPU landing on slow code) shows up.

    python benchmarks/cpu_paths.py                  # ~2 min on 2 cores
    python benchmarks/cpu_paths.py --quick          # seconds
    python benchmarks/cpu_paths.py --other DIR      # also a build of attnc in DIR (a
                                                    #   folder holding an attnc package), e.g. an older one

Each path runs in its own process (ATTNC_CPU=path); the processes take turns,
--rounds times, so the machine's load falls on every path alike. A process
times each case --repeats times after a warm-up call and reports the median;
the table gives the median over rounds in milliseconds and the speed-up over
the baseline path (> 1: faster). The last line is the geometric mean of the
speed-ups. Every case is float32 unless marked f64.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import machine  # benchmarks/machine.py: what the run ran on

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def import_attnc():
    try:
        import attnc
    except ImportError:  # a source checkout that is built but not installed
        sys.path.insert(0, str(REPO))
        import attnc
    return attnc


def cases(attnc, quick: bool) -> dict:
    """name -> a call that runs one forward (and backward where named)."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    s = 4 if quick else 1  # quick: every size divided by s

    def arr(*shape, dtype=f32):
        return rng.standard_normal(shape).astype(dtype)

    L = 1024 // s
    q, k, v = arr(1, 8, L, 64), arr(1, 8, L, 64), arr(1, 8, L, 64)
    q64 = arr(1, 4, 512 // s, 64, dtype=np.float64)
    dout = arr(1, 8, L, 64)

    def sdpa_backward():
        _, pull = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, is_causal=True)
        pull(dout)

    qa, ka = arr(16, 32 // s, 64), arr(16, 64, 64)
    wq, wk, va = arr(64, 64) * 0.1, arr(64, 64) * 0.1, arr(64) * 0.1
    ctx_a = arr(16, 32 // s, 64)

    def additive_backward():
        (_, _), pull = attnc.vjp(attnc.attention, qa, ka, score="additive", w_query=wq, w_key=wk, v=va)
        pull(ctx_a, None)

    lstm = attnc.nn.LSTM(256, 256, batch_first=True, seed=0)
    x_rnn = arr(64, 50 // s, 256)
    d_rnn = arr(64, 50 // s, 256)

    def lstm_backward():
        (_, _), pull = attnc.vjp(lstm, x_rnn)
        pull(d_rnn, None)

    gru = attnc.nn.GRU(256, 256, batch_first=True, seed=0)
    layer = attnc.nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True, seed=0)
    x_tr = arr(16, 64 // s, 256)

    def transformer_backward():
        out, pull = attnc.vjp(layer, x_tr)
        pull(out)

    conv = attnc.nn.Conv2d(32, 32, 3, padding=1, seed=0)
    x_conv = arr(16, 32, 32 // s, 32)

    def conv_backward():
        out, pull = attnc.vjp(conv, x_conv)
        pull(out)

    logits = arr(4096 // s, 1000)
    return {
        "sdpa forward (1, 8, 1024, 64)": lambda: attnc.scaled_dot_product_attention(q, k, v),
        "sdpa causal forward+backward": sdpa_backward,
        "sdpa forward f64 (1, 4, 512, 64)": lambda: attnc.scaled_dot_product_attention(q64, q64, q64),
        "additive attention forward+backward": additive_backward,
        "LSTM 256 forward (64, 50)": lambda: lstm(x_rnn),
        "LSTM 256 forward+backward": lstm_backward,
        "GRU 256 forward (64, 50)": lambda: gru(x_rnn),
        "transformer layer forward+backward": transformer_backward,
        "conv2d 3x3 forward+backward": conv_backward,
        "log_softmax (4096, 1000)": lambda: attnc.nn.log_softmax(logits),
    }


def child(quick: bool, repeats: int, threads: int) -> None:
    """Time every case on the path ATTNC_CPU names; print one JSON line."""
    attnc = import_attnc()
    attnc.set_num_threads(threads)
    timings = {}
    for name, fn in cases(attnc, quick).items():
        fn()  # warm-up: thread pool, code pages, allocator
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        timings[name] = statistics.median(times) * 1e3
    path = attnc._core.simd_path() if hasattr(attnc._core, "simd_path") else "single build"
    print(json.dumps({"path": path, "ms": timings}))


def run_path(label: str, env_path: str | None, pythonpath: str | None, args) -> dict:
    env = dict(os.environ)
    env.pop("ATTNC_CPU", None)
    if env_path:
        env["ATTNC_CPU"] = env_path
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--repeats",
        str(args.repeats),
        "--threads",
        str(args.threads),
    ] + (["--quick"] if args.quick else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(HERE))
    if out.returncode != 0:
        raise RuntimeError(f"{label}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (seconds)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=None, help="turns per path (default 3, quick 1)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per case (default 7, quick 3)")
    parser.add_argument("--other", default=None, help="a folder holding another build of the attnc package")
    parser.add_argument("--json", default=None, help="also write the table to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.repeats = args.repeats or (3 if args.quick else 7)
    if args.child:
        child(args.quick, args.repeats, args.threads)
        return

    attnc = import_attnc()
    from attnc import _dispatch

    runs = [(p, p, None) for p in _dispatch.supported_paths()]
    if args.other:
        runs.append(("other", None, str(Path(args.other).resolve())))
    samples = {label: [] for label, _, _ in runs}
    for _ in range(args.rounds):
        for label, path, pythonpath in runs:
            samples[label].append(run_path(label, path, pythonpath, args))
    names = list(samples[runs[0][0]][0])
    ms = {label: {n: statistics.median(r[n] for r in rounds) for n in names} for label, rounds in samples.items()}

    labels = [label for label, _, _ in runs]
    base = labels[0]
    print(machine.line(attnc))
    print(
        f"attnc {attnc.__version__}, {args.threads} threads, {args.rounds} rounds; CPU runs: {attnc._core.cpu_paths()}"
    )
    print(
        f"{'case':40s}"
        + "".join(f"{label + ' ms':>15s}" for label in labels)
        + "".join(f"{label + '/' + base:>16s}" for label in labels[1:])
    )
    for n in names:
        row = f"{n:40s}" + "".join(f"{ms[label][n]:15.2f}" for label in labels)
        row += "".join(f"{ms[base][n] / ms[label][n]:16.2f}" for label in labels[1:])
        print(row)
    geo = {
        label: math.exp(statistics.fmean(math.log(ms[base][n] / ms[label][n]) for n in names)) for label in labels[1:]
    }
    print(
        f"{'geometric mean speed-up over ' + base:40s}"
        + " " * 15 * len(labels)
        + "".join(f"{geo[label]:16.2f}" for label in labels[1:])
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "threads": args.threads,
                    "rounds": args.rounds,
                    "quick": args.quick,
                    "ms": ms,
                    "environment": {"machine": machine.describe(attnc)},
                    "speedup_over_baseline": geo,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
