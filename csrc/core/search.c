/* search.c: greedy and beam search over any next-token model (search.h). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "search.h"
#include "status.h"
#include "typed.h"

/* log-softmax of row r of the logits, in double, into lp (V). */
static void log_probs(const attnc_search_model *m, int64_t r, double *lp) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < m->V; v++) {
        lp[v] = attnc_real_get(m->logits, m->dt, r * m->V + v);
        if (lp[v] > mx) mx = lp[v];
    }
    for (int64_t v = 0; v < m->V; v++) sum += exp(lp[v] - mx);
    double lse = mx + log(sum);
    for (int64_t v = 0; v < m->V; v++) lp[v] -= lse;
}

/* Row i of a (rows, trace_bytes) array. */
static char *trace_at(const attnc_search_model *m, const void *base, int64_t i) {
    return (char *)base + i * m->trace_bytes;
}

static attnc_status greedy(const attnc_search_model *m, attnc_search_io *io) {
    int64_t B = m->B, T = io->T;
    int64_t *tok = NULL;
    bool *done = NULL;
    attnc_status st = attnc_calloc((void **)&tok, (size_t)B, sizeof *tok, "tokens");
    if (st == ATTNC_OK) st = attnc_calloc((void **)&done, (size_t)B, sizeof *done, "flags");
    int64_t produced = 0;
    for (int64_t s = 0; s < T && st == ATTNC_OK; s++) {
        st = m->step(m->ctx, s == 0 ? NULL : tok, s);
        if (st != ATTNC_OK) break;
        bool all = true;
        for (int64_t b = 0; b < B; b++) {
            int64_t best = 0;
            for (int64_t v = 1; v < m->V; v++)
                if (attnc_real_get(m->logits, m->dt, b * m->V + v) > attnc_real_get(m->logits, m->dt, b * m->V + best))
                    best = v;
            if (io->eos >= 0 && done[b]) best = io->eos;
            tok[b] = best;
            io->out[b * T + s] = best;
            if (!done[b]) {
                io->lengths[b] = s + 1;
                if (io->trace)
                    memcpy(trace_at(m, io->trace, b * T + s), trace_at(m, m->trace, b), (size_t)m->trace_bytes);
            }
            if (io->eos >= 0 && best == io->eos) done[b] = true;
            all = all && done[b];
        }
        produced = s + 1;
        if (io->eos >= 0 && all) break;
    }
    for (int64_t b = 0; b < B && st == ATTNC_OK; b++)
        for (int64_t s = produced; s < T; s++) io->out[b * T + s] = io->eos >= 0 ? io->eos : 0;
    free(tok);
    free(done);
    return st;
}

/* One candidate continuation: hypothesis slot i of the row, token v. */
typedef struct {
    double score;
    int64_t index; /* i * V + v: ties go to the lower index */
} candidate;

/* Insert c into the sorted (score desc, index asc) list top[0..*n) of at most k. */
static void keep_best(candidate *top, int64_t *n, int64_t k, candidate c) {
    int64_t at = *n;
    while (at > 0 && c.score > top[at - 1].score) at--;
    if (at >= k) return;
    int64_t end = *n < k ? *n : k - 1;
    memmove(top + at + 1, top + at, (size_t)(end - at) * sizeof *top);
    top[at] = c;
    if (*n < k) (*n)++;
}

typedef struct {
    int64_t *hist, *next_hist;  /* (R, T) tokens of each live hypothesis */
    double *score, *next_score; /* (R) sum of log p                   */
    int64_t *live;              /* (B) live hypotheses per row         */
    double *best;               /* (B) best finished score            */
    int64_t *parent, *tok;      /* (R)                                 */
    double *lp;                 /* (R, V)                              */
    candidate *top;             /* (K)                                 */
    char *trace, *next_trace;   /* (R, T, trace_bytes) each live hypothesis's trace */
} beam_state;

/* Record a finished hypothesis of row b (tokens seq[0..len - 1), then last;
 * from search row `row`) if it is the best. */
static void finish(const attnc_search_model *m, attnc_search_io *io, beam_state *s, int64_t b, const int64_t *seq,
                   int64_t len, int64_t last, double score, int64_t row) {
    double v = score / pow((double)len, io->alpha);
    if (!(v > s->best[b])) return;
    s->best[b] = v;
    memcpy(io->out + b * io->T, seq, (size_t)(len - 1) * sizeof *seq);
    io->out[b * io->T + len - 1] = last;
    io->lengths[b] = len;
    if (io->trace) { /* steps before the last from the row's history, the last one just run */
        memcpy(trace_at(m, io->trace, b * io->T), trace_at(m, s->trace, row * io->T),
               (size_t)((len - 1) * m->trace_bytes));
        memcpy(trace_at(m, io->trace, b * io->T + len - 1), trace_at(m, m->trace, row), (size_t)m->trace_bytes);
    }
}

/* After step i: hypothesis r's trace <- its parent's, then the parent's step i. */
static void reorder_traces(const attnc_search_model *m, beam_state *s, int64_t R, int64_t T, int64_t i) {
    for (int64_t r = 0; r < R; r++) {
        memcpy(trace_at(m, s->next_trace, r * T), trace_at(m, s->trace, s->parent[r] * T),
               (size_t)(i * m->trace_bytes));
        memcpy(trace_at(m, s->next_trace, r * T + i), trace_at(m, m->trace, s->parent[r]), (size_t)m->trace_bytes);
    }
    char *t = s->trace;
    s->trace = s->next_trace;
    s->next_trace = t;
}

