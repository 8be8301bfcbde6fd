/* rnn_fast.c: the float32 time loop of an LSTM / GRU direction with the
 * recurrent product and the gate kernels fused, in the builds for AVX-512
 * and AVX2 + FMA (attnc loads the build the CPU runs, see core/cpu.h; the
 * AVX-512 build has both kernel sets, for hidden sizes that are multiples
 * of 8 but not 16; rnn.c keeps its BLAS path for everything else).
 *
 * Why: per step the recurrent product is small ((B, H) x (H, G), 64 x 256 x
 * 1024 in the benchmark) and repeated T times with the same W_hh. Calling
 * BLAS per step repacks W_hh every step, a second pass reads the product
 * back for the gates, and two thread-pool dispatches per step wake a worker
 * through a condition variable. Here W_hh and W_ih are packed once per call
 * into panels a register-blocked micro-kernel streams, each product tile has
 * its gates computed while it is still in L1, and the threads run the whole
 * time loop in one parallel region (split by units: meeting once per step
 * on an atomic counter). The input's products are made in the same loop, step by step
 * (forward: x_t W_ih^T; backward: dgx_t W_ih): only the rows still running
 * are computed, and no (B T, G) projection goes through memory. Nor is the
 * state copied per step: a step's product reads h_prev from the output rows
 * the previous step wrote (the backward: the gate gradients from where they
 * are saved for the weight gradients); the copies had cost 10-20% of each
 * pass at 2 threads. What is left to rnn.c: the weight gradients, one
 * product each over all steps.
 *
 * Work split, one of two (splits_by_rows chooses):
 * - by rows, where the packed weights fit a core's L2 (the pointer network's
 *   LSTMs): chunks of rows, each run through every step by whichever thread
 *   claims it. No meeting per step, and a row's state never leaves its
 *   core's cache; each core streams all the weights every step. Paired runs
 *   at B 128, T 11, H 128, 2 threads: the pointer network's training step
 *   1.14x faster than by units;
 * - by units: a step's work cut into chunks of hidden units, the same cut
 *   for any thread count; a thread prefers the chunks of its own index (so
 *   its part of the panels stays in its core's L2 across steps) and takes any
 *   chunk left unclaimed (so a late or missing thread never stalls the
 *   step); the threads meet once per step.
 * Either way every output element is computed by one chunk with the same
 * operations in the same order: results are bitwise independent of the
 * thread count and of the split.
 *
 * Forward panels (per block of VW hidden units, VW = the vector width, 16
 * or 8 floats): for k < H (W_hh) or k < in (W_ih), the ng gates' VW columns
 * of W^T side by side, so one tile row holds i, f, g, o (LSTM) of the same
 * VW units. Backward panels (per block of NV VW hidden units or input
 * columns): for k < G, the block's columns of W_hh (W_ih), so a tile is
 * dh_rec = dgates (rows, G) x W_hh (G, units) and the gate gradients of
 * those units follow at once (or a tile of dx). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/simd.h"
#include "../../core/status.h"
#include "../../core/threads.h"
#include "rnn_internal.h"

#if defined(__AVX2__) && defined(__FMA__)
#define RNN_FAST 1
#include <immintrin.h>
#else
#define RNN_FAST 0
#endif
#if RNN_FAST && defined(__AVX512F__)
#define RNN_512 1
#else
#define RNN_512 0
#endif

#if RNN_FAST

enum { ISA_NONE = 0, ISA_AVX2 = 1, ISA_AVX512 = 2, MAXMR = 8, MAXVW = 16 };

/* The widest kernel set of this build that the hidden size fits (H a
 * multiple of the vector width), or ISA_NONE. */
static int fast_isa(int64_t H) {
    if (RNN_512 && H % 16 == 0) return ISA_AVX512;
    return H % 8 == 0 ? ISA_AVX2 : ISA_NONE;
}

/* The AVX-512 variant when the job uses it, else the AVX2 one (the only
 * one an AVX2 build has). */
#if RNN_512
#define BY_ISA(isa, f512, f256) ((isa) == ISA_AVX512 ? (f512) : (f256))
#else
#define BY_ISA(isa, f512, f256) ((void)(isa), (f256))
#endif

/* ---- a step-synchronised team over the thread pool ------------------------------ */

typedef void (*chunk_fn)(void *job, int64_t step, int64_t chunk);

typedef struct {
    int64_t steps, nchunks, parts; /* parts: the participants planned (chunk preference) */
    atomic_int *claim;             /* (steps, nchunks): 1 once a thread took the chunk  */
    atomic_int *done;              /* (steps): chunks of the step finished               */
    chunk_fn run;
    void *job;
} team;

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

/* Wait until *a reaches want: spin (a step is tens of microseconds, a futex
 * wake-up about as long), then yield so a descheduled partner can run. */
static void wait_for(atomic_int *a, int want) {
    for (unsigned spins = 0; atomic_load_explicit(a, memory_order_acquire) < want; spins++) {
        if (spins < 4096)
            cpu_relax();
        else
            sched_yield();
    }
}

/* A participant (block = its index): step by step, waits for the previous
 * step's chunks, runs its own chunks then any unclaimed one. Deadlock-free
 * whatever the number of threads that actually join: it only ever waits for
 * chunks another running thread has claimed. */
static void team_task(void *arg, int64_t block, int worker) {
    (void)worker;
    team *tm = arg;
    int64_t nc = tm->nchunks;
    for (int64_t s = 0; s < tm->steps; s++) {
        if (s > 0) wait_for(&tm->done[s - 1], (int)nc);
        for (int pass = 0; pass < 2; pass++)
            for (int64_t c = 0; c < nc; c++) {
                if ((c % tm->parts == block % tm->parts) != (pass == 0)) continue;
                if (atomic_exchange_explicit(&tm->claim[s * nc + c], 1, memory_order_acq_rel)) continue;
                tm->run(tm->job, s, c);
                atomic_fetch_add_explicit(&tm->done[s], 1, memory_order_release);
            }
    }
}

/* Run run(job, step, chunk) for every step in order and every chunk of a
 * step, chunks of one step in parallel, on up to `parts` threads. */
