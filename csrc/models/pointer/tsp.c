/* tsp.c: exact (Held-Karp) and heuristic (nearest neighbour + 2-opt, and Or-opt) planar
 * TSP tours, and closed tour lengths (shapes in tsp.h).
 *
 * Each instance is solved on its own in one worker, over a fixed number of
 * instances per block (chosen from n, never from the thread count), with
 * per-worker scratch allocated before the parallel loop: the same tours and
 * lengths for any number of threads. */
#include "tsp.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

/* 2-opt keeps an n x n distance table per worker up to this n (2 MiB), and
 * computes distances on the fly above it (the same bits either way). */
#define TSP_TABLE_MAX_N 512
/* A 2-opt move must shorten the tour by more than this. */
#define TSP_TWO_OPT_EPS 1e-12
/* Or-opt moves segments of up to this many cities. */
#define TSP_OR_OPT_MAX_L 3

/* ---- shared ----------------------------------------------------------------- */

typedef struct {
    const double *p; /* points (B, n, 2), strides ps0, ps1, ps2        */
    int64_t ps0, ps1, ps2;
    int64_t *tours;       /* (B, n) contiguous                             */
    double *lengths;      /* (B)                                            */
    int64_t B, n, rows;   /* rows: instances per block                      */
    double *work;         /* per-worker doubles, `wsize` each               */
    unsigned char *bytes; /* per-worker bytes, `bsize` each                 */
    size_t wsize, bsize;
    bool table;  /* 2-opt: keep the distance table                 */
    bool or_opt; /* 2-opt: add Or-opt moves                         */
} tsp_job;

static inline double dist_xy(const double *xy, int64_t i, int64_t j) {
    double dx = xy[2 * i] - xy[2 * j], dy = xy[2 * i + 1] - xy[2 * j + 1];
    return sqrt(dx * dx + dy * dy);
}

/* xy (2n) <- the coordinates of instance b. */
static void load_points(const tsp_job *job, int64_t b, double *xy) {
    const double *row = job->p + b * job->ps0;
    for (int64_t i = 0; i < job->n; i++) {
        xy[2 * i] = row[i * job->ps1];
        xy[2 * i + 1] = row[i * job->ps1 + job->ps2];
    }
}

/* d (n x n) <- the distance table of xy. */
static void fill_table(double *d, const double *xy, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        d[i * n + i] = 0;
        for (int64_t j = i + 1; j < n; j++) d[i * n + j] = d[j * n + i] = dist_xy(xy, i, j);
    }
}

/* Closed length of tour t (n cities) summed from position 0. */
static double closed_length(const double *xy, const int64_t *t, int64_t n) {
    double s = 0;
    for (int64_t k = 0; k < n; k++) s += dist_xy(xy, t[k], t[k + 1 < n ? k + 1 : 0]);
    return s;
}

/* Reverse t[lo..hi]. */
static void reverse(int64_t *t, int64_t lo, int64_t hi) {
    for (; lo < hi; lo++, hi--) {
        int64_t x = t[lo];
        t[lo] = t[hi];
        t[hi] = x;
    }
}

/* t starts at 0: make tour[1] < tour[n-1]. */
static void canonicalise(int64_t *t, int64_t n) {
    if (n >= 3 && t[1] > t[n - 1]) reverse(t, 1, n - 1);
}

attnc_status attnc_check_planar_points(const attnc_tensor *points, int64_t dims[3]) {
    if (!attnc_present(points)) return attnc_fail(ATTNC_ERR_TYPE, "points is required");
    dims[0] = dims[1] = -1;
    dims[2] = 2;
    TRY(attnc_check_dims(points, "points", ATTNC_FLOAT64, 3, dims, false));
    if (dims[1] < 1) return attnc_fail(ATTNC_ERR_VALUE, "points must hold at least 1 point per instance, got n = 0");
    /* Every coordinate finite (a NaN would make every comparison false). */
    const double *p = points->data;
    for (int64_t b = 0; b < dims[0]; b++)
        for (int64_t i = 0; i < dims[1]; i++)
            for (int c = 0; c < 2; c++) {
                double v = p[b * points->strides[0] + i * points->strides[1] + c * points->strides[2]];
                if (!isfinite(v))
                    return attnc_fail(ATTNC_ERR_VALUE,
                                      "points[%" PRId64 ", %" PRId64 ", %d] is %g: coordinates "
                                      "must be finite",
                                      b, i, c, v);
            }
    return ATTNC_OK;
}

