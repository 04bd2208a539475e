"""A sweep's results reported: everything measured logged to its run (metrics, tables, protocol files,
plots, roofline columns) and printed as a table."""

from __future__ import annotations

import pandas as pd

from dlbench.analysis.plots import plot_results
from dlbench.analysis.results import measured, results_frame, summary_metrics
from dlbench.analysis.roofline import attach_roofline
from dlbench.config import DlbenchConfig
from dlbench.core.values import SweepResult
from dlbench.operators.runner import SweepFiles


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
    import matplotlib.pyplot as plt

    frame = results_frame(operations, result, implementation=run.run_name)
    frame["source_run_id"] = run.run_id
    if kept is not None and len(kept):
        frame = pd.concat([kept, frame], ignore_index=True).sort_values("id", kind="stable", ignore_index=True)
    # arithmetic intensity and fraction of the roofline bound, when this system has a roofline run
    frame = attach_roofline(run, frame, cfg.dtype, f"{title}: roofline")
    ok = measured(frame)
    run.log_metric_series("median_ms", ok["median_ms"].tolist(), ok["id"].tolist())
    flops_rows = ok[ok["gflops_per_s"].notna()]
    run.log_metric_series("gflops_per_s", flops_rows["gflops_per_s"].tolist(), flops_rows["id"].tolist())
    run.log_metrics(summary_metrics(frame))
    log_interference(run, result)
    run.log_table(frame, "results.csv")
    for path in (files.input_csv, files.output_csv, files.stderr_txt, files.samples_csv) if files else ():
        if path is not None and path.exists():
            run.log_artifact(path, "protocol")
    if result.run_error:
        run.log_text(result.run_error + "\n", "run_error.txt")
    failed = frame[~frame["status"].isin(("ok", "unstable"))]
    if len(failed):
        run.log_table(failed[["id", "name", "error"]], "failed_operations.csv")
    if len(ok):
        fig = plot_results(frame, title)
        run.log_figure(fig, "results.png")
        plt.close(fig)
    return frame


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


def print_summary(frame, run_name: str, run_id: str, result: SweepResult | None = None) -> None:
    """The results table, then what makes its numbers less trustworthy: operations that did not converge
    or could not be posed, and a machine busy enough to distort timings."""
    columns = [
        c
        for c in ("id", "name", "median_ms", "min_ms", "p10_ms", "p90_ms", "rel_ci", "reps", "gflops_per_s", "status")
        if c in frame
    ]
    with pd.option_context("display.max_rows", 200, "display.width", 160):
        print(f"\n{run_name} (MLflow run {run_id})")
        print(frame[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="NA"))
    for status, why in (
        ("unstable", "did not converge: the median's 95% interval stayed wider than measure.target_rel_ci"),
        ("unsupported", "cannot be posed by this implementation (see the error column)"),
    ):
        names = frame.loc[frame["status"] == status, "name"].tolist()
        if names:
            print(f"{len(names)} operation(s) {why}: {', '.join(map(str, names))}")
    report = result.interference if result is not None else None
    if report is not None and report.noisy:
        print(f"the machine was busy (tag dlbench.noisy=true): {report.reason}; these timings are distorted")
