/* tensor.h: views of tensors as batches of strided matrices. */
#ifndef ATTNC_TENSOR_H
#define ATTNC_TENSOR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../include/attnc.h"
#include "typed.h"

/* One matrix of a batch: element (i, j) is at p + i*rs + j*cs (elements). */
typedef struct {
    void *p;
    int64_t rows, cols, rs, cs;
} attnc_mat;

/* The leading "batch" dims shared by the tensors of one call. */
typedef struct {
    int nb; /* number of batch dims             */
    int64_t shape[ATTNC_MAX_DIMS];
    int64_t count; /* product of shape                 */
} attnc_batch;

static inline bool attnc_present(const attnc_tensor *t) { return t && t->data; }

/* Rows [r0, r0 + n) of m, whose elements are es bytes: a block of a product
 * split by rows over the thread pool. */
static inline attnc_mat attnc_mat_rows(attnc_mat m, int64_t r0, int64_t n, size_t es) {
    m.p = (char *)m.p + (ptrdiff_t)(r0 * m.rs) * (ptrdiff_t)es;
    m.rows = n;
    return m;
}

size_t attnc_dtype_size(attnc_dtype dtype);
const char *attnc_dtype_name(attnc_dtype dtype);
int64_t attnc_numel(const attnc_tensor *t);
bool attnc_is_contiguous(const attnc_tensor *t);

/* Element offset of batch element b (row-major over batch->shape) in t,
 * whose first batch->nb dims are the batch dims; 0 for an empty batch (a
 * view of its "first" element, taken for its shape alone, stays at t's data). */
int64_t attnc_batch_offset(const attnc_tensor *t, const attnc_batch *batch, int64_t b);

/* The matrix made of t's last two dims at batch element b. */
attnc_mat attnc_batch_mat(const attnc_tensor *t, const attnc_batch *batch, int64_t b);

/* Pointer to element `offset` of t (typed by t's dtype). */
void *attnc_at(const attnc_tensor *t, int64_t offset);

/* Checks that return ATTNC_OK or fail with a message naming `name`. */
attnc_status attnc_check_dtype(const attnc_tensor *t, const char *name, attnc_dtype dtype);
/* t has exactly the shape [batch..., d0, d1, ...] (ndims trailing dims;
 * a trailing entry of -1 matches any size and is returned through it). */
attnc_status attnc_check_shape(const attnc_tensor *t, const char *name, const attnc_batch *batch, int ntrail,
                               int64_t *trail);
/* The layout the attention kernels read a matrix argument in (their tile
 * products take rows or columns as vectors): a unit stride in one of the last
 * two dims, the other at least that dim's extent (a dim of size one has any
 * stride). attnc.blas_ready (Python) asks this through the binding. */
bool attnc_has_unit_stride(const attnc_tensor *t);
/* attnc_has_unit_stride, or fail naming `name`. */
attnc_status attnc_check_blas(const attnc_tensor *t, const char *name);
/* Output or gradient: C-contiguous. */
attnc_status attnc_check_out(const attnc_tensor *t, const char *name);
/* A tensor of dtype with ndim dims of the given sizes (-1: any, returned
 * through the array); outputs must be contiguous, inputs may have any
 * strides. */
attnc_status attnc_check_dims(const attnc_tensor *t, const char *name, attnc_dtype dtype, int ndim, int64_t *sizes,
                              bool output);
/* The same for a required, C-contiguous tensor: what the fused models
 * (csrc/models/seq2seq, captioner, ntm, pointer) take for every array. */
attnc_status attnc_check_array(const attnc_tensor *t, const char *name, attnc_dtype dtype, int ndim, int64_t *sizes,
                               bool output);
/* attnc_check_array of a model's parameter (named label) or, when output, of
 * its gradient ("the gradient of label"). */
attnc_status attnc_check_param(const attnc_tensor *t, const char *label, attnc_dtype dtype, int ndim, int64_t *sizes,
                               bool output);

/* A required, C-contiguous tensor of dtype with n elements, any shape:
 * element-wise operations. */
attnc_status attnc_check_flat(const attnc_tensor *t, const char *name, attnc_dtype dtype, int64_t n);

/* The sizes listed as (ndim, array) arguments: ATTNC_SIZES(B, T, H). */
#define ATTNC_SIZES(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }
/* attnc_check_array / attnc_check_param with the sizes listed. */
#define ATTNC_NEED(t, name, dtype, output, ...) attnc_check_array(t, name, dtype, ATTNC_SIZES(__VA_ARGS__), output)
#define ATTNC_NEED_PARAM(t, label, dtype, output, ...) \
    attnc_check_param(t, label, dtype, ATTNC_SIZES(__VA_ARGS__), output)

#endif