/* Check points, tours and lengths for a solver; sets the job's geometry. */
static attnc_status solver_dims(tsp_job *job, attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points) {
    if (!attnc_present(tours)) return attnc_fail(ATTNC_ERR_TYPE, "tours is required");
    if (!attnc_present(lengths)) return attnc_fail(ATTNC_ERR_TYPE, "lengths is required");
    int64_t ps[3];
    TRY(attnc_check_planar_points(points, ps));
    int64_t ts[2] = {ps[0], ps[1]}, ls[1] = {ps[0]};
    TRY(attnc_check_dims(tours, "tours", ATTNC_INT64, 2, ts, true));
    TRY(attnc_check_dims(lengths, "lengths", ATTNC_FLOAT64, 1, ls, true));
    *job = (tsp_job){.p = points->data,
                     .ps0 = points->strides[0],
                     .ps1 = points->strides[1],
                     .ps2 = points->strides[2],
                     .tours = tours->data,
                     .lengths = lengths->data,
                     .B = ps[0],
                     .n = ps[1]};
    return ATTNC_OK;
}

/* Allocate the job's per-worker scratch, run task over the instances, free. */
static attnc_status run(tsp_job *job, attnc_task_fn task, int64_t cost_per_row) {
    if (job->B == 0) return ATTNC_OK;
    if (cost_per_row < 1) cost_per_row = 1;
    job->rows = cost_per_row >= 65536 ? 1 : 65536 / cost_per_row;
    int64_t blocks = (job->B + job->rows - 1) / job->rows;
    int workers = attnc_workers_for(job->B * cost_per_row);
    if (workers > blocks) workers = (int)blocks; /* no scratch for idle workers (Held-Karp's is 90 MB at n = 20) */
    void *work = NULL, *bytes = NULL;
    TRY(attnc_calloc(&work, (size_t)workers * job->wsize, sizeof(double), "TSP scratch"));
    attnc_status st = attnc_calloc(&bytes, (size_t)workers * job->bsize, 1, "TSP scratch");
    if (st != ATTNC_OK) {
        free(work);
        return st;
    }
    job->work = work;
    job->bytes = bytes;
    attnc_parallel_for(blocks, workers, task, job);
    free(work);
    free(bytes);
    return ATTNC_OK;
}

/* ---- Held-Karp -------------------------------------------------------------- */

/* Index of the lowest set bit of x != 0. */
static inline int64_t lowest_bit(uint32_t x) {
#if defined(__GNUC__)
    return __builtin_ctz(x);
#else
    int64_t i = 0;
    while (!(x & 1)) x >>= 1, i++;
    return i;
#endif
}

/* Cities 1..m (m = n - 1) are bits 0..m-1 of a subset S; dp[S m + j] is the
 * shortest path from city 0 through the cities of S ending at city j + 1
 * (bit j in S), par[S m + j] the bit of the city before it (-1: city 0). */
static void held_karp_one(const tsp_job *job, double *xy, double *d, double *dp, signed char *par, int64_t *t) {
    const int64_t n = job->n, m = n - 1;
    t[0] = 0;
    if (n <= 3) { /* one tour up to direction */
        for (int64_t i = 1; i < n; i++) t[i] = i;
        return;
    }
    fill_table(d, xy, n);
    const uint32_t full = (UINT32_C(1) << m) - 1;
    for (int64_t j = 0; j < m; j++) {
        dp[(UINT32_C(1) << j) * m + j] = d[j + 1];
        par[(UINT32_C(1) << j) * m + j] = -1;
    }
    for (uint32_t S = 1; S <= full; S++) {
        if ((S & (S - 1)) == 0) continue; /* singletons done above */
        for (uint32_t rs = S; rs; rs &= rs - 1) {
            const int64_t j = lowest_bit(rs);
            const uint32_t prev = S ^ (UINT32_C(1) << j);
            const double *row = dp + (size_t)prev * (size_t)m;
            const double *dj = d + (j + 1) * n + 1; /* dj[k]: city k+1 to city j+1 */
            double best = INFINITY;
            int64_t arg = -1;
            for (uint32_t rp = prev; rp; rp &= rp - 1) { /* k in increasing order */
                const int64_t k = lowest_bit(rp);
                double v = row[k] + dj[k];
                if (v < best) {
                    best = v;
                    arg = k;
                }
            }
            dp[(size_t)S * (size_t)m + (size_t)j] = best;
            par[(size_t)S * (size_t)m + (size_t)j] = (signed char)arg;
        }
    }
    double best = INFINITY;
    int64_t last = 0;
    for (int64_t j = 0; j < m; j++) {
        double v = dp[(size_t)full * (size_t)m + (size_t)j] + d[(j + 1) * n];
        if (v < best) {
            best = v;
            last = j;
        }
    }
    uint32_t S = full;
    for (int64_t pos = n - 1; pos >= 1; pos--) {
        t[pos] = last + 1;
        int64_t before = par[(size_t)S * (size_t)m + (size_t)last];
        S ^= UINT32_C(1) << last;
        last = before;
    }
    canonicalise(t, n);
}

