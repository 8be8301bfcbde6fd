"""SNAIL (Mishra et al. 2017): the gated activation (C op), attnc.nn.DenseBlock, TCBlock,
AttentionBlock and attnc.models.SNAIL against the NumPy float64 reference
(tests/reference/snail_ref.py, written independently of attnc) for values, against the
same network composed of torch operations (conv1d, softmax attention, autograd) for the
gradients of every parameter and of the inputs (attention-weight cotangents included),
central finite differences as a second check, causality (outputs at t independent of
inputs after t), float32 against float64, inputs never modified, thread-count
independence (bitwise), state_dict / save / load, and argument errors. Sizes are tiny."""

import numpy as np
import pytest

import attnc
import attnc.models
from attnc.datasets import FewShotTask
from helpers import close, same_bits
from reference import snail_ref as ref

REL64 = 1e-12  # float64 values vs the NumPy reference
GREL64 = 1e-10  # float64 gradients vs torch autograd
REL32 = 2e-5  # float32 vs float64


def randn(rng, *shape, scale=1.0, dtype=np.float64):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def torch_grads(torch, params, extra):
    """{name: gradient as NumPy} of torch leaves (params dict and extra (name, tensor) pairs)."""
    out = {k: v.grad.numpy() for k, v in params.items()}
    out.update({k: v.grad.numpy() for k, v in extra})
    return out


def compare_grads(got, want, rel, what=""):
    assert set(got) == set(want), (sorted(set(got) ^ set(want)), what)
    for k in want:
        assert got[k].shape == want[k].shape, (k, got[k].shape, want[k].shape)
        close(got[k], want[k], rel, f"{what} {k}")


# --------------------------------------------------------------------------- the gated activation


@pytest.mark.parametrize("shape", [(7,), (2, 3, 5), (3, 4100), (0, 4)])
def test_gated_against_numpy(rng, shape):
    a, b = randn(rng, *shape, scale=3), randn(rng, *shape, scale=3)
    close(attnc.nn.gated_activation(a, b), ref.gated(a, b), REL64, "float64")
    y32 = attnc.nn.gated_activation(a.astype(np.float32), b.astype(np.float32))
    assert y32.dtype == np.float32
    close(y32, ref.gated(a.astype(np.float32), b.astype(np.float32)), 1e-6, "float32")


def test_gated_saturates_without_nan():
    a = np.array([-1e4, -50, 0, 50, 1e4, np.inf, -np.inf])
    b = np.array([1e4, -50, 0, 50, -1e4, np.inf, np.inf])
    for dt in (np.float32, np.float64):
        (y, pb) = attnc.vjp(attnc.nn.gated_activation, a.astype(dt), b.astype(dt))
        g = pb(np.ones_like(y))
        assert np.isfinite(y).all() and np.isfinite(g["input"]).all() and np.isfinite(g["gate"]).all()
        close(y, [-1, 0, 0, 1, 0, 1, -1], 1e-6)


def test_gated_gradients(rng, check_vjp, torch):
    a, b = randn(rng, 3, 5, scale=2), randn(rng, 3, 5, scale=2)
    check_vjp(
        attnc.nn.gated_activation,
        lambda input, gate: ref.gated(input, gate),
        {"input": a, "gate": b},
        rng,
        positional=("input", "gate"),
    )
    dy = randn(rng, 3, 5)
    _, pb = attnc.vjp(attnc.nn.gated_activation, a, b)
    g = pb(dy)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (torch.tanh(ta) * torch.sigmoid(tb) * torch.tensor(dy)).sum().backward()
    close(g["input"], ta.grad.numpy(), GREL64)
    close(g["gate"], tb.grad.numpy(), GREL64)
    # float32 gradients agree with float64
    _, pb32 = attnc.vjp(attnc.nn.gated_activation, a.astype(np.float32), b.astype(np.float32))
    g32 = pb32(dy.astype(np.float32))
    close(g32["input"], g["input"], REL32)
    close(g32["gate"], g["gate"], REL32)


