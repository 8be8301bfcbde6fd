"""Bad input raises the documented exception, naming the argument (and dtype/shape)."""

import re

import numpy as np
import pytest

import attnc


def _shape_re(shape):
    """Regex for a shape written as (2, 3, 4), [2, 3, 4], 2x3x4, ... in a message."""
    return r"\D{1,3}".join(str(s) for s in shape)


def _q(*shape, dtype=np.float64):
    return np.full(shape, 0.5).astype(dtype)


Q = _q(2, 3, 4)
K = _q(2, 5, 4)
V = _q(2, 5, 2)


# --------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.int32, np.complex128, np.bool_])
def test_bad_dtype_query(dtype):
    q = Q.astype(dtype)
    with pytest.raises(TypeError, match="query") as ei:
        attnc.attention(q, K.astype(dtype), V.astype(dtype))
    assert np.dtype(dtype).name in str(ei.value)


@pytest.mark.parametrize(
    "fn,args,kwargs,name,dtname",
    [
        (attnc.score, (Q, K.astype(np.float32)), {}, "keys", "float32"),
        (attnc.attention, (Q, K, V.astype(np.float32)), {}, "values", "float32"),
        (attnc.attention, (Q.astype(np.float32), K.astype(np.float32), V), {}, "values", "float64"),
        (attnc.score, (Q, K), {"score": "general", "weight": _q(4, 4, dtype=np.float32)}, "weight", "float32"),
        (attnc.score, (Q, K), {"score": "cosine", "beta": _q(2, 3, dtype=np.float32)}, "beta", "float32"),
        (attnc.score, (Q, K), {"score": "gaussian", "bandwidth": np.asarray(1.0, np.float32)}, "bandwidth", "float32"),
        (
            attnc.score,
            (Q, K),
            {"score": "additive", "w_query": _q(4, 3), "w_key": _q(4, 3), "v": _q(3, dtype=np.float32)},
            "v",
            "float32",
        ),
        (attnc.softmax, (_q(3, 4, dtype=np.int64),), {}, "scores", "int64"),
        (attnc.softmax, (_q(3, 4, dtype=np.float16),), {}, "scores", "float16"),
        (attnc.kernel_regression, (_q(3), _q(4, dtype=np.float32), _q(4)), {}, "x_train", "float32"),
        (attnc.kernel_regression, (_q(3), _q(4), _q(4, dtype=np.int64)), {}, "y_train", "int64"),
        (
            attnc.local_attention,
            (Q, K),
            {"window": 2, "mode": "predictive", "w_p": _q(4, 2, dtype=np.float32), "v_p": _q(2)},
            "w_p",
            "float32",
        ),
        (attnc.hard_attention, (Q, K.astype(np.float32)), {}, "keys", "float32"),
    ],
)
def test_bad_or_mixed_dtype_names_argument(fn, args, kwargs, name, dtname):
    with pytest.raises(TypeError, match=rf"\b{name}\b") as ei:
        fn(*args, **kwargs)
    assert dtname in str(ei.value), str(ei.value)


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    "fn,args,kwargs,names,shape",
    [
        # batch dims differ
        (attnc.score, (_q(2, 3, 4), _q(3, 5, 4)), {}, ("query", "keys"), (3, 5, 4)),
        # dq != dk for dot-like kinds
        (attnc.score, (_q(3, 4), _q(5, 3)), {}, ("query", "keys"), (5, 3)),
        (attnc.score, (_q(3, 4), _q(5, 3)), {"score": "cosine"}, ("query", "keys"), (5, 3)),
        (attnc.score, (_q(3, 4), _q(5, 3)), {"score": "gaussian"}, ("query", "keys"), (5, 3)),
        (attnc.score, (_q(3, 4), _q(5, 3)), {"score": "scaled_dot"}, ("query", "keys"), (5, 3)),
        # query with too few dims
        (attnc.score, (_q(4), _q(5, 4)), {}, ("query",), (4,)),
        # values with the wrong Tk
        (attnc.attention, (Q, K, _q(2, 6, 2)), {}, ("values",), (2, 6, 2)),
        # values with a different batch
        (attnc.attention, (Q, K, _q(3, 5, 2)), {}, ("values",), (3, 5, 2)),
        # parameter shapes
        (attnc.score, (Q, K), {"score": "general", "weight": _q(4, 3)}, ("weight",), (4, 3)),
        (
            attnc.score,
            (Q, K),
            {"score": "additive", "w_query": _q(4, 3), "w_key": _q(4, 2), "v": _q(3)},
            ("w_key",),
            (4, 2),
        ),
        (attnc.score, (Q, K), {"score": "additive", "w_query": _q(4, 3), "w_key": _q(4, 3), "v": _q(2)}, ("v",), (2,)),
        (
            attnc.score,
            (Q, K),
            {"score": "additive", "w_query": _q(3, 3), "w_key": _q(4, 3), "v": _q(3)},
            ("w_query",),
            (3, 3),
        ),
        (attnc.score, (Q, K), {"score": "location", "weight": _q(4, 6)}, ("weight",), (4, 6)),
        (attnc.score, (Q, K), {"score": "cosine", "beta": _q(2, 4)}, ("beta",), (2, 4)),
        (attnc.score, (Q, K), {"score": "scaled_dot", "scale": _q(2)}, ("scale",), (2,)),
        (attnc.score, (Q, K), {"score": "gaussian", "bandwidth": _q(2)}, ("bandwidth",), (2,)),
        # masks
        (attnc.softmax, (_q(2, 3, 5),), {"mask": np.ones((4, 5), bool)}, ("mask",), (4, 5)),
        (attnc.attention, (Q, K, V), {"mask": np.ones((3, 4), bool)}, ("mask",), (3, 4)),
        (attnc.softmax, (_q(2, 3, 5),), {"key_lengths": np.array([1, 2, 3])}, ("key_lengths",), (3,)),
        (attnc.attention, (Q, K, V), {"key_lengths": np.ones((2, 2), np.int64)}, ("key_lengths",), (2, 2)),
        # local attention
        (attnc.local_attention, (Q, K), {"window": 1, "positions": _q(2, 4)}, ("positions",), (2, 4)),
        (
            attnc.local_attention,
            (Q, K),
            {"window": 2, "mode": "predictive", "w_p": _q(3, 2), "v_p": _q(2)},
            ("w_p",),
            (3, 2),
        ),
        (
            attnc.local_attention,
            (Q, K),
            {"window": 2, "mode": "predictive", "w_p": _q(4, 2), "v_p": _q(3)},
            ("v_p",),
            (3,),
        ),
        # kernel regression
        (attnc.kernel_regression, (_q(3), _q(4), _q(5)), {}, ("y_train",), (5,)),
        (attnc.kernel_regression, (_q(3, 2), _q(4, 3), _q(4)), {}, ("x_train",), (4, 3)),
        (attnc.kernel_regression, (_q(3, 2), _q(4), _q(4)), {}, ("x_train",), (4,)),
        (attnc.kernel_regression, (_q(3), _q(4), _q(4, 2, 2)), {}, ("y_train",), (4, 2, 2)),
    ],
)
def test_bad_shapes_raise_value_error(fn, args, kwargs, names, shape):
    with pytest.raises(ValueError, match=rf"\b{names[0]}\b") as ei:
        fn(*args, **kwargs)
    msg = str(ei.value)
    for n in names:
        assert re.search(rf"\b{n}\b", msg), msg
    assert re.search(_shape_re(shape), msg), f"shape {shape} not in message: {msg}"


