/* rows_f32.h: the row maximum and the shifted exponential of float32 rows
 * in AVX-512, for the softmax inside flash attention's tiles; tanh and the
 * additive score, for the pointer network's decoding steps; the sigmoid and
 * tanh of the LSTM cells that opt in (core/lstm_cell_impl.h).
 *
 * Why: next to the tile products (csrc/core/tile_gemm.c), the online
 * softmax's exp was a third of the forward's time. attnc_expf (simd.h)
 * stays bitwise alike in every build by avoiding fused multiply-adds; here
 * the AVX-512 build, whose products already use them, takes exp(x) as
 * 2^n p(r) with the reduction and the polynomial in fused multiply-adds and
 * 2^n applied by vscalefps: 13 instructions a vector instead of about 28,
 * within 2 ulp of exp. NaN stays NaN; as attnc_expf, anything below the
 * normal range (x < -87.34, exp(-inf) included) is 0 and anything above
 * it (x > 88.73) +inf.
 *
 * Only with __AVX512F__ (ATTNC_ROWS_F32 is 1 then); callers keep their
 * generic loops for the other builds. */
#ifndef ATTNC_ROWS_F32_H
#define ATTNC_ROWS_F32_H
#include <stdint.h>

/* The additive score's factored tanh (e^{2 (q + k)} = e^{2q} e^{2k}, below
 * and in attention/score_impl.h) is used where every |q|, |k| is at most
 * this: the products stay within float's normal range (e^{+-80}). */
#define ATTNC_EXP2_MAX 20.0f

#if defined(__AVX512F__)
#define ATTNC_ROWS_F32 1
#include <immintrin.h>

/* The first min(n, 16) lanes (n >= 1): a row's last, maybe partial, vector. */
static inline __mmask16 attnc_lanes16(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

static inline __m512 attnc_exp512(__m512 x) {
    /* Below lo, exp(x) is under the normal range: 0, as attnc_expf, and
     * computed on lo (lanes that would underflow cost a microcode assist each:
     * causal tiles, half -inf, ran at half speed). max(lo, x), in this operand
     * order, returns x when x is NaN, and NaN is not below lo. */
    const __m512 lo = _mm512_set1_ps(-87.33655f);
    __mmask16 normal = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    /* Above 89 (+inf included) computed on 89, where 2^n p overflows to +inf
     * (infinite arguments would give inf - inf in the reduction). */
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(lo, x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps(normal, p, n);
}

/* 1 / d for d in [1, 2^126] (finite: an infinite d would make 0 * inf),
 * from vrcp14ps and a Newton step, within 1 ulp (vdivps's throughput is
 * a tenth of an FMA's). */
static inline __m512 attnc_recip512(__m512 d) {
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f))); /* r (2 - d r) */
}

/* tanh as core/sigmoid_impl.h's float tanh_ (its odd series below 1/16,
 * 1 - 2 / (e^2x + 1) above), with attnc_exp512 and attnc_recip512: within
 * 3e-7 absolute of tanh. */
static inline __m512 attnc_tanh512(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 series = _mm512_fmadd_ps(x2, _mm512_set1_ps(2.0f / 15), _mm512_set1_ps(-1.0f / 3));
    series = _mm512_mul_ps(x, _mm512_fmadd_ps(x2, series, one));
    /* |x| > 9: tanh is +-1 in float; clamped so that d stays finite. */
    __m512 xc = _mm512_min_ps(_mm512_set1_ps(9.0f), _mm512_max_ps(_mm512_set1_ps(-9.0f), x));
    __m512 d = _mm512_add_ps(attnc_exp512(_mm512_mul_ps(two, xc)), one);
    __m512 exact = _mm512_fnmadd_ps(two, attnc_recip512(d), one); /* 1 - 2 / d */
    __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0.0625f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(small, exact, series);
}

/* sigmoid(x) = 1 / (1 + e^-x), within 2 ulp. x is clamped to +-87 so that
 * e^-x stays finite: below -87 the result is sigmoid(-87), 1.6e-38, where
 * the exact one is smaller still; above 87 it is 1 either way. NaN stays
 * NaN (max and min return their second operand, x, for a NaN). */
