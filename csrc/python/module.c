/* module.c: the attnc._core_<path> extension module (one per SIMD path,
 * core/cpu.h; attnc/_dispatch.py loads one as attnc._core): the method
 * table of every family, and the configuration functions. */
#include "args.h"

#include "../core/cpu.h"

#define MODULE_STR_(x) #x
#define MODULE_STR(x) MODULE_STR_(x)
#define MODULE_INIT_(path) PyInit__core_##path
#define MODULE_INIT(path) MODULE_INIT_(path)

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg) {
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_set_num_threads(n < 0 || n > 100000 ? -1 : (int)n));
    if (st != ATTNC_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromLong(attnc_get_num_threads());
}

static PyObject *py_blas_info(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(attnc_blas_info());
}

static PyObject *py_blas_threads(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromLong(attnc_blas_threads());
}

static PyObject *py_simd_path(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(attnc_simd_path());
}

static PyObject *py_cpu_paths(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(attnc_cpu_paths());
}

static PyMethodDef config_methods[] = {{"set_num_threads", py_set_num_threads, METH_O, NULL},
                                       {"get_num_threads", py_get_num_threads, METH_NOARGS, NULL},
                                       {"blas_info", py_blas_info, METH_NOARGS, NULL},
                                       {"blas_threads", py_blas_threads, METH_NOARGS, NULL},
                                       {"simd_path", py_simd_path, METH_NOARGS, NULL},
                                       {"cpu_paths", py_cpu_paths, METH_NOARGS, NULL},
                                       {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "attnc._core_" MODULE_STR(ATTNC_SIMD_PATH),
                                    "attnc's C core (private: use the attnc package).",
                                    -1,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

PyMODINIT_FUNC MODULE_INIT(ATTNC_SIMD_PATH)(void) {
    if (!attnc_op_keys_init()) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddFunctions(m, config_methods) != 0 || PyModule_AddFunctions(m, attnc_op_methods) != 0 ||
        PyModule_AddFunctions(m, attnc_array_methods) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
