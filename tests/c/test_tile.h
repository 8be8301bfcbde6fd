/* test_tile.h: the float32 tile products (core/tile_gemm.c), the AVX-512
 * row maximum and exp (core/rows_f32.h) and the tile loops' tanh
 * (core/simd.h), against plain double loops. Included by test_core.c. */
#include "../../csrc/core/rows_f32.h"
#include "../../csrc/core/simd.h"
#include "../../csrc/core/tile_gemm.h"

/* C (m, n) = alpha A B + beta C in double, A with strides (ars, acs), B (k, n) row stride ldb. */
static void tile_reference(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t ars, int64_t acs,
                           const float *b, int64_t ldb, float beta, const float *c0, int64_t ldc, double *out) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t kk = 0; kk < k; kk++) acc += (double)a[i * ars + kk * acs] * b[kk * ldb + j];
            out[i * n + j] = alpha * acc + (beta != 0 ? beta * (double)c0[i * ldc + j] : 0);
        }
}

static void test_tile_gemm(void) {
    if (!attnc_tile_sgemm_available()) {
        float one = 1;
        attnc_mat a = {&one, 1, 1, 1, 1};
        CHECK(!attnc_tile_sgemm(1, a, a, 0, a), "a build without the kernels claims a product");
        return;
    }
    const int64_t ms[] = {1, 5, 6, 13}, ns[] = {1, 15, 16, 17, 64, 65, 130}, ks[] = {0, 1, 7, 64, 130};
    const int64_t pad = 3; /* C's rows are wider than n: the padding must stay untouched */
    const float sentinel = 12345.0f;
    int ok = 1, untouched = 1, panels_ok = 1;
    for (int mi = 0; mi < 4; mi++)
        for (int ni = 0; ni < 7; ni++)
            for (int ki = 0; ki < 5; ki++)
                for (int variant = 0; variant < 3; variant++) {
                    int64_t m = ms[mi], n = ns[ni], k = ks[ki], ldc = n + pad;
                    bool transposed = variant == 1; /* A given as the transpose of a (k, m) array */
                    float alpha = 0.3f, beta = variant == 0 ? 0.0f : variant == 1 ? 1.0f : -0.5f;
                    size_t na = (size_t)(m * k + 1), nb = (size_t)(k * n + 1), nc = (size_t)(m * ldc);
                    float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
                    float *c0 = malloc(nc * sizeof *c0),
                          *panels = malloc((size_t)attnc_tile_panels_size(n, k + 1) * sizeof *panels);
                    double *ref = malloc((size_t)(m * n + 1) * sizeof *ref),
                           *da = randn(na + nb + nc, 40 + (uint64_t)mi);
                    for (size_t x = 0; x < na; x++) a[x] = (float)da[x];
                    for (size_t x = 0; x < nb; x++) b[x] = (float)da[na + x];
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < ldc; j++)
                            c0[i * ldc + j] = j < n ? (float)da[na + nb + (size_t)(i * ldc + j)] : sentinel;
                    int64_t ars = transposed ? 1 : k, acs = transposed ? m : 1;
                    tile_reference(m, n, k, alpha, a, ars, acs, b, n, beta, c0, ldc, ref);
                    memcpy(c, c0, nc * sizeof *c);
                    attnc_mat am = {a, m, k, ars, acs}, bm = {b, k, n, n, 1}, cm = {c, m, n, ldc, 1};
                    ok &= attnc_tile_sgemm(alpha, am, bm, beta, cm);
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < ldc; j++) {
                            if (j >= n) {
                                untouched &= c[i * ldc + j] == sentinel;
                                continue;
                            }
                            double want = ref[i * n + j];
                            ok &= fabs(c[i * ldc + j] - want) <= 1e-5 * (1 + fabs(want)) * (1 + (double)k / 16);
                        }
                    /* The same product with B^T given as panels of B's transpose (n, k). */
                    float *bt = malloc((size_t)(n * k + 1) * sizeof *bt);
                    for (int64_t kk = 0; kk < k; kk++)
                        for (int64_t j = 0; j < n; j++) bt[j * k + kk] = b[kk * n + j];
                    attnc_mat btm = {bt, n, k, k, 1};
                    attnc_tile_pack_panels(panels, btm);
                    float *c2 = malloc(nc * sizeof *c2);
                    memcpy(c2, c0, nc * sizeof *c2);
                    attnc_mat c2m = {c2, m, n, ldc, 1};
                    attnc_tile_sgemm_panels(alpha, am, panels, beta, c2m, ATTNC_TILE_DENSE);
                    panels_ok &= memcmp(c, c2, nc * sizeof *c) == 0; /* the same chains: the same bits */
                    free(a), free(b), free(c), free(c0), free(c2), free(bt), free(panels), free(ref), free(da);
                }
    CHECK(ok, "tile products differ from the double reference");
    CHECK(untouched, "tile products wrote past the last column");
    CHECK(panels_ok, "the panel form gives other bits than the plain one");
    /* B or C without a unit column stride: refused, left to BLAS. */
    float x[4] = {1, 2, 3, 4};
    attnc_mat sq = {x, 2, 2, 2, 1}, col = {x, 2, 2, 1, 2};
    CHECK(!attnc_tile_sgemm(1, sq, col, 0, sq) && !attnc_tile_sgemm(1, sq, sq, 0, col), "a strided B or C was taken");
}

