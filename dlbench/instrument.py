"""The training-loop context manager: time every batch cheaply, profile a few chosen batches per operator.

Wrap each step of an ordinary training loop::

    from dlbench.instrument import op_performance_analysis

    for batch_idx, (inputs, targets) in enumerate(loader):
        with op_performance_analysis(batch_idx):
            ...  # the usual step

Batches ``warmup .. warmup + batches - 1`` run under ``torch.profiler`` (CPU, plus CUDA when the script
uses it). torch.profiler costs several microseconds per operator call and can double the time of a step
made of small operators, which is why only the chosen batches are profiled: every other batch costs an
integer comparison and two ``perf_counter`` calls, and no profiler object is created for it.

Files written to the profile directory:

- ``batch_<idx>_ops.csv``: one row per operator and input shapes in a profiled batch (calls, self and
  total CPU time, self and total device time, in microseconds);
- ``batch_<idx>_trace.json``: the Chrome/Perfetto trace of that batch;
- ``summary_ops.csv``: per operator and input shapes, mean, median, std, min and max over the profiled
  batches (written after the last profiled batch, or by :func:`finish` / at exit for a partial set);
- ``batches.csv``: the wall time of every batch, profiled or not.

Settings come from the arguments, else from the environment (so a runner can configure an unchanged
script): ``DLBENCH_PROFILE_WARMUP``, ``DLBENCH_PROFILE_BATCHES``, ``DLBENCH_PROFILE_DIR`` and
``DLBENCH_PROFILE_SYNC`` (1: synchronize CUDA around every batch, so unprofiled wall times include the
device work; off by default because a synchronization stalls the launch queue).

When the script runs under dlbench (``MLFLOW_RUN_ID`` set by the runner), the step times, throughput and
logged losses go to that MLflow run and every profiled batch becomes a nested child run with its
operator table and trace; see :func:`finish`. Without ``MLFLOW_RUN_ID`` nothing touches MLflow.
"""

from __future__ import annotations

import atexit
import csv
import json
import math
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_WARMUP = "DLBENCH_PROFILE_WARMUP"
ENV_BATCHES = "DLBENCH_PROFILE_BATCHES"
ENV_DIR = "DLBENCH_PROFILE_DIR"
ENV_SYNC = "DLBENCH_PROFILE_SYNC"
#: set by dlbench's training runner: a file where the number of finished steps is kept, for its progress bar
ENV_PROGRESS = "DLBENCH_PROGRESS_FILE"
PROGRESS_INTERVAL_S = 0.5

DEFAULT_WARMUP = 5
DEFAULT_BATCHES = 3
DEFAULT_DIR = "dlbench_profile"

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


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


@dataclass(frozen=True)
class ProfileSettings:
    """Which batches to profile and where the files go."""

    warmup: int = DEFAULT_WARMUP
    batches: int = DEFAULT_BATCHES
    out_dir: Path = Path(DEFAULT_DIR)
    sync_every_batch: bool = False

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"profile warmup ({ENV_WARMUP}) must be >= 0, got {self.warmup}")
        if self.batches < 0:
            raise ValueError(f"profiled batches ({ENV_BATCHES}) must be >= 0, got {self.batches}")

    @classmethod
    def resolve(
        cls,
        warmup: int | None = None,
        batches: int | None = None,
        out_dir: str | os.PathLike[str] | None = None,
        sync_every_batch: bool | None = None,
    ) -> ProfileSettings:
        """Arguments win; unset ones come from ``DLBENCH_PROFILE_*``, then from the defaults."""
        return cls(
            warmup=_env_int(ENV_WARMUP, DEFAULT_WARMUP) if warmup is None else warmup,
            batches=_env_int(ENV_BATCHES, DEFAULT_BATCHES) if batches is None else batches,
            out_dir=Path(os.environ.get(ENV_DIR) or DEFAULT_DIR) if out_dir is None else Path(out_dir),
            sync_every_batch=(
                os.environ.get(ENV_SYNC, "").strip() in ("1", "true", "yes")
                if sync_every_batch is None
                else sync_every_batch
            ),
        )


@dataclass(frozen=True)
class ProfiledBatch:
    """The operator table of one profiled batch (rows in :data:`PROFILE_COLUMNS` order)."""

    batch_idx: int
    wall_s: float
    rows: tuple[tuple[Any, ...], ...]
    ops_path: Path
    trace_path: Path | None


