/* score_impl.h: typed kernels of score.c (see core/real.h; score.c defines
 * rows_mat and param_mat). Shapes per batch element: Q (Tq, dq), K (Tk,
 * dk), S and dS (Tq, Tk). */
#include "../../core/real.h"
#include "../../core/lanes_impl.h"
#include "../../core/rows_f32.h"

/* S (tq, tk) <- sum_a v_a tanh(QA_ia + KA_ja), v contiguous (core/lanes_impl.h's sums). */
static void FN(additive_rows)(REAL *restrict s, const REAL *restrict qa, const REAL *restrict ka,
                              const REAL *restrict v, int64_t tq, int64_t tk, int64_t da) {
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < tk; j++) s[i * tk + j] = FN(additive)(qa + i * da, ka + j * da, v, da);
}

#if !ATTNC_F64
/* Float's additive score factors e^{2 (q + k)} = e^{2 q} e^{2 k}: one exp per
 * projection entry instead of one per (query, key, unit), about twice as
 * fast. Used where every |q|, |k| <= ATTNC_EXP2_MAX (core/rows_f32.h);
 * tanh then comes within 1.2e-6 relative (the direct tanh__f32 within
 * 1.5e-6). */

/* e (n) <- e^{2 x}; whether every |x| <= ATTNC_EXP2_MAX (never for NaN). */
static bool additive_exp2(float *restrict e, const float *restrict x, int64_t n) {
#if ATTNC_ROWS_F32
    return attnc_exp2x_f32(e, x, n);
#else
    int ok = 1;
    for (int64_t a = 0; a < n; a++) {
        ok &= fabsf(x[a]) <= ATTNC_EXP2_MAX;
        e[a] = attnc_expf(2 * x[a]);
    }
    return ok;
#endif
}

/* tanh x from y = e^{2 x}: its odd series below 1/8 (where 1 - 2 / (y + 1)
 * would lose relative precision), else 1 - 2 / (y + 1). */
static inline float tanh_exp2(float x, float y) {
    float x2 = x * x;
    float series = x * (1 + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
    return fabsf(x) < 0.125f ? series : 1 - 2 / (y + 1);
}

/* additive_rows with eq = e^{2 QA}, ek = e^{2 KA}: in AVX-512 core/rows_f32.h's
 * (its sums, in 16 lanes then a tree, differ from the other builds' within
 * rounding), elsewhere 16 lanes summed pairwise. */
static void additive_rows_exp2(float *restrict s, const float *restrict qa, const float *restrict ka,
                               const float *restrict eq, const float *restrict ek, const float *restrict v, int64_t tq,
                               int64_t tk, int64_t da) {
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < tk; j++) {
            const float *q = qa + i * da, *k = ka + j * da, *e = eq + i * da, *f = ek + j * da;
#if ATTNC_ROWS_F32
            s[i * tk + j] = attnc_additive_exp2_f32(q, k, e, f, v, da);
#else
            float lane[16] = {0}, tail = 0;
            int64_t a = 0;
            for (; a + 16 <= da; a += 16)
                for (int l = 0; l < 16; l++) lane[l] += v[a + l] * tanh_exp2(q[a + l] + k[a + l], e[a + l] * f[a + l]);
            for (; a < da; a++) tail += v[a] * tanh_exp2(q[a] + k[a], e[a] * f[a]);
            for (int w = 8; w >= 1; w /= 2)
                for (int l = 0; l < w; l++) lane[l] += lane[l + w];
            s[i * tk + j] = lane[0] + tail;
#endif
        }
}

#if ATTNC_ROWS_F32
/* The factored backward in AVX-512: per block of 16 units, dv and a query's
 * dQA row are summed in registers (over every query and key, and over the
 * keys), only dKA's rows go through memory. dqa, dka, dv added to. */
