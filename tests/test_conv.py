"""attnc.nn.conv1d / conv2d, Conv1d / Conv2d / CausalConv1d against
torch.nn.functional, a NumPy float64 direct-loop reference
(tests/reference/conv_ref.py) and finite differences."""

import numpy as np
import pytest

import attnc
from helpers import same_bits
from reference import conv_ref

CASES_2D = [
    dict(),
    dict(stride=2),
    dict(padding=1),
    dict(stride=2, padding=1),
    dict(stride=(2, 3), padding=(1, 2), dilation=(2, 1)),
    dict(dilation=2, padding=2),
    dict(padding="same"),
    dict(padding="same", dilation=(2, 3)),
    dict(padding="valid", stride=3),
]
SHAPES_2D = [
    ((2, 3, 9, 11), (4, 3, 3, 2)),
    ((1, 1, 5, 5), (1, 1, 1, 1)),
    ((3, 5, 7, 6), (2, 5, 4, 4)),
    ((2, 4, 6, 6), (6, 4, 1, 1)),
]


def _torch_conv(torch, nd, x, w, b, **kw):
    F = torch.nn.functional
    fn = F.conv1d if nd == 1 else F.conv2d
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tb = None if b is None else torch.tensor(b, requires_grad=True)
    return fn(tx, tw, tb, **kw), (tx, tw, tb)


def _gradients_match_torch(torch, rng, pullback, ty, leaves, dtype, tol):
    """attnc's pullback and torch's backward of one random cotangent agree on every leaf."""
    dy = rng.standard_normal(tuple(ty.shape)).astype(dtype)
    ty.backward(torch.tensor(dy))
    g = pullback(dy)
    for name, t in leaves.items():
        ref = t.grad.numpy()
        assert g[name].shape == ref.shape and g[name].dtype == dtype
        np.testing.assert_allclose(
            g[name], ref, rtol=0, atol=tol * 10 * max(1.0, float(np.abs(ref).max())), err_msg=name
        )


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("shapes", SHAPES_2D)
@pytest.mark.parametrize("kw", CASES_2D)
def test_conv2d_against_torch(torch, rng, dtype, tol, shapes, kw):
    xs, ws = shapes
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    try:
        ty, (tx, tw, tb) = _torch_conv(torch, 2, x, w, b, **kw)
    except RuntimeError:  # torch refuses (input smaller than the kernel): so must attnc
        with pytest.raises(ValueError, match="smaller than the dilated kernel"):
            attnc.nn.conv2d(x, w, b, **kw)
        return
    y, pullback = attnc.vjp(attnc.nn.conv2d, x, w, b, **kw)
    assert y.dtype == dtype and y.shape == tuple(ty.shape)
    scale = max(1.0, float(np.abs(ty.detach().numpy()).max()))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=0, atol=tol * scale * 10)
    _gradients_match_torch(torch, rng, pullback, ty, dict(input=tx, weight=tw, bias=tb), dtype, tol)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(stride=2, padding=3),
        dict(dilation=3, padding="same"),
        dict(padding="same"),
        dict(stride=3, dilation=2),
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d_against_torch_and_numpy(torch, rng, kw, bias):
    x = rng.standard_normal((3, 4, 17))
    w = rng.standard_normal((5, 4, 4))
    b = rng.standard_normal(5) if bias else None
    ty, (tx, tw, tb) = _torch_conv(torch, 1, x, w, b, **kw)
    y, pullback = attnc.vjp(attnc.nn.conv1d, x, w, b, **kw)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=0, atol=1e-12 * max(1, np.abs(y).max()))
    # the NumPy loops (explicit padding)
    p = kw.get("padding", 0)
    d = kw.get("dilation", 1)
    pads = (d * 3 // 2, d * 3 - d * 3 // 2) if p == "same" else (p, p)
    ref = conv_ref.conv1d(x, w, b, kw.get("stride", 1), pads, d)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-12 * max(1, np.abs(ref).max()))
    dy = rng.standard_normal(y.shape)
    ty.backward(torch.tensor(dy))
    g = pullback(dy)
    assert set(g) == ({"input", "weight", "bias"} if bias else {"input", "weight"})
    for name, t in (("input", tx), ("weight", tw), ("bias", tb)):
        if t is not None:
            np.testing.assert_allclose(g[name], t.grad.numpy(), rtol=0, atol=1e-12 * max(1, np.abs(g[name]).max()))


