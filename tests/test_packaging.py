"""What `import attnc` costs: the optional dependencies (matplotlib for
attnc.plot, tqdm for the experiments' progress bars, torch) are imported
only when used. Each check runs in a fresh interpreter, since this test
process has imported them already."""

import subprocess
import sys

import pytest


def imported_after(code: str) -> set:
    """The top-level names in sys.modules after running code in a fresh interpreter."""
    run = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(run.stdout.split())


@pytest.mark.parametrize("dependency", ["matplotlib", "tqdm", "torch"])
def test_import_attnc_imports_no_optional_dependency(dependency):
    assert dependency not in imported_after("import attnc")