static void held_karp_task(void *ctx, int64_t block, int worker) {
    const tsp_job *job = ctx;
    const int64_t n = job->n;
    double *xy = job->work + (size_t)worker * job->wsize;
    double *d = xy + 2 * n, *dp = d + n * n;
    signed char *par = (signed char *)job->bytes + (size_t)worker * job->bsize;
    int64_t end = (block + 1) * job->rows < job->B ? (block + 1) * job->rows : job->B;
    for (int64_t b = block * job->rows; b < end; b++) {
        int64_t *t = job->tours + b * n;
        load_points(job, b, xy);
        held_karp_one(job, xy, d, dp, par, t);
        job->lengths[b] = closed_length(xy, t, n);
    }
}

attnc_status attnc_tsp_held_karp(attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points) {
    tsp_job job;
    TRY(solver_dims(&job, tours, lengths, points));
    const int64_t n = job.n, m = n - 1;
    if (n > ATTNC_TSP_HELD_KARP_MAX_N)
        return attnc_fail(ATTNC_ERR_VALUE,
                          "Held-Karp solves n <= %d cities exactly (its table grows as 2^n n), "
                          "got n = %" PRId64 "; use the 2-opt heuristic for larger n",
                          ATTNC_TSP_HELD_KARP_MAX_N, n);
    const size_t states = m > 0 ? ((size_t)1 << m) * (size_t)m : 0;
    job.wsize = (size_t)(2 * n + n * n) + states;
    job.bsize = states > 0 ? states : 1;
    return run(&job, held_karp_task, m * m * (INT64_C(1) << (m > 0 ? m : 0)) + n);
}

/* ---- nearest neighbour + 2-opt ------------------------------------------------ */

typedef struct {
    const double *xy, *d; /* d: the distance table, or NULL */
    int64_t n;
} two_opt_ws;

static inline double two_opt_dist(const two_opt_ws *w, int64_t i, int64_t j) {
    return w->d ? w->d[i * w->n + j] : dist_xy(w->xy, i, j);
}

/* t <- the nearest-neighbour tour from city 0 (ties: the lowest index). */
static void nearest_neighbour(const two_opt_ws *w, unsigned char *visited, int64_t *t) {
    const int64_t n = w->n;
    for (int64_t i = 0; i < n; i++) visited[i] = 0;
    t[0] = 0;
    visited[0] = 1;
    for (int64_t pos = 1; pos < n; pos++) {
        int64_t cur = t[pos - 1], next = -1;
        double best = INFINITY;
        for (int64_t c = 0; c < n; c++) {
            if (visited[c]) continue;
            double v = two_opt_dist(w, cur, c);
            if (next < 0 || v < best) {
                best = v;
                next = c;
            }
        }
        t[pos] = next;
        visited[next] = 1;
    }
}

/* First-improvement 2-opt until no move gains: replace edges (t[i], t[i+1])
 * and (t[j], t[j+1]) by (t[i], t[j]) and (t[i+1], t[j+1]), reversing
 * t[i+1..j]; city 0 stays first. */
static void two_opt_converge(const two_opt_ws *w, int64_t *t) {
    const int64_t n = w->n;
    bool improved = true;
    while (improved) {
        improved = false;
        for (int64_t i = 0; i + 2 < n; i++) {
            for (int64_t j = i + 2; j < n; j++) {
                if (i == 0 && j == n - 1) continue; /* the same two edges */
                int64_t a = t[i], b = t[i + 1], c = t[j], e = t[j + 1 < n ? j + 1 : 0];
                double gain = (two_opt_dist(w, a, b) + two_opt_dist(w, c, e)) -
                              (two_opt_dist(w, a, c) + two_opt_dist(w, b, e));
                if (gain > TSP_TWO_OPT_EPS) {
                    reverse(t, i + 1, j);
                    improved = true;
                }
            }
        }
    }
}

