"""attnc's NumPy functions take any array object: a torch CPU tensor, an
object with only ``__dlpack__`` (a JAX-like array), one with only
``__array__``. Every public function, module and model method of
tests/test_empty.py's CASES is called with each kind in place of every
array (also inside tuples and a batch's fields): the results are NumPy
arrays equal, bit for bit, to the call with NumPy arrays. Then the refusals:
a DLPack object on another device ("CPU arrays only", naming the argument)
and a tensor that requires grad (naming the fix); and ``import attnc``
still never imports torch.
"""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
from test_empty import CASES, Dims

import attnc


class DLPackOnly:
    """An array object known only by the DLPack protocol (as a JAX or CuPy array)."""

    def __init__(self, a: np.ndarray, device: tuple = (1, 0)) -> None:
        self._a, self._device = a, device

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple:
        return self._device


class ArrayOnly:
    """An array object known only by ``__array__``."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


def replaced(v, wrap):
    """v with every array wrapped (inside tuples, lists, dicts and a batch's fields)."""
    if isinstance(v, np.ndarray):
        return wrap(v)
    if isinstance(v, (tuple, list)):
        return type(v)(replaced(e, wrap) for e in v)
    if isinstance(v, dict):
        return {k: replaced(e, wrap) for k, e in v.items()}
    if isinstance(v, types.SimpleNamespace):
        return types.SimpleNamespace(**replaced(vars(v), wrap))
    return v


def kinds(torch=None) -> dict:
    out = {"dlpack": DLPackOnly, "array": ArrayOnly}
    if torch is not None:
        out["torch"] = torch.from_numpy
    return out


def results(out) -> list:
    """The arrays of a result in order, asserting that each is a NumPy array
    (or a Python / NumPy number, a loss): never a tensor or another object."""
    if out is None:
        return []
    if isinstance(out, dict):
        return [a for k in sorted(out) for a in results(out[k])]
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in results(o)]
    assert isinstance(out, (np.ndarray, np.generic, int, float)), type(out)
    return [np.asarray(out)]


CASE_PARAMS = [pytest.param(c, id=f"{c.name}[{i}]") for i, c in enumerate(CASES)]


@pytest.mark.parametrize("kind", ["torch", "dlpack", "array"])
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_every_public_name_takes_array_objects(case, kind, request):
    torch = request.getfixturevalue("torch") if kind == "torch" else None
    wrap = kinds(torch)[kind]
    fn, args, kwargs = case.call(Dims(np.float32))
    want = fn(*args, **kwargs)
    fn, args, kwargs = case.call(Dims(np.float32))  # afresh: a module's RNG, a cache's contents
    got = fn(*replaced(args, wrap), **replaced(kwargs, wrap))
    w, g = results(want), results(got)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def first_float(v, wrap):
    """v with its first float array (depth first: arguments, tuples, a batch's
    fields) wrapped, and whether there was one."""
    found = []

    def once(a):
        if a.dtype.kind != "f" or found:
            return a
        found.append(a)
        return wrap(a)

    return replaced(v, once), bool(found)


def has_arrays(v) -> bool:
    seen = []
    replaced(v, seen.append)
    return bool(seen)


# The calls without a float array (token ids, sizes): nothing to require grad.
NO_FLOAT_ARGUMENT = {
    "attnc.KVCache",
    "attnc.models.BERT",  # token ids
    "attnc.save",
    "attnc.nn.sinusoidal_encoding",
    "attnc.performer_projection",  # sizes and a seed
    "attnc.alibi_slopes",  # a number of heads
    "attnc.nn.Embedding",
    "attnc.models.DecomposableAttention",
    "attnc.models.DecomposableAttention.align",
    "attnc.models.DecomposableAttention.loss_and_grad",
    "attnc.models.GPT",
    "attnc.models.GPT.loss_and_grads",
    "attnc.models.GPT.generate",
    "attnc.models.Seq2Seq",
    "attnc.models.Seq2Seq.loss_and_grad",
    "attnc.models.Seq2Seq.loss",
    "attnc.models.Seq2Seq.generate",
    "attnc.models.Seq2SeqTransformer",
    "attnc.models.Seq2SeqTransformer.loss_and_grads",
    "attnc.models.Seq2SeqTransformer.generate",
}


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_a_tensor_requiring_grad_names_the_fix(case, torch):
    fn, args, kwargs = case.call(Dims(np.float32))
    (args, kwargs), found = first_float((args, kwargs), lambda a: torch.from_numpy(a.copy()).requires_grad_())
    assert found == (case.name not in NO_FLOAT_ARGUMENT), case.name
    if found:
        fix = r"^(\w+(?:\[\d+\])?) is a tensor that requires grad.* use attnc\.torch .*or pass \1\.detach\(\)$"
        with pytest.raises(TypeError, match=fix):
            fn(*args, **kwargs)


