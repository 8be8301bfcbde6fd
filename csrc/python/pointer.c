/* pointer.c (binding): the pointer network's constrained decoding
 * (attnc.models.PointerNet.generate). Parameters travel as the tuple
 * (w_ih, w_hh, b_ih, b_hh, w2, v, start). */
#include "../pointer/pointer.h"
#include "buffers.h"

static const char *const PARAMS[7] = {"decoder.weight_ih_l0", "decoder.weight_hh_l0", "decoder.bias_ih_l0",
                                      "decoder.bias_hh_l0",   "W2.weight",            "v",
                                      "start"};

/* (out, lengths, logits or None, inputs, input_lengths, keys, h0, c0, params, constraint, beam_size,
 * length_penalty) */
static PyObject *py_pointer_decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out, *lengths, *logits, *inputs, *nlen, *keys, *h0, *c0, *params;
    int constraint;
    long long beam;
    double penalty;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOiLd", &out, &lengths, &logits, &inputs, &nlen, &keys, &h0, &c0, &params,
                          &constraint, &beam, &penalty))
        return NULL;
    if (!PyTuple_Check(params) || PyTuple_Size(params) != 7) {
        PyErr_SetString(PyExc_TypeError, "pointer parameters must be a tuple of 7 arrays");
        return NULL;
    }
    buffers h = {.count = 0};
    attnc_pointer_params p;
    attnc_tensor *slots[7] = {&p.w_ih, &p.w_hh, &p.b_ih, &p.b_hh, &p.w2, &p.v, &p.start};
    attnc_tensor to, tl, tg, ti, tn, tk, th, tc;
    int ok = 1;
    for (int i = 0; i < 7 && ok; i++) ok = buffers_get(&h, PyTuple_GetItem(params, i), PARAMS[i], 0, slots[i]);
    ok = ok && buffers_get(&h, out, "out", 1, &to) && buffers_get(&h, lengths, "lengths", 1, &tl) &&
         buffers_get(&h, logits, "logits", 1, &tg) &&
         buffers_get(&h, inputs, "inputs", 0, &ti) && buffers_get(&h, nlen, "input_lengths", 0, &tn) &&
         buffers_get(&h, keys, "keys", 0, &tk) && buffers_get(&h, h0, "h0", 0, &th) &&
         buffers_get(&h, c0, "c0", 0, &tc);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_pointer_decode(&to, &tl, &tg, &ti, &tn, &tk, &th, &tc, &p,
                                         (attnc_pointer_constraint)constraint, beam, penalty));
    return buffers_finish(&h, st);
}

PyMethodDef attnc_pointer_methods[] = {{"pointer_decode", py_pointer_decode, METH_VARARGS, NULL},
                                       {NULL, NULL, 0, NULL}};