@dataclass
class _Timeline:
    """Per-batch wall times and logged values, buffered in memory until :meth:`ProfileSession.finish`."""

    steps: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    profiled: list[bool] = field(default_factory=list)
    values: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def _cuda_in_use() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _cuda_synchronize() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class BatchScope:
    """One wrapped batch; :meth:`log` attaches values (loss, samples) to it."""

    __slots__ = ("_session", "batch_idx", "_profiler", "_start", "_values", "wall_s")

    def __init__(self, session: ProfileSession, batch_idx: int) -> None:
        self._session = session
        self.batch_idx = batch_idx
        self._profiler: Any = None
        self._values: dict[str, float] | None = None
        self.wall_s = math.nan

    @property
    def profiled(self) -> bool:
        return self._profiler is not None

    def log(self, **values: float) -> None:
        """Record values of this batch, e.g. ``loss=loss.item(), samples=len(inputs)``.

        ``samples`` also yields ``samples_per_s`` once the batch's wall time is known.
        """
        if self._values is None:
            self._values = {}
        self._values.update({k: float(v) for k, v in values.items()})

    def __enter__(self) -> BatchScope:
        session = self._session
        if session.wants(self.batch_idx):
            self._profiler = session._start_profiler()
        self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        session = self._session
        profiler = self._profiler
        if profiler is not None or session.settings.sync_every_batch:
            _cuda_synchronize()
        self.wall_s = time.perf_counter() - self._start
        if profiler is not None:
            profiler.__exit__(None, None, None)
            if exc_type is None:
                session._record_profile(self.batch_idx, self.wall_s, profiler)
        session._record_batch(self)
        return False


class ProfileSession:
    """The state of one instrumented training loop: which batches were profiled, all wall times."""

    def __init__(self, settings: ProfileSettings | None = None) -> None:
        self.settings = settings or ProfileSettings.resolve()
        self._first = self.settings.warmup
        self._end = self.settings.warmup + self.settings.batches
        self._profiled_ids: set[int] = set()
        self.profiled: list[ProfiledBatch] = []
        self.profilers_created = 0
        self.summary_path: Path | None = None
        self._timeline = _Timeline()
        self._step = 0
        self._finished = False
        self._published = False
        progress = os.environ.get(ENV_PROGRESS, "")
        self._progress_path = Path(progress) if progress else None
        self._next_progress = 0.0

    def batch(self, batch_idx: int) -> BatchScope:
        return BatchScope(self, batch_idx)

    def wants(self, batch_idx: int) -> bool:
        """True for a batch that should be profiled: inside the window and not profiled yet."""
        return self._first <= batch_idx < self._end and batch_idx not in self._profiled_ids

    def _start_profiler(self) -> Any:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if _cuda_in_use():
            activities.append(ProfilerActivity.CUDA)
        profiler = profile(activities=activities, record_shapes=True)
        self.profilers_created += 1
        profiler.__enter__()
        return profiler

    def _record_batch(self, scope: BatchScope) -> None:
        timeline = self._timeline
        step = self._step
        self._step += 1
        if self._progress_path is not None and time.perf_counter() >= self._next_progress:
            self._write_progress()
        timeline.steps.append(step)
        timeline.batches.append(scope.batch_idx)
        timeline.wall_s.append(scope.wall_s)
        timeline.profiled.append(scope.profiled)
        if scope._values:
            for name, value in scope._values.items():
                timeline.values.setdefault(name, []).append((step, value))
            samples = scope._values.get("samples")
            if samples and scope.wall_s > 0:
                timeline.values.setdefault("samples_per_s", []).append((step, samples / scope.wall_s))

    def _write_progress(self) -> None:
        """At most every PROGRESS_INTERVAL_S: the finished step count, replaced atomically for the reader."""
        assert self._progress_path is not None
        self._next_progress = time.perf_counter() + PROGRESS_INTERVAL_S
        try:
            partial = self._progress_path.with_suffix(".tmp")
            partial.write_text(str(self._step), encoding="utf-8")
            os.replace(partial, self._progress_path)
        except OSError:
            self._progress_path = None  # progress is a courtesy; never fail training for it

    def _record_profile(self, batch_idx: int, wall_s: float, profiler: Any) -> None:
        out_dir = self.settings.out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        rows = operator_rows(profiler, batch_idx)
        ops_path = out_dir / batch_ops_file(batch_idx)
        _write_csv(ops_path, PROFILE_COLUMNS, rows)
        trace_path: Path | None = out_dir / batch_trace_file(batch_idx)
        try:
            profiler.export_chrome_trace(str(trace_path))
        except (RuntimeError, OSError):  # a trace is a convenience; the operator table is the result
            trace_path = None
        self._profiled_ids.add(batch_idx)
        self.profiled.append(ProfiledBatch(batch_idx, wall_s, tuple(rows), ops_path, trace_path))
        if len(self.profiled) >= self.settings.batches:
            self.write_summary()

    def write_summary(self) -> Path | None:
        """Write ``summary_ops.csv`` over the batches profiled so far (None if there are none)."""
        if not self.profiled:
            return None
        path = self.settings.out_dir / SUMMARY_FILE
        _write_csv(path, summary_columns(), summarize(self.profiled))
        self.summary_path = path
        return path

    def write_batches(self) -> Path:
        """Write ``batches.csv``: step, batch index, wall time and whether it was profiled."""
        t = self._timeline
        path = self.settings.out_dir / BATCHES_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = zip(t.steps, t.batches, t.wall_s, (int(p) for p in t.profiled), strict=True)
        _write_csv(path, BATCH_COLUMNS, rows)
        return path

    def step_times(self, profiled: bool | None = None) -> list[float]:
        """Wall times in seconds of all batches, or only the profiled (True) / unprofiled (False) ones."""
        t = self._timeline
        return [w for w, p in zip(t.wall_s, t.profiled, strict=True) if profiled is None or p == profiled]

    def logged_values(self) -> Mapping[str, list[tuple[int, float]]]:
        """Values logged per step (``step_time_s`` included), as (step, value) pairs by name."""
        t = self._timeline
        return {"step_time_s": list(zip(t.steps, t.wall_s, strict=True)), **t.values}

    def finish(self) -> None:
        """Write the partial summary and ``batches.csv``; publish to MLflow when run under dlbench.

        Safe to call more than once; runs at interpreter exit for the default session.
        """
        if self._finished:
            return
        self._finished = True
        if self.summary_path is None:
            self.write_summary()
        if self._timeline.steps:
            self.write_batches()
        if not self._published and os.environ.get("MLFLOW_RUN_ID"):
            self._published = True
            publish_to_mlflow(self)


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


