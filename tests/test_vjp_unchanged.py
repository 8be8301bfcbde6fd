"""attnc.vjp's pullback and the arrays it reads (issue 25, hole 6): forwards
keep the caller's arrays by reference, so a change between the forward and
the pullback (an argument, a saved output, a module's parameter, say by an
optimiser step) used to change the gradients silently. Now the pullback
raises RuntimeError naming what changed, as torch does ("one of the
variables needed for gradient computation has been modified by an inplace
operation"); what the backward does not read may change, as in torch."""

import numpy as np
import pytest

import attnc
import attnc.models


def _pullback_twice(pullback, cotangents, change, restore):
    """Gradients before change(); the pullback raising after it; and, once
    restore() puts the bytes back, the same gradients again."""
    before = pullback(*cotangents)
    change()
    with pytest.raises(RuntimeError, match="was modified after the forward") as err:
        pullback(*cotangents)
    restore()
    after = pullback(*cotangents)
    assert before.keys() == after.keys()
    for n in before:
        assert np.array_equal(before[n], after[n]), n
    return str(err.value)


def _bump(a, index=0):
    """change() and restore() of one entry of a."""
    flat_index = np.unravel_index(index, a.shape)
    old = a[flat_index].copy()

    def change():
        a[flat_index] += 1

    def restore():
        a[flat_index] = old

    return change, restore


def _calls(rng):
    """(name, function, args, kwargs, cotangents of the outputs, argument to change)."""
    f = lambda *s: rng.standard_normal(s)  # noqa: E731
    q, k, v = f(2, 5, 4), f(2, 6, 4), f(2, 6, 3)
    mask = rng.random((2, 5, 6)) < 0.8
    x, w, b = f(7, 4), f(3, 4), f(3)
    E = 4
    return [
        (
            "attention query",
            attnc.attention,
            (q, k, v),
            {"score": "general", "weight": f(4, 4)},
            (f(2, 5, 3), None),
            0,
            "argument 'query'",
        ),
        (
            "attention score weight",
            attnc.attention,
            (q, k, v),
            {"score": "general", "weight": f(4, 4)},
            (f(2, 5, 3), f(2, 5, 6)),
            "weight",
            "argument 'weight'",
        ),
        (
            "sdpa attn_mask",
            attnc.scaled_dot_product_attention,
            (f(1, 2, 5, 4), f(1, 2, 6, 4), f(1, 2, 6, 3)),
            {"attn_mask": mask[:1, None]},
            (f(1, 2, 5, 3),),
            "attn_mask",
            "argument 'attn_mask'",
        ),
        (
            "sdpa key",
            attnc.scaled_dot_product_attention,
            (f(1, 2, 5, 4), f(1, 2, 6, 4), f(1, 2, 6, 3)),
            {},
            (f(1, 2, 5, 3),),
            1,
            "argument 'key'",
        ),
        ("linear weight", attnc.nn.linear, (x, w, b), {}, (f(7, 3),), 1, "argument 'weight'"),
        ("linear input", attnc.nn.linear, (x, w, b), {}, (f(7, 3),), 0, "argument 'input'"),
        (
            "multi-head in_proj_weight",
            attnc.multi_head_attention,
            (f(2, 3, E), f(2, 3, E), f(2, 3, E), 2, f(3 * E, E), f(3 * E), f(E, E), f(E)),
            {},
            (f(2, 3, E), None),
            4,
            "argument 'in_proj_weight'",
        ),
        ("softmax output", attnc.softmax, (f(3, 5),), {}, (f(3, 5),), None, "output 0"),
    ]


@pytest.mark.parametrize("case", range(8), ids=lambda i: _calls(np.random.default_rng(0))[i][0])
def test_a_function_whose_pullback_reads_a_changed_array_raises(case, rng):
    name, fn, args, kwargs, cots, which, label = _calls(rng)[case]
    outputs, pullback = attnc.vjp(fn, *args, **kwargs)
    if which is None:  # the output the backward reads
        target = outputs if isinstance(outputs, np.ndarray) else outputs[0]
    else:
        target = args[which] if isinstance(which, int) else kwargs[which]
    if target.dtype == np.bool_:
        flip = (0,) * target.ndim
        change = lambda: target.__setitem__(flip, not target[flip])  # noqa: E731
        restore = change
    else:
        change, restore = _bump(target)
    message = _pullback_twice(pullback, cots, change, restore)
    assert message.startswith(f"attnc.vjp: {label} was modified"), message


