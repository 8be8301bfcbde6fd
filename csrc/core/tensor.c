/* tensor.c: tensor views, batch offsets and argument checks. */
#include "tensor.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "status.h"

size_t attnc_dtype_size(attnc_dtype dtype) {
    switch (dtype) {
    case ATTNC_FLOAT32: return 4;
    case ATTNC_FLOAT64: return 8;
    case ATTNC_BOOL: return 1;
    case ATTNC_INT64: return 8;
    }
    return 0;
}

const char *attnc_dtype_name(attnc_dtype dtype) {
    switch (dtype) {
    case ATTNC_FLOAT32: return "float32";
    case ATTNC_FLOAT64: return "float64";
    case ATTNC_BOOL: return "bool";
    case ATTNC_INT64: return "int64";
    }
    return "unknown";
}

int64_t attnc_numel(const attnc_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

bool attnc_is_contiguous(const attnc_tensor *t) {
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != expect) return false;
        expect *= t->shape[d];
    }
    return true;
}

int64_t attnc_batch_offset(const attnc_tensor *t, const attnc_batch *batch, int64_t b) {
    int64_t off = 0;
    for (int d = batch->nb - 1; d >= 0; d--) {
        int64_t n = batch->shape[d];
        if (n == 0) return 0; /* an empty batch has no element b: its views start at t's data */
        off += (b % n) * t->strides[d];
        b /= n;
    }
    return off;
}

void *attnc_at(const attnc_tensor *t, int64_t offset) {
    return (char *)t->data + offset * (int64_t)attnc_dtype_size(t->dtype);
}

attnc_mat attnc_batch_mat(const attnc_tensor *t, const attnc_batch *batch, int64_t b) {
    int n = t->ndim;
    attnc_mat m = {attnc_at(t, attnc_batch_offset(t, batch, b)), t->shape[n - 2], t->shape[n - 1], t->strides[n - 2],
                   t->strides[n - 1]};
    return m;
}

/* "(2, 3)", "(5,)", "()"; a size < 0 (one a check leaves free) shows as "any". */
static void format_sizes(const int64_t *sizes, int n, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int d = 0; d < n && used < size; d++) {
        const char *sep = d ? ", " : "";
        used += sizes[d] < 0 ? (size_t)snprintf(buf + used, size - used, "%sany", sep)
                             : (size_t)snprintf(buf + used, size - used, "%s%" PRId64, sep, sizes[d]);
    }
    if (used < size) snprintf(buf + used, size - used, n == 1 ? ",)" : ")");
}

attnc_status attnc_check_dtype(const attnc_tensor *t, const char *name, attnc_dtype dtype) {
    if (t->dtype != dtype)
        return attnc_fail(ATTNC_ERR_TYPE, "%s has dtype %s, expected %s", name, attnc_dtype_name(t->dtype),
                          attnc_dtype_name(dtype));
    if (t->ndim < 0 || t->ndim > ATTNC_MAX_DIMS)
        return attnc_fail(ATTNC_ERR_VALUE, "%s has %d dims, at most %d are supported", name, t->ndim, ATTNC_MAX_DIMS);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0 || t->shape[d] > INT_MAX)
            return attnc_fail(ATTNC_ERR_VALUE, "%s has a dim of size %" PRId64 " (sizes must be in [0, %d])", name,
                              t->shape[d], INT_MAX);
    return ATTNC_OK;
}

attnc_status attnc_check_shape(const attnc_tensor *t, const char *name, const attnc_batch *batch, int ntrail,
                               int64_t *trail) {
    bool ok = t->ndim == batch->nb + ntrail;
    for (int d = 0; ok && d < batch->nb; d++) ok = t->shape[d] == batch->shape[d];
    for (int d = 0; ok && d < ntrail; d++) ok = trail[d] < 0 || t->shape[batch->nb + d] == trail[d];
    if (!ok) {
        int64_t want[2 * ATTNC_MAX_DIMS];
        for (int d = 0; d < batch->nb; d++) want[d] = batch->shape[d];
        for (int d = 0; d < ntrail; d++) want[batch->nb + d] = trail[d];
        char got[256], expected[256];
        format_sizes(t->shape, t->ndim, got, sizeof got);
        format_sizes(want, batch->nb + ntrail, expected, sizeof expected);
        return attnc_fail(ATTNC_ERR_VALUE, "%s has shape %s, expected %s", name, got, expected);
    }
    for (int d = 0; d < ntrail; d++)
        if (trail[d] < 0) trail[d] = t->shape[batch->nb + d];
    return ATTNC_OK;
}

bool attnc_has_unit_stride(const attnc_tensor *t) {
    int n = t->ndim;
    if (n < 2) return true;
    int64_t rows = t->shape[n - 2], cols = t->shape[n - 1];
    int64_t rs = rows == 1 ? (cols > 1 ? cols : 1) : t->strides[n - 2];
    int64_t cs = cols == 1 ? 1 : t->strides[n - 1];
    return (cs == 1 && rs >= (cols > 1 ? cols : 1)) || (rs == 1 && cs >= (rows > 1 ? rows : 1)) || rows == 0 ||
           cols == 0;
}

attnc_status attnc_check_blas(const attnc_tensor *t, const char *name) {
    if (attnc_has_unit_stride(t)) return ATTNC_OK;
    int n = t->ndim;
    return attnc_fail(ATTNC_ERR_LAYOUT,
                      "%s needs a unit stride in one of its last two dims (strides %" PRId64 ", %" PRId64
                      " elements); pass a contiguous copy",
                      name, t->strides[n - 2], t->strides[n - 1]);
}

attnc_status attnc_check_out(const attnc_tensor *t, const char *name) {
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "output %s must be C-contiguous", name);
    return ATTNC_OK;
}

attnc_status attnc_check_dims(const attnc_tensor *t, const char *name, attnc_dtype dtype, int ndim, int64_t *sizes,
                              bool output) {
    static const attnc_batch none = {.nb = 0, .count = 1};
    TRY(attnc_check_dtype(t, name, dtype));
    TRY(attnc_check_shape(t, name, &none, ndim, sizes));
    return output ? attnc_check_out(t, name) : ATTNC_OK;
}

attnc_status attnc_check_array(const attnc_tensor *t, const char *name, attnc_dtype dtype, int ndim, int64_t *sizes,
                               bool output) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
    TRY(attnc_check_dims(t, name, dtype, ndim, sizes, output));
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "%s must be C-contiguous", name);
    return ATTNC_OK;
}

attnc_status attnc_check_param(const attnc_tensor *t, const char *label, attnc_dtype dtype, int ndim, int64_t *sizes,
                               bool output) {
    char name[128];
    snprintf(name, sizeof name, "%s%s", output ? "the gradient of " : "", label);
    return attnc_check_array(t, name, dtype, ndim, sizes, output);
}

attnc_status attnc_check_flat(const attnc_tensor *t, const char *name, attnc_dtype dtype, int64_t n) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
    TRY(attnc_check_dtype(t, name, dtype));
    if (attnc_numel(t) != n)
        return attnc_fail(ATTNC_ERR_VALUE, "%s has %lld elements, expected %lld", name, (long long)attnc_numel(t),
                          (long long)n);
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "%s must be contiguous", name);
    return ATTNC_OK;
}