static attnc_status team_run(int64_t steps, int64_t nchunks, int parts, chunk_fn run, void *job) {
    team tm = {.steps = steps, .nchunks = nchunks, .parts = parts, .run = run, .job = job};
    TRY(attnc_calloc((void **)&tm.claim, (size_t)(steps * nchunks), sizeof(atomic_int), "rnn step flags"));
    attnc_status st = attnc_calloc((void **)&tm.done, (size_t)steps, sizeof(atomic_int), "rnn step flags");
    if (st == ATTNC_OK) {
        for (int64_t i = 0; i < steps * nchunks; i++) atomic_init(&tm.claim[i], 0);
        for (int64_t i = 0; i < steps; i++) atomic_init(&tm.done[i], 0);
        attnc_parallel_for(parts, parts, team_task, &tm);
    }
    free(tm.claim);
    free(tm.done);
    return st;
}

/* ---- micro-kernels ----------------------------------------------------------------- */

/* out (MR, NV VW) = sum over k < K of a[r][k] p[k][:], p (K, NV VW) packed, the
 * MR row pointers a[r] each with K values: MR x NV accumulators in registers,
 * one broadcast per row and NV loads per k. */
#define MICRO_KERNEL(NAME, VT, VW, LOAD, SET1, FMA, ZERO, STORE, MR, NV)                                          \
    static void NAME(const float *const *a, const float *restrict p, int64_t K, float *restrict out) {            \
        VT acc[MR][NV];                                                                                           \
        const float *ar[MR];                                                                                      \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                                    \
            ar[r] = a[r];                                                                                         \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = ZERO();                              \
        }                                                                                                         \
        for (int64_t k = 0; k < K; k++, p += NV * VW) {                                                           \
            VT bv[NV];                                                                                            \
            _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) bv[v] = LOAD(p + v * VW);                        \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                                                \
                VT x = SET1(ar[r][k]);                                                                            \
                _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[r][v] = FMA(x, bv[v], acc[r][v]);        \
            }                                                                                                     \
        }                                                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) \
            STORE(out + (r * NV + v) * VW, acc[r][v]);                                                            \
    }

#define K512(NAME, MR, NV)                                                                              \
    MICRO_KERNEL(NAME, __m512, 16, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_setzero_ps, \
                 _mm512_storeu_ps, MR, NV)
#define K256(NAME, MR, NV)                                                                             \
    MICRO_KERNEL(NAME, __m256, 8, _mm256_loadu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_setzero_ps, \
                 _mm256_storeu_ps, MR, NV)

/* Rows per tile for NV vectors: about 24 accumulators of AVX-512's 32
 * registers, 12 of AVX2's 16. */
#if RNN_512
K512(mk512_4, 6, 4)
K512(mk512_4s, 4, 4)
K512(mk512_3, 8, 3)
K512(mk512_2, 8, 2)
K512(mk512_1, 8, 1)
#endif
K256(mk256_4, 3, 4)
K256(mk256_3, 4, 3)
K256(mk256_2, 6, 2)
K256(mk256_1, 8, 1)

typedef void (*micro_fn)(const float *const *a, const float *p, int64_t K, float *out);

typedef struct {
    micro_fn fn;
    int mr;
} micro;

/* The kernel (and its rows per tile) for tiles of nv vectors, nv in 1..4. */
static micro micro_for(int isa, int64_t nv) {
#if RNN_512
    static const micro k512[5] = {{NULL, 0}, {mk512_1, 8}, {mk512_2, 8}, {mk512_3, 8}, {mk512_4, 6}};
#endif
    static const micro k256[5] = {{NULL, 0}, {mk256_1, 8}, {mk256_2, 6}, {mk256_3, 4}, {mk256_4, 3}};
    return BY_ISA(isa, k512[nv], k256[nv]);
}

/* The kernel for the tile at rows left: mk, or for the last 4 rows or fewer
 * of 6-row tiles a 4-row one (64 rows: 10 tiles of 6 and one of 4, instead
 * of computing 2 rows for nothing). */
static inline micro micro_tail(micro mk, int64_t left) {
#if RNN_512
    if (mk.fn == mk512_4 && left <= 4) return (micro){mk512_4s, 4};
#else
    (void)left;
#endif
    return mk;
}

/* Read in place of an absent state or gradient (VW values at most). */
static const float zeros[MAXVW] = {0};

/* ---- gate functions: core/sigmoid_impl.h's float ones (vectorisable, within 2e-6), and
 * core/lstm_cell_impl.h's cell loops (in the AVX-512 build, its fused multiply-add ones) ---- */

#define ATTNC_F64 0
#define ATTNC_LSTM_FMA
#include "../../core/real.h"
#include "../../core/lstm_cell_impl.h"
#include "../../core/real_end.h"

/* ---- shared set-up ----------------------------------------------------------------- */

typedef struct {
    int64_t *order;  /* (B) rows by decreasing length (stable): the rows running at step s are order[0, active[s]) */
    int64_t *active; /* (T + 1) */
} row_plan;

/* p <- the row order and counts of run r (lengths or all T); free_plan
 * frees it, also after a failure. */
static attnc_status plan_rows(const rnn_run *r, row_plan *p) {
    p->order = NULL;
    p->active = NULL;
    TRY(attnc_calloc((void **)&p->order, (size_t)r->B, sizeof(int64_t), "rnn row order"));
    TRY(attnc_calloc((void **)&p->active, (size_t)(r->T + 1), sizeof(int64_t), "rnn row order"));
    /* Counting sort by length, longest first. */
    int64_t *at = p->active; /* at[s] counts rows with len > s, by a running sum below */
    for (int64_t b = 0; b < r->B; b++) at[r->len ? r->len[b] - 1 : r->T - 1]++; /* rows of length s + 1 */
    for (int64_t s = r->T - 1; s > 0; s--) at[s - 1] += at[s];                  /* rows of length > s   */
    int64_t k = 0;
    for (int64_t n = r->T; n >= 1; n--)
        for (int64_t b = 0; b < r->B; b++)
            if ((r->len ? r->len[b] : r->T) == n) p->order[k++] = b;
    at[r->T] = 0;
    return ATTNC_OK;
}

static void free_plan(row_plan *p) {
    free(p->order);
    free(p->active);
}

/* Row b's time index at processing step s (s < its length). */
static inline int64_t time_at(const rnn_run *r, int64_t b, int64_t s) {
    int64_t n = r->len ? r->len[b] : r->T;
    return r->d ? n - 1 - s : s;
}

