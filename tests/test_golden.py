"""A fixed set of outputs and gradients of every public function, module and
model method, compared with the file that a build before wrote: a change
meant to keep every result (a refactoring of the binding, say) must keep them
bit for bit.

The calls are test_empty.py's CASES (one per public name, checked complete
there) at its ordinary, non-empty sizes, in float32 and float64, through
attnc.vjp where the name is differentiable. tests/golden/<path>.npz holds
their results on each SIMD path, with the OpenBLAS kernel they ran under.
On that path and kernel the results must be the same bits; elsewhere (a
path or kernel the file was not written on) within float rounding:
float32 1e-4 and float64 1e-10 of each array's largest entry.

A change that means to change results writes the files again, on every
path this machine runs:

    python tests/test_golden.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc import _dispatch

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
TOLERANCE = {"float32": 1e-4, "float64": 1e-10}


def battery() -> dict:
    """name -> every output and gradient of every case, in order."""
    import test_empty as cases

    out = {}
    for i, case in enumerate(cases.CASES):
        for dtype in cases.DTYPES:
            x = cases.Dims(dtype)
            _, _, _, outputs, grads, _ = cases.run(case, x)
            tag = f"{i:03d} {case.name} {np.dtype(dtype).name}"
            for j, o in enumerate(cases.flat(outputs)):
                out[f"{tag} output {j}"] = o
            for n, g in sorted((grads or {}).items()):
                out[f"{tag} grad {n}"] = g
    return out


def kernel() -> str:
    """The OpenBLAS kernel in force, as its config names it."""
    return attnc.blas_info().split("NO_AFFINITY")[-1].split()[0]


def write(path: Path) -> None:
    results = battery()
    meta = {"simd": attnc._core.simd_path(), "kernel": kernel()}
    np.savez_compressed(path, __meta__=np.array(json.dumps(meta)), **results)


def reference(path: str) -> Path:
    """The file written on path, or the nearest one written (avx2 stands in
    for avx512)."""
    for p in (path, "avx2", "baseline"):
        if (GOLDEN / f"{p}.npz").exists():
            return GOLDEN / f"{p}.npz"
    raise FileNotFoundError(f"no golden file in {GOLDEN}")


def test_every_public_result_is_as_the_golden_file_has_it():
    path = attnc._core.simd_path()
    file = reference(path)
    got = battery()
    with np.load(file) as f:
        meta = json.loads(str(f["__meta__"]))
        want = {n: f[n] for n in f.files if n != "__meta__"}
    assert got.keys() == want.keys(), sorted(set(got) ^ set(want))[:10]
    exact = meta == {"simd": path, "kernel": kernel()}
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape, g.dtype, w.dtype)
        if exact or g.dtype.kind != "f":
            np.testing.assert_array_equal(g, w, err_msg=f"{name} ({path}, {kernel()}: bit for bit)")
        else:
            scale = max(1.0, float(np.abs(w).max(initial=0.0)))
            np.testing.assert_allclose(
                g,
                w,
                rtol=0,
                atol=TOLERANCE[g.dtype.name] * scale,
                err_msg=f"{name} ({path}, {kernel()} against {meta})",
            )


@pytest.mark.parametrize("path", [p for p in _dispatch.supported_paths() if p != attnc._core.simd_path()])
def test_every_other_path_too(path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            f"{__file__}::test_every_public_result_is_as_the_golden_file_has_it",
        ],
        env=dict(os.environ, ATTNC_CPU=path, PYTHONPATH=str(Path(attnc.__file__).parent.parent)),
        capture_output=True,
        text=True,
        cwd=str(HERE),
    )  # the attnc this process runs
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]


if __name__ == "__main__":
    if len(sys.argv) > 1:  # one path, in this process (ATTNC_CPU set by the caller)
        write(Path(sys.argv[1]))
        sys.exit(0)
    GOLDEN.mkdir(exist_ok=True)
    for p in _dispatch.supported_paths():
        subprocess.run(
            [sys.executable, __file__, str(GOLDEN / f"{p}.npz")], env=dict(os.environ, ATTNC_CPU=p), check=True
        )
        print(f"wrote {GOLDEN / p}.npz")
