/* decoder_impl.h: typed kernels of the recurrent attention decoder (see
 * core/real.h and decoder.h): one step forward and backward on a block of
 * rows, the attention of a row, the LSTM gates of a row. */
#include <math.h>
#include <string.h>

#include "../../ops/attention/common.h"
#include "../../core/blas.h"
#include "../../core/real.h"
#include "../../core/lanes_impl.h"
#include "../../core/lstm_cell_impl.h"
#include "../../core/matmul_impl.h"

/* Row r's array in a slot: base + r * width. */
#define ROW(base, r, width) ((REAL *)(base) + (r) * (width))

static inline int64_t FN(src)(const s2s_run *x, int64_t r) { return x->src ? x->src[r] : r; }

/* ---- attention of one row --------------------------------------------------- */

/* The allowed source positions [lo, hi) of row r with p_t = p. */
static void FN(range)(const s2s_run *x, int64_t b, REAL p, int64_t *lo, int64_t *hi) {
    *lo = 0;
    *hi = x->len[b];
    if (x->kind == ATTNC_S2S_LOCAL_M || x->kind == ATTNC_S2S_LOCAL_P) attnc_window((double)p, x->window, lo, hi);
}

/* Scores e[s], s in [lo, hi), of row i (row r of the call) for query q (H);
 * loc: the location scores of the row (Smax), qw: W_q q (A). */
static void FN(scores)(const s2s_run *x, int64_t b, const REAL *q, const REAL *qw, const REAL *loc, int64_t lo,
                       int64_t hi, REAL *e) {
    for (int64_t s = lo; s < hi; s++) {
        if (x->additive)
            e[s] = FN(additive)(qw, ROW(x->keys, b * x->S + s, x->Kw), x->v, x->A);
        else if (x->kind == ATTNC_S2S_LOCATION)
            e[s] = loc[s];
        else if (x->kind == ATTNC_S2S_DOT)
            e[s] = FN(dot)(q, ROW(x->memory, b * x->S + s, x->He), x->H);
        else
            e[s] = FN(dot)(q, ROW(x->keys, b * x->S + s, x->Kw), x->H);
    }
}

/* w (S) <- softmax of e over [lo, hi), zero elsewhere (all zero if empty). */
static void FN(softmax)(const s2s_run *x, const REAL *e, int64_t lo, int64_t hi, REAL *w) {
    REAL mx = -INFINITY, sum = 0;
    for (int64_t s = lo; s < hi; s++) mx = e[s] > mx ? e[s] : mx;
    for (int64_t s = 0; s < x->S; s++) {
        w[s] = s >= lo && s < hi ? EXP(e[s] - mx) : 0;
        sum += w[s];
    }
    for (int64_t s = lo; s < hi; s++) w[s] /= sum;
}

static inline REAL FN(gauss)(const s2s_run *x, int64_t s, REAL p) {
    REAL sigma = (REAL)(x->window / 2), d = ((REAL)s - p) / sigma;
    return EXP(-d * d / 2);
}

/* Rows [r0, r0 + n) attend with queries q (row i at q + i * qs): alpha,
 * a, pos, qw, hp of slot cur; context row i into ctx + i * cs (He). */
