"""Smoke tests of the benchmarks: each runs its --quick mode in a subprocess, to the end.

They check that the script runs and that its correctness checks pass, not the
speed (the timings of a quick run on a shared machine mean nothing).
"""

import json
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(script, *args, timeout=600):
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def test_transformer_benchmark_quick(tmp_path, torch):
    out = tmp_path / "transformer.json"
    p = _run("transformer.py", "--quick", "--no-snapshot", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    for title in ("1. encoder layer forward", "2. training step", "3. greedy decoding", "== targets"):
        assert title in p.stdout
    data = json.loads(out.read_text())
    assert data["config"]["quick"] is True
    assert data["errors"] == [] and data["failed_checks"] == []
    assert data["encoder_forward"]["check"]["torch_fast_path"] is True
    assert data["decode"]["check"]["torch_cache_tokens_match_full_argmax"] is True
    for row in data["train_step"]["rows"] + data["decode"]["rows"]:
        assert row["impl"]["torch"]["median_s"] > 0
    assert [r["dropout"] for r in data["train_step"]["rows"]] == [0.1, 0.0]


def test_rnn_benchmark_quick(tmp_path, torch):
    out = tmp_path / "rnn.json"
    p = _run("rnn.py", "--quick", "--no-snapshot", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    for title in ("1. forward", "2. forward + backward", "== targets"):
        assert title in p.stdout
    data = json.loads(out.read_text())
    assert data["config"]["quick"] is True
    assert data["errors"] == [] and data["failed_checks"] == []
    assert len(data["check"]["cases"]) == 6
    for section in ("forward", "train"):
        rows = data[section]["rows"]
        assert [r["case"] for r in rows] == [
            "LSTM",
            "LSTM, 2 layers bidir",
            "LSTM, ragged lengths",
            "GRU",
            "GRU, 2 layers bidir",
            "GRU, ragged lengths",
        ]
        for row in rows:
            assert row["impl"]["attnc"]["median_s"] > 0 and row["impl"]["torch"]["median_s"] > 0
            assert row["check_worst"]["rel"] <= 1e-4


def test_seq2seq_benchmark_quick(tmp_path, torch):
    out = tmp_path / "seq2seq.json"
    p = _run("seq2seq.py", "--quick", "--no-snapshot", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    for title in ("training step: forward + loss + backward", "== targets"):
        assert title in p.stdout
    data = json.loads(out.read_text())
    assert data["config"]["quick"] is True
    assert data["errors"] == [] and data["failed_checks"] == []
    assert data["environment"]["attnc_seq2seq"] is True
    assert sorted(data["check"]["cases"]) == ["Bahdanau", "Luong-general"]
    rows = data["train"]["rows"]
    assert [r["case"] for r in rows] == ["Bahdanau", "Luong-general"]
    for row in rows:
        assert row["impl"]["attnc"]["median_s"] > 0 and row["impl"]["torch"]["median_s"] > 0
        assert row["check_worst"]["rel"] <= 1e-4


def test_ntm_benchmark_quick(tmp_path, torch):
    out = tmp_path / "ntm.json"
    p = _run("ntm.py", "--quick", "--no-snapshot", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    for title in ("training sequence: forward + loss + backward", "== targets"):
        assert title in p.stdout
    data = json.loads(out.read_text())
    assert data["config"]["quick"] is True
    assert data["errors"] == [] and data["failed_checks"] == []
    assert data["environment"]["attnc_ntm"] is True
    assert sorted(data["check"]["cases"]) == ["copy, B=1", "copy, B=16"]
    rows = data["train"]["rows"]
    assert [r["case"] for r in rows] == ["copy, B=1", "copy, B=16"]
    for row in rows:
        assert row["impl"]["attnc"]["median_s"] > 0 and row["impl"]["torch"]["median_s"] > 0
        assert row["check_worst"]["rel"] <= 1e-4


def test_pointer_benchmark_quick(tmp_path, torch):
    out = tmp_path / "pointer.json"
    p = _run("pointer.py", "--quick", "--no-snapshot", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    for title in ("1. training step: forward + loss + backward", "2. beam-search decoding", "== targets"):
        assert title in p.stdout
    data = json.loads(out.read_text())
    assert data["config"]["quick"] is True
    assert data["errors"] == [] and data["failed_checks"] == []
    assert data["environment"]["attnc_pointer"] is True
    for section in ("train", "beam"):
        (row,) = data[section]["rows"]
        assert row["impl"]["attnc"]["median_s"] > 0 and row["impl"]["torch"]["median_s"] > 0
        assert row["check_worst_float64"]["rel"] <= 1e-9
    assert data["train"]["rows"][0]["check_worst"]["rel"] <= 1e-2
    assert data["beam"]["rows"][0]["check_worst"]["rel"] <= 1e-4
    assert data["check"]["beam"]["rel64"]["share of tours differing"] == 0.0


def test_cpu_paths_benchmark_quick(tmp_path):
    """Every SIMD path the CPU runs is timed on every case, and the JSON says so."""
    from attnc import _dispatch

    out = tmp_path / "cpu_paths.json"
    p = _run("cpu_paths.py", "--quick", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "geometric mean speed-up over baseline" in p.stdout
    data = json.loads(out.read_text())
    paths = list(_dispatch.supported_paths())
    assert list(data["ms"]) == paths and len(data["ms"]["baseline"]) == 10
    assert all(ms > 0 for path in paths for ms in data["ms"][path].values())
    assert sorted(data["speedup_over_baseline"]) == sorted(paths[1:])
    assert data["quick"] is True and data["environment"]["machine"]["kernel"]


def test_torch_ops_benchmark_quick(tmp_path, torch):
    """The custom op's calls and the GPT step, with their checks (the torch
    wrapper bit for bit attnc's NumPy call, torch's SDPA close, the two GPTs'
    first losses equal)."""
    out = tmp_path / "torch_ops.json"
    p = _run("torch_ops.py", "--quick", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    data = json.loads(out.read_text())
    assert data["failed_checks"] == [] and data["config"]["quick"] is True
    assert [(r["size"], r["pass"]) for r in data["per_call"]] == [
        (size, kind) for size in ("tiny", "large") for kind in ("forward", "forward+backward")
    ]
    assert all(ms > 0 for r in data["gpt_step"] for ms in r["median_ms"].values())
    assert [r["need_weights"] for r in data["gpt_step"]] == [True, False]


def test_benchmarks_tell_numpys_blas_from_attncs():
    """The benchmarks set numpy's BLAS threads through threadpoolctl and tell
    it from attnc's bundled OpenBLAS by folder, not by name (a clone or a
    virtual environment whose path holds "attnc" once hid numpy's)."""
    import threadpoolctl

    import attnc

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import machine
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    own = Path(attnc.__file__).resolve().parent
    loaded = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
    attncs = [lib.filepath for lib in loaded if Path(lib.filepath).resolve().parent == own]
    others = [lib.filepath for lib in machine.numpy_blas(attnc)]
    assert len(attncs) == 1 and attncs[0] not in others
    assert others and sorted(others + attncs) == sorted(lib.filepath for lib in loaded)
    m = machine.describe(attnc)
    assert m["attnc_simd"] == attnc._core.simd_path() and m["numpy_blas"] and m["cpu"]
    # what the documentation's performance page says of each run: the kernel and how busy the machine was
    assert m["kernel"].startswith(platform.system()) and len(m["load_average"]) == 3 and m["cpus"] >= 1


def test_linear_attention_benchmark_quick(tmp_path, torch):
    out = tmp_path / "linear_attention.json"
    p = _run("linear_attention.py", "--quick", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    data = json.loads(out.read_text())
    assert data["config"]["quick"] is True
    assert [r["L"] for r in data["rows"]] == [128, 256]
    for row in data["rows"]:
        assert row["max_abs_diff_vs_torch"] < 1e-5
        assert set(row["median_s"]) == {"linear", "linear_fwd_bwd", "sdpa", "torch_linear"}


def test_variants_benchmark_quick(tmp_path, torch):
    out = tmp_path / "variants.json"
    p = _run("variants.py", "--quick", "--repeats", "1", "--json", str(out))
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    for title in ("CPU:", "options against the plain kernel", "against torch", "decoding 4 tokens"):
        assert title in p.stdout
    data = json.loads(out.read_text())
    assert data["config"]["quick"] is True and data["machine"]["attnc_simd"]
    t = data["median_s"]
    assert t["L256 torch flex_attention max_abs_diff"] < 1e-5 and t["L256 torch SDPA dense mask max_abs_diff"] < 1e-5
    assert t["decode P64 MLA cache_bytes"] / t["decode P64 MHA cache_bytes"] == 0.28125  # (256 + 32) / (2 * 512)
