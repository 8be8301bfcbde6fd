/* test_ntm.h: C unit tests of csrc/models/ntm (included by test_core.c): float64
 * central finite differences of address, write and the whole NTM model,
 * the shift direction, and the model's refusals. */
#include "../../csrc/models/ntm/model.h"
#include "../../csrc/models/ntm/ntm.h"

/* sum(out * cot) over n entries. */
static double ntm_dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

enum { NB = 2, NH = 2, NN = 5, NM = 3, NK = 3 };

typedef double (*ntm_loss_fn)(double **p, const double *cot);

/* Central differences of loss_of (inputs p[0..n), cot fixed) against the
 * gradients g, every `step`-th entry of each input (step 0: every entry,
 * else 1 + size / step apart): the largest error must be <= 1e-6 of the
 * largest difference (at least floor). */
static void ntm_fd_check(ntm_loss_fn loss_of, double **p, double **g, const int64_t *sizes, int n, const double *cot,
                         int64_t step, double floor, const char *what) {
    const double eps = 1e-6;
    for (int a = 0; a < n; a++) {
        double err = 0, scale = floor;
        for (int64_t i = 0; i < sizes[a]; i += step ? 1 + sizes[a] / step : 1) {
            double x = p[a][i];
            p[a][i] = x + eps;
            double lp = loss_of(p, cot);
            p[a][i] = x - eps;
            double lm = loss_of(p, cot);
            p[a][i] = x;
            double num = (lp - lm) / (2 * eps);
            err = fmax(err, fabs(num - g[a][i]));
            scale = fmax(scale, fabs(num));
        }
        CHECK(err <= 1e-6 * scale, "%s gradient of input %d: error %g", what, a, err);
    }
}

/* The address inputs (key, beta, g, s, gamma, w_prev, memory) over flat buffers. */
static const int64_t ntm_sizes[7] = {NB * NH * NM, NB * NH, NB * NH, NB * NH * NK, NB * NH, NB * NH * NN, NB * NN * NM};

static attnc_ntm_address_args ntm_views(double **p) {
    const int64_t bhm[] = {NB, NH, NM}, bh[] = {NB, NH}, bhk[] = {NB, NH, NK}, bhn[] = {NB, NH, NN},
                  bnm[] = {NB, NN, NM};
    return (attnc_ntm_address_args){view(p[0], ATTNC_FLOAT64, 3, bhm), view(p[1], ATTNC_FLOAT64, 2, bh),
                                    view(p[2], ATTNC_FLOAT64, 2, bh),  view(p[3], ATTNC_FLOAT64, 3, bhk),
                                    view(p[4], ATTNC_FLOAT64, 2, bh),  view(p[5], ATTNC_FLOAT64, 3, bhn),
                                    view(p[6], ATTNC_FLOAT64, 3, bnm)};
}

/* L = sum(address(p) * cot). */
static double ntm_address_loss(double **p, const double *cot) {
    const int64_t bhn[] = {NB, NH, NN};
    double w[NB * NH * NN], wc[NB * NH * NN], wg[NB * NH * NN], wt[NB * NH * NN];
    attnc_tensor tw = view(w, ATTNC_FLOAT64, 3, bhn), tc = view(wc, ATTNC_FLOAT64, 3, bhn),
                 tg = view(wg, ATTNC_FLOAT64, 3, bhn), tt = view(wt, ATTNC_FLOAT64, 3, bhn);
    attnc_ntm_address_args in = ntm_views(p);
    if (attnc_ntm_address_forward(&tw, &tc, &tg, &tt, &in) != ATTNC_OK) return NAN;
    return ntm_dot(w, cot, NB * NH * NN);
}