def test_gated_bad_input(rng):
    a = randn(rng, 2, 3)
    with pytest.raises(ValueError, match="same shape"):
        attnc.nn.gated_activation(a, randn(rng, 3, 2))
    with pytest.raises(TypeError, match="gate has dtype float32"):
        attnc.nn.gated_activation(a, a.astype(np.float32))
    with pytest.raises(TypeError, match="input has dtype int64"):
        attnc.nn.gated_activation(np.ones((2, 3), np.int64), a)


def test_gated_strided_inputs_unchanged(rng, assert_unchanged):
    a, b = randn(rng, 6, 8), randn(rng, 6, 8)
    y = assert_unchanged(attnc.nn.gated_activation, a[::2, ::3], b[1::2, ::3])
    close(y, ref.gated(a[::2, ::3], b[1::2, ::3]), REL64)


# --------------------------------------------------------------------------- dense and TC blocks


def dense(C=3, F=4, dilation=2, dtype=np.float64, seed=0):
    return attnc.nn.DenseBlock(C, F, dilation, dtype=dtype, seed=seed)


def test_dense_block_against_numpy(rng):
    for dilation in (1, 2, 5, 12):
        block = dense(3, 4, dilation)
        x = randn(rng, 2, 3, 9)
        y = block(x)
        assert y.shape == (2, 7, 9)
        close(y, ref.dense_block(x, block.state_dict(), "", dilation), REL64, f"dilation {dilation}")
        same_bits(y[:, :3], x, "the input passes through")
    assert list(block.state_dict()) == ["filter_conv.weight", "filter_conv.bias", "gate_conv.weight", "gate_conv.bias"]
    assert block.filter_conv.weight.shape == (4, 3, 2) and block.out_channels == 7


def test_dense_block_gradients_against_torch(rng, torch):
    block = dense(3, 4, 2)
    x = randn(rng, 2, 3, 7)
    y, pb = attnc.vjp(block, x)
    dy = randn(rng, *y.shape)
    g = pb(dy)
    P = ref.torch_params(torch, block.state_dict())
    tx = torch.tensor(x, requires_grad=True)
    (ref.torch_dense_block(torch, tx, P, "", 2) * torch.tensor(dy)).sum().backward()
    compare_grads(g, torch_grads(torch, P, [("input", tx)]), GREL64, "dense block")


def test_dense_block_finite_differences(rng, fd_check):
    block = dense(2, 3, 1)
    x = randn(rng, 2, 2, 5)
    y, pb = attnc.vjp(block, x)
    dy = randn(rng, *y.shape)
    g = pb(dy)
    p = block.state_dict()

    def f(input, **params):
        return ref.dense_block(input, {k.replace("__", "."): v for k, v in params.items()}, "", 1)

    kwargs = {"input": x, **{k.replace(".", "__"): v for k, v in p.items()}}
    grads = {"input": g["input"], **{k.replace(".", "__"): v for k, v in g.items() if k != "input"}}
    fd_check(f, kwargs, [dy], grads)


@pytest.mark.parametrize("seq_len,depth", [(1, 1), (2, 1), (3, 2), (6, 3), (8, 3), (9, 4), (26, 5), (64, 6)])
def test_tc_depth(seq_len, depth):
    assert attnc.nn.snail.tc_depth(seq_len) == depth == ref.tc_depth(seq_len)
    tc = attnc.nn.TCBlock(2, seq_len, 3, seed=0)
    assert len(tc.blocks) == depth and tc.out_channels == 2 + 3 * depth
    assert [b.dilation for b in tc.blocks] == [2**i for i in range(depth)]


def test_tc_block_against_numpy_and_torch(rng, torch):
    tc = attnc.nn.TCBlock(3, 11, 2, dtype=np.float64, seed=4)
    x = randn(rng, 2, 3, 11)
    y, pb = attnc.vjp(tc, x)
    assert y.shape == (2, 3 + 4 * 2, 11)
    close(y, ref.tc_block(x, tc.state_dict(), "", 11), REL64)
    dy = randn(rng, *y.shape)
    g = pb(dy)
    P = ref.torch_params(torch, tc.state_dict())
    tx = torch.tensor(x, requires_grad=True)
    (ref.torch_tc_block(torch, tx, P, "", 11) * torch.tensor(dy)).sum().backward()
    compare_grads(g, torch_grads(torch, P, [("input", tx)]), GREL64, "TC block")
    assert "blocks.3.gate_conv.bias" in g


