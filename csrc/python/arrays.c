/* arrays.c (binding): questions about an array itself, for the Python side. */
#include "buffers.h"

#include "../core/tensor.h"

/* Whether the C kernels read a float array in place (attnc_has_unit_stride):
 * attnc._args.blas_ready copies it otherwise. */
static PyObject *py_has_unit_stride(PyObject *self, PyObject *arg) {
    (void)self;
    buffers h = {.count = 0};
    attnc_tensor t;
    if (!buffers_get(&h, arg, "array", 0, &t)) return buffers_release(&h), NULL;
    bool ok = attnc_has_unit_stride(&t);
    buffers_release(&h);
    return PyBool_FromLong(ok);
}

PyMethodDef attnc_array_methods[] = {
    {"has_unit_stride", py_has_unit_stride, METH_O, NULL},
    {NULL, NULL, 0, NULL}};
