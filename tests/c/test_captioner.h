/* test_captioner.h: C unit tests of csrc/models/captioner (included by test_core.c).
 * A tiny float64 captioner: the backward against central finite differences
 * of L = sum(logits * cl) + sum(alphas * ca) (+ sum(dlogp * log alpha_s) in
 * the hard mode with fixed locations), for every parameter and feature;
 * softmax rows summing to one; greedy and beam decoding against the
 * teacher-forced forward; and errors. */
#include "../../csrc/models/captioner/captioner.h"

enum { CB = 2, CT = 3, CL = 3, CF = 2, CE = 2, CH = 3, CA = 2, CV = 4, CNP = 19 };

/* Shapes of the 19 parameters, in attnc_captioner_params order (n1 = 0: 1-D). */
static const int64_t cap_shapes[CNP][2] = {
    {CV, CE}, {CH, CF},          {CH, 0},      {CH, CF},    {CH, 0},     {CA, CF}, {CA, 0},  {CA, CH}, {1, CA}, {1, CH},
    {1, 0},   {4 * CH, CE + CF}, {4 * CH, CH}, {4 * CH, 0}, {4 * CH, 0}, {CE, CH}, {CE, CF}, {CV, CE}, {CV, 0}};

static int64_t cap_count(int k) { return cap_shapes[k][0] * (cap_shapes[k][1] ? cap_shapes[k][1] : 1); }

/* Point the 19 tensors of p into buf (laid out one after the other). */
static void cap_bind(attnc_captioner_params *p, double *buf) {
    attnc_tensor *slots[CNP] = {&p->embedding,  &p->init_h_w,   &p->init_h_b,     &p->init_c_w,    &p->init_c_b,
                                &p->att_feat_w, &p->att_feat_b, &p->att_hidden_w, &p->att_score_w, &p->gate_w,
                                &p->gate_b,     &p->w_ih,       &p->w_hh,         &p->b_ih,        &p->b_hh,
                                &p->out_h_w,    &p->out_z_w,    &p->out_w,        &p->out_b};
    for (int k = 0; k < CNP; k++) {
        *slots[k] = view(buf, ATTNC_FLOAT64, cap_shapes[k][1] ? 2 : 1, cap_shapes[k]);
        buf += cap_count(k);
    }
}

static int64_t cap_total(void) {
    int64_t n = 0;
    for (int k = 0; k < CNP; k++) n += cap_count(k);
    return n;
}

/* The inputs of the scalar the test differentiates (cp: NULL in soft mode). */
typedef struct {
    double *params, *feat;
    int64_t *tok, *samples;
    const attnc_captioner_config *c;
    const double *cl, *ca, *cp;
} cap_case;

/* L = sum(logits * cl) + sum(alphas * ca) (+ sum(cp * log alpha_s)), by a
 * forward without saving. */
static double cap_loss(const cap_case *k) {
    attnc_captioner_params p;
    cap_bind(&p, k->params);
    double logits[CB * CT * CV], alphas[CB * CT * CL];
    int64_t fs[3] = {CB, CL, CF}, ts[2] = {CB, CT}, ls[3] = {CB, CT, CV}, as[3] = {CB, CT, CL};
    attnc_tensor tf = view(k->feat, ATTNC_FLOAT64, 3, fs), tt = view(k->tok, ATTNC_INT64, 2, ts);
    attnc_tensor tl = view(logits, ATTNC_FLOAT64, 3, ls), ta = view(alphas, ATTNC_FLOAT64, 3, as);
    attnc_tensor tsm = view(k->samples, ATTNC_INT64, 2, ts), none = {0};
    if (attnc_captioner_forward(&tl, &ta, &tsm, &none, &tf, &tt, &p, k->c) != ATTNC_OK) return NAN;
    double L = 0;
    for (int i = 0; i < CB * CT * CV; i++) L += logits[i] * k->cl[i];
    for (int i = 0; i < CB * CT * CL; i++) L += alphas[i] * k->ca[i];
    if (k->cp)
        for (int i = 0; i < CB * CT; i++) L += k->samples[i] < 0 ? 0 : k->cp[i] * log(alphas[i * CL + k->samples[i]]);
    return L;
}

/* The largest gap between g (n) and the central differences of cap_loss in
 * x (n values of k's parameters or features, each restored). */
static double cap_fd_gap(const cap_case *k, double *x, const double *g, int64_t n) {
    double worst = 0, h = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = cap_loss(k);
        x[i] = keep - h;
        double lm = cap_loss(k);
        x[i] = keep;
        worst = fmax(worst, fabs((lp - lm) / (2 * h) - g[i]));
    }
    return worst;
}

