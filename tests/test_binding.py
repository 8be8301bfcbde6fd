"""The binding generated from the operation table (csrc/python/ops/,
csrc/python/gen_binding.py): every described operation is in the extension
and in its typed stub with the table's keywords, and calls that get the
keywords wrong fail with a clear exception, never a crash."""

import ast
import runpy
from pathlib import Path

import numpy as np
import pytest

import attnc
from attnc import _core

ROOT = Path(__file__).resolve().parents[1]
GEN = runpy.run_path(str(ROOT / "csrc" / "python" / "gen_binding.py"))
OPS = GEN["load_table"]()
STUB = Path(attnc.__file__).resolve().parent / "_core.pyi"


def keywords(op) -> list:
    return [n for n, spec, _ in GEN["_keywords"](op) if not isinstance(spec, GEN["ScalarOut"])]


def test_every_operation_is_in_the_extension():
    for op in OPS:
        assert callable(getattr(_core, op.name, None)), op.name
        assert getattr(_core, op.name).__doc__ == (op.doc or op.c_function)


def test_the_stub_lists_every_operation_with_its_keywords():
    tree = ast.parse(STUB.read_text())
    stubbed = {f.name: [a.arg for a in f.args.kwonlyargs] for f in tree.body if isinstance(f, ast.FunctionDef)}
    for op in OPS:
        assert stubbed.get(op.name) == keywords(op), op.name
    assert GEN["stub"](OPS) == STUB.read_text(), "attnc/_core.pyi is not the one the table makes: rebuild"


def test_keywords_only():
    x, w = np.ones((2, 3)), np.ones((4, 3))
    y = np.empty((2, 4))
    with pytest.raises(TypeError, match=r"linear_forward\(\) takes keyword arguments only"):
        _core.linear_forward(y, x, w, None)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'inptu'"):
        _core.linear_forward(output=y, inptu=x, weight=w)
    _core.linear_forward(output=y, input=x, weight=w)  # bias left out: absent
    np.testing.assert_array_equal(y, x @ w.T)


def test_scalars_are_checked_by_name():
    x = np.ones((2, 3))
    y, mean, rstd = np.empty_like(x), np.empty(2), np.empty(2)
    kw = dict(output=y, mean=mean, rstd=rstd, input=x)
    with pytest.raises(TypeError, match="missing required argument 'eps'"):
        _core.layer_norm_forward(**kw)
    with pytest.raises(ValueError, match=r"eps must be in \[0, inf\], got -1"):
        _core.layer_norm_forward(**kw, eps=-1.0)
    with pytest.raises(TypeError, match="missing required argument 'eps'"):  # None is not a value
        _core.layer_norm_forward(**kw, eps=None)
    with pytest.raises(ValueError, match=r"eps must be a number, got nan"):
        _core.layer_norm_forward(**kw, eps=float("nan"))
    with pytest.raises(TypeError, match="eps must be a number"):
        _core.layer_norm_forward(**kw, eps="small")
    z = np.empty_like(x)
    with pytest.raises(ValueError, match=r"activation must be in \[0, 3\], got 7"):
        _core.activation_forward(output=z, input=x, activation=7)
    with pytest.raises(ValueError, match="seed must be an int in"):
        _core.activation_forward(output=z, input=x, activation=1, seed=-1)


def test_arrays_are_checked_by_name():
    x = np.ones((2, 3))
    with pytest.raises(TypeError, match="output must be a writable buffer"):
        _core.linear_forward(output=np.broadcast_to(0.0, (2, 4)), input=x, weight=np.ones((4, 3)))
    with pytest.raises(TypeError, match="weight must be a buffer of numbers, got str"):
        _core.linear_forward(output=np.empty((2, 4)), input=x, weight="w")
