"""Honest repeated timing of a callable: warm-up, repeat until the minimum count and time are met, then on
until the median is known to ``target_rel_ci`` (95% confidence interval of the median) or ``max_time_s``
ends; the operation's time budget cuts everything short. On a CUDA device the calls are timed by CUDA
events (device time, read back in batches), not by the host clock with a synchronize per call."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dlbench.core.contention import available, cpu_efficiency, read_cpu
from dlbench.core.settings import default, from_environment
from dlbench.core.values import TimeStats, median_rel_ci

#: How often (in calls, at most) device events are read back while repeating; each read is one synchronize.
EVENT_BATCH = 32
#: Convergence is checked at sample counts growing by this factor (sorting every sample each call would
#: cost more than a microsecond kernel).
CHECK_GROWTH = 1.1
#: Device cycles the clock's first hold spins for while its events measure the device's clock rate (about
#: 0.5-1 ms at the 1-2 GHz of current GPUs); every later hold is measured too, and the latest rate used
CALIBRATION_CYCLES = 1_000_000


def hold_ms(recent_launch_ms: list[float], batch: int = EVENT_BATCH) -> float:
    """How long to hold the stream ahead of a batch of calls so the host has issued them all before the
    device reaches them: twice the batch's issuing time at the recent median launch time (1 ms before any
    is known: 1 ms of issuing per batch), within 0.1-50 ms."""
    per_call = statistics.median(recent_launch_ms) if recent_launch_ms else 1.0 / batch
    return min(max(2.0 * batch * per_call, 0.1), 50.0)


@dataclass(frozen=True)
class TimingSettings:
    """The measurement settings of :mod:`dlbench.core.settings` as a timing loop needs them."""

    warmup: int = int(default("warmup"))
    min_reps: int = int(default("min_reps"))
    max_reps: int = int(default("max_reps"))
    min_time_s: float = float(default("min_time_s"))
    #: seconds one operation may take, warm-up included; 0: no limit. At least one timed sample is
    #: always taken, so a spent budget shortens the measurement but never empties it.
    budget_s: float = float(default("op_budget_s"))
    target_rel_ci: float = float(default("target_rel_ci"))
    max_time_s: float = float(default("max_time_s"))

    @classmethod
    def from_env(cls) -> TimingSettings:
        """What the runner handed over in ``DLBENCH_*`` variables (defaults for unset ones)."""
        keys = ("warmup", "min_reps", "max_reps", "min_time_s", "op_budget_s", "target_rel_ci", "max_time_s")
        v = from_environment(keys)
        return cls(
            warmup=int(v["warmup"]),
            min_reps=int(v["min_reps"]),
            max_reps=int(v["max_reps"]),
            min_time_s=float(v["min_time_s"]),
            budget_s=float(v["op_budget_s"]),
            target_rel_ci=float(v["target_rel_ci"]),
            max_time_s=float(v["max_time_s"]),
        )


class Clock(Protocol):
    """Times single calls. ``time_call`` may leave a sample pending (device events); ``flush`` returns the
    samples taken since the last flush, in milliseconds, waiting for the device where needed."""

    pending: int

    def time_call(self, fn: Callable[[], object]) -> None: ...

    def flush(self) -> list[float]: ...

    def synchronize(self) -> None: ...


class HostClock:
    """The host's monotonic clock around each call; ``synchronize`` (if any) runs inside the interval."""

    pending = 0

    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self._sync = synchronize or (lambda: None)
        self._samples: list[float] = []

    def time_call(self, fn: Callable[[], object]) -> None:
        start = time.perf_counter_ns()
        fn()
        self._sync()
        self._samples.append((time.perf_counter_ns() - start) / 1e6)

    def flush(self) -> list[float]:
        taken, self._samples = self._samples, []
        return taken

    def synchronize(self) -> None:
        self._sync()


