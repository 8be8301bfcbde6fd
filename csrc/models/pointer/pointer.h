/* pointer.h: greedy and beam-search decoding of the pointer network of
 * attnc.models.PointerNet (Vinyals et al. 2015) under output constraints.
 *
 * Sizes: B rows, n inputs of width D (padded; row b has n_b real ones), P =
 * n + 1 pointer positions (position 0 is the end token, position j >= 1 is
 * input j - 1), H hidden units. The encoder runs in Python (attnc.nn.LSTM);
 * decoding starts from its final state and from keys = W1 e_j. One step:
 *
 *   x = start (first step or after the end) or inputs[b, p - 1] (p: the last pointer)
 *   (i, f, g, o) = W_ih x + b_ih + W_hh d + b_hh;  c = f c + i g;  d = o tanh(c)   (torch's LSTM)
 *   u_j = v . tanh(keys[b, j] + W2 d)                                  j in [0, P)
 *   masked to -inf: positions past the row's n_b inputs, inputs already chosen,
 *   and the end token unless the constraint allows it:
 *     PERMUTATION, TOUR: only once every input is chosen (it is then the only choice);
 *     HULL: after at least one input.
 *
 * The search is core/search.c's with eos = 0 (greedy: the most probable
 * position, lowest on ties; beam: sum of log-probabilities, length_penalty
 * alpha). All float tensors share one dtype and are C-contiguous. */
#ifndef ATTNC_POINTER_H
#define ATTNC_POINTER_H
#include <stdint.h>

#include "../../include/attnc.h"

typedef enum { ATTNC_POINTER_PERMUTATION = 0, ATTNC_POINTER_TOUR = 1, ATTNC_POINTER_HULL = 2 } attnc_pointer_constraint;

typedef struct {
    attnc_tensor w_ih, w_hh, b_ih, b_hh; /* the decoder LSTM: (4H, D), (4H, H), (4H), (4H) */
    attnc_tensor w2;                     /* W2 (H, H): the decoder state's projection   */
    attnc_tensor v;                      /* (H)                                         */
    attnc_tensor start;                  /* (D): the first step's input                 */
} attnc_pointer_params;

/* out (B, T) INT64 <- each row's pointer positions (0 = the end token; 0
 * after it), counts (B) INT64 <- each row's count (its end included) <-
 * inputs (B, n, D), lengths (B) INT64 in [1, n] (each row's real inputs),
 * keys (B, P, H), h0 and c0 (B, H). T >= 1 is the step limit. logits (B,
 * T, P) of the inputs' dtype, or absent: each output step's pointer logits
 * (−inf where the constraint forbids; 0 after a row's end), the model's
 * output distribution before its softmax. */
attnc_status attnc_pointer_decode(attnc_tensor *out, attnc_tensor *counts, attnc_tensor *logits,
                                  const attnc_tensor *inputs, const attnc_tensor *lengths, const attnc_tensor *keys,
                                  const attnc_tensor *h0, const attnc_tensor *c0, const attnc_pointer_params *p,
                                  attnc_pointer_constraint constraint, int64_t beam_size, double length_penalty);

/* The check attnc_pointer_decode makes of its lengths, for the Python model's
 * training forward too (which reads them before any C call): lengths (B)
 * INT64, C-contiguous, each in [1, n]. */
attnc_status attnc_pointer_check_lengths(const attnc_tensor *lengths, int64_t B, int64_t n);

#endif
