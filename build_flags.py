"""The C compiler flags that make attnc's builds: read by setup.py (the
extensions) and tests/test_c_core.py (the C unit tests, so they test the
code the extensions run). Plain data, loaded with runpy: no imports needed.
"""

import platform

X86_64 = platform.machine().lower() in ("x86_64", "amd64")

# The SIMD paths (csrc/core/cpu.h) and their flags: x86-64 microarchitecture
# levels. The baseline names its level too: some distributions' compilers
# default higher. -mprefer-vector-width=512: GCC's generic tuning would use
# 256-bit vectors. Off x86-64 there is one build, for the compiler's default.
SIMD_FLAGS = {
    "baseline": ["-march=x86-64", "-mtune=generic"],
    "avx2": ["-march=x86-64-v3"],
    "avx512": ["-march=x86-64-v4", "-mprefer-vector-width=512"],
}
PATHS = list(SIMD_FLAGS) if X86_64 else ["baseline"]

# Floating point: no contraction of a * b + c into an FMA (GCC's default
# under -std=c11, not Clang's), so every build rounds alike and the paths
# agree bitwise; -fno-trapping-math lets the compiler compute both sides of a
# select such as tanh's `|x| < 1/16 ? series : 1 - 2 / (e^2x + 1)` and blend
# them, so such loops vectorise without AVX-512's masks. It assumes no one
# traps on floating-point exceptions (attnc raises none) and changes no result.
# -fno-math-errno: sqrt becomes the (correctly rounded) instruction, so loops
# with a sqrt vectorise (optim/adam.c); attnc never reads errno.
FP_FLAGS = ["-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno"]


def simd_flags(path: str) -> list:
    return SIMD_FLAGS[path] if X86_64 else []
