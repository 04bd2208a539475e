"""task=compare: the ``compare`` node, and ``compare.a`` / ``compare.b``: the two sides measured in one run."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from dlbench.core.change_rules import CONFIDENCE, INTERLEAVED_ROUNDS, NOISE_THRESHOLD, RESAMPLES, compare_problem


@dataclass
class SideConfig:
    """One side of a comparison run in one task (``compare.a``, ``compare.b``): what differs from the run's own
    settings. Empty fields take the run's (``backend``, ``threads``, ``dtype``)."""

    backend: str = ""  # a backend of the registry (as backend=...), e.g. torch, onednn
    implementation: str = ""  # a registry entry by name, e.g. torch_conv (when a backend has several)
    #: an executable of the CSV protocol (its argument list), taking the chosen entry's parameters
    exe: list[str] = field(default_factory=list)
    threads: int | None = None  # empty: the run's threads
    dtype: str = ""  # empty: the run's dtype
    env: dict[str, str] = field(default_factory=dict)  # environment variables for the side's executable
    #: the Python interpreter that runs the side's Python kernels (an environment with another library build);
    #: empty: this one (its embedded kernels run in the persistent worker)
    python: str = ""

    def given(self) -> bool:
        """Whether anything of this side was set."""
        return any(getattr(self, f.name) not in ("", None, [], {}) for f in fields(self))


@dataclass
class CompareConfig:
    """task=compare: which runs to put side by side (MLflow search API) and where the tables go; or, with
    ``compare.a`` / ``compare.b`` and a benchmark, A and B measured in one run, interleaved round by round."""

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
    a: SideConfig = field(default_factory=SideConfig)  # side A measured in this run (needs +benchmark=...)
    b: SideConfig = field(default_factory=SideConfig)  # side B measured in this run, interleaved with A
    rounds: int = INTERLEAVED_ROUNDS  # rounds of A and B back to back (core/change_rules.py says why)

    def __post_init__(self) -> None:
        if self.max_runs < 1:
            raise ValueError(f"compare.max_runs must be >= 1, got {self.max_runs}")
        interleaved = self.a.given() or self.b.given()
        baseline = self.baseline or ("compare.a" if interleaved else "")
        problem = compare_problem(self.threshold, self.confidence, self.resamples, self.fail_on, baseline)
        if problem:
            raise ValueError(problem)
        if self.rounds < 2:
            raise ValueError(f"compare.rounds must be >= 2 (a paired interval needs two rounds), got {self.rounds}")
        if interleaved and (self.baseline or self.candidate):
            raise ValueError(
                "compare.a / compare.b measure both sides in this run; compare.baseline / compare.candidate name "
                "stored runs: give one pair or the other"
            )
        for name, side in (("a", self.a), ("b", self.b)):
            if side.threads is not None and side.threads < 0:
                raise ValueError(f"compare.{name}.threads must be >= 0 (0: all physical cores), got {side.threads}")
