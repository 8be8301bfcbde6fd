"""Throughput and peak memory of attnc.scaled_dot_product_attention against
PyTorch's SDPA on CPU, a NumPy implementation and OpenBLAS sgemm, in one run.

    python benchmarks/attention.py               # full grid, < 10 min on 2 cores
    python benchmarks/attention.py --quick       # small subset, < 1 min
    python benchmarks/attention.py --threads 1 --json out.json

What is timed (float32, inputs (1, B*H, L, E), L = S, Ev = E):
  attnc   attnc.scaled_dot_product_attention(q, k, v, is_causal=c); forward+backward
          is attnc.vjp(...) followed by pullback(dout).
  torch   torch.nn.functional.scaled_dot_product_attention (CPU); forward+backward
          is the forward on leaf tensors with requires_grad then out.backward(dout)
          (gradients reset to None before every call, as zero_grad does).
  numpy   softmax(q @ k^T * scale) @ v, batched, materialising the (B*H, L, S)
          scores; causal by setting masked scores to -inf; backward by hand
          (dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)), dQ = dS K s,
          dK = dS^T Q s). Skipped when one (B*H, L, S) float32 matrix exceeds
          --numpy-max-gb (default 1.1 GB: L = 8192 with B*H = 16).
  sgemm   numpy.matmul (numpy's own OpenBLAS) of float32 (m, k) @ (k, n) matrices,
          m = n ~ k ~ (FLOPs / 2)^(1/3), with the same FLOP count as the
          attention call; dimensions are capped at --sgemm-cap (4096), where
          sgemm has reached its plateau, so the largest calls are compared with
          the n = 4096 rate. The best sgemm rate seen is the machine's practical
          peak.

FLOPs (the FlashAttention convention): forward 4 * B*H * L * S * E (two matrix
products), halved when causal (only the FLOPs that are needed are counted, for
every implementation, so the NumPy reference, which computes the masked half
too, gets an "effective" rate); forward+backward = 3.5 x forward (backward
counted as 2.5 x forward). GFLOP/s = FLOPs / median wall time.

Threads: attnc.set_num_threads(n), torch.set_num_threads(n) and, for the numpy
and sgemm timings, numpy's BLAS (through threadpoolctl, which tells it from
the OpenBLAS bundled with attnc by its folder) all use --threads (default 2).
The run fails, rather than print a NaN peak, if numpy's BLAS cannot be set or
the sgemm peak cannot be measured.

Every benchmark prints the machine first: the CPU, attnc's SIMD path and its
OpenBLAS kernel, numpy's BLAS and kernel, and OPENBLAS_CORETYPE /
OPENBLAS_L2_SIZE as the environment sets them (the benchmarks leave them
alone, so they measure the machine as its users have it).

Every (implementation, configuration, forward or forward+backward) is run in a
fresh process, forked from this one, which has imported the libraries, has
computed nothing and runs a single thread (so fork() is safe). The child warms up on a small problem (thread
pools, code pages), allocates the inputs, takes its resident set size as the
baseline, resets the peak (/proc/self/clear_refs), makes one call and reads
VmHWM: "peak MB" is VmHWM - baseline in MiB (it includes the returned arrays).
That first call is also the warm-up for the timing: then the call is repeated
up to 5 times within about --budget seconds and the median is reported; calls
that take longer than the budget are timed once (that first call).

The memory check (L = S = 32768, E = 64, B*H = 1, forward+backward) runs each
implementation in a new interpreter that imports only numpy and that library,
so its VmHWM is the absolute peak RSS of a process doing that call.

The multi-head table compares attnc.multi_head_attention with
torch.nn.MultiheadAttention(batch_first=True) in eval mode under
torch.inference_mode(), self-attention, B = 8, L = 512, E = 512, 8 heads,
need_weights True (averaged weights) and False, forward only.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import machine  # benchmarks/machine.py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

np = torch = F = attnc = None  # imported by _import_libs(), after the thread count is known

FULL_GRID = {"L": (128, 512, 1024, 2048, 4096, 8192), "E": (64, 128), "BH": (1, 16)}
QUICK_GRID = {"L": (128, 1024), "E": (64,), "BH": (1, 16)}
MEMCHECK = {"L": 32768, "E": 64, "BH": 1}
QUICK_MEMCHECK = {"L": 8192, "E": 64, "BH": 1}
MHA = {"B": 8, "L": 512, "E": 512, "H": 8}


# --------------------------------------------------------------------------- libraries
def _import_libs(snapshot=True):
    """Import the libraries without starting any thread pool.

    This process only forks the children that compute: it stays single-threaded
    so that fork() is safe. Each child sets its thread counts (_set_threads)."""
    global np, torch, F, attnc
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    # Both OpenBLAS builds (numpy's, attnc's bundled one) start their worker
    # threads when loaded: none in this process.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy

        np = numpy
        try:  # torch is optional: without it the table has no torch column
            import torch as _torch
            import torch.nn.functional as _F

            torch, F = _torch, _F
        except ImportError:
            torch = F = None
        if snapshot:
            _snapshot_attnc()
        try:
            import attnc as _attnc
        except ImportError:  # a source checkout that is built but not installed
            sys.path.insert(0, str(REPO))
            import attnc as _attnc
        attnc = _attnc
    finally:
        if saved is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved
    import numpy.random  # lazily imported by numpy otherwise: once here, not per child

    # The children's gc.collect() must not walk (and copy-on-write) every object
    # of the imported libraries.
    gc.collect()
    gc.freeze()


SNAPSHOT_DIR = None
SNAPSHOT_SRC = None


def _snapshot_attnc():
    """Import attnc from a private copy of its package directory.

    Rebuilding attnc rewrites its shared libraries in place; a process that has
    them mapped then runs modified code (SIGSEGV / SIGBUS). The benchmark runs
    for minutes, so it loads a copy that nothing rewrites."""
    global SNAPSHOT_DIR, SNAPSHOT_SRC
    import importlib.util
    import shutil
    import tempfile

    spec = importlib.util.find_spec("attnc")
    if spec is None:
        sys.path.insert(0, str(REPO))
        spec = importlib.util.find_spec("attnc")
    if spec is None or spec.origin is None:
        return
    src = Path(spec.origin).parent
    SNAPSHOT_SRC = str(src)
    SNAPSHOT_DIR = tempfile.mkdtemp(prefix="attnc-bench-")
    shutil.copytree(src, Path(SNAPSHOT_DIR) / "attnc", ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, SNAPSHOT_DIR)
    import atexit

    atexit.register(shutil.rmtree, SNAPSHOT_DIR, ignore_errors=True)


def _set_threads(threads, numpy_blas):
    """In a child: attnc and torch at ``threads`` threads; numpy's OpenBLAS too
    when ``numpy_blas`` (only where numpy's BLAS is what is timed: its fresh
    worker threads spin for a while and would slow down the other libraries)."""
    if attnc is not None:
        attnc.set_num_threads(threads)
    if torch is not None:
        torch.set_num_threads(threads)
    if not numpy_blas:
        return
    libs = machine.numpy_blas(attnc)
    if not libs:
        raise RuntimeError("threadpoolctl finds no BLAS of numpy's in this process: cannot set its threads")
    for lib in libs:
        lib.set_num_threads(threads)
        if lib.get_num_threads() != threads:
            raise RuntimeError(f"numpy's BLAS ({lib.filepath}) runs {lib.get_num_threads()} threads, not {threads}")


def have_sdpa():
    return attnc is not None and hasattr(attnc, "scaled_dot_product_attention")


def have_mha():
    return attnc is not None and hasattr(attnc, "multi_head_attention")


# --------------------------------------------------------------------------- memory
def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def _reset_peak():
    """Reset VmHWM to the current RSS (Linux >= 4.0). False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


