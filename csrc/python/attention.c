/* attention.c (binding): the attention family. Each wrapper takes NumPy
 * arrays the Python layer has checked and allocated (outputs included),
 * builds tensor views, and runs the C operation without the GIL.
 *
 * Argument groups, as tuples:
 *   score: (kind, scale, bandwidth, beta_scalar, weight, w_query, w_key, v, beta)
 *   grads: (dweight, dw_query, dw_key, dv, dbeta, want_scale, want_bandwidth)
 *   mask:  (mask, key_lengths, causal)
 *   hard:  (mode, temperature, seed)
 *   local: (mode, window, positions, w_p, v_p)
 *   sdpa:  (mask0, mask1, causal, causal_offset, scale, dropout_p, seed
 *           [, average_heads])
 * Backward wrappers of the score family return (dscale, dbandwidth) (0.0
 * when not wanted). */
#include "buffers.h"

typedef struct {
    double scale, bandwidth;
    int want_scale, want_bandwidth;
} scalar_grads;

static int parse_score(buffers *h, PyObject *tup, attnc_score_params *p) {
    int kind;
    PyObject *w, *wq, *wk, *v, *beta, *proj;
    if (!PyArg_ParseTuple(tup, "idddOOOOOOp;score spec", &kind, &p->scale, &p->bandwidth,
                          &p->beta_scalar, &w, &wq, &wk, &v, &beta, &proj, &p->projections_ready))
        return 0;
    p->kind = (attnc_score_kind)kind;
    return buffers_get(h, w, "weight", 0, &p->weight) &&
           buffers_get(h, wq, "w_query", 0, &p->w_query) &&
           buffers_get(h, wk, "w_key", 0, &p->w_key) && buffers_get(h, v, "v", 0, &p->v) &&
           buffers_get(h, beta, "beta", 0, &p->beta) &&
           buffers_get(h, proj, "projections", 1, &p->projections);
}

static int parse_grads(buffers *h, PyObject *tup, attnc_score_grads *g, scalar_grads *s) {
    PyObject *w, *wq, *wk, *v, *beta;
    if (!PyArg_ParseTuple(tup, "OOOOOpp;grads spec", &w, &wq, &wk, &v, &beta, &s->want_scale,
                          &s->want_bandwidth))
        return 0;
    s->scale = s->bandwidth = 0;
    g->scale = s->want_scale ? &s->scale : NULL;
    g->bandwidth = s->want_bandwidth ? &s->bandwidth : NULL;
    return buffers_get(h, w, "dweight", 1, &g->weight) &&
           buffers_get(h, wq, "dw_query", 1, &g->w_query) &&
           buffers_get(h, wk, "dw_key", 1, &g->w_key) && buffers_get(h, v, "dv", 1, &g->v) &&
           buffers_get(h, beta, "dbeta", 1, &g->beta);
}

static int parse_mask(buffers *h, PyObject *tup, attnc_mask *m) {
    PyObject *mask, *lengths;
    if (!PyArg_ParseTuple(tup, "OOp;mask spec", &mask, &lengths, &m->causal)) return 0;
    return buffers_get(h, mask, "mask", 0, &m->mask) &&
           buffers_get(h, lengths, "key_lengths", 0, &m->key_lengths);
}

static int parse_hard(PyObject *tup, attnc_hard_options *o) {
    int mode;
    unsigned long long seed;
    if (!PyArg_ParseTuple(tup, "idK;hard spec", &mode, &o->temperature, &seed)) return 0;
    o->mode = (attnc_hard_mode)mode;
    o->seed = seed;
    return 1;
}

static int parse_local(buffers *h, PyObject *tup, attnc_local_options *o) {
    int mode;
    PyObject *pos, *wp, *vp;
    if (!PyArg_ParseTuple(tup, "idOOO;local spec", &mode, &o->window, &pos, &wp, &vp)) return 0;
    o->mode = (attnc_local_mode)mode;
    return buffers_get(h, pos, "positions", 0, &o->positions) &&
           buffers_get(h, wp, "w_p", 0, &o->w_p) && buffers_get(h, vp, "v_p", 0, &o->v_p);
}

/* Finish a call: release buffers, map the status, build the result. */
static PyObject *finish(buffers *h, attnc_status st, const scalar_grads *s) {
    if (!s || st != ATTNC_OK) return buffers_finish(h, st);
    buffers_release(h);
    return Py_BuildValue("(dd)", s->scale, s->bandwidth);
}

