/* test_core.c: unit tests of the C core, without Python. Built and run under
 * AddressSanitizer and UndefinedBehaviorSanitizer by tests/test_c_core.py.
 * Each test compares with a plain loop written here, or with central finite
 * differences for gradients. Prints "N passed, M failed" and exits non-zero
 * on any failure. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS and MAP_NORESERVE (test_blas.h) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/ops/attention/common.h"
#include "../../csrc/core/rng.h"
#include "../../csrc/core/threads.h"
#include "../../csrc/ops/nn/rotary.h"
#include "attnc.h"

static int passed, failed;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (cond) {                                     \
            passed++;                                   \
        } else {                                        \
            failed++;                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

/* A contiguous tensor view over data. */
static attnc_tensor view(void *data, attnc_dtype dtype, int ndim, const int64_t *shape) {
    attnc_tensor t = {.data = data, .dtype = dtype, .ndim = ndim};
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.strides[d] = stride;
        stride *= shape[d];
    }
    return t;
}

static double *randn(size_t n, uint64_t seed) {
    double *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = 2 * attnc_uniform(seed, 7, i) - 1;
    return x;
}

static double max_abs_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* ---- core ------------------------------------------------------------- */

static void test_rng(void) {
    double sum = 0;
    int in_range = 1;
    for (uint64_t i = 0; i < 100000; i++) {
        double u = attnc_uniform(42, 0, i);
        in_range &= u > 0 && u < 1;
        sum += u;
    }
    CHECK(in_range, "uniform outside (0, 1)");
    CHECK(fabs(sum / 100000 - 0.5) < 0.005, "uniform mean %g", sum / 100000);
    CHECK(attnc_uniform(1, 2, 3) == attnc_uniform(1, 2, 3), "not a pure function");
    CHECK(attnc_uniform(1, 2, 3) != attnc_uniform(2, 2, 3), "seed ignored");
    CHECK(attnc_uniform(1, 2, 3) != attnc_uniform(1, 3, 3), "stream ignored");
    /* The vectorised generator gives the scalar one's bits, at any offset and count. */
    uint32_t many[4 * 37], one[4];
    int same = 1;
    for (int64_t count = 1; count <= 37; count += 9) {
        attnc_random_bits(0x123456789ABCDEFu, 77, (UINT64_C(1) << 32) - 5, count, many);
        for (int64_t k = 0; k < count; k++) {
            attnc_random_bits4(0x123456789ABCDEFu, 77, (UINT64_C(1) << 32) - 5 + (uint64_t)k, one);
            same = same && memcmp(one, many + 4 * k, sizeof one) == 0;
        }
    }
    CHECK(same, "attnc_random_bits differs from attnc_random_bits4");
}

static void count_task(void *ctx, int64_t block, int worker) {
    int *hits = ctx;
    (void)worker;
    __atomic_fetch_add(&hits[block], 1, __ATOMIC_RELAXED);
}

static void test_threads(void) {
    for (int n = 1; n <= 4; n++) {
        CHECK(attnc_set_num_threads(n) == ATTNC_OK, "set_num_threads(%d)", n);
        CHECK(attnc_get_num_threads() == n, "get_num_threads != %d", n);
        for (int rep = 0; rep < 50; rep++) {
            int hits[37] = {0};
            attnc_parallel_for(37, n, count_task, hits);
            int ok = 1;
            for (int b = 0; b < 37; b++) ok &= hits[b] == 1;
            CHECK(ok, "a block did not run exactly once with %d threads", n);
        }
    }
    CHECK(attnc_set_num_threads(0) == ATTNC_ERR_VALUE, "0 threads accepted");
    CHECK(strstr(attnc_last_error(), "num_threads") != NULL, "message: %s", attnc_last_error());
    attnc_set_num_threads(2);
}

/* ---- softmax ---------------------------------------------------------- */

static void test_softmax(void) {
    /* 2 rows x 4 keys: row 0 fully masked, row 1 with huge scores. */
    double s[8] = {1, 2, 3, 4, 1e4, -1e4, 1e4 - 1, 0};
    uint8_t m[8] = {0, 0, 0, 0, 1, 1, 1, 0};
    double w[8];
    int64_t shape[2] = {2, 4};
    attnc_tensor ts = view(s, ATTNC_FLOAT64, 2, shape), tw = view(w, ATTNC_FLOAT64, 2, shape);
    attnc_mask mask = {.mask = view(m, ATTNC_BOOL, 2, shape)};
    CHECK(attnc_softmax_forward(&tw, &ts, &mask) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == 0, "masked row not zero");
    double e = exp(-1.0);
    CHECK(fabs(w[4] - 1 / (1 + e)) < 1e-15 && fabs(w[6] - e / (1 + e)) < 1e-15 && w[5] == 0 && w[7] == 0,
          "stable softmax wrong: %g %g %g %g", w[4], w[5], w[6], w[7]);
    /* backward: masked entries and rows get zero gradient, even a NaN one. */
    double dw[8] = {NAN, 1, 1, 1, 1, 2, 3, NAN}, ds[8];
    attnc_tensor tdw = view(dw, ATTNC_FLOAT64, 2, shape), tds = view(ds, ATTNC_FLOAT64, 2, shape);
    CHECK(attnc_softmax_backward(&tds, &tdw, &tw) == ATTNC_OK, "%s", attnc_last_error());
    double dot = w[4] * 1 + w[6] * 3;
    CHECK(ds[0] == 0 && ds[7] == 0 && ds[5] == 0, "masked gradient not zero");
    CHECK(fabs(ds[4] - w[4] * (1 - dot)) < 1e-15, "softmax backward wrong");
    /* causal with key_lengths. */
    int64_t len = 2;
    mask = (attnc_mask){.key_lengths = view(&len, ATTNC_INT64, 0, NULL), .causal = 1};
    double s2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ts = view(s2, ATTNC_FLOAT64, 2, shape);
    CHECK(attnc_softmax_forward(&tw, &ts, &mask) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(w[0] == 1 && w[1] == 0 && w[4] == 0.5 && w[5] == 0.5 && w[6] == 0, "causal+lengths");
    len = -1;
    CHECK(attnc_softmax_forward(&tw, &ts, &mask) == ATTNC_ERR_VALUE, "negative length accepted");
}

/* ---- attention: value and finite-difference gradient -------------------- */

/* Attention with the additive score (the most involved), float64, batch 2,
 * Tq 3, Tk 4, dq 5, dk 3, dv 2, da 4, a mask with a fully masked row. */
enum { B = 2, TQ = 3, TK = 4, DQ = 5, DK = 3, DV = 2, DA = 4 };

typedef struct {
    double *q, *k, *v, *wq, *wk, *va;
    uint8_t mask[B * TQ * TK];
} problem;

static void setup(problem *p) {
    p->q = randn(B * TQ * DQ, 1);
    p->k = randn(B * TK * DK, 2);
    p->v = randn(B * TK * DV, 3);
    p->wq = randn(DQ * DA, 4);
    p->wk = randn(DK * DA, 5);
    p->va = randn(DA, 6);
    for (int i = 0; i < B * TQ * TK; i++) p->mask[i] = attnc_uniform(9, 0, i) > 0.3;
    for (int j = 0; j < TK; j++) p->mask[TQ * TK + j] = 0; /* batch 1, row 0 */
}

static attnc_status run(problem *p, double *ctx, double *w) {
    int64_t qs[3] = {B, TQ, DQ}, ks[3] = {B, TK, DK}, vs[3] = {B, TK, DV};
    int64_t cs[3] = {B, TQ, DV}, wsh[3] = {B, TQ, TK}, wqs[2] = {DQ, DA}, wks[2] = {DK, DA};
    int64_t vas[1] = {DA};
    attnc_tensor tq = view(p->q, ATTNC_FLOAT64, 3, qs), tk = view(p->k, ATTNC_FLOAT64, 3, ks);
    attnc_tensor tv = view(p->v, ATTNC_FLOAT64, 3, vs), tc = view(ctx, ATTNC_FLOAT64, 3, cs);
    attnc_tensor tw = view(w, ATTNC_FLOAT64, 3, wsh);
    attnc_score_params sp = {.kind = ATTNC_SCORE_ADDITIVE,
                             .w_query = view(p->wq, ATTNC_FLOAT64, 2, wqs),
                             .w_key = view(p->wk, ATTNC_FLOAT64, 2, wks),
                             .v = view(p->va, ATTNC_FLOAT64, 1, vas)};
    attnc_mask m = {.mask = view(p->mask, ATTNC_BOOL, 3, wsh)};
    return attnc_attention_forward(&tc, &tw, &tq, &tk, &tv, &sp, &m);
}

/* loss = sum(ctx * cot) */
static double loss(problem *p, const double *cot) {
    double ctx[B * TQ * DV], w[B * TQ * TK], l = 0;
    run(p, ctx, w);
    for (int i = 0; i < B * TQ * DV; i++) l += ctx[i] * cot[i];
    return l;
}

static double fd_error(problem *p, double *x, size_t n, const double *grad, const double *cot) {
    double worst = 0, scale = 1e-12;
    for (size_t i = 0; i < n; i++) {
        double old = x[i], h = 1e-6;
        x[i] = old + h;
        double lp = loss(p, cot);
        x[i] = old - h;
        double lm = loss(p, cot);
        x[i] = old;
        double num = (lp - lm) / (2 * h);
        worst = fmax(worst, fabs(num - grad[i]));
        scale = fmax(scale, fabs(num));
    }
    return worst / scale;
}

static void test_attention(void) {
    problem p;
    setup(&p);
    double ctx[B * TQ * DV], w[B * TQ * TK];
    CHECK(run(&p, ctx, w) == ATTNC_OK, "%s", attnc_last_error());
    /* The reference: plain loops. */
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < TQ; i++) {
            double s[TK], mx = -INFINITY, sum = 0;
            for (int j = 0; j < TK; j++) {
                s[j] = 0;
                for (int a = 0; a < DA; a++) {
                    double qa = 0, ka = 0;
                    for (int x = 0; x < DQ; x++) qa += p.q[(b * TQ + i) * DQ + x] * p.wq[x * DA + a];
                    for (int x = 0; x < DK; x++) ka += p.k[(b * TK + j) * DK + x] * p.wk[x * DA + a];
                    s[j] += p.va[a] * tanh(qa + ka);
                }
                if (p.mask[(b * TQ + i) * TK + j]) mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < TK; j++) sum += s[j] = p.mask[(b * TQ + i) * TK + j] ? exp(s[j] - mx) : 0;
            for (int j = 0; j < TK; j++) {
                double ref = sum > 0 ? s[j] / sum : 0;
                worst = fmax(worst, fabs(ref - w[(b * TQ + i) * TK + j]));
            }
        }
    CHECK(worst < 1e-13, "additive attention weights differ by %g", worst);
    for (int x = 0; x < DV; x++) CHECK(ctx[(1 * TQ + 0) * DV + x] == 0, "masked row context");

    /* Gradients against central differences. */
    double *cot = randn(B * TQ * DV, 11);
    double dq[B * TQ * DQ], dk[B * TK * DK], dv[B * TK * DV], dwq[DQ * DA], dwk[DK * DA], dva[DA];
    int64_t qs[3] = {B, TQ, DQ}, ks[3] = {B, TK, DK}, vs[3] = {B, TK, DV};
    int64_t cs[3] = {B, TQ, DV}, wsh[3] = {B, TQ, TK}, wqs[2] = {DQ, DA}, wks[2] = {DK, DA};
    int64_t vas[1] = {DA};
    attnc_tensor tq = view(p.q, ATTNC_FLOAT64, 3, qs), tk = view(p.k, ATTNC_FLOAT64, 3, ks);
    attnc_tensor tv = view(p.v, ATTNC_FLOAT64, 3, vs), tw = view(w, ATTNC_FLOAT64, 3, wsh);
    attnc_tensor tcot = view(cot, ATTNC_FLOAT64, 3, cs);
    attnc_tensor tdq = view(dq, ATTNC_FLOAT64, 3, qs), tdk = view(dk, ATTNC_FLOAT64, 3, ks);
    attnc_tensor tdv = view(dv, ATTNC_FLOAT64, 3, vs);
    attnc_score_params sp = {.kind = ATTNC_SCORE_ADDITIVE,
                             .w_query = view(p.wq, ATTNC_FLOAT64, 2, wqs),
                             .w_key = view(p.wk, ATTNC_FLOAT64, 2, wks),
                             .v = view(p.va, ATTNC_FLOAT64, 1, vas)};
    attnc_score_grads g = {.w_query = view(dwq, ATTNC_FLOAT64, 2, wqs),
                           .w_key = view(dwk, ATTNC_FLOAT64, 2, wks),
                           .v = view(dva, ATTNC_FLOAT64, 1, vas)};
    CHECK(attnc_attention_backward(&tdq, &tdk, &tdv, &g, &tcot, NULL, &tq, &tk, &tv, &tw, &sp) == ATTNC_OK, "%s",
          attnc_last_error());
    CHECK(fd_error(&p, p.q, B * TQ * DQ, dq, cot) < 1e-7, "dquery");
    CHECK(fd_error(&p, p.k, B * TK * DK, dk, cot) < 1e-7, "dkeys");
    CHECK(fd_error(&p, p.v, B * TK * DV, dv, cot) < 1e-7, "dvalues");
    CHECK(fd_error(&p, p.wq, DQ * DA, dwq, cot) < 1e-7, "dw_query");
    CHECK(fd_error(&p, p.wk, DK * DA, dwk, cot) < 1e-7, "dw_key");
    CHECK(fd_error(&p, p.va, DA, dva, cot) < 1e-7, "dv");
    for (int x = 0; x < DQ; x++) CHECK(dq[(1 * TQ + 0) * DQ + x] == 0, "masked row gradient");

    /* Thread count never changes a bit. */
    double ctx1[B * TQ * DV], w1[B * TQ * TK];
    attnc_set_num_threads(1);
    run(&p, ctx1, w1);
    attnc_set_num_threads(3);
    run(&p, ctx, w);
    CHECK(memcmp(ctx, ctx1, sizeof ctx) == 0 && memcmp(w, w1, sizeof w) == 0, "results depend on the thread count");
    attnc_set_num_threads(2);

    /* Errors: a bad shape, a dtype mismatch, a missing parameter. */
    double ctx2[B * TQ * DV];
    int64_t bad[3] = {B, TK + 1, DV};
    attnc_tensor tbad = view(p.v, ATTNC_FLOAT64, 3, bad), tc = view(ctx2, ATTNC_FLOAT64, 3, cs);
    CHECK(attnc_attention_forward(&tc, &tw, &tq, &tk, &tbad, &sp, NULL) == ATTNC_ERR_VALUE,
          "bad values shape accepted");
    CHECK(strstr(attnc_last_error(), "values") != NULL, "message: %s", attnc_last_error());
    attnc_tensor tf32 = tk;
    tf32.dtype = ATTNC_FLOAT32;
    CHECK(attnc_attention_forward(&tc, &tw, &tq, &tf32, &tv, &sp, NULL) == ATTNC_ERR_TYPE, "dtype mismatch accepted");
    attnc_score_params general = {.kind = ATTNC_SCORE_GENERAL};
    CHECK(attnc_attention_forward(&tc, &tw, &tq, &tk, &tv, &general, NULL) == ATTNC_ERR_TYPE,
          "missing weight accepted");
    CHECK(strstr(attnc_last_error(), "weight") != NULL, "message: %s", attnc_last_error());
    free(cot);
    free(p.q), free(p.k), free(p.v), free(p.wq), free(p.wk), free(p.va);
}

