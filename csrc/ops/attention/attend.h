/* attend.h: the steps soft, hard and local attention share, per batch
 * element b. Shapes: W, G (Tq, Tk) contiguous; V (Tk, dv); C (Tq, dv). */
#ifndef ATTNC_ATTEND_H
#define ATTNC_ATTEND_H
#include "score.h"

#define ATTNC_DECLARE_ATTEND(REAL, SFX)                                                                       \
    /* G <- dcontext_b V_b^T + dweights_b (either may be absent: zeros). */                                   \
    void attnc_weights_cotangent_##SFX(REAL *g, const attnc_dims *d, int64_t b, const attnc_tensor *dcontext, \
                                       const attnc_tensor *dweights, const attnc_tensor *values);             \
    /* dvalues_b <- W_b^T dcontext_b (zeros without dcontext); w (Tq, Tk) contiguous. */                      \
    void attnc_values_backward_##SFX(attnc_tensor *dvalues, const attnc_dims *d, int64_t b, const REAL *w,    \
                                     const attnc_tensor *dcontext);                                           \
    /* context_b <- w values_b, w (Tq, Tk) contiguous. */                                                     \
    void attnc_context_##SFX(attnc_tensor *context, const attnc_dims *d, int64_t b, const REAL *w,            \
                             const attnc_tensor *values);

ATTNC_DECLARE_ATTEND(float, f32)
ATTNC_DECLARE_ATTEND(double, f64)

/* A forward's context (..., Tq, dv) and weights (..., Tq, Tk): required,
 * contiguous. */
attnc_status attnc_check_outputs(const attnc_dims *d, attnc_tensor *context, attnc_tensor *weights);

/* A backward's cotangents dcontext and dweights (optional inputs), its
 * gradients dquery, dkeys, dvalues (optional contiguous outputs) and the
 * score parameters' gradients. */
attnc_status attnc_check_backward(const attnc_dims *d, const attnc_tensor *dcontext, const attnc_tensor *dweights,
                                  attnc_tensor *dquery, attnc_tensor *dkeys, attnc_tensor *dvalues,
                                  const attnc_score_params *params, attnc_score_grads *dparams);

#endif
