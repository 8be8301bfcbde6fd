/* test_linear_attention.h: C unit tests of csrc/ops/linear (included by
 * test_core.c): elu + 1 and FAVOR+ linear attention against the quadratic
 * form computed here (every score phi(q_i) . phi(k_j), masked, each row over
 * its sum + eps), a causal call decoded one key at a time through the state
 * (the same bits), the backward against central differences, thread-count
 * independence, and the refusals. */

enum { LA_B = 2, LA_H = 2, LA_L = 6, LA_E = 3, LA_V = 2, LA_M = 5 };

/* phi(x) (LA_E) into f: elu + 1, or FAVOR+ with w (LA_M, LA_E), unstabilised. */
static int la_phi(const double *x, const double *w, double *f) {
    if (!w) {
        for (int e = 0; e < LA_E; e++) f[e] = x[e] > 0 ? x[e] + 1 : exp(x[e]);
        return LA_E;
    }
    double s = pow(LA_E, -0.25), half = 0;
    for (int e = 0; e < LA_E; e++) half += s * x[e] * s * x[e] / 2;
    for (int m = 0; m < LA_M; m++) {
        double dot = 0;
        for (int e = 0; e < LA_E; e++) dot += w[m * LA_E + e] * s * x[e];
        f[m] = exp(dot - half) / sqrt(LA_M);
    }
    return LA_M;
}

/* The quadratic form of out (B, H, L, V). */
static void la_reference(const double *q, const double *k, const double *v, const double *w, int causal, double eps,
                         double *out) {
    for (int bh = 0; bh < LA_B * LA_H; bh++)
        for (int i = 0; i < LA_L; i++) {
            double fq[LA_M > LA_E ? LA_M : LA_E], fk[LA_M > LA_E ? LA_M : LA_E], num[LA_V] = {0}, den = eps;
            int F = la_phi(q + (bh * LA_L + i) * LA_E, w, fq);
            for (int j = 0; j < (causal ? i + 1 : LA_L); j++) {
                la_phi(k + (bh * LA_L + j) * LA_E, w, fk);
                double a = 0;
                for (int m = 0; m < F; m++) a += fq[m] * fk[m];
                den += a;
                for (int e = 0; e < LA_V; e++) num[e] += a * v[(bh * LA_L + j) * LA_V + e];
            }
            for (int e = 0; e < LA_V; e++) out[(bh * LA_L + i) * LA_V + e] = num[e] / den;
        }
}

