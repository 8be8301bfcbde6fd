/* ntm.c (binding): the Neural Turing Machine's addressing and memory
 * operations. Each wrapper takes the arrays the Python layer has checked and
 * allocated (outputs first, all C-contiguous; None for an absent optional
 * cotangent), builds tensor views, and runs the C operation without the GIL. */
#include "buffers.h"

#include "../ntm/model.h"
#include "../ntm/ntm.h"

#define NTM_MAX_ARGS 24

/* t[i] <- views of the tuple args, named names[i]; the first n_out writable. */
static int get_all(buffers *h, PyObject *args, const char *const *names, int n, int n_out,
                   attnc_tensor *t) {
    if (!PyTuple_Check(args) || PyTuple_Size(args) != n) {
        PyErr_Format(PyExc_TypeError, "expected %d arrays", n);
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (!buffers_get(h, PyTuple_GetItem(args, i), names[i], i < n_out, &t[i])) return 0;
    return 1;
}

/* A wrapper NAME taking the arrays NAMES (N_OUT outputs first) and running CALL on t[]. */
#define NTM_WRAPPER(NAME, N_OUT, CALL, ...)                                         \
    static PyObject *py_##NAME(PyObject *self, PyObject *args) {                    \
        (void)self;                                                                 \
        static const char *const names[] = {__VA_ARGS__};                           \
        const int n = (int)(sizeof names / sizeof names[0]);                        \
        buffers h = {.count = 0};                                                   \
        attnc_tensor t[NTM_MAX_ARGS];                                               \
        attnc_status st = ATTNC_OK;                                                 \
        if (!get_all(&h, args, names, n, N_OUT, t)) return buffers_release(&h), NULL; \
        ATTNC_NOGIL(st, CALL);                                                      \
        return buffers_finish(&h, st);                                              \
    }

NTM_WRAPPER(ntm_content_forward, 1, attnc_ntm_content_forward(&t[0], &t[1], &t[2], &t[3]), "w",
            "key", "memory", "beta")
NTM_WRAPPER(ntm_content_backward, 3,
            attnc_ntm_content_backward(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7]),
            "dkey", "dmemory", "dbeta", "dw", "key", "memory", "beta", "w")
NTM_WRAPPER(ntm_interpolate_forward, 1,
            attnc_ntm_interpolate_forward(&t[0], &t[1], &t[2], &t[3]), "w", "w_content",
            "w_prev", "g")
NTM_WRAPPER(ntm_interpolate_backward, 3,
            attnc_ntm_interpolate_backward(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6]),
            "dw_content", "dw_prev", "dg", "dw", "w_content", "w_prev", "g")
NTM_WRAPPER(ntm_shift_forward, 1, attnc_ntm_shift_forward(&t[0], &t[1], &t[2]), "out", "w", "s")
NTM_WRAPPER(ntm_shift_backward, 2,
            attnc_ntm_shift_backward(&t[0], &t[1], &t[2], &t[3], &t[4]), "dw", "ds", "dout", "w",
            "s")
NTM_WRAPPER(ntm_sharpen_forward, 1, attnc_ntm_sharpen_forward(&t[0], &t[1], &t[2]), "out", "w",
            "gamma")
NTM_WRAPPER(ntm_sharpen_backward, 2,
            attnc_ntm_sharpen_backward(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5]), "dw", "dgamma",
            "dout", "w", "gamma", "out")
NTM_WRAPPER(ntm_read_forward, 1, attnc_ntm_read_forward(&t[0], &t[1], &t[2]), "r", "memory",
            "w")
NTM_WRAPPER(ntm_read_backward, 2, attnc_ntm_read_backward(&t[0], &t[1], &t[2], &t[3], &t[4]),
            "dmemory", "dw", "dr", "memory", "w")
NTM_WRAPPER(ntm_write_forward, 1,
            attnc_ntm_write_forward(&t[0], &t[1], &t[2], &t[3], &t[4]), "out", "memory", "w",
            "erase", "add")
