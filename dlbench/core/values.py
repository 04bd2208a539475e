"""Values that flow through dlbench: operations to measure and their measurements, with units."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlbench.core.interference import InterferenceReport

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
    #: the passes one measured time covers when the implementation times several at once (registry
    #: ``passes``, e.g. forward + backward_data + backward_weights); ``flops``/``bytes_moved`` cover them all
    timed_passes: tuple[str, ...] = ()
    node: NodeSpec | None = None
    #: the bytes the step this operation came from touches between uses of its inputs (its reuse distance,
    #: :mod:`dlbench.onnx.footprint`); the benchmarks' ``caches=step`` rotates over that much. None: not known
    footprint_bytes: int | None = None
    #: the dtype and memory format its benchmark runs in (``core/dtypes.py`` names); empty: the sweep's own
    #: (``dtype=``; contiguous). Set from a recording of what ran, or by ``amp=`` and ``channels_last=``
    dtype: str = ""
    memory_format: str = ""

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


#: Confidence of the interval of the median that convergence is judged by (``measure.target_rel_ci``).
MEDIAN_CI_CONFIDENCE = 0.95
_Z_95 = 1.959963984540054


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted values, linear interpolation between order statistics (numpy's default,
    and what the native kernels compute)."""
    position = q * (len(ordered) - 1)
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (position - lower) * (ordered[upper] - ordered[lower])


def median_ci_ranks(n: int) -> tuple[int, int] | None:
    """0-based ranks ``(lo, hi)`` of the order statistics that bracket the median with at least 95%
    confidence, whatever the distribution (binomial argument; normal approximation above 200 samples);
    None when ``n`` is too small for such an interval (below 6 samples)."""
    if n < 6:
        return None
    if n <= 200:
        # largest k with P(Binomial(n, 1/2) <= k - 1) <= 2.5%: the interval is (x_(k), x_(n-k+1)), 1-based
        alpha_half = (1.0 - MEDIAN_CI_CONFIDENCE) / 2.0
        cumulative, k = 0.0, 0
        while True:
            cumulative += math.comb(n, k) / 2.0**n
            if cumulative > alpha_half:
                break
            k += 1
        return (k - 1, n - k) if k >= 1 else None
    half = _Z_95 * math.sqrt(n) / 2.0
    lo = max(int(math.floor(n / 2.0 - half)) - 1, 0)
    return lo, n - 1 - lo


def median_rel_ci(samples_ms: Sequence[float]) -> float | None:
    """Half-width of the median's 95% interval relative to the median (what ``measure.target_rel_ci`` bounds);
    None below 6 samples. Cheap enough to check while repeating."""
    ordered = sorted(samples_ms)
    ranks = median_ci_ranks(len(ordered))
    median = quantile(ordered, 0.5) if ordered else 0.0
    if ranks is None or median <= 0:
        return None
    return max(median - ordered[ranks[0]], ordered[ranks[1]] - median) / median


def _stdev(ordered: Sequence[float], mean: float) -> float:
    # two passes in floats: statistics.stdev's exact arithmetic costs seconds on a million samples
    return math.sqrt(math.fsum((x - mean) ** 2 for x in ordered) / (len(ordered) - 1))


