"""Build the C core's unit tests (tests/c) under AddressSanitizer and
UndefinedBehaviorSanitizer and run them: the C library on its own, no Python.
They are built for every SIMD path this machine runs, with the flags of the
extensions' builds (build_flags.py), since each path compiles its own
kernels (csrc/core/cpu.h).

Then the extension itself, built once with the sanitizers for the SIMD path
this machine loads, runs the Python tests that push the C core to its edges
(empty and zero-width inputs, huge, negative and zero strides, the
property-based tests) in a process with the sanitizers' runtime preloaded.

Also runnable as a script: ``python tests/test_c_core.py [PATH]`` (default baseline).
"""

import glob
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLAGS = runpy.run_path(str(ROOT / "build_flags.py"))
# The binding's wrappers, generated at build time from the operation table.
BINDING = runpy.run_path(str(ROOT / "csrc" / "python" / "gen_binding.py"))
# The extensions' floating-point flags, then the strictest warnings and the sanitizers.
SANITIZE = ["-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
CFLAGS = [
    "-std=c11",
    "-g",
    "-O1",
    *FLAGS["FP_FLAGS"],
    "-Wall",
    "-Wextra",
    "-Wmissing-prototypes",
    "-Wshadow",
    "-Werror",
    *SANITIZE,
]
# The Python tests the sanitized extension runs.
SANITIZED_TESTS = ["test_empty.py", "test_strides.py", "test_properties.py"]


def paths_to_test() -> list:
    """The SIMD paths this CPU runs (the baseline alone off x86-64)."""
    if not FLAGS["X86_64"]:
        return ["baseline"]
    from attnc import _dispatch

    return list(_dispatch.supported_paths())


def c_compiler() -> str:
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.fail("no C compiler found: the C core's tests need gcc or cc")
    return compiler


def compile_objects(sources: list, flags: list, objects: Path) -> list:
    """Each source compiled to objects/<folder>_<stem>.o, on every core (one
    compiler call for all sources would use one)."""
    objects.mkdir(exist_ok=True)
    compiler = c_compiler()

    def compile_one(source: str) -> str:
        obj = objects / (Path(source).parent.name + "_" + Path(source).stem + ".o")
        run = subprocess.run([compiler, *flags, "-c", source, "-o", str(obj)], capture_output=True, text=True)
        assert run.returncode == 0, f"{source}:\n{' '.join(run.args)}\n{run.stderr}"
        return str(obj)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return list(pool.map(compile_one, sources))


def link(objs: list, output: Path, *extra: str) -> None:
    """objs linked with the sanitizers' runtime and OpenBLAS into output."""
    import scipy_openblas32 as openblas

    cmd = [c_compiler(), *extra, *SANITIZE, *objs, "-o", str(output), "-L", openblas.get_lib_dir()]
    cmd += ["-l" + openblas.get_library(), "-Wl,-rpath," + openblas.get_lib_dir(), "-lm", "-pthread"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, f"link failed:\n{' '.join(cmd)}\n{run.stderr}"


def build_and_run(tmp: Path, path: str = "baseline") -> subprocess.CompletedProcess:
    import scipy_openblas32 as openblas

    # every C family except the Python binding
    sources = sorted(f for f in glob.glob(str(ROOT / "csrc/**/*.c"), recursive=True) if "/python/" not in f)
    flags = [*CFLAGS, *FLAGS["simd_flags"](path), "-I", str(ROOT / "csrc/include"), "-I", openblas.get_include_dir()]
    exe = tmp / "test_core"
    link(compile_objects([*sources, str(ROOT / "tests/c/test_core.c")], flags, tmp / "objects"), exe)
    env = dict(
        os.environ,
        ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        OPENBLAS_NUM_THREADS="1",
    )
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


def build_sanitized_extension(package: Path, path: str) -> None:
    """package <- a copy of attnc whose build for `path` is compiled with the
    sanitizers (its other builds as installed: the baseline one is loaded
    first, only to ask which paths the CPU runs)."""
    import scipy_openblas32 as openblas

    shutil.copytree(ROOT / "attnc", package, ignore=shutil.ignore_patterns("__pycache__"))
    flags = [
        "-std=c11",
        "-g",
        "-O1",
        "-fPIC",
        *FLAGS["FP_FLAGS"],
        *FLAGS["simd_flags"](path),
        *SANITIZE,
        "-DPy_LIMITED_API=0x030B0000",
        "-I",
        str(ROOT / "csrc/include"),
        "-I",
        str(ROOT / "csrc/python"),
        "-I",
        openblas.get_include_dir(),
        "-I",
        sysconfig.get_paths()["include"],
    ]
    generated = package.parent / "ops.c"
    BINDING["generate"](str(generated))
    sources = sorted(glob.glob(str(ROOT / "csrc/**/*.c"), recursive=True)) + [str(generated)]
    objs = compile_objects(sources, flags, package.parent / "objects")
    (target,) = package.glob(f"_core_{path}.*so")
    link(objs, target, "-shared")


def test_extension_under_sanitizers(tmp_path):
    from attnc import _dispatch

    path = _dispatch.choose(None)
    build_sanitized_extension(tmp_path / "attnc", path)
    preload = subprocess.run([c_compiler(), "-print-file-name=libasan.so"], capture_output=True, text=True).stdout
    # CPython frees little at exit: leak reports would all be its own.
    env = dict(
        os.environ,
        PYTHONPATH=str(tmp_path),
        LD_PRELOAD=preload.strip(),
        ATTNC_CPU=path,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        OPENBLAS_NUM_THREADS="1",
    )
    where = subprocess.run(
        [sys.executable, "-c", "import attnc; print(attnc._core.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
    )
    assert where.returncode == 0 and where.stdout.startswith(str(tmp_path / "attnc")), where.stdout + where.stderr
    here = Path(__file__).resolve().parent
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
            *[str(here / f) for f in SANITIZED_TESTS],
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(here),
        timeout=1800,
    )
    report = run.stdout[-8000:] + run.stderr[-8000:]
    assert run.returncode == 0, report
    assert "runtime error" not in report and "AddressSanitizer" not in report, report
    assert " passed" in run.stdout and " failed" not in run.stdout, report


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        result = build_and_run(Path(d), sys.argv[1] if len(sys.argv) > 1 else "baseline")
        sys.stdout.write(result.stdout + result.stderr)
        sys.exit(result.returncode)