NTM_WRAPPER(ntm_write_backward, 4,
            attnc_ntm_write_backward(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7],
                                     &t[8]),
            "dmemory", "dw", "derase", "dadd", "dout", "memory", "w", "erase", "add")

/* (key, beta, g, s, gamma, w_prev, memory) from t[first]. */
static attnc_ntm_address_args address_args(const attnc_tensor *t) {
    return (attnc_ntm_address_args){t[0], t[1], t[2], t[3], t[4], t[5], t[6]};
}

static attnc_status address_forward(attnc_tensor *t) {
    attnc_ntm_address_args in = address_args(t + 4);
    return attnc_ntm_address_forward(&t[0], &t[1], &t[2], &t[3], &in);
}

static attnc_status address_backward(attnc_tensor *t) {
    attnc_ntm_address_args g = address_args(t), in = address_args(t + 11);
    attnc_status st = attnc_ntm_address_backward(&g, &t[7], &t[8], &t[9], &t[10], &in, &t[18],
                                                 &t[19], &t[20], &t[21]);
    return st;
}

NTM_WRAPPER(ntm_address_forward, 4, address_forward(t), "w", "w_c", "w_g", "w_t", "key", "beta",
            "g", "s", "gamma", "w_prev", "memory")
NTM_WRAPPER(ntm_address_backward, 7, address_backward(t), "dkey", "dbeta", "dg", "ds", "dgamma",
            "dw_prev", "dmemory", "dw", "dw_c", "dw_g", "dw_t", "key", "beta", "g", "s", "gamma",
            "w_prev", "memory", "w", "w_c", "w_g", "w_t")

/* ---- the NTM model (attnc.models.NTM) ----------------------------------------
 * Parameters travel as a tuple of 8 arrays (controller w_ih, w_hh, b_ih,
 * b_hh, heads w, b, output w, b; None for the feedforward controller's
 * absent w_hh, b_hh), the state as (memory, reads, weights), the config as
 * (lstm, read_heads, write_heads, clip). */

static const char *const MODEL_PARAMS[8] = {"controller.weight_ih", "controller.weight_hh", "controller.bias_ih",
                                            "controller.bias_hh",   "heads.weight",         "heads.bias",
                                            "output.weight",        "output.bias"};

static int parse_config(PyObject *tup, attnc_ntm_config *c) {
    int lstm;
    long long r, w;
    if (!PyArg_ParseTuple(tup, "pLLd;NTM config", &lstm, &r, &w, &c->clip)) return 0;
    c->lstm = lstm;
    c->read_heads = r;
    c->write_heads = w;
    return 1;
}

static int parse_params(PyObject *tup, buffers *h, int writable, attnc_ntm_params *p) {
    attnc_tensor *slots[8] = {&p->w_ih, &p->w_hh, &p->b_ih, &p->b_hh, &p->head_w, &p->head_b, &p->out_w, &p->out_b};
    if (!PyTuple_Check(tup) || PyTuple_Size(tup) != 8) {
        PyErr_SetString(PyExc_TypeError, "NTM parameters must be a tuple of 8 arrays");
        return 0;
    }
    for (int i = 0; i < 8; i++)
        if (!buffers_get(h, PyTuple_GetItem(tup, i), MODEL_PARAMS[i], writable, slots[i])) return 0;
    return 1;
}

static int parse_state(PyObject *tup, buffers *h, int writable, attnc_ntm_state *s) {
    if (!PyTuple_Check(tup) || PyTuple_Size(tup) != 3) {
        PyErr_SetString(PyExc_TypeError, "the NTM state must be a tuple (memory, reads, weights)");
        return 0;
    }
    return buffers_get(h, PyTuple_GetItem(tup, 0), "memory", writable, &s->memory) &&
           buffers_get(h, PyTuple_GetItem(tup, 1), "reads", writable, &s->reads) &&
           buffers_get(h, PyTuple_GetItem(tup, 2), "weights", writable, &s->weights);
}