def test_conv2d_against_numpy_reference(rng):
    x = rng.standard_normal((2, 3, 8, 7))
    w = rng.standard_normal((4, 3, 3, 2))
    b = rng.standard_normal(4)
    for stride, pads, dil in [
        ((1, 1), ((0, 0), (0, 0)), (1, 1)),
        ((2, 1), ((1, 1), (2, 2)), (1, 2)),
        ((1, 2), ((2, 2), (1, 1)), (2, 2)),
    ]:
        y = attnc.nn.conv2d(x, w, b, stride=stride, padding=(pads[0][0], pads[1][0]), dilation=dil)
        np.testing.assert_allclose(y, conv_ref.conv2d(x, w, b, stride, pads, dil), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(dilation=2, padding="same"), dict()])
def test_conv2d_finite_differences(rng, check_vjp, kw):
    x = rng.standard_normal((2, 2, 5, 6))
    w = rng.standard_normal((3, 2, 3, 2))
    b = rng.standard_normal(3)
    pad = kw.get("padding", 0)
    d = kw.get("dilation", 1)
    pads = ((d, d), (d // 2, d - d // 2)) if pad == "same" else ((pad, pad), (pad, pad))

    def ref(input, weight, bias, **_):
        return conv_ref.conv2d(input, weight, bias, (kw.get("stride", 1),) * 2, pads, (d, d))

    check_vjp(
        attnc.nn.conv2d,
        ref,
        dict(input=x, weight=w, bias=b, **kw),
        rng,
        positional=("input", "weight", "bias"),
        expect_names=["input", "weight", "bias"],
    )


# groups: (input shape, weight shape, keywords); depthwise (groups = Cin) among them
GROUP_CASES_2D = [
    ((2, 4, 7, 6), (6, 2, 3, 2), dict(groups=2)),
    ((2, 4, 8, 8), (8, 1, 3, 3), dict(groups=4, stride=(2, 1), padding=1)),  # depthwise, 2 outputs each
    ((3, 6, 5, 7), (3, 2, 2, 3), dict(groups=3, dilation=(2, 1), padding="same")),
    ((2, 6, 5, 5), (6, 2, 1, 1), dict(groups=3)),  # 1x1: the kernel's identity path
    ((6, 5, 5), (6, 1, 1, 1), dict(groups=6, padding=(1, 0))),  # unbatched
]


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("case", range(len(GROUP_CASES_2D)))
def test_conv2d_groups_against_torch_and_numpy(torch, rng, dtype, tol, case):
    """torch's grouped convolution: output channel o reads the input channels of its
    group, forward and every gradient against torch and the per-group NumPy loops."""
    xs, ws, kw = GROUP_CASES_2D[case]
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1]))
    y, pullback = attnc.vjp(attnc.nn.conv2d, x, w, b, **kw)
    ty, (tx, tw, tb) = _torch_conv(torch, 2, x, w, b, **kw)
    scale = max(1.0, float(np.abs(ty.detach().numpy()).max()))
    assert y.shape == tuple(ty.shape) and y.dtype == dtype
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=0, atol=tol * scale * 10)
    pad = kw.get("padding", 0)
    pads = ((1, 1), (1, 1)) if pad == "same" else tuple((p, p) for p in np.broadcast_to(pad, 2))  # "same": case 2
    xb = x if x.ndim == 4 else x[None]
    ref = conv_ref.conv2d(
        xb, w, b, np.broadcast_to(kw.get("stride", 1), 2), pads, np.broadcast_to(kw.get("dilation", 1), 2), kw["groups"]
    )
    np.testing.assert_allclose(y.reshape(ref.shape), ref, rtol=0, atol=tol * scale * 10)
    _gradients_match_torch(torch, rng, pullback, ty, dict(input=tx, weight=tw, bias=tb), dtype, tol)


