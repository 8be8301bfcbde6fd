"""attnc.optim against torch.optim on the same gradients, gradient clipping,
the warm-up schedule, and attnc.save / attnc.load."""

import json

import numpy as np
import pytest

import attnc

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.3)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=1e-3, alpha=0.95, momentum=0.9)),
    ("RMSprop", dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=0.01, momentum=0.5, centered=True)),
]


@pytest.mark.parametrize("name,kwargs", CONFIGS)
def test_matches_torch(name, kwargs, rng, torch):
    model = attnc.nn.MultiheadAttention(8, 2, add_bias_kv=True, dtype=np.float64, seed=0)
    ref = torch.nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True).double()
    ref.load_state_dict({k: torch.tensor(v) for k, v in model.state_dict().items()})
    opt = getattr(attnc.optim, name)(model, **kwargs)
    ref_opt = getattr(torch.optim, name)(ref.parameters(), **kwargs)
    for _ in range(6):
        grads = {k: rng.standard_normal(v.shape) for k, v in model.state_dict().items()}
        grads["query"] = rng.standard_normal(3)  # not a parameter: ignored
        opt.step(grads)
        for k, p in ref.named_parameters():
            p.grad = torch.tensor(grads[k])
        ref_opt.step()
    for k, v in ref.state_dict().items():
        np.testing.assert_allclose(model.state_dict()[k], v.numpy(), rtol=1e-12, atol=1e-14, err_msg=k)


def test_step_with_vjp_grads_reduces_loss(rng):
    """A real use: fit a Linear layer to a target with vjp gradients and Adam."""
    lin = attnc.nn.Linear(5, 2, dtype=np.float64, seed=1)
    x, w_true = rng.standard_normal((64, 5)), rng.standard_normal((2, 5))
    y = x @ w_true.T
    opt = attnc.optim.Adam(lin, lr=0.05)
    losses = []
    for _ in range(200):
        out, pullback = attnc.vjp(lin, x)
        losses.append(float(((out - y) ** 2).mean()))
        opt.step(pullback(2 * (out - y) / out.size))
    assert losses[-1] < 1e-3 * losses[0]


def test_missing_gradient_leaves_parameter(rng):
    lin = attnc.nn.Linear(3, 2, dtype=np.float64, seed=0)
    before = lin.state_dict()
    attnc.optim.SGD(lin, lr=1.0).step({"weight": np.ones((2, 3))})
    assert np.array_equal(lin.bias, before["bias"])
    assert np.allclose(lin.weight, before["weight"] - 1)


def test_errors():
    lin = attnc.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="weight"):
        attnc.optim.SGD(lin, lr=0.1).step({"weight": np.ones(3)})
    with pytest.raises(ValueError, match="lr"):
        attnc.optim.Adam(lin, lr=-1)
    with pytest.raises(ValueError, match="nesterov"):
        attnc.optim.SGD(lin, lr=0.1, nesterov=True)
    with pytest.raises(TypeError, match="params"):
        attnc.optim.SGD([1, 2], lr=0.1)


def _adam_f32_reference(p, grads, lr, b1, b2, eps, wd, decoupled):
    """Adam / AdamW in NumPy float32, each operation rounded in torch's
    single-tensor order but for m and v written as b m + (1 - b) g: the
    order attnc's kernel keeps, so the two agree bitwise."""
    p = p.copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    f = np.float32
    for t, g in enumerate(grads, 1):
        if decoupled:
            p = p * f(1 - lr * wd)
        else:
            g = g + f(wd) * p
        m = m * f(b1) + g * f(1 - b1)
        v = v * f(b2) + g * f(1 - b2) * g
        denom = np.sqrt(v) / f(np.sqrt(1 - b2**t)) + f(eps)
        p = p - m * f(lr / (1 - b1**t)) / denom
    return p


@pytest.mark.parametrize("name,wd", [("Adam", 0.0), ("Adam", 0.1), ("AdamW", 0.05)])
def test_adam_float32_bits(name, wd, rng, restore_threads):
    """Adam and AdamW in float32: bitwise the update written out in NumPy,
    for a parameter of several of the kernel's blocks and a strided view in a
    dict of arrays (updated through a copy, in place), at 1 and 2 threads."""
    big = rng.standard_normal(70001).astype(np.float32)
    base = rng.standard_normal((9, 6)).astype(np.float32)
    grads = [
        (
            rng.standard_normal(70001).astype(np.float32) * np.float32(10.0**k),
            rng.standard_normal((6, 9)).astype(np.float32),
        )
        for k in range(-6, 2)
    ]
    want_big = _adam_f32_reference(big, [g for g, _ in grads], 3e-3, 0.9, 0.99, 1e-8, wd, name == "AdamW")
    want_view = _adam_f32_reference(base.T, [g for _, g in grads], 3e-3, 0.9, 0.99, 1e-8, wd, name == "AdamW")
    for threads in (1, 2):
        attnc.set_num_threads(threads)
        owner = base.copy()
        params = {"big": big.copy(), "view": owner.T}
        opt = getattr(attnc.optim, name)(params, lr=3e-3, betas=(0.9, 0.99), weight_decay=wd)
        for g_big, g_view in grads:
            opt.step({"big": g_big, "view": g_view})
        np.testing.assert_array_equal(params["big"], want_big)
        np.testing.assert_array_equal(owner.T, want_view)  # the caller's array itself


