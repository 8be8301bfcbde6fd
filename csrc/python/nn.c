/* nn.c (binding): layers. Same pattern as attention.c: arrays checked and
 * allocated by Python, views built here, the C call made without the GIL. */
#include "buffers.h"

static PyObject *py_linear_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *y, *x, *w, *b;
    if (!PyArg_ParseTuple(args, "OOOO", &y, &x, &w, &b)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor ty, tx, tw, tb;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, y, "output", 1, &ty) && buffers_get(&h, x, "input", 0, &tx) &&
          buffers_get(&h, w, "weight", 0, &tw) && buffers_get(&h, b, "bias", 0, &tb)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_linear_forward(&ty, &tx, &tw, &tb));
    return buffers_finish(&h, st);
}

static PyObject *py_linear_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dw, *db, *dy, *x, *w;
    if (!PyArg_ParseTuple(args, "OOOOOO", &dx, &dw, &db, &dy, &x, &w)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor tdx, tdw, tdb, tdy, tx, tw;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dx, "dinput", 1, &tdx) && buffers_get(&h, dw, "dweight", 1, &tdw) &&
          buffers_get(&h, db, "dbias", 1, &tdb) && buffers_get(&h, dy, "doutput", 0, &tdy) &&
          buffers_get(&h, x, "input", 0, &tx) && buffers_get(&h, w, "weight", 0, &tw)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_linear_backward(&tdx, &tdw, &tdb, &tdy, &tx, &tw));
    return buffers_finish(&h, st);
}

static PyObject *py_layer_norm_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *y, *mean, *rstd, *x, *w, *b;
    double eps;
    if (!PyArg_ParseTuple(args, "OOOOOOd", &y, &mean, &rstd, &x, &w, &b, &eps)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor ty, tm, tr, tx, tw, tb;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, y, "output", 1, &ty) && buffers_get(&h, mean, "mean", 1, &tm) &&
          buffers_get(&h, rstd, "rstd", 1, &tr) && buffers_get(&h, x, "input", 0, &tx) &&
          buffers_get(&h, w, "weight", 0, &tw) && buffers_get(&h, b, "bias", 0, &tb)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_layer_norm_forward(&ty, &tm, &tr, &tx, &tw, &tb, eps));
    return buffers_finish(&h, st);
}

static PyObject *py_layer_norm_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dw, *db, *dy, *x, *w, *mean, *rstd;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &dx, &dw, &db, &dy, &x, &w, &mean, &rstd)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor tdx, tdw, tdb, tdy, tx, tw, tm, tr;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dx, "dinput", 1, &tdx) && buffers_get(&h, dw, "dweight", 1, &tdw) &&
          buffers_get(&h, db, "dbias", 1, &tdb) && buffers_get(&h, dy, "doutput", 0, &tdy) &&
          buffers_get(&h, x, "input", 0, &tx) && buffers_get(&h, w, "weight", 0, &tw) &&
          buffers_get(&h, mean, "mean", 0, &tm) && buffers_get(&h, rstd, "rstd", 0, &tr)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_layer_norm_backward(&tdx, &tdw, &tdb, &tdy, &tx, &tw, &tm, &tr));
    return buffers_finish(&h, st);
}

static PyObject *py_embedding_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *y, *ids, *w;
    double scale, max_norm, norm_type;
    if (!PyArg_ParseTuple(args, "OOOddd", &y, &ids, &w, &scale, &max_norm, &norm_type)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor ty, ti, tw;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, y, "output", 1, &ty) && buffers_get(&h, ids, "input", 0, &ti) &&
          buffers_get(&h, w, "weight", 0, &tw)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_embedding_forward(&ty, &ti, &tw, scale, max_norm, norm_type));
    return buffers_finish(&h, st);
}

static PyObject *py_embedding_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dw, *dy, *ids;
    double scale;
    long long padding_idx;
    if (!PyArg_ParseTuple(args, "OOOdL", &dw, &dy, &ids, &scale, &padding_idx)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor tdw, tdy, ti;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dw, "dweight", 1, &tdw) && buffers_get(&h, dy, "doutput", 0, &tdy) &&
          buffers_get(&h, ids, "input", 0, &ti)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_embedding_backward(&tdw, &tdy, &ti, scale, padding_idx));
    return buffers_finish(&h, st);
}

static PyObject *py_cross_entropy_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *loss, *lse, *logits, *targets, *weight;
    attnc_cross_entropy_options o;
    long long ignore;
    if (!PyArg_ParseTuple(args, "OOOOOdL", &loss, &lse, &logits, &targets, &weight, &o.label_smoothing, &ignore))
        return NULL;
    o.ignore_index = ignore;
    buffers h = {.count = 0};
    attnc_tensor tl, ts, tx, tt;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, loss, "losses", 1, &tl) && buffers_get(&h, lse, "logsumexp", 1, &ts) &&
          buffers_get(&h, logits, "input", 0, &tx) && buffers_get(&h, targets, "target", 0, &tt) &&
          buffers_get(&h, weight, "weight", 0, &o.weight)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_cross_entropy_forward(&tl, &ts, &tx, &tt, &o));
    return buffers_finish(&h, st);
}