_LIBC = None


def _trim():
    """Collect garbage and give freed heap memory back to the OS."""
    global _LIBC
    gc.collect()
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _peak_kb():
    hwm = _status_kb("VmHWM")
    if hwm is None:  # no /proc: ru_maxrss is in kB on Linux
        import resource

        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return hwm


# --------------------------------------------------------------------------- child processes
def run_forked(fn, *args, timeout=900):
    """Run fn(*args) in a forked child; return its JSON-able result or an error dict."""
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        code = 0
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(int(timeout))
            res = {"ok": True, "result": fn(*args)}
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            data = json.dumps(res).encode()
            with os.fdopen(w, "wb") as f:
                f.write(data)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        if os.WIFSIGNALED(status):
            why = f"killed by signal {os.WTERMSIG(status)}"
            if os.WTERMSIG(status) == signal.SIGALRM:
                why += f" (timeout {timeout} s)"
        else:
            why = f"exit status {os.WEXITSTATUS(status)}"
        return {"ok": False, "error": f"child process died: {why}"}
    return json.loads(data)


# --------------------------------------------------------------------------- implementations
def flops(L, S, E, BH, causal, mode):
    f = 4.0 * BH * L * S * E
    if causal:
        f /= 2
    return f * (3.5 if mode == "fwd+bwd" else 1.0)


def make_inputs(L, S, E, BH, seed=0):
    rng = np.random.default_rng(seed)
    shape_q, shape_kv = (1, BH, L, E), (1, BH, S, E)
    q = rng.standard_normal(shape_q, dtype=np.float32)
    k = rng.standard_normal(shape_kv, dtype=np.float32)
    v = rng.standard_normal(shape_kv, dtype=np.float32)
    dout = rng.standard_normal(shape_q, dtype=np.float32)
    return q, k, v, dout


