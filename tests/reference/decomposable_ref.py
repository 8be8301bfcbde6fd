"""NumPy float64 reference of decomposable attention (Parikh et al. 2016),
independent of csrc/ and of attnc: a forward pass from a state dict.

    e_ij = F(a_i) . F(b_j); beta_i = sum_j softmax_j(e_ij) b_j over real j;
    alpha_j = sum_i softmax_i(e_ij) a_i over real i; v1 = sum_i G([a_i; beta_i]),
    v2 = sum_j G([b_j; alpha_j]) over real tokens; logits = W H([v1; v2]) + c.

With context=1 each token's embedding x_i is first replaced by the window
[x_{i-1}; x_i; x_{i+1}] of its own sentence's real tokens (zeros beyond the
sentence), written here as an explicit loop over positions.
"""

import numpy as np


def _ff(sd, prefix, x):
    relu = lambda z: np.maximum(z, 0.0)  # noqa: E731
    h = relu(x @ sd[f"{prefix}.linear1.weight"].T + sd[f"{prefix}.linear1.bias"])
    return relu(h @ sd[f"{prefix}.linear2.weight"].T + sd[f"{prefix}.linear2.bias"])


def _masked_softmax(s, m):
    out = np.zeros_like(s)
    if m.any():
        x = np.exp(s[m] - s[m].max())
        out[m] = x / x.sum()
    return out


def _window(x, m):
    E = x.shape[1]
    out = np.zeros((len(x), 3 * E))
    n = int(m.sum())  # real tokens come first
    for i in range(n):
        for k, src in enumerate((i - 1, i, i + 1)):
            if 0 <= src < n:
                out[i, k * E : (k + 1) * E] = x[src]
    return out


def decomposable_ref(sd, premise, hypothesis, premise_mask, hypothesis_mask, context=0):
    """logits (B, C), w_ab (B, La, Lb) softmax over j, w_ba (B, Lb, La) softmax over i."""
    sd = {k: np.asarray(v, dtype=np.float64) for k, v in sd.items()}
    emb = sd["embedding.weight"]
    B, La = premise.shape
    Lb = hypothesis.shape[1]
    C = sd["classifier.weight"].shape[0]
    logits = np.zeros((B, C))
    w_ab, w_ba = np.zeros((B, La, Lb)), np.zeros((B, Lb, La))
    for n in range(B):
        a, b = emb[premise[n]], emb[hypothesis[n]]
        ma, mb = np.asarray(premise_mask[n], bool), np.asarray(hypothesis_mask[n], bool)
        if context:
            a, b = _window(a, ma), _window(b, mb)
        if "projection.weight" in sd:
            a, b = a @ sd["projection.weight"].T, b @ sd["projection.weight"].T
        e = _ff(sd, "attend", a) @ _ff(sd, "attend", b).T
        for i in range(La):
            if ma[i]:
                w_ab[n, i] = _masked_softmax(e[i], mb)
        for j in range(Lb):
            if mb[j]:
                w_ba[n, j] = _masked_softmax(e[:, j], ma)
        beta = w_ab[n] @ b
        alpha = w_ba[n] @ a
        v1 = (_ff(sd, "compare", np.concatenate([a, beta], 1)) * ma[:, None]).sum(0)
        v2 = (_ff(sd, "compare", np.concatenate([b, alpha], 1)) * mb[:, None]).sum(0)
        h = _ff(sd, "aggregate", np.concatenate([v1, v2])[None])[0]
        logits[n] = h @ sd["classifier.weight"].T + sd["classifier.bias"]
    return logits, w_ab, w_ba
