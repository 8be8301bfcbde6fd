"""The kernel's options and today's attention variants (issue 30), in one run:

1. the cost of each option of the fused kernel (ALiBi, soft-capping, sinks,
   segment ids, a block mask, the sigmoid activation) against the plain
   kernel, forward and forward+backward;
2. a sliding window (W = 256) against full and causal attention as L grows:
   the time per query stays flat;
3. the same window in torch, forward: SDPA given the band as a dense boolean
   mask (L, L), and flex_attention compiled with a block mask (on the CPU
   torch has flex_attention's forward only), up to L = 32,768;
4. decoding with multi-head latent attention (DeepSeek-V2, absorbed form,
   LatentCache) against standard multi-head attention (KVCache) of the same
   size: tokens per second and the cache's bytes.

    python benchmarks/variants.py [--threads 1] [--repeats 7] [--quick] [--json PATH]
                                  [--only options|window|torch|mla]

float32, B = 1, H = 4, E = 64 for 1-3; calls alternate between the
configurations of one comparison and the median of --repeats is kept (one
repeat for torch's dense mask at L >= 16,384: a call takes seconds). Prints
the machine, the tables, and writes the medians (seconds) and the machine as
JSON (--only: that part alone, printed, the JSON left as it is).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's attnc, as attention.py does
import attnc
import attnc.nn as nn

H, E = 4, 64
PARTS = ("options", "window", "torch", "mla")  # the run's parts, in order


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


def _median(fn, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def option_costs(L, repeats, results):
    slopes = attnc.alibi_slopes(H, np.float32)
    sinks = np.zeros(H, np.float32)
    options = {
        "plain": {},
        "alibi": {"alibi_slopes": slopes},
        "softcap": {"softcap": 30.0},
        "sinks": {"sinks": sinks},
        "alibi+softcap+sinks": {"alibi_slopes": slopes, "softcap": 30.0, "sinks": sinks},
        # the masks' own cost (one segment, every block True: nothing skipped), then what skipping saves
        "segments (1 sequence)": {"segment_ids": np.zeros((1, L), np.int64)},
        "segments (8 packed)": {"segment_ids": np.repeat(np.arange(8), L // 8)[None]},
        "block_mask (all True)": {"block_mask": np.ones((1, 1, L // 128, L // 128), bool), "block_size": 128},
        "sigmoid": {"activation": "sigmoid"},
    }
    got = compare(L, options, repeats)
    print(f"options against the plain kernel, L = S = {L}, E = {E}, H = {H}, float32")
    for (name, mode), t in got.items():
        print(f"  {name:22s} {mode:17s} {1e3 * t:9.2f} ms  {t / got['plain', mode]:5.2f}x plain")
        results[f"L{L} {name} {mode}"] = t


def window_against_full(lengths, W, repeats, results):
    for L in lengths:
        configs = {
            "causal": {"is_causal": True},
            f"window ({W - 1}, 0)": {"window": (W - 1, 0)},
            "full": {},
            f"window ({W // 2}, {W // 2})": {"window": (W // 2, W // 2)},
        }
        got = compare(L, configs, max(3, repeats // 2) if L > 4096 else repeats)
        print(f"sliding window W = {W} against full attention, L = S = {L}")
        for (name, mode), t in got.items():
            print(f"  {name:22s} {mode:17s} {1e3 * t:9.2f} ms  {1e6 * t / L:8.2f} us per query")
            results[f"L{L} {name} {mode}"] = t


def _torch_window(torch, L, W, repeats):
    """{name: (median seconds, max |torch - attnc|)}: torch's SDPA with the band
    (key j of query i when i - W < j <= i) as a dense boolean mask, and
    torch's flex_attention compiled, its block mask skipping the blocks
    outside the band; attnc's window=(W - 1, 0) for reference. Forward."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v, _ = _inputs(L)
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))

    def in_band(b, h, qi, kj):
        return (kj <= qi) & (kj > qi - W)

    i = torch.arange(L)
    dense = in_band(None, None, i[:, None], i[None, :])
    block_mask = create_block_mask(in_band, None, None, L, L, device="cpu")
    flex = torch.compile(flex_attention, dynamic=False)
    ours = attnc.scaled_dot_product_attention(q, k, v, window=(W - 1, 0))
    calls = {
        "attnc window": lambda: attnc.scaled_dot_product_attention(q, k, v, window=(W - 1, 0)),
        "torch SDPA dense mask": lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=dense),
        "torch flex_attention": lambda: flex(tq, tk, tv, block_mask=block_mask),
    }
    out = {}
    with torch.no_grad():
        for name, fn in calls.items():
            got = np.asarray(fn())  # flex compiles here
            slow = name == "torch SDPA dense mask" and L >= 16384
            out[name] = (_median(fn, 1 if slow else repeats), float(np.abs(got - ours).max()))
    return out


def window_against_torch(torch, lengths, W, repeats, results):
    print(f"sliding window W = {W}, forward, against torch {torch.__version__} (same thread count)")
    print(f"  {'L':>6} {'attnc':>10} {'SDPA mask':>10} {'flex':>10}   ms; us per query: attnc / SDPA / flex")
    for L in lengths:
        got = _torch_window(torch, L, W, repeats)
        t = [got[n][0] for n in ("attnc window", "torch SDPA dense mask", "torch flex_attention")]
        diff = max(d for _, d in got.values())
        print(
            f"  {L:>6} {1e3 * t[0]:>10.2f} {1e3 * t[1]:>10.2f} {1e3 * t[2]:>10.2f}   "
            + " / ".join(f"{1e6 * x / L:.1f}" for x in t)
            + f"   (max |torch - attnc| {diff:.1e})"
        )
        if diff > 1e-4:
            sys.exit(f"L = {L}: torch and attnc's windows differ by {diff}")
        for name, (secs, d) in got.items():
            results[f"L{L} {name} forward"] = secs
            results[f"L{L} {name} max_abs_diff"] = d


