/* softmax.h: masked softmax of one row, shared by every attention kernel. */
#ifndef ATTNC_SOFTMAX_H
#define ATTNC_SOFTMAX_H
#include "common.h"

/* w[0..tk) <- softmax of s[j * scs] over the keys j in [lo, hi) that
 * attnc_mask_ok(m, i, j) allows; every other entry 0. A row with nothing
 * allowed, or only -inf scores, is all zeros. Returns the number of allowed
 * keys. s may alias w when scs == 1. */
int64_t attnc_softmax_row_f32(float *w, const float *s, int64_t scs, int64_t tk, int64_t lo, int64_t hi,
                              const attnc_bmask *m, int64_t i);
int64_t attnc_softmax_row_f64(double *w, const double *s, int64_t scs, int64_t tk, int64_t lo, int64_t hi,
                              const attnc_bmask *m, int64_t i);

/* ds[j] <- w[j] (dw[j * dcs] - sum_k w[k] dw[k * dcs]), 0 where w[j] == 0
 * (so masked keys never pass a NaN cotangent on). ds may alias dw when
 * dcs == 1. */
void attnc_softmax_row_backward_f32(float *ds, const float *dw, int64_t dcs, const float *w, int64_t tk);
void attnc_softmax_row_backward_f64(double *ds, const double *dw, int64_t dcs, const double *w, int64_t tk);

#endif
