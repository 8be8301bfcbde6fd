/* rng.c: Philox4x32-10. */
#include "rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

static void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c[0], &hi0, &lo0);
        mulhilo(PHILOX_M1, c[2], &hi1, &lo1);
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
}

double attnc_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    uint64_t bits = ((uint64_t)c[0] << 21) ^ ((uint64_t)c[1] >> 11); /* 53 bits */
    bits &= (UINT64_C(1) << 53) - 1;
    return ((double)bits + 0.5) * 0x1.0p-53; /* never 0, never 1 */
}

void attnc_random_bits4(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

/* Eight counters at once in AVX-512: each 64-bit lane holds one 32-bit
 * word, so one _mm512_mul_epu32 gives eight full 32 x 32 -> 64 products. */
#ifdef __AVX512F__
#include <immintrin.h>

static void random_bits_avx512(uint64_t seed, uint64_t stream, uint64_t first, int64_t count, uint32_t *out) {
    const __m512i low = _mm512_set1_epi64(0xFFFFFFFF), m0 = _mm512_set1_epi64(PHILOX_M0),
                  m1 = _mm512_set1_epi64(PHILOX_M1), lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
    for (int64_t k0 = 0; k0 < count; k0 += 8) {
        __m512i index = _mm512_add_epi64(_mm512_set1_epi64((long long)(first + (uint64_t)k0)), lanes);
        __m512i c0 = _mm512_and_si512(index, low), c1 = _mm512_srli_epi64(index, 32);
        __m512i c2 = _mm512_set1_epi64((uint32_t)stream), c3 = _mm512_set1_epi64((uint32_t)(stream >> 32));
        uint32_t key0 = (uint32_t)seed, key1 = (uint32_t)(seed >> 32);
        for (int round = 0; round < 10; round++) {
            __m512i p0 = _mm512_mul_epu32(m0, c0), p1 = _mm512_mul_epu32(m1, c2);
            __m512i k0v = _mm512_set1_epi64(key0), k1v = _mm512_set1_epi64(key1);
            c0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p1, 32), c1), k0v);
            c1 = _mm512_and_si512(p1, low);
            c2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p0, 32), c3), k1v);
            c3 = _mm512_and_si512(p0, low);
            key0 += PHILOX_W0;
            key1 += PHILOX_W1;
        }
        uint64_t w[4][8];
        _mm512_storeu_si512(w[0], c0);
        _mm512_storeu_si512(w[1], c1);
        _mm512_storeu_si512(w[2], c2);
        _mm512_storeu_si512(w[3], c3);
        int64_t n = count - k0 < 8 ? count - k0 : 8;
        for (int64_t l = 0; l < n; l++)
            for (int i = 0; i < 4; i++) out[4 * (k0 + l) + i] = (uint32_t)w[i][l];
    }
}
#endif

void attnc_random_bits(uint64_t seed, uint64_t stream, uint64_t first, int64_t count, uint32_t *out) {
#ifdef __AVX512F__
    random_bits_avx512(seed, stream, first, count, out);
#else
    for (int64_t k = 0; k < count; k++) attnc_random_bits4(seed, stream, first + (uint64_t)k, out + 4 * k);
#endif
}

double attnc_gumbel(uint64_t seed, uint64_t stream, uint64_t index) {
    return -log(-log(attnc_uniform(seed, stream, index)));
}
