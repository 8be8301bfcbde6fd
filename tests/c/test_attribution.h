/* test_attribution.h: C unit tests of csrc/ops/attribution (included by
 * test_core.c): rollout and relevance against plain loops, flow on a graph
 * solved by hand, thread-count independence, empty batches, and refusals. */

enum { ATN = 3, ATB = 2, ATH = 2, ATL = 4 };

/* A (ATL x ATL) <- B C. */
static void at_matmul(double *a, const double *b, const double *c) {
    for (int i = 0; i < ATL; i++)
        for (int j = 0; j < ATL; j++) {
            double s = 0;
            for (int k = 0; k < ATL; k++) s += b[i * ATL + k] * c[k * ATL + j];
            a[i * ATL + j] = s;
        }
}

/* Rollout of w (ATN, ATB, ATH, ATL, ATL), mean over heads, residual r, as loops. */
static void rollout_loops(const double *w, double r, double *out) {
    for (int b = 0; b < ATB; b++) {
        double roll[ATL * ATL], a[ATL * ATL], tmp[ATL * ATL];
        for (int l = 0; l < ATN; l++) {
            for (int i = 0; i < ATL; i++) {
                double sum = 0;
                for (int j = 0; j < ATL; j++) {
                    double m = 0;
                    for (int h = 0; h < ATH; h++) m += w[(((l * ATB + b) * ATH + h) * ATL + i) * ATL + j];
                    a[i * ATL + j] = (1 - r) * m / ATH + (i == j ? r : 0);
                    sum += a[i * ATL + j];
                }
                for (int j = 0; j < ATL; j++) a[i * ATL + j] /= sum;
            }
            if (l == 0) {
                memcpy(roll, a, sizeof roll);
            } else {
                at_matmul(tmp, a, roll);
                memcpy(roll, tmp, sizeof roll);
            }
        }
        memcpy(out + b * ATL * ATL, roll, sizeof roll);
    }
}

/* Relevance of w and g (ATN, ATB, ATH, ATL, ATL) as loops. */
static void relevance_loops(const double *w, const double *g, double *out) {
    for (int b = 0; b < ATB; b++) {
        double r[ATL * ATL] = {0}, abar[ATL * ATL], tmp[ATL * ATL];
        for (int i = 0; i < ATL; i++) r[i * ATL + i] = 1;
        for (int l = 0; l < ATN; l++) {
            for (int i = 0; i < ATL * ATL; i++) {
                double s = 0;
                for (int h = 0; h < ATH; h++) {
                    int64_t e = ((int64_t)(l * ATB + b) * ATH + h) * ATL * ATL + i;
                    s += fmax(w[e] * g[e], 0);
                }
                abar[i] = s / ATH;
            }
            at_matmul(tmp, abar, r);
            for (int i = 0; i < ATL * ATL; i++) r[i] += tmp[i];
        }
        memcpy(out + b * ATL * ATL, r, sizeof r);
    }
}