/* 64-byte aligned, checked; count floats. */
static attnc_status alloc_floats(float **p, int64_t count, const char *what) {
    size_t bytes = ((size_t)(count > 0 ? count : 1) * sizeof(float) + 63) / 64 * 64;
    *p = aligned_alloc(64, bytes);
    return *p ? ATTNC_OK : attnc_fail_nomem(what, bytes);
}

/* Threads a direction's loop plans for: one when a step's products are too
 * small to share (a decoding-sized batch). */
static int parts_for(const rnn_run *r) { return r->solo ? 1 : attnc_workers_for(r->B * r->H * r->ng * r->H); }

/* Chunks of nblocks unit blocks: four per planned thread where there are
 * enough blocks (one each would idle a thread whose partner is late: with
 * more, the early thread takes over part of the late one's work). */
static int64_t chunks_for(int64_t nblocks, int parts) {
    int64_t want = 4 * (int64_t)parts;
    return nblocks < want ? nblocks : want;
}

/* Packed weights up to this size are split by rows (see splits_by_rows). */
enum { ROW_SPLIT_BYTES = 512 * 1024 };

/* Whether the threads split the rows (each runs every step of its rows:
 * no meeting per step, and a row's state stays in one core's cache) rather
 * than the units (each keeps part of the weights in its cache: meets the
 * other at every step, and reads the state rows it wrote). By rows each
 * core streams all the packed weights (W_hh, W_ih: (H + in) G floats) every
 * step: that needs them to fit its L2 beside the rest, and enough rows for
 * two chunks a thread. One thread: one chunk of every row. */
static bool splits_by_rows(const rnn_run *r, int64_t in, int parts) {
    return parts == 1 || ((r->H + in) * r->ng * r->H * (int64_t)sizeof(float) <= ROW_SPLIT_BYTES && r->B >= 32 * parts);
}

/* Row chunks: about 16 rows each, two to four per thread. */
static int64_t row_chunks(int64_t B, int parts) {
    int64_t want = B / 16, lo = 2 * (int64_t)parts, hi = 4 * (int64_t)parts;
    want = want < lo ? lo : want > hi ? hi : want;
    return parts == 1 || B < want ? 1 : want;
}

/* ---- forward ------------------------------------------------------------------------ */

typedef struct {
    const rnn_fast_fwd *f;
    const rnn_run *r;
    int isa;
    int64_t vw, nblocks, nchunks;
    const float *pk;   /* (H / vw) panels (H, ng vw) of W_hh^T  */
    const float *pkx;  /* (H / vw) panels (in, ng vw) of W_ih^T */
    const float *bias; /* (3, G): b_ih + b_hh, b_ih, b_hh (absent ones 0) */
    float *h0;         /* (B, H): h0, or zeros (step 0's h_prev; later steps read it from out) */
    float *c;          /* (B, H) */
    row_plan rows;
} fwd_job;

/* Panel blk of W_hh^T and of W_ih^T: pk[blk][k][g vw + u] = W_hh[g H + blk vw + u][k].
 * Split by units: made at step 0 by the thread that takes the block's chunk
 * (into its cache). By rows: before the loop, the blocks shared out. */
static void pack_fwd_block(const fwd_job *j, int64_t blk) {
    const rnn_fast_fwd *f = j->f;
    int64_t H = j->r->H, ng = j->r->ng, vw = j->vw, in = f->in;
    float *pk = (float *)j->pk + blk * H * ng * vw, *pkx = (float *)j->pkx + blk * in * ng * vw;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t u = 0; u < vw; u++) {
            const float *wh = f->w_hh + (g * H + blk * vw + u) * H, *wx = f->w_ih + (g * H + blk * vw + u) * in;
            for (int64_t k = 0; k < H; k++) pk[(k * ng + g) * vw + u] = wh[k];
            for (int64_t k = 0; k < in; k++) pkx[(k * ng + g) * vw + u] = wx[k];
        }
}

/* dst[u] = a[u] + b[u] for u < VW, one vector (GCC left such element loops
 * scalar). */
static inline void add_8(float *dst, const float *a, const float *b) {
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
}
static inline void add_16(float *dst, const float *a, const float *b) {
#if RNN_512
    _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b)));
#else
    add_8(dst, a, b);
    add_8(dst + 8, a + 8, b + 8);
#endif
}

/* One tile row's LSTM gates, VW units: acc (4 VW) the recurrent product, gx
 * (4 VW) the input's, bias (b_ih + b_hh) at the block's units with gates H
 * apart; c (VW) updated; h into o;
 * gates and cells saved when gate is not NULL. The cell is core/lstm_cell_impl.h's. */
#define LSTM_FWD_EPI(VW)                                                                                    \
    static inline __attribute__((always_inline)) void lstm_fwd_epi##VW(                                     \
        const float *restrict acc, const float *restrict gx, const float *restrict bias, float *restrict c, \
        float *restrict o, float *restrict gate, float *restrict cell, int64_t H) {                         \
        float pre[4 * VW], cn[VW], h[VW];                                                                   \
        for (int g = 0; g < 4; g++) {                                                                       \
            add_##VW(pre + g * VW, acc + g * VW, gx + g * VW);                                              \
            add_##VW(pre + g * VW, pre + g * VW, bias + g * H);                                             \
        }                                                                                                   \
        lstm_cell_forward_units_f32(pre, c, true, cn, h, VW, VW);                                           \
        /* Fixed-size copies: one vector move each (element loops here became scalar moves). */             \
        memcpy(c, cn, sizeof cn);                                                                           \
        memcpy(o, h, sizeof h);                                                                             \
        if (gate) {                                                                                         \
            for (int g = 0; g < 4; g++) memcpy(gate + g * H, pre + g * VW, sizeof cn);                      \
            memcpy(cell, cn, sizeof cn);                                                                    \
        }                                                                                                   \
    }

/* The GRU's (torch's r, z, n; hn = W_hn h + b_hn saved for the backward);
 * bias (3, G) as in fwd_job, n taking b_in and b_hn apart. */
