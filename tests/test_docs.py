"""The public API documents itself: every function and class that a public
module exports has annotated arguments (for editors' completion; the package
ships py.typed) and a docstring that states shapes and dtypes and gives an
example, and every example runs and prints what its docstring says."""

import doctest
import importlib
import importlib.util
import inspect
import os
import typing

import numpy as np
import pytest

import attnc

MODULES = [
    "attnc",
    "attnc.attribution",
    "attnc.nn",
    "attnc.models",
    "attnc.datasets",
    "attnc.ntm",
    "attnc.optim",
    "attnc.plot",
    "attnc.viz",
    "attnc.experiments",
    "attnc.torch",
    "attnc.torch.nn",
]
# attnc.torch needs torch: without it (and without ATTNC_REQUIRE_TORCH=1, which
# makes its absence an import error here) its docstrings are not collected.
if importlib.util.find_spec("torch") is None and os.environ.get("ATTNC_REQUIRE_TORCH") != "1":
    MODULES.remove("attnc.torch")
    MODULES.remove("attnc.torch.nn")


def public_objects():
    """(qualified name, object) of every function and class in the modules'
    __all__, each once (under the first module that exports it)."""
    seen, found = set(), []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and id(obj) not in seen:
                seen.add(id(obj))
                found.append((f"{name}.{attr}", obj))
    return found


PUBLIC = public_objects()
# Examples that build a Hugging Face model to load.
NEEDS_TRANSFORMERS = {"attnc.models.from_pretrained"}
IDS = [name for name, _ in PUBLIC]


def constructor(obj):
    """What a call of obj runs: a function itself, a class's __init__, or a
    named tuple's __new__ (its generated constructor: a NamedTuple may not
    define __init__)."""
    if not inspect.isclass(obj):
        return obj
    return obj.__new__ if issubclass(obj, tuple) else obj.__init__


def signature_of(obj):
    return inspect.signature(constructor(obj))


def test_every_public_module_has_all_and_the_package_is_typed():
    import importlib.resources

    assert importlib.resources.files("attnc").joinpath("py.typed").is_file()
    assert len(PUBLIC) > 100


@pytest.mark.parametrize("name,obj", PUBLIC, ids=IDS)
def test_signature_is_annotated(name, obj):
    sig = signature_of(obj)
    hints = typing.get_type_hints(obj if inspect.isclass(obj) and issubclass(obj, tuple) else constructor(obj))
    missing = [p.name for p in sig.parameters.values() if p.name not in ("self", "cls", "_cls") and p.name not in hints]
    assert not missing, f"{name}: arguments without annotations: {missing}"
    if not inspect.isclass(obj):
        assert "return" in hints, f"{name}: no return annotation"


@pytest.mark.parametrize("name,obj", PUBLIC, ids=IDS)
def test_docstring_gives_shapes_dtypes_and_an_example(name, obj):
    doc = inspect.getdoc(obj) or ""
    assert len(doc.splitlines()) >= 3, f"{name}: docstring too short"
    assert ">>>" in doc, f"{name}: no example"
    if name.startswith(("attnc.plot.",)):
        return  # plots take arrays but their subject is the figure
    if any(p.name not in ("self", "cls", "_cls") for p in signature_of(obj).parameters.values()):
        lowered = doc.lower()
        assert "(" in doc and ("float32" in lowered or "dtype" in lowered or "int" in lowered), (
            f"{name}: docstring gives no shapes or dtypes"
        )


@pytest.mark.parametrize("name,obj", PUBLIC, ids=IDS)
def test_example_runs(name, obj, tmp_path, monkeypatch, request):
    """Run the docstring's example as a doctest: it must print what it says."""
    if name in NEEDS_TRANSFORMERS:
        request.getfixturevalue("transformers")  # a skip or, under ATTNC_REQUIRE_TORCH=1, a failure without it
    monkeypatch.chdir(tmp_path)  # examples that save files write here
    np.random.seed(0)  # noqa: NPY002  (examples may draw from NumPy's global generator)
    finder = doctest.DocTestFinder(recurse=False)
    globs = {"np": np, "attnc": attnc}
    if name.startswith("attnc.torch."):
        globs["torch"] = importlib.import_module("torch")
    tests = finder.find(obj, name, globs=globs)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    examples = 0
    for test in tests:
        examples += len(test.examples)
        runner.run(test)
    assert examples > 0, f"{name}: no example"
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of its examples failed (see the output above)"
