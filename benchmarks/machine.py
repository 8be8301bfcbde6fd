"""What a benchmark ran on, printed at its head and stored in its JSON: the
CPU, attnc's SIMD path and OpenBLAS kernel, the other BLAS libraries in the
process (numpy's) and their kernels, and the OpenBLAS variables of the
environment. The benchmarks leave those variables as they are: they measure
the machine as its users have it.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import threadpoolctl


def numpy_blas(attnc) -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded in this process
    other than attnc's own (the OpenBLAS bundled in attnc's folder): numpy's
    (and torch's, where it has one of its own). attnc: the module, or None."""
    own = Path(attnc.__file__).resolve().parent if attnc is not None else None
    return [
        lib
        for lib in threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
        if Path(lib.filepath).resolve().parent != own
    ]


def cpu_model() -> str:
    """The CPU's model name, with its family and model numbers (a virtual
    machine may name an AMD EPYC of any generation just "AMD EPYC")."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the first processor's block is enough
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


def load_average() -> list | None:
    """The 1-, 5- and 15-minute load averages: how busy the machine was (the
    timings of a shared machine depend on it)."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def describe(attnc) -> dict:
    return {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "kernel": f"{platform.system()} {platform.release()}",
        "load_average": load_average(),
        "attnc_simd": attnc._core.simd_path() if attnc is not None else None,
        "attnc_blas": attnc.blas_info() if attnc is not None else None,
        "numpy_blas": [f"{lib.internal_api} {lib.version} {lib.architecture}" for lib in numpy_blas(attnc)],
        "environment": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
    }


def line(attnc) -> str:
    m = describe(attnc)
    env = ", ".join(f"{k}={v}" for k, v in m["environment"].items() if v is not None) or "none set"
    load = "/".join(f"{x:.2f}" for x in m["load_average"]) if m["load_average"] else "unknown"
    return (
        f"CPU: {m['cpu']}, {m['cpus']} CPUs; kernel {m['kernel']}; load average {load}; "
        f"attnc: SIMD path {m['attnc_simd']}, {m['attnc_blas']}; "
        f"numpy's BLAS: {'; '.join(m['numpy_blas']) or '(none found)'}; OpenBLAS variables: {env}"
    )