static void test_captioner_gradients(attnc_caption_mode mode) {
    int64_t n = cap_total();
    double *params = randn((size_t)n, 101), *grads = calloc((size_t)n, sizeof *grads);
    double *feat = randn(CB * CL * CF, 102), *cl = randn(CB * CT * CV, 103), *ca = randn(CB * CT * CL, 104);
    double *cp = mode == ATTNC_CAPTION_SOFT ? NULL : randn(CB * CT, 105);
    for (int64_t i = 0; i < n; i++) params[i] *= 1.5;                                  /* reach the nonlinearities */
    int64_t tok[CB * CT] = {1, 3, 0, 1, 2, 2}, samples[CB * CT] = {0, 2, -1, 1, 1, 0}; /* -1: expectation */
    attnc_captioner_config c = {.mode = mode, .gate = 1, .seed = 0};
    attnc_captioner_params p, g;
    cap_bind(&p, params);
    cap_bind(&g, grads);
    int64_t saved_n = attnc_captioner_saved_size(CB, CT, CL, CF, CE, CH, CA);
    double *saved = calloc((size_t)saved_n, sizeof *saved), logits[CB * CT * CV], alphas[CB * CT * CL];
    double dfeat[CB * CL * CF];
    int64_t fs[3] = {CB, CL, CF}, ts[2] = {CB, CT}, ls[3] = {CB, CT, CV}, as[3] = {CB, CT, CL};
    attnc_tensor tf = view(feat, ATTNC_FLOAT64, 3, fs), tt = view(tok, ATTNC_INT64, 2, ts);
    attnc_tensor tl = view(logits, ATTNC_FLOAT64, 3, ls), ta = view(alphas, ATTNC_FLOAT64, 3, as);
    attnc_tensor tsm = view(samples, ATTNC_INT64, 2, ts), tsv = view(saved, ATTNC_FLOAT64, 1, &saved_n);
    attnc_tensor tcl = view(cl, ATTNC_FLOAT64, 3, ls), tca = view(ca, ATTNC_FLOAT64, 3, as);
    attnc_tensor tcp = cp ? view(cp, ATTNC_FLOAT64, 2, ts) : (attnc_tensor){0};
    attnc_tensor tdf = view(dfeat, ATTNC_FLOAT64, 3, fs);
    CHECK(attnc_captioner_forward(&tl, &ta, &tsm, &tsv, &tf, &tt, &p, &c) == ATTNC_OK, "%s", attnc_last_error());
    double worst_row = 0;
    for (int r = 0; r < CB * CT; r++) {
        double s = 0;
        for (int i = 0; i < CL; i++) s += alphas[r * CL + i];
        worst_row = fmax(worst_row, fabs(s - 1));
    }
    CHECK(worst_row < 1e-14, "attention weights do not sum to 1 (off by %g)", worst_row);
    CHECK(attnc_captioner_backward(&g, &tdf, &tcl, &tca, &tcp, &tsv, &tf, &tt, &tsm, &p, &c) == ATTNC_OK, "%s",
          attnc_last_error());
    cap_case k = {params, feat, tok, samples, &c, cl, ca, cp};
    double worst = cap_fd_gap(&k, params, grads, n);
    CHECK(worst < 1e-7, "captioner (mode %d) parameter gradients differ from finite differences by %g", (int)mode,
          worst);
    worst = cap_fd_gap(&k, feat, dfeat, CB * CL * CF);
    CHECK(worst < 1e-7, "captioner (mode %d) feature gradients differ from finite differences by %g", (int)mode, worst);
    free(params);
    free(grads);
    free(feat);
    free(cl);
    free(ca);
    free(cp);
    free(saved);
}

/* Greedy decoding equals the teacher-forced forward fed its own tokens, and
 * after a row's eos its tokens are eos and its weights 0; beam search; bad
 * arguments fail with a status and a message. */
