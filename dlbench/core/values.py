"""Values that flow through dlbench: operations to measure and their measurements, with units."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlbench.core.nodes import NodeSpec

Number = int | float

#: Time units the executable protocol understands, as factors to milliseconds.
TIME_UNITS_TO_MS: dict[str, float] = {"s": 1e3, "ms": 1.0, "us": 1e-3, "ns": 1e-6}


@dataclass(frozen=True)
class Operation:
    """One operator problem to measure.

    ``params`` are (descriptor, value) pairs in the order they were produced, descriptors in the original
    tool's style (``N, C, H, W, K, kernel_shape_0, ...``; ``?`` for a positional value with no name).
    ``input_shapes`` are the operator's input tensor shapes where known (used by ``permutation``
    strategies); ``nodes`` names the ONNX nodes (or config entries) the operation stands for; ``node`` is
    the ONNX node itself (:class:`dlbench.core.nodes.NodeSpec`) where the operation was extracted from one.
    """

    id: int
    op_type: str
    params: tuple[tuple[str, Number], ...]
    input_shapes: tuple[tuple[int, ...], ...] = ()
    name: str = ""
    count: int = 1
    nodes: tuple[str, ...] = ()
    flops: float | None = None
    bytes_moved: float | None = None
    node: NodeSpec | None = None

    @property
    def param_dict(self) -> dict[str, Number]:
        """Named parameters; positional ``?`` ones are left out."""
        return {d: v for d, v in self.params if d != "?"}

    @property
    def label(self) -> str:
        return self.name or operation_name(self.op_type, self.params)


def operation_name(op_type: str, params: Iterable[tuple[str, Number]]) -> str:
    """A readable, stable name from an operation's parameters, e.g. ``Conv_N8_C64_H56_W56_K64``."""
    parts = [op_type]
    for descr, value in params:
        if descr == "?":
            continue
        text = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(f"{descr}{text}")
    return "_".join(parts)


@dataclass(frozen=True)
class TimeStats:
    """Summary of repeated timings of one operation, in milliseconds."""

    median_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    std_ms: float
    iqr_ms: float
    reps: int

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float]) -> TimeStats:
        if not samples_ms:
            raise ValueError("no timing samples")
        ordered = sorted(samples_ms)
        n = len(ordered)
        if n >= 2:
            q = statistics.quantiles(ordered, n=4, method="inclusive")
            iqr = q[2] - q[0]
            std = statistics.stdev(ordered)
        else:
            iqr = std = 0.0
        return cls(
            median_ms=statistics.median(ordered),
            min_ms=ordered[0],
            max_ms=ordered[-1],
            mean_ms=statistics.fmean(ordered),
            std_ms=std,
            iqr_ms=iqr,
            reps=n,
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "median_ms": self.median_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "mean_ms": self.mean_ms,
            "std_ms": self.std_ms,
            "iqr_ms": self.iqr_ms,
            "reps": self.reps,
        }


@dataclass(frozen=True)
class Measurement:
    """The result for one operation from one benchmark: statistics, or the reason there are none."""

    operation_id: int
    stats: TimeStats | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.stats is not None and not self.error


@dataclass(frozen=True)
class SweepResult:
    """All measurements of one benchmark over a list of operations, plus what went wrong run-wide."""

    measurements: Mapping[int, Measurement]
    run_error: str = ""
    stderr: str = ""
    interrupted: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed_ids(self) -> list[int]:
        return [i for i, m in self.measurements.items() if not m.ok]

    @property
    def ok(self) -> bool:
        return not self.run_error and not self.failed_ids
