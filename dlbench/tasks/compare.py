"""task=compare: tables and plots across runs, systems, implementations and batch sizes, logged as a run
of its own (tag dlbench.kind=compare) so the comparison can itself be found and compared. Where a
configuration was run more than once, the newest finished run stands for it; runs.csv lists the others
(``superseded_by``). With ``compare.baseline``, every operation and total of B is judged against A with its
interval (``changes.csv``, a forest plot); ``compare.fail_on`` makes that a regression gate (exit 1)."""

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
    from dlbench.analysis.comparison.runs import artifact_reader, compare_runs, current
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
    judged = judge_changes(cfg, target, runs, found) if settings.baseline else None
    out_dir = ctx.output_dir / "compare"
    out_dir.mkdir(parents=True, exist_ok=True)
    used = current(runs)
    tables = comparison_tables(comparison, used)
    params = {
        "experiments": ",".join(experiments),
        "filter": settings.filter,
        "kinds": ",".join(settings.kinds),
        "benchmarks": ",".join(settings.benchmarks),
        "runs_compared": len(used),
        **(
            {
                "baseline": settings.baseline,
                "candidate": settings.candidate or "the other runs",
                "threshold": settings.threshold,
            }
            if judged
            else {}
        ),  # fmt: skip
    }
    compared = {"dlbench.compared_runs": ",".join(runs["run_id"])[:5000]}
    name = f"compare-{len(runs)}-runs"
    with open_run(cfg, ctx, kind="compare", benchmark="compare", name=name, params=params, tags=compared) as run:
        for file_name, table in tables.items():
            path = out_dir / file_name
            table.to_csv(path, index=False)
            if not table.empty or file_name == "problems.csv":
                run.log_artifact(path, "tables")
        figures = log_batch_plots(run, used, tables) + log_implementation_plots(run, tables, MAX_FIGURES)
        run.log_metrics(
            {"runs_compared": float(len(used)), "runs_superseded": float(len(runs) - len(used)),
             "problems": float(len(comparison.problems)), "figures": float(figures)}
        )  # fmt: skip
        print_comparison(run.run_name, run.run_id, runs, tables, comparison.problems, out_dir)
        if judged is not None:
            from dlbench.analysis.comparison.report import log_changes

            return log_changes(run, judged, settings, out_dir, run_place(cfg, ctx).experiment_id)
    return 0


def judge_changes(cfg: DlbenchConfig, target, runs: pd.DataFrame, found: pd.DataFrame):
    """B against A: the pairs of configurations, their changes, and the machines' differences."""
    from dlbench.analysis.comparison.change import ChangeSettings
    from dlbench.analysis.comparison.sides import judge

    settings = cfg.compare
    change = ChangeSettings(settings.threshold, settings.confidence, settings.resamples, settings.seed)
    return judge(runs, found, settings.baseline, settings.candidate, change, target)


def comparison_tables(comparison, used: pd.DataFrame) -> dict[str, pd.DataFrame]:
    from dlbench.analysis.comparison.runs import (
        by_batch_size,
        evaluation_table,
        implementations_side_by_side,
        training_totals,
    )

    return {
        "runs.csv": comparison.runs,
        "operations.csv": comparison.operations,
        "by_batch_size.csv": by_batch_size(comparison.operations),
        "implementations.csv": implementations_side_by_side(comparison.operations),
        "evaluations.csv": evaluation_table(used),
        "training.csv": training_totals(used),
        "problems.csv": comparison.problems_frame(),
    }