static PyObject *py_score_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *q, *k, *out;
    if (!PyArg_ParseTuple(args, "OOOO", &spec, &q, &k, &out)) return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_tensor tq, tk, ts;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && buffers_get(&h, q, "query", 0, &tq) &&
          buffers_get(&h, k, "keys", 0, &tk) && buffers_get(&h, out, "scores", 1, &ts)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_score_forward(&ts, &tq, &tk, &p));
    return finish(&h, st, NULL);
}

static PyObject *py_score_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *gspec, *ds, *q, *k, *dq, *dk;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &spec, &gspec, &ds, &q, &k, &dq, &dk)) return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_score_grads g;
    scalar_grads s;
    attnc_tensor tds, tq, tk, tdq, tdk;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && parse_grads(&h, gspec, &g, &s) &&
          buffers_get(&h, ds, "dscores", 0, &tds) && buffers_get(&h, q, "query", 0, &tq) &&
          buffers_get(&h, k, "keys", 0, &tk) && buffers_get(&h, dq, "dquery", 1, &tdq) &&
          buffers_get(&h, dk, "dkeys", 1, &tdk)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_score_backward(&tdq, &tdk, &g, &tds, &tq, &tk, &p));
    return finish(&h, st, &s);
}

static PyObject *py_softmax_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *mspec, *s, *w;
    if (!PyArg_ParseTuple(args, "OOO", &mspec, &s, &w)) return NULL;
    buffers h = {.count = 0};
    attnc_mask m;
    attnc_tensor ts, tw;
    attnc_status st = ATTNC_OK;
    if (!(parse_mask(&h, mspec, &m) && buffers_get(&h, s, "scores", 0, &ts) &&
          buffers_get(&h, w, "weights", 1, &tw)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_softmax_forward(&tw, &ts, &m));
    return finish(&h, st, NULL);
}

static PyObject *py_softmax_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dw, *w, *ds;
    if (!PyArg_ParseTuple(args, "OOO", &dw, &w, &ds)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor tdw, tw, tds;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dw, "dweights", 0, &tdw) && buffers_get(&h, w, "weights", 0, &tw) &&
          buffers_get(&h, ds, "dscores", 1, &tds)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_softmax_backward(&tds, &tdw, &tw));
    return finish(&h, st, NULL);
}

/* query, keys, values and the three outputs every forward shares. */
typedef struct {
    attnc_tensor q, k, v, out0, out1, out2;
} qkv_outs;

static int get_qkv_outs(buffers *h, PyObject *q, PyObject *k, PyObject *v, PyObject *o0,
                        PyObject *o1, PyObject *o2, const char *n2, qkv_outs *t) {
    return buffers_get(h, q, "query", 0, &t->q) && buffers_get(h, k, "keys", 0, &t->k) &&
           buffers_get(h, v, "values", 0, &t->v) && buffers_get(h, o0, "context", 1, &t->out0) &&
           buffers_get(h, o1, "weights", 1, &t->out1) && buffers_get(h, o2, n2, 1, &t->out2);
}

static PyObject *py_attention_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *mspec, *q, *k, *v, *c, *w;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &spec, &mspec, &q, &k, &v, &c, &w)) return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_mask m;
    qkv_outs t;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && parse_mask(&h, mspec, &m) &&
          get_qkv_outs(&h, q, k, v, c, w, Py_None, "unused", &t)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_attention_forward(&t.out0, &t.out1, &t.q, &t.k, &t.v, &p, &m));
    return finish(&h, st, NULL);
}

/* Gradients every backward shares: dquery, dkeys, dvalues, dcontext, dweights. */
typedef struct {
    attnc_tensor q, k, v, dq, dk, dv, dc, dw;
} qkv_grads;

static int get_qkv_grads(buffers *h, PyObject *q, PyObject *k, PyObject *v, PyObject *dc,
                         PyObject *dw, PyObject *dq, PyObject *dk, PyObject *dv, qkv_grads *t) {
    return buffers_get(h, q, "query", 0, &t->q) && buffers_get(h, k, "keys", 0, &t->k) &&
           buffers_get(h, v, "values", 0, &t->v) &&
           buffers_get(h, dc, "dcontext", 0, &t->dc) &&
           buffers_get(h, dw, "dweights", 0, &t->dw) &&
           buffers_get(h, dq, "dquery", 1, &t->dq) && buffers_get(h, dk, "dkeys", 1, &t->dk) &&
           buffers_get(h, dv, "dvalues", 1, &t->dv);
}