def session_metrics(session: ProfileSession) -> dict[str, float]:
    """Run-level figures: median step time and throughput of the unprofiled batches after the warm-up,
    the median profiled step, the last loss."""
    t = session._timeline
    steady = [w for s, w, p in zip(t.steps, t.wall_s, t.profiled, strict=True) if not p and s >= session._first]
    steady = steady or [w for w, p in zip(t.wall_s, t.profiled, strict=True) if not p]
    metrics: dict[str, float] = {"steps": float(len(t.steps)), "profiled_batches": float(len(session.profiled))}
    if steady:
        metrics["step_time_s_median"] = statistics.median(steady)
        metrics["step_time_s_mean"] = statistics.fmean(steady)
    profiled = session.step_times(profiled=True)
    if profiled:
        metrics["profiled_step_time_s_median"] = statistics.median(profiled)
    if t.values.get("samples_per_s"):
        metrics["samples_per_s_median"] = statistics.median(v for _, v in t.values["samples_per_s"])
    if t.values.get("loss"):
        metrics["loss_first"] = t.values["loss"][0][1]
        metrics["loss_final"] = t.values["loss"][-1][1]
    return metrics


def operator_metrics(batch: ProfiledBatch) -> dict[str, float]:
    """Per operator name (all input shapes together): self CPU and self device milliseconds."""
    cpu: dict[str, float] = {}
    device: dict[str, float] = {}
    for row in batch.rows:
        cpu[row[1]] = cpu.get(row[1], 0.0) + row[4] / 1e3
        device[row[1]] = device.get(row[1], 0.0) + row[6] / 1e3
    metrics = {"batch_time_s": batch.wall_s, "self_cpu_ms_total": sum(cpu.values())}
    metrics.update({f"op_self_cpu_ms/{_metric_name(name)}": v for name, v in cpu.items()})
    if any(device.values()):
        metrics["self_device_ms_total"] = sum(device.values())
        metrics.update({f"op_self_device_ms/{_metric_name(name)}": v for name, v in device.items() if v})
    return metrics