def test_convolution_blocks_are_causal(rng):
    tc = attnc.nn.TCBlock(2, 16, 3, dtype=np.float64, seed=1)
    x = randn(rng, 1, 2, 16)
    y = tc(x)
    for t in (0, 5, 15):
        x2 = x.copy()
        x2[:, :, t + 1 :] += randn(rng, 1, 2, 15 - t, scale=5)
        y2 = tc(x2)
        same_bits(y2[:, :, : t + 1], y[:, :, : t + 1], f"TC output up to {t}")
        if t < 15:
            assert not np.allclose(y2[:, :, t + 1 :], y[:, :, t + 1 :])
    # the receptive field: output 15 depends on input 0 (2^4 = 16 steps)
    x3 = x.copy()
    x3[:, :, 0] += 1
    assert np.abs(tc(x3)[:, 2:, 15] - y[:, 2:, 15]).max() > 0


# --------------------------------------------------------------------------- the attention block


def test_attention_block_against_numpy(rng):
    att = attnc.nn.AttentionBlock(5, 4, 3, dtype=np.float64, seed=2)
    x = randn(rng, 3, 7, 5)
    y = att(x)
    y2, A = att(x, return_attention=True)
    yr, Ar = ref.attention_block(x, att.state_dict(), "")
    assert y.shape == (3, 7, 8) and A.shape == (3, 7, 7)
    close(y, yr, REL64)
    close(A, Ar, REL64)
    same_bits(y, y2)
    assert np.all(np.triu(A, 1) == 0) and np.allclose(A.sum(-1), 1)
    assert A[:, 0, 0].tolist() == [1.0, 1.0, 1.0]
    assert list(att.state_dict()) == [
        "query.weight",
        "query.bias",
        "key.weight",
        "key.bias",
        "value.weight",
        "value.bias",
    ]
    assert att.query.weight.shape == (4, 5) and att.value.weight.shape == (3, 5) and att.out_channels == 8


@pytest.mark.parametrize("with_weights", [False, True])
def test_attention_block_gradients_against_torch(rng, torch, with_weights):
    att = attnc.nn.AttentionBlock(5, 4, 3, dtype=np.float64, seed=2)
    x = randn(rng, 2, 6, 5)
    out, pb = attnc.vjp(att, x, return_attention=with_weights)
    y = out[0] if with_weights else out
    dy = randn(rng, *y.shape)
    dA = randn(rng, 2, 6, 6) if with_weights else None
    g = pb(dy, dA) if with_weights else pb(dy)
    P = ref.torch_params(torch, att.state_dict())
    tx = torch.tensor(x, requires_grad=True)
    ty, tA = ref.torch_attention_block(torch, tx, P, "")
    loss = (ty * torch.tensor(dy)).sum()
    if with_weights:
        loss = loss + (tA * torch.tensor(dA)).sum()
    loss.backward()
    compare_grads(g, torch_grads(torch, P, [("input", tx)]), GREL64, "attention block")
    if with_weights:  # only the weights' cotangent
        g2 = pb(None, dA)
        assert set(g2) == set(g) and np.isfinite(g2["input"]).all()


def test_attention_block_finite_differences(rng, fd_check):
    att = attnc.nn.AttentionBlock(3, 2, 2, dtype=np.float64, seed=5)
    x = randn(rng, 2, 4, 3)
    (y, A), pb = attnc.vjp(att, x, return_attention=True)
    dy, dA = randn(rng, *y.shape), randn(rng, *A.shape)
    g = pb(dy, dA)

    def f(input, **params):
        return ref.attention_block(input, {k.replace("__", "."): v for k, v in params.items()}, "")

    kwargs = {"input": x, **{k.replace(".", "__"): v for k, v in att.state_dict().items()}}
    grads = {"input": g["input"], **{k.replace(".", "__"): v for k, v in g.items() if k != "input"}}
    fd_check(f, kwargs, [dy, dA], grads)


