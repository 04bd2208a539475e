"""Honest repeated timing of a callable: warm-up, then repeat until a minimum count and time are met."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from dlbench.model import TimeStats


@dataclass(frozen=True)
class TimingSettings:
    warmup: int = 3
    min_reps: int = 10
    max_reps: int = 1000
    min_time_s: float = 0.2

    @classmethod
    def from_env(cls) -> TimingSettings:
        d = cls()
        return cls(
            warmup=int(os.environ.get("DLBENCH_WARMUP", d.warmup)),
            min_reps=int(os.environ.get("DLBENCH_MIN_REPS", d.min_reps)),
            max_reps=int(os.environ.get("DLBENCH_MAX_REPS", d.max_reps)),
            min_time_s=float(os.environ.get("DLBENCH_MIN_TIME_S", d.min_time_s)),
        )


def time_callable(
    fn: Callable[[], object], settings: TimingSettings, synchronize: Callable[[], None] | None = None
) -> TimeStats:
    """Time ``fn`` per call. ``synchronize`` (e.g. ``torch.cuda.synchronize``) runs inside each timed
    interval so asynchronous devices are measured to completion, not to kernel launch."""
    sync = synchronize or (lambda: None)
    for _ in range(settings.warmup):
        fn()
    sync()
    samples: list[float] = []
    total = 0.0
    while len(samples) < settings.max_reps and (len(samples) < settings.min_reps or total < settings.min_time_s):
        start = time.perf_counter_ns()
        fn()
        sync()
        elapsed_ms = (time.perf_counter_ns() - start) / 1e6
        samples.append(elapsed_ms)
        total += elapsed_ms / 1e3
    return TimeStats.from_samples(samples)
