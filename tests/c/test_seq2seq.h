/* test_seq2seq.h: C unit tests of csrc/models/seq2seq (included by test_core.c):
 * the recurrent attention decoder's gradients against central finite
 * differences in float64 for every kind (the Luong kinds with and without
 * input feeding), its argument checks, and greedy decoding against the teacher-forced
 * forward fed its own tokens. */

#include <stdbool.h>

enum { S2_B = 3, S2_S = 4, S2_T = 3, S2_E = 2, S2_H = 3, S2_A = 2, S2_V = 5 };

/* Random weights of one kind, every array from one seed; He = H (so dot works). */
typedef struct {
    double emb[S2_V * S2_E], wih[4 * S2_H * (S2_E + S2_H)], whh[4 * S2_H * S2_H], bih[4 * S2_H], bhh[4 * S2_H];
    double bw[S2_H * S2_H], bb[S2_H], wq[S2_A * S2_H], wk[S2_A * S2_H], v[S2_A], watt[(S2_S + 1) * S2_H];
    double batt[S2_S + 1], wp[S2_A * S2_H], vp[S2_A], comb[S2_H * 2 * S2_H], ow[S2_V * 2 * S2_H], ob[S2_V];
} s2_params;

static void s2_fill(double *p, size_t n, uint64_t seed) {
    double *r = randn(n, seed);
    memcpy(p, r, n * sizeof *p);
    free(r);
}

/* The config of kind k (feed: Luong's input feeding). */
static attnc_s2s_config s2_config(attnc_s2s_attention k, bool feed) {
    attnc_s2s_config cfg = {.attention = k, .window = 1.5, .input_feeding = feed};
    return cfg;
}

/* The weights struct over p (grads: the same layout over g) for kind k
 * (feed: with input feeding; weight_ih (4H, E) without it for Luong kinds). */
static attnc_s2s_weights s2_weights(s2_params *p, attnc_s2s_attention k, bool feed) {
    bool luong = k >= ATTNC_S2S_DOT, additive = k == ATTNC_S2S_BAHDANAU || k == ATTNC_S2S_CONCAT;
    int64_t fin = luong && !feed ? 0 : S2_H, F = luong || k == ATTNC_S2S_NONE ? S2_H : 2 * S2_H;
    attnc_s2s_weights w = {0};
    w.embedding = view(p->emb, ATTNC_FLOAT64, 2, (int64_t[]){S2_V, S2_E});
    w.weight_ih = view(p->wih, ATTNC_FLOAT64, 2, (int64_t[]){4 * S2_H, S2_E + fin});
    w.weight_hh = view(p->whh, ATTNC_FLOAT64, 2, (int64_t[]){4 * S2_H, S2_H});
    w.bias_ih = view(p->bih, ATTNC_FLOAT64, 1, (int64_t[]){4 * S2_H});
    w.bias_hh = view(p->bhh, ATTNC_FLOAT64, 1, (int64_t[]){4 * S2_H});
    w.bridge_weight = view(p->bw, ATTNC_FLOAT64, 2, (int64_t[]){S2_H, S2_H});
    w.bridge_bias = view(p->bb, ATTNC_FLOAT64, 1, (int64_t[]){S2_H});
    if (additive) {
        w.query_weight = view(p->wq, ATTNC_FLOAT64, 2, (int64_t[]){S2_A, S2_H});
        w.key_weight = view(p->wk, ATTNC_FLOAT64, 2, (int64_t[]){S2_A, S2_H});
        w.v = view(p->v, ATTNC_FLOAT64, 1, (int64_t[]){S2_A});
    }
    if (k == ATTNC_S2S_LOCATION) {
        w.weight = view(p->watt, ATTNC_FLOAT64, 2, (int64_t[]){S2_S + 1, S2_H});
        w.bias = view(p->batt, ATTNC_FLOAT64, 1, (int64_t[]){S2_S + 1});
    } else if (k == ATTNC_S2S_GENERAL || k == ATTNC_S2S_LOCAL_M || k == ATTNC_S2S_LOCAL_P) {
        w.weight = view(p->watt, ATTNC_FLOAT64, 2, (int64_t[]){S2_H, S2_H});
    }
    if (k == ATTNC_S2S_LOCAL_P) {
        w.position_weight = view(p->wp, ATTNC_FLOAT64, 2, (int64_t[]){S2_A, S2_H});
        w.position_v = view(p->vp, ATTNC_FLOAT64, 1, (int64_t[]){S2_A});
    }
    if (luong) w.combine = view(p->comb, ATTNC_FLOAT64, 2, (int64_t[]){S2_H, 2 * S2_H});
    w.out_weight = view(p->ow, ATTNC_FLOAT64, 2, (int64_t[]){S2_V, F});
    w.out_bias = view(p->ob, ATTNC_FLOAT64, 1, (int64_t[]){S2_V});
    return w;
}