def numpy_sdpa(q, k, v, causal, dout=None):
    """softmax(q k^T * scale) v over the last two axes; with dout also the gradients."""
    E = q.shape[-1]
    L, S = q.shape[-2], k.shape[-2]
    scale = np.float32(1.0 / math.sqrt(E))
    p = np.matmul(q, np.swapaxes(k, -1, -2))  # (BH, L, S), the materialised scores
    p *= scale
    if causal:
        np.copyto(p, np.float32(-np.inf), where=np.triu(np.ones((L, S), dtype=bool), 1))
    p -= p.max(axis=-1, keepdims=True)
    np.exp(p, out=p)
    p /= p.sum(axis=-1, keepdims=True)
    out = np.matmul(p, v)
    if dout is None:
        return out
    dv = np.matmul(np.swapaxes(p, -1, -2), dout)
    ds = np.matmul(dout, np.swapaxes(v, -1, -2))  # dP
    ds -= np.sum(dout * out, axis=-1, keepdims=True)
    ds *= p
    ds *= scale
    del p
    dq = np.matmul(ds, k)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q)
    return out, {"query": dq, "key": dk, "value": dv}


def build_call(impl, mode, causal, q, k, v, dout):
    """A no-argument callable doing one call (or forward+backward) on these inputs."""
    if impl == "attnc":
        sdpa = attnc.scaled_dot_product_attention
        if mode == "fwd":
            return lambda: sdpa(q, k, v, is_causal=causal)

        def fb():
            out, pullback = attnc.vjp(sdpa, q, k, v, is_causal=causal)
            return out, pullback(dout)

        return fb
    if impl == "torch":
        tq, tk, tv, tdout = (torch.from_numpy(x) for x in (q, k, v, dout))
        if mode == "fwd":

            def fwd():
                with torch.no_grad():
                    return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

            return fwd
        leaves = [t.detach().requires_grad_(True) for t in (tq, tk, tv)]

        def fb():
            for t in leaves:
                t.grad = None
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            out.backward(tdout)
            return out.detach(), {n: t.grad for n, t in zip(("query", "key", "value"), leaves)}

        return fb
    if impl == "numpy":
        if mode == "fwd":
            return lambda: numpy_sdpa(q, k, v, causal)
        return lambda: numpy_sdpa(q, k, v, causal, dout)
    raise ValueError(impl)


def _timed(fn):
    t0 = time.perf_counter()
    res = fn()
    return time.perf_counter() - t0, res


WARMUP_S = 0.05  # least warm-up time per child
MIN_SAMPLE_S = 0.02  # a sample of a short call loops over calls for at least this long


def _repeat(fn, t_first, budget, max_repeats):
    """Per-call times (seconds): the first call alone if it exceeded the budget,
    else up to max_repeats samples fitting in about budget seconds, each sample
    the mean of enough consecutive calls to last MIN_SAMPLE_S."""
    if t_first >= budget:
        return [t_first], True, 1
    t = max(t_first, 1e-7)
    inner = max(1, min(1000, math.ceil(MIN_SAMPLE_S / t)))
    n = max(1, min(max_repeats, int(budget / (t * inner))))
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in range(inner):
            res = fn()
            del res
        samples.append((time.perf_counter() - t0) / inner)
    return samples, False, inner


def job_attention(impl, L, E, BH, causal, mode, threads, budget, max_repeats):
    """Child process: peak memory of one call, then its timing."""
    _set_threads(threads, numpy_blas=impl == "numpy")
    # warm-up on a small problem (thread pools, lazy initialisation, code
    # pages), for at least WARMUP_S so that freshly started threads settle
    wq, wk, wv, wd = make_inputs(min(L, 256), min(L, 256), E, min(BH, 2), seed=1)
    warm = build_call(impl, mode, causal, wq, wk, wv, wd)
    t0, n = time.perf_counter(), 0
    while n < 3 or (time.perf_counter() - t0 < WARMUP_S and n < 200):
        warm()
        n += 1
    del wq, wk, wv, wd, warm
    q, k, v, dout = make_inputs(L, L, E, BH)
    fn = build_call(impl, mode, causal, q, k, v, dout)
    _trim()
    base_kb = _status_kb("VmRSS")
    reset = _reset_peak()
    t_first, res = _timed(fn)
    peak_kb = _peak_kb()
    del res
    _trim()
    samples, first_only, inner = _repeat(fn, t_first, budget, max_repeats)
    return {
        "samples_s": samples,
        "calls_per_sample": inner,
        "first_call_s": t_first,
        "timed_first_call_only": first_only,
        "baseline_rss_mb": base_kb / 1024.0,
        "peak_rss_mb": peak_kb / 1024.0,
        "peak_increase_mb": (peak_kb - base_kb) / 1024.0,
        "peak_reset": reset,
    }


