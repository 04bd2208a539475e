"""A sweep's results reported: everything measured logged to its run (run-level and per-operation metrics,
tables, protocol files, plots, roofline columns, the workload as a dataset, a summary as the run's
description) and printed as a table."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from dlbench.analysis.marks import status_notes
from dlbench.analysis.plots import plot_results
from dlbench.analysis.results import (
    UPPER_BOUND_STATUSES,
    operation_metrics,
    readable,
    results_frame,
    slowest_operations,
    summary_metrics,
    workload_digest,
    workload_frame,
)
from dlbench.analysis.roofline import attach_roofline
from dlbench.config import DlbenchConfig
from dlbench.core.device import resolve_device
from dlbench.core.values import Operation, SweepResult
from dlbench.operators.runner import SweepFiles

NOTE_TAG = "mlflow.note.content"  # the run page's "Description"


def log_sweep(
    run,
    cfg: DlbenchConfig,
    operations,
    result: SweepResult,
    files: SweepFiles | None,
    title: str,
    kept: pd.DataFrame | None = None,
):
    """Everything measured goes to the run, whatever failed: metrics, tables, CSVs, stderr, plot.

    ``kept``: results of an earlier run that a resumed sweep did not measure again; they join this run's
    rows in ``results.csv`` (column ``source_run_id`` says which run measured each row).
    """
    frame = results_frame(operations, result, implementation=run.run_name)
    frame["source_run_id"] = run.run_id
    if kept is not None and len(kept):
        frame = pd.concat([kept, frame], ignore_index=True).sort_values("id", kind="stable", ignore_index=True)
        frame["key"] = frame["key"].fillna(frame["name"])  # rows kept from a run made before keys existed
    # arithmetic intensity and fraction of the roofline bound, when this system has a roofline run
    frame = attach_roofline(
        run, frame, cfg.dtype, f"{title}: roofline", cfg.fp32_math, resolve_device(cfg.device)
    )  # fmt: skip
    metrics = summary_metrics(frame, cfg.batch_size)
    per_operation, covered = operation_metrics(frame, cfg.mlflow.max_operation_metrics)
    run.log_metrics({**metrics, **per_operation})
    run.set_tags({"dlbench.operation_metrics": covered, NOTE_TAG: run_note(title, frame, metrics, cfg.batch_size)})
    log_interference(run, result)
    log_drift(run, result)
    run.log_table(frame, "results.csv")
    run.log_files(files.existing() if files else (), "protocol")
    if result.run_error:
        run.log_text(result.run_error + "\n", "run_error.txt")
    failed = frame[~frame["status"].isin(("ok", "unstable", "contended"))]
    if len(failed):
        run.log_table(failed[["id", "name", "error"]], "failed_operations.csv")
    if frame["median_ms"].notna().any():  # contended operations too: drawn marked, their times upper bounds
        busy = result.interference is not None and result.interference.noisy
        fig = plot_results(frame, f"{title}: machine busy (tag dlbench.noisy), timings distorted" if busy else title)
        run.log_figure(fig, "results.png")
    return frame


def log_workload(run, operations: Sequence[Operation], name: str, source: str) -> None:
    """The operations a run measures as its MLflow dataset: ``name`` (e.g. ``resnet50-conv``) and a digest of
    the operations, so runs on the same workload share the "Dataset" column."""
    run.log_dataset(workload_frame(operations), name, workload_digest(operations), source)


def _number(value: object, unit: str = "") -> str:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(float(value)):
        return "-"
    return f"{float(value):.4g}{unit}"


def system_line(system: Mapping[str, str]) -> str:
    """One line on the machine: CPU, cores, memory, GPU, host, torch."""
    parts = [
        system.get("cpu.model", "unknown CPU"),
        f"{system.get('cpu.cores_physical', '?')} cores ({system.get('cpu.cores_logical', '?')} logical)",
        f"{system.get('memory.total_gib', '?')} GiB",
    ]
    if system.get("gpu.name"):
        parts.append(f"GPU {system['gpu.name']}")
    parts.append(f"host {system.get('host.name', '?')}")
    if system.get("torch.version"):
        parts.append(f"torch {system['torch.version']}")
    return ", ".join(parts)


def run_note(title: str, frame: pd.DataFrame, metrics: Mapping[str, float], batch_size: int) -> str:
    """The run's description in markdown: system, totals, and the five slowest operations."""
    from dlbench.tracking.system import hardware_tags

    counts = ", ".join(f"{int(v)} {k[len('operations_') :]}" for k, v in metrics.items() if k.startswith("operations_"))
    lines = [
        f"**{title}**",
        "",
        f"- **System**: {system_line(hardware_tags())}",
        f"- **Operations**: {counts}",
        total_line(metrics, batch_size),
        f"- **GFLOP/s**: {_number(metrics.get('gflops_per_s_mean'))} (all FLOPs over all time), median "
        f"{_number(metrics.get('gflops_per_s_median'))}, best {_number(metrics.get('gflops_per_s_max'))}",
    ]
    slowest = slowest_operations(frame)
    if len(slowest):
        lines += ["", "Slowest operations (median x occurrences):", ""]
        lines += ["| operation | median ms | occurrences | total ms | share | GFLOP/s |", "|---|---|---|---|---|---|"]
        for row in slowest.itertuples(index=False):
            share = f"{row.share * 100:.1f} %" if row.share == row.share else "-"
            bound = f" ({row.status}: an upper bound)" if row.status in UPPER_BOUND_STATUSES else ""
            lines.append(
                f"| {row.key}{bound} | {_number(row.median_ms)} | {int(row.count)} | {_number(row.total_ms)} | {share} "
                f"| {_number(row.gflops_per_s)} |"
            )
    lines += ["", "Every operation: `results.csv`; per operation also the metrics `op/<operation>/median_ms`."]
    return "\n".join(lines)


