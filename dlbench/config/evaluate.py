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

    #: train again after the benchmarks (unprofiled, no export) and take the measured step time over both
    #: trainings' steady steps, so a machine that slows down or speeds up during the evaluation moves the
    #: measurement as much as the benchmarks (the two trainings' medians are logged apart)
    bracket: bool = True
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