#define GRU_FWD_EPI(VW)                                                                                            \
    static inline __attribute__((always_inline)) void gru_fwd_epi##VW(                                             \
        const float *restrict acc, const float *restrict gx, const float *restrict bias, const float *restrict hp, \
        float *restrict o, float *restrict gate, int64_t H) {                                                      \
        const float *restrict bx = bias + 3 * H, *restrict bh = bias + 6 * H; /* b_ih, b_hh (G = 3H) */            \
        float gr[VW], gz[VW], gn[VW], ghn[VW], h[VW];                                                              \
        _Pragma("GCC ivdep") for (int u = 0; u < VW; u++) {                                                        \
            gr[u] = sigmoid_f32(acc[u] + gx[u] + bias[u]);                                                         \
            gz[u] = sigmoid_f32(acc[VW + u] + gx[VW + u] + bias[H + u]);                                           \
            ghn[u] = acc[2 * VW + u] + bh[2 * H + u];                                                              \
            gn[u] = tanh__f32(gx[2 * VW + u] + bx[2 * H + u] + gr[u] * ghn[u]);                                    \
            h[u] = (1 - gz[u]) * gn[u] + gz[u] * hp[u];                                                            \
            o[u] = h[u];                                                                                           \
        }                                                                                                          \
        if (gate) _Pragma("GCC ivdep") for (int u = 0; u < VW; u++) {                                              \
                gate[u] = gr[u];                                                                                   \
                gate[H + u] = gz[u];                                                                               \
                gate[2 * H + u] = gn[u];                                                                           \
                gate[3 * H + u] = ghn[u];                                                                          \
            }                                                                                                      \
    }

LSTM_FWD_EPI(16)
LSTM_FWD_EPI(8)
GRU_FWD_EPI(16)
GRU_FWD_EPI(8)

/* Step s, chunk c: the rows running at s, for the chunk's unit blocks:
 * product tiles (MR rows, ng VW) of the input (x_t W_ih^T) and of the state
 * (h_prev W_hh^T), then their gates. The input's product is made here, not
 * as one matrix product before the loop: only the rows still running are
 * computed, and nothing (B T G) goes through memory. */
