/* embedding_impl.h and cross-entropy kernels (see core/real.h). */
#include "../../core/real.h"

#define AT(t, i, j) (((REAL *)(t)->data)[(i) * (t)->strides[0] + (j) * (t)->strides[1]])
#define ID(j, r) (((const int64_t *)(j)->ids->data)[(r) * (j)->ids->strides[0]])

/* torch's max_norm renormalisation of row `id` of the table: the factor
 * max_norm / (norm + 1e-7) if the row's norm_type-norm exceeds max_norm, else
 * 1 (the norm summed in double). */
static REAL FN(renorm_factor)(const tok_job *j, int64_t id) {
    if (!(j->max_norm < INFINITY)) return 1;
    double norm = 0, p = j->norm_type;
    for (int64_t c = 0; c < j->d; c++) {
        double a = fabs((double)AT(j->w, id, c));
        if (p == INFINITY)
            norm = a > norm ? a : norm;
        else
            norm += p == 1 ? a : p == 2 ? a * a : pow(a, p);
    }
    if (p != INFINITY && p != 1) norm = p == 2 ? sqrt(norm) : pow(norm, 1 / p);
    return norm > j->max_norm ? (REAL)(j->max_norm / (norm + 1e-7)) : 1;
}

static void FN(embed_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const tok_job *j = arg;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        int64_t id = ID(j, r);
        REAL renorm = FN(renorm_factor)(j, id);
        for (int64_t c = 0; c < j->d; c++)
            ((REAL *)j->y->data)[r * j->d + c] = AT(j->w, id, c) * renorm * (REAL)j->scale;
    }
}

/* One block of columns of dweight, every token in order. */
static void FN(embed_grad_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const tok_job *j = arg;
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

/* The class weight w_c (1 without weights). */
static REAL FN(class_weight)(const tok_job *j, int64_t c) {
    return j->weight ? ((const REAL *)j->weight->data)[c * j->weight->strides[0]] : 1;
}

/* q_rc, row r's target probability of class c after label smoothing:
 * (1 - eps) target + eps / C, the target one-hot for class ids (an ignored
 * row has none: 0). */
static REAL FN(ce_target)(const tok_job *j, int64_t r, int64_t c) {
    REAL eps = (REAL)j->eps, smooth = eps / (REAL)j->v;
    if (j->probs) return (1 - eps) * AT(j->probs, r, c) + smooth;
    int64_t t = ID(j, r);
    if (t == j->special) return 0;
    return (c == t ? 1 - eps : 0) + smooth;
}

/* The logsumexp of row r of the logits. */
static REAL FN(row_lse)(const tok_job *j, int64_t r) {
    REAL mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < j->v; c++) mx = AT(j->logits, r, c) > mx ? AT(j->logits, r, c) : mx;
    for (int64_t c = 0; c < j->v; c++) sum += EXP(AT(j->logits, r, c) - mx);
    return mx + LOG(sum);
}

/* loss_r = sum_c q_rc w_c (lse - x_rc), in torch's two parts for class ids:
 * (1 - eps) w_t (lse - x_t) + eps / C sum_c w_c (lse - x_c). A term whose
 * coefficient is 0 is absent, not 0 x inf: a -inf logit (a masked class)
 * that is not a target adds nothing. Ignored rows: 0. */
static REAL FN(ce_row_loss)(const tok_job *j, int64_t r, REAL lse) {
    REAL eps = (REAL)j->eps, loss = 0;
    if (j->probs) {
        for (int64_t c = 0; c < j->v; c++) {
            REAL qw = FN(ce_target)(j, r, c) * FN(class_weight)(j, c);
            if (qw != 0) loss += qw * (lse - AT(j->logits, r, c));
        }
        return loss;
    }
    int64_t t = ID(j, r);
    if (t == j->special) return 0;
    if (eps < 1) loss = (1 - eps) * FN(class_weight)(j, t) * (lse - AT(j->logits, r, t));
    if (eps > 0) {
        REAL smooth = 0;
        for (int64_t c = 0; c < j->v; c++) {
            REAL w = FN(class_weight)(j, c);
            if (w != 0) smooth += w * (lse - AT(j->logits, r, c));
        }
        loss += eps / (REAL)j->v * smooth;
    }
    return loss;
}

static void FN(ce_forward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const tok_job *j = arg;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL lse = FN(row_lse)(j, r);
        ((REAL *)j->lse->data)[r] = lse;
        ((REAL *)j->loss->data)[r] = FN(ce_row_loss)(j, r, lse);
    }
}

/* dloss / dx_rc = softmax_rc sum_k q_rk w_k - q_rc w_c; and for probability
 * targets dloss / dtarget_rc = (1 - eps) w_c (lse - x_rc) (0 where that
 * coefficient is 0). Both times dloss_r. */
static void FN(ce_backward_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const tok_job *j = arg;
    REAL keep = 1 - (REAL)j->eps;
    for (int64_t r = block * ROWS; r < j->n && r < (block + 1) * ROWS; r++) {
        REAL *out = (REAL *)j->dlogits->data + r * j->v;
        REAL g = ((const REAL *)j->dloss->data)[r * j->dloss->strides[0]];
        REAL lse = ((const REAL *)j->lse_in->data)[r * j->lse_in->strides[0]];
        REAL total = 0; /* sum_k q_rk w_k: 1 for unweighted class ids, 0 for an ignored row */
        if (!j->probs && !j->weight)
            total = ID(j, r) == j->special ? 0 : 1;
        else
            for (int64_t c = 0; c < j->v; c++) total += FN(ce_target)(j, r, c) * FN(class_weight)(j, c);
        for (int64_t c = 0; c < j->v; c++) {
            REAL qw = FN(ce_target)(j, r, c) * FN(class_weight)(j, c);
            out[c] = total == 0 && qw == 0 ? 0 : g * (EXP(AT(j->logits, r, c) - lse) * total - qw);
        }
        if (!j->dtargets) continue;
        REAL *dt = (REAL *)j->dtargets->data + r * j->v;
        for (int64_t c = 0; c < j->v; c++) {
            REAL coef = keep * FN(class_weight)(j, c);
            dt[c] = coef == 0 ? 0 : g * coef * (lse - AT(j->logits, r, c));
        }
    }
}

/* dweight_c = sum_r dloss_r q_rc (lse_r - x_rc) over a block of classes,
 * every row in order (the same bits for any thread count). */
static void FN(ce_weight_grad_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const tok_job *j = arg;
    int64_t c0 = block * ROWS, c1 = c0 + ROWS < j->v ? c0 + ROWS : j->v;
    REAL *dw = (REAL *)j->dw->data;
    for (int64_t c = c0; c < c1; c++) dw[c] = 0;
    for (int64_t r = 0; r < j->n; r++) {
        REAL g = ((const REAL *)j->dloss->data)[r * j->dloss->strides[0]];
        REAL lse = ((const REAL *)j->lse_in->data)[r * j->lse_in->strides[0]];
        for (int64_t c = c0; c < c1; c++) {
            REAL q = FN(ce_target)(j, r, c);
            if (q != 0) dw[c] += g * q * (lse - AT(j->logits, r, c));
        }
    }
}


/* y = x - logsumexp(x) over each row of logits (N, C); a row of only -inf
 * gives -inf (and zero gradient) instead of NaN. */
static void FN(log_softmax_task)(void *arg, int64_t block, int worker) {
    (void)worker;
    const tok_job *j = arg;
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
    const tok_job *j = arg;
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

#include "../../core/real_end.h"