def log_batch_plots(run, used: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> int:
    """Totals, per-sample times and step times against batch size, per benchmark; the number drawn."""
    import matplotlib.pyplot as plt

    from dlbench.analysis.comparison.runs import evaluation_totals, left_out_totals, run_totals
    from dlbench.analysis.plots import plot_time_vs_batch

    batch_plots = (
        (run_totals(used), "total_time_ms", "total time (sum of median x occurrences)", "time_vs_batch"),
        (run_totals(used), "time_per_sample_ms", "time per sample (total / batch size)", "time_per_sample_vs_batch"),
        (evaluation_totals(used), "step_ms", "evaluation: training step, predicted and measured", "step_time_vs_batch"),
        (tables["training.csv"], "step_time_ms", "training step time (median)", "training_step_time_vs_batch"),
        (tables["training.csv"], "samples_per_s", "training samples/s (median)", "training_samples_per_s_vs_batch"),
    )  # fmt: skip
    left_out = left_out_totals(used)
    figures = 0
    for frame, value, what, file_name in batch_plots:
        for benchmark, sub in frame.groupby("benchmark"):
            if figures >= MAX_FIGURES or sub["batch_size"].nunique() < 2:
                continue
            title = f"{benchmark}: {what}"
            partial = left_out.get(str(benchmark), 0) if value in ("total_time_ms", "time_per_sample_ms") else 0
            if partial:  # a sum with holes is not drawn beside complete ones
                title += f"\ncomplete runs only: {partial} with operations missing left out (problems.csv)"
            fig = plot_time_vs_batch(sub, title, value=value)
            run.log_figure(fig, f"plots/{benchmark}_{file_name}.png")
            plt.close(fig)
            figures += 1
    return figures


def log_implementation_plots(run, tables: dict[str, pd.DataFrame], budget: int) -> int:
    """Implementations side by side per benchmark and batch size (at most ``budget``); the number drawn."""
    import matplotlib.pyplot as plt

    from dlbench.analysis.plots import plot_implementations

    side = tables["implementations.csv"]
    if side.empty:
        return 0
    impl_columns = [c for c in side.columns if c not in ("benchmark", "system", "batch_size", "dtype", "id",
                    "key", "marked") and "_over_" not in c]  # fmt: skip
    figures = 0
    for (benchmark, batch), sub in side.groupby(["benchmark", "batch_size"]):
        if figures >= budget:
            break
        frame = sub.set_index("key")[impl_columns]
        # a number that is not ok (its status, a noisy run) says so in its label
        frame.index = [f"{k} [{m}]" if m else str(k) for k, m in zip(sub["key"], sub["marked"], strict=True)]
        fig = plot_implementations(frame, f"{benchmark} bs{int(batch)}: implementations")
        run.log_figure(fig, f"plots/{benchmark}_bs{int(batch)}_implementations.png")
        plt.close(fig)
        figures += 1
    return figures


def print_comparison(
    run_name: str, run_id: str, runs: pd.DataFrame, tables: dict, problems: list, out_dir: Path
) -> None:
    wanted = ("kind", "benchmark", "implementation", "system", "batch_size", "total_time_ms", "time_per_sample_ms",
              "partial_total_time_ms",
              "step_time_s_median", "samples_per_s_median", "step_time_predicted_ms", "step_time_measured_ms",
              "bandwidth_gbs", "noisy", "repeats")  # fmt: skip
    shown = [c for c in wanted if c in runs.columns]
    superseded = int((runs["superseded_by"] != "").sum())
    with pd.option_context("display.width", 200, "display.max_rows", 60, "display.max_colwidth", 40):
        print(f"\n{run_name} (MLflow run {run_id}): {len(runs)} runs; tables in {out_dir}")
        if superseded:
            print(f"{superseded} run(s) repeat a configuration: the newest finished run of each is compared "
                  "(runs.csv: superseded_by)")  # fmt: skip
        print(runs.loc[runs["superseded_by"] == "", shown].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        noisy = int(runs.loc[runs["superseded_by"] == "", "noisy"].sum()) if "noisy" in runs else 0
        if noisy:
            print(f"{noisy} run(s) measured on a busy machine (noisy: tag dlbench.noisy): drawn hollow in the plots")
        marked = tables["by_batch_size.csv"]
        marked = marked[marked["marked"] != ""] if "marked" in marked else marked.iloc[0:0]
        if len(marked):
            print(
                f"{len(marked)} operation(s) with a number that is not ok (by_batch_size.csv: marked; hollow in "
                "the plots): " + "; ".join(f"{r.key} ({r.marked})" for r in marked.head(10).itertuples())
            )
        side = tables["implementations.csv"]
        if not side.empty:
            print("\nimplementations side by side (median ms):")
            print(side.head(40).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in problems[:30]:
            print(f"  {p['run_name'] or p['run_id']}: {p['problem']}")
