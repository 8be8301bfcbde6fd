/* conv.c (binding): convolutions. Same pattern as nn.c. */
#include "buffers.h"

static PyObject *py_conv2d_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *y, *x, *w, *b;
    long long s[2], p[4], d[2], groups;
    if (!PyArg_ParseTuple(args, "OOOO(LL)(LLLL)(LL)L", &y, &x, &w, &b, &s[0], &s[1], &p[0], &p[1], &p[2], &p[3],
                          &d[0], &d[1], &groups))
        return NULL;
    int64_t stride[2] = {s[0], s[1]}, padding[4] = {p[0], p[1], p[2], p[3]}, dilation[2] = {d[0], d[1]};
    buffers h = {.count = 0};
    attnc_tensor ty, tx, tw, tb;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, y, "output", 1, &ty) && buffers_get(&h, x, "input", 0, &tx) &&
          buffers_get(&h, w, "weight", 0, &tw) && buffers_get(&h, b, "bias", 0, &tb)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_conv2d_forward(&ty, &tx, &tw, &tb, stride, padding, dilation, groups));
    return buffers_finish(&h, st);
}

static PyObject *py_conv2d_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dw, *db, *dy, *x, *w;
    long long s[2], p[4], d[2], groups;
    if (!PyArg_ParseTuple(args, "OOOOOO(LL)(LLLL)(LL)L", &dx, &dw, &db, &dy, &x, &w, &s[0], &s[1], &p[0], &p[1],
                          &p[2], &p[3], &d[0], &d[1], &groups))
        return NULL;
    int64_t stride[2] = {s[0], s[1]}, padding[4] = {p[0], p[1], p[2], p[3]}, dilation[2] = {d[0], d[1]};
    buffers h = {.count = 0};
    attnc_tensor tdx, tdw, tdb, tdy, tx, tw;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dx, "dinput", 1, &tdx) && buffers_get(&h, dw, "dweight", 1, &tdw) &&
          buffers_get(&h, db, "dbias", 1, &tdb) && buffers_get(&h, dy, "doutput", 0, &tdy) &&
          buffers_get(&h, x, "input", 0, &tx) && buffers_get(&h, w, "weight", 0, &tw)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_conv2d_backward(&tdx, &tdw, &tdb, &tdy, &tx, &tw, stride, padding, dilation, groups));
    return buffers_finish(&h, st);
}

PyMethodDef attnc_conv_methods[] = {
    {"conv2d_forward", py_conv2d_forward, METH_VARARGS, NULL},
    {"conv2d_backward", py_conv2d_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
