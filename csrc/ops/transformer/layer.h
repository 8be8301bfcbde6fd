/* layer.h: what layer.c shares with the decoder (decode.c). */
#ifndef ATTNC_TRANSFORMER_LAYER_H
#define ATTNC_TRANSFORMER_LAYER_H
#include <stdbool.h>

#include "../../include/attnc.h"

/* A contiguous tensor of dtype dt over data (ndim <= 4). */
attnc_tensor attnc_view(void *data, attnc_dtype dt, int ndim, const int64_t *shape);
/* Rows [r0, r0 + n) of a 1-D or 2-D tensor (absent stays absent). */
attnc_tensor attnc_rows(const attnc_tensor *t, int64_t r0, int64_t n);
/* The (B, H, T, E / H) heads of rows of width E laid out every `stride`
 * elements in a (B, T, stride) buffer starting at data. */
attnc_tensor attnc_heads(void *data, attnc_dtype dt, int64_t B, int64_t H, int64_t T, int64_t E, int64_t stride);
/* The key and value heads of the layers cfg configures (kv_heads, or nhead). */
int64_t attnc_layer_kv_heads(const attnc_layer_config *cfg);
/* Checks the layer's parameters against E (d_model) and returns F. */
attnc_status attnc_check_layer_params(const attnc_layer_params *p, const attnc_layer_config *cfg, attnc_dtype dt,
                                      int64_t E, bool decoder, int64_t *F);
/* A norm over rows of x (N, E) into y, the statistics into mean, rstd (N). */
attnc_status attnc_norm_rows(attnc_tensor *y, attnc_tensor *mean, attnc_tensor *rstd, const attnc_tensor *x,
                             const attnc_norm_params *norm, double eps);

#endif