def _mha_decoder(mha, P, T, x):
    """Standard multi-head decoding with attnc.KVCache: the prompt's P tokens
    at once, then T tokens one at a time. -> (seconds for the T, cache bytes,
    the last token's output)."""
    E, H = mha.embed_dim, mha.num_heads
    cache = attnc.KVCache(1, H, P + T, E // H, np.float32)

    def step(xs):
        n = xs.shape[1]
        q, k, v = (
            a.reshape(1, n, H, E // H).transpose(0, 2, 1, 3)
            for a in np.split(nn.linear(xs, mha.in_proj_weight), 3, axis=-1)
        )
        cache.append(k, v)
        o = cache.attend(np.ascontiguousarray(q))
        return nn.linear(np.ascontiguousarray(o.transpose(0, 2, 1, 3).reshape(1, n, E)), mha.out_proj.weight)

    step(x[:, :P])
    t = time.perf_counter()
    for i in range(P, P + T):
        last = step(x[:, i : i + 1])
    return time.perf_counter() - t, cache.keys.nbytes + cache.values.nbytes, last[:, -1]


def _mla_decoder(mla, P, T, x):
    """The same with multi-head latent attention in its absorbed form."""
    cache = nn.LatentCache()
    mla(x[:, :P], cache=cache, absorbed=True)
    t = time.perf_counter()
    for i in range(P, P + T):
        last = mla(x[:, i : i + 1], cache=cache, absorbed=True)
    return time.perf_counter() - t, cache.nbytes, last[:, -1]


def mla_decoding(prompts, T, repeats, results):
    E, heads = 512, 8
    mha = nn.MultiheadAttention(E, heads, bias=False, seed=0)
    mla = nn.MultiheadLatentAttention(E, heads, kv_lora_rank=256, qk_rope_head_dim=32, seed=0)
    print(
        f"decoding {T} tokens after a prompt, E = {E}, {heads} heads, float32: multi-head attention "
        f"({mha.num_parameters()} parameters, KVCache) against latent attention "
        f"({mla.num_parameters()} parameters, kv_lora_rank 256, RoPE key 32, absorbed, LatentCache)"
    )
    for P in prompts:
        x = np.random.default_rng(0).standard_normal((1, P + T, E)).astype(np.float32)
        runs = {"MHA": [], "MLA": []}
        for _ in range(repeats):
            for name, run in (("MHA", _mha_decoder), ("MLA", _mla_decoder)):
                runs[name].append(run(mha if name == "MHA" else mla, P, T, x))
        causal = np.triu(np.ones((P + T, P + T), bool), 1)  # torch's meaning: True = not allowed
        full = {"MHA": mha(x, x, x, attn_mask=causal, need_weights=False)[0], "MLA": mla(x)}
        for n, r in runs.items():  # decoding gives the full causal forward's last output
            if not np.allclose(r[0][2], full[n][:, -1], rtol=1e-4, atol=1e-5):
                sys.exit(f"{n}: decoding differs from the full forward")
        tps = {n: T / statistics.median(s for s, _, _ in r) for n, r in runs.items()}
        nbytes = {n: r[0][1] for n, r in runs.items()}
        print(
            f"  prompt {P:>5}: MHA {tps['MHA']:8.1f} tokens/s, cache {nbytes['MHA'] / 2**20:6.2f} MiB;  "
            f"MLA {tps['MLA']:8.1f} tokens/s, cache {nbytes['MLA'] / 2**20:6.2f} MiB "
            f"({nbytes['MLA'] / nbytes['MHA']:.2f}x the bytes, {tps['MLA'] / tps['MHA']:.2f}x the speed)"
        )
        for n in runs:
            results[f"decode P{P} {n} tokens_per_s"] = tps[n]
            results[f"decode P{P} {n} cache_bytes"] = nbytes[n]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="small sizes (CI)")
    p.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "variants.json")
    p.add_argument("--only", choices=PARTS, help="run one part, print it, write no JSON")
    args = p.parse_args(argv)
    import torch

    attnc.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print(machine.line(attnc))
    results: dict = {}
    W = 64 if args.quick else 256
    parts = {
        "options": lambda: option_costs(256 if args.quick else 2048, args.repeats, results),
        "window": lambda: window_against_full((512,) if args.quick else (2048, 8192), W, args.repeats, results),
        "torch": lambda: window_against_torch(
            torch,
            (256,) if args.quick else (2048, 4096, 8192, 16384, 32768),
            W,
            1 if args.quick else max(3, args.repeats // 2),
            results,
        ),
        "mla": lambda: mla_decoding(
            (64,) if args.quick else (1024, 4096), 4 if args.quick else 64, 1 if args.quick else 3, results
        ),
    }
    for name in [args.only] if args.only else PARTS:
        parts[name]()
    if args.only:  # a part alone is no full run: the committed results stay
        return
    data = {
        "benchmark": "the fused kernel's options, sliding windows against torch, MLA decoding",
        "torch": torch.__version__,
        "config": {"H": H, "E": E, "W": W, "dtype": "float32", "threads": args.threads, "quick": args.quick},
        "machine": machine.describe(attnc),
        "median_s": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