#define FWD_TILES(NAME, VW)                                                                                \
    static void NAME(const fwd_job *j, int64_t s, int64_t b0, int64_t b1, int64_t r0, int64_t r1) {        \
        const rnn_fast_fwd *f = j->f;                                                                      \
        const rnn_run *r = j->r;                                                                           \
        int64_t T = r->T, H = r->H, DH = r->D * H, in = f->in;                                             \
        int64_t n = j->rows.active[s] < r1 ? j->rows.active[s] : r1;                                       \
        micro mk = micro_for(j->isa, r->ng);                                                               \
        float tile[MAXMR * 4 * MAXVW] __attribute__((aligned(64)));                                        \
        float xtile[MAXMR * 4 * MAXVW] __attribute__((aligned(64)));                                       \
        for (int64_t blk = b0; blk < b1; blk++) {                                                          \
            const float *panel = j->pk + blk * H * r->ng * VW, *xpanel = j->pkx + blk * in * r->ng * VW;   \
            int64_t u0 = blk * VW;                                                                         \
            for (int64_t i = r0, mr = 0; i < n; i += mr) {                                                 \
                micro mt = micro_tail(mk, n - i);                                                          \
                mr = mt.mr;                                                                                \
                const float *a[MAXMR], *ax[MAXMR];                                                         \
                int64_t rows[MAXMR], bts[MAXMR];                                                           \
                for (int q = 0; q < mt.mr; q++) {                                                          \
                    rows[q] = j->rows.order[i + q < n ? i + q : n - 1];                                    \
                    bts[q] = rows[q] * T + time_at(r, rows[q], s);                                         \
                    /* h_prev: h0's row at step 0, else the row's output at its previous step */           \
                    a[q] = s == 0 ? j->h0 + rows[q] * H                                                    \
                                  : f->out + (rows[q] * T + time_at(r, rows[q], s - 1)) * DH + r->d * H;   \
                    ax[q] = f->x + bts[q] * in;                                                            \
                }                                                                                          \
                /* The lines the gates write (one per gate row and unit block of 16 floats; rows of \
                 * a step lie T steps apart in memory, beyond the hardware prefetcher's reach): asked \
                 * for now, written after the product tiles. */      \
                for (int q = 0; q < mt.mr && i + q < n && f->gates; q++) {                                 \
                    for (int64_t g = 0; g < 4; g++)                                                        \
                        _mm_prefetch((const char *)(f->gates + bts[q] * 4 * H + g * H + u0), _MM_HINT_T1); \
                    if (f->cells) _mm_prefetch((const char *)(f->cells + bts[q] * H + u0), _MM_HINT_T1);   \
                    _mm_prefetch((const char *)(f->out + bts[q] * DH + r->d * H + u0), _MM_HINT_T1);       \
                }                                                                                          \
                mt.fn(ax, xpanel, in, xtile);                                                              \
                mt.fn(a, panel, H, tile);                                                                  \
                for (int q = 0; q < mt.mr && i + q < n; q++) {                                             \
                    int64_t b = rows[q], bt = bts[q];                                                      \
                    const float *acc = tile + q * r->ng * VW, *gx = xtile + q * r->ng * VW;                \
                    float *o = f->out + bt * DH + r->d * H + u0;                                           \
                    float *gate = f->gates ? f->gates + bt * 4 * H + u0 : NULL;                            \
                    if (r->mode == ATTNC_LSTM)                                                             \
                        lstm_fwd_epi##VW(acc, gx, j->bias + u0, j->c + b * H + u0, o, gate,                \
                                         f->cells ? f->cells + bt * H + u0 : NULL, H);                     \
                    else                                                                                   \
                        gru_fwd_epi##VW(acc, gx, j->bias + u0, a[q] + u0, o, gate, H);                     \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }

#if RNN_512
FWD_TILES(fwd_tiles512, 16)
#endif
FWD_TILES(fwd_tiles256, 8)

/* Split by units: step s, chunk c = its blocks of units, every row. */
static void fwd_step_chunk(void *arg, int64_t s, int64_t c) {
    const fwd_job *j = arg;
    int64_t b0 = c * j->nblocks / j->nchunks, b1 = (c + 1) * j->nblocks / j->nchunks;
    for (int64_t blk = b0; blk < b1 && s == 0; blk++) pack_fwd_block(j, blk); /* into this core's cache */
    BY_ISA(j->isa, fwd_tiles512, fwd_tiles256)(j, s, b0, b1, 0, j->r->B);
}

/* Split by rows: chunk c of the rows (in the order by length), every step
 * and every unit. */
static void fwd_row_chunk(void *arg, int64_t c, int worker) {
    (void)worker;
    const fwd_job *j = arg;
    int64_t B = j->r->B, r0 = c * B / j->nchunks, r1 = (c + 1) * B / j->nchunks;
    for (int64_t s = 0; s < j->r->T && j->rows.active[s] > r0; s++)
        BY_ISA(j->isa, fwd_tiles512, fwd_tiles256)(j, s, 0, j->nblocks, r0, r1);
}

static void pack_fwd_task(void *arg, int64_t blk, int worker) {
    (void)worker;
    pack_fwd_block(arg, blk);
}

bool attnc_rnn_fast_usable(const rnn_run *r) { return r->dt == ATTNC_FLOAT32 && fast_isa(r->H) != ISA_NONE; }

bool attnc_rnn_fast_fuses_dx(const rnn_run *r, int64_t in) {
    return attnc_rnn_fast_usable(r) && in % (fast_isa(r->H) == ISA_AVX512 ? 16 : 8) == 0;
}

attnc_status attnc_rnn_fast_forward(const rnn_fast_fwd *f) {
    const rnn_run *r = f->r;
    int64_t B = r->B, H = r->H, G = r->ng * H;
    fwd_job j = {.f = f, .r = r, .isa = fast_isa(H)};
    j.vw = j.isa == ISA_AVX512 ? 16 : 8;
    j.nblocks = H / j.vw;
    int parts = parts_for(r);
    bool by_rows = splits_by_rows(r, f->in, parts);
    j.nchunks = by_rows ? row_chunks(B, parts) : chunks_for(j.nblocks, parts);
    float *pk = NULL, *pkx = NULL, *bias = NULL, *h0 = NULL, *c = NULL;
    attnc_status st = alloc_floats(&pk, H * G, "rnn packed weights");
    if (st == ATTNC_OK) st = alloc_floats(&pkx, f->in * G, "rnn packed weights");
    if (st == ATTNC_OK) st = alloc_floats(&h0, B * H, "rnn state");
    if (st == ATTNC_OK) st = alloc_floats(&c, B * H, "rnn state");
    if (st == ATTNC_OK) st = alloc_floats(&bias, 3 * G, "rnn bias");
    if (st == ATTNC_OK) st = plan_rows(r, &j.rows);
    if (st == ATTNC_OK) {
        if (f->h0)
            attnc_copy(h0, f->h0, (size_t)(B * H) * sizeof(float));
        else
            attnc_zero(h0, (size_t)(B * H) * sizeof(float));
        if (f->c0)
            attnc_copy(c, f->c0, (size_t)(B * H) * sizeof(float));
        else
            attnc_zero(c, (size_t)(B * H) * sizeof(float));
        j.pk = pk;
        for (int64_t k = 0; k < G; k++) {
            float bx = f->b_ih ? f->b_ih[k] : 0, bh = f->b_hh ? f->b_hh[k] : 0;
            bias[k] = bx + bh;
            bias[G + k] = bx;
            bias[2 * G + k] = bh;
        }
        j.pkx = pkx;
        j.bias = bias;
        j.h0 = h0;
        j.c = c;
        if (by_rows) {
            attnc_parallel_for(j.nblocks, parts, pack_fwd_task, &j);
            attnc_parallel_for(j.nchunks, parts, fwd_row_chunk, &j);
        } else {
            st = team_run(r->T, j.nchunks, parts, fwd_step_chunk, &j);
        }
    }
    if (st == ATTNC_OK) {
        /* Row b's final h is its output at its last step (h0 with no step); c is final. */
        for (int64_t b = 0; b < B && f->h_n; b++) {
            int64_t n = r->len ? r->len[b] : r->T;
            const float *last = n == 0 ? h0 + b * H : f->out + (b * r->T + time_at(r, b, n - 1)) * r->D * H + r->d * H;
            memcpy(f->h_n + b * H, last, (size_t)H * sizeof(float));
        }
        if (f->c_n && r->mode == ATTNC_LSTM) attnc_copy(f->c_n, c, (size_t)(B * H) * sizeof(float));
    }
    free_plan(&j.rows);
    free(pk);
    free(pkx);
    free(bias);
    free(h0);
    free(c);
    return st;
}

/* ---- backward ----------------------------------------------------------------------- */

typedef struct {
    const rnn_fast_bwd *f;
    const rnn_run *r;
    int isa;
    int64_t vw, nv, nblocks, nchunks; /* blocks of nv vw units */
    const float *pk;                  /* nblocks panels (G, nv vw) of W_hh */
    int64_t nvx, nxblocks, nxchunks;  /* dx: blocks of nvx vw input columns (0 chunks: not fused) */
    const float *pkx;                 /* nxblocks panels (G, nvx vw) of W_ih */
    float *dc;                        /* (B, H) LSTM: the cell gradient carried back */
    float *direct;                    /* (B, H) GRU: dh z, the part of dh_prev not through W_hh */
    row_plan rows;
} bwd_job;

/* One row's LSTM gate gradients for VW units from dh (the recurrent part
 * rec (VW): the product's, or dh_n / zeros at the row's last step) + dout
 * (core/lstm_cell_impl.h's cell, gates H apart); the previous state hp / cp
 * copied into hprev. */
#define LSTM_BWD_EPI(VW)                                                                                               \
    static inline __attribute__((always_inline)) void lstm_bwd_epi##VW(                                                \
        const float *restrict rec, const float *restrict dout, const float *restrict gate, const float *restrict cell, \
        const float *restrict cp, const float *restrict hp, float *restrict hprev, float *restrict dc,                 \
        float *restrict dgx, int64_t H) {                                                                              \
        lstm_cell_backward_units_f32(gate, cell, cp, true, rec, dout, true, dc, dgx, VW, H);                           \
        memcpy(hprev, hp, VW * sizeof(float)); /* a fixed size: vector moves */                                        \
    }

/* The GRU's: rec already holds the direct part; direct (VW) <- dh z. */
#define GRU_BWD_EPI(VW)                                                                                              \
    static inline __attribute__((always_inline)) void gru_bwd_epi##VW(                                               \
        const float *restrict rec, const float *restrict dout, const float *restrict gate, const float *restrict hp, \
        float *restrict hprev, float *restrict direct, float *restrict dgx, float *restrict dgh, int64_t H) {        \
        float dh[VW], h[VW];                                                                                         \
        _Pragma("GCC ivdep") for (int u = 0; u < VW; u++) {                                                          \
            dh[u] = rec[u] + dout[u];                                                                                \
            h[u] = hp[u];                                                                                            \
            hprev[u] = h[u];                                                                                         \
        }                                                                                                            \
        _Pragma("GCC ivdep") for (int u = 0; u < VW; u++) {                                                          \
            float rg = gate[u], z = gate[H + u], n = gate[2 * H + u], hn = gate[3 * H + u];                          \
            float dn = dh[u] * (1 - z) * (1 - n * n);                                                                \
            float dr = dn * hn * rg * (1 - rg);                                                                      \
            float dz = dh[u] * (h[u] - n) * z * (1 - z);                                                             \
            dgx[u] = dgh[u] = dr;                                                                                    \
            dgx[H + u] = dgh[H + u] = dz;                                                                            \
            dgx[2 * H + u] = dn;                                                                                     \
            dgh[2 * H + u] = dn * rg;                                                                                \
            direct[u] = dh[u] * z;                                                                                   \
        }                                                                                                            \
    }

LSTM_BWD_EPI(16)
LSTM_BWD_EPI(8)
GRU_BWD_EPI(16)
GRU_BWD_EPI(8)

/* Row b's gradients at processing step s for the VW units from u0, rec its
 * recurrent dh (VW; GRU: the direct part added) or NULL at the row's last
 * step (dh_n or zeros then). */
#define BWD_ROW(VW)                                                                                                    \
    static inline __attribute__((always_inline)) void bwd_row##VW(const bwd_job *j, int64_t s, int64_t b, int64_t u0,  \
                                                                  const float *rec) {                                  \
        const rnn_fast_bwd *f = j->f;                                                                                  \
        const rnn_run *r = j->r;                                                                                       \
        int64_t T = r->T, H = r->H, G = r->ng * H, DH = r->D * H;                                                      \
        if (!rec) rec = f->dh_n ? f->dh_n + b * H + u0 : zeros;                                                        \
        int64_t t = time_at(r, b, s), bt = b * T + t, tp = r->d ? t + 1 : t - 1;                                       \
        const float *hp = s == 0 ? (f->h0 ? f->h0 + b * H + u0 : zeros) : f->out + (b * T + tp) * DH + r->d * H + u0;  \
        const float *dout = f->dout + bt * DH + r->d * H + u0, *gate = f->gates + bt * 4 * H + u0;                     \
        if (r->mode == ATTNC_LSTM) {                                                                                   \
            const float *cp = s == 0 ? (f->c0 ? f->c0 + b * H + u0 : zeros) : f->cells + (b * T + tp) * H + u0;        \
            lstm_bwd_epi##VW(rec, dout, gate, f->cells + bt * H + u0, cp, hp, f->hprev + bt * H + u0,                  \
                             j->dc + b * H + u0, f->dgx + bt * G + u0, H);                                             \
        } else {                                                                                                       \
            gru_bwd_epi##VW(rec, dout, gate, hp, f->hprev + bt * H + u0, j->direct + b * H + u0, f->dgx + bt * G + u0, \
                            f->dgh + bt * G + u0, H);                                                                  \
        }                                                                                                              \
    }