/* The additive score projects a batch that stacks into one matrix with one
 * GEMM and any other batch element by element: keys transposed per element
 * (the second path) give the scores and gradients of contiguous keys (the
 * first). */
static void test_additive_layouts(void) {
    enum { AB = 2, AQ = 3, AK = 5, AD = 4, AA = 3 };
    double *q = randn(AB * AQ * AD, 41), *k = randn(AB * AK * AD, 42), *wq = randn(AD * AA, 43);
    double *wk = randn(AD * AA, 44), *va = randn(AA, 45), *ds = randn(AB * AQ * AK, 46);
    double kt[AB * AD * AK], s[2][AB * AQ * AK], dq[2][AB * AQ * AD], dk[2][AB * AK * AD];
    double dwq[2][AD * AA], dwk[2][AD * AA], dva[2][AA];
    for (int b = 0; b < AB; b++)
        for (int j = 0; j < AK; j++)
            for (int a = 0; a < AD; a++) kt[(b * AD + a) * AK + j] = k[(b * AK + j) * AD + a];
    int64_t qs[3] = {AB, AQ, AD}, ks[3] = {AB, AK, AD}, ss[3] = {AB, AQ, AK}, ws[2] = {AD, AA}, vs[1] = {AA};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 3, qs), tds = view(ds, ATTNC_FLOAT64, 3, ss);
    attnc_tensor keys[2] = {view(k, ATTNC_FLOAT64, 3, ks), view(kt, ATTNC_FLOAT64, 3, ks)};
    keys[1].strides[1] = 1;
    keys[1].strides[2] = AK;
    attnc_score_params sp = {.kind = ATTNC_SCORE_ADDITIVE,
                             .w_query = view(wq, ATTNC_FLOAT64, 2, ws),
                             .w_key = view(wk, ATTNC_FLOAT64, 2, ws),
                             .v = view(va, ATTNC_FLOAT64, 1, vs)};
    for (int l = 0; l < 2; l++) {
        attnc_tensor ts = view(s[l], ATTNC_FLOAT64, 3, ss), tdq = view(dq[l], ATTNC_FLOAT64, 3, qs),
                     tdk = view(dk[l], ATTNC_FLOAT64, 3, ks);
        attnc_score_grads g = {.w_query = view(dwq[l], ATTNC_FLOAT64, 2, ws),
                               .w_key = view(dwk[l], ATTNC_FLOAT64, 2, ws),
                               .v = view(dva[l], ATTNC_FLOAT64, 1, vs)};
        CHECK(attnc_score_forward(&ts, &tq, &keys[l], &sp) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(attnc_score_backward(&tdq, &tdk, &g, &tds, &tq, &keys[l], &sp) == ATTNC_OK, "%s", attnc_last_error());
    }
    double worst = 0;
    for (int b = 0; b < AB; b++)
        for (int i = 0; i < AQ; i++)
            for (int j = 0; j < AK; j++) {
                double ref = 0;
                for (int a = 0; a < AA; a++) {
                    double z = 0;
                    for (int x = 0; x < AD; x++)
                        z += q[(b * AQ + i) * AD + x] * wq[x * AA + a] + k[(b * AK + j) * AD + x] * wk[x * AA + a];
                    ref += va[a] * tanh(z);
                }
                worst = fmax(worst, fabs(ref - s[0][(b * AQ + i) * AK + j]));
            }
    CHECK(worst < 1e-13, "additive scores differ from loops by %g", worst);
    CHECK(max_abs_diff(s[0], s[1], AB * AQ * AK) < 1e-14, "transposed keys: scores differ");
    CHECK(max_abs_diff(dq[0], dq[1], AB * AQ * AD) < 1e-14 && max_abs_diff(dk[0], dk[1], AB * AK * AD) < 1e-14,
          "transposed keys: input gradients differ");
    CHECK(max_abs_diff(dwq[0], dwq[1], AD * AA) < 1e-14 && max_abs_diff(dwk[0], dwk[1], AD * AA) < 1e-14 &&
              max_abs_diff(dva[0], dva[1], AA) < 1e-14,
          "transposed keys: parameter gradients differ");
    free(q), free(k), free(wq), free(wk), free(va), free(ds);
}

/* Transposed (column-major) keys give the same scores as contiguous ones. */
static void test_strided(void) {
    double q[3 * 4], k[5 * 4], kt[4 * 5], s1[15], s2[15];
    for (int i = 0; i < 12; i++) q[i] = attnc_uniform(1, 1, i);
    for (int j = 0; j < 5; j++)
        for (int a = 0; a < 4; a++) kt[a * 5 + j] = k[j * 4 + a] = attnc_uniform(2, 2, j * 4 + a);
    int64_t qs[2] = {3, 4}, ks[2] = {5, 4}, ss[2] = {3, 5};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 2, qs), tk = view(k, ATTNC_FLOAT64, 2, ks);
    attnc_tensor tkt = tk;
    tkt.data = kt;
    tkt.strides[0] = 1;
    tkt.strides[1] = 5;
    attnc_tensor t1 = view(s1, ATTNC_FLOAT64, 2, ss), t2 = view(s2, ATTNC_FLOAT64, 2, ss);
    attnc_score_params sp = {.kind = ATTNC_SCORE_COSINE, .beta_scalar = 2};
    CHECK(attnc_score_forward(&t1, &tq, &tk, &sp) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(attnc_score_forward(&t2, &tq, &tkt, &sp) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(max_abs_diff(s1, s2, 15) < 1e-15, "transposed keys differ");
    /* Neither dim unit-stride: refused, not misread. */
    tkt.strides[0] = 2;
    tkt.strides[1] = 10;
    CHECK(attnc_score_forward(&t2, &tq, &tkt, &sp) == ATTNC_ERR_LAYOUT, "bad layout accepted");
    test_additive_layouts();
}

/* Hard attention picks only allowed keys; the same seed, the same picks. */
static void test_hard(void) {
    enum { Q = 6, K = 7, D = 3 };
    double *q = randn(Q * D, 1), *k = randn(K * D, 2), ctx[Q * D], w[Q * K], ctx2[Q * D], w2[Q * K];
    int64_t idx[Q], idx2[Q];
    uint8_t m[Q * K];
    for (int i = 0; i < Q * K; i++) m[i] = (i % 3) != 0;
    int64_t qs[2] = {Q, D}, ks[2] = {K, D}, ws[2] = {Q, K}, is[1] = {Q};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 2, qs), tk = view(k, ATTNC_FLOAT64, 2, ks);
    attnc_tensor tc = view(ctx, ATTNC_FLOAT64, 2, qs), tw = view(w, ATTNC_FLOAT64, 2, ws);
    attnc_tensor ti = view(idx, ATTNC_INT64, 1, is);
    attnc_tensor tc2 = view(ctx2, ATTNC_FLOAT64, 2, qs), tw2 = view(w2, ATTNC_FLOAT64, 2, ws);
    attnc_tensor ti2 = view(idx2, ATTNC_INT64, 1, is);
    attnc_score_params sp = {.kind = ATTNC_SCORE_DOT};
    attnc_mask mask = {.mask = view(m, ATTNC_BOOL, 2, ws)};
    attnc_hard_options o = {.mode = ATTNC_HARD_SAMPLE, .temperature = 1, .seed = 5};
    CHECK(attnc_hard_attention_forward(&tc, &tw, &ti, &tq, &tk, &tk, &sp, &mask, &o) == ATTNC_OK, "%s",
          attnc_last_error());
    CHECK(attnc_hard_attention_forward(&tc2, &tw2, &ti2, &tq, &tk, &tk, &sp, &mask, &o) == ATTNC_OK, "%s",
          attnc_last_error());
    int ok = 1;
    for (int i = 0; i < Q; i++) {
        ok &= idx[i] >= 0 && idx[i] < K && m[i * K + idx[i]] && w[i * K + idx[i]] == 1;
        for (int a = 0; a < D; a++) ok &= ctx[i * D + a] == k[idx[i] * D + a];
    }
    CHECK(ok, "sample picked a masked key or built a wrong context");
    CHECK(memcmp(idx, idx2, sizeof idx) == 0, "same seed, different picks");

    /* Gumbel straight-through: dquery = (softmax((s + g)/T) backward of
     * dcontext V^T) / T, times K, with the noise the kernel used. */
    o.mode = ATTNC_HARD_GUMBEL;
    o.temperature = 0.7;
    CHECK(attnc_hard_attention_forward(&tc, &tw, &ti, &tq, &tk, &tk, &sp, &mask, &o) == ATTNC_OK, "%s",
          attnc_last_error());
    double *dc = randn(Q * D, 3), dq[Q * D], dv[Q * D * 3], ref[Q * D] = {0};
    int64_t vs[2] = {K, D};
    attnc_tensor tdc = view(dc, ATTNC_FLOAT64, 2, qs), tdq = view(dq, ATTNC_FLOAT64, 2, qs);
    attnc_tensor tdv = view(dv, ATTNC_FLOAT64, 2, vs);
    CHECK(attnc_hard_attention_backward(&tdq, NULL, &tdv, NULL, &tdc, NULL, &tq, &tk, &tk, &ti, &sp, &mask, &o) ==
              ATTNC_OK,
          "%s", attnc_last_error());
    for (int i = 0; i < Q; i++) {
        double y[K], g[K], mx = -INFINITY, sum = 0, dot = 0;
        for (int j = 0; j < K; j++) {
            double s = 0;
            for (int a = 0; a < D; a++) s += q[i * D + a] * k[j * D + a];
            y[j] = (s + attnc_gumbel(5, 0, (uint64_t)(i * K + j))) / o.temperature;
            if (m[i * K + j]) mx = fmax(mx, y[j]);
            g[j] = 0;
            for (int a = 0; a < D; a++) g[j] += dc[i * D + a] * k[j * D + a];
        }
        for (int j = 0; j < K; j++) sum += y[j] = m[i * K + j] ? exp(y[j] - mx) : 0;
        for (int j = 0; j < K; j++) dot += (y[j] /= sum) * g[j];
        for (int j = 0; j < K; j++)
            for (int a = 0; a < D; a++) ref[i * D + a] += y[j] * (g[j] - dot) / o.temperature * k[j * D + a];
    }
    CHECK(max_abs_diff(dq, ref, Q * D) < 1e-12, "gumbel straight-through gradient differs by %g",
          max_abs_diff(dq, ref, Q * D));
    free(dc);
    o.temperature = 0;
    CHECK(attnc_hard_attention_forward(&tc, &tw, &ti, &tq, &tk, &tk, &sp, &mask, &o) == ATTNC_ERR_VALUE,
          "temperature 0 accepted");
    free(q), free(k);
}

