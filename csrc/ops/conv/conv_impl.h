/* conv_impl.h: typed kernels of conv.c (see core/real.h). */
#include "../../core/real.h"

/* col (K, P) <- the input patches of one batch element x (Cin, H, W):
 * col[(c kH + i) kW + j][oh Wo + ow] = x[c, oh sh - pt + i dh, ow sw - pl + j dw] (0 outside). */
static void FN(im2col)(REAL *col, const REAL *x, const conv_geom *g) {
    for (int64_t c = 0; c < g->cin; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                REAL *row = col + ((c * g->kh + i) * g->kw + j) * g->p;
                const REAL *xc = x + c * g->h * g->w;
                for (int64_t oh = 0; oh < g->ho; oh++) {
                    int64_t r = oh * g->sh - g->pt + i * g->dh;
                    REAL *out = row + oh * g->wo;
                    if (r < 0 || r >= g->h) {
                        for (int64_t ow = 0; ow < g->wo; ow++) out[ow] = 0;
                        continue;
                    }
                    const REAL *xr = xc + r * g->w;
                    for (int64_t ow = 0; ow < g->wo; ow++) {
                        int64_t q = ow * g->sw - g->pl + j * g->dw;
                        out[ow] = q >= 0 && q < g->w ? xr[q] : 0;
                    }
                }
            }
}

/* dx (Cin, H, W) <- the sum of dcol (K, P) over the patches that read each
 * input element (the adjoint of im2col), in a fixed order. */
static void FN(col2im)(REAL *dx, const REAL *dcol, const conv_geom *g) {
    for (int64_t n = 0; n < g->cin * g->h * g->w; n++) dx[n] = 0;
    for (int64_t c = 0; c < g->cin; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const REAL *row = dcol + ((c * g->kh + i) * g->kw + j) * g->p;
                REAL *xc = dx + c * g->h * g->w;
                for (int64_t oh = 0; oh < g->ho; oh++) {
                    int64_t r = oh * g->sh - g->pt + i * g->dh;
                    if (r < 0 || r >= g->h) continue;
                    REAL *xr = xc + r * g->w;
                    const REAL *in = row + oh * g->wo;
                    for (int64_t ow = 0; ow < g->wo; ow++) {
                        int64_t q = ow * g->sw - g->pl + j * g->dw;
                        if (q >= 0 && q < g->w) xr[q] += in[ow];
                    }
                }
            }
}

static REAL *FN(worker_scratch)(const conv_job *j, int worker) {
    return j->scratch ? (REAL *)j->scratch + (int64_t)worker * 2 * j->g.k * j->g.p : NULL;
}

/* The patches of batch element b: x itself for a 1x1, stride-1, unpadded
 * convolution, else im2col into scratch. */
static const REAL *FN(columns)(const conv_job *j, int64_t b, REAL *scratch) {
    /* scratch is NULL in the identity case */
    const REAL *xb = (const REAL *)j->x + b * j->g.cin * j->g.h * j->g.w;
    if (j->g.identity) return xb;
    FN(im2col)(scratch, xb, &j->g);
    return scratch;
}

/* Group gi's blocks: its weight rows W_g (Cout/G, KG), its patch rows
 * (KG, P) of a (K, P) matrix at `cols`, its output rows (Cout/G, P) of a
 * (Cout, P) matrix at `rows`. */
static attnc_mat FN(group_weight)(const conv_geom *g, const REAL *w, int64_t gi) {
    return (attnc_mat){(void *)(w + gi * g->cout_g * g->kg), g->cout_g, g->kg, g->kg, 1};
}

static attnc_mat FN(group_cols)(const conv_geom *g, const REAL *cols, int64_t gi) {
    return (attnc_mat){(void *)(cols + gi * g->kg * g->p), g->kg, g->p, g->p, 1};
}

