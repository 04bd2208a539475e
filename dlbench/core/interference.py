"""What else the machine does while a benchmark runs: load average, other processes' CPU time and runnable
tasks on this process's CPUs, CPU steal where ``/proc/stat`` reports it, and other processes on the GPU
through NVML where ``pynvml`` is installed. Sampled by a thread around the measurement, judged against
the threads the benchmark uses, and reported per run and per operation.

"Ours" is this process and every process below it (the benchmark executable and its children); the
sampler costs about 2 ms of one core per tick (every 0.5 s), and counts as ours."""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.core.cores import allowed_cpus
from dlbench.core.machine import (
    Counters,
    GpuReader,
    cpu_counters,
    own_cpu_seconds,
    own_processes,
    own_running,
    procs_running,
)
from dlbench.core.ticker import Ticker

log = logging.getLogger(__name__)

#: Others may keep this many cores busy beyond the ones the benchmark leaves free before a run is noisy.
TOLERANCE_CORES = 0.5
#: CPU time taken by the hypervisor above this share makes a run noisy.
STEAL_LIMIT_PCT = 5.0
#: GPU utilisation by other processes above this makes a CUDA run noisy.
GPU_OTHERS_LIMIT_PCT = 5.0


@dataclass(frozen=True)
class MachineState:
    """What else the machine did over one interval (averages) or at its end (``other_runnable``)."""

    seconds: float
    load_avg_1m: float
    #: CPU seconds other processes used on this process's CPUs, per second: cores they kept busy
    other_cpu_cores: float
    #: runnable tasks that are not ours (None where the CPUs are shared beyond this process's affinity)
    other_runnable: float | None
    steal_pct: float | None = None
    gpu_util_pct: float | None = None
    gpu_other_util_pct: float | None = None

    @property
    def demand_cores(self) -> float:
        """Cores other work wanted: what it used, or what was queued to run, whichever is more."""
        return max(self.other_cpu_cores, self.other_runnable or 0.0)


def busy_reason(state: MachineState, cores: int, threads: int, device: str = "cpu") -> str:
    """Why timings with ``threads`` threads on ``cores`` cores are distorted by ``state``; empty if not."""
    reasons = []
    if threads > cores:
        reasons.append(f"threads={threads} exceeds the {cores} cores this process may use")
    free = cores - state.demand_cores
    if state.demand_cores > max(cores - threads, 0) + TOLERANCE_CORES:
        reasons.append(
            f"other processes kept {state.demand_cores:.1f} of {cores} cores busy or waiting "
            f"({max(free, 0.0):.1f} free for threads={threads})"
        )
    if state.steal_pct is not None and state.steal_pct > STEAL_LIMIT_PCT:
        reasons.append(f"the hypervisor took {state.steal_pct:.0f}% of the CPU time (steal)")
    if device == "cuda" and (state.gpu_other_util_pct or 0.0) > GPU_OTHERS_LIMIT_PCT:
        reasons.append(f"other processes used {state.gpu_other_util_pct:.0f}% of the GPU")
    return "; ".join(reasons)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def combine(states: Sequence[MachineState]) -> MachineState:
    """Several intervals as one (time-weighted CPU figures, mean of the instantaneous ones)."""
    total = sum(s.seconds for s in states) or 1.0
    return MachineState(
        seconds=sum(s.seconds for s in states),
        load_avg_1m=max(s.load_avg_1m for s in states),
        other_cpu_cores=sum(s.other_cpu_cores * s.seconds for s in states) / total,
        other_runnable=_mean([s.other_runnable for s in states]),
        steal_pct=_mean([s.steal_pct for s in states]),
        gpu_util_pct=_mean([s.gpu_util_pct for s in states]),
        gpu_other_util_pct=_mean([s.gpu_other_util_pct for s in states]),
    )


@dataclass(frozen=True)
class InterferenceReport:
    """The machine before and during one benchmark process, and whether its timings can be trusted."""

    cores: int
    threads: int
    device: str
    start: MachineState
    intervals: tuple[MachineState, ...]
    #: operation id -> index of the interval in which its result row appeared
    row_intervals: Mapping[int, int] = field(default_factory=dict)

    @property
    def during(self) -> MachineState:
        return combine(self.intervals) if self.intervals else self.start

    @property
    def start_reason(self) -> str:
        return busy_reason(self.start, self.cores, self.threads, self.device)

    @property
    def run_reason(self) -> str:
        return busy_reason(self.during, self.cores, self.threads, self.device)

    @property
    def noisy(self) -> bool:
        return bool(self.start_reason or self.run_reason)

    @property
    def reason(self) -> str:
        parts = [f"before: {self.start_reason}" if self.start_reason else "", self.run_reason]
        return "; ".join(p for p in parts if p)

    def operation_state(self, op_id: int) -> MachineState:
        """The intervals between the previous result row and this operation's (the whole run when the rows
        were not watched)."""
        end = self.row_intervals.get(op_id)
        if end is None or not self.intervals:
            return self.during
        earlier = [i for i in self.row_intervals.values() if i < end]
        begin = max(earlier) + 1 if earlier else 0
        return combine(self.intervals[begin : end + 1])

    def operation_columns(self, op_id: int) -> dict[str, object]:
        state = self.operation_state(op_id)
        columns: dict[str, object] = {
            "load_avg_1m": state.load_avg_1m,
            "other_cpu_cores": state.other_cpu_cores,
            "other_runnable": state.other_runnable,
            "steal_pct": state.steal_pct,
        }
        if self.device == "cuda":
            columns["gpu_other_util_pct"] = state.gpu_other_util_pct
        columns["machine_busy"] = bool(busy_reason(state, self.cores, self.threads, self.device))
        return columns

    def run_metrics(self) -> dict[str, float]:
        during = self.during
        values = {
            "interference.load_avg_1m_start": self.start.load_avg_1m,
            "interference.load_avg_1m_max": during.load_avg_1m,
            "interference.other_cpu_cores_start": self.start.other_cpu_cores,
            "interference.other_cpu_cores_mean": during.other_cpu_cores,
            "interference.other_runnable_mean": during.other_runnable,
            "interference.steal_pct": during.steal_pct,
            "interference.gpu_other_util_pct": during.gpu_other_util_pct,
        }
        return {k: float(v) for k, v in values.items() if v is not None}

    def run_params(self) -> dict[str, object]:
        return {"threads_effective": self.threads, "cores_available": self.cores}