typedef struct {
    double mem[S2_B * S2_S * S2_H], fin[S2_B * S2_H], r[S2_B * S2_T * 2 * S2_H];
    int64_t len[S2_B], tgt[S2_B * S2_T];
} s2_inputs;

static void s2_inputs_init(s2_inputs *in) {
    s2_fill(in->mem, sizeof in->mem / sizeof(double), 31);
    s2_fill(in->fin, sizeof in->fin / sizeof(double), 32);
    s2_fill(in->r, sizeof in->r / sizeof(double), 33);
    int64_t len[S2_B] = {4, 2, 3};
    memcpy(in->len, len, sizeof len);
    for (int i = 0; i < S2_B; i++)
        for (int s = (int)len[i]; s < S2_S; s++)
            for (int k = 0; k < S2_H; k++) in->mem[(i * S2_S + s) * S2_H + k] = 0;
    for (int i = 0; i < S2_B * S2_T; i++) in->tgt[i] = (i * 3 + 1) % S2_V;
}

/* sum(features * r) of a forward; *saved_out (if not NULL) gets the saved
 * buffer (caller frees) and fed the tokens. */
static double s2_objective(s2_params *p, s2_inputs *in, attnc_s2s_attention k, bool feed, double **saved_out,
                           int64_t *fed) {
    attnc_s2s_weights w = s2_weights(p, k, feed);
    attnc_s2s_config cfg = s2_config(k, feed);
    int64_t F = w.out_weight.shape[1], n = attnc_s2s_saved_size(&cfg, &w, S2_B, S2_S, S2_T);
    double *saved = calloc((size_t)n, sizeof *saved), feat[S2_B * S2_T * 2 * S2_H];
    int64_t fed_local[S2_B * S2_T];
    attnc_tensor tf = view(feat, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_T, F});
    attnc_tensor ts = view(saved, ATTNC_FLOAT64, 1, &n), none = {0};
    attnc_tensor tfed = view(fed ? fed : fed_local, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T});
    attnc_tensor tm = view(in->mem, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_S, S2_H});
    attnc_tensor tfin = view(in->fin, ATTNC_FLOAT64, 2, (int64_t[]){S2_B, S2_H});
    attnc_tensor tl = view(in->len, ATTNC_INT64, 1, (int64_t[]){S2_B});
    attnc_tensor tt = view(in->tgt, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T});
    attnc_status st = attnc_s2s_forward(&tf, &none, &tfed, &ts, &tm, &tfin, &tl, &tt, &w, &cfg);
    if (st != ATTNC_OK) CHECK(0, "s2s forward (kind %d): %s", (int)k, attnc_last_error());
    double obj = 0;
    for (int64_t i = 0; i < S2_B * S2_T * F; i++) obj += feat[i] * in->r[i];
    if (saved_out)
        *saved_out = saved;
    else
        free(saved);
    return obj;
}

