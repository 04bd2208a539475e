"""Measurements joined with their operations into one results table, and the figures derived from it."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from dlbench.model import Operation, SweepResult

STAT_COLUMNS = ["median_ms", "min_ms", "max_ms", "mean_ms", "std_ms", "iqr_ms", "reps"]


def results_frame(operations: Sequence[Operation], result: SweepResult, implementation: str = "") -> pd.DataFrame:
    """One row per operation: parameters, time statistics, FLOPs, GFLOP/s, status and error."""
    rows = []
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
        stats = m.stats.as_dict() if m is not None and m.stats is not None else dict.fromkeys(STAT_COLUMNS)
        row.update(stats)
        median = stats["median_ms"]
        row["gflops_per_s"] = op.flops / (median * 1e6) if op.flops and median else None
        row["gbytes_per_s"] = op.bytes_moved / (median * 1e6) if op.bytes_moved and median else None
        row["status"] = "ok" if m is not None and m.ok else "failed"
        row["error"] = m.error if m is not None else "not measured"
        rows.append(row)
    return pd.DataFrame(rows)


def summary_metrics(frame: pd.DataFrame) -> dict[str, float]:
    ok = frame[frame["status"] == "ok"]
    metrics: dict[str, float] = {
        "operations_ok": float(len(ok)),
        "operations_failed": float(len(frame) - len(ok)),
    }
    if len(ok):
        total_ms = float(ok["median_ms"].sum())
        metrics["total_ms"] = total_ms
        metrics["network_total_ms"] = float((ok["median_ms"] * ok["count"]).sum())
        flops = ok["flops"].fillna(0).astype(float)
        if flops.sum() > 0:
            metrics["mean_gflops_per_s"] = float(flops.sum() / (total_ms * 1e6))
            metrics["max_gflops_per_s"] = float(ok["gflops_per_s"].max())
    return metrics


def plot_results(frame: pd.DataFrame, title: str):  # -> matplotlib Figure
    """Bar chart of median time per operation (with min-max whiskers) and GFLOP/s where known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = frame[frame["status"] == "ok"]
    has_flops = ok["gflops_per_s"].notna().any()
    fig, axes = plt.subplots(1, 2 if has_flops else 1, figsize=(13 if has_flops else 8, 0.35 * len(frame) + 1.8))
    axes = list(axes) if has_flops else [axes]
    labels = ok["name"].tolist()
    lower = (ok["median_ms"] - ok["min_ms"]).clip(lower=0)
    upper = (ok["max_ms"] - ok["median_ms"]).clip(lower=0)
    axes[0].barh(labels, ok["median_ms"], xerr=[lower, upper], color="tab:blue", capsize=2)
    axes[0].set_xlabel("median time per call [ms] (whiskers: min-max)")
    axes[0].invert_yaxis()
    if has_flops:
        axes[1].barh(labels, ok["gflops_per_s"].fillna(0), color="tab:green")
        axes[1].set_xlabel("GFLOP/s")
        axes[1].invert_yaxis()
        axes[1].set_yticklabels([])
    fig.suptitle(title)
    fig.tight_layout()
    return fig


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