BWD_ROW(16)
BWD_ROW(8)

/* Ask for the lines of p[0, n) (n floats) into L2. */
static inline void prefetch_span(const float *p, int64_t n) {
    for (int64_t k = 0; k < n; k += 16) _mm_prefetch((const char *)(p + k), _MM_HINT_T1);
}

/* The lines row b's gradients at step s read and write for the W units from
 * u0: asked for before the product tile that precedes them (rows of a step
 * lie T steps apart in memory, beyond the hardware prefetcher's reach). */
static void bwd_prefetch(const bwd_job *j, int64_t s, int64_t b, int64_t u0, int64_t W) {
    const rnn_fast_bwd *f = j->f;
    const rnn_run *r = j->r;
    int64_t T = r->T, H = r->H, G = r->ng * H, DH = r->D * H;
    int64_t t = time_at(r, b, s), bt = b * T + t, tp = r->d ? t + 1 : t - 1;
    for (int64_t g = 0; g < 4; g++) prefetch_span(f->gates + bt * 4 * H + g * H + u0, W);
    for (int64_t g = 0; g < r->ng; g++) {
        prefetch_span(f->dgx + bt * G + g * H + u0, W);
        if (f->dgh != f->dgx) prefetch_span(f->dgh + bt * G + g * H + u0, W);
    }
    prefetch_span(f->dout + bt * DH + r->d * H + u0, W);
    prefetch_span(f->hprev + bt * H + u0, W);
    if (s > 0) prefetch_span(f->out + (b * T + tp) * DH + r->d * H + u0, W);
    if (r->mode == ATTNC_LSTM) {
        prefetch_span(f->cells + bt * H + u0, W);
        if (s > 0) prefetch_span(f->cells + (b * T + tp) * H + u0, W);
    }
}

/* Panels of W_hh (dh block blk, x false) or W_ih (dx block, x true):
 * p[blk][k][w] = W[k][blk w_ + w]; made when and where the forward's are. */
static void pack_bwd_block(const bwd_job *j, int64_t blk, bool x) {
    const rnn_fast_bwd *f = j->f;
    int64_t G = j->r->ng * j->r->H, cols = x ? f->in : j->r->H, W = (x ? j->nvx : j->nv) * j->vw;
    const float *w = x ? f->w_ih : f->w_hh;
    float *p = (float *)(x ? j->pkx : j->pk) + blk * G * W;
    for (int64_t k = 0; k < G; k++) memcpy(p + k * W, w + k * cols + blk * W, (size_t)W * sizeof(float));
}

/* Iteration it, dx block chunk c: dx at step s + 1 (s = T - 1 - it) of the
 * rows that ran then, dgx (rows, G) x W_ih (G, columns), stored or added
 * (the second direction). Off the recurrence's critical path, but made here
 * so that both threads share it and dgates is read while in cache. */