static void test_ntm_address(void) {
    double *p[7], *g[7];
    for (int i = 0; i < 7; i++) {
        p[i] = randn((size_t)ntm_sizes[i], 100 + (uint64_t)i);
        g[i] = calloc((size_t)ntm_sizes[i], sizeof(double));
    }
    /* valid ranges: beta >= 0, g in [0,1], s and w_prev positive, gamma >= 1 */
    for (int i = 0; i < NB * NH; i++) {
        p[1][i] = 1.5 + p[1][i];
        p[2][i] = 0.5 + 0.4 * p[2][i];
        p[4][i] = 2 + 0.5 * p[4][i];
    }
    for (int i = 0; i < NB * NH * NK; i++) p[3][i] = 1.2 + p[3][i];
    for (int i = 0; i < NB * NH * NN; i++) p[5][i] = 1.2 + p[5][i];
    double *cot = randn(NB * NH * NN, 99);
    const int64_t bhn[] = {NB, NH, NN};
    double w[NB * NH * NN], wc[NB * NH * NN], wg[NB * NH * NN], wt[NB * NH * NN];
    attnc_tensor tw = view(w, ATTNC_FLOAT64, 3, bhn), tc = view(wc, ATTNC_FLOAT64, 3, bhn),
                 tg = view(wg, ATTNC_FLOAT64, 3, bhn), tt = view(wt, ATTNC_FLOAT64, 3, bhn),
                 tcot = view(cot, ATTNC_FLOAT64, 3, bhn);
    attnc_ntm_address_args in = ntm_views(p), gr = ntm_views(g);
    CHECK(attnc_ntm_address_forward(&tw, &tc, &tg, &tt, &in) == ATTNC_OK, "address forward");
    attnc_tensor none = {0};
    CHECK(attnc_ntm_address_backward(&gr, &tcot, &none, &none, &none, &in, &tw, &tc, &tg, &tt) == ATTNC_OK,
          "address backward");
    ntm_fd_check(ntm_address_loss, p, g, ntm_sizes, 7, cot, 0, 1, "address");
    /* bad input: even K, negative beta */
    p[1][0] = -1;
    CHECK(attnc_ntm_address_forward(&tw, &tc, &tg, &tt, &in) == ATTNC_ERR_VALUE, "negative beta");
    for (int i = 0; i < 7; i++) free(p[i]), free(g[i]);
    free(cot);
}

static double ntm_write_loss(double **p, const double *cot) {
    const int64_t bnm[] = {NB, NN, NM}, bhn[] = {NB, NH, NN}, bhm[] = {NB, NH, NM};
    double out[NB * NN * NM];
    attnc_tensor to = view(out, ATTNC_FLOAT64, 3, bnm), tm = view(p[0], ATTNC_FLOAT64, 3, bnm),
                 tw = view(p[1], ATTNC_FLOAT64, 3, bhn), te = view(p[2], ATTNC_FLOAT64, 3, bhm),
                 ta = view(p[3], ATTNC_FLOAT64, 3, bhm);
    if (attnc_ntm_write_forward(&to, &tm, &tw, &te, &ta) != ATTNC_OK) return NAN;
    return ntm_dot(out, cot, NB * NN * NM);
}

static void test_ntm_write(void) {
    const int64_t sizes[4] = {NB * NN * NM, NB * NH * NN, NB * NH * NM, NB * NH * NM};
    const int64_t bnm[] = {NB, NN, NM}, bhn[] = {NB, NH, NN}, bhm[] = {NB, NH, NM};
    double *p[4], *g[4];
    for (int i = 0; i < 4; i++) {
        p[i] = randn((size_t)sizes[i], 200 + (uint64_t)i);
        g[i] = calloc((size_t)sizes[i], sizeof(double));
    }
    double *cot = randn(NB * NN * NM, 98);
    attnc_tensor tm = view(p[0], ATTNC_FLOAT64, 3, bnm), tw = view(p[1], ATTNC_FLOAT64, 3, bhn),
                 te = view(p[2], ATTNC_FLOAT64, 3, bhm), ta = view(p[3], ATTNC_FLOAT64, 3, bhm),
                 tc = view(cot, ATTNC_FLOAT64, 3, bnm);
    attnc_tensor dm = view(g[0], ATTNC_FLOAT64, 3, bnm), dw = view(g[1], ATTNC_FLOAT64, 3, bhn),
                 de = view(g[2], ATTNC_FLOAT64, 3, bhm), da = view(g[3], ATTNC_FLOAT64, 3, bhm);
    CHECK(attnc_ntm_write_backward(&dm, &dw, &de, &da, &tc, &tm, &tw, &te, &ta) == ATTNC_OK, "write backward");
    ntm_fd_check(ntm_write_loss, p, g, sizes, 4, cot, 0, 1, "write");
    for (int i = 0; i < 4; i++) free(p[i]), free(g[i]);
    free(cot);
}

