/* adam_impl.h: the typed kernel of adam.c (see core/real.h). */
#include "../../core/real.h"

/* Elements [blk ADAM_BLOCK, ...) of the update (adam.c has its formula). */
static void FN(adam_task)(void *arg, int64_t blk, int worker) {
    (void)worker;
    const adam_job *j = arg;
    REAL *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
    const REAL *restrict g = j->g;
    const REAL keep = (REAL)j->keep, wd = (REAL)j->wd, b1 = (REAL)j->b1, omb1 = (REAL)j->omb1, b2 = (REAL)j->b2,
               omb2 = (REAL)j->omb2, bc2 = (REAL)j->bc2, eps = (REAL)j->eps, step = (REAL)j->step;
    int64_t lo = blk * ADAM_BLOCK, hi = lo + ADAM_BLOCK < j->n ? lo + ADAM_BLOCK : j->n;
    for (int64_t i = lo; i < hi; i++) {
        REAL pi = j->decoupled ? p[i] * keep : p[i];
        REAL gi = j->decoupled || wd == 0 ? g[i] : g[i] + wd * pi;
        REAL mi = m[i] * b1 + gi * omb1;
        REAL vi = v[i] * b2 + gi * omb2 * gi;
        p[i] = pi - mi * step / (SQRT(vi) / bc2 + eps);
        m[i] = mi;
        v[i] = vi;
    }
}

#include "../../core/real_end.h"