/* Local-m: weights vanish outside |s - p| <= D; empty inputs are fine. */
static void test_local(void) {
    enum { Q = 4, K = 9, D = 2 };
    double *q = randn(Q * D, 1), *k = randn(K * D, 2), ctx[Q * D], w[Q * K], pos[Q];
    double given[Q] = {0.5, 3, 8.2, 20};
    int64_t qs[2] = {Q, D}, ks[2] = {K, D}, ws[2] = {Q, K}, ps[1] = {Q};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 2, qs), tk = view(k, ATTNC_FLOAT64, 2, ks);
    attnc_tensor tc = view(ctx, ATTNC_FLOAT64, 2, qs), tw = view(w, ATTNC_FLOAT64, 2, ws);
    attnc_tensor tp = view(pos, ATTNC_FLOAT64, 1, ps);
    attnc_score_params sp = {.kind = ATTNC_SCORE_DOT};
    attnc_local_options o = {.mode = ATTNC_LOCAL_MONOTONIC,
                             .window = 1.5,
                             .positions = view(given, ATTNC_FLOAT64, 1, ps)};
    CHECK(attnc_local_attention_forward(&tc, &tw, &tp, &tq, &tk, &tk, &sp, NULL, &o) == ATTNC_OK, "%s",
          attnc_last_error());
    int ok = 1;
    for (int i = 0; i < Q; i++) {
        double sum = 0;
        for (int j = 0; j < K; j++) {
            if (fabs(j - given[i]) > 1.5) ok &= w[i * K + j] == 0;
            sum += w[i * K + j];
        }
        ok &= i == 3 ? sum == 0 : fabs(sum - 1) < 1e-12;
    }
    CHECK(ok, "local-m window wrong");
    /* Tq = 0 and Tk = 0. */
    int64_t q0[2] = {0, D}, w0[2] = {0, K}, p0[1] = {0}, k0[2] = {0, D}, wk0[2] = {Q, 0};
    attnc_tensor tq0 = view(q, ATTNC_FLOAT64, 2, q0), tc0 = view(ctx, ATTNC_FLOAT64, 2, q0);
    attnc_tensor tw0 = view(w, ATTNC_FLOAT64, 2, w0), tp0 = view(pos, ATTNC_FLOAT64, 1, p0);
    o.positions.data = NULL;
    CHECK(attnc_local_attention_forward(&tc0, &tw0, &tp0, &tq0, &tk, &tk, &sp, NULL, &o) == ATTNC_OK, "Tq = 0: %s",
          attnc_last_error());
    attnc_tensor tk0 = view(k, ATTNC_FLOAT64, 2, k0), twk0 = view(w, ATTNC_FLOAT64, 2, wk0);
    for (int i = 0; i < Q * D; i++) ctx[i] = 7;
    CHECK(attnc_attention_forward(&tc, &twk0, &tq, &tk0, &tk0, &sp, NULL) == ATTNC_OK, "Tk = 0: %s",
          attnc_last_error());
    ok = 1;
    for (int i = 0; i < Q * D; i++) ok &= ctx[i] == 0;
    CHECK(ok, "Tk = 0 context not zero");
    free(q), free(k);
}

/* Fused attention against plain loops: several query and key tiles, GQA,
 * a float mask, causal with L < S, and central differences for dK. */
static void sdpa_reference(const double *q, const double *k, const double *v, const double *mask, int H, int HKV, int L,
                           int S, int E, int EV, int causal, double scale, double *out) {
    double *s = malloc((size_t)S * sizeof *s);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < L; i++) {
            int hk = h / (H / HKV);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < S; j++) {
                double x = 0;
                for (int e = 0; e < E; e++) x += q[(h * L + i) * E + e] * k[(hk * S + j) * E + e];
                s[j] = x * scale + mask[i * S + j];
                if (causal && j > i) s[j] = -INFINITY;
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < S; j++) sum += s[j] = exp(s[j] - mx);
            for (int e = 0; e < EV; e++) {
                double acc = 0;
                for (int j = 0; j < S; j++) acc += s[j] / sum * v[(hk * S + j) * EV + e];
                out[(h * L + i) * EV + e] = acc;
            }
        }
    free(s);
}

static void test_sdpa(void) {
    enum { H = 4, HKV = 2, L = 70, S = 300, E = 5, EV = 3 };
    double *q = randn(H * L * E, 21), *k = randn(HKV * S * E, 22), *v = randn(HKV * S * EV, 23);
    double *mask = randn(L * S, 24), *out = malloc(H * L * EV * sizeof(double));
    double *ref = malloc(H * L * EV * sizeof(double)), lse[H * L];
    int64_t qs[3] = {H, L, E}, ks[3] = {HKV, S, E}, vs[3] = {HKV, S, EV}, os[3] = {H, L, EV};
    int64_t ls[2] = {H, L}, ms[3] = {H, L, S};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 3, qs), tk = view(k, ATTNC_FLOAT64, 3, ks);
    attnc_tensor tv = view(v, ATTNC_FLOAT64, 3, vs), to = view(out, ATTNC_FLOAT64, 3, os);
    attnc_tensor tl = view(lse, ATTNC_FLOAT64, 2, ls);
    attnc_tensor tm = view(mask, ATTNC_FLOAT64, 3, ms);
    tm.strides[0] = 0; /* one (L, S) mask shared by the heads */
    for (int causal = 0; causal < 2; causal++) {
        attnc_sdpa_options o = {.masks = {tm}, .causal = causal, .scale = 0.4};
        CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &o) == ATTNC_OK, "%s", attnc_last_error());
        sdpa_reference(q, k, v, mask, H, HKV, L, S, E, EV, causal, 0.4, ref);
        CHECK(max_abs_diff(out, ref, H * L * EV) < 1e-12, "sdpa (causal %d) differs by %g", causal,
              max_abs_diff(out, ref, H * L * EV));
    }
    /* dK against central differences of sum(out * cot), causal. */
    attnc_sdpa_options o = {.masks = {tm}, .causal = 1, .scale = 0.4};
    double *cot = randn(H * L * EV, 25), *dk = malloc(HKV * S * E * sizeof(double));
    attnc_tensor tcot = view(cot, ATTNC_FLOAT64, 3, os), tdk = view(dk, ATTNC_FLOAT64, 3, ks);
    attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &o);
    CHECK(attnc_sdpa_backward(NULL, &tdk, NULL, NULL, NULL, NULL, &tcot, NULL, &tq, &tk, &tv, &to, &tl, &o) == ATTNC_OK,
          "%s", attnc_last_error());
    double worst = 0;
    for (int x = 0; x < HKV * S * E; x += 37) {
        double old = k[x], lp = 0, lm = 0;
        k[x] = old + 1e-6;
        sdpa_reference(q, k, v, mask, H, HKV, L, S, E, EV, 1, 0.4, ref);
        for (int y = 0; y < H * L * EV; y++) lp += ref[y] * cot[y];
        k[x] = old - 1e-6;
        sdpa_reference(q, k, v, mask, H, HKV, L, S, E, EV, 1, 0.4, ref);
        for (int y = 0; y < H * L * EV; y++) lm += ref[y] * cot[y];
        k[x] = old;
        worst = fmax(worst, fabs((lp - lm) / 2e-6 - dk[x]));
    }
    CHECK(worst < 1e-6, "sdpa dkey differs from finite differences by %g", worst);
    /* One kv head: the two-part backward; dQ against central differences. */
    {
        enum { H1 = 2, L1 = 40 };
        double *q1 = randn(H1 * L1 * E, 26), *o1 = malloc(H1 * L1 * EV * sizeof(double));
        double *r1 = malloc(H1 * L1 * EV * sizeof(double)), *c1 = randn(H1 * L1 * EV, 27);
        double *dq1 = malloc(H1 * L1 * E * sizeof(double)), l1[H1 * L1], *m0 = calloc(L1 * S, sizeof(double));
        int64_t q1s[3] = {H1, L1, E}, k1s[3] = {1, S, E}, v1s[3] = {1, S, EV}, o1s[3] = {H1, L1, EV};
        int64_t l1s[2] = {H1, L1};
        attnc_tensor tq1 = view(q1, ATTNC_FLOAT64, 3, q1s), tk1 = view(k, ATTNC_FLOAT64, 3, k1s);
        attnc_tensor tv1 = view(v, ATTNC_FLOAT64, 3, v1s), to1 = view(o1, ATTNC_FLOAT64, 3, o1s);
        attnc_tensor tl1 = view(l1, ATTNC_FLOAT64, 2, l1s), tc1 = view(c1, ATTNC_FLOAT64, 3, o1s);
        attnc_tensor tdq1 = view(dq1, ATTNC_FLOAT64, 3, q1s), tdk1 = view(dk, ATTNC_FLOAT64, 3, k1s);
        double *dv1 = malloc(S * EV * sizeof(double));
        attnc_tensor tdv1 = view(dv1, ATTNC_FLOAT64, 3, v1s);
        attnc_sdpa_options o1o = {.scale = 0.4};
        CHECK(attnc_sdpa_forward(&to1, &tl1, NULL, &tq1, &tk1, &tv1, &o1o) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(attnc_sdpa_backward(&tdq1, &tdk1, &tdv1, NULL, NULL, NULL, &tc1, NULL, &tq1, &tk1, &tv1, &to1, &tl1,
                                  &o1o) == ATTNC_OK,
              "%s", attnc_last_error());
        double worst1 = 0;
        for (int x = 0; x < H1 * L1 * E; x += 7) {
            double old = q1[x], lp = 0, lm = 0;
            q1[x] = old + 1e-6;
            sdpa_reference(q1, k, v, m0, H1, 1, L1, S, E, EV, 0, 0.4, r1);
            for (int y = 0; y < H1 * L1 * EV; y++) lp += r1[y] * c1[y];
            q1[x] = old - 1e-6;
            sdpa_reference(q1, k, v, m0, H1, 1, L1, S, E, EV, 0, 0.4, r1);
            for (int y = 0; y < H1 * L1 * EV; y++) lm += r1[y] * c1[y];
            q1[x] = old;
            worst1 = fmax(worst1, fabs((lp - lm) / 2e-6 - dq1[x]));
        }
        CHECK(worst1 < 1e-6, "two-part dquery differs from finite differences by %g", worst1);
        free(q1), free(o1), free(r1), free(c1), free(dq1), free(m0), free(dv1);
    }
    /* Bad heads: 3 query heads over 2 kv heads. */
    int64_t bad[3] = {3, L, E};
    attnc_tensor tbad = view(q, ATTNC_FLOAT64, 3, bad);
    CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tbad, &tk, &tv, &o) != ATTNC_OK, "3 / 2 heads accepted");
    free(q), free(k), free(v), free(mask), free(out), free(ref), free(cot), free(dk);
}

