"""task=compare: the ``compare`` node."""

from __future__ import annotations

from dataclasses import dataclass, field

from dlbench.core.change_rules import CONFIDENCE, NOISE_THRESHOLD, RESAMPLES, compare_problem


@dataclass
class CompareConfig:
    """task=compare: which runs to put side by side (MLflow search API) and where the tables go."""

    #: experiment names; empty: the configured one (mlflow.experiment)
    experiments: list[str] = field(default_factory=list)
    #: an MLflow filter string, e.g. "tags.`system.id` LIKE '%Xeon%'"
    filter: str = ""
    #: only runs of these benchmarks (tag dlbench.benchmark); empty: all
    benchmarks: list[str] = field(default_factory=list)
    #: only runs of these kinds (tag dlbench.kind); empty: operator sweeps, evaluations and rooflines
    kinds: list[str] = field(default_factory=list)
    max_runs: int = 1000
    baseline: str = ""  # side A: a run id or name, a system (or part of it), or key:value; empty: no changes
    candidate: str = ""  # side B, as baseline; empty: every other run found
    threshold: float = NOISE_THRESHOLD  # a change within +-threshold is `same` (core/change_rules.py)
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES  # bootstrap resamples per interval; the same seed gives the same intervals
    seed: int = 0
    fail_on: str = ""  # exit 1 when an operation or total is slower, faster or changed (either); empty: never

    def __post_init__(self) -> None:
        if self.max_runs < 1:
            raise ValueError(f"compare.max_runs must be >= 1, got {self.max_runs}")
        problem = compare_problem(self.threshold, self.confidence, self.resamples, self.fail_on, self.baseline)
        if problem:
            raise ValueError(problem)
