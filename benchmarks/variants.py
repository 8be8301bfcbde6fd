"""The cost of the fused kernel's options (issue 30): ALiBi, soft-capping,
sinks, segment ids, a block mask and the sigmoid activation against the plain
kernel, and a sliding window against full attention.

    python benchmarks/variants.py [--threads 1] [--repeats 7] [--quick]

Each configuration is timed forward and forward+backward (attnc.vjp and its
pullback) in float32, B = 1, H = 4, E = 64, calls alternating between the
configurations of one comparison and the median of --repeats kept. Prints a
table and, as the last line, one JSON object of the medians (seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's attnc, as attention.py does
import attnc

H, E = 4, 64


def _inputs(L, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, H, L, E)).astype(np.float32) for _ in range(3))
    return q, k, v, rng.standard_normal((1, H, L, E)).astype(np.float32)


def _calls(L, options):
    """{mode: fn} for one configuration: the forward, and forward+backward."""
    q, k, v, dout = _inputs(L)

    def forward():
        attnc.scaled_dot_product_attention(q, k, v, **options)

    def both():
        _, pullback = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v, **options)
        pullback(dout)

    return {"forward": forward, "forward+backward": both}


def compare(L, configs, repeats):
    """Median seconds per (config, mode), the configurations' calls alternating."""
    calls = {name: _calls(L, opts) for name, opts in configs.items()}
    times = {(name, mode): [] for name in configs for mode in ("forward", "forward+backward")}
    for fns in calls.values():  # warm up: first-touch pages, the thread pool
        fns["forward"]()
    for _ in range(repeats):
        for name, fns in calls.items():
            for mode, fn in fns.items():
                t = time.perf_counter()
                fn()
                times[name, mode].append(time.perf_counter() - t)
    return {key: statistics.median(ts) for key, ts in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="small sizes (CI)")
    args = p.parse_args(argv)
    attnc.set_num_threads(args.threads)
    slopes = attnc.alibi_slopes(H, np.float32)
    results = {}
    L = 256 if args.quick else 2048
    options = {
        "plain": {},
        "alibi": {"alibi_slopes": slopes},
        "softcap": {"softcap": 30.0},
        "sinks": {"sinks": np.zeros(H, np.float32)},
        "alibi+softcap+sinks": {"alibi_slopes": slopes, "softcap": 30.0, "sinks": np.zeros(H, np.float32)},
        # the masks' own cost (one segment, every block True: nothing skipped), then what skipping saves
        "segments (1 sequence)": {"segment_ids": np.zeros((1, L), np.int64)},
        "segments (8 packed)": {"segment_ids": np.repeat(np.arange(8), L // 8)[None]},
        "block_mask (all True)": {"block_mask": np.ones((1, 1, L // 128, L // 128), bool), "block_size": 128},
        "sigmoid": {"activation": "sigmoid"},
    }
    got = compare(L, options, args.repeats)
    print(f"options against the plain kernel, L = S = {L}, E = {E}, H = {H}, float32, {args.threads} thread(s)")
    for (name, mode), t in got.items():
        ratio = t / got["plain", mode]
        print(f"  {name:22s} {mode:17s} {1e3 * t:9.2f} ms  {ratio:5.2f}x plain")
        results[f"L{L} {name} {mode}"] = t
    W = 256
    for L in (512, 1024) if args.quick else (2048, 8192):
        configs = {
            "causal": {"is_causal": True},
            f"window ({W - 1}, 0)": {"window": (W - 1, 0)},
            "full": {},
            f"window ({W // 2}, {W // 2})": {"window": (W // 2, W // 2)},
        }
        got = compare(L, configs, max(3, args.repeats // 2) if L > 4096 else args.repeats)
        print(f"sliding window W = {W} against full attention, L = S = {L}")
        for (name, mode), t in got.items():
            print(f"  {name:22s} {mode:17s} {1e3 * t:9.2f} ms  {1e6 * t / L:8.2f} us per query")
            results[f"L{L} {name} {mode}"] = t
    print(json.dumps(results))


if __name__ == "__main__":
    main()
