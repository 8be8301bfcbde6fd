/* decode_impl.h: typed kernel of decode.c (see core/real.h): attention of
 * one query row and one head over cached keys, the inner loop of a decoding
 * step. Plain loops: for a handful of keys the tiled kernel's set-up costs
 * more than the arithmetic. */
#include "../core/real.h"

/* out (hd) <- sum_j softmax_j(scale q.k_j) v_j over keys j < n that are
 * allowed (allowed[j * mstride] != 0, or all when allowed is NULL); k_j =
 * k + j kstride, v_j = v + j kstride, each hd contiguous. scores: scratch of
 * n. No allowed key: out = 0. */
static void FN(attend_one)(const REAL *restrict q, const REAL *restrict k, const REAL *restrict v,
                           int64_t kstride, int64_t n, int64_t hd, REAL scale,
                           const uint8_t *allowed, int64_t mstride, REAL *restrict scores,
                           REAL *restrict out) {
    REAL mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        if (allowed && !allowed[j * mstride]) {
            scores[j] = -INFINITY;
            continue;
        }
        const REAL *kj = k + j * kstride;
        REAL lane[16] = {0}, dot = 0;
        int64_t e = 0;
        for (; e + 16 <= hd; e += 16)
            for (int u = 0; u < 16; u++) lane[u] += q[e + u] * kj[e + u];
        for (int w = 8; w >= 1; w /= 2) /* a fixed halving tree: vector shuffles */
            for (int u = 0; u < w; u++) lane[u] += lane[u + w];
        dot = lane[0];
        for (; e < hd; e++) dot += q[e] * kj[e];
        scores[j] = dot * scale;
        mx = scores[j] > mx ? scores[j] : mx;
    }
    for (int64_t e = 0; e < hd; e++) out[e] = 0;
    if (mx == -INFINITY) return;
    REAL sum = 0;
    for (int64_t j = 0; j < n; j++) { /* exp(-inf) is exactly 0 */
        scores[j] = EXPV(scores[j] - mx);
        sum += scores[j];
    }
    for (int64_t j = 0; j < n; j++) {
        if (scores[j] == 0) continue;
        const REAL *vj = v + j * kstride;
        for (int64_t e = 0; e < hd; e++) out[e] += scores[j] * vj[e];
    }
    REAL inv = 1 / sum;
    for (int64_t e = 0; e < hd; e++) out[e] *= inv;
}

#include "../core/real_end.h"
