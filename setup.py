"""Build attnc's C extension against OpenBLAS from scipy-openblas32.

The C core is compiled once per SIMD path (csrc/core/cpu.h): on x86-64,
attnc._core_baseline for any x86-64 CPU, attnc._core_avx2 (x86-64-v3) and
attnc._core_avx512 (x86-64-v4); attnc/_dispatch.py loads the best one the CPU
runs. Elsewhere there is only the baseline build. The flags of each build
are in build_flags.py (the C unit tests use them too). A path the compiler
cannot target is left out with a warning.

The OpenBLAS shared library is copied next to the extensions and found at run
time through an $ORIGIN rpath, so an installed attnc needs no BLAS of the
system and no scipy-openblas32 at run time (as that package's maintainers
ask of projects that use it). The extensions use only CPython's limited API
(3.11), so one wheel serves every CPython from 3.11 on (abi3).
"""

import glob
import os
import runpy
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor

import scipy_openblas32 as openblas
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Every C file under csrc/ is compiled: core/, ops/<family>/, models/<family>/ and python/ (the binding).
SOURCES = sorted(glob.glob("csrc/**/*.c", recursive=True))
# Every header: a change to one (the typed kernels live in *_impl.h) rebuilds.
HEADERS = sorted(glob.glob("csrc/**/*.h", recursive=True))
# The binding's wrappers and the typed stub attnc/_core.pyi are generated from
# the operation table (csrc/python/ops/) into the build tree.
BINDING = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "python", "gen_binding.py"))
# The SIMD paths and the flags of their builds, shared with the C unit tests.
FLAGS = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_flags.py"))


OPENBLAS_LIBRARY = os.path.join(openblas.get_lib_dir(), openblas.get_library(fullname=True))


def place(source: str, target_dir: str) -> None:
    """Copy source into target_dir under a temporary name, then rename it into
    place: a process that has the old library loaded keeps its (unlinked)
    file instead of seeing it rewritten under it."""
    target = os.path.join(target_dir, os.path.basename(source))
    shutil.copy2(source, target + ".tmp")
    os.replace(target + ".tmp", target)


def compiler_accepts(compiler, flags: list) -> bool:
    """Whether the C compiler builds an empty file with flags."""
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "probe.c")
        with open(source, "w") as f:
            f.write("int attnc_probe(void) { return 0; }\n")
        try:
            compiler.compile([source], output_dir=tmp, extra_postargs=flags)
        except Exception:  # noqa: BLE001  (any failure means: not with these flags)
            return False
    return True


def compiling_in_parallel(compile, jobs: int):
    """compile(sources, **options) run as jobs concurrent compiler calls,
    each on a share of the sources; the objects come back in source order."""

    def run(sources, **options):
        shares = [sources[i::jobs] for i in range(jobs)]
        with ThreadPoolExecutor(jobs) as pool:
            done = list(pool.map(lambda share: compile(share, **options), shares))
        objects = [None] * len(sources)
        for i, share_objects in enumerate(done):
            objects[i::jobs] = share_objects
        return objects

    return run


class BuildExtBundlingOpenBLAS(build_ext):
    """build_ext that also places libscipy_openblas.so beside the extension,
    in the build tree (wheels) and in the source tree (editable installs),
    and leaves out the SIMD builds the compiler cannot target."""

    def build_extensions(self):
        generated = os.path.join(self.build_temp, "generated", "ops.c")
        BINDING["generate"](generated, os.path.join(self.build_lib, "attnc", "_core.pyi"))
        for ext in self.extensions:
            if generated not in ext.sources:
                ext.sources.append(generated)
        kept = []
        for ext in self.extensions:
            flags = FLAGS["simd_flags"](ext.name.rsplit("_", 1)[-1])
            if flags and not compiler_accepts(self.compiler, flags):
                print(f"warning: the compiler does not take {' '.join(flags)}: {ext.name} is not built")
                continue
            kept.append(ext)
        self.extensions = kept
        self.compiler.compile = compiling_in_parallel(self.compiler.compile, os.cpu_count() or 1)
        super().build_extensions()
        place(OPENBLAS_LIBRARY, os.path.dirname(os.path.abspath(self.get_ext_fullpath(kept[0].name))))

    def build_extension(self, ext):
        # The builds compile the same sources with different flags: each
        # keeps its objects in its own folder.
        shared = self.build_temp
        self.build_temp = os.path.join(shared, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = shared

    def copy_extensions_to_source(self):
        # setuptools' own copy rewrites the extension in place; rename instead.
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            fullname = self.get_ext_fullname(ext.name)
            package_dir = build_py.get_package_dir(".".join(fullname.split(".")[:-1]))
            place(os.path.join(self.build_lib, self.get_ext_filename(fullname)), package_dir)
        place(OPENBLAS_LIBRARY, package_dir)
        place(os.path.join(self.build_lib, "attnc", "_core.pyi"), package_dir)


def core_extension(path: str) -> Extension:
    return Extension(
        f"attnc._core_{path}",
        sources=list(SOURCES),
        depends=HEADERS + BINDING["table_files"](),
        include_dirs=["csrc/include", "csrc/python", openblas.get_include_dir()],
        library_dirs=[openblas.get_lib_dir()],
        libraries=[openblas.get_library()],
        extra_compile_args=["-std=c11", "-O3", "-Wall", "-Wextra", "-fvisibility=hidden", *FLAGS["FP_FLAGS"]]
        + FLAGS["simd_flags"](path),
        extra_link_args=["-Wl,-rpath,$ORIGIN", "-pthread"],
        define_macros=[("Py_LIMITED_API", "0x030B0000")],
        py_limited_api=True,
    )


setup(
    ext_modules=[core_extension(path) for path in FLAGS["PATHS"]],
    cmdclass={"build_ext": BuildExtBundlingOpenBLAS},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},  # the wheel's tag: cp311-abi3
)
