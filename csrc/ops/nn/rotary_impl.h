/* rotary_impl.h: typed kernels of rotary.c (see core/real.h). */
#include "../../core/real.h"

/* Rows of the table: position p's cosines and sines (times sign), pair i at
 * the frequency base^(-2i / R), all in double, then rounded. */
static void FN(rope_table_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const rope_job *j = arg;
    int64_t h = j->R / 2;
    for (int64_t p = block * ROWS; p < j->P && p < (block + 1) * ROWS; p++) {
        double pos = ((const double *)j->pos->data)[offset_of(j->pos, j->pos->ndim, p)];
        REAL *restrict c = (REAL *)j->table + p * j->R, *restrict s = c + h;
        for (int64_t i = 0; i < h; i++) {
            double angle = pos * pow(j->base, -(double)(2 * i) / (double)j->R);
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

static void FN(rope_rows_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const rope_job *j = arg;
    const attnc_tensor *x = j->x, *y = j->y;
    int64_t xs = x->strides[x->ndim - 1], ys = y->strides[y->ndim - 1];
    for (int64_t r = block * ROWS; r < j->rows && r < (block + 1) * ROWS; r++) {
        /* (no table when R = 0: nothing turns) */
        const REAL *c = j->R ? (const REAL *)j->table + position_index(j, r) * j->R : NULL;
        const REAL *xr = (const REAL *)x->data + offset_of(x, x->ndim - 1, r);
        REAL *yr = (REAL *)y->data + offset_of(y, y->ndim - 1, r);
        FN(rope_row)(yr, ys, xr, xs, c, c ? c + j->R / 2 : NULL, j->R, j->D, j->interleaved);
    }
}

#include "../../core/real_end.h"
