"""What an installed attnc is made of: extensions that need nothing outside
the package but the C runtime, one build per SIMD path that uses only its
path's instructions, abi3 (one wheel for every CPython from 3.11), typed.

CI runs the suite against the installed wheel, in a virtual environment
that cannot see the source tree; these tests check that package's files.
"""

import importlib.metadata
import importlib.resources
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import attnc
from attnc import _dispatch

PACKAGE = Path(attnc.__file__).resolve().parent
# What a manylinux wheel may take from the system: the C runtime.
SYSTEM = re.compile(r"^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libgcc_s)\.so")
X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def extensions():
    return sorted(PACKAGE.glob("_core_*.so"))


def tool(name):
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is needed to inspect the extensions (binutils / libc-bin)")
    return found


def test_one_abi3_extension_per_simd_path():
    names = [p.name for p in extensions()]
    expected = _dispatch.PATHS if X86_64 else ("baseline",)
    assert names == sorted(f"_core_{path}.abi3.so" for path in expected)


@pytest.mark.parametrize("ext", extensions(), ids=lambda p: p.name)
def test_extension_needs_only_the_c_runtime_and_the_bundled_openblas(ext):
    out = subprocess.run([tool("ldd"), str(ext)], capture_output=True, text=True, check=True).stdout
    assert "not found" not in out, out
    for line in out.strip().splitlines():
        name = line.split()[0]
        if SYSTEM.match(name) or name.startswith("/"):  # /lib64/ld-linux-x86-64.so.2
            continue
        target = Path(line.split("=>")[1].split("(")[0].strip()).resolve()
        assert target.parent == PACKAGE, f"{ext.name} loads {name} from {target}, outside the package"


@pytest.mark.skipif(not X86_64, reason="the SIMD builds exist on x86-64 only")
def test_each_build_uses_only_its_paths_instructions():
    """The baseline build has no AVX (VEX) instruction at all, so it runs on
    any x86-64 CPU; the AVX2 build no AVX-512 register; the AVX-512 build
    uses 512-bit registers (it is not an AVX2 build under another name)."""

    def count(ext, pattern):
        code = subprocess.run(
            [tool("objdump"), "-d", "--no-show-raw-insn", str(PACKAGE / ext)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return len(re.findall(pattern, code))

    assert count("_core_baseline.abi3.so", r"\tv[a-z0-9]+ ") == 0
    assert count("_core_baseline.abi3.so", r"%[yz]mm") == 0
    assert count("_core_avx2.abi3.so", r"%ymm") > 1000
    assert count("_core_avx2.abi3.so", r"%zmm|%k[0-7]") == 0
    assert count("_core_avx512.abi3.so", r"%zmm") > 1000


@pytest.mark.parametrize("lib", extensions() + [PACKAGE / "libscipy_openblas.so"], ids=lambda p: p.name)
def test_glibc_symbol_versions_are_at_most_2_27(lib):
    """The wheel's manylinux_2_27 tag: no symbol bound at a newer glibc
    version (csrc/core/glibc_versions.h keeps the thread functions at theirs
    from before 2.34)."""
    table = subprocess.run([tool("objdump"), "-T", str(lib)], capture_output=True, text=True, check=True).stdout
    versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_(\d+\.\d+(?:\.\d+)?)", table)}
    assert versions and max(versions) <= (2, 27), f"{lib.name} needs glibc {'.'.join(map(str, max(versions)))}"


def test_package_is_typed_and_its_version_is_the_distributions():
    assert importlib.resources.files("attnc").joinpath("py.typed").is_file()
    assert importlib.metadata.version("attnc") == attnc.__version__


def test_the_views_script_and_style_are_in_the_package():
    """attnc.viz inlines these into every saved page (pyproject's package data)."""
    static = importlib.resources.files("attnc.viz").joinpath("static")
    assert sorted(p.name for p in static.iterdir()) == ["viz.css", "viz.js"]
    assert "function mountPage(" in static.joinpath("viz.js").read_text(encoding="utf-8")
