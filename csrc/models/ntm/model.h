/* model.h: the Neural Turing Machine of attnc.models.NTM (Graves et al.
 * 2014, with Collier & Beel 2018's clipping), a whole input sequence forward
 * and backward through time.
 *
 * Sizes: B rows, T steps, I inputs, O outputs, C controller units, N memory
 * slots of width M, R read heads then W write heads (Hh = R + W), K shifts
 * (odd). One step (h_0 = c_0 = 0; r_0, w_0, M_0 given per row):
 *
 *   z_t = [x_t; r_{t-1}]                                        (I + R M)
 *   LSTM: (i, f, g, o) = W_ih z_t + b_ih + W_hh h_{t-1} + b_hh    (torch's LSTMCell)
 *         c_t = f c_{t-1} + i g, h_t = o tanh(c_t)
 *   feedforward: h_t = tanh(W_ih z_t + b_ih)
 *   p_t = clamp(W_head h_t + b_head, -clip, clip)                (P)
 *   each head's chunk of p_t, in order: key (M, as is), beta = softplus,
 *   g = sigmoid, s = softmax (K), gamma = 1 + softplus, and for write heads
 *   erase = sigmoid (M), add = tanh (M)
 *   w_t[h] = address(key, beta, g, s, gamma, w_{t-1}[h], M_{t-1})  (ntm.h)
 *   r_t = read(M_{t-1}, w_t[read heads])
 *   M_t = write(M_{t-1}, w_t[write heads], erase, add)
 *   y_t = W_out [h_t; r_t] + b_out                               (logits, O)
 *
 * P = R (M + K + 3) + W (3M + K + 3); K follows from P. Every tensor of a
 * call has one dtype (float32 or float64) and is C-contiguous. Rows run in
 * parallel in fixed blocks and weight gradients are formed after the time
 * loop in a fixed order, so results do not depend on the thread count. */
#ifndef ATTNC_NTM_MODEL_H
#define ATTNC_NTM_MODEL_H
#include <stdint.h>

#include "../../include/attnc.h"

typedef struct {
    int lstm;                        /* 1: LSTM controller; 0: feedforward (tanh) */
    int64_t read_heads, write_heads; /* R >= 0, W >= 0, R + W >= 1 */
    double clip;                     /* > 0 */
} attnc_ntm_config;

/* The parameters (for the backward, their gradients: same shapes). */
typedef struct {
    attnc_tensor w_ih, w_hh, b_ih, b_hh; /* LSTM (4C, I + R M), (4C, C), (4C), (4C);
                                          * feedforward (C, I + R M), absent, (C), absent */
    attnc_tensor head_w, head_b;         /* (P, C), (P) */
    attnc_tensor out_w, out_b;           /* (O, C + R M), (O) */
} attnc_ntm_params;

/* The state before the first step (for the backward, its gradient). */
typedef struct {
    attnc_tensor memory;  /* M_0 (B, N, M)      */
    attnc_tensor reads;   /* r_0 (B, R, M)      */
    attnc_tensor weights; /* w_0 (B, R + W, N)  */
} attnc_ntm_state;

/* Elements of the buffer a forward saves for its backward. */
int64_t attnc_ntm_saved_size(int64_t B, int64_t T, int64_t I, int64_t C, int64_t N, int64_t M, int64_t P,
                             const attnc_ntm_config *cfg);

/* logits (B, T, O) <- inputs (B, T, I). Optional outputs (absent: not kept):
 * weights (B, T, R + W, N) every step's w_t; memories (B, T, N, M) every
 * step's M_t (after its write); saved (attnc_ntm_saved_size) for the
 * backward. */
attnc_status attnc_ntm_forward(attnc_tensor *logits, attnc_tensor *weights, attnc_tensor *memories, attnc_tensor *saved,
                               const attnc_tensor *inputs, const attnc_ntm_state *init, const attnc_ntm_params *p,
                               const attnc_ntm_config *cfg);

/* Backward through time from dlogits (B, T, O) and the forward's saved
 * buffer: grads (every parameter's gradient, overwritten) and dinit (the
 * initial state's, overwritten); dinputs (B, T, I) optional. */
attnc_status attnc_ntm_backward(attnc_ntm_params *grads, attnc_ntm_state *dinit, attnc_tensor *dinputs,
                                const attnc_tensor *dlogits, const attnc_tensor *saved, const attnc_tensor *inputs,
                                const attnc_ntm_state *init, const attnc_ntm_params *p, const attnc_ntm_config *cfg);

#endif
