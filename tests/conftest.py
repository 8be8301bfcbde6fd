"""Shared fixtures and helpers for the attnc test suite.

Helpers are exposed as fixtures (``fd_check``, ``check_vjp``, ``assert_unchanged``,
``torch``, ``rng``) so test modules never import this file directly. The independent
NumPy reference lives in ``tests/reference`` (importable as ``reference``).
"""

import copy
import importlib
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


# --------------------------------------------------------------------------- hypothesis

# Property-based tests (test_properties.py): CI runs a bounded, derandomised
# search (the same examples every run); HYPOTHESIS_PROFILE=long searches for
# longer, with fresh examples, by hand. The fixtures the tests take (torch,
# assert_unchanged) hold no state between examples.
_SHARED = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("ci", max_examples=60, derandomize=True, **_SHARED)
settings.register_profile("long", max_examples=3000, **_SHARED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --------------------------------------------------------------------------- rng


@pytest.fixture
def rng():
    """A fresh, fixed-seed generator per test: tests are deterministic."""
    return np.random.default_rng(20240607)


# --------------------------------------------------------------------------- torch


def _import_required(name):
    """Import a test dependency; missing is a failure when ATTNC_REQUIRE_TORCH=1 (CI
    installs the test extra, torch and transformers with it), else a skip."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        if os.environ.get("ATTNC_REQUIRE_TORCH") == "1":
            pytest.fail(f"ATTNC_REQUIRE_TORCH=1 but {name} cannot be imported: {exc}")
        pytest.skip(f"{name} is not installed (set ATTNC_REQUIRE_TORCH=1 to make this fail)")


def import_torch():
    """Import torch; missing torch is a failure when ATTNC_REQUIRE_TORCH=1, else a skip."""
    return _import_required("torch")


@pytest.fixture
def torch():
    return import_torch()


@pytest.fixture(params=["eager", "op"])
def torch_path(request, monkeypatch):
    """Run a test of attnc.torch on both of its paths: attnc called directly
    (eager mode on plain tensors) and the registered custom ops (what
    torch.compile and torch.func transforms run), forced by making the
    eager test say no."""
    if request.param == "op":
        from attnc.torch import _fused, _ops

        for module in (_fused, _ops):
            monkeypatch.setattr(module, "eager", lambda *tensors: False)
    return request.param


@pytest.fixture
def transformers(torch):
    """Hugging Face transformers (the oracle of tests/test_hf_models.py), as the torch fixture."""
    return _import_required("transformers")


# --------------------------------------------------------------------------- threads


@pytest.fixture(autouse=True, scope="session")
def _torch_single_thread():
    """torch's OpenMP pool and attnc's pool share two cores: run torch's reference on one
    thread (its results do not depend on it; the tests get several times faster)."""
    try:
        import torch
    except ImportError:  # the torch fixture decides between skip and failure
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def restore_threads():
    """Restore attnc's thread count after a test that changes it. Every test
    that changes the thread count takes this fixture, and so is marked
    ``threads`` (below): test_cpu_paths.py reruns those tests under each
    OpenBLAS kernel the CPU runs."""
    import attnc

    n = attnc.get_num_threads()
    yield
    attnc.set_num_threads(n)


def pytest_collection_modifyitems(items):
    for item in items:
        if "restore_threads" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.threads)


# --------------------------------------------------------------------------- finite differences


def _as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _is_float_array(x):
    return isinstance(x, np.ndarray) and x.dtype.kind == "f"


def numeric_vjp(fn, kwargs, cotangents, wrt, eps=1e-6):
    """Central-difference gradients of L = sum_i sum(out_i * cot_i) w.r.t. kwargs[name]
    for name in `wrt`. `fn(**kwargs)` returns an array or a tuple of arrays; cotangents
    has one entry per output (None = that output is not used). Works in float64."""

    def loss(kw):
        outs = _as_tuple(fn(**kw))
        assert len(outs) == len(cotangents)
        total = 0.0
        for o, c in zip(outs, cotangents):
            if c is not None:
                total += float(np.sum(np.asarray(o, dtype=np.float64) * c))
        return total

    grads = {}
    for name in wrt:
        # C order: the flat views below must write through to g (a reshape of
        # a non-contiguous array would be a copy, silently left at zero)
        base = np.array(kwargs[name], dtype=np.float64, order="C")
        g = np.zeros(base.shape)
        flat = base.reshape(-1)
        gflat = g.reshape(-1)
        for i in range(flat.size):
            kw = dict(kwargs)
            xp = flat.copy()
            xp[i] += eps
            kw[name] = xp.reshape(base.shape)
            lp = loss(kw)
            xm = flat.copy()
            xm[i] -= eps
            kw[name] = xm.reshape(base.shape)
            lm = loss(kw)
            gflat[i] = (lp - lm) / (2.0 * eps)
        grads[name] = g
    return grads


def assert_grads_close(got, expected, rtol=1e-5, atol=1e-7, names=None):
    """Compare gradient dicts; tolerance relative to each gradient's max-abs entry."""
    names = sorted(expected) if names is None else names
    for name in names:
        assert name in got, f"gradient for {name!r} missing; got keys {sorted(got)}"
        g = np.asarray(got[name])
        e = np.asarray(expected[name])
        assert g.shape == e.shape, f"{name}: gradient shape {g.shape} != {e.shape}"
        scale = max(1.0, float(np.max(np.abs(e))) if e.size else 1.0)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol * scale, err_msg=f"gradient of {name!r}")


