/* rnn_internal.h: what rnn.c shares with its fused float kernels (rnn_fast.c). */
#ifndef ATTNC_RNN_INTERNAL_H
#define ATTNC_RNN_INTERNAL_H
#include <stdbool.h>
#include <stdint.h>

#include "../include/attnc.h"

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
    const float *x;        /* (B T, in) the layer's input                              */
    int64_t in;
    const float *w_ih;     /* (G, in)                                                  */
    const float *w_hh;     /* (G, H)                                                   */
    const float *b_ih;     /* (G) or NULL                                              */
    const float *b_hh;     /* (G) or NULL                                              */
    const float *h0, *c0;  /* (B, H) or NULL (zeros)                                   */
    float *gates, *cells;  /* saved (B T, 4H), (B T, H) (LSTM), or NULL (not kept)     */
    float *out;            /* (B T, D H): this direction's h at column offset d H      */
    float *h_n, *c_n;      /* (B, H) final states or NULL                              */
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
    float *dx;                /* (B T, in): dgx W_ih stored, or added when dx_add      */
    bool dx_add;
    int64_t in;
    const float *w_ih;        /* (G, in)                                               */
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

#endif
