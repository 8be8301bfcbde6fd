/* captioner_impl.h: typed kernels of captioner.c (see core/real.h): one
 * decoder step's attention and LSTM cell for a block of rows, forward and
 * backward, and matrix products split into fixed row blocks. */
#include "../core/real.h"
#include "../core/lstm_cell_impl.h"

/* Row (b, t) of a (B, T, n) array is at (b T + t) n; the step's scratch rows
 * (rec, zs, zp, h_run, c_run, dh, dc, dzp) are (B, n) and contiguous. */
typedef struct FN(cap_job) {
    const cap_run *r;
    int64_t t;
    void (*row)(const struct FN(cap_job) *j, int64_t b); /* what rows_task runs on each image */
    const REAL *feat;   /* (B, L, F)                                              */
    const REAL *pa;     /* (B, L, A) W_a a_i + b_a                                */
    const REAL *v;      /* (A) the score vector                                   */
    const REAL *rec;    /* (B, R) h_{t-1} W_rec^T + b_rec: [W_hh h + b_hh | U_a h | w_b h + b_b] */
    const REAL *gxe;    /* (B, T, 4H) the embedding's part of the input gates + b_ih */
    const REAL *zp;     /* (B, 4H) z_t W_ih[:, E:]^T                              */
    REAL *th;           /* (B, T, L, A) tanh(W_a a_i + b_a + U_a h_{t-1})         */
    REAL *alpha;        /* (B, T, L)                                              */
    REAL *beta;         /* (B, T)                                                 */
    REAL *zhat;         /* (B, T, F) sum_i alpha_i a_i (soft) or a_s (hard)       */
    REAL *xin;          /* (B, T, E + F) [E y_{t-1}; z_t]                         */
    REAL *zs;           /* (B, F) z_t                                             */
    int64_t *samples;   /* (B, T) locations (hard modes)                          */
    REAL *gates;        /* (B, T, 4H) i, f, g, o after their nonlinearities       */
    REAL *h, *c;        /* (B, T, H) h_t, c_t                                     */
    REAL *hprev;        /* (B, T, H) h_{t-1}, or NULL (decoding)                  */
    REAL *h_run, *c_run; /* (B, H) the running state                              */
    /* backward */
    const REAL *c0;      /* (B, H)                                                */
    const REAL *dh_out;  /* (B, T, H) d logits / d h_t through the deep output    */
    const REAL *dz_out;  /* (B, T, F) the same for z_t                            */
    const REAL *dalphas; /* (B, T, L) or NULL                                     */
    const REAL *dlogp;   /* (B, T) or NULL                                        */
    const REAL *dzp;     /* (B, F) dgates_t W_ih[:, E:]                           */
    REAL *dh, *dc;       /* (B, H) running: dL/dh_t from later steps, dL/dc_t     */
    REAL *drec;          /* (B, T, R) [dgates | d(U_a h) | d(gate pre-activation)] */
    REAL *de;            /* (B, T, L) d scores                                    */
    REAL *dpa;           /* (B, L, A) accumulated over steps                      */
    REAL *dfeat;         /* (B, L, F) accumulated over steps                      */
} FN(cap_job);

