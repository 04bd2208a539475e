"""ARCHITECTURE.md's module index names every module of the package, once, and nothing that is gone, so
the map cannot drift from the code."""

from __future__ import annotations

import re

from dlbench import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "dlbench"
INDEX_LINE = re.compile(r"^- `([^`]+\.py)` — \S")


def index_entries() -> list[str]:
    text = (PROJECT_ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("\n## Module index\n", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for line in section.splitlines() if (m := INDEX_LINE.match(line))]


def test_module_index_names_every_module_of_the_package_once() -> None:
    entries = index_entries()
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
    assert sorted(modules - set(entries)) == [], "add these modules to ARCHITECTURE.md's module index"
    assert sorted(set(entries) - modules) == [], "these modules in ARCHITECTURE.md's index no longer exist"
    assert len(entries) == len(set(entries)), "a module is listed twice in ARCHITECTURE.md's index"


def test_module_index_lines_each_say_what_the_module_is_for() -> None:
    text = (PROJECT_ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("\n## Module index\n", 1)[1]
    listed = [line for line in section.splitlines() if line.startswith("- ")]
    assert listed and all(INDEX_LINE.match(line) for line in listed), (
        "each index line reads: - `path.py` — what it is for"
    )
