"""MkDocs hooks (mkdocs.yml `hooks:`): pages whose sources live outside docs/.

- The notebooks (notebooks/*.ipynb) join the site as notebooks/NAME.ipynb,
  rendered with their stored outputs by mkdocs-jupyter.
- CHANGELOG.md and CONTRIBUTING.md (at the repository's root, where people
  and tools look for them) join as changelog.md and contributing.md.
- The performance page's figures and machine tables are drawn from the
  benchmarks' JSON (benchmarks/results/*.json) at build time: see
  docs/benchmark_figures.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark_figures  # noqa: E402  (docs/benchmark_figures.py, found through sys.path above)
from site_sources import outside_pages  # noqa: E402  (docs/site_sources.py)


@event_priority(100)  # before mkdocs-jupyter's on_files, which claims the .ipynb files
def on_files(files, config):
    for uri, source in outside_pages(ROOT).items():
        if source.suffix == ".ipynb":  # a File of its own: mkdocs-jupyter converts those
            files.append(
                File(str(source.relative_to(ROOT)), str(ROOT), config["site_dir"], config["use_directory_urls"])
            )
        else:
            files.append(File.generated(config, uri, abs_src_path=str(source)))
    pages = [path.read_text() for path in Path(config["docs_dir"]).rglob("*.md")]
    for uri, content in benchmark_figures.figures(ROOT / "benchmarks" / "results", pages).items():
        files.append(File.generated(config, uri, content=content))
    return files


def on_page_markdown(markdown, page, config, files):
    prefix = "../" * page.file.src_uri.count("/")  # bench/ is at the docs' root
    return benchmark_figures.expand(markdown, ROOT / "benchmarks" / "results", prefix)