static attnc_mat FN(group_rows)(const conv_geom *g, const REAL *rows, int64_t gi) {
    return (attnc_mat){(void *)(rows + gi * g->cout_g * g->p), g->cout_g, g->p, g->p, 1};
}

/* y[b] (Cout, P) = W (Cout, K) col (K, P) + bias, one product per group. */
static void FN(forward_task)(void *arg, int64_t b, int worker) {
    conv_job *j = arg;
    const conv_geom *g = &j->g;
    const REAL *col = FN(columns)(j, b, FN(worker_scratch)(j, worker));
    REAL *yb = (REAL *)j->y + b * g->cout * g->p;
    for (int64_t gi = 0; gi < g->groups; gi++)
        GEMM(false, false, 1, FN(group_weight)(g, j->w, gi), FN(group_cols)(g, col, gi), 0, FN(group_rows)(g, yb, gi));
    if (j->bias)
        for (int64_t o = 0; o < g->cout; o++)
            for (int64_t q = 0; q < g->p; q++) yb[o * g->p + q] += ((const REAL *)j->bias)[o];
}

/* Batch element b's share: dx[b] = col2im(W^T dy[b]); its partial dW
 * (dy[b] col^T) and db (row sums of dy[b]), summed over b later in b order. */
static void FN(backward_task)(void *arg, int64_t b, int worker) {
    conv_job *j = arg;
    const conv_geom *g = &j->g;
    REAL *scratch = FN(worker_scratch)(j, worker);
    const REAL *dyb = (const REAL *)j->dy + b * g->cout * g->p;
    if (j->dw_parts) {
        const REAL *col = FN(columns)(j, b, scratch);
        REAL *dw = (REAL *)j->dw_parts + b * g->cout * g->kg;
        for (int64_t gi = 0; gi < g->groups; gi++)
            GEMM(false, true, 1, FN(group_rows)(g, dyb, gi), FN(group_cols)(g, col, gi), 0,
                 FN(group_weight)(g, dw, gi));
    }
    if (j->db_parts) {
        REAL *db = (REAL *)j->db_parts + b * g->cout;
        for (int64_t o = 0; o < g->cout; o++) {
            REAL s = 0;
            for (int64_t q = 0; q < g->p; q++) s += dyb[o * g->p + q];
            db[o] = s;
        }
    }
    if (j->dx) { /* dcol = W^T dy[b] per group; in the identity case dcol is dx[b] itself */
        REAL *dxb = (REAL *)j->dx + b * g->cin * g->h * g->w;
        REAL *dcol = g->identity ? dxb : scratch + g->k * g->p;
        for (int64_t gi = 0; gi < g->groups; gi++)
            GEMM(true, false, 1, FN(group_weight)(g, j->w, gi), FN(group_rows)(g, dyb, gi), 0,
                 FN(group_cols)(g, dcol, gi));
        if (!g->identity) FN(col2im)(dxb, dcol, g);
    }
}

/* Entries [block * SUM_BLOCK, ...) of dW and db: the partials summed in batch order. */
static void FN(sum_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    conv_job *j = arg;
    const conv_geom *g = &j->g;
    int64_t nw = j->dw ? g->cout * g->kg : 0, nb = j->db ? g->cout : 0;
    int64_t e0 = block * SUM_BLOCK, e1 = e0 + SUM_BLOCK < nw + nb ? e0 + SUM_BLOCK : nw + nb;
    for (int64_t e = e0; e < e1; e++) {
        REAL *out;
        const REAL *parts;
        int64_t stride, at;
        if (e < nw) {
            out = (REAL *)j->dw + e, parts = j->dw_parts, stride = g->cout * g->kg, at = e;
        } else {
            out = (REAL *)j->db + (e - nw), parts = j->db_parts, stride = g->cout, at = e - nw;
        }
        REAL s = 0;
        for (int64_t b = 0; b < g->batch; b++) s += parts[b * stride + at];
        *out = s;
    }
}

#include "../../core/real_end.h"