/* The options of today's models (attnc_sdpa_options' window, alibi_slopes,
 * softcap, sinks) against plain loops of their definitions: several tiles,
 * GQA, rows the window leaves without keys; the gradients of the sinks and
 * slopes and some of dQ against central differences of sum(out * cot). */
typedef struct {
    int H, HKV, L, S, E, EV, left, right;
    double scale, cap;
    const double *slopes, *sinks;
} sdpa_opts_case;

static void sdpa_opts_reference(const sdpa_opts_case *c, const double *q, const double *k, const double *v,
                                double *out) {
    double *s = malloc((size_t)c->S * sizeof *s);
    for (int h = 0; h < c->H; h++)
        for (int i = 0; i < c->L; i++) {
            int hk = h / (c->H / c->HKV);
            double mx = c->sinks[h], sum = 0;
            for (int j = 0; j < c->S; j++) {
                double x = 0;
                for (int e = 0; e < c->E; e++) x += q[(h * c->L + i) * c->E + e] * k[(hk * c->S + j) * c->E + e];
                x = c->cap * tanh(x * c->scale / c->cap) + c->slopes[h] * (j - i);
                s[j] = j < i - c->left || j > i + c->right ? -INFINITY : x;
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j < c->S; j++) sum += s[j] = exp(s[j] - mx);
            sum += exp(c->sinks[h] - mx);
            for (int e = 0; e < c->EV; e++) {
                double acc = 0;
                for (int j = 0; j < c->S; j++) acc += s[j] / sum * v[(hk * c->S + j) * c->EV + e];
                out[(h * c->L + i) * c->EV + e] = acc;
            }
        }
    free(s);
}

static double sdpa_opts_loss(const sdpa_opts_case *c, const double *q, const double *k, const double *v,
                             const double *cot, double *scratch) {
    sdpa_opts_reference(c, q, k, v, scratch);
    double loss = 0;
    for (int y = 0; y < c->H * c->L * c->EV; y++) loss += scratch[y] * cot[y];
    return loss;
}

/* The central difference of the loss along entry x of p (restored after). */
static double sdpa_opts_fd(const sdpa_opts_case *c, double *p, int x, const double *q, const double *k, const double *v,
                           const double *cot, double *scratch) {
    double old = p[x], lp, lm;
    p[x] = old + 1e-6;
    lp = sdpa_opts_loss(c, q, k, v, cot, scratch);
    p[x] = old - 1e-6;
    lm = sdpa_opts_loss(c, q, k, v, cot, scratch);
    p[x] = old;
    return (lp - lm) / 2e-6;
}

static void test_sdpa_options(void) {
    enum { H = 2, HKV = 1, L = 300, S = 280, E = 4, EV = 3 };
    double slopes[H] = {0.3, 0.05}, sinks[H] = {0.5, -1.0}, lse[H * L], dsinks[H], dslopes[H];
    sdpa_opts_case c = {H, HKV, L, S, E, EV, 40, 10, 0.6, 2.0, slopes, sinks};
    double *q = randn(H * L * E, 41), *k = randn(HKV * S * E, 42), *v = randn(HKV * S * EV, 43);
    double *out = malloc(H * L * EV * sizeof(double)), *ref = malloc(H * L * EV * sizeof(double));
    double *cot = randn(H * L * EV, 44), *dq = malloc(H * L * E * sizeof(double));
    double *dk = malloc(HKV * S * E * sizeof(double)), *dv = malloc(HKV * S * EV * sizeof(double));
    int64_t qs[3] = {H, L, E}, ks[3] = {HKV, S, E}, vs[3] = {HKV, S, EV}, os[3] = {H, L, EV}, ls[2] = {H, L},
            hs[1] = {H};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 3, qs), tk = view(k, ATTNC_FLOAT64, 3, ks);
    attnc_tensor tv = view(v, ATTNC_FLOAT64, 3, vs), to = view(out, ATTNC_FLOAT64, 3, os);
    attnc_tensor tl = view(lse, ATTNC_FLOAT64, 2, ls), tc = view(cot, ATTNC_FLOAT64, 3, os);
    attnc_tensor tdq = view(dq, ATTNC_FLOAT64, 3, qs), tdk = view(dk, ATTNC_FLOAT64, 3, ks);
    attnc_tensor tdv = view(dv, ATTNC_FLOAT64, 3, vs), tds = view(dsinks, ATTNC_FLOAT64, 1, hs);
    attnc_tensor tdsl = view(dslopes, ATTNC_FLOAT64, 1, hs);
    attnc_sdpa_options o = {.scale = 0.6,
                            .alibi_slopes = view(slopes, ATTNC_FLOAT64, 1, hs),
                            .window = 1,
                            .window_left = 40,
                            .window_right = 10,
                            .softcap = 2.0,
                            .sinks = view(sinks, ATTNC_FLOAT64, 1, hs)};
    CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &o) == ATTNC_OK, "%s", attnc_last_error());
    sdpa_opts_reference(&c, q, k, v, ref);
    CHECK(max_abs_diff(out, ref, H * L * EV) < 1e-12, "sdpa options differ by %g", max_abs_diff(out, ref, H * L * EV));
    int dead = 1; /* queries i > S - 1 + 40 see no key: zeros */
    for (int h = 0; h < H; h++)
        for (int i = S + 40; i < L; i++)
            for (int e = 0; e < EV; e++) dead &= out[(h * L + i) * EV + e] == 0;
    CHECK(dead, "rows the window leaves without keys are not zero");
    CHECK(attnc_sdpa_backward(&tdq, &tdk, &tdv, NULL, &tds, &tdsl, &tc, NULL, &tq, &tk, &tv, &to, &tl, &o) == ATTNC_OK,
          "%s", attnc_last_error());
    double worst = 0;
    for (int h = 0; h < H; h++) {
        worst = fmax(worst, fabs(sdpa_opts_fd(&c, sinks, h, q, k, v, cot, ref) - dsinks[h]));
        worst = fmax(worst, fabs(sdpa_opts_fd(&c, slopes, h, q, k, v, cot, ref) - dslopes[h]));
    }
    for (int x = 0; x < H * L * E; x += 61)
        worst = fmax(worst, fabs(sdpa_opts_fd(&c, q, x, q, k, v, cot, ref) - dq[x]));
    CHECK(worst < 1e-6, "sdpa options' gradients differ from finite differences by %g", worst);
    /* Bad options, each named. */
    attnc_sdpa_options bad = o;
    bad.window_left = -2;
    CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &bad) != ATTNC_OK && strstr(attnc_last_error(), "window"),
          "window_left -2 accepted");
    bad = o;
    bad.softcap = -1;
    CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &bad) != ATTNC_OK && strstr(attnc_last_error(), "softcap"),
          "softcap -1 accepted");
    slopes[1] = NAN;
    CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &o) != ATTNC_OK &&
              strstr(attnc_last_error(), "alibi_slopes"),
          "a NaN slope accepted");
    free(q), free(k), free(v), free(out), free(ref), free(cot), free(dq), free(dk), free(dv);
}

/* The block masks and sigmoid (issue 30), read through strided and
 * broadcast views: B = 2, H = 2 heads on 1 kv head, causal. */
enum { SM_B = 2, SM_H = 2, SM_L = 300, SM_S = 280, SM_E = 4, SM_EV = 3, SM_BQ = 37, SM_BK = 19 };
enum { SM_NQ = (SM_L + SM_BQ - 1) / SM_BQ, SM_NK = (SM_S + SM_BK - 1) / SM_BK };

typedef struct {
    int64_t qseg[SM_B][SM_L][2], kseg[SM_S], prefix[SM_B];
    uint8_t blocks[SM_H][SM_NQ][SM_NK];
    int sigmoid;
} masks_case;

static int mask_ok(const masks_case *m, int b, int h, int i, int j) {
    return (j <= i || j < m->prefix[b]) && m->qseg[b][i][0] == m->kseg[j] && m->blocks[h][i / SM_BQ][j / SM_BK];
}

/* out (SM_B, SM_H, SM_L, SM_EV) by loops; returns sum(out * cot). */
static double masks_reference(const masks_case *m, const double *q, const double *k, const double *v, const double *cot,
                              double *out) {
    double total = 0, p[SM_S];
    for (int b = 0; b < SM_B; b++)
        for (int h = 0; h < SM_H; h++)
            for (int i = 0; i < SM_L; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < SM_S; j++) {
                    double s = 0;
                    for (int e = 0; e < SM_E; e++)
                        s += q[((b * SM_H + h) * SM_L + i) * SM_E + e] * k[(b * SM_S + j) * SM_E + e];
                    p[j] = mask_ok(m, b, h, i, j) ? 0.5 * s : -INFINITY;
                    mx = fmax(mx, p[j]);
                }
                for (int j = 0; j < SM_S; j++) {
                    p[j] = m->sigmoid ? 1 / (1 + exp(-(p[j] - 1))) : (mx == -INFINITY ? 0 : exp(p[j] - mx));
                    sum += p[j];
                }
                for (int e = 0; e < SM_EV; e++) {
                    double acc = 0;
                    for (int j = 0; j < SM_S; j++) acc += p[j] * v[(b * SM_S + j) * SM_EV + e];
                    double *o = &out[((b * SM_H + h) * SM_L + i) * SM_EV + e];
                    *o = m->sigmoid ? acc : (sum > 0 ? acc / sum : 0);
                    total += *o * cot[((b * SM_H + h) * SM_L + i) * SM_EV + e];
                }
            }
    return total;
}