def test_a_changed_buffer_that_is_not_an_array_raises(rng, torch):
    """Forwards read any buffer in place: a memoryview, a torch tensor."""
    q = torch.tensor(rng.standard_normal((4, 3)))
    k = memoryview(bytearray(rng.standard_normal((5, 3)).tobytes())).cast("d", (5, 3))
    (ctx, _), pullback = attnc.vjp(attnc.attention, q, k)
    q[0, 0] += 1
    with pytest.raises(RuntimeError, match="argument 'query' was modified"):
        pullback(np.ones_like(ctx), None)
    q[0, 0] -= 1
    (ctx, _), pullback = attnc.vjp(attnc.attention, q.numpy().copy(), k)
    k[1, 2] += 1
    with pytest.raises(RuntimeError, match="argument 'keys' was modified"):
        pullback(np.ones_like(ctx), None)


def test_what_the_backward_does_not_read_may_change(rng):
    """A linear layer's backward reads neither its bias nor its output (torch
    saves neither), and an input the forward had to copy (a strided view)
    is read from the copy: changing them changes no gradient."""
    x, w, b = rng.standard_normal((7, 8)), rng.standard_normal((3, 4)), rng.standard_normal(3)
    view = x[:, ::2]  # no unit stride: the forward reads a copy
    y, pullback = attnc.vjp(attnc.nn.linear, view, w, b)
    dy = rng.standard_normal(y.shape)
    before = pullback(dy)
    b += 1
    y *= 2
    x += 1
    after = pullback(dy)
    for n in before:
        assert np.array_equal(before[n], after[n]), n


def test_torch_raises_for_the_same_changes(rng, torch):
    """What attnc matches: torch's linear saves the input and the weight, not
    the bias; an optimiser step between the forward and backward is an
    in-place change of the weight."""
    F = torch.nn.functional
    x = torch.tensor(rng.standard_normal((5, 4)), requires_grad=True)
    w = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    b = torch.tensor(rng.standard_normal(3), requires_grad=True)
    F.linear(x, w, b).sum().backward()  # a plain run
    y = F.linear(x, w, b)
    with torch.no_grad():
        b += 1
    y.sum().backward()  # the bias is not saved: fine
    lin = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    loss = lin(x.float()).sum()
    loss.backward(retain_graph=True)
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("optimiser", ["SGD", "Adam"])
def test_an_optimiser_step_before_the_pullback_raises(optimiser, rng):
    lin = attnc.nn.Linear(4, 3, dtype=np.float64, seed=0)
    opt = getattr(attnc.optim, optimiser)(lin, lr=0.1)
    x = rng.standard_normal((6, 4))
    y, pullback = attnc.vjp(lin, x)
    dy = rng.standard_normal(y.shape)
    grads = pullback(dy)
    opt.step(grads)
    with pytest.raises(RuntimeError, match="parameter 'weight' was modified after the forward"):
        pullback(dy)
    y2, pullback2 = attnc.vjp(lin, x)  # a new forward after the step: fine
    fresh = pullback2(dy)
    np.testing.assert_allclose(fresh["input"], dy @ lin.weight, rtol=1e-12)


def test_a_model_after_an_optimiser_step_raises(rng):
    layer = attnc.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=np.float64)
    opt = attnc.optim.Adam(layer, lr=1e-2)
    x = rng.standard_normal((2, 5, 8))
    y, pullback = attnc.vjp(layer, x)
    dy = rng.standard_normal(y.shape)
    opt.step(pullback(dy))
    with pytest.raises(RuntimeError, match=r"parameter '[\w.]+' was modified after the forward"):
        pullback(dy)


