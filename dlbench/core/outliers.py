"""The band an operation's time in training must keep around its benchmark's (``evaluate.outliers.*``): outside
it, and over a share of the step, the operation is an outlier whose causes an evaluation checks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OutliersConfig:
    """task=evaluate: an operation is an outlier when its time in training is more than ``high`` times its
    benchmark's, or under ``low`` times it, and it takes more than ``min_share_pct`` of the profiled step.
    ``causes``: record the tensors of the step in its last warm-up batch and re-time each outlier with them
    beside its plain inputs; a cause is named only where that re-timing reproduces the slowdown."""

    high: float = 2.0
    low: float = 0.5
    min_share_pct: float = 1.0
    causes: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.low < 1 < self.high:
            raise ValueError(
                f"evaluate.outliers.low={self.low} and evaluate.outliers.high={self.high}: need 0 < low < 1 < high "
                "(e.g. low=0.5 high=2)"
            )
        if not 0 <= self.min_share_pct < 100:
            raise ValueError(f"evaluate.outliers.min_share_pct={self.min_share_pct}: use a share in [0, 100)")

    def describe(self) -> str:
        return f">{self.high:g}x or <{self.low:g}x its benchmark, over {self.min_share_pct:g}% of the step"