class InterferenceWatch:
    """A context manager around a measurement: probes the machine first (and warns when it is busy),
    samples it from a thread every ``interval_s`` while the body runs, and leaves an
    :class:`InterferenceReport` in ``report``.

    ``rows_done`` (optional) returns the ids whose results exist so far, so each operation is matched
    with the intervals it ran in; ``label`` names the benchmark in the warning."""

    def __init__(
        self,
        threads: int,
        device: str = "cpu",
        rows_done: Callable[[], Sequence[int]] | None = None,
        label: str = "",
        interval_s: float = 0.5,
        probe_s: float = 0.25,
    ) -> None:
        self.cpus = allowed_cpus()
        self.cores = len(self.cpus)
        self.threads = threads
        self.device = device
        self.rows_done = rows_done
        self.label = label
        self.interval_s = interval_s
        self.probe_s = probe_s
        self.report: InterferenceReport | None = None
        self._all_cpus = self.cores == (os.cpu_count() or self.cores)
        self._gpu = GpuReader() if device == "cuda" else None
        self._intervals: list[MachineState] = []
        self._row_intervals: dict[int, int] = {}
        self._runnable: list[float] = []
        self._ticker = Ticker(self._tick, interval_s, "dlbench-interference")  # a vanished /proc entry: skipped
        self._last: Counters | None = None

    def _counters(self) -> tuple[Counters, list[Any]]:
        processes = own_processes()
        busy, steal, total = cpu_counters(self.cpus)
        return Counters(time.monotonic(), busy, steal, total, own_cpu_seconds(processes)), processes

    def _runnable_now(self, processes: Sequence[Any]) -> float | None:
        running = procs_running() if self._all_cpus else None
        if running is None:
            return None
        return float(max(running - own_running(processes), 0))

    def _state(self, before: Counters, after: Counters, runnable: Sequence[float], own_pids: set[int]):
        seconds = max(after.at - before.at, 1e-6)
        other = max((after.busy_s - before.busy_s) - (after.own_s - before.own_s), 0.0)
        steal = None
        if after.steal_s is not None and before.steal_s is not None and after.total_s > before.total_s:
            steal = 100.0 * (after.steal_s - before.steal_s) / (after.total_s - before.total_s)
        gpu_util, gpu_others = self._gpu.read(own_pids) if self._gpu is not None else (None, None)
        return MachineState(
            seconds=seconds,
            load_avg_1m=os.getloadavg()[0],
            other_cpu_cores=other / seconds,
            other_runnable=statistics.fmean(runnable) if runnable else None,
            steal_pct=steal,
            gpu_util_pct=gpu_util,
            gpu_other_util_pct=gpu_others,
        )

    def _probe(self) -> MachineState:
        before, processes = self._counters()
        runnable = []
        for _ in range(5):
            time.sleep(self.probe_s / 5)
            value = self._runnable_now(processes)
            if value is not None:
                runnable.append(value)
        after, processes = self._counters()
        self._last = after
        return self._state(before, after, runnable, {p.pid for p in processes})

    def _tick(self) -> None:
        assert self._last is not None
        after, processes = self._counters()
        runnable = self._runnable_now(processes)
        self._intervals.append(self._state(self._last, after, [runnable] if runnable is not None else [], {
            p.pid for p in processes
        }))  # fmt: skip
        self._last = after
        if self.rows_done is not None:
            try:
                done = self.rows_done()
            except (OSError, ValueError):
                done = ()
            for op_id in done:
                self._row_intervals.setdefault(op_id, len(self._intervals) - 1)

    def __enter__(self) -> InterferenceWatch:
        try:
            self._start = self._probe()
        except OSError as err:  # no /proc (not Linux): the measurement goes on, unwatched; report stays None
            log.info("interference is not measured here: %s", err)
            return self
        reason = busy_reason(self._start, self.cores, self.threads, self.device)
        if reason:
            log.warning(
                "%sthe machine is busy before measuring: %s; timings will be distorted (measure on a quiet "
                "machine, or lower threads)",
                f"{self.label}: " if self.label else "",
                reason,
            )
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._ticker.stop():
            return
        try:
            self._tick()  # the last stretch, and the rows written since the last tick
        except OSError:
            pass
        self.report = InterferenceReport(
            cores=self.cores,
            threads=self.threads,
            device=self.device,
            start=self._start,
            intervals=tuple(self._intervals),
            row_intervals=dict(self._row_intervals),
        )