/* Move the segment t[s..s+L-1] (1 <= s, s+L <= n) between t[k] and t[k+1]
 * (k outside [s-1, s+L-1]), reversed if `flip`; city 0 stays first. */
static void or_opt_apply(int64_t *t, int64_t s, int64_t L, int64_t k, bool flip) {
    int64_t seg[TSP_OR_OPT_MAX_L];
    for (int64_t q = 0; q < L; q++) seg[q] = t[flip ? s + L - 1 - q : s + q];
    int64_t at;
    if (k > s) { /* later in the tour: shift t[s+L..k] left by L */
        for (int64_t q = s; q + L <= k; q++) t[q] = t[q + L];
        at = k - L + 1;
    } else { /* earlier: shift t[k+1..s-1] right by L */
        for (int64_t q = s - 1; q > k; q--) t[q + L] = t[q];
        at = k + 1;
    }
    for (int64_t q = 0; q < L; q++) t[at + q] = seg[q];
}

/* The first Or-opt move that shortens the tour by more than the threshold,
 * applied: segments of L = 1, 2, 3 cities (in that order) from position s =
 * 1, 2, ... (never city 0), each tried between t[k] and t[k+1] for k = 0,
 * 1, ..., forwards then reversed. Returns whether a move was made. */
static bool or_opt_move(const two_opt_ws *w, int64_t *t) {
    const int64_t n = w->n;
    for (int64_t L = 1; L <= TSP_OR_OPT_MAX_L; L++) {
        for (int64_t s = 1; s + L <= n; s++) {
            const int64_t p = t[s - 1], f = t[s], l = t[s + L - 1], q = t[s + L < n ? s + L : 0];
            const double removed = (two_opt_dist(w, p, f) + two_opt_dist(w, l, q)) - two_opt_dist(w, p, q);
            for (int64_t k = 0; k < n; k++) {
                if (k >= s - 1 && k <= s + L - 1) continue; /* an edge of the segment or beside it */
                const int64_t u = t[k], v = t[k + 1 < n ? k + 1 : 0];
                const double uv = two_opt_dist(w, u, v);
                const double fwd = (two_opt_dist(w, u, f) + two_opt_dist(w, l, v)) - uv;
                const double rev = (two_opt_dist(w, u, l) + two_opt_dist(w, f, v)) - uv;
                if (removed - fwd > TSP_TWO_OPT_EPS || removed - rev > TSP_TWO_OPT_EPS) {
                    or_opt_apply(t, s, L, k, !(removed - fwd > TSP_TWO_OPT_EPS));
                    return true;
                }
            }
        }
    }
    return false;
}

/* t <- the nearest-neighbour tour improved by 2-opt, then (or_opt) by Or-opt
 * moves, each followed by 2-opt again, until neither gains; canonical. */
static void local_search_one(const two_opt_ws *w, unsigned char *visited, int64_t *t, bool or_opt) {
    nearest_neighbour(w, visited, t);
    do two_opt_converge(w, t);
    while (or_opt && or_opt_move(w, t));
    canonicalise(t, w->n);
}

static void two_opt_task(void *ctx, int64_t block, int worker) {
    const tsp_job *job = ctx;
    const int64_t n = job->n;
    double *xy = job->work + (size_t)worker * job->wsize;
    double *d = job->table ? xy + 2 * n : NULL;
    unsigned char *visited = job->bytes + (size_t)worker * job->bsize;
    two_opt_ws w = {.xy = xy, .d = d, .n = n};
    int64_t end = (block + 1) * job->rows < job->B ? (block + 1) * job->rows : job->B;
    for (int64_t b = block * job->rows; b < end; b++) {
        int64_t *t = job->tours + b * n;
        load_points(job, b, xy);
        if (d) fill_table(d, xy, n);
        local_search_one(&w, visited, t, job->or_opt);
        job->lengths[b] = closed_length(xy, t, n);
    }
}

static attnc_status local_search(attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points, bool or_opt) {
    tsp_job job;
    TRY(solver_dims(&job, tours, lengths, points));
    const int64_t n = job.n;
    job.table = n <= TSP_TABLE_MAX_N;
    job.or_opt = or_opt;
    job.wsize = (size_t)(2 * n) + (job.table ? (size_t)(n * n) : 0);
    job.bsize = (size_t)n;
    return run(&job, two_opt_task, (or_opt ? 16 : 4) * n * n + n);
}

