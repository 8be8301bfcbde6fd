/* lstm_cell_impl.h: the pointwise part of an LSTM cell over one row of H
 * units, forward and backward, typed (see core/real.h; include after
 * real.h). Shared by every LSTM in attnc whose row loop runs on generic
 * code: nn.LSTM's BLAS path (rnn/rnn_impl.h), the LSTMN (lstmn/), the
 * recurrent attention decoder (seq2seq/), the captioner (captioner/) and the
 * NTM's controller (ntm/model_impl.h), and, through the _units loops on
 * tiles of VW units, nn.LSTM's fused float kernels (rnn/rnn_fast.c).
 *
 * Layout: gates (4H) are torch's i, f, g, o, blocks of H; forward writes
 * them as activations, which is what the backward reads.
 *     i = sigmoid(a_i), f = sigmoid(a_f), g = tanh(a_g), o = sigmoid(a_o)
 *     c = f c_prev + i g,  h = o tanh(c)
 *     dc~ = dc + dh o (1 - tanh^2 c)
 *     da_i = dc~ g i (1 - i), da_f = dc~ c_prev f (1 - f),
 *     da_g = dc~ i (1 - g^2), da_o = dh tanh(c) o (1 - o),  dc_prev = dc~ f */
#include <stdbool.h>

#include "sigmoid_impl.h"

/* Float32 on AVX-512 for the families that define ATTNC_LSTM_FMA before
 * including this file (rnn/rnn_fast.c, pointer/, whose float32 results
 * already differ between SIMD builds): the _units loops take 16 units at a
 * time with core/rows_f32.h's sigmoid and tanh (exp in fused multiply-adds,
 * reciprocals from vrcp14ps and a Newton step), where the generic loops
 * divide five times per unit forward (vdivps's throughput is a tenth of an
 * FMA's): a 128-unit LSTM's forward and a pointer network's beam decoding
 * measured 6-9% faster on one thread. Tests compare both with torch. The
 * other families stay bitwise alike on every SIMD path. */
#if defined(ATTNC_LSTM_FMA) && !ATTNC_F64
#include "rows_f32.h"
#define LSTM_CELL_VEC ATTNC_ROWS_F32
#else
#define LSTM_CELL_VEC 0
#endif

/* The row functions go unused where only the _units loops are taken (rnn_fast.c). */
#ifndef ATTNC_UNUSED
#define ATTNC_UNUSED __attribute__((unused))
#endif

/* The forward loop over n units, the gate blocks S apart (S = n = H for a
 * whole row; rnn/rnn_fast.c runs it on tiles of VW units); prev (a constant
 * after inlining) says whether c_prev is read. */
static inline __attribute__((always_inline)) void FN(lstm_cell_forward_units)(REAL *restrict gates,
                                                                              const REAL *restrict c_prev, bool prev,
                                                                              REAL *restrict c, REAL *restrict h,
                                                                              int64_t n, int64_t S) {
#if LSTM_CELL_VEC
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = attnc_lanes16(n - k);
        __m512 i = attnc_sigmoid512(_mm512_maskz_loadu_ps(m, gates + k));
        __m512 f = attnc_sigmoid512(_mm512_maskz_loadu_ps(m, gates + S + k));
        __m512 g = attnc_tanh512(_mm512_maskz_loadu_ps(m, gates + 2 * S + k));
        __m512 o = attnc_sigmoid512(_mm512_maskz_loadu_ps(m, gates + 3 * S + k));
        _mm512_mask_storeu_ps(gates + k, m, i);
        _mm512_mask_storeu_ps(gates + S + k, m, f);
        _mm512_mask_storeu_ps(gates + 2 * S + k, m, g);
        _mm512_mask_storeu_ps(gates + 3 * S + k, m, o);
        __m512 ig = _mm512_mul_ps(i, g);
        __m512 cn = prev ? _mm512_fmadd_ps(f, _mm512_maskz_loadu_ps(m, c_prev + k), ig) : ig;
        _mm512_mask_storeu_ps(c + k, m, cn);
        _mm512_mask_storeu_ps(h + k, m, _mm512_mul_ps(o, attnc_tanh512(cn)));
    }
#else
    for (int64_t k = 0; k < n; k++) {
        REAL i = FN(sigmoid)(gates[k]), f = FN(sigmoid)(gates[S + k]);
        REAL g = FN(tanh_)(gates[2 * S + k]), o = FN(sigmoid)(gates[3 * S + k]);
        gates[k] = i;
        gates[S + k] = f;
        gates[2 * S + k] = g;
        gates[3 * S + k] = o;
        c[k] = prev ? f * c_prev[k] + i * g : i * g;
        h[k] = o * FN(tanh_)(c[k]);
    }
#endif
}

/* gates (4H): in, the pre-activations less add (add (4H) or NULL: nothing
 * to add; added first, pre + add); out, the activations. c_prev (H) or NULL
 * (zeros); c, h (H) written. */
