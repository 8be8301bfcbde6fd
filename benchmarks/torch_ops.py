"""attnc inside PyTorch: what the custom ops cost, and a GPT training step.

1. Per call: attnc.torch.scaled_dot_product_attention (the custom op on
   tensors) against attnc's NumPy call on the same memory and torch's own
   F.scaled_dot_product_attention, at tiny sizes (L = S = 8, E = 16: the
   call's overhead) and large ones (L = S = 2048, E = 64: the kernel),
   forward and forward + backward (attnc.vjp's pullback for the NumPy call,
   torch.autograd.grad for the tensors).
2. One training step (forward, cross-entropy, backward, Adam) of a small GPT
   written with torch modules, its attention torch.nn.MultiheadAttention or
   attnc.torch.nn.MultiheadAttention, with need_weights=True (the weights
   logged every step, as people do to watch heads: torch then leaves its
   fused path) and with need_weights=False.

    python benchmarks/torch_ops.py            # ~2 minutes, writes benchmarks/results/torch_ops.json
    python benchmarks/torch_ops.py --quick    # ~20 s (L = 512 for the large size)

Timings: benchmarks/overhead.py's measure (calibrated loops, the candidates
in alternation, the median of --repeats). Ratios: other / attnc.torch (> 1:
the torch wrapper is faster); "overhead_us": wrapper minus NumPy call.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from overhead import measure  # benchmarks/overhead.py: the timing loop

import machine  # benchmarks/machine.py: what the run ran on

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

try:
    import attnc
except ImportError:  # running from a source checkout that is built but not installed
    sys.path.insert(0, str(REPO))
    import attnc

import torch
import torch.nn.functional as F

import attnc.torch as at

SIZES = {"tiny": (8, 16), "large": (2048, 64)}  # (L = S, E), one head, batch 1
QUICK_SIZES = {"tiny": (8, 16), "large": (512, 64)}


# --------------------------------------------------------------------------- 1. per call
def sdpa_calls(L, E, dtype):
    """{label: fn} for the forward and the forward + backward, each side on
    the same memory; and the largest difference between the sides' results."""
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.standard_normal((1, L, E)).astype(dtype) for _ in range(4))
    tq, tk, tv, tdout = (torch.from_numpy(a) for a in (q, k, v, dout))
    gq, gk, gv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))

    def numpy_grad():
        _, pullback = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v)
        return pullback(dout)

    def wrapper_grad():
        return torch.autograd.grad(at.scaled_dot_product_attention(gq, gk, gv), (gq, gk, gv), tdout)

    def torch_grad():
        return torch.autograd.grad(F.scaled_dot_product_attention(gq, gk, gv), (gq, gk, gv), tdout)

    forward = {
        "numpy": lambda: attnc.scaled_dot_product_attention(q, k, v),
        "attnc.torch": lambda: at.scaled_dot_product_attention(tq, tk, tv),
        "torch": lambda: F.scaled_dot_product_attention(tq, tk, tv),
    }
    backward = {"numpy": numpy_grad, "attnc.torch": wrapper_grad, "torch": torch_grad}
    want, got, ref = forward["numpy"](), forward["attnc.torch"]().numpy(), forward["torch"]().numpy()
    grads = numpy_grad()
    diff = {
        "wrapper_vs_numpy_bitwise": bool(np.array_equal(got, want))
        and all(np.array_equal(g.numpy(), grads[n]) for g, n in zip(wrapper_grad(), ("query", "key", "value"))),
        "max_abs_diff_vs_torch": float(np.abs(got - ref).max()),
    }
    return forward, backward, diff


def per_call(sizes, dtype, target, repeats):
    rows = []
    for size, (L, E) in sizes.items():
        forward, backward, check = sdpa_calls(L, E, dtype)
        for kind, fns in (("forward", forward), ("forward+backward", backward)):
            timed = measure(fns, target if size == "tiny" else target * 4, repeats)
            us = {label: t["median_us"] for label, t in timed.items()}
            rows.append(
                {
                    "size": size,
                    "L": L,
                    "E": E,
                    "pass": kind,
                    "median_us": us,
                    "overhead_us": us["attnc.torch"] - us["numpy"],
                    "ratio_torch_over_wrapper": us["torch"] / us["attnc.torch"],
                    "ratio_wrapper_over_numpy": us["attnc.torch"] / us["numpy"],
                    "check": check,
                }
            )
    return rows


