"""PyTorch reference for attnc.models.NTM: the same Neural Turing Machine written in torch.

Written from /work/notes/ntm_spec.md, independently of attnc (no attnc import): torch.nn
modules for the pieces torch has (nn.LSTMCell or nn.Linear for the controller, nn.Linear
for the heads and the output) and the NTM's addressing and memory in torch operations,
batched over the batch and over the heads; Python loops over the time steps only.
Parameters come from an attnc state dict (NumPy arrays, the spec's keys);
`TorchNTM.load_state_dict` is strict, so a wrong key or shape fails loudly.

Sizes: B batch, T steps, I input, O output, C controller, N memory slots, M memory width,
R read heads, W write heads, Hh = R + W (read heads first), K shifts (odd).

    z_t = [x_t ; r_{t-1}]
    LSTM:         h_t, c_t = LSTMCell(z_t, (h_{t-1}, c_{t-1}))         (gates i, f, g, o)
    feedforward:  h_t = tanh(W z_t + b)
    p_t = clamp(W_head h_t + b_head, -clip, clip)
    per head (its chunk of p_t: key M, beta 1, g 1, s K, gamma 1 [, erase M, add M]):
        k = key;  beta = softplus;  g = sigmoid;  s = softmax;  gamma = 1 + softplus
        e = sigmoid(erase);  a = tanh(add)
        w_c = softmax_i(beta k.M_i / max(|k| |M_i|, 1e-8))              content, on M_{t-1}
        w_g = g w_c + (1 - g) w_{t-1}                                    interpolation
        w~[i] = sum_k s[k] w_g[(i - (k - (K-1)/2)) mod N]                circular shift
        w_t = w~^gamma / sum_j w~_j^gamma                                sharpening
    r_t[h] = sum_i w_t[h]_i M_{t-1}[i]                                   read heads, before the write
    M_t = M_{t-1} * prod_{write heads} (1 - w e^T) + sum_{write heads} w a^T
    y_t = W_out [h_t ; r_t] + b_out                                      logits

Initial state, the same for every row: h_0 = c_0 = 0, r_0 = read_init, w_0 =
softmax(weight_init) per head, M_0 = 1e-6 ("constant"), memory_init ("learned", a
parameter) or memory_init ("random", a fixed tensor: no gradient).

softplus is log(1 + e^x) (torch's F.softplus with its linear branch moved beyond the
point where log1p(exp(x)) == x in float64); torch.clamp passes the gradient where
-clip <= p <= clip.

    run = torch_ntm(state_dict, inputs, controller="lstm", read_heads=1, write_heads=1,
                    shifts=3, memory_init_kind="constant")
    run.logits (B, T, O), run.read_weights (B, T, R, N), run.write_weights (B, T, W, N),
    run.memory (B, T, N, M) (after each step), run.params {name: leaf}, run.inputs (leaf)
    grads = run.grads(dlogits)        # {state_dict name: ndarray, "inputs": ndarray}
"""

from __future__ import annotations

import math
import zlib
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CONTROLLERS = ("lstm", "feedforward")
MEMORY_INITS = ("constant", "learned", "random")
MEMORY_CONSTANT = 1e-6
COSINE_EPS = 1e-8
SOFTPLUS_THRESHOLD = 40.0  # log1p(exp(x)) == x beyond this, in float32 and float64


# --------------------------------------------------------------------------- shapes from the spec
def head_sizes(memory_width: int, shifts: int) -> tuple[int, int]:
    """(read head chunk, write head chunk) of heads.weight's rows."""
    M, K = memory_width, shifts
    return M + K + 3, 3 * M + K + 3


