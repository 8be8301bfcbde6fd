/* ntm.c: the Neural Turing Machine's addressing and memory operations,
 * forward and backward (shapes in ntm.h). */
#include "ntm.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

#define ATTNC_F64 0
#include "ntm_impl.h"
#define ATTNC_F64 1
#include "ntm_impl.h"

typedef struct {
    attnc_dtype dtype;
    int64_t B, H, N, M, K;
} ntm_dims;

/* t is a C-contiguous (d0, d1[, d2]) tensor of dtype (-1 sizes: any, returned). */
static attnc_status check(const attnc_tensor *t, const char *name, attnc_dtype dtype, int ndim, int64_t *d0,
                          int64_t *d1, int64_t *d2) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
    int64_t sizes[3] = {*d0, *d1, d2 ? *d2 : 0};
    TRY(attnc_check_dtype(t, name, dtype));
    static const attnc_batch none = {.nb = 0, .count = 1};
    TRY(attnc_check_shape(t, name, &none, ndim, sizes));
    if (!attnc_is_contiguous(t)) return attnc_fail(ATTNC_ERR_LAYOUT, "%s must be C-contiguous", name);
    *d0 = sizes[0];
    *d1 = sizes[1];
    if (d2) *d2 = sizes[2];
    return ATTNC_OK;
}

/* A (B, H, X) tensor; X is *x (-1: any, returned). */
static attnc_status bhx(const ntm_dims *d, const attnc_tensor *t, const char *name, int64_t *x) {
    int64_t b = d->B, h = d->H;
    return check(t, name, d->dtype, 3, &b, &h, x);
}
static attnc_status bh(const ntm_dims *d, const attnc_tensor *t, const char *name) {
    int64_t b = d->B, h = d->H;
    return check(t, name, d->dtype, 2, &b, &h, NULL);
}
static attnc_status bnm(const ntm_dims *d, const attnc_tensor *t, const char *name) {
    int64_t b = d->B, n = d->N, m = d->M;
    return check(t, name, d->dtype, 3, &b, &n, &m);
}

/* d <- dtype and (B, H, X) of the first operand t. */
static attnc_status first(ntm_dims *d, const attnc_tensor *t, const char *name, int64_t *x) {
    if (!attnc_present(t)) return attnc_fail(ATTNC_ERR_TYPE, "%s is required", name);
    d->dtype = t->dtype;
    if (t->dtype != ATTNC_FLOAT32 && t->dtype != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "%s has dtype %s, expected float32 or float64", name,
                          attnc_dtype_name(t->dtype));
    int64_t b = -1, h = -1;
    *x = -1;
    TRY(check(t, name, d->dtype, 3, &b, &h, x));
    d->B = b;
    d->H = h;
    return ATTNC_OK;
}

/* Every entry of a (B, H) tensor is >= lo (NaN fails). */
static attnc_status at_least(const attnc_tensor *t, const char *name, double lo) {
    int64_t n = attnc_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = attnc_real_get(t->data, t->dtype, i);
        if (!(v >= lo)) return attnc_fail(ATTNC_ERR_VALUE, "%s must be >= %g, got %g", name, lo, v);
    }
    return ATTNC_OK;
}

static attnc_status odd_k(const ntm_dims *d) {
    if (d->K < 1 || d->K % 2 == 0)
        return attnc_fail(ATTNC_ERR_VALUE, "s must have an odd number K of shifts, got K = %lld", (long long)d->K);
    return ATTNC_OK;
}

/* Run TASK over the B batch elements with the job's pointers. */
#define RUN(TASK, O, I, ...)                                                                                \
    do {                                                                                                    \
        ntm_job job_ = {.H = d.H, .N = d.N, .M = d.M, .K = d.K, __VA_ARGS__};                               \
        for (int q_ = 0; q_ < (int)(sizeof O / sizeof O[0]); q_++) job_.o[q_] = O[q_] ? O[q_]->data : NULL; \
        for (int q_ = 0; q_ < (int)(sizeof I / sizeof I[0]); q_++)                                          \
            job_.in[q_] = attnc_present(I[q_]) ? I[q_]->data : NULL;                                        \
        attnc_parallel_for(d.B, workers_, ATTNC_TYPED(d.dtype, TASK), &job_);                               \
    } while (0)

