/* pooling.c (binding): attention pooling. Same pattern as nn.c:
 * arrays checked and allocated by Python, views built here, the C call made
 * without the GIL. */
#include "buffers.h"

static PyObject *py_attention_pool_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *c, *alpha, *u, *h, *w, *b, *v, *mask;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &c, &alpha, &u, &h, &w, &b, &v, &mask)) return NULL;
    buffers held = {.count = 0};
    attnc_tensor tc, ta, tu, th, tw, tb, tv, tm;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&held, c, "output", 1, &tc) && buffers_get(&held, alpha, "weights", 1, &ta) &&
          buffers_get(&held, u, "saved", 1, &tu) && buffers_get(&held, h, "input", 0, &th) &&
          buffers_get(&held, w, "weight", 0, &tw) && buffers_get(&held, b, "bias", 0, &tb) &&
          buffers_get(&held, v, "v", 0, &tv) && buffers_get(&held, mask, "mask", 0, &tm)))
        return buffers_release(&held), NULL;
    ATTNC_NOGIL(st, attnc_attention_pool_forward(&tc, &ta, &tu, &th, &tw, &tb, &tv, &tm));
    return buffers_finish(&held, st);
}

static PyObject *py_attention_pool_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dh, *dw, *db, *dv, *dc, *da, *h, *w, *v, *alpha, *u;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &dh, &dw, &db, &dv, &dc, &da, &h, &w, &v, &alpha, &u)) return NULL;
    buffers held = {.count = 0};
    attnc_tensor tdh, tdw, tdb, tdv, tdc, tda, th, tw, tv, ta, tu;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&held, dh, "dinput", 1, &tdh) && buffers_get(&held, dw, "dweight", 1, &tdw) &&
          buffers_get(&held, db, "dbias", 1, &tdb) && buffers_get(&held, dv, "dv", 1, &tdv) &&
          buffers_get(&held, dc, "doutput", 0, &tdc) && buffers_get(&held, da, "dweights", 0, &tda) &&
          buffers_get(&held, h, "input", 0, &th) && buffers_get(&held, w, "weight", 0, &tw) &&
          buffers_get(&held, v, "v", 0, &tv) && buffers_get(&held, alpha, "weights", 0, &ta) &&
          buffers_get(&held, u, "saved", 0, &tu)))
        return buffers_release(&held), NULL;
    ATTNC_NOGIL(st, attnc_attention_pool_backward(&tdh, &tdw, &tdb, &tdv, &tdc, &tda, &th, &tw, &tv, &ta, &tu));
    return buffers_finish(&held, st);
}

PyMethodDef attnc_pooling_methods[] = {
    {"attention_pool_forward", py_attention_pool_forward, METH_VARARGS, NULL},
    {"attention_pool_backward", py_attention_pool_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