static void additive_rows_backward_512(float *restrict dqa, float *restrict dka, float *restrict dv,
                                       const float *restrict ds, const float *restrict qa, const float *restrict ka,
                                       const float *restrict eq, const float *restrict ek, const float *restrict v,
                                       int64_t tq, int64_t tk, int64_t da) {
    for (int64_t a = 0; a < da; a += 16) {
        __mmask16 m = attnc_lanes16(da - a);
        __m512 va = _mm512_maskz_loadu_ps(m, v + a), dva = _mm512_setzero_ps();
        for (int64_t i = 0; i < tq; i++) {
            __m512 q = _mm512_maskz_loadu_ps(m, qa + i * da + a), e = _mm512_maskz_loadu_ps(m, eq + i * da + a);
            __m512 dq = _mm512_setzero_ps();
            for (int64_t j = 0; j < tk; j++) {
                float dsij = ds[i * tk + j];
                if (dsij == 0) continue;
                __m512 t = attnc_tanh_exp2_512(_mm512_add_ps(q, _mm512_maskz_loadu_ps(m, ka + j * da + a)),
                                               _mm512_mul_ps(e, _mm512_maskz_loadu_ps(m, ek + j * da + a)));
                __m512 dsv = _mm512_mul_ps(_mm512_set1_ps(dsij), va);
                __m512 gpre = _mm512_fnmadd_ps(_mm512_mul_ps(dsv, t), t, dsv); /* ds v (1 - t^2) */
                dq = _mm512_add_ps(dq, gpre);
                float *dk = dka + j * da + a;
                _mm512_mask_storeu_ps(dk, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dk), gpre));
                dva = _mm512_fmadd_ps(_mm512_set1_ps(dsij), t, dva);
            }
            float *dqi = dqa + i * da + a;
            _mm512_mask_storeu_ps(dqi, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dqi), dq));
        }
        _mm512_mask_storeu_ps(dv + a, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dv + a), dva));
    }
}
#endif

/* Whether element b takes the factored path: more than one query and key
 * (else the exps cost what they save), projections in range; then scratch
 * holds e^{2 QA} (tq, da) and e^{2 KA} (tk, da). */
static bool additive_use_exp2(float *scratch, const float *qa, const float *ka, int64_t tq, int64_t tk, int64_t da) {
    if (tq < 2 || tk < 2) return false;
    bool q_ok = additive_exp2(scratch, qa, tq * da);
    return additive_exp2(scratch + tq * da, ka, tk * da) && q_ok;
}
#endif

/* tanh x, x = QA_ia + KA_ja: from e[a] f[a] = e^{2 QA_ia} e^{2 KA_ja} on
 * float's factored path, else directly. */
static inline REAL FN(pair_tanh)(REAL x, bool factored, const REAL *e, const REAL *f, int64_t a) {
#if !ATTNC_F64
    if (factored) return tanh_exp2(x, e[a] * f[a]);
#else
    (void)factored, (void)e, (void)f, (void)a;
#endif
    return FN(tanh_)(x);
}

/* The additive score's backward: dQA (tq, da), dKA (tk, da), dv (da) added
 * to from dS (tq, tk); v contiguous; on float's factored path eq = e^{2 QA},
 * ek = e^{2 KA}. Always inlined, `factored` a constant at each call: each
 * path keeps a loop without a branch (one with the test inside measured 30%
 * slower). */
static inline __attribute__((always_inline)) void
FN(additive_rows_backward)(REAL *restrict dqa, REAL *restrict dka, REAL *restrict dv, const REAL *restrict ds,
                           const REAL *restrict qa, const REAL *restrict ka, bool factored, const REAL *restrict eq,
                           const REAL *restrict ek, const REAL *restrict v, int64_t tq, int64_t tk, int64_t da) {
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < tk; j++) {
            REAL dsij = ds[i * tk + j];
            if (dsij == 0) continue;
            REAL *dq = dqa + i * da, *dk = dka + j * da;
            const REAL *q = qa + i * da, *k = ka + j * da;
            const REAL *e = factored ? eq + i * da : NULL, *f = factored ? ek + j * da : NULL;
            for (int64_t a = 0; a < da; a++) {
                REAL t = FN(pair_tanh)(q[a] + k[a], factored, e, f, a), gpre = dsij * v[a] * (1 - t * t);
                dq[a] += gpre;
                dk[a] += gpre;
                dv[a] += dsij * t;
            }
        }
}

/* Row i of matrix m as a pointer plus column stride. */
#define ROW(m, i) ((const REAL *)(m).p + (i) * (m).rs)

