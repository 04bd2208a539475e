"""The prediction error with its interval: an evaluation's rounds (``evaluate.rounds``) pair a training round's
measured step with the benchmark round after it; the error is B / A over those pairs, predicted over measured,
with its 95% interval (:func:`dlbench.analysis.comparison.paired_ratio`, the one paired statistic of dlbench).

What the interval covers: how far the machine's speed and the step's own noise moved the rounds apart during
this evaluation. What it does not cover: a systematic difference between how a benchmark runs an operation and
how the step runs it (present in every round alike), nor a machine that was slow during the whole evaluation."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from dlbench.analysis.comparison import paired_ratio
from dlbench.analysis.predict import measured, steady_steps_s

ROUND_COLUMNS = ["round", "measured_ms", "steady_steps", "predicted_ms", "error_pct"]


@dataclass(frozen=True)
class StepRounds:
    """Each round's measured step (median of its training's steady steps, ms), how many steady steps it had,
    and its predicted step (the prediction with that round's benchmark medians, ms)."""

    measured_ms: tuple[float, ...]
    steady_steps: tuple[int, ...]
    predicted_ms: tuple[float, ...]

    def frame(self) -> pd.DataFrame:
        """One row per round (``rounds.csv``)."""
        rows = [
            {"round": i + 1, "measured_ms": m, "steady_steps": n, "predicted_ms": p,
             "error_pct": 100.0 * (p / m - 1.0) if m > 0 else math.nan}
            for i, (m, n, p) in enumerate(zip(self.measured_ms, self.steady_steps, self.predicted_ms, strict=True))
        ]  # fmt: skip
        return pd.DataFrame(rows, columns=ROUND_COLUMNS)


def pooled_step_ms(rounds: Sequence[pd.DataFrame], warmup: int) -> tuple[float, list[float], list[int]]:
    """The measured step of trainings ``rounds`` (each one's ``batches.csv``): the median of every round's
    steady steps pooled, each round's own median, and each round's count of steady steps."""
    steady = [steady_steps_s(batches, warmup) for batches in rounds]
    pooled = pd.concat(steady) if steady else pd.Series(dtype=float)
    medians = [float(s.median()) * 1e3 if len(s) else math.nan for s in steady]
    return (float(pooled.median()) * 1e3 if len(pooled) else math.nan), medians, [len(s) for s in steady]


def predicted_per_round(
    frame: pd.DataFrame, medians: Sequence[Mapping[int, float]], terms_ms: float, predicted_ms: float
) -> list[float]:
    """The prediction of each benchmark round of a training step (``frame``: the evaluation's per-operation
    table), as :func:`round_predictions` makes it."""
    rows = frame[measured(frame)]
    combined = dict(zip(rows["id"], rows["benchmark_ms"], strict=True))
    return round_predictions(combined, dict(zip(rows["id"], rows["occurrences"], strict=True)), medians, terms_ms,
                             predicted_ms)  # fmt: skip


def round_predictions(
    combined_ms: Mapping[int, float],
    counts: Mapping[int, float],
    medians: Sequence[Mapping[int, float]],
    terms_ms: float,
    predicted_ms: float,
) -> list[float]:
    """The prediction of each benchmark round: ``predicted_ms`` scaled by how that round's operator terms (its
    medians x counts; an operation it did not measure at its combined time ``combined_ms``) and the terms
    measured once (framework, all-reduce, a session's runs: ``terms_ms`` less the operators) compare with the
    combined ones. A GPU timeline's, a data-parallel step's or an optimized session's prediction, which is not
    the sum of these terms, moves with its operators so."""
    operators_ms = sum(combined_ms[i] * counts[i] for i in combined_ms)
    others_ms = terms_ms - operators_ms
    out = []
    for round_ in medians:
        total = sum(round_.get(i, combined_ms[i]) * counts[i] for i in combined_ms) + others_ms
        out.append(predicted_ms * total / terms_ms if terms_ms > 0 else math.nan)
    return out


def level_interval(values: Sequence[float]) -> tuple[float, float]:
    """The 95% interval of the level of ``values`` (one per round): the paired interval of each round's value
    over 1, i.e. of their geometric mean (NaN for fewer than two rounds)."""
    paired = paired_ratio([1.0] * len(values), values)
    return paired.low, paired.high


def interval_metrics(rounds: StepRounds) -> dict[str, float]:
    """``prediction_error_pct`` paired by round with ``prediction_error_lo_pct`` / ``_hi_pct``, the measured and
    predicted steps' 95% intervals over the rounds, the rounds used, and how far the training moved from the
    first round to the last (``training_drift_pct``). Without an interval (one round) the bounds are NaN."""
    error = paired_ratio(a=rounds.measured_ms, b=rounds.predicted_ms)
    err, low, high = error.error_pct
    measured_lo, measured_hi = level_interval(rounds.measured_ms)
    predicted_lo, predicted_hi = level_interval(rounds.predicted_ms)
    first, last = rounds.measured_ms[0], rounds.measured_ms[-1]
    return {
        "prediction_error_pct": err,
        "prediction_error_lo_pct": low,
        "prediction_error_hi_pct": high,
        "step_time_measured_lo_ms": measured_lo,
        "step_time_measured_hi_ms": measured_hi,
        "step_time_predicted_lo_ms": predicted_lo,
        "step_time_predicted_hi_ms": predicted_hi,
        "evaluation_rounds": float(error.rounds),
        "training_drift_pct": (last / first - 1.0) * 100.0 if len(rounds.measured_ms) > 1 and first > 0 else math.nan,
    }


def _error_and_interval(metrics: Mapping[str, float], prefix: str) -> tuple[float, float, float]:
    """The error and its interval's bounds from an evaluation's metrics (NaN where missing)."""
    return tuple(metrics.get(f"{prefix}{suffix}", math.nan) for suffix in ("_pct", "_lo_pct", "_hi_pct"))  # type: ignore[return-value]


def error_text(metrics: Mapping[str, float], prefix: str = "prediction_error") -> str:
    """``-6.1% (95% interval -15.2% to +3.9%)``, or the bare error where there is no interval."""
    err, low, high = _error_and_interval(metrics, prefix)
    if not math.isfinite(err):
        return "n/a"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{err:+.1f}% (no interval: one round)"
    return f"{err:+.1f}% (95% interval {low:+.1f}% to {high:+.1f}%)"


def interval_note(metrics: Mapping[str, float], prefix: str = "prediction_error", what: str = "the error") -> str:
    """The one line saying that the interval is wider than the error it qualifies (it reaches further from the
    error, on one side, than the error's own size), or that there is no interval; empty otherwise."""
    err, low, high = _error_and_interval(metrics, prefix)
    if not math.isfinite(err):
        return ""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{what} has no interval: one round (evaluate.rounds=1); give evaluate.rounds=3 for one"
    half = max(high - err, err - low)  # the interval's reach from the error, on its wider side
    if half <= abs(err):
        return ""
    zero = ", and holds no error at all: within the noise" if low <= 0.0 <= high else ""
    return (
        f"{what} ({err:+.1f}%): its 95% interval ({low:+.1f}% to {high:+.1f}%) is wider than the error "
        f"itself{zero}; more rounds (evaluate.rounds) or a quieter machine narrow it"
    )
