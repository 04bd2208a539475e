"""task=evaluate: profiled batches, the measured step, the matching (``profile``, ``evaluate``, ``match``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlbench.config.measure import check_cache_state
from dlbench.core.outliers import OutliersConfig


@dataclass
class ProfileConfig:
    """Which training batches the instrumentation profiles: skip ``warmup``, then profile ``batches``."""

    warmup: int = 5
    batches: int = 3


@dataclass
class EvaluateConfig:
    """task=evaluate: how the measured step time is taken."""

    #: the script is trained in this many rounds, alternating with the operator benchmarks' rounds (step,
    #: benchmarks, step, benchmarks, ...), so a slow spell of the machine lands on both sides; the measured step
    #: is the median of every round's steady steps, and the error's 95% interval is bootstrapped over the
    #: paired rounds (:mod:`dlbench.analysis.step_interval`). 1: one training, one benchmark sweep, no interval
    rounds: int = 3
    #: replaced by ``rounds``: ``false`` is ``rounds=1``; ``true`` (train again after the benchmarks) needs
    #: ``rounds`` >= 2. None: not set
    bracket: bool | None = None
    #: the operator benchmarks' cache state (``measure.caches`` for this task): ``step`` by default, each
    #: operation's benchmark rotating over copies filling its own reuse distance in the step (the bytes the
    #: step touches between uses of its inputs, :mod:`dlbench.onnx.footprint`), capped at twice the last-level
    #: cache; ``hot`` and ``cold`` (twice the last-level cache for every operation) as explicit choices
    caches: str = "step"
    #: a data-parallel step: whether DDP's all-reduce hides behind the backward pass. ``auto``: not on CPUs whose
    #: cores the ranks' threads all take (gloo reduces on those cores), else yes; ``backward``: yes; ``none``: no
    communication_overlap: str = "auto"
    #: a data-parallel step: also train the script as one process (same batch per rank): the scaling efficiency
    single_process: bool = True
    mode: str = "training"  # or inference: the script's network served in eval mode (docs/inference-engines.md)
    compile: bool = False
    outliers: OutliersConfig = field(default_factory=OutliersConfig)

    def __post_init__(self) -> None:
        check_cache_state("evaluate.caches", self.caches)
        if self.rounds < 1:
            raise ValueError(f"evaluate.rounds must be >= 1 (1: train once, no interval), got {self.rounds}")
        if self.bracket is False:  # the old key's meaning: train once
            self.rounds = 1
        elif self.bracket and self.rounds < 2:
            raise ValueError(
                "evaluate.bracket=true (train again after the benchmarks) is replaced by evaluate.rounds, and "
                f"evaluate.rounds={self.rounds} trains once: drop evaluate.bracket and give evaluate.rounds=2 or more"
            )
        if self.mode not in ("training", "inference"):
            raise ValueError(f"evaluate.mode={self.mode!r}: use training or inference")
        if self.compile and self.mode != "inference":  # only a served network is compiled
            raise ValueError("evaluate.compile=true needs evaluate.mode=inference")
        if self.communication_overlap not in ("auto", "backward", "none"):
            raise ValueError(
                f"evaluate.communication_overlap={self.communication_overlap!r}: use auto, backward or none"
            )


@dataclass
class MatchConfig:
    """task=evaluate: which profiled PyTorch operator runs which ONNX operation (``conf/match/``); empty
    ``operators`` means the shipped ``conf/match/default.yaml``. See dlbench.match for the format."""

    operators: dict[str, Any] = field(default_factory=dict)
    framework: list[str] = field(default_factory=list)
    training: dict[str, Any] = field(default_factory=dict)
