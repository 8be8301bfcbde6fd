/* test_pooling.h: C unit tests of csrc/ops/pooling/pooling.c (included by
 * test_core.c): the forward against plain loops, every gradient against
 * central differences of the loss L = sum(dc . c) + sum(da . alpha), a fully
 * masked row (zeros, no NaN), thread-count independence, and refusals. */

enum { PLB = 3, PLT = 5, PLD = 4, PLA = 3 };

/* The forward as plain loops: c (PLB, PLD), alpha (PLB, PLT). */
static void pool_loops(const double *h, const double *w, const double *b, const double *v, const uint8_t *mask,
                       double *c, double *alpha) {
    for (int bb = 0; bb < PLB; bb++) {
        double e[PLT], best = -INFINITY, sum = 0;
        for (int t = 0; t < PLT; t++) {
            e[t] = 0;
            for (int a = 0; a < PLA; a++) {
                double z = b[a];
                for (int k = 0; k < PLD; k++) z += w[a * PLD + k] * h[(bb * PLT + t) * PLD + k];
                e[t] += v[a] * tanh(z);
            }
            if (mask[bb * PLT + t] && e[t] > best) best = e[t];
        }
        for (int t = 0; t < PLT; t++) {
            alpha[bb * PLT + t] = mask[bb * PLT + t] ? exp(e[t] - best) : 0;
            sum += alpha[bb * PLT + t];
        }
        for (int k = 0; k < PLD; k++) c[bb * PLD + k] = 0;
        for (int t = 0; t < PLT; t++) {
            if (sum > 0) alpha[bb * PLT + t] /= sum;
            for (int k = 0; k < PLD; k++) c[bb * PLD + k] += alpha[bb * PLT + t] * h[(bb * PLT + t) * PLD + k];
        }
    }
}

static double pool_loss(const double *h, const double *w, const double *b, const double *v, const uint8_t *mask,
                        const double *dc, const double *da) {
    double c[PLB * PLD], alpha[PLB * PLT], L = 0;
    pool_loops(h, w, b, v, mask, c, alpha);
    for (int i = 0; i < PLB * PLD; i++) L += dc[i] * c[i];
    for (int i = 0; i < PLB * PLT; i++) L += da[i] * alpha[i];
    return L;
}

/* max |analytic - central difference| over every element of x (n). */
static double pool_fd(double *x, int n, const double *grad, double *h, double *w, double *b, double *v,
                      const uint8_t *mask, const double *dc, const double *da) {
    double worst = 0, eps = 1e-6;
    for (int i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + eps;
        double lp = pool_loss(h, w, b, v, mask, dc, da);
        x[i] = keep - eps;
        double lm = pool_loss(h, w, b, v, mask, dc, da);
        x[i] = keep;
        worst = fmax(worst, fabs((lp - lm) / (2 * eps) - grad[i]));
    }
    return worst;
}