static void FN(attend)(const s2s_run *x, const s2s_slot *cur, int64_t t, int64_t r0, int64_t n, const REAL *q,
                       int64_t qs, REAL *ctx, int64_t cs, REAL *scratch) {
    REAL *loc = scratch, *e = scratch + S2S_ROWS * x->Smax;
    if (x->additive) FN(times_wt)(q, qs, x->wq, x->A, x->H, 0, ROW(cur->qw, r0, x->A), x->A, n);
    if (x->kind == ATTNC_S2S_LOCATION) {
        FN(times_wt)(q, qs, x->watt, x->Smax, x->H, 0, loc, x->Smax, n);
        for (int64_t i = 0; i < n; i++)
            for (int64_t s = 0; s < x->Smax; s++) loc[i * x->Smax + s] += ((const REAL *)x->batt)[s];
    }
    if (x->kind == ATTNC_S2S_LOCAL_P) {
        REAL *hp = ROW(cur->hp, r0, x->A);
        FN(times_wt)(q, qs, x->wp, x->A, x->H, 0, hp, x->A, n);
        for (int64_t i = 0; i < n; i++) {
            REAL z = 0;
            for (int64_t a = 0; a < x->A; a++) {
                hp[i * x->A + a] = FN(tanh_)(hp[i * x->A + a]);
                z += hp[i * x->A + a] * ((const REAL *)x->vp)[a];
            }
            ((REAL *)cur->pos)[r0 + i] = (REAL)x->len[FN(src)(x, r0 + i)] * FN(sigmoid)(z);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t r = r0 + i, b = FN(src)(x, r), lo, hi;
        REAL p = 0;
        if (x->kind == ATTNC_S2S_LOCAL_M) p = ((REAL *)cur->pos)[r] = (REAL)t;
        if (x->kind == ATTNC_S2S_LOCAL_P) p = ((REAL *)cur->pos)[r];
        FN(range)(x, b, p, &lo, &hi);
        REAL *w = ROW(cur->alpha, r, x->S);
        FN(scores)(x, b, q + i * qs, x->additive ? ROW(cur->qw, r, x->A) : NULL, loc + i * x->Smax, lo, hi, e);
        FN(softmax)(x, e, lo, hi, w);
        if (x->kind == ATTNC_S2S_LOCAL_P) {
            memcpy(ROW(cur->a, r, x->S), w, (size_t)x->S * sizeof(REAL));
            for (int64_t s = lo; s < hi; s++) w[s] *= FN(gauss)(x, s, p);
        }
        REAL *c = ctx + i * cs;
        for (int64_t k = 0; k < x->He; k++) c[k] = 0;
        for (int64_t s = lo; s < hi; s++) {
            const REAL *mem = ROW(x->memory, b * x->S + s, x->He);
            for (int64_t k = 0; k < x->He; k++) c[k] += w[s] * mem[k];
        }
    }
}

/* ---- forward ------------------------------------------------------------------ */

void FN(s2s_start)(const s2s_run *x, const s2s_slot *s, int64_t r0, int64_t n) {
    int64_t H = x->H;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = r0 + i;
        REAL *h = ROW(s->h, r, H);
        FN(times_wt)(ROW(x->final, FN(src)(x, r), x->He), x->He, x->bridge_w, H, x->He, 0, h, H, 1);
        for (int64_t k = 0; k < H; k++) h[k] = FN(tanh_)(h[k] + ((const REAL *)x->bridge_b)[k]);
        memset(ROW(s->c, r, H), 0, (size_t)H * sizeof(REAL));
        if (x->luong) memset(ROW(s->ht, r, H), 0, (size_t)H * sizeof(REAL));
    }
}

