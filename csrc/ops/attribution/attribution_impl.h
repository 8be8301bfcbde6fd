/* attribution_impl.h: typed kernels of attribution.c (see core/real.h). */
#include "../../core/real.h"

/* Index of the first of x's n values that is not finite, or negative when
 * nonneg; -1 when there is none. */
static int64_t FN(first_bad)(const void *x, int64_t n, bool nonneg) {
    const REAL *v = x;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]) || (nonneg && v[i] < 0)) return i;
    return -1;
}

static attnc_mat FN(square)(REAL *p, int64_t L) {
    attnc_mat m = {p, L, L, L, 1};
    return m;
}

/* Block l B + b: A_l of batch element b <- its heads fused (in head order),
 * mixed with the identity, rows normalised (a row of zeros stays zero). */
static void FN(mix_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const attr_job *j = arg;
    int64_t L = j->L, H = j->H, LL = L * L;
    const REAL *w = (const REAL *)j->weights + block * H * LL;
    REAL *a = (REAL *)j->mixed + block * LL, keep = (REAL)(1 - j->residual), res = (REAL)j->residual;
    for (int64_t p = 0; p < L; p++) {
        REAL *row = a + p * L, sum = 0;
        for (int64_t q = 0; q < L; q++) {
            REAL f = w[p * L + q];
            for (int64_t h = 1; h < H; h++) {
                REAL v = w[h * LL + p * L + q];
                f = j->fusion == ATTNC_HEADS_MEAN  ? f + v
                    : j->fusion == ATTNC_HEADS_MAX ? (v > f ? v : f)
                                                   : (v < f ? v : f);
            }
            if (j->fusion == ATTNC_HEADS_MEAN) f /= (REAL)H;
            row[q] = keep * f + (p == q ? res : 0);
            sum += row[q];
        }
        if (sum > 0)
            for (int64_t q = 0; q < L; q++) row[q] /= sum;
    }
}

/* Batch element b: rollout <- A_N ... A_1, one product per layer. */
static void FN(rollout_task)(void *arg, int64_t b, int worker) {
    const attr_job *j = arg;
    int64_t L = j->L, LL = L * L;
    REAL *r = (REAL *)j->out + b * LL, *prev = (REAL *)((char *)j->scratch + (size_t)worker * j->per_worker);
    const REAL *a = j->mixed;
    if (j->N == 0) {
        for (int64_t i = 0; i < LL; i++) r[i] = (i % (L + 1)) == 0;
        return;
    }
    memcpy(r, a + b * LL, (size_t)LL * sizeof(REAL));
    for (int64_t l = 1; l < j->N; l++) {
        memcpy(prev, r, (size_t)LL * sizeof(REAL));
        GEMM(false, false, 1, FN(square)((REAL *)a + (l * j->B + b) * LL, L), FN(square)(prev, L), 0, FN(square)(r, L));
    }
}

/* Batch element b: R <- I, then R <- R + mean_h((G W)^+) R for each layer. */
static void FN(relevance_task)(void *arg, int64_t b, int worker) {
    const attr_job *j = arg;
    int64_t L = j->L, LL = L * L, H = j->H;
    REAL *r = (REAL *)j->out + b * LL, *abar = (REAL *)((char *)j->scratch + (size_t)worker * j->per_worker),
         *prev = abar + LL;
    for (int64_t i = 0; i < LL; i++) r[i] = (i % (L + 1)) == 0;
    for (int64_t l = 0; l < j->N; l++) {
        const REAL *w = (const REAL *)j->weights + (l * j->B + b) * H * LL,
                   *g = (const REAL *)j->grads + (l * j->B + b) * H * LL;
        for (int64_t i = 0; i < LL; i++) {
            REAL s = 0;
            for (int64_t h = 0; h < H; h++) {
                REAL v = g[h * LL + i] * w[h * LL + i];
                s += v > 0 ? v : 0;
            }
            abar[i] = s / (REAL)H;
        }
        memcpy(prev, r, (size_t)LL * sizeof(REAL));
        GEMM(false, false, 1, FN(square)(abar, L), FN(square)(prev, L), 1, FN(square)(r, L));
    }
}

/* ---- flow: Dinic's algorithm on the layered graph --------------------------
 *
 * Node u = l L + p is position p of layer l (0 = the input tokens, N = the
 * outputs). Node u has 2 L arcs: arc a < L runs down the edge (l, p) ->
 * (l - 1, a), whose residual capacity is res[e], e = ((l - 1) L + p) L + a;
 * arc L + q runs up against the edge (l + 1, q) -> (l, p), whose residual is
 * the flow on it, flo[(l L + q) L + p]. Pushing d along an arc takes d from
 * its residual and gives it to its pair.
 *
 * Exactness and termination with floating point. Each augmenting path
 * pushes d = the smallest residual on it, so that arc's residual becomes
 * x - x = 0 exactly, and every other residual x - d with d <= x stays >= 0
 * (rounding is monotone and 0 is representable). So the graph of positive
 * residuals evolves exactly as in exact arithmetic's argument: within a
 * phase each augmentation removes at least one arc of the level graph and
 * adds only arcs that go back a level, so a phase makes at most 2 N L^2
 * augmentations, and each phase lengthens the shortest source-sink path, so
 * there are at most V = (N + 1) L phases. The value is the sum of the
 * pushes, exact up to the rounding of those sums and of the residuals. */

