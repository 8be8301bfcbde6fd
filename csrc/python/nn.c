/* nn.c (binding): layers. Same pattern as attention.c: arrays checked and
 * allocated by Python, views built here, the C call made without the GIL. */
#include "buffers.h"

static PyObject *done(buffers *h, attnc_status st) {
    buffers_release(h);
    if (st != ATTNC_OK) return raise_status(st);
    Py_RETURN_NONE;
}

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
    return done(&h, st);
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
    return done(&h, st);
}

PyMethodDef attnc_nn_methods[] = {
    {"linear_forward", py_linear_forward, METH_VARARGS, NULL},
    {"linear_backward", py_linear_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
