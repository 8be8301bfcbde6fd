/* test_empty.h: empty batches through the kernels that once divided by a
 * zero batch dim (the additive score's batch offsets) or handed memcpy and
 * memset the NULL of an empty scratch buffer (the recurrent layers), under
 * the sanitizers: each call succeeds, writes nothing past its arrays, and
 * gives zero parameter gradients (a sum over no batch element). Empty
 * arrays point at a real buffer, as NumPy's do (NULL means absent). */

/* Every element of x[0..n) is 0. */
static int all_zero(const double *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 0) return 0;
    return 1;
}

/* The additive score and attention over a batch (B0, B1) with one of the
 * two dims 0 (the outer one, then the inner one, whose offsets took b % 0). */
static void empty_additive(const int64_t batch[2]) {
    enum { EQ = 3, EK = 4, ED = 2, EA = 3 };
    double q[1], k[1], v[1], s[1], w[1], ctx[1], dq[1], dk[1], dv[1], ds[1];
    double *wq = randn(ED * EA, 91), *wk = randn(ED * EA, 92), *va = randn(EA, 93);
    double dwq[ED * EA], dwk[ED * EA], dva[EA];
    memset(dwq, 0x7f, sizeof dwq), memset(dwk, 0x7f, sizeof dwk), memset(dva, 0x7f, sizeof dva);
    int64_t qs[4] = {batch[0], batch[1], EQ, ED}, ks[4] = {batch[0], batch[1], EK, ED};
    int64_t ss[4] = {batch[0], batch[1], EQ, EK}, cs[4] = {batch[0], batch[1], EQ, ED}, ws[2] = {ED, EA}, as[1] = {EA};
    attnc_tensor tq = view(q, ATTNC_FLOAT64, 4, qs), tk = view(k, ATTNC_FLOAT64, 4, ks);
    attnc_tensor tv = view(v, ATTNC_FLOAT64, 4, ks), ts = view(s, ATTNC_FLOAT64, 4, ss);
    attnc_tensor tw = view(w, ATTNC_FLOAT64, 4, ss), tc = view(ctx, ATTNC_FLOAT64, 4, cs);
    attnc_tensor tds = view(ds, ATTNC_FLOAT64, 4, ss), tdc = view(ds, ATTNC_FLOAT64, 4, cs);
    attnc_tensor tdq = view(dq, ATTNC_FLOAT64, 4, qs), tdk = view(dk, ATTNC_FLOAT64, 4, ks);
    attnc_tensor tdv = view(dv, ATTNC_FLOAT64, 4, ks);
    attnc_score_params sp = {.kind = ATTNC_SCORE_ADDITIVE,
                             .w_query = view(wq, ATTNC_FLOAT64, 2, ws),
                             .w_key = view(wk, ATTNC_FLOAT64, 2, ws),
                             .v = view(va, ATTNC_FLOAT64, 1, as)};
    attnc_score_grads g = {.w_query = view(dwq, ATTNC_FLOAT64, 2, ws),
                           .w_key = view(dwk, ATTNC_FLOAT64, 2, ws),
                           .v = view(dva, ATTNC_FLOAT64, 1, as)};
    CHECK(attnc_score_forward(&ts, &tq, &tk, &sp) == ATTNC_OK, "empty additive score: %s", attnc_last_error());
    CHECK(attnc_score_backward(&tdq, &tdk, &g, &tds, &tq, &tk, &sp) == ATTNC_OK, "its backward: %s",
          attnc_last_error());
    CHECK(all_zero(dwq, ED * EA) && all_zero(dwk, ED * EA) && all_zero(dva, EA),
          "batch (%lld, %lld): the additive score's parameter gradients are not zero", (long long)batch[0],
          (long long)batch[1]);
    memset(dva, 0x7f, sizeof dva);
    CHECK(attnc_attention_forward(&tc, &tw, &tq, &tk, &tv, &sp, NULL) == ATTNC_OK, "empty additive attention: %s",
          attnc_last_error());
    CHECK(attnc_attention_backward(&tdq, &tdk, &tdv, &g, &tdc, NULL, &tq, &tk, &tv, &tw, &sp) == ATTNC_OK,
          "its backward: %s", attnc_last_error());
    CHECK(all_zero(dva, EA), "batch (%lld, %lld): additive attention's dv is not zero", (long long)batch[0],
          (long long)batch[1]);
    free(wq), free(wk), free(va);
}

