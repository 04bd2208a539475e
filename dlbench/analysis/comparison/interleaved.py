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
    """Operations by key (rows) and rounds (columns, 1, 2, ...): each round's median ms, NaN where the round did
    not measure the operation; the measurement again at the sweep's end is no round and is left out. A round
    the sweep set aside (its threads waited for cores) is kept here: the other side of the round shares the
    busy machine in a random order, so the pairing leaves it noisier, not biased, and the interval says so."""
    numbered = rounds[pd.to_numeric(rounds["round"], errors="coerce").notna()].copy()
    numbered["round"] = numbered["round"].astype(int)
    numbered["key"] = numbered["id"].map(keys)
    numbered["ms"] = pd.to_numeric(numbered["median_ms"], errors="coerce")
    table = numbered.dropna(subset=["key"]).pivot_table(
        index="key", columns="round", values="ms", aggfunc="first", dropna=False
    )
    return table.sort_index(axis=1)


def set_aside(rounds: pd.DataFrame, keys: Mapping[int, str]) -> dict[str, int]:
    """Per operation key, how many of its rounds the sweep set aside (``kept`` 0)."""
    numbered = rounds[pd.to_numeric(rounds["round"], errors="coerce").notna()]
    aside = numbered[numbered["kept"].astype(str) != "1"]
    return {str(keys[i]): int(n) for i, n in aside.groupby("id").size().items() if i in keys}


def _reason(info: pd.DataFrame, key: str, column: str = "why") -> str:
    parts = []
    for side in ("a", "b"):
        name = f"{column}_{side}"
        value = info.at[key, name] if name in info.columns and key in info.index else ""
        if isinstance(value, str) and value:
            parts.append(f"{side.upper()} {value}")
    return "; ".join(parts)


def _median(values: np.ndarray) -> float:
    return float(np.nanmedian(values)) if np.isfinite(values).any() else math.nan


def _row(
    operation: str, a: np.ndarray, b: np.ndarray, reason: str, s: ChangeSettings, ms: tuple[float, float] | None = None
) -> tuple[dict, float]:
    a_ms, b_ms = ms or (_median(a), _median(b))
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


def _total_row(
    table_a: pd.DataFrame, table_b: pd.DataFrame, info: pd.DataFrame, reasons: list[str], s: ChangeSettings
) -> tuple[dict, float]:
    """The total: per round, the sum of median x count over every operation, in the rounds that have all of
    them on both sides; its A and B the sums of the operations' medians over their rounds."""
    counts = pd.to_numeric(info["count"], errors="coerce") if "count" in info.columns else pd.Series(dtype=float)
    counts = counts.reindex(table_a.index).fillna(1.0)
    total_a = table_a.mul(counts, axis=0).sum(axis=0, min_count=len(table_a))
    total_b = table_b.mul(counts, axis=0).sum(axis=0, min_count=len(table_b))
    ms_a, ms_b = ((t.apply(_median, axis=1) * counts).sum(min_count=1) for t in (table_a, table_b))
    why = f"partial: {'; '.join(reasons[:5])}" if reasons else ""
    return _row(TOTAL, total_a.to_numpy(float), total_b.to_numpy(float), why, s, (float(ms_a), float(ms_b)))


def interleaved_changes(
    rounds_a: pd.DataFrame,
    rounds_b: pd.DataFrame,
    operations: pd.DataFrame,
    settings: ChangeSettings | None = None,
) -> pd.DataFrame:
    """``changes.csv`` of one interleaved run: one row per operation measured on both sides, then the total
    (per round, the sum of median x count over every operation, where the round has all of them on both sides).

    ``rounds_a`` / ``rounds_b``: each side's ``_rounds.csv`` (``id, round, median_ms, kept``); ``operations``:
    ``id, key`` and optionally ``count``, ``why_a`` / ``why_b`` (a reason a side's number is not judged) and
    ``note_a`` / ``note_b`` (said in ``why``, the verdict kept: a busy machine, which the pairing cancels)."""
    s = settings or ChangeSettings()
    info = operations.set_index("key")
    keys = dict(zip(operations["id"], operations["key"].astype(str), strict=False))
    table_a, table_b = round_times(rounds_a, keys), round_times(rounds_b, keys)
    aside_a, aside_b = set_aside(rounds_a, keys), set_aside(rounds_b, keys)
    columns = sorted(set(table_a.columns) | set(table_b.columns))
    table_a, table_b = table_a.reindex(columns=columns), table_b.reindex(columns=columns)
    both = [k for k in table_a.index if k in table_b.index]
    rows, p_values, reasons = [], [], []
    for key in both:
        reason = _reason(info, key)
        row, p = _row(key, table_a.loc[key].to_numpy(float), table_b.loc[key].to_numpy(float), reason, s)
        waited = [f"{side} {n} round(s)" for side, n in (("A", aside_a.get(key, 0)), ("B", aside_b.get(key, 0))) if n]
        waited_note = f"threads waited for cores in {', '.join(waited)} (kept: paired)" if waited else ""
        row["why"] = "; ".join(w for w in (row["why"], _reason(info, key, "note"), waited_note) if w)
        rows.append(row)
        p_values.append(p)
        if reason:
            reasons.append(f"{key}: {reason}")
    if rows:
        row, p = _total_row(table_a.loc[both], table_b.loc[both], info, reasons, s)
        missing = [f"{k}: measured on one side only" for k in sorted(set(table_a.index) ^ set(table_b.index))]
        if missing:
            row["verdict"], row["why"] = "unsure", "; ".join([f"partial: {'; '.join(missing[:5])}", row["why"]])
        rows.append(row)
        p_values.append(p)
    frame = pd.DataFrame(rows, columns=list(CHANGE_COLUMNS[:-1]))
    return corrected(frame, p_values, s.confidence)[list(CHANGE_COLUMNS)]
