/* threads.c: a small pthread pool behind attnc_parallel_for.
 *
 * The caller's thread runs blocks too, so a pool of n threads starts n - 1
 * workers. One job runs at a time; a second thread that calls parallel_for
 * while a job is running simply runs its loop serially (same results). After
 * fork() the child starts with no workers and recreates them on demand. */
#define _GNU_SOURCE
#include "threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "../include/attnc.h"
#include "glibc_versions.h"
#include "status.h"

#define MAX_THREADS 256

typedef struct {
    pthread_mutex_t lock;     /* guards everything below but `next`        */
    pthread_cond_t wake;      /* a new job (or shutdown) for the workers    */
    pthread_cond_t done;      /* the last worker left the job               */
    pthread_mutex_t job_lock; /* held by the thread whose job is running    */
    pthread_t tids[MAX_THREADS];
    uint64_t born[MAX_THREADS]; /* generation when each worker was started  */
    int started;                /* workers running (threads - 1 at most)      */
    int threads;                /* configured thread count                    */
    int shutdown;               /* workers with index >= this must exit       */
    uint64_t generation;        /* bumped per job                             */
    attnc_task_fn fn;
    void *ctx;
    int64_t nblocks;
    int job_workers;   /* workers (beyond the caller) in this job    */
    int open;          /* workers may still join the job             */
    int busy;          /* workers that joined and have not left      */
    atomic_llong next; /* next block to claim                        */
} pool_t;

static pool_t pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .job_lock = PTHREAD_MUTEX_INITIALIZER,
    .threads = 1,
    .shutdown = MAX_THREADS,
};

static void run_blocks(attnc_task_fn fn, void *ctx, int64_t nblocks, int worker) {
    for (;;) {
        int64_t b = atomic_fetch_add(&pool.next, 1);
        if (b >= nblocks) return;
        fn(ctx, b, worker);
    }
}

static void *worker_main(void *arg) {
    int id = (int)(intptr_t)arg; /* 1 .. started */
    pthread_mutex_lock(&pool.lock);
    /* Not pool.generation: a job may have started before this thread ran. */
    uint64_t seen = pool.born[id];
    for (;;) {
        while (pool.generation == seen && id < pool.shutdown) pthread_cond_wait(&pool.wake, &pool.lock);
        if (id >= pool.shutdown) break;
        seen = pool.generation;
        /* Not needed, or woken after the caller ran every block itself. */
        if (id > pool.job_workers || !pool.open) continue;
        pool.busy++;
        attnc_task_fn fn = pool.fn;
        void *ctx = pool.ctx;
        int64_t nblocks = pool.nblocks;
        pthread_mutex_unlock(&pool.lock);
        run_blocks(fn, ctx, nblocks, id);
        pthread_mutex_lock(&pool.lock);
        if (--pool.busy == 0) pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* Stop workers with index >= keep (pool.lock not held, job_lock held). */
static void stop_workers(int keep) {
    pthread_mutex_lock(&pool.lock);
    int started = pool.started;
    pool.shutdown = keep + 1;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = keep + 1; i <= started; i++) pthread_join(pool.tids[i], NULL);
    pthread_mutex_lock(&pool.lock);
    pool.started = started < keep ? started : keep;
    pool.shutdown = MAX_THREADS;
    pthread_mutex_unlock(&pool.lock);
}

/* Start workers up to threads - 1 (job_lock held). Failing to start one is
 * not an error: the pool runs with what it has. */
static void start_workers(void) {
    pthread_mutex_lock(&pool.lock);
    while (pool.started < pool.threads - 1) {
        int id = pool.started + 1;
        pool.born[id] = pool.generation;
        if (pthread_create(&pool.tids[id], NULL, worker_main, (void *)(intptr_t)id) != 0) break;
        pool.started = id;
    }
    pthread_mutex_unlock(&pool.lock);
}

static void atfork_child(void) {
    /* The child has only the forking thread: forget the parent's workers. */
    pthread_mutex_init(&pool.lock, NULL);
    pthread_mutex_init(&pool.job_lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.started = 0;
    pool.busy = 0;
    pool.open = 0;
    pool.shutdown = MAX_THREADS;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

attnc_status attnc_set_num_threads(int n) {
    if (n < 1 || n > MAX_THREADS)
        return attnc_fail(ATTNC_ERR_VALUE, "num_threads must be in [1, %d], got %d", MAX_THREADS, n);
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&pool.job_lock);
    pthread_mutex_lock(&pool.lock);
    pool.threads = n;
    pthread_mutex_unlock(&pool.lock);
    stop_workers(n - 1);
    pthread_mutex_unlock(&pool.job_lock);
    return ATTNC_OK;
}

int attnc_get_num_threads(void) {
    pthread_mutex_lock(&pool.lock);
    int n = pool.threads;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

int attnc_workers(void) { return attnc_get_num_threads(); }

/* About 20 microseconds of one core's work: less than a worker's wake-up. */
enum { MIN_PARALLEL_WORK = 1 << 18 };

int attnc_workers_for(int64_t work) { return work < MIN_PARALLEL_WORK ? 1 : attnc_workers(); }

void attnc_parallel_for(int64_t nblocks, int max_workers, attnc_task_fn fn, void *ctx) {
    if (nblocks <= 0) return;
    int want = max_workers < attnc_get_num_threads() ? max_workers : attnc_get_num_threads();
    if (want > nblocks) want = (int)nblocks;
    if (want <= 1 || pthread_mutex_trylock(&pool.job_lock) != 0) {
        for (int64_t b = 0; b < nblocks; b++) fn(ctx, b, 0);
        return;
    }
    pthread_once(&atfork_once, register_atfork);
    start_workers();
    pthread_mutex_lock(&pool.lock);
    int helpers = want - 1 < pool.started ? want - 1 : pool.started;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.nblocks = nblocks;
    pool.job_workers = helpers;
    pool.open = 1;
    pool.busy = 0;
    atomic_store(&pool.next, 0);
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_blocks(fn, ctx, nblocks, 0);

    /* Wait only for the workers that joined: a small job the caller finished
     * alone does not wait for a sleeping worker to be scheduled. */
    pthread_mutex_lock(&pool.lock);
    pool.open = 0;
    while (pool.busy > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.job_lock);
}
