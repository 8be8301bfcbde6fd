/* typed.h: the one way C code reaches a kernel written once for both dtypes.
 *
 * core/real.h compiles a typed implementation file twice and names each
 * function FN(name): name_f32 and name_f64. ATTNC_TYPED picks the twin for a
 * tensor's dtype, for a call or for a parallel task:
 *     ATTNC_TYPED(dt, hard_forward)(args...);
 *     attnc_parallel_for(blocks, workers, ATTNC_TYPED(dt, softmax_task), &job);
 * The two twins must have one signature, so what crosses into them is
 * dtype-neutral: tensors, void pointers, or a job struct defined once (outside
 * the _impl.h) whose typed task reads its void pointers as REAL pointers.
 * Float32-only paths (the fast RNN cells, the tile kernels) test the dtype
 * themselves: they have no float64 twin. */
#ifndef ATTNC_TYPED_H
#define ATTNC_TYPED_H
#include <stdint.h>

#include "../include/attnc.h"

#define ATTNC_TYPED(dtype, name) ((dtype) == ATTNC_FLOAT32 ? name##_f32 : name##_f64)

/* Element i of a float32 or float64 array, as a double: for code outside the
 * typed kernels that reads or writes a few values of either dtype (search,
 * checks of values, a decoder's embedding row). */
static inline double attnc_real_get(const void *p, attnc_dtype dtype, int64_t i) {
    return dtype == ATTNC_FLOAT32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* Element i of a float32 or float64 array <- v (rounded to float32 there). */
static inline void attnc_real_set(void *p, attnc_dtype dtype, int64_t i, double v) {
    if (dtype == ATTNC_FLOAT32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

#endif