/* Causal bands: with A zero outside each row's terms, the entries a band
 * wants equal the dense product's (beta applied once, even to rows with no
 * terms), and nothing is written past the columns. */
static void test_tile_band(void) {
    if (!attnc_tile_sgemm_available()) return;
    const attnc_tile_band bands[] = {
        {-(INT64_MAX / 4), 5, INT64_MAX / 4},   /* keys as terms (P V)                  */
        {-3, INT64_MAX / 4, INT64_MAX / 4},     /* queries as terms (P^T dO)            */
        {-(INT64_MAX / 4), INT64_MAX / 4, 4},   /* keys as columns (Q K^T)              */
        {-(INT64_MAX / 4), -10, INT64_MAX / 4}, /* the first rows have no terms at all */
        {140, INT64_MAX / 4, -20},              /* terms start past the first KC block  */
    };
    const int64_t m = 150, n = 70, k = 300, ldc = n + 2;
    int ok = 1;
    for (int bi = 0; bi < 5; bi++) {
        attnc_tile_band band = bands[bi];
        float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
        float *c = malloc((size_t)(m * ldc) * sizeof *c), *c0 = malloc((size_t)(m * ldc) * sizeof *c0);
        double *ref = malloc((size_t)(m * n) * sizeof *ref), *r = randn((size_t)(m * k + k * n + m * ldc), 60);
        for (int64_t i = 0; i < m; i++)
            for (int64_t kk = 0; kk < k; kk++)
                a[i * k + kk] = kk >= i + band.k_lo && kk < i + band.k_hi ? (float)r[i * k + kk] : 0.0f;
        for (int64_t x = 0; x < k * n; x++) b[x] = (float)r[m * k + x];
        for (int64_t x = 0; x < m * ldc; x++) c0[x] = x % ldc < n ? (float)r[m * k + k * n + x] : 12345.0f;
        memcpy(c, c0, (size_t)(m * ldc) * sizeof *c);
        tile_reference(m, n, k, 0.7f, a, k, 1, b, n, 0.5f, c0, ldc, ref);
        attnc_mat am = {a, m, k, k, 1}, bm = {b, k, n, n, 1}, cm = {c, m, n, ldc, 1};
        ok &= attnc_tile_sgemm_band(0.7f, am, bm, 0.5f, cm, band);
        /* The panel form (B^T packed), as Q K^T uses it: its columns' band shifts per panel. */
        float *bt = malloc((size_t)(k * n) * sizeof *bt), *c2 = malloc((size_t)(m * ldc) * sizeof *c2);
        float *panels = malloc((size_t)attnc_tile_panels_size(n, k) * sizeof *panels);
        for (int64_t kk = 0; kk < k; kk++)
            for (int64_t j = 0; j < n; j++) bt[j * k + kk] = b[kk * n + j];
        attnc_tile_pack_panels(panels, (attnc_mat){bt, n, k, k, 1});
        memcpy(c2, c0, (size_t)(m * ldc) * sizeof *c2);
        attnc_tile_sgemm_panels(0.7f, am, panels, 0.5f, (attnc_mat){c2, m, n, ldc, 1}, band);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                if (j >= n) {
                    ok &= c[i * ldc + j] == 12345.0f && c2[i * ldc + j] == 12345.0f;
                } else if (j < i + band.n_hi) {
                    double want = ref[i * n + j];
                    ok &= fabs(c[i * ldc + j] - want) <= 1e-5 * (1 + fabs(want)) * 10;
                    ok &= c2[i * ldc + j] == c[i * ldc + j];
                }
            }
        free(a), free(b), free(c), free(c0), free(ref), free(r), free(bt), free(c2), free(panels);
    }
    CHECK(ok, "banded tile products differ from the dense product within their band");
}

