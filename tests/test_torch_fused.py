"""attnc.torch's fused ops (attnc::scaled_dot_product_attention,
attnc::multi_head_attention): bit for bit attnc's NumPy calls (outputs and
gradients), torch's own ops within 1e-5 / 1e-12, gradcheck in float64, opcheck
of every registered op, torch.compile(fullgraph=True) against eager, and the
tensors attnc refuses, each with its message."""

import numpy as np
import pytest

import attnc

TOL = {"float32": 1e-5, "float64": 1e-12}


@pytest.fixture
def at(torch):
    import attnc.torch

    return attnc.torch


def _tensors(torch, rng, dtype, *shapes, grad=True):
    return [torch.tensor(rng.standard_normal(s), dtype=getattr(torch, dtype), requires_grad=grad) for s in shapes]


def _np(t):
    return None if t is None else t.detach().numpy()


def _close(torch, got, want, tol):
    """Within tol relative to the largest entry of want (float32 gradients
    through several matrix products round at that scale)."""
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * max(1.0, float(want.detach().abs().max())))


# --------------------------------------------------------------------------- scaled_dot_product_attention

# name -> (query, key, value shapes, mask: None / "bool" / "float" (L, S) broadcast, keyword arguments)
SDPA_CASES = {
    "plain": ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4), None, {}),
    "causal": ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4), None, {"is_causal": True}),
    "bool_mask": ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4), "bool", {"scale": 0.3}),
    "float_mask": ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4), "float", {}),
    "gqa": ((2, 4, 5, 8), (2, 2, 6, 8), (2, 2, 6, 4), "float", {"enable_gqa": True}),
    "broadcast": ((3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 4), None, {}),
    "unbatched": ((5, 8), (6, 8), (6, 4), "bool", {}),
}


def _sdpa_inputs(torch, rng, dtype, case):
    qs, ks, vs, mask, kwargs = SDPA_CASES[case]
    q, k, v = _tensors(torch, rng, dtype, qs, ks, vs)
    m = None
    if mask == "bool":
        m = torch.tensor(rng.random((qs[-2], ks[-2])) < 0.7)
        m[:, 0] = True  # every row attends to something (torch gives NaN for an empty row)
    elif mask == "float":
        (m,) = _tensors(torch, rng, dtype, (qs[-2], ks[-2]))
    return q, k, v, m, kwargs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa_is_attncs_numpy_call_bit_for_bit(torch_path, torch, at, rng, dtype, case):
    q, k, v, m, kwargs = _sdpa_inputs(torch, rng, dtype, case)
    kwargs = dict(kwargs, dropout_p=0.25, seed=7)
    out, w = at.scaled_dot_product_attention(q, k, v, m, return_weights=True, **kwargs)
    args = [_np(t) for t in (q, k, v, m)]
    (want, want_w), pullback = attnc.vjp(attnc.scaled_dot_product_attention, *args, return_weights=True, **kwargs)
    assert out.dtype == q.dtype and np.array_equal(out.detach().numpy(), want)
    assert np.array_equal(w.detach().numpy(), want_w)
    dout, dw = rng.standard_normal(want.shape).astype(dtype), rng.standard_normal(want_w.shape).astype(dtype)
    grads = pullback(dout, dw)
    inputs = [t for t in (q, k, v, m) if t is not None and t.requires_grad]
    got = torch.autograd.grad((out, w), inputs, (torch.from_numpy(dout), torch.from_numpy(dw)))
    for name, g in zip(("query", "key", "value", "attn_mask"), got):
        assert np.array_equal(g.numpy(), grads[name]), name


