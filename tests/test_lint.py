"""The sources keep the project's style: ruff's lint rules and its formatter
over the Python files and mypy over attnc/ (configured in pyproject.toml),
clang-format over the C sources (.clang-format). Each test fails with the
tool's own report. (The same tools run as pre-commit hooks:
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


def test_ruff_format():
    result = run(sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "--diff", ".")
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr


def test_mypy():
    result = run(sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert result.returncode == 0, result.stdout + result.stderr


def c_sources() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for folder in ("csrc", "tests/c") for p in (ROOT / folder).rglob("*.[ch]"))


def test_c_sources_are_clang_formatted():
    import clang_format  # the test extra's wheel, pinned: each version formats a little differently

    sources = c_sources()
    assert len(sources) > 100
    result = run(clang_format.get_executable("clang-format"), "--dry-run", "--Werror", *sources)
    assert result.returncode == 0, result.stderr[-20000:]
