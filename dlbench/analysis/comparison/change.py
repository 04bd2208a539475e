"""Is B faster than A, beyond the noise that produced the numbers: per operation the ratio of medians (B / A)
with a bootstrap confidence interval over the recorded samples, rounds resampled as blocks, and a verdict; the
same for the total (sum of median x count), from its parts' samples. Pure functions of tables.

Why blocks. A sweep measures in interleaved rounds (:mod:`dlbench.operators.rounds`); the machine's speed
moves between rounds, so samples of one round are alike and samples of different rounds are not. Resampling
single samples would treat 40 samples of 4 rounds as 40 independent draws and give an interval too narrow
(precision mistaken from drift). The bootstrap here is two-stage (hierarchical): draw the rounds with
replacement, then samples within each drawn round; with one round it is the ordinary bootstrap. Rounds are
drawn jointly for every operation of a side (the same uniform numbers pick the rounds of each), so a total
keeps the common movement of its parts.

Verdicts, against a noise threshold ``t`` (default 5%), for the interval [low, high] of B / A:
``slower`` when low > 1 + t, ``faster`` when high < 1 / (1 + t) (the whole interval beyond the noise),
``same`` when the whole interval lies within [1 / (1 + t), 1 + t], else ``unsure`` (too wide to tell).
A contended, noisy, failed or partial input is ``unsure`` whatever its interval, with the reason. An operation's
``slower`` or ``faster`` must also survive Holm's correction over the pair's operations (:func:`corrected`), so
that comparing 23 or 200 operations at once does not multiply the false alarms."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dlbench.core.change_rules import CONFIDENCE, NOISE_THRESHOLD, RESAMPLES, VERDICTS

TOTAL = "total"
#: the columns of ``changes.csv``; ``p_holm``: an operation's p-value of a change beyond the threshold after
#: Holm's correction over the pair's operations (:func:`corrected`)
CHANGE_COLUMNS = ("operation", "A", "B", "ratio", "low", "high", "verdict", "why", "p_holm")


@dataclass(frozen=True)
class Blocks:
    """One operation's samples (ms) on one side, in blocks (rounds): ``values`` concatenated block after block,
    ``sizes`` the samples per block."""

    values: np.ndarray
    sizes: tuple[int, ...]

    @property
    def median(self) -> float:
        return float(np.median(self.values))


@dataclass(frozen=True)
class ChangeSettings:
    """How a change is judged: the noise threshold, the interval's confidence, resamples and the seed."""

    threshold: float = NOISE_THRESHOLD
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES
    seed: int = 0


def blocks_of(samples: pd.DataFrame) -> dict[str, Blocks]:
    """Per operation key, its samples in blocks, from a table with columns ``key``, ``block`` (a sortable label
    of the round, e.g. run and round) and ``ms``; blocks in sorted order so that two operations of one sweep
    list the same rounds in the same order."""
    out: dict[str, Blocks] = {}
    for key, part in samples.groupby("key", sort=False):
        part = part.sort_values("block", kind="stable")
        values = pd.to_numeric(part["ms"], errors="coerce").to_numpy(dtype=float)
        keep = np.isfinite(values)
        part, values = part[keep], values[keep]
        if len(values) == 0:
            continue
        sizes = tuple(int(n) for n in part.groupby("block", sort=True).size())
        out[str(key)] = Blocks(values, sizes)
    return out


