"""attnc.nn.SelfAttention2d (SAGAN) against a NumPy float64 reference
(tests/reference/sagan_ref.py), an equivalent torch composition (forward and
every gradient), finite differences, and its invariants."""

import numpy as np
import pytest

import attnc
from conftest import numeric_vjp
from helpers import same_bits
from reference import sagan_ref


def _module(C=8, r=4, dtype=np.float64, seed=0, gamma=0.7):
    m = attnc.nn.SelfAttention2d(C, reduction=r, dtype=dtype, seed=seed)
    m.gamma = np.array([gamma])
    return m


def _torch_block(torch, x, params, dweights=None):
    """The block as torch ops (conv2d 1x1, bmm, softmax over the key index i)."""
    F = torch.nn.functional
    t = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tx = torch.tensor(x, requires_grad=True)
    B, C, H, W = x.shape
    f = F.conv2d(tx, t["f.weight"], t["f.bias"]).flatten(2)  # (B, c, N)
    g = F.conv2d(tx, t["g.weight"], t["g.bias"]).flatten(2)
    h = F.conv2d(tx, t["h.weight"], t["h.bias"]).flatten(2)
    s = torch.bmm(f.transpose(1, 2), g)  # s[b, i, j] = f_i . g_j
    beta = torch.softmax(s, dim=1).transpose(1, 2)  # beta[b, j, i]
    read = torch.bmm(h, beta.transpose(1, 2)).reshape(B, -1, H, W)  # read[:, :, j] = sum_i beta[j, i] h_i
    y = t["gamma"] * F.conv2d(read, t["v.weight"], t["v.bias"]) + tx
    return y, beta, tx, t


def test_against_numpy_reference(rng):
    for C, r, shape in [(8, 4, (2, 3, 4)), (16, 8, (1, 5, 5)), (4, 1, (3, 1, 6))]:
        m = _module(C, r)
        x = rng.standard_normal((shape[0], C) + shape[1:])
        y, attn = m(x, return_attention=True)
        yr, ar = sagan_ref.self_attention2d(x, m.state_dict())
        np.testing.assert_allclose(y, yr, rtol=0, atol=1e-12)
        np.testing.assert_allclose(attn, ar, rtol=0, atol=1e-12)
        np.testing.assert_allclose(attn.sum(-1), 1.0, rtol=0, atol=1e-12)
        assert attn.shape == (shape[0], shape[1] * shape[2], shape[1] * shape[2])
        same_bits(m(x), y)  # the map costs nothing to the output


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-11), (np.float32, 2e-5)])
@pytest.mark.parametrize("with_weights", [False, True])
def test_gradients_against_torch(torch, rng, dtype, tol, with_weights):
    m = _module(8, 2, dtype=dtype)
    x = rng.standard_normal((3, 8, 4, 5)).astype(dtype)
    out, pullback = attnc.vjp(m, x, return_attention=with_weights)
    y = out[0] if with_weights else out
    dy = rng.standard_normal(y.shape).astype(dtype)
    dw = rng.standard_normal((3, 20, 20)).astype(dtype) if with_weights else None
    grads = pullback(dy, dw) if with_weights else pullback(dy)
    ty, tbeta, tx, tparams = _torch_block(torch, x, m.state_dict())
    loss = (ty * torch.tensor(dy)).sum()
    if with_weights:
        loss = loss + (tbeta * torch.tensor(dw)).sum()
        np.testing.assert_allclose(out[1], tbeta.detach().numpy(), rtol=0, atol=tol)
    loss.backward()
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=0, atol=tol * 10)
    assert set(grads) == {"input"} | set(m.state_dict())
    for name, t in [("input", tx)] + list(tparams.items()):
        ref = t.grad.numpy()
        assert grads[name].shape == ref.shape and grads[name].dtype == dtype, name
        np.testing.assert_allclose(grads[name], ref, rtol=0, atol=tol * 10 * max(1, np.abs(ref).max()), err_msg=name)


