/* buffers.c: reading any buffer-protocol exporter as a strided tensor. */
#include "buffers.h"

#include <string.h>

/* dtype of a struct-module format string ("f", "<d", "?", "q", ...). */
static int format_dtype(const char *format, Py_ssize_t itemsize, attnc_dtype *dtype) {
    if (!format) format = "B";
    if (*format == '@' || *format == '=' || *format == '<') format++;
    if (format[0] == '\0' || format[1] != '\0') return -1;
    switch (format[0]) {
    case 'f': *dtype = ATTNC_FLOAT32; return itemsize == 4 ? 0 : -1;
    case 'd': *dtype = ATTNC_FLOAT64; return itemsize == 8 ? 0 : -1;
    case '?': *dtype = ATTNC_BOOL; return itemsize == 1 ? 0 : -1;
    case 'q':
    case 'l': *dtype = ATTNC_INT64; return itemsize == 8 ? 0 : -1;
    default: return -1;
    }
}

int buffers_get(buffers *held, PyObject *obj, const char *name, int writable, attnc_tensor *t) {
    memset(t, 0, sizeof *t);
    if (!obj || obj == Py_None) return 1;
    if (held->count >= ATTNC_MAX_BUFFERS) {
        if (!held->more && !(held->more = PyMem_Calloc(1, sizeof *held->more))) {
            PyErr_NoMemory();
            return 0;
        }
        return buffers_get(held->more, obj, name, writable, t);
    }
    Py_buffer *view = &held->views[held->count];
    int flags = PyBUF_RECORDS_RO | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        PyObject *type_name = PyType_GetName(Py_TYPE(obj));
        PyErr_Format(PyExc_TypeError, "%s must be a %sbuffer of numbers, got %S", name, writable ? "writable " : "",
                     type_name ? type_name : Py_None);
        Py_XDECREF(type_name);
        return 0;
    }
    held->count++;
    if (format_dtype(view->format, view->itemsize, &t->dtype) != 0) {
        PyErr_Format(PyExc_TypeError, "%s has an unsupported element format '%s'", name,
                     view->format ? view->format : "B");
        return 0;
    }
    if (view->ndim > ATTNC_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s has %d dims; at most %d are supported", name, view->ndim, ATTNC_MAX_DIMS);
        return 0;
    }
    t->data = view->buf;
    t->ndim = view->ndim;
    for (int d = 0; d < view->ndim; d++) {
        t->shape[d] = view->shape[d];
        Py_ssize_t stride = view->strides ? view->strides[d] : 0;
        if (stride % view->itemsize != 0) {
            PyErr_Format(PyExc_ValueError, "%s has a stride of %zd bytes, not a multiple of its item size", name,
                         stride);
            return 0;
        }
        t->strides[d] = stride / view->itemsize;
    }
    uintptr_t misaligned = (uintptr_t)view->buf % (uintptr_t)view->itemsize;
    if (view->len == 0) { /* no element to read or write: the aligned address just below (the allocation */
        t->data = (char *)view->buf - misaligned; /* starts aligned) will do, for the core's typed pointers */
        return 1;
    }
    if (misaligned) {
        PyErr_Format(PyExc_ValueError, "%s is not aligned to its item size", name);
        return 0;
    }
    return 1;
}

void buffers_release(buffers *held) {
    for (int i = 0; i < held->count; i++) PyBuffer_Release(&held->views[i]);
    held->count = 0;
    if (held->more) {
        buffers_release(held->more);
        PyMem_Free(held->more);
        held->more = NULL;
    }
}

PyObject *raise_status(attnc_status status) {
    PyObject *type = PyExc_RuntimeError;
    switch (status) {
    case ATTNC_ERR_VALUE:
    case ATTNC_ERR_LAYOUT: type = PyExc_ValueError; break;
    case ATTNC_ERR_TYPE: type = PyExc_TypeError; break;
    case ATTNC_ERR_NOMEM: type = PyExc_MemoryError; break;
    case ATTNC_OK: break;
    }
    PyErr_SetString(type, attnc_last_error());
    return NULL;
}

PyObject *buffers_finish(buffers *held, attnc_status status) {
    buffers_release(held);
    if (status != ATTNC_OK) return raise_status(status);
    Py_RETURN_NONE;
}
