"""A griffe extension (mkdocs.yml, mkdocstrings' `extensions`) that reads
attnc's docstrings as the numpy parser expects, without changing them:

- their doctests are headed "Example" (singular), a section name the parser
  does not know: read as "Examples", so the examples render as code;
- prose that follows a Parameters or Returns list after a blank line (what a
  module's forward takes, its state_dict's names) would be read as more
  items and dropped: it becomes a Notes section of its own;
- an item reads "name : type, description" on one line, which the parser
  would show whole as the type: the description after the type's first
  top-level comma moves to the item's description.
"""

from __future__ import annotations

import re

import griffe

HEADING = re.compile(r"^(\s*)Example\n(\s*)-------$", re.MULTILINE)
LISTS = {"parameters", "other parameters", "returns", "yields", "raises", "attributes", "receives", "warns"}
ITEM = re.compile(r"^\*{0,2}[A-Za-z_][\w, *]*( : .*)?$")  # "name : type", "a, b : int", "ValueError"


def split_item(line: str) -> list[str]:
    """'q : array (..., T), float32, the queries' -> ['q : array (..., T)', '    float32, the queries']."""
    name, sep, rest = line.partition(" : ")
    depth = 0
    for i, ch in enumerate(rest):
        depth += (ch in "([{") - (ch in ")]}")
        if depth == 0 and rest.startswith(", ", i):
            return [f"{name}{sep}{rest[:i]}", "    " + rest[i + 2 :]]
    return [line]


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
        if section in LISTS and " : " in line and not line[:1].isspace() and ITEM.match(line):
            out += split_item(line)
            continue
        out.append(line)
    return "\n".join(out)


class ExampleSections(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            text = HEADING.sub(r"\1Examples\n\2--------", obj.docstring.value)
            obj.docstring.value = notes_after_lists(text)