/* attnc_tanhf against tanh: within 3.5e-7 absolute and relative on a dense
 * sweep of [-12, 12] and on small arguments down to 1e-30, never past +-1
 * (the softcap's scores stay within the cap), odd; +-inf and the largest
 * floats give +-1, NaN of either sign stays NaN, -0 stays -0. */
static void test_tanhf(void) {
    double worst = 0, worst_x = 0;
    int bounded = 1, odd = 1;
    for (int64_t i = -2000000; i <= 2000000; i++) {
        float x = (float)((double)i * 6e-6);
        double y = attnc_tanhf(x), want = tanh((double)x), err = fabs(y - want) / fmax(1e-30, fmin(1, fabs(want)));
        if (err > worst) worst = err, worst_x = x;
        bounded &= fabs(y) <= 1;
        odd &= attnc_tanhf(-x) == -attnc_tanhf(x);
    }
    for (float x = 1e-30f; x < 0.1f; x *= 1.01f) {
        double err = fabs(attnc_tanhf(x) / tanh((double)x) - 1);
        if (err > worst) worst = err, worst_x = x;
    }
    CHECK(worst <= 3.5e-7, "attnc_tanhf differs from tanh by %g at %g", worst, worst_x);
    CHECK(bounded, "attnc_tanhf leaves [-1, 1]");
    CHECK(odd, "attnc_tanhf is not odd");
    float nz = attnc_tanhf(-0.0f);
    CHECK(attnc_tanhf(INFINITY) == 1 && attnc_tanhf(-INFINITY) == -1 && attnc_tanhf(3.4e38f) == 1 &&
              attnc_tanhf(-3.4e38f) == -1 && isnan(attnc_tanhf(NAN)) && isnan(attnc_tanhf(-NAN)) && nz == 0 &&
              signbit(nz),
          "attnc_tanhf edges: %g %g %g %g", attnc_tanhf(INFINITY), attnc_tanhf(-INFINITY), attnc_tanhf(NAN), nz);
}