static PyObject *py_cross_entropy_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dt, *dw, *dl, *logits, *targets, *lse, *weight;
    attnc_cross_entropy_options o;
    long long ignore;
    if (!PyArg_ParseTuple(args, "OOOOOOOOdL", &dx, &dt, &dw, &dl, &logits, &targets, &lse, &weight,
                          &o.label_smoothing, &ignore))
        return NULL;
    o.ignore_index = ignore;
    buffers h = {.count = 0};
    attnc_tensor tdx, tdt, tdw, tdl, tx, tt, ts;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dx, "dinput", 1, &tdx) && buffers_get(&h, dt, "dtarget", 1, &tdt) &&
          buffers_get(&h, dw, "dweight", 1, &tdw) && buffers_get(&h, dl, "dlosses", 0, &tdl) &&
          buffers_get(&h, logits, "input", 0, &tx) && buffers_get(&h, targets, "target", 0, &tt) &&
          buffers_get(&h, lse, "logsumexp", 0, &ts) && buffers_get(&h, weight, "weight", 0, &o.weight)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_cross_entropy_backward(&tdx, &tdt, &tdw, &tdl, &tx, &tt, &ts, &o));
    return buffers_finish(&h, st);
}

static PyObject *py_log_softmax_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *y, *x;
    if (!PyArg_ParseTuple(args, "OO", &y, &x)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor ty, tx;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, y, "output", 1, &ty) && buffers_get(&h, x, "input", 0, &tx)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_log_softmax_forward(&ty, &tx));
    return buffers_finish(&h, st);
}

static PyObject *py_log_softmax_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dy, *y;
    if (!PyArg_ParseTuple(args, "OOO", &dx, &dy, &y)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor tdx, tdy, ty;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dx, "dinput", 1, &tdx) && buffers_get(&h, dy, "doutput", 0, &tdy) &&
          buffers_get(&h, y, "output", 0, &ty)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_log_softmax_backward(&tdx, &tdy, &ty));
    return buffers_finish(&h, st);
}

/* y = dropout(act(x)) (no residual): attnc.nn.relu and relu_dropout
 * (csrc/nn/pointwise.c without its residual). */
static PyObject *py_activation_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *y, *x;
    int act;
    double p;
    unsigned long long seed, stream;
    if (!PyArg_ParseTuple(args, "OOidKK", &y, &x, &act, &p, &seed, &stream)) return NULL;
    buffers held = {.count = 0};
    attnc_tensor ty, tx, none = {.data = NULL};
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&held, y, "output", 1, &ty) && buffers_get(&held, x, "input", 0, &tx)))
        return buffers_release(&held), NULL;
    ATTNC_NOGIL(st, attnc_pointwise_forward(&ty, &tx, &none, (attnc_activation)act, p, seed, stream));
    return buffers_finish(&held, st);
}

static PyObject *py_activation_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dy, *x;
    int act;
    double p;
    unsigned long long seed, stream;
    if (!PyArg_ParseTuple(args, "OOOidKK", &dx, &dy, &x, &act, &p, &seed, &stream)) return NULL;
    buffers held = {.count = 0};
    attnc_tensor tdx, tdy, tx;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&held, dx, "dinput", 1, &tdx) && buffers_get(&held, dy, "doutput", 0, &tdy) &&
          buffers_get(&held, x, "input", 0, &tx)))
        return buffers_release(&held), NULL;
    ATTNC_NOGIL(st, attnc_pointwise_backward(&tdx, &tdy, &tx, (attnc_activation)act, p, seed, stream));
    return buffers_finish(&held, st);
}

PyMethodDef attnc_nn_methods[] = {
    {"log_softmax_forward", py_log_softmax_forward, METH_VARARGS, NULL},
    {"log_softmax_backward", py_log_softmax_backward, METH_VARARGS, NULL},
    {"layer_norm_forward", py_layer_norm_forward, METH_VARARGS, NULL},
    {"layer_norm_backward", py_layer_norm_backward, METH_VARARGS, NULL},
    {"embedding_forward", py_embedding_forward, METH_VARARGS, NULL},
    {"embedding_backward", py_embedding_backward, METH_VARARGS, NULL},
    {"cross_entropy_forward", py_cross_entropy_forward, METH_VARARGS, NULL},
    {"cross_entropy_backward", py_cross_entropy_backward, METH_VARARGS, NULL},
    {"linear_forward", py_linear_forward, METH_VARARGS, NULL},
    {"linear_backward", py_linear_backward, METH_VARARGS, NULL},
    {"activation_forward", py_activation_forward, METH_VARARGS, NULL},
    {"activation_backward", py_activation_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