def test_attention_block_is_causal(rng):
    att = attnc.nn.AttentionBlock(4, 3, 2, dtype=np.float64, seed=1)
    x = randn(rng, 2, 8, 4)
    y, A = att(x, return_attention=True)
    x2 = x.copy()
    x2[:, 4:] = randn(rng, 2, 4, 4, scale=3)
    y2, A2 = att(x2, return_attention=True)
    same_bits(y2[:, :4], y[:, :4])
    same_bits(A2[:, :4], A[:, :4])


# --------------------------------------------------------------------------- the model

N, K, D = 3, 2, 4  # a tiny 3-way 2-shot task over 4 features
SIZES = ((4, 3), (5, 2), (3, 3))


def model(dtype=np.float64, seed=0, **kw):
    args = dict(embedding_size=6, filters=3, attention_sizes=SIZES)
    args.update(kw)
    return attnc.models.SNAIL(N, K, D, **args, dtype=dtype, seed=seed)


def episodes(B=3, seed=0, dtype=np.float64):
    return FewShotTask(N, K, dim=D, noise=0.8).episodes(B, seed=seed, dtype=dtype)


def test_snail_structure():
    m = model()
    kinds = [type(b).__name__ for b in m.blocks]
    assert kinds == ["AttentionBlock", "TCBlock", "AttentionBlock", "TCBlock", "AttentionBlock"]
    assert m.seq_len == 7 and len(m.blocks[1].blocks) == 3
    C = 6 + 3
    C += 3 * 3
    assert m.blocks[2].in_channels == C
    C = C + 2 + 3 * 3
    assert m.blocks[4].in_channels == C and m.classifier.weight.shape == (N, C + 3)
    assert m.embedding.weight.shape == (6, D + N)
    names = list(m.state_dict())
    assert names[:2] == ["embedding.weight", "embedding.bias"] and names[-2:] == [
        "classifier.weight",
        "classifier.bias",
    ]
    assert "blocks.3.blocks.2.filter_conv.weight" in names and "blocks.4.value.bias" in names
    paper = attnc.models.SNAIL(5, 1, 8, filters=128, attention_sizes=attnc.models.snail.PAPER_ATTENTION, seed=0)
    assert [getattr(b, "key_size", None) for b in paper.blocks] == [64, None, 256, None, 512]


def test_snail_against_numpy(rng):
    m = model()
    ep = episodes()
    logits, att = m(ep.features, ep.labels, return_attention=True)
    want, want_att = ref.snail(ep.features, ep.labels, m.state_dict(), N, m.seq_len, len(SIZES))
    assert logits.shape == (3, N) and len(att) == 3
    close(logits, want, REL64)
    for a, w in zip(att, want_att):
        close(a, w, REL64)
    same_bits(m(ep.features, ep.labels), logits)
    same_bits(m.predict(ep.features, ep.labels), logits.argmax(1))
    # a shorter and a longer sequence than N K + 1 are read too
    for T in (1, 4, 10):
        f, lab = randn(rng, 2, T, D), rng.integers(0, N, (2, T - 1))
        close(m(f, lab), ref.snail(f, lab, m.state_dict(), N, m.seq_len, len(SIZES))[0], REL64, f"T={T}")


@pytest.mark.parametrize("with_attention", [False, True])
def test_snail_gradients_against_torch(rng, torch, with_attention):
    m = model()
    ep = episodes(B=2, seed=3)
    out, pb = attnc.vjp(m, ep.features, ep.labels, return_attention=with_attention)
    logits = out[0] if with_attention else out
    dl = randn(rng, *logits.shape)
    dA = tuple(randn(rng, *a.shape) for a in out[1]) if with_attention else None
    g = pb(dl, dA) if with_attention else pb(dl)
    P = ref.torch_params(torch, m.state_dict())
    tf = torch.tensor(ep.features, requires_grad=True)
    tl, tA = ref.torch_snail(torch, tf, ep.labels, P, N, m.seq_len, len(SIZES))
    loss = (tl * torch.tensor(dl)).sum()
    if with_attention:
        loss = loss + sum((a * torch.tensor(c)).sum() for a, c in zip(tA, dA))
    loss.backward()
    compare_grads(g, torch_grads(torch, P, [("features", tf)]), GREL64, "SNAIL")