static inline __m512 attnc_sigmoid512(__m512 x) {
    __m512 xc = _mm512_min_ps(_mm512_set1_ps(87.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
    return attnc_recip512(_mm512_add_ps(attnc_exp512(_mm512_sub_ps(_mm512_setzero_ps(), xc)), _mm512_set1_ps(1.0f)));
}

/* tanh x from y = e^{2x} (the additive score's factored form, where e^{2x}
 * = e^{2q} e^{2k} comes from exps made once per query and key): its odd
 * series below 1/8 (where 1 - 2 / (y + 1) would lose relative precision),
 * else 1 - 2 / (y + 1). y + 1 must be finite: |x| <= 40 or so. */
static inline __m512 attnc_tanh_exp2_512(__m512 x, __m512 y) {
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_fmadd_ps(x2, _mm512_set1_ps(-17.0f / 315), _mm512_set1_ps(2.0f / 15));
    p = _mm512_fmadd_ps(x2, p, _mm512_set1_ps(-1.0f / 3));
    __m512 series = _mm512_mul_ps(x, _mm512_fmadd_ps(x2, p, _mm512_set1_ps(1.0f)));
    __m512 d = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    __m512 exact = _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), attnc_recip512(d), _mm512_set1_ps(1.0f));
    __mmask16 small = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0.125f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(small, exact, series);
}

/* e[j] <- e^{2 x[j]} for j < n; whether every |x[j]| <= ATTNC_EXP2_MAX
 * (never for NaN): the factored form's exps, and whether they keep it in
 * range. */
static inline int attnc_exp2x_f32(float *e, const float *x, int64_t n) {
    __mmask16 bad = 0;
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = attnc_lanes16(n - j);
        __m512 v = _mm512_maskz_loadu_ps(m, x + j);
        bad |= _mm512_mask_cmp_ps_mask(m, _mm512_abs_ps(v), _mm512_set1_ps(ATTNC_EXP2_MAX), _CMP_NLE_UQ);
        _mm512_mask_storeu_ps(e + j, m, attnc_exp512(_mm512_add_ps(v, v)));
    }
    return bad == 0;
}

/* v . tanh(q + k) over n from eq = e^{2q}, ek = e^{2k} (attnc_tanh_exp2_512). */
static inline float attnc_additive_exp2_f32(const float *q, const float *k, const float *eq, const float *ek,
                                            const float *v, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = attnc_lanes16(n - j);
        __m512 x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, q + j), _mm512_maskz_loadu_ps(m, k + j));
        __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, eq + j), _mm512_maskz_loadu_ps(m, ek + j));
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, v + j), attnc_tanh_exp2_512(x, y), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* v . tanh(q + k) over n (the additive score of one query and key). */
static inline float attnc_additive_f32(const float *q, const float *k, const float *v, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = attnc_lanes16(n - j);
        __m512 t = attnc_tanh512(_mm512_add_ps(_mm512_maskz_loadu_ps(m, q + j), _mm512_maskz_loadu_ps(m, k + j)));
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, v + j), t, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* max(init, x[0..n)), NaN entries ignored (as the generic loop's `>`). */
static inline float attnc_row_max_f32(const float *x, int64_t n, float init) {
    __m512 lane = _mm512_set1_ps(init);
    int64_t j = 0;
    /* max(x, lane) returns lane when x is NaN. */
    for (; j + 16 <= n; j += 16) lane = _mm512_max_ps(_mm512_loadu_ps(x + j), lane);
    if (j < n) {
        __mmask16 k = attnc_lanes16(n - j);
        lane = _mm512_mask_max_ps(lane, k, _mm512_maskz_loadu_ps(k, x + j), lane);
    }
    return _mm512_reduce_max_ps(lane);
}

/* x[j] <- exp(x[j] - shift) for j < n; returns their sum. */
static inline float attnc_row_exp_f32(float *x, int64_t n, float shift) {
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps(), s = _mm512_set1_ps(shift);
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) { /* two chains: the adds' latency hides */
        __m512 e0 = attnc_exp512(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
        __m512 e1 = attnc_exp512(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), s));
        _mm512_storeu_ps(x + j, e0);
        _mm512_storeu_ps(x + j + 16, e1);
        sum0 = _mm512_add_ps(sum0, e0);
        sum1 = _mm512_add_ps(sum1, e1);
    }
    for (; j < n; j += 16) {
        __mmask16 k = attnc_lanes16(n - j);
        __m512 e = attnc_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), s));
        _mm512_mask_storeu_ps(x + j, k, e);
        sum0 = _mm512_add_ps(sum0, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

#else
#define ATTNC_ROWS_F32 0
#endif

#endif
