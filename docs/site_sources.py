"""Pages of the site whose sources live outside docs/ (read by docs/hooks.py,
which adds them to the build, and by tests/test_docs_pages.py, which checks
the links to them): the site's path -> the source, relative to the
repository's root."""

from __future__ import annotations

from pathlib import Path


def outside_pages(root: Path) -> dict[str, Path]:
    pages = {"changelog.md": root / "CHANGELOG.md", "contributing.md": root / "CONTRIBUTING.md"}
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        pages[f"notebooks/{notebook.name}"] = notebook
    return pages
