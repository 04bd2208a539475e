"""Measurements joined with their operations into one results table, and the figures derived from it: the
run-level scalars every run carries and the per-operation metrics under names that stay the same across
batch sizes, dtypes, implementations and machines."""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from dlbench.core.collectives import bandwidths_gbs, is_collective
from dlbench.core.values import STAT_COLUMNS, Operation, SweepResult
from dlbench.tracking.naming import metric_key

if TYPE_CHECKING:
    from dlbench.core.interference import InterferenceReport

#: Row statuses whose times count in totals and per-operation metrics: ``unstable`` rows hold a time that did
#: not converge to ``measure.target_rel_ci`` (flagged, still the best estimate there is)
MEASURED_STATUSES = ("ok", "unstable")
#: Columns of results.csv that hold times or ratios of times (floats; NA where the executable reported none)
TIME_COLUMNS = [c for c in STAT_COLUMNS if c.endswith("_ms") or c == "rel_ci"]
#: Row statuses every run reports a count of (``operations_<status>``), present or not
COUNTED_STATUSES = ("ok", "unstable", "contended", "unsupported", "failed")
#: Row statuses whose time is an upper bound: ``contended`` rows waited for cores other work held, so their time
#: is too long; totals count them apart (``total_time_with_contended_ms``)
UPPER_BOUND_STATUSES = ("contended",)


def operation_key(op: Operation) -> str:
    """A name for ``op`` that is the same at every batch size: its configured name, else its first ONNX node
    with the op type (a node's backward problems share the node), else the op type and its position."""
    if op.name:
        return op.name
    if op.nodes:
        return f"{op.nodes[0].strip('/').replace('/', '.')}:{op.op_type}"
    return f"{op.op_type}_{op.id}"


def results_frame(operations: Sequence[Operation], result: SweepResult, implementation: str = "") -> pd.DataFrame:
    """One row per operation: parameters, time statistics (missing ones NA), FLOPs, GFLOP/s, status
    (``ok``, ``unstable``, ``unsupported``, ``failed``), error, and what else the machine did meanwhile
    (NA for the operations ``result.extra["reused"]`` names: their times come from another run)."""
    rows = []
    reused = set(result.extra.get("reused", ()))
    timed_passes = any(op.timed_passes for op in operations)
    own_layouts = any(op.dtype or op.memory_format for op in operations)
    keys: Counter[str] = Counter()
    for op in operations:
        m = result.measurements.get(op.id)
        key = operation_key(op)
        keys[key] += 1
        row: dict[str, object] = {
            "id": op.id,
            "name": op.label,
            "op_type": op.op_type,
            "implementation": implementation,
            "key": key if keys[key] == 1 else f"{key}-{op.id}",
        }
        row.update({f"p.{d}" if d != "?" else f"p.?{i}": v for i, (d, v) in enumerate(op.params)})
        row.update({"count": op.count, "nodes": ";".join(op.nodes), "flops": op.flops, "bytes": op.bytes_moved})
        if timed_passes:
            row["timed_passes"] = "+".join(op.timed_passes)
        if own_layouts:  # what each ran in where a row names it (empty: the sweep's dtype, contiguous)
            row.update({"dtype": op.dtype, "memory_format": op.memory_format})
        stats = m.stats.as_dict() if m is not None and m.stats is not None else dict.fromkeys(STAT_COLUMNS)
        row.update(stats)
        median = stats["median_ms"]
        row["gflops_per_s"] = op.flops / (median * 1e6) if op.flops and median else None
        row["gbytes_per_s"] = op.bytes_moved / (median * 1e6) if op.bytes_moved and median else None
        if is_collective(op.op_type):  # nccl-tests' algorithm and bus bandwidth
            row["algbw_gbs"], row["busbw_gbs"] = bandwidths_gbs(op.op_type, dict(op.params), median or 0.0)
        #: CPU time over (wall x threads that took part) while timed; below 0.85 the status is contended
        row["cpu_efficiency"] = m.cpu_efficiency if m is not None else None
        row["status"] = m.status if m is not None else "failed"
        row["error"] = m.error if m is not None else "not measured"
        if result.interference is not None:
            columns = result.interference.operation_columns(op.id)
            row.update(dict.fromkeys(columns) if op.id in reused else columns)
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in TIME_COLUMNS:
        if column in frame:  # a statistic no row has is a column of None: NaN, so it reads NA everywhere
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    if "reps" in frame:
        frame["reps"] = frame["reps"].astype("Int64")  # a missing count stays NA, not 0 or 1.0
    return frame


