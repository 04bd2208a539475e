"""The operator benchmark registry: one YAML file an entry under ``registry/`` in each config directory."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import re
import shutil
import sys
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from dlbench import CONF_DIR, PROJECT_ROOT
from dlbench.config import RegistryEntry, TrainingEntry
from dlbench.core.dtypes import MEMORY_FORMATS
from dlbench.core.settings import ROW_DTYPES, ROW_SETTINGS
from dlbench.operators.align import Permutation, PermutationError, parse_param_descr
from dlbench.operators.passes import check_passes

PYTHON_ALIASES = ("python", "python3")
#: A synonym that serves every op type (an executable that runs any ONNX node, given its node file).
ANY_OP_TYPE = "*"
NATIVE_BUILD = PROJECT_ROOT / "native" / "build"
BUILD_COMMAND = "cmake -S native -B native/build -DCMAKE_BUILD_TYPE=Release && cmake --build native/build -j"


class RegistryError(ValueError):
    """A registry file that does not describe a valid entry; the message names the file and the field."""


def load_yaml_node(path: Path, schema: type, group: str, resolve: bool = True) -> object:
    """Load ``path`` and check it against ``schema`` (unknown keys and wrong types fail naming the file).

    With ``resolve=False`` interpolations such as ``${batch_size}`` stay as text, to be resolved later
    against the run's configuration. A file whose values already have their fields' types is read
    straight from YAML (a registry of 65 files in 50 ms, not 600 ms through OmegaConf); any other file,
    and every error, goes through OmegaConf, which coerces and words the message."""
    plain = plain_entry(path, schema, resolve)
    if plain is not None:
        return plain
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        raw = OmegaConf.load(path)
        node = OmegaConf.merge(OmegaConf.structured(schema), raw)
        if resolve:
            return OmegaConf.to_object(node)
        return schema(**OmegaConf.to_container(node, resolve=False))
    except (OmegaConfBaseException, ValueError, OSError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RegistryError(f"{group} entry {path}: {message}") from err
    except Exception as err:  # yaml.YAMLError and friends: still name the file
        raise RegistryError(f"{group} entry {path}: {type(err).__name__}: {err}") from err


def _is_scalar(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _has_type(value: object, hint: object) -> bool:
    """``value`` is what OmegaConf would hand back unchanged for a field typed ``hint``."""
    if hint is str:
        return isinstance(value, str)
    if hint is bool:
        return isinstance(value, bool)
    if hint == list[str]:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if hint is Any:  # exe, param_descr, device: text, whole numbers, or lists of them (floats: OmegaConf decides)
        return _is_scalar(value) or (isinstance(value, list) and all(_is_scalar(v) for v in value))
    return False


@functools.cache
def _field_types(schema: type) -> dict[str, tuple[object, bool]]:
    hints = typing.get_type_hints(schema)
    return {f.name: (hints[f.name], f.default == MISSING) for f in dataclasses.fields(schema)}


def plain_entry(path: Path, schema: type, resolve: bool) -> object | None:
    """The entry of ``path`` read with the C YAML parser when every key is a field of ``schema``, every
    required field is there and every value already has its field's type; None otherwise."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    keys = re.findall(r"^([A-Za-z_][\w-]*)\s*:", text, flags=re.MULTILINE)
    if (resolve and "${" in text) or len(keys) != len(set(keys)):
        return None  # interpolations to resolve, or a key given twice: OmegaConf's rules
    try:
        raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        return None
    types = _field_types(schema)
    if not isinstance(raw, dict) or not set(raw) <= set(types):
        return None
    for name, (hint, required) in types.items():
        if name in raw and not _has_type(raw[name], hint):
            return None
        if name not in raw and required:
            return None
    return schema(**raw)