void FN(s2s_step_forward)(const s2s_run *x, const s2s_slot *prev, const s2s_slot *cur, int64_t t, int64_t r0, int64_t n,
                          const int64_t *tok, void *feat, int64_t fstride, void *scratch) {
    int64_t E = x->E, H = x->H, He = x->He, U = x->U;
    size_t es = sizeof(REAL);
    REAL *u = ROW(cur->u, r0, U);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = r0 + i;
        memcpy(u + i * U, ROW(x->emb, tok[i], E), (size_t)E * es);
        memcpy(u + i * U + E + x->Fin, ROW(prev->h, r, H), (size_t)H * es);
        if (x->kind == ATTNC_S2S_NONE) memcpy(u + i * U + E, ROW(x->final, FN(src)(x, r), He), (size_t)He * es);
        if (x->luong && x->Fin) memcpy(u + i * U + E, ROW(prev->ht, r, H), (size_t)H * es); /* input feeding */
    }
    if (x->kind == ATTNC_S2S_BAHDANAU) /* attend on h_{t-1}: the context is the feed */
        FN(attend)(x, cur, t, r0, n, u + E + x->Fin, U, u + E, U, scratch);
    REAL *gates = ROW(cur->gates, r0, 4 * H);
    FN(times_wt)(u, U, x->wcat, 4 * H, U, 0, gates, 4 * H, n);
    for (int64_t i = 0; i < n; i++)
        FN(lstm_cell_forward)(gates + i * 4 * H, x->bsum, ROW(prev->c, r0 + i, H), ROW(cur->c, r0 + i, H),
                              ROW(cur->h, r0 + i, H), H);
    REAL *h = ROW(cur->h, r0, H);
    if (x->luong) {
        REAL *cat = ROW(cur->cat, r0, He + H), *ht = ROW(cur->ht, r0, H);
        FN(attend)(x, cur, t, r0, n, h, H, cat, He + H, scratch);
        for (int64_t i = 0; i < n; i++) memcpy(cat + i * (He + H) + He, h + i * H, (size_t)H * es);
        FN(times_wt)(cat, He + H, x->comb, H, He + H, 0, ht, H, n);
        for (int64_t i = 0; i < n * H; i++) ht[i] = FN(tanh_)(ht[i]);
    }
    for (int64_t i = 0; i < n; i++) {
        REAL *f = (REAL *)feat + (r0 + i) * fstride;
        if (x->luong) {
            memcpy(f, ROW(cur->ht, r0 + i, H), (size_t)H * es);
        } else {
            memcpy(f, h + i * H, (size_t)H * es);
            if (x->kind == ATTNC_S2S_BAHDANAU) memcpy(f + H, u + i * U + E, (size_t)He * es);
        }
    }
}

/* ---- backward ----------------------------------------------------------------- */

/* Per-step cotangent rows the weight gradients are formed from after the
 * loop, each (R, width) per step (NULL: unused by the kind). */
typedef struct {
    REAL *dg;  /* (4H) gates, before their nonlinearities */
    REAL *dx;  /* (E) the embedded input                  */
    REAL *dpc; /* (H) Luong: before the combine's tanh    */
    REAL *dqw; /* (A) additive: of W_q q                  */
    REAL *de;  /* (Smax) location: of the scores          */
    REAL *dhp; /* (A) local-p: of W_p h, before the tanh  */
} FN(s2s_cot);

/* Running gradients of a block (n rows each) and per-row parameter sums. */
typedef struct {
    REAL *dh, *dc, *dht; /* (n, H)                     */
    REAL *dctx;          /* (n, He)                    */
    REAL *dcat;          /* (n, He + H)                */
    REAL *du;            /* (n, U)                     */
    REAL *dq;            /* (n, H)                     */
    REAL *dw;            /* (S) one row's weight cotangent */
} FN(s2s_carry);

/* dw_s = dctx . mem_s and dmem_s += w_s dctx over s in [lo, hi); mem and
 * dmem (S, He) of one source row. */
static void FN(context_backward)(const REAL *restrict mem, const REAL *restrict w, const REAL *restrict dctx,
                                 int64_t lo, int64_t hi, int64_t He, REAL *restrict dw, REAL *restrict dmem) {
    for (int64_t s = lo; s < hi; s++) {
        dw[s] = FN(dot)(dctx, mem + s * He, He);
        for (int64_t k = 0; k < He; k++) dmem[s * He + k] += w[s] * dctx[k];
    }
}

/* e_s = v . tanh(qw + k_s): dqw, dk_s (keys (S, A) of one source row) and dv
 * from de_s (in dw) over s in [lo, hi); dqw is overwritten. */
static void FN(additive_rows_backward)(const REAL *restrict keys, const REAL *restrict qw, const REAL *restrict v,
                                       const REAL *restrict de, int64_t lo, int64_t hi, int64_t A, REAL *restrict dqw,
                                       REAL *restrict dkeys, REAL *restrict dv) {
    for (int64_t k = 0; k < A; k++) dqw[k] = 0;
    for (int64_t s = lo; s < hi; s++) FN(additive_backward)(keys + s * A, qw, v, de[s], dkeys + s * A, dqw, dv, A);
}

/* e_s = q . k_s: dq += sum de_s k_s, dk_s += de_s q over s in [lo, hi);
 * keys, dkeys (S, W) of one source row. */
