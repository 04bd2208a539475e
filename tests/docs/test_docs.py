"""The README is the front door and the site under docs/ holds the rest: the README stays short, every relative
link in both resolves (to a file, and to a heading where it names one), every shipped benchmark is named where
users look for it, and the MLflow Project's environment lists what the package needs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO, clean_env

README_MAX_LINES = 200
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose(markdown: str) -> str:
    """The text without fenced code blocks and inline code, where a bracket is not a link."""
    without_blocks = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", without_blocks)


def anchors(markdown: str) -> set[str]:
    """The ids Python-Markdown's toc gives the headings (MkDocs' default slugify), and explicit ``{#id}``."""
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M), re.M):
        explicit = re.search(r"\{\s*#([\w-]+)\s*\}\s*$", heading)
        if explicit:
            found.add(explicit.group(1))
            continue
        text = re.sub(r"[`*_]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading))
        found.add(re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower()))
    return found


def relative_links(document: Path) -> list[str]:
    return [t for t in LINK.findall(prose(document.read_text(encoding="utf-8"))) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_at_most_200_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move the detail to a page in docs/"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves_to_a_file_and_heading(document: Path) -> None:
    broken = []
    for target in relative_links(document):
        path_part, _, anchor = target.partition("#")
        linked = (document.parent / path_part).resolve() if path_part else document
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{document.relative_to(REPO)}: " + "; ".join(broken)


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Two words\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#two-words) [gone](c.md) [no heading](a.md#three) `[code](d.md)`\n")
    assert relative_links(page) == ["a.md#two-words", "c.md", "a.md#three"]
    assert anchors((tmp_path / "a.md").read_text()) == {"a", "two-words"}


def test_every_page_in_docs_is_in_the_site_navigation() -> None:
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def pages(entry) -> list[str]:
        if isinstance(entry, str):
            return [entry]
        items = entry.values() if isinstance(entry, dict) else entry
        return [page for item in items for page in pages(item)]

    in_nav = set(pages(config["nav"]))
    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").glob("**/*.md")}
    assert on_disk <= in_nav, f"pages not in mkdocs.yml's nav: {sorted(on_disk - in_nav)}"


def shown_help() -> str:
    return subprocess.run(
        [sys.executable, "-m", "dlbench", "--help"], cwd=REPO, env=clean_env(), capture_output=True, text=True,
        timeout=120, check=True,
    ).stdout  # fmt: skip


def test_every_shipped_benchmark_is_named_in_the_readme_and_in_help() -> None:
    shipped = sorted(p.stem for p in (REPO / "conf" / "benchmark").glob("*.yaml"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    help_benchmarks = shown_help().split("Benchmarks shipped")[1].split("Config groups")[0]
    assert [b for b in shipped if not re.search(rf"\b{b}\b", readme)] == []
    assert [b for b in shipped if not re.search(rf"\b{b}\b", help_benchmarks)] == []


def test_every_main_key_of_help_is_in_the_keys_table() -> None:
    main_keys = shown_help().split("Main keys")[1].split("Examples:")[0]
    named = [re.match(r"\s+([\w.]+(?:, [\w.]+)*)\s{2,}", line) for line in main_keys.splitlines()[1:]]
    keys = [key for found in named if found for key in found.group(1).split(", ")]
    table = (REPO / "docs" / "operators.md").read_text(encoding="utf-8").split("## Configuration keys")[1]
    table = table.split("\n## ")[0]
    assert {"batch_size", "lr", "dims.NAME", "mlflow.experiment"} <= set(keys)
    assert [k for k in keys if f"`{k.replace('.NAME', '.<name>')}`" not in table] == []


def test_the_mlflow_project_environment_lists_the_package_dependencies() -> None:
    import tomllib

    wanted = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    listed = yaml.safe_load((REPO / "python_env.yaml").read_text(encoding="utf-8"))["dependencies"]
    assert sorted(listed) == sorted(wanted)
