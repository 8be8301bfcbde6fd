/* embedding_impl.h and cross-entropy kernels (see core/real.h). */
#include "../core/real.h"

typedef struct {
    const attnc_tensor *ids, *w, *dy, *logits, *lse_in, *dloss;
    attnc_tensor *y, *dw, *loss, *lse, *dlogits;
    int64_t n, d, v;
    double scale, eps;
    int64_t special; /* padding_idx or ignore_index */
} FN(tok_job);

#define AT(t, i, j) (((REAL *)(t)->data)[(i) * (t)->strides[0] + (j) * (t)->strides[1]])
#define ID(j, r) (((const int64_t *)(j)->ids->data)[(r) * (j)->ids->strides[0]])

static void FN(embed_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(tok_job) *j = arg;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++)
        for (int64_t c = 0; c < j->d; c++)
            ((REAL *)j->y->data)[r * j->d + c] = AT(j->w, ID(j, r), c) * (REAL)j->scale;
}

/* One block of columns of dweight, every token in order. */
static void FN(embed_grad_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(tok_job) *j = arg;
    int64_t c0 = block * ROWS, c1 = c0 + ROWS < j->d ? c0 + ROWS : j->d;
    REAL *dw = j->dw->data;
    for (int64_t r = 0; r < j->v; r++)
        for (int64_t c = c0; c < c1; c++) dw[r * j->d + c] = 0;
    for (int64_t r = 0; r < j->n; r++) {
        int64_t id = ID(j, r);
        if (id == j->special) continue;
        for (int64_t c = c0; c < c1; c++) dw[id * j->d + c] += AT(j->dy, r, c) * (REAL)j->scale;
    }
}

/* loss = lse - (1 - eps) x_t - eps / C sum_c x_c; 0 for ignored rows. */
static void FN(ce_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(tok_job) *j = arg;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL mx = -INFINITY, sum = 0, total = 0;
        for (int64_t c = 0; c < j->v; c++) mx = AT(j->logits, r, c) > mx ? AT(j->logits, r, c) : mx;
        for (int64_t c = 0; c < j->v; c++) {
            sum += EXP(AT(j->logits, r, c) - mx);
            total += AT(j->logits, r, c);
        }
        REAL lse = mx + LOG(sum);
        ((REAL *)j->lse->data)[r] = lse;
        int64_t t = ID(j, r);
        REAL eps = (REAL)j->eps;
        /* without smoothing the mean term is absent, not 0 x total: a -inf logit
         * (a masked class) would make it NaN */
        REAL smooth = eps > 0 ? eps / (REAL)j->v * total : 0;
        ((REAL *)j->loss->data)[r] = t == j->special ? 0 : lse - (1 - eps) * AT(j->logits, r, t) - smooth;
    }
}

/* dlogits = dloss (softmax - ((1 - eps) onehot + eps / C)). */
static void FN(ce_backward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(tok_job) *j = arg;
    REAL eps = (REAL)j->eps;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL *out = (REAL *)j->dlogits->data + r * j->v;
        int64_t t = ID(j, r);
        REAL g = ((const REAL *)j->dloss->data)[r * j->dloss->strides[0]];
        REAL lse = ((const REAL *)j->lse_in->data)[r * j->lse_in->strides[0]];
        for (int64_t c = 0; c < j->v; c++) {
            REAL q = eps / (REAL)j->v + (c == t ? 1 - eps : 0);
            out[c] = t == j->special ? 0 : g * (EXP(AT(j->logits, r, c) - lse) - q);
        }
    }
}


/* y = x - logsumexp(x) over each row of logits (N, C); a row of only -inf
 * gives -inf (and zero gradient) instead of NaN. */
static void FN(log_softmax_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(tok_job) *j = arg;
    REAL *y = j->y->data;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < j->v; c++) mx = AT(j->logits, r, c) > mx ? AT(j->logits, r, c) : mx;
        if (mx == -INFINITY) {
            for (int64_t c = 0; c < j->v; c++) y[r * j->v + c] = -INFINITY;
            continue;
        }
        for (int64_t c = 0; c < j->v; c++) sum += EXP(AT(j->logits, r, c) - mx);
        REAL lse = mx + LOG(sum);
        for (int64_t c = 0; c < j->v; c++) y[r * j->v + c] = AT(j->logits, r, c) - lse;
    }
}

/* dx = dy - softmax * sum(dy), softmax = exp(y) from the forward's output. */
static void FN(log_softmax_grad_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const FN(tok_job) *j = arg;
    REAL *dx = j->dlogits->data;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL total = 0;
        for (int64_t c = 0; c < j->v; c++) total += AT(j->dy, r, c);
        for (int64_t c = 0; c < j->v; c++) {
            REAL y = AT(j->logits, r, c);
            dx[r * j->v + c] = y == -INFINITY ? 0 : AT(j->dy, r, c) - EXP(y) * total;
        }
    }
}

#undef AT
#undef ID

#include "../core/real_end.h"
