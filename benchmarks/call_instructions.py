"""Instructions per call of tiny public calls, this tree against another
build of attnc: the per-call overhead without the timing noise of a shared
machine (valgrind's callgrind counts instructions; the counts do not depend
on the load or the CPU's clock).

    python benchmarks/call_instructions.py --against /path/to/other/checkout

Both checkouts must be built in place (python setup.py build_ext --inplace).
Each runs every call 2 + N times under callgrind, which dumps its counters at
a marker call (math.gcd) before and after the N calls; the table gives each
call's instructions per call in both builds and their ratio (this / other).
The calls run on one thread, so the counts are of one path through the code.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

N = 100
MARKER = "math_gcd"  # the C function behind math.gcd, which the calls never use
CHILD = "ATTNC_CALL_INSTRUCTIONS_CHILD"  # set in the measured process: it runs the calls, never measures


def calls():
    """name -> a tiny call of the public API (float32, Tq = Tk = 8, d = 16)."""
    import numpy as np

    import attnc
    import attnc.nn as nn

    attnc.set_num_threads(1)
    r = np.random.default_rng(0)

    def f32(*shape):
        return r.standard_normal(shape).astype(np.float32)

    x, w, b = f32(8, 16), f32(16, 16), f32(16)
    q, k, v = f32(8, 16), f32(8, 16), f32(8, 16)
    q4, k4, v4 = f32(1, 2, 8, 8), f32(1, 2, 8, 8), f32(1, 2, 8, 8)
    lstm, xs = nn.LSTM(16, 16, batch_first=True, seed=0), f32(2, 8, 16)
    conv, xc = nn.Conv1d(4, 4, 3, seed=0), f32(2, 4, 8)
    params, grads = {"p": f32(16, 16)}, {"p": f32(16, 16)}
    opt = attnc.optim.Adam(params)
    return {
        "linear": lambda: nn.linear(x, w, b),
        "layer_norm": lambda: nn.layer_norm(x, (16,), b, b),
        "relu": lambda: nn.relu(x),
        "log_softmax": lambda: nn.log_softmax(x),
        "softmax": lambda: attnc.softmax(x),
        "score": lambda: attnc.score(q, k, score="scaled_dot"),
        "attention": lambda: attnc.attention(q, k, v, score="scaled_dot"),
        "sdpa": lambda: attnc.scaled_dot_product_attention(q4, k4, v4),
        "lstm": lambda: lstm(xs),
        "conv1d": lambda: conv(xc),
        "adam": lambda: opt.step(grads),
    }


def child():
    """Under callgrind: each call warmed up, then N calls between two markers."""
    names = []
    for name, fn in calls().items():
        fn()
        fn()
        math.gcd(1, 1)
        for _ in range(N):
            fn()
        math.gcd(1, 1)
        names.append(name)
    print(json.dumps(names))


def measure(tree: str) -> dict:
    """name -> instructions per call, with `tree`'s attnc."""
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--dump-before={MARKER}",
                f"--callgrind-out-file={out}/cg.%p",
                sys.executable,
                os.path.abspath(__file__),
            ],
            env=dict(os.environ, PYTHONPATH=tree, **{CHILD: "1"}),
            cwd=out,
            capture_output=True,
            text=True,
        )
        if run.returncode:
            raise SystemExit(f"callgrind failed with {tree}:\n{run.stderr[-3000:]}")
        names = json.loads(run.stdout.strip().splitlines()[-1])
        dumps = sorted(glob.glob(f"{out}/cg.*.*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        totals = [int(re.search(r"^totals:\s+(\d+)", Path(f).read_text(), re.M).group(1)) for f in dumps]
    # dump 2k + 1 (0-based) holds the k-th call's N calls, between its two markers
    return {name: totals[2 * i + 1] / N for i, name in enumerate(names)}


def main():
    if os.environ.get(CHILD):  # this file run by measure(), under callgrind
        return child()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="another checkout of attnc, built in place")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    this, other = measure(here), measure(os.path.abspath(args.against))
    print(f"instructions per call (callgrind, {N} calls each, one thread)")
    print(f"{'call':12s} {'this':>10s} {'other':>10s} {'this/other':>10s}")
    for name in this:
        print(f"{name:12s} {this[name]:10.0f} {other[name]:10.0f} {this[name] / other[name]:10.3f}")


if __name__ == "__main__":
    main()