ATTNC_UNUSED static void FN(lstm_cell_forward)(REAL *restrict gates, const REAL *restrict add,
                                               const REAL *restrict c_prev, REAL *restrict c, REAL *restrict h,
                                               int64_t H) {
    if (add)
        for (int64_t k = 0; k < 4 * H; k++) gates[k] += add[k];
    if (c_prev)
        FN(lstm_cell_forward_units)(gates, c_prev, true, c, h, H, H);
    else
        FN(lstm_cell_forward_units)(gates, NULL, false, c, h, H, H);
}

/* The backward loop over n units, gate blocks S apart (as the forward's);
 * prev and two (constants after inlining) say whether c_prev and dh2 are
 * read. */
static inline __attribute__((always_inline)) void
FN(lstm_cell_backward_units)(const REAL *restrict gates, const REAL *restrict c, const REAL *restrict c_prev, bool prev,
                             const REAL *restrict dh1, const REAL *restrict dh2, bool two, REAL *restrict dc,
                             REAL *restrict dgates, int64_t n, int64_t S) {
#if LSTM_CELL_VEC
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = attnc_lanes16(n - k);
        __m512 dh = _mm512_maskz_loadu_ps(m, dh1 + k);
        if (two) dh = _mm512_add_ps(dh, _mm512_maskz_loadu_ps(m, dh2 + k));
        __m512 i = _mm512_maskz_loadu_ps(m, gates + k), f = _mm512_maskz_loadu_ps(m, gates + S + k);
        __m512 g = _mm512_maskz_loadu_ps(m, gates + 2 * S + k), o = _mm512_maskz_loadu_ps(m, gates + 3 * S + k);
        __m512 tc = attnc_tanh512(_mm512_maskz_loadu_ps(m, c + k));
        __m512 dho = _mm512_mul_ps(dh, o);
        /* d = dc + dh o (1 - tc^2) */
        __m512 d = _mm512_fmadd_ps(dho, _mm512_fnmadd_ps(tc, tc, one), _mm512_maskz_loadu_ps(m, dc + k));
        __m512 di = _mm512_mul_ps(d, i);
        _mm512_mask_storeu_ps(dgates + k, m, _mm512_mul_ps(_mm512_mul_ps(di, g), _mm512_sub_ps(one, i)));
        __m512 df = _mm512_setzero_ps();
        if (prev)
            df = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, c_prev + k)), f),
                               _mm512_sub_ps(one, f));
        _mm512_mask_storeu_ps(dgates + S + k, m, df);
        _mm512_mask_storeu_ps(dgates + 2 * S + k, m, _mm512_mul_ps(di, _mm512_fnmadd_ps(g, g, one)));
        _mm512_mask_storeu_ps(dgates + 3 * S + k, m, _mm512_mul_ps(_mm512_mul_ps(dho, tc), _mm512_sub_ps(one, o)));
        _mm512_mask_storeu_ps(dc + k, m, _mm512_mul_ps(d, f));
    }
#else
    for (int64_t k = 0; k < n; k++) {
        REAL dh = two ? dh1[k] + dh2[k] : dh1[k];
        REAL i = gates[k], f = gates[S + k], g = gates[2 * S + k], o = gates[3 * S + k], tc = FN(tanh_)(c[k]);
        REAL d = dc[k] + dh * o * (1 - tc * tc);
        dgates[k] = d * g * i * (1 - i);
        dgates[S + k] = prev ? d * c_prev[k] * f * (1 - f) : 0;
        dgates[2 * S + k] = d * i * (1 - g * g);
        dgates[3 * S + k] = dh * tc * o * (1 - o);
        dc[k] = d * f;
    }
#endif
}

/* gates (4H activations), c, c_prev (H; c_prev NULL: zeros) of the forward;
 * dh = dh1 + dh2 (H each; dh2 NULL: dh1 alone) the cotangent of h; dc (H)
 * in, the cotangent of c from later on (zeros at the last step), out, that
 * of c_prev; dgates (4H) written, the cotangents of the pre-activations. */
ATTNC_UNUSED static void FN(lstm_cell_backward)(const REAL *restrict gates, const REAL *restrict c,
                                                const REAL *restrict c_prev, const REAL *restrict dh1,
                                                const REAL *restrict dh2, REAL *restrict dc, REAL *restrict dgates,
                                                int64_t H) {
    if (c_prev && dh2)
        FN(lstm_cell_backward_units)(gates, c, c_prev, true, dh1, dh2, true, dc, dgates, H, H);
    else if (c_prev)
        FN(lstm_cell_backward_units)(gates, c, c_prev, true, dh1, NULL, false, dc, dgates, H, H);
    else if (dh2)
        FN(lstm_cell_backward_units)(gates, c, NULL, false, dh1, dh2, true, dc, dgates, H, H);
    else
        FN(lstm_cell_backward_units)(gates, c, NULL, false, dh1, NULL, false, dc, dgates, H, H);
}

#undef LSTM_CELL_VEC
