/* captioner.h: the show-attend-tell decoder (Xu et al. 2015) of
 * attnc.models.Captioner: an LSTM that attends over a grid of L feature
 * vectors a_i (F) of each image while it emits a caption.
 *
 * Sizes: B images, T decoder steps, L cells, F features per cell, E embedding,
 * H hidden, A attention, V vocabulary.
 *
 *   h0 = tanh(W_h mean_i a_i + b_h)              c0 = tanh(W_c mean_i a_i + b_c)
 *   e_ti = v . tanh(W_a a_i + b_a + U_a h_{t-1})  alpha_t = softmax_i(e_t)
 *   beta_t = sigmoid(w_b . h_{t-1} + b_b)         (1 without the gate)
 *   soft:  z_t = beta_t sum_i alpha_ti a_i        hard: z_t = beta_t a_{s_t}
 *   h_t, c_t = LSTMCell([E y_{t-1}; z_t], (h_{t-1}, c_{t-1}))   (torch's i, f, g, o)
 *   logits_t = L_o (E y_{t-1} + L_h h_t + L_z z_t) + b_o          (deep output, eq. 7)
 *
 * All tensors of one call share the dtype (float32 or float64); token ids
 * and sampled locations are INT64. Parameters must be C-contiguous, and so
 * must features, tokens and every output. */
#ifndef ATTNC_CAPTIONER_H
#define ATTNC_CAPTIONER_H
#include <stdint.h>

#include "../../include/attnc.h"

typedef enum {
    ATTNC_CAPTION_SOFT = 0,        /* deterministic soft attention                           */
    ATTNC_CAPTION_HARD_SAMPLE = 1, /* s_t ~ Categorical(alpha_t), Philox (seed, 0, b T + t);  */
                                   /* a row takes the expectation instead (s_t = -1) with     */
                                   /* probability expect_prob, Philox (seed, 1, b)            */
    ATTNC_CAPTION_HARD_ARGMAX = 2, /* s_t = argmax alpha_t (lowest index on ties)           */
    ATTNC_CAPTION_HARD_GIVEN = 3   /* s_t read from samples; -1: the expectation (soft z_t)  */
} attnc_caption_mode;

typedef struct {
    attnc_caption_mode mode;
    int gate;           /* 1: the gate beta_t (gate_w, gate_b present); 0: beta_t = 1 */
    uint64_t seed;      /* for ATTNC_CAPTION_HARD_SAMPLE                             */
    double expect_prob; /* HARD_SAMPLE: the chance a row uses the expected context
                         * (Xu et al. 2015, sec. 4.1: halves the estimator's variance) */
} attnc_captioner_config;

/* The parameters (or, for the backward, their gradients: same shapes). */
typedef struct {
    attnc_tensor embedding;              /* (V, E)                               */
    attnc_tensor init_h_w, init_h_b;     /* (H, F), (H)                          */
    attnc_tensor init_c_w, init_c_b;     /* (H, F), (H)                          */
    attnc_tensor att_feat_w, att_feat_b; /* W_a (A, F), b (A)                    */
    attnc_tensor att_hidden_w;           /* U_a (A, H)                           */
    attnc_tensor att_score_w;            /* v (1, A)                             */
    attnc_tensor gate_w, gate_b;         /* (1, H), (1); absent without the gate */
    attnc_tensor w_ih, w_hh, b_ih, b_hh; /* (4H, E + F), (4H, H), (4H), (4H)     */
    attnc_tensor out_h_w;                /* L_h (E, H)                           */
    attnc_tensor out_z_w;                /* L_z (E, F)                           */
    attnc_tensor out_w, out_b;           /* L_o (V, E), b_o (V)                  */
} attnc_captioner_params;

/* Elements of the `saved` buffer a forward fills for its backward. */
int64_t attnc_captioner_saved_size(int64_t B, int64_t T, int64_t L, int64_t F, int64_t E, int64_t H, int64_t A);

/* Teacher-forced forward over whole sequences.
 * logits (B, T, V), alphas (B, T, L) <- features (B, L, F), tokens (B, T)
 * INT64 in [0, V) (y_{t-1}: BOS then the caption). samples (B, T) INT64:
 * written with the chosen locations in the hard modes (read in
 * ATTNC_CAPTION_HARD_GIVEN, each in [-1, L), -1 = the soft context); may be
 * absent in soft mode.
 * saved (attnc_captioner_saved_size) is optional (absent: no backward). */
attnc_status attnc_captioner_forward(attnc_tensor *logits, attnc_tensor *alphas, attnc_tensor *samples,
                                     attnc_tensor *saved, const attnc_tensor *features, const attnc_tensor *tokens,
                                     const attnc_captioner_params *p, const attnc_captioner_config *cfg);

/* Backward through time. grads (every parameter's gradient, overwritten;
 * gate ones only with the gate) and dfeatures (B, L, F) (optional) <-
 * dlogits (B, T, V), dalphas (B, T, L) (optional: the cotangent of alphas),
 * dlogp (B, T) (optional, hard modes: the cotangent of log alpha_{t, s_t},
 * the score-function term of REINFORCE), and the forward's saved buffer,
 * inputs and samples. */
attnc_status attnc_captioner_backward(attnc_captioner_params *grads, attnc_tensor *dfeatures,
                                      const attnc_tensor *dlogits, const attnc_tensor *dalphas,
                                      const attnc_tensor *dlogp, const attnc_tensor *saved,
                                      const attnc_tensor *features, const attnc_tensor *tokens,
                                      const attnc_tensor *samples, const attnc_captioner_params *p,
                                      const attnc_captioner_config *cfg);

/* Greedy (beam_size 1) or beam search (beam_size K >= 2) from bos, by
 * core/search.c with the rules of attnc_s2s_generate. Greedy feeds back the
 * most probable token (lowest id on ties); a row that emits eos (>= 0; -1:
 * none) keeps being fed eos, and decoding stops when every row has ended.
 * Beam search follows the reference decoder of attnc/models/seq2seq.py
 * (_reference_decode): every live hypothesis is extended by every token; one
 * ending in eos is finished with score sum(log p) / length ** length_penalty;
 * the K best others by sum(log p) stay live (ties: earlier hypothesis, then
 * lower token); hypotheses reaching max_len are finished; a row stops when
 * no live hypothesis can beat its best finished one.
 * tokens (B, max_len) INT64 <- each row's tokens (eos after its end, or 0
 * without eos), lengths (B) INT64 <- each row's length (its eos included),
 * alphas (B, max_len, L) (optional) <- the weights of the step that emitted
 * each token (0 after the row's end) <- features (B, L, F). cfg->mode must
 * be SOFT or HARD_ARGMAX. */
attnc_status attnc_captioner_generate(attnc_tensor *tokens, attnc_tensor *lengths, attnc_tensor *alphas,
                                      const attnc_tensor *features, const attnc_captioner_params *p,
                                      const attnc_captioner_config *cfg, int64_t bos, int64_t eos, int64_t beam_size,
                                      double length_penalty);

#endif