static void test_s2s_gradients(attnc_s2s_attention k, bool feed) {
    s2_params p, g;
    s2_fill((double *)&p, sizeof p / sizeof(double), 30 + (uint64_t)k);
    s2_inputs in;
    s2_inputs_init(&in);
    double *saved = NULL, dmem[S2_B * S2_S * S2_H], dfin[S2_B * S2_H];
    int64_t fed[S2_B * S2_T];
    s2_objective(&p, &in, k, feed, &saved, fed);
    attnc_s2s_weights w = s2_weights(&p, k, feed), gw = s2_weights(&g, k, feed);
    gw.out_weight.data = gw.out_bias.data = NULL;
    attnc_s2s_config cfg = s2_config(k, feed);
    int64_t F = w.out_weight.shape[1], n = attnc_s2s_saved_size(&cfg, &w, S2_B, S2_S, S2_T);
    attnc_tensor tdf = view(in.r, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_T, F});
    attnc_tensor ts = view(saved, ATTNC_FLOAT64, 1, &n), tfed = view(fed, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T});
    attnc_tensor tm = view(in.mem, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_S, S2_H});
    attnc_tensor tfin = view(in.fin, ATTNC_FLOAT64, 2, (int64_t[]){S2_B, S2_H});
    attnc_tensor tl = view(in.len, ATTNC_INT64, 1, (int64_t[]){S2_B});
    attnc_tensor tdm = view(dmem, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_S, S2_H});
    attnc_tensor tdfin = view(dfin, ATTNC_FLOAT64, 2, (int64_t[]){S2_B, S2_H});
    attnc_status st = attnc_s2s_backward(&tdm, &tdfin, &gw, &tdf, &ts, &tfed, &tm, &tfin, &tl, &w, &cfg);
    CHECK(st == ATTNC_OK, "s2s backward (kind %d, feed %d): %s", (int)k, (int)feed, attnc_last_error());
    free(saved);
    /* every present weight, the memory and final: central differences */
    attnc_tensor *ws[] = {&w.embedding,       &w.weight_ih,    &w.weight_hh,  &w.bias_ih, &w.bias_hh, &w.bridge_weight,
                          &w.bridge_bias,     &w.query_weight, &w.key_weight, &w.v,       &w.weight,  &w.bias,
                          &w.position_weight, &w.position_v,   &w.combine,    &tm,        &tfin};
    attnc_tensor *gs[] = {
        &gw.embedding,       &gw.weight_ih,    &gw.weight_hh,  &gw.bias_ih, &gw.bias_hh, &gw.bridge_weight,
        &gw.bridge_bias,     &gw.query_weight, &gw.key_weight, &gw.v,       &gw.weight,  &gw.bias,
        &gw.position_weight, &gw.position_v,   &gw.combine,    &tdm,        &tdfin};
    double worst = 0;
    for (size_t a = 0; a < sizeof ws / sizeof ws[0]; a++) {
        if (!ws[a]->data) continue;
        double *x = ws[a]->data, *gx = gs[a]->data;
        for (int64_t i = 0; i < attnc_numel(ws[a]); i++) {
            if (a == 15 && in.mem[i] == 0) continue; /* padding: its gradient is not defined by the objective */
            double old = x[i], eps = 1e-6;
            x[i] = old + eps;
            double up = s2_objective(&p, &in, k, feed, NULL, NULL);
            x[i] = old - eps;
            double down = s2_objective(&p, &in, k, feed, NULL, NULL);
            x[i] = old;
            double fd = (up - down) / (2 * eps);
            worst = fmax(worst, fabs(fd - gx[i]) / fmax(1, fabs(fd)));
        }
    }
    CHECK(worst < 1e-6, "s2s gradients (kind %d, feed %d) vs finite differences: worst %g", (int)k, (int)feed, worst);
}

/* Greedy tokens fed back by teacher forcing reproduce the decoder's choice. */
static void test_s2s_greedy(void) {
    s2_params p;
    s2_fill((double *)&p, sizeof p / sizeof(double), 40);
    s2_inputs in;
    s2_inputs_init(&in);
    attnc_s2s_weights w = s2_weights(&p, ATTNC_S2S_GENERAL, true);
    attnc_s2s_config cfg = s2_config(ATTNC_S2S_GENERAL, true);
    int64_t tok[S2_B * S2_T], olen[S2_B];
    double align[S2_B * S2_T * S2_S];
    attnc_tensor tt = view(tok, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T}),
                 tol = view(olen, ATTNC_INT64, 1, (int64_t[]){S2_B});
    attnc_tensor ta = view(align, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_T, S2_S});
    attnc_tensor tm = view(in.mem, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_S, S2_H});
    attnc_tensor tfin = view(in.fin, ATTNC_FLOAT64, 2, (int64_t[]){S2_B, S2_H});
    attnc_tensor tl = view(in.len, ATTNC_INT64, 1, (int64_t[]){S2_B});
    attnc_status st = attnc_s2s_generate(&tt, &tol, &ta, &tm, &tfin, &tl, &w, &cfg, 1, -1, 1, 0);
    CHECK(st == ATTNC_OK, "s2s generate: %s", attnc_last_error());
    for (int b = 0; b < S2_B; b++) {
        in.tgt[b * S2_T] = 1;
        for (int t = 1; t < S2_T; t++) in.tgt[b * S2_T + t] = tok[b * S2_T + t - 1];
    }
    double *saved = NULL, feat[S2_B * S2_T * S2_H];
    int64_t fed[S2_B * S2_T], n = attnc_s2s_saved_size(&cfg, &w, S2_B, S2_S, S2_T);
    s2_objective(&p, &in, ATTNC_S2S_GENERAL, true, &saved, fed);
    free(saved);
    saved = calloc((size_t)n, sizeof *saved);
    attnc_tensor tf = view(feat, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_T, S2_H}),
                 ts = view(saved, ATTNC_FLOAT64, 1, &n);
    attnc_tensor tfed = view(fed, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T}),
                 tgt = view(in.tgt, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T}), none = {0};
    CHECK(attnc_s2s_forward(&tf, &none, &tfed, &ts, &tm, &tfin, &tl, &tgt, &w, &cfg) == ATTNC_OK, "forward");
    int agree = 1;
    for (int b = 0; b < S2_B; b++)
        for (int t = 0; t < S2_T; t++) {
            int best = 0;
            double lb = -INFINITY;
            for (int v = 0; v < S2_V; v++) {
                double l = p.ob[v];
                for (int k = 0; k < S2_H; k++) l += p.ow[v * S2_H + k] * feat[(b * S2_T + t) * S2_H + k];
                if (l > lb) lb = l, best = v;
            }
            agree = agree && best == tok[b * S2_T + t];
        }
    CHECK(agree, "greedy tokens are the argmax of the teacher-forced logits");
    free(saved);
}