def state_shapes(
    input_size,
    output_size,
    controller="lstm",
    controller_size=100,
    memory_slots=128,
    memory_width=20,
    read_heads=1,
    write_heads=1,
    shifts=3,
    memory_init="constant",
) -> dict:
    """{state_dict key: shape} of the spec's model (the spec's defaults), in the spec's order."""
    if controller not in CONTROLLERS:
        raise ValueError(f"unknown controller {controller!r}")
    if memory_init not in MEMORY_INITS:
        raise ValueError(f"unknown memory_init {memory_init!r}")
    I, O, C, N, M, R, W, K = (
        input_size,
        output_size,
        controller_size,
        memory_slots,
        memory_width,
        read_heads,
        write_heads,
        shifts,
    )
    if K % 2 == 0:
        raise ValueError(f"shifts must be odd, got {K}")
    Z = I + R * M
    if controller == "lstm":
        shapes = {
            "controller.weight_ih": (4 * C, Z),
            "controller.weight_hh": (4 * C, C),
            "controller.bias_ih": (4 * C,),
            "controller.bias_hh": (4 * C,),
        }
    else:
        shapes = {"controller.weight": (C, Z), "controller.bias": (C,)}
    rs, ws = head_sizes(M, K)
    P = R * rs + W * ws
    shapes.update(
        {
            "heads.weight": (P, C),
            "heads.bias": (P,),
            "output.weight": (O, C + R * M),
            "output.bias": (O,),
            "read_init": (R, M),
            "weight_init": (R + W, N),
        }
    )
    if memory_init != "constant":
        shapes["memory_init"] = (N, M)
    return shapes


def random_state(shapes: dict, seed=0, dtype=np.float64, scale=1.0) -> dict:
    """Weights for a state dict given {name: shape}, each drawn from a generator keyed by
    (seed, name): matrices U(±scale/sqrt(fan_in)), biases U(±0.1 scale), read_init and
    memory_init N(0, 0.5²), weight_init N(0, 1)."""
    state = {}
    for name, shape in shapes.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if name in ("read_init", "memory_init"):
            a = 0.5 * rng.standard_normal(shape)
        elif name == "weight_init":
            a = rng.standard_normal(shape)
        elif len(shape) == 2:
            bound = scale / math.sqrt(shape[1])
            a = rng.uniform(-bound, bound, shape)
        else:
            a = rng.uniform(-0.1 * scale, 0.1 * scale, shape)
        state[name] = a.astype(dtype)
    return state


# --------------------------------------------------------------------------- addressing, batched over (B, H)
def softplus(x):
    return F.softplus(x, beta=1.0, threshold=SOFTPLUS_THRESHOLD)


def content_weights(key, memory, beta):
    """key (B, H, M), memory (B, N, M), beta (B, H) -> softmax_i(beta cos(key, memory_i)) (B, H, N)."""
    dot = torch.bmm(key, memory.transpose(1, 2))
    norms = torch.linalg.vector_norm(key, dim=-1)[:, :, None] * torch.linalg.vector_norm(memory, dim=-1)[:, None, :]
    cos = dot / torch.clamp(norms, min=COSINE_EPS)
    return torch.softmax(beta[:, :, None] * cos, dim=-1)


def shift_index(N: int, K: int, device=None) -> torch.Tensor:
    """(K, N) int64: index[k, i] = (i - (k - (K-1)/2)) mod N."""
    i = torch.arange(N, device=device)
    offsets = torch.arange(K, device=device) - (K - 1) // 2
    return torch.remainder(i[None, :] - offsets[:, None], N)


def shift(w, s, index):
    """w (B, H, N), s (B, H, K), index = shift_index(N, K) -> (B, H, N):
    out[i] = sum_k s[k] w[(i - (k - (K-1)/2)) mod N]."""
    shifted = w[:, :, index]  # (B, H, K, N)
    return torch.matmul(s.unsqueeze(-2), shifted).squeeze(-2)


def sharpen(w, gamma):
    """w (B, H, N) >= 0, gamma (B, H) >= 1 -> w^gamma / sum_j w_j^gamma."""
    u = torch.pow(w, gamma[:, :, None])
    return u / u.sum(dim=-1, keepdim=True)


