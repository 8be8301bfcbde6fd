/* gated.c (binding): the gated activation tanh(a) * sigmoid(b). Same pattern
 * as nn.c: arrays checked and allocated by Python, views built here, the C
 * call made without the GIL. */
#include "buffers.h"

static PyObject *py_gated_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *y, *a, *b;
    if (!PyArg_ParseTuple(args, "OOO", &y, &a, &b)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor ty, ta, tb;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, y, "output", 1, &ty) && buffers_get(&h, a, "input", 0, &ta) &&
          buffers_get(&h, b, "gate", 0, &tb)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_gated_forward(&ty, &ta, &tb));
    return buffers_finish(&h, st);
}

static PyObject *py_gated_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *da, *db, *dy, *a, *b;
    if (!PyArg_ParseTuple(args, "OOOOO", &da, &db, &dy, &a, &b)) return NULL;
    buffers h = {.count = 0};
    attnc_tensor tda, tdb, tdy, ta, tb;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, da, "dinput", 1, &tda) && buffers_get(&h, db, "dgate", 1, &tdb) &&
          buffers_get(&h, dy, "doutput", 0, &tdy) && buffers_get(&h, a, "input", 0, &ta) &&
          buffers_get(&h, b, "gate", 0, &tb)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_gated_backward(&tda, &tdb, &tdy, &ta, &tb));
    return buffers_finish(&h, st);
}

PyMethodDef attnc_gated_methods[] = {
    {"gated_forward", py_gated_forward, METH_VARARGS, NULL},
    {"gated_backward", py_gated_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
