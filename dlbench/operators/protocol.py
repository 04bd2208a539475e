"""The executable CSV protocol of operator benchmarks: write the input, run the program, parse its output.

Input: ``<name>.csv`` with one row ``id, p1, p2, ...`` per operation and no header. The program gets the
path as its last argument and writes ``<input stem>_out.csv`` beside it: an optional header ``id, <unit>``
(unit one of s, ms, us, ns; ms when there is no header or the column is called ``time``), optionally more
named statistic columns in the same unit (``min, max, mean, std, iqr``) and ``reps``, then one
``id, time[, ...]`` row per operation. Measurement settings reach the program through environment
variables (see :data:`ENV_VARS`), so the command line stays exactly the original one.

An executable registered with ``node_file: true`` also finds ``<input stem>_nodes.json`` beside the input: per
id, the operation's op type, its parameters and, for an operation extracted from a model, the ONNX node itself
(:class:`dlbench.core.nodes.NodeSpec`); see :func:`write_nodes`. Other executables never see it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.core.nodes import NodeFormatError, NodeSpec
from dlbench.core.settings import EXECUTABLE_SETTINGS
from dlbench.core.values import TIME_UNITS_TO_MS, Number, Operation, TimeStats

#: Environment variables an executable may read (see :mod:`dlbench.core.settings`). Unset: its own default.
ENV_VARS = {s.env: s.help for s in EXECUTABLE_SETTINGS}

MAX_OUTPUT_BYTES = 64 * 1024 * 1024


class ProtocolError(ValueError):
    """An output file that does not follow the protocol; the message names the file and the row."""


def output_path_for(input_path: Path) -> Path:
    return input_path.with_name(f"{input_path.stem}_out.csv")


def format_value(value: Number) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def write_input(path: Path, rows: Iterable[tuple[int, Sequence[Number]]]) -> Path:
    """Write ``id, p1, p2, ...`` rows (no header) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join([str(op_id), *(format_value(v) for v in values)]) for op_id, values in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_input(path: Path) -> list[tuple[int, list[float]]]:
    """Parse an input CSV, as an executable sees it (used by the embedded backends and tests)."""
    rows: list[tuple[int, list[float]]] = []
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ProtocolError(f"{path}:{line}: not UTF-8 text (byte {err.start})") from err
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        try:
            rows.append((int(fields[0]), [float(f) for f in fields[1:]]))
        except ValueError as err:
            raise ProtocolError(f"{path}:{lineno}: not a row of numbers: {line[:200]!r}") from err
    return rows


@dataclass(frozen=True)
class ParsedOutput:
    """Rows that parsed, by id, and one message per row that did not (naming file and line)."""

    unit: str
    rows: Mapping[int, TimeStats]
    problems: Sequence[str]
    #: the problems that concern one asked-for id (a bad row of that id), by id
    problems_by_id: Mapping[int, Sequence[str]] = field(default_factory=dict)


def _number(text: str) -> float:
    # float() also takes "1_000" and surrounding junk-free spellings like "infinity"; both are fine here,
    # since non-finite times are rejected below.
    return float(text)


def _leading_id(fields: Sequence[str]) -> int | None:
    try:
        return int(fields[0])
    except (ValueError, IndexError):
        return None


