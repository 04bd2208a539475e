"""A sweep's results reported: everything measured logged to its run (metrics, tables, protocol files,
plots, roofline columns) and printed as a table."""

from __future__ import annotations

import pandas as pd

from dlbench.analysis.plots import plot_results
from dlbench.analysis.results import results_frame, summary_metrics
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
    ok = frame[frame["status"] == "ok"]
    run.log_metric_series("median_ms", ok["median_ms"].tolist(), ok["id"].tolist())
    flops_rows = ok[ok["gflops_per_s"].notna()]
    run.log_metric_series("gflops_per_s", flops_rows["gflops_per_s"].tolist(), flops_rows["id"].tolist())
    run.log_metrics(summary_metrics(frame))
    run.log_table(frame, "results.csv")
    for path in (files.input_csv, files.output_csv, files.stderr_txt) if files else ():
        if path.exists():
            run.log_artifact(path, "protocol")
    if result.run_error:
        run.log_text(result.run_error + "\n", "run_error.txt")
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        run.log_table(failed[["id", "name", "error"]], "failed_operations.csv")
    if len(ok):
        fig = plot_results(frame, title)
        run.log_figure(fig, "results.png")
        plt.close(fig)
    return frame


def print_summary(frame, run_name: str, run_id: str) -> None:
    columns = [
        c for c in ("id", "name", "median_ms", "min_ms", "iqr_ms", "reps", "gflops_per_s", "status") if c in frame
    ]
    with __import__("pandas").option_context("display.max_rows", 200, "display.width", 160):
        print(f"\n{run_name} (MLflow run {run_id})")
        print(frame[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
