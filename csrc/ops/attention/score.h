/* score.h: the score family per batch element, shared by every attention
 * kernel. A call opens a context (attnc_score_open), scores batch elements
 * in parallel, and closes it. A backward runs in two phases so that results
 * never depend on the thread count: score_batch_backward (parallel over
 * batch elements) writes dquery/dkeys (the additive score: its projections'
 * gradients) and leaves per-element partial parameter gradients in a stash;
 * attnc_score_run_backward then finishes them over the whole batch. */
#ifndef ATTNC_SCORE_H
#define ATTNC_SCORE_H
#include "common.h"

typedef struct {
    const attnc_dims *d;
    const attnc_tensor *query, *keys;
    const attnc_score_params *p;
    /* The additive score's projections of the whole batch, made once by
     * attnc_score_open (or read from params' projections when ready): QA =
     * Q W_q (B Tq, da), KA = K W_k (B Tk, da), then v (da) contiguous. NULL
     * for the other kinds. own_pre: allocated by the open, freed by the close. */
    void *pre;
    bool own_pre;
} attnc_score_ctx;

/* c <- a context for a call on query and keys (checked by
 * attnc_check_inputs into d); fails only on allocation. Every successful
 * open is paired with attnc_score_close. */
attnc_status attnc_score_open(attnc_score_ctx *c, const attnc_dims *d, const attnc_tensor *query,
                              const attnc_tensor *keys, const attnc_score_params *p);
void attnc_score_close(attnc_score_ctx *c);

/* Per-worker scratch (elements) for one batch element, forward or backward. */
size_t attnc_score_scratch(const attnc_dims *d, attnc_score_kind kind);
/* Stash (elements) the backward needs for the whole batch. */
size_t attnc_score_stash(const attnc_dims *d, attnc_score_kind kind);

#define ATTNC_DECLARE_SCORE(REAL, SFX)                                                                        \
    /* s (Tq, Tk) contiguous <- scores of batch element b. */                                                 \
    void attnc_score_batch_##SFX(const attnc_score_ctx *c, int64_t b, REAL *s, REAL *scratch);                \
    /* dquery, dkeys of element b (each may be absent), beta's gradient, and the stash   \
     * <- ds (Tq, Tk) contiguous. */                    \
    void attnc_score_batch_backward_##SFX(const attnc_score_ctx *c, int64_t b, const REAL *ds, REAL *scratch, \
                                          REAL *stash, attnc_tensor *dquery, attnc_tensor *dkeys,             \
                                          attnc_score_grads *g);                                              \
    /* Parameter gradients (but beta's and the additive score's) <- the stash and       \
     * ds_all (B, Tq, Tk). */                     \
    void attnc_score_params_backward_##SFX(const attnc_score_ctx *c, const void *ds_all, const void *stash,   \
                                           attnc_score_grads *g);

ATTNC_DECLARE_SCORE(float, f32)
ATTNC_DECLARE_SCORE(double, f64)

/* Both backward phases over the whole batch: dquery, dkeys (each may be
 * absent) and g <- ds_all, contiguous (B, Tq, Tk) of the call's dtype. */
attnc_status attnc_score_run_backward(const attnc_score_ctx *c, const void *ds_all, attnc_tensor *dquery,
                                      attnc_tensor *dkeys, attnc_score_grads *g);

/* Check parameter gradients (each optional) against the parameters. */
attnc_status attnc_score_check_grads(const attnc_dims *d, const attnc_score_params *p, attnc_score_grads *g);

#endif
