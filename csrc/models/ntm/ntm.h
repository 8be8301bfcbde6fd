/* ntm.h: the Neural Turing Machine's addressing and memory operations
 * (Graves et al. 2014), forward and backward, float32 and float64.
 *
 * Sizes: B batch, H heads, N memory slots, M slot width, K shift width (odd).
 * Every tensor is C-contiguous and of one dtype; gradients are outputs
 * (overwritten, never accumulated into). Work is split over the batch (one
 * block per b, heads in a fixed order inside), so results do not depend on
 * the thread count. */
#ifndef ATTNC_NTM_H
#define ATTNC_NTM_H
#include "../../include/attnc.h"

/* w (B,H,N) <- softmax_i(beta * cos(key, memory_i));
 * key (B,H,M), memory (B,N,M), beta (B,H) >= 0;
 * cos(k, m) = k.m / max(|k| |m|, 1e-8). */
attnc_status attnc_ntm_content_forward(attnc_tensor *w, const attnc_tensor *key, const attnc_tensor *memory,
                                       const attnc_tensor *beta);
/* dkey (B,H,M), dmemory (B,N,M), dbeta (B,H) from dw (B,H,N) and the forward's w. */
attnc_status attnc_ntm_content_backward(attnc_tensor *dkey, attnc_tensor *dmemory, attnc_tensor *dbeta,
                                        const attnc_tensor *dw, const attnc_tensor *key, const attnc_tensor *memory,
                                        const attnc_tensor *beta, const attnc_tensor *w);

/* w (B,H,N) <- g w_content + (1 - g) w_prev; g (B,H). */
attnc_status attnc_ntm_interpolate_forward(attnc_tensor *w, const attnc_tensor *w_content, const attnc_tensor *w_prev,
                                           const attnc_tensor *g);
attnc_status attnc_ntm_interpolate_backward(attnc_tensor *dw_content, attnc_tensor *dw_prev, attnc_tensor *dg,
                                            const attnc_tensor *dw, const attnc_tensor *w_content,
                                            const attnc_tensor *w_prev, const attnc_tensor *g);

/* out (B,H,N) <- out[i] = sum_k s[k] w[(i - (k - (K-1)/2)) mod N]; s (B,H,K), K odd. */
attnc_status attnc_ntm_shift_forward(attnc_tensor *out, const attnc_tensor *w, const attnc_tensor *s);
attnc_status attnc_ntm_shift_backward(attnc_tensor *dw, attnc_tensor *ds, const attnc_tensor *dout,
                                      const attnc_tensor *w, const attnc_tensor *s);

/* out (B,H,N) <- w^gamma / sum_j w_j^gamma (0 for a row summing to 0);
 * w >= 0, gamma (B,H) >= 1. */
attnc_status attnc_ntm_sharpen_forward(attnc_tensor *out, const attnc_tensor *w, const attnc_tensor *gamma);
attnc_status attnc_ntm_sharpen_backward(attnc_tensor *dw, attnc_tensor *dgamma, const attnc_tensor *dout,
                                        const attnc_tensor *w, const attnc_tensor *gamma, const attnc_tensor *out);

/* r (B,H,M) <- sum_i w[b,h,i] memory[b,i,:]; w (B,H,N), memory (B,N,M). */
attnc_status attnc_ntm_read_forward(attnc_tensor *r, const attnc_tensor *memory, const attnc_tensor *w);
attnc_status attnc_ntm_read_backward(attnc_tensor *dmemory, attnc_tensor *dw, const attnc_tensor *dr,
                                     const attnc_tensor *memory, const attnc_tensor *w);

/* out (B,N,M) <- memory o prod_h (1 - w_h e_h^T) + sum_h w_h a_h^T;
 * w (B,H,N), erase and add (B,H,M). */
attnc_status attnc_ntm_write_forward(attnc_tensor *out, const attnc_tensor *memory, const attnc_tensor *w,
                                     const attnc_tensor *erase, const attnc_tensor *add);
attnc_status attnc_ntm_write_backward(attnc_tensor *dmemory, attnc_tensor *dw, attnc_tensor *derase, attnc_tensor *dadd,
                                      const attnc_tensor *dout, const attnc_tensor *memory, const attnc_tensor *w,
                                      const attnc_tensor *erase, const attnc_tensor *add);

/* The whole addressing pipeline: w_c = content(key, memory, beta),
 * w_g = interpolate(w_c, w_prev, g), w_t = shift(w_g, s), w = sharpen(w_t, gamma).
 * Outputs w, w_c, w_g, w_t (B,H,N), all required. */
typedef struct {
    attnc_tensor key, beta, g, s, gamma, w_prev, memory;
} attnc_ntm_address_args;

attnc_status attnc_ntm_address_forward(attnc_tensor *w, attnc_tensor *w_c, attnc_tensor *w_g, attnc_tensor *w_t,
                                       const attnc_ntm_address_args *in);
/* grads: the gradient of each input (all required); dw the cotangent of w;
 * dw_c, dw_g, dw_t those of the intermediates (each may be absent). */
attnc_status attnc_ntm_address_backward(attnc_ntm_address_args *grads, const attnc_tensor *dw, const attnc_tensor *dw_c,
                                        const attnc_tensor *dw_g, const attnc_tensor *dw_t,
                                        const attnc_ntm_address_args *in, const attnc_tensor *w,
                                        const attnc_tensor *w_c, const attnc_tensor *w_g, const attnc_tensor *w_t);

#endif
