/* args.h: what the generated wrappers (gen_binding.py) use to read their
 * keyword arguments. Every function returns 1, or 0 with a Python exception
 * that names the argument and what was wrong. `value` NULL: not passed. */
#ifndef ATTNC_PY_ARGS_H
#define ATTNC_PY_ARGS_H
#include <stdint.h>

#include "buffers.h"

/* Intern n keyword names into keys (once, at module init). */
int args_intern(const char *const *names, PyObject **keys, int n);

/* Sort a vectorcall's keyword arguments into values (by the index of their
 * name in keys); positional arguments and unknown names are TypeErrors. */
int args_take(const char *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject *const *keys, int n,
              PyObject **values);

int args_double(PyObject *value, const char *name, int has_default, double dflt, double lo, double hi, double *out);
int args_int64(PyObject *value, const char *name, int has_default, int64_t dflt, int64_t lo, int64_t hi, int64_t *out);
int args_enum(PyObject *value, const char *name, int has_default, int64_t dflt, int64_t lo, int64_t hi, int64_t *out);
int args_uint64(PyObject *value, const char *name, int has_default, uint64_t dflt, uint64_t *out);
int args_bool(PyObject *value, const char *name, int has_default, int dflt, int *out);
/* n int64s from a sequence of n ints. */
int args_ints(PyObject *value, const char *name, int n, int64_t *out);

/* The values of a dict's keys (each one of `keys`, interned names) into
 * values (left NULL where absent: values starts zeroed). */
int args_dict(PyObject *value, const char *name, PyObject *const *keys, int n, PyObject **values);
/* A list: its length, and *items <- zeroed memory for that many structs of
 * `size` bytes (PyMem_Free it). */
int args_list(PyObject *value, const char *name, size_t size, void **items, Py_ssize_t *count);

/* The method table the generator writes, and the keys it interns. */
extern PyMethodDef attnc_op_methods[];
int attnc_op_keys_init(void);

#endif
