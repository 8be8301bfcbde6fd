"""The sources keep the project's style, as configured in pyproject.toml:
ruff's lint rules over the Python files and mypy over attnc/. Each test
fails with the tool's own report. (The formatters, ruff format and
clang-format with .clang-format, are configured; their checks join these
with the one commit that reformats the whole tree, made when no branch is in
flight.) (The same tools run as pre-commit hooks:
.pre-commit-config.yaml.) They read the source tree, which the run against
the installed wheel does not have (.ci/run leaves this file out there)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


def test_ruff_lint():
    result = run(sys.executable, "-m", "ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy():
    result = run(sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert result.returncode == 0, result.stdout + result.stderr
