/* conv.c: 2-d convolution (cross-correlation, as torch's conv2d) of a batch
 * of images, forward and backward, by im2col and one matrix product per
 * image. A 1-d convolution is the H = 1 case. */
#include <stdbool.h>
#include <stdlib.h>

#include "../../core/blas.h"
#include "../../core/status.h"
#include "../../core/tensor.h"
#include "../../core/threads.h"

/* Sizes of one call: K = Cin kH kW (a patch), P = Ho Wo (output positions);
 * with groups, output channels [g Cout/G, (g+1) Cout/G) read input channels
 * [g Cin/G, (g+1) Cin/G), which are rows [g KG, (g+1) KG) of the patches,
 * KG = K / G (the weight is (Cout, Cin/G, kH, kW) = (Cout, KG)). */
typedef struct {
    int64_t batch, cin, h, w, cout, kh, kw, ho, wo, k, p;
    int64_t groups, kg, cout_g;
    int64_t sh, sw, pt, pl, dh, dw;
    bool identity; /* 1x1, stride 1, no padding: the patches are the input itself */
} conv_geom;

enum { SUM_BLOCK = 4096 }; /* dW / db entries per block of the batch sum */

typedef struct {
    const void *x, *w, *bias, *dy;
    void *y, *dx, *dw_parts, *db_parts, *dw, *db;
    void *scratch; /* per worker: 2 * K * P elements (the columns and their gradient) */
    conv_geom g;
} conv_job;

#define ATTNC_F64 0
#include "conv_impl.h"
#define ATTNC_F64 1
#include "conv_impl.h"

static attnc_status check_options(const int64_t stride[2], const int64_t padding[4], const int64_t dilation[2]) {
    for (int d = 0; d < 2; d++) {
        if (stride[d] < 1) return attnc_fail(ATTNC_ERR_VALUE, "stride must be >= 1, got %lld", (long long)stride[d]);
        if (dilation[d] < 1)
            return attnc_fail(ATTNC_ERR_VALUE, "dilation must be >= 1, got %lld", (long long)dilation[d]);
    }
    for (int d = 0; d < 4; d++)
        if (padding[d] < 0) return attnc_fail(ATTNC_ERR_VALUE, "padding must be >= 0, got %lld", (long long)padding[d]);
    return ATTNC_OK;
}

/* Checks x (B, Cin, H, W) and weight (Cout, Cin / groups, kH, kW), both
 * contiguous, and fills the geometry. */
static attnc_status geometry(conv_geom *g, const attnc_tensor *x, const attnc_tensor *weight, const int64_t stride[2],
                             const int64_t padding[4], const int64_t dilation[2], int64_t groups) {
    if (!attnc_present(x) || !attnc_present(weight)) return attnc_fail(ATTNC_ERR_TYPE, "input and weight are required");
    attnc_dtype dt = x->dtype;
    if (dt != ATTNC_FLOAT32 && dt != ATTNC_FLOAT64)
        return attnc_fail(ATTNC_ERR_TYPE, "input has dtype %s, expected float32 or float64", attnc_dtype_name(dt));
    if (!stride || !padding || !dilation)
        return attnc_fail(ATTNC_ERR_TYPE, "stride, padding and dilation are required");
    TRY(check_options(stride, padding, dilation));
    if (groups < 1) return attnc_fail(ATTNC_ERR_VALUE, "groups must be >= 1, got %lld", (long long)groups);
    int64_t xs[4] = {-1, -1, -1, -1}, ws[4] = {-1, -1, -1, -1};
    TRY(attnc_check_array(x, "input", dt, 4, xs, false));
    if (xs[1] % groups)
        return attnc_fail(ATTNC_ERR_VALUE, "input's %lld channels are not divisible by groups = %lld", (long long)xs[1],
                          (long long)groups);
    ws[1] = xs[1] / groups;
    TRY(attnc_check_array(weight, "weight", dt, 4, ws, false));
    if (ws[0] % groups)
        return attnc_fail(ATTNC_ERR_VALUE, "weight's %lld output channels are not divisible by groups = %lld",
                          (long long)ws[0], (long long)groups);
    *g = (conv_geom){.batch = xs[0],
                     .cin = xs[1],
                     .h = xs[2],
                     .w = xs[3],
                     .cout = ws[0],
                     .kh = ws[2],
                     .kw = ws[3],
                     .sh = stride[0],
                     .sw = stride[1],
                     .pt = padding[0],
                     .pl = padding[2],
                     .dh = dilation[0],
                     .dw = dilation[1],
                     .groups = groups,
                     .cout_g = ws[0] / groups};
    if (g->kh < 1 || g->kw < 1) return attnc_fail(ATTNC_ERR_VALUE, "the kernel must be at least 1 x 1");
    int64_t eh = g->h + padding[0] + padding[1] - g->dh * (g->kh - 1),
            ew = g->w + padding[2] + padding[3] - g->dw * (g->kw - 1);
    if ((eh < 1 && g->h > 0) || (ew < 1 && g->w > 0)) /* an empty input has no output position then */
        return attnc_fail(ATTNC_ERR_VALUE,
                          "the padded input (%lld x %lld) is smaller than the dilated kernel (%lld x %lld)",
                          (long long)(g->h + padding[0] + padding[1]), (long long)(g->w + padding[2] + padding[3]),
                          (long long)(g->dh * (g->kh - 1) + 1), (long long)(g->dw * (g->kw - 1) + 1));
    g->ho = eh < 1 ? 0 : (eh - 1) / g->sh + 1;
    g->wo = ew < 1 ? 0 : (ew - 1) / g->sw + 1;
    g->k = g->cin * g->kh * g->kw;
    g->kg = g->k / groups;
    g->p = g->ho * g->wo;
    g->identity = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && padding[0] == 0 && padding[1] == 0 &&
                  padding[2] == 0 && padding[3] == 0;
    return ATTNC_OK;
}

