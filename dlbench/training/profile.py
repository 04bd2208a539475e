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

#: Columns of a per-batch operator table; times in microseconds.
TIME_COLUMNS = ("self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us")


PROFILE_COLUMNS = ("batch", "name", "input_shapes", "calls", *TIME_COLUMNS)


BATCH_COLUMNS = ("step", "batch", "wall_s", "profiled")


SUMMARY_STATS = ("mean", "median", "std", "min", "max")


SUMMARY_FILE = "summary_ops.csv"


BATCHES_FILE = "batches.csv"


TEXT_COLUMNS = ("name", "input_shapes")


def batch_ops_file(batch_idx: int) -> str:
    return f"batch_{batch_idx}_ops.csv"


def batch_trace_file(batch_idx: int) -> str:
    return f"batch_{batch_idx}_trace.json"


#: Utility events torch.profiler leaves out of its tables too.
_FILTERED_EVENTS = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


class _Event:
    """One CPU event of a profiled batch, with what nesting and kernel attribution add to it (in ns)."""

    __slots__ = ("name", "shapes", "start", "end", "thread", "correlation", "linked", "own_device", "child_cpu",
                 "device_total", "parent")  # fmt: skip

    def __init__(self, event: Any, name: str) -> None:
        self.name = name
        self.shapes = event.shapes()
        self.start = event.start_ns()
        self.end = self.start + event.duration_ns()
        self.thread = event.start_thread_id()
        self.correlation = event.correlation_id()
        self.linked = event.linked_correlation_id()
        self.own_device = 0
        self.child_cpu = 0
        self.device_total = 0
        self.parent: _Event | None = None


def operator_rows(profiler: Any, batch_idx: int) -> list[tuple[Any, ...]]:
    """The per-operator table of a stopped ``torch.profiler.profile``, in :data:`PROFILE_COLUMNS` order.

    Same figures as ``profiler.key_averages(group_by_input_shape=True)`` (self time: the event's duration
    less that of the events nested in it on its thread; device kernels count for the operator that
    launched them), but read straight from the raw events: ``key_averages`` builds a Python object per
    event and takes ~0.2 s for one ResNet step, which would make profiling itself the overhead.
    """
    from torch.autograd import DeviceType

    events: list[_Event] = []
    kernels: list[tuple[str, int, int]] = []
    for raw in profiler.profiler.kineto_results.events():
        name = raw.name()
        if name in _FILTERED_EVENTS or raw.is_hidden_event():
            continue
        if raw.device_type() != DeviceType.CPU:
            kernels.append((name, raw.linked_correlation_id(), raw.duration_ns()))
        elif not raw.is_async() and raw.start_thread_id() == raw.end_thread_id():
            # (nesting is undefined across threads; torch leaves async events out of self times too)
            events.append(_Event(raw, "ProfilerStep*" if name.startswith("ProfilerStep#") else name))
    frontend = {e.correlation: e for e in events if e.linked == 0}
    for _, linked, duration in kernels:
        if linked in frontend:
            frontend[linked].own_device += duration
    for e in events:  # runtime calls (cudaLaunchKernel) belong to the thread of the op that made them
        if e.linked > 0 and e.linked in frontend:
            e.thread = frontend[e.linked].thread
    events.sort(key=lambda e: (e.thread, e.start, -e.end))
    stack: list[_Event] = []
    for e in events:
        if stack and stack[-1].thread != e.thread:
            stack = []
        while stack and (e.start >= stack[-1].end or e.end > stack[-1].end):
            stack.pop()
        if stack:
            e.parent = stack[-1]
            e.parent.child_cpu += e.end - e.start
        stack.append(e)
    for e in events:
        e.device_total += e.own_device
    for e in reversed(events):  # children come after their parents
        if e.parent is not None:
            e.parent.device_total += e.device_total
    table: dict[tuple[str, str], list[float]] = {}
    for e in events:
        acc = table.setdefault((e.name, json.dumps(e.shapes, separators=(",", ":"))), [0, 0, 0, 0, 0])
        duration = e.end - e.start
        acc[0] += 1
        acc[1] += duration - e.child_cpu
        acc[2] += duration
        acc[3] += e.own_device
        acc[4] += e.device_total
    for name, _, duration in kernels:
        acc = table.setdefault((name, "[]"), [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[3] += duration
        acc[4] += duration
    return [
        (batch_idx, name, shapes, calls, *(round(ns / 1e3, 3) for ns in times))
        for (name, shapes), (calls, *times) in table.items()
    ]


def summary_columns() -> tuple[str, ...]:
    columns = ["name", "input_shapes", "batches", "calls"]
    for time_column in TIME_COLUMNS:
        columns.extend(f"{time_column}_{stat}" for stat in SUMMARY_STATS)
    return tuple(columns)


def summarize(profiled: list[ProfiledBatch]) -> list[tuple[Any, ...]]:
    """Per (operator, input shapes): how many batches had it, median calls, and statistics of each time
    column over those batches (std is 0 with a single batch)."""
    by_key: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for batch in profiled:
        for row in batch.rows:
            by_key.setdefault((row[1], row[2]), []).append(row)
    out = []
    for (name, shapes), rows in by_key.items():
        record: list[Any] = [name, shapes, len(rows), statistics.median(r[3] for r in rows)]
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
    out.sort(key=lambda r: -r[5])  # by mean self CPU time, the costly operators first
    return out


def write_csv(path: Path, columns: tuple[str, ...], rows: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)


def read_profile(path: str | os.PathLike[str]) -> Any:
    """Read a profile CSV written here (per batch, summary or ``batches.csv``) into a DataFrame.

    Every column other than ``name`` and ``input_shapes`` must hold numbers, and ``input_shapes`` must be
    a JSON list; a bad file raises ``ValueError`` naming the file and line.
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
                        if column == "input_shapes":
                            try:
                                shapes = json.loads(text)
                            except json.JSONDecodeError:
                                shapes = None
                            if not isinstance(shapes, list):
                                raise ValueError(
                                    f"{path}:{line}: input_shapes {text[:80]!r} is not a JSON list of shapes"
                                )
                        record.append(text)
                        continue
                    try:
                        value = float(text)
                    except ValueError:
                        raise ValueError(f"{path}:{line}: {column}={text[:80]!r} is not a number") from None
                    record.append(
                        int(value)
                        if column in ("batch", "step", "calls", "batches", "profiled") and value.is_integer()
                        else value
                    )
                records.append(record)
        except csv.Error as err:
            raise ValueError(f"{path}:{reader.line_num}: {err}") from None
    return pd.DataFrame.from_records(records, columns=header)


@dataclass(frozen=True)
class ProfiledBatch:
    """The operator table of one profiled batch (rows in :data:`PROFILE_COLUMNS` order)."""

    batch_idx: int
    wall_s: float
    rows: tuple[tuple[Any, ...], ...]
    ops_path: Path
    trace_path: Path | None