static void FN(dot_backward)(const REAL *restrict keys, const REAL *restrict q, const REAL *restrict de, int64_t lo,
                             int64_t hi, int64_t W, REAL *restrict dq, REAL *restrict dkeys) {
    for (int64_t s = lo; s < hi; s++)
        for (int64_t k = 0; k < W; k++) {
            dq[k] += de[s] * keys[s * W + k];
            dkeys[s * W + k] += de[s] * q[k];
        }
}

/* Attention backward of rows [r0, r0 + n) of a step (slot cur): dctx (row i
 * at dctx + i * cs) -> dq (n, H) += ..., dmemory and dkeys of each row's
 * source (row-local: training rows are their own source), per-row sums dv
 * and dvp (R, A), cotangent rows dqw, de, dhp. */
static void FN(attend_backward)(const s2s_run *x, const s2s_slot *cur, int64_t r0, int64_t n, const REAL *q, int64_t qs,
                                const REAL *dctx, int64_t cs, REAL *dq, const FN(s2s_cot) * cot, REAL *dmem,
                                REAL *dkeys, REAL *dv, REAL *dvp, REAL *dw) {
    int64_t S = x->S, He = x->He, A = x->A, H = x->H, Kw = x->Kw;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = r0 + i, b = FN(src)(x, r), lo, hi;
        REAL p = x->kind == ATTNC_S2S_LOCAL_M || x->kind == ATTNC_S2S_LOCAL_P ? ((REAL *)cur->pos)[r] : 0;
        FN(range)(x, b, p, &lo, &hi);
        const REAL *w = ROW(cur->alpha, r, S);
        FN(context_backward)(ROW(x->memory, b * S, He), w, dctx + i * cs, lo, hi, He, dw, dmem + b * S * He);
        const REAL *a = w;
        if (x->kind == ATTNC_S2S_LOCAL_P) { /* w = a gauss: da = dw gauss; dp = sum dw a gauss (s - p) / sigma^2 */
            a = ROW(cur->a, r, S);
            REAL sigma = (REAL)(x->window / 2), dp = 0;
            for (int64_t s = lo; s < hi; s++) {
                REAL gs = FN(gauss)(x, s, p);
                dp += dw[s] * a[s] * gs * ((REAL)s - p) / (sigma * sigma);
                dw[s] *= gs;
            }
            REAL L = (REAL)x->len[b], dz = dp * p * (1 - p / L); /* p = L sigmoid(z) */
            const REAL *hp = ROW(cur->hp, r, A);
            REAL *dh_p = cot->dhp + r * A, *dvpr = dvp + r * A;
            for (int64_t k = 0; k < A; k++) {
                dvpr[k] += dz * hp[k];
                dh_p[k] = dz * ((const REAL *)x->vp)[k] * (1 - hp[k] * hp[k]);
            }
        }
        /* softmax backward: de_s = a_s (dw_s - sum a dw) */
        REAL dot = 0;
        for (int64_t s = lo; s < hi; s++) dot += a[s] * dw[s];
        for (int64_t s = lo; s < hi; s++) dw[s] = a[s] * (dw[s] - dot);
        if (x->additive) {
            FN(additive_rows_backward)(ROW(x->keys, b * S, Kw), ROW(cur->qw, r, A), x->v, dw, lo, hi, A,
                                       cot->dqw + r * A, dkeys + b * S * Kw, dv + r * A);
        } else if (x->kind == ATTNC_S2S_LOCATION) {
            REAL *de = cot->de + r * x->Smax;
            for (int64_t s = 0; s < x->Smax; s++) de[s] = s >= lo && s < hi ? dw[s] : 0;
        } else if (x->kind == ATTNC_S2S_DOT) { /* the keys are the memory */
            FN(dot_backward)(ROW(x->memory, b * S, He), q + i * qs, dw, lo, hi, H, dq + i * H, dmem + b * S * He);
        } else {
            FN(dot_backward)(ROW(x->keys, b * S, Kw), q + i * qs, dw, lo, hi, H, dq + i * H, dkeys + b * S * Kw);
        }
    }
    /* the query's gradient through the parameterised parts */
    if (x->additive) FN(times_w)(cot->dqw + r0 * A, A, x->wq, A, H, 1, dq, H, n);
    if (x->kind == ATTNC_S2S_LOCATION) FN(times_w)(cot->de + r0 * x->Smax, x->Smax, x->watt, x->Smax, H, 1, dq, H, n);
    if (x->kind == ATTNC_S2S_LOCAL_P) FN(times_w)(cot->dhp + r0 * A, A, x->wp, A, H, 1, dq, H, n);
}

