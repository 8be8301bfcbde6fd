/* cpu.c: the build's SIMD path and the paths the CPU runs (see cpu.h). */
#include "cpu.h"

#include "../include/attnc.h"

#define ATTNC_STR_(x) #x
#define ATTNC_STR(x) ATTNC_STR_(x)

/* "baseline", "avx2" or "avx512". */
const char *attnc_simd_path(void) { return ATTNC_STR(ATTNC_SIMD_PATH); }

/* The paths this CPU and its OS run, slowest first, separated by spaces.
 * __builtin_cpu_supports checks the CPUID bits and that the OS saves the
 * vector registers (XCR0), so a kernel with AVX-512 disabled reads as avx2. */
#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 18 : defined(__GNUC__) && __GNUC__ >= 12)
const char *attnc_cpu_paths(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return "baseline avx2 avx512";
    if (__builtin_cpu_supports("x86-64-v3")) return "baseline avx2";
    return "baseline";
}
#else
const char *attnc_cpu_paths(void) { return "baseline"; }
#endif