static REAL FN(norm)(const REAL *x, int64_t n, int64_t stride) {
    REAL s = 0;
    for (int64_t a = 0; a < n; a++) s += x[a * stride] * x[a * stride];
    return SQRT(s);
}

/* Beta of row i (cosine score). */
static REAL FN(beta_at)(const attnc_score_ctx *c, int64_t b, int64_t i) {
    const attnc_tensor *beta = &c->p->beta;
    if (!attnc_present(beta)) return (REAL)c->p->beta_scalar;
    int64_t off = attnc_batch_offset(beta, &c->d->batch, b) + i * beta->strides[beta->ndim - 1];
    return *(const REAL *)attnc_at(beta, off);
}

/* Element b's rows of the additive score's projections, and v (see
 * attnc_score_ctx.pre). */
static void FN(additive_parts)(const attnc_score_ctx *c, int64_t b, const REAL **qa, const REAL **ka, const REAL **v) {
    const attnc_dims *d = c->d;
    const REAL *pre = c->pre;
    *qa = pre + b * d->tq * d->da;
    *ka = pre + (d->batch.count * d->tq + b * d->tk) * d->da;
    *v = pre + d->batch.count * (d->tq + d->tk) * d->da;
}

void FN(attnc_score_batch)(const attnc_score_ctx *c, int64_t b, REAL *s, REAL *scratch) {
    const attnc_dims *d = c->d;
    const attnc_score_params *p = c->p;
    attnc_mat q = attnc_batch_mat(c->query, &d->batch, b);
    attnc_mat k = attnc_batch_mat(c->keys, &d->batch, b);
    attnc_mat sm = rows_mat(s, d->tq, d->tk);
    switch (p->kind) {
    case ATTNC_SCORE_DOT:
    case ATTNC_SCORE_SCALED_DOT: GEMM(false, true, p->kind == ATTNC_SCORE_DOT ? 1 : (REAL)p->scale, q, k, 0, sm); break;
    case ATTNC_SCORE_GENERAL: {
        attnc_mat qw = rows_mat(scratch, d->tq, d->dk);
        GEMM(false, false, 1, q, param_mat(&p->weight), 0, qw);
        GEMM(false, true, 1, qw, k, 0, sm);
        break;
    }
    case ATTNC_SCORE_LOCATION: GEMM(false, false, 1, q, param_mat(&p->weight), 0, sm); break;
    case ATTNC_SCORE_ADDITIVE: {
        /* S_ij = sum_a v_a tanh(QA_ia + KA_ja), QA and KA from attnc_score_open. */
        const REAL *qa, *ka, *v;
        FN(additive_parts)(c, b, &qa, &ka, &v);
#if !ATTNC_F64
        if (additive_use_exp2(scratch, qa, ka, d->tq, d->tk, d->da)) {
            additive_rows_exp2(s, qa, ka, scratch, scratch + d->tq * d->da, v, d->tq, d->tk, d->da);
            break;
        }
#endif
        FN(additive_rows)(s, qa, ka, v, d->tq, d->tk, d->da);
        break;
    }
    case ATTNC_SCORE_COSINE: {
        /* S_ij = beta_i q_i.k_j / max(|q_i| |k_j|, eps). */
        REAL *nk = scratch;
        GEMM(false, true, 1, q, k, 0, sm);
        for (int64_t j = 0; j < d->tk; j++) nk[j] = FN(norm)(ROW(k, j), d->dk, k.cs);
        for (int64_t i = 0; i < d->tq; i++) {
            REAL nq = FN(norm)(ROW(q, i), d->dq, q.cs), beta = FN(beta_at)(c, b, i);
            for (int64_t j = 0; j < d->tk; j++) {
                REAL n = nq * nk[j];
                if (n < (REAL)ATTNC_COSINE_EPS) n = (REAL)ATTNC_COSINE_EPS;
                s[i * d->tk + j] = beta * (s[i * d->tk + j] / n);
            }
        }
        break;
    }
    case ATTNC_SCORE_GAUSSIAN: {
        /* Direct differences, not |q|^2 - 2 q.k + |k|^2: no cancellation. */
        REAL inv = 1 / (2 * (REAL)p->bandwidth * (REAL)p->bandwidth);
        for (int64_t i = 0; i < d->tq; i++)
            for (int64_t j = 0; j < d->tk; j++) {
                const REAL *qi = ROW(q, i), *kj = ROW(k, j);
                REAL acc = 0;
                for (int64_t a = 0; a < d->dq; a++) {
                    REAL diff = qi[a * q.cs] - kj[a * k.cs];
                    acc += diff * diff;
                }
                s[i * d->tk + j] = -acc * inv;
            }
        break;
    }
    }
}

