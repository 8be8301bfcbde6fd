/* captioner_impl.h: typed kernels of captioner.c (see core/real.h): one
 * decoder step's attention and LSTM cell for a block of rows, forward and
 * backward, and matrix products split into fixed row blocks. */
#include "../../core/real.h"
#include "../../core/lstm_cell_impl.h"

/* th (L, A) <- tanh(pa (L, A) + ph (A)), then e (L) <- th v (A). */
static void FN(scores)(const REAL *restrict pa, const REAL *restrict ph, const REAL *restrict v, REAL *restrict th,
                       REAL *restrict e, int64_t L, int64_t A) {
    for (int64_t i = 0; i < L; i++)
        for (int64_t k = 0; k < A; k++) th[i * A + k] = FN(tanh_)(pa[i * A + k] + ph[k]);
    for (int64_t i = 0; i < L; i++) {
        REAL dot = 0;
        for (int64_t k = 0; k < A; k++) dot += v[k] * th[i * A + k];
        e[i] = dot;
    }
}

/* The hard location of row b at step t from its weights al (L): given,
 * argmax (lowest index on ties) or sampled; -1 = the expectation. */
static int64_t FN(location)(const cap_job *j, int64_t b, const REAL *al) {
    const cap_run *r = j->r;
    int64_t L = r->L, bt = b * r->T + j->t;
    if (r->mode == ATTNC_CAPTION_HARD_GIVEN) return j->samples[bt];
    int64_t s = 0;
    if (r->mode == ATTNC_CAPTION_HARD_ARGMAX) {
        for (int64_t i = 1; i < L; i++) s = al[i] > al[s] ? i : s;
        return s;
    }
    if (r->expect_prob > 0 && attnc_uniform(r->seed, 1, (uint64_t)b) < r->expect_prob) return -1;
    /* inverse CDF of one uniform keyed by (seed, b T + t), scaled by the
     * weights' rounded total so the last location is reachable; L - 1 also
     * when NaN weights make every test fail */
    double total = 0, acc = 0;
    for (int64_t i = 0; i < L; i++) total += (double)al[i];
    double u = attnc_uniform(r->seed, 0, (uint64_t)bt) * total;
    for (int64_t i = 0; i < L; i++) {
        acc += (double)al[i];
        if (u < acc) return i;
    }
    return L - 1;
}

/* Scores, stable softmax, location and context of row b at step t. */
static void FN(attend_row)(const cap_job *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t L = r->L, A = r->A, F = r->F, bt = b * r->T + j->t;
    const REAL *pa = (const REAL *)j->pa + b * L * A, *ph = (const REAL *)j->rec + b * r->R + 4 * r->H;
    const REAL *a = (const REAL *)j->feat + b * L * F;
    REAL *th = (REAL *)j->th + bt * L * A, *al = (REAL *)j->alpha + bt * L;
    FN(scores)(pa, ph, j->v, th, al, L, A);
    REAL m = -INFINITY;
    for (int64_t i = 0; i < L; i++) m = al[i] > m ? al[i] : m;
    REAL sum = 0;
    for (int64_t i = 0; i < L; i++) sum += al[i] = EXP(al[i] - m);
    for (int64_t i = 0; i < L; i++) al[i] /= sum;
    REAL beta = r->gate ? 1 / (1 + EXP(-ph[A])) : 1;
    ((REAL *)j->beta)[bt] = beta;
    REAL *zh = (REAL *)j->zhat + bt * F, *z = (REAL *)j->xin + bt * (r->E + F) + r->E;
    int64_t s = r->mode == ATTNC_CAPTION_SOFT ? -1 : FN(location)(j, b, al);
    if (j->samples) j->samples[bt] = s;
    for (int64_t f = 0; f < F; f++) zh[f] = s < 0 ? 0 : a[s * F + f];
    if (s < 0) /* soft attention, or the expectation in place of a sample */
        for (int64_t i = 0; i < L; i++)
            for (int64_t f = 0; f < F; f++) zh[f] += al[i] * a[i * F + f];
    for (int64_t f = 0; f < F; f++) ((REAL *)j->zs)[b * F + f] = z[f] = beta * zh[f];
}

/* The LSTM cell of row b at step t (torch's i, f, g, o). */
static void FN(cell_row)(const cap_job *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t H = r->H, bt = b * r->T + j->t;
    const REAL *gx = (const REAL *)j->gxe + bt * 4 * H, *zp = (const REAL *)j->zp + b * 4 * H;
    const REAL *hh = (const REAL *)j->rec + b * r->R;
    REAL *gate = (REAL *)j->gates + bt * 4 * H, *c = (REAL *)j->c + bt * H, *h = (REAL *)j->h + bt * H;
    for (int64_t k = 0; k < 4 * H; k++) gate[k] = gx[k] + zp[k]; /* + hh in the cell: gx + zp + hh */
    FN(lstm_cell_forward)(gate, hh, (REAL *)j->c_run + b * H, c, h, H);
    memcpy((REAL *)j->c_run + b * H, c, (size_t)H * sizeof(REAL));
    memcpy((REAL *)j->h_run + b * H, h, (size_t)H * sizeof(REAL));
    if (j->hprev && j->t + 1 < r->T)
        for (int64_t k = 0; k < H; k++) ((REAL *)j->hprev)[(bt + 1) * H + k] = h[k];
}

