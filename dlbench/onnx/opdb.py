"""The operation database: identical operations merged with their occurrence count and node names, as a
pandas DataFrame that round-trips through CSV."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from dlbench.core.dtypes import MEMORY_FORMATS
from dlbench.core.nodes import TensorSpec
from dlbench.core.settings import ROW_DTYPES
from dlbench.core.values import Number, Operation, operation_name

#: Columns every database has, in order; one column per named descriptor follows them.
#: ``dtype`` and ``memory_format``: what the operation runs in (``core/dtypes.py`` names; empty: the sweep's dtype,
#: contiguous), as recorded or as ``amp=``/``channels_last=`` set it; a file without them runs in the sweep's own
COLUMNS = (
    "id", "op_type", "name", "params", "count", "nodes", "input_shapes", "flops", "bytes", "pass", "source_id",
    "dtype", "memory_format",
)  # fmt: skip
_REQUIRED = ("id", "op_type", "params", "count", "nodes")


class OperationDatabaseError(ValueError):
    """A database file or frame that cannot be read back; the message names the file, row and column."""


#: Float constants up to this many elements are part of what a node computes (an exponent, clip bounds);
#: longer ones (per-channel scales, biases) are data whose values do not change the problem
KEY_FLOAT_VALUES = 4


def operation_key(operation: Operation) -> tuple[Any, ...]:
    """What makes two operations the same problem: the operator, its parameters, its inputs' shapes and, for
    one extracted from a model, the ONNX node's inputs, outputs and attributes (not its name, nor the values
    of float weights). The parameters alone do not say it: a Concat of 192+208+48+64 channels and one of
    160+224+64+64 both have ``C=512, inputs=4``."""
    node = operation.node
    node_key = None
    if node is not None:
        inputs = tuple(None if t is None else _tensor_key(t) for t in node.inputs)
        attributes = tuple(sorted((a.name, a.kind, repr(a.value)) for a in node.attributes))
        node_key = (node.domain, node.opsets, inputs, tuple(_tensor_key(t) for t in node.outputs), attributes)
    layout = (operation.dtype, operation.memory_format)
    return operation.op_type, tuple(operation.params), tuple(operation.input_shapes), node_key, layout


def _tensor_key(tensor: TensorSpec) -> tuple[Any, ...]:
    values = tensor.values
    if values is not None and tensor.dtype.startswith(("float", "bfloat")) and len(values) > KEY_FLOAT_VALUES:
        values = None
    return tensor.shape, tensor.dtype, tensor.weight, values


def deduplicate(operations: Iterable[Operation]) -> list[Operation]:
    """Merge identical operations (:func:`operation_key`), in first-occurrence order, renumbered from 0.

    Counts add up and node names are concatenated in order, so each merged operation still names every
    ONNX node it stands for; everything else (shapes, the node itself) is the same in every merged one.
    """
    merged: dict[tuple, Operation] = {}
    for op in operations:
        key = operation_key(op)
        seen = merged.get(key)
        merged[key] = op if seen is None else replace(seen, count=seen.count + op.count, nodes=(*seen.nodes, *op.nodes))
    return [replace(op, id=i) for i, op in enumerate(merged.values())]


def format_params(params: Sequence[tuple[str, Number]]) -> str:
    """``N=32;C=3;...``: the human-readable form (``?`` positional values included)."""
    return ";".join(f"{d}={_number_text(v)}" for d, v in params)


def _number_text(value: Number) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _descriptor_column(descr: str) -> str:
    return f"param_{descr}" if descr in COLUMNS else descr


def operations_frame(
    operations: Sequence[Operation], sources: Mapping[int, tuple[int, str]] | None = None
) -> pd.DataFrame:
    """One row per operation. ``params``, ``nodes`` and ``input_shapes`` are JSON (exact round trip);
    every named descriptor also gets a column of its own for reading and filtering. ``sources`` maps a
    derived operation's id to (forward operation id, pass name), as :mod:`dlbench.unfold` produces."""
    sources = sources or {}
    rows: list[dict[str, Any]] = []
    for op in operations:
        source = sources.get(op.id)
        row: dict[str, Any] = {
            "id": op.id,
            "op_type": op.op_type,
            "name": op.name or operation_name(op.op_type, op.params),
            "params": json.dumps([[d, v] for d, v in op.params]),
            "count": op.count,
            "nodes": json.dumps(list(op.nodes)),
            "input_shapes": json.dumps([list(s) for s in op.input_shapes]),
            "flops": op.flops,
            "bytes": op.bytes_moved,
            "pass": source[1] if source else "forward",
            "source_id": source[0] if source else None,
            "dtype": op.dtype,
            "memory_format": op.memory_format,
        }
        for descr, value in op.params:
            if descr != "?":
                row.setdefault(_descriptor_column(descr), value)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=None if rows else list(COLUMNS))
    if rows:
        extra = [c for c in frame.columns if c not in COLUMNS]
        frame = frame[[*COLUMNS, *extra]]
    frame["source_id"] = frame["source_id"].astype("Int64")
    return frame