static void test_captioner_decode_and_errors(void) {
    int64_t n = cap_total();
    double *params = randn((size_t)n, 201), *feat = randn(CB * CL * CF, 202);
    for (int64_t i = 0; i < n; i++) params[i] *= 2;
    attnc_captioner_params p;
    cap_bind(&p, params);
    attnc_captioner_config c = {.mode = ATTNC_CAPTION_SOFT, .gate = 1, .seed = 0};
    enum { ML = 4 };
    int64_t out[CB * ML], len[CB], fs[3] = {CB, CL, CF}, os[2] = {CB, ML}, oa[3] = {CB, ML, CL}, bs[1] = {CB};
    double dal[CB * ML * CL];
    attnc_tensor tf = view(feat, ATTNC_FLOAT64, 3, fs), to = view(out, ATTNC_INT64, 2, os);
    attnc_tensor tn = view(len, ATTNC_INT64, 1, bs), ta = view(dal, ATTNC_FLOAT64, 3, oa), none = {0};
    CHECK(attnc_captioner_generate(&to, &tn, &ta, &tf, &p, &c, 1, -1, 1, 0) == ATTNC_OK, "%s", attnc_last_error());
    CHECK(len[0] == ML && len[1] == ML, "decoding without eos gave lengths %lld, %lld", (long long)len[0],
          (long long)len[1]);
    /* the teacher-forced forward over [bos, out[:, :ML-1]] */
    int64_t tok[CB * ML], ts[2] = {CB, ML}, ls[3] = {CB, ML, CV};
    for (int b = 0; b < CB; b++)
        for (int t = 0; t < ML; t++) tok[b * ML + t] = t ? out[b * ML + t - 1] : 1;
    double logits[CB * ML * CV], alphas[CB * ML * CL];
    attnc_tensor tt = view(tok, ATTNC_INT64, 2, ts), tl = view(logits, ATTNC_FLOAT64, 3, ls);
    attnc_tensor tal = view(alphas, ATTNC_FLOAT64, 3, oa);
    CHECK(attnc_captioner_forward(&tl, &tal, &none, &none, &tf, &tt, &p, &c) == ATTNC_OK, "%s", attnc_last_error());
    int same = 1;
    for (int r = 0; r < CB * ML; r++) {
        int64_t best = 0;
        for (int64_t k = 1; k < CV; k++) best = logits[r * CV + k] > logits[r * CV + best] ? k : best;
        same &= best == out[r];
    }
    CHECK(same, "greedy tokens differ from the argmax of the teacher-forced logits");
    CHECK(max_abs_diff(alphas, dal, CB * ML * CL) < 1e-14, "decoder weights differ from the forward's");
    /* eos = row 0's second token: the same steps up to each row's end, then eos and zero weights */
    int64_t eos = out[1], ended[CB * ML], elen[CB];
    double eal[CB * ML * CL];
    attnc_tensor te = view(ended, ATTNC_INT64, 2, os), ten = view(elen, ATTNC_INT64, 1, bs);
    attnc_tensor tea = view(eal, ATTNC_FLOAT64, 3, oa);
    CHECK(attnc_captioner_generate(&te, &ten, &tea, &tf, &p, &c, 1, eos, 1, 0) == ATTNC_OK, "%s", attnc_last_error());
    int ends_ok = elen[0] <= 2;
    for (int b = 0; b < CB; b++)
        for (int t = 0; t < ML; t++)
            for (int i = 0; i < CL; i++) {
                int64_t r = b * ML + t;
                ends_ok &= t < elen[b] ? ended[r] == out[r] && eal[r * CL + i] == dal[r * CL + i]
                                       : ended[r] == eos && eal[r * CL + i] == 0;
            }
    CHECK(ends_ok, "greedy decoding with eos %lld: wrong tokens or weights around the ends (lengths %lld, %lld)",
          (long long)eos, (long long)elen[0], (long long)elen[1]);
    /* beam search: tokens in range; a full beam over ML = 1 step picks the argmax */
    CHECK(attnc_captioner_generate(&to, &tn, &ta, &tf, &p, &c, 1, 2, 3, 0.5) == ATTNC_OK, "%s", attnc_last_error());
    int in_range = 1;
    for (int b = 0; b < CB; b++) in_range &= len[b] >= 1 && len[b] <= ML;
    for (int r = 0; r < CB * ML; r++) in_range &= out[r] >= 0 && out[r] < CV;
    CHECK(in_range, "beam search tokens or lengths out of range");
    int64_t one[CB], os1[2] = {CB, 1}, oa1[3] = {CB, 1, CL};
    double al1[CB * CL];
    attnc_tensor to1 = view(one, ATTNC_INT64, 2, os1), ta1 = view(al1, ATTNC_FLOAT64, 3, oa1);
    CHECK(attnc_captioner_generate(&to1, &tn, &ta1, &tf, &p, &c, 1, -1, CV, 0) == ATTNC_OK && len[0] == 1 &&
              len[1] == 1 && one[0] == tok[1] && one[1] == tok[ML + 1], /* tok holds the greedy tokens, shifted */
          "a full one-step beam is not the greedy token");
    CHECK(max_abs_diff(al1, alphas, CL) < 1e-14 && max_abs_diff(al1 + CL, alphas + ML * CL, CL) < 1e-14,
          "beam weights differ from the forward's");
    one[0] = one[1] = -1;
    CHECK(attnc_captioner_generate(&to1, &tn, &none, &tf, &p, &c, 1, -1, CV, 0) == ATTNC_OK && one[0] == tok[1] &&
              one[1] == tok[ML + 1],
          "beam search without the weights output: %s", attnc_last_error());
    CHECK(attnc_captioner_generate(&to, &tn, &ta, &tf, &p, &c, 1, 2, 0, 0) == ATTNC_ERR_VALUE, "beam_size 0 accepted");
    /* errors */
    tok[3] = CV;
    CHECK(attnc_captioner_forward(&tl, &tal, &none, &none, &tf, &tt, &p, &c) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "tokens") != NULL,
          "an out-of-range token: %s", attnc_last_error());
    tok[3] = 0;
    attnc_captioner_config hard = {.mode = ATTNC_CAPTION_HARD_SAMPLE, .gate = 1, .seed = 5};
    CHECK(attnc_captioner_forward(&tl, &tal, &none, &none, &tf, &tt, &p, &hard) == ATTNC_ERR_TYPE &&
              strstr(attnc_last_error(), "samples") != NULL,
          "hard attention without samples: %s", attnc_last_error());
    CHECK(attnc_captioner_generate(&to, &tn, &ta, &tf, &p, &hard, 1, -1, 1, 0) == ATTNC_ERR_VALUE,
          "decoding with sampled attention accepted");
    CHECK(attnc_captioner_generate(&to, &tn, &ta, &tf, &p, &c, CV, -1, 1, 0) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "bos") != NULL,
          "bos out of range: %s", attnc_last_error());
    attnc_captioner_config nogate = {.mode = ATTNC_CAPTION_SOFT, .gate = 0, .seed = 0};
    CHECK(attnc_captioner_forward(&tl, &tal, &none, &none, &tf, &tt, &p, &nogate) == ATTNC_ERR_VALUE,
          "gate parameters accepted without a gate");
    p.w_hh.shape[0] = 4 * CH - 1;
    p.w_hh.strides[0] = CH;
    CHECK(attnc_captioner_forward(&tl, &tal, &none, &none, &tf, &tt, &p, &c) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "decoder.weight_hh") != NULL,
          "a misshapen weight: %s", attnc_last_error());
    free(params);
    free(feat);
}

