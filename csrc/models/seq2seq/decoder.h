/* decoder.h: what decoder.c (training) and generate.c (search) share: the
 * sizes and weights of one call, the per-step slots, and the step kernels.
 *
 * A step runs on a block of rows. Row r of a call reads source row src[r]
 * (the identity in training; r / beam in beam search) of the memory, keys,
 * final states and lengths. */
#ifndef ATTNC_S2S_DECODER_H
#define ATTNC_S2S_DECODER_H
#include <stdbool.h>
#include <stdint.h>

#include "../../core/tensor.h"

enum { S2S_ROWS = 32 };      /* rows per block: fixed, so results do not depend on the thread count */
enum { S2S_KEY_ROWS = 256 }; /* rows of the keys' backward per block */

/* Sizes, weights (data pointers of contiguous tensors) and shared buffers. */
typedef struct {
    attnc_s2s_attention kind;
    attnc_dtype dt;
    size_t es;
    int64_t B, S, T, E, H, He, A, Fin, F, U, Vt, Smax, Kw; /* U = E + Fin + H; Kw: key width */
    double window;
    bool luong, additive;
    const void *emb, *wq, *wkey, *v, *watt, *batt, *wp, *vp, *comb, *bridge_w, *bridge_b, *out_w, *out_b;
    const void *memory, *final; /* (B, S, He), (B, He) */
    const int64_t *len;         /* (B)                  */
    void *wcat;                 /* (4H, U): [W_ih | W_hh] */
    void *bsum;                 /* (4H): b_ih + b_hh      */
    void *keys;                 /* (B, S, Kw)             */
    int64_t R;                  /* rows of a step (B, or B * beam) */
    const int64_t *src;         /* (R) source row of each row, or NULL: r */
} s2s_run;

/* One step's arrays, each (R, width) with its own width (NULL: unused by
 * the kind). */
typedef struct {
    void *u;     /* (U) the LSTM's input [x; feed; h_prev]                  */
    void *gates; /* (4H) i, f, g, o after their nonlinearities               */
    void *c, *h; /* (H) the cell and hidden state after the step            */
    void *qw;    /* (A) additive: W_q q                                      */
    void *alpha; /* (S) the attention weights                                */
    void *a;     /* (S) local-p: the windowed softmax before the Gaussian    */
    void *pos;   /* (1) local kinds: p_t                                     */
    void *hp;    /* (A) local-p: tanh(W_p h)                                 */
    void *cat;   /* (He + H) Luong: [ctx; h]                                 */
    void *ht;    /* (H) Luong: h~ = tanh(W_c [ctx; h])                       */
} s2s_slot;

/* Elements of one slot (R rows). */
int64_t s2s_slot_size(const s2s_run *x);
/* The slot's arrays in base (s2s_slot_size elements). */
s2s_slot s2s_slot_at(const s2s_run *x, void *base);
/* Elements of the per-block scratch of a step. */
int64_t s2s_scratch_size(const s2s_run *x);

/* Step t on rows [r0, r0 + n): from slot prev to slot cur, tokens tok[r]
 * of the block (tok[i]: row r0 + i), features (row r at feat + r * fstride), scratch. */
void s2s_step_forward_f32(const s2s_run *x, const s2s_slot *prev, const s2s_slot *cur, int64_t t, int64_t r0, int64_t n,
                          const int64_t *tok, void *feat, int64_t fstride, void *scratch);
void s2s_step_forward_f64(const s2s_run *x, const s2s_slot *prev, const s2s_slot *cur, int64_t t, int64_t r0, int64_t n,
                          const int64_t *tok, void *feat, int64_t fstride, void *scratch);

/* The starting slot's rows [r0, r0 + n): h = tanh(bridge(final)), c = 0,
 * h~ = 0. */
void s2s_start_f32(const s2s_run *x, const s2s_slot *s, int64_t r0, int64_t n);
void s2s_start_f64(const s2s_run *x, const s2s_slot *s, int64_t r0, int64_t n);

/* Checks and derived sizes shared by the entry points: x filled from the
 * weights, config, memory (B, S, He), final (B, He) and lengths (B). */
attnc_status s2s_setup(s2s_run *x, const attnc_s2s_weights *w, const attnc_s2s_config *cfg, const attnc_tensor *memory,
                       const attnc_tensor *final, const attnc_tensor *lengths);
/* x->wcat, x->bsum and x->keys allocated and filled (keys into keys_buf
 * when not NULL, else allocated); s2s_release frees what was allocated. */
attnc_status s2s_prepare(s2s_run *x, const attnc_s2s_weights *w, void *keys_buf);
void s2s_release(s2s_run *x, bool keys_owned);

#endif