class CudaEventClock:
    """Device time of each call: a pair of CUDA events recorded around it on the current stream, read back
    after a batch of calls (one synchronize per batch). The host-side time of issuing each call (launch
    overhead) is kept apart in ``launch_ms``: the host clock around the call alone, not the event records.
    ``cuda``: the ``torch.cuda`` module (imported on first use; a test passes its own), ``host_ns``: the host
    clock.

    Which streams: the events bracket the stream that is current at the first call (``stream``). Work the
    call queues on another stream counts only where it joins that stream before the call returns (cuDNN's
    and cuBLAS's helper streams do, through events); a kernel left running on a side stream (NCCL's own
    stream when nothing waits on it) is not in the time.

    Ahead of each batch the stream is held busy (``torch.cuda._sleep``, :func:`hold_ms`) while the host
    issues the batch, so each start event fires when the previous call's work ends: without it a kernel
    shorter than its launch reads as the host's issuing time (a 1 us ReLU read 23 us on an H200), which is
    the host lane's cost, not the device's. ``_sleep`` spins for a number of device cycles, so the device's
    clock rate is measured, not assumed: the first hold is timed with events before the batch
    (:data:`CALIBRATION_CYCLES`), every later hold by its own events, read with the batch; where this torch
    has no ``_sleep`` the stream is not held (short kernels then read as their issuing time)."""

    def __init__(self, cuda: Any = None, host_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self._module = cuda
        self._host_ns = host_ns
        self._events: list[tuple[Any, Any]] = []
        self._hold: tuple[Any, Any, int] | None = None
        self.launch_ms: list[float] = []
        #: the device's clock as the holds measured it (cycles per ms); None before the first
        self.cycles_per_ms: float | None = None
        self.stream: Any = None

    @property
    def pending(self) -> int:
        return len(self._events)

    def _cuda(self) -> Any:
        if self._module is None:
            import torch

            self._module = torch.cuda
        return self._module

    def _timed_sleep(self, cuda: Any, cycles: int) -> tuple[Any, Any, int]:
        begin, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        begin.record(self.stream)
        cuda._sleep(cycles)
        end.record(self.stream)
        return begin, end, cycles

    def _hold_stream(self, cuda: Any) -> None:
        if getattr(cuda, "_sleep", None) is None:
            return
        if self.cycles_per_ms is None:  # the first: measured before the batch relies on it
            begin, end, cycles = self._timed_sleep(cuda, CALIBRATION_CYCLES)
            end.synchronize()
            self._read_rate(begin, end, cycles)
        if self.cycles_per_ms:
            self._hold = self._timed_sleep(cuda, int(hold_ms(self.launch_ms[-EVENT_BATCH:]) * self.cycles_per_ms))

    def _read_rate(self, begin: Any, end: Any, cycles: int) -> None:
        elapsed = begin.elapsed_time(end)
        if elapsed > 0:
            self.cycles_per_ms = cycles / elapsed

    def time_call(self, fn: Callable[[], object]) -> None:
        cuda = self._cuda()
        if self.stream is None:
            self.stream = cuda.current_stream()
        if not self._events:
            self._hold_stream(cuda)
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record(self.stream)
        host = self._host_ns()
        fn()
        self.launch_ms.append((self._host_ns() - host) / 1e6)
        end.record(self.stream)
        self._events.append((start, end))

    def flush(self) -> list[float]:
        if not self._events:
            return []
        self._events[-1][1].synchronize()
        taken = [start.elapsed_time(end) for start, end in self._events]
        self._events = []
        if self._hold is not None:  # the clock as this batch's hold ran it
            self._read_rate(*self._hold)
            self._hold = None
        return taken

    def synchronize(self) -> None:
        self._cuda().synchronize()


def clock_for(device_type: str, synchronize: Callable[[], None] | None = None) -> Clock:
    """CUDA events on a CUDA device, the host clock elsewhere."""
    return CudaEventClock() if device_type == "cuda" else HostClock(synchronize)


@dataclass(frozen=True)
class Timing:
    """The statistics, the raw samples, and what ended the repetitions."""

    stats: TimeStats
    budget_spent: bool
    samples_ms: tuple[float, ...] = ()
    #: median host time of issuing one call, where the clock measures device time apart (CUDA events)
    launch_ms: float | None = None
    #: CPU time of this process's threads over (wall time x threads that took part) while repeating
    #: (:mod:`dlbench.core.contention`); None where it cannot be read
    cpu_efficiency: float | None = None


def time_repeated(
    fn: Callable[[], object],
    settings: TimingSettings,
    synchronize: Callable[[], None] | None = None,
    clock: Clock | None = None,
) -> Timing:
    """Time ``fn`` per call with ``clock`` (default: the host clock, ``synchronize`` inside each interval).

    Order of stopping rules: ``max_reps``, then the operation's time budget (after one sample), then the
    minima (``min_reps`` and ``min_time_s`` of timed time), then convergence (the median's 95% interval
    within ``target_rel_ci``) or ``max_time_s`` of repeating, whichever comes first."""
    clock = clock or HostClock(synchronize)
    launches_before = len(getattr(clock, "launch_ms", ()))  # a clock serves many rows: this row's launches only
    started = time.perf_counter()
    budget = settings.budget_s if settings.budget_s > 0 else float("inf")

    def spent() -> bool:
        return time.perf_counter() - started >= budget

    for _ in range(settings.warmup):
        if spent():
            break
        fn()
    clock.synchronize()
    own = [os.getpid()] if available() else []
    cpu_before = read_cpu(own) if own else None
    process_cpu = time.process_time()
    samples: list[float] = []
    timed_total_ms = 0.0
    budget_spent = False
    repeating_since = time.perf_counter()
    last_flush = repeating_since
    next_check = max(settings.min_reps, 1)
    while len(samples) + clock.pending < settings.max_reps:
        if (samples or clock.pending) and spent():
            budget_spent = True
            break
        clock.time_call(fn)
        now = time.perf_counter()
        if clock.pending and clock.pending < EVENT_BATCH and now - last_flush < 0.05:
            continue
        new = clock.flush()
        last_flush = now
        samples.extend(new)
        timed_total_ms += sum(new)
        if len(samples) < settings.min_reps or timed_total_ms < settings.min_time_s * 1e3:
            continue
        if len(samples) >= next_check:
            next_check = max(len(samples) + 1, int(len(samples) * CHECK_GROWTH))
            rel_ci = median_rel_ci(samples)
            if rel_ci is not None and rel_ci <= settings.target_rel_ci:
                break
        if now - repeating_since >= settings.max_time_s:
            break
    samples.extend(clock.flush())
    efficiency = None
    if cpu_before is not None:  # this process's CPU time is exact; the threads' readings say which took part
        efficiency = cpu_efficiency(cpu_before, read_cpu(own), time.process_time() - process_cpu, min_wall_s=0.01)
    launch = list(getattr(clock, "launch_ms", ()))[launches_before:]
    return Timing(
        TimeStats.from_samples(samples, settings.target_rel_ci),
        budget_spent,
        tuple(samples),
        statistics.median(launch) if launch else None,
        efficiency,
    )


def time_callable(
    fn: Callable[[], object], settings: TimingSettings, synchronize: Callable[[], None] | None = None
) -> TimeStats:
    """:func:`time_repeated`, statistics only."""
    return time_repeated(fn, settings, synchronize).stats
