/* test_rotary.h: C unit tests of csrc/ops/nn/rotary.c (included by
 * test_core.c): RoPE against plain loops written here (both layouts, a
 * partial rotary_dim, per-sequence positions broadcast over the heads),
 * the unit-stride rows against strided ones and in place, the backward as
 * the inverse turn, float32 against float64, thread-count independence over
 * blocks that start inside a sequence, and the refusals. */

/* y <- x turned at pos[b, l] (broadcast over heads): the definition, one
 * element at a time. */
static void rope_loops(double *y, const double *x, const double *pos, int64_t nb, int64_t nh, int64_t nl, int64_t nd,
                       int64_t R, double base, int interleaved) {
    for (int64_t b = 0; b < nb; b++)
        for (int64_t hh = 0; hh < nh; hh++)
            for (int64_t l = 0; l < nl; l++) {
                const double *xr = x + ((b * nh + hh) * nl + l) * nd;
                double *yr = y + ((b * nh + hh) * nl + l) * nd;
                for (int64_t k = 0; k < nd; k++) yr[k] = xr[k];
                for (int64_t i = 0; i < R / 2; i++) {
                    double angle = pos[b * nl + l] * pow(base, -2.0 * (double)i / (double)R);
                    int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + R / 2;
                    yr[ia] = xr[ia] * cos(angle) - xr[ib] * sin(angle);
                    yr[ib] = xr[ib] * cos(angle) + xr[ia] * sin(angle);
                }
            }
}

static void test_rotary(void) {
    enum { RO_B = 2, RO_H = 3, RO_L = 50, RO_D = 10, RO_N = RO_B * RO_H * RO_L * RO_D };
    const int64_t R = 8;
    const double base = 500.0;
    int64_t shape[4] = {RO_B, RO_H, RO_L, RO_D}, pshape[3] = {RO_B, 1, RO_L};
    double *x = randn(RO_N, 901), *y = malloc(RO_N * sizeof *y), *want = malloc(RO_N * sizeof *want);
    double *y1 = malloc(RO_N * sizeof *y1), *xt = malloc(RO_N * sizeof *xt), *back = malloc(RO_N * sizeof *back);
    double *pos = malloc(RO_B * RO_L * sizeof *pos);
    float *xf = malloc(RO_N * sizeof *xf), *yf = malloc(RO_N * sizeof *yf);
    for (int i = 0; i < RO_B * RO_L; i++)
        pos[i] = (double)(i % RO_L) + (i < RO_L ? 3.0 : 4000.0); /* offsets 3 and 4000 */
    for (int i = 0; i < RO_N; i++) xf[i] = (float)x[i];
    attnc_tensor tx = view(x, ATTNC_FLOAT64, 4, shape), ty = view(y, ATTNC_FLOAT64, 4, shape);
    attnc_tensor tpos = view(pos, ATTNC_FLOAT64, 3, pshape), tback = view(back, ATTNC_FLOAT64, 4, shape);
    for (int interleaved = 0; interleaved < 2; interleaved++) {
        rope_loops(want, x, pos, RO_B, RO_H, RO_L, RO_D, R, base, interleaved);
        CHECK(attnc_rotary_forward(&ty, &tx, &tpos, base, R, interleaved) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(max_abs_diff(y, want, RO_N) < 1e-12, "rotary (interleaved %d) off the loops by %g", interleaved,
              max_abs_diff(y, want, RO_N));
        /* the same turn from a strided input (the last dim's stride 2 over a
         * buffer holding x in its even elements) and in place */
        double *wide = malloc(2 * RO_N * sizeof *wide);
        for (int i = 0; i < RO_N; i++) wide[2 * i] = x[i], wide[2 * i + 1] = NAN;
        attnc_tensor tw = view(wide, ATTNC_FLOAT64, 4, shape);
        for (int k = 0; k < 4; k++) tw.strides[k] *= 2;
        attnc_tensor ty1 = view(y1, ATTNC_FLOAT64, 4, shape);
        CHECK(attnc_rotary_forward(&ty1, &tw, &tpos, base, R, interleaved) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(max_abs_diff(y1, y, RO_N) < 1e-14, "strided input differs from unit-stride rows");
        memcpy(xt, x, RO_N * sizeof *xt);
        attnc_tensor txt = view(xt, ATTNC_FLOAT64, 4, shape);
        CHECK(attnc_rotary_apply(&txt, &txt, &tpos, base, R, interleaved, 1.0) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(memcmp(xt, y, RO_N * sizeof *xt) == 0, "in place differs");
        free(wide);
        /* the backward turns back: the inverse rotation */
        CHECK(attnc_rotary_backward(&tback, &ty, &tpos, base, R, interleaved) == ATTNC_OK, "%s", attnc_last_error());
        CHECK(max_abs_diff(back, x, RO_N) < 1e-13, "backward is not the inverse turn");
        /* float32: the angles in double, rounded once */
        attnc_tensor txf = view(xf, ATTNC_FLOAT32, 4, shape), tyf = view(yf, ATTNC_FLOAT32, 4, shape);
        CHECK(attnc_rotary_forward(&tyf, &txf, &tpos, base, R, interleaved) == ATTNC_OK, "%s", attnc_last_error());
        double worst = 0;
        for (int i = 0; i < RO_N; i++) worst = fmax(worst, fabs((double)yf[i] - want[i]));
        CHECK(worst < 1e-5, "float32 rotary off by %g", worst);
        /* blocks of 64 rows start inside a sequence: the same bits on 1 thread */
        int threads = attnc_get_num_threads();
        attnc_set_num_threads(1);
        CHECK(attnc_rotary_forward(&ty1, &tx, &tpos, base, R, interleaved) == ATTNC_OK, "%s", attnc_last_error());
        attnc_set_num_threads(threads);
        CHECK(memcmp(y1, y, RO_N * sizeof *y) == 0, "rotary depends on the thread count");
    }
    /* refusals */
    CHECK(attnc_rotary_forward(&ty, &tx, &tpos, base, 7, 0) == ATTNC_ERR_VALUE, "an odd rotary_dim accepted");
    CHECK(strstr(attnc_last_error(), "rotary_dim") != NULL, "message: %s", attnc_last_error());
    CHECK(attnc_rotary_forward(&ty, &tx, &tpos, -1.0, R, 0) == ATTNC_ERR_VALUE, "a negative base accepted");
    pos[5] = NAN;
    CHECK(attnc_rotary_forward(&ty, &tx, &tpos, base, R, 0) == ATTNC_ERR_VALUE, "a NaN position accepted");
    int64_t bad[3] = {RO_B, 2, RO_L};
    attnc_tensor tbad = view(pos, ATTNC_FLOAT64, 3, bad);
    CHECK(attnc_rotary_forward(&ty, &tx, &tbad, base, R, 0) == ATTNC_ERR_VALUE, "positions of 2 heads accepted");
    attnc_tensor tyf = view(yf, ATTNC_FLOAT32, 4, shape);
    CHECK(attnc_rotary_forward(&tyf, &tx, &tpos, base, R, 0) == ATTNC_ERR_TYPE, "mixed dtypes accepted");
    free(x);
    free(y);
    free(want);
    free(y1);
    free(xt);
    free(back);
    free(pos);
    free(xf);
    free(yf);
}
