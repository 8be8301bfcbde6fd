/* seq2seq.c (binding): the recurrent attention decoder of
 * attnc.models.Seq2Seq. Weights travel as a 17-tuple in attnc_s2s_weights'
 * order (None: absent); the config as (attention, window, sampling, seed). */
#include "buffers.h"

static const char *WEIGHT_NAMES[17] = {"embedding",    "weight_ih",      "weight_hh",      "bias_ih",
                                       "bias_hh",      "bridge_weight",  "bridge_bias",    "query_weight",
                                       "key_weight",   "v",              "weight",         "bias",
                                       "position_weight", "position_v",  "combine",        "out_weight",
                                       "out_bias"};

static attnc_tensor *weight_slot(attnc_s2s_weights *w, int i) {
    attnc_tensor *slots[17] = {&w->embedding,    &w->weight_ih,   &w->weight_hh,       &w->bias_ih,
                               &w->bias_hh,      &w->bridge_weight, &w->bridge_bias,   &w->query_weight,
                               &w->key_weight,   &w->v,           &w->weight,          &w->bias,
                               &w->position_weight, &w->position_v, &w->combine,       &w->out_weight,
                               &w->out_bias};
    return slots[i];
}

static int parse_weights(buffers *h, PyObject *tup, attnc_s2s_weights *w, int writable) {
    if (!PyTuple_Check(tup) || PyTuple_Size(tup) != 17) {
        PyErr_SetString(PyExc_TypeError, "decoder weights must be a 17-tuple");
        return 0;
    }
    for (int i = 0; i < 17; i++)
        if (!buffers_get(h, PyTuple_GetItem(tup, i), WEIGHT_NAMES[i], writable, weight_slot(w, i))) return 0;
    return 1;
}

static int parse_config(PyObject *tup, attnc_s2s_config *c) {
    int kind;
    unsigned long long seed;
    if (!PyArg_ParseTuple(tup, "iddK;decoder config", &kind, &c->window, &c->sampling, &seed)) return 0;
    c->attention = (attnc_s2s_attention)kind;
    c->seed = seed;
    return 1;
}

/* (config, weights, B, S, T) */
static PyObject *py_s2s_saved_size(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *config, *weights;
    long long B, S, T;
    if (!PyArg_ParseTuple(args, "OOLLL", &config, &weights, &B, &S, &T)) return NULL;
    attnc_s2s_config c;
    attnc_s2s_weights w = {0};
    buffers h = {.count = 0};
    if (!parse_config(config, &c) || !parse_weights(&h, weights, &w, 0)) return buffers_release(&h), NULL;
    long long n = attnc_s2s_saved_size(&c, &w, B, S, T);
    buffers_release(&h);
    return PyLong_FromLongLong(n);
}

/* (features, alignments, fed, saved, memory, final, lengths, tgt_in, weights, config) */
static PyObject *py_s2s_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *feat, *align, *fed, *saved, *mem, *fin, *len, *tgt, *weights, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO", &feat, &align, &fed, &saved, &mem, &fin, &len, &tgt, &weights, &config))
        return NULL;
    attnc_s2s_config c;
    attnc_s2s_weights w = {0};
    attnc_tensor tf, ta, tfed, ts, tm, tfin, tl, tt;
    buffers h = {.count = 0};
    int ok = parse_config(config, &c) && parse_weights(&h, weights, &w, 0) &&
             buffers_get(&h, feat, "features", 1, &tf) && buffers_get(&h, align, "alignments", 1, &ta) &&
             buffers_get(&h, fed, "fed", 1, &tfed) && buffers_get(&h, saved, "saved", 1, &ts) &&
             buffers_get(&h, mem, "memory", 0, &tm) && buffers_get(&h, fin, "final", 0, &tfin) &&
             buffers_get(&h, len, "lengths", 0, &tl) && buffers_get(&h, tgt, "tgt_in", 0, &tt);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_s2s_forward(&tf, &ta, &tfed, &ts, &tm, &tfin, &tl, &tt, &w, &c));
    return buffers_finish(&h, st);
}

/* (dmemory, dfinal, grads, dfeatures, saved, fed, memory, final, lengths, weights, config) */
static PyObject *py_s2s_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dmem, *dfin, *grads, *dfeat, *saved, *fed, *mem, *fin, *len, *weights, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &dmem, &dfin, &grads, &dfeat, &saved, &fed, &mem, &fin, &len,
                          &weights, &config))
        return NULL;
    attnc_s2s_config c;
    attnc_s2s_weights w = {0}, g = {0};
    attnc_tensor tdm, tdf, tdfeat, ts, tfed, tm, tfin, tl;
    buffers h = {.count = 0};
    int ok = parse_config(config, &c) && parse_weights(&h, weights, &w, 0) && parse_weights(&h, grads, &g, 1) &&
             buffers_get(&h, dmem, "dmemory", 1, &tdm) && buffers_get(&h, dfin, "dfinal", 1, &tdf) &&
             buffers_get(&h, dfeat, "dfeatures", 0, &tdfeat) && buffers_get(&h, saved, "saved", 0, &ts) &&
             buffers_get(&h, fed, "fed", 0, &tfed) && buffers_get(&h, mem, "memory", 0, &tm) &&
             buffers_get(&h, fin, "final", 0, &tfin) && buffers_get(&h, len, "lengths", 0, &tl);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_s2s_backward(&tdm, &tdf, &g, &tdfeat, &ts, &tfed, &tm, &tfin, &tl, &w, &c));
    return buffers_finish(&h, st);
}

/* (tokens, out_lengths, alignments, memory, final, lengths, weights, config, bos, eos, beam, length_penalty) */
static PyObject *py_s2s_generate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tok, *olen, *align, *mem, *fin, *len, *weights, *config;
    long long bos, eos, beam;
    double penalty;
    if (!PyArg_ParseTuple(args, "OOOOOOOOLLLd", &tok, &olen, &align, &mem, &fin, &len, &weights, &config, &bos, &eos,
                          &beam, &penalty))
        return NULL;
    attnc_s2s_config c;
    attnc_s2s_weights w = {0};
    attnc_tensor tt, tol, ta, tm, tfin, tl;
    buffers h = {.count = 0};
    int ok = parse_config(config, &c) && parse_weights(&h, weights, &w, 0) && buffers_get(&h, tok, "tokens", 1, &tt) &&
             buffers_get(&h, olen, "out_lengths", 1, &tol) && buffers_get(&h, align, "alignments", 1, &ta) &&
             buffers_get(&h, mem, "memory", 0, &tm) && buffers_get(&h, fin, "final", 0, &tfin) &&
             buffers_get(&h, len, "lengths", 0, &tl);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_s2s_generate(&tt, &tol, &ta, &tm, &tfin, &tl, &w, &c, bos, eos, beam, penalty));
    return buffers_finish(&h, st);
}

PyMethodDef attnc_seq2seq_methods[] = {
    {"s2s_generate", py_s2s_generate, METH_VARARGS, NULL},
    {"s2s_saved_size", py_s2s_saved_size, METH_VARARGS, NULL},
    {"s2s_forward", py_s2s_forward, METH_VARARGS, NULL},
    {"s2s_backward", py_s2s_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