/* (B, T, I, C, N, M, P, config) */
static PyObject *py_ntm_saved_size(PyObject *self, PyObject *args) {
    (void)self;
    long long B, T, I, C, N, M, P;
    PyObject *config;
    attnc_ntm_config c;
    if (!PyArg_ParseTuple(args, "LLLLLLLO", &B, &T, &I, &C, &N, &M, &P, &config) || !parse_config(config, &c))
        return NULL;
    return PyLong_FromLongLong(attnc_ntm_saved_size(B, T, I, C, N, M, P, &c));
}

/* (logits, weights, memories, saved, inputs, init, params, config) */
static PyObject *py_ntm_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *logits, *weights, *memories, *saved, *inputs, *init, *params, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &logits, &weights, &memories, &saved, &inputs, &init, &params, &config))
        return NULL;
    attnc_ntm_config c;
    if (!parse_config(config, &c)) return NULL;
    buffers h = {.count = 0};
    attnc_ntm_params p;
    attnc_ntm_state s;
    attnc_tensor tl, tw, tm, tsv, ti;
    int ok = parse_params(params, &h, 0, &p) && parse_state(init, &h, 0, &s) &&
             buffers_get(&h, logits, "logits", 1, &tl) && buffers_get(&h, weights, "weights", 1, &tw) &&
             buffers_get(&h, memories, "memories", 1, &tm) && buffers_get(&h, saved, "saved", 1, &tsv) &&
             buffers_get(&h, inputs, "inputs", 0, &ti);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_ntm_forward(&tl, &tw, &tm, &tsv, &ti, &s, &p, &c));
    return buffers_finish(&h, st);
}

/* (grads, dinit, dinputs, dlogits, saved, inputs, init, params, config) */
static PyObject *py_ntm_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *grads, *dinit, *dinputs, *dlogits, *saved, *inputs, *init, *params, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &grads, &dinit, &dinputs, &dlogits, &saved, &inputs, &init, &params,
                          &config))
        return NULL;
    attnc_ntm_config c;
    if (!parse_config(config, &c)) return NULL;
    buffers h = {.count = 0};
    attnc_ntm_params p, g;
    attnc_ntm_state s, ds;
    attnc_tensor tdi, tdl, tsv, ti;
    int ok = parse_params(params, &h, 0, &p) && parse_params(grads, &h, 1, &g) && parse_state(init, &h, 0, &s) &&
             parse_state(dinit, &h, 1, &ds) && buffers_get(&h, dinputs, "dinputs", 1, &tdi) &&
             buffers_get(&h, dlogits, "dlogits", 0, &tdl) && buffers_get(&h, saved, "saved", 0, &tsv) &&
             buffers_get(&h, inputs, "inputs", 0, &ti);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_ntm_backward(&g, &ds, &tdi, &tdl, &tsv, &ti, &s, &p, &c));
    return buffers_finish(&h, st);
}

#define M(name) {#name, py_##name, METH_VARARGS, NULL}
PyMethodDef attnc_ntm_methods[] = {M(ntm_content_forward),
                                   M(ntm_content_backward),
                                   M(ntm_interpolate_forward),
                                   M(ntm_interpolate_backward),
                                   M(ntm_shift_forward),
                                   M(ntm_shift_backward),
                                   M(ntm_sharpen_forward),
                                   M(ntm_sharpen_backward),
                                   M(ntm_read_forward),
                                   M(ntm_read_backward),
                                   M(ntm_write_forward),
                                   M(ntm_write_backward),
                                   M(ntm_address_forward),
                                   M(ntm_address_backward),
                                   M(ntm_saved_size),
                                   M(ntm_forward),
                                   M(ntm_backward),
                                   {NULL, NULL, 0, NULL}};
