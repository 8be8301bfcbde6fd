/* test_lstmn.h: C unit tests of csrc/models/lstmn (included by test_core.c): the
 * LSTMN's backward against float64 central finite differences of every
 * parameter and the input (with variable lengths), attention rows that sum
 * to one over the past, float32 against float64, thread-count bitwise
 * independence, and refusals of bad arguments. */

enum { MNB = 3, MNT = 5, MNI = 3, MNH = 4, MNA = 3, MNP = 8 }; /* MNP: the input plus the 7 parameters */

static const int64_t lstmn_sizes[MNP] = {MNB * MNT * MNI, 4 * MNH * MNI, 4 * MNH * MNH, 4 * MNH,
                                         MNA * MNH,       MNA * MNI,     MNA * MNH,     MNA};
static const int64_t lstmn_lens[MNB] = {5, 3, 1};

/* Views of p (input, weight_ih, weight_hh, bias, attn_h, attn_x, attn_tilde, attn_v). */
static void lstmn_views(void **p, attnc_dtype dt, attnc_tensor *in, attnc_lstmn_params *pr) {
    int64_t si[3] = {MNB, MNT, MNI}, s1[2] = {4 * MNH, MNI}, s2[2] = {4 * MNH, MNH}, s3[1] = {4 * MNH},
            s4[2] = {MNA, MNH}, s5[2] = {MNA, MNI}, s7[1] = {MNA};
    *in = view(p[0], dt, 3, si);
    *pr = (attnc_lstmn_params){view(p[1], dt, 2, s1), view(p[2], dt, 2, s2), view(p[3], dt, 1, s3),
                               view(p[4], dt, 2, s4), view(p[5], dt, 2, s5), view(p[6], dt, 2, s4),
                               view(p[7], dt, 1, s7)};
}

static attnc_tensor lstmn_lengths_view(void) {
    int64_t s[1] = {MNB};
    return view((void *)lstmn_lens, ATTNC_INT64, 1, s);
}

/* sum(output * cot) of the float64 forward. */
static double lstmn_loss(double **p, const double *cot) {
    double out[MNB * MNT * MNH];
    int64_t so[3] = {MNB, MNT, MNH};
    attnc_tensor in, to = view(out, ATTNC_FLOAT64, 3, so), len = lstmn_lengths_view();
    attnc_lstmn_params pr;
    lstmn_views((void **)p, ATTNC_FLOAT64, &in, &pr);
    if (attnc_lstmn_forward(&to, NULL, NULL, &in, &len, &pr) != ATTNC_OK) return NAN;
    double s = 0;
    for (int i = 0; i < MNB * MNT * MNH; i++) s += out[i] * cot[i];
    return s;
}