/* One step backward on rows [r0, r0 + n), from slot prev to slot cur:
 * carry (dh, dc, dht from the next step) updated to the previous step's; cot
 * (this step's cotangent rows) written; dfeat row r at dfeat + r * fstride. */
static void FN(step_backward)(const s2s_run *x, const s2s_slot *prev, const s2s_slot *cur, int64_t r0, int64_t n,
                              const REAL *dfeat, int64_t fstride, const FN(s2s_cot) * cot, FN(s2s_carry) * k,
                              REAL *dmem, REAL *dkeys, REAL *dv, REAL *dvp, REAL *dfinal) {
    int64_t E = x->E, H = x->H, He = x->He, U = x->U, C = He + H;
    for (int64_t i = 0; i < n; i++) {
        const REAL *df = dfeat + (r0 + i) * fstride;
        REAL *target = x->luong ? k->dht : k->dh;
        for (int64_t j = 0; j < H; j++) target[i * H + j] += df[j];
        if (x->kind == ATTNC_S2S_BAHDANAU)
            for (int64_t j = 0; j < He; j++) k->dctx[i * He + j] = df[H + j];
    }
    if (x->luong) {
        REAL *dpc = cot->dpc + r0 * H;
        const REAL *ht = ROW(cur->ht, r0, H);
        for (int64_t j = 0; j < n * H; j++) dpc[j] = k->dht[j] * (1 - ht[j] * ht[j]);
        FN(times_w)(dpc, H, x->comb, H, C, 0, k->dcat, C, n);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < H; j++) k->dh[i * H + j] += k->dcat[i * C + He + j];
        memset(k->dq, 0, (size_t)(n * H) * sizeof(REAL));
        FN(attend_backward)(x, cur, r0, n, ROW(cur->h, r0, H), H, k->dcat, C, k->dq, cot, dmem, dkeys, dv, dvp, k->dw);
        for (int64_t j = 0; j < n * H; j++) k->dh[j] += k->dq[j];
    }
    REAL *dg = cot->dg + r0 * 4 * H;
    for (int64_t i = 0; i < n; i++)
        FN(lstm_cell_backward)(ROW(cur->gates, r0 + i, 4 * H), ROW(cur->c, r0 + i, H), ROW(prev->c, r0 + i, H),
                               k->dh + i * H, NULL, k->dc + i * H, dg + i * 4 * H, H);
    FN(times_w)(dg, 4 * H, x->wcat, 4 * H, U, 0, k->du, U, n);
    for (int64_t i = 0; i < n; i++) {
        const REAL *du = k->du + i * U;
        memcpy(cot->dx + (r0 + i) * E, du, (size_t)E * sizeof(REAL));
        memcpy(k->dh + i * H, du + E + x->Fin, (size_t)H * sizeof(REAL));
        if (x->kind == ATTNC_S2S_NONE) {
            REAL *dfi = dfinal + FN(src)(x, r0 + i) * He;
            for (int64_t j = 0; j < He; j++) dfi[j] += du[E + j];
        } else if (x->luong) { /* h~_{t-1}'s gradient: through the input feeding, or none */
            if (x->Fin)
                memcpy(k->dht + i * H, du + E, (size_t)H * sizeof(REAL));
            else
                memset(k->dht + i * H, 0, (size_t)H * sizeof(REAL));
        } else {
            for (int64_t j = 0; j < He; j++) k->dctx[i * He + j] += du[E + j];
        }
    }
    if (x->kind == ATTNC_S2S_BAHDANAU) /* the context came from h_{t-1} */
        FN(attend_backward)(x, cur, r0, n, ROW(prev->h, r0, H), H, k->dctx, He, k->dh, cot, dmem, dkeys, dv, dvp,
                            k->dw);
}