static void test_ntm_shift_direction(void) {
    const int64_t bhn[] = {1, 1, 4}, bhk[] = {1, 1, 3};
    double w[4] = {1, 0, 0, 0.5}, s[3] = {0, 0, 1}, out[4], odd[2] = {0.5, 0.5};
    attnc_tensor tw = view(w, ATTNC_FLOAT64, 3, bhn), ts = view(s, ATTNC_FLOAT64, 3, bhk),
                 to = view(out, ATTNC_FLOAT64, 3, bhn);
    CHECK(attnc_ntm_shift_forward(&to, &tw, &ts) == ATTNC_OK, "shift");
    CHECK(out[0] == 0.5 && out[1] == 1 && out[2] == 0 && out[3] == 0, "shift moves up by one");
    const int64_t bh2[] = {1, 1, 2};
    attnc_tensor te = view(odd, ATTNC_FLOAT64, 3, bh2);
    CHECK(attnc_ntm_shift_forward(&to, &tw, &te) == ATTNC_ERR_VALUE, "even K refused");
}

/* ---- the model ------------------------------------------------------------------ */

/* B 10 rows (two blocks of the time loop), T 4 steps, I 3, O 2, C 4, N 5, M 3,
 * one read and one write head, K 3: P = (M + K + 3) + (3M + K + 3) = 24. */
enum { MB = 10, MT = 4, MI = 3, MO = 2, MC = 4, MN = 5, MM = 3, MP = 24, MZ = MI + MM, MHR = MC + MM };

/* Parameters w_ih, w_hh, b_ih, b_hh, head_w, head_b, out_w, out_b, then
 * inputs, memory, reads, weights: sizes and shapes. */
static const int64_t ntm_model_sizes[12] = {4 * MC * MZ, 4 * MC * MC, 4 * MC,       4 * MC,       MP * MC, MP,
                                            MO * MHR,    MO,          MB * MT * MI, MB * MN * MM, MB * MM, MB * 2 * MN};

static void ntm_model_views(double **p, attnc_ntm_params *pr, attnc_ntm_state *st, attnc_tensor *in) {
    const int64_t s0[] = {4 * MC, MZ}, s1[] = {4 * MC, MC}, s2[] = {4 * MC}, s4[] = {MP, MC}, s5[] = {MP},
                  s6[] = {MO, MHR}, s7[] = {MO}, s8[] = {MB, MT, MI}, s9[] = {MB, MN, MM}, s10[] = {MB, 1, MM},
                  s11[] = {MB, 2, MN};
    *pr = (attnc_ntm_params){view(p[0], ATTNC_FLOAT64, 2, s0), view(p[1], ATTNC_FLOAT64, 2, s1),
                             view(p[2], ATTNC_FLOAT64, 1, s2), view(p[3], ATTNC_FLOAT64, 1, s2),
                             view(p[4], ATTNC_FLOAT64, 2, s4), view(p[5], ATTNC_FLOAT64, 1, s5),
                             view(p[6], ATTNC_FLOAT64, 2, s6), view(p[7], ATTNC_FLOAT64, 1, s7)};
    *in = view(p[8], ATTNC_FLOAT64, 3, s8);
    *st = (attnc_ntm_state){view(p[9], ATTNC_FLOAT64, 3, s9), view(p[10], ATTNC_FLOAT64, 3, s10),
                            view(p[11], ATTNC_FLOAT64, 3, s11)};
}