# --------------------------------------------------------------------------- 2. GPT step
class Block(torch.nn.Module):
    def __init__(self, mha_class, d, heads, need_weights):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = mha_class(d, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
        self.need_weights = need_weights
        self.logged = None  # the last step's weights, as a training loop would log them

    def forward(self, x, mask):
        h = self.ln1(x)
        a, w = self.attn(h, h, h, attn_mask=mask, need_weights=self.need_weights, is_causal=True)
        self.logged = None if w is None else w.detach()
        x = x + a
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    def __init__(self, mha_class, vocab, d, heads, layers, T, need_weights):
        super().__init__()
        self.embed, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(T, d)
        self.blocks = torch.nn.ModuleList(Block(mha_class, d, heads, need_weights) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(T))

    def forward(self, ids):
        x = self.embed(ids) + self.pos.weight[: ids.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask[: ids.shape[1], : ids.shape[1]])
        return self.head(self.ln(x))


def gpt_steps(cfg, need_weights):
    """{impl: one training step} of the same GPT (same initial weights)."""
    ids = torch.randint(0, cfg["vocab"], (cfg["B"], cfg["T"] + 1), generator=torch.Generator().manual_seed(1))
    steps, first_loss = {}, {}
    for impl, mha in (("torch", torch.nn.MultiheadAttention), ("attnc.torch", at.nn.MultiheadAttention)):
        torch.manual_seed(0)
        model = GPT(mha, cfg["vocab"], cfg["d"], cfg["heads"], cfg["layers"], cfg["T"], need_weights)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step(model=model, opt=opt):
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        first_loss[impl] = float(step().detach())
        steps[impl] = step
    return steps, abs(first_loss["attnc.torch"] - first_loss["torch"]) / abs(first_loss["torch"])


def gpt(cfg, target, repeats):
    rows = []
    for need_weights in (True, False):
        steps, rel = gpt_steps(cfg, need_weights)
        timed = measure(steps, target, repeats)
        ms = {label: t["median_us"] / 1e3 for label, t in timed.items()}
        rows.append(
            {
                "need_weights": need_weights,
                "median_ms": ms,
                "ratio_torch_over_attnc": ms["torch"] / ms["attnc.torch"],
                "first_loss_rel_diff": rel,
            }
        )
    return rows


# --------------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=str(HERE / "results" / "torch_ops.json"))
    parser.add_argument("--quick", action="store_true", help="short run (~20 s)")
    parser.add_argument("--threads", type=int, default=None, help="threads for attnc and torch (default: attnc's)")
    parser.add_argument("--repeats", type=int, default=None, help="default 7, 3 with --quick")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    target = 0.004 if args.quick else 0.05
    if args.threads is not None:
        attnc.set_num_threads(args.threads)
    threads = attnc.get_num_threads()
    torch.set_num_threads(threads)
    cfg = (
        dict(vocab=64, d=64, heads=4, layers=2, T=32, B=4)
        if args.quick
        else dict(vocab=256, d=128, heads=4, layers=2, T=128, B=8)
    )
    print(machine.line(attnc))
    print(f"attnc {attnc.__version__} vs torch {torch.__version__}; float32, threads={threads}, median of {repeats}")
    load_before = machine.load_average()
    t0 = time.perf_counter()

    calls = per_call(QUICK_SIZES if args.quick else SIZES, np.float32, target, repeats)
    print("\n1. scaled_dot_product_attention per call (us); ratios other / attnc.torch")
    print(f"{'size':<6} {'pass':<17} {'numpy':>9} {'attnc.torch':>11} {'torch':>9} {'overhead':>9} {'torch/at':>9}")
    for r in calls:
        us = r["median_us"]
        print(
            f"{r['size']:<6} {r['pass']:<17} {us['numpy']:9.1f} {us['attnc.torch']:11.1f} {us['torch']:9.1f} "
            f"{r['overhead_us']:9.1f} {r['ratio_torch_over_wrapper']:9.2f}"
        )
    steps = gpt(cfg, target * 10, repeats)
    print(f"\n2. GPT training step (ms): {cfg}")
    for r in steps:
        ms = r["median_ms"]
        print(
            f"need_weights={r['need_weights']!s:<5}  torch {ms['torch']:8.2f}  attnc.torch {ms['attnc.torch']:8.2f}  "
            f"torch/attnc {r['ratio_torch_over_attnc']:5.2f}  (first losses differ by {r['first_loss_rel_diff']:.1e})"
        )
    failed = [f"{r['size']} {r['pass']}" for r in calls if not r["check"]["wrapper_vs_numpy_bitwise"]]
    failed += [f"{r['size']} vs torch" for r in calls if not r["check"]["max_abs_diff_vs_torch"] < 1e-4]
    failed += [f"gpt need_weights={r['need_weights']}" for r in steps if not r["first_loss_rel_diff"] < 1e-4]
    for f in failed:
        print(f"FAILED CHECK: {f}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    result = {
        "benchmark": "attnc.torch: custom op overhead and a GPT training step",
        "config": {"threads": threads, "repeats": repeats, "quick": args.quick, "dtype": "float32", "gpt": cfg},
        "environment": {
            "attnc": attnc.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "machine": machine.describe(attnc),
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": machine.load_average(),
        },
        "per_call": calls,
        "gpt_step": steps,
        "failed_checks": failed,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