static void test_attribution(void) {
    int64_t n = ATN * ATB * ATH * ATL * ATL, ws[5] = {ATN, ATB, ATH, ATL, ATL}, os[3] = {ATB, ATL, ATL};
    double *w = randn((size_t)n, 901), *g = randn((size_t)n, 902), out[ATB * ATL * ATL], ref[ATB * ATL * ATL];
    for (int64_t i = 0; i < n; i++) w[i] = fabs(w[i]);
    attnc_tensor tw = view(w, ATTNC_FLOAT64, 5, ws), tg = view(g, ATTNC_FLOAT64, 5, ws),
                 to = view(out, ATTNC_FLOAT64, 3, os);
    CHECK(attnc_attention_rollout(&to, &tw, ATTNC_HEADS_MEAN, 0.3) == ATTNC_OK, "rollout: %s", attnc_last_error());
    rollout_loops(w, 0.3, ref);
    CHECK(max_abs_diff(out, ref, ATB * ATL * ATL) < 1e-14, "rollout differs: %g",
          max_abs_diff(out, ref, ATB * ATL * ATL));
    CHECK(attnc_attention_relevance(&to, &tw, &tg) == ATTNC_OK, "relevance: %s", attnc_last_error());
    relevance_loops(w, g, ref);
    CHECK(max_abs_diff(out, ref, ATB * ATL * ATL) < 1e-13, "relevance differs: %g",
          max_abs_diff(out, ref, ATB * ATL * ATL));

    /* Flow by hand: 2 layers, 2 positions, residual 0, A_1 = [.5 .5; .25 .75],
     * A_2 = [1 0; .5 .5]; from output 1 to input 0 two paths carry .5 and .25. */
    double small[8] = {0.5, 0.5, 0.25, 0.75, 1, 0, 0.5, 0.5}, f[4], want[4] = {0.5, 0.5, 0.75, 1.0};
    int64_t ss[5] = {2, 1, 1, 2, 2}, fs[3] = {1, 2, 2};
    attnc_tensor tsmall = view(small, ATTNC_FLOAT64, 5, ss), tf = view(f, ATTNC_FLOAT64, 3, fs);
    CHECK(attnc_attention_flow(&tf, &tsmall, ATTNC_HEADS_MEAN, 0) == ATTNC_OK, "flow: %s", attnc_last_error());
    CHECK(memcmp(f, want, sizeof f) == 0, "flow by hand: %g %g %g %g", f[0], f[1], f[2], f[3]);

    /* Thread count independence of the flow: the same bits on 1 and 3 threads. */
    double f1[ATB * ATL * ATL];
    attnc_tensor tf1 = view(f1, ATTNC_FLOAT64, 3, os);
    int threads = attnc_get_num_threads();
    attnc_set_num_threads(1);
    attnc_attention_flow(&tf1, &tw, ATTNC_HEADS_MAX, 0.5);
    attnc_set_num_threads(3);
    attnc_attention_flow(&to, &tw, ATTNC_HEADS_MAX, 0.5);
    attnc_set_num_threads(threads);
    CHECK(memcmp(out, f1, sizeof f1) == 0, "flow: thread count changes bits");

    /* An empty batch gives an empty result. */
    int64_t es[5] = {ATN, 0, ATH, ATL, ATL}, eo[3] = {0, ATL, ATL};
    attnc_tensor te = view(w, ATTNC_FLOAT64, 5, es), teo = view(out, ATTNC_FLOAT64, 3, eo);
    CHECK(attnc_attention_flow(&teo, &te, ATTNC_HEADS_MEAN, 0.5) == ATTNC_OK, "empty flow: %s", attnc_last_error());

    /* Refusals: a negative weight, a NaN gradient, a non-square stack, a residual
     * outside [0, 1], an unknown fusion, the wrong output shape, a missing grads. */
    w[7] = -1;
    CHECK(attnc_attention_rollout(&to, &tw, ATTNC_HEADS_MEAN, 0.5) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "negative") != NULL,
          "negative weight: %s", attnc_last_error());
    w[7] = 1, g[5] = NAN;
    CHECK(attnc_attention_relevance(&to, &tw, &tg) == ATTNC_ERR_VALUE && strstr(attnc_last_error(), "grads") != NULL,
          "NaN grad: %s", attnc_last_error());
    int64_t ns[5] = {ATN, ATB, ATH, ATL, ATL - 1};
    attnc_tensor tns = view(w, ATTNC_FLOAT64, 5, ns);
    CHECK(attnc_attention_rollout(&to, &tns, ATTNC_HEADS_MEAN, 0.5) == ATTNC_ERR_VALUE, "non-square accepted");
    CHECK(attnc_attention_flow(&to, &tw, ATTNC_HEADS_MEAN, 1.5) == ATTNC_ERR_VALUE, "residual 1.5 accepted");
    CHECK(attnc_attention_flow(&to, &tw, (attnc_head_fusion)7, 0.5) == ATTNC_ERR_VALUE, "fusion 7 accepted");
    CHECK(attnc_attention_rollout(&tf, &tw, ATTNC_HEADS_MEAN, 0.5) == ATTNC_ERR_VALUE, "a wrong output accepted");
    CHECK(attnc_attention_relevance(&to, &tw, NULL) == ATTNC_ERR_TYPE, "a missing grads accepted");
    free(w), free(g);
}