def fd_check_impl(fn, kwargs, cotangents, grads, wrt=None, eps=1e-6, rtol=1e-5, atol=1e-7):
    """Check a vjp gradient dict against central finite differences of
    L = sum_i sum(out_i * cot_i), with fn called as fn(**kwargs) in float64."""
    if wrt is None:
        wrt = [n for n, v in kwargs.items() if _is_float_array(v)]
    numeric = numeric_vjp(fn, kwargs, cotangents, wrt, eps)
    assert_grads_close(grads, numeric, rtol=rtol, atol=atol, names=wrt)
    return numeric


@pytest.fixture
def fd_check():
    return fd_check_impl


def random_cotangents(outputs, rng):
    """One float64 random cotangent per float output, None for integer outputs."""
    cots = []
    for o in _as_tuple(outputs):
        o = np.asarray(o)
        if o.dtype.kind == "f":
            cots.append(rng.standard_normal(o.shape).astype(o.dtype))
        else:
            cots.append(None)
    return cots


def check_vjp_impl(
    attnc_fn,
    ref_fn,
    kwargs,
    rng,
    *,
    positional=("query", "keys", "values"),
    cotangents=None,
    eps=1e-6,
    rtol=1e-5,
    atol=1e-7,
    expect_names=None,
):
    """Run attnc.vjp(attnc_fn, ...) and compare every returned gradient with central
    finite differences of the *reference* ref_fn (independent of attnc).

    kwargs: all arguments by name; those named in `positional` (in that order, as long as
    present in a row) are passed positionally to attnc.vjp. Returns (outputs, grads)."""
    import attnc

    args = []
    rest = dict(kwargs)
    for name in positional:
        if name in rest:
            args.append(rest.pop(name))
        else:
            break
    before = {n: _snapshot(v) for n, v in kwargs.items()}
    outputs, pullback = attnc.vjp(attnc_fn, *args, **rest)
    if cotangents is None:
        cotangents = random_cotangents(outputs, rng)
    cot_before = _snapshot(list(cotangents))
    grads = pullback(*cotangents)
    # neither vjp nor the pullback may modify the inputs or the cotangents
    for n, b in before.items():
        _assert_same(b, kwargs[n], n)
    _assert_same(cot_before, list(cotangents), "cotangents")
    float_names = [n for n, v in kwargs.items() if _is_float_array(v)]
    if expect_names is None:
        expect_names = float_names
    assert set(grads) == set(expect_names), (sorted(grads), sorted(expect_names))
    for n in expect_names:
        assert grads[n].shape == np.shape(kwargs[n]), (n, grads[n].shape)
        assert grads[n].dtype == kwargs[n].dtype, (n, grads[n].dtype)
    cots64 = [None if c is None else np.asarray(c, dtype=np.float64) for c in cotangents]
    fd_check_impl(ref_fn, kwargs, cots64, grads, wrt=expect_names, eps=eps, rtol=rtol, atol=atol)
    return outputs, grads