def parse_output(
    path: Path, expected_ids: Iterable[int] | None = None, max_bytes: int = MAX_OUTPUT_BYTES
) -> ParsedOutput:
    """Parse ``<stem>_out.csv``. Rows that do not parse are reported, not fatal, so good rows survive.

    Raises :class:`ProtocolError` when the file as a whole is unusable (missing, too big, not text, empty).
    """
    if not path.exists():
        raise ProtocolError(f"{path}: the benchmark wrote no output file")
    if not path.is_file():
        raise ProtocolError(f"{path}: the output is not a regular file")
    size = path.stat().st_size
    if size > max_bytes:
        raise ProtocolError(f"{path}: output is {size} bytes, over the {max_bytes}-byte limit")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ProtocolError(
            f"{path}:{line}: not UTF-8 text (byte {err.start}: {raw[err.start : err.start + 8]!r})"
        ) from err
    lines = text.splitlines()
    problems: list[str] = []
    unit = "ms"
    columns = ["id", "time"]
    first_data = 0
    content = [(i, line) for i, line in enumerate(lines, start=1) if line.strip()]
    if not content:
        raise ProtocolError(f"{path}: output file is empty")
    head_lineno, head = content[0]
    head_fields = [f.strip().lower() for f in head.split(",")]
    if head_fields[0] == "id":
        first_data = 1
        if len(head_fields) < 2:
            raise ProtocolError(f"{path}:{head_lineno}: header {head!r} names no time column")
        unit_field = head_fields[1] or "ms"
        unit = "ms" if unit_field == "time" else unit_field
        if unit not in TIME_UNITS_TO_MS:
            raise ProtocolError(
                f"{path}:{head_lineno}: unknown time unit {head_fields[1]!r}; use one of {', '.join(TIME_UNITS_TO_MS)}"
            )
        columns = ["id", "time", *head_fields[2:]]
    factor = TIME_UNITS_TO_MS[unit]
    expected = set(expected_ids) if expected_ids is not None else None
    rows: dict[int, TimeStats] = {}
    first_line: dict[int, int] = {}
    by_id: dict[int, list[str]] = {}

    def report(message: str, op_id: int | None = None) -> None:
        problems.append(message)
        if op_id is not None and (expected is None or op_id in expected):
            by_id.setdefault(op_id, []).append(message)

    data = content[first_data:]
    if not data:
        raise ProtocolError(f"{path}: output has a header but no rows")
    for lineno, line in data:
        where = f"{path}:{lineno}"
        fields = [f.strip() for f in line.split(",")]
        if first_data and len(fields) != len(columns):
            report(
                f"{where}: {len(fields)} columns, the header has {len(columns)}: {line[:200]!r}", _leading_id(fields)
            )
            continue
        if not first_data and len(fields) != 2:
            report(f"{where}: expected 'id, time', got {len(fields)} columns: {line[:200]!r}", _leading_id(fields))
            continue
        try:
            op_id = int(fields[0])
        except ValueError:
            report(f"{where}: id {fields[0][:50]!r} is not an integer")
            continue
        try:
            values = {name: _number(v) for name, v in zip(columns[1:], fields[1:], strict=True)}
        except ValueError:
            report(f"{where}: id {op_id}: a time is not a number: {line[:200]!r}", op_id)
            continue
        time_value = values["time"]
        if not math.isfinite(time_value) or time_value <= 0:
            report(f"{where}: id {op_id}: time {fields[1][:50]!r} is not a finite positive number", op_id)
            continue
        if expected is not None and op_id not in expected:
            report(f"{where}: id {op_id} was never asked for")
            continue
        if op_id in rows:
            report(f"{where}: id {op_id} appears more than once (first at line {first_line[op_id]})", op_id)
            continue
        first_line[op_id] = lineno
        median = time_value * factor

        def stat(name: str, fallback: float, value_map: dict[str, float] = values) -> float:
            v = value_map.get(name)
            return v * factor if v is not None and math.isfinite(v) and v >= 0 else fallback

        reps_value = values.get("reps")
        reps = int(reps_value) if reps_value is not None and math.isfinite(reps_value) else 1
        rows[op_id] = TimeStats(
            median_ms=median,
            min_ms=stat("min", median),
            max_ms=stat("max", median),
            mean_ms=stat("mean", median),
            std_ms=stat("std", 0.0),
            iqr_ms=stat("iqr", 0.0),
            reps=max(reps, 1),
        )
    return ParsedOutput(unit=unit, rows=rows, problems=problems, problems_by_id={k: tuple(v) for k, v in by_id.items()})


def write_output(path: Path, rows: Iterable[tuple[int, TimeStats]], unit: str = "ms") -> None:
    """Write an output file with the extended statistic columns (what the embedded backends produce)."""
    factor = TIME_UNITS_TO_MS[unit]
    with path.open("w", encoding="utf-8") as handle:
        handle.write(f"id,{unit},min,max,mean,std,iqr,reps\n")
        for op_id, s in rows:
            values = [s.median_ms, s.min_ms, s.max_ms, s.mean_ms, s.std_ms, s.iqr_ms]
            handle.write(",".join([str(op_id), *(repr(v / factor) for v in values), str(s.reps)]) + "\n")


NODE_FILE_FORMAT = 1


def nodes_path_for(input_path: Path) -> Path:
    return input_path.with_name(f"{input_path.stem}_nodes.json")


def write_nodes(path: Path, operations: Iterable[Operation]) -> Path:
    """``{"format": 1, "operations": {"<id>": {"op_type", "params": [[descriptor, value], ...], "node"}}}``,
    ``node`` being the ONNX node as :meth:`NodeSpec.to_dict` writes it, or null for an operation that was
    not extracted from a model (a configured benchmark): the executable builds it from the parameters."""
    entries = {
        str(op.id): {
            "op_type": op.op_type,
            "params": [[d, v] for d, v in op.params],
            "node": None if op.node is None else op.node.to_dict(),
        }
        for op in operations
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": NODE_FILE_FORMAT, "operations": entries}), encoding="utf-8")
    return path


@dataclass(frozen=True)
class NodeEntry:
    """One operation of a node file; ``problem`` says why its node did not parse (that row fails alone)."""

    op_type: str
    params: tuple[tuple[str, Number], ...]
    node: NodeSpec | None
    problem: str = ""

    @property
    def param_dict(self) -> dict[str, Number]:
        return {d: v for d, v in self.params if d != "?"}


def read_nodes(path: Path) -> dict[int, NodeEntry]:
    """Parse a node file (see :func:`write_nodes`); a file that is not one raises :class:`ProtocolError`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ProtocolError(f"{path}: not a readable node file ({err})") from err
    operations = data.get("operations") if isinstance(data, dict) else None
    if not isinstance(operations, dict) or data.get("format") != NODE_FILE_FORMAT:
        raise ProtocolError(f"{path}: expected {{'format': {NODE_FILE_FORMAT}, 'operations': {{...}}}}")
    entries: dict[int, NodeEntry] = {}
    for key, entry in operations.items():
        where = f"{path}: id {key}"
        try:
            op_id = int(key)
            params = tuple((str(d), v) for d, v in entry.get("params", []))
            op_type = str(entry["op_type"])
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ProtocolError(f"{where}: needs op_type and params ({err})") from err
        try:
            node = None if entry.get("node") is None else NodeSpec.from_dict(entry["node"], where)
            entries[op_id] = NodeEntry(op_type, params, node)
        except NodeFormatError as err:
            entries[op_id] = NodeEntry(op_type, params, None, str(err))
    return entries
