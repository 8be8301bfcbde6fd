"""Build the C core's unit tests (tests/c) under AddressSanitizer and
UndefinedBehaviorSanitizer and run them: the C library on its own, no Python.
They are built for every SIMD path this machine runs, with the flags of the
extensions' builds (build_flags.py), since each path compiles its own
kernels (csrc/core/cpu.h).

Also runnable as a script: ``python tests/test_c_core.py [PATH]`` (default baseline).
"""

import glob
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLAGS = runpy.run_path(str(ROOT / "build_flags.py"))
# The extensions' floating-point flags, then the strictest warnings and the sanitizers.
CFLAGS = ["-std=c11", "-g", "-O1", *FLAGS["FP_FLAGS"],
          "-Wall", "-Wextra", "-Wmissing-prototypes", "-Wshadow", "-Werror", "-fno-omit-frame-pointer",
          "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


def paths_to_test() -> list:
    """The SIMD paths this CPU runs (the baseline alone off x86-64)."""
    if not FLAGS["X86_64"]:
        return ["baseline"]
    from attnc import _dispatch

    return list(_dispatch.supported_paths())


def build_and_run(tmp: Path, path: str = "baseline") -> subprocess.CompletedProcess:
    import scipy_openblas32 as openblas

    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.fail("no C compiler found: the C core's tests need gcc or cc")
    # every C family except the Python binding
    sources = sorted(f for f in glob.glob(str(ROOT / "csrc/*/*.c")) if "/python/" not in f)
    exe = tmp / "test_core"
    cmd = [compiler, *CFLAGS, *FLAGS["simd_flags"](path),
           "-I", str(ROOT / "csrc/include"), "-I", openblas.get_include_dir(),
           *sources, str(ROOT / "tests/c/test_core.c"), "-o", str(exe),
           "-L", openblas.get_lib_dir(), "-l" + openblas.get_library(),
           "-Wl,-rpath," + openblas.get_lib_dir(), "-lm", "-pthread"]
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, f"build failed:\n{' '.join(cmd)}\n{build.stderr}"
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", OPENBLAS_NUM_THREADS="1")
    env.pop("LD_PRELOAD", None)
    return subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("path", paths_to_test())
def test_c_core_under_sanitizers(tmp_path, path):
    run = build_and_run(tmp_path, path)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert "runtime error" not in report and "AddressSanitizer" not in report, report
    last = run.stdout.strip().splitlines()[-1]
    passed, failed = (int(part.split()[0]) for part in last.split(","))
    assert failed == 0 and passed > 50, report


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        result = build_and_run(Path(d), sys.argv[1] if len(sys.argv) > 1 else "baseline")
        sys.stdout.write(result.stdout + result.stderr)
        sys.exit(result.returncode)