def address(key, beta, g, s, gamma, w_prev, memory, index):
    w_c = content_weights(key, memory, beta)
    g = g[:, :, None]
    w_g = g * w_c + (1 - g) * w_prev
    return sharpen(shift(w_g, s, index), gamma)


def read(memory, w):
    """memory (B, N, M), w (B, H, N) -> (B, H, M)."""
    return torch.bmm(w, memory)


def write(memory, w, erase, add):
    """memory (B, N, M), w (B, W, N), erase and add (B, W, M) -> (B, N, M)."""
    keep = torch.prod(1 - w[:, :, :, None] * erase[:, :, None, :], dim=1)
    return memory * keep + torch.bmm(w.transpose(1, 2), add)


# --------------------------------------------------------------------------- the model
class NTMTrace(NamedTuple):
    read_weights: torch.Tensor  # (B, T, R, N)
    write_weights: torch.Tensor  # (B, T, W, N)
    memory: torch.Tensor  # (B, T, N, M), after each step


class TorchNTM(nn.Module):
    """The spec's NTM as a torch module, its parameters loaded from an attnc state dict
    (the sizes are read off the state dict's shapes). memory_init="random" keeps
    memory_init as a buffer (in the state dict, never trained)."""

    def __init__(
        self,
        state_dict: dict,
        *,
        controller="lstm",
        read_heads=1,
        write_heads=1,
        shifts=3,
        memory_init_kind="constant",
        clip=20.0,
        dtype=torch.float64,
    ):
        super().__init__()
        if controller not in CONTROLLERS:
            raise ValueError(f"unknown controller {controller!r}")
        if memory_init_kind not in MEMORY_INITS:
            raise ValueError(f"unknown memory_init {memory_init_kind!r}")
        R, W, K = read_heads, write_heads, shifts
        Hh, N = np.shape(state_dict["weight_init"])
        M = np.shape(state_dict["read_init"])[1]
        if Hh != R + W:
            raise ValueError(f"weight_init has {Hh} rows, read_heads + write_heads = {R + W}")
        O, CR = np.shape(state_dict["output.weight"])
        C = CR - R * M
        Z = np.shape(state_dict["controller.weight_ih" if controller == "lstm" else "controller.weight"])[1]
        I = Z - R * M
        self.sizes = {"I": I, "O": O, "C": C, "N": N, "M": M, "R": R, "W": W, "K": K}
        self.controller_kind, self.memory_init_kind, self.clip = controller, memory_init_kind, float(clip)
        self.controller = nn.LSTMCell(Z, C) if controller == "lstm" else nn.Linear(Z, C)
        self.heads = nn.Linear(C, R * head_sizes(M, K)[0] + W * head_sizes(M, K)[1])
        self.output = nn.Linear(C + R * M, O)
        self.read_init = nn.Parameter(torch.empty(R, M))
        self.weight_init = nn.Parameter(torch.empty(R + W, N))
        if memory_init_kind == "learned":
            self.memory_init = nn.Parameter(torch.empty(N, M))
        elif memory_init_kind == "random":
            self.register_buffer("memory_init", torch.empty(N, M))
        else:
            self.register_buffer("memory_init", torch.full((N, M), MEMORY_CONSTANT), persistent=False)
        self.to(dtype)
        if memory_init_kind == "constant":
            self.memory_init.fill_(MEMORY_CONSTANT)  # after the cast: exactly 1e-6 in this dtype
        self.load_state_dict({k: torch.as_tensor(np.asarray(v)).to(dtype) for k, v in state_dict.items()})
        self.register_buffer("shift_index", shift_index(N, K), persistent=False)

    def forward(self, x, return_trace=False):
        """x (B, T, I) -> logits (B, T, O) [, NTMTrace]."""
        s = self.sizes
        B, T, _ = x.shape
        N, M, R, W, K, C = s["N"], s["M"], s["R"], s["W"], s["K"], s["C"]
        rs, ws = head_sizes(M, K)
        common = M + K + 3  # key, beta, g, s, gamma: every head's chunk starts with these
        h = x.new_zeros(B, C)
        c = x.new_zeros(B, C)
        r = self.read_init.expand(B, R, M)
        w = torch.softmax(self.weight_init, dim=-1).expand(B, R + W, N)
        mem = self.memory_init.expand(B, N, M)
        logits, reads, writes, mems = [], [], [], []
        for t in range(T):
            z = torch.cat([x[:, t], r.reshape(B, R * M)], dim=1)
            if self.controller_kind == "lstm":
                h, c = self.controller(z, (h, c))
            else:
                h = torch.tanh(self.controller(z))
            p = torch.clamp(self.heads(h), -self.clip, self.clip)
            p_read = p[:, : R * rs].reshape(B, R, rs)
            p_write = p[:, R * rs :].reshape(B, W, ws)
            q = torch.cat([p_read, p_write[:, :, :common]], dim=1)  # (B, Hh, M + K + 3)
            key = q[:, :, :M]
            beta = softplus(q[:, :, M])
            g = torch.sigmoid(q[:, :, M + 1])
            shift_w = torch.softmax(q[:, :, M + 2 : M + 2 + K], dim=-1)
            gamma = 1 + softplus(q[:, :, M + 2 + K])
            erase = torch.sigmoid(p_write[:, :, common : common + M])
            add = torch.tanh(p_write[:, :, common + M :])
            w = address(key, beta, g, shift_w, gamma, w, mem, self.shift_index)
            r = read(mem, w[:, :R])
            mem = write(mem, w[:, R:], erase, add)
            logits.append(self.output(torch.cat([h, r.reshape(B, R * M)], dim=1)))
            if return_trace:
                reads.append(w[:, :R])
                writes.append(w[:, R:])
                mems.append(mem)
        y = torch.stack(logits, dim=1)
        if not return_trace:
            return y
        return y, NTMTrace(torch.stack(reads, 1), torch.stack(writes, 1), torch.stack(mems, 1))

    def loss(self, x, targets, mask):
        """Mean BCE-with-logits over the scored elements (mask (B, T) True, every O channel)."""
        y = self(x)
        return F.binary_cross_entropy_with_logits(y[mask], targets[mask].to(y.dtype), reduction="mean")

    def trained_parameters(self) -> dict:
        return dict(self.named_parameters())