def test_finite_differences(rng):
    m = _module(4, 2, gamma=0.9)
    x = rng.standard_normal((2, 4, 2, 3))
    (y, a), pullback = attnc.vjp(m, x, return_attention=True)
    dy, dw = rng.standard_normal(y.shape), rng.standard_normal(a.shape)
    grads = pullback(dy, dw)
    params = m.state_dict()

    def ref(input, **p):
        return sagan_ref.self_attention2d(input, p)

    num = numeric_vjp(ref, dict(input=x, **params), [dy, dw], ["input"] + list(params))
    for name in num:
        np.testing.assert_allclose(
            grads[name], num[name], rtol=1e-6, atol=1e-7 * max(1, np.abs(num[name]).max()), err_msg=name
        )


def test_gamma_zero_is_identity_and_still_learns(rng):
    m = attnc.nn.SelfAttention2d(16, seed=3)  # reduction 8, float32, gamma 0
    assert m.gamma.shape == (1,) and m.gamma[0] == 0 and m.inner == 2
    x = rng.standard_normal((2, 16, 5, 4)).astype(np.float32)
    y, pullback = attnc.vjp(m, x)
    same_bits(y, x)
    g = pullback(np.ones_like(y))
    same_bits(g["input"], np.ones_like(x))  # only the residual path at gamma 0
    assert g["gamma"][0] != 0 and np.all(g["v.weight"] == 0)


def test_float32_matches_float64_and_threads(rng, restore_threads):
    m64 = _module(8, 4)
    m32 = _module(8, 4, dtype=np.float32)
    x = rng.standard_normal((4, 8, 6, 6))
    np.testing.assert_allclose(m32(x.astype(np.float32)), m64(x), rtol=0, atol=1e-5)
    res = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        (y, a), pb = attnc.vjp(m32, x.astype(np.float32), return_attention=True)
        res.append((y, a, pb(np.ones_like(y), None)))
    for y, a, g in res[1:]:
        same_bits(y, res[0][0])
        same_bits(a, res[0][1])
        for k in g:
            same_bits(g[k], res[0][2][k], k)


def test_state_dict_and_seed(torch):
    m = attnc.nn.SelfAttention2d(16, reduction=4, seed=1)
    sd = m.state_dict()
    assert {k: v.shape for k, v in sd.items()} == {
        "gamma": (1,),
        "f.weight": (4, 16, 1, 1),
        "f.bias": (4,),
        "g.weight": (4, 16, 1, 1),
        "g.bias": (4,),
        "h.weight": (4, 16, 1, 1),
        "h.bias": (4,),
        "v.weight": (16, 4, 1, 1),
        "v.bias": (16,),
    }
    m2 = attnc.nn.SelfAttention2d(16, reduction=4, seed=1)
    for k in sd:
        same_bits(m2.state_dict()[k], sd[k], k)
    assert not np.array_equal(m.f.weight, m.g.weight)  # each projection its own draw
    assert not np.array_equal(attnc.nn.SelfAttention2d(16, reduction=4, seed=2).f.weight, m.f.weight)
    tconv = torch.nn.Conv2d(16, 4, 1)  # the same names and shapes as torch's 1x1 convolutions
    tconv.load_state_dict({"weight": torch.tensor(sd["f.weight"]), "bias": torch.tensor(sd["f.bias"])})


def test_inputs_unchanged(rng, assert_unchanged):
    m = _module(8, 4)
    x = rng.standard_normal((2, 8, 3, 3))
    assert_unchanged(m, x, return_attention=True)
    xt = np.asfortranarray(x)  # any layout
    same_bits(m(xt), m(np.ascontiguousarray(x)))


def test_bad_input(rng):
    m = _module(8, 4)
    with pytest.raises(ValueError, match=r"expected \(batch, 8, H, W\)"):
        m(rng.standard_normal((2, 6, 3, 3)))
    with pytest.raises(ValueError, match="expected"):
        m(rng.standard_normal((8, 3, 3)))
    with pytest.raises(TypeError, match="dtype"):
        m(rng.standard_normal((2, 8, 3, 3)).astype(np.float32))
    with pytest.raises(TypeError, match="dtype"):
        m(np.ones((2, 8, 3, 3), np.int64))
    with pytest.raises(ValueError, match="must divide"):
        attnc.nn.SelfAttention2d(10, reduction=4)
    with pytest.raises(ValueError, match="channels"):
        attnc.nn.SelfAttention2d(0)