static const attnc_ntm_config ntm_cfg = {.lstm = 1, .read_heads = 1, .write_heads = 1, .clip = 20};

/* L = sum(logits * cot) (saved: NULL or a buffer for the backward). */
static double ntm_model_loss(double **p, const double *cot, double *saved) {
    attnc_ntm_params pr;
    attnc_ntm_state st;
    attnc_tensor in;
    ntm_model_views(p, &pr, &st, &in);
    double y[MB * MT * MO];
    const int64_t sy[] = {MB, MT, MO};
    int64_t n = attnc_ntm_saved_size(MB, MT, MI, MC, MN, MM, MP, &ntm_cfg);
    attnc_tensor ty = view(y, ATTNC_FLOAT64, 3, sy), ts = view(saved, ATTNC_FLOAT64, 1, &n), none = {0};
    if (attnc_ntm_forward(&ty, &none, &none, saved ? &ts : &none, &in, &st, &pr, &ntm_cfg) != ATTNC_OK) return NAN;
    return ntm_dot(y, cot, MB * MT * MO);
}

static double ntm_model_loss_unsaved(double **p, const double *cot) { return ntm_model_loss(p, cot, NULL); }

static void test_ntm_model(void) {
    double *p[12], *g[12];
    for (int i = 0; i < 12; i++) {
        p[i] = randn((size_t)ntm_model_sizes[i], 300 + (uint64_t)i);
        g[i] = calloc((size_t)ntm_model_sizes[i], sizeof(double));
    }
    for (int i = 0; i < MB * 2 * MN; i++) p[11][i] = 0.2 + 0.1 * fabs(p[11][i]); /* positive initial weights */
    double *cot = randn(MB * MT * MO, 399);
    int64_t n = attnc_ntm_saved_size(MB, MT, MI, MC, MN, MM, MP, &ntm_cfg);
    double *saved = malloc((size_t)n * sizeof(double));
    double with_saved = ntm_model_loss(p, cot, saved), without = ntm_model_loss(p, cot, NULL);
    CHECK(with_saved == without, "the forward is the same with and without a saved buffer");
    attnc_ntm_params pr, gr;
    attnc_ntm_state st, gs;
    attnc_tensor in, gin;
    ntm_model_views(p, &pr, &st, &in);
    ntm_model_views(g, &gr, &gs, &gin);
    const int64_t sy[] = {MB, MT, MO};
    attnc_tensor tcot = view(cot, ATTNC_FLOAT64, 3, sy), tsv = view(saved, ATTNC_FLOAT64, 1, &n);
    CHECK(attnc_ntm_backward(&gr, &gs, &gin, &tcot, &tsv, &in, &st, &pr, &ntm_cfg) == ATTNC_OK, "model backward");
    ntm_fd_check(ntm_model_loss_unsaved, p, g, ntm_model_sizes, 12, cot, 7, 1e-3, "model");
    /* heads.weight with 23 rows fits no odd K; a backward needs the saved buffer */
    const int64_t bad[] = {MP - 1, MC};
    attnc_tensor keep = pr.head_w;
    pr.head_w = view(p[4], ATTNC_FLOAT64, 2, bad);
    double y[MB * MT * MO];
    attnc_tensor ty = view(y, ATTNC_FLOAT64, 3, sy), none = {0};
    CHECK(attnc_ntm_forward(&ty, &none, &none, &none, &in, &st, &pr, &ntm_cfg) == ATTNC_ERR_VALUE, "bad P refused");
    pr.head_w = keep;
    CHECK(attnc_ntm_backward(&gr, &gs, &gin, &tcot, &none, &in, &st, &pr, &ntm_cfg) == ATTNC_ERR_TYPE,
          "backward without saved refused");
    for (int i = 0; i < 12; i++) {
        free(p[i]);
        free(g[i]);
    }
    free(cot);
    free(saved);
}

static void test_ntm(void) {
    test_ntm_address();
    test_ntm_write();
    test_ntm_shift_direction();
    test_ntm_model();
}