def readable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` for printing: every missing cell that is not a float (a count, a flag, a note) reads ``NA``,
    as ``to_string(na_rep="NA")`` writes missing floats (pandas prints ``None`` and ``<NA>`` otherwise)."""
    out = frame.copy()
    for column in out.columns:
        if not pd.api.types.is_float_dtype(out[column]) and out[column].isna().any():
            out[column] = out[column].astype(object).where(out[column].notna(), "NA")
    return out


def measured_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows whose times count: a measured status and a median."""
    return frame[frame["status"].isin(MEASURED_STATUSES) & frame["median_ms"].notna()]


def timed_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with a time, contended ones (an upper bound) included."""
    return frame[frame["status"].isin((*MEASURED_STATUSES, *UPPER_BOUND_STATUSES)) & frame["median_ms"].notna()]


def _occurrences(rows: pd.DataFrame) -> pd.Series:
    return rows["count"].fillna(1).astype(float) if "count" in rows else pd.Series(1.0, index=rows.index)


def _workload_ms(rows: pd.DataFrame) -> float:
    """Median x occurrences, summed."""
    return float((rows["median_ms"].astype(float) * _occurrences(rows)).sum())


def summary_metrics(frame: pd.DataFrame, batch_size: int | None = None) -> dict[str, float]:
    """The run-level scalars every operator run carries, each meaning the same in every run:

    ``operations_<status>``: rows per status (ok, failed, and any other a row has); ``operations_without_time``:
    rows without a time (failed, unsupported, not measured); ``operations_missing``: rows the total does not
    count, those and the contended ones; ``totals_complete``: 1 when none is missing.
    ``total_time_ms``: sum over operations of median x occurrences (``count``), the workload's time;
    ``time_per_sample_ms``: that over the batch size; ``distinct_operations_time_ms``: each distinct
    operation once. These three exist only when every operation has a clean time: a sum with holes is not the
    workload's time, so it is ``partial_total_time_ms`` instead (the same sum over the counted rows, never
    divided per sample; absent when no row counts). Where operations are contended (their threads waited for
    cores, so their times are too long), ``total_time_with_contended_ms`` adds them in: an upper bound of the
    workload's time, and when no operation lacks a time, ``time_per_sample_with_contended_ms`` too.
    ``gflops_per_s_mean``: the counted operations' FLOPs (occurrences counted) over their time, i.e. the
    time-weighted mean; ``gflops_per_s_median`` and ``gflops_per_s_max`` over them.
    """
    counts = frame["status"].value_counts()
    metrics = {f"operations_{status}": float(counts.get(status, 0)) for status in (*COUNTED_STATUSES, *counts.index)}
    if "machine_busy" in frame:
        metrics["operations_machine_busy"] = float(frame["machine_busy"].eq(True).sum())
    measured, timed = measured_rows(frame), timed_rows(frame)
    missing = len(frame) - len(measured)
    metrics["operations_missing"] = float(missing)
    metrics["operations_without_time"] = float(len(frame) - len(timed))
    metrics["totals_complete"] = float(missing == 0)
    if len(timed) > len(measured):  # contended rows with a time: the total with them, an upper bound
        metrics["total_time_with_contended_ms"] = _workload_ms(timed)
        if batch_size and len(timed) == len(frame):
            metrics["time_per_sample_with_contended_ms"] = metrics["total_time_with_contended_ms"] / batch_size
    if not len(measured):
        return metrics
    total_ms = _workload_ms(measured)
    if missing:
        metrics["partial_total_time_ms"] = total_ms
    else:
        metrics["total_time_ms"] = total_ms
        metrics["distinct_operations_time_ms"] = float(measured["median_ms"].astype(float).sum())
        if batch_size:
            metrics["time_per_sample_ms"] = total_ms / batch_size
    metrics.update(_rates(measured, total_ms))
    return metrics


def _rates(measured: pd.DataFrame, total_ms: float) -> dict[str, float]:
    """GFLOP/s over the counted rows, and the collectives' best bus bandwidth."""
    metrics: dict[str, float] = {}
    missing = pd.Series(float("nan"), index=measured.index)
    flops = pd.to_numeric(measured.get("flops", missing), errors="coerce").fillna(0) * _occurrences(measured)
    rates = pd.to_numeric(measured.get("gflops_per_s", missing), errors="coerce").dropna()
    if flops.sum() > 0 and total_ms > 0:
        metrics["gflops_per_s_mean"] = float(flops.sum() / (total_ms * 1e6))
    if len(rates):
        metrics["gflops_per_s_median"] = float(statistics.median(rates))
        metrics["gflops_per_s_max"] = float(rates.max())
    if "busbw_gbs" in measured:  # collectives: the best bus bandwidth of the sweep (nccl-tests' headline)
        busbw = pd.to_numeric(measured["busbw_gbs"], errors="coerce").dropna()
        if len(busbw):
            metrics["busbw_gbs_max"] = float(busbw.max())
    return metrics


def interference_record(reports: Sequence[tuple[str, InterferenceReport]]) -> tuple[dict[str, float], dict[str, str]]:
    """The interference metrics and tags of a run whose operations several benchmark processes measured
    (``(benchmark, report)`` pairs): ``dlbench.noisy`` is true when any of them ran on a busy machine, the
    reason names which, and each ``interference.*`` figure is the worst (largest) of them."""
    metrics: dict[str, float] = {}
    for _, report in reports:
        for key, value in report.run_metrics().items():
            metrics[key] = max(value, metrics.get(key, value))
    reasons = [f"{name}: {report.reason}" for name, report in reports if report.noisy]
    tags = {"dlbench.noisy": str(bool(reasons)).lower()}
    if reasons:
        tags["dlbench.noisy_reason"] = "; ".join(reasons)[:5000]
    return metrics, tags


def operation_metrics(frame: pd.DataFrame, limit: int) -> tuple[dict[str, float], str]:
    """``op/<key>/median_ms`` and ``op/<key>/gflops_per_s`` of the ``limit`` costliest measured operations
    (median x occurrences), and a sentence saying which operations these are."""
    measured = measured_rows(frame)
    cost = measured["median_ms"].astype(float) * measured["count"].fillna(1).astype(float)
    chosen = measured.loc[cost.sort_values(ascending=False, kind="stable").index[: max(limit, 0)]]
    metrics: dict[str, float] = {}
    for row in chosen.itertuples(index=False):
        metrics[metric_key("op", str(row.key), "median_ms")] = float(row.median_ms)
        if row.gflops_per_s == row.gflops_per_s and row.gflops_per_s is not None:
            metrics[metric_key("op", str(row.key), "gflops_per_s")] = float(row.gflops_per_s)
        busbw = getattr(row, "busbw_gbs", None)
        if busbw is not None and busbw == busbw:
            metrics[metric_key("op", str(row.key), "busbw_gbs")] = float(busbw)
    if len(chosen) == len(measured):
        note = f"all {len(measured)} measured operations"
    else:
        note = (
            f"the {len(chosen)} costliest of {len(measured)} measured operations (median x occurrences; "
            "mlflow.max_operation_metrics); every operation is in results.csv"
        )
    return metrics, note


def slowest_operations(frame: pd.DataFrame, n: int = 5) -> pd.DataFrame:
    """The ``n`` timed operations (contended ones too: their ``status`` says so) with the largest median x
    occurrences, with their share of the total over them."""
    measured = timed_rows(frame).copy()
    measured["count"] = measured["count"].fillna(1).astype(int)
    measured["total_ms"] = measured["median_ms"].astype(float) * measured["count"]
    total = float(measured["total_ms"].sum())
    measured["share"] = measured["total_ms"] / total if total > 0 else float("nan")
    return measured.sort_values("total_ms", ascending=False, kind="stable").head(n)


def workload_frame(operations: Sequence[Operation]) -> pd.DataFrame:
    """What a run measured, one row per operation (the run's MLflow dataset)."""
    rows = [
        {"id": op.id, "name": operation_key(op), "op_type": op.op_type, "count": op.count, "flops": op.flops,
         "params": ",".join(f"{d}={v}" for d, v in op.params)}
        for op in operations
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["id", "name", "op_type", "count", "flops", "params"])


def workload_digest(operations: Sequence[Operation]) -> str:
    """A fingerprint of the operations (type, parameters, occurrences) independent of who measures them."""
    text = repr(sorted((op.id, op.op_type, op.params, op.count) for op in operations))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:12]


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
        ok = measured_rows(frame)
        for op_type, pass_name, median, count in zip(
            ok["op_type"], ok["pass"], ok["median_ms"], ok["count"], strict=True
        ):
            totals[f"time_ms.{op_type}.{pass_name}"] += float(median) * int(count)
    return dict(totals)


@dataclass
class MachineRecord:
    """What else the machine did while each benchmark of the evaluation measured: the reports, and per
    operation whether its time was taken on a busy machine. The run's ``dlbench.noisy`` follows each report
    (a run that fails later keeps it)."""

    run: Any
    reports: list[tuple[str, InterferenceReport]] = field(default_factory=list)
    busy: dict[int, bool] = field(default_factory=dict)

    def add(self, name: str, result: SweepResult, operations: Sequence[Operation]) -> None:
        if result.interference is not None:
            self.reports.append((name, result.interference))
            for op in operations:
                self.busy[op.id] = bool(result.interference.operation_columns(op.id)["machine_busy"])
            self.run.set_tags(interference_record(self.reports)[1])
