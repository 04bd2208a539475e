"""Honest repeated timing of a callable: warm-up, then repeat until a minimum count and time are met,
unless the operation's time budget runs out first."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dlbench.core.settings import default, from_environment
from dlbench.core.values import TimeStats


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

    @classmethod
    def from_env(cls) -> TimingSettings:
        """What the runner handed over in ``DLBENCH_*`` variables (defaults for unset ones)."""
        v = from_environment(("warmup", "min_reps", "max_reps", "min_time_s", "op_budget_s"))
        return cls(
            warmup=int(v["warmup"]),
            min_reps=int(v["min_reps"]),
            max_reps=int(v["max_reps"]),
            min_time_s=float(v["min_time_s"]),
            budget_s=float(v["op_budget_s"]),
        )


@dataclass(frozen=True)
class Timing:
    """The statistics, and whether the time budget stopped the repetitions early."""

    stats: TimeStats
    budget_spent: bool


def time_repeated(
    fn: Callable[[], object], settings: TimingSettings, synchronize: Callable[[], None] | None = None
) -> Timing:
    """Time ``fn`` per call. ``synchronize`` (e.g. ``torch.cuda.synchronize``) runs inside each timed
    interval so asynchronous devices are measured to completion, not to kernel launch."""
    sync = synchronize or (lambda: None)
    started = time.perf_counter()
    budget = settings.budget_s if settings.budget_s > 0 else float("inf")

    def spent() -> bool:
        return time.perf_counter() - started >= budget

    for _ in range(settings.warmup):
        if spent():
            break
        fn()
    sync()
    samples: list[float] = []
    total = 0.0
    budget_spent = False
    while len(samples) < settings.max_reps and (len(samples) < settings.min_reps or total < settings.min_time_s):
        if samples and spent():
            budget_spent = True
            break
        start = time.perf_counter_ns()
        fn()
        sync()
        elapsed_ms = (time.perf_counter_ns() - start) / 1e6
        samples.append(elapsed_ms)
        total += elapsed_ms / 1e3
    return Timing(TimeStats.from_samples(samples), budget_spent)


def time_callable(
    fn: Callable[[], object], settings: TimingSettings, synchronize: Callable[[], None] | None = None
) -> TimeStats:
    """:func:`time_repeated`, statistics only."""
    return time_repeated(fn, settings, synchronize).stats
