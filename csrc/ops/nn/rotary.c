/* rotary.c: rotary position embeddings (RoPE; Su et al. 2021), forward and
 * backward. x (..., L, D) with any strides; positions (..., L) float64, each
 * leading dim x's or 1 (broadcast); y (..., L, D) C-contiguous (strided, or
 * x itself, through attnc_rotary_apply). Features
 * [0, R) turn in R / 2 pairs, pair i by the angle position * base^(-2i / R);
 * features [R, D) pass through. The pairs are (2i, 2i + 1) when interleaved
 * (RoFormer, GPT-J) and (i, i + R / 2) otherwise (GPT-NeoX, Llama). The angles,
 * cosines and sines are computed in double once per position (a table), then
 * rounded to x's dtype; every output element is computed alone, so results do
 * not depend on the thread count. The backward turns dy by the opposite
 * angles (a rotation's transpose is its inverse). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"
#include "rotary.h"

enum { ROWS = 64 }; /* rows of x (or positions) per block */
enum { UNIT = 16 }; /* pairs turned at a time in unit-stride rows */

typedef struct {
    const attnc_tensor *x, *pos;
    attnc_tensor *y;
    void *table;  /* (P, 2, R / 2) of x's dtype: the cosines, then the sines */
    double *freq; /* (R / 2): base^(-2i / R), computed once, not once per position */
    int64_t rows; /* of x: numel / D */
    int64_t P;    /* positions' element count */
    int64_t R, D; /* rotary and feature widths */
    double base;  /* of the frequencies */
    double sign;  /* 1 forward, -1 backward */
    int interleaved;
} rope_job;

/* Element offset in t of the element with row-major index r over t's first
 * n dims. */
static int64_t offset_of(const attnc_tensor *t, int n, int64_t r) {
    int64_t off = 0;
    for (int k = n - 1; k >= 0; k--) {
        off += (r % t->shape[k]) * t->strides[k];
        r /= t->shape[k];
    }
    return off;
}

/* Row r of x's index into positions (row-major over positions' shape). */
static int64_t position_index(const rope_job *j, int64_t r) {
    const attnc_tensor *x = j->x, *p = j->pos;
    int64_t idx = 0, mult = 1;
    for (int k = x->ndim - 2; k >= 0; k--) {
        int64_t i = r % x->shape[k];
        r /= x->shape[k];
        if (p->shape[k] != 1) idx += i * mult;
        mult *= p->shape[k];
    }
    return idx;
}

#define ATTNC_F64 0
#include "rotary_impl.h"
#define ATTNC_F64 1
#include "rotary_impl.h"

/* The checks both directions share: x (the input or doutput) and its
 * output y of one shape and a float dtype, positions broadcasting to x's
 * leading dims, and the options. */
static attnc_status check(const attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *pos, double base, int64_t R,
                          const char *xname, const char *yname) {
    if (!attnc_present(x)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", xname);
    attnc_dtype dt = x->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "%s has dtype %s, expected float32 or float64", xname, attnc_dtype_name(dt));
    if (x->ndim < 2) return attnc_fail(ATTNC_ERR_VALUE, "%s must be (..., L, D), got %d dims", xname, x->ndim);
    int64_t sizes[ATTNC_MAX_DIMS];
    for (int k = 0; k < x->ndim; k++) sizes[k] = x->shape[k];
    if (!attnc_present(y)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", yname);
    TRY(attnc_check_dims(y, yname, dt, x->ndim, sizes, true));
    if (!attnc_present(pos)) return attnc_fail(ATTNC_ERR_TYPE, "positions is required");
    TRY(attnc_check_dtype(pos, "positions", ATTNC_FLOAT64));
    if (pos->ndim != x->ndim - 1)
        return attnc_fail(ATTNC_ERR_VALUE, "positions must have %d dims (%s's without D), got %d", x->ndim - 1, xname,
                          pos->ndim);
    for (int k = 0; k < pos->ndim; k++)
        if (pos->shape[k] != 1 && pos->shape[k] != x->shape[k])
            return attnc_fail(ATTNC_ERR_VALUE, "positions' dim %d is %lld: expected 1 or %s's %lld", k,
                              (long long)pos->shape[k], xname, (long long)x->shape[k]);
    int64_t D = x->shape[x->ndim - 1];
    if (R < 0 || R > D || R % 2)
        return attnc_fail(ATTNC_ERR_VALUE, "rotary_dim must be even and in [0, D = %lld], got %lld", (long long)D,
                          (long long)R);
    if (!(base > 0) || !isfinite(base))
        return attnc_fail(ATTNC_ERR_VALUE, "base must be positive and finite, got %g", base);
    int64_t P = attnc_numel(pos);
    for (int64_t i = 0; i < P; i++)
        if (!isfinite(((const double *)pos->data)[offset_of(pos, pos->ndim, i)]))
            return attnc_fail(ATTNC_ERR_VALUE, "positions must be finite");
    return ATTNC_OK;
}

attnc_status attnc_rotary_apply(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *pos, double base, int64_t R,
                                int interleaved, double sign) {
    attnc_dtype dt = x->dtype;
    int64_t D = x->shape[x->ndim - 1], n = attnc_numel(x);
    rope_job job = {.x = x,
                    .pos = pos,
                    .y = y,
                    .rows = D ? n / D : 0,
                    .P = attnc_numel(pos),
                    .R = R,
                    .D = D,
                    .base = base,
                    .sign = sign,
                    .interleaved = interleaved};
    if (n == 0) return ATTNC_OK;
    TRY(attnc_calloc(&job.table, (size_t)(job.P * R), attnc_dtype_size(dt), "the rotary angle table"));
    attnc_status st = attnc_calloc((void **)&job.freq, (size_t)(R / 2 + 1), sizeof *job.freq, "the rotary frequencies");
    if (st != ATTNC_OK) {
        free(job.table);
        return st;
    }
    for (int64_t i = 0; i < R / 2; i++) job.freq[i] = pow(base, -(double)(2 * i) / (double)R);
    int workers = attnc_workers_for(n * 4);
    if (R) attnc_parallel_for((job.P + ROWS - 1) / ROWS, workers, ATTNC_TYPED(dt, rope_table_task), &job);
    attnc_parallel_for((job.rows + ROWS - 1) / ROWS, workers, ATTNC_TYPED(dt, rope_rows_task), &job);
    free(job.table);
    free(job.freq);
    return ATTNC_OK;
}

attnc_status attnc_rotary_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *positions, double base,
                                  int64_t rotary_dim, int interleaved) {
    TRY(check(y, x, positions, base, rotary_dim, "input", "output"));
    return attnc_rotary_apply(y, x, positions, base, rotary_dim, interleaved, 1.0);
}

attnc_status attnc_rotary_backward(attnc_tensor *dx, const attnc_tensor *dy, const attnc_tensor *positions, double base,
                                   int64_t rotary_dim, int interleaved) {
    TRY(check(dx, dy, positions, base, rotary_dim, "doutput", "dinput"));
    return attnc_rotary_apply(dx, dy, positions, base, rotary_dim, interleaved, -1.0);
}