def resampled_medians(blocks: Blocks, uniforms: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The median of each bootstrap replicate of ``blocks``: row ``r`` of ``uniforms`` (shape replicates x at
    least the number of blocks, shared by every operation of a side) picks the blocks, each slot keeping its
    block's size; samples are then drawn with replacement within each picked block."""
    sizes = np.asarray(blocks.sizes)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    count = len(sizes)
    picked = np.minimum((uniforms[:, :count] * count).astype(int), count - 1)  # replicates x blocks
    slot = np.repeat(np.arange(count), sizes)  # which slot each sample position belongs to
    chosen = picked[:, slot]  # replicates x samples: the block each position draws from
    within = (rng.random(chosen.shape) * sizes[chosen]).astype(int)
    return np.median(blocks.values[starts[chosen] + within], axis=1)


def verdict(low: float, high: float, threshold: float) -> str:
    """``slower``/``faster`` when the whole interval of B / A lies beyond the noise threshold, ``same`` when it
    lies within it, else ``unsure``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "unsure"
    if low > 1.0 + threshold:
        return "slower"
    if high < 1.0 / (1.0 + threshold):
        return "faster"
    if low >= 1.0 / (1.0 + threshold) and high <= 1.0 + threshold:
        return "same"
    return "unsure"


def _why(verdict_: str, low: float, high: float, threshold: float) -> str:
    if verdict_ == "unsure":
        return f"interval {low:.3f}-{high:.3f} too wide to tell against the noise threshold of {threshold:.0%}"
    if verdict_ == "same":
        return f"change within the noise threshold of {threshold:.0%}"
    return ""


def _interval(ratios: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(low), float(high)


def no_ratio_reason(a_ms: float, b_ms: float) -> str:
    """Why B / A of these medians is no ratio (a side's median zero, negative or missing); empty when it is one."""
    for side, ms in (("A", a_ms), ("B", b_ms)):
        if not math.isfinite(ms):
            return f"{side} has no median (its samples are not numbers): no ratio; re-measure that side"
        if ms <= 0.0:
            return (
                f"{side}'s median is {ms:g} ms: no ratio (a time at or below the timer's resolution; time more "
                "work per call, e.g. a larger batch_size)"
            )
    return ""


def one_round_note(a: Blocks | None, b: Blocks | None) -> str:
    """A note where a side was timed in one round: its interval holds the samples' scatter within that round,
    not the machine's drift between rounds, so it claims more than it knows."""
    single = [side for side, blocks in (("A", a), ("B", b)) if blocks is not None and len(blocks.sizes) == 1]
    if not single:
        return ""
    return (
        f"{' and '.join(single)} timed in one round: the interval leaves out the machine's drift between rounds "
        "(measure.rounds=4 or more, or compare both sides in one run: compare.a / compare.b)"
    )


def _row(operation: str, a_ms: float, b_ms: float, ratios: np.ndarray, reason: str, s: ChangeSettings) -> dict:
    no_ratio = no_ratio_reason(a_ms, b_ms)
    if no_ratio:
        why = "; ".join(w for w in (no_ratio, reason) if w)
        return {"operation": operation, "A": a_ms, "B": b_ms, "ratio": math.nan, "low": math.nan,
                "high": math.nan, "verdict": "unsure", "why": why}  # fmt: skip
    ratios = ratios[np.isfinite(ratios)]
    low, high = _interval(ratios, s.confidence) if len(ratios) else (math.nan, math.nan)
    judged = verdict(low, high, s.threshold)
    if reason:  # contended, noisy or partial: never a verdict other than unsure
        return {"operation": operation, "A": a_ms, "B": b_ms, "ratio": b_ms / a_ms, "low": low, "high": high,
                "verdict": "unsure", "why": reason}  # fmt: skip
    return {"operation": operation, "A": a_ms, "B": b_ms, "ratio": b_ms / a_ms, "low": low, "high": high,
            "verdict": judged, "why": _why(judged, low, high, s.threshold)}  # fmt: skip


def bootstrap_p_beyond(ratios: np.ndarray, threshold: float) -> float:
    """The p-value of a change beyond the threshold from bootstrap replicates of B / A: their logarithms taken
    as normal (smooth where counting replicates would stop at 1 / resamples), the smaller one-sided p doubled,
    as :func:`dlbench.analysis.comparison.paired.paired_p_beyond` does over rounds."""
    from scipy import stats

    logs = np.log(ratios[np.isfinite(ratios) & (ratios > 0)])
    if len(logs) < 2:
        return math.nan
    mean, spread, edge = float(logs.mean()), float(logs.std(ddof=1)), math.log1p(threshold)
    if spread == 0.0:
        return 0.0 if abs(mean) > edge else 1.0
    slower = float(stats.norm.sf((mean - edge) / spread))
    faster = float(stats.norm.cdf((mean + edge) / spread))
    return min(1.0, 2.0 * min(slower, faster))


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted): the i-th smallest of m is
    multiplied by m - i + 1, then made non-decreasing. Rejecting where the adjusted p is below alpha keeps the
    chance of any false alarm among the m at most alpha, whatever their dependence."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(len(p), np.nan)
    valid = np.flatnonzero(np.isfinite(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    m = len(order)
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled) if m else scaled
    return out


def corrected(changes: pd.DataFrame, p_values: Sequence[float], confidence: float) -> pd.DataFrame:
    """``changes`` with ``p_holm`` (the operations' p-values corrected by :func:`holm` over the operations; the
    total is one test and keeps its own) and every operation ``slower`` or ``faster`` whose corrected p is not
    below ``1 - confidence`` made ``unsure``, saying so. Holm, not Benjamini-Hochberg: a gate fails on any
    false alarm, so the chance of any one among the operations (the family-wise error) is what it must bound;
    Benjamini-Hochberg bounds the share of false alarms among the alarms, and assumes how the tests depend on
    each other, where operations timed in the same rounds are correlated."""
    out = changes.copy()
    p = np.asarray(p_values, dtype=float)
    totals = is_total(out["operation"]).to_numpy()
    adjusted = np.where(totals, p, np.nan)
    adjusted[~totals] = holm(p[~totals])
    out["p_holm"] = adjusted
    alpha = 1.0 - confidence
    weak = ~totals & out["verdict"].isin(["slower", "faster"]).to_numpy() & ~(adjusted < alpha)
    m = int(np.isfinite(p[~totals]).sum())
    for index in np.flatnonzero(weak):
        note = (f"its interval lies beyond the threshold, but not after Holm's correction over {m} operations "
                f"(corrected p {adjusted[index]:.3g}, not below {alpha:.3g})")  # fmt: skip
        out.iloc[index, out.columns.get_loc("verdict")] = "unsure"
        why = out.iloc[index, out.columns.get_loc("why")]
        out.iloc[index, out.columns.get_loc("why")] = f"{why}; {note}" if why else note
    return out


def _with_note(row: dict, note: str) -> dict:
    if note:
        row["why"] = f"{row['why']}; {note}" if row["why"] else note
    return row


def _uniforms(sides: Mapping[str, Blocks], rng: np.random.Generator, resamples: int) -> np.ndarray:
    widest = max((len(b.sizes) for b in sides.values()), default=1)
    return rng.random((resamples, widest))


def compare_samples(
    a: pd.DataFrame,
    b: pd.DataFrame,
    operations: pd.DataFrame | None = None,
    settings: ChangeSettings | None = None,
) -> pd.DataFrame:
    """``changes.csv``: one row per operation key with samples on both sides, then the total.

    ``a`` and ``b``: samples (``key, block, ms``). ``operations`` (optional): per ``key`` its ``count``
    (occurrences in the network, default 1) and ``why_a`` / ``why_b``: a reason the side's number is not clean
    (contended, noisy run, failed); an operation with such a reason, or with samples on one side only, is
    ``unsure`` and makes the total ``unsure`` too (its interval still shown, over the operations both sides
    measured)."""
    s = settings or ChangeSettings()
    rng = np.random.default_rng(s.seed)
    side_a, side_b = blocks_of(a), blocks_of(b)
    info = operations.set_index("key") if operations is not None and len(operations) else pd.DataFrame()
    uniform_a, uniform_b = _uniforms(side_a, rng, s.resamples), _uniforms(side_b, rng, s.resamples)
    rows, reasons, p_values = [], [], []
    total_a = np.zeros(s.resamples)
    total_b = np.zeros(s.resamples)
    sums = [0.0, 0.0]
    for key in [k for k in side_a if k in side_b]:
        reason = _reason(info, key)
        medians_a = resampled_medians(side_a[key], uniform_a, rng)
        medians_b = resampled_medians(side_b[key], uniform_b, rng)
        with np.errstate(divide="ignore", invalid="ignore"):  # a zero median is said in the row's why
            ratios = medians_b / medians_a
        note = one_round_note(side_a[key], side_b[key])
        rows.append(_with_note(_row(key, side_a[key].median, side_b[key].median, ratios, reason, s), note))
        p_values.append(bootstrap_p_beyond(ratios, s.threshold))
        count = _count(info, key)
        total_a += count * medians_a
        total_b += count * medians_b
        sums[0] += count * side_a[key].median
        sums[1] += count * side_b[key].median
        if reason:
            reasons.append(f"{key}: {reason}")
    only = [f"{k}: measured in A only" for k in side_a if k not in side_b]
    only += [f"{k}: measured in B only" for k in side_b if k not in side_a]
    only += [f"{k}: no samples" for k in info.index if k not in side_a and k not in side_b]
    if rows:
        why = _total_reason(reasons, only)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = total_b / total_a
        rows.append(_row(TOTAL, sums[0], sums[1], ratios, why, s))
        p_values.append(bootstrap_p_beyond(ratios, s.threshold))
    frame = pd.DataFrame(rows, columns=list(CHANGE_COLUMNS[:-1]))
    return corrected(frame, p_values, s.confidence)[list(CHANGE_COLUMNS)]


def _reason(info: pd.DataFrame, key: str) -> str:
    if info.empty or key not in info.index:
        return ""
    parts = []
    for side in ("a", "b"):
        column = f"why_{side}"
        value = info.at[key, column] if column in info.columns else ""
        if isinstance(value, str) and value:
            parts.append(f"{side.upper()} {value}")
    return "; ".join(parts)


def _count(info: pd.DataFrame, key: str) -> float:
    if info.empty or key not in info.index or "count" not in info.columns:
        return 1.0
    value = pd.to_numeric(pd.Series([info.at[key, "count"]]), errors="coerce").iloc[0]
    return float(value) if value == value and value > 0 else 1.0


def _total_reason(reasons: list[str], only: list[str]) -> str:
    problems = reasons + only
    if not problems:
        return ""
    shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    return f"partial: {len(problems)} operation(s) not clean or not on both sides ({shown})"


def is_total(operations: pd.Series) -> pd.Series:
    """Which rows of ``changes.csv`` are totals (``total``, or ``<pair> total``)."""
    text = operations.astype(str)
    return (text == TOTAL) | text.str.endswith(f" {TOTAL}")


def verdict_counts(changes: pd.DataFrame) -> dict[str, int]:
    """How many operations (the total apart) got each verdict, and the total's own as ``total_<verdict>``."""
    totals = is_total(changes["operation"])
    ops = changes[~totals]
    counts = {v: int((ops["verdict"] == v).sum()) for v in VERDICTS}
    for row in changes[totals].itertuples(index=False):
        counts[f"total_{row.verdict}"] = counts.get(f"total_{row.verdict}", 0) + 1
    return counts