static attnc_status check_out(const attnc_tensor *t, const char *name, attnc_dtype dt, int64_t a, int64_t b, int64_t c,
                              int64_t d, bool output) {
    int64_t s[4] = {a, b, c, d};
    return attnc_check_array(t, name, dt, 4, s, output);
}

/* Per-worker scratch of 2 K P elements (none for the identity case). */
static attnc_status scratch(void **out, const conv_geom *g, int workers, attnc_dtype dt) {
    *out = NULL;
    if (g->identity) return ATTNC_OK;
    return attnc_calloc(out, (size_t)(2 * workers) * (size_t)(g->k * g->p), attnc_dtype_size(dt),
                        "convolution patches");
}

attnc_status attnc_conv2d_forward(attnc_tensor *y, const attnc_tensor *x, const attnc_tensor *weight,
                                  const attnc_tensor *bias, const int64_t stride[2], const int64_t padding[4],
                                  const int64_t dilation[2], int64_t groups) {
    conv_geom g;
    TRY(geometry(&g, x, weight, stride, padding, dilation, groups));
    attnc_dtype dt = x->dtype;
    if (!attnc_present(y)) return attnc_fail(ATTNC_ERR_TYPE, "output is required");
    TRY(check_out(y, "output", dt, g.batch, g.cout, g.ho, g.wo, true));
    if (attnc_present(bias)) {
        int64_t n = g.cout;
        TRY(attnc_check_array(bias, "bias", dt, 1, &n, false));
    }
    int workers = attnc_workers_for(g.batch * g.cout * g.kg * g.p);
    void *s;
    TRY(scratch(&s, &g, workers, dt));
    conv_job job = {.x = x->data,
                    .w = weight->data,
                    .bias = attnc_present(bias) ? bias->data : NULL,
                    .y = y->data,
                    .scratch = s,
                    .g = g};
    attnc_parallel_for(g.batch, workers, ATTNC_TYPED(dt, forward_task), &job);
    free(s);
    return ATTNC_OK;
}

attnc_status attnc_conv2d_backward(attnc_tensor *dx, attnc_tensor *dweight, attnc_tensor *dbias, const attnc_tensor *dy,
                                   const attnc_tensor *x, const attnc_tensor *weight, const int64_t stride[2],
                                   const int64_t padding[4], const int64_t dilation[2], int64_t groups) {
    conv_geom g;
    TRY(geometry(&g, x, weight, stride, padding, dilation, groups));
    attnc_dtype dt = x->dtype;
    if (!attnc_present(dy)) return attnc_fail(ATTNC_ERR_TYPE, "doutput is required");
    TRY(check_out(dy, "doutput", dt, g.batch, g.cout, g.ho, g.wo, false));
    if (attnc_present(dx)) TRY(check_out(dx, "dinput", dt, g.batch, g.cin, g.h, g.w, true));
    if (attnc_present(dweight)) TRY(check_out(dweight, "dweight", dt, g.cout, g.cin / g.groups, g.kh, g.kw, true));
    if (attnc_present(dbias)) {
        int64_t n = g.cout;
        TRY(attnc_check_array(dbias, "dbias", dt, 1, &n, true));
    }
    size_t es = attnc_dtype_size(dt);
    int workers = attnc_workers_for(3 * g.batch * g.cout * g.kg * g.p);
    void *s = NULL, *dwp = NULL, *dbp = NULL;
    attnc_status st = scratch(&s, &g, workers, dt);
    if (st == ATTNC_OK && attnc_present(dweight))
        st = attnc_calloc(&dwp, (size_t)(g.batch * g.cout * g.kg), es, "per-image weight gradients");
    if (st == ATTNC_OK && attnc_present(dbias))
        st = attnc_calloc(&dbp, (size_t)(g.batch * g.cout), es, "per-image bias gradients");
    if (st != ATTNC_OK) {
        free(s);
        free(dwp);
        return st;
    }
    int64_t nsum = (attnc_present(dweight) ? g.cout * g.kg : 0) + (attnc_present(dbias) ? g.cout : 0);
    conv_job j = {.x = x->data,
                  .w = weight->data,
                  .dy = dy->data,
                  .dx = attnc_present(dx) ? dx->data : NULL,
                  .dw_parts = dwp,
                  .db_parts = dbp,
                  .dw = attnc_present(dweight) ? dweight->data : NULL,
                  .db = attnc_present(dbias) ? dbias->data : NULL,
                  .scratch = s,
                  .g = g};
    attnc_parallel_for(g.batch, workers, ATTNC_TYPED(dt, backward_task), &j);
    if (nsum) attnc_parallel_for((nsum + SUM_BLOCK - 1) / SUM_BLOCK, workers, ATTNC_TYPED(dt, sum_task), &j);
    free(s);
    free(dwp);
    free(dbp);
    return ATTNC_OK;
}