/* Zero a contiguous gradient matrix of element b, if wanted. */
static void FN(zero_grad)(attnc_tensor *t, const attnc_dims *d, int64_t b) {
    if (!attnc_present(t)) return;
    attnc_mat m = attnc_batch_mat(t, &d->batch, b);
    for (int64_t i = 0; i < m.rows * m.cols; i++) ((REAL *)m.p)[i] = 0;
}

static void FN(cosine_backward)(const attnc_score_ctx *c, int64_t b, const REAL *ds, REAL *scratch, attnc_mat q,
                                attnc_mat k, attnc_tensor *dquery, attnc_tensor *dkeys, attnc_score_grads *g) {
    /* c_ij = D_ij / n_ij, n_ij = max(|q_i||k_j|, eps), S = beta_i c_ij.
     * With dc = dS beta and G = dc / n:
     *   dq_i = sum_j G_ij k_j - q_i / |q_i|^2 sum_j [n > eps] dc_ij c_ij
     *   dk_j = sum_i G_ij q_i - k_j / |k_j|^2 sum_i [n > eps] dc_ij c_ij
     *   dbeta_i = sum_j dS_ij c_ij */
    const attnc_dims *d = c->d;
    int64_t tq = d->tq, tk = d->tk;
    REAL *gm = scratch, *nq = gm + tq * tk, *nk = nq + tq, *rq = nk + tk, *rk = rq + tq;
    GEMM(false, true, 1, q, k, 0, rows_mat(gm, tq, tk));
    for (int64_t i = 0; i < tq; i++) nq[i] = FN(norm)(ROW(q, i), d->dq, q.cs), rq[i] = 0;
    for (int64_t j = 0; j < tk; j++) nk[j] = FN(norm)(ROW(k, j), d->dk, k.cs), rk[j] = 0;
    REAL *dbeta = NULL;
    if (attnc_present(&g->beta)) dbeta = (REAL *)g->beta.data + b * tq;
    for (int64_t i = 0; i < tq; i++) {
        REAL beta = FN(beta_at)(c, b, i), db = 0;
        for (int64_t j = 0; j < tk; j++) {
            REAL n = nq[i] * nk[j];
            bool clipped = !(n >= (REAL)ATTNC_COSINE_EPS);
            if (clipped) n = (REAL)ATTNC_COSINE_EPS;
            REAL cij = gm[i * tk + j] / n, dsij = ds[i * tk + j], dc = dsij * beta;
            db += dsij * cij;
            if (!clipped) {
                rq[i] += dc * cij;
                rk[j] += dc * cij;
            }
            gm[i * tk + j] = dc / n;
        }
        if (dbeta) dbeta[i] = db;
    }
    attnc_mat gmat = rows_mat(gm, tq, tk);
    if (attnc_present(dquery)) {
        attnc_mat dq = attnc_batch_mat(dquery, &d->batch, b);
        GEMM(false, false, 1, gmat, k, 0, dq);
        for (int64_t i = 0; i < tq; i++) {
            if (rq[i] == 0) continue;
            REAL f = rq[i] / (nq[i] * nq[i]);
            for (int64_t a = 0; a < d->dq; a++) ((REAL *)dq.p)[i * d->dq + a] -= f * ROW(q, i)[a * q.cs];
        }
    }
    if (attnc_present(dkeys)) {
        attnc_mat dk = attnc_batch_mat(dkeys, &d->batch, b);
        GEMM(true, false, 1, gmat, q, 0, dk);
        for (int64_t j = 0; j < tk; j++) {
            if (rk[j] == 0) continue;
            REAL f = rk[j] / (nk[j] * nk[j]);
            for (int64_t a = 0; a < d->dk; a++) ((REAL *)dk.p)[j * d->dk + a] -= f * ROW(k, j)[a * k.cs];
        }
    }
}

