/* rotary_impl.h: typed kernels of rotary.c (see core/real.h). */
#include "../../core/real.h"

/* Rows of the table: position p's cosines and sines (times sign), pair i at
 * the frequency j->freq[i] = base^(-2i / R), all in double, then rounded. */
static void FN(rope_table_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const rope_job *j = arg;
    int64_t h = j->R / 2;
    for (int64_t p = block * ROWS; p < j->P && p < (block + 1) * ROWS; p++) {
        double pos = ((const double *)j->pos->data)[offset_of(j->pos, j->pos->ndim, p)];
        REAL *restrict c = (REAL *)j->table + p * j->R, *restrict s = c + h;
        for (int64_t i = 0; i < h; i++) {
            double angle = pos * j->freq[i];
            c[i] = (REAL)cos(angle);
            s[i] = (REAL)(j->sign * sin(angle));
        }
    }
}

/* y = x turned (y may be x: each pair is read before it is written): in the half-split layout pair (a, b) = (x[i], x[i + h]) gives
 * (a c - b s, b c + a s) (Llama's x cos + rotate_half(x) sin, in its order);
 * interleaved, pair (x[2i], x[2i + 1]) the same. */
static void FN(rope_row)(REAL *y, int64_t ys, const REAL *x, int64_t xs, const REAL *restrict c, const REAL *restrict s,
                         int64_t R, int64_t D, int interleaved) {
    int64_t h = R / 2, step = interleaved ? 2 : 1, other = interleaved ? 1 : h;
    for (int64_t i = 0; i < h; i++) {
        int64_t ia = i * step, ib = ia + other;
        REAL a = x[ia * xs], b = x[ib * xs];
        y[ia * ys] = a * c[i] - b * s[i];
        y[ib * ys] = b * c[i] + a * s[i];
    }
    if (y != x || ys != xs)
        for (int64_t k = R; k < D; k++) y[k * ys] = x[k * xs];
}

/* rope_row for unit-stride rows: UNIT pairs at a time are turned into
 * registers from x, then stored (y may be x), so both loops vectorise. */
static void FN(rope_row_unit)(REAL *y, const REAL *x, const REAL *restrict c, const REAL *restrict s, int64_t R,
                              int64_t D, int interleaved) {
    int64_t h = R / 2;
    for (int64_t i0 = 0; i0 < h; i0 += UNIT) {
        int64_t n = h - i0 < UNIT ? h - i0 : UNIT;
        REAL ta[UNIT], tb[UNIT];
        if (interleaved) {
            for (int64_t u = 0; u < n; u++) {
                REAL a = x[2 * (i0 + u)], b = x[2 * (i0 + u) + 1];
                ta[u] = a * c[i0 + u] - b * s[i0 + u];
                tb[u] = b * c[i0 + u] + a * s[i0 + u];
            }
            for (int64_t u = 0; u < n; u++) {
                y[2 * (i0 + u)] = ta[u];
                y[2 * (i0 + u) + 1] = tb[u];
            }
        } else {
            for (int64_t u = 0; u < n; u++) {
                REAL a = x[i0 + u], b = x[i0 + u + h];
                ta[u] = a * c[i0 + u] - b * s[i0 + u];
                tb[u] = b * c[i0 + u] + a * s[i0 + u];
            }
            for (int64_t u = 0; u < n; u++) {
                y[i0 + u] = ta[u];
                y[i0 + u + h] = tb[u];
            }
        }
    }
    if (y != x)
        for (int64_t k = R; k < D; k++) y[k] = x[k];
}

static void FN(rope_rows_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const rope_job *j = arg;
    const attnc_tensor *x = j->x, *y = j->y;
    int64_t xs = x->strides[x->ndim - 1], ys = y->strides[y->ndim - 1];
    int64_t r = block * ROWS, end = j->rows < r + ROWS ? j->rows : r + ROWS;
    if (r >= end) return;
    /* Row r's offsets, then stepped row by row (an odometer over the leading
     * dims) instead of divisions per row: for short rows the divisions cost
     * as much as the turning. */
    int nd = x->ndim - 1;
    int64_t idx[ATTNC_MAX_DIMS], xo = offset_of(x, nd, r), yo = offset_of(y, nd, r), po = position_index(j, r);
    for (int64_t rem = r, k = nd - 1; k >= 0; k--) {
        idx[k] = rem % x->shape[k];
        rem /= x->shape[k];
    }
    int64_t pstride[ATTNC_MAX_DIMS]; /* positions' row-major strides, 0 where they broadcast */
    for (int64_t k = nd - 1, m = 1; k >= 0; k--) {
        pstride[k] = j->pos->shape[k] == 1 ? 0 : m;
        m *= j->pos->shape[k];
    }
    bool unit = xs == 1 && ys == 1;
    for (; r < end; r++) {
        /* (no table when R = 0: nothing turns) */
        const REAL *c = j->R ? (const REAL *)j->table + po * j->R : NULL;
        const REAL *xr = (const REAL *)x->data + xo;
        REAL *yr = (REAL *)y->data + yo;
        if (unit)
            FN(rope_row_unit)(yr, xr, c, c ? c + j->R / 2 : NULL, j->R, j->D, j->interleaved);
        else
            FN(rope_row)(yr, ys, xr, xs, c, c ? c + j->R / 2 : NULL, j->R, j->D, j->interleaved);
        for (int k = nd - 1; k >= 0; k--) { /* the next row */
            xo += x->strides[k];
            yo += y->strides[k];
            po += pstride[k];
            if (++idx[k] < x->shape[k]) break;
            xo -= x->shape[k] * x->strides[k];
            yo -= y->shape[k] * y->strides[k];
            po -= x->shape[k] * pstride[k];
            idx[k] = 0;
        }
    }
}

#include "../../core/real_end.h"