def test_adam_kernel_errors():
    """The C update names the argument that is wrong."""
    from attnc import _core

    p, m, v = np.zeros(8), np.zeros(8), np.zeros(8)
    options = dict(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, decoupled=False, step=1)

    zeros = np.zeros(8)

    def step(param=p, grad=zeros, exp_avg=m, exp_avg_sq=v, **changed):
        _core.adam_step(param=param, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, **{**options, **changed})

    with pytest.raises(ValueError, match="grad has 7 elements, param 8"):
        step(grad=np.zeros(7))
    with pytest.raises(TypeError, match="grad"):
        step(grad=np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="exp_avg must be C-contiguous"):
        step(exp_avg=np.zeros(16)[::2])
    with pytest.raises(ValueError, match="param and exp_avg share memory"):
        step(exp_avg=p)
    with pytest.raises(ValueError, match="step must be >= 1"):
        step(step=0)
    with pytest.raises(ValueError, match="betas"):
        step(beta1=1.0)
    with pytest.raises(TypeError, match="param"):
        step(param=np.zeros(8, np.int64))


@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(max_norm, rng, torch):
    grads = {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal(5), "input": rng.standard_normal(7)}
    params = {"a": np.zeros((3, 4)), "b": np.zeros(5)}
    tgrads = [torch.tensor(grads[k]) for k in params]
    tparams = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in tgrads]
    for p, g in zip(tparams, tgrads):
        p.grad = g.clone()
    expected = float(torch.nn.utils.clip_grad_norm_(tparams, max_norm))
    total = attnc.optim.clip_grad_norm_(grads, max_norm, params)
    assert abs(total - expected) < 1e-12
    for k, p in zip(params, tparams):
        np.testing.assert_allclose(grads[k], p.grad.numpy(), rtol=1e-14)


def test_transformer_lr_and_lambda(torch):
    d, warmup = 64, 10
    factor = attnc.optim.transformer_lr(d, warmup)
    expected = [d**-0.5 * min(s**-0.5, s * warmup**-1.5) for s in range(1, 40)]
    assert np.allclose([factor(e) for e in range(39)], expected, rtol=1e-14)
    assert max(range(39), key=factor) == warmup - 1  # the peak is at the end of the warm-up
    lin = attnc.nn.Linear(2, 2)
    opt = attnc.optim.SGD(lin, lr=2.0)
    sched = attnc.optim.LambdaLR(opt, factor)
    tp = torch.nn.Parameter(torch.zeros(1))
    topt = torch.optim.SGD([tp], lr=2.0)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, factor)
    for _ in range(15):
        assert abs(sched.get_last_lr()[0] - tsched.get_last_lr()[0]) < 1e-15
        topt.step()
        sched.step()
        tsched.step()


@pytest.mark.parametrize(
    "module",
    [
        lambda: attnc.nn.MultiheadAttention(12, 3, add_bias_kv=True, kdim=5, vdim=7, seed=3),
        lambda: attnc.nn.LayerNorm((4, 6), eps=1e-3, bias=False),
        lambda: attnc.nn.Embedding(11, 6, padding_idx=2, seed=4),
        lambda: attnc.nn.Linear(6, 3, bias=False, dtype=np.float64, seed=5),
    ],
)
def test_save_load_roundtrip(module, tmp_path):
    m = module()
    path = tmp_path / "m.npz"
    attnc.save(path, m)
    loaded = attnc.load(path)
    assert type(loaded) is type(m) and loaded.dtype == m.dtype and not loaded.training
    assert list(loaded.state_dict()) == list(m.state_dict())
    for k, v in m.state_dict().items():
        assert loaded.state_dict()[k].tobytes() == v.tobytes(), k
    assert loaded._config == json.loads(json.dumps(m._config))  # tuples come back as lists


def test_load_rejects_foreign_files(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, weight=np.zeros(3))
    with pytest.raises(ValueError, match="attnc.save"):
        attnc.load(path)


def test_clip_grad_value_matches_torch(rng, torch):
    grads = {"a": rng.standard_normal((4, 5)) * 3, "b": rng.standard_normal(7) * 3, "other": np.full(3, 9.0)}
    tg = [torch.tensor(grads["a"]), torch.tensor(grads["b"])]
    ps = [
        torch.zeros(4, 5, dtype=torch.float64, requires_grad=True),
        torch.zeros(7, dtype=torch.float64, requires_grad=True),
    ]
    for p, g in zip(ps, tg):
        p.grad = g
    torch.nn.utils.clip_grad_value_(ps, 1.5)
    attnc.optim.clip_grad_value_(grads, 1.5, {"a": np.zeros((4, 5)), "b": np.zeros(7)})
    np.testing.assert_array_equal(grads["a"], ps[0].grad.numpy())
    np.testing.assert_array_equal(grads["b"], ps[1].grad.numpy())
    np.testing.assert_array_equal(grads["other"], 9.0)  # not a parameter: untouched
    with pytest.raises(ValueError, match="clip_value"):
        attnc.optim.clip_grad_value_(grads, 0.0)