@pytest.mark.parametrize("kw", [dict(groups=2, stride=2, padding=1), dict(groups=4, dilation=2, padding="same")])
def test_conv1d_groups_against_torch(torch, rng, kw):
    x, w, b = rng.standard_normal((3, 4, 11)), rng.standard_normal((8, 4 // kw["groups"], 3)), rng.standard_normal(8)
    ty, (tx, tw, tb) = _torch_conv(torch, 1, x, w, b, **kw)
    y, pullback = attnc.vjp(attnc.nn.conv1d, x, w, b, **kw)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=0, atol=1e-12 * max(1, np.abs(y).max()))
    dy = rng.standard_normal(y.shape)
    ty.backward(torch.tensor(dy))
    g = pullback(dy)
    for name, t in (("input", tx), ("weight", tw), ("bias", tb)):
        np.testing.assert_allclose(g[name], t.grad.numpy(), rtol=0, atol=1e-12 * max(1, np.abs(g[name]).max()))


@pytest.mark.parametrize("groups,kw", [(2, dict(stride=2, padding=1)), (4, dict(dilation=2, padding="same"))])
def test_conv2d_groups_finite_differences(rng, check_vjp, groups, kw):
    x = rng.standard_normal((2, 4, 5, 6))
    w = rng.standard_normal((4, 4 // groups, 3, 2))
    b = rng.standard_normal(4)
    pad, d = kw.get("padding", 0), kw.get("dilation", 1)
    pads = ((d, d), (d // 2, d - d // 2)) if pad == "same" else ((pad, pad), (pad, pad))

    def ref(input, weight, bias, **_):
        return conv_ref.conv2d(input, weight, bias, (kw.get("stride", 1),) * 2, pads, (d, d), groups)

    check_vjp(
        attnc.nn.conv2d,
        ref,
        dict(input=x, weight=w, bias=b, groups=groups, **kw),
        rng,
        positional=("input", "weight", "bias"),
        expect_names=["input", "weight", "bias"],
    )


def test_grouped_modules_match_torch_modules(torch, rng):
    for cls, tcls, x in [
        (attnc.nn.Conv2d, torch.nn.Conv2d, rng.standard_normal((2, 6, 7, 8))),
        (attnc.nn.Conv1d, torch.nn.Conv1d, rng.standard_normal((2, 6, 10))),
    ]:
        for groups, out in ((2, 4), (3, 9), (6, 6)):
            m = cls(6, out, 3, padding=1, groups=groups, dtype=np.float64, seed=0)
            t = tcls(6, out, 3, padding=1, groups=groups, dtype=torch.float64)
            assert m.groups == groups and f"groups={groups}" in repr(m)
            assert {k: v.shape for k, v in m.state_dict().items()} == {
                k: tuple(v.shape) for k, v in t.state_dict().items()
            }
            m.load_state_dict(t.state_dict())
            y, pullback = attnc.vjp(m, x)
            ty = t(torch.tensor(x))
            np.testing.assert_allclose(y, ty.detach().numpy(), rtol=0, atol=1e-12)
            dy = rng.standard_normal(y.shape)
            ty.backward(torch.tensor(dy))
            g = pullback(dy)
            for name, p in t.named_parameters():
                np.testing.assert_allclose(g[name], p.grad.numpy(), rtol=0, atol=1e-11, err_msg=name)
    # torch's init bound: 1 / sqrt(fan_in), fan_in = Cin / groups kH kW
    m = attnc.nn.Conv2d(8, 4, 3, groups=4, seed=1)
    bound = 1 / np.sqrt(8 // 4 * 9)
    assert m.weight.shape == (4, 2, 3, 3) and bound * 0.8 < np.abs(m.weight).max() <= bound


def test_causal_conv1d_matches_padded_conv_and_is_causal(torch, rng, check_vjp):
    for k, d in [(2, 1), (2, 4), (3, 2), (1, 1)]:
        m = attnc.nn.CausalConv1d(3, 5, kernel_size=k, dilation=d, dtype=np.float64, seed=1)
        assert m.weight.shape == (5, 3, k) and m.bias.shape == (5,)
        assert list(m.state_dict()) == ["weight", "bias"]
        x = rng.standard_normal((2, 3, 12))
        y = m(x)
        assert y.shape == (2, 5, 12)
        F = torch.nn.functional
        ty = F.conv1d(
            F.pad(torch.tensor(x), ((k - 1) * d, 0)), torch.tensor(m.weight), torch.tensor(m.bias), dilation=d
        )
        np.testing.assert_allclose(y, ty.numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(y, conv_ref.causal_conv1d(x, m.weight, m.bias, d), rtol=0, atol=1e-12)
        # changing inputs at t >= t0 leaves outputs before t0 unchanged (bitwise), and changes the rest
        for t0 in (0, 5, 11):
            x2 = x.copy()
            x2[:, :, t0:] += rng.standard_normal(x2[:, :, t0:].shape)
            y2 = m(x2)
            same_bits(y2[:, :, :t0], y[:, :, :t0], f"k={k} d={d} t0={t0}")
            assert np.abs(y2[:, :, t0:] - y[:, :, t0:]).min(axis=(0, 1)).max() > 0
        # gradients: module vjp against finite differences of the reference
        out, pullback = attnc.vjp(m, x)
        dy = rng.standard_normal(out.shape)
        g = pullback(dy)
        assert set(g) == {"input", "weight", "bias"}
        from conftest import numeric_vjp

        num = numeric_vjp(
            lambda input, weight, bias: conv_ref.causal_conv1d(input, weight, bias, d),
            dict(input=x, weight=m.weight, bias=m.bias),
            [dy],
            ["input", "weight", "bias"],
        )
        for name in num:
            np.testing.assert_allclose(g[name], num[name], rtol=1e-6, atol=1e-7)
        # the gradient of the input at t only comes from outputs >= t
        dy0 = np.zeros_like(out)
        dy0[:, :, 6] = 1
        gx = pullback(dy0)["input"]
        assert np.all(gx[:, :, 7:] == 0)


def test_causal_conv1d_unbatched_and_float32(rng):
    m = attnc.nn.CausalConv1d(2, 3, 3, dilation=2, seed=0)
    assert m.weight.dtype == np.float32
    x = rng.standard_normal((2, 9)).astype(np.float32)
    y = m(x)
    assert y.shape == (3, 9) and y.dtype == np.float32
    np.testing.assert_allclose(y, m(x[None])[0], rtol=0, atol=0)
    m64 = attnc.nn.CausalConv1d(2, 3, 3, dilation=2, seed=0, dtype=np.float64)
    np.testing.assert_allclose(y, m64(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_modules_match_torch_modules(torch, rng):
    for cls, tcls, x in [
        (attnc.nn.Conv2d, torch.nn.Conv2d, rng.standard_normal((2, 3, 7, 8))),
        (attnc.nn.Conv1d, torch.nn.Conv1d, rng.standard_normal((2, 3, 10))),
    ]:
        for kw in [
            dict(kernel_size=3, padding="same"),
            dict(kernel_size=2, stride=2, bias=False),
            dict(kernel_size=3, padding=1, dilation=2),
        ]:
            m = cls(3, 4, dtype=np.float64, seed=0, **kw)
            t = tcls(3, 4, dtype=torch.float64, **kw)
            assert list(m.state_dict()) == list(t.state_dict())
            assert all(m.state_dict()[k].shape == tuple(v.shape) for k, v in t.state_dict().items())
            t.load_state_dict({k: torch.tensor(v) for k, v in m.state_dict().items()})
            np.testing.assert_allclose(m(x), t(torch.tensor(x)).detach().numpy(), rtol=0, atol=1e-12)
            m2 = cls(3, 4, dtype=np.float64, seed=0, **kw)
            m2.load_state_dict(t.state_dict())
            same_bits(m2.weight, m.weight)


def test_default_init_is_torch_bound_and_seeded():
    m = attnc.nn.Conv2d(6, 8, (3, 2), seed=3)
    bound = 1 / np.sqrt(6 * 3 * 2)
    assert m.weight.shape == (8, 6, 3, 2) and np.abs(m.weight).max() <= bound
    assert np.abs(m.weight).max() > 0.8 * bound and np.abs(m.bias).max() <= bound
    same_bits(m.weight, attnc.nn.Conv2d(6, 8, (3, 2), seed=3).weight)
    assert not np.array_equal(m.weight, attnc.nn.Conv2d(6, 8, (3, 2), seed=4).weight)


@pytest.mark.parametrize("groups", [1, 3])
def test_threads_bitwise(rng, restore_threads, groups):
    x = rng.standard_normal((7, 6, 12, 13)).astype(np.float32)
    w = rng.standard_normal((6, 6 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    results = []
    for n in (1, 2, 3):
        attnc.set_num_threads(n)
        y, pullback = attnc.vjp(attnc.nn.conv2d, x, w, b, stride=(1, 2), padding=1, groups=groups)
        g = pullback(np.ones_like(y))
        results.append((y, g))
    for y, g in results[1:]:
        same_bits(y, results[0][0])
        for k in g:
            same_bits(g[k], results[0][1][k], k)


def test_inputs_unchanged_and_strided_inputs(rng, assert_unchanged):
    x = rng.standard_normal((2, 3, 8, 10))
    w = rng.standard_normal((4, 3, 3, 3))
    y = assert_unchanged(attnc.nn.conv2d, x, w, None, padding=1)
    xt = np.asfortranarray(x)[:, :, :, ::-1]  # a strided, non-contiguous view
    np.testing.assert_allclose(
        attnc.nn.conv2d(xt, w, None, padding=1),
        attnc.nn.conv2d(np.ascontiguousarray(xt), w, None, padding=1),
        rtol=0,
        atol=0,
    )
    assert y.shape == (2, 4, 8, 10)


def test_bad_input(rng):
    x = rng.standard_normal((2, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    with pytest.raises(ValueError, match="channels"):
        attnc.nn.conv2d(x, rng.standard_normal((4, 2, 3, 3)))
    with pytest.raises(ValueError, match="weight has shape"):
        attnc.nn.conv2d(x, rng.standard_normal((4, 3, 3)))
    with pytest.raises(ValueError, match="input has shape"):
        attnc.nn.conv2d(rng.standard_normal((3, 6)), w)
    with pytest.raises(ValueError, match=r"bias has shape \(3,\), expected \(4,\)"):
        attnc.nn.conv2d(x, w, np.ones(3))
    with pytest.raises(TypeError, match="dtype"):
        attnc.nn.conv2d(x.astype(np.float32), w)
    with pytest.raises(ValueError, match="stride must be >= 1"):
        attnc.nn.conv2d(x, w, stride=0)
    with pytest.raises(ValueError, match="padding must be >= 0"):
        attnc.nn.conv2d(x, w, padding=-1)
    with pytest.raises(ValueError, match="strided"):
        attnc.nn.conv2d(x, w, padding="same", stride=2)
    with pytest.raises(ValueError, match="padding must be"):
        attnc.nn.conv2d(x, w, padding="full")
    with pytest.raises(ValueError, match="groups"):
        attnc.nn.conv2d(x, w, groups=3)
    # torch's checks of groups: the weight's outputs divisible by groups, the input's
    # channels = weight's inputs x groups; modules: both channel counts divisible
    with pytest.raises(ValueError, match="groups=3"):
        attnc.nn.conv2d(x, rng.standard_normal((4, 1, 3, 3)), groups=3)
    with pytest.raises(ValueError, match="channels"):
        attnc.nn.conv2d(x, rng.standard_normal((4, 2, 3, 3)), groups=2)
    with pytest.raises(ValueError, match="groups"):
        attnc.nn.conv2d(x, w, groups=0)
    with pytest.raises(TypeError, match="groups"):
        attnc.nn.conv2d(x, w, groups=1.0)
    with pytest.raises(ValueError, match="in_channels.*divisible by groups"):
        attnc.nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="out_channels.*divisible by groups"):
        attnc.nn.Conv1d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match="smaller than the dilated kernel"):
        attnc.nn.conv2d(x, w, dilation=3)
    with pytest.raises(TypeError, match="stride"):
        attnc.nn.conv2d(x, w, stride=1.5)
    with pytest.raises(ValueError, match="in_channels"):
        attnc.nn.Conv2d(-1, 3, 3)
    with pytest.raises(ValueError, match="out_channels"):
        attnc.nn.Conv2d(3, 0, 3)
    with pytest.raises(ValueError, match="kernel_size"):
        attnc.nn.CausalConv1d(3, 3, kernel_size=0)
    with pytest.raises(ValueError, match="channels"):
        attnc.nn.CausalConv1d(3, 3)(rng.standard_normal((2, 4, 5)).astype(np.float32))


def test_modules_take_any_padding_but_a_file_may_not_size_every_output(tmp_path):
    """Conv1d/Conv2d take any padding, as torch's do; attnc.load refuses a
    file's padding beyond dilation (k - 1), which would only add output
    columns that see no input (and size every output by an untrusted number)."""
    wide = attnc.nn.Conv1d(2, 3, 3, padding=5, seed=0)
    x = np.random.default_rng(0).standard_normal((1, 2, 4)).astype(np.float32)
    assert wide(x).shape == (1, 3, 12)
    attnc.save(tmp_path / "ok.npz", attnc.nn.Conv2d(2, 3, 3, padding=(4, 2), dilation=2))
    attnc.load(tmp_path / "ok.npz")
    attnc.save(tmp_path / "wide.npz", wide)
    with pytest.raises(attnc.FileFormatError, match=r"padding 5 exceeds dilation \* \(kernel_size - 1\) = \(2,\)"):
        attnc.load(tmp_path / "wide.npz")