static void FN(gaussian_backward)(const attnc_score_ctx *c, int64_t b, const REAL *ds, attnc_mat q, attnc_mat k,
                                  REAL *stash, attnc_tensor *dquery, attnc_tensor *dkeys, attnc_score_grads *g) {
    /* S_ij = -|q_i - k_j|^2 / (2h^2): dq_i = -sum_j dS_ij (q_i - k_j) / h^2,
     * dk_j = -dq contributions, dh = sum dS_ij |q_i - k_j|^2 / h^3. */
    const attnc_dims *d = c->d;
    REAL h = (REAL)c->p->bandwidth, inv_h2 = 1 / (h * h);
    REAL *dq = attnc_present(dquery) ? attnc_batch_mat(dquery, &d->batch, b).p : NULL;
    REAL *dk = attnc_present(dkeys) ? attnc_batch_mat(dkeys, &d->batch, b).p : NULL;
    FN(zero_grad)(dquery, d, b);
    FN(zero_grad)(dkeys, d, b);
    REAL dh = 0;
    for (int64_t i = 0; i < d->tq; i++)
        for (int64_t j = 0; j < d->tk; j++) {
            REAL coef = ds[i * d->tk + j] * inv_h2, dist2 = 0;
            const REAL *qi = ROW(q, i), *kj = ROW(k, j);
            for (int64_t a = 0; a < d->dq; a++) {
                REAL diff = qi[a * q.cs] - kj[a * k.cs];
                dist2 += diff * diff;
                if (dq) dq[i * d->dq + a] -= coef * diff;
                if (dk) dk[j * d->dk + a] += coef * diff;
            }
            dh += coef * dist2 / h;
        }
    if (g && g->bandwidth) stash[b] = dh;
}

void FN(attnc_score_batch_backward)(const attnc_score_ctx *c, int64_t b, const REAL *ds, REAL *scratch, REAL *stash,
                                    attnc_tensor *dquery, attnc_tensor *dkeys, attnc_score_grads *g) {
    const attnc_dims *d = c->d;
    const attnc_score_params *p = c->p;
    attnc_mat q = attnc_batch_mat(c->query, &d->batch, b);
    attnc_mat k = attnc_batch_mat(c->keys, &d->batch, b);
    attnc_mat dsm = rows_mat((REAL *)ds, d->tq, d->tk);
    attnc_mat dq = {0}, dk = {0};
    bool want_q = attnc_present(dquery), want_k = attnc_present(dkeys);
    if (want_q) dq = attnc_batch_mat(dquery, &d->batch, b);
    if (want_k) dk = attnc_batch_mat(dkeys, &d->batch, b);
    switch (p->kind) {
    case ATTNC_SCORE_DOT:
    case ATTNC_SCORE_SCALED_DOT: {
        REAL alpha = p->kind == ATTNC_SCORE_DOT ? 1 : (REAL)p->scale;
        if (want_q) GEMM(false, false, alpha, dsm, k, 0, dq);
        if (want_k) GEMM(true, false, alpha, dsm, q, 0, dk);
        if (p->kind == ATTNC_SCORE_SCALED_DOT && g && g->scale) {
            GEMM(false, true, 1, q, k, 0, rows_mat(scratch, d->tq, d->tk));
            REAL acc = 0;
            for (int64_t i = 0; i < d->tq * d->tk; i++) acc += ds[i] * scratch[i];
            stash[b] = acc;
        }
        break;
    }
    case ATTNC_SCORE_GENERAL: {
        /* S = (Q W) K^T: dQW = dS K (stashed for dW), dQ = dQW W^T, dK = dS^T (Q W). */
        attnc_mat w = param_mat(&p->weight);
        attnc_mat qw = rows_mat(scratch, d->tq, d->dk);
        attnc_mat dqw = rows_mat(stash + b * d->tq * d->dk, d->tq, d->dk);
        GEMM(false, false, 1, dsm, k, 0, dqw);
        if (want_q) GEMM(false, true, 1, dqw, w, 0, dq);
        if (want_k) {
            GEMM(false, false, 1, q, w, 0, qw);
            GEMM(true, false, 1, dsm, qw, 0, dk);
        }
        break;
    }
    case ATTNC_SCORE_LOCATION:
        if (want_q) GEMM(false, true, 1, dsm, param_mat(&p->weight), 0, dq);
        FN(zero_grad)(dkeys, d, b);
        break;
    case ATTNC_SCORE_ADDITIVE: {
        /* dQA, dKA and dv of element b, in the stash; attnc_score_run_backward
         * turns them into dquery, dkeys and the parameters' gradients. */
        int64_t da = d->da, tq = d->tq, tk = d->tk, B = d->batch.count;
        const REAL *qa, *ka, *v;
        FN(additive_parts)(c, b, &qa, &ka, &v);
        REAL *dqa = stash + b * tq * da, *dka = stash + (B * tq + b * tk) * da, *dv = stash + (B * (tq + tk) + b) * da;
        for (int64_t x = 0; x < tq * da; x++) dqa[x] = 0;
        for (int64_t x = 0; x < tk * da; x++) dka[x] = 0;
        for (int64_t x = 0; x < da; x++) dv[x] = 0;
#if !ATTNC_F64
        if (additive_use_exp2(scratch, qa, ka, tq, tk, da)) {
#if ATTNC_ROWS_F32
            additive_rows_backward_512(dqa, dka, dv, ds, qa, ka, scratch, scratch + tq * da, v, tq, tk, da);
#else
            FN(additive_rows_backward)(dqa, dka, dv, ds, qa, ka, true, scratch, scratch + tq * da, v, tq, tk, da);
#endif
            break;
        }
#endif
        FN(additive_rows_backward)(dqa, dka, dv, ds, qa, ka, false, NULL, NULL, v, tq, tk, da);
        break;
    }
    case ATTNC_SCORE_COSINE: FN(cosine_backward)(c, b, ds, scratch, q, k, dquery, dkeys, g); break;
    case ATTNC_SCORE_GAUSSIAN: FN(gaussian_backward)(c, b, ds, q, k, stash, dquery, dkeys, g); break;
    }
}

