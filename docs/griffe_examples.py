"""A griffe extension (mkdocs.yml, mkdocstrings' `extensions`) that reads
attnc's docstrings as the numpy parser expects, without changing them:

- their doctests are headed "Example" (singular), a section name the parser
  does not know: read as "Examples", so the examples render as code;
- prose that follows a Parameters or Returns list after a blank line (what a
  module's forward takes, its state_dict's names) would be read as more
  items and dropped: it becomes a Notes section of its own.
"""

from __future__ import annotations

import re

import griffe

HEADING = re.compile(r"^(\s*)Example\n(\s*)-------$", re.MULTILINE)
LISTS = {"parameters", "other parameters", "returns", "yields", "raises", "attributes", "receives", "warns"}
ITEM = re.compile(r"^\*{0,2}[A-Za-z_][\w, *]*( : .*)?$")  # "name : type", "a, b : int", "ValueError"


def notes_after_lists(text: str) -> str:
    lines, out, section = text.split("\n"), [], None
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and re.fullmatch(r"\s*-{3,}\s*", lines[i + 1]) and line.strip():
            section = line.strip().lower()
        elif (
            section in LISTS
            and i
            and not lines[i - 1].strip()
            and line.strip()
            and not line[:1].isspace()
            and not ITEM.match(line)
            and not (i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()))
        ):
            out += ["Notes", "-----"]
            section = "notes"
        out.append(line)
    return "\n".join(out)


class ExampleSections(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            text = HEADING.sub(r"\1Examples\n\2--------", obj.docstring.value)
            obj.docstring.value = notes_after_lists(text)