def resolve_command(exe: object, where: str) -> tuple[str, ...]:
    """An argument list from ``exe``: a path or a list; never a string split on spaces."""
    if isinstance(exe, str):
        parts = [exe]
    elif isinstance(exe, Sequence) and exe and all(isinstance(p, str | int | float) for p in exe):
        parts = [str(p) for p in exe]
    else:
        raise RegistryError(f"{where}: exe must be a path or a non-empty list of arguments, got {exe!r}")
    program = parts[0]
    if program in PYTHON_ALIASES:
        # Script paths after the interpreter resolve against the project root too.
        return (sys.executable, *(_project_path(p) if p.endswith(".py") else p for p in parts[1:]))
    if program.endswith(".py"):
        return (sys.executable, _project_path(program), *parts[1:])
    expanded = Path(os.path.expanduser(program))
    if expanded.is_absolute():
        program = str(expanded)
    elif "/" in program or (PROJECT_ROOT / program).exists():
        program = str(PROJECT_ROOT / expanded)
    else:
        program = shutil.which(program) or program
    return (program, *parts[1:])


def _project_path(path: str) -> str:
    expanded = Path(os.path.expanduser(path))
    return str(expanded if expanded.is_absolute() else PROJECT_ROOT / expanded)


def command_availability(command: Sequence[str]) -> str:
    """Empty when the command can start here, else why not (naming the path looked for)."""
    program = command[0]
    if program == sys.executable and len(command) >= 3 and command[1] == "-m":
        module = command[2]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        return "" if found else f"Python module {module} not found"
    if program == sys.executable and len(command) >= 2 and command[1].endswith(".py"):
        return "" if Path(command[1]).is_file() else f"script not found: {command[1]}"
    path = Path(program)
    if not path.is_absolute():
        return f"executable {program} not found on PATH"
    if not path.exists() and path.is_relative_to(NATIVE_BUILD):
        return f"not built yet ({path} is missing); build the native kernels in {PROJECT_ROOT} with: {BUILD_COMMAND}"
    if not path.exists():
        return f"executable not found: {path}"
    if not os.access(path, os.X_OK) or path.is_dir():
        return f"not an executable file: {path}"
    return ""


@dataclass(frozen=True)
class OperatorBenchmark:
    """A registered operator benchmark, validated and with its command resolved."""

    name: str
    synonyms: tuple[str, ...]
    command: tuple[str, ...]
    param_descr: tuple[str, ...]
    permutations: tuple[Permutation, ...]
    backend: str
    devices: tuple[str, ...]
    source: Path
    description: str = ""
    #: the passes one reported time covers (empty: the operation's own pass)
    passes: tuple[str, ...] = ()
    node_file: bool = False
    #: taken per row after the parameters (``core/settings.py`` ``ROW_SETTINGS``); the dtypes and memory formats
    #: it runs (empty dtypes: any)
    row_settings: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    memory_formats: tuple[str, ...] = ("contiguous",)

    def serves(self, op_type: str) -> bool:
        return op_type == self.name or op_type in self.synonyms or ANY_OP_TYPE in self.synonyms

    @property
    def unavailable_reason(self) -> str:
        return command_availability(self.command)

    @property
    def available(self) -> bool:
        return not self.unavailable_reason

    @classmethod
    def from_entry(cls, entry: RegistryEntry, source: Path) -> OperatorBenchmark:
        where = f"registry entry {source}"
        if not entry.name.strip():
            raise RegistryError(f"{where}: name is empty")
        try:
            permutations = tuple(Permutation.parse(p) for p in entry.permutation)
        except PermutationError as err:
            raise RegistryError(f"{where}: field permutation: {err}") from err
        devices = entry.device if isinstance(entry.device, list | tuple) else [entry.device]
        try:
            # an executable that reads every operation from its node file may take no parameters at all
            empty = entry.node_file and isinstance(entry.param_descr, list | tuple) and not entry.param_descr
            param_descr = () if empty else tuple(parse_param_descr(entry.param_descr, f"{where}: field param_descr"))
        except ValueError as err:
            raise RegistryError(str(err)) from err
        try:
            passes = check_passes([str(p) for p in entry.passes], [entry.name, *entry.synonyms])
        except ValueError as err:
            raise RegistryError(f"{where}: field passes: {err}") from err
        _check_row_fields(entry, where)
        return cls(
            name=entry.name,
            synonyms=tuple(entry.synonyms),
            command=resolve_command(entry.exe, f"{where}: field exe"),
            param_descr=param_descr,
            permutations=permutations,
            backend=entry.backend,
            devices=tuple(str(d) for d in devices),
            source=source,
            description=entry.description,
            passes=passes,
            node_file=bool(entry.node_file),
            row_settings=tuple(entry.row_settings),
            dtypes=tuple(entry.dtypes),
            memory_formats=tuple(entry.memory_formats),
        )


