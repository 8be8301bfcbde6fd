"""Build attnc's C extension against OpenBLAS from scipy-openblas32.

The OpenBLAS shared library is copied next to the extension and found at run
time through an $ORIGIN rpath, so an installed attnc needs no BLAS of the
system and no scipy-openblas32 at run time (as that package's maintainers
ask of projects that use it).
"""

import glob
import os
import shutil

import scipy_openblas32 as openblas
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Every family folder under csrc/ is compiled; csrc/python/ is the binding.
SOURCES = sorted(glob.glob("csrc/*/*.c"))


OPENBLAS_LIBRARY = os.path.join(openblas.get_lib_dir(), openblas.get_library(fullname=True))


def place(source: str, target_dir: str) -> None:
    """Copy source into target_dir under a temporary name, then rename it into
    place: a process that has the old library loaded keeps its (unlinked)
    file instead of seeing it rewritten under it."""
    target = os.path.join(target_dir, os.path.basename(source))
    shutil.copy2(source, target + ".tmp")
    os.replace(target + ".tmp", target)


class BuildExtBundlingOpenBLAS(build_ext):
    """build_ext that also places libscipy_openblas.so beside the extension,
    in the build tree (wheels) and in the source tree (editable installs)."""

    def build_extension(self, ext):
        super().build_extension(ext)
        place(OPENBLAS_LIBRARY, os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name))))

    def copy_extensions_to_source(self):
        # setuptools' own copy rewrites the extension in place; rename instead.
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            fullname = self.get_ext_fullname(ext.name)
            package_dir = build_py.get_package_dir(".".join(fullname.split(".")[:-1]))
            place(os.path.join(self.build_lib, self.get_ext_filename(fullname)), package_dir)
            place(OPENBLAS_LIBRARY, package_dir)


core = Extension(
    "attnc._core",
    sources=SOURCES,
    include_dirs=["csrc/include", openblas.get_include_dir()],
    library_dirs=[openblas.get_lib_dir()],
    libraries=[openblas.get_library()],
    extra_compile_args=["-std=c11", "-O3", "-Wall", "-Wextra", "-fvisibility=hidden"],
    extra_link_args=["-Wl,-rpath,$ORIGIN", "-pthread"],
    define_macros=[("Py_LIMITED_API", "0x030B0000")],
    py_limited_api=True,
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildExtBundlingOpenBLAS})
