/* buffers.h: Python buffers -> attnc tensor views, and C status -> Python
 * exceptions. The only Python-aware code besides the wrappers. */
#ifndef ATTNC_PY_BUFFERS_H
#define ATTNC_PY_BUFFERS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../include/attnc.h"

#define ATTNC_MAX_BUFFERS 64

/* The buffers one call holds; release them all with buffers_release. Past
 * ATTNC_MAX_BUFFERS (a stack of layers' weights) they go on in `more`, a
 * chain of further blocks on the heap: a held view never moves. */
typedef struct buffers {
    Py_buffer views[ATTNC_MAX_BUFFERS];
    int count;
    struct buffers *more;
} buffers;

/* t <- a view of obj (None or NULL, an argument not passed: absent,
 * t->data = NULL). Returns 0 and sets a Python exception naming `name` on
 * failure. */
int buffers_get(buffers *held, PyObject *obj, const char *name, int writable, attnc_tensor *t);
void buffers_release(buffers *held);

/* Set the Python exception for a failed status; returns NULL. */
PyObject *raise_status(attnc_status status);

/* End a call: release the buffers, then None, or the exception of a failed
 * status (NULL). */
PyObject *buffers_finish(buffers *held, attnc_status status);

/* Run a C call without the GIL. */
#define ATTNC_NOGIL(status, call)            \
    Py_BEGIN_ALLOW_THREADS(status) = (call); \
    Py_END_ALLOW_THREADS

/* The functions of each family, for the module table. */
extern PyMethodDef attnc_array_methods[];

#endif