static void test_sdpa_masks(void) {
    static masks_case m;
    for (int b = 0; b < SM_B; b++) {
        for (int i = 0; i < SM_L; i++) m.qseg[b][i][0] = i < 130 ? 0 : i < 200 ? 1 : 3, m.qseg[b][i][1] = -9;
        m.prefix[b] = b ? 0 : 50;
    }
    for (int j = 0; j < SM_S; j++) m.kseg[j] = j < 130 ? 0 : j < 220 ? 1 : 2; /* queries 200.. see no key */
    for (int x = 0; x < SM_H * SM_NQ * SM_NK; x++) (&m.blocks[0][0][0])[x] = attnc_uniform(9, 1, (uint64_t)x) < 0.8;
    size_t nq = SM_B * SM_H * SM_L * SM_E, no = SM_B * SM_H * SM_L * SM_EV;
    double *q = randn(nq, 61), *k = randn(SM_B * SM_S * SM_E, 62), *v = randn(SM_B * SM_S * SM_EV, 63),
           *cot = randn(no, 64);
    double *out = malloc(no * sizeof(double)), *ref = malloc(no * sizeof(double)), *dq = malloc(nq * sizeof(double));
    double *dk = malloc(SM_B * SM_S * SM_E * sizeof(double)), *dv = malloc(SM_B * SM_S * SM_EV * sizeof(double));
    double lse[SM_B * SM_H * SM_L];
    int64_t qs[4] = {SM_B, SM_H, SM_L, SM_E}, ks[4] = {SM_B, 1, SM_S, SM_E}, vs[4] = {SM_B, 1, SM_S, SM_EV},
            os[4] = {SM_B, SM_H, SM_L, SM_EV};
    int64_t ls[3] = {SM_B, SM_H, SM_L}, sq[2] = {SM_B, SM_L}, sk[2] = {SM_B, SM_S}, bs[4] = {SM_B, SM_H, SM_NQ, SM_NK},
            pb[1] = {SM_B};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 4, qs), tk = view(k, ATTNC_FLOAT64, 4, ks);
    attnc_tensor tv = view(v, ATTNC_FLOAT64, 4, vs), to = view(out, ATTNC_FLOAT64, 4, os);
    attnc_tensor tl = view(lse, ATTNC_FLOAT64, 3, ls), tc = view(cot, ATTNC_FLOAT64, 4, os);
    attnc_tensor tdq = view(dq, ATTNC_FLOAT64, 4, qs), tdk = view(dk, ATTNC_FLOAT64, 4, ks);
    attnc_tensor tdv = view(dv, ATTNC_FLOAT64, 4, vs);
    attnc_sdpa_options o = {.scale = 0.5,
                            .causal = 1,
                            .query_segments = view(m.qseg, ATTNC_INT64, 2, sq),
                            .key_segments = view(m.kseg, ATTNC_INT64, 2, sk),
                            .prefix_lengths = view(m.prefix, ATTNC_INT64, 1, pb),
                            .block_mask = view(m.blocks, ATTNC_BOOL, 4, bs),
                            .block_q = SM_BQ,
                            .block_k = SM_BK,
                            .sigmoid_bias = -1};
    o.query_segments.strides[0] = 2 * SM_L, o.query_segments.strides[1] = 2; /* every other entry */
    o.key_segments.strides[0] = 0;                                           /* broadcast over the batch */
    o.block_mask.strides[0] = 0;
    for (m.sigmoid = 0; m.sigmoid < 2; m.sigmoid++) {
        o.activation = m.sigmoid ? ATTNC_SIGMOID : ATTNC_SOFTMAX;
        CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &o) == ATTNC_OK, "%s", attnc_last_error());
        masks_reference(&m, q, k, v, cot, ref);
        CHECK(max_abs_diff(out, ref, no) < 1e-12, "masks (sigmoid %d) differ by %g", m.sigmoid,
              max_abs_diff(out, ref, no));
        CHECK(attnc_sdpa_backward(&tdq, &tdk, &tdv, NULL, NULL, NULL, &tc, NULL, &tq, &tk, &tv, &to, &tl, &o) ==
                  ATTNC_OK,
              "%s", attnc_last_error());
        double worst = 0;
        for (size_t x = 0; x < nq; x += 97) {
            double keep = q[x];
            q[x] = keep + 1e-6;
            double up = masks_reference(&m, q, k, v, cot, ref);
            q[x] = keep - 1e-6;
            double down = masks_reference(&m, q, k, v, cot, ref);
            q[x] = keep;
            worst = fmax(worst, fabs((up - down) / 2e-6 - dq[x]));
        }
        CHECK(worst < 1e-6, "masks' dquery (sigmoid %d) differs from finite differences by %g", m.sigmoid, worst);
    }
    attnc_sdpa_options bad = o;
    m.prefix[1] = -1;
    CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &bad) != ATTNC_OK &&
              strstr(attnc_last_error(), "prefix_lengths"),
          "a negative prefix accepted");
    m.prefix[1] = 0;
    bad.block_k = 20;
    CHECK(attnc_sdpa_forward(&to, &tl, NULL, &tq, &tk, &tv, &bad) != ATTNC_OK &&
              strstr(attnc_last_error(), "block_mask"),
          "a block mask of the wrong shape accepted");
    free(q), free(k), free(v), free(cot), free(out), free(ref), free(dq), free(dk), free(dv);
}

/* Linear: y = x W^T + b against loops; gradients of W and b. */
static void test_linear(void) {
    enum { N = 300, IN = 7, OUT = 5 };
    double *x = randn(N * IN, 31), *w = randn(OUT * IN, 32), *b = randn(OUT, 33);
    double *y = malloc(N * OUT * sizeof(double)), *dy = randn(N * OUT, 34);
    double dw[OUT * IN], db[OUT], *dx = malloc(N * IN * sizeof(double));
    int64_t xs[2] = {N, IN}, ws[2] = {OUT, IN}, ys[2] = {N, OUT}, bs[1] = {OUT};
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 2, xs), tw = view(w, ATTNC_FLOAT64, 2, ws);
    attnc_tensor tb = view(b, ATTNC_FLOAT64, 1, bs), ty = view(y, ATTNC_FLOAT64, 2, ys);
    attnc_tensor tdy = view(dy, ATTNC_FLOAT64, 2, ys), tdx = view(dx, ATTNC_FLOAT64, 2, xs);
    attnc_tensor tdw = view(dw, ATTNC_FLOAT64, 2, ws), tdb = view(db, ATTNC_FLOAT64, 1, bs);
    CHECK(attnc_linear_forward(&ty, &tx, &tw, &tb) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(attnc_linear_backward(&tdx, &tdw, &tdb, &tdy, &tx, &tw) == ATTNC_OK, "%s", attnc_last_error());
    double e1 = 0, e2 = 0, e3 = 0, e4 = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double acc = b[o];
            for (int i = 0; i < IN; i++) acc += x[n * IN + i] * w[o * IN + i];
            e1 = fmax(e1, fabs(acc - y[n * OUT + o]));
        }
    for (int o = 0; o < OUT; o++) {
        double sb = 0;
        for (int n = 0; n < N; n++) sb += dy[n * OUT + o];
        e2 = fmax(e2, fabs(sb - db[o]));
        for (int i = 0; i < IN; i++) {
            double sw = 0;
            for (int n = 0; n < N; n++) sw += dy[n * OUT + o] * x[n * IN + i];
            e3 = fmax(e3, fabs(sw - dw[o * IN + i]));
        }
    }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IN; i++) {
            double sx = 0;
            for (int o = 0; o < OUT; o++) sx += dy[n * OUT + o] * w[o * IN + i];
            e4 = fmax(e4, fabs(sx - dx[n * IN + i]));
        }
    CHECK(e1 < 1e-12 && e2 < 1e-12 && e3 < 1e-11 && e4 < 1e-12, "linear: %g %g %g %g", e1, e2, e3, e4);
    free(x), free(w), free(b), free(y), free(dy), free(dx);
}

/* The sum of losses of the weighted, smoothed cross-entropy (class ids when
 * probs is NULL). */
static double ce_total(double *logits, const int64_t *ids, const double *probs, const double *w, int n, int c) {
    double loss[8], lse[8];
    int64_t ls[2] = {n, c}, ns[1] = {n};
    attnc_tensor tl = view(logits, ATTNC_FLOAT64, 2, ls), tloss = view(loss, ATTNC_FLOAT64, 1, ns),
                 tlse = view(lse, ATTNC_FLOAT64, 1, ns);
    attnc_tensor tt = probs ? view((double *)probs, ATTNC_FLOAT64, 2, ls) : view((int64_t *)ids, ATTNC_INT64, 1, ns);
    attnc_cross_entropy_options o = {.weight = view((double *)w, ATTNC_FLOAT64, 1, &ls[1]),
                                     .label_smoothing = 0.2,
                                     .ignore_index = -100};
    CHECK(attnc_cross_entropy_forward(&tloss, &tlse, &tl, &tt, &o) == ATTNC_OK, "%s", attnc_last_error());
    double total = 0;
    for (int r = 0; r < n; r++) total += loss[r];
    return total;
}

/* Class weights, class-probability targets and label smoothing: every
 * gradient (logits, probabilities, weights) against central differences of
 * the forward's summed losses; an ignored row has no loss nor gradient. */