@dataclass(frozen=True)
class TimeStats:
    """Summary of repeated timings of one operation, in milliseconds.

    Only the median is always known. A statistic the executable did not report (or that its samples do not
    allow, like a spread of one sample) is None: missing, never a made-up 0 or 1. ``ci_low_ms``/``ci_high_ms``
    bracket the median with 95% confidence; ``converged`` says whether that interval is within the target
    (None: not judged); ``note`` says what is weaker than asked (fewer repetitions, nothing reported).
    """

    median_ms: float
    min_ms: float | None = None
    max_ms: float | None = None
    mean_ms: float | None = None
    std_ms: float | None = None
    iqr_ms: float | None = None
    reps: int | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    converged: bool | None = None
    note: str = ""

    @property
    def rel_ci(self) -> float | None:
        """Half-width of the median's confidence interval relative to the median (0.02: +-2%)."""
        if self.ci_low_ms is None or self.ci_high_ms is None or self.median_ms <= 0:
            return None
        return max(self.median_ms - self.ci_low_ms, self.ci_high_ms - self.median_ms) / self.median_ms

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float], target_rel_ci: float | None = None) -> TimeStats:
        """Every statistic the samples allow; ``converged`` judged against ``target_rel_ci`` when given."""
        if not samples_ms:
            raise ValueError("no timing samples")
        ordered = sorted(samples_ms)
        n = len(ordered)
        spread = n >= 2
        ranks = median_ci_ranks(n)
        mean = statistics.fmean(ordered)
        stats = cls(
            median_ms=quantile(ordered, 0.5),
            min_ms=ordered[0],
            max_ms=ordered[-1],
            mean_ms=mean,
            std_ms=_stdev(ordered, mean) if spread else None,
            iqr_ms=quantile(ordered, 0.75) - quantile(ordered, 0.25) if spread else None,
            reps=n,
            p10_ms=quantile(ordered, 0.1) if spread else None,
            p90_ms=quantile(ordered, 0.9) if spread else None,
            ci_low_ms=ordered[ranks[0]] if ranks else None,
            ci_high_ms=ordered[ranks[1]] if ranks else None,
        )
        if target_rel_ci is not None and ranks is None:
            return replace(stats, converged=False)  # too few samples to bound the median at all
        return stats.judged(target_rel_ci)

    def judged(self, target_rel_ci: float | None) -> TimeStats:
        """These statistics with ``converged`` set against ``target_rel_ci``; unchanged without a target or
        without an interval (one that was never reported cannot be judged)."""
        rel = self.rel_ci
        if target_rel_ci is None or rel is None:
            return self
        return replace(self, converged=rel <= target_rel_ci)

    def with_note(self, note: str) -> TimeStats:
        return replace(self, note="; ".join(n for n in (self.note, note) if n))

    def as_dict(self) -> dict[str, float | int | bool | str | None]:
        """The statistics by column name; missing ones are None (NA in a table, left out of metrics)."""
        return {
            "median_ms": self.median_ms,
            "min_ms": self.min_ms,
            "p10_ms": self.p10_ms,
            "p90_ms": self.p90_ms,
            "max_ms": self.max_ms,
            "mean_ms": self.mean_ms,
            "std_ms": self.std_ms,
            "iqr_ms": self.iqr_ms,
            "reps": self.reps,
            "ci_low_ms": self.ci_low_ms,
            "ci_high_ms": self.ci_high_ms,
            "rel_ci": self.rel_ci,
            "converged": self.converged,
            "stats_note": self.note,
        }


#: The columns of :meth:`TimeStats.as_dict`, in order.
STAT_COLUMNS = list(TimeStats(1.0).as_dict())


@dataclass(frozen=True)
class Measurement:
    """The result for one operation from one benchmark: statistics, or the reason there are none."""

    operation_id: int
    stats: TimeStats | None
    error: str = ""
    #: the implementation cannot pose this problem (e.g. its parameters lack a descriptor whose value
    #: matters); not a failure of the run, but never a measurement either
    unsupported: bool = False
    #: CPU time over (wall time x threads that took part) while it was timed (:mod:`dlbench.core.contention`)
    cpu_efficiency: float | None = None
    #: its threads waited for cores other work held, in every round and again at the sweep's end
    contended: bool = False

    @property
    def ok(self) -> bool:
        return self.stats is not None and not self.error and not self.unsupported

    @property
    def status(self) -> str:
        """``ok``, ``contended`` (measured while its threads waited for cores), ``unstable`` (measured, but
        the median did not converge), ``unsupported`` or ``failed``."""
        if self.unsupported:
            return "unsupported"
        if not self.ok:
            return "failed"
        assert self.stats is not None
        if self.contended:
            return "contended"
        return "unstable" if self.stats.converged is False else "ok"


@dataclass(frozen=True)
class SweepResult:
    """All measurements of one benchmark over a list of operations, plus what went wrong run-wide."""

    measurements: Mapping[int, Measurement]
    run_error: str = ""
    stderr: str = ""
    interrupted: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: what else the machine did while the benchmark ran (:mod:`dlbench.core.interference`)
    interference: InterferenceReport | None = None

    @property
    def failed_ids(self) -> list[int]:
        return [i for i, m in self.measurements.items() if not m.ok and not m.unsupported]

    @property
    def ok(self) -> bool:
        return not self.run_error and not self.failed_ids