def test_snail_finite_differences(rng, fd_check):
    m = model(embedding_size=3, filters=2, attention_sizes=((2, 2), (2, 2)))
    ep = episodes(B=2, seed=4)
    logits, pb = attnc.vjp(m, ep.features, ep.labels)
    dl = randn(rng, *logits.shape)
    g = pb(dl)
    p = m.state_dict()
    chosen = [
        "embedding.weight",
        "blocks.0.key.weight",
        "blocks.1.blocks.1.gate_conv.weight",
        "blocks.1.blocks.2.filter_conv.bias",
        "blocks.2.value.weight",
        "classifier.bias",
    ]

    def f(features, **params):
        q = dict(p)
        q.update({k.replace("__", "."): v for k, v in params.items()})
        return ref.snail(features, ep.labels, q, N, m.seq_len, 2)[0]

    kwargs = {"features": ep.features, **{k.replace(".", "__"): p[k] for k in chosen}}
    grads = {"features": g["features"], **{k.replace(".", "__"): g[k] for k in chosen}}
    fd_check(f, kwargs, [dl], grads)


def test_snail_loss_and_grad_against_torch(torch):
    m = model()
    ep = episodes(B=4, seed=5)
    loss, grads = m.loss_and_grad(ep)
    P = ref.torch_params(torch, m.state_dict())
    tl, _ = ref.torch_snail(torch, torch.tensor(ep.features), ep.labels, P, N, m.seq_len, len(SIZES))
    tloss = torch.nn.functional.cross_entropy(tl, torch.tensor(ep.targets))
    tloss.backward()
    assert loss == pytest.approx(tloss.item(), rel=1e-12)
    compare_grads(grads, torch_grads(torch, P, []), GREL64, "loss_and_grad")


def test_snail_is_causal(rng):
    """The logits read the whole episode, but every attention row t (and so every
    position's state) is independent of the examples after t."""
    m = model()
    ep = episodes(B=2, seed=6)
    _, att = m(ep.features, ep.labels, return_attention=True)
    f, lab = ep.features.copy(), ep.labels.copy()
    f[:, 3:] = randn(rng, 2, 4, D, scale=3)
    lab[:, 3:] = (lab[:, 3:] + 1) % N
    _, att2 = m(f, lab, return_attention=True)
    for a, b in zip(att, att2):
        same_bits(b[:, :3], a[:, :3], "rows before the change")
        assert not np.allclose(b[:, 3:], a[:, 3:])
    # the query's label part is ignored: its logits depend on its features and the support only
    logits = m(ep.features, ep.labels)
    f = ep.features.copy()
    f[:, -1] += 1
    assert not np.allclose(m(f, ep.labels), logits)


def test_snail_float32_matches_float64(rng):
    m64 = model(seed=7)
    m32 = model(dtype=np.float32, seed=7)
    m32.load_state_dict(m64.state_dict())
    ep = episodes(B=3, seed=7)
    ep32 = episodes(B=3, seed=7, dtype=np.float32)
    (l64, a64), pb64 = attnc.vjp(m64, ep.features, ep.labels, return_attention=True)
    (l32, a32), pb32 = attnc.vjp(m32, ep32.features, ep32.labels, return_attention=True)
    assert l32.dtype == np.float32 and all(a.dtype == np.float32 for a in a32)
    close(l32, l64, REL32)
    for a, b in zip(a32, a64):
        close(a, b, REL32)
    dl = randn(rng, *l64.shape)
    g64, g32 = pb64(dl, None), pb32(dl.astype(np.float32), None)
    for k in g64:
        assert g32[k].dtype == np.float32
        close(g32[k], g64[k], 1e-4, k)


