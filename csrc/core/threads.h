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

/* Run TASK##_f32 (or _f64, by dtype) over blocks on at most workers
 * workers (the count per-worker scratch was sized for), with the job
 * JOB##_f32 (or _f64) built from the designated initialisers that follow:
 * how a typed kernel (core/real.h) is called. */
#define ATTNC_PARALLEL_TYPED(dtype, workers, JOB, TASK, blocks, ...)        \
    do {                                                               \
        if ((dtype) == ATTNC_FLOAT32) {                                \
            JOB##_f32 job_ = {__VA_ARGS__};                            \
            attnc_parallel_for((blocks), (workers), TASK##_f32, &job_); \
        } else {                                                       \
            JOB##_f64 job_ = {__VA_ARGS__};                            \
            attnc_parallel_for((blocks), (workers), TASK##_f64, &job_); \
        }                                                              \
    } while (0)

#endif
