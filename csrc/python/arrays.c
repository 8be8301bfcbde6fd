/* arrays.c (binding): questions about an array itself, for the Python side. */
#include "buffers.h"

#include "../core/fingerprint.h"
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

/* attnc_fingerprint of a buffer (its bytes, whatever their format), or -1
 * with a Python exception; large ones without the GIL. */
static int fingerprint(PyObject *obj, uint64_t *h) {
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_RECORDS_RO) != 0) return -1;
    int64_t shape[PyBUF_MAX_NDIM], strides[PyBUF_MAX_NDIM];
    for (int d = 0; d < v.ndim; d++) shape[d] = v.shape[d], strides[d] = v.strides[d];
    if (v.len >= (1 << 20)) {
        Py_BEGIN_ALLOW_THREADS *h = attnc_fingerprint(v.buf, v.ndim, shape, strides, (size_t)v.itemsize);
        Py_END_ALLOW_THREADS
    } else {
        *h = attnc_fingerprint(v.buf, v.ndim, shape, strides, (size_t)v.itemsize);
    }
    PyBuffer_Release(&v);
    return 0;
}

/* fingerprints(arrays) -> a tuple of each one's fingerprint as an int, None
 * for one that exports no buffer: attnc.vjp's check, one call per forward
 * and per pullback. */
static PyObject *py_fingerprints(PyObject *self, PyObject *arg) {
    (void)self;
    Py_ssize_t n = PySequence_Size(arg);
    PyObject *out = n < 0 ? NULL : PyTuple_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *array = PySequence_GetItem(arg, i), *item = NULL;
        uint64_t h;
        if (array && fingerprint(array, &h) == 0) {
            item = PyLong_FromUnsignedLongLong(h);
        } else if (array) { /* no buffer */
            PyErr_Clear();
            item = Py_NewRef(Py_None);
        }
        Py_XDECREF(array);
        if (!item || PyTuple_SetItem(out, i, item) != 0) Py_CLEAR(out);
    }
    return out;
}

PyMethodDef attnc_array_methods[] = {{"has_unit_stride", py_has_unit_stride, METH_O, NULL},
                                     {"fingerprints", py_fingerprints, METH_O, NULL},
                                     {NULL, NULL, 0, NULL}};
