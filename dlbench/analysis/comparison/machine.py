"""How far the machine moved between the sides of a stored comparison, as the reference probes saw it (the
compute probes ``reference_*`` and the memory probe ``stream_triad``, read at every round of every sweep:
:mod:`dlbench.operators.reference`): a pair whose probes agree that the machine moved more than the
threshold is not judged (verdict ``moved``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd


def probe_ratios(runs: pd.DataFrame, a_runs: Sequence[str], b_runs: Sequence[str]) -> dict[str, float]:
    """Per reference probe (the compute probes, ``reference_*``, and the memory probe, ``stream_triad``), how
    much longer it took on B than on A: B / A of the geometric means of its readings on each side's sweeps
    (``drift/<probe>/before_ms`` and ``after_ms``); a probe a side did not read is left out."""
    columns = [c for c in runs.columns if c.startswith("drift/") and c.endswith(("/before_ms", "/after_ms"))]
    out = {}
    for probe in sorted({c.split("/")[1] for c in columns}):
        mine = [c for c in columns if c.split("/")[1] == probe]

        def mean_log(ids: Sequence[str], mine: list[str] = mine) -> float:
            values = runs.loc[runs["run_id"].isin(set(ids)), mine].apply(pd.to_numeric, errors="coerce")
            logs = np.log(values[values > 0].to_numpy(dtype=float).ravel())
            logs = logs[np.isfinite(logs)]
            return float(logs.mean()) if len(logs) else math.nan

        moved = mean_log(b_runs) - mean_log(a_runs)
        if math.isfinite(moved):
            out[probe] = float(np.exp(moved))
    return out


def probe_ratio(runs: pd.DataFrame, a_runs: Sequence[str], b_runs: Sequence[str]) -> float:
    """How much longer the reference probe took on B than on A (B / A of the geometric means of every probe
    reading each side's sweeps logged, ``drift/<probe>/before_ms`` and ``after_ms``): the machine's speed between
    the sides as the probe saw it; NaN where a side logged none."""
    columns = [c for c in runs.columns if c.startswith("drift/") and c.endswith(("/before_ms", "/after_ms"))]

    def mean_log(ids: Sequence[str]) -> pd.Series:
        values = runs.loc[runs["run_id"].isin(set(ids)), columns].apply(pd.to_numeric, errors="coerce")
        return np.log(values[values > 0]).mean(axis=0)  # per probe reading, over the side's runs

    if not columns:
        return math.nan
    both = (mean_log(b_runs) - mean_log(a_runs)).dropna()
    return float(np.exp(both.mean())) if len(both) else math.nan


def machine_moved(ratios: dict[str, float], threshold: float) -> str:
    """Why a stored pair is not judged: the probes agree (:func:`dlbench.operators.reference.consensus_pct`:
    all moved one way, by at least the smallest move) that the machine ran more than ``threshold`` faster or
    slower on B's side than on A's; empty when they do not. A change of library moves the compute probes
    alone, not the memory probe, so it is not read as the machine's."""
    from dlbench.operators.reference import consensus_pct

    moved = consensus_pct((r - 1.0) * 100.0 for r in ratios.values())
    if not math.isfinite(moved) or abs(moved) <= threshold * 100.0:
        return ""
    seen = ", ".join(f"{name} {r:.3g}x" for name, r in ratios.items())
    return (
        f"the machine moved {moved:+.1f}% between the sides (reference probes B / A: {seen}), more than the "
        f"threshold of {threshold:.0%}: not judged; measure both sides in one run (compare.a / compare.b)"
    )


def with_moves(changes: pd.DataFrame, pairs: Sequence[Any], moves: Sequence[str]) -> pd.DataFrame:
    """``changes`` with each ``slower`` or ``faster`` row of a pair (``pairs``: each with its ``label``, as
    :class:`dlbench.analysis.comparison.sides.Pair`) whose machine moved (``moves``, per pair)
    made ``moved``, with the reason first in its ``why``."""
    out = changes.copy()
    for pair, why in zip(pairs, moves, strict=True):
        if not why:
            continue
        rows = (out["pair"] == pair.label) & out["verdict"].isin(["slower", "faster"])
        out.loc[rows, "why"] = [f"{why}; {w}" if w else why for w in out.loc[rows, "why"].fillna("")]
        out.loc[rows, "verdict"] = "moved"
    return out
