/* args.c: keyword arguments of the generated wrappers (args.h). */
#include "args.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int args_intern(const char *const *names, PyObject **keys, int n) {
    for (int i = 0; i < n; i++)
        if (!(keys[i] = PyUnicode_InternFromString(names[i]))) return 0;
    return 1;
}

/* The index of key among keys, or -1: the interned object first (a call
 * written with keywords passes those), starting where the previous one
 * matched (callers pass them in table order); then by value. */
static int find_key(PyObject *key, PyObject *const *keys, int n, int hint) {
    for (int j = 0; j < n; j++) {
        int i = (hint + j) % n;
        if (keys[i] == key) return i;
    }
    for (int i = 0; i < n; i++)
        if (PyUnicode_Compare(keys[i], key) == 0) return i;
    return -1;
}

int args_take(const char *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject *const *keys, int n,
              PyObject **values) {
    if (nargs != 0) {
        PyErr_Format(PyExc_TypeError, "%s() takes keyword arguments only, got %zd positional", op, nargs);
        return 0;
    }
    Py_ssize_t count = kwnames ? PyTuple_Size(kwnames) : 0;
    int hint = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *key = PyTuple_GetItem(kwnames, k);
        int i = n ? find_key(key, keys, n, hint) : -1;
        if (i < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", op, key);
            return 0;
        }
        values[i] = args[k];
        hint = i + 1;
    }
    return 1;
}

/* 1: take the default (the keyword not passed, or None), 0: read the value,
 * -1: a required argument is missing (the exception is set). None is never
 * a value: a required scalar given None is missing, not defaulted. */
static int defaulted(PyObject *value, const char *name, int has_default) {
    if (value && value != Py_None) return 0;
    if (has_default) return 1;
    PyErr_Format(PyExc_TypeError, "missing required argument '%s'", name);
    return -1;
}

int args_double(PyObject *value, const char *name, int has_default, double dflt, double lo, double hi, double *out) {
    int d = defaulted(value, name, has_default);
    if (d) {
        if (d > 0) *out = dflt;
        return d > 0;
    }
    double x = PyFloat_AsDouble(value);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s must be a number, got %R", name, value);
        return 0;
    }
    if (isnan(x)) {
        PyErr_Format(PyExc_ValueError, "%s must be a number, got nan", name);
        return 0;
    }
    if (!(x >= lo && x <= hi)) {
        char message[256];
        snprintf(message, sizeof message, "%s must be in [%g, %g], got %g", name, lo, hi, x);
        PyErr_SetString(PyExc_ValueError, message);
        return 0;
    }
    *out = x;
    return 1;
}

int args_int64(PyObject *value, const char *name, int has_default, int64_t dflt, int64_t lo, int64_t hi, int64_t *out) {
    int d = defaulted(value, name, has_default);
    if (d) {
        if (d > 0) *out = dflt;
        return d > 0;
    }
    long long x = PyLong_AsLongLong(value);
    if (x == -1 && PyErr_Occurred()) {
        int overflow = PyErr_ExceptionMatches(PyExc_OverflowError);
        PyErr_Clear();
        PyErr_Format(overflow ? PyExc_ValueError : PyExc_TypeError, "%s must be an int%s, got %R", name,
                     overflow ? " that fits in 64 bits" : "", value);
        return 0;
    }
    if (x < lo || x > hi) {
        PyErr_Format(PyExc_ValueError, "%s must be in [%lld, %lld], got %lld", name, (long long)lo, (long long)hi, x);
        return 0;
    }
    *out = x;
    return 1;
}

int args_enum(PyObject *value, const char *name, int has_default, int64_t dflt, int64_t lo, int64_t hi, int64_t *out) {
    return args_int64(value, name, has_default, dflt, lo, hi, out);
}

int args_uint64(PyObject *value, const char *name, int has_default, uint64_t dflt, uint64_t *out) {
    int d = defaulted(value, name, has_default);
    if (d) {
        if (d > 0) *out = dflt;
        return d > 0;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(value);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an int in [0, 2**64), got %R", name, value);
        return 0;
    }
    *out = x;
    return 1;
}

int args_bool(PyObject *value, const char *name, int has_default, int dflt, int *out) {
    int d = defaulted(value, name, has_default);
    if (d) {
        if (d > 0) *out = dflt;
        return d > 0;
    }
    int x = PyObject_IsTrue(value);
    if (x < 0) return 0;
    *out = x;
    return 1;
}

int args_ints(PyObject *value, const char *name, int n, int64_t *out) {
    if (defaulted(value, name, 0)) return 0;
    if (!PySequence_Check(value) || PySequence_Size(value) != n) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of %d ints, got %R", name, n, value);
        return 0;
    }
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        PyObject *item = PySequence_GetItem(value, i);
        ok = item && args_int64(item, name, 0, 0, INT64_MIN, INT64_MAX, &out[i]);
        Py_XDECREF(item);
    }
    return ok;
}

/* A TypeError naming what value is (its repr could be a stack of arrays); returns 0. */
static int wrong_type(const char *name, const char *expected, PyObject *value) {
    PyObject *type = PyType_GetName(Py_TYPE(value));
    if (type) PyErr_Format(PyExc_TypeError, "%s must be a %s, got %S", name, expected, type);
    Py_XDECREF(type);
    return 0;
}

int args_dict(PyObject *value, const char *name, PyObject *const *keys, int n, PyObject **values) {
    if (defaulted(value, name, 0)) return 0;
    if (!PyDict_Check(value)) return wrong_type(name, "dict", value);
    /* Each item to its member by its key, as args_take matches keywords: the
     * dicts are written with literal keys (interned) in table order, so a
     * pointer comparison at the hint finds it; nothing is hashed or looked up,
     * and a key that is no member is named. */
    PyObject *key, *item;
    Py_ssize_t pos = 0;
    int hint = 0;
    while (PyDict_Next(value, &pos, &key, &item)) {
        int i = n && PyUnicode_Check(key) ? find_key(key, keys, n, hint) : -1;
        if (i < 0) {
            PyErr_Format(PyExc_TypeError, "%s has an unexpected key %R", name, key);
            return 0;
        }
        values[i] = item; /* borrowed */
        hint = i + 1;
    }
    return 1;
}

int args_list(PyObject *value, const char *name, size_t size, void **items, Py_ssize_t *count) {
    if (defaulted(value, name, 0)) return 0;
    if (!PyList_Check(value)) return wrong_type(name, "list", value);
    *count = PyList_Size(value);
    *items = PyMem_Calloc((size_t)(*count > 0 ? *count : 1), size);
    if (!*items) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}
