"""The training-loop context manager: time every batch cheaply, profile a few chosen batches per operator.

Wrap each step of an ordinary training loop (the call forms are in :mod:`dlbench.training.api`)::

    from dlbench.instrument import op_performance_analysis

    for batch_idx, (inputs, targets) in enumerate(loader):
        with op_performance_analysis(batch_idx, inputs, model):
            ...  # the usual step

Batches ``warmup .. warmup + batches - 1`` run under ``torch.profiler`` (CPU, plus CUDA when the script
uses it). torch.profiler costs several microseconds per operator call and can double the time of a step
made of small operators, which is why only the chosen batches are profiled: every other batch costs an
integer comparison and two ``perf_counter`` calls, and no profiler object is created for it.

Files written to the profile directory:

- ``batch_<idx>_ops.csv``: one row per operator, input shapes, input dtypes and memory format in a profiled
  batch (calls, self and total CPU time, self and total device time, in microseconds);
- ``batch_<idx>_trace.json``: the Chrome/Perfetto trace of that batch;
- ``summary_ops.csv``: per operator and input shapes, mean, median, std, min and max over the profiled
  batches (written after the last profiled batch, or by :func:`finish` / at exit for a partial set);
- ``batches.csv``: the wall time of every batch, profiled or not, and the minor page faults it took (a
  profiled batch is preceded by a pad of the heap, see :mod:`dlbench.core.allocator`, so it should take none).

Settings come from the arguments, else from the environment (so a runner can configure an unchanged
script): ``DLBENCH_PROFILE_WARMUP``, ``DLBENCH_PROFILE_BATCHES``, ``DLBENCH_PROFILE_DIR`` and
``DLBENCH_PROFILE_SYNC`` (1: synchronize CUDA around every batch, so unprofiled wall times include the
device work; off by default because a synchronization stalls the launch queue).

When the script runs under dlbench (``MLFLOW_RUN_ID`` set by the runner), the step times, throughput and
logged losses go to that MLflow run and every profiled batch becomes a nested child run with its
operator table and trace; see :func:`finish`. Without ``MLFLOW_RUN_ID`` nothing touches MLflow.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.core.allocator import minor_faults, pad_heap_for_profiling
from dlbench.training.facts import RunFacts, effective_params, write_facts
from dlbench.training.optimizers import FOLDED_COLUMNS, OptimizerRecorder, batch_folded_file, folded_rows
from dlbench.training.precision import PrecisionRecorder
from dlbench.training.profile import (
    BATCH_COLUMNS,
    BATCHES_FILE,
    PROFILE_COLUMNS,
    SUMMARY_FILE,
    ProfiledBatch,
    batch_ops_file,
    batch_trace_file,
    operator_table,
    summarize,
    summary_columns,
    write_csv,
)
from dlbench.training.tensor_stats import ENV_STATS

ENV_WARMUP = "DLBENCH_PROFILE_WARMUP"
ENV_BATCHES = "DLBENCH_PROFILE_BATCHES"
ENV_DIR = "DLBENCH_PROFILE_DIR"
ENV_SYNC = "DLBENCH_PROFILE_SYNC"
#: set by dlbench's training runner: a file where the number of finished steps is kept, for its progress bar
ENV_PROGRESS = "DLBENCH_PROGRESS_FILE"
PROGRESS_INTERVAL_S = 0.5

DEFAULT_WARMUP = 5
DEFAULT_BATCHES = 3
#: where a script run on its own (not by dlbench, which names a folder per run) writes its profile: under
#: ``.dlbench/``, dlbench's own folder, never loose in the folder it ran from
DEFAULT_DIR = ".dlbench/profile"


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


@dataclass
class _Timeline:
    """Per-batch wall times and logged values, buffered in memory until :meth:`ProfileSession.finish`."""

    steps: list[int] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    profiled: list[bool] = field(default_factory=list)
    faults: list[int] = field(default_factory=list)
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

    __slots__ = ("_session", "batch_idx", "_profiler", "_stats", "_start", "_faults", "_values", "wall_s", "faults")

    def __init__(self, session: ProfileSession, batch_idx: int) -> None:
        self._session = session
        self.batch_idx = batch_idx
        self._profiler: Any = None
        self._stats: Any = None
        self._values: dict[str, float] | None = None
        self.wall_s = math.nan
        self.faults = 0

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
        elif session.wants_stats(self.batch_idx):
            self._stats = session._start_stats()
        self._faults = minor_faults()
        self._start = time.perf_counter()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        session = self._session
        profiler = self._profiler
        if profiler is not None or session.settings.sync_every_batch:
            _cuda_synchronize()
        self.wall_s = time.perf_counter() - self._start
        self.faults = minor_faults() - self._faults
        if self._stats is not None:
            self._stats.wall_s = self.wall_s
            self._stats.__exit__(exc_type, exc, tb)
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
        # the last warm-up batch records its tensors for an evaluation's outlier causes (DLBENCH_TENSOR_STATS=1)
        self._stats_batch = self._first - 1 if os.environ.get(ENV_STATS) == "1" and self._first > 0 else None
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
        #: what the script runs with (see dlbench.training.facts) and whether its network was exported
        self.facts = RunFacts()
        self.exported = False
        #: which optimizer stepped, with what options and shapes; clip_grad_norm_ in a range of its own
        self.optimizers = OptimizerRecorder()
        self.optimizers.install()
        #: the autocast regions it entered and the GradScalers that scaled its loss
        self.precision = PrecisionRecorder()
        self.precision.install()

    def batch(self, batch_idx: int) -> BatchScope:
        return BatchScope(self, batch_idx)

    def wants(self, batch_idx: int) -> bool:
        """True for a batch that should be profiled: inside the window and not profiled yet."""
        return self._first <= batch_idx < self._end and batch_idx not in self._profiled_ids

    def wants_stats(self, batch_idx: int) -> bool:
        """True once, for the last warm-up batch, when the tensors' statistics are asked for."""
        if self._stats_batch is None or batch_idx != self._stats_batch:
            return False
        self._stats_batch = None
        return True

    def _start_stats(self) -> Any:
        from dlbench.training.tensor_stats import TensorStats

        return TensorStats(self.settings.out_dir).__enter__()

    def _start_profiler(self) -> Any:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if _cuda_in_use():
            activities.append(ProfilerActivity.CUDA)
        pad_heap_for_profiling()  # the profiler's records would push the step's tensors onto fresh pages
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
        timeline.faults.append(scope.faults)
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
        from dlbench.training.trace import kineto_events

        events = kineto_events(profiler)
        rows = operator_table(events, batch_idx)
        ops_path = out_dir / batch_ops_file(batch_idx)
        write_csv(ops_path, PROFILE_COLUMNS, rows)
        # what ran inside the optimizer's step, zero_grad, the clipping and a composite loss: one operation each
        write_csv(out_dir / batch_folded_file(batch_idx), FOLDED_COLUMNS, folded_rows(events, batch_idx))
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
        write_csv(path, summary_columns(), summarize(self.profiled))
        self.summary_path = path
        return path

    def write_batches(self) -> Path:
        """Write ``batches.csv``: step, batch index, wall time, whether it was profiled, its minor page faults."""
        t = self._timeline
        path = self.settings.out_dir / BATCHES_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = zip(t.steps, t.batches, t.wall_s, (int(p) for p in t.profiled), t.faults, strict=True)
        write_csv(path, BATCH_COLUMNS, rows)
        return path

    def step_times(self, profiled: bool | None = None) -> list[float]:
        """Wall times in seconds of all batches, or only the profiled (True) / unprofiled (False) ones."""
        t = self._timeline
        return [w for w, p in zip(t.wall_s, t.profiled, strict=True) if profiled is None or p == profiled]

    def logged_values(self) -> Mapping[str, list[tuple[int, float]]]:
        """Values logged per step (``step_time_s`` included), as (step, value) pairs by name."""
        t = self._timeline
        return {"step_time_s": list(zip(t.steps, t.wall_s, strict=True)), **t.values}

    def metrics(self) -> dict[str, float]:
        """Run-level figures: median step time and throughput of the unprofiled batches after the warm-up,
        the median profiled step, the last loss."""
        t = self._timeline
        steady = [w for s, w, p in zip(t.steps, t.wall_s, t.profiled, strict=True) if not p and s >= self._first]
        steady = steady or [w for w, p in zip(t.wall_s, t.profiled, strict=True) if not p]
        metrics: dict[str, float] = {"steps": float(len(t.steps)), "profiled_batches": float(len(self.profiled))}
        if steady:
            metrics["step_time_s_median"] = statistics.median(steady)
            metrics["step_time_s_mean"] = statistics.fmean(steady)
        profiled = self.step_times(profiled=True)
        if profiled:
            metrics["profiled_step_time_s_median"] = statistics.median(profiled)
        if t.values.get("samples_per_s"):
            metrics["samples_per_s_median"] = statistics.median(v for _, v in t.values["samples_per_s"])
        if t.values.get("loss"):
            metrics["loss_first"] = t.values["loss"][0][1]
            metrics["loss_final"] = t.values["loss"][-1][1]
        return metrics

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
        facts = {**self.facts.as_dict(len(self._timeline.steps)), **self.optimizers.facts()}
        precision = self.precision.facts()
        facts.update(autocast=precision["autocast"], grad_scaler=precision["grad_scaler"])
        facts["observed"].update(precision["observed"])
        self.optimizers.uninstall()
        self.precision.uninstall()
        write_facts(self.settings.out_dir, facts)
        if not self._published and os.environ.get("MLFLOW_RUN_ID"):
            self._published = True
            from dlbench.training.publish import publish_to_mlflow

            publish_to_mlflow(
                self.logged_values(), self.metrics(), self.settings.out_dir, self.profiled, effective_params(facts)
            )
