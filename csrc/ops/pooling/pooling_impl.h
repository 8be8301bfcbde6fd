/* pooling_impl.h: typed kernels of pooling.c (see core/real.h). */
#include "../../core/real.h"

/* Batch element b: u <- tanh(u + bias) (u holds W h on entry), the scores
 * e_t = v . u_t, the masked stable softmax alpha, c = sum_t alpha_t h_t. */
static void FN(pool_forward_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const pool_job *j = arg;
    int64_t T = j->T, d = j->d, A = j->A;
    REAL *u = (REAL *)j->u + b * T * A, *alpha = (REAL *)j->alpha + b * T, *c = (REAL *)j->c + b * d;
    const REAL *h = (const REAL *)j->h + b * T * d, *bias = j->bias, *v = j->v;
    const uint8_t *m = j->mask ? j->mask + b * T : NULL;
    REAL best = -INFINITY;
    for (int64_t t = 0; t < T; t++) {
        REAL *ut = u + t * A, e = 0;
        if (bias)
            for (int64_t a = 0; a < A; a++) ut[a] += bias[a];
        for (int64_t a = 0; a < A; a++) ut[a] = TANH(ut[a]);
        for (int64_t a = 0; a < A; a++) e += v[a] * ut[a];
        alpha[t] = e;
        if ((!m || m[t]) && e > best) best = e;
    }
    for (int64_t k = 0; k < d; k++) c[k] = 0;
    if (best == -INFINITY) { /* no position takes part */
        for (int64_t t = 0; t < T; t++) alpha[t] = 0;
        return;
    }
    REAL sum = 0;
    for (int64_t t = 0; t < T; t++) {
        alpha[t] = (!m || m[t]) ? EXP(alpha[t] - best) : 0;
        sum += alpha[t];
    }
    for (int64_t t = 0; t < T; t++) {
        alpha[t] /= sum;
        const REAL *ht = h + t * d;
        REAL a_t = alpha[t];
        if (a_t != 0)
            for (int64_t k = 0; k < d; k++) c[k] += a_t * ht[k];
    }
}

/* Batch element b of the backward: dalpha_t = dc . h_t (+ the weights'
 * cotangent), de_t = alpha_t (dalpha_t - sum_s alpha_s dalpha_s),
 * dz_t = de_t v * (1 - u_t^2), dh_t = alpha_t dc (the W path is added
 * afterwards by one product). */
static void FN(pool_backward_task)(void *arg, int64_t b, int worker) {
    (void)worker;
    const pool_job *j = arg;
    int64_t T = j->T, d = j->d, A = j->A;
    const REAL *h = (const REAL *)j->h + b * T * d, *alpha = (const REAL *)j->alpha + b * T,
               *dc = (const REAL *)j->dc + b * d, *u = (const REAL *)j->u + b * T * A, *dalpha = j->dalpha, *v = j->v;
    REAL *de = (REAL *)j->de + b * T, *dz = (REAL *)j->dz + b * T * A, *dh = j->dh ? (REAL *)j->dh + b * T * d : NULL;
    REAL dot = 0;
    for (int64_t t = 0; t < T; t++) {
        const REAL *ht = h + t * d;
        REAL g = dalpha ? dalpha[b * T + t] : 0;
        for (int64_t k = 0; k < d; k++) g += dc[k] * ht[k];
        de[t] = g;
        dot += alpha[t] * g;
    }
    for (int64_t t = 0; t < T; t++) {
        REAL e = alpha[t] * (de[t] - dot);
        de[t] = e;
        const REAL *ut = u + t * A;
        REAL *zt = dz + t * A;
        for (int64_t a = 0; a < A; a++) zt[a] = e * v[a] * (1 - ut[a] * ut[a]);
        if (dh) {
            REAL *dht = dh + t * d;
            for (int64_t k = 0; k < d; k++) dht[k] = alpha[t] * dc[k];
        }
    }
}

#include "../../core/real_end.h"
