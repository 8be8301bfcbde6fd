/* search.h: greedy and beam search over any model that scores next tokens,
 * shared by the transformer's and the recurrent decoders.
 *
 * Rows: R = B x K (K = beam width; 1 for greedy) advance together. The model
 * keeps its own per-row state (caches, recurrent states); the search tells it
 * which token each row feeds, and after each beam step which row each row
 * continues. */
#ifndef ATTNC_SEARCH_H
#define ATTNC_SEARCH_H
#include <stdint.h>

#include "../include/attnc.h"

typedef struct {
    void *ctx;
    int64_t B, K, V;    /* batch rows, beam width, vocabulary              */
    const void *logits; /* (R, V) of dtype dt, filled by step              */
    attnc_dtype dt;
    /* Step s: feed tok (R) (NULL at s = 0: the model's own start) and leave
     * the next-token logits of every row in logits. */
    attnc_status (*step)(void *ctx, const int64_t *tok, int64_t s);
    /* Beam search, after step s: row r continues row parent[r] (R). */
    void (*reorder)(void *ctx, const int64_t *parent, int64_t s);
    /* Optional: what each row shows of a step (an attention row, say),
     * trace_bytes per row (R, trace_bytes), filled by step; the search keeps
     * it per hypothesis and returns the winner's in io->trace. */
    const void *trace;
    int64_t trace_bytes;
} attnc_search_model;

/* out (B, T) tokens (a row ending in eos is filled with eos, or 0 when eos <
 * 0), lengths (B). Beam hypotheses are scored by sum(log p) / len ** alpha;
 * ties go to the lower hypothesis slot and token. */
typedef struct {
    int64_t *out, *lengths;
    int64_t T, eos;
    double alpha;
    void *trace; /* (B, T, trace_bytes) or NULL: each output step's trace, 0 after a row's end */
} attnc_search_io;

attnc_status attnc_search(const attnc_search_model *m, attnc_search_io *io);

#endif