def _json_cell(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise OperationDatabaseError(f"{where}: not JSON ({err.msg}): {text[:120]!r}") from err


def _optional_float(text: str) -> float | None:
    if text == "" or text.lower() == "nan":
        return None
    value = float(text)
    return None if math.isnan(value) else value


def frame_operations(frame: pd.DataFrame, source: str = "operations") -> list[Operation]:
    """The operations of a database frame (as written by :func:`operations_frame` or read from CSV)."""
    missing = [c for c in _REQUIRED if c not in frame.columns]
    if missing:
        raise OperationDatabaseError(f"{source}: missing column(s) {', '.join(missing)}")
    operations = []
    for position, row in enumerate(frame.to_dict("records")):
        where = f"{source}: row {position + 1}"
        cells = {k: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for k, v in row.items()}
        try:
            params_raw = _json_cell(cells["params"], f"{where}, column params")
            params = tuple((str(d), v) for d, v in params_raw)
            if any(isinstance(v, bool) or not isinstance(v, int | float) for _, v in params):
                raise OperationDatabaseError(f"{where}, column params: values must be numbers: {cells['params']}")
            nodes = tuple(str(n) for n in _json_cell(cells["nodes"], f"{where}, column nodes"))
            shapes_text = cells.get("input_shapes", "") or "[]"
            shapes = tuple(tuple(int(d) for d in s) for s in _json_cell(shapes_text, f"{where}, column input_shapes"))
            name = cells.get("name", "")
            if name == operation_name(cells["op_type"], params):
                name = ""  # the written name was the derived label, which the operation derives again
            operations.append(
                Operation(
                    id=int(float(cells["id"])),
                    op_type=cells["op_type"],
                    params=params,
                    input_shapes=shapes,
                    name=name,
                    count=int(float(cells["count"])),
                    nodes=nodes,
                    flops=_optional_float(cells.get("flops", "")),
                    bytes_moved=_optional_float(cells.get("bytes", "")),
                    **_row_settings(cells, where),
                )
            )
        except (TypeError, ValueError) as err:
            if isinstance(err, OperationDatabaseError):
                raise
            raise OperationDatabaseError(f"{where}: {err}") from err
    return operations


def _row_settings(cells: Mapping[str, str], where: str) -> dict[str, str]:
    """A row's ``dtype`` and ``memory_format`` (empty where the column is missing or blank), checked."""
    out = {"dtype": cells.get("dtype", "").strip(), "memory_format": cells.get("memory_format", "").strip()}
    for column, allowed in (("dtype", ROW_DTYPES), ("memory_format", MEMORY_FORMATS)):
        if out[column] and out[column] not in allowed:
            raise OperationDatabaseError(f"{where}, column {column}: {out[column]!r}; use one of {', '.join(allowed)}")
    return out


def frame_sources(frame: pd.DataFrame) -> dict[int, tuple[int, str]]:
    """Derived operation id -> (forward operation id, pass), from the ``pass``/``source_id`` columns."""
    if "source_id" not in frame.columns or "pass" not in frame.columns:
        return {}
    out = {}
    for row in frame.to_dict("records"):
        src = row["source_id"]
        if src is not None and not pd.isna(src) and str(src) != "":
            out[int(row["id"])] = (int(float(src)), str(row["pass"]))
    return out


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path


def read_csv(path: str | Path) -> pd.DataFrame:
    """Read a database CSV back; JSON and name columns stay text (a node called ``NA`` stays ``NA``)."""
    path = Path(path)
    if not path.is_file():
        raise OperationDatabaseError(f"{path}: no such operation database")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise OperationDatabaseError(f"{path}: not an operation database CSV: {err}") from err
    missing = [c for c in _REQUIRED if c not in frame.columns]
    if missing:
        raise OperationDatabaseError(f"{path}: missing column(s) {', '.join(missing)}")
    for column in ("id", "count"):
        frame[column] = _to_numbers(frame[column], path, column, integer=True)
    for column in ("flops", "bytes"):
        if column in frame.columns:
            frame[column] = _to_numbers(frame[column], path, column, integer=False)
    if "source_id" in frame.columns:
        frame["source_id"] = _to_numbers(frame["source_id"], path, "source_id", integer=True)
    return frame


def _to_numbers(column: pd.Series, path: Path, name: str, integer: bool) -> pd.Series:
    values = pd.to_numeric(column.replace("", None), errors="coerce")
    bad = column[(values.isna()) & (column != "")]
    if len(bad):
        raise OperationDatabaseError(
            f"{path}: row {int(bad.index[0]) + 1}, column {name}: not a number: {bad.iloc[0]!r}"
        )
    return values.astype("Int64") if integer else values.astype("float64")


def read_operations(path: str | Path) -> list[Operation]:
    path = Path(path)
    return frame_operations(read_csv(path), source=str(path))


def summary_table(frame: pd.DataFrame) -> str:
    """The database as aligned text: id, op_type, count, pass and ``descr=value`` parameters."""
    if frame.empty:
        return "(no operations)"
    passes = frame["pass"] if "pass" in frame.columns else ["forward"] * len(frame)
    header = ["id", "op_type", "count", "pass", "parameters"]
    rows = [
        [str(i), str(t), str(c), str(p), format_params([(d, v) for d, v in json.loads(params)])]
        for i, t, c, p, params in zip(
            frame["id"], frame["op_type"], frame["count"], passes, frame["params"].astype(str), strict=True
        )
    ]
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header) - 1)]
    lines = ["  ".join([*(v.ljust(w) for v, w in zip(r[:-1], widths, strict=False)), r[-1]]) for r in [header, *rows]]
    return "\n".join(line.rstrip() for line in lines)
