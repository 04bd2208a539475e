"""B against A measured in one run, round by round (:func:`dlbench.operators.runner.measure_interleaved`): per
operation and for the total, B / A over the paired rounds (:func:`dlbench.analysis.comparison.paired.paired_ratio`),
so a slow spell of the machine that lands on both sides of a round cancels; the verdicts as for stored runs,
the operations' after Holm's correction. Pure functions of the two sides' ``_rounds.csv`` tables."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from dlbench.analysis.comparison.change import (
    CHANGE_COLUMNS,
    TOTAL,
    ChangeSettings,
    corrected,
    no_ratio_reason,
    verdict,
)
from dlbench.analysis.comparison.paired import paired_p_beyond, paired_ratio


def round_times(rounds: pd.DataFrame, keys: Mapping[int, str]) -> pd.DataFrame:
    """Operations by key (rows) and rounds (columns, 1, 2, ...): each round's median ms, NaN where the round
    was set aside (its threads waited) or did not measure the operation; the measurement again at the sweep's
    end is no round and is left out."""
    numbered = rounds[pd.to_numeric(rounds["round"], errors="coerce").notna()].copy()
    numbered["round"] = numbered["round"].astype(int)
    numbered["key"] = numbered["id"].map(keys)
    ms = pd.to_numeric(numbered["median_ms"], errors="coerce").where(numbered["kept"].astype(str) == "1")
    table = (
        numbered.assign(ms=ms)
        .dropna(subset=["key"])
        .pivot_table(index="key", columns="round", values="ms", aggfunc="first", dropna=False)
    )
    return table.sort_index(axis=1)


def _reason(info: pd.DataFrame, key: str) -> str:
    parts = []
    for side in ("a", "b"):
        value = info.at[key, f"why_{side}"] if f"why_{side}" in info.columns and key in info.index else ""
        if isinstance(value, str) and value:
            parts.append(f"{side.upper()} {value}")
    return "; ".join(parts)


def _row(operation: str, a: np.ndarray, b: np.ndarray, reason: str, s: ChangeSettings) -> tuple[dict, float]:
    a_ms, b_ms = (
        float(np.nanmedian(a)) if np.isfinite(a).any() else math.nan,
        (float(np.nanmedian(b)) if np.isfinite(b).any() else math.nan),
    )
    no_ratio = no_ratio_reason(a_ms, b_ms)
    paired = paired_ratio(a, b, confidence=s.confidence, resamples=s.resamples, seed=s.seed)
    judged = verdict(paired.low, paired.high, s.threshold)
    notes = [w for w in (no_ratio, reason, paired.why) if w]
    if no_ratio or reason:
        judged = "unsure"
    elif judged == "unsure":
        notes.append(f"interval {paired.low:.3f}-{paired.high:.3f} too wide to tell against {s.threshold:.0%}")
    elif judged == "same":
        notes.append(f"change within the noise threshold of {s.threshold:.0%}")
    row = {"operation": operation, "A": a_ms, "B": b_ms, "ratio": paired.ratio, "low": paired.low,
           "high": paired.high, "verdict": judged, "why": "; ".join(notes)}  # fmt: skip
    return row, paired_p_beyond(a, b, s.threshold)


def interleaved_changes(
    rounds_a: pd.DataFrame,
    rounds_b: pd.DataFrame,
    operations: pd.DataFrame,
    settings: ChangeSettings | None = None,
) -> pd.DataFrame:
    """``changes.csv`` of one interleaved run: one row per operation measured on both sides, then the total
    (per round, the sum of median x count over every operation, where the round has all of them on both sides).

    ``rounds_a`` / ``rounds_b``: each side's ``_rounds.csv`` (``id, round, median_ms, kept``); ``operations``:
    ``id, key`` and optionally ``count`` and ``why_a`` / ``why_b`` (a reason a side's number is not clean)."""
    s = settings or ChangeSettings()
    info = operations.set_index("key")
    keys = dict(zip(operations["id"], operations["key"].astype(str), strict=False))
    table_a, table_b = round_times(rounds_a, keys), round_times(rounds_b, keys)
    columns = sorted(set(table_a.columns) | set(table_b.columns))
    table_a, table_b = table_a.reindex(columns=columns), table_b.reindex(columns=columns)
    both = [k for k in table_a.index if k in table_b.index]
    rows, p_values, reasons = [], [], []
    for key in both:
        reason = _reason(info, key)
        row, p = _row(key, table_a.loc[key].to_numpy(float), table_b.loc[key].to_numpy(float), reason, s)
        rows.append(row)
        p_values.append(p)
        if reason:
            reasons.append(f"{key}: {reason}")
    if rows:
        counts = pd.to_numeric(info["count"], errors="coerce").reindex(both).fillna(1.0) if "count" in info else 1.0
        total_a = table_a.loc[both].mul(counts, axis=0).sum(axis=0, min_count=len(both))
        total_b = table_b.loc[both].mul(counts, axis=0).sum(axis=0, min_count=len(both))
        missing = [f"{k}: measured on one side only" for k in set(table_a.index) ^ set(table_b.index)]
        why = f"partial: {'; '.join((reasons + missing)[:5])}" if reasons or missing else ""
        row, p = _row(TOTAL, total_a.to_numpy(float), total_b.to_numpy(float), why, s)
        rows.append(row)
        p_values.append(p)
    frame = pd.DataFrame(rows, columns=list(CHANGE_COLUMNS[:-1]))
    return corrected(frame, p_values, s.confidence)[list(CHANGE_COLUMNS)]