# --------------------------------------------------------------------------- choices


def test_unknown_score_lists_choices():
    with pytest.raises(ValueError, match="bogus") as ei:
        attnc.score(Q, K, score="bogus")
    for kind in ("dot", "scaled_dot", "general", "additive", "concat", "cosine", "location", "gaussian"):
        assert kind in str(ei.value), kind
    with pytest.raises(ValueError, match="general"):
        attnc.attention(Q, K, V, score="Dot ")


def test_unknown_mode_lists_choices():
    with pytest.raises(ValueError, match="argmax") as ei:
        attnc.hard_attention(Q, K, mode="softmax")
    for m in ("argmax", "sample", "gumbel"):
        assert m in str(ei.value)
    with pytest.raises(ValueError, match="monotonic") as ei:
        attnc.local_attention(Q, K, window=1, mode="local-m")
    assert "predictive" in str(ei.value)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"score": "general"}, "weight"),
        ({"score": "location"}, "weight"),
        ({"score": "additive", "w_key": _q(4, 3), "v": _q(3)}, "w_query"),
        ({"score": "additive", "w_query": _q(4, 3), "v": _q(3)}, "w_key"),
        ({"score": "concat", "w_query": _q(4, 3), "w_key": _q(4, 3)}, "v"),
    ],
)
def test_missing_score_parameter_is_type_error(kwargs, name):
    for fn in (attnc.score, attnc.attention):
        with pytest.raises(TypeError, match=rf"\b{name}\b"):
            fn(Q, K, **kwargs)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"score": "dot", "weight": _q(4, 4)}, "weight"),
        ({"score": "general", "weight": _q(4, 4), "beta": 1.0}, "beta"),
        ({"score": "cosine", "bandwidth": 1.0}, "bandwidth"),
        ({"score": "dot", "wieght": _q(4, 4)}, "wieght"),
    ],
)
def test_unexpected_score_parameter_is_type_error(kwargs, name):
    with pytest.raises(TypeError, match=rf"\b{name}\b"):
        attnc.score(Q, K, **kwargs)