def test_snail_threads_bitwise(restore_threads):
    m = model(dtype=np.float32, embedding_size=32, filters=16, attention_sizes=((16, 16), (32, 16)))
    ep = FewShotTask(N, K, dim=D).episodes(64, seed=8)
    runs = []
    for threads in (1, 2, 3):
        attnc.set_num_threads(threads)
        (logits, att), pb = attnc.vjp(m, ep.features, ep.labels, return_attention=True)
        runs.append((logits, att, pb(np.ones_like(logits), None)))
    for logits, att, g in runs[1:]:
        same_bits(logits, runs[0][0])
        for a, b in zip(att, runs[0][1]):
            same_bits(a, b)
        for k in g:
            same_bits(g[k], runs[0][2][k], k)


def test_snail_inputs_unchanged(assert_unchanged):
    m = model()
    ep = episodes()
    f = np.asfortranarray(ep.features)
    assert_unchanged(m, f, ep.labels, return_attention=True)
    assert_unchanged(attnc.vjp, m, ep.features, ep.labels)
    close(m(f, ep.labels), m(ep.features, ep.labels), REL64)


def test_snail_state_dict_save_load(tmp_path):
    m = model(seed=1)
    other = model(seed=2)
    ep = episodes()
    assert not np.allclose(m(ep.features, ep.labels), other(ep.features, ep.labels))
    other.load_state_dict(m.state_dict())
    same_bits(other(ep.features, ep.labels), m(ep.features, ep.labels))
    path = tmp_path / "snail.npz"
    attnc.save(path, m)
    loaded = attnc.load(path)
    assert isinstance(loaded, attnc.models.SNAIL) and loaded.attention_sizes == SIZES and not loaded.training
    same_bits(loaded(ep.features, ep.labels), m(ep.features, ep.labels))
    same_bits(model(seed=1)(ep.features, ep.labels), m(ep.features, ep.labels), "same seed, same model")


def test_bad_input(rng):
    m = model()
    ep = episodes()
    with pytest.raises(ValueError, match=r"features has shape \(3, 7\)"):
        m(ep.features[..., 0], ep.labels)
    with pytest.raises(ValueError, match=r"expected \(B, T, 4\)"):
        m(ep.features[..., :3], ep.labels)
    with pytest.raises(TypeError, match="features has dtype float32"):
        m(ep.features.astype(np.float32), ep.labels)
    with pytest.raises(ValueError, match=r"labels must be integers of shape \(3, 6\)"):
        m(ep.features, ep.labels[:, :-1])
    with pytest.raises(ValueError, match=r"labels must be integers"):
        m(ep.features, ep.labels.astype(np.float64))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\)"):
        m(ep.features, ep.labels + 1)
    with pytest.raises(ValueError, match="attention_sizes must be"):
        model(attention_sizes=())
    with pytest.raises(ValueError, match="attention_sizes must be"):
        model(attention_sizes=((4, 0),))
    with pytest.raises(ValueError, match="attention_sizes must be"):
        model(attention_sizes=(4, 3))
    with pytest.raises(ValueError, match="n_way must be an int >= 2"):
        attnc.models.SNAIL(1, 1, 4)
    with pytest.raises(ValueError, match="filters must be an int >= 1"):
        attnc.nn.TCBlock(3, 8, 0)
    with pytest.raises(ValueError, match="dilation must be an int >= 1"):
        attnc.nn.DenseBlock(3, 8, 0)
    with pytest.raises(ValueError, match="key_size must be an int >= 1"):
        attnc.nn.AttentionBlock(3, 0, 2)
    block = attnc.nn.DenseBlock(3, 2, 1, dtype=np.float64)
    with pytest.raises(ValueError, match=r"input has shape \(2, 4, 5\), expected \(B, 3, T\)"):
        block(randn(rng, 2, 4, 5))
    att = attnc.nn.AttentionBlock(3, 2, 2, dtype=np.float64)
    with pytest.raises(ValueError, match=r"expected \(B, T, 3\)"):
        att(randn(rng, 2, 3, 5))
    with pytest.raises(TypeError, match="input has dtype float32"):
        att(randn(rng, 2, 5, 3, dtype=np.float32))
    _, pb = attnc.vjp(m, ep.features, ep.labels)
    with pytest.raises(ValueError, match="cotangent 0 has shape"):
        pb(np.ones((2, 3)))
