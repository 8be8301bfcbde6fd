/* test_gated.h: C unit tests of csrc/ops/nn/gated.c (included by test_core.c):
 * the gated activation tanh(a) sigmoid(b) against a plain loop (float64 and
 * float32, over several blocks and a ragged last one, saturated inputs
 * included), its backward against central differences, one missing output
 * gradient, thread-count independence, and the refusals. */

static void test_gated(void) {
    enum { GN = 3 * 4096 + 17 };
    int64_t n = GN;
    double *a = randn(GN, 801), *b = randn(GN, 802), *dy = randn(GN, 803);
    double *y = malloc(GN * sizeof *y), *da = malloc(GN * sizeof *da), *db = malloc(GN * sizeof *db);
    double *da1 = malloc(GN * sizeof *da1), *db1 = malloc(GN * sizeof *db1), *db2 = malloc(GN * sizeof *db2);
    float *af = malloc(GN * sizeof *af), *bf = malloc(GN * sizeof *bf), *yf = malloc(GN * sizeof *yf);
    for (int i = 0; i < GN; i++) {
        a[i] *= 4;
        b[i] *= 4;
    }
    a[0] = 40, b[0] = -40, a[1] = -40, b[1] = 40, a[2] = 0, b[2] = 0; /* saturated and zero */
    for (int i = 0; i < GN; i++) af[i] = (float)a[i], bf[i] = (float)b[i];
    attnc_tensor ta = view(a, ATTNC_FLOAT64, 1, &n), tb = view(b, ATTNC_FLOAT64, 1, &n);
    attnc_tensor ty = view(y, ATTNC_FLOAT64, 1, &n), tdy = view(dy, ATTNC_FLOAT64, 1, &n);
    attnc_tensor tda = view(da, ATTNC_FLOAT64, 1, &n), tdb = view(db, ATTNC_FLOAT64, 1, &n);
    CHECK(attnc_gated_forward(&ty, &ta, &tb) == ATTNC_OK, "%s", attnc_last_error());
    double worst = 0;
    for (int i = 0; i < GN; i++) worst = fmax(worst, fabs(y[i] - tanh(a[i]) / (1 + exp(-b[i]))));
    CHECK(worst < 1e-15, "gated forward float64 off by %g", worst);
    /* float32: the vectorised exp, within a few ulps of the exact value */
    attnc_tensor taf = view(af, ATTNC_FLOAT32, 1, &n), tbf = view(bf, ATTNC_FLOAT32, 1, &n);
    attnc_tensor tyf = view(yf, ATTNC_FLOAT32, 1, &n);
    CHECK(attnc_gated_forward(&tyf, &taf, &tbf) == ATTNC_OK, "%s", attnc_last_error());
    worst = 0;
    for (int i = 0; i < GN; i++) worst = fmax(worst, fabs(yf[i] - tanh((double)af[i]) / (1 + exp(-(double)bf[i]))));
    CHECK(worst < 1e-6, "gated forward float32 off by %g", worst);
    /* backward against central differences of sum(dy * y) */
    CHECK(attnc_gated_backward(&tda, &tdb, &tdy, &ta, &tb) == ATTNC_OK, "%s", attnc_last_error());
    double worst_a = 0, worst_b = 0, h = 1e-6;
    for (int i = 0; i < GN; i += 7) {
        double fa = (tanh(a[i] + h) - tanh(a[i] - h)) / (2 * h) / (1 + exp(-b[i])) * dy[i];
        double fb = tanh(a[i]) * (1 / (1 + exp(-(b[i] + h))) - 1 / (1 + exp(-(b[i] - h)))) / (2 * h) * dy[i];
        worst_a = fmax(worst_a, fabs(da[i] - fa));
        worst_b = fmax(worst_b, fabs(db[i] - fb));
    }
    CHECK(worst_a < 1e-8 && worst_b < 1e-8, "gated backward vs differences: da %g, db %g", worst_a, worst_b);
    CHECK(isfinite(da[0]) && isfinite(db[0]) && isfinite(da[1]) && isfinite(db[1]), "saturated gradient not finite");
    /* one gradient only; and the same bits on one thread */
    attnc_tensor tdb2 = view(db2, ATTNC_FLOAT64, 1, &n);
    CHECK(attnc_gated_backward(NULL, &tdb2, &tdy, &ta, &tb) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(memcmp(db, db2, GN * sizeof *db) == 0, "dgate alone differs");
    int threads = attnc_get_num_threads();
    attnc_set_num_threads(1);
    attnc_tensor tda1 = view(da1, ATTNC_FLOAT64, 1, &n), tdb1 = view(db1, ATTNC_FLOAT64, 1, &n);
    CHECK(attnc_gated_backward(&tda1, &tdb1, &tdy, &ta, &tb) == ATTNC_OK, "%s", attnc_last_error());
    attnc_set_num_threads(threads);
    CHECK(memcmp(da, da1, GN * sizeof *da) == 0 && memcmp(db, db1, GN * sizeof *db) == 0,
          "gated backward depends on the thread count");
    /* refusals */
    int64_t shorter = GN - 1, two[2] = {2, 3};
    attnc_tensor tshort = view(b, ATTNC_FLOAT64, 1, &shorter);
    CHECK(attnc_gated_forward(&ty, &ta, &tshort) == ATTNC_ERR_VALUE, "a shorter gate accepted");
    CHECK(attnc_gated_forward(&ty, &ta, &tbf) == ATTNC_ERR_TYPE, "mixed dtypes accepted");
    CHECK(attnc_gated_forward(&ty, &ta, NULL) == ATTNC_ERR_TYPE, "a missing gate accepted");
    CHECK(attnc_gated_backward(&tda, &tdb, NULL, &ta, &tb) == ATTNC_ERR_TYPE, "a missing doutput accepted");
    attnc_tensor strided = view(a, ATTNC_FLOAT64, 2, two), gate6 = view(b, ATTNC_FLOAT64, 2, two);
    attnc_tensor out6 = view(y, ATTNC_FLOAT64, 2, two);
    strided.strides[0] = 4;
    CHECK(attnc_gated_forward(&out6, &strided, &gate6) == ATTNC_ERR_LAYOUT, "a strided input accepted");
    free(a);
    free(b);
    free(dy);
    free(y);
    free(da);
    free(db);
    free(da1);
    free(db1);
    free(db2);
    free(af);
    free(bf);
    free(yf);
}