/* ---- whole sequences: block tasks ------------------------------------------------ */

static s2s_slot FN(slot)(const s2s_job *j, int64_t t) {
    return s2s_slot_at(j->x, j->slots + (t + 1) * j->slot_size * (int64_t)sizeof(REAL));
}

/* Tokens of step t for rows [r0, r0 + n): tgt_in, or under scheduled
 * sampling the argmax of the previous step's logits. */
static void FN(choose_tokens)(const s2s_job *j, int64_t t, int64_t r0, int64_t n, int64_t *tok, REAL *logits) {
    const s2s_run *x = j->x;
    for (int64_t i = 0; i < n; i++) tok[i] = j->tgt_in[(r0 + i) * x->T + t];
    if (t == 0 || !(j->sampling > 0)) return;
    FN(times_wt)((const REAL *)j->feat + (r0 * x->T + t - 1) * x->F, x->T * x->F, x->out_w, x->Vt, x->F, 0, logits,
                 x->Vt, n);
    for (int64_t i = 0; i < n; i++) {
        if (!(attnc_uniform(j->seed, 0x5eed, (uint64_t)((r0 + i) * x->T + t)) < j->sampling)) continue;
        const REAL *l = logits + i * x->Vt, *bias = x->out_b;
        int64_t best = 0;
        for (int64_t v = 1; v < x->Vt; v++)
            if (l[v] + (bias ? bias[v] : 0) > l[best] + (bias ? bias[best] : 0)) best = v;
        tok[i] = best;
    }
}

static void FN(s2s_forward_task)(void *arg, int64_t block, int worker) {
    const s2s_job *j = arg;
    const s2s_run *x = j->x;
    int64_t r0 = block * S2S_ROWS, n = x->B - r0 < S2S_ROWS ? x->B - r0 : S2S_ROWS;
    REAL *scratch = (REAL *)j->scratch + worker * j->scratch_size;
    int64_t *tok = (int64_t *)scratch; /* S2S_ROWS int64, then the step's scratch */
    REAL *logits = scratch + 2 * S2S_ROWS, *step_scratch = logits + S2S_ROWS * x->Vt;
    s2s_slot start = FN(slot)(j, -1);
    FN(s2s_start)(x, &start, r0, n);
    for (int64_t t = 0; t < x->T; t++) {
        s2s_slot prev = FN(slot)(j, t - 1), cur = FN(slot)(j, t);
        FN(choose_tokens)(j, t, r0, n, tok, logits);
        for (int64_t i = 0; i < n; i++) j->fed[(r0 + i) * x->T + t] = tok[i];
        FN(s2s_step_forward)(x, &prev, &cur, t, r0, n, tok, (REAL *)j->feat + t * x->F, x->T * x->F, step_scratch);
        for (int64_t i = 0; i < n && j->align; i++) {
            REAL *a = (REAL *)j->align + ((r0 + i) * x->T + t) * x->S;
            if (cur.alpha)
                memcpy(a, ROW(cur.alpha, r0 + i, x->S), (size_t)x->S * sizeof(REAL));
            else
                memset(a, 0, (size_t)x->S * sizeof(REAL));
        }
    }
}

/* Step t's cotangent rows. */
static FN(s2s_cot) FN(cot_at)(const s2s_job *j, int64_t t) {
    const s2s_run *x = j->x;
    int64_t R = x->R;
    FN(s2s_cot) c = {j->cot.dg, j->cot.dx, j->cot.dpc, j->cot.dqw, j->cot.de, j->cot.dhp};
#define STEP(field, width) c.field = c.field ? c.field + t * R * (width) : NULL
    STEP(dg, 4 * x->H);
    STEP(dx, x->E);
    STEP(dpc, x->H);
    STEP(dqw, x->A);
    STEP(de, x->Smax);
    STEP(dhp, x->A);
#undef STEP
    return c;
}