static void test_linear_attention(void) {
    int64_t qs[4] = {LA_B, LA_H, LA_L, LA_E}, vs[4] = {LA_B, LA_H, LA_L, LA_V}, ws[2] = {LA_M, LA_E};
    int64_t one[4] = {LA_B, LA_H, 1, LA_E}, onev[4] = {LA_B, LA_H, 1, LA_V};
    int64_t smax[2] = {LA_B, LA_H};
    enum { NQ = LA_B * LA_H * LA_L * LA_E, NV = LA_B * LA_H * LA_L * LA_V };
    double *q = randn(NQ, 901), *k = randn(NQ, 902), *v = randn(NV, 903), *w = randn(LA_M * LA_E, 904);
    double *dout = randn(NV, 905), out[NV], ref[NV], dq[NQ], dk[NQ], dv[NV], dw[LA_M * LA_E];
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 4, qs), tk = view(k, ATTNC_FLOAT64, 4, qs);
    attnc_tensor tv = view(v, ATTNC_FLOAT64, 4, vs), tout = view(out, ATTNC_FLOAT64, 4, vs);
    attnc_tensor tdout = view(dout, ATTNC_FLOAT64, 4, vs), tdq = view(dq, ATTNC_FLOAT64, 4, qs);
    attnc_tensor tdk = view(dk, ATTNC_FLOAT64, 4, qs), tdv = view(dv, ATTNC_FLOAT64, 4, vs);
    attnc_tensor tdw = view(dw, ATTNC_FLOAT64, 2, ws);
    for (int favor = 0; favor < 2; favor++)
        for (int causal = 0; causal < 2; causal++) {
            attnc_linear_options o = {.feature_map = favor ? ATTNC_FEATURES_FAVOR : ATTNC_FEATURES_ELU,
                                      .causal = causal,
                                      .eps = 0.25};
            if (favor) o.projection = view(w, ATTNC_FLOAT64, 2, ws);
            const double *wr = favor ? w : NULL;
            CHECK(attnc_linear_attention_forward(&tout, NULL, &tq, &tk, &tv, &o) == ATTNC_OK, "%s", attnc_last_error());
            la_reference(q, k, v, wr, causal, 0.25, ref);
            CHECK(max_abs_diff(out, ref, NV) < 1e-13, "linear attention favor=%d causal=%d off by %g", favor, causal,
                  max_abs_diff(out, ref, NV));
            /* backward: sum(dout * out) by central differences, every entry of q, k, v (and w) */
            CHECK(attnc_linear_attention_backward(&tdq, &tdk, &tdv, favor ? &tdw : NULL, &tdout, &tq, &tk, &tv, &o) ==
                      ATTNC_OK,
                  "%s", attnc_last_error());
            double *args[4] = {q, k, v, w}, *grads[4] = {dq, dk, dv, dw}, worst = 0, h = 1e-6;
            int sizes[4] = {NQ, NQ, NV, LA_M * LA_E};
            for (int a = 0; a < 3 + favor; a++)
                for (int i = 0; i < sizes[a]; i++) {
                    double keep = args[a][i], lp = 0, lm = 0;
                    args[a][i] = keep + h;
                    la_reference(q, k, v, wr, causal, 0.25, ref);
                    for (int n = 0; n < NV; n++) lp += dout[n] * ref[n];
                    args[a][i] = keep - h;
                    la_reference(q, k, v, wr, causal, 0.25, ref);
                    for (int n = 0; n < NV; n++) lm += dout[n] * ref[n];
                    args[a][i] = keep;
                    worst = fmax(worst, fabs(grads[a][i] - (lp - lm) / (2 * h)));
                }
            CHECK(worst < 1e-7, "linear attention backward favor=%d causal=%d vs differences: %g", favor, causal,
                  worst);
            /* the same bits on one thread */
            double out1[NV], dq1[NQ];
            attnc_tensor tout1 = view(out1, ATTNC_FLOAT64, 4, vs), tdq1 = view(dq1, ATTNC_FLOAT64, 4, qs);
            int threads = attnc_get_num_threads();
            attnc_set_num_threads(1);
            CHECK(attnc_linear_attention_forward(&tout1, NULL, &tq, &tk, &tv, &o) == ATTNC_OK, "%s",
                  attnc_last_error());
            CHECK(attnc_linear_attention_backward(&tdq1, NULL, NULL, NULL, &tdout, &tq, &tk, &tv, &o) == ATTNC_OK, "%s",
                  attnc_last_error());
            attnc_set_num_threads(threads);
            CHECK(memcmp(out, out1, sizeof out) == 0 && memcmp(dq, dq1, sizeof dq) == 0,
                  "linear attention depends on the thread count");
            if (!causal) continue;
            /* decoding: one key at a time through the state gives the causal call's bits */
            double kv[LA_B * LA_H * LA_M * LA_V] = {0}, kz[LA_B * LA_H * LA_M] = {0}, mx[LA_B * LA_H];
            double qt[LA_B * LA_H * LA_E], kt[LA_B * LA_H * LA_E], vt[LA_B * LA_H * LA_V], ot[LA_B * LA_H * LA_V];
            for (int bh = 0; bh < LA_B * LA_H; bh++) mx[bh] = favor ? -INFINITY : 0;
            int64_t fkv[4] = {LA_B, LA_H, favor ? LA_M : LA_E, LA_V}, fk[3] = {LA_B, LA_H, favor ? LA_M : LA_E};
            attnc_linear_state st = {view(kv, ATTNC_FLOAT64, 4, fkv), view(kz, ATTNC_FLOAT64, 3, fk),
                                     view(mx, ATTNC_FLOAT64, 2, smax)};
            attnc_tensor tqt = view(qt, ATTNC_FLOAT64, 4, one), tkt = view(kt, ATTNC_FLOAT64, 4, one);
            attnc_tensor tvt = view(vt, ATTNC_FLOAT64, 4, onev), tot = view(ot, ATTNC_FLOAT64, 4, onev);
            int same = 1;
            for (int t = 0; t < LA_L; t++) {
                for (int bh = 0; bh < LA_B * LA_H; bh++) {
                    memcpy(qt + bh * LA_E, q + (bh * LA_L + t) * LA_E, LA_E * sizeof *q);
                    memcpy(kt + bh * LA_E, k + (bh * LA_L + t) * LA_E, LA_E * sizeof *k);
                    memcpy(vt + bh * LA_V, v + (bh * LA_L + t) * LA_V, LA_V * sizeof *v);
                }
                CHECK(attnc_linear_attention_forward(&tot, &st, &tqt, &tkt, &tvt, &o) == ATTNC_OK, "%s",
                      attnc_last_error());
                for (int bh = 0; bh < LA_B * LA_H; bh++)
                    same &= memcmp(ot + bh * LA_V, out + (bh * LA_L + t) * LA_V, LA_V * sizeof *out) == 0;
            }
            CHECK(same, "decoding favor=%d differs from the causal call", favor);
        }
    /* refusals */
    int64_t longer[4] = {LA_B, LA_H, LA_L + 1, LA_E};
    attnc_tensor tk7 = view(k, ATTNC_FLOAT64, 4, longer);
    attnc_linear_options causal = {.causal = 1, .eps = 1e-6}, bad_eps = {.eps = -1}, favor = {.feature_map = 1};
    CHECK(attnc_linear_attention_forward(&tout, NULL, &tq, &tk7, &tv, &causal) == ATTNC_ERR_VALUE,
          "causal with L != S accepted");
    CHECK(attnc_linear_attention_forward(&tout, NULL, &tq, &tk, &tv, &bad_eps) == ATTNC_ERR_VALUE,
          "a negative eps accepted");
    CHECK(attnc_linear_attention_forward(&tout, NULL, &tq, &tk, &tv, &favor) == ATTNC_ERR_TYPE,
          "favor+ without a projection accepted");
    attnc_linear_options plain = {.eps = 1e-6};
    attnc_linear_state st = {tout, tout, tout};
    CHECK(attnc_linear_attention_forward(&tout, &st, &tq, &tk, &tv, &plain) == ATTNC_ERR_VALUE,
          "a state without causal accepted");
    CHECK(attnc_linear_attention_backward(&tdq, NULL, NULL, &tdw, &tdout, &tq, &tk, &tv, &plain) == ATTNC_ERR_VALUE,
          "dprojection for elu accepted");
    free(q);
    free(k);
    free(v);
    free(w);
    free(dout);
}