# --------------------------------------------------------------------------- one-call interface for the tests
class NTMRun(NamedTuple):
    logits: torch.Tensor  # (B, T, O)
    read_weights: torch.Tensor  # (B, T, R, N)
    write_weights: torch.Tensor  # (B, T, W, N)
    memory: torch.Tensor  # (B, T, N, M)
    params: dict  # {state_dict name: leaf tensor} of the trained parameters
    inputs: torch.Tensor  # the (B, T, I) leaf
    model: TorchNTM

    def grads(self, dlogits) -> dict:
        """Backward of sum(logits * dlogits): {name: ndarray} for every trained parameter
        and "inputs" (the model's gradients are reset first)."""
        for p in self.params.values():
            p.grad = None
        self.inputs.grad = None
        d = torch.as_tensor(np.asarray(dlogits)).to(self.logits.dtype)
        self.logits.backward(d, retain_graph=True)
        out = {n: p.grad.detach().numpy().copy() for n, p in self.params.items()}
        if self.inputs.requires_grad:
            out["inputs"] = self.inputs.grad.detach().numpy().copy()
        return out


def torch_ntm(
    state_dict: dict,
    inputs: np.ndarray,
    *,
    controller="lstm",
    read_heads=1,
    write_heads=1,
    shifts=3,
    memory_init_kind="constant",
    clip=20.0,
    dtype=torch.float64,
    requires_grad=True,
) -> NTMRun:
    """Run the torch NTM on inputs (B, T, I) with the weights of an attnc state dict.
    With requires_grad the parameters and the inputs are leaves that take gradients."""
    model = TorchNTM(
        state_dict,
        controller=controller,
        read_heads=read_heads,
        write_heads=write_heads,
        shifts=shifts,
        memory_init_kind=memory_init_kind,
        clip=clip,
        dtype=dtype,
    )
    model.requires_grad_(requires_grad)
    x = torch.as_tensor(np.array(inputs)).to(dtype).requires_grad_(requires_grad)
    with torch.set_grad_enabled(requires_grad):
        y, trace = model(x, return_trace=True)
    return NTMRun(y, trace.read_weights, trace.write_weights, trace.memory, dict(model.named_parameters()), x, model)


