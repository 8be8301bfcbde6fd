/* transformer.c (binding): transformer layers. Parameters travel as one
 * tuple in a fixed order (PARAM_NAMES below, mirrored by
 * attnc/nn/transformer.py), config and masks as small tuples. */
#include "buffers.h"

enum { NPARAMS = 18 };

static const char *PARAM_NAMES[NPARAMS] = {
    "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
    "self_attn.out_proj.bias", "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias",
    "multihead_attn.out_proj.weight", "multihead_attn.out_proj.bias", "linear1.weight",
    "linear1.bias", "linear2.weight", "linear2.bias", "norm_self.weight", "norm_self.bias",
    "norm_cross.weight", "norm_cross.bias", "norm_ff.weight", "norm_ff.bias"};

/* The struct's tensors in PARAM_NAMES order. */
static attnc_tensor *param_slot(attnc_layer_params *p, int i) {
    attnc_tensor *slots[NPARAMS] = {
        &p->self_attn.in_weight,  &p->self_attn.in_bias,  &p->self_attn.out_weight,
        &p->self_attn.out_bias,   &p->cross_attn.in_weight, &p->cross_attn.in_bias,
        &p->cross_attn.out_weight, &p->cross_attn.out_bias, &p->linear1_weight,
        &p->linear1_bias,         &p->linear2_weight,     &p->linear2_bias,
        &p->norm_self.weight,     &p->norm_self.bias,     &p->norm_cross.weight,
        &p->norm_cross.bias,      &p->norm_ff.weight,     &p->norm_ff.bias};
    return slots[i];
}

static int parse_params(buffers *h, PyObject *tup, attnc_layer_params *p, int writable) {
    if (!PyTuple_Check(tup) || PyTuple_Size(tup) != NPARAMS) {
        PyErr_Format(PyExc_TypeError, "layer parameters must be a tuple of %d arrays or None", NPARAMS);
        return 0;
    }
    for (int i = 0; i < NPARAMS; i++)
        if (!buffers_get(h, PyTuple_GetItem(tup, i), PARAM_NAMES[i], writable, param_slot(p, i))) return 0;
    return 1;
}

static int parse_config(PyObject *tup, attnc_layer_config *c) {
    long long nhead;
    int act;
    unsigned long long seed;
    if (!PyArg_ParseTuple(tup, "LidpdK;layer config", &nhead, &act, &c->eps, &c->norm_first, &c->dropout,
                          &seed))
        return 0;
    c->nhead = nhead;
    c->activation = (attnc_activation)act;
    c->seed = seed;
    return 1;
}

static int parse_masks(buffers *h, PyObject *tup, attnc_attn_masks *m) {
    PyObject *m0, *m1;
    if (!PyArg_ParseTuple(tup, "OOp;attention masks", &m0, &m1, &m->causal)) return 0;
    return buffers_get(h, m0, "attn_mask", 0, &m->masks[0]) &&
           buffers_get(h, m1, "key_padding_mask", 0, &m->masks[1]);
}

static PyObject *py_layer_saved_size(PyObject *self, PyObject *args) {
    (void)self;
    long long B, L, S, E, F, H;
    int decoder;
    if (!PyArg_ParseTuple(args, "LLLLLLp", &B, &L, &S, &E, &F, &H, &decoder)) return NULL;
    return PyLong_FromLongLong(attnc_layer_saved_size(B, L, S, E, F, H, decoder));
}

/* (out, weights_self, weights_cross, saved, x, memory, params, config, self_masks, cross_masks) */
static PyObject *py_layer_scratch_size(PyObject *self, PyObject *args) {
    (void)self;
    long long B, L, S, E, F;
    int decoder;
    if (!PyArg_ParseTuple(args, "LLLLLp", &B, &L, &S, &E, &F, &decoder)) return NULL;
    return PyLong_FromLongLong(attnc_layer_scratch_size(B, L, S, E, F, decoder));
}

static PyObject *py_layer_forward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out, *ws, *wc, *saved, *x, *mem, *params, *config, *sm, *cm;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO", &out, &ws, &wc, &saved, &x, &mem, &params, &config, &sm, &cm))
        return NULL;
    buffers h = {.count = 0};
    attnc_tensor to, tws, twc, ts, tx, tm;
    attnc_layer_params p = {0};
    attnc_layer_config c;
    attnc_attn_masks msk[2] = {0};
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, out, "output", 1, &to) && buffers_get(&h, ws, "weights_self", 1, &tws) &&
          buffers_get(&h, wc, "weights_cross", 1, &twc) && buffers_get(&h, saved, "saved", 1, &ts) &&
          buffers_get(&h, x, "input", 0, &tx) && buffers_get(&h, mem, "memory", 0, &tm) &&
          parse_params(&h, params, &p, 0) && parse_config(config, &c) && parse_masks(&h, sm, &msk[0]) &&
          parse_masks(&h, cm, &msk[1])))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_layer_forward(&to, &tws, &twc, &ts, &tx, &tm, &p, &c, &msk[0], &msk[1]));
    return buffers_finish(&h, st);
}

