"""A torch re-implementation of show-attend-tell (attnc.models.Captioner),
written from the equations in Xu et al. 2015 (and the Captioner docstring),
independently of attnc's C core: torch.nn.LSTMCell, plain tensor algebra and
torch autograd. It loads the attnc model's state dict.

    h0 = tanh(W_h mean_i a_i + b_h), c0 = tanh(W_c mean_i a_i + b_c)
    e_ti = v . tanh(W_a a_i + b_a + U_a h_{t-1}), alpha_t = softmax(e_t)
    beta_t = sigmoid(w_b . h_{t-1} + b_b) (or 1)
    z_t = beta_t sum_i alpha_ti a_i (soft, or hard with s_t = -1) or beta_t a_{s_t} (hard, s given)
    h_t, c_t = LSTMCell([E y_{t-1}; z_t], (h_{t-1}, c_{t-1}))
    logits_t = L_o (E y_{t-1} + L_h h_t + L_z z_t) + b_o
"""

import numpy as np


class TorchCaptioner:
    def __init__(self, torch, state_dict, gate=True, dtype=np.float64):
        self.torch = torch
        tdt = torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
        self.p = {k: torch.tensor(np.asarray(v), dtype=tdt, requires_grad=True) for k, v in state_dict.items()}
        self.gate = gate
        self.tdt = tdt
        H = self.p["decoder.weight_hh"].shape[1]
        In = self.p["decoder.weight_ih"].shape[1]
        self.cell = torch.nn.LSTMCell(In, H).to(tdt)

    def _cell(self, x, h, c):
        """torch's LSTMCell with our (differentiable) tensors as its parameters."""
        f = self.torch.func.functional_call
        params = {n: self.p[f"decoder.{n}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        return f(self.cell, params, (x, (h, c)))

    def forward(self, features, tokens, samples=None):
        """logits (B, T, V) and alphas (B, T, L) as torch tensors; features a
        torch tensor (so its gradient can be taken) or array."""
        torch, p = self.torch, self.p
        a = features if isinstance(features, torch.Tensor) else torch.tensor(np.asarray(features), dtype=self.tdt)
        y = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
        B = a.shape[0]
        T = y.shape[1]
        mean = a.mean(dim=1)
        h = torch.tanh(mean @ p["init_h.weight"].T + p["init_h.bias"])
        c = torch.tanh(mean @ p["init_c.weight"].T + p["init_c.bias"])
        pa = a @ p["attention.feature.weight"].T + p["attention.feature.bias"]  # (B, L, A)
        emb = p["embedding.weight"][y]  # (B, T, E)
        logits, alphas = [], []
        for t in range(T):
            ph = h @ p["attention.hidden.weight"].T  # (B, A)
            e = (torch.tanh(pa + ph[:, None, :]) @ p["attention.score.weight"].T)[..., 0]  # (B, L)
            alpha = torch.softmax(e, dim=-1)
            beta = torch.sigmoid(h @ p["gate.weight"].T + p["gate.bias"]) if self.gate else 1.0
            if samples is None:
                z = beta * (alpha[:, :, None] * a).sum(dim=1)
            else:
                s = torch.as_tensor(np.asarray(samples)[:, t], dtype=torch.long)  # -1: the expectation
                soft = (alpha[:, :, None] * a).sum(dim=1)
                z = beta * torch.where((s >= 0)[:, None], a[torch.arange(B), s.clamp(min=0)], soft)
            h, c = self._cell(torch.cat([emb[:, t], z], dim=1), h, c)
            q = emb[:, t] + h @ p["out_hidden.weight"].T + z @ p["out_context.weight"].T
            logits.append(q @ p["output.weight"].T + p["output.bias"])
            alphas.append(alpha)
        return torch.stack(logits, 1), torch.stack(alphas, 1)

    def objective(self, features, tokens, tgt_out, lam, samples=None, reinforce=0.0, entropy=0.0, baseline=0.0):
        """(loss, surrogate): loss = mean CE over real targets + lam * penalty;
        surrogate adds, with samples given, Xu et al.'s eq. 12 terms as a
        function whose gradient is the estimator (divided by the token count N):
        - reinforce/N sum_b (log p(y_b|s_b) - baseline).detach() log p(s_b)
        - entropy/N sum_{b, t real} H[alpha_bt]."""
        torch = self.torch
        logits, alphas = self.forward(features, tokens, samples)
        tgt = torch.as_tensor(np.asarray(tgt_out), dtype=torch.long)
        real = (tgt != -100).to(self.tdt)
        B, V = logits.shape[0], logits.shape[2]
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-100)
        cover = 1 - (alphas * real[:, :, None]).sum(dim=1)
        loss = ce + lam * (cover**2).sum() / B
        surrogate = loss
        if samples is not None and (reinforce or entropy):
            n = real.sum()
            logp = torch.log_softmax(logits, -1)
            picked = logp.gather(-1, tgt.clamp(min=0)[:, :, None])[:, :, 0]
            logp_y = (picked * real).sum(1)
            s = torch.as_tensor(np.asarray(samples), dtype=torch.long)
            sampled = real * (s >= 0).to(self.tdt)  # no score-function term for the expectation
            logp_s = (torch.log(alphas.gather(-1, s.clamp(min=0)[:, :, None])[:, :, 0]) * sampled).sum(1)
            H = -(alphas * torch.log(alphas)).sum(-1)
            surrogate = (
                loss - reinforce / n * ((logp_y - baseline).detach() * logp_s).sum() - entropy / n * (H * real).sum()
            )
        return loss, surrogate

    def grads(self, value, features=None):
        """Gradients of a scalar by state-dict name (and "features" if a tensor is given)."""
        names = list(self.p)
        wrt = [self.p[n] for n in names] + ([features] if features is not None else [])
        gs = self.torch.autograd.grad(value, wrt, allow_unused=True, retain_graph=True)
        out = {n: (np.zeros(self.p[n].shape) if g is None else g.detach().numpy()) for n, g in zip(names, gs)}
        if features is not None:
            out["features"] = gs[-1].detach().numpy()
        return out