def test_predictive_needs_w_p_and_v_p_and_no_positions():
    with pytest.raises(TypeError, match=r"\bw_p\b"):
        attnc.local_attention(Q, K, window=2, mode="predictive", v_p=_q(2))
    with pytest.raises(TypeError, match=r"\bv_p\b"):
        attnc.local_attention(Q, K, window=2, mode="predictive", w_p=_q(4, 2))
    with pytest.raises(TypeError, match=r"\bpositions\b"):
        attnc.local_attention(Q, K, window=2, mode="predictive", w_p=_q(4, 2), v_p=_q(2), positions=_q(2, 3))


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: attnc.local_attention(Q, K, window=-1), "window"),
        (lambda: attnc.local_attention(Q, K, window=-0.5), "window"),
        (lambda: attnc.local_attention(Q, K, window=0.5, mode="predictive", w_p=_q(4, 2), v_p=_q(2)), "window"),
        (lambda: attnc.local_attention(Q, K, window=0, mode="predictive", w_p=_q(4, 2), v_p=_q(2)), "window"),
        (lambda: attnc.score(Q, K, score="gaussian", bandwidth=0.0), "bandwidth"),
        (lambda: attnc.score(Q, K, score="gaussian", bandwidth=-1.0), "bandwidth"),
        (lambda: attnc.score(Q, K, score="gaussian", bandwidth=np.asarray(0.0)), "bandwidth"),
        (lambda: attnc.attention(Q, K, score="gaussian", bandwidth=np.asarray(-2.0)), "bandwidth"),
        (lambda: attnc.kernel_regression(_q(3), _q(4), _q(4), bandwidth=0.0), "bandwidth"),
        (lambda: attnc.kernel_regression(_q(3), _q(4), _q(4), bandwidth=np.asarray(-1.0)), "bandwidth"),
        (lambda: attnc.hard_attention(Q, K, mode="gumbel", temperature=0.0), "temperature"),
        (lambda: attnc.hard_attention(Q, K, mode="gumbel", temperature=-1.0), "temperature"),
        (lambda: attnc.softmax(_q(2, 3, 4), key_lengths=np.array([2, -1])), "key_lengths"),
        (lambda: attnc.attention(Q, K, V, key_lengths=np.array([-3, 1])), "key_lengths"),
        (lambda: attnc.hard_attention(Q, K, key_lengths=np.array([1, -1])), "key_lengths"),
        (lambda: attnc.local_attention(Q, K, window=1, key_lengths=np.array([1, -1])), "key_lengths"),
        (lambda: attnc.set_num_threads(0), r"thread|\bn\b"),
        (lambda: attnc.set_num_threads(-2), r"thread|\bn\b"),
    ],
)
def test_bad_values_raise_value_error(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_range_messages_come_from_the_one_check_in_c():
    # checked once, by the C function; its message says the mode's bound and the value
    with pytest.raises(ValueError, match=r"window must be >= 0 for mode='monotonic', got -1"):
        attnc.local_attention(Q, K, window=-1)
    with pytest.raises(ValueError, match=r"window must be >= 1 for mode='predictive', got 0.5"):
        attnc.local_attention(Q, K, window=0.5, mode="predictive", w_p=_q(4, 2), v_p=_q(2))
    with pytest.raises(ValueError, match=r"temperature must be > 0, got -1"):
        attnc.hard_attention(Q, K, mode="gumbel", temperature=-1.0)
    with pytest.raises(ValueError, match=r"key_lengths must be >= 0, got -1"):
        attnc.attention(Q, K, V, key_lengths=np.array([2, -1]))


def test_errors_leave_thread_count_unchanged():
    n = attnc.get_num_threads()
    with pytest.raises(ValueError):
        attnc.set_num_threads(0)
    assert attnc.get_num_threads() == n


# --------------------------------------------------------------------------- vjp misuse


def test_pullback_bad_cotangents():
    (ctx, w), pb = attnc.vjp(attnc.attention, Q, K, V)
    with pytest.raises(ValueError):
        pb(np.ones((2, 3, 3)), None)  # wrong context shape
    with pytest.raises(ValueError):
        pb(None, np.ones((2, 5, 3)))  # wrong weights shape
    with pytest.raises(TypeError):
        pb(np.ones(ctx.shape, np.float32), None)  # wrong dtype
    with pytest.raises((TypeError, ValueError)):
        pb(np.ones(ctx.shape))  # one cotangent too few
    with pytest.raises((TypeError, ValueError)):
        pb(np.ones(ctx.shape), np.ones(w.shape), np.ones(w.shape))  # one too many
    # the pullback still works after the bad calls
    g = pb(np.ones(ctx.shape), None)
    assert set(g) == {"query", "keys", "values"}


def test_pullback_integer_output_takes_none():
    (ctx, w, idx), pb = attnc.vjp(attnc.hard_attention, Q, K, V)
    g = pb(np.ones(ctx.shape), None, None)
    assert g["values"].shape == V.shape


def test_bad_input_does_not_modify_or_crash_later_calls(rng):
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    before = attnc.attention(q, k)[0]
    for bad in (
        lambda: attnc.attention(q, k[:, :, :3]),
        lambda: attnc.score(q, k, score="x"),
        lambda: attnc.attention(q, k.astype(np.float32)),
    ):
        with pytest.raises((TypeError, ValueError)):
            bad()
    np.testing.assert_array_equal(attnc.attention(q, k)[0], before)


# --------------------------------------------------------------------------- the generated binding


def test_binding_takes_an_omitted_array_as_absent():
    """An optional array left out of a call (a keyword, or a key of a weights
    dict) is absent, as None is: no crash (run apart, so a crash fails only
    this test), the same bits."""
    import subprocess
    import sys

    code = """if True:
        import numpy as np
        import attnc
        from attnc import _core
        rng = np.random.default_rng(0)
        a, b, dy = (rng.standard_normal((3, 4)) for _ in range(3))
        full, alone = np.empty_like(a), np.empty_like(a)
        _core.gated_backward(dinput=full, dgate=np.empty_like(b), doutput=dy, input=a, gate=b)
        _core.gated_backward(dinput=alone, doutput=dy, input=a, gate=b)       # dgate left out
        assert np.array_equal(full, alone)
        m = attnc.nn.LSTMN(3, 5, attention_size=4, bias=False, dtype=np.float64, seed=0)
        x = rng.standard_normal((2, 6, 3))
        out = np.empty((2, 6, 5))
        _core.lstmn_forward(output=out, input=x, params=m._params())          # no "bias" key; attention, saved left out
        assert np.array_equal(out, m(x))
        print("ok")
    """
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", (run.returncode, run.stderr[-2000:])


def test_binding_names_a_bad_weights_dict():
    from attnc import _core

    m = attnc.nn.LSTMN(3, 5, attention_size=4, dtype=np.float64, seed=0)
    call = dict(output=np.empty((2, 6, 5)), input=np.zeros((2, 6, 3)))
    with pytest.raises(TypeError, match="params must be a dict, got"):
        _core.lstmn_forward(**call, params=tuple(m._params().values()))
    with pytest.raises(TypeError, match="params has an unexpected key 'weight'"):
        _core.lstmn_forward(**call, params={**m._params(), "weight": m.weight_ih})
    with pytest.raises(TypeError, match="missing required argument 'params'"):
        _core.lstmn_forward(**call)