def test_the_fix_names_what_to_call(torch):
    """The requires-grad message names the wrapper of what was called."""
    q, w = torch.randn(2, 3, 4, requires_grad=True), torch.rand(2, 3, 5, requires_grad=True)
    memory = np.ones((2, 5, 4), np.float32)
    for call, fix in (
        (lambda: attnc.attention(q, memory), r"attnc\.torch\.function\(attnc\.attention\).* or pass query\.detach\(\)"),
        (lambda: attnc.ntm.read(memory, w), r"attnc\.torch\.function\(attnc\.ntm\.read\).* or pass w\.detach\(\)"),
        (lambda: attnc.nn.LSTM(4, 3)(q), r"attnc\.torch\.Module\(your LSTM\)\), or pass input\.detach\(\)"),
    ):
        with pytest.raises(TypeError, match=fix):
            call()


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_another_device_is_refused(case):
    fn, args, kwargs = case.call(Dims(np.float32))
    assert has_arrays((args, kwargs)) == (
        case.name
        not in (
            "attnc.KVCache",
            "attnc.save",
            "attnc.nn.sinusoidal_encoding",
            "attnc.performer_projection",
            "attnc.alibi_slopes",
        )
    )
    if has_arrays((args, kwargs)):
        cuda = lambda a: DLPackOnly(a, device=(2, 0))  # noqa: E731
        with pytest.raises(TypeError, match=r"^\w+(\[\d+\])? is on a CUDA device: attnc takes CPU arrays only"):
            fn(*replaced(args, cuda), **replaced(kwargs, cuda))


@pytest.mark.parametrize("kind", ["torch", "dlpack"])
def test_read_in_place(kind, request):
    """No copy: the pullback reads the caller's memory, so changing it after
    the forward is caught by attnc.vjp's check (a copy would go unnoticed)."""
    torch = request.getfixturevalue("torch") if kind == "torch" else None
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4))
    wrap = kinds(torch)[kind]
    (context, _), pullback = attnc.vjp(attnc.attention, wrap(q), wrap(k), score="scaled_dot")
    assert isinstance(context, np.ndarray)
    q += 1.0  # through the array the tensor / DLPack object views
    with pytest.raises(RuntimeError, match="argument 'query' was modified after the forward"):
        pullback(np.ones_like(context), None)


def test_tensors_attnc_cannot_read(torch):
    k = np.ones((2, 5, 4), np.float32)
    for query, message in (
        (
            torch.empty(2, 3, 4, device="meta"),
            "query is on a device DLPack cannot name .*: attnc takes CPU arrays only",
        ),
        (
            torch.ones(2, 3, 4, dtype=torch.bfloat16),
            r"query cannot be read as an array \(Tensor, dtype torch.bfloat16\)",
        ),
        (torch.ones(2, 3, 4, dtype=torch.float16), "query has dtype float16; attnc takes float32 or float64 arrays"),
        (torch.ones(2, 3, 4).to_sparse(), r"query cannot be read as an array .*Sparse layout"),
    ):
        with pytest.raises(TypeError, match=message):
            attnc.attention(query, k)
    with pytest.raises(TypeError, match="mask is on a ROCm device: attnc takes CPU arrays only"):
        attnc.softmax(k, mask=DLPackOnly(np.ones((2, 5, 4), bool), device=(10, 0)))
    with pytest.raises(TypeError, match="key_lengths is on a CUDA device"):
        attnc.softmax(k, key_lengths=DLPackOnly(np.ones(2, np.int64), device=(2, 0)))


def test_import_attnc_does_not_import_torch():
    code = (
        "import sys, numpy as np, attnc\n"
        "class D:\n"
        "    def __init__(self, a): self.a = a\n"
        "    def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)\n"
        "    def __dlpack_device__(self): return (1, 0)\n"
        "c, w = attnc.attention(D(np.ones((2, 3))), D(np.ones((4, 3))))\n"
        "assert c.shape == (2, 3) and 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
