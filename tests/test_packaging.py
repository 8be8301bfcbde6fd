"""What `import attnc` costs: the optional dependencies (matplotlib for
attnc.plot, tqdm for the experiments' progress bars, torch, safetensors for
attnc.models.from_pretrained) are imported only when used. Each check runs
in a fresh interpreter, since this test process has imported them already."""

import subprocess
import sys

import pytest


def imported_after(code: str) -> set:
    """The top-level names in sys.modules after running code in a fresh interpreter."""
    run = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(run.stdout.split())


@pytest.mark.parametrize(
    "dependency", ["matplotlib", "tqdm", "torch", "transformers", "safetensors", "anywidget", "traitlets"]
)
def test_import_attnc_imports_no_optional_dependency(dependency):
    assert dependency not in imported_after("import attnc")


@pytest.mark.parametrize("dependency", ["torch", "transformers", "safetensors"])
def test_import_attnc_models_imports_no_checkpoint_reader(dependency):
    """attnc.models.from_pretrained imports safetensors when it reads a directory, and never torch or transformers."""
    assert dependency not in imported_after("import attnc.models")


def test_import_attnc_viz_leaves_anywidget_for_the_first_widget():
    assert not {"anywidget", "traitlets", "ipywidgets"} & imported_after("import attnc.viz")


LAZY = ["datasets", "experiments", "models", "plot", "viz"]


def test_import_attnc_leaves_the_subpackages_for_their_first_use():
    modules = imported_after("import attnc")
    assert not [m for m in modules if m.split(".")[:2] in (["attnc", name] for name in LAZY)]


def test_the_subpackages_are_reachable_after_import_attnc():
    modules = imported_after(
        "import attnc\n"
        "assert attnc.models.GPT.__name__ == 'GPT'\n"
        "assert attnc.datasets.DatesTask.__name__ == 'DatesTask'\n"
        "assert 'dates' in attnc.experiments.EXPERIMENTS and callable(attnc.plot.alignment)\n"
        "assert callable(attnc.viz.head_view)\n"
        "assert {'datasets', 'experiments', 'models', 'plot', 'viz', 'nn'} <= set(dir(attnc))"
    )
    assert {f"attnc.{name}" for name in LAZY} <= modules


def test_an_unknown_attribute_is_an_attribute_error():
    import attnc

    with pytest.raises(AttributeError, match="module 'attnc' has no attribute 'modles'"):
        attnc.modles  # noqa: B018


def test_dir_of_attnc_plot_is_its_functions():
    import attnc.plot

    names = dir(attnc.plot)
    assert names == sorted(attnc.plot.__all__)
    assert all(callable(getattr(attnc.plot, name)) and not name.startswith("_") for name in names)
    assert "ntm_trace" in names and "pointer" not in names and "np" not in names
