"""The performance page's figures and run descriptions, drawn at build time
from the benchmarks' JSON (benchmarks/results/NAME.json, written by
`python benchmarks/NAME.py --json ...`).

A line `<!-- benchmark: NAME -->` in a page becomes: which machine the run
came from (CPU, kernel, load average, SIMD path, BLAS, threads, quick or
full), its figure (bench/NAME.png) and a table of its numbers. Rerunning a
benchmark and committing its JSON redraws the page.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MARKER = re.compile(r"^<!-- benchmark: (\w+) -->$", re.MULTILINE)
FAMILY = ("transformer", "rnn", "seq2seq", "ntm", "pointer")  # transformer.finish's "summary" layout


def load(results: Path, name: str) -> dict:
    path = results / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `python benchmarks/{name}.py --json {path}`")
    return json.loads(path.read_text())


def machine_of(data: dict) -> dict:
    env = data.get("environment", {})
    m = dict(env.get("machine") or {})
    if "load_average" not in m and env.get("load_average_1min_before") is not None:
        m["load_average"] = [env["load_average_1min_before"]]
    return m


def threads_of(data: dict):
    cfg = data.get("config", {})
    return cfg.get("threads", data.get("threads"))


def describe(name: str, data: dict) -> str:
    m = machine_of(data)
    load = m.get("load_average")
    cpus = m.get("cpus") or data.get("environment", {}).get("cpu_count")
    load_text = (
        "/".join(f"{x:.2f}" for x in load) + " (1/5/15 min)"
        if load and len(load) == 3
        else f"{load[0]:.2f} (1 min)"
        if load
        else "not recorded"
    )
    quick = data.get("config", data).get("quick")
    kind = {True: "a `--quick` run: tiny sizes and few repeats", False: "a full run"}.get(
        quick, "quick or full not recorded"
    )
    busy = load and cpus and load[0] > 0.5 * cpus
    git = data.get("environment", {}).get("attnc_git")
    lines = [
        f"From `benchmarks/results/{name}.json` ({kind}{f', attnc {str(git)[:10]}' if git else ''}):",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m.get('cpu', 'not recorded')}, {cpus or '?'} CPUs |",
        f"| kernel | {m.get('kernel') or data.get('environment', {}).get('platform', 'not recorded')} |",
        f"| load average at the start | {load_text} |",
        f"| attnc's SIMD path and BLAS | {m.get('attnc_simd', '?')}; {m.get('attnc_blas', '?')} |",
        f"| threads | {threads_of(data) or '?'} |",
        "",
    ]
    if busy:
        lines += [
            '!!! warning "A busy machine"',
            f"    The load average was {load[0]:.1f} on {cpus} CPUs when this run started: other "
            "processes had the cores, so its timings (torch's most of all: its OpenMP workers spin "
            "when descheduled) say little about either library's speed.",
            "",
        ]
    return "\n".join(lines)


def _family_rows(data):
    return [(r["case"], r["speedup"], r["target"]) for r in data.get("summary", []) if r["speedup"]]


def _attention_rows(data):
    rows = []
    for r in data.get("results", []):
        a, t = r["impl"].get("attnc") or {}, r["impl"].get("torch") or {}
        if a.get("gflops") and t.get("gflops"):
            label = f"L={r['L']} E={r['E']} BH={r['BH']}{' causal' if r['causal'] else ''} {r['mode']}"
            rows.append((label, a["gflops"], t["gflops"]))
    return rows


def _overhead_rows(data):
    rows = []
    for r in data.get("results", []):
        for t in r["torch"]:
            rows.append((f"{r['op']} {r['input']} vs {t['impl']}", r["attnc_us"], t["median_us"]))
    return rows


def _cpu_paths_rows(data):
    ms = data["ms"]
    paths = list(ms)
    return paths, [(case, *[ms[p][case] for p in paths]) for case in ms[paths[0]]]


def figure(name: str, data: dict) -> bytes:
    if name in FAMILY:
        rows = _family_rows(data)
        fig, ax = plt.subplots(figsize=(7, 0.5 * len(rows) + 1.2), dpi=110)
        y = range(len(rows))
        # bars from 1 (as fast as torch) to the speed-up: left when attnc is slower
        ax.barh(y, [r[1] - 1 for r in rows], left=1, color="#4c72b0", label="torch time / attnc time")
        ax.scatter([r[2] for r in rows], y, marker="|", s=300, color="#c44e52", label="target", zorder=3)
        ax.set_xscale("log")
        ax.axvline(1, color="grey", lw=0.8)
        ax.set_yticks(list(y), [r[0] for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel("speed-up over torch (log scale; > 1: attnc faster)")
    elif name in ("attention", "overhead"):
        rows = _attention_rows(data) if name == "attention" else _overhead_rows(data)
        fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.2), dpi=110)
        y = list(range(len(rows)))
        ax.barh([v - 0.2 for v in y], [r[1] for r in rows], height=0.4, label="attnc", color="#4c72b0")
        ax.barh([v + 0.2 for v in y], [r[2] for r in rows], height=0.4, label="torch", color="#dd8452")
        ax.set_yticks(y, [r[0] for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("GFLOP/s (higher is faster)" if name == "attention" else "µs per call (lower is faster)")
    elif name == "cpu_paths":
        paths, rows = _cpu_paths_rows(data)
        fig, ax = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2), dpi=110)
        width = 0.8 / len(paths)
        for i, p in enumerate(paths):
            ax.barh(
                [k + (i - (len(paths) - 1) / 2) * width for k in range(len(rows))],
                [r[1 + i] for r in rows],
                height=width,
                label=p,
            )
        ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms (median; lower is faster)")
    else:
        raise ValueError(f"no figure for the {name} benchmark")
    ax.legend(loc="best", fontsize=8)
    ax.set_title(f"benchmarks/{name}.py", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def table(name: str, data: dict) -> str:
    if name in FAMILY:
        rows = ["| case | torch time / attnc time | target |", "|---|---|---|"]
        rows += [f"| {c} | {s:.2f} | {t if t is not None else '—'} |" for c, s, t in _family_rows(data)]
    elif name == "attention":
        rows = ["| call | attnc GFLOP/s | torch GFLOP/s | ratio |", "|---|---|---|---|"]
        rows += [f"| {c} | {a:.1f} | {t:.1f} | {a / t:.2f} |" for c, a, t in _attention_rows(data)]
    elif name == "overhead":
        rows = ["| call | attnc µs | torch µs | torch / attnc |", "|---|---|---|---|"]
        rows += [f"| {c} | {a:.1f} | {t:.1f} | {t / a:.2f} |" for c, a, t in _overhead_rows(data)]
    else:
        paths, data_rows = _cpu_paths_rows(data)
        rows = ["| case | " + " | ".join(f"{p} ms" for p in paths) + " |", "|---" * (len(paths) + 1) + "|"]
        rows += ["| " + " | ".join([c] + [f"{v:.2f}" for v in vals]) + " |" for c, *vals in data_rows]
    return "\n".join(rows)


def names(markdown: str) -> list[str]:
    return MARKER.findall(markdown)


def figures(results: Path, pages: list[str]) -> dict[str, bytes]:
    """bench/NAME.png for every benchmark a page names."""
    wanted = sorted({n for page in pages for n in names(page)})
    return {f"bench/{n}.png": figure(n, load(results, n)) for n in wanted}


def expand(markdown: str, results: Path, prefix: str = "") -> str:
    def block(match):
        name = match.group(1)
        data = load(results, name)
        return (
            f"{describe(name, data)}\n![benchmarks/{name}.py, drawn from its JSON]({prefix}bench/{name}.png)\n\n"
            f"{table(name, data)}\n"
        )

    return MARKER.sub(block, markdown)
