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
    "ratio_fastest_batch", "ratio_slowest_batch", "cost_ms", "share_pct", "aten_ops",
]  # fmt: skip
Spread = Mapping[tuple[str, str], tuple[float, float]]


def batch_spread(rows: pd.DataFrame, time_column: str) -> dict[tuple[str, str], tuple[float, float]]:
    """Per profiled (name, input_shapes): its time in its fastest and in its slowest profiled batch, each over its
    median (a key missing from a batch counts 0 there, as in the median). A machine that takes the core away
    slows an operation in some batches; a cause of its own slows it in every one."""
    batches = rows["batch"].nunique()
    keyed = rows.groupby(["name", "input_shapes", "batch"], sort=False)[time_column].sum()
    out = {}
    for (name, shapes), group in keyed.groupby(level=[0, 1], sort=False):
        times = pd.Series(group.tolist() + [0.0] * (batches - len(group)))
        median = float(times.median())
        if median > 0:
            out[(str(name), str(shapes))] = (float(times.min()) / median, float(times.max()) / median)
    return out


def _batch_factors(match: Any, spread: Spread) -> dict[int, tuple[float, float]]:
    """Per operation: its fastest and slowest batch over its median, its profiled rows weighted by their time."""
    rows, sums = match.rows, {}
    for row_index, op_id, us in getattr(match, "assignments", ()):
        row = rows.iloc[row_index]
        low, high = spread.get((str(row["name"]), str(row["input_shapes"])), (1.0, 1.0))
        total, lows, highs = sums.get(int(op_id), (0.0, 0.0, 0.0))
        sums[int(op_id)] = (total + us, lows + us * low, highs + us * high)
    return {i: (lo / t, hi / t) if t > 0 else (1.0, 1.0) for i, (t, lo, hi) in sums.items()}


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


def find_outliers(
    frame: pd.DataFrame, match: Any, profiled_ms: float, band: OutliersConfig, spread: Spread | None = None
) -> pd.DataFrame:
    """One row per operation outside ``band`` (:data:`OUTLIER_COLUMNS`), the costliest first. ``cost_ms``: in
    training minus predicted (negative for one faster than its benchmark), sorted by its size. With ``spread``
    (:func:`batch_spread`), an operation is outside the band only in every profiled batch: slower even in its
    fastest batch, or faster even in its slowest."""
    ok = frame[measured(frame) & (frame["predicted_ms"] > 0)]
    base = profiled_ms if profiled_ms and math.isfinite(profiled_ms) and profiled_ms > 0 else None
    base = base or float(frame["in_training_ms"].sum()) or 1.0
    ratio = ok["in_training_ms"] / ok["predicted_ms"]
    factors = _batch_factors(match, spread or {})
    out = ok.assign(
        ratio=ratio,
        ratio_fastest_batch=[r * factors.get(int(i), (1.0, 1.0))[0] for i, r in zip(ok["id"], ratio, strict=True)],
        ratio_slowest_batch=[r * factors.get(int(i), (1.0, 1.0))[1] for i, r in zip(ok["id"], ratio, strict=True)],
        share_pct=100.0 * ok["in_training_ms"] / base,
        cost_ms=ok["in_training_ms"] - ok["predicted_ms"],
    )
    outside = (out["ratio_fastest_batch"] > band.high) | (out["ratio_slowest_batch"] < band.low)
    out = out[outside & (out["share_pct"] > band.min_share_pct)]
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