/* (dx, dmemory, grads, scratch, dout, saved, x, memory, params, config, self_masks, cross_masks) */
static PyObject *py_layer_backward(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dx, *dmem, *grads, *work, *dout, *saved, *x, *mem, *params, *config, *sm, *cm;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO", &dx, &dmem, &grads, &work, &dout, &saved, &x, &mem, &params,
                          &config, &sm, &cm))
        return NULL;
    buffers h = {.count = 0};
    attnc_tensor tdx, tdm, tw, tdo, ts, tx, tm;
    attnc_layer_params p = {0}, g = {0};
    attnc_layer_config c;
    attnc_attn_masks msk[2] = {0};
    attnc_status st = ATTNC_OK;
    if (!(buffers_get(&h, dx, "dinput", 1, &tdx) && buffers_get(&h, dmem, "dmemory", 1, &tdm) &&
          parse_params(&h, grads, &g, 1) && buffers_get(&h, work, "scratch", 1, &tw) &&
          buffers_get(&h, dout, "doutput", 0, &tdo) &&
          buffers_get(&h, saved, "saved", 0, &ts) && buffers_get(&h, x, "input", 0, &tx) &&
          buffers_get(&h, mem, "memory", 0, &tm) && parse_params(&h, params, &p, 0) &&
          parse_config(config, &c) && parse_masks(&h, sm, &msk[0]) && parse_masks(&h, cm, &msk[1])))
        return buffers_release(&h), NULL;
    ATTNC_NOGIL(st, attnc_layer_backward(&tdx, &tdm, &g, &tw, &tdo, &ts, &tx, &tm, &p, &c, &msk[0], &msk[1]));
    return buffers_finish(&h, st);
}


/* (tokens, lengths, layers (list of parameter tuples), config, embedding,
 *  embed_scale, positions, norm_weight, norm_bias, out_weight, out_bias,
 *  prompt, memory, memory_mask, (max_new_tokens, eos, beam_size, length_penalty)) */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tokens, *lengths, *layers, *config, *emb, *pos, *nw, *nb, *ow, *ob, *prompt, *mem, *mmask, *opts;
    double scale;
    if (!PyArg_ParseTuple(args, "OOO!OOdOOOOOOOOO", &tokens, &lengths, &PyList_Type, &layers, &config, &emb,
                          &scale, &pos, &nw, &nb, &ow, &ob, &prompt, &mem, &mmask, &opts))
        return NULL;
    attnc_decode_options o;
    long long max_new, eos, beam_size;
    if (!PyArg_ParseTuple(opts, "LLLd;decode options", &max_new, &eos, &beam_size, &o.length_penalty)) return NULL;
    o.max_new_tokens = max_new;
    o.eos = eos;
    o.beam_size = beam_size;
    Py_ssize_t n = PyList_Size(layers);
    attnc_decoder m = {.nlayers = n, .embed_scale = scale};
    attnc_layer_params *params = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *params);
    buffers *held = PyMem_Calloc((size_t)(n + 1), sizeof *held); /* one per layer, and the rest */
    if (!params || !held) {
        PyMem_Free(params);
        PyMem_Free(held);
        return PyErr_NoMemory();
    }
    m.layers = params;
    buffers *h = &held[n];
    int ok = parse_config(config, &m.config);
    for (Py_ssize_t l = 0; ok && l < n; l++) ok = parse_params(&held[l], PyList_GetItem(layers, l), &params[l], 0);
    attnc_tensor tt, tl, tp, tm, tmm;
    ok = ok && buffers_get(h, tokens, "tokens", 1, &tt) && buffers_get(h, lengths, "lengths", 1, &tl) &&
         buffers_get(h, emb, "embedding", 0, &m.embedding) && buffers_get(h, pos, "positions", 0, &m.positions) &&
         buffers_get(h, nw, "norm.weight", 0, &m.final_norm.weight) &&
         buffers_get(h, nb, "norm.bias", 0, &m.final_norm.bias) &&
         buffers_get(h, ow, "out_weight", 0, &m.out_weight) && buffers_get(h, ob, "out_bias", 0, &m.out_bias) &&
         buffers_get(h, prompt, "prompt", 0, &tp) && buffers_get(h, mem, "memory", 0, &tm) &&
         buffers_get(h, mmask, "memory_mask", 0, &tmm);
    attnc_status st = ATTNC_OK;
    if (ok) ATTNC_NOGIL(st, attnc_decode(&tt, &tl, &m, &tp, &tm, &tmm, &o));
    for (Py_ssize_t l = 0; l < n; l++) buffers_release(&held[l]);
    PyObject *result = ok ? buffers_finish(h, st) : (buffers_release(h), NULL);
    PyMem_Free(params);
    PyMem_Free(held);
    return result;
}

PyMethodDef attnc_transformer_methods[] = {
    {"decode", py_decode, METH_VARARGS, NULL},
    {"layer_saved_size", py_layer_saved_size, METH_VARARGS, NULL},
    {"layer_scratch_size", py_layer_scratch_size, METH_VARARGS, NULL},
    {"layer_forward", py_layer_forward, METH_VARARGS, NULL},
    {"layer_backward", py_layer_backward, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
