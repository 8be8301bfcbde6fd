"""Causal linear attention against softmax attention as the sequence grows.

One run, one thread for each library, float32, B = 1, H = 2, E = Ev = 32;
for L = 512 .. 8192 the median forward time of
- attnc.linear_attention(causal=True) (elu + 1; its running sums: O(L E Ev));
- attnc.scaled_dot_product_attention(is_causal=True) (O(L^2 E));
- the same causal linear attention in torch, by cumulative sums of the outer
  products phi(k_j) v_j^T (the usual torch form; O(L E Ev) time and memory);
and attnc's forward + backward of the causal linear attention. Before the
timings, attnc's output is checked against the torch form (max abs
difference, in the JSON). Prints a table; writes JSON (--json).

    python benchmarks/linear_attention.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import machine  # benchmarks/machine.py

try:
    import attnc
except ImportError:  # a source checkout that is built but not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import attnc

B, H, E = 1, 2, 32


def median_time(fn, repeats):
    fn()  # warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def torch_causal_linear(torch, q, k, v, eps=1e-6):
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    kv = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=2)  # (B, H, L, E, Ev)
    num = torch.einsum("bhle,bhlev->bhlv", fq, kv)
    den = (fq * torch.cumsum(fk, dim=2)).sum(-1, keepdim=True)
    return num / (den + eps)


def measure(torch, rng, L, repeats):
    """One length's row: the median times and the check against torch."""
    q, k, v = (rng.standard_normal((B, H, L, E)).astype(np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    ours = attnc.linear_attention(q, k, v, causal=True)
    diff = float(np.abs(ours - torch_causal_linear(torch, tq, tk, tv).numpy()).max())

    def fwd_bwd():
        out, pullback = attnc.vjp(attnc.linear_attention, q, k, v, causal=True)
        pullback(np.ones_like(out))

    with torch.no_grad():
        times = {
            "linear": median_time(lambda: attnc.linear_attention(q, k, v, causal=True), repeats),
            "linear_fwd_bwd": median_time(fwd_bwd, repeats),
            "sdpa": median_time(lambda: attnc.scaled_dot_product_attention(q, k, v, is_causal=True), repeats),
            "torch_linear": median_time(lambda: torch_causal_linear(torch, tq, tk, tv), repeats),
        }
    return {"L": L, "median_s": times, "max_abs_diff_vs_torch": diff}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short sequences, one repeat (a smoke test)")
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "linear_attention.json")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    attnc.set_num_threads(1)
    lengths = (128, 256) if args.quick else (512, 1024, 2048, 4096, 8192)
    repeats = 1 if args.quick else 5
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'L':>6} {'linear':>10} {'lin f+b':>10} {'sdpa':>10} {'torch lin':>10}  (ms, median of {repeats})")
    for L in lengths:
        row = measure(torch, rng, L, repeats)
        rows.append(row)
        t = row["median_s"]
        print(
            f"{L:>6} {1e3 * t['linear']:>10.2f} {1e3 * t['linear_fwd_bwd']:>10.2f} "
            f"{1e3 * t['sdpa']:>10.2f} {1e3 * t['torch_linear']:>10.2f}   "
            f"(|attnc - torch| {row['max_abs_diff_vs_torch']:.1e})"
        )
    first, last = rows[0], rows[-1]
    growth = {n: last["median_s"][n] / first["median_s"][n] for n in first["median_s"]}
    print(
        f"time at L={last['L']} over L={first['L']} ({last['L'] // first['L']}x longer): "
        + ", ".join(f"{n} {g:.1f}x" for n, g in growth.items())
    )
    data = {
        "benchmark": "causal linear attention vs softmax SDPA and a torch cumsum form, one thread",
        "torch": torch.__version__,
        "config": {
            "B": B,
            "H": H,
            "E": E,
            "Ev": E,
            "dtype": "float32",
            "threads": 1,
            "repeats": repeats,
            "quick": args.quick,
        },
        "machine": machine.describe(attnc),
        "rows": rows,
        "growth": growth,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    if max(r["max_abs_diff_vs_torch"] for r in rows) > 1e-3:
        sys.exit("attnc's causal linear attention differs from the torch form")


if __name__ == "__main__":
    main()
