"""Profiler events to operator tables: the per-batch table read straight from kineto's raw events, the
summary over profiled batches, and the CSV files they are written to and read back from."""

from __future__ import annotations

import csv
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.training.trace import DEVICE, OPERATOR, RUNTIME, TraceEvent, input_dtypes, input_formats, memory_format

#: Columns of a per-batch operator table; times in microseconds.
TIME_COLUMNS = ("self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us", "host_us")


#: ``input_types``: each input's dtype (JSON, ``""`` for a non-tensor); ``memory_format``: ``channels_last`` when
#: an input of rank 4 or 5 was laid out so, else ``contiguous``; ``input_formats``: each input's (JSON, ``""`` for
#: no image tensor), which tells a layout conversion (:mod:`dlbench.training.trace`); ``within``: for a copy
#: (:data:`COPIES`), the operator whose kernel made it (``""`` at the top: the script's or autograd's own). A
#: profile written before they were recorded reads with them empty.
PROFILE_COLUMNS = (
    "batch", "name", "input_shapes", "calls", *TIME_COLUMNS, "kernels", "input_types", "memory_format",
    "input_formats", "within",
)  # fmt: skip

#: What tells two profiled calls apart: the operator, its inputs' shapes, dtypes and memory formats, and for a
#: copy the operator it ran within.
PROFILE_KEY = ("name", "input_shapes", "input_types", "memory_format", "input_formats", "within")

#: How the key's columns after the shapes read where a profile did not record them.
RAN_AS_EMPTY = {"input_types": "[]", "memory_format": "", "input_formats": "[]", "within": ""}

#: The copies and the conversions that make them: ``within`` names the innermost enclosing operator that is not
#: one of these (``convolution_backward``'s conversion of its weight gradient into the weight's layout is part
#: of that operator, and of its benchmark).
COPIES = frozenset({"aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone"})


BATCH_COLUMNS = ("step", "batch", "wall_s", "profiled", "minor_faults")


SUMMARY_STATS = ("mean", "median", "std", "min", "max")


SUMMARY_FILE = "summary_ops.csv"


BATCHES_FILE = "batches.csv"


TEXT_COLUMNS = ("name", "input_shapes", "input_types", "memory_format", "input_formats", "within")


def batch_ops_file(batch_idx: int) -> str:
    return f"batch_{batch_idx}_ops.csv"


def batch_trace_file(batch_idx: int) -> str:
    return f"batch_{batch_idx}_trace.json"


#: Rows of device activities no operator launched start with this (listed apart, never matched to one).
UNLAUNCHED = "[device, no launching operator] "


class _Node:
    """A host event of a profiled batch with what nesting and kernel attribution add to it (in ns)."""

    __slots__ = ("event", "thread", "child_cpu", "own_device", "device_total", "host", "kernels", "parent")

    def __init__(self, event: TraceEvent) -> None:
        self.event = event
        self.thread = event.thread
        self.child_cpu = 0
        self.own_device = 0
        self.device_total = 0
        self.host = 0
        self.kernels = 0
        self.parent: _Node | None = None


def operator_rows(profiler: Any, batch_idx: int) -> list[tuple[Any, ...]]:
    """The per-operator table of a stopped ``torch.profiler.profile``, in :data:`PROFILE_COLUMNS` order
    (:func:`operator_table` of its raw events)."""
    from dlbench.training.trace import kineto_events

    return operator_table(kineto_events(profiler), batch_idx)


