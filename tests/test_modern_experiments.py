"""Issue 30's experiments (mqar, length_extrapolation, streaming) and their
model, attnc.experiments._mixers.MixerLM: each mixer against a NumPy float64
reference, every parameter's gradient against central differences, the
streaming decoder against one-pass forwards, and each --quick run (its JSON's
curves, the same bits at 1 and 2 threads)."""

import math

import numpy as np
import pytest
from test_experiments import TIMING, run_experiment

from attnc.experiments import _mixers, mqar, streaming
from attnc.experiments._mixers import MixerAttention, MixerLM

# (mixer, positions, sink_logits): each mixer kind, each position scheme, sinks
CASES = [
    ("softmax", "rope", True),
    ("softmax", "alibi", False),
    ("softmax", "none", False),
    ("window", "sinusoidal", True),
    ("window", "alibi", False),
    ("linear", "learned", False),
    ("linear", "rope", False),
    ("performer", "rope", False),
    ("differential", "rope", False),
    ("differential", "learned", False),
    ("sigmoid", "rope", False),
    ("sigmoid", "alibi", False),
]
assert {c[0] for c in CASES} == set(mqar.MIXERS) and {c[1] for c in CASES} == set(_mixers.POSITIONS)


def _rope(x, start=0):
    """Half-split RoPE (Llama's layout) of (..., L, E), base 10000, in float64."""
    L, E = x.shape[-2:]
    theta = (start + np.arange(L))[:, None] * 10000.0 ** (-2 * np.arange(E // 2) / E)
    a, b = x[..., : E // 2], x[..., E // 2 :]
    return np.concatenate([a * np.cos(theta) - b * np.sin(theta), b * np.cos(theta) + a * np.sin(theta)], axis=-1)


def _attention_reference(m, x):
    """MixerAttention's forward in NumPy: projections, positions, the kernel."""
    B, L, D = x.shape
    H = m.num_heads
    qkv = x @ m.qkv.weight.T + m.qkv.bias
    q, k, v = (p.reshape(B, L, H, D // H).transpose(0, 2, 1, 3) for p in np.split(qkv, 3, axis=-1))
    if m.positions == "rope":
        q, k = _rope(q), _rope(k)
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    if m.mixer in ("linear", "performer"):
        if m.mixer == "linear":
            phi = lambda t: np.where(t > 0, t + 1, np.exp(t))  # noqa: E731  elu + 1
        else:
            w = m._projection
            scale = q.shape[-1] ** -0.25
            phi = lambda t: np.exp((t * scale) @ w.T - ((t * scale) ** 2).sum(-1, keepdims=True) / 2) / np.sqrt(len(w))  # noqa: E731
        a = np.where(j <= i, phi(q) @ phi(k).swapaxes(-1, -2), 0)
        o = (a @ v) / (a.sum(-1, keepdims=True) + 1e-6)
    else:
        s = q @ k.swapaxes(-1, -2) / math.sqrt(D // H)
        if m.positions == "alibi":
            s = s + 2.0 ** (-8 * np.arange(1, H + 1) / H)[:, None, None] * (j - i)  # the paper's slopes, H a power of 2
        allowed = (j <= i) & ((i - j < m.window) if m.mixer == "window" else True)
        if m.mixer == "sigmoid":  # p = sigmoid(s - log S), unnormalised (Ramapuram et al. 2024)
            return (np.where(allowed, 1 / (1 + np.exp(np.log(L) - s)), 0) @ v).transpose(0, 2, 1, 3).reshape(
                B, L, D
            ) @ m.out.weight.T + m.out.bias
        s = np.where(allowed, s, -np.inf)
        top = s.max(-1, keepdims=True)
        e = np.exp(s - top)
        denominator = e.sum(-1, keepdims=True)
        if m.sinks is not None:
            denominator = denominator + np.exp(m.sinks[:, None, None] - top)
        o = (e / denominator) @ v
    return o.transpose(0, 2, 1, 3).reshape(B, L, D) @ m.out.weight.T + m.out.bias


@pytest.mark.parametrize("mixer,positions,sinks", [c for c in CASES if c[0] != "differential"])
def test_mixer_attention_against_numpy(mixer, positions, sinks, rng):
    m = MixerAttention(8, 2, mixer, positions, window=3, sink_logits=sinks, projection_seed=5, dtype=np.float64, seed=1)
    if sinks:
        m.sinks = np.array([0.7, -0.4])
    x = rng.standard_normal((2, 7, 8))
    np.testing.assert_allclose(m(x), _attention_reference(m, x), rtol=1e-9, atol=1e-11)


def _check_gradients(lm, rng, vocab=11, length=9):
    """loss_and_grads: the loss is the mean token loss; two entries of each
    parameter's gradient against central differences."""
    inputs, targets = rng.integers(0, vocab, (3, length)), rng.integers(0, vocab, (3, length))
    targets[0, :2] = -100  # ignored targets get no gradient
    batch = (inputs, targets)
    loss, grads = lm.loss_and_grads(batch)
    params = dict(lm.named_parameters())
    assert set(grads) == set(params) and np.isclose(loss, np.nanmean(lm.token_losses(inputs, targets)), rtol=1e-12)
    for name, p in params.items():  # the arrays themselves: perturbed in place
        for _ in range(2):
            i = tuple(rng.integers(0, n) for n in p.shape)
            old, h, f = p[i], 1e-6, []
            for value in (old + h, old - h):
                p[i] = value
                f.append(lm.loss_and_grads(batch)[0])
            p[i] = old
            assert abs(grads[name][i] - (f[0] - f[1]) / (2 * h)) < 1e-7, (name, i)


@pytest.mark.parametrize("mixer,positions,sinks", CASES)
def test_mixer_lm_gradients_against_finite_differences(mixer, positions, sinks, rng):
    lm = MixerLM(11, 9, 8, 2, 2, mixer, positions, 3, sinks, 12, dtype=np.float64, seed=3)
    if sinks:
        for block, values in zip(lm.blocks, ([0.3, -0.2], [0.1, 0.5])):
            block.attn.sinks = np.array(values)
    _check_gradients(lm, rng)


def test_attention_only_lm_against_numpy(rng):
    """mlp=False: blocks x + attn(norm1(x)) only (no norm2 or MLP
    parameters), the forward against NumPy and the gradients against
    central differences."""
    lm = MixerLM(11, 9, 8, 2, 2, "softmax", "rope", sink_logits=True, mlp=False, dtype=np.float64, seed=4)
    assert not any(".fc" in name or "norm2" in name for name, _ in lm.named_parameters())

    def norm(x, n):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + n.eps) * n.weight + n.bias

    ids = rng.integers(0, 11, (2, 9))
    x = lm.tokens.weight[ids]
    for block in lm.blocks:
        x = x + _attention_reference(block.attn, norm(x, block.norm1))
    want = norm(x, lm.norm) @ lm.head.weight.T + lm.head.bias
    np.testing.assert_allclose(lm(ids), want, rtol=1e-9, atol=1e-11)
    _check_gradients(lm, rng)


def test_mixer_lm_refuses_what_it_cannot_do():
    for kwargs, match in [
        (dict(mixer="gated"), "mixer must be one of"),
        (dict(positions="t5"), "positions must be one of"),
        (dict(mixer="linear", positions="alibi"), "needs a softmax-type mixer"),
        (dict(mixer="linear", sink_logits=True), "sink_logits needs"),
        (dict(mixer="differential", positions="alibi"), "differential mixer takes neither"),
    ]:
        with pytest.raises(ValueError, match=match):
            MixerLM(5, 8, 8, 1, 2, **kwargs)
    with pytest.raises(ValueError, match="exceed max_len 8"):
        MixerLM(5, 8, 8, 1, 2, positions="learned")(np.zeros((1, 9), np.int64))


# --------------------------------------------------------------------------- the streaming decoder


def test_kept_positions():
    assert streaming.kept(3, "window", 8, 2).tolist() == [0, 1, 2, 3]  # the cache not yet full
    assert streaming.kept(9, "dense", 4, 2).tolist() == list(range(10))
    assert streaming.kept(9, "window", 4, 2).tolist() == [6, 7, 8, 9]
    assert streaming.kept(9, "sinks_window", 4, 2).tolist() == [0, 1, 8, 9]


def test_decoding_against_whole_sequence_forwards(rng):
    """Dense decoding is the one-pass forward; with one layer (keys of
    tokens only) a window cache with positions in the cache is the model
    run afresh on the kept tokens, sinks then window."""
    ids = rng.integers(0, 7, (2, 14))
    deep = MixerLM(7, 16, 8, 2, 2, "softmax", "rope", sink_logits=True, dtype=np.float64, seed=0)
    np.testing.assert_allclose(streaming.decode(deep, ids, "dense", 6, 2), deep(ids), rtol=1e-9, atol=1e-10)
    one = MixerLM(7, 16, 8, 1, 2, "softmax", "rope", dtype=np.float64, seed=1)
    for policy in ("window", "sinks_window"):
        got = streaming.decode(one, ids, policy, 6, 2)
        for t in range(ids.shape[1]):
            want = one(ids[:, streaming.kept(t, policy, 6, 2)])[:, -1]
            np.testing.assert_allclose(got[:, t], want, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(
        streaming.recompute(one, ids, 6), streaming.decode(one, ids, "window", 6, 2), rtol=1e-9, atol=1e-10
    )


def test_first_token_attention_against_the_weights(rng):
    lm = MixerLM(7, 16, 8, 1, 2, "softmax", "rope", dtype=np.float64, seed=2)
    ids = rng.integers(0, 7, (3, 10))
    (got,) = streaming.first_token_attention(lm, ids, 4, 10)  # one layer: its heads' weights
    block = lm.blocks[0]
    x = lm.embed(ids)
    n = block.norm1
    h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + n.eps) * n.weight + n.bias
    q, k, _ = block.attn.project(h)
    s = _rope(q) @ _rope(k).swapaxes(-1, -2) / 2.0
    s = np.where(np.tri(10, dtype=bool), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, w[:, :, 4:10, 0].mean(axis=(0, 2)), rtol=0, atol=1e-4)  # rounded to 4 places


# --------------------------------------------------------------------------- the quick runs


def _same_bits(name, *args):
    first, _ = run_experiment(name, "--quick", "--seed", "3", "--threads", "1", *args)
    second, _ = run_experiment(name, "--quick", "--seed", "3", "--threads", "2", *args)
    assert {k: v for k, v in first.items() if k not in TIMING} == {k: v for k, v in second.items() if k not in TIMING}
    return first


def test_mqar_quick_run():
    res = _same_bits("mqar")
    assert res["mixers"] == list(mqar.MIXERS) and res["num_kv_pairs"] == [2, 4, 8] and res["widths"] == [16, 32]
    for mixer in mqar.MIXERS:
        assert set(res["accuracy"][mixer]) == {"16", "32"}
        for accs in res["accuracy"][mixer].values():
            assert len(accs) == 3 and all(0 <= a <= 1 for a in accs)
        assert res["mean_accuracy"][mixer]["16"] == round(float(np.mean(res["accuracy"][mixer]["16"])), 4)
    assert isinstance(res["softmax_beats_linear_at_small_width"], bool)
    assert all(math.isfinite(v) for v in res["final_losses"].values()) and len(res["final_losses"]) == 2 * len(
        mqar.MIXERS
    )
    two, _ = run_experiment("mqar", "--quick", "--mixers", "softmax,linear", "--steps", "2")
    assert two["mixers"] == ["softmax", "linear"] and set(two["accuracy"]) == {"softmax", "linear"}


def test_length_extrapolation_quick_run():
    res = _same_bits("length_extrapolation")
    assert res["eval_lengths"] == [16, 32] and res["train_length"] == 16
    assert res["loss"]["learned"][1] is None  # no table rows past the training length
    for scheme, losses in res["loss"].items():
        assert all(0 < v < 5 for v in losses if v is not None), scheme
        assert len(res["loss_by_position"][scheme]) == (16 if scheme == "learned" else 32)
    assert len(res["optimal_by_position"]) == 32 and res["optimal_by_position"][0] is None
    assert all(
        o < min(v[i] for v in res["loss"].values() if v[i] is not None) for i, o in enumerate(res["optimal_loss"])
    )
    assert isinstance(res["alibi_flat"], bool) and isinstance(res["sinusoidal_degrades"], bool)


def test_streaming_finding_booleans():
    """Each boolean on either side of its threshold (0.05 nats), on synthetic excess losses."""
    within = {"vanilla": 0.02, "sink_logits": 0.03}

    def found(window, sinks_window, learned_window):
        excess = {
            "vanilla": {"window": window, "sinks_window": sinks_window},
            "sink_logits": {"window": learned_window},
        }
        return streaming.finding(excess, within)

    assert found(0.30, 0.04, 0.05) == {"window_breaks": True, "sinks_flat": True, "sink_logits_window_flat": True}
    assert found(0.08, 0.04, 0.05)["window_breaks"] is False  # 0.04 above sinks_window: within tolerance
    assert found(0.10, 0.04, 0.05)["window_breaks"] is True
    assert found(0.30, 0.08, 0.05)["sinks_flat"] is False  # 0.06 above the vanilla model within training
    assert found(0.30, -0.5, 0.05)["sinks_flat"] is True  # below it is flat too
    assert found(0.30, 0.04, 0.09)["sink_logits_window_flat"] is False  # 0.06 above its own within training
    assert found(0.30, 0.04, 0.07)["sink_logits_window_flat"] is True


def test_streaming_quick_run():
    res = _same_bits("streaming")
    assert res["policies"] == list(streaming.POLICIES) and res["stream_length"] == 48 and res["cache"] == 8
    optimal = np.array(res["optimal_by_position"])
    for model in streaming.MODELS:
        for policy in streaming.POLICIES:
            curve = res["loss_by_position"][model][policy]
            assert len(curve) == 48 and all(0 < v < 6 for v in curve)
            # before the cache is full every policy keeps every token
            np.testing.assert_allclose(curve[:8], res["loss_by_position"][model]["dense"][:8], rtol=1e-5)
            # the excess over the chain's own loss, from the curves (rounding: 1e-4)
            want = np.mean(np.array(curve[8:]) - optimal[8:])
            assert abs(res["excess_evicted"][model][policy] - want) < 1e-4
        dense = np.array(res["loss_by_position"][model]["dense"])
        assert abs(res["excess_within_training"][model] - np.mean(dense[8:16] - optimal[8:16])) < 1e-4
        by_head = res["first_token_attention_by_head"][model]
        layers, heads = streaming.QUICK["num_layers"], streaming.QUICK["num_heads"]
        assert len(by_head) == layers and all(len(row) == heads and 0 <= min(row) <= max(row) <= 1 for row in by_head)
        np.testing.assert_allclose(res["first_token_attention"][model], np.mean(by_head, axis=1), atol=1e-4)
    assert res["optimal_loss"] < min(res["loss"]["vanilla"].values())
    found = streaming.finding(res["excess_evicted"], res["excess_within_training"])
    assert {k: res[k] for k in found} == found and all(isinstance(v, bool) for v in found.values())
    assert res["cpu"] and res["plot"] == "streaming.png"


@pytest.mark.parametrize("mixer", [m for m in mqar.MIXERS if m != "differential"])
def test_attention_maps_give_the_mixers_output(mixer, rng):
    """Each layer's map times its values is the kernel's output (linear and
    performer: up to the eps the kernel adds to its denominators)."""
    lm = MixerLM(9, 8, 8, 2, 2, mixer, "rope", window=3, dtype=np.float64, seed=0)
    ids = rng.integers(0, 9, (2, 7))
    maps = lm.attention_maps(ids)
    x = lm.embed(ids)
    for block, w in zip(lm.blocks, maps):
        n = block.norm1
        h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + n.eps) * n.weight + n.bias
        q, k, v = block.attn.project(h)
        tol = 1e-12 if mixer in ("softmax", "window", "sigmoid") else 1e-4
        np.testing.assert_allclose(w @ v, block.attn.attend(q, k, v), rtol=0, atol=tol)
        assert np.all(np.triu(w, 1) == 0)
        assert np.allclose(w.sum(-1), 1) or mixer == "sigmoid"  # sigmoid attention is not normalised
        x = block(x)
    (w,) = MixerLM(9, 8, 8, 1, 1, "differential", "rope", seed=0).attention_maps(ids)
    assert w.shape == (2, 1, 7, 7) and np.all(np.triu(w, 1) == 0)


def test_backcopy_rows_follow_their_rule():
    """Each row: BOS, then the chain, but after a trigger a copy of the
    token before it; the chain's loss recomputed token by token."""
    cfg = dict(streaming.FULL, vocab_size=6, triggers=2)
    inputs, targets, nll = streaming.backcopy_rows(cfg, 50, 30, seed=4, nll=True)
    chain = np.random.default_rng(cfg["chain_seed"]).dirichlet(np.full(6, float(cfg["concentration"])), 6)
    assert np.all(inputs[:, 0] == 6) and np.array_equal(inputs[:, 1:], targets[:, :-1]) and targets.max() < 6
    copies = 0
    for row, target, loss in zip(inputs, targets, nll):
        assert abs(loss[0] - np.log(6)) < 1e-12
        for t in range(1, 30):
            if t >= 2 and row[t] < 2:
                assert target[t] == row[t - 1] and loss[t] == 0
                copies += 1
            else:
                assert abs(loss[t] + np.log(chain[row[t], target[t]])) < 1e-12
    assert copies > 50
    again = streaming.backcopy_rows(cfg, 50, 30, seed=4)
    assert np.array_equal(again[0], inputs) and np.array_equal(again[1], targets)
    no_bos = streaming.backcopy_rows(dict(cfg, bos=False), 50, 30, seed=4)[0]
    assert no_bos[:, 0].max() < 6 and len(set(no_bos[:, 0])) > 1  # a chain token opens each row