/* th (L, A) <- tanh(pa (L, A) + ph (A)), then e (L) <- th v (A). */
static void FN(scores)(const REAL *restrict pa, const REAL *restrict ph, const REAL *restrict v,
                       REAL *restrict th, REAL *restrict e, int64_t L, int64_t A) {
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
static int64_t FN(location)(const FN(cap_job) *j, int64_t b, const REAL *al) {
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
static void FN(attend_row)(const FN(cap_job) *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t L = r->L, A = r->A, F = r->F, bt = b * r->T + j->t;
    const REAL *pa = j->pa + b * L * A, *ph = j->rec + b * r->R + 4 * r->H, *a = j->feat + b * L * F;
    REAL *th = j->th + bt * L * A, *al = j->alpha + bt * L;
    FN(scores)(pa, ph, j->v, th, al, L, A);
    REAL m = -INFINITY;
    for (int64_t i = 0; i < L; i++) m = al[i] > m ? al[i] : m;
    REAL sum = 0;
    for (int64_t i = 0; i < L; i++) sum += al[i] = EXP(al[i] - m);
    for (int64_t i = 0; i < L; i++) al[i] /= sum;
    REAL beta = r->gate ? 1 / (1 + EXP(-ph[A])) : 1;
    j->beta[bt] = beta;
    REAL *zh = j->zhat + bt * F, *z = j->xin + bt * (r->E + F) + r->E;
    int64_t s = r->mode == ATTNC_CAPTION_SOFT ? -1 : FN(location)(j, b, al);
    if (j->samples) j->samples[bt] = s;
    for (int64_t f = 0; f < F; f++) zh[f] = s < 0 ? 0 : a[s * F + f];
    if (s < 0) /* soft attention, or the expectation in place of a sample */
        for (int64_t i = 0; i < L; i++)
            for (int64_t f = 0; f < F; f++) zh[f] += al[i] * a[i * F + f];
    for (int64_t f = 0; f < F; f++) j->zs[b * F + f] = z[f] = beta * zh[f];
}

/* The LSTM cell of row b at step t (torch's i, f, g, o). */
static void FN(cell_row)(const FN(cap_job) *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t H = r->H, bt = b * r->T + j->t;
    const REAL *gx = j->gxe + bt * 4 * H, *zp = j->zp + b * 4 * H, *hh = j->rec + b * r->R;
    REAL *gate = j->gates + bt * 4 * H, *c = j->c + bt * H, *h = j->h + bt * H;
    for (int64_t k = 0; k < 4 * H; k++) gate[k] = gx[k] + zp[k]; /* + hh in the cell: gx + zp + hh */
    FN(lstm_cell_forward)(gate, hh, j->c_run + b * H, c, h, H);
    memcpy(j->c_run + b * H, c, (size_t)H * sizeof(REAL));
    memcpy(j->h_run + b * H, h, (size_t)H * sizeof(REAL));
    if (j->hprev && j->t + 1 < r->T)
        for (int64_t k = 0; k < H; k++) j->hprev[(bt + 1) * H + k] = h[k];
}

/* Gate gradients of row b at step t into drec[:, :4H]; dc <- dc_{t-1}. */
static void FN(cell_back_row)(const FN(cap_job) *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t H = r->H, bt = b * r->T + j->t;
    const REAL *gate = j->gates + bt * 4 * H, *cn = j->c + bt * H;
    const REAL *cp = j->t ? j->c + (bt - 1) * H : j->c0 + b * H;
    FN(lstm_cell_backward)(gate, cn, cp, j->dh + b * H, j->dh_out + bt * H, j->dc + b * H, j->drec + bt * r->R, H);
}

/* Attention gradients of row b at step t: d scores, d(U_a h), the gate's
 * pre-activation, and the features' and W_a a's gradients (accumulated). */
static void FN(attend_back_row)(const FN(cap_job) *j, int64_t b) {
    const cap_run *r = j->r;
    int64_t L = r->L, A = r->A, F = r->F, bt = b * r->T + j->t;
    const REAL *a = j->feat + b * L * F, *zh = j->zhat + bt * F, *al = j->alpha + bt * L;
    const REAL *th = j->th + bt * L * A, *dzo = j->dz_out + bt * F, *dzp = j->dzp + b * F;
    REAL *da = j->dfeat + b * L * F, *dpa = j->dpa + b * L * A, *de = j->de + bt * L;
    REAL *dph = j->drec + bt * r->R + 4 * r->H;
    REAL beta = j->beta[bt], dbeta = 0;
    for (int64_t f = 0; f < F; f++) dbeta += (dzo[f] + dzp[f]) * zh[f];
    for (int64_t i = 0; i < L; i++) de[i] = j->dalphas ? j->dalphas[bt * L + i] : 0; /* d alpha, for now */
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
    REAL score_fn = j->dlogp && s >= 0 ? j->dlogp[bt] : 0; /* d log alpha_s / d e_i = [i = s] - alpha_i */
    for (int64_t i = 0; i < L; i++) de[i] = al[i] * (de[i] - dot) + score_fn * ((REAL)(i == s) - al[i]);
    for (int64_t k = 0; k < A; k++) dph[k] = 0;
    for (int64_t i = 0; i < L; i++)
        for (int64_t k = 0; k < A; k++) {
            REAL x = th[i * A + k], d = de[i] * j->v[k] * (1 - x * x);
            dpa[i * A + k] += d;
            dph[k] += d;
        }
    if (r->gate) dph[A] = dbeta * beta * (1 - beta);
}

/* j->row on images [block ROWS, ...). */
static void FN(rows_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(cap_job) *j = arg;
    for (int64_t b = block * ROWS; b < j->r->B && b < (block + 1) * ROWS; b++) j->row(j, b);
}

/* row (the attention, the cell or their backward) on every image, over
 * fixed blocks of ROWS images. */
static void FN(over_rows)(FN(cap_job) *j, void (*row)(const FN(cap_job) *, int64_t)) {
    const cap_run *r = j->r;
    j->row = row;
    int workers = attnc_workers_for(r->B * (r->L * r->A + 4 * r->H) * 4); /* a few operations per element */
    attnc_parallel_for((r->B + ROWS - 1) / ROWS, workers, FN(rows_task), j);
}

#include "../core/real_end.h"