#define WORKERS(work) int workers_ = attnc_workers_for(work)

/* ---- content -------------------------------------------------------------- */

static attnc_status content_dims(ntm_dims *d, const attnc_tensor *key, const attnc_tensor *memory,
                                 const attnc_tensor *beta) {
    TRY(first(d, key, "key", &d->M));
    int64_t b = d->B, n = -1, m = d->M;
    TRY(check(memory, "memory", d->dtype, 3, &b, &n, &m));
    d->N = n;
    d->K = 1;
    return bh(d, beta, "beta");
}

attnc_status attnc_ntm_content_forward(attnc_tensor *w, const attnc_tensor *key, const attnc_tensor *memory,
                                       const attnc_tensor *beta) {
    ntm_dims d = {0};
    TRY(content_dims(&d, key, memory, beta));
    TRY(at_least(beta, "beta", 0));
    int64_t n = d.N;
    TRY(bhx(&d, w, "w", &n));
    const attnc_tensor *O[] = {w}, *I[] = {key, memory, beta};
    WORKERS(d.B * d.H * d.N * d.M);
    RUN(content_fwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

attnc_status attnc_ntm_content_backward(attnc_tensor *dkey, attnc_tensor *dmemory, attnc_tensor *dbeta,
                                        const attnc_tensor *dw, const attnc_tensor *key, const attnc_tensor *memory,
                                        const attnc_tensor *beta, const attnc_tensor *w) {
    ntm_dims d = {0};
    TRY(content_dims(&d, key, memory, beta));
    int64_t n = d.N, m = d.M;
    TRY(bhx(&d, dw, "dw", &n));
    TRY(bhx(&d, w, "w", &n));
    TRY(bhx(&d, dkey, "dkey", &m));
    TRY(bnm(&d, dmemory, "dmemory"));
    TRY(bh(&d, dbeta, "dbeta"));
    const attnc_tensor *O[] = {dkey, dmemory, dbeta}, *I[] = {dw, key, memory, beta, w};
    WORKERS(2 * d.B * d.H * d.N * d.M);
    RUN(content_bwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

/* ---- interpolate ------------------------------------------------------------ */

static attnc_status weights_dims(ntm_dims *d, const attnc_tensor *w, const char *name) {
    TRY(first(d, w, name, &d->N));
    d->M = 1;
    d->K = 1;
    return ATTNC_OK;
}

static attnc_status interp_dims(ntm_dims *d, const attnc_tensor *w_content, const attnc_tensor *w_prev,
                                const attnc_tensor *g) {
    TRY(weights_dims(d, w_content, "w_content"));
    int64_t n = d->N;
    TRY(bhx(d, w_prev, "w_prev", &n));
    return bh(d, g, "g");
}

attnc_status attnc_ntm_interpolate_forward(attnc_tensor *w, const attnc_tensor *w_content, const attnc_tensor *w_prev,
                                           const attnc_tensor *g) {
    ntm_dims d = {0};
    TRY(interp_dims(&d, w_content, w_prev, g));
    int64_t n = d.N;
    TRY(bhx(&d, w, "w", &n));
    const attnc_tensor *O[] = {w}, *I[] = {w_content, w_prev, g};
    WORKERS(d.B * d.H * d.N);
    RUN(interp_fwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

attnc_status attnc_ntm_interpolate_backward(attnc_tensor *dw_content, attnc_tensor *dw_prev, attnc_tensor *dg,
                                            const attnc_tensor *dw, const attnc_tensor *w_content,
                                            const attnc_tensor *w_prev, const attnc_tensor *g) {
    ntm_dims d = {0};
    TRY(interp_dims(&d, w_content, w_prev, g));
    int64_t n = d.N;
    TRY(bhx(&d, dw, "dw", &n));
    TRY(bhx(&d, dw_content, "dw_content", &n));
    TRY(bhx(&d, dw_prev, "dw_prev", &n));
    TRY(bh(&d, dg, "dg"));
    const attnc_tensor *O[] = {dw_content, dw_prev, dg}, *I[] = {dw, w_content, w_prev, g};
    WORKERS(d.B * d.H * d.N);
    RUN(interp_bwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

/* ---- shift ------------------------------------------------------------------ */

static attnc_status shift_dims(ntm_dims *d, const attnc_tensor *w, const attnc_tensor *s) {
    TRY(weights_dims(d, w, "w"));
    d->K = -1;
    TRY(bhx(d, s, "s", &d->K));
    return odd_k(d);
}

attnc_status attnc_ntm_shift_forward(attnc_tensor *out, const attnc_tensor *w, const attnc_tensor *s) {
    ntm_dims d = {0};
    TRY(shift_dims(&d, w, s));
    int64_t n = d.N;
    TRY(bhx(&d, out, "out", &n));
    if (d.N == 0) return ATTNC_OK;
    const attnc_tensor *O[] = {out}, *I[] = {w, s};
    WORKERS(d.B * d.H * d.N * d.K);
    RUN(shift_fwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

attnc_status attnc_ntm_shift_backward(attnc_tensor *dw, attnc_tensor *ds, const attnc_tensor *dout,
                                      const attnc_tensor *w, const attnc_tensor *s) {
    ntm_dims d = {0};
    TRY(shift_dims(&d, w, s));
    int64_t n = d.N, k = d.K;
    TRY(bhx(&d, dout, "dout", &n));
    TRY(bhx(&d, dw, "dw", &n));
    TRY(bhx(&d, ds, "ds", &k));
    if (d.N == 0) {
        int64_t c = attnc_numel(ds);
        memset(ds->data, 0, (size_t)c * attnc_dtype_size(d.dtype));
        return ATTNC_OK;
    }
    const attnc_tensor *O[] = {dw, ds}, *I[] = {dout, w, s};
    WORKERS(2 * d.B * d.H * d.N * d.K);
    RUN(shift_bwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

/* ---- sharpen ---------------------------------------------------------------- */

attnc_status attnc_ntm_sharpen_forward(attnc_tensor *out, const attnc_tensor *w, const attnc_tensor *gamma) {
    ntm_dims d = {0};
    TRY(weights_dims(&d, w, "w"));
    TRY(bh(&d, gamma, "gamma"));
    TRY(at_least(gamma, "gamma", 1));
    int64_t n = d.N;
    TRY(bhx(&d, out, "out", &n));
    const attnc_tensor *O[] = {out}, *I[] = {w, gamma};
    WORKERS(4 * d.B * d.H * d.N);
    RUN(sharpen_fwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

attnc_status attnc_ntm_sharpen_backward(attnc_tensor *dw, attnc_tensor *dgamma, const attnc_tensor *dout,
                                        const attnc_tensor *w, const attnc_tensor *gamma, const attnc_tensor *out) {
    ntm_dims d = {0};
    TRY(weights_dims(&d, w, "w"));
    TRY(bh(&d, gamma, "gamma"));
    int64_t n = d.N;
    TRY(bhx(&d, out, "out", &n));
    TRY(bhx(&d, dout, "dout", &n));
    TRY(bhx(&d, dw, "dw", &n));
    TRY(bh(&d, dgamma, "dgamma"));
    const attnc_tensor *O[] = {dw, dgamma}, *I[] = {dout, w, gamma, out};
    WORKERS(8 * d.B * d.H * d.N);
    RUN(sharpen_bwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

/* ---- read ------------------------------------------------------------------- */

/* memory (B, N, M) sets the sizes (a w that does not fit them is the one named). */
static attnc_status memory_dims(ntm_dims *d, const attnc_tensor *memory, const attnc_tensor *w) {
    TRY(first(d, memory, "memory", &d->M));
    d->N = d->H;
    int64_t b = d->B, h = -1, n = d->N;
    TRY(check(w, "w", d->dtype, 3, &b, &h, &n));
    d->H = h;
    d->K = 1;
    return ATTNC_OK;
}

attnc_status attnc_ntm_read_forward(attnc_tensor *r, const attnc_tensor *memory, const attnc_tensor *w) {
    ntm_dims d = {0};
    TRY(memory_dims(&d, memory, w));
    int64_t m = d.M;
    TRY(bhx(&d, r, "r", &m));
    const attnc_tensor *O[] = {r}, *I[] = {memory, w};
    WORKERS(d.B * d.H * d.N * d.M);
    RUN(read_fwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

attnc_status attnc_ntm_read_backward(attnc_tensor *dmemory, attnc_tensor *dw, const attnc_tensor *dr,
                                     const attnc_tensor *memory, const attnc_tensor *w) {
    ntm_dims d = {0};
    TRY(memory_dims(&d, memory, w));
    int64_t m = d.M, n = d.N;
    TRY(bhx(&d, dr, "dr", &m));
    TRY(bnm(&d, dmemory, "dmemory"));
    TRY(bhx(&d, dw, "dw", &n));
    const attnc_tensor *O[] = {dmemory, dw}, *I[] = {dr, memory, w};
    WORKERS(2 * d.B * d.H * d.N * d.M);
    RUN(read_bwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

/* ---- write ------------------------------------------------------------------ */

static attnc_status write_dims(ntm_dims *d, const attnc_tensor *memory, const attnc_tensor *w,
                               const attnc_tensor *erase, const attnc_tensor *add) {
    TRY(memory_dims(d, memory, w));
    int64_t m = d->M;
    TRY(bhx(d, erase, "erase", &m));
    return bhx(d, add, "add", &m);
}

attnc_status attnc_ntm_write_forward(attnc_tensor *out, const attnc_tensor *memory, const attnc_tensor *w,
                                     const attnc_tensor *erase, const attnc_tensor *add) {
    ntm_dims d = {0};
    TRY(write_dims(&d, memory, w, erase, add));
    TRY(bnm(&d, out, "out"));
    const attnc_tensor *O[] = {out}, *I[] = {memory, w, erase, add};
    WORKERS(2 * d.B * d.H * d.N * d.M);
    RUN(write_fwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

attnc_status attnc_ntm_write_backward(attnc_tensor *dmemory, attnc_tensor *dw, attnc_tensor *derase, attnc_tensor *dadd,
                                      const attnc_tensor *dout, const attnc_tensor *memory, const attnc_tensor *w,
                                      const attnc_tensor *erase, const attnc_tensor *add) {
    ntm_dims d = {0};
    TRY(write_dims(&d, memory, w, erase, add));
    int64_t n = d.N, m = d.M;
    TRY(bnm(&d, dout, "dout"));
    TRY(bnm(&d, dmemory, "dmemory"));
    TRY(bhx(&d, dw, "dw", &n));
    TRY(bhx(&d, derase, "derase", &m));
    TRY(bhx(&d, dadd, "dadd", &m));
    const attnc_tensor *O[] = {dmemory, dw, derase, dadd}, *I[] = {dout, memory, w, erase, add};
    WORKERS(4 * d.B * d.H * d.H * d.N * d.M);
    RUN(write_bwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

/* ---- address ---------------------------------------------------------------- */

static attnc_status address_dims(ntm_dims *d, const attnc_ntm_address_args *a) {
    TRY(content_dims(d, &a->key, &a->memory, &a->beta));
    int64_t n = d->N;
    TRY(bh(d, &a->g, "g"));
    TRY(bh(d, &a->gamma, "gamma"));
    TRY(bhx(d, &a->w_prev, "w_prev", &n));
    d->K = -1;
    TRY(bhx(d, &a->s, "s", &d->K));
    return odd_k(d);
}

attnc_status attnc_ntm_address_forward(attnc_tensor *w, attnc_tensor *w_c, attnc_tensor *w_g, attnc_tensor *w_t,
                                       const attnc_ntm_address_args *in) {
    ntm_dims d = {0};
    TRY(address_dims(&d, in));
    TRY(at_least(&in->beta, "beta", 0));
    TRY(at_least(&in->gamma, "gamma", 1));
    int64_t n = d.N;
    TRY(bhx(&d, w, "w", &n));
    TRY(bhx(&d, w_c, "w_c", &n));
    TRY(bhx(&d, w_g, "w_g", &n));
    TRY(bhx(&d, w_t, "w_t", &n));
    if (d.N == 0) return ATTNC_OK;
    const attnc_tensor *O[] = {w, w_c, w_g, w_t};
    const attnc_tensor *I[] = {&in->key, &in->beta, &in->g, &in->s, &in->gamma, &in->w_prev, &in->memory};
    WORKERS(d.B * d.H * d.N * (d.M + d.K));
    RUN(address_fwd_task, O, I, .scratch = NULL);
    return ATTNC_OK;
}

attnc_status attnc_ntm_address_backward(attnc_ntm_address_args *grads, const attnc_tensor *dw, const attnc_tensor *dw_c,
                                        const attnc_tensor *dw_g, const attnc_tensor *dw_t,
                                        const attnc_ntm_address_args *in, const attnc_tensor *w,
                                        const attnc_tensor *w_c, const attnc_tensor *w_g, const attnc_tensor *w_t) {
    ntm_dims d = {0};
    TRY(address_dims(&d, in));
    int64_t n = d.N, m = d.M, k = d.K;
    TRY(bhx(&d, dw, "dw", &n));
    const attnc_tensor *opt[] = {dw_c, dw_g, dw_t};
    const char *opt_names[] = {"dw_c", "dw_g", "dw_t"};
    for (int i = 0; i < 3; i++)
        if (attnc_present(opt[i])) TRY(bhx(&d, opt[i], opt_names[i], &n));
    TRY(bhx(&d, w, "w", &n));
    TRY(bhx(&d, w_c, "w_c", &n));
    TRY(bhx(&d, w_g, "w_g", &n));
    TRY(bhx(&d, w_t, "w_t", &n));
    TRY(bhx(&d, &grads->key, "dkey", &m));
    TRY(bh(&d, &grads->beta, "dbeta"));
    TRY(bh(&d, &grads->g, "dg"));
    TRY(bhx(&d, &grads->s, "ds", &k));
    TRY(bh(&d, &grads->gamma, "dgamma"));
    TRY(bhx(&d, &grads->w_prev, "dw_prev", &n));
    TRY(bnm(&d, &grads->memory, "dmemory"));
    if (d.N == 0) {
        attnc_tensor *z[] = {&grads->key, &grads->beta, &grads->g, &grads->s, &grads->gamma};
        for (int i = 0; i < 5; i++) {
            int64_t c = attnc_numel(z[i]);
            memset(z[i]->data, 0, (size_t)c * attnc_dtype_size(d.dtype));
        }
        return ATTNC_OK;
    }
    int workers_ = attnc_workers_for(3 * d.B * d.H * d.N * (d.M + d.K));
    void *scratch = NULL;
    TRY(attnc_calloc(&scratch, (size_t)workers_ * 2 * (size_t)d.N, attnc_dtype_size(d.dtype),
                     "the NTM address backward's scratch"));
    attnc_tensor *O[] = {&grads->key,   &grads->beta,   &grads->g,     &grads->s,
                         &grads->gamma, &grads->w_prev, &grads->memory};
    const attnc_tensor *I[] = {&in->key, &in->beta, &in->g, &in->s, &in->gamma, &in->w_prev, &in->memory, dw,
                               dw_c,     dw_g,      dw_t,   w,      w_c,        w_g,         w_t};
    RUN(address_bwd_task, O, I, .scratch = scratch);
    free(scratch);
    return ATTNC_OK;
}