/* An LSTM or GRU (two layers, both directions, with initial and final
 * states) over a batch of 0, forward and backward, in dtype dt; H is a
 * multiple of every vector width, so float32 takes the fused kernels. */
static void empty_rnn(attnc_rnn_mode mode, attnc_dtype dt) {
    enum { EI = 16, EH = 16, EL = 2 };
    int64_t G = (mode == ATTNC_LSTM ? 4 : 3) * EH, per = G * 2 * EH + G * EH + 2 * G, n = EL * 2 * per;
    size_t es = dt == ATTNC_FLOAT32 ? sizeof(float) : sizeof(double);
    char *params = calloc((size_t)n, es), *grads = malloc((size_t)n * es);
    memset(grads, 0x7f, (size_t)n * es);
    attnc_rnn_weights w[EL * 2], g[EL * 2];
    for (int k = 0; k < EL * 2; k++) {
        int64_t in = k < 2 ? EI : 2 * EH, wi[2] = {G, in}, wh[2] = {G, EH}, o = k * per;
        int64_t offs[4] = {o, o + G * in, o + G * in + G * EH, o + G * in + G * EH + G};
        for (int s = 0; s < 2; s++) {
            attnc_rnn_weights *set = s ? &g[k] : &w[k];
            char *base = s ? grads : params;
            set->weight_ih = view(base + offs[0] * (int64_t)es, dt, 2, wi);
            set->weight_hh = view(base + offs[1] * (int64_t)es, dt, 2, wh);
            set->bias_ih = view(base + offs[2] * (int64_t)es, dt, 1, &G);
            set->bias_hh = view(base + offs[3] * (int64_t)es, dt, 1, &G);
        }
    }
    attnc_rnn_config c = {.mode = mode, .hidden_size = EH, .num_layers = EL, .bidirectional = 1};
    double empty[1];
    int64_t nsaved = attnc_rnn_saved_size(&c, 0, 3, EI), xs[3] = {0, 3, EI}, os[3] = {0, 3, 2 * EH};
    int64_t hs[3] = {EL * 2, 0, EH};
    void *saved = malloc((size_t)(nsaved ? nsaved : 1) * es);
    attnc_tensor tx = view(empty, dt, 3, xs), to = view(empty, dt, 3, os), th = view(empty, dt, 3, hs);
    attnc_tensor ts = view(saved, dt, 1, &nsaved), none = {0};
    attnc_tensor tc = mode == ATTNC_LSTM ? th : none;
    CHECK(attnc_rnn_forward(&to, &th, &tc, &ts, &tx, &none, &th, &tc, w, EL * 2, &c) == ATTNC_OK,
          "empty %s forward: %s", mode == ATTNC_LSTM ? "lstm" : "gru", attnc_last_error());
    CHECK(attnc_rnn_backward(&tx, &th, &tc, g, EL * 2, &to, &th, &tc, &ts, &tx, &none, &th, &tc, w, EL * 2, &c) ==
              ATTNC_OK,
          "empty %s backward: %s", mode == ATTNC_LSTM ? "lstm" : "gru", attnc_last_error());
    int zero = 1;
    for (int k = 0; k < EL * 2; k++) {
        const attnc_tensor *each[4] = {&g[k].weight_ih, &g[k].weight_hh, &g[k].bias_ih, &g[k].bias_hh};
        for (int i = 0; i < 4; i++)
            for (int64_t e = 0; e < attnc_numel(each[i]) * (int64_t)es; e++) zero &= ((char *)each[i]->data)[e] == 0;
    }
    CHECK(zero, "an empty %s batch (%s) gives non-zero parameter gradients", mode == ATTNC_LSTM ? "lstm" : "gru",
          attnc_dtype_name(dt));
    free(params), free(grads), free(saved);
}

static void test_empty(void) {
    attnc_set_num_threads(2);
    empty_additive((int64_t[2]){0, 3});
    empty_additive((int64_t[2]){3, 0});
    for (int mode = 0; mode < 2; mode++) {
        empty_rnn((attnc_rnn_mode)mode, ATTNC_FLOAT32);
        empty_rnn((attnc_rnn_mode)mode, ATTNC_FLOAT64);
    }
}