static PyObject *py_attention_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *gspec, *dc, *dw, *q, *k, *v, *w, *dq, *dk, *dv;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &spec, &gspec, &dc, &dw, &q, &k, &v, &w, &dq,
                          &dk, &dv))
        return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_score_grads g;
    scalar_grads s;
    qkv_grads t;
    attnc_tensor tw;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && parse_grads(&h, gspec, &g, &s) &&
          get_qkv_grads(&h, q, k, v, dc, dw, dq, dk, dv, &t) &&
          buffers_get(&h, w, "weights", 0, &tw)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_attention_backward(&t.dq, &t.dk, &t.dv, &g, &t.dc, &t.dw, &t.q, &t.k,
                                             &t.v, &tw, &p));
    return finish(&h, st, &s);
}

static PyObject *py_hard_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *mspec, *hspec, *q, *k, *v, *c, *w, *idx;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &spec, &mspec, &hspec, &q, &k, &v, &c, &w, &idx))
        return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_mask m;
    attnc_hard_options o;
    qkv_outs t;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && parse_mask(&h, mspec, &m) && parse_hard(hspec, &o) &&
          get_qkv_outs(&h, q, k, v, c, w, idx, "indices", &t)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_hard_attention_forward(&t.out0, &t.out1, &t.out2, &t.q, &t.k, &t.v,
                                                 &p, &m, &o));
    return finish(&h, st, NULL);
}

static PyObject *py_hard_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *gspec, *mspec, *hspec, *dc, *dw, *q, *k, *v, *idx, *dq, *dk, *dv;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOO", &spec, &gspec, &mspec, &hspec, &dc, &dw, &q,
                          &k, &v, &idx, &dq, &dk, &dv))
        return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_score_grads g;
    scalar_grads s;
    attnc_mask m;
    attnc_hard_options o;
    qkv_grads t;
    attnc_tensor ti;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && parse_grads(&h, gspec, &g, &s) &&
          parse_mask(&h, mspec, &m) && parse_hard(hspec, &o) &&
          get_qkv_grads(&h, q, k, v, dc, dw, dq, dk, dv, &t) &&
          buffers_get(&h, idx, "indices", 0, &ti)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_hard_attention_backward(&t.dq, &t.dk, &t.dv, &g, &t.dc, &t.dw, &t.q,
                                                  &t.k, &t.v, &ti, &p, &m, &o));
    return finish(&h, st, &s);
}

static PyObject *py_local_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *mspec, *lspec, *q, *k, *v, *c, *w, *pos;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &spec, &mspec, &lspec, &q, &k, &v, &c, &w, &pos))
        return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_mask m;
    attnc_local_options o;
    qkv_outs t;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && parse_mask(&h, mspec, &m) &&
          parse_local(&h, lspec, &o) && get_qkv_outs(&h, q, k, v, c, w, pos, "positions", &t)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_local_attention_forward(&t.out0, &t.out1, &t.out2, &t.q, &t.k, &t.v,
                                                  &p, &m, &o));
    return finish(&h, st, NULL);
}

static PyObject *py_local_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *gspec, *mspec, *lspec, *dc, *dw, *dpos, *q, *k, *v, *w, *pos, *dq, *dk,
        *dv, *dwp, *dvp;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOO", &spec, &gspec, &mspec, &lspec, &dc, &dw,
                          &dpos, &q, &k, &v, &w, &pos, &dq, &dk, &dv, &dwp, &dvp))
        return NULL;
    buffers h = {.count = 0};
    attnc_score_params p;
    attnc_score_grads g;
    scalar_grads s;
    attnc_mask m;
    attnc_local_options o;
    qkv_grads t;
    attnc_tensor tdpos, tw, tpos, tdwp, tdvp;
    attnc_status st = ATTNC_OK;
    if (!(parse_score(&h, spec, &p) && parse_grads(&h, gspec, &g, &s) &&
          parse_mask(&h, mspec, &m) && parse_local(&h, lspec, &o) &&
          get_qkv_grads(&h, q, k, v, dc, dw, dq, dk, dv, &t) &&
          buffers_get(&h, dpos, "dpositions", 0, &tdpos) &&
          buffers_get(&h, w, "weights", 0, &tw) && buffers_get(&h, pos, "positions", 0, &tpos) &&
          buffers_get(&h, dwp, "dw_p", 1, &tdwp) && buffers_get(&h, dvp, "dv_p", 1, &tdvp)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_local_attention_backward(&t.dq, &t.dk, &t.dv, &g, &tdwp, &tdvp, &t.dc,
                                                   &t.dw, &tdpos, &t.q, &t.k, &t.v, &tw, &tpos,
                                                   &p, &m, &o));
    return finish(&h, st, &s);
}

