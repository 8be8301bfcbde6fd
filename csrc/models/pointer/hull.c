/* hull.c: convex hulls by Andrew's monotone chain (shapes in hull.h). */
#include "hull.h"

#include <stdlib.h>

#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"
#include "tsp.h"

typedef struct {
    double x, y;
    int64_t i; /* index in the instance */
} hull_point;

typedef struct {
    const double *p; /* points (B, n, 2), strides ps0, ps1, ps2 */
    int64_t ps0, ps1, ps2;
    int64_t *hull, *sizes; /* (B, n), (B) contiguous              */
    int64_t B, n, rows;    /* rows: instances per block            */
    hull_point *pts;       /* per worker: n points                  */
    int64_t *stack;        /* per worker: 2 n + 1 positions         */
} hull_job;

/* By x, then y, then index: a total order, so qsort's result is unique. */
static int by_xy(const void *a, const void *b) {
    const hull_point *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    if (p->y != q->y) return p->y < q->y ? -1 : 1;
    return (p->i > q->i) - (p->i < q->i);
}

/* Whether o -> a -> c turns strictly left. */
static int left_turn(const hull_point *o, const hull_point *a, const hull_point *c) {
    return (a->x - o->x) * (c->y - o->y) - (a->y - o->y) * (c->x - o->x) > 0;
}

/* The hull of instance b into hull[b], sizes[b]. */
static void hull_one(const hull_job *job, int64_t b, hull_point *pts, int64_t *stack) {
    int64_t n = job->n, m = 0, top = 0;
    const double *row = job->p + b * job->ps0;
    for (int64_t i = 0; i < n; i++) pts[i] = (hull_point){row[i * job->ps1], row[i * job->ps1 + job->ps2], i};
    qsort(pts, (size_t)n, sizeof *pts, by_xy);
    for (int64_t k = 0; k < n; k++) /* repeats keep their first (lowest) index */
        if (m == 0 || pts[k].x != pts[m - 1].x || pts[k].y != pts[m - 1].y) pts[m++] = pts[k];
    /* lower chain left to right, then the upper one back to the first point */
    for (int64_t k = 0; k < m; k++) {
        while (top >= 2 && !left_turn(&pts[stack[top - 2]], &pts[stack[top - 1]], &pts[k])) top--;
        stack[top++] = k;
    }
    for (int64_t k = m - 2, bottom = top + 1; k >= 0; k--) {
        while (top >= bottom && !left_turn(&pts[stack[top - 2]], &pts[stack[top - 1]], &pts[k])) top--;
        stack[top++] = k;
    }
    int64_t size = top > 1 ? top - 1 : 1, start = 0; /* the chain ends where it began */
    for (int64_t k = 1; k < size; k++)
        if (pts[stack[k]].i < pts[stack[start]].i) start = k;
    int64_t *out = job->hull + b * n;
    for (int64_t k = 0; k < n; k++) out[k] = k < size ? pts[stack[(start + k) % size]].i : -1;
    job->sizes[b] = size;
}

static void hull_task(void *ctx, int64_t block, int worker) {
    const hull_job *job = ctx;
    hull_point *pts = job->pts + (int64_t)worker * job->n;
    int64_t *stack = job->stack + (int64_t)worker * (2 * job->n + 1);
    int64_t end = (block + 1) * job->rows < job->B ? (block + 1) * job->rows : job->B;
    for (int64_t b = block * job->rows; b < end; b++) hull_one(job, b, pts, stack);
}

attnc_status attnc_convex_hull(attnc_tensor *hull, attnc_tensor *sizes, const attnc_tensor *points) {
    if (!attnc_present(hull)) return attnc_fail(ATTNC_ERR_TYPE, "hull is required");
    if (!attnc_present(sizes)) return attnc_fail(ATTNC_ERR_TYPE, "sizes is required");
    int64_t ps[3];
    TRY(attnc_check_planar_points(points, ps));
    int64_t hs[2] = {ps[0], ps[1]}, ss[1] = {ps[0]};
    TRY(attnc_check_dims(hull, "hull", ATTNC_INT64, 2, hs, true));
    TRY(attnc_check_dims(sizes, "sizes", ATTNC_INT64, 1, ss, true));
    hull_job job = {.p = points->data,
                    .ps0 = points->strides[0],
                    .ps1 = points->strides[1],
                    .ps2 = points->strides[2],
                    .hull = hull->data,
                    .sizes = sizes->data,
                    .B = ps[0],
                    .n = ps[1]};
    if (job.B == 0) return ATTNC_OK;
    int64_t cost = 16 * job.n + 64; /* per instance, about n log n */
    job.rows = cost >= 8192 ? 1 : 8192 / cost;
    int workers = attnc_workers_for(job.B * cost);
    TRY(attnc_calloc((void **)&job.pts, (size_t)workers * (size_t)job.n, sizeof *job.pts, "hull scratch"));
    attnc_status st = attnc_calloc((void **)&job.stack, (size_t)workers * (size_t)(2 * job.n + 1), sizeof *job.stack,
                                   "hull scratch");
    if (st == ATTNC_OK) attnc_parallel_for((job.B + job.rows - 1) / job.rows, workers, hull_task, &job);
    free(job.pts);
    free(job.stack);
    return st;
}