static void test_pooling(void) {
    double *h = randn(PLB * PLT * PLD, 801), *w = randn(PLA * PLD, 802), *b = randn(PLA, 803), *v = randn(PLA, 804);
    double *dc = randn(PLB * PLD, 805), *da = randn(PLB * PLT, 806);
    uint8_t mask[PLB * PLT] = {1, 0, 1, 1, 0, /* row 1 fully masked */ 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
    double c[PLB * PLD], alpha[PLB * PLT], u[PLB * PLT * PLA], rc[PLB * PLD], ra[PLB * PLT];
    double dh[PLB * PLT * PLD], dw[PLA * PLD], db[PLA], dv[PLA];
    int64_t hs[3] = {PLB, PLT, PLD}, ws[2] = {PLA, PLD}, as[1] = {PLA}, cs[2] = {PLB, PLD}, ms[2] = {PLB, PLT},
            us[3] = {PLB, PLT, PLA};
    attnc_tensor th = view(h, ATTNC_FLOAT64, 3, hs), tw = view(w, ATTNC_FLOAT64, 2, ws),
                 tb = view(b, ATTNC_FLOAT64, 1, as), tv = view(v, ATTNC_FLOAT64, 1, as),
                 tm = view(mask, ATTNC_BOOL, 2, ms), tc = view(c, ATTNC_FLOAT64, 2, cs),
                 ta = view(alpha, ATTNC_FLOAT64, 2, ms), tu = view(u, ATTNC_FLOAT64, 3, us),
                 tdc = view(dc, ATTNC_FLOAT64, 2, cs), tda = view(da, ATTNC_FLOAT64, 2, ms),
                 tdh = view(dh, ATTNC_FLOAT64, 3, hs), tdw = view(dw, ATTNC_FLOAT64, 2, ws),
                 tdb = view(db, ATTNC_FLOAT64, 1, as), tdv = view(dv, ATTNC_FLOAT64, 1, as);
    CHECK(attnc_attention_pool_forward(&tc, &ta, &tu, &th, &tw, &tb, &tv, &tm) == ATTNC_OK, "pool forward: %s",
          attnc_last_error());
    pool_loops(h, w, b, v, mask, rc, ra);
    CHECK(max_abs_diff(c, rc, PLB * PLD) < 1e-12 && max_abs_diff(alpha, ra, PLB * PLT) < 1e-12,
          "pool forward differs: %g %g", max_abs_diff(c, rc, PLB * PLD), max_abs_diff(alpha, ra, PLB * PLT));
    int zeros = 1;
    for (int k = 0; k < PLD; k++) zeros &= c[PLD + k] == 0;
    for (int t = 0; t < PLT; t++) zeros &= alpha[PLT + t] == 0;
    CHECK(zeros, "pool: a fully masked row is not zero");
    CHECK(attnc_attention_pool_backward(&tdh, &tdw, &tdb, &tdv, &tdc, &tda, &th, &tw, &tv, &ta, &tu) == ATTNC_OK,
          "pool backward: %s", attnc_last_error());
    double eh = pool_fd(h, PLB * PLT * PLD, dh, h, w, b, v, mask, dc, da);
    double ew = pool_fd(w, PLA * PLD, dw, h, w, b, v, mask, dc, da);
    double eb = pool_fd(b, PLA, db, h, w, b, v, mask, dc, da);
    double ev = pool_fd(v, PLA, dv, h, w, b, v, mask, dc, da);
    CHECK(eh < 1e-7 && ew < 1e-7 && eb < 1e-7 && ev < 1e-7, "pool gradients: %g %g %g %g", eh, ew, eb, ev);

    /* Thread count independence: the same bits on 1 and 3 threads. */
    double dh1[PLB * PLT * PLD], dw1[PLA * PLD];
    attnc_tensor tdh1 = view(dh1, ATTNC_FLOAT64, 3, hs), tdw1 = view(dw1, ATTNC_FLOAT64, 2, ws);
    int threads = attnc_get_num_threads();
    attnc_set_num_threads(1);
    attnc_attention_pool_backward(&tdh1, &tdw1, NULL, NULL, &tdc, NULL, &th, &tw, &tv, &ta, &tu);
    attnc_set_num_threads(3);
    attnc_attention_pool_backward(&tdh, &tdw, NULL, NULL, &tdc, NULL, &th, &tw, &tv, &ta, &tu);
    attnc_set_num_threads(threads);
    CHECK(memcmp(dh, dh1, sizeof dh) == 0 && memcmp(dw, dw1, sizeof dw) == 0, "pool: thread count changes bits");

    /* Refusals: a weight of the wrong width, a float mask, a missing v. */
    int64_t bad[2] = {PLA, PLD - 1};
    attnc_tensor tbad = view(w, ATTNC_FLOAT64, 2, bad), tfm = view(alpha, ATTNC_FLOAT64, 2, ms);
    CHECK(attnc_attention_pool_forward(&tc, &ta, &tu, &th, &tbad, &tb, &tv, &tm) == ATTNC_ERR_VALUE,
          "pool: a bad weight accepted");
    CHECK(attnc_attention_pool_forward(&tc, &ta, &tu, &th, &tw, &tb, &tv, &tfm) == ATTNC_ERR_TYPE,
          "pool: a float mask accepted");
    CHECK(attnc_attention_pool_forward(&tc, &ta, &tu, &th, &tw, &tb, NULL, &tm) == ATTNC_ERR_TYPE,
          "pool: a missing v accepted");
    free(h), free(w), free(b), free(v), free(dc), free(da);
}