def operator_table(events: list[TraceEvent], batch_idx: int) -> list[tuple[Any, ...]]:
    """The per-operator table of one profiled batch's events (:mod:`dlbench.training.trace`).

    Same figures as ``key_averages(group_by_input_shape=True)`` for the host (self time: the event's
    duration less that of the events nested in it on its thread), with each device activity (kernel,
    memcpy, memset) counted exactly once: for the operator that launched it, the innermost one, which
    is the operator whose self time holds the launch (``aten::addmm`` for cuBLAS's GEMM and epilogue
    kernels, ``aten::cudnn_convolution`` for cuDNN's; the match table lists every level of a family, so
    the innermost level is matched to the same operation as its wrappers). ``host_us``: the operator's
    host time, its self time plus the runtime calls (launches) it made, counted for it and not for the
    call; ``kernels``: the device activities it launched. Device activities without a launching operator
    get rows of their own, named with :data:`UNLAUNCHED` first.
    """
    nodes = [_Node(e) for e in events if e.kind != DEVICE]
    frontend = {n.event.correlation: n for n in nodes if n.event.kind == OPERATOR}
    unlaunched: dict[str, list[int]] = {}
    for d in events:
        if d.kind != DEVICE:
            continue
        owner = frontend.get(d.op)
        if owner is None:
            acc = unlaunched.setdefault(d.name, [0, 0])
            acc[0] += 1
            acc[1] += d.duration
        else:
            owner.own_device += d.duration
            owner.kernels += 1
    for n in nodes:  # runtime calls (cudaLaunchKernel) belong to the thread of the operator that made them
        if n.event.kind == RUNTIME and n.event.op in frontend:
            n.thread = frontend[n.event.op].thread
    nodes.sort(key=lambda n: (n.thread, n.event.start, -n.event.end))
    stack: list[_Node] = []
    for n in nodes:
        if stack and stack[-1].thread != n.thread:
            stack = []
        while stack and (n.event.start >= stack[-1].event.end or n.event.end > stack[-1].event.end):
            stack.pop()
        if stack:
            n.parent = stack[-1]
            n.parent.child_cpu += n.event.duration
        stack.append(n)
    for n in nodes:
        n.device_total += n.own_device
        n.host += n.event.duration - n.child_cpu
    for n in reversed(nodes):  # children come after their parents
        if n.parent is not None:
            n.parent.device_total += n.device_total
            if n.event.kind == RUNTIME and n.parent.event.kind == OPERATOR:
                n.parent.host += n.host
                n.host = 0
    table: dict[tuple[str, ...], list[float]] = {}
    for n in nodes:
        e = n.event
        acc = table.setdefault(_key(n), [0] * 7)
        acc[0] += 1
        acc[1] += e.duration - n.child_cpu
        acc[2] += e.duration
        acc[3] += n.own_device
        acc[4] += n.device_total
        acc[5] += n.host
        acc[6] += n.kernels
    for name, (count, duration) in unlaunched.items():
        table[(UNLAUNCHED + name, "[]", "[]", "", "[]", "")] = [count, 0, 0, duration, duration, 0, count]
    return [
        (batch_idx, name, shapes, calls, *(round(ns / 1e3, 3) for ns in times), kernels, *ran_as)
        for (name, shapes, *ran_as), (calls, *times, kernels) in table.items()
    ]


def _key(node: _Node) -> tuple[str, str, str, str, str, str]:
    """A call's :data:`PROFILE_KEY` (a runtime call has no inputs: empty types and formats)."""
    event = node.event
    shapes = json.dumps(_plain(event.shapes), separators=(",", ":"))
    if event.kind != OPERATOR:
        return event.name, shapes, "[]", "", "[]", ""
    types = json.dumps(input_dtypes(event.types), separators=(",", ":"))
    formats = json.dumps(input_formats(event.shapes, event.strides), separators=(",", ":"))
    return event.name, shapes, types, memory_format(event.shapes, event.strides), formats, _within(node)


def _within(node: _Node) -> str:
    """For a copy (:data:`COPIES`), the innermost operator around it that is not one; ``""`` otherwise."""
    if node.event.name not in COPIES:
        return ""
    parent = node.parent
    while parent is not None and parent.event.kind == OPERATOR and parent.event.name in COPIES:
        parent = parent.parent
    return parent.event.name if parent is not None and parent.event.kind == OPERATOR else ""


def _plain(shapes: Any) -> Any:
    return [_plain(s) for s in shapes] if isinstance(shapes, (list, tuple)) else shapes


def summary_columns() -> tuple[str, ...]:
    columns = [*PROFILE_KEY, "batches", "calls"]
    for time_column in TIME_COLUMNS:
        columns.extend(f"{time_column}_{stat}" for stat in SUMMARY_STATS)
    return tuple(columns)