static void test_lstmn_gradients(void) {
    double *p[MNP], *g[MNP];
    for (int a = 0; a < MNP; a++) {
        p[a] = randn((size_t)lstmn_sizes[a], 900 + (uint64_t)a);
        g[a] = calloc((size_t)lstmn_sizes[a], sizeof(double));
        for (int64_t i = 0; i < lstmn_sizes[a]; i++) p[a][i] *= a ? 1.5 : 1.0;
    }
    double *cot = randn(MNB * MNT * MNH, 999), out[MNB * MNT * MNH], attn[MNB * MNT * MNT];
    int64_t n_saved = attnc_lstmn_saved_size(MNB, MNT, MNH, MNA), so[3] = {MNB, MNT, MNH}, sa[3] = {MNB, MNT, MNT};
    double *saved = malloc((size_t)n_saved * sizeof(double));
    attnc_tensor in, din, to = view(out, ATTNC_FLOAT64, 3, so), ta = view(attn, ATTNC_FLOAT64, 3, sa),
                          tc = view(cot, ATTNC_FLOAT64, 3, so), ts = view(saved, ATTNC_FLOAT64, 1, &n_saved),
                          len = lstmn_lengths_view();
    attnc_lstmn_params pr, gr;
    lstmn_views((void **)p, ATTNC_FLOAT64, &in, &pr);
    lstmn_views((void **)g, ATTNC_FLOAT64, &din, &gr);
    CHECK(attnc_lstmn_forward(&to, &ta, &ts, &in, &len, &pr) == ATTNC_OK, "lstmn forward");
    CHECK(attnc_lstmn_backward(&gr, &din, &tc, &ts, &in, &len, &pr) == ATTNC_OK, "lstmn backward");
    /* attention rows: a distribution over the positions before t inside the row, else zero */
    int rows_ok = 1;
    for (int b = 0; b < MNB; b++)
        for (int t = 0; t < MNT; t++) {
            double s = 0, after = 0;
            for (int i = 0; i < MNT; i++) *(i < t ? &s : &after) += attn[(b * MNT + t) * MNT + i];
            double want = (t >= 1 && t < lstmn_lens[b]) ? 1 : 0;
            if (fabs(s - want) > 1e-12 || after != 0) rows_ok = 0;
        }
    CHECK(rows_ok, "lstmn attention rows sum to 1 over the past");
    CHECK(out[(1 * MNT + 4) * MNH] == 0 && out[(2 * MNT + 1) * MNH + 2] == 0, "lstmn padded outputs are 0");
    /* finite differences of every entry (the NTM tests' loop) */
    ntm_fd_check(lstmn_loss, p, g, lstmn_sizes, MNP, cot, 0, 1e-3, "lstmn");
    /* float32 against float64 */
    float *p32[MNP], out32[MNB * MNT * MNH];
    for (int a = 0; a < MNP; a++) {
        p32[a] = malloc((size_t)lstmn_sizes[a] * sizeof(float));
        for (int64_t i = 0; i < lstmn_sizes[a]; i++) p32[a][i] = (float)p[a][i];
    }
    attnc_tensor in32, to32 = view(out32, ATTNC_FLOAT32, 3, so);
    attnc_lstmn_params pr32;
    lstmn_views((void **)p32, ATTNC_FLOAT32, &in32, &pr32);
    CHECK(attnc_lstmn_forward(&to32, NULL, NULL, &in32, &len, &pr32) == ATTNC_OK, "lstmn float32 forward");
    double d = 0;
    for (int i = 0; i < MNB * MNT * MNH; i++) d = fmax(d, fabs(out32[i] - out[i]));
    CHECK(d < 1e-5, "lstmn float32 vs float64: %g", d);
    /* the same bits for 1 and 3 threads */
    double *g1[MNP];
    for (int a = 0; a < MNP; a++) g1[a] = malloc((size_t)lstmn_sizes[a] * sizeof(double));
    attnc_tensor din1;
    attnc_lstmn_params gr1;
    lstmn_views((void **)g1, ATTNC_FLOAT64, &din1, &gr1);
    int threads = attnc_get_num_threads();
    attnc_set_num_threads(3);
    attnc_lstmn_backward(&gr1, &din1, &tc, &ts, &in, &len, &pr);
    attnc_set_num_threads(threads);
    int same = 1;
    for (int a = 0; a < MNP; a++) same &= memcmp(g1[a], g[a], (size_t)lstmn_sizes[a] * sizeof(double)) == 0;
    CHECK(same, "lstmn backward: the same bits for 3 threads");
    /* refusals */
    int64_t bad_len[MNB] = {5, 6, 1}, sl[1] = {MNB};
    attnc_tensor tbl = view(bad_len, ATTNC_INT64, 1, sl);
    CHECK(attnc_lstmn_forward(&to, NULL, NULL, &in, &tbl, &pr) == ATTNC_ERR_VALUE, "lstmn refuses lengths > T");
    attnc_tensor short_saved = ts;
    short_saved.shape[0] -= 1;
    CHECK(attnc_lstmn_forward(&to, NULL, &short_saved, &in, &len, &pr) != ATTNC_OK, "lstmn refuses a short saved");
    attnc_lstmn_params wrong = pr;
    wrong.attn_x.shape[1] += 1;
    CHECK(attnc_lstmn_forward(&to, NULL, NULL, &in, &len, &wrong) != ATTNC_OK, "lstmn refuses a bad attn_x");
    attnc_lstmn_params nob = gr;
    nob.bias.data = NULL;
    CHECK(attnc_lstmn_backward(&nob, &din, &tc, &ts, &in, &len, &pr) == ATTNC_ERR_VALUE,
          "lstmn refuses a missing bias gradient");
    CHECK(attnc_lstmn_forward(&to, NULL, NULL, &in, &len, NULL) == ATTNC_ERR_TYPE, "lstmn refuses no parameters");
    for (int a = 0; a < MNP; a++) {
        free(p[a]);
        free(g[a]);
        free(g1[a]);
        free(p32[a]);
    }
    free(cot);
    free(saved);
}

static void test_lstmn(void) { test_lstmn_gradients(); }
