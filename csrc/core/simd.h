/* simd.h: what makes the element-wise tile loops fast.
 *
 * attnc is built once per SIMD path (baseline x86-64, AVX2 + FMA, AVX-512;
 * see core/cpu.h) and Python loads the build the CPU runs, so plain loops
 * become the CPU's vector code. The loops are written so the compiler
 * vectorises them (no calls, no branches): no libm call inside them.
 *
 * attnc_expf is exp for float without a libm call: Cody-Waite reduction
 * x = n ln2 + r, a degree-6 polynomial for e^r (Cephes' coefficients, about
 * 1 ulp), and 2^n built in the exponent bits. Results below the normal
 * float range (x < -87.34, exp(-inf) included) are exactly 0, above it +inf;
 * NaN stays NaN.
 *
 * attnc_tanhf is tanh for float as a rational function, x N(x^2) / D(x^2)
 * with N and D of degree 4 (a minimax fit of tanh's relative error on
 * [0, 9], 4e-8 before float rounding), evaluated at |x| clamped to 9 (tanh
 * is 1 - 3e-8 there), the result clamped to 1 and given x's sign: within
 * 3.5e-7 absolute and relative of tanh (the float evaluation's rounding: 6
 * steps of float's spacing below 1), NaN stays NaN. About 20 adds and
 * multiplies and a divide, no exp: 0.6 of the time of
 * 1 - 2 / (attnc_expf(2x) + 1) in AVX2 (the fused kernel's softcap). The
 * sign by bits and the one-sided clamps cost 0.8 of the time of clamping x
 * to [-9, 9] and the result to [-1, 1] (the same bits: IEEE rounding is
 * symmetric, so x N(x^2) / D(x^2) is odd in float too). */
#ifndef ATTNC_SIMD_H
#define ATTNC_SIMD_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float attnc_expf(float x) {
    const float hi = 88.37626f, lo = -87.33655f, magic = 12582912.0f; /* 1.5 * 2^23 */
    float xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    float t = xc * 1.44269504088896341f + magic; /* round(x / ln2) in t's low bits */
    float n = t - magic;
    float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t tb, pb;
    memcpy(&tb, &t, 4);
    memcpy(&pb, &p, 4);
    pb += (tb - 0x4B400000u) << 23; /* multiply by 2^n */
    float y;
    memcpy(&y, &pb, 4);
    y = x < lo ? 0.0f : y;
    y = x > hi ? (float)INFINITY : y;
    return x != x ? x : y;
}

static inline float attnc_tanhf(float x) {
    uint32_t bits, sign;
    memcpy(&bits, &x, 4);
    sign = bits & 0x80000000u; /* tanh is odd: computed on |x|, the sign put back */
    bits &= 0x7fffffffu;
    float a;
    memcpy(&a, &bits, 4);
    a = 9.0f < a ? 9.0f : a; /* NaN stays NaN */
    float u = a * a;
    float n = ((1.37326293e-8f * u + 2.08863185e-5f) * u + 3.51263350e-3f) * u + 1.33954480e-1f;
    float d = (((7.93258664e-7f * u + 3.31336807e-4f) * u + 2.59420462e-2f) * u + 4.67287719e-1f) * u + 1.0f;
    float y = a * (n * u + 1.0f) / d;
    y = 1.0f < y ? 1.0f : y; /* the float evaluation passes 1 from a = 8.07 */
    memcpy(&bits, &y, 4);
    bits |= sign;
    memcpy(&y, &bits, 4);
    return y;
}

#endif
