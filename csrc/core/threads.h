/* threads.h: the one thread pool and its parallel-for.
 *
 * Work is cut into blocks by the caller, independently of the thread count;
 * each block writes only its own outputs and never reduces across blocks, so
 * results are bitwise identical for any number of threads. Blocks may run in
 * any order on any worker. `worker` (0 <= worker < max_workers) indexes
 * per-worker scratch the caller allocated before the loop, so tasks never
 * allocate and never fail. */
#ifndef ATTNC_THREADS_H
#define ATTNC_THREADS_H
#include <stdint.h>

#include "../include/attnc.h"

typedef void (*attnc_task_fn)(void *ctx, int64_t block, int worker);

/* Workers the next parallel_for may use: size per-worker scratch with it. */
int attnc_workers(void);

/* Workers for a job of about `work` multiply-adds: 1 when waking another
 * thread would cost more than it saves (a decoding step's tiny products),
 * else attnc_workers(). Results never depend on it. */
int attnc_workers_for(int64_t work);

/* Run fn(ctx, block, worker) for block in [0, nblocks) on at most
 * max_workers workers (the caller's thread is one of them). */
void attnc_parallel_for(int64_t nblocks, int max_workers, attnc_task_fn fn, void *ctx);

#endif
