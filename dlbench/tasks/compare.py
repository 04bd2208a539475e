"""task=compare: tables and plots across runs, systems, implementations and batch sizes, logged as a run
of its own (tag dlbench.kind=compare) so the comparison can itself be found and compared."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.errors import TaskFailed

log = logging.getLogger(__name__)

MAX_FIGURES = 12


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    import matplotlib.pyplot as plt

    from dlbench.analysis.compare import (
        artifact_reader,
        by_batch_size,
        compare_runs,
        evaluation_table,
        evaluation_totals,
        implementations_side_by_side,
        run_totals,
    )
    from dlbench.analysis.plots import plot_implementations, plot_time_vs_batch
    from dlbench.tracking.runs import open_run, run_place
    from dlbench.tracking.store import search_runs

    settings = cfg.compare
    target = run_place(cfg, ctx).target
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
    compared = {"dlbench.compared_runs": ",".join(runs["run_id"])[:5000]}
    name = f"compare-{len(runs)}-runs"
    with open_run(cfg, ctx, kind="compare", benchmark="compare", name=name, params=params, tags=compared) as run:
        for name, table in tables.items():
            path = out_dir / name
            table.to_csv(path, index=False)
            if not table.empty or name == "problems.csv":
                run.log_artifact(path, "tables")
        figures = 0
        batch_plots = (
            (run_totals(runs), "total_ms", "sum of median x count", "time_vs_batch"),
            (evaluation_totals(runs), "step_ms", "training step, predicted and measured", "step_time_vs_batch"),
        )
        for frame, value, what, file_name in batch_plots:
            for benchmark, sub in frame.groupby("benchmark"):
                if figures >= MAX_FIGURES or sub["batch_size"].nunique() < 2:
                    continue
                fig = plot_time_vs_batch(sub, f"{benchmark}: {what}", value=value)
                run.log_figure(fig, f"plots/{benchmark}_{file_name}.png")
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
        print_comparison(run.run_name, run.run_id, runs, tables, comparison.problems, out_dir)
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
