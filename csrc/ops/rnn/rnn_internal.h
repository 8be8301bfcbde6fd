/* rnn_internal.h: what rnn.c shares with its typed kernels (rnn_impl.h) and its
 * fused float kernels (rnn_fast.c). */
#ifndef ATTNC_RNN_INTERNAL_H
#define ATTNC_RNN_INTERNAL_H
#include <stdbool.h>
#include <stdint.h>

#include "../../core/tensor.h"
#include "../../include/attnc.h"

typedef struct {
    attnc_rnn_mode mode;
    int64_t B, T, I, H, L, D, ng; /* ng gates: 4 (LSTM) or 3 (GRU) */
    int64_t d;                    /* the direction being run       */
    bool solo;                    /* run it on the calling thread only (the
                                     other direction runs on another) */
    const int64_t *len;           /* (B) or NULL: every row has T  */
    attnc_dtype dt;
    double dropout;
    uint64_t seed;
} rnn_run;

/* One direction of one layer, forward, float32. G = ng H. */
typedef struct {
    const rnn_run *r;
    const float *x; /* (B T, in) the layer's input                              */
    int64_t in;
    const float *w_ih;    /* (G, in)                                                  */
    const float *w_hh;    /* (G, H)                                                   */
    const float *b_ih;    /* (G) or NULL                                              */
    const float *b_hh;    /* (G) or NULL                                              */
    const float *h0, *c0; /* (B, H) or NULL (zeros)                                   */
    float *gates, *cells; /* saved (B T, 4H), (B T, H) (LSTM), or NULL (not kept)     */
    float *out;           /* (B T, D H): this direction's h at column offset d H      */
    float *h_n, *c_n;     /* (B, H) final states or NULL                              */
} rnn_fast_fwd;

/* One direction of one layer, backward through time, float32. */
typedef struct {
    const rnn_run *r;
    const float *w_hh;        /* (G, H)                                                */
    const float *gates;       /* saved (B T, 4H)                                       */
    const float *cells;       /* saved (B T, H) (LSTM)                                 */
    const float *out;         /* (B T, D H) the forward's output                      */
    const float *dout;        /* (B T, D H)                                            */
    const float *h0, *c0;     /* (B, H) or NULL                                        */
    const float *dh_n, *dc_n; /* (B, H) or NULL                                        */
    float *dgx;               /* (B T, G) gradient of the input projections            */
    float *dgh;               /* (B T, G) of the recurrent products (GRU; LSTM: dgx)   */
    float *hprev;             /* (B T, H) every step's h_prev, for dW_hh               */
    float *dh0, *dc0;         /* (B, H) or NULL                                        */
    /* The layer input's gradient, when attnc_rnn_fast_fuses_dx (else dx NULL): */
    float *dx; /* (B T, in): dgx W_ih stored, or added when dx_add      */
    bool dx_add;
    int64_t in;
    const float *w_ih; /* (G, in)                                               */
} rnn_fast_bwd;

/* Whether the fused kernels take run r (float32, a hidden size the vector
 * width divides, a CPU with AVX2 + FMA or AVX-512). */
bool attnc_rnn_fast_usable(const rnn_run *r);

/* The time loop of one direction (rnn.c does the input projections and the
 * weight gradients around it). Fails only on allocation. */
attnc_status attnc_rnn_fast_forward(const rnn_fast_fwd *f);

/* Whether the fused backward also makes the input's gradient (in a multiple
 * of the vector width). */
bool attnc_rnn_fast_fuses_dx(const rnn_run *r, int64_t in);
attnc_status attnc_rnn_fast_backward(const rnn_fast_bwd *b);

/* The jobs of rnn_impl.h's tasks, one for both dtypes (core/typed.h). */
typedef struct {
    const rnn_run *r;
    int64_t s;        /* processing step: time s (forward) or len - 1 - s (reverse) */
    const void *gx;   /* (B T, G) input projections (+ b_ih); G = 4H LSTM, 3H GRU  */
    const void *hh;   /* (B, G) h_prev W_hh^T (before b_hh); backward: dh_rec (B, H) */
    const void *b_hh; /* (G) or NULL                                                */
    void *h, *c;      /* (B, H) running state                                       */
    void *gates, *cs; /* saved (B T, 4H), (B T, H)                                  */
    void *out;        /* (B T, D H) the layer's output; this direction at offset d H */
    /* backward */
    const void *dout;    /* (B T, D H)                                                 */
    void *dh, *dc;       /* (B, H) running gradient                                    */
    void *dgx, *dgh;     /* (B T, G) (the same array for an LSTM)                      */
    void *dgh_step;      /* (B, G): this step's dgh rows (0 for finished rows)         */
    void *dh_direct;     /* (B, H) GRU: dh * z, the part not through W_hh              */
    void *hprev;         /* (B T, H) h_prev of every step                              */
    const void *h0, *c0; /* (B, H) or NULL                                             */
} step_job;

typedef struct {
    attnc_mat a, w, c;
    bool trans_w;
} colgemm_job;

typedef struct {
    attnc_mat x, w, y; /* forward: y (n, G) = x (n, in) w^T + bias; dx: y (n, in) (+)= x (n, G) w */
    const void *bias;  /* (G) or NULL */
    bool dx, accumulate;
    int64_t blocks;
    /* weight gradients: dw[i] (G, in_i) = dy[i]^T x[i], db[i] = column sums of dy[i] (i < 2) */
    attnc_mat dy2[2], x2[2], dw2[2];
    void *db2[2];
} seq_job;

#endif
