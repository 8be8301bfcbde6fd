/* lstmn.c (binding): attnc.nn.LSTMN's whole-sequence forward and backward.
 * Parameters travel as a tuple of 7 arrays (weight_ih, weight_hh, bias or
 * None, attn_h.weight, attn_x.weight, attn_tilde.weight, attn_v); every
 * array has been checked and allocated by the Python layer (outputs first,
 * C-contiguous; None for an absent optional one). */
#include "buffers.h"

static const char *const LSTMN_PARAMS[7] = {"weight_ih",     "weight_hh",         "bias",  "attn_h.weight",
                                            "attn_x.weight", "attn_tilde.weight", "attn_v"};

static int parse_params(PyObject *tup, buffers *h, int writable, attnc_lstmn_params *p) {
    attnc_tensor *slots[7] = {&p->weight_ih, &p->weight_hh,  &p->bias,  &p->attn_h,
                              &p->attn_x,    &p->attn_tilde, &p->attn_v};
    if (!PyTuple_Check(tup) || PyTuple_Size(tup) != 7) {
        PyErr_SetString(PyExc_TypeError, "LSTMN parameters must be a tuple of 7 arrays");
        return 0;
    }
    for (int i = 0; i < 7; i++)
        if (!buffers_get(h, PyTuple_GetItem(tup, i), LSTMN_PARAMS[i], writable, slots[i])) return 0;
    return 1;
}

/* (B, T, H, A) */
static PyObject *py_lstmn_saved_size(PyObject *self, PyObject *args) {
    (void)self;
    long long B, T, H, A;
    if (!PyArg_ParseTuple(args, "LLLL", &B, &T, &H, &A)) return NULL;
    return PyLong_FromLongLong(attnc_lstmn_saved_size(B, T, H, A));
}

/* (output, attention, saved, input, lengths, params) */
static PyObject *py_lstmn_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *output, *attention, *saved, *input, *lengths, *params;
    if (!PyArg_ParseTuple(args, "OOOOOO", &output, &attention, &saved, &input, &lengths, &params)) return NULL;
    buffers h = {.count = 0};
    attnc_lstmn_params p;
    attnc_tensor to, ta, ts, ti, tl;
    int ok = parse_params(params, &h, 0, &p) && buffers_get(&h, output, "output", 1, &to) &&
             buffers_get(&h, attention, "attention", 1, &ta) && buffers_get(&h, saved, "saved", 1, &ts) &&
             buffers_get(&h, input, "input", 0, &ti) && buffers_get(&h, lengths, "lengths", 0, &tl);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_lstmn_forward(&to, &ta, &ts, &ti, &tl, &p));
    return buffers_finish(&h, st);
}

/* (grads, dinput, doutput, saved, input, lengths, params) */
static PyObject *py_lstmn_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *grads, *dinput, *doutput, *saved, *input, *lengths, *params;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &grads, &dinput, &doutput, &saved, &input, &lengths, &params))
        return NULL;
    buffers h = {.count = 0};
    attnc_lstmn_params p, g;
    attnc_tensor tdi, tdo, ts, ti, tl;
    int ok = parse_params(params, &h, 0, &p) && parse_params(grads, &h, 1, &g) &&
             buffers_get(&h, dinput, "dinput", 1, &tdi) && buffers_get(&h, doutput, "doutput", 0, &tdo) &&
             buffers_get(&h, saved, "saved", 0, &ts) && buffers_get(&h, input, "input", 0, &ti) &&
             buffers_get(&h, lengths, "lengths", 0, &tl);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_lstmn_backward(&g, &tdi, &tdo, &ts, &ti, &tl, &p));
    return buffers_finish(&h, st);
}

#define M(name) {#name, py_##name, METH_VARARGS, NULL}
PyMethodDef attnc_lstmn_methods[] = {M(lstmn_saved_size), M(lstmn_forward), M(lstmn_backward), {NULL, NULL, 0, NULL}};