static int parse_sdpa(buffers *h, PyObject *tup, attnc_sdpa_options *o) {
    PyObject *m0, *m1;
    unsigned long long seed;
    long long offset;
    o->average_heads = 0;
    if (!PyArg_ParseTuple(tup, "OOpLddK|p;sdpa spec", &m0, &m1, &o->causal, &offset, &o->scale,
                          &o->dropout_p, &seed, &o->average_heads))
        return 0;
    o->causal_offset = offset;
    o->seed = seed;
    return buffers_get(h, m0, "attn_mask", 0, &o->masks[0]) &&
           buffers_get(h, m1, "key_padding_mask", 0, &o->masks[1]);
}

static PyObject *py_sdpa_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *q, *k, *v, *out, *lse, *w;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &spec, &q, &k, &v, &out, &lse, &w)) return NULL;
    buffers h = {.count = 0};
    attnc_sdpa_options o;
    attnc_tensor tq, tk, tv, to, tl, tw;
    attnc_status st = ATTNC_OK;
    if (!(parse_sdpa(&h, spec, &o) && buffers_get(&h, q, "query", 0, &tq) &&
          buffers_get(&h, k, "key", 0, &tk) && buffers_get(&h, v, "value", 0, &tv) &&
          buffers_get(&h, out, "output", 1, &to) && buffers_get(&h, lse, "lse", 1, &tl) &&
          buffers_get(&h, w, "weights", 1, &tw)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_sdpa_forward(&to, &tl, &tw, &tq, &tk, &tv, &o));
    return finish(&h, st, NULL);
}

static PyObject *py_sdpa_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *spec, *dout, *dw, *q, *k, *v, *out, *lse, *dq, *dk, *dv, *dm;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO", &spec, &dout, &dw, &q, &k, &v, &out, &lse, &dq,
                          &dk, &dv, &dm))
        return NULL;
    buffers h = {.count = 0};
    attnc_sdpa_options o;
    attnc_tensor tdo, tdw, tq, tk, tv, to, tl, tdq, tdk, tdv, tdm;
    attnc_status st = ATTNC_OK;
    if (!(parse_sdpa(&h, spec, &o) && buffers_get(&h, dout, "doutput", 0, &tdo) &&
          buffers_get(&h, dw, "dweights", 0, &tdw) && buffers_get(&h, q, "query", 0, &tq) &&
          buffers_get(&h, k, "key", 0, &tk) && buffers_get(&h, v, "value", 0, &tv) &&
          buffers_get(&h, out, "output", 0, &to) && buffers_get(&h, lse, "lse", 0, &tl) &&
          buffers_get(&h, dq, "dquery", 1, &tdq) && buffers_get(&h, dk, "dkey", 1, &tdk) &&
          buffers_get(&h, dv, "dvalue", 1, &tdv) && buffers_get(&h, dm, "dmask", 1, &tdm)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_sdpa_backward(&tdq, &tdk, &tdv, &tdm, &tdo, &tdw, &tq, &tk, &tv, &to,
                                        &tl, &o));
    return finish(&h, st, NULL);
}

PyMethodDef attnc_attention_methods[] = {
    {"sdpa_forward", py_sdpa_forward, METH_VARARGS, NULL},
    {"sdpa_backward", py_sdpa_backward, METH_VARARGS, NULL},
    {"score_forward", py_score_forward, METH_VARARGS, NULL},
    {"score_backward", py_score_backward, METH_VARARGS, NULL},
    {"softmax_forward", py_softmax_forward, METH_VARARGS, NULL},
    {"softmax_backward", py_softmax_backward, METH_VARARGS, NULL},
    {"attention_forward", py_attention_forward, METH_VARARGS, NULL},
    {"attention_backward", py_attention_backward, METH_VARARGS, NULL},
    {"hard_attention_forward", py_hard_forward, METH_VARARGS, NULL},
    {"hard_attention_backward", py_hard_backward, METH_VARARGS, NULL},
    {"local_attention_forward", py_local_forward, METH_VARARGS, NULL},
    {"local_attention_backward", py_local_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
