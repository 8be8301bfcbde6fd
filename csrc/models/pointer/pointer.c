/* pointer.c: the pointer network's constrained greedy and beam-search
 * decoding (pointer.h), the model side of core/search.c. */
#include "pointer.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../../core/blas.h"
#include "../../core/search.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"
#include "../../core/rows_f32.h"
#include "../../core/tile_gemm.h"

enum { PTR_ROWS = 16, PTR_GEMM_ROWS = 64 }; /* rows per score block; output rows per product block */

typedef struct {
    int64_t B, K, R, n, P, D, H;
    attnc_pointer_constraint constraint;
    attnc_dtype dt;
} ptr_run;

/* Its LSTM cell in float32 on AVX-512: core/lstm_cell_impl.h's fused multiply-add loops. */
#define ATTNC_LSTM_FMA
#define ATTNC_F64 0
#include "pointer_impl.h"
#define ATTNC_F64 1
#include "pointer_impl.h"

attnc_status attnc_pointer_check_lengths(const attnc_tensor *lengths, int64_t B, int64_t n) {
    TRY(attnc_check_array(lengths, "lengths", ATTNC_INT64, 1, (int64_t[]){B}, false));
    const int64_t *nl = lengths->data;
    for (int64_t b = 0; b < B; b++)
        if (nl[b] < 1 || nl[b] > n)
            return attnc_fail(ATTNC_ERR_VALUE, "lengths[%lld] = %lld is outside [1, %lld]", (long long)b,
                              (long long)nl[b], (long long)n);
    return ATTNC_OK;
}

static attnc_status check(ptr_run *x, const attnc_tensor *out, const attnc_tensor *counts, const attnc_tensor *inputs,
                          const attnc_tensor *lengths, const attnc_tensor *keys, const attnc_tensor *h0,
                          const attnc_tensor *c0, const attnc_pointer_params *p) {
    if (!attnc_present(inputs)) return attnc_fail(ATTNC_ERR_TYPE, "inputs is required");
    x->dt = inputs->dtype;
    if (x->dt != ATTNC_FLOAT32 && x->dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "inputs has dtype %s, expected float32 or float64", attnc_dtype_name(x->dt));
    int64_t in[3] = {-1, -1, -1};
    TRY(attnc_check_array(inputs, "inputs", x->dt, 3, in, false));
    x->B = in[0];
    x->n = in[1];
    x->D = in[2];
    x->P = x->n + 1;
    int64_t ks[3] = {x->B, x->P, -1};
    TRY(attnc_check_array(keys, "keys", x->dt, 3, ks, false));
    x->H = ks[2];
    if (x->n < 1 || x->D < 1 || x->H < 1) return attnc_fail(ATTNC_ERR_VALUE, "n, D and H must be >= 1");
    int64_t bh[2] = {x->B, x->H}, g4d[2] = {4 * x->H, x->D}, g4h[2] = {4 * x->H, x->H}, g4[1] = {4 * x->H},
            hh[2] = {x->H, x->H}, h1[1] = {x->H}, d1[1] = {x->D};
    TRY(attnc_check_array(h0, "h0", x->dt, 2, bh, false));
    TRY(attnc_check_array(c0, "c0", x->dt, 2, (int64_t[]){x->B, x->H}, false));
    TRY(attnc_check_array(&p->w_ih, "decoder.weight_ih_l0", x->dt, 2, g4d, false));
    TRY(attnc_check_array(&p->w_hh, "decoder.weight_hh_l0", x->dt, 2, g4h, false));
    TRY(attnc_check_array(&p->b_ih, "decoder.bias_ih_l0", x->dt, 1, g4, false));
    TRY(attnc_check_array(&p->b_hh, "decoder.bias_hh_l0", x->dt, 1, (int64_t[]){4 * x->H}, false));
    TRY(attnc_check_array(&p->w2, "W2.weight", x->dt, 2, hh, false));
    TRY(attnc_check_array(&p->v, "v", x->dt, 1, h1, false));
    TRY(attnc_check_array(&p->start, "start", x->dt, 1, d1, false));
    TRY(attnc_pointer_check_lengths(lengths, x->B, x->n));
    int64_t os[2] = {x->B, -1};
    TRY(attnc_check_array(out, "out", ATTNC_INT64, 2, os, true));
    if (os[1] < 1) return attnc_fail(ATTNC_ERR_VALUE, "out needs at least one step");
    return attnc_check_array(counts, "counts", ATTNC_INT64, 1, (int64_t[]){x->B}, true);
}

