"""The shape of the package, read from its imports with ``ast``: data flows one way through the layers, no
import circles, MLflow only in tracking/, Hydra's globals only at the entry, tasks never import tasks, and
no module grows past 400 lines, no function past 80."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dlbench import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "dlbench"
#: Each layer may import its own and lower ranks; the entry (cli, __main__, the instrument facade) sits on top.
RANKS = {
    "dlbench": 0,
    "dlbench.core": 0,
    "dlbench.config": 1,
    "dlbench.tracking": 2,
    "dlbench.onnx": 3,
    "dlbench.operators": 4,
    "dlbench.backends": 4,
    "dlbench.training": 5,
    "dlbench.analysis": 6,
    "dlbench.tasks": 7,
    "dlbench.cli": 8,
    "dlbench.__main__": 8,
    "dlbench.instrument": 8,
}
MAX_LINES = 400
#: A function fits on a screen (../shared/STYLE.md): a longer one is several ideas waiting for names
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    """The longest prefix of ``module`` that names a layer."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANKS:
            return ".".join(parts[:n])
    raise AssertionError(f"{module} is in no layer of this test's RANKS; add it")


def imported(module: str) -> set[str]:
    """Every module ``module`` imports, at the top or inside functions (relative imports resolved)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES)
    return found


EDGES = {m: {i for i in imported(m) if i in MODULES and i != m} for m in MODULES}


def test_every_module_belongs_to_a_layer() -> None:
    assert all(layer(m) for m in MODULES)


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{m} ({layer(m)}) imports {i} ({layer(i)})"
        for m, targets in EDGES.items()
        for i in targets
        if RANKS[layer(i)] > RANKS[layer(m)]
    ]
    assert upward == []


def test_the_import_graph_has_no_circle() -> None:
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(EDGES[module]):
            if state.get(target) == 1:
                circles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[module] = 2

    for module in MODULES:
        if module not in state:
            visit(module, [])
    assert circles == []


def test_tasks_never_import_tasks() -> None:
    tasks = {m for m in MODULES if m.startswith("dlbench.tasks.")}
    assert {m: EDGES[m] & tasks for m in tasks if EDGES[m] & tasks} == {}


@pytest.mark.parametrize(
    ("library", "allowed"),
    [
        ("mlflow", ("dlbench.tracking",)),
        ("hydra", ("dlbench.cli", "dlbench.config")),
        ("hydra.core.hydra_config", ("dlbench.cli",)),
    ],
)
def test_libraries_are_used_only_where_they_belong(library: str, allowed: tuple[str, ...]) -> None:
    users = {
        m
        for m in MODULES
        if any(i == library or i.startswith(library + ".") for i in imported(m))
        and not any(m == a or m.startswith(a + ".") for a in allowed)
    }
    assert users == set()


def test_no_module_is_longer_than_the_limit() -> None:
    long = {m: n for m, p in MODULES.items() if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES}
    assert long == {}


def long_functions(source: str) -> dict[str, int]:
    """Every function (methods and nested ones included) longer than the limit: name -> lines, decorators out."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if lines > MAX_FUNCTION_LINES:
                found[f"{node.name}:{node.lineno}"] = lines
    return found


def test_the_function_length_rule_finds_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert list(long_functions(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")) == ["long:5"]


def test_no_function_is_longer_than_the_limit() -> None:
    long = {f"{m}.{name}": n for m, p in MODULES.items() for name, n in long_functions(p.read_text("utf-8")).items()}
    assert long == {}, "split these into functions with names of their own"