typedef struct {
    REAL *res, *flo;
    int64_t *level, *it, *queue, *path;
    int64_t N, L;
} FN(flow_net);

/* The node arc a of u leads to (-1: no such arc), its residual and pair. */
static int64_t FN(arc)(const FN(flow_net) * g, int64_t u, int64_t a, REAL **r, REAL **pair) {
    int64_t L = g->L, l = u / L, p = u % L;
    if (a < L) {
        if (l == 0) return -1;
        int64_t e = ((l - 1) * L + p) * L + a;
        *r = g->res + e, *pair = g->flo + e;
        return (l - 1) * L + a;
    }
    int64_t q = a - L;
    if (l == g->N) return -1;
    int64_t e = (l * L + q) * L + p;
    *r = g->flo + e, *pair = g->res + e;
    return (l + 1) * L + q;
}

/* Levels by breadth-first search from s over positive residuals; whether t is reached. */
static bool FN(levels)(const FN(flow_net) * g, int64_t s, int64_t t) {
    int64_t V = (g->N + 1) * g->L, head = 0, tail = 0;
    REAL *r, *pair;
    for (int64_t v = 0; v < V; v++) g->level[v] = -1;
    g->level[s] = 0;
    g->queue[tail++] = s;
    while (head < tail) {
        int64_t u = g->queue[head++];
        for (int64_t a = 0; a < 2 * g->L; a++) {
            int64_t v = FN(arc)(g, u, a, &r, &pair);
            if (v >= 0 && *r > 0 && g->level[v] < 0) {
                g->level[v] = g->level[u] + 1;
                g->queue[tail++] = v;
            }
        }
    }
    return g->level[t] >= 0;
}

/* One phase: augmenting paths along the level graph until none is left
 * (iterative depth-first search with current-arc pointers); the flow pushed. */
static REAL FN(blocking_flow)(const FN(flow_net) * g, int64_t s, int64_t t) {
    int64_t V = (g->N + 1) * g->L, depth = 0;
    REAL total = 0, *r, *pair;
    for (int64_t v = 0; v < V; v++) g->it[v] = 0;
    g->path[0] = s;
    for (;;) {
        int64_t u = g->path[depth];
        if (u == t) {
            REAL d = INFINITY;
            for (int64_t k = 0; k < depth; k++) {
                FN(arc)(g, g->path[k], g->it[g->path[k]], &r, &pair);
                d = *r < d ? *r : d;
            }
            for (int64_t k = 0; k < depth; k++) {
                FN(arc)(g, g->path[k], g->it[g->path[k]], &r, &pair);
                *r -= d;
                *pair += d;
            }
            total += d;
            depth = 0;
            continue;
        }
        int64_t v = -1;
        for (; g->it[u] < 2 * g->L; g->it[u]++) {
            v = FN(arc)(g, u, g->it[u], &r, &pair);
            if (v >= 0 && *r > 0 && g->level[v] == g->level[u] + 1) break;
            v = -1;
        }
        if (v >= 0) {
            g->path[++depth] = v;
            continue;
        }
        if (depth == 0) return total;
        g->level[u] = -1; /* a dead end for the rest of the phase */
        g->it[g->path[--depth]]++;
    }
}

/* Block b L + i: flow[b, i, j] for every j, each from fresh capacities. */
static void FN(flow_task)(void *arg, int64_t block, int worker) {
    const attr_job *j = arg;
    int64_t N = j->N, L = j->L, LL = L * L, b = block / L, i = block % L, V = (N + 1) * L;
    REAL *out = (REAL *)j->out + block * L;
    if (N == 0) { /* no layers: each position is its own source */
        for (int64_t q = 0; q < L; q++) out[q] = q == i;
        return;
    }
    char *mem = (char *)j->scratch + (size_t)worker * j->per_worker;
    FN(flow_net) g = {.res = (REAL *)mem, .flo = (REAL *)mem + N * LL, .N = N, .L = L};
    g.level = (int64_t *)(mem + (size_t)(2 * N * LL) * sizeof(REAL));
    g.it = g.level + V, g.queue = g.it + V, g.path = g.queue + V;
    const REAL *a = j->mixed;
    for (int64_t q = 0; q < L; q++) {
        for (int64_t l = 0; l < N; l++) memcpy(g.res + l * LL, a + (l * j->B + b) * LL, (size_t)LL * sizeof(REAL));
        memset(g.flo, 0, (size_t)(N * LL) * sizeof(REAL));
        REAL value = 0;
        while (FN(levels)(&g, N * L + i, q)) value += FN(blocking_flow)(&g, N * L + i, q);
        out[q] = value;
    }
}

#include "../../core/real_end.h"