def torch_loss_and_grad(state_dict, inputs, targets, mask, **kw) -> tuple[float, dict]:
    """Mean BCE-with-logits over the scored elements and its gradient of every trained
    parameter ({name: ndarray}; "inputs" too)."""
    run = torch_ntm(state_dict, inputs, **kw)
    tgt = torch.as_tensor(np.asarray(targets)).to(run.logits.dtype)
    m = torch.as_tensor(np.asarray(mask, dtype=bool))
    loss = F.binary_cross_entropy_with_logits(run.logits[m], tgt[m], reduction="mean")
    loss.backward()
    grads = {n: p.grad.numpy().copy() for n, p in run.params.items()}
    grads["inputs"] = run.inputs.grad.numpy().copy()
    return float(loss.detach()), grads


# --------------------------------------------------------------------------- self-checks
def _self_check():  # pragma: no cover - run by hand: python tests/reference/ntm_torch.py
    """gradcheck in float64 of the whole model; the addressing pieces against the NumPy
    reference tests/reference/ntm_ref.py; the shift's direction."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ntm_ref

    rng = np.random.default_rng(0)
    B, H, N, M, K = 3, 2, 7, 4, 3
    key, mem = rng.standard_normal((B, H, M)), rng.standard_normal((B, N, M))
    beta, g, gamma = rng.random((B, H)) * 3, rng.random((B, H)), 1 + rng.random((B, H)) * 2
    s = rng.random((B, H, K))
    s /= s.sum(-1, keepdims=True)
    w_prev = rng.random((B, H, N))
    w_prev /= w_prev.sum(-1, keepdims=True)
    t = torch.from_numpy
    got = address(t(key), t(beta), t(g), t(s), t(gamma), t(w_prev), t(mem), shift_index(N, K)).numpy()
    want = ntm_ref.address(key, beta, g, s, gamma, w_prev, mem)[0]
    assert np.abs(got - want).max() < 1e-14, np.abs(got - want).max()
    onehot = np.zeros((1, 1, K))
    onehot[0, 0, (K - 1) // 2 + 1] = 1
    w = np.zeros((1, 1, N))
    w[0, 0, 2] = 1
    moved = shift(t(w), t(onehot), shift_index(N, K)).numpy()
    assert moved[0, 0, 3] == 1, moved
    ew, er, ad = rng.random((B, 2, N)), rng.random((B, 2, M)), rng.standard_normal((B, 2, M))
    assert np.abs(write(t(mem), t(ew), t(er), t(ad)).numpy() - ntm_ref.write(mem, ew, er, ad)).max() < 1e-14
    for ctrl in CONTROLLERS:
        for kind in MEMORY_INITS:
            shapes = state_shapes(3, 2, ctrl, 5, 6, 4, 2, 2, 3, kind)
            sd = random_state(shapes, seed=1)
            x = rng.standard_normal((2, 4, 3))
            model = TorchNTM(sd, controller=ctrl, read_heads=2, write_heads=2, shifts=3, memory_init_kind=kind)
            names = [n for n, _ in model.named_parameters()]
            assert ("memory_init" in names) == (kind == "learned"), names
            params = tuple(model.parameters())

            def f(xx, *ps, model=model, names=names):
                return torch.func.functional_call(model, dict(zip(names, ps)), (xx,))

            assert torch.autograd.gradcheck(f, (t(x).requires_grad_(), *params), atol=1e-6, rtol=1e-5)
    print("ntm_torch self-checks passed")


if __name__ == "__main__":  # pragma: no cover
    _self_check()