static void test_weighted_cross_entropy(void) {
    enum { N = 3, C = 4 };
    double *x = randn(N * C, 51), *p = randn(N * C, 52), w[C] = {0.5, 2.0, 1.0, 0.0};
    int64_t ids[N] = {1, -100, 3}, ls[2] = {N, C}, ns[1] = {N}, cs[1] = {C};
    for (int k = 0; k < N * C; k++) p[k] = fabs(p[k]);
    double dx[N * C], dp[N * C], dw[C], ones[N] = {1, 1, 1}, lse[N], loss[N];
    for (int kind = 0; kind < 2; kind++) {
        const double *probs = kind ? p : NULL;
        attnc_tensor tl = view(x, ATTNC_FLOAT64, 2, ls), tdx = view(dx, ATTNC_FLOAT64, 2, ls),
                     tdp = view(dp, ATTNC_FLOAT64, 2, ls), tdw = view(dw, ATTNC_FLOAT64, 1, cs),
                     tones = view(ones, ATTNC_FLOAT64, 1, ns), tlse = view(lse, ATTNC_FLOAT64, 1, ns),
                     tloss = view(loss, ATTNC_FLOAT64, 1, ns), none = {0};
        attnc_tensor tt = kind ? view(p, ATTNC_FLOAT64, 2, ls) : view(ids, ATTNC_INT64, 1, ns);
        attnc_cross_entropy_options o = {.weight = view(w, ATTNC_FLOAT64, 1, cs),
                                         .label_smoothing = 0.2,
                                         .ignore_index = -100};
        CHECK(attnc_cross_entropy_forward(&tloss, &tlse, &tl, &tt, &o) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(kind || loss[1] == 0, "ignored row's loss %g", loss[1]);
        CHECK(attnc_cross_entropy_backward(&tdx, kind ? &tdp : &none, &tdw, &tones, &tl, &tt, &tlse, &o) == ATTNC_OK,
              "%s", attnc_last_error());
        CHECK(kind || (dx[C] == 0 && dx[C + 3] == 0), "ignored row's gradient");
        double err = 0, h = 1e-6;
        double *args[3] = {x, p, w}, *grads[3] = {dx, dp, dw};
        int counts[3] = {N * C, kind ? N * C : 0, C};
        for (int a = 0; a < 3; a++)
            for (int k = 0; k < counts[a]; k++) {
                double keep = args[a][k];
                args[a][k] = keep + h;
                double lp = ce_total(x, ids, probs, w, N, C);
                args[a][k] = keep - h;
                double lm = ce_total(x, ids, probs, w, N, C);
                args[a][k] = keep;
                err = fmax(err, fabs((lp - lm) / (2 * h) - grads[a][k]));
            }
        CHECK(err < 1e-8, "weighted cross-entropy (%s) gradients vs finite differences: %g",
              kind ? "probabilities" : "class ids", err);
        CHECK(kind || attnc_cross_entropy_backward(&tdx, &tdp, &none, &tones, &tl, &tt, &tlse, &o) == ATTNC_ERR_TYPE,
              "a target gradient for class ids accepted");
    }
    free(x);
    free(p);
}

/* Layer norm, embedding and cross-entropy against loops; bad ids refused. */
static void test_token_layers(void) {
    enum { N = 130, D = 6, V = 5 };
    double *x = randn(N * D, 41), w[D], b[D], y[N * D], mean[N], rstd[N];
    for (int c = 0; c < D; c++) w[c] = 1 + 0.1 * c, b[c] = 0.01 * c;
    int64_t xs[2] = {N, D}, ds[1] = {D}, ns[1] = {N};
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 2, xs), ty = view(y, ATTNC_FLOAT64, 2, xs);
    attnc_tensor tw = view(w, ATTNC_FLOAT64, 1, ds), tb = view(b, ATTNC_FLOAT64, 1, ds);
    attnc_tensor tm = view(mean, ATTNC_FLOAT64, 1, ns), tr = view(rstd, ATTNC_FLOAT64, 1, ns);
    CHECK(attnc_layer_norm_forward(&ty, &tm, &tr, &tx, &tw, &tb, 1e-5) == ATTNC_OK, "%s", attnc_last_error());
    double worst = 0;
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int c = 0; c < D; c++) m += x[r * D + c] / D;
        for (int c = 0; c < D; c++) v += (x[r * D + c] - m) * (x[r * D + c] - m) / D;
        for (int c = 0; c < D; c++)
            worst = fmax(worst, fabs((x[r * D + c] - m) / sqrt(v + 1e-5) * w[c] + b[c] - y[r * D + c]));
    }
    CHECK(worst < 1e-12, "layer norm differs by %g", worst);

    int64_t ids[4] = {0, 4, 4, 2}, is[1] = {4}, es[2] = {4, D}, ws[2] = {V, D};
    double emb[4 * D], table[V * D], dtable[V * D];
    for (int i = 0; i < V * D; i++) table[i] = i;
    attnc_tensor ti = view(ids, ATTNC_INT64, 1, is), te = view(emb, ATTNC_FLOAT64, 2, es);
    attnc_tensor tt = view(table, ATTNC_FLOAT64, 2, ws), tdt = view(dtable, ATTNC_FLOAT64, 2, ws);
    CHECK(attnc_embedding_forward(&te, &ti, &tt, 2.0, INFINITY, 2) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(emb[1 * D + 3] == 2.0 * table[4 * D + 3], "embedding row");
    double ones[4 * D];
    for (int i = 0; i < 4 * D; i++) ones[i] = 1;
    attnc_tensor tones = view(ones, ATTNC_FLOAT64, 2, es);
    CHECK(attnc_embedding_backward(&tdt, &tones, &ti, 2.0, 2) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(dtable[4 * D] == 4.0 && dtable[2 * D] == 0 && dtable[1 * D] == 0 && dtable[0] == 2.0, "embedding gradient");
    ids[2] = 5;
    CHECK(attnc_embedding_forward(&te, &ti, &tt, 1.0, INFINITY, 2) == ATTNC_ERR_VALUE, "id 5 of 5 accepted");
    ids[2] = -1;
    CHECK(attnc_embedding_forward(&te, &ti, &tt, 1.0, INFINITY, 2) == ATTNC_ERR_VALUE, "id -1 accepted");

    /* cross-entropy of uniform logits is log C; an ignored row is 0. */
    double logits[4 * V] = {0}, loss[4], lse[4];
    int64_t tg[4] = {1, -100, 3, 0}, ls[2] = {4, V}, fs[1] = {4};
    attnc_tensor tl = view(logits, ATTNC_FLOAT64, 2, ls), ttg = view(tg, ATTNC_INT64, 1, fs);
    attnc_tensor tloss = view(loss, ATTNC_FLOAT64, 1, fs), tlse = view(lse, ATTNC_FLOAT64, 1, fs);
    attnc_cross_entropy_options ceo = {.label_smoothing = 0.1, .ignore_index = -100};
    CHECK(attnc_cross_entropy_forward(&tloss, &tlse, &tl, &ttg, &ceo) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(fabs(loss[0] - log(V)) < 1e-14 && loss[1] == 0, "cross-entropy %g %g", loss[0], loss[1]);
    tg[2] = V;
    CHECK(attnc_cross_entropy_forward(&tloss, &tlse, &tl, &ttg, &ceo) == ATTNC_ERR_VALUE,
          "target out of range accepted");
    test_weighted_cross_entropy();

    /* max_norm: row 1 = (3, 4, 0, ...) has 2-norm 5 and comes out times 1 / (5 + 1e-7); row 0 (norm 0) as it is */
    for (int c = 0; c < D; c++) table[D + c] = c == 0 ? 3 : c == 1 ? 4 : 0, table[c] = 0;
    int64_t rn[1] = {2};
    attnc_tensor tri = view(ids, ATTNC_INT64, 1, rn), tre = view(emb, ATTNC_FLOAT64, 2, (int64_t[2]){2, D});
    ids[0] = 1, ids[1] = 0;
    CHECK(attnc_embedding_forward(&tre, &tri, &tt, 1.0, 1.0, 2) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(fabs(emb[0] - 3 / (5 + 1e-7)) < 1e-15 && fabs(emb[1] - 4 / (5 + 1e-7)) < 1e-15 && emb[D] == 0,
          "max_norm rows %g %g", emb[0], emb[1]);
    CHECK(table[D] == 3, "max_norm modified the table");
    CHECK(attnc_embedding_forward(&tre, &tri, &tt, 1.0, 1.0, INFINITY) == ATTNC_OK && fabs(emb[1] - 1) < 1e-7,
          "max_norm with the inf-norm: %g", emb[1]);
    CHECK(attnc_embedding_forward(&tre, &tri, &tt, 1.0, -1.0, 2) == ATTNC_ERR_VALUE, "negative max_norm accepted");
    CHECK(attnc_embedding_forward(&tre, &tri, &tt, 1.0, 1.0, 0) == ATTNC_ERR_VALUE, "norm_type 0 accepted");
    free(x);
}


/* Activation, dropout and residual in one pass: the keep rate, the GELU and
 * its derivative (finite differences), the residual, and the backward's mask. */
static void test_pointwise(void) {
    enum { N = 100003 };
    double *x = randn(N, 21), *res = randn(N, 22), *y = malloc(N * sizeof *y), *dx = malloc(N * sizeof *dx);
    double *ones = malloc(N * sizeof *ones);
    for (int i = 0; i < N; i++) ones[i] = 1;
    int64_t n = N;
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 1, &n), tr = view(res, ATTNC_FLOAT64, 1, &n);
    attnc_tensor ty = view(y, ATTNC_FLOAT64, 1, &n), tdx = view(dx, ATTNC_FLOAT64, 1, &n);
    attnc_tensor t1 = view(ones, ATTNC_FLOAT64, 1, &n);
    CHECK(attnc_pointwise_forward(&ty, &tx, &tr, ATTNC_ACT_NONE, 0.3, 7, 1) == ATTNC_OK, "%s", attnc_last_error());
    int kept = 0, exact = 1;
    for (int i = 0; i < N; i++) {
        double v = y[i] - res[i];
        if (v != 0) kept++;
        exact = exact && (v == 0 || fabs(v - x[i] / 0.7) < 1e-12);
    }
    CHECK(fabs(kept / (double)N - 0.7) < 0.01, "dropout keep rate %g, expected 0.7", kept / (double)N);
    CHECK(exact, "kept elements not scaled by 1 / (1 - p)");
    CHECK(attnc_pointwise_backward(&tdx, &t1, NULL, ATTNC_ACT_NONE, 0.3, 7, 1) == ATTNC_OK, "%s", attnc_last_error());
    int same = 1;
    for (int i = 0; i < N; i++) same = same && ((dx[i] != 0) == (y[i] - res[i] != 0 || x[i] == 0));
    CHECK(same, "backward mask differs from the forward's");
    /* GELU: value and derivative */
    CHECK(attnc_pointwise_forward(&ty, &tx, NULL, ATTNC_ACT_GELU, 0, 0, 0) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(attnc_pointwise_backward(&tdx, &t1, &tx, ATTNC_ACT_GELU, 0, 0, 0) == ATTNC_OK, "%s", attnc_last_error());
    double worst = 0, worst_d = 0;
    for (int i = 0; i < 1000; i++) {
        double g = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
        double h = 1e-6, gp = 0.5 * (x[i] + h) * (1 + erf((x[i] + h) / sqrt(2.0)));
        double gm = 0.5 * (x[i] - h) * (1 + erf((x[i] - h) / sqrt(2.0)));
        worst = fmax(worst, fabs(y[i] - g));
        worst_d = fmax(worst_d, fabs(dx[i] - (gp - gm) / (2 * h)));
    }
    CHECK(worst < 1e-15 && worst_d < 1e-8, "gelu %g, gelu' %g", worst, worst_d);
    /* the tanh GELU (torch's approximate="tanh") */
    CHECK(attnc_pointwise_forward(&ty, &tx, NULL, ATTNC_ACT_GELU_TANH, 0, 0, 0) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(attnc_pointwise_backward(&tdx, &t1, &tx, ATTNC_ACT_GELU_TANH, 0, 0, 0) == ATTNC_OK, "%s", attnc_last_error());
    worst = worst_d = 0;
    for (int i = 0; i < 1000; i++) {
        double h = 1e-6, g[3];
        for (int s = -1; s <= 1; s++) {
            double u = x[i] + s * h;
            g[s + 1] = 0.5 * u * (1 + tanh(0.79788456080286535588 /* sqrt(2 / pi) */ * (u + 0.044715 * u * u * u)));
        }
        worst = fmax(worst, fabs(y[i] - g[1]));
        worst_d = fmax(worst_d, fabs(dx[i] - (g[2] - g[0]) / (2 * h)));
    }
    CHECK(worst < 1e-15 && worst_d < 1e-8, "tanh gelu %g, tanh gelu' %g", worst, worst_d);
    CHECK(attnc_pointwise_forward(&ty, &tx, NULL, ATTNC_ACT_RELU, 1.5, 0, 0) == ATTNC_ERR_VALUE, "p > 1 accepted");
    free(x);
    free(res);
    free(y);
    free(dx);
    free(ones);
}

/* A tiny decoder layer (post-norm, dropout on) and a decoder-only pre-norm
 * stack under the sanitizers: the layer's input gradient against central
 * differences, and greedy and beam decoding running to completion. */
enum { LB = 2, LL = 3, LS = 4, LE = 4, LF = 6, LH = 2, LV = 5 };

typedef struct {
    double in_w[3 * LE * LE], in_b[3 * LE], out_w[LE * LE], out_b[LE];
    double x_in_w[3 * LE * LE], x_in_b[3 * LE], x_out_w[LE * LE], x_out_b[LE];
    double w1[LF * LE], b1[LF], w2[LE * LF], b2[LE], nw[3][LE], nb[3][LE];
} layer_data;

static attnc_layer_params layer_params(layer_data *d, int decoder) {
    int64_t w3[2] = {3 * LE, LE}, b3 = 3 * LE, we[2] = {LE, LE}, be = LE, w1[2] = {LF, LE}, b1 = LF;
    int64_t w2[2] = {LE, LF};
    attnc_layer_params p = {.self_attn = {.in_weight = view(d->in_w, ATTNC_FLOAT64, 2, w3),
                                          .in_bias = view(d->in_b, ATTNC_FLOAT64, 1, &b3),
                                          .out_weight = view(d->out_w, ATTNC_FLOAT64, 2, we),
                                          .out_bias = view(d->out_b, ATTNC_FLOAT64, 1, &be)},
                            .linear1_weight = view(d->w1, ATTNC_FLOAT64, 2, w1),
                            .linear1_bias = view(d->b1, ATTNC_FLOAT64, 1, &b1),
                            .linear2_weight = view(d->w2, ATTNC_FLOAT64, 2, w2),
                            .linear2_bias = view(d->b2, ATTNC_FLOAT64, 1, &be),
                            .norm_self = {view(d->nw[0], ATTNC_FLOAT64, 1, &be), view(d->nb[0], ATTNC_FLOAT64, 1, &be)},
                            .norm_ff = {view(d->nw[2], ATTNC_FLOAT64, 1, &be), view(d->nb[2], ATTNC_FLOAT64, 1, &be)}};
    if (decoder) {
        p.cross_attn = (attnc_mha_params){.in_weight = view(d->x_in_w, ATTNC_FLOAT64, 2, w3),
                                          .in_bias = view(d->x_in_b, ATTNC_FLOAT64, 1, &b3),
                                          .out_weight = view(d->x_out_w, ATTNC_FLOAT64, 2, we),
                                          .out_bias = view(d->x_out_b, ATTNC_FLOAT64, 1, &be)};
        p.norm_cross = (attnc_norm_params){view(d->nw[1], ATTNC_FLOAT64, 1, &be),
                                           view(d->nb[1], ATTNC_FLOAT64, 1, &be)};
    }
    return p;
}

static double layer_loss(const attnc_layer_params *p, const attnc_layer_config *c, double *x, double *mem,
                         const double *cot) {
    int64_t bxe[3] = {LB, LL, LE}, bse[3] = {LB, LS, LE};
    double out[LB * LL * LE];
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 3, bxe), tm = view(mem, ATTNC_FLOAT64, 3, bse);
    attnc_tensor to = view(out, ATTNC_FLOAT64, 3, bxe);
    attnc_attn_masks causal = {.causal = 1};
    if (attnc_layer_forward(&to, NULL, NULL, NULL, &tx, &tm, p, c, &causal, NULL) != ATTNC_OK) return NAN;
    double l = 0;
    for (int i = 0; i < LB * LL * LE; i++) l += out[i] * cot[i];
    return l;
}

static void test_transformer_layer(void) {
    layer_data d;
    double *r = randn(sizeof(d) / sizeof(double), 31);
    memcpy(&d, r, sizeof d);
    free(r);
    for (size_t i = 0; i < sizeof d / sizeof(double); i++) ((double *)&d)[i] *= 0.5;
    attnc_layer_params p = layer_params(&d, 1);
    attnc_layer_config c = {.nhead = LH, .activation = ATTNC_ACT_GELU, .eps = 1e-5, .dropout = 0.2, .seed = 3};
    double *x = randn(LB * LL * LE, 32), *mem = randn(LB * LS * LE, 33), *cot = randn(LB * LL * LE, 34);
    int64_t bxe[3] = {LB, LL, LE}, bse[3] = {LB, LS, LE};
    int64_t nsaved = attnc_layer_saved_size(LB, LL, LS, LE, LF, LH, 1);
    double *saved = malloc((size_t)nsaved * sizeof *saved), out[LB * LL * LE], dx[LB * LL * LE];
    double dmem[LB * LS * LE];
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 3, bxe), tm = view(mem, ATTNC_FLOAT64, 3, bse);
    attnc_tensor to = view(out, ATTNC_FLOAT64, 3, bxe), ts = view(saved, ATTNC_FLOAT64, 1, &nsaved);
    attnc_tensor tdx = view(dx, ATTNC_FLOAT64, 3, bxe), tdm = view(dmem, ATTNC_FLOAT64, 3, bse);
    attnc_tensor tcot = view(cot, ATTNC_FLOAT64, 3, bxe);
    attnc_attn_masks causal = {.causal = 1};
    attnc_layer_params none = {0};
    CHECK(attnc_layer_forward(&to, NULL, NULL, &ts, &tx, &tm, &p, &c, &causal, NULL) == ATTNC_OK, "%s",
          attnc_last_error());
    CHECK(attnc_layer_backward(&tdx, &tdm, NULL, &none, NULL, &tcot, &ts, &tx, &tm, &p, &c, &causal, NULL) == ATTNC_OK,
          "%s", attnc_last_error());
    double worst = 0;
    for (int i = 0; i < LB * LL * LE; i++) {
        double keep = x[i], h = 1e-6;
        x[i] = keep + h;
        double lp = layer_loss(&p, &c, x, mem, cot);
        x[i] = keep - h;
        double lm = layer_loss(&p, &c, x, mem, cot);
        x[i] = keep;
        worst = fmax(worst, fabs((lp - lm) / (2 * h) - dx[i]));
    }
    CHECK(worst < 1e-7, "decoder layer dinput differs from finite differences by %g", worst);
    c.nhead = 3;
    CHECK(attnc_layer_forward(&to, NULL, NULL, NULL, &tx, &tm, &p, &c, &causal, NULL) == ATTNC_ERR_VALUE,
          "nhead not dividing d_model accepted");
    free(saved);
    free(x);
    free(mem);
    free(cot);
}

static void test_decode(void) {
    layer_data d[2];
    double *r = randn(2 * sizeof(layer_data) / sizeof(double), 41);
    memcpy(d, r, sizeof(d));
    free(r);
    double *emb = randn(LV * LE, 42), *pos = randn(8 * LE, 43), *ow = randn(LV * LE, 44);
    attnc_layer_params layers[2] = {layer_params(&d[0], 0), layer_params(&d[1], 0)};
    int64_t ve[2] = {LV, LE}, pe[2] = {8, LE};
    attnc_decoder m = {.layers = layers,
                       .nlayers = 2,
                       .config = {.nhead = LH, .activation = ATTNC_ACT_RELU, .eps = 1e-5, .norm_first = 1},
                       .embedding = view(emb, ATTNC_FLOAT64, 2, ve),
                       .positions = view(pos, ATTNC_FLOAT64, 2, pe),
                       .embed_scale = 1,
                       .out_weight = view(ow, ATTNC_FLOAT64, 2, ve)};
    int64_t prompt[LB * 2] = {1, 2, 3, 4}, bp[2] = {LB, 2}, tokens[LB * 8], lengths[LB], bt[2] = {LB, 6}, b = LB;
    attnc_tensor tp = view(prompt, ATTNC_INT64, 2, bp), tt = view(tokens, ATTNC_INT64, 2, bt);
    attnc_tensor tl = view(lengths, ATTNC_INT64, 1, &b), none = {0};
    for (int64_t beam = 1; beam <= 3; beam += 2) {
        attnc_decode_options o = {.max_new_tokens = 6, .eos = 0, .beam_size = beam, .length_penalty = 0.7};
        CHECK(attnc_decode(&tt, &tl, &m, &tp, &none, &none, &o) == ATTNC_OK, "%s", attnc_last_error());
        int valid = 1;
        for (int i = 0; i < LB * 6; i++) valid = valid && tokens[i] >= 0 && tokens[i] < LV;
        for (int i = 0; i < LB; i++) valid = valid && lengths[i] >= 1 && lengths[i] <= 6;
        CHECK(valid, "beam %lld: tokens or lengths out of range", (long long)beam);
    }
    attnc_decode_options o = {.max_new_tokens = 8, .eos = -1, .beam_size = 1};
    bt[1] = 8;
    attnc_tensor tt8 = view(tokens, ATTNC_INT64, 2, bt);
    CHECK(attnc_decode(&tt8, &tl, &m, &tp, &none, &none, &o) == ATTNC_ERR_VALUE, "too many tokens accepted");
    free(emb);
    free(pos);
    free(ow);
}

enum { RB = 2, RT = 3, RI = 2, RH = 3, RL = 2 };

/* LSTM and GRU under the sanitizers: two bidirectional layers over ragged
 * rows, forward and backward, and dinput against central differences. */
static double rnn_loss(attnc_rnn_config *c, attnc_rnn_weights *w, double *x, const attnc_tensor *tl,
                       const double *cot) {
    int64_t bti[3] = {RB, RT, RI}, bto[3] = {RB, RT, 2 * RH};
    double out[RB * RT * 2 * RH];
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 3, bti), to = view(out, ATTNC_FLOAT64, 3, bto), none = {0};
    if (attnc_rnn_forward(&to, &none, &none, &none, &tx, tl, &none, &none, w, RL * 2, c) != ATTNC_OK) return NAN;
    double l = 0;
    for (int i = 0; i < RB * RT * 2 * RH; i++) l += out[i] * cot[i];
    return l;
}

static void test_rnn(void) {
    for (int mode = 0; mode < 2; mode++) {
        int64_t G = (mode == 0 ? 4 : 3) * RH;
        double *params = randn((size_t)(RL * 2 * (G * 2 * RH + G * RH + 2 * G)), 50 + mode);
        double *grads = malloc((size_t)(RL * 2 * (G * 2 * RH + G * RH + 2 * G)) * sizeof *grads);
        attnc_rnn_weights w[RL * 2], g[RL * 2];
        double *p = params, *q = grads;
        for (int k = 0; k < RL * 2; k++) {
            int64_t in = k < 2 ? RI : 2 * RH, wi[2] = {G, in}, wh[2] = {G, RH};
            w[k].weight_ih = view(p, ATTNC_FLOAT64, 2, wi);
            g[k].weight_ih = view(q, ATTNC_FLOAT64, 2, wi);
            p += G * in;
            q += G * in;
            w[k].weight_hh = view(p, ATTNC_FLOAT64, 2, wh);
            g[k].weight_hh = view(q, ATTNC_FLOAT64, 2, wh);
            p += G * RH;
            q += G * RH;
            w[k].bias_ih = view(p, ATTNC_FLOAT64, 1, &G);
            g[k].bias_ih = view(q, ATTNC_FLOAT64, 1, &G);
            w[k].bias_hh = view(p + G, ATTNC_FLOAT64, 1, &G);
            g[k].bias_hh = view(q + G, ATTNC_FLOAT64, 1, &G);
            p += 2 * G;
            q += 2 * G;
        }
        attnc_rnn_config c = {.mode = (attnc_rnn_mode)mode,
                              .hidden_size = RH,
                              .num_layers = RL,
                              .bidirectional = 1,
                              .dropout = 0.3,
                              .seed = 9};
        double *x = randn(RB * RT * RI, 60), *cot = randn(RB * RT * 2 * RH, 61);
        int64_t lens[RB] = {3, 2}, nb = RB, bti[3] = {RB, RT, RI}, bto[3] = {RB, RT, 2 * RH};
        int64_t nsaved = attnc_rnn_saved_size(&c, RB, RT, RI);
        double *saved = malloc((size_t)nsaved * sizeof *saved), out[RB * RT * 2 * RH], dx[RB * RT * RI];
        attnc_tensor tx = view(x, ATTNC_FLOAT64, 3, bti), to = view(out, ATTNC_FLOAT64, 3, bto);
        attnc_tensor tl = view(lens, ATTNC_INT64, 1, &nb), ts = view(saved, ATTNC_FLOAT64, 1, &nsaved);
        attnc_tensor tdx = view(dx, ATTNC_FLOAT64, 3, bti), tcot = view(cot, ATTNC_FLOAT64, 3, bto), none = {0};
        CHECK(attnc_rnn_forward(&to, &none, &none, &ts, &tx, &tl, &none, &none, w, RL * 2, &c) == ATTNC_OK, "%s",
              attnc_last_error());
        CHECK(attnc_rnn_backward(&tdx, &none, &none, g, RL * 2, &tcot, &none, &none, &ts, &tx, &tl, &none, &none, w,
                                 RL * 2, &c) == ATTNC_OK,
              "%s", attnc_last_error());
        double worst = 0;
        for (int i = 0; i < RB * RT * RI; i++) {
            double keep = x[i], h = 1e-6;
            x[i] = keep + h;
            double lp = rnn_loss(&c, w, x, &tl, cot);
            x[i] = keep - h;
            double lm = rnn_loss(&c, w, x, &tl, cot);
            x[i] = keep;
            worst = fmax(worst, fabs((lp - lm) / (2 * h) - dx[i]));
        }
        CHECK(worst < 1e-7, "%s dinput differs from finite differences by %g", mode ? "gru" : "lstm", worst);
        lens[1] = 4;
        CHECK(attnc_rnn_forward(&to, &none, &none, &none, &tx, &tl, &none, &none, w, RL * 2, &c) == ATTNC_ERR_VALUE,
              "a length beyond RT accepted");
        lens[1] = 2;
        CHECK(attnc_rnn_forward(&to, &none, &none, &none, &tx, &tl, &none, &none, w, RL * 2 - 1, &c) == ATTNC_ERR_VALUE,
              "too few weight sets accepted");
        CHECK(attnc_rnn_backward(&tdx, &none, &none, g, RL * 2 + 1, &tcot, &none, &none, &ts, &tx, &tl, &none, &none, w,
                                 RL * 2, &c) == ATTNC_ERR_VALUE,
              "too many gradient sets accepted");
        free(params);
        free(grads);
        free(x);
        free(cot);
        free(saved);
    }
}

/* The float32 fused path (csrc/ops/rnn/rnn_fast.c, taken when H is a multiple of
 * the vector width) against the float64 BLAS path, forward and backward, over
 * ragged rows, on two threads: bidirectional (the directions side by side),
 * and one direction shared by the threads, split by units (40 rows) and by
 * rows (70 rows, chunks of about 16). */
enum { FT = 6, FH = 48 }; /* 3 blocks of 16 units */

/* FI 8: dx by BLAS in the AVX-512 build (fused in the AVX2 one); 16: fused. */
static void rnn_fused_case(int64_t FB, int bidir, int64_t FI) {
    int64_t D = bidir ? 2 : 1, nx = FB * FT * FI, no = FB * FT * D * FH;
    for (int mode = 0; mode < 2; mode++) {
        int64_t G = (mode == 0 ? 4 : 3) * FH, per = G * FI + G * FH + 2 * G, n = D * per;
        double *pd = randn((size_t)n, 70 + mode), *gd = malloc((size_t)n * sizeof *gd);
        float *pf = malloc((size_t)n * sizeof *pf), *gf = malloc((size_t)n * sizeof *gf);
        for (int64_t i = 0; i < n; i++) pf[i] = (float)pd[i];
        attnc_rnn_weights wd[2], wf[2], gwd[2], gwf[2];
        for (int k = 0; k < D; k++) {
            int64_t wi[2] = {G, FI}, wh[2] = {G, FH}, o = k * per;
            int64_t offs[4] = {o, o + G * FI, o + G * FI + G * FH, o + G * FI + G * FH + G};
            attnc_rnn_weights *sets[4] = {&wd[k], &wf[k], &gwd[k], &gwf[k]};
            void *bases[4] = {pd, pf, gd, gf};
            for (int s = 0; s < 4; s++) {
                attnc_dtype dt = s % 2 ? ATTNC_FLOAT32 : ATTNC_FLOAT64;
                size_t es = s % 2 ? sizeof(float) : sizeof(double);
                char *b = bases[s];
                sets[s]->weight_ih = view(b + offs[0] * es, dt, 2, wi);
                sets[s]->weight_hh = view(b + offs[1] * es, dt, 2, wh);
                sets[s]->bias_ih = view(b + offs[2] * es, dt, 1, &G);
                sets[s]->bias_hh = view(b + offs[3] * es, dt, 1, &G);
            }
        }
        attnc_rnn_config c = {.mode = (attnc_rnn_mode)mode, .hidden_size = FH, .num_layers = 1, .bidirectional = bidir};
        double *xd = randn((size_t)nx, 80), *cd = randn((size_t)no, 81);
        float *xf = malloc((size_t)nx * sizeof *xf), *cf = malloc((size_t)no * sizeof *cf);
        for (int64_t i = 0; i < nx; i++) xf[i] = (float)xd[i];
        for (int64_t i = 0; i < no; i++) cf[i] = (float)cd[i];
        int64_t *lens = malloc((size_t)FB * sizeof *lens), bti[3] = {FB, FT, FI}, bto[3] = {FB, FT, D * FH};
        for (int64_t b = 0; b < FB; b++) lens[b] = b == 0 ? FT : 1 + (b * 7) % FT;
        int64_t ns = attnc_rnn_saved_size(&c, FB, FT, FI);
        double *sd = malloc((size_t)ns * sizeof *sd), *od = malloc((size_t)no * sizeof *od);
        double *dxd = malloc((size_t)nx * sizeof *dxd);
        float *sf = malloc((size_t)ns * sizeof *sf), *of = malloc((size_t)no * sizeof *of);
        float *dxf = malloc((size_t)nx * sizeof *dxf);
        attnc_tensor tl = view(lens, ATTNC_INT64, 1, &FB), none = {0};
        attnc_tensor txd = view(xd, ATTNC_FLOAT64, 3, bti), tod = view(od, ATTNC_FLOAT64, 3, bto);
        attnc_tensor tsd = view(sd, ATTNC_FLOAT64, 1, &ns), tdxd = view(dxd, ATTNC_FLOAT64, 3, bti);
        attnc_tensor tcd = view(cd, ATTNC_FLOAT64, 3, bto);
        attnc_tensor txf = view(xf, ATTNC_FLOAT32, 3, bti), tof = view(of, ATTNC_FLOAT32, 3, bto);
        attnc_tensor tsf = view(sf, ATTNC_FLOAT32, 1, &ns), tdxf = view(dxf, ATTNC_FLOAT32, 3, bti);
        attnc_tensor tcf = view(cf, ATTNC_FLOAT32, 3, bto);
        CHECK(attnc_rnn_forward(&tod, &none, &none, &tsd, &txd, &tl, &none, &none, wd, D, &c) == ATTNC_OK &&
                  attnc_rnn_forward(&tof, &none, &none, &tsf, &txf, &tl, &none, &none, wf, D, &c) == ATTNC_OK &&
                  attnc_rnn_backward(&tdxd, &none, &none, gwd, D, &tcd, &none, &none, &tsd, &txd, &tl, &none, &none, wd,
                                     D, &c) == ATTNC_OK &&
                  attnc_rnn_backward(&tdxf, &none, &none, gwf, D, &tcf, &none, &none, &tsf, &txf, &tl, &none, &none, wf,
                                     D, &c) == ATTNC_OK,
              "fused rnn calls: %s", attnc_last_error());
        double wo = 0, wx = 0, wg = 0;
        for (int64_t i = 0; i < no; i++) wo = fmax(wo, fabs(of[i] - od[i]));
        for (int64_t i = 0; i < nx; i++) wx = fmax(wx, fabs(dxf[i] - dxd[i]));
        for (int64_t i = 0; i < n; i++) wg = fmax(wg, fabs(gf[i] - gd[i]) / fmax(1, fabs(gd[i])));
        CHECK(wo < 1e-5 && wx < 1e-4 && wg < 1e-4,
              "%s, B %lld, %s: float32 fused path vs float64: output %g, dinput %g, grads %g", mode ? "gru" : "lstm",
              (long long)FB, bidir ? "bidirectional" : "one direction", wo, wx, wg);
        void *owned[] = {pd, gd, pf, gf, xd, cd, xf, cf, lens, sd, od, dxd, sf, of, dxf};
        for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);
    }
}

