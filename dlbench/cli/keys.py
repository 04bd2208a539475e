"""Which keys the configuration has, read from the typed schema, and a check of the command line's overrides
against them before anything is composed: ``+batchsize=8`` is refused like ``batchsize=8``, with the
closest key named (Hydra's ``+`` would otherwise add the key and the run would silently ignore it)."""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SchemaKeys:
    """Dotted keys of the schema: ``leaves`` take a value, below an ``open`` key anything goes (a free-form
    map such as ``benchmark.common``), ``nodes`` are the typed sub-configs (``measure``, ``benchmark``)."""

    leaves: frozenset[str]
    open: frozenset[str]
    nodes: frozenset[str]

    def known(self, key: str) -> bool:
        if key in self.leaves or key in self.open or key in self.nodes:
            return True
        return any(key.startswith(prefix + ".") for prefix in self.open)

    def closest(self, key: str) -> str:
        """The known key ``key`` most likely meant, or empty: the same last part under another node
        (``min_reps`` -> ``measure.min_reps``), else a close spelling under the same node, else anywhere."""
        candidates = sorted(self.leaves | self.open)  # keys that take a value
        parent, _, leaf = key.rpartition(".")
        same_leaf = [c for c in candidates if c.rpartition(".")[2] == leaf]
        if same_leaf:
            return same_leaf[0]
        siblings = {c.rpartition(".")[2]: c for c in candidates if c.rpartition(".")[0] == parent}
        close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)
        if close:
            return siblings[close[0]]
        containing = [c for name, c in siblings.items() if leaf and leaf in name]
        if containing:
            return containing[0]
        by_leaf = {c.rpartition(".")[2]: c for c in candidates}
        close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
        if close:
            return by_leaf[close[0]]
        if parent and parent not in self.nodes:  # a misspelt node: compare whole keys
            close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.8)
            return close[0] if close else ""
        return ""


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field holds, also through ``X | None``."""
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg  # type: ignore[return-value]
    return None


def _is_open(hint: Any) -> bool:
    origin = typing.get_origin(hint)
    return hint is Any or origin in (dict, list) or hint in (dict, list)


def schema_keys(schema: type) -> SchemaKeys:
    leaves: set[str] = set()
    open_keys: set[str] = set()
    nodes: set[str] = set()

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = prefix + f.name
            hint = hints[f.name]
            nested = _dataclass_of(hint)
            if nested is not None:
                nodes.add(key)
                walk(nested, key + ".")
            elif _is_open(hint):
                open_keys.add(key)
            else:
                leaves.add(key)

    walk(schema, "")
    return SchemaKeys(frozenset(leaves), frozenset(open_keys), frozenset(nodes))


def config_groups(config_dirs: Iterable[Path]) -> dict[str, list[str]]:
    """Config groups (folders of YAML files, ``a/b`` when nested) and their options, over ``config_dirs``."""
    groups: dict[str, set[str]] = {}
    for root in config_dirs:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.y*ml")):
            if path.suffix not in (".yaml", ".yml") or path.parent == root:
                continue
            groups.setdefault(path.parent.relative_to(root).as_posix(), set()).add(path.stem)
    return {name: sorted(options) for name, options in sorted(groups.items())}


@dataclass(frozen=True)
class UnknownKey:
    """An override naming no key of the schema (and no config group)."""

    override: str
    key: str
    suggestion: str

    def message(self) -> str:
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return f"unknown key {self.key!r} (in `{self.override}`){hint}"


#: Hydra's flags that take a value (``--info`` takes one of INFO_CHOICES when it follows)
FLAGS_WITH_VALUE = frozenset(
    {"--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn", "--package", "-p", "--cfg", "-c",
     "--experimental-rerun"}
)  # fmt: skip
INFO_CHOICES = frozenset({"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"})


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Hydra's flags (with their values) and the ``key=value`` overrides of a command line, each in order."""
    flags: list[str] = []
    overrides: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            flags.append(word)
            takes_value = word in FLAGS_WITH_VALUE or (word in ("--info", "-i") and words[i + 1 : i + 2] and
                                                        words[i + 1] in INFO_CHOICES)  # fmt: skip
            if takes_value and i + 1 < len(words):
                flags.append(words[i + 1])
                i += 1
        else:
            overrides.append(word)
        i += 1
    return flags, overrides


def command_line_overrides(argv: Sequence[str]) -> list[str]:
    """The ``key=value`` words of a dlbench command line (Hydra's flags and their values left out)."""
    return split_argv(argv)[1]


def config_dirs_from_argv(argv: Sequence[str], default: Path) -> list[Path]:
    dirs = [default]
    for i, word in enumerate(argv):
        if word in ("--config-dir", "-cd") and i + 1 < len(argv):
            dirs.insert(0, Path(argv[i + 1]).expanduser().resolve())
        elif word.startswith("--config-dir="):
            dirs.insert(0, Path(word.split("=", 1)[1]).expanduser().resolve())
    return dirs


#: The key of an override: ``key=value``, ``+key=value``, ``++key=value``, ``~key``, ``group@package=option``
OVERRIDE_KEY = re.compile(r"^(?:~|\+\+|\+)?(?P<key>[^=@~+][^=@]*?)(?P<package>@[^=]*)?(?:=|$)")


def unknown_keys(overrides: Sequence[str], keys: SchemaKeys, groups: Iterable[str]) -> list[UnknownKey]:
    """Overrides whose key is neither in the schema nor a config group. Anything that does not parse as an
    override is left to Hydra, whose parser names the offending character."""
    group_names = set(groups)
    found = []
    for text in overrides:
        if "=" not in text and not text.startswith("~"):
            continue  # not an override at all: Hydra says so
        match = OVERRIDE_KEY.match(text)
        if match is None or match.group("package"):
            continue
        key = match.group("key").strip()
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue
        if key in group_names or "/" in key or keys.known(key):
            continue
        found.append(UnknownKey(text, key, keys.closest(key)))
    return found