attnc_status attnc_tsp_two_opt(attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points) {
    return local_search(tours, lengths, points, false);
}

attnc_status attnc_tsp_or_opt(attnc_tensor *tours, attnc_tensor *lengths, const attnc_tensor *points) {
    return local_search(tours, lengths, points, true);
}

/* ---- tour lengths ------------------------------------------------------------------ */

typedef struct {
    const double *p;
    int64_t ps0, ps1, ps2;
    const int64_t *t;
    int64_t ts0, ts1;
    double *lengths;
    int64_t B, n, rows;
} length_job;

static void length_task(void *ctx, int64_t block, int worker) {
    const length_job *job = ctx;
    (void)worker;
    int64_t end = (block + 1) * job->rows < job->B ? (block + 1) * job->rows : job->B;
    for (int64_t b = block * job->rows; b < end; b++) {
        const double *p = job->p + b * job->ps0;
        const int64_t *t = job->t + b * job->ts0;
        double s = 0;
        for (int64_t k = 0; k < job->n; k++) {
            int64_t i = t[k * job->ts1], j = t[(k + 1 < job->n ? k + 1 : 0) * job->ts1];
            double dx = p[i * job->ps1] - p[j * job->ps1];
            double dy = p[i * job->ps1 + job->ps2] - p[j * job->ps1 + job->ps2];
            s += sqrt(dx * dx + dy * dy);
        }
        job->lengths[b] = s;
    }
}

attnc_status attnc_tsp_tour_length(attnc_tensor *lengths, const attnc_tensor *points, const attnc_tensor *tours) {
    if (!attnc_present(lengths)) return attnc_fail(ATTNC_ERR_TYPE, "lengths is required");
    if (!attnc_present(points)) return attnc_fail(ATTNC_ERR_TYPE, "points is required");
    if (!attnc_present(tours)) return attnc_fail(ATTNC_ERR_TYPE, "tours is required");
    int64_t ps[3] = {-1, -1, 2};
    TRY(attnc_check_dims(points, "points", ATTNC_FLOAT64, 3, ps, false));
    int64_t ts[2] = {ps[0], ps[1]}, ls[1] = {ps[0]};
    TRY(attnc_check_dims(tours, "tours", ATTNC_INT64, 2, ts, false));
    TRY(attnc_check_dims(lengths, "lengths", ATTNC_FLOAT64, 1, ls, true));
    length_job job = {.p = points->data,
                      .ps0 = points->strides[0],
                      .ps1 = points->strides[1],
                      .ps2 = points->strides[2],
                      .t = tours->data,
                      .ts0 = tours->strides[0],
                      .ts1 = tours->strides[1],
                      .lengths = lengths->data,
                      .B = ps[0],
                      .n = ps[1]};
    if (job.B == 0 || job.n == 0) {
        for (int64_t b = 0; b < job.B; b++) job.lengths[b] = 0;
        return ATTNC_OK;
    }
    /* Every row a permutation: stamp[c] == b + 1 once city c is seen in row b. */
    int64_t *stamp = NULL;
    TRY(attnc_calloc((void **)&stamp, (size_t)job.n, sizeof *stamp, "tour check"));
    for (int64_t b = 0; b < job.B; b++) {
        const int64_t *t = job.t + b * job.ts0;
        for (int64_t k = 0; k < job.n; k++) {
            int64_t c = t[k * job.ts1];
            if (c < 0 || c >= job.n || stamp[c] == b + 1) {
                free(stamp);
                if (c < 0 || c >= job.n)
                    return attnc_fail(ATTNC_ERR_VALUE,
                                      "tours[%" PRId64 "] is not a permutation of 0..%" PRId64 ": entry %" PRId64
                                      " is %" PRId64 ", out of range",
                                      b, job.n - 1, k, c);
                return attnc_fail(ATTNC_ERR_VALUE,
                                  "tours[%" PRId64 "] is not a permutation of 0..%" PRId64 ": city %" PRId64
                                  " appears twice",
                                  b, job.n - 1, c);
            }
            stamp[c] = b + 1;
        }
    }
    free(stamp);
    job.rows = job.n >= 8192 ? 1 : 8192 / job.n;
    int64_t blocks = (job.B + job.rows - 1) / job.rows;
    attnc_parallel_for(blocks, attnc_workers_for(8 * job.B * job.n), length_task, &job);
    return ATTNC_OK;
}
