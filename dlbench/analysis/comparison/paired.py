"""The paired interval of B / A over rounds in which both sides were timed: the ratio is taken per round, so a
slow spell of the machine that lands on both sides of a round cancels. One implementation for every paired
figure: an interleaved comparison's ratio (A and B run back to back each round) and an evaluation's prediction
error (the measured step and the benchmarks alternating round by round).

The statistic is the geometric mean of the per-round ratios (the mean of their logarithms, so 2x and 0.5x
cancel). Its interval is the wider of two: the percentile bootstrap over the rounds (rounds resampled with
replacement, pairs kept together) and Student's t interval of the mean log ratio. With few rounds the
bootstrap alone is too narrow (three rounds give ten distinct resamples, and none reaches beyond the extreme
rounds); the t interval accounts for the small sample, and the bootstrap for skewed rounds. One round gives the
ratio with no interval (NaN), and says so."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlbench.core.change_rules import CONFIDENCE, RESAMPLES


@dataclass(frozen=True)
class PairedRatio:
    """B / A over paired rounds: the geometric mean of the rounds' ratios, its interval, the rounds used, and
    why there is no interval (empty when there is one)."""

    ratio: float
    low: float
    high: float
    rounds: int
    why: str = ""

    @property
    def error_pct(self) -> tuple[float, float, float]:
        """The ratio and its interval as a signed percentage of A (B = prediction, A = measurement: the
        prediction error)."""
        return tuple(100.0 * (v - 1.0) for v in (self.ratio, self.low, self.high))  # type: ignore[return-value]


def _pairs(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, str]:
    """The log ratios of the rounds where both sides have a positive, finite value, and why any were dropped."""
    if len(a) != len(b):
        raise ValueError(f"paired rounds need as many A values as B values, got {len(a)} and {len(b)}")
    a_values, b_values = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    usable = np.isfinite(a_values) & np.isfinite(b_values) & (a_values > 0) & (b_values > 0)
    dropped = int((~usable).sum())
    why = f"{dropped} of {len(a_values)} rounds without a positive time on both sides left out" if dropped else ""
    return np.log(b_values[usable] / a_values[usable]), why


def _t_interval(logs: np.ndarray, confidence: float) -> tuple[float, float]:
    from scipy import stats

    spread = float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
    if spread == 0.0:
        return float(logs.mean()), float(logs.mean())
    return tuple(float(v) for v in stats.t.interval(confidence, len(logs) - 1, loc=logs.mean(), scale=spread))  # type: ignore[return-value]


def _bootstrap_interval(logs: np.ndarray, confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(logs), size=(resamples, len(logs)))
    means = logs[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def paired_ratio(
    a: Sequence[float],
    b: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> PairedRatio:
    """B / A from ``a[i]`` and ``b[i]``, the two sides' times in round ``i`` (a round's median, or its total)."""
    logs, why = _pairs(a, b)
    if len(logs) == 0:
        return PairedRatio(math.nan, math.nan, math.nan, 0, "no round timed both sides")
    ratio = float(math.exp(logs.mean()))
    if len(logs) == 1:
        reason = "one round: no interval (give two rounds or more)"
        return PairedRatio(ratio, math.nan, math.nan, 1, f"{why}; {reason}" if why else reason)
    t_low, t_high = _t_interval(logs, confidence)
    boot_low, boot_high = _bootstrap_interval(logs, confidence, resamples, seed)
    low, high = min(t_low, boot_low), max(t_high, boot_high)
    return PairedRatio(ratio, float(math.exp(low)), float(math.exp(high)), len(logs), why)


def paired_p_beyond(a: Sequence[float], b: Sequence[float], threshold: float) -> float:
    """How likely rounds like these are if B / A lay within the noise threshold: Student's t test of the mean log
    ratio against ``log(1 + threshold)`` (slower) and its negative (faster), the smaller one-sided p doubled
    (so that it is below ``1 - confidence`` exactly when the t interval lies wholly beyond the threshold); NaN
    with fewer than two rounds. The p-value a multiple-comparison correction takes
    (:func:`dlbench.analysis.comparison.change.holm`)."""
    from scipy import stats

    logs, _ = _pairs(a, b)
    if len(logs) < 2:
        return math.nan
    spread = float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
    edge = math.log1p(threshold)
    mean = float(logs.mean())
    if spread == 0.0:
        return 0.0 if abs(mean) > edge else 1.0
    slower = float(stats.t.sf((mean - edge) / spread, len(logs) - 1))
    faster = float(stats.t.cdf((mean + edge) / spread, len(logs) - 1))
    return min(1.0, 2.0 * min(slower, faster))
