/* optim.c (binding): the optimisers' fused updates (attnc/optim.py). */
#include "buffers.h"

static PyObject *py_adam_step(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *p, *g, *m, *v;
    attnc_adam_options o;
    long long step;
    if (!PyArg_ParseTuple(args, "OOOOdddddpL", &p, &g, &m, &v, &o.lr, &o.beta1, &o.beta2, &o.eps,
                          &o.weight_decay, &o.decoupled, &step))
        return NULL;
    o.step = step;
    buffers h = {.count = 0};
    attnc_tensor tp, tg, tm, tv;
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, p, "param", 1, &tp) && buffers_get(&h, g, "grad", 0, &tg) &&
          buffers_get(&h, m, "exp_avg", 1, &tm) && buffers_get(&h, v, "exp_avg_sq", 1, &tv)))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_adam_step(&tp, &tg, &tm, &tv, &o));
    return buffers_finish(&h, st);
}

PyMethodDef attnc_optim_methods[] = {
    {"adam_step", py_adam_step, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
