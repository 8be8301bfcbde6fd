/* rng.h: counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
 *
 * A number is a pure function of (seed, stream, index): no state, so any
 * thread can draw any element and the bits never depend on the thread count
 * or on the order of work. */
#ifndef ATTNC_RNG_H
#define ATTNC_RNG_H
#include <stdint.h>

/* Uniform in the open interval (0, 1), 53 random bits. */
double attnc_uniform(uint64_t seed, uint64_t stream, uint64_t index);

/* 128 random bits (four 32-bit words) for (seed, stream, index): one Philox
 * call, for kernels that need many cheap draws (dropout masks). */
void attnc_random_bits4(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]);

/* out[4 k + w] = word w of attnc_random_bits4(seed, stream, first + k) for
 * k < count: the same bits, many counters at once (vectorised). */
void attnc_random_bits(uint64_t seed, uint64_t stream, uint64_t first, int64_t count, uint32_t *out);

/* Standard Gumbel noise: -log(-log(u)), u = attnc_uniform(...). */
double attnc_gumbel(uint64_t seed, uint64_t stream, uint64_t index);

#endif
