/* captioner.c (binding): the show-attend-tell decoder of attnc.models.Captioner.
 * Parameters travel as one tuple of 19 arrays (None for the absent gate), in
 * the order of PARAM_NAMES; the config as (mode, gate, seed[, expect_prob]). */
#include "../captioner/captioner.h"
#include "buffers.h"

enum { NPARAMS = 19 };

static const char *PARAM_NAMES[NPARAMS] = {
    "embedding.weight", "init_h.weight", "init_h.bias", "init_c.weight", "init_c.bias",
    "attention.feature.weight", "attention.feature.bias", "attention.hidden.weight", "attention.score.weight",
    "gate.weight", "gate.bias", "decoder.weight_ih", "decoder.weight_hh", "decoder.bias_ih", "decoder.bias_hh",
    "out_hidden.weight", "out_context.weight", "output.weight", "output.bias"};

static int parse_config(PyObject *tup, attnc_captioner_config *c) {
    int mode, gate;
    unsigned long long seed;
    double expect = 0;
    if (!PyArg_ParseTuple(tup, "ipK|d;captioner config", &mode, &gate, &seed, &expect)) return 0;
    c->expect_prob = expect;
    c->mode = (attnc_caption_mode)mode;
    c->gate = gate;
    c->seed = seed;
    return 1;
}

/* The 19 parameter arrays of tup into p, their buffers held in h. */
static int parse_params(PyObject *tup, buffers *h, int writable, attnc_captioner_params *p) {
    if (!PyTuple_Check(tup) || PyTuple_Size(tup) != NPARAMS) {
        PyErr_Format(PyExc_TypeError, "captioner parameters must be a tuple of %d arrays", NPARAMS);
        return 0;
    }
    attnc_tensor *slots[NPARAMS] = {&p->embedding, &p->init_h_w, &p->init_h_b, &p->init_c_w, &p->init_c_b,
                                    &p->att_feat_w, &p->att_feat_b, &p->att_hidden_w, &p->att_score_w,
                                    &p->gate_w, &p->gate_b, &p->w_ih, &p->w_hh, &p->b_ih, &p->b_hh,
                                    &p->out_h_w, &p->out_z_w, &p->out_w, &p->out_b};
    for (int i = 0; i < NPARAMS; i++)
        if (!buffers_get(h, PyTuple_GetItem(tup, i), PARAM_NAMES[i], writable, slots[i])) return 0;
    return 1;
}

static PyObject *py_saved_size(PyObject *self, PyObject *args) {
    (void)self;
    long long B, T, L, F, E, H, A;
    if (!PyArg_ParseTuple(args, "LLLLLLL", &B, &T, &L, &F, &E, &H, &A)) return NULL;
    return PyLong_FromLongLong(attnc_captioner_saved_size(B, T, L, F, E, H, A));
}

/* (logits, alphas, samples, saved, features, tokens, params, config) */
static PyObject *py_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *logits, *alphas, *samples, *saved, *features, *tokens, *params, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &logits, &alphas, &samples, &saved, &features, &tokens, &params, &config))
        return NULL;
    attnc_captioner_config c;
    if (!parse_config(config, &c)) return NULL;
    buffers h = {.count = 0};
    attnc_captioner_params p;
    attnc_tensor tl, ta, ts, tsv, tf, tt;
    int ok = parse_params(params, &h, 0, &p) && buffers_get(&h, logits, "logits", 1, &tl) &&
             buffers_get(&h, alphas, "alphas", 1, &ta) &&
             buffers_get(&h, samples, "samples", c.mode != ATTNC_CAPTION_HARD_GIVEN, &ts) &&
             buffers_get(&h, saved, "saved", 1, &tsv) && buffers_get(&h, features, "features", 0, &tf) &&
             buffers_get(&h, tokens, "tokens", 0, &tt);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_captioner_forward(&tl, &ta, &ts, &tsv, &tf, &tt, &p, &c));
    return buffers_finish(&h, st);
}

/* (grads, dfeatures, dlogits, dalphas, dlogp, saved, features, tokens, samples, params, config) */
static PyObject *py_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *grads, *dfeatures, *dlogits, *dalphas, *dlogp, *saved, *features, *tokens, *samples, *params, *config;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &grads, &dfeatures, &dlogits, &dalphas, &dlogp, &saved, &features,
                          &tokens, &samples, &params, &config))
        return NULL;
    attnc_captioner_config c;
    if (!parse_config(config, &c)) return NULL;
    buffers h = {.count = 0};
    attnc_captioner_params p, g;
    attnc_tensor tdf, tdl, tda, tdp, tsv, tf, tt, ts;
    int ok = parse_params(params, &h, 0, &p) && parse_params(grads, &h, 1, &g) &&
             buffers_get(&h, dfeatures, "dfeatures", 1, &tdf) && buffers_get(&h, dlogits, "dlogits", 0, &tdl) &&
             buffers_get(&h, dalphas, "dalphas", 0, &tda) && buffers_get(&h, dlogp, "dlogp", 0, &tdp) &&
             buffers_get(&h, saved, "saved", 0, &tsv) && buffers_get(&h, features, "features", 0, &tf) &&
             buffers_get(&h, tokens, "tokens", 0, &tt) && buffers_get(&h, samples, "samples", 0, &ts);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_captioner_backward(&g, &tdf, &tdl, &tda, &tdp, &tsv, &tf, &tt, &ts, &p, &c));
    return buffers_finish(&h, st);
}

/* (tokens, lengths, alphas, features, params, config, bos, eos, beam_size, length_penalty) */
static PyObject *py_generate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tokens, *lengths, *alphas, *features, *params, *config;
    long long bos, eos, beam;
    double penalty;
    if (!PyArg_ParseTuple(args, "OOOOOOLLLd", &tokens, &lengths, &alphas, &features, &params, &config, &bos, &eos,
                          &beam, &penalty))
        return NULL;
    attnc_captioner_config c;
    if (!parse_config(config, &c)) return NULL;
    buffers h = {.count = 0};
    attnc_captioner_params p;
    attnc_tensor tt, tl, ta, tf;
    int ok = parse_params(params, &h, 0, &p) && buffers_get(&h, tokens, "tokens", 1, &tt) &&
             buffers_get(&h, lengths, "lengths", 1, &tl) && buffers_get(&h, alphas, "alphas", 1, &ta) &&
             buffers_get(&h, features, "features", 0, &tf);
    if (!ok) return buffers_release(&h), NULL;
    attnc_status st;
    ATTNC_NOGIL(st, attnc_captioner_generate(&tt, &tl, &ta, &tf, &p, &c, bos, eos, beam, penalty));
    return buffers_finish(&h, st);
}

PyMethodDef attnc_captioner_methods[] = {
    {"captioner_saved_size", py_saved_size, METH_VARARGS, NULL},
    {"captioner_forward", py_forward, METH_VARARGS, NULL},
    {"captioner_backward", py_backward, METH_VARARGS, NULL},
    {"captioner_generate", py_generate, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