def _metric_name(name: str) -> str:
    """MLflow metric names allow letters, digits and ``_-. :/``; anything else becomes ``_``."""
    cleaned = "".join(c if c.isalnum() or c in "_-. :/" else "_" for c in name)
    return cleaned.replace("/", "_")[:200]


def publish_to_mlflow(session: ProfileSession) -> None:
    """Log a finished session to the MLflow run named by ``MLFLOW_RUN_ID``: per-step series (step time,
    samples per second, logged values), run-level figures and the summary files on that run, and one
    nested child run per profiled batch with its operator metrics, table and trace. Writes
    ``published.json`` (the child run ids) to the profile directory when done, so a runner can check."""
    from dlbench.tracking import TrackedRun, attach_run_from_env

    parent = attach_run_from_env()
    if parent is None:
        return
    records = [
        (name, value, step)
        for name, pairs in session.logged_values().items()
        if name != "samples"  # the batch size; samples_per_s carries it
        for step, value in pairs
    ]
    parent.log_metric_records(records)
    parent.log_metrics(session_metrics(session))
    out_dir = session.settings.out_dir
    for name in (SUMMARY_FILE, BATCHES_FILE):
        if (out_dir / name).exists():
            parent.log_artifact(out_dir / name, "profile")
    parent_run = parent.client.get_run(parent.run_id)
    inherited = {k: v for k, v in parent_run.data.tags.items() if k.startswith("dlbench.") and k != "dlbench.run_id"}
    children = {}
    for batch in session.profiled:
        tags = {**inherited, "dlbench.kind": "profiled_batch", "dlbench.batch": str(batch.batch_idx)}
        with TrackedRun(
            parent.target,
            run_name=f"batch_{batch.batch_idx}",
            params={"batch": batch.batch_idx},
            tags=tags,
            parent_run_id=parent.run_id,
            experiment_id=parent_run.info.experiment_id,
        ) as child:
            child.log_metrics(operator_metrics(batch))
            child.log_artifact(batch.ops_path, "profile")
            if batch.trace_path is not None and batch.trace_path.exists():
                child.log_artifact(batch.trace_path, "profile")
            children[str(batch.batch_idx)] = child.run_id
    published = {"parent_run_id": parent.run_id, "child_run_ids": children}
    (out_dir / "published.json").write_text(json.dumps(published, indent=2) + "\n", encoding="utf-8")


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


def _write_csv(path: Path, columns: tuple[str, ...], rows: Any) -> None:
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


_DEFAULT_SESSION: ProfileSession | None = None


def default_session() -> ProfileSession | None:
    """The session behind :func:`op_performance_analysis` (None before its first call)."""
    return _DEFAULT_SESSION


def op_performance_analysis(
    batch_idx: int,
    warmup: int | None = None,
    batches: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    sync_every_batch: bool | None = None,
) -> BatchScope:
    """Time this batch, and profile it per operator if it is one of the chosen ones.

    The first call fixes the settings (arguments, else ``DLBENCH_PROFILE_*``); a later call with
    different explicit settings finishes that session and starts a new one.
    """
    global _DEFAULT_SESSION
    session = _DEFAULT_SESSION
    if session is None or not (warmup is None and batches is None and out_dir is None and sync_every_batch is None):
        settings = ProfileSettings.resolve(warmup, batches, out_dir, sync_every_batch)
        if session is None or session.settings != settings:
            if session is not None:
                session.finish()
            else:
                atexit.register(finish)
            session = _DEFAULT_SESSION = ProfileSession(settings)
    return BatchScope(session, batch_idx)


#: The original name, so scripts instrumented for it run unchanged.
op_performance_analysis_cpu = op_performance_analysis


def finish() -> None:
    """Finish the default session now (it also runs at interpreter exit)."""
    if _DEFAULT_SESSION is not None:
        _DEFAULT_SESSION.finish()


def reset() -> None:
    """Finish and forget the default session, so the next call starts afresh (for tests and loops)."""
    global _DEFAULT_SESSION
    finish()
    _DEFAULT_SESSION = None