/* Sampled locations: reproducible for a seed, different for another. */
static void test_captioner_sampling(void) {
    int64_t n = cap_total();
    double *params = randn((size_t)n, 301), *feat = randn(CB * CL * CF, 302);
    attnc_captioner_params p;
    cap_bind(&p, params);
    int64_t tok[CB * CT] = {0}, s1[CB * CT], s2[CB * CT], s3[CB * CT];
    int64_t fs[3] = {CB, CL, CF}, ts[2] = {CB, CT}, ls[3] = {CB, CT, CV}, as[3] = {CB, CT, CL};
    double logits[CB * CT * CV], alphas[CB * CT * CL];
    attnc_tensor tf = view(feat, ATTNC_FLOAT64, 3, fs), tt = view(tok, ATTNC_INT64, 2, ts);
    attnc_tensor tl = view(logits, ATTNC_FLOAT64, 3, ls), ta = view(alphas, ATTNC_FLOAT64, 3, as), none = {0};
    int64_t *outs[3] = {s1, s2, s3};
    uint64_t seeds[3] = {7, 7, 8};
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        attnc_captioner_config c = {.mode = ATTNC_CAPTION_HARD_SAMPLE, .gate = 1, .seed = seeds[k]};
        attnc_tensor tsm = view(outs[k], ATTNC_INT64, 2, ts);
        ok &= attnc_captioner_forward(&tl, &ta, &tsm, &none, &tf, &tt, &p, &c) == ATTNC_OK;
    }
    CHECK(ok, "%s", attnc_last_error());
    int same12 = 1, same13 = 1, in_range = 1;
    for (int i = 0; i < CB * CT; i++) {
        same12 &= s1[i] == s2[i];
        same13 &= s1[i] == s3[i];
        in_range &= s1[i] >= 0 && s1[i] < CL;
    }
    CHECK(same12 && in_range, "sampled locations not reproducible or out of range");
    CHECK(!same13, "another seed gave the same locations");
    /* expect_prob = 1: every row takes the expectation (location -1) */
    attnc_captioner_config all = {.mode = ATTNC_CAPTION_HARD_SAMPLE, .gate = 1, .seed = 7, .expect_prob = 1};
    attnc_tensor tsm = view(s3, ATTNC_INT64, 2, ts);
    CHECK(attnc_captioner_forward(&tl, &ta, &tsm, &none, &tf, &tt, &p, &all) == ATTNC_OK, "%s", attnc_last_error());
    int expected = 1;
    for (int i = 0; i < CB * CT; i++) expected &= s3[i] == -1;
    CHECK(expected, "expect_prob = 1 sampled a location");
    all.expect_prob = 1.5;
    CHECK(attnc_captioner_forward(&tl, &ta, &tsm, &none, &tf, &tt, &p, &all) == ATTNC_ERR_VALUE,
          "expect_prob 1.5 accepted");
    free(params);
    free(feat);
}

static void test_captioner(void) {
    test_captioner_gradients(ATTNC_CAPTION_SOFT);
    test_captioner_gradients(ATTNC_CAPTION_HARD_GIVEN);
    test_captioner_decode_and_errors();
    test_captioner_sampling();
}
