/* rnn.c (binding): LSTM and GRU. Weights travel as a list of (weight_ih,
 * weight_hh, bias_ih, bias_hh) tuples, one per layer and direction. */
#include "buffers.h"

static int parse_config(PyObject *tup, attnc_rnn_config *c) {
    int mode;
    long long hidden, layers;
    unsigned long long seed;
    if (!PyArg_ParseTuple(tup, "iLLpdK;rnn config", &mode, &hidden, &layers, &c->bidirectional, &c->dropout, &seed))
        return 0;
    c->mode = (attnc_rnn_mode)mode;
    c->hidden_size = hidden;
    c->num_layers = layers;
    c->seed = seed;
    return 1;
}

/* The weights of every layer and direction, each tuple's buffers held in its
 * own `buffers` (held[i]); *count is the number parsed, for release. */
static int parse_weights(PyObject *list, attnc_rnn_weights **out, buffers **held, Py_ssize_t *count, int writable) {
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "rnn weights must be a list of 4-tuples");
        return 0;
    }
    Py_ssize_t n = PyList_Size(list);
    *out = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof **out);
    *held = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof **held);
    *count = 0;
    if (!*out || !*held) {
        PyErr_NoMemory();
        return 0;
    }
    static const char *names[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *tup = PyList_GetItem(list, i);
        if (!PyTuple_Check(tup) || PyTuple_Size(tup) != 4) {
            PyErr_SetString(PyExc_TypeError, "rnn weights must be a list of 4-tuples");
            return 0;
        }
        attnc_tensor *slots[4] = {&(*out)[i].weight_ih, &(*out)[i].weight_hh, &(*out)[i].bias_ih, &(*out)[i].bias_hh};
        *count = i + 1;
        for (int k = 0; k < 4; k++)
            if (!buffers_get(&(*held)[i], PyTuple_GetItem(tup, k), names[k], writable, slots[k])) return 0;
    }
    return 1;
}

static void release_weights(attnc_rnn_weights *w, buffers *held, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) buffers_release(&held[i]);
    PyMem_Free(w);
    PyMem_Free(held);
}

static PyObject *py_rnn_saved_size(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *config;
    long long B, T, I;
    attnc_rnn_config c;
    if (!PyArg_ParseTuple(args, "OLLL", &config, &B, &T, &I) || !parse_config(config, &c)) return NULL;
    return PyLong_FromLongLong(attnc_rnn_saved_size(&c, B, T, I));
}

/* (output, h_n, c_n, saved, input, lengths, h0, c0, weights, config) */
static PyObject *py_rnn_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out, *hn, *cn, *saved, *x, *len, *h0, *c0, *weights, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO", &out, &hn, &cn, &saved, &x, &len, &h0, &c0, &weights, &config))
        return NULL;
    attnc_rnn_config c;
    if (!parse_config(config, &c)) return NULL;
    attnc_rnn_weights *w = NULL;
    buffers *wh = NULL, h = {.count = 0};
    Py_ssize_t nw = 0;
    attnc_tensor to, thn, tcn, ts, tx, tl, th0, tc0;
    int ok = parse_weights(weights, &w, &wh, &nw, 0) && buffers_get(&h, out, "output", 1, &to) &&
             buffers_get(&h, hn, "h_n", 1, &thn) && buffers_get(&h, cn, "c_n", 1, &tcn) &&
             buffers_get(&h, saved, "saved", 1, &ts) && buffers_get(&h, x, "input", 0, &tx) &&
             buffers_get(&h, len, "lengths", 0, &tl) && buffers_get(&h, h0, "h0", 0, &th0) &&
             buffers_get(&h, c0, "c0", 0, &tc0);
    if (ok && nw != c.num_layers * (c.bidirectional ? 2 : 1)) {
        PyErr_SetString(PyExc_ValueError, "one weight tuple per layer and direction is needed");
        ok = 0;
    }
    attnc_status st = ATTNC_OK;
    if (ok) ATTNC_NOGIL(st, attnc_rnn_forward(&to, &thn, &tcn, &ts, &tx, &tl, &th0, &tc0, w, &c));
    release_weights(w, wh, nw);
    return ok ? buffers_finish(&h, st) : (buffers_release(&h), NULL);
}

/* (dinput, dh0, dc0, grads, doutput, dh_n, dc_n, saved, input, lengths, h0, c0, weights, config) */
static PyObject *py_rnn_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dh0, *dc0, *grads, *dout, *dhn, *dcn, *saved, *x, *len, *h0, *c0, *weights, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOO", &dx, &dh0, &dc0, &grads, &dout, &dhn, &dcn, &saved, &x, &len, &h0,
                          &c0, &weights, &config))
        return NULL;
    attnc_rnn_config c;
    if (!parse_config(config, &c)) return NULL;
    attnc_rnn_weights *w = NULL, *g = NULL;
    buffers *wh = NULL, *gh = NULL, h = {.count = 0};
    Py_ssize_t nw = 0, ng = 0;
    attnc_tensor tdx, tdh0, tdc0, tdo, tdhn, tdcn, ts, tx, tl, th0, tc0;
    int ok = parse_weights(weights, &w, &wh, &nw, 0) && parse_weights(grads, &g, &gh, &ng, 1) &&
             buffers_get(&h, dx, "dinput", 1, &tdx) && buffers_get(&h, dh0, "dh0", 1, &tdh0) &&
             buffers_get(&h, dc0, "dc0", 1, &tdc0) && buffers_get(&h, dout, "doutput", 0, &tdo) &&
             buffers_get(&h, dhn, "dh_n", 0, &tdhn) && buffers_get(&h, dcn, "dc_n", 0, &tdcn) &&
             buffers_get(&h, saved, "saved", 0, &ts) && buffers_get(&h, x, "input", 0, &tx) &&
             buffers_get(&h, len, "lengths", 0, &tl) && buffers_get(&h, h0, "h0", 0, &th0) &&
             buffers_get(&h, c0, "c0", 0, &tc0);
    if (ok && (nw != c.num_layers * (c.bidirectional ? 2 : 1) || ng != nw)) {
        PyErr_SetString(PyExc_ValueError, "one weight and one gradient tuple per layer and direction are needed");
        ok = 0;
    }
    attnc_status st = ATTNC_OK;
    if (ok)
        ATTNC_NOGIL(st, attnc_rnn_backward(&tdx, &tdh0, &tdc0, g, &tdo, &tdhn, &tdcn, &ts, &tx, &tl, &th0, &tc0, w,
                                           &c));
    release_weights(w, wh, nw);
    release_weights(g, gh, ng);
    return ok ? buffers_finish(&h, st) : (buffers_release(&h), NULL);
}

PyMethodDef attnc_rnn_methods[] = {
    {"rnn_saved_size", py_rnn_saved_size, METH_VARARGS, NULL},
    {"rnn_forward", py_rnn_forward, METH_VARARGS, NULL},
    {"rnn_backward", py_rnn_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