def _check_row_fields(entry: RegistryEntry, where: str) -> None:
    """``row_settings`` a prefix of ``ROW_SETTINGS`` order, ``dtypes`` and ``memory_formats`` known names."""
    for field_name, given, known in (
        ("row_settings", entry.row_settings, ROW_SETTINGS),
        ("dtypes", entry.dtypes, ROW_DTYPES),
        ("memory_formats", entry.memory_formats, MEMORY_FORMATS),
    ):
        unknown = [str(v) for v in given if v not in known]
        if unknown:
            raise RegistryError(f"{where}: field {field_name}: {', '.join(unknown)}; use some of {', '.join(known)}")
    if list(entry.row_settings) != list(ROW_SETTINGS[: len(entry.row_settings)]):
        raise RegistryError(f"{where}: field row_settings: list them in the order {', '.join(ROW_SETTINGS)}")


@dataclass(frozen=True)
class TrainingBenchmark:
    """A registered training script: the original ``name``, ``exe``, ``parameters``."""

    name: str
    command: tuple[str, ...]
    parameters: str
    model: str
    source: Path
    description: str = ""


@dataclass(frozen=True)
class Registry:
    operators: tuple[OperatorBenchmark, ...]
    trainings: tuple[TrainingBenchmark, ...] = ()

    def operator(self, name: str) -> OperatorBenchmark:
        for entry in self.operators:
            if entry.name == name:
                return entry
        raise KeyError(f"no operator benchmark {name!r}; registered: {', '.join(e.name for e in self.operators)}")

    def training(self, name: str) -> TrainingBenchmark:
        for entry in self.trainings:
            if entry.name == name:
                return entry
        raise KeyError(f"no training benchmark {name!r}; registered: {', '.join(e.name for e in self.trainings)}")

    def serving(self, op_type: str, backend: str | None = None, device: str | None = None) -> list[OperatorBenchmark]:
        """Entries serving ``op_type`` (by name or synonym), optionally of one backend and device."""
        return [
            e
            for e in self.operators
            if e.serves(op_type)
            and (backend is None or e.backend == backend)
            and (device is None or device in e.devices)
        ]


def _yaml_files(search_dirs: Iterable[Path], group: str) -> list[Path]:
    """The group's YAML files, first directory winning for a file name (Hydra's search-path rule)."""
    seen: dict[str, Path] = {}
    for directory in search_dirs:
        folder = Path(directory) / group
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
            seen.setdefault(path.stem, path)
    return [seen[name] for name in sorted(seen)]


def load_registry(search_dirs: Sequence[Path] = (CONF_DIR,)) -> Registry:
    """Load every ``registry/*.yaml`` and ``training/*.yaml`` on the config search path."""
    operators: dict[str, OperatorBenchmark] = {}
    for path in _yaml_files(search_dirs, "registry"):
        entry = load_yaml_node(path, RegistryEntry, "registry")
        assert isinstance(entry, RegistryEntry)
        benchmark = OperatorBenchmark.from_entry(entry, path)
        if benchmark.name in operators:
            raise RegistryError(
                f"registry entry {path}: name {benchmark.name!r} is already used by {operators[benchmark.name].source}"
            )
        operators[benchmark.name] = benchmark
    trainings: dict[str, TrainingBenchmark] = {}
    for path in _yaml_files(search_dirs, "training"):
        entry = load_yaml_node(path, TrainingEntry, "training", resolve=False)
        assert isinstance(entry, TrainingEntry)
        trainings[entry.name] = TrainingBenchmark(
            name=entry.name,
            command=resolve_command(entry.exe, f"training entry {path}: field exe"),
            parameters=entry.parameters,
            model=entry.model,
            source=path,
            description=entry.description,
        )
    return Registry(operators=tuple(operators.values()), trainings=tuple(trainings.values()))
