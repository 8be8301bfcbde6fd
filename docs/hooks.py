"""MkDocs hooks (mkdocs.yml `hooks:`): pages whose sources live outside docs/.

- The notebooks (notebooks/*.ipynb) join the site as notebooks/NAME.ipynb,
  rendered with their stored outputs by mkdocs-jupyter.
- CHANGELOG.md and CONTRIBUTING.md (at the repository's root, where people
  and tools look for them) join as changelog.md and contributing.md.
- Each API reference page (docs/api/) must show every function and class
  its module exports: griffe reads a function whose name is also a
  submodule's (attnc.score, attnc.nn.linear) as the submodule and leaves it
  out, so such pages name them explicitly; a page that misses one is a
  warning, which fails a strict build.
- The performance page's figures and machine tables are drawn from the
  benchmarks' JSON (benchmarks/results/*.json) at build time: see
  docs/benchmark_figures.py.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
LOG = logging.getLogger("mkdocs.plugins.attnc")  # under "mkdocs": counted by --strict
API_PAGE = re.compile(r"^::: (attnc[\w.]*)$", re.MULTILINE)

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


def on_post_page(output, page, config):
    if page.file.src_uri.startswith("api/"):
        module = API_PAGE.search(page.file.content_string).group(1)
        for name in missing_from(output, importlib.import_module(module)):
            LOG.warning(f"{page.file.src_uri}: {module}.{name} is exported but not shown (name it on the page)")
    return output


def missing_from(html: str, module) -> list[str]:
    """The functions and classes in module.__all__ that the page has no
    heading for, under the module's name or the object's own."""
    ids = set(re.findall(r'id="([\w.]+)"', html))
    missing = []
    for name in getattr(module, "__all__", ()):  # attnc.experiments exports modules only
        obj = getattr(module, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if f"{module.__name__}.{name}" not in ids and f"{obj.__module__}.{obj.__qualname__}" not in ids:
            missing.append(name)
    return missing
