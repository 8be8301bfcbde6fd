/* rotary.h: RoPE for the layers that turn their own queries and keys in place
 * (csrc/ops/transformer). */
#ifndef ATTNC_ROTARY_H
#define ATTNC_ROTARY_H
#include "../../include/attnc.h"

/* attnc_rotary_forward (sign 1) or _backward (sign -1) without the checks of
 * the caller's arguments (the caller has made them): y may have any strides
 * and may be x itself. Fails only when the angle table cannot be allocated. */
attnc_status attnc_rotary_apply(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *positions, double base,
                                int64_t rotary_dim, int interleaved, double sign);

#endif