/* Gate gradients of row b at step t into drec[:, :4H]; dc <- dc_{t-1}. */
static void FN(cell_back_row)(const cap_job *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t H = r->H, bt = b * r->T + j->t;
    const REAL *gate = (const REAL *)j->gates + bt * 4 * H, *cn = (const REAL *)j->c + bt * H;
    const REAL *cp = j->t ? (const REAL *)j->c + (bt - 1) * H : (const REAL *)j->c0 + b * H;
    FN(lstm_cell_backward)(gate, cn, cp, (REAL *)j->dh + b * H, (const REAL *)j->dh_out + bt * H, (REAL *)j->dc + b * H,
                           (REAL *)j->drec + bt * r->R, H);
}

/* Attention gradients of row b at step t: d scores, d(U_a h), the gate's
 * pre-activation, and the features' and W_a a's gradients (accumulated). */
static void FN(attend_back_row)(const cap_job *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t L = r->L, A = r->A, F = r->F, bt = b * r->T + j->t;
    const REAL *a = (const REAL *)j->feat + b * L * F, *zh = (const REAL *)j->zhat + bt * F;
    const REAL *al = (const REAL *)j->alpha + bt * L, *th = (const REAL *)j->th + bt * L * A;
    const REAL *dzo = (const REAL *)j->dz_out + bt * F, *dzp = (const REAL *)j->dzp + b * F;
    const REAL *dalphas = j->dalphas, *dlogp = j->dlogp, *v = j->v;
    REAL *da = (REAL *)j->dfeat + b * L * F, *dpa = (REAL *)j->dpa + b * L * A, *de = (REAL *)j->de + bt * L;
    REAL *dph = (REAL *)j->drec + bt * r->R + 4 * r->H;
    REAL beta = ((REAL *)j->beta)[bt], dbeta = 0;
    for (int64_t f = 0; f < F; f++) dbeta += (dzo[f] + dzp[f]) * zh[f];
    for (int64_t i = 0; i < L; i++) de[i] = dalphas ? dalphas[bt * L + i] : 0; /* d alpha, for now */
    int64_t s = r->mode == ATTNC_CAPTION_SOFT ? -1 : j->samples[bt];
    if (s < 0) {
        for (int64_t i = 0; i < L; i++) {
            REAL dot = 0;
            for (int64_t f = 0; f < F; f++) {
                REAL dz = dzo[f] + dzp[f];
                dot += dz * a[i * F + f];
                da[i * F + f] += beta * al[i] * dz;
            }
            de[i] += beta * dot;
        }
    } else {
        for (int64_t f = 0; f < F; f++) da[s * F + f] += beta * (dzo[f] + dzp[f]);
    }
    REAL dot = 0;
    for (int64_t i = 0; i < L; i++) dot += al[i] * de[i];
    REAL score_fn = dlogp && s >= 0 ? dlogp[bt] : 0; /* d log alpha_s / d e_i = [i = s] - alpha_i */
    for (int64_t i = 0; i < L; i++) de[i] = al[i] * (de[i] - dot) + score_fn * ((REAL)(i == s) - al[i]);
    for (int64_t k = 0; k < A; k++) dph[k] = 0;
    for (int64_t i = 0; i < L; i++)
        for (int64_t k = 0; k < A; k++) {
            REAL x = th[i * A + k], d = de[i] * v[k] * (1 - x * x);
            dpa[i * A + k] += d;
            dph[k] += d;
        }
    if (r->gate) dph[A] = dbeta * beta * (1 - beta);
}

/* ---- the initial state (captioner.c's prepare and backward_prepare) ----------- */

/* x (n) <- tanh(x). */
static void FN(tanh_all)(void *x_, int64_t n) {
    REAL *x = x_;
    for (int64_t i = 0; i < n; i++) x[i] = TANH(x[i]);
}

/* mean (B, F) <- the mean of feat (B, L, F) over locations: summed in order, then divided. */
static void FN(mean_of)(void *mean, const void *feat, int64_t B, int64_t L, int64_t F) {
    for (int64_t b = 0; b < B; b++) {
        REAL *m = (REAL *)mean + b * F;
        for (int64_t f = 0; f < F; f++) m[f] = 0;
        const REAL *a = (const REAL *)feat + b * L * F;
        for (int64_t i = 0; i < L * F; i++) m[i % F] += a[i];
        for (int64_t f = 0; f < F; f++) m[f] /= (REAL)L;
    }
}

/* dh, dc (n) <- their cotangents through h0 = tanh(.), c0 = tanh(.): times 1 - state^2. */
static void FN(tanh_states_backward)(void *dh_, void *dc_, const void *h0_, const void *c0_, int64_t n) {
    REAL *dh = dh_, *dc = dc_;
    const REAL *h0 = h0_, *c0 = c0_;
    for (int64_t i = 0; i < n; i++) {
        REAL x = h0[i], y = c0[i];
        dh[i] *= 1 - x * x;
        dc[i] *= 1 - y * y;
    }
}

/* dfeat (B, L, F) += dmean (B, F) / L at every location. */
static void FN(mean_of_backward)(void *dfeat_, const void *dmean_, int64_t B, int64_t L, int64_t F) {
    REAL *dfeat = dfeat_;
    const REAL *dmean = dmean_;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t f = 0; f < F; f++) dfeat[(b * L + i) * F + f] += dmean[b * F + f] / (REAL)L;
}

#include "../../core/real_end.h"