static void test_rows_f32(void) {
#if ATTNC_ROWS_F32
    float x[40], y[40];
    int max_ok = 1, exp_ok = 1;
    for (int64_t n = 1; n <= 40; n++) {
        for (int64_t j = 0; j < n; j++) x[j] = (float)(3 * sin(0.7 * (double)(j + n)));
        x[(n * 7) % n] = -INFINITY; /* a masked key */
        double want = -1e300;
        for (int64_t j = 0; j < n; j++) want = fmax(want, x[j]);
        max_ok &= attnc_row_max_f32(x, n, -INFINITY) == (float)want;
        max_ok &= attnc_row_max_f32(x, n, 100.0f) == 100.0f;
        memcpy(y, x, sizeof x);
        double sum = 0;
        for (int64_t j = 0; j < n; j++) sum += exp((double)x[j] - 0.5);
        float got = attnc_row_exp_f32(y, n, 0.5f);
        exp_ok &= fabs(got - sum) <= 1e-6 * sum;
        for (int64_t j = 0; j < n; j++) {
            double e = exp((double)x[j] - 0.5);
            exp_ok &= fabs(y[j] - e) <= 2.5e-7 * e;
        }
    }
    CHECK(max_ok, "attnc_row_max_f32 differs from the plain maximum");
    CHECK(exp_ok, "attnc_row_exp_f32 differs from exp by more than 2 ulp");
    /* The edges: below the normal range 0, NaN kept (in the sum too) and ignored by the maximum. */
    float edge[7] = {-87.4f, -87.3f, -INFINITY, 0.0f, 88.0f, 88.8f, INFINITY};
    attnc_row_exp_f32(edge, 7, 0.0f);
    CHECK(edge[0] == 0 && edge[1] > 0 && edge[2] == 0 && edge[3] == 1 && fabs(edge[4] / exp(88.0) - 1) < 3e-7 &&
              isinf(edge[5]) && isinf(edge[6]),
          "exp edges: %g %g %g %g %g %g %g", edge[0], edge[1], edge[2], edge[3], edge[4], edge[5], edge[6]);
    /* tanh and the additive score v . tanh(q + k): small, ordinary, large and infinite arguments. */
    float q[40], k[40], v[40];
    int tanh_ok = 1, additive_ok = 1;
    for (int64_t n = 1; n <= 40; n++) {
        double want = 0, scale = 0;
        for (int64_t j = 0; j < n; j++) {
            q[j] = (float)(j % 4 == 0 ? 0.01 * sin((double)j) : 4 * sin(1.3 * (double)(j + n)));
            k[j] = j == 7 ? INFINITY : j == 9 ? -50.0f : (float)(0.02 * cos((double)j));
            v[j] = (float)cos(0.4 * (double)j);
            double t = tanh((double)(q[j] + k[j]));
            want += v[j] * t;
            scale += fabs(v[j]);
        }
        additive_ok &= fabs(attnc_additive_f32(q, k, v, n) - want) <= 1e-6 * scale;
    }
    for (int i = -400; i <= 400; i++) {
        float arg = (float)(i * 0.02) * (float)(i % 3 == 0 ? 0.05 : 1), t[16];
        _mm512_storeu_ps(t, attnc_tanh512(_mm512_set1_ps(arg)));
        tanh_ok &= fabs(t[0] - tanh((double)arg)) <= 3e-7 * (fabs(arg) < 0.0625 ? fabs(arg) / 0.0625 + 1e-3 : 1);
    }
    CHECK(tanh_ok, "attnc_tanh512 differs from tanh");
    /* The sigmoid: within 2 ulp over ordinary arguments; the clamped edges and NaN. */
    int sigmoid_ok = 1;
    for (int i = -1000; i <= 1000; i++) {
        float arg = (float)(i * 0.02), t[16];
        _mm512_storeu_ps(t, attnc_sigmoid512(_mm512_set1_ps(arg)));
        double want = 1 / (1 + exp(-(double)arg));
        sigmoid_ok &= fabs(t[0] - want) <= 2.4e-7 * want;
    }
    CHECK(sigmoid_ok, "attnc_sigmoid512 differs from the sigmoid by more than 2 ulp");
    float sig_in[16] = {-INFINITY, -100.0f, -87.0f, 87.0f, 100.0f, INFINITY, NAN, 0.0f}, sig[16];
    _mm512_storeu_ps(sig, attnc_sigmoid512(_mm512_loadu_ps(sig_in)));
    CHECK(sig[0] > 0 && sig[0] < 2e-38 && sig[1] == sig[0] && fabs(sig[2] / exp(-87.0) - 1) < 3e-7 && sig[3] == 1 &&
              sig[4] == 1 && sig[5] == 1 && isnan(sig[6]) && sig[7] == 0.5f,
          "sigmoid edges: %g %g %g %g %g %g %g %g", sig[0], sig[1], sig[2], sig[3], sig[4], sig[5], sig[6], sig[7]);
    CHECK(additive_ok, "attnc_additive_f32 differs from the double additive score");
    /* The factored form: e^{2q}, e^{2k} made once, tanh from their product (q + k near 0: the series). */
    int factored_ok = 1;
    float eq[40], ek[40];
    for (int64_t n = 1; n <= 40; n++) {
        double want = 0, scale = 0;
        for (int64_t j = 0; j < n; j++) {
            q[j] = (float)(j % 4 == 0 ? 0.01 * sin((double)j) : 4 * sin(1.3 * (double)(j + n)));
            k[j] = (float)(j % 4 == 0 ? 0.02 * cos((double)j) : 3 * cos(0.7 * (double)(j + 2 * n)));
            v[j] = (float)cos(0.4 * (double)j);
            want += v[j] * tanh((double)q[j] + (double)k[j]);
            scale += fabs(v[j]);
        }
        factored_ok &= attnc_exp2x_f32(eq, q, n) && attnc_exp2x_f32(ek, k, n);
        for (int64_t j = 0; j < n; j++) factored_ok &= fabs(eq[j] / exp(2.0 * q[j]) - 1) < 3e-7;
        factored_ok &= fabs(attnc_additive_exp2_f32(q, k, eq, ek, v, n) - want) <= 1.5e-6 * scale;
    }
    CHECK(factored_ok, "attnc_additive_exp2_f32 differs from the double additive score");
    float range[3] = {1.0f, -20.5f, 3.0f}, with_nan_r[2] = {NAN, 1.0f}, e3[3];
    CHECK(!attnc_exp2x_f32(e3, range, 3) && attnc_exp2x_f32(e3, range, 1) && !attnc_exp2x_f32(e3, with_nan_r, 2),
          "attnc_exp2x_f32's range flag: out of range or NaN must be reported");
    float with_nan[3] = {1.0f, NAN, 2.0f};
    CHECK(attnc_row_max_f32(with_nan, 3, -INFINITY) == 2.0f, "a NaN won the maximum");
    CHECK(isnan(attnc_row_exp_f32(with_nan, 3, 2.0f)) && isnan(with_nan[1]), "a NaN was lost");
#endif
}
