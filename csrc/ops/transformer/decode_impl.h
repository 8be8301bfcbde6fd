/* decode_impl.h: typed kernels of decode.c (see core/real.h): attention of
 * one query row and one head over cached keys, the inner loop of a decoding
 * step; a small linear layer; a transposed copy. Plain loops: for a handful of keys the tiled kernel's set-up costs
 * more than the arithmetic. */
#include "../../core/real.h"

/* One head of one query row over n keys: scores_j = scale q . k_j over the
 * allowed keys (allowed[j * mstride] != 0, or all when allowed is NULL),
 * with var's options applied as attnc_sdpa_forward applies them (softcap,
 * then ALiBi's slope (j - pos), then the keys before var->first out; the
 * sink joins the normaliser), out = softmax(scores) . v, or with
 * var->sigmoid sigmoid(scores + var->bias) . v. The keys sit transposed, kt[e * ktstride + j]
 * (element e of key j; ktstride a multiple of 16 that is >= n), so that
 * one vector holds the partial scores of 16 keys: a head dim of 16 or 32
 * is too short to fill vectors along it. The values are rows, v_j = v + j
 * vstride, hd contiguous. scores: scratch of n. No allowed key: out = 0. */
static void FN(attend_one)(const void *q_, const void *kt_, int64_t ktstride, const void *v_, int64_t vstride,
                           int64_t n, int64_t hd, double scale_, const uint8_t *allowed, int64_t mstride,
                           const head_variant *var, void *scores_, void *out_) {
    const REAL *restrict q = q_, *restrict kt = kt_, *restrict v = v_;
    REAL *restrict scores = scores_, *restrict out = out_;
    const REAL scale = (REAL)scale_;
    /* chunks of 16 keys accumulate in registers (a loop that adds into
     * memory waits on its own store at every step), even and odd elements
     * apart to halve the chain of dependent adds; the rows of kt are padded
     * to a multiple of 16, so the last chunk is whole too */
    for (int64_t j = 0; j < n; j += 16) {
        REAL acc[2][16] = {{0}};
        int64_t e = 0;
        for (; e + 2 <= hd; e += 2)
            for (int p = 0; p < 2; p++)
                for (int u = 0; u < 16; u++) acc[p][u] += q[e + p] * kt[(e + p) * ktstride + j + u];
        for (; e < hd; e++)
            for (int u = 0; u < 16; u++) acc[0][u] += q[e] * kt[e * ktstride + j + u];
        for (int u = 0; u < 16 && j + u < n; u++) scores[j + u] = (acc[0][u] + acc[1][u]) * scale;
    }
    if (var->softcap > 0)
        for (int64_t j = 0; j < n; j++) scores[j] = (REAL)(var->softcap * tanh(scores[j] / var->softcap));
    if (var->slope != 0)
        for (int64_t j = 0; j < n; j++) scores[j] += (REAL)(var->slope * (double)(j - var->pos));
    for (int64_t j = 0; j < var->first && j < n; j++) scores[j] = -INFINITY;
    if (allowed)
        for (int64_t j = 0; j < n; j++)
            if (!allowed[j * mstride]) scores[j] = -INFINITY;
    REAL mx = (REAL)var->sink, lanes[16];
    for (int u = 0; u < 16; u++) lanes[u] = -INFINITY;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) /* a maximum is exact in any order */
        for (int u = 0; u < 16; u++) lanes[u] = scores[j + u] > lanes[u] ? scores[j + u] : lanes[u];
    for (; j < n; j++) mx = scores[j] > mx ? scores[j] : mx;
    for (int u = 0; u < 16; u++) mx = lanes[u] > mx ? lanes[u] : mx;
    for (int64_t e = 0; e < hd; e++) out[e] = 0;
    if (mx == -INFINITY) return;
    REAL inv = 1;
    if (var->sigmoid) { /* as the kernel's row_sigmoid; an excluded key's -inf gives exactly 0 */
        const REAL bias = (REAL)var->bias;
        for (j = 0; j < n; j++) scores[j] = 1 / (1 + EXPV(-(scores[j] + bias)));
    } else {
        for (j = 0; j < n; j++) scores[j] = EXPV(scores[j] - mx); /* exp(-inf) is exactly 0 */
        REAL sum = EXPV((REAL)var->sink - mx); /* the sink's share of the normaliser (0 without one) */
        for (j = 0; j < n; j++) sum += scores[j];
        inv = 1 / sum;
    }
    /* out = sum_j p_j v_j: even and odd keys in separate registers */
    int64_t e = 0;
    for (; e + 16 <= hd; e += 16) {
        REAL acc[2][16] = {{0}};
        for (j = 0; j + 2 <= n; j += 2)
            for (int p = 0; p < 2; p++)
                for (int u = 0; u < 16; u++) acc[p][u] += scores[j + p] * v[(j + p) * vstride + e + u];
        for (; j < n; j++)
            for (int u = 0; u < 16; u++) acc[0][u] += scores[j] * v[j * vstride + e + u];
        for (int u = 0; u < 16; u++) out[e + u] = (acc[0][u] + acc[1][u]) * inv;
    }
    for (; e < hd; e++) {
        REAL acc = 0;
        for (j = 0; j < n; j++) acc += scores[j] * v[j * vstride + e];
        out[e] = acc * inv;
    }
}

/* y (n, m) = x (n, k) wt (k, :m) + b (b[o bs], or none): a linear layer on
 * a few rows, with the weight transposed and its rows padded to 32 (wt has
 * k rows of ldw >= m rounded up to 32). Blocks of 4 rows x 32 outputs
 * accumulate in registers. For the handful of rows of a decoding step this
 * beats BLAS, whose packing of the operands costs more than the product. */
static void FN(small_linear)(const void *x_, int64_t n, int64_t k, const void *wt_, int64_t m, int64_t ldw,
                             const void *b_, int64_t bs, void *y_) {
    const REAL *restrict x = x_, *restrict wt = wt_, *b = b_;
    REAL *restrict y = y_;
    for (int64_t i0 = 0; i0 < n; i0 += 4) {
        int64_t ni = n - i0 < 4 ? n - i0 : 4;
        for (int64_t o = 0; o < m; o += 32) {
            REAL acc[4][32] = {{0}};
            for (int64_t kk = 0; kk < k; kk++) {
                const REAL *restrict w = wt + kk * ldw + o;
                for (int i = 0; i < 4; i++) {
                    REAL xv = i < ni ? x[(i0 + i) * k + kk] : 0;
                    for (int u = 0; u < 32; u++) acc[i][u] += xv * w[u];
                }
            }
            int64_t no = m - o < 32 ? m - o : 32;
            for (int i = 0; i < ni; i++)
                for (int u = 0; u < no; u++) y[(i0 + i) * m + o + u] = b ? acc[i][u] + b[(o + u) * bs] : acc[i][u];
        }
    }
}

/* dst[c ld + r] <- src[r rs + c cs] for rows r, columns c (decode.c's transpose). */
static void FN(transpose)(void *dst, int64_t ld, const void *src, int64_t rs, int64_t cs, int64_t rows, int64_t cols) {
    REAL *restrict to = dst;
    const REAL *from = src;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) to[c * ld + r] = from[r * rs + c * cs];
}

#include "../../core/real_end.h"
