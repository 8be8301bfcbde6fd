/* test_conv.h: C unit tests of csrc/ops/conv/conv.c (included by test_core.c):
 * the forward against a direct loop (float64 and float32, asymmetric
 * padding, strides, dilations, groups, the 1x1 identity path), gradients against
 * central finite differences, thread-count independence, and refusals. */

/* y (nbatch, Co, Ho, Wo) by the definition; output channel o reads the Ci / G
 * input channels of its group. */
static void conv_direct(double *y, const double *x, const double *w, const double *b, int64_t nbatch, int64_t Ci,
                        int64_t H, int64_t W, int64_t Co, int64_t kh, int64_t kw, const int64_t *s, const int64_t *p,
                        const int64_t *d, int64_t Ho, int64_t Wo, int64_t G) {
    int64_t cig = Ci / G;
    for (int64_t n = 0; n < nbatch; n++)
        for (int64_t o = 0; o < Co; o++)
            for (int64_t r = 0; r < Ho; r++)
                for (int64_t c = 0; c < Wo; c++) {
                    double acc = b ? b[o] : 0;
                    int64_t first = o / (Co / G) * cig; /* the group's first input channel */
                    for (int64_t i = 0; i < cig; i++)
                        for (int64_t u = 0; u < kh; u++)
                            for (int64_t v = 0; v < kw; v++) {
                                int64_t rr = r * s[0] - p[0] + u * d[0], cc = c * s[1] - p[2] + v * d[1];
                                if (rr >= 0 && rr < H && cc >= 0 && cc < W)
                                    acc += w[((o * cig + i) * kh + u) * kw + v] *
                                           x[((n * Ci + first + i) * H + rr) * W + cc];
                            }
                    y[((n * Co + o) * Ho + r) * Wo + c] = acc;
                }
}