static void test_s2s_errors(void) {
    s2_params p;
    s2_fill((double *)&p, sizeof p / sizeof(double), 50);
    s2_inputs in;
    s2_inputs_init(&in);
    attnc_s2s_weights w = s2_weights(&p, ATTNC_S2S_BAHDANAU, false); /* bahdanau ignores input_feeding */
    attnc_s2s_config cfg = s2_config(ATTNC_S2S_BAHDANAU, false);
    double feat[S2_B * S2_T * 2 * S2_H], saved[1];
    int64_t fed[S2_B * S2_T], n = 1;
    attnc_tensor tf = view(feat, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_T, 2 * S2_H}),
                 ts = view(saved, ATTNC_FLOAT64, 1, &n);
    attnc_tensor tfed = view(fed, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T}), none = {0};
    attnc_tensor tm = view(in.mem, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_S, S2_H});
    attnc_tensor tfin = view(in.fin, ATTNC_FLOAT64, 2, (int64_t[]){S2_B, S2_H});
    attnc_tensor tl = view(in.len, ATTNC_INT64, 1, (int64_t[]){S2_B});
    attnc_tensor tt = view(in.tgt, ATTNC_INT64, 2, (int64_t[]){S2_B, S2_T});
    CHECK(attnc_s2s_forward(&tf, &none, &tfed, &ts, &tm, &tfin, &tl, &tt, &w, &cfg) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "saved"),
          "a short saved buffer is refused: %s", attnc_last_error());
    in.len[1] = 0;
    CHECK(attnc_s2s_forward(&tf, &none, &tfed, &ts, &tm, &tfin, &tl, &tt, &w, &cfg) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "lengths"),
          "a zero length is refused: %s", attnc_last_error());
    in.len[1] = 2;
    in.tgt[2] = S2_V;
    CHECK(attnc_s2s_forward(&tf, &none, &tfed, &ts, &tm, &tfin, &tl, &tt, &w, &cfg) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "tgt_in"),
          "an out-of-range token is refused: %s", attnc_last_error());
    w.v.data = NULL;
    CHECK(attnc_s2s_forward(&tf, &none, &tfed, &ts, &tm, &tfin, &tl, &tt, &w, &cfg) == ATTNC_ERR_TYPE &&
              strstr(attnc_last_error(), "v"),
          "a missing weight is refused: %s", attnc_last_error());
    attnc_s2s_weights fed_weights = s2_weights(&p, ATTNC_S2S_GENERAL, true);
    attnc_s2s_config no_feed = s2_config(ATTNC_S2S_GENERAL, false);
    tf = view(feat, ATTNC_FLOAT64, 3, (int64_t[]){S2_B, S2_T, S2_H});
    CHECK(attnc_s2s_forward(&tf, &none, &tfed, &ts, &tm, &tfin, &tl, &tt, &fed_weights, &no_feed) == ATTNC_ERR_VALUE &&
              strstr(attnc_last_error(), "weight_ih"),
          "input feeding's weight_ih without input feeding is refused: %s", attnc_last_error());
}

static void test_seq2seq(void) {
    attnc_s2s_attention kinds[] = {ATTNC_S2S_NONE,   ATTNC_S2S_BAHDANAU, ATTNC_S2S_DOT,     ATTNC_S2S_GENERAL,
                                   ATTNC_S2S_CONCAT, ATTNC_S2S_LOCATION, ATTNC_S2S_LOCAL_M, ATTNC_S2S_LOCAL_P};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        test_s2s_gradients(kinds[i], true);
        if (kinds[i] >= ATTNC_S2S_DOT) test_s2s_gradients(kinds[i], false);
    }
    test_s2s_greedy();
    test_s2s_errors();
}
