"""How each operation is timed: the ``measure`` node."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.core.settings import CACHE_STATES, default


def check_cache_state(key: str, value: str) -> None:
    if value not in CACHE_STATES:
        raise ValueError(f"{key} must be one of {', '.join(CACHE_STATES)}, got {value!r}")


@dataclass
class MeasureConfig:
    """How each operation is timed: warm-up, then repeat until both minima are met (capped). Defaults and
    meanings: :data:`dlbench.core.settings.MEASURE_SETTINGS`, the table executables are handed."""

    warmup: int = int(default("warmup"))
    min_reps: int = int(default("min_reps"))
    max_reps: int = int(default("max_reps"))
    min_time_s: float = float(default("min_time_s"))
    target_rel_ci: float = float(default("target_rel_ci"))
    max_time_s: float = float(default("max_time_s"))
    op_budget_s: float = float(default("op_budget_s"))
    memory_fraction: float = float(default("memory_fraction"))
    caches: str = str(default("caches"))
    rounds: int = int(default("rounds"))
    contended_below: float = float(default("contended_below"))

    def __post_init__(self) -> None:
        check_cache_state("measure.caches", self.caches)
        if self.rounds < 1:
            raise ValueError(f"measure.rounds must be >= 1 (1: each operation in one block), got {self.rounds}")
        if not 0 <= self.contended_below <= 1:
            raise ValueError(f"measure.contended_below must be in [0, 1] (0: never), got {self.contended_below}")
        if self.warmup < 0:
            raise ValueError(f"measure.warmup must be >= 0, got {self.warmup}")
        if self.min_reps < 1:
            raise ValueError(f"measure.min_reps must be >= 1, got {self.min_reps}")
        if self.max_reps < self.min_reps:
            raise ValueError(f"measure.max_reps ({self.max_reps}) is below measure.min_reps ({self.min_reps})")
        if self.min_time_s < 0:
            raise ValueError(f"measure.min_time_s must be >= 0, got {self.min_time_s}")
        if not 0 < self.target_rel_ci <= 1:
            raise ValueError(
                f"measure.target_rel_ci must be in (0, 1] (0.02: the median known to +-2%), got {self.target_rel_ci}"
            )
        if self.max_time_s < 0:
            raise ValueError(f"measure.max_time_s must be >= 0 seconds, got {self.max_time_s}")
        if self.op_budget_s < 0:
            raise ValueError(f"measure.op_budget_s must be >= 0 (0: no limit), got {self.op_budget_s}")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"measure.memory_fraction must be in (0, 1], got {self.memory_fraction}")
