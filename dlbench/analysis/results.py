"""Measurements joined with their operations into one results table, and the figures derived from it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pandas as pd

from dlbench.core.values import STAT_COLUMNS, Operation, SweepResult

#: Statuses of rows that hold a time: ``unstable`` ones did not converge to ``measure.target_rel_ci``.
MEASURED = ("ok", "unstable")


def measured(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with a time (``ok`` and ``unstable``)."""
    return frame[frame["status"].isin(MEASURED)]


def results_frame(operations: Sequence[Operation], result: SweepResult, implementation: str = "") -> pd.DataFrame:
    """One row per operation: parameters, time statistics (missing ones NA), FLOPs, GFLOP/s, status
    (``ok``, ``unstable``, ``unsupported``, ``failed``), error, and what else the machine did meanwhile."""
    rows = []
    timed_passes = any(op.timed_passes for op in operations)
    for op in operations:
        m = result.measurements.get(op.id)
        row: dict[str, object] = {
            "id": op.id,
            "name": op.label,
            "op_type": op.op_type,
            "implementation": implementation,
        }
        row.update({f"p.{d}" if d != "?" else f"p.?{i}": v for i, (d, v) in enumerate(op.params)})
        row.update({"count": op.count, "nodes": ";".join(op.nodes), "flops": op.flops, "bytes": op.bytes_moved})
        if timed_passes:
            row["timed_passes"] = "+".join(op.timed_passes)
        stats = m.stats.as_dict() if m is not None and m.stats is not None else dict.fromkeys(STAT_COLUMNS)
        row.update(stats)
        median = stats["median_ms"]
        row["gflops_per_s"] = op.flops / (median * 1e6) if op.flops and median else None
        row["gbytes_per_s"] = op.bytes_moved / (median * 1e6) if op.bytes_moved and median else None
        row["status"] = m.status if m is not None else "failed"
        row["error"] = m.error if m is not None else "not measured"
        if result.interference is not None:
            row.update(result.interference.operation_columns(op.id))
        rows.append(row)
    frame = pd.DataFrame(rows)
    if "reps" in frame:
        frame["reps"] = frame["reps"].astype("Int64")  # a missing count stays NA, not 0 or 1.0
    return frame


def summary_metrics(frame: pd.DataFrame) -> dict[str, float]:
    ok = measured(frame)
    status = frame["status"]
    metrics: dict[str, float] = {
        "operations_ok": float((status == "ok").sum()),
        "operations_unstable": float((status == "unstable").sum()),
        "operations_unsupported": float((status == "unsupported").sum()),
        "operations_failed": float((status == "failed").sum()),
    }
    if "machine_busy" in frame:
        metrics["operations_machine_busy"] = float(frame["machine_busy"].eq(True).sum())
    if len(ok):
        total_ms = float(ok["median_ms"].sum())
        metrics["total_ms"] = total_ms
        metrics["network_total_ms"] = float((ok["median_ms"] * ok["count"]).sum())
        flops = ok["flops"].fillna(0).astype(float)
        if flops.sum() > 0:
            metrics["mean_gflops_per_s"] = float(flops.sum() / (total_ms * 1e6))
            metrics["max_gflops_per_s"] = float(ok["gflops_per_s"].max())
    return metrics


def add_roofline_columns(frame: pd.DataFrame, peak_gflops: float, bandwidth_gbs: float) -> pd.DataFrame:
    """Roofline columns for a results table: ``intensity`` (FLOPs per byte moved), ``roof_gflops``
    (min(peak, intensity x bandwidth)), ``roofline_fraction`` (achieved GFLOP/s over that bound) and
    ``bound`` (memory or compute). Rows without FLOPs or bytes get empty values."""
    out = frame.copy()
    flops = pd.to_numeric(out.get("flops"), errors="coerce")
    moved = pd.to_numeric(out.get("bytes"), errors="coerce")
    intensity = (flops / moved.where(moved > 0)).astype(float)
    roof = intensity.clip(upper=peak_gflops / bandwidth_gbs) * bandwidth_gbs
    achieved = pd.to_numeric(out.get("gflops_per_s"), errors="coerce").astype(float)
    out["intensity"] = intensity
    out["roof_gflops"] = roof
    out["roofline_fraction"] = achieved / roof.where(roof > 0)
    ridge = peak_gflops / bandwidth_gbs
    out["bound"] = [("" if v != v else "compute" if v >= ridge else "memory") for v in intensity]
    return out


def time_by_op_type(frames: Sequence[pd.DataFrame]) -> dict[str, float]:
    """Milliseconds per op_type and pass over the whole model (median x count of every measured
    operation), e.g. ``time_ms.Conv.backward_data``; where several benchmarks serve an op_type their
    figures add up, so read them per implementation from ``model_results.csv`` in that case."""
    totals: Counter[str] = Counter()
    for frame in frames:
        ok = measured(frame)
        for op_type, pass_name, median, count in zip(
            ok["op_type"], ok["pass"], ok["median_ms"], ok["count"], strict=True
        ):
            totals[f"time_ms.{op_type}.{pass_name}"] += float(median) * int(count)
    return dict(totals)
