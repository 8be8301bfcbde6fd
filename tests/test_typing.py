"""A type checker reads attnc's annotations (the package ships py.typed):
correct use checks clean, and misuse (a misspelt score, a string for an
int) is caught before anything runs. mypy checks user scripts here; attnc's
own files are followed silently, as they are for an installed package."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import attnc

GOOD = """
import numpy as np

import attnc
import attnc.datasets
import attnc.models
import attnc.nn

q = np.random.rand(2, 4, 8).astype(np.float32)
context, weights = attnc.attention(q, q, q, score="scaled_dot", causal=True)
out = attnc.scaled_dot_product_attention(q, q, q, is_causal=True)
layer = attnc.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu")
grads = attnc.vjp(layer, q)[1](out)
model = attnc.models.PointerNet(2, 16, seed=0)
opt = attnc.optim.Adam(model, lr=1e-3)
attnc.set_num_threads(2)
info = attnc.show_config(mode="dicts")
print(context.shape, weights.shape, layer(q).shape, len(grads), info)
"""

BAD = """
import numpy as np

import attnc
import attnc.nn

q = np.random.rand(2, 4, 8)
attnc.attention(q, q, q, score="addtive")
attnc.set_num_threads("2")
attnc.nn.TransformerEncoderLayer(8, 2, activation="swish")
"""


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user.py"
    script.write_text(source)
    env = dict(os.environ)
    package_root = str(Path(attnc.__file__).resolve().parent.parent)
    if package_root != sysconfig.get_paths()["purelib"]:  # a source checkout (editable install)
        env["MYPYPATH"] = package_root
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--follow-imports=silent",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def test_correct_use_type_checks(tmp_path):
    run = mypy(tmp_path, GOOD)
    assert run.returncode == 0, run.stdout + run.stderr


def test_misuse_is_caught(tmp_path):
    run = mypy(tmp_path, BAD)
    report = run.stdout
    assert run.returncode == 1, report + run.stderr
    assert 'Argument "score" to "attention" has incompatible type "Literal[\'addtive\']"' in report
    assert 'Argument 1 to "set_num_threads" has incompatible type "str"; expected "int"' in report
    assert '"activation"' in report and "swish" in report
    assert "Found 3 errors in 1 file" in report


def test_the_lazy_subpackages_are_typed_and_a_misspelt_one_is_caught(tmp_path):
    """attnc.models and the other subpackages imported on first use are
    known to a type checker without an import of their own; a module
    __getattr__ must not make every misspelt attribute type-check."""
    run = mypy(
        tmp_path, "import attnc\n\nreveal_type(attnc.models.GPT)\nreveal_type(attnc.plot.alignment)\nattnc.modles\n"
    )
    report = run.stdout
    assert 'Revealed type is "def (' in report and "attnc.models.gpt.GPT" in report, report
    assert "-> matplotlib.axes._axes.Axes" in report, report
    assert 'Module has no attribute "modles"' in report and "Found 1 error in 1 file" in report, report