/* Step s's choices for row b; returns the number of live hypotheses left. */
static int64_t choose(const attnc_search_model *m, attnc_search_io *io, beam_state *s, int64_t b, int64_t step_index) {
    int64_t K = m->K, V = m->V, L = step_index + 1, n = 0, T = io->T;
    for (int64_t i = 0; i < s->live[b]; i++) {
        int64_t r = b * K + i;
        const double *lp = s->lp + r * V;
        if (io->eos >= 0) finish(m, io, s, b, s->hist + r * T, L, io->eos, s->score[r] + lp[io->eos], r);
        for (int64_t v = 0; v < V; v++) {
            double c = s->score[r] + lp[v];
            if (v != io->eos && c > -INFINITY) keep_best(s->top, &n, K, (candidate){c, i * V + v});
        }
    }
    for (int64_t j = 0; j < n; j++) {
        int64_t r = b * K + j, parent = b * K + s->top[j].index / V, v = s->top[j].index % V;
        s->parent[r] = parent;
        s->tok[r] = v;
        s->next_score[r] = s->top[j].score;
        memcpy(s->next_hist + r * T, s->hist + parent * T, (size_t)step_index * sizeof *s->hist);
        s->next_hist[r * T + step_index] = v;
    }
    for (int64_t j = n; j < K; j++) { /* dead slots: keep the caches' rows valid */
        s->parent[b * K + j] = b * K;
        s->tok[b * K + j] = 0;
    }
    if (L == T) {
        for (int64_t j = 0; j < n; j++)
            finish(m, io, s, b, s->next_hist + (b * K + j) * T, L, s->tok[b * K + j], s->top[j].score,
                   s->parent[b * K + j]);
        return 0;
    }
    if (n > 0 && io->lengths[b] > 0) { /* can any live hypothesis still win? */
        double bound = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            double c = s->top[j].score;
            double hi = fmax(c / pow((double)(L + 1), io->alpha), c / pow((double)T, io->alpha));
            bound = fmax(bound, hi);
        }
        if (s->best[b] >= bound) return 0;
    }
    return n;
}

static attnc_status beam(const attnc_search_model *m, attnc_search_io *io) {
    int64_t B = m->B, K = m->K, R = B * K, T = io->T, V = m->V;
    beam_state s = {0};
    attnc_status st = ATTNC_OK;
#define ALLOC(field, count) \
    if (st == ATTNC_OK) st = attnc_calloc((void **)&s.field, (size_t)(count), sizeof *s.field, "beam search")
    ALLOC(hist, R * T);
    ALLOC(next_hist, R * T);
    ALLOC(score, R);
    ALLOC(next_score, R);
    ALLOC(live, B);
    ALLOC(best, B);
    ALLOC(parent, R);
    ALLOC(tok, R);
    ALLOC(lp, R * V);
    ALLOC(top, K);
    ALLOC(trace, io->trace ? R * T * m->trace_bytes : 0);
    ALLOC(next_trace, io->trace ? R * T * m->trace_bytes : 0);
#undef ALLOC
    if (st == ATTNC_OK) {
        for (int64_t b = 0; b < B; b++) {
            s.live[b] = 1;
            s.best[b] = -INFINITY;
            io->lengths[b] = 0;
        }
    }
    for (int64_t i = 0; i < T && st == ATTNC_OK; i++) {
        st = m->step(m->ctx, i == 0 ? NULL : s.tok, i);
        if (st != ATTNC_OK) break;
        bool any = false;
        for (int64_t r = 0; r < R; r++) log_probs(m, r, s.lp + r * V);
        for (int64_t b = 0; b < B; b++) {
            if (s.live[b] == 0) {
                for (int64_t j = 0; j < K; j++) s.parent[b * K + j] = b * K + j;
                continue;
            }
            s.live[b] = choose(m, io, &s, b, i);
            any = any || s.live[b] > 0;
        }
        if (!any) break;
        int64_t *h = s.hist;
        s.hist = s.next_hist;
        s.next_hist = h;
        double *sc = s.score;
        s.score = s.next_score;
        s.next_score = sc;
        if (io->trace) reorder_traces(m, &s, R, T, i);
        m->reorder(m->ctx, s.parent, i);
    }
    for (int64_t b = 0; b < B && st == ATTNC_OK; b++)
        for (int64_t j = io->lengths[b]; j < T; j++) io->out[b * T + j] = io->eos >= 0 ? io->eos : 0;
    free(s.hist);
    free(s.next_hist);
    free(s.score);
    free(s.next_score);
    free(s.live);
    free(s.best);
    free(s.parent);
    free(s.tok);
    free(s.lp);
    free(s.top);
    free(s.trace);
    free(s.next_trace);
    return st;
}

attnc_status attnc_search(const attnc_search_model *m, attnc_search_io *io) {
    if (io->trace) memset(io->trace, 0, (size_t)(m->B * io->T * m->trace_bytes));
    return m->K == 1 ? greedy(m, io) : beam(m, io);
}