static void FN(s2s_backward_task)(void *arg, int64_t block, int worker) {
    const s2s_job *j = arg;
    const s2s_run *x = j->x;
    int64_t r0 = block * S2S_ROWS, n = x->B - r0 < S2S_ROWS ? x->B - r0 : S2S_ROWS, H = x->H;
    REAL *s = (REAL *)j->scratch + worker * j->scratch_size;
    memset(s, 0, (size_t)j->scratch_size * sizeof(REAL));
    FN(s2s_carry) k;
    k.dh = s;
    k.dc = k.dh + S2S_ROWS * H;
    k.dht = k.dc + S2S_ROWS * H;
    k.dctx = k.dht + S2S_ROWS * H;
    k.dcat = k.dctx + S2S_ROWS * x->He;
    k.du = k.dcat + S2S_ROWS * (x->He + H);
    k.dq = k.du + S2S_ROWS * x->U;
    k.dw = k.dq + S2S_ROWS * H;
    for (int64_t t = x->T - 1; t >= 0; t--) {
        s2s_slot prev = FN(slot)(j, t - 1), cur = FN(slot)(j, t);
        FN(s2s_cot) cot = FN(cot_at)(j, t);
        FN(step_backward)(x, &prev, &cur, r0, n, (const REAL *)j->dfeat + t * x->F, x->T * x->F, &cot, &k, j->dmem,
                          j->dkeys, j->dv, j->dvp, j->dfinal);
    }
    /* h_{-1} = tanh(bridge(final)) */
    s2s_slot start = FN(slot)(j, -1);
    const REAL *h = ROW(start.h, r0, H);
    REAL *dst = (REAL *)j->dstart + r0 * H;
    for (int64_t i = 0; i < n * H; i++) dst[i] = k.dh[i] * (1 - h[i] * h[i]);
    FN(times_w)(dst, H, x->bridge_w, H, x->He, 1, (REAL *)j->dfinal + r0 * x->He, x->He, n);
}

/* dW (out, in) += sum over steps t of dY_t^T X_t for output rows [o0, o0 +
 * m): dY_t (R, out) at dy + t * dy_step (row stride out), X_t (R, in) at x_
 * + t * x_step (row stride x_rs). */
static void FN(s2s_wgrad_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const s2s_wgrad *g = arg;
    int64_t o0 = block * g->rows, m = g->out - o0 < g->rows ? g->out - o0 : g->rows;
    for (int64_t t = 0; t < g->steps; t++)
        GEMM(true, false, 1, FN(m)((const REAL *)g->dy + t * g->dy_step + o0, g->R, m, g->out),
             FN(m)((const REAL *)g->x + t * g->x_step, g->R, g->in, g->x_rs), 1,
             FN(m)((REAL *)g->dw + o0 * g->in, m, g->in, g->in));
}

/* demb (Vt, E) <- the sum of the input cotangents dx (T, B, E) of every fed
 * token (fed (B, T)), in (step, row) order. */
static void FN(s2s_embedding_grad)(const s2s_run *x, void *demb_, const void *dx_, const int64_t *fed) {
    REAL *demb = demb_;
    const REAL *dx = dx_;
    int64_t E = x->E;
    memset(demb, 0, (size_t)(x->Vt * E) * sizeof(REAL));
    for (int64_t t = 0; t < x->T; t++)
        for (int64_t r = 0; r < x->B; r++) {
            REAL *d = demb + fed[r * x->T + t] * E;
            const REAL *g = dx + (t * x->B + r) * E;
            for (int64_t k = 0; k < E; k++) d[k] += g[k];
        }
}

/* out = a + b, n elements: the LSTM's two biases summed once. */
static void FN(s2s_add)(void *out_, const void *a_, const void *b_, int64_t n) {
    REAL *out = out_;
    const REAL *a = a_, *b = b_;
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

#undef ROW
#include "../../core/real_end.h"
