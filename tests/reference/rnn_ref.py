"""Plain NumPy float64 reference for attnc.nn.LSTM / GRU / LSTMCell / GRUCell (batch first).

Written from torch's documented equations (torch.nn.LSTM, torch.nn.GRU), independently of
attnc and torch. Parameters come as a flat state dict keyed by torch's names
(weight_ih_l{k}[_reverse], weight_hh_l{k}[_reverse], bias_ih_l{k}[_reverse],
bias_hh_l{k}[_reverse]; the cells drop the _l{k} suffix).

LSTM (gates i, f, g, o stacked in that order along the rows of weight_ih / weight_hh):
    i = σ(W_ii x + b_ii + W_hi h + b_hi)      f = σ(W_if x + b_if + W_hf h + b_hf)
    g = tanh(W_ig x + b_ig + W_hg h + b_hg)   o = σ(W_io x + b_io + W_ho h + b_ho)
    c' = f ⊙ c + i ⊙ g                        h' = o ⊙ tanh(c')
GRU (gates r, z, n):
    r = σ(W_ir x + b_ir + W_hr h + b_hr)      z = σ(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))
    h' = (1 − z) ⊙ n + z ⊙ h

Ragged batches (lengths): row b only runs over its first lengths[b] steps, in both
directions (the reverse direction starts at step lengths[b] − 1 from h0); outputs at
padded steps are 0 and the final state is the state after the row's last valid step,
which is what torch's pack_padded_sequence / pad_packed_sequence give.

Between layers, `masks[l]` (if given) multiplies layer l's output before it feeds layer
l + 1 (dropout: the mask already holds the 1 / (1 − p) scaling).
"""

import numpy as np


def _f64(x):
    return None if x is None else np.asarray(x, dtype=np.float64)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(x, h, c, w_ih, w_hh, b_ih=None, b_hh=None):
    gates = x @ w_ih.T + h @ w_hh.T
    if b_ih is not None:
        gates = gates + b_ih + b_hh
    i, f, g, o = np.split(gates, 4, axis=-1)
    i, f, g, o = sigmoid(i), sigmoid(f), np.tanh(g), sigmoid(o)
    c2 = f * c + i * g
    return o * np.tanh(c2), c2


def gru_cell(x, h, w_ih, w_hh, b_ih=None, b_hh=None):
    gi = x @ w_ih.T
    gh = h @ w_hh.T
    if b_ih is not None:
        gi = gi + b_ih
        gh = gh + b_hh
    i_r, i_z, i_n = np.split(gi, 3, axis=-1)
    h_r, h_z, h_n = np.split(gh, 3, axis=-1)
    r = sigmoid(i_r + h_r)
    z = sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * h_n)
    return (1.0 - z) * n + z * h


def _params(sd, suffix):
    return (
        _f64(sd["weight_ih" + suffix]),
        _f64(sd["weight_hh" + suffix]),
        _f64(sd.get("bias_ih" + suffix)),
        _f64(sd.get("bias_hh" + suffix)),
    )


def rnn(kind, sd, x, hx=None, lengths=None, *, num_layers=1, bidirectional=False, masks=None):
    """kind "lstm" or "gru"; x (B, T, I); hx None, h0 (GRU) or (h0, c0) (LSTM), each
    (num_layers * D, B, H). Returns (output (B, T, D * H), h_n) for the GRU and
    (output, (h_n, c_n)) for the LSTM, all float64."""
    x = _f64(x)
    bsz, t_len, _ = x.shape
    d = 2 if bidirectional else 1
    hidden = _f64(sd["weight_hh_l0"]).shape[1]
    lengths = np.full(bsz, t_len) if lengths is None else np.asarray(lengths)
    if hx is None:
        h0 = np.zeros((num_layers * d, bsz, hidden))
        c0 = np.zeros_like(h0)
    elif kind == "lstm":
        h0, c0 = _f64(hx[0]), _f64(hx[1])
    else:
        h0, c0 = _f64(hx), None
    h_n = np.zeros((num_layers * d, bsz, hidden))
    c_n = np.zeros_like(h_n)
    layer_in = x
    for layer in range(num_layers):
        out = np.zeros((bsz, t_len, d * hidden))
        for direction in range(d):
            k = layer * d + direction
            w_ih, w_hh, b_ih, b_hh = _params(sd, f"_l{layer}" + ("_reverse" if direction else ""))
            h = h0[k].copy()
            c = None if c0 is None else c0[k].copy()
            steps = range(t_len - 1, -1, -1) if direction else range(t_len)
            for t in steps:
                live = t < lengths  # rows whose step t is valid
                if not live.any():
                    continue
                xt = layer_in[live, t]
                if kind == "lstm":
                    hn, cn = lstm_cell(xt, h[live], c[live], w_ih, w_hh, b_ih, b_hh)
                    c[live] = cn
                else:
                    hn = gru_cell(xt, h[live], w_ih, w_hh, b_ih, b_hh)
                h[live] = hn
                out[live, t, direction * hidden : (direction + 1) * hidden] = hn
            h_n[k] = h
            if c is not None:
                c_n[k] = c
        layer_in = out
        if masks is not None and layer < num_layers - 1 and masks[layer] is not None:
            layer_in = out * masks[layer]
    if kind == "lstm":
        return out, (h_n, c_n)
    return out, h_n
