/* test_lstm_cell.h: C unit tests of csrc/core/lstm_cell_impl.h (included by
 * test_core.c), in float64: the forward against the equations, the
 * backward against central finite differences, the NULL arguments against
 * their zero-filled equivalents (bitwise, but for the sign of zero), and the _units loops on gate
 * blocks S > n apart against the row functions (bitwise). */
#define ATTNC_F64 1
#include "../../csrc/core/real.h"
#include "../../csrc/core/lstm_cell_impl.h"
#include "../../csrc/core/real_end.h"

enum { LCH = 5 };

/* a == b elementwise (0 == -0: a NULL c_prev gives 0 where zeros give d 0 f (1 - f) = -0 at times). */
static bool lstm_cell_same(const double *a, const double *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* sum(h wh) + sum(c wc) of the forward from pre-activations pre (4H) and c_prev. */
static double lstm_cell_loss(const double *pre, const double *c_prev, const double *wh, const double *wc) {
    double g[4 * LCH], c[LCH], h[LCH], s = 0;
    memcpy(g, pre, sizeof g);
    lstm_cell_forward_f64(g, NULL, c_prev, c, h, LCH);
    for (int k = 0; k < LCH; k++) s += h[k] * wh[k] + c[k] * wc[k];
    return s;
}

/* The central difference of lstm_cell_loss in *x, one of pre's or c_prev's entries. */
static double lstm_cell_fd(double *x, const double *pre, const double *c_prev, const double *wh, const double *wc) {
    double save = *x, eps = 1e-6;
    *x = save + eps;
    double up = lstm_cell_loss(pre, c_prev, wh, wc);
    *x = save - eps;
    double down = lstm_cell_loss(pre, c_prev, wh, wc);
    *x = save;
    return (up - down) / (2 * eps);
}

static void test_lstm_cell(void) {
    double *pre = randn(4 * LCH, 501), *add = randn(4 * LCH, 502), *cp = randn(LCH, 503), *wh = randn(LCH, 504);
    double *wc = randn(LCH, 505), *dh2 = randn(LCH, 506);
    double zeros[4 * LCH] = {0};
    /* forward: the equations, pre + add */
    double g[4 * LCH], c[LCH], h[LCH], err = 0;
    memcpy(g, pre, sizeof g);
    lstm_cell_forward_f64(g, add, cp, c, h, LCH);
    for (int k = 0; k < LCH; k++) {
        double a[4];
        for (int q = 0; q < 4; q++) a[q] = pre[q * LCH + k] + add[q * LCH + k];
        double i = 1 / (1 + exp(-a[0])), f = 1 / (1 + exp(-a[1])), gg = tanh(a[2]), o = 1 / (1 + exp(-a[3]));
        double cc = f * cp[k] + i * gg;
        err = fmax(err, fabs(g[k] - i) + fabs(g[LCH + k] - f) + fabs(g[2 * LCH + k] - gg) + fabs(g[3 * LCH + k] - o));
        err = fmax(err, fabs(c[k] - cc) + fabs(h[k] - o * tanh(cc)));
    }
    CHECK(err < 1e-15, "lstm cell forward off the equations by %g", err);
    /* NULL add and c_prev: as zeros, bit for bit */
    double g0[4 * LCH], c0[LCH], h0[LCH], g1[4 * LCH], c1[LCH], h1[LCH];
    memcpy(g0, pre, sizeof g0);
    memcpy(g1, pre, sizeof g1);
    lstm_cell_forward_f64(g0, NULL, NULL, c0, h0, LCH);
    lstm_cell_forward_f64(g1, zeros, zeros, c1, h1, LCH);
    CHECK(!memcmp(g0, g1, sizeof g0) && !memcmp(c0, c1, sizeof c0) && !memcmp(h0, h1, sizeof h0),
          "lstm cell forward: NULL add / c_prev differ from zeros");
    /* backward against finite differences of the pre-activations and c_prev */
    memcpy(g, pre, sizeof g);
    lstm_cell_forward_f64(g, NULL, cp, c, h, LCH);
    double dc[LCH], dg[4 * LCH];
    memcpy(dc, wc, sizeof dc);
    lstm_cell_backward_f64(g, c, cp, wh, NULL, dc, dg, LCH);
    double worst = 0;
    for (int j = 0; j < 4 * LCH; j++) worst = fmax(worst, fabs(lstm_cell_fd(pre + j, pre, cp, wh, wc) - dg[j]));
    for (int k = 0; k < LCH; k++) worst = fmax(worst, fabs(lstm_cell_fd(cp + k, pre, cp, wh, wc) - dc[k]));
    CHECK(worst < 1e-8, "lstm cell backward off finite differences by %g", worst);
    /* dh = dh1 + dh2 and c_prev NULL: as the summed dh and zeros, bit for bit */
    double dh[LCH], dca[LCH], dcb[LCH], dga[4 * LCH], dgb[4 * LCH];
    for (int k = 0; k < LCH; k++) dh[k] = wh[k] + dh2[k];
    memcpy(dca, wc, sizeof dca);
    memcpy(dcb, wc, sizeof dcb);
    lstm_cell_backward_f64(g, c, NULL, wh, dh2, dca, dga, LCH);
    lstm_cell_backward_f64(g, c, zeros, dh, NULL, dcb, dgb, LCH);
    CHECK(!memcmp(dca, dcb, sizeof dca) && lstm_cell_same(dga, dgb, 4 * LCH),
          "lstm cell backward: dh2 / NULL c_prev differ from their sums / zeros");
    /* the _units loops on blocks S = n + 3 apart, n = LCH - 1 units: as the row functions */
    enum { S = LCH + 2 };
    double gs[4 * S], cs[LCH], hs[LCH], dgs[4 * S], dcs[LCH];
    for (int q = 0; q < 4; q++) memcpy(gs + q * S, pre + q * LCH, (LCH - 1) * sizeof(double));
    lstm_cell_forward_units_f64(gs, cp, true, cs, hs, LCH - 1, S);
    memcpy(dcs, wc, sizeof dcs);
    lstm_cell_backward_units_f64(gs, cs, cp, true, wh, NULL, false, dcs, dgs, LCH - 1, S);
    bool same = !memcmp(cs, c, (LCH - 1) * sizeof(double)) && !memcmp(hs, h, (LCH - 1) * sizeof(double)) &&
                !memcmp(dcs, dc, (LCH - 1) * sizeof(double));
    for (int q = 0; q < 4; q++)
        same = same && !memcmp(gs + q * S, g + q * LCH, (LCH - 1) * sizeof(double)) &&
               !memcmp(dgs + q * S, dg + q * LCH, (LCH - 1) * sizeof(double));
    CHECK(same, "lstm cell _units loops with a gate stride differ from the row functions");
    free(pre);
    free(add);
    free(cp);
    free(wh);
    free(wc);
    free(dh2);
}