static void test_conv(void) {
    struct {
        int64_t nbatch, Ci, H, W, Co, kh, kw, s[2], p[4], d[2], G;
    } cases[] = {
        {2, 3, 6, 7, 4, 3, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
        {3, 2, 7, 5, 3, 2, 3, {2, 1}, {0, 1, 2, 0}, {1, 2}, 1},
        {2, 4, 5, 5, 3, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},  /* the identity path */
        {2, 3, 1, 12, 2, 1, 3, {1, 1}, {0, 0, 4, 0}, {1, 2}, 1}, /* causal 1-d */
        {1, 2, 8, 9, 2, 3, 2, {3, 2}, {2, 0, 1, 1}, {2, 3}, 1},
        {2, 6, 5, 6, 4, 3, 2, {1, 2}, {1, 1, 0, 1}, {1, 1}, 2}, /* groups */
        {2, 4, 6, 5, 8, 3, 3, {2, 1}, {1, 1, 1, 1}, {1, 2}, 4}, /* depthwise, 2 outputs per channel */
        {2, 6, 4, 4, 3, 1, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 3}, /* groups on the identity path */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t nbatch = cases[ci].nbatch, Ci = cases[ci].Ci, H = cases[ci].H, W = cases[ci].W, Co = cases[ci].Co,
                kh = cases[ci].kh, kw = cases[ci].kw, G = cases[ci].G;
        const int64_t *s = cases[ci].s, *p = cases[ci].p, *d = cases[ci].d;
        int64_t Ho = (H + p[0] + p[1] - d[0] * (kh - 1) - 1) / s[0] + 1,
                Wo = (W + p[2] + p[3] - d[1] * (kw - 1) - 1) / s[1] + 1;
        size_t nx = (size_t)(nbatch * Ci * H * W), nw = (size_t)(Co * (Ci / G) * kh * kw),
               ny = (size_t)(nbatch * Co * Ho * Wo);
        double *x = randn(nx, 900 + ci), *w = randn(nw, 910 + ci), *b = randn((size_t)Co, 920 + ci),
               *dy = randn(ny, 930 + ci);
        double *y = malloc(ny * sizeof *y), *ref = malloc(ny * sizeof *ref), *dx = malloc(nx * sizeof *dx),
               *dw = malloc(nw * sizeof *dw), *db = malloc((size_t)Co * sizeof *db);
        const int64_t xs[4] = {nbatch, Ci, H, W}, ws[4] = {Co, Ci / G, kh, kw}, ys[4] = {nbatch, Co, Ho, Wo},
                      bs[1] = {Co};
        attnc_tensor tx = view(x, ATTNC_FLOAT64, 4, xs), tw = view(w, ATTNC_FLOAT64, 4, ws),
                     tb = view(b, ATTNC_FLOAT64, 1, bs), ty = view(y, ATTNC_FLOAT64, 4, ys),
                     tdy = view(dy, ATTNC_FLOAT64, 4, ys), tdx = view(dx, ATTNC_FLOAT64, 4, xs),
                     tdw = view(dw, ATTNC_FLOAT64, 4, ws), tdb = view(db, ATTNC_FLOAT64, 1, bs);
        CHECK(attnc_conv2d_forward(&ty, &tx, &tw, &tb, s, p, d, G) == ATTNC_OK, "conv case %d: %s", (int)ci,
              attnc_last_error());
        conv_direct(ref, x, w, b, nbatch, Ci, H, W, Co, kh, kw, s, p, d, Ho, Wo, G);
        CHECK(max_abs_diff(y, ref, ny) < 1e-12, "conv case %d forward: %g", (int)ci, max_abs_diff(y, ref, ny));
        CHECK(attnc_conv2d_backward(&tdx, &tdw, &tdb, &tdy, &tx, &tw, s, p, d, G) == ATTNC_OK, "conv bwd %d: %s",
              (int)ci, attnc_last_error());
        /* finite differences of L = sum(dy * y) (linear in each argument: exact up to rounding) */
        double err = 0, h = 1e-3;
        double *args[3] = {x, w, b}, *grads[3] = {dx, dw, db};
        size_t counts[3] = {nx, nw, (size_t)Co};
        for (int a = 0; a < 3; a++)
            for (size_t k = 0; k < counts[a]; k++) {
                double keep = args[a][k], lp = 0, lm = 0;
                args[a][k] = keep + h;
                conv_direct(ref, x, w, b, nbatch, Ci, H, W, Co, kh, kw, s, p, d, Ho, Wo, G);
                for (size_t q = 0; q < ny; q++) lp += dy[q] * ref[q];
                args[a][k] = keep - h;
                conv_direct(ref, x, w, b, nbatch, Ci, H, W, Co, kh, kw, s, p, d, Ho, Wo, G);
                for (size_t q = 0; q < ny; q++) lm += dy[q] * ref[q];
                args[a][k] = keep;
                err = fmax(err, fabs((lp - lm) / (2 * h) - grads[a][k]));
            }
        CHECK(err < 1e-9, "conv case %d gradients vs finite differences: %g", (int)ci, err);
        /* float32 against the float64 result, and the same bits with 1 and 3 threads */
        float *xf = malloc(nx * sizeof *xf), *wf = malloc(nw * sizeof *wf), *bf = malloc((size_t)Co * sizeof *bf),
              *dyf = malloc(ny * sizeof *dyf), *yf[2], *dxf[2], *dwf[2], *dbf[2];
        for (size_t k = 0; k < nx; k++) xf[k] = (float)x[k];
        for (size_t k = 0; k < nw; k++) wf[k] = (float)w[k];
        for (int64_t k = 0; k < Co; k++) bf[k] = (float)b[k];
        for (size_t k = 0; k < ny; k++) dyf[k] = (float)dy[k];
        for (int t = 0; t < 2; t++) {
            yf[t] = malloc(ny * sizeof(float));
            dxf[t] = malloc(nx * sizeof(float));
            dwf[t] = malloc(nw * sizeof(float));
            dbf[t] = malloc((size_t)Co * sizeof(float));
            attnc_set_num_threads(t ? 3 : 1);
            attnc_tensor fx = view(xf, ATTNC_FLOAT32, 4, xs), fw = view(wf, ATTNC_FLOAT32, 4, ws),
                         fb = view(bf, ATTNC_FLOAT32, 1, bs), fy = view(yf[t], ATTNC_FLOAT32, 4, ys),
                         fdy = view(dyf, ATTNC_FLOAT32, 4, ys), fdx = view(dxf[t], ATTNC_FLOAT32, 4, xs),
                         fdw = view(dwf[t], ATTNC_FLOAT32, 4, ws), fdb = view(dbf[t], ATTNC_FLOAT32, 1, bs);
            CHECK(attnc_conv2d_forward(&fy, &fx, &fw, &fb, s, p, d, G) == ATTNC_OK, "%s", attnc_last_error());
            CHECK(attnc_conv2d_backward(&fdx, &fdw, &fdb, &fdy, &fx, &fw, s, p, d, G) == ATTNC_OK, "%s",
                  attnc_last_error());
        }
        attnc_set_num_threads(2);
        double e32 = 0;
        for (size_t k = 0; k < ny; k++) e32 = fmax(e32, fabs(yf[0][k] - y[k]));
        for (size_t k = 0; k < nw; k++) e32 = fmax(e32, fabs(dwf[0][k] - dw[k]) / 10);
        CHECK(e32 < 1e-4, "conv case %d float32 vs float64: %g", (int)ci, e32);
        CHECK(memcmp(yf[0], yf[1], ny * sizeof(float)) == 0 && memcmp(dxf[0], dxf[1], nx * sizeof(float)) == 0 &&
                  memcmp(dwf[0], dwf[1], nw * sizeof(float)) == 0 &&
                  memcmp(dbf[0], dbf[1], (size_t)Co * sizeof(float)) == 0,
              "conv case %d depends on the thread count", (int)ci);
        for (int t = 0; t < 2; t++) {
            free(yf[t]);
            free(dxf[t]);
            free(dwf[t]);
            free(dbf[t]);
        }
        free(xf), free(wf), free(bf), free(dyf);
        /* only some gradients wanted */
        attnc_tensor none = {0};
        CHECK(attnc_conv2d_backward(&none, &tdw, &none, &tdy, &tx, &tw, s, p, d, G) == ATTNC_OK, "%s",
              attnc_last_error());
        free(x), free(w), free(b), free(dy), free(y), free(ref), free(dx), free(dw), free(db);
    }
    /* refusals */
    double buf[64] = {0};
    const int64_t xs[4] = {1, 2, 3, 3}, ws[4] = {1, 3, 2, 2}, ws2[4] = {1, 2, 4, 4}, ys[4] = {1, 1, 2, 2};
    const int64_t s1[2] = {1, 1}, s0[2] = {0, 1}, p0[4] = {0, 0, 0, 0}, pn[4] = {0, -1, 0, 0}, d1[2] = {1, 1};
    attnc_tensor tx = view(buf, ATTNC_FLOAT64, 4, xs), tw = view(buf, ATTNC_FLOAT64, 4, ws),
                 tw2 = view(buf, ATTNC_FLOAT64, 4, ws2), ty = view(buf, ATTNC_FLOAT64, 4, ys);
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s1, p0, d1, 1) == ATTNC_ERR_VALUE, "channel mismatch accepted");
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw2, NULL, s1, p0, d1, 1) == ATTNC_ERR_VALUE, "too large kernel accepted");
    CHECK(strstr(attnc_last_error(), "smaller than the dilated kernel") != NULL, "message: %s", attnc_last_error());
    tw = view(buf, ATTNC_FLOAT64, 4, (const int64_t[4]){1, 2, 2, 2});
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s0, p0, d1, 1) == ATTNC_ERR_VALUE, "stride 0 accepted");
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s1, pn, d1, 1) == ATTNC_ERR_VALUE, "negative padding accepted");
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s1, p0, d1, 1) == ATTNC_OK, "%s", attnc_last_error());
    attnc_tensor tyf = ty;
    tyf.dtype = ATTNC_FLOAT32;
    CHECK(attnc_conv2d_forward(&tyf, &tx, &tw, NULL, s1, p0, d1, 1) == ATTNC_ERR_TYPE, "dtype mismatch accepted");
    CHECK(attnc_conv2d_forward(&ty, &tx, NULL, NULL, s1, p0, d1, 1) == ATTNC_ERR_TYPE, "missing weight accepted");
    /* groups: 2 input channels in 2 groups take a (Cout, 1, kH, kW) weight; 3 groups do not divide them */
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s1, p0, d1, 2) == ATTNC_ERR_VALUE, "weight of groups=1 accepted");
    tw = view(buf, ATTNC_FLOAT64, 4, (const int64_t[4]){1, 1, 2, 2});
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s1, p0, d1, 2) == ATTNC_ERR_VALUE, "1 output in 2 groups accepted");
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s1, p0, d1, 3) == ATTNC_ERR_VALUE,
          "groups=3 of 2 channels accepted");
    CHECK(attnc_conv2d_forward(&ty, &tx, &tw, NULL, s1, p0, d1, 0) == ATTNC_ERR_VALUE, "groups=0 accepted");
}