/* dW = sum_b X_b^T Y_b over the batch, in batch order. */
static void FN(sum_xty)(attnc_tensor *dw, const attnc_score_ctx *c, const attnc_tensor *x, const void *y, int64_t rows,
                        int64_t cols) {
    if (!attnc_present(dw)) return;
    attnc_mat out = {dw->data, dw->shape[0], dw->ndim > 1 ? dw->shape[1] : 1, dw->ndim > 1 ? dw->shape[1] : 1, 1};
    if (c->d->batch.count == 0 || rows == 0) {
        for (int64_t i = 0; i < out.rows * out.cols; i++) ((REAL *)out.p)[i] = 0;
        return;
    }
    for (int64_t b = 0; b < c->d->batch.count; b++)
        GEMM(true, false, 1, attnc_batch_mat(x, &c->d->batch, b), rows_mat((REAL *)y + b * rows * cols, rows, cols),
             b ? 1 : 0, out);
}

static double FN(sum_stash)(const REAL *stash, int64_t n) {
    double acc = 0;
    for (int64_t b = 0; b < n; b++) acc += stash[b];
    return acc;
}

void FN(attnc_score_params_backward)(const attnc_score_ctx *c, const void *ds_all, const void *stash_,
                                     attnc_score_grads *g) {
    if (!g) return;
    const REAL *stash = stash_;
    const attnc_dims *d = c->d;
    const attnc_score_params *p = c->p;
    switch (p->kind) {
    case ATTNC_SCORE_SCALED_DOT:
        if (g->scale) *g->scale = FN(sum_stash)(stash, d->batch.count);
        break;
    case ATTNC_SCORE_GAUSSIAN:
        if (g->bandwidth) *g->bandwidth = FN(sum_stash)(stash, d->batch.count);
        break;
    case ATTNC_SCORE_GENERAL: FN(sum_xty)(&g->weight, c, c->query, stash, d->tq, d->dk); break;
    case ATTNC_SCORE_LOCATION: FN(sum_xty)(&g->weight, c, c->query, ds_all, d->tq, d->tk); break;
    case ATTNC_SCORE_DOT:
    case ATTNC_SCORE_COSINE:
    case ATTNC_SCORE_ADDITIVE: /* score.c's additive_finish */ break;
    }
}

#undef ROW
#include "../../core/real_end.h"