def summarize(profiled: list[ProfiledBatch]) -> list[tuple[Any, ...]]:
    """Per (operator, input shapes, dtypes, memory format): how many batches had it, median calls, and statistics
    of each time column over those batches (std is 0 with a single batch)."""
    by_key: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for batch in profiled:
        for row in batch.rows:
            by_key.setdefault((row[1], row[2], *row[-4:]), []).append(row)
    out = []
    for key, rows in by_key.items():
        record: list[Any] = [*key, len(rows), statistics.median(r[3] for r in rows)]
        for offset in range(len(TIME_COLUMNS)):
            values = [float(r[4 + offset]) for r in rows]
            record.extend(
                [
                    statistics.fmean(values),
                    statistics.median(values),
                    statistics.stdev(values) if len(values) > 1 else 0.0,
                    min(values),
                    max(values),
                ]
            )
        out.append(tuple(record))
    mean_self = summary_columns().index("self_cpu_us_mean")
    out.sort(key=lambda r: -r[mean_self])  # the costly operators first
    return out


def write_csv(path: Path, columns: tuple[str, ...], rows: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)


def read_profile(path: str | os.PathLike[str]) -> Any:
    """Read a profile CSV written here (per batch, summary or ``batches.csv``) into a DataFrame.

    Every column other than :data:`TEXT_COLUMNS` must hold numbers, and ``input_shapes`` and ``input_types``
    must be JSON lists; a bad file raises ``ValueError`` naming the file and line. A profile without dtypes
    and memory formats (recorded by an older dlbench) reads with them empty.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such profile file")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path}:1: empty profile file, expected a header") from None
        except csv.Error as err:
            raise ValueError(f"{path}:1: {err}") from None
        header = [h.strip() for h in header]
        if "name" not in header and "wall_s" not in header:
            raise ValueError(f"{path}:1: header {header!r} has neither a 'name' nor a 'wall_s' column")
        records: list[list[Any]] = []
        try:
            for row in reader:
                line = reader.line_num
                if not row or not any(f.strip() for f in row):
                    continue
                if len(row) != len(header):
                    raise ValueError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
                record: list[Any] = []
                for column, text in zip(header, row, strict=True):
                    if column in TEXT_COLUMNS:
                        if column in ("input_shapes", "input_types"):
                            try:
                                shapes = json.loads(text or "[]")
                            except json.JSONDecodeError:
                                shapes = None
                            if not isinstance(shapes, list):
                                raise ValueError(f"{path}:{line}: {column} {text[:80]!r} is not a JSON list")
                        record.append(text)
                        continue
                    try:
                        value = float(text)
                    except ValueError:
                        raise ValueError(f"{path}:{line}: {column}={text[:80]!r} is not a number") from None
                    record.append(
                        int(value)
                        if column in ("batch", "step", "calls", "batches", "profiled", "kernels") and value.is_integer()
                        else value
                    )
                records.append(record)
        except csv.Error as err:
            raise ValueError(f"{path}:{reader.line_num}: {err}") from None
    frame = pd.DataFrame.from_records(records, columns=header)
    if "input_shapes" in frame.columns:  # a profile recorded before dtypes and memory formats were
        frame = with_profile_key(frame)
    return frame


def with_profile_key(frame: Any) -> Any:
    """``frame`` with every :data:`PROFILE_KEY` column, a missing one filled as an older profile means it (no
    dtypes recorded: ``[]``; no memory format: ``""``)."""
    for column, empty in RAN_AS_EMPTY.items():
        if column not in frame.columns:
            frame = frame.assign(**{column: empty})
        else:
            frame[column] = frame[column].fillna(empty).astype(str)
    return frame


@dataclass(frozen=True)
class ProfiledBatch:
    """The operator table of one profiled batch (rows in :data:`PROFILE_COLUMNS` order)."""

    batch_idx: int
    wall_s: float
    rows: tuple[tuple[Any, ...], ...]
    ops_path: Path
    trace_path: Path | None