def total_line(metrics: Mapping[str, float], batch_size: int | None) -> str:
    """The run note's total, as the table shows it: the workload's time; or, where operations are contended
    or have no time, the sum without them and (contended) the sum with them, an upper bound."""
    at = f" at batch size {batch_size}" if batch_size else ""
    contended = int(metrics.get("operations_contended", 0))
    without_time = int(metrics.get("operations_without_time", metrics.get("operations_missing", 0)))
    if not contended and not without_time:
        per_sample = f", {_number(metrics.get('time_per_sample_ms'), ' ms')} per sample" if batch_size else ""
        return (
            f"- **Total time** (median x occurrences): {_number(metrics.get('total_time_ms'), ' ms')}{at}{per_sample}"
        )
    parts = []
    if without_time:
        parts.append(f"{without_time} operation(s) without a time")
    if contended:
        parts.append(f"{contended} contended (their threads waited for cores: their times are upper bounds)")
    counted = metrics.get("partial_total_time_ms")
    clean = (
        f"the uncontended, timed ones sum to {_number(counted, ' ms')} (`partial_total_time_ms`)"
        if counted is not None
        else "no operation has a clean time"
    )
    line = f"- **Total time**: NA, {' and '.join(parts)}; {clean}"
    if contended:
        upper = _number(metrics.get("total_time_with_contended_ms"), " ms")
        line += f"; with the contended ones {upper}, an upper bound (`total_time_with_contended_ms`)"
    return line + at


def training_note(title: str, metrics: Mapping[str, float]) -> str:
    """A training run's description in markdown: system, step time, throughput, loss."""
    from dlbench.tracking.system import hardware_tags

    step_s = metrics.get("step_time_s_median")
    lines = [
        f"**{title}**",
        "",
        f"- **System**: {system_line(hardware_tags())}",
        f"- **Step time** (median of the unprofiled steps after the warm-up): "
        f"{_number(step_s * 1e3 if step_s is not None else None, ' ms')}",
        f"- **Throughput** (median): {_number(metrics.get('samples_per_s_median'), ' samples/s')}",
        f"- **Loss**: {_number(metrics.get('loss_first'))} -> {_number(metrics.get('loss_final'))} over "
        f"{_number(metrics.get('steps'))} steps; {_number(metrics.get('profiled_batches'))} profiled batches "
        "(child runs)",
    ]
    return "\n".join(lines)


def log_interference(run, result: SweepResult) -> None:
    """The machine's state around the benchmark: metrics, two params, and the tag ``dlbench.noisy``."""
    report = result.interference
    if report is None:
        return
    run.log_metrics(report.run_metrics())
    run.log_params(report.run_params())
    tags = {"dlbench.noisy": str(report.noisy).lower()}
    if report.noisy:
        tags["dlbench.noisy_reason"] = report.reason
    run.set_tags(tags)


def log_drift(run, result: SweepResult) -> None:
    """The reference probe's readings over the sweep (``machine_drift_pct`` and the rest, see
    :func:`dlbench.operators.rounds.probe_report`), and the tag ``dlbench.drifted`` when it moved more than the
    operations' own spread."""
    metrics = result.extra.get("drift_metrics")
    if metrics:
        run.log_metrics(dict(metrics))
        run.set_tags({"dlbench.drifted": str(bool(result.extra.get("drift_note"))).lower()})


def print_summary(frame, run_name: str, run_id: str, result: SweepResult | None = None, link: str = "") -> None:
    """The results table, then what makes its numbers less trustworthy: one line per status other than ok
    (did not converge, contended, could not be posed, failed, or any other), and a machine busy enough to
    distort timings; and where the run is in the UI."""
    columns = [
        c
        for c in ("id", "name", "median_ms", "min_ms", "p10_ms", "p90_ms", "rel_ci", "reps", "gflops_per_s", "status")
        if c in frame
    ]
    with pd.option_context("display.max_rows", 200, "display.width", 160):
        print(f"\n{run_name} (MLflow run {run_id})")
        print(readable(frame[columns]).to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="NA"))
    for line in status_notes(frame["status"], frame["name"]):  # every status but ok: unstable, contended, ...
        print(line)
    print(total_line(summary_metrics(frame), None).removeprefix("- ").replace("**", ""))
    report = result.interference if result is not None else None
    if report is not None and report.noisy:
        print(f"the machine was busy (tag dlbench.noisy=true): {report.reason}; these timings are distorted")
    if link:
        print(f"in the MLflow UI: {link}")