attnc_status attnc_pointer_decode(attnc_tensor *out, attnc_tensor *counts, attnc_tensor *logits,
                                  const attnc_tensor *inputs, const attnc_tensor *lengths, const attnc_tensor *keys,
                                  const attnc_tensor *h0, const attnc_tensor *c0, const attnc_pointer_params *p,
                                  attnc_pointer_constraint constraint, int64_t beam_size, double length_penalty) {
    ptr_run x = {0};
    if (!p) return attnc_fail(ATTNC_ERR_TYPE, "the parameters are required");
    if (constraint < ATTNC_POINTER_PERMUTATION || constraint > ATTNC_POINTER_HULL)
        return attnc_fail(ATTNC_ERR_VALUE, "unknown constraint %d", (int)constraint);
    if (beam_size < 1) return attnc_fail(ATTNC_ERR_VALUE, "beam_size must be >= 1, got %lld", (long long)beam_size);
    if (!isfinite(length_penalty)) return attnc_fail(ATTNC_ERR_VALUE, "length_penalty must be finite");
    TRY(check(&x, out, counts, inputs, lengths, keys, h0, c0, p));
    if (attnc_present(logits))
        TRY(attnc_check_array(logits, "logits", x.dt, 3, (int64_t[]){x.B, out->shape[1], x.P}, true));
    x.K = beam_size;
    x.R = x.B * x.K;
    x.constraint = constraint;
    if (x.B == 0) return ATTNC_OK;
    size_t es = attnc_dtype_size(x.dt);
    int64_t R = x.R, H = x.H, P = x.P;
    /* one block: h, c, their next copies (4 R H), gates (4 R H), q (R H), logits (R P), xw (4 B n H), sw (4H) */
    int64_t reals = 9 * R * H + R * P + 4 * x.B * x.n * H + 4 * H;
    void *mem = NULL, *flags = NULL, *tallies = NULL;
    float *panels = NULL; /* float32 with the tile kernels: W_hh and W2 packed once for every step */
    int64_t hh_size = attnc_tile_panels_size(4 * H, H), w2_size = attnc_tile_panels_size(H, H);
    /* float32 on AVX-512: also e^{2 keys} (B P H) and e^{2 q} (R H) for the factored scores */
    int64_t exp2_size = ATTNC_ROWS_F32 ? x.B * P * H + R * H : 0;
    attnc_status st = attnc_calloc(&mem, (size_t)reals, es, "the pointer decoder's state");
    if (st == ATTNC_OK && x.dt == ATTNC_FLOAT32 && attnc_tile_sgemm_available()) {
        st = attnc_calloc((void **)&panels, (size_t)(hh_size + w2_size + exp2_size), sizeof(float),
                          "the pointer decoder's packed weights");
        if (st == ATTNC_OK) {
            attnc_tile_pack_panels(panels, (attnc_mat){p->w_hh.data, 4 * H, H, H, 1});
            attnc_tile_pack_panels(panels + hh_size, (attnc_mat){p->w2.data, H, H, H, 1});
        }
    }
    int workers = attnc_workers();
    if (st == ATTNC_OK)
        st = attnc_calloc(&flags, (size_t)(2 * R * P + 2 * R + workers * P + x.B), 1, "the pointer decoder's masks");
    if (st == ATTNC_OK) st = attnc_calloc(&tallies, (size_t)(3 * R), sizeof(int64_t), "the pointer decoder's counts");
    if (st == ATTNC_OK) {
        unsigned char *f = flags;
        int64_t *cnt = tallies;
        attnc_search_io io = {.out = out->data,
                              .lengths = counts->data,
                              .T = out->shape[1],
                              .eos = 0,
                              .alpha = length_penalty,
                              .trace = attnc_present(logits) ? logits->data : NULL};
        char *m = mem; /* (elements of es bytes) */
        ptr_state S = {.x = &x,
                       .inputs = inputs->data,
                       .keys = keys->data,
                       .h0 = h0->data,
                       .c0 = c0->data,
                       .w_ih = p->w_ih.data,
                       .w_hh = p->w_hh.data,
                       .b_ih = p->b_ih.data,
                       .b_hh = p->b_hh.data,
                       .w2 = p->w2.data,
                       .v = p->v.data,
                       .start = p->start.data,
                       .nlen = lengths->data,
                       .h = m,
                       .c = m + R * H * es,
                       .h_next = m + 2 * R * H * es,
                       .c_next = m + 3 * R * H * es,
                       .gates = m + 4 * R * H * es,
                       .q = m + 8 * R * H * es,
                       .logits = m + 9 * R * H * es,
                       .xw = m + (9 * R * H + R * P) * es,
                       .sw = m + (9 * R * H + R * P + 4 * x.B * x.n * H) * es,
                       .chosen = f,
                       .chosen_next = f + R * P,
                       .ended = f + 2 * R * P,
                       .ended_next = f + 2 * R * P + R,
                       .allowed = f + 2 * R * P + 2 * R,
                       .count = cnt,
                       .count_next = cnt + R,
                       .feed = cnt + 2 * R,
                       .w_hh_panels = panels,
                       .w2_panels = panels ? panels + hh_size : NULL,
                       .ekeys = panels && exp2_size ? panels + hh_size + w2_size : NULL,
                       .eq = panels && exp2_size ? panels + hh_size + w2_size + x.B * P * H : NULL,
                       .keys_ok = f + 2 * R * P + 2 * R + workers * P};
        ATTNC_TYPED(x.dt, ptr_init)(&S);
        attnc_search_model sm = {.ctx = &S,
                                 .B = x.B,
                                 .K = x.K,
                                 .V = P,
                                 .logits = S.logits,
                                 .dt = x.dt,
                                 .step = ATTNC_TYPED(x.dt, ptr_step),
                                 .reorder = ATTNC_TYPED(x.dt, ptr_reorder),
                                 .trace = S.logits,
                                 .trace_bytes = P * (int64_t)es};
        st = attnc_search(&sm, &io);
    }
    free(mem);
    free(flags);
    free(tallies);
    free(panels);
    return st;
}