static void test_rnn_fused(void) {
    attnc_set_num_threads(2);
    rnn_fused_case(5, 1, 8);
    rnn_fused_case(40, 0, 16);
    rnn_fused_case(70, 0, 16);
}

#include "test_seq2seq.h"
#include "test_captioner.h"
#include "test_ntm.h"
#include "test_pointer.h"
#include "test_tsp.h"
#include "test_hull.h"
#include "test_lstmn.h"
#include "test_pooling.h"
#include "test_attribution.h"
#include "test_conv.h"
#include "test_gated.h"
#include "test_rotary.h"
#include "test_linear_attention.h"
#include "test_lstm_cell.h"
#include "test_tile.h"
#include "test_empty.h"
#include "test_blas.h"
#include "test_fingerprint.h"

/* ---- optim ------------------------------------------------------------ */

/* Adam and AdamW against the update written out here (float64), over more
 * than one parallel block and two thread counts; then bad arguments. */
static void test_adam(void) {
    enum { N = 40000, STEPS = 3 };
    for (int decoupled = 0; decoupled < 2; decoupled++)
        for (int threads = 1; threads <= 2; threads++) {
            attnc_set_num_threads(threads);
            double *p = randn(N, 1), *m = calloc(N, sizeof *m), *v = calloc(N, sizeof *v);
            double *rp = randn(N, 1), *rm = calloc(N, sizeof *rm), *rv = calloc(N, sizeof *rv);
            int64_t shape[1] = {N};
            attnc_tensor tp = view(p, ATTNC_FLOAT64, 1, shape), tm = view(m, ATTNC_FLOAT64, 1, shape),
                         tv = view(v, ATTNC_FLOAT64, 1, shape);
            attnc_adam_options o =
                {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1, .decoupled = decoupled};
            for (int t = 1; t <= STEPS; t++) {
                double *g = randn(N, 10 + (uint64_t)t);
                attnc_tensor tg = view(g, ATTNC_FLOAT64, 1, shape);
                o.step = t;
                CHECK(attnc_adam_step(&tp, &tg, &tm, &tv, &o) == ATTNC_OK, "%s", attnc_last_error());
                for (int i = 0; i < N; i++) {
                    double gi = g[i];
                    if (decoupled)
                        rp[i] *= 1 - o.lr * o.weight_decay;
                    else
                        gi += o.weight_decay * rp[i];
                    rm[i] = 0.9 * rm[i] + 0.1 * gi;
                    rv[i] = 0.99 * rv[i] + 0.01 * gi * gi;
                    double mhat = rm[i] / (1 - pow(0.9, t)), vhat = rv[i] / (1 - pow(0.99, t));
                    rp[i] -= o.lr * mhat / (sqrt(vhat) + o.eps);
                }
                free(g);
            }
            CHECK(max_abs_diff(p, rp, N) < 1e-12, "adam (decoupled %d, %d threads) off by %g", decoupled, threads,
                  max_abs_diff(p, rp, N));
            CHECK(max_abs_diff(m, rm, N) < 1e-14 && max_abs_diff(v, rv, N) < 1e-14, "adam state");
            free(p), free(m), free(v), free(rp), free(rm), free(rv);
        }
    attnc_set_num_threads(2);
    double a[8] = {0}, b[8] = {0}, c[8] = {0};
    float f[8] = {0};
    int64_t n8[1] = {8}, n7[1] = {7};
    attnc_tensor ta = view(a, ATTNC_FLOAT64, 1, n8), tb = view(b, ATTNC_FLOAT64, 1, n8),
                 tc = view(c, ATTNC_FLOAT64, 1, n8), short_b = view(b, ATTNC_FLOAT64, 1, n7),
                 tf = view(f, ATTNC_FLOAT32, 1, n8), inside = view(a + 1, ATTNC_FLOAT64, 1, n7);
    attnc_adam_options o = {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .step = 1};
    CHECK(attnc_adam_step(&ta, &short_b, &tb, &tc, &o) == ATTNC_ERR_VALUE && strstr(attnc_last_error(), "grad") != NULL,
          "short grad: %s", attnc_last_error());
    CHECK(attnc_adam_step(&ta, &tf, &tb, &tc, &o) == ATTNC_ERR_TYPE && strstr(attnc_last_error(), "grad") != NULL,
          "float32 grad: %s", attnc_last_error());
    attnc_tensor ta7 = view(a, ATTNC_FLOAT64, 1, n7), tc7 = view(c, ATTNC_FLOAT64, 1, n7);
    CHECK(attnc_adam_step(&ta7, &short_b, &inside, &tc7, &o) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "share memory") != NULL,
          "overlap: %s", attnc_last_error());
    o.step = 0;
    CHECK(attnc_adam_step(&ta, &tb, &tc, &tc, &o) != ATTNC_OK, "step 0 accepted");
    o.step = 1, o.beta1 = 1;
    CHECK(attnc_adam_step(&ta, &tb, &tc, &tc, &o) != ATTNC_OK, "beta1 = 1 accepted");
}

int main(void) {
    test_rng();
    test_threads();
    test_softmax();
    test_attention();
    test_strided();
    test_hard();
    test_local();
    test_tile_gemm();
    test_tile_band();
    test_rows_f32();
    test_tanhf();
    test_blas_shim();
    test_blas_chunks();
    test_fingerprint();
    test_sdpa();
    test_sdpa_options();
    test_sdpa_masks();
    test_linear();
    test_token_layers();
    test_pointwise();
    test_transformer_layer();
    test_decode();
    test_rnn();
    test_rnn_fused();
    test_seq2seq();
    test_captioner();
    test_ntm();
    test_pointer();
    test_tsp();
    test_hull();
    test_lstmn();
    test_pooling();
    test_attribution();
    test_conv();
    test_gated();
    test_rotary();
    test_linear_attention();
    test_lstm_cell();
    test_adam();
    test_empty();
    attnc_set_num_threads(1); /* join the workers before exit */
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
