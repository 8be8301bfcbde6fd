/* cpu.h: the SIMD paths, and which of them this CPU runs.
 *
 * attnc's C core is compiled once per path: "baseline" (x86-64 as every
 * 64-bit x86 CPU runs it, SSE2), "avx2" (x86-64-v3: AVX2, FMA, BMI1/2, F16C,
 * LZCNT, MOVBE) and "avx512" (x86-64-v4: AVX-512 F, BW, CD, DQ, VL). The
 * compiler vectorises every loop for the build's path, and the hand-written
 * kernels (rnn/rnn_fast.c, core/rng.c) exist in the builds that can run
 * them. Python asks the baseline build which paths the CPU runs and loads
 * the best (or the one ATTNC_CPU names): a build never meets a CPU that
 * lacks its instructions. On other architectures there is one build,
 * "baseline", compiled for the compiler's default target.
 *
 * ATTNC_SIMD_PATH names the build's path from the compiler's own macros
 * (the -march setup.py gives), so a build cannot be misnamed. */
#ifndef ATTNC_CPU_H
#define ATTNC_CPU_H

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512CD__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define ATTNC_SIMD_PATH avx512
#elif defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__) && defined(__F16C__)
#define ATTNC_SIMD_PATH avx2
#else
#define ATTNC_SIMD_PATH baseline
#endif

#endif