def job_check(L, E, BH, causal, threads):
    """Child process: largest relative difference of attnc and torch from the NumPy
    reference (forward output and the three gradients) on one configuration."""
    _set_threads(threads, numpy_blas=False)
    q, k, v, dout = make_inputs(L, L, E, BH, seed=2)
    ref_out, ref_g = numpy_sdpa(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal, dout.astype(np.float64)
    )
    refs = {"out": ref_out, **ref_g}

    def rel(got):
        return max(
            float(np.max(np.abs(np.asarray(got[n], np.float64) - refs[n])) / max(float(np.max(np.abs(refs[n]))), 1e-30))
            for n in refs
        )

    res = {}
    for impl in ("attnc", "torch"):
        if (impl == "attnc" and not have_sdpa()) or (impl == "torch" and torch is None):
            continue
        out, g = build_call(impl, "fwd+bwd", causal, q, k, v, dout)()
        got = {"out": np.asarray(out), **{n: np.asarray(t) for n, t in g.items()}}
        res[impl] = rel(got)
    return res


def sgemm_shape(fl, cap):
    n = max(1, round((fl / 2.0) ** (1.0 / 3.0)))
    n = min(n, cap)
    kk = max(1, min(cap, round(fl / (2.0 * n * n))))
    return (n, kk, n)


def job_sgemm(shapes, threads, budget, max_repeats):
    """Child process: GFLOP/s of numpy.matmul (OpenBLAS sgemm) for each (m, k, n)."""
    _set_threads(threads, numpy_blas=True)
    out = {}
    rng = np.random.default_rng(3)
    for m, kk, n in shapes:
        a = rng.standard_normal((m, kk), dtype=np.float32)
        b = rng.standard_normal((kk, n), dtype=np.float32)
        c = np.empty((m, n), dtype=np.float32)
        fn = functools.partial(np.matmul, a, b, out=c)
        fn()
        t_first, _ = _timed(fn)
        samples, _, inner = _repeat(fn, t_first, budget, max(max_repeats, 3))
        if len(samples) < 3 and t_first < budget:
            samples.append(t_first)
        best, med = min(samples), statistics.median(samples)
        fl = 2.0 * m * kk * n
        out[f"{m}x{kk}x{n}"] = {
            "best_s": best,
            "median_s": med,
            "gflops": fl / best / 1e9,
            "gflops_median": fl / med / 1e9,
            "repeats": len(samples),
            "calls_per_sample": inner,
        }
    return out


def job_mha(impl, need_weights, threads, budget, max_repeats):
    _set_threads(threads, numpy_blas=False)
    B, L, E, H = MHA["B"], MHA["L"], MHA["E"], MHA["H"]
    torch.manual_seed(0)
    mod = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    sd = {n: t.detach().numpy().copy() for n, t in mod.state_dict().items()}
    x = np.random.default_rng(4).standard_normal((B, L, E), dtype=np.float32)
    tx = torch.from_numpy(x)
    if impl == "torch":

        def fn():
            with torch.inference_mode():
                return mod(tx, tx, tx, need_weights=need_weights)
    else:

        def fn():
            return attnc.multi_head_attention(
                x,
                x,
                x,
                H,
                sd["in_proj_weight"],
                sd["in_proj_bias"],
                sd["out_proj.weight"],
                sd["out_proj.bias"],
                need_weights=need_weights,
            )

    for _ in range(2):
        fn()
    _trim()
    base_kb = _status_kb("VmRSS")
    _reset_peak()
    t_first, res = _timed(fn)
    peak_kb = _peak_kb()
    out = res[0].numpy() if impl == "torch" else res[0]
    w = None if res[1] is None else (res[1].numpy() if impl == "torch" else res[1])
    checksum = {
        "out": out[0, :4, :4].astype(float).tolist(),
        "w": None if w is None else w[0, :4, :4].astype(float).tolist(),
    }
    del res, out, w
    _trim()
    samples, _, _ = _repeat(fn, t_first, budget, max(max_repeats, 5))
    return {"samples_s": samples, "peak_increase_mb": (peak_kb - base_kb) / 1024.0, "sample": checksum}


def mha_flops(need_weights):
    B, L, E = MHA["B"], MHA["L"], MHA["E"]
    return 8.0 * B * L * E * E + 4.0 * B * L * L * E