def _torch_weights(torch, q, k, m, scale=None, is_causal=False, enable_gqa=False):
    """softmax(q k^T * scale + mask) in torch ops: the weights torch's SDPA does not return."""
    if enable_gqa:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if is_causal:
        m = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    if m is not None:
        s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m
    return torch.softmax(s, -1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa_matches_torch(torch_path, torch, at, rng, dtype, case):
    """Outputs, weights and every gradient against torch's SDPA (weights: in torch ops)."""
    q, k, v, m, kwargs = _sdpa_inputs(torch, rng, dtype, case)
    out, w = at.scaled_dot_product_attention(q, k, v, m, return_weights=True, **kwargs)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, m, **kwargs)
    want_w = _torch_weights(torch, q, k, m, **kwargs)
    _close(torch, out, want, TOL[dtype])
    _close(torch, w, want_w.expand(w.shape), TOL[dtype])
    inputs = [t for t in (q, k, v, m) if t is not None and t.requires_grad]
    dout, dw = torch.randn_like(out), torch.randn_like(w)
    got = torch.autograd.grad((out, w), inputs, (dout, dw))
    ref = torch.autograd.grad((want, want_w.expand(w.shape)), inputs, (dout, dw))
    for g, r in zip(got, ref):
        _close(torch, g, r, TOL[dtype])


GRADCHECK = {
    "float_mask": (((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 3)), "float", {}),
    "bool_mask_scale": (((2, 4, 5), (2, 6, 5), (2, 6, 3)), "bool", {"scale": 0.7}),
    "gqa_causal": (((1, 4, 5, 3), (1, 2, 5, 3), (1, 1, 5, 2)), None, {"enable_gqa": True, "is_causal": True}),
    "dropout": (((2, 4, 5), (2, 6, 5), (2, 6, 3)), "float", {"dropout_p": 0.4, "seed": 3}),
    "unbatched": (((4, 5), (6, 5), (6, 3)), None, {}),
}


@pytest.mark.parametrize("case", GRADCHECK)
def test_sdpa_gradcheck(torch_path, torch, at, rng, case):
    """Both outputs differentiable: gradcheck sums random cotangents of the
    output and of the weights, so the weights' backward is checked too."""
    shapes, mask, kwargs = GRADCHECK[case]
    inputs = _tensors(torch, rng, "float64", *shapes)
    if mask == "float":
        inputs += _tensors(torch, rng, "float64", (shapes[0][-2], shapes[1][-2]))
    bool_mask = torch.tensor(rng.random((shapes[0][-2], shapes[1][-2])) < 0.6) if mask == "bool" else None

    def f(q, k, v, m=bool_mask):
        return at.scaled_dot_product_attention(q, k, v, m, return_weights=True, **kwargs)

    assert torch.autograd.gradcheck(f, tuple(inputs))


def test_sdpa_dropout_seed(torch_path, torch, at, rng):
    """The same seed gives the same bits; seed=None draws from torch's
    generator, so torch.manual_seed reproduces a call and fresh draws differ."""
    q, k, v = _tensors(torch, rng, "float64", (2, 5, 4), (2, 6, 4), (2, 6, 3), grad=False)
    call = lambda seed=None: at.scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=seed)  # noqa: E731
    assert torch.equal(call(11), call(11)) and not torch.equal(call(11), call(12))
    torch.manual_seed(5)
    first, second = call(), call()
    torch.manual_seed(5)
    assert torch.equal(call(), first) and not torch.equal(first, second)
    assert torch.equal(call(-1), call(2**64 - 1))  # attnc takes seeds modulo 2**64


def test_sdpa_empty(torch_path, torch, at):
    q = torch.zeros(2, 0, 4, dtype=torch.float64, requires_grad=True)
    k = torch.ones(2, 3, 4, dtype=torch.float64, requires_grad=True)
    out, w = at.scaled_dot_product_attention(q, k, k, return_weights=True)
    assert out.shape == (2, 0, 4) and w.shape == (2, 0, 3)
    (gk,) = torch.autograd.grad(out.sum() + w.sum(), k)
    assert gk.shape == k.shape and not gk.any()


# --------------------------------------------------------------------------- multi_head_attention


def _mha_inputs(torch, rng, dtype, E=8, H=2, B=2, L=4, S=5, kdim=None):
    x, kv = _tensors(torch, rng, dtype, (B, L, E), (B, S, E))
    params = dict(
        zip(
            ("in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias"),
            _tensors(torch, rng, dtype, (3 * E, E), (3 * E,), (E, E), (E,)),
        )
    )
    kpm = torch.tensor(rng.random((B, S)) < 0.3)
    kpm[:, 0] = False
    (am,) = _tensors(torch, rng, dtype, (L, S))
    return x, kv, params, kpm, am