@pytest.fixture
def check_vjp():
    return check_vjp_impl


# --------------------------------------------------------------------------- inputs unchanged


def _snapshot(obj):
    if isinstance(obj, np.ndarray):
        return ("nd", obj.copy(), obj.dtype, obj.shape, obj.strides)
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [_snapshot(o) for o in obj])
    if isinstance(obj, dict):
        return ("dict", {k: _snapshot(v) for k, v in obj.items()})
    return ("obj", copy.copy(obj))


def _assert_same(before, obj, where):
    kind = before[0]
    if kind == "nd":
        _, data, dtype, shape, strides = before
        assert obj.dtype == dtype and obj.shape == shape and obj.strides == strides, where
        # bitwise comparison (NaNs compare equal to themselves this way)
        assert data.tobytes() == np.ascontiguousarray(obj).tobytes(), f"input {where} was modified"
    elif kind in ("list", "tuple"):
        for i, (b, o) in enumerate(zip(before[1], obj)):
            _assert_same(b, o, f"{where}[{i}]")
    elif kind == "dict":
        for k, b in before[1].items():
            _assert_same(b, obj[k], f"{where}[{k!r}]")


def assert_unchanged_impl(fn, *args, **kwargs):
    """Call fn(*args, **kwargs) and assert no array argument was modified (bitwise)."""
    before_a = [_snapshot(a) for a in args]
    before_k = {k: _snapshot(v) for k, v in kwargs.items()}
    out = fn(*args, **kwargs)
    for i, (b, a) in enumerate(zip(before_a, args)):
        _assert_same(b, a, f"positional argument {i}")
    for k, b in before_k.items():
        _assert_same(b, kwargs[k], k)
    return out


@pytest.fixture
def assert_unchanged():
    return assert_unchanged_impl


# --------------------------------------------------------------------------- comparisons


def assert_close_rel(actual, expected, rel=1e-12, what=""):
    """|actual - expected| <= rel * max(1, max|expected|) elementwise; shapes must match."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if expected.size == 0:
        return
    scale = max(1.0, float(np.nanmax(np.abs(expected))) if np.isfinite(expected).any() else 1.0)
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=0, atol=rel * scale, err_msg=what)


@pytest.fixture
def close_rel():
    return assert_close_rel


# --------------------------------------------------------------------------- score parameters

# kinds for which dq must equal dk
SAME_D_KINDS = ("dot", "scaled_dot", "cosine", "gaussian")
ALL_KINDS = ("dot", "scaled_dot", "general", "additive", "concat", "cosine", "location", "gaussian")


def make_score_params(kind, rng, dq, dk, tk, beta_shape=None, arrays=True, da=3, dtype=np.float64):
    """Parameters for score kind `kind`. arrays=True gives differentiable float arrays
    (0-d for scale/bandwidth, `beta_shape` for beta); arrays=False gives Python floats
    where the kind allows it (and nothing for kinds without scalar parameters)."""

    def a(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    if kind == "dot":
        return {}
    if kind == "scaled_dot":
        return {"scale": np.asarray(0.37, dtype=dtype)} if arrays else {"scale": 0.37}
    if kind == "general":
        return {"weight": a(dq, dk, scale=0.6)}
    if kind in ("additive", "concat"):
        return {"w_query": a(dq, da, scale=0.6), "w_key": a(dk, da, scale=0.6), "v": a(da)}
    if kind == "cosine":
        if not arrays:
            return {"beta": 2.5}
        shape = () if beta_shape is None else beta_shape
        return {"beta": (rng.random(shape) * 3 + 0.5).astype(dtype)}
    if kind == "location":
        return {"weight": a(dq, tk, scale=0.6)}
    if kind == "gaussian":
        return {"bandwidth": np.asarray(1.3, dtype=dtype)} if arrays else {"bandwidth": 1.3}
    raise ValueError(kind)


@pytest.fixture
def score_params():
    return make_score_params