MEMCHECK_CHILD = r"""
import json, math, os, sys, time
impl, L, E, BH, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sys.path[:0] = [sys.argv[6]] if sys.argv[6] else []
sys.path.append(sys.argv[7])
import numpy as np
if impl == "attnc":
    import attnc
    attnc.set_num_threads(threads)
else:
    import torch, torch.nn.functional as F
    torch.set_num_threads(threads)
import ctypes, gc
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
rng = np.random.default_rng(0)
q, k, v, dout = (rng.standard_normal((1, BH, L, E), dtype=np.float32) for _ in range(4))
if impl == "attnc":
    def fn():
        out, pullback = attnc.vjp(attnc.scaled_dot_product_attention, q, k, v)
        return out, pullback(dout)
else:
    leaves = [torch.from_numpy(x).requires_grad_(True) for x in (q, k, v)]
    tdout = torch.from_numpy(dout)
    def fn():
        out = F.scaled_dot_product_attention(*leaves)
        out.backward(tdout)
        return out
gc.collect()
ctypes.CDLL("libc.so.6").malloc_trim(0)
base = status("VmRSS")
t0 = time.perf_counter()
res = fn()
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "baseline_rss_mb": base / 1024, "peak_rss_mb": status("VmHWM") / 1024,
                  "peak_increase_mb": (status("VmHWM") - base) / 1024}))
"""