def test_a_module_input_changed_raises(rng):
    lstm = attnc.nn.LSTM(3, 4, batch_first=True, dtype=np.float64, seed=0)
    x, h0, c0 = rng.standard_normal((2, 5, 3)), rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 2, 4))
    (out, _), pullback = attnc.vjp(lstm, x, (h0, c0))
    change, restore = _bump(c0)
    message = _pullback_twice(pullback, (rng.standard_normal(out.shape), None), change, restore)
    assert message.startswith("attnc.vjp: argument 'hx'[1] was modified"), message


def test_a_parameter_set_anew_is_read_in_the_old_ones_place(rng):
    """The NTM's backward reads its weight_init from the module itself: a new
    array there with other values is a change; one with the same values is
    not."""
    m = attnc.models.NTM(3, 2, memory_slots=4, memory_width=3, controller_size=5, dtype=np.float64, seed=0)
    x = rng.standard_normal((2, 4, 3))
    y, pullback = attnc.vjp(m, x)
    dy = rng.standard_normal(y.shape)
    before = pullback(dy)
    old = m.weight_init
    m.weight_init = old.copy()
    assert np.array_equal(pullback(dy)["weight_init"], before["weight_init"])
    m.weight_init = old + 1
    with pytest.raises(RuntimeError, match="parameter 'weight_init' was modified after the forward"):
        pullback(dy)


def test_internal_skips_the_check(rng):
    """attnc.grad.internal(): for attnc's own forward-and-pullback runs (a
    model's loss_and_grad), where nothing can run in between."""
    x, w = rng.standard_normal((5, 4)), rng.standard_normal((3, 4))
    with attnc.grad.internal():
        y, pullback = attnc.vjp(attnc.nn.linear, x, w)
    w += 1
    assert set(pullback(np.ones_like(y))) == {"input", "weight"}


def test_the_fingerprint_sees_every_change_and_no_layout(rng):
    """attnc._core.fingerprints, what the check compares: the same values in
    any layout give the same digest; flipping any one entry's sign, any two
    entries' signs (the top bits of two words of one lane, which a plain
    multiply-xor hash misses), swapping two entries or another shape changes
    it."""
    from attnc import _core

    def fingerprint(a):
        return _core.fingerprints([a])[0]

    a = rng.standard_normal((6, 11))
    digest = fingerprint(a)
    for same in (
        a.copy(),
        np.asfortranarray(a),
        a[::-1, ::-1][::-1, ::-1],
        np.ascontiguousarray(a.T).T,
        np.broadcast_to(a, (1,) + a.shape)[0],
        a.view(np.int64),
    ):
        assert fingerprint(same) == digest
    assert fingerprint(a[::-1]) == fingerprint(np.ascontiguousarray(a[::-1]))
    flat = a.ravel()
    seen = {digest}
    for i in range(flat.size):
        b = flat.copy()
        b[i] = -b[i]
        seen.add(fingerprint(b))
        for j in (i + 1, i + 4, i + 8):
            if j < flat.size:
                c = b.copy()
                c[j] = -c[j]
                seen.add(fingerprint(c))
                d = flat.copy()
                d[i], d[j] = d[j], d[i]
                seen.add(fingerprint(d))
    n = flat.size
    pairs = (n - 1) + (n - 4) + (n - 8)
    assert len(seen) == 1 + n + 2 * pairs, "two different arrays gave one digest"
    assert fingerprint(np.zeros(3)) != fingerprint(-np.zeros(3))
    assert fingerprint(np.zeros(3)) != fingerprint(np.zeros(4))
    assert fingerprint(np.zeros((2, 3))) != fingerprint(np.zeros((3, 2)))
    assert fingerprint(np.zeros((0, 3))) != fingerprint(np.zeros((3, 0)))
    assert fingerprint(np.zeros(2, np.float32)) != fingerprint(np.zeros(1, np.float64))
    assert fingerprint(np.array(["2020-01-01"], "M8[D]")) is None  # exports no buffer: nothing to compare
