"""The operations of a training step that ran far from their benchmark: outside the band (more than ``high``
times their benchmark, or under ``low`` times it) and large enough to matter (over ``min_share_pct`` of the
profiled step), sorted by the time the difference costs; with the profiled PyTorch operators behind each."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dlbench.analysis.predict import measured
from dlbench.core.outliers import OutliersConfig

OUTLIER_COLUMNS = [
    "id", "name", "op_type", "pass", "direction", "benchmark_ms", "predicted_ms", "in_training_ms", "ratio",
    "cost_ms", "share_pct", "aten_ops",
]  # fmt: skip


def profiled_operators(match: Any) -> dict[int, list[tuple[str, str, float]]]:
    """Per operation id: the profiled (aten name, input shapes, us per step) rows assigned to it, costliest first."""
    rows = match.rows
    out: dict[int, list[tuple[str, str, float]]] = {}
    for row_index, op_id, us in getattr(match, "assignments", ()):
        row = rows.iloc[row_index]
        out.setdefault(int(op_id), []).append((str(row["name"]), str(row["input_shapes"]), float(us)))
    for calls in out.values():
        calls.sort(key=lambda c: -c[2])
    return out


def find_outliers(frame: pd.DataFrame, match: Any, profiled_ms: float, band: OutliersConfig) -> pd.DataFrame:
    """One row per operation outside ``band`` (:data:`OUTLIER_COLUMNS`), the costliest first. ``cost_ms``: in
    training minus predicted (negative for one faster than its benchmark), sorted by its size."""
    ok = frame[measured(frame) & (frame["predicted_ms"] > 0)]
    base = profiled_ms if profiled_ms and math.isfinite(profiled_ms) and profiled_ms > 0 else None
    base = base or float(frame["in_training_ms"].sum()) or 1.0
    ratio = ok["in_training_ms"] / ok["predicted_ms"]
    share = 100.0 * ok["in_training_ms"] / base
    out = ok.assign(ratio=ratio, share_pct=share, cost_ms=ok["in_training_ms"] - ok["predicted_ms"])
    out = out[((out["ratio"] > band.high) | (out["ratio"] < band.low)) & (out["share_pct"] > band.min_share_pct)]
    if out.empty:
        return pd.DataFrame(columns=OUTLIER_COLUMNS)
    operators = profiled_operators(match)
    out = out.assign(
        direction=["slower" if r > 1 else "faster" for r in out["ratio"]],
        aten_ops=[";".join(sorted({name for name, _, _ in operators.get(int(i), [])})) for i in out["id"]],
    )
    order = out["cost_ms"].abs().sort_values(ascending=False).index
    return out.loc[order, OUTLIER_COLUMNS].reset_index(drop=True)


def outlier_line(row: Any) -> str:
    """One outlier for people: which operation, its times and ratio, and what it costs."""
    what = f"{row.op_type} {row['pass']} {row['name']}"
    return (
        f"{what}: {row.in_training_ms:.3g} ms in training vs {row.predicted_ms:.3g} ms benchmarked "
        f"({row.ratio:.3g}x, {row.cost_ms:+.3g} ms, {row.share_pct:.2g}% of the step"
        + (f"; {row.aten_ops}" if row.aten_ops else "")
        + ")"
    )


def outlier_lines(
    outliers: pd.DataFrame, band: OutliersConfig, shown: int = 3, details: Mapping[int, Sequence[str]] | None = None
) -> list[str]:
    """The summary's lines: "no outliers" for a healthy step, else the ``shown`` costliest, one line each, each
    followed by its ``details`` (the causes checked, indented)."""
    if outliers.empty:
        return [f"no outliers (no operation {band.describe()})"]
    more = len(outliers) - shown
    head = f"outliers ({len(outliers)} operation(s) {band.describe()}; outliers.csv)" + (
        f", the {shown} costliest:" if more > 0 else ":"
    )
    lines = [head]
    for _, row in outliers.head(shown).iterrows():
        lines.append(f"  {outlier_line(row)}")
        lines += [f"    {detail}" for detail in (details or {}).get(int(row["id"]), ())]
    return lines


def outlier_ids(outliers: pd.DataFrame) -> Sequence[int]:
    return [int(i) for i in outliers["id"]]