#define DX_TILES(VW)                                                                                         \
    static inline __attribute__((always_inline)) void dx_tiles##VW(const bwd_job *j, int64_t it, int64_t b0, \
                                                                   int64_t b1, int64_t r0, int64_t r1) {     \
        const rnn_fast_bwd *f = j->f;                                                                        \
        const rnn_run *r = j->r;                                                                             \
        int64_t T = r->T, G = r->ng * r->H, s = T - 1 - it, in = f->in, W = j->nvx * VW;                     \
        if (it == 0) return;                                                                                 \
        int64_t m = j->rows.active[s + 1] < r1 ? j->rows.active[s + 1] : r1;                                 \
        micro mk = micro_for(j->isa, j->nvx);                                                                \
        float tile[MAXMR * 4 * MAXVW] __attribute__((aligned(64)));                                          \
        for (int64_t blk = b0; blk < b1; blk++) {                                                            \
            const float *panel = j->pkx + blk * G * W;                                                       \
            for (int64_t i = r0, mr = 0; i < m; i += mr) {                                                   \
                micro mt = micro_tail(mk, m - i);                                                            \
                mr = mt.mr;                                                                                  \
                const float *a[MAXMR];                                                                       \
                int64_t rows[MAXMR], bts[MAXMR];                                                             \
                for (int q = 0; q < mt.mr; q++) {                                                            \
                    rows[q] = j->rows.order[i + q < m ? i + q : m - 1];                                      \
                    bts[q] = rows[q] * T + time_at(r, rows[q], s + 1);                                       \
                    a[q] = f->dgx + bts[q] * G; /* dgx: the GRU's is not its dgh */                          \
                }                                                                                            \
                mt.fn(a, panel, G, tile);                                                                    \
                for (int q = 0; q < mt.mr && i + q < m; q++) {                                               \
                    float *restrict dst = f->dx + bts[q] * in + blk * W;                                     \
                    const float *restrict src = tile + q * W;                                                \
                    if (f->dx_add)                                                                           \
                        for (int64_t w = 0; w < W; w += VW) add_##VW(dst + w, dst + w, src + w);             \
                    else                                                                                     \
                        memcpy(dst, src, (size_t)W * sizeof(float));                                         \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

DX_TILES(16)
DX_TILES(8)

/* Iteration it (processing step s = T - 1 - it; it = T: dh0 only), chunk c:
 * dh_rec of the rows that ran at s + 1 from that step's dgates (tiles of
 * the product) and their gate gradients at s, then the gate gradients of
 * the rows whose last step is s (no recurrent part). */
#define BWD_TILES(NAME, VW)                                                                                      \
    static void NAME(const bwd_job *j, int64_t it, int64_t b0, int64_t b1, int64_t r0, int64_t r1) {             \
        const rnn_run *r = j->r;                                                                                 \
        int64_t T = r->T, H = r->H, G = r->ng * H, s = T - 1 - it;                                               \
        if (it == T && !j->f->dh0) return;                                                                       \
        int64_t m = it == 0 ? 0 : j->rows.active[s + 1]; /* rows with a recurrent gradient */                    \
        int64_t n = it == T ? 0 : j->rows.active[s];     /* rows running at s */                                 \
        m = m < r1 ? m : r1;                                                                                     \
        n = n < r1 ? n : r1;                                                                                     \
        micro mk = micro_for(j->isa, j->nv);                                                                     \
        int64_t W = j->nv * VW;                                                                                  \
        float tile[MAXMR * 4 * MAXVW] __attribute__((aligned(64)));                                              \
        for (int64_t blk = b0; blk < b1; blk++) {                                                                \
            const float *panel = j->pk + blk * G * W;                                                            \
            for (int64_t i = r0, mr = 0; i < m; i += mr) {                                                       \
                micro mt = micro_tail(mk, m - i);                                                                \
                mr = mt.mr;                                                                                      \
                const float *a[MAXMR];                                                                           \
                int64_t rows[MAXMR];                                                                             \
                for (int q = 0; q < mt.mr; q++) {                                                                \
                    rows[q] = j->rows.order[i + q < m ? i + q : m - 1];                                          \
                    /* the product's rows: the dgates (dgh) of step s + 1, read where they were saved */         \
                    a[q] = j->f->dgh + (rows[q] * T + time_at(r, rows[q], s + 1)) * G;                           \
                }                                                                                                \
                for (int q = 0; q < mt.mr && i + q < m && it < T; q++) bwd_prefetch(j, s, rows[q], blk * W, W);  \
                mt.fn(a, panel, G, tile);                                                                        \
                for (int q = 0; q < mt.mr && i + q < m; q++)                                                     \
                    for (int64_t v = 0; v < j->nv; v++) {                                                        \
                        int64_t b = rows[q], u0 = blk * W + v * VW;                                              \
                        float *rec = tile + q * W + v * VW;                                                      \
                        if (r->mode == ATTNC_GRU) add_##VW(rec, rec, j->direct + b * H + u0);                    \
                        if (it == T)                                                                             \
                            memcpy(j->f->dh0 + b * H + u0, rec, VW * sizeof(float));                             \
                        else                                                                                     \
                            bwd_row##VW(j, s, b, u0, rec);                                                       \
                    }                                                                                            \
            }                                                                                                    \
            for (int64_t i = m > r0 ? m : r0; i < n; i++)                                                        \
                for (int64_t v = 0; v < j->nv; v++) bwd_row##VW(j, s, j->rows.order[i], blk * W + v * VW, NULL); \
        }                                                                                                        \
    }

#if RNN_512
BWD_TILES(bwd_tiles512, 16)
#endif
BWD_TILES(bwd_tiles256, 8)

/* Split by units: iteration it, chunk c = its blocks of units (or, from
 * nchunks on, of dx's columns), every row. */
static void bwd_step_chunk(void *arg, int64_t it, int64_t c) {
    const bwd_job *j = arg;
    int64_t B = j->r->B;
    /* Each chunk packs its panels when it first needs them, into its core's cache. */
    if (c < j->nchunks) {
        int64_t b0 = c * j->nblocks / j->nchunks, b1 = (c + 1) * j->nblocks / j->nchunks;
        for (int64_t blk = b0; blk < b1 && it == 0; blk++) pack_bwd_block(j, blk, false);
        BY_ISA(j->isa, bwd_tiles512, bwd_tiles256)(j, it, b0, b1, 0, B);
    } else {
        c -= j->nchunks;
        int64_t b0 = c * j->nxblocks / j->nxchunks, b1 = (c + 1) * j->nxblocks / j->nxchunks;
        for (int64_t blk = b0; blk < b1 && it == 1; blk++) pack_bwd_block(j, blk, true); /* dx's first */
        BY_ISA(j->isa, dx_tiles16, dx_tiles8)(j, it, b0, b1, 0, B);
    }
}

/* Split by rows: chunk c of the rows, every iteration (it = T: dh0 and the
 * last dx), every unit and dx column. */
static void bwd_row_chunk(void *arg, int64_t c, int worker) {
    (void)worker;
    const bwd_job *j = arg;
    int64_t B = j->r->B, T = j->r->T, r0 = c * B / j->nchunks, r1 = (c + 1) * B / j->nchunks;
    int64_t its = j->f->dh0 || j->f->dx ? T + 1 : T;
    for (int64_t it = 0; it < its; it++) {
        if (j->f->dx) BY_ISA(j->isa, dx_tiles16, dx_tiles8)(j, it, 0, j->nxblocks, r0, r1);
        BY_ISA(j->isa, bwd_tiles512, bwd_tiles256)(j, it, 0, j->nblocks, r0, r1);
    }
}

/* Panels blk < nblocks of W_hh, then those of W_ih. */
static void pack_bwd_task(void *arg, int64_t blk, int worker) {
    (void)worker;
    const bwd_job *j = arg;
    if (blk < j->nblocks)
        pack_bwd_block(j, blk, false);
    else
        pack_bwd_block(j, blk - j->nblocks, true);
}

attnc_status attnc_rnn_fast_backward(const rnn_fast_bwd *f) {
    const rnn_run *r = f->r;
    int64_t B = r->B, T = r->T, H = r->H, G = r->ng * H;
    bwd_job j = {.f = f, .r = r, .isa = fast_isa(H)};
    j.vw = j.isa == ISA_AVX512 ? 16 : 8;
    int64_t vecs = H / j.vw;
    int parts = parts_for(r);
    /* The widest block (4 vectors at most) that divides the hidden size and
     * still leaves a block per planned thread. */
    for (j.nv = 4; j.nv > 1 && (vecs % j.nv || vecs / j.nv < parts); j.nv--) {}
    j.nblocks = vecs / j.nv;
    int64_t in = f->in, xvecs = f->dx ? in / j.vw : 0;
    bool by_rows = splits_by_rows(r, f->dx ? in : 0, parts);
    j.nchunks = by_rows ? row_chunks(B, parts) : chunks_for(j.nblocks, parts);
    if (f->dx) {
        for (j.nvx = 4; j.nvx > 1 && (xvecs % j.nvx || xvecs / j.nvx < parts); j.nvx--) {}
        j.nxblocks = xvecs / j.nvx;
        j.nxchunks = chunks_for(j.nxblocks, parts);
    }
    float *pk = NULL, *pkx = NULL, *dc = NULL, *direct = NULL;
    attnc_status st = alloc_floats(&pk, G * H, "rnn packed weights");
    if (st == ATTNC_OK && f->dx) st = alloc_floats(&pkx, G * in, "rnn packed weights");
    if (st == ATTNC_OK) st = alloc_floats(&dc, B * H, "rnn gradients");
    if (st == ATTNC_OK) st = alloc_floats(&direct, B * H, "rnn gradients");
    if (st == ATTNC_OK) st = plan_rows(r, &j.rows);
    if (st == ATTNC_OK) {
        if (f->dc_n)
            attnc_copy(dc, f->dc_n, (size_t)(B * H) * sizeof(float));
        else
            attnc_zero(dc, (size_t)(B * H) * sizeof(float));
        /* Padding steps (t >= len) are never written: zero them for the weight gradients. */
        for (int64_t b = 0; b < B && r->len; b++) {
            int64_t n = r->len[b];
            memset(f->dgx + (b * T + n) * G, 0, (size_t)((T - n) * G) * sizeof(float));
            if (f->dgh != f->dgx) memset(f->dgh + (b * T + n) * G, 0, (size_t)((T - n) * G) * sizeof(float));
            memset(f->hprev + (b * T + n) * H, 0, (size_t)((T - n) * H) * sizeof(float));
            if (f->dx && !f->dx_add) memset(f->dx + (b * T + n) * in, 0, (size_t)((T - n) * in) * sizeof(float));
        }
        j.pk = pk;
        j.pkx = pkx;
        j.dc = dc;
        j.direct = direct;
        if (by_rows) {
            attnc_parallel_for(j.nblocks + (f->dx ? j.nxblocks : 0), parts, pack_bwd_task, &j);
            attnc_parallel_for(j.nchunks, parts, bwd_row_chunk, &j);
        } else {
            st = team_run(f->dh0 || f->dx ? T + 1 : T, j.nchunks + j.nxchunks, parts, bwd_step_chunk, &j);
        }
    }
    if (st == ATTNC_OK && f->dc0 && r->mode == ATTNC_LSTM) attnc_copy(f->dc0, dc, (size_t)(B * H) * sizeof(float));
    free_plan(&j.rows);
    free(pk);
    free(pkx);
    free(dc);
    free(direct);
    return st;
}

#else /* a build without AVX2 + FMA: rnn.c's BLAS path only */

bool attnc_rnn_fast_usable(const rnn_run *r) {
    (void)r;
    return false;
}
bool attnc_rnn_fast_fuses_dx(const rnn_run *r, int64_t in) {
    (void)r;
    (void)in;
    return false;
}
attnc_status attnc_rnn_fast_forward(const rnn_fast_fwd *f) {
    (void)f;
    return attnc_fail(ATTNC_ERR_VALUE, "no fused rnn kernels in this build");
}
attnc_status attnc_rnn_fast_backward(const rnn_fast_bwd *b) {
    (void)b;
    return attnc_fail(ATTNC_ERR_VALUE, "no fused rnn kernels in this build");
}

#endif