def run_memcheck(impl, L, E, BH, threads, timeout=600):
    """A new interpreter importing numpy and one library: absolute peak RSS."""
    env = dict(os.environ)
    if impl == "torch":
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-c",
                MEMCHECK_CHILD,
                impl,
                str(L),
                str(E),
                str(BH),
                str(threads),
                SNAPSHOT_DIR or "",
                str(REPO),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout {timeout} s"}
    if p.returncode != 0:
        return {"ok": False, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return {"ok": True, "result": json.loads(p.stdout.strip().splitlines()[-1])}


def _cpu_busy_s():
    """Seconds of CPU time spent by all processes on this machine so far (/proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None


def _own_cpu_s():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _parent_threads():
    """Threads of this process (forking a multi-threaded process is unsafe: warn)."""
    try:
        n = len(os.listdir("/proc/self/task"))
    except OSError:
        return None
    if n != 1:
        print(f"WARNING: this process runs {n} threads; forking it may be unsafe")
    return n


def _load_start():
    """What _load_share compares against: the load average and CPU times now."""
    return {"load_before": os.getloadavg()[0], "busy": _cpu_busy_s(), "own": _own_cpu_s()}


def _load_share(start, elapsed):
    """CPU time of other processes during the run, as a share of the machine (None if unknown)."""
    busy, own = _cpu_busy_s(), _own_cpu_s()
    if start["busy"] is None or busy is None:
        return None
    return max(0.0, (busy - start["busy"]) - (own - start["own"])) / (elapsed * (os.cpu_count() or 1))


def _load_report(start, others):
    """Print how busy the machine was, and a warning when timings are unreliable."""
    ncpu = os.cpu_count() or 1
    if others is not None:
        print(
            f"other processes used {100 * others:.0f}% of the {ncpu} CPUs during the run "
            f"(1-minute load average before it: {start['load_before']:.2f})"
        )
    if (others > 0.15) if others is not None else (start["load_before"] > 0.5 * ncpu):
        print("WARNING: the machine was busy: timings are unreliable")


def _git_rev():
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else None
    except (OSError, subprocess.SubprocessError):
        return None


# --------------------------------------------------------------------------- formatting
def _f(x, fmt="{:.1f}", width=7):
    return (fmt.format(x) if x is not None else "-").rjust(width)


def print_tables(rows, sgemm_peak, threads, have_attnc):
    for mode in ("fwd", "fwd+bwd"):
        title = "forward" if mode == "fwd" else "forward + backward"
        print(f"\n== {title}: GFLOP/s (median), ratios, peak memory increase per call (MiB) ==")
        head = (
            f"{'L':>5} {'E':>4} {'BH':>3} {'causal':>6} |{'attnc':>7}{'torch':>7}{'numpy':>7}"
            f"{'sgemm':>7} |{'a/torch':>8}{'a/sgemm':>8}{'c-speedup':>10} |"
            f"{'MiB attnc':>10}{'torch':>8}{'numpy':>8}"
        )
        print(head)
        print("-" * len(head))
        prev = None
        for r in rows:
            if r["mode"] != mode:
                continue
            key = (r["E"], r["BH"])
            if prev is not None and key != prev:
                print()
            prev = key
            g = {i: (r["impl"][i]["gflops"] if r["impl"].get(i) else None) for i in ("attnc", "torch", "numpy")}
            m = {
                i: (r["impl"][i]["peak_increase_mb"] if r["impl"].get(i) else None) for i in ("attnc", "torch", "numpy")
            }
            cs = r.get("causal_speedup", {}).get("attnc") if have_attnc else None
            print(
                f"{r['L']:>5} {r['E']:>4} {r['BH']:>3} {('yes' if r['causal'] else 'no'):>6} |"
                f"{_f(g['attnc'])}{_f(g['torch'])}{_f(g['numpy'])}{_f(r['sgemm_gflops'])} |"
                f"{_f(r.get('attnc_over_torch'), '{:.2f}', 8)}{_f(r.get('attnc_over_sgemm'), '{:.2f}', 8)}"
                f"{_f(cs, '{:.2f}', 10)} |"
                f"{_f(m['attnc'], '{:.1f}', 10)}{_f(m['torch'], '{:.1f}', 8)}{_f(m['numpy'], '{:.1f}', 8)}"
            )
    print(
        f"\nsgemm practical peak (numpy.matmul float32, {threads} threads, best of repeats): "
        f"{sgemm_peak:.1f} GFLOP/s. The sgemm column is the best of repeats at the same FLOP count "
        f"(matrix sides capped at 4096); the other columns are medians."
    )
    print(
        "FLOPs: forward 4*BH*L*S*E, halved when causal; forward+backward = 3.5 x forward "
        "(backward = 2.5 x forward, the FlashAttention convention)."
    )
    print(
        "a/torch, a/sgemm: attnc GFLOP/s over torch's / over sgemm at the same FLOP count. "
        "c-speedup: attnc time non-causal / time causal at the same size (ideal 2)."
    )
    print(
        "MiB: peak RSS increase during one call over the process baseline after imports and "
        "input allocation (includes the outputs). numpy '-' = skipped (> ~1 GB of scores)."
    )


# --------------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--json",
        default=str(HERE / "results" / "attention.json"),
        help="where to write the results (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="small subset (< 1 minute)")
    parser.add_argument(
        "--threads", type=int, default=2, help="threads for attnc, torch and numpy's OpenBLAS (default 2)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="most timed repeats per call")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds of timed repeats per measurement (default 1.0; 0.3 with --quick)",
    )
    parser.add_argument(
        "--numpy-max-gb", type=float, default=1.1, help="skip NumPy when one (B*H, L, S) float32 matrix exceeds this"
    )
    parser.add_argument("--sgemm-cap", type=int, default=4096, help="largest sgemm matrix dimension (default 4096)")
    parser.add_argument("--no-memcheck", action="store_true", help="skip the L = 32768 memory check")
    parser.add_argument("--no-mha", action="store_true", help="skip the multi-head table")
    parser.add_argument(
        "--no-snapshot", action="store_true", help="import attnc in place instead of from a private copy"
    )
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    budget = args.budget if args.budget is not None else (0.3 if args.quick else 1.0)
    threads = args.threads

    _import_libs(snapshot=not args.no_snapshot)
    sdpa_ok = have_sdpa()
    parent_threads = _parent_threads()
    t_start = time.perf_counter()
    load = _load_start()
    grid = QUICK_GRID if args.quick else FULL_GRID
    print(machine.line(attnc))
    print(
        f"attnc {getattr(attnc, '__version__', '?')} (BLAS: {attnc.blas_info()}), "
        f"torch {torch.__version__ if torch is not None else '(not installed)'}, "
        f"numpy {np.__version__}; float32, {threads} threads, up to {args.repeats} repeats "
        f"(median) within ~{budget} s per measurement{' (quick)' if args.quick else ''}"
    )
    if not sdpa_ok:
        print("NOTE: attnc.scaled_dot_product_attention does not exist yet: attnc columns skipped")
    impls = [i for i, ok in (("attnc", sdpa_ok), ("torch", torch is not None), ("numpy", True)) if ok]

    # ---- the grid
    configs = [(E, BH, L, c) for E in grid["E"] for BH in grid["BH"] for L in grid["L"] for c in (False, True)]
    rows = []
    errors = []
    for E, BH, L, causal in configs:
        for mode in ("fwd", "fwd+bwd"):
            row = {
                "L": L,
                "S": L,
                "E": E,
                "BH": BH,
                "causal": causal,
                "mode": mode,
                "flops": flops(L, L, E, BH, causal, mode),
                "impl": {},
            }
            for impl in impls:
                if impl == "numpy" and BH * L * L * 4 > args.numpy_max_gb * 1e9:
                    row["impl"][impl] = None
                    continue
                res = run_forked(job_attention, impl, L, E, BH, causal, mode, threads, budget, args.repeats)
                if not res["ok"]:
                    errors.append(f"{impl} L={L} E={E} BH={BH} causal={causal} {mode}: {res['error']}")
                    row["impl"][impl] = None
                    continue
                r = res["result"]
                med = statistics.median(r["samples_s"])
                r["median_s"] = med
                r["gflops"] = row["flops"] / med / 1e9
                row["impl"][impl] = r
            rows.append(row)
            got = {i: (round(r["gflops"], 1) if r else None) for i, r in row["impl"].items()}
            print(
                f"  [{time.perf_counter() - t_start:6.1f} s] L={L} E={E} BH={BH} causal={causal} {mode}: {got}",
                file=sys.stderr,
                flush=True,
            )

    phases = {"grid_s": time.perf_counter() - t_start}
    # ---- sgemm at the same FLOP counts
    shapes = sorted({tuple(sgemm_shape(r["flops"], args.sgemm_cap)) for r in rows})
    peak_shapes = [(n, n, n) for n in (2048, 3072, args.sgemm_cap)]
    shapes = sorted(set(shapes) | set(peak_shapes))
    res = run_forked(job_sgemm, shapes, threads, budget, args.repeats)
    sgemm = res["result"] if res["ok"] else {}
    if not res["ok"]:
        errors.append(f"sgemm: {res['error']}")
    if not sgemm:
        raise SystemExit(f"the sgemm practical peak cannot be measured: {errors[-1]}")
    sgemm_peak = max(s["gflops"] for s in sgemm.values())
    for row in rows:
        m, kk, n = sgemm_shape(row["flops"], args.sgemm_cap)
        s = sgemm.get(f"{m}x{kk}x{n}")
        row["sgemm_shape"] = [m, kk, n]
        row["sgemm_gflops"] = s["gflops"] if s else None
        a = row["impl"].get("attnc")
        t = row["impl"].get("torch")
        row["attnc_over_torch"] = a["gflops"] / t["gflops"] if a and t else None
        row["attnc_over_sgemm"] = a["gflops"] / s["gflops"] if a and s else None
    # causal speed-up: time(non-causal) / time(causal)
    index = {(r["L"], r["E"], r["BH"], r["causal"], r["mode"]): r for r in rows}
    for r in rows:
        if r["causal"]:
            nc = index.get((r["L"], r["E"], r["BH"], False, r["mode"]))
            r["causal_speedup"] = {
                i: nc["impl"][i]["median_s"] / r["impl"][i]["median_s"]
                for i in ("attnc", "torch")
                if nc and nc["impl"].get(i) and r["impl"].get(i)
            }

    phases["sgemm_s"] = time.perf_counter() - t_start - sum(phases.values())
    # ---- correctness cross-check on the small sizes
    checks = []
    for E, BH, L, causal in configs:
        if L > 1024:
            continue
        res = run_forked(job_check, L, E, BH, causal, threads)
        checks.append(
            {
                "L": L,
                "E": E,
                "BH": BH,
                "causal": causal,
                **({"max_rel_diff_vs_numpy_float64": res["result"]} if res["ok"] else {"error": res["error"]}),
            }
        )

    phases["checks_s"] = time.perf_counter() - t_start - sum(phases.values())
    print_tables(rows, sgemm_peak, threads, sdpa_ok)
    bad = [c for c in checks if "error" in c or any(d > 1e-4 for d in c["max_rel_diff_vs_numpy_float64"].values())]
    worst = {}
    for c in checks:
        for i, d in c.get("max_rel_diff_vs_numpy_float64", {}).items():
            worst[i] = max(worst.get(i, 0.0), d)
    print(
        "check (L <= 1024, output and gradients vs a float64 NumPy reference, max relative "
        "error): " + ", ".join(f"{i} {d:.1e}" for i, d in worst.items())
    )
    for c in bad:
        print(f"WARNING: check failed: {c}")

    # ---- memory check
    memcheck = None
    if not args.no_memcheck:
        mc = QUICK_MEMCHECK if args.quick else MEMCHECK
        memcheck = {**mc, "mode": "fwd+bwd", "causal": False, "impl": {}}
        print(
            f"\n== memory check: L = S = {mc['L']}, E = {mc['E']}, B*H = {mc['BH']}, "
            f"forward + backward, one call in a new process =="
        )
        head = f"{'impl':<6} {'seconds':>8} {'GFLOP/s':>8} {'peak RSS MiB':>13} {'increase MiB':>13}"
        print(head)
        print("-" * len(head))
        fl = flops(mc["L"], mc["L"], mc["E"], mc["BH"], False, "fwd+bwd")
        for impl in ("attnc", "torch"):
            if (impl == "attnc" and not sdpa_ok) or (impl == "torch" and torch is None):
                continue
            res = run_memcheck(impl, mc["L"], mc["E"], mc["BH"], threads)
            if not res["ok"]:
                errors.append(f"memcheck {impl}: {res['error']}")
                print(f"{impl:<6} failed: {res['error']}")
                continue
            r = res["result"]
            r["gflops"] = fl / r["seconds"] / 1e9
            memcheck["impl"][impl] = r
            print(
                f"{impl:<6} {r['seconds']:8.2f} {r['gflops']:8.1f} {r['peak_rss_mb']:13.1f} "
                f"{r['peak_increase_mb']:13.1f}"
            )
        print("peak RSS = VmHWM of a process that imported numpy and that library only.")

    phases["memcheck_s"] = time.perf_counter() - t_start - sum(phases.values())
    # ---- multi-head attention
    mha = None
    if not args.no_mha:
        print(
            f"\n== multi-head attention: B = {MHA['B']}, L = {MHA['L']}, E = {MHA['E']}, "
            f"{MHA['H']} heads, self-attention, forward (eval), median ms =="
        )
        if torch is None:
            print("skipped: torch is not installed")
        elif not have_mha():
            print("skipped: attnc.multi_head_attention does not exist yet")
        else:
            mha = {**MHA, "rows": []}
            head = (
                f"{'need_weights':<12} {'attnc ms':>9} {'torch ms':>9} {'torch/attnc':>12} "
                f"{'attnc GF/s':>11} {'MiB attnc':>10} {'torch':>8} {'max|diff|':>10}"
            )
            print(head)
            print("-" * len(head))
            for nw in (True, False):
                got = {}
                for impl in ("attnc", "torch"):
                    res = run_forked(job_mha, impl, nw, threads, budget, args.repeats)
                    if res["ok"]:
                        got[impl] = res["result"]
                        got[impl]["median_s"] = statistics.median(res["result"]["samples_s"])
                    else:
                        errors.append(f"mha {impl} need_weights={nw}: {res['error']}")
                a, t = got.get("attnc"), got.get("torch")
                diff = None
                if a and t:
                    diff = float(np.max(np.abs(np.array(a["sample"]["out"]) - np.array(t["sample"]["out"]))))
                    if nw and a["sample"]["w"] is not None and t["sample"]["w"] is not None:
                        diff = max(diff, float(np.max(np.abs(np.array(a["sample"]["w"]) - np.array(t["sample"]["w"])))))
                row = {
                    "need_weights": nw,
                    "attnc": a,
                    "torch": t,
                    "max_abs_diff_sample": diff,
                    "flops": mha_flops(nw),
                    "torch_over_attnc_time": t["median_s"] / a["median_s"] if a and t else None,
                }
                mha["rows"].append(row)
                print(
                    f"{nw!s:<12} {_f(a and a['median_s'] * 1e3, '{:.2f}', 9)} "
                    f"{_f(t and t['median_s'] * 1e3, '{:.2f}', 9)} "
                    f"{_f(row['torch_over_attnc_time'], '{:.2f}', 12)} "
                    f"{_f(a and mha_flops(nw) / a['median_s'] / 1e9, '{:.1f}', 11)} "
                    f"{_f(a and a['peak_increase_mb'], '{:.1f}', 10)} "
                    f"{_f(t and t['peak_increase_mb'], '{:.1f}', 8)} {_f(diff, '{:.1e}', 10)}"
                )

    elapsed = time.perf_counter() - t_start
    phases["mha_s"] = elapsed - sum(phases.values())
    load_after = os.getloadavg()[0]
    others = _load_share(load, elapsed)
    for e in errors:
        print(f"ERROR: {e}")
    _load_report(load, others)
    print(f"\n({elapsed:.0f} s: " + ", ".join(f"{k[:-2]} {v:.0f} s" for k, v in phases.items()) + ")")

    result = {
        "benchmark": "scaled dot-product attention throughput and memory",
        "config": {
            "threads": threads,
            "dtype": "float32",
            "quick": args.quick,
            "grid": grid,
            "max_repeats": args.repeats,
            "budget_s": budget,
            "numpy_max_gb": args.numpy_max_gb,
            "sgemm_cap": args.sgemm_cap,
            "layout": "query/key/value (1, B*H, L, E), S = L, Ev = E",
            "flops": "forward 4*BH*L*S*E, halved when causal; fwd+bwd = 3.5 x forward",
            "statistic": "median wall time of up to max_repeats calls after a warm-up call "
            "(the warm-up call alone when it exceeded budget_s)",
            "memory": "VmHWM - VmRSS baseline (after imports and inputs) around the first call, "
            "each measurement in a fresh forked process",
        },
        "environment": {
            "attnc": getattr(attnc, "__version__", None),
            "attnc_blas": attnc.blas_info(),
            "machine": machine.describe(attnc),
            "attnc_loaded_from": attnc.__file__,
            "attnc_source": SNAPSHOT_SRC or str(Path(attnc.__file__).parent),
            "attnc_git": _git_rev(),
            "attnc_sdpa": sdpa_ok,
            "torch": torch.__version__ if torch is not None else None,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count() or 1,
            "load_average_1min_before": load["load_before"],
            "parent_threads_at_fork": parent_threads,
            "load_average_1min_after": load_after,
            "other_processes_cpu_share": others,
        },
        "sgemm": sgemm,
        "sgemm_practical_peak_gflops": sgemm_peak,
        "results": rows,
        "checks": checks,
        "memcheck": memcheck,
        "mha": mha,
        "errors": errors,
        "elapsed_s": elapsed,
        "phases_s": phases,
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 1 if (errors or bad) else 0


if __name__ == "__main__":
    sys.exit(main())
