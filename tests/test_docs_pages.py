"""The prose documentation runs: every Python code block in README.md,
CONTRIBUTING.md and docs/ is executed, and where a plain block follows it
directly, the block's printed output must be that block. A block that cannot
run in a test (it trains for minutes, or needs a build tree) carries
`<!-- not run: why -->` on the line before its fence. Relative links in the
same files must name files that exist (mkdocs build --strict checks the
site's; this also covers README.md, which the site does not include).

Run from a source tree (CI copies README.md, CONTRIBUTING.md and docs/ next
to the tests for the installed wheel's run too).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
NOT_RUN = re.compile(r"<!-- not run: (\S.*?) -->")
FENCE = re.compile(r"^```(\w*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def code_blocks(path: Path):
    """(first line number, language, text, not-run reason or None, expected
    output or None) of each fenced block of a page."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        reason = NOT_RUN.search(lines[i - 1]) if i else None
        blocks.append([i + 1, m.group(1), "\n".join(lines[i + 1 : end]), reason and reason.group(1), None])
        i = end + 1
    for block, following in itertools.pairwise(blocks):
        # a plain block right after a Python block is what it prints
        if block[1] == "python" and following[1] == "" and following[0] == block[0] + block[2].count("\n") + 3:
            block[4] = following[2]
    return [tuple(b) for b in blocks]


def python_blocks():
    return [(page, *block) for page in PAGES for block in code_blocks(page) if block[1] == "python"]


BLOCKS = python_blocks()


def test_pages_exist_and_have_examples():
    assert (ROOT / "docs" / "index.md").is_file() and len(PAGES) > 10
    assert sum(reason is None for *_, reason, _ in BLOCKS) >= 10


@pytest.mark.parametrize(
    "page,line,lang,code,reason,expected", BLOCKS, ids=[f"{b[0].relative_to(ROOT)}:{b[1]}" for b in BLOCKS]
)
def test_code_block_runs(page, line, lang, code, reason, expected, tmp_path, monkeypatch, request):
    if reason is not None:
        assert len(reason) > 10, f"{page}:{line}: say why the block is not run"
        return
    if "torch" in code:
        request.getfixturevalue("torch")  # fails, rather than skips, under ATTNC_REQUIRE_TORCH=1
    monkeypatch.chdir(tmp_path)  # blocks that save files write here
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{page}:{line}", "exec"), {"__name__": "__docs__"})
    plt.close("all")
    if expected is not None:
        assert out.getvalue().split() == expected.split(), (
            f"{page}:{line} printed:\n{out.getvalue()}\nthe page says:\n{expected}"
        )


def site_pages() -> set[Path]:
    """docs/'s files and the pages the site takes from elsewhere
    (docs/site_sources.py: the notebooks, CHANGELOG.md, CONTRIBUTING.md)."""
    spec = importlib.util.spec_from_file_location("site_sources", ROOT / "docs" / "site_sources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {ROOT / "docs" / uri for uri in module.outside_pages(ROOT)}


def test_relative_links_name_existing_files():
    virtual, broken = site_pages(), []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:|#", target):
                continue  # a URL, or an anchor on the same page
            path = (page.parent / target.split("#")[0]).resolve()
            if not (path.exists() or path in virtual):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_a_failing_block_fails(tmp_path):
    """The runner itself can fail: a block whose output differs from its page's."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1 + 1)\n```\n```\n3\n```\n<!-- not run: needs a GPU cluster -->\n"
        "```python\nraise SystemExit\n```\n"
    )
    (
        (_, _, code, _, expected),
        _,
        (_, _, _, reason, _),
    ) = code_blocks(page)
    assert expected == "3" and reason == "needs a GPU cluster"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})
    assert out.getvalue().split() != expected.split()
    np.testing.assert_equal(len(code_blocks(page)), 3)