def _mha(at, x, kv, H, params, **kwargs):
    return at.multi_head_attention(x, kv, kv, H, *params.values(), **kwargs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("average", [True, False])
def test_mha_is_attncs_numpy_call_bit_for_bit(torch_path, torch, at, rng, dtype, average):
    x, kv, params, kpm, am = _mha_inputs(torch, rng, dtype)
    kwargs = dict(key_padding_mask=kpm, attn_mask=am, average_attn_weights=average, dropout_p=0.3, seed=2)
    out, w = _mha(at, x, kv, 2, params, **kwargs)
    arrays = [_np(t) for t in params.values()]
    np_kwargs = {n: _np(t) if n.endswith("mask") else t for n, t in kwargs.items()}
    (want, want_w), pullback = attnc.vjp(attnc.multi_head_attention, _np(x), _np(kv), _np(kv), 2, *arrays, **np_kwargs)
    assert np.array_equal(out.detach().numpy(), want) and np.array_equal(w.detach().numpy(), want_w)
    dout, dw = rng.standard_normal(want.shape).astype(dtype), rng.standard_normal(want_w.shape).astype(dtype)
    grads = pullback(dout, dw)
    inputs = [x, kv, *params.values(), am]
    got = torch.autograd.grad((out, w), inputs, (torch.from_numpy(dout), torch.from_numpy(dw)))
    names = ["query", "key", *params, "attn_mask"]
    for name, g in zip(names, got):
        want_g = grads[name] + grads["value"] if name == "key" else grads[name]  # kv is both key and value
        assert np.array_equal(g.numpy(), want_g), name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mha_matches_torch(torch_path, torch, at, rng, dtype):
    x, kv, params, kpm, am = _mha_inputs(torch, rng, dtype)
    H = 2
    out, w = _mha(at, x, kv, H, params, key_padding_mask=kpm, attn_mask=am, average_attn_weights=False)
    want, want_w = torch.nn.functional.multi_head_attention_forward(
        *(t.transpose(0, 1) for t in (x, kv, kv)),
        8,
        H,
        params["in_proj_weight"],
        params["in_proj_bias"],
        None,
        None,
        False,
        0.0,
        params["out_proj_weight"],
        params["out_proj_bias"],
        key_padding_mask=torch.zeros(kpm.shape, dtype=getattr(torch, dtype)).masked_fill(kpm, float("-inf")),
        attn_mask=am,
        average_attn_weights=False,
    )
    want = want.transpose(0, 1)
    _close(torch, out, want, TOL[dtype])
    _close(torch, w, want_w, TOL[dtype])
    inputs = [x, kv, *params.values(), am]
    dout, dw = torch.randn_like(out), torch.randn_like(w)
    for g, r in zip(
        torch.autograd.grad((out, w), inputs, (dout, dw)), torch.autograd.grad((want, want_w), inputs, (dout, dw))
    ):
        _close(torch, g, r, TOL[dtype])


def test_mha_gradcheck(torch_path, torch, at, rng):
    """Every differentiable argument: inputs, separate projections, biases,
    bias_k/bias_v, float masks; add_zero_attn, dropout with a seed, weights."""
    E, H, B, L, S, kdim, vdim = 4, 2, 2, 3, 4, 3, 5
    ts = _tensors(torch, rng, "float64", (B, L, E), (B, S, kdim), (B, S, vdim), (E, E), (E, kdim), (E, vdim))
    ts += _tensors(torch, rng, "float64", (3 * E,), (E, E), (E,), (1, 1, E), (1, 1, E), (B, S), (L, S))

    def f(q, k, v, wq, wk, wv, b_in, w_out, b_out, bias_k, bias_v, kpm, am):
        return at.multi_head_attention(
            q,
            k,
            v,
            H,
            None,
            b_in,
            w_out,
            b_out,
            q_proj_weight=wq,
            k_proj_weight=wk,
            v_proj_weight=wv,
            bias_k=bias_k,
            bias_v=bias_v,
            add_zero_attn=True,
            key_padding_mask=kpm,
            attn_mask=am,
            average_attn_weights=False,
            dropout_p=0.3,
            seed=1,
        )

    assert torch.autograd.gradcheck(f, tuple(ts))


def test_unused_outputs_send_no_cotangent(torch_path, torch, at, rng, monkeypatch):
    """Weights only logged (or only the weights in the loss): the C backward
    gets None for the unused output, not zeros that it would go through (a
    GPT step logging its weights cost 1.5 times as much)."""
    from attnc.attention import multihead, sdpa

    got = []
    for module in (sdpa, multihead):
        backward = module._backward
        monkeypatch.setattr(
            module,
            "_backward",
            lambda saved, cots, backward=backward: (
                got.append((cots[0] is None, cots[1] is None)) or backward(saved, cots)
            ),
        )
    x, kv, params, _, _ = _mha_inputs(torch, rng, "float64")
    out, w = _mha(at, x, kv, 2, params)
    out.sum().backward()
    out, w = at.scaled_dot_product_attention(x, kv, kv, return_weights=True)
    w.sum().backward()
    assert got == [(False, True), (True, False)]


# --------------------------------------------------------------------------- opcheck, compile


def test_opcheck_every_op(torch, at, rng):
    from attnc.torch._fused import _seed_tensor

    q, k, v, m, _ = _sdpa_inputs(torch, rng, "float64", "gqa")
    ops = torch.ops.attnc
    off = ("[]", [])  # no option of today's models (their text, then their tensors)
    slopes, sinks = torch.tensor([0.5, 0.25, 0.125, 0.1], dtype=torch.float64, requires_grad=True), q.new_zeros(4)
    text = "[('softcap', 2.0), ('tensors', ('alibi_slopes', 'sinks')), ('window', (1, 0))]"
    on = (text, [slopes, sinks.requires_grad_()])
    torch.library.opcheck(
        ops.scaled_dot_product_attention, (q, k, v, m, 0.2, False, None, True, True, _seed_tensor(1, 0.2), *off)
    )
    torch.library.opcheck(
        ops.scaled_dot_product_attention, (q[0], k[0, :1], v[0, :1], None, 0.0, True, 0.5, False, False, None, *off)
    )
    torch.library.opcheck(ops.scaled_dot_product_attention, (q, k, v, m, 0.0, False, None, True, True, None, *on))
    # the backward ops have no backward (no double backward): checked on tensors without grad
    q, k, v, m = (t.detach() for t in (q, k, v, m))
    for text, tensors in (off, (on[0], [t.detach() for t in on[1]])):
        out, w, lse = ops.scaled_dot_product_attention(q, k, v, m, 0.0, False, None, True, True, None, text, tensors)
        args = (torch.randn_like(out), torch.randn_like(w), q, k, v, m, out, lse, 0.0, False, None, True, None)
        torch.library.opcheck(ops.scaled_dot_product_attention_backward, args + (text, tensors))
    x, kv, params, kpm, am = _mha_inputs(torch, rng, "float64")
    mha_args = (x, kv, kv, 2, *params.values(), kpm, am, True, False, False, None, None, None, None, None, False)
    torch.library.opcheck(ops.multi_head_attention, mha_args + (0.1, _seed_tensor(4, 0.1), *off))
    on = (
        "[('tensors', ('alibi_slopes', 'sinks')), ('window', (2, 1))]",
        [slopes[:2].detach().requires_grad_(), x.new_zeros(2, requires_grad=True)],
    )
    torch.library.opcheck(ops.multi_head_attention, mha_args + (0.0, None, *on))
    x, kv, am = x.detach(), kv.detach(), am.detach()
    params = {n: t.detach() for n, t in params.items()}
    for text, variants in (off, (on[0], [t.detach() for t in on[1]])):
        out, w, *saved = ops.multi_head_attention(
            x, kv, kv, 2, *params.values(), *mha_args[8:], 0.0, None, text, variants
        )
        tensors = [x, kv, kv, *params.values(), kpm, am, None, None, None, None, None]
        grads = (torch.randn_like(out), torch.randn_like(w), tensors, saved, 2, True, False, False, False, 0.0, None)
        torch.library.opcheck(ops.multi_head_attention_backward, grads + (text, variants))


def _loss_and_grads(torch, f, inputs):
    loss = f(*inputs)
    return loss, torch.autograd.grad(loss, inputs)


def test_compile_fullgraph_matches_eager(torch_path, torch, at, rng):
    """A small use of both ops, weights in the loss (and one op's weights not
    asked for), traced with the ops' fakes and backward ops (aot_eager)."""
    x, kv, params, kpm, am = _mha_inputs(torch, rng, "float64")

    def f(x, kv, w_in, b_in, w_out, b_out, am):
        h, w = at.multi_head_attention(x, kv, kv, 2, w_in, b_in, w_out, b_out, attn_mask=am, key_padding_mask=kpm)
        h2, _ = at.multi_head_attention(h, kv, kv, 2, w_in, b_in, w_out, b_out, need_weights=False)
        o, w2 = at.scaled_dot_product_attention(h2, kv, kv, return_weights=True, dropout_p=0.2, seed=3)
        return o.square().sum() + w.square().sum() + w2[..., 0].sum() + at.scaled_dot_product_attention(o, h, h).sum()

    inputs = (x, kv, *params.values(), am)
    want = _loss_and_grads(torch, f, inputs)
    got = _loss_and_grads(torch, torch.compile(f, fullgraph=True, backend="aot_eager"), inputs)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_compile_inductor_matches_eager(torch_path, torch, at, rng):
    """The default backend once (its C++ compile takes tens of seconds here)."""
    (q,) = _tensors(torch, rng, "float64", (2, 4, 3))

    def f(q):
        o, w = at.scaled_dot_product_attention(q, q, q, is_causal=True, return_weights=True)
        return o.sum() + w[..., 0].sum()

    torch.testing.assert_close(
        _loss_and_grads(torch, torch.compile(f, fullgraph=True), (q,)), _loss_and_grads(torch, f, (q,))
    )


def test_compile_draws_a_fresh_seed_each_call(torch_path, torch, at, rng):
    """seed=None under torch.compile: the seed is drawn in the graph, not baked into it."""
    (q,) = _tensors(torch, rng, "float64", (3, 4, 5), grad=False)
    f = torch.compile(
        lambda q: at.scaled_dot_product_attention(q, q, q, dropout_p=0.5), fullgraph=True, backend="aot_eager"
    )
    assert not torch.equal(f(q), f(q))


# --------------------------------------------------------------------------- refused tensors


def test_refused_tensors_name_the_argument(torch, at, rng):
    q, k, v = _tensors(torch, rng, "float32", (2, 3, 4), (2, 5, 4), (2, 5, 4))
    sdpa = at.scaled_dot_product_attention
    with pytest.raises(TypeError, match=r"key is on meta: attnc runs on the CPU only \(move it with key.cpu\(\)\)"):
        sdpa(q, k.to("meta"), v)
    with pytest.raises(TypeError, match="value has dtype torch.float16: attnc takes float32 or float64 tensors"):
        sdpa(q, k, v.half())
    with pytest.raises(TypeError, match="attn_mask has layout torch.sparse_coo: attnc takes dense"):
        sdpa(q, k, v, torch.ones(3, 5, dtype=torch.bool).to_sparse())
    with pytest.raises(TypeError, match="attn_mask has dtype torch.uint8"):
        sdpa(q, k, v, torch.ones(3, 5, dtype=torch.uint8))
    x, kv, params, kpm, am = _mha_inputs(torch, rng, "float32")
    with pytest.raises(TypeError, match="in_proj_weight has dtype torch.bfloat16"):
        _mha(at, x, kv, 2, dict(params, in_proj_weight=params["in_proj_weight"].bfloat16()))
    with pytest.raises(TypeError, match="key_padding_mask is on meta"):
        _mha(at, x, kv, 2, params, key_padding_mask=kpm.to("meta"))
    with pytest.raises(ValueError, match="pass either attn_mask or is_causal=True, not both"):  # attnc's own checks
        sdpa(q, k, v, torch.ones(3, 5, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="embed_dim 8 must be divisible by num_heads"):
        _mha(at, x, kv, 3, params)


# --------------------------------------------------------------------------- attnc.torch.nn

MHA_CONFIGS = {
    "sequence_first": dict(),
    "batch_first_no_bias": dict(bias=False, batch_first=True),
    "kdim_vdim_bias_kv_zero_attn": dict(kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True),
}


def _pair(torch, cls, ours, *args, **kwargs):
    """torch's module and attnc's, attnc's loaded from torch's state_dict."""
    ref = getattr(torch.nn, cls)(*args, dtype=torch.float64, **kwargs)
    mine = getattr(ours, cls)(*args, dtype=torch.float64, **kwargs)
    assert list(mine.state_dict()) == list(ref.state_dict())
    assert all(isinstance(p, torch.nn.Parameter) for p in mine.parameters())
    mine.load_state_dict(ref.state_dict())
    return ref, mine


def _same_outputs_and_grads(torch, ref, mine, inputs, call):
    want, got = call(ref, *inputs), call(mine, *inputs)
    cots = [torch.randn_like(w) for w in want]
    leaves = [t for t in inputs if t.requires_grad]
    grads = torch.autograd.grad(want, leaves + list(ref.parameters()), cots)
    mine_grads = torch.autograd.grad(got, leaves + list(mine.parameters()), cots)
    for a, b in zip((*got, *mine_grads), (*want, *grads)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("config", MHA_CONFIGS)
def test_nn_multihead_attention_is_torchs(torch_path, torch, at, rng, config):
    kwargs = MHA_CONFIGS[config]
    ref, mine = _pair(torch, "MultiheadAttention", at.nn, 8, 2, **kwargs)
    B, L, S = 3, 4, 6
    shapes = [(L, B, 8), (S, B, kwargs.get("kdim", 8)), (S, B, kwargs.get("vdim", 8))]
    q, k, v = _tensors(torch, rng, "float64", *shapes)
    if kwargs.get("batch_first"):
        q, k, v = (t.detach().transpose(0, 1).requires_grad_() for t in (q, k, v))
    kpm = torch.tensor(rng.random((B, S)) < 0.3)
    kpm[:, 0] = False
    causal = torch.ones(L, S, dtype=torch.bool).triu(1)
    for average in (True, False):
        call = lambda m, q, k, v: m(q, k, v, key_padding_mask=kpm, attn_mask=causal, average_attn_weights=average)  # noqa: E731
        _same_outputs_and_grads(torch, ref, mine, (q, k, v), call)
    out, w = mine(q, k, v, need_weights=False)
    assert w is None and out.shape == q.shape
    x = q[:, 0] if not kwargs.get("batch_first") and not kwargs.get("kdim") else None
    if x is not None:  # unbatched (L, E)
        _same_outputs_and_grads(torch, ref, mine, (x,), lambda m, x: m(x, x, x))


def test_nn_transformer_layers_are_torchs(torch_path, torch, at, rng):
    layer = dict(dim_feedforward=16, dropout=0.0)
    src, tgt = _tensors(torch, rng, "float64", (5, 2, 8), (3, 2, 8))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(3, dtype=torch.float64)
    ref, mine = _pair(torch, "TransformerEncoderLayer", at.nn, 8, 2, norm_first=True, **layer)
    _same_outputs_and_grads(torch, ref, mine, (src,), lambda m, s: (m(s),))
    ref, mine = _pair(torch, "TransformerDecoderLayer", at.nn, 8, 2, **layer)
    _same_outputs_and_grads(torch, ref, mine, (tgt, src), lambda m, t, s: (m(t, s, tgt_mask=mask, tgt_is_causal=True),))
    ref, mine = _pair(torch, "Transformer", at.nn, 8, 2, 2, 1, **layer)
    assert all(type(m) is not torch.nn.MultiheadAttention for m in mine.modules())
    assert all(type(m) is at.nn.TransformerEncoderLayer for m in mine.encoder.layers)  # no fused fast path
    _same_outputs_and_grads(torch, ref, mine, (src, tgt), lambda m, s, t: (m(s, t, tgt_mask=mask),))
    ref.eval(), mine.eval()
    with torch.no_grad():  # where torch's encoder takes its fused fast path
        torch.testing.assert_close(mine(src, tgt), ref(src, tgt), rtol=1e-12, atol=1e-12)


def test_nn_adam_loss_curve_is_torchs(torch_path, torch, at):
    """A small causal language model trained 50 steps by torch.optim.Adam:
    the same loss curve (1e-6) with attnc's modules as with torch's, the
    weights of its attention logged each step as people do."""

    class LM(torch.nn.Module):
        def __init__(self, nn, vocab=11, d=16):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, d, dtype=torch.float64)
            self.attn = nn.MultiheadAttention(d, 4, batch_first=True, dtype=torch.float64)
            self.block = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True, dtype=torch.float64)
            self.head = torch.nn.Linear(d, vocab, dtype=torch.float64)

        def forward(self, ids):
            x = self.embed(ids)
            mask = torch.nn.Transformer.generate_square_subsequent_mask(ids.shape[1], dtype=torch.float64)
            h, w = self.attn(x, x, x, attn_mask=mask, need_weights=True)
            return self.head(self.block(x + h, src_mask=mask, is_causal=True)), w

    def curve(nn):
        torch.manual_seed(0)
        model = LM(nn)
        ids = torch.randint(0, 11, (4, 9))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(50):
            logits, w = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return np.array(losses), w.detach()

    want, want_w = curve(torch.nn)
    got, got_w = curve(at.nn)
    assert want[-1] < want[0] / 2  # it learns
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_w, want_w, rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- the eager path


def test_eager_calls_skip_the_dispatcher(torch, at, rng, monkeypatch):
    """In eager mode on plain tensors attnc is called directly (the custom
    op's dispatcher costs ~0.1 ms a call); under a dispatch mode (a tracer,
    FlopCounterMode) the op runs, so the mode sees it; the same bits."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from attnc.torch import _fused, _ops

    seen = []

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.namespace)
            return func(*args, **(kwargs or {}))

    q, k, v = _tensors(torch, rng, "float64", (2, 5, 4), (2, 6, 4), (2, 6, 3), grad=True)
    with Mode():
        traced = at.scaled_dot_product_attention(q, k, v)
        traced_softmax = at.softmax(q, causal=True)
    assert seen.count("attnc") == 2
    for name in ("_sdpa_op", "_mha_op"):
        monkeypatch.setattr(_fused, name, None)  # calling one raises
    monkeypatch.setattr(_ops._softmax, "forward", None)
    out = at.scaled_dot_product_attention(q, k, v)
    assert torch.equal(out, traced) and torch.equal(at.softmax(q, causal=True), traced_softmax)
    out.sum().backward()
    assert q.grad is not None


def test_eager_backward_refuses_inputs_changed_in_place(torch_path, torch, at, rng):
    """attnc's backward reads the inputs' memory: torch's version counter
    refuses a backward after an input changed in place (on both paths)."""
    q, k, v = _tensors(torch, rng, "float64", (2, 5, 4), (2, 6, 4), (2, 6, 3), grad=True)
    kk = k * 1.0
    out = at.scaled_dot_product_attention(q, kk, v)
    kk.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_double_backward_raises(torch_path, torch, at, rng):
    """attnc's backward is not differentiable: a second derivative raises
    rather than returning wrong zeros."""
    q, k, v = _tensors(torch, rng, "float64", (2, 5, 4), (2, 6, 4), (2, 6, 3), grad=True)
    (dq,) = torch.autograd.grad(at.scaled_dot_product_attention(q, k, v).square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        dq.sum().backward()


def test_constant_float_mask_gets_no_gradient_pass(torch, at, rng, monkeypatch):
    """A float mask that does not require grad (a causal mask buffer) is a
    constant on the eager path: the C backward skips the mask's gradient
    (a (B, H, L, S) pass); one that requires grad gets it."""
    from attnc import _core

    backward, dmasks = _core.sdpa_backward, []
    monkeypatch.setattr(_core, "sdpa_backward", lambda **kw: dmasks.append(kw["dmask"] is None) or backward(**kw))
    q, k, v = _tensors(torch, rng, "float64", (2, 5, 4), (2, 6, 4), (2, 6, 3), grad=True)
    x, kv, params, _, _ = _mha_inputs(torch, rng, "float64")
    for needs in (False, True):
        mask = torch.randn(5, 6, dtype=torch.float64, requires_grad=needs)
        at.scaled_dot_product_attention(q, k, v, mask).sum().backward()
        mha_mask = torch.randn(x.shape[1], kv.shape[1], dtype=torch.float64, requires_grad=needs)
        _mha(at, x, kv, 2, params, attn_mask=mha_mask)[0].sum().backward()
        assert (mask.grad is not None, mha_mask.grad is not None) == (needs, needs)
    assert dmasks == [True, True, False, False]
