"""task=compare: tables and plots across runs, systems, implementations and batch sizes, logged as a run
of its own (tag dlbench.kind=compare) so the comparison can itself be found and compared."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from dlbench.app import AppContext, TaskFailed
from dlbench.config import DlbenchConfig

log = logging.getLogger(__name__)

MAX_FIGURES = 12


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    import matplotlib.pyplot as plt

    from dlbench.compare import (
        artifact_reader,
        by_batch_size,
        compare_runs,
        evaluation_table,
        evaluation_totals,
        implementations_side_by_side,
        run_totals,
    )
    from dlbench.plots import plot_implementations, plot_time_vs_batch
    from dlbench.sweep import sweep_tags
    from dlbench.tracking import TrackedRun, prepare_store, resolve_tracking, search_runs

    settings = cfg.compare
    target = resolve_tracking(cfg.mlflow.tracking_uri, cfg.mlflow.experiment, ctx.start_dir)
    experiment_id = prepare_store(target, cfg.mlflow.connect_timeout_s)
    experiments = list(settings.experiments) or [target.experiment]
    try:
        found = search_runs(target, settings.filter, experiments, max_results=settings.max_runs)
    except Exception as err:  # MLflow reports bad filters and unknown experiments as various exceptions
        raise TaskFailed(f"searching runs in {', '.join(experiments)} ({target.uri}): {err}") from err
    comparison = compare_runs(found, artifact_reader(target), settings.kinds, settings.benchmarks)
    runs = comparison.runs
    if runs.empty:
        raise TaskFailed(
            f"no runs to compare in {', '.join(experiments)} ({target.uri}) with filter {settings.filter!r}, "
            f"kinds {list(settings.kinds) or 'default'}, benchmarks {list(settings.benchmarks) or 'all'}"
        )
    out_dir = ctx.output_dir / "compare"
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = {
        "runs.csv": runs,
        "operations.csv": comparison.operations,
        "by_batch_size.csv": by_batch_size(comparison.operations),
        "implementations.csv": implementations_side_by_side(comparison.operations),
        "evaluations.csv": evaluation_table(runs),
        "problems.csv": comparison.problems_frame(),
    }
    params = {
        "experiments": ",".join(experiments),
        "filter": settings.filter,
        "kinds": ",".join(settings.kinds),
        "benchmarks": ",".join(settings.benchmarks),
        "runs_compared": len(runs),
    }
    run_name = cfg.mlflow.run_name or f"compare-{len(runs)}-runs"
    with TrackedRun(
        target, run_name, params, sweep_tags(ctx, "compare", "compare"), experiment_id=experiment_id
    ) as run:
        run.set_tags({"dlbench.run_id": run.run_id, "dlbench.compared_runs": ",".join(runs["run_id"])[:5000]})
        for name, table in tables.items():
            path = out_dir / name
            table.to_csv(path, index=False)
            if not table.empty or name == "problems.csv":
                run.log_artifact(path, "tables")
        figures = 0
        totals = run_totals(runs)
        for benchmark, sub in totals.groupby("benchmark"):
            if figures >= MAX_FIGURES or sub["batch_size"].nunique() < 2:
                continue
            fig = plot_time_vs_batch(sub, f"{benchmark}: sum of median x count", value="total_ms")
            run.log_figure(fig, f"plots/{benchmark}_time_vs_batch.png")
            plt.close(fig)
            figures += 1
        for benchmark, sub in evaluation_totals(runs).groupby("benchmark"):
            if figures >= MAX_FIGURES or sub["batch_size"].nunique() < 2:
                continue
            fig = plot_time_vs_batch(sub, f"{benchmark}: training step, predicted and measured", value="step_ms")
            run.log_figure(fig, f"plots/{benchmark}_step_time_vs_batch.png")
            plt.close(fig)
            figures += 1
        side = tables["implementations.csv"]
        if not side.empty:
            impl_columns = [c for c in side.columns if c not in ("benchmark", "system", "batch_size", "dtype", "id")
                            and "_over_" not in c]  # fmt: skip
            for (benchmark, batch), sub in side.groupby(["benchmark", "batch_size"]):
                if figures >= MAX_FIGURES:
                    break
                frame = sub.set_index("id")[impl_columns]
                fig = plot_implementations(frame, f"{benchmark} bs{int(batch)}: implementations")
                run.log_figure(fig, f"plots/{benchmark}_bs{int(batch)}_implementations.png")
                plt.close(fig)
                figures += 1
        run.log_metrics(
            {"runs_compared": float(len(runs)), "problems": float(len(comparison.problems)), "figures": float(figures)}
        )
        print_comparison(run_name, run.run_id, runs, tables, comparison.problems, out_dir)
    return 0


def print_comparison(
    run_name: str, run_id: str, runs: pd.DataFrame, tables: dict, problems: list, out_dir: Path
) -> None:
    wanted = ("kind", "benchmark", "implementation", "system", "batch_size", "total_ms", "step_time_predicted_ms",
              "step_time_measured_ms", "bandwidth_gbs")  # fmt: skip
    shown = [c for c in wanted if c in runs.columns]
    with pd.option_context("display.width", 200, "display.max_rows", 60, "display.max_colwidth", 40):
        print(f"\n{run_name} (MLflow run {run_id}): {len(runs)} runs; tables in {out_dir}")
        print(runs[shown].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        side = tables["implementations.csv"]
        if not side.empty:
            print("\nimplementations side by side (median ms):")
            print(side.head(40).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in problems[:30]:
            print(f"  {p['run_name'] or p['run_id']}: {p['problem']}")
