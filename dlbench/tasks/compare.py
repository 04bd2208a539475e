"""task=compare: tables and plots across runs, systems, implementations and batch sizes, logged as a run
of its own (tag dlbench.kind=compare) so the comparison can itself be found and compared. Where a
configuration was run more than once, the newest finished run stands for it; runs.csv lists the others
(``superseded_by``). With ``compare.baseline``, every operation and total of B is judged against A with its
interval (``changes.csv``, a forest plot); ``compare.fail_on`` makes that a regression gate (exit 1). With
``compare.a`` / ``compare.b`` and a benchmark, A and B are measured in this run, round by round, each side a
child run as a sweep's; B / A is taken per round."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.errors import TaskFailed

log = logging.getLogger(__name__)

MAX_FIGURES = 12


def run(cfg: DlbenchConfig, ctx: AppContext) -> int:
    if cfg.compare.a.given() or cfg.compare.b.given():
        return run_interleaved(cfg, ctx)
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


def run_interleaved(cfg: DlbenchConfig, ctx: AppContext) -> int:
    """A and B of ``cfg.benchmark`` measured in one run, interleaved round by round
    (:func:`dlbench.operators.runner.measure_interleaved`); each side logged as a child run, as a sweep is;
    ``changes.csv`` from the paired rounds; the gate's exit status."""
    from dlbench.analysis.comparison.change import ChangeSettings
    from dlbench.analysis.comparison.interleaved import interleaved_changes
    from dlbench.analysis.comparison.report import log_changes
    from dlbench.analysis.comparison.sides import Judged, Pair, labelled
    from dlbench.core.device import resolve_device
    from dlbench.core.errors import ConfigurationError
    from dlbench.operators.compare_sides import differs
    from dlbench.operators.measure import raise_for_result
    from dlbench.operators.reference import reference_benchmarks
    from dlbench.operators.registry import load_registry
    from dlbench.operators.runner import measure_interleaved
    from dlbench.tracking.runs import open_run, run_place

    if cfg.benchmark is None:
        raise ConfigurationError("compare.a / compare.b measure a benchmark: add +benchmark=<name> (e.g. conv)")
    settings, bench = cfg.compare, cfg.benchmark
    device = resolve_device(cfg.device)
    registry = load_registry(ctx.config_dirs)
    a, b = (_side(cfg, registry, device, name) for name in ("a", "b"))
    label = f"{bench.name} bs{cfg.batch_size}"
    pair_differs = differs(a.description, b.description)
    params = {
        "benchmark": bench.name,
        "rounds": settings.rounds,
        "threshold": settings.threshold,
        **{f"a.{k}": v for k, v in a.description.items()},
        **{f"b.{k}": v for k, v in b.description.items()},
    }
    name = f"compare-{a.side.benchmark.name}-vs-{b.side.benchmark.name}"
    place = run_place(cfg, ctx)
    with open_run(cfg, ctx, kind="compare", benchmark=bench.name, name=name, params=params) as run:
        (result_a, files_a), (result_b, files_b), orders = measure_interleaved(
            a.side, b.side, ctx.output_dir / "protocol", reference_benchmarks(registry, device)
        )
        run.log_params({"orders": "".join(o[0] for o in orders)})  # per round, which side ran first
        logged = [
            _log_side(cfg, ctx, run.run_id, s, r, f) for s, r, f in ((a, result_a, files_a), (b, result_b, files_b))
        ]
        (id_a, name_a, why_a), (id_b, name_b, why_b) = logged
        for side, result in ((a, result_a), (b, result_b)):
            if result.interrupted:  # logged as far as measured; Ctrl-C stays Ctrl-C
                raise_for_result(side.side.benchmark.name, result)
        # a busy machine or a contended operation is said, not a reason to leave the pair unjudged: the busy
        # spells both sides of a round share cancel (the rounds are paired, in a random order)
        info = why_a.merge(why_b, on=["id", "key", "count"], how="outer", suffixes=("_a", "_b"))
        info = info.rename(columns={"why_a": "note_a", "why_b": "note_b"}).fillna({"note_a": "", "note_b": ""})
        change = ChangeSettings(settings.threshold, settings.confidence, settings.resamples, settings.seed)
        rounds = [pd.read_csv(f.rounds_csv, comment="#") for f in (files_a, files_b)]
        changes = interleaved_changes(rounds[0], rounds[1], info, change)
        pair = Pair(label, (id_a,), (id_b,), pair_differs, (name_a,), (name_b,))
        changes = labelled(changes, pair, info.set_index("key")["id"], several=False)
        method = (f"A and B ran back to back in each of {settings.rounds} rounds, in a random order per round; "
                  "ratios are the geometric mean of the rounds' B / A of medians, with the wider of the rounds' "
                  "bootstrap and Student's t 95% interval.")  # fmt: skip
        judged = Judged(changes, (pair,), pd.DataFrame(columns=["field", "A", "B"]), (), method=method)
        shown = SimpleNamespace(baseline=f"{name_a}: {a.side.benchmark.name}", threshold=settings.threshold,
                                candidate=f"{name_b}: {b.side.benchmark.name}", fail_on=settings.fail_on)  # fmt: skip
        out_dir = ctx.output_dir / "compare"
        out_dir.mkdir(parents=True, exist_ok=True)
        return log_changes(run, judged, shown, out_dir, place.experiment_id)


def _side(cfg: DlbenchConfig, registry, device: str, name: str):
    """``compare.<name>`` resolved: its benchmark, settings and operations."""
    from dlbench.core.errors import ConfigurationError
    from dlbench.operators.compare_sides import resolved, side_benchmark, side_settings
    from dlbench.operators.runner import run_settings
    from dlbench.operators.workload import operations_from_benchmark

    assert cfg.benchmark is not None
    side = getattr(cfg.compare, name)
    key = f"compare.{name}"
    entry = side_benchmark(registry, cfg.benchmark.op_type, side, cfg.backend, device, key)
    settings = side_settings(run_settings(cfg, device), side, cfg.compare.rounds, side.python)
    operations = operations_from_benchmark(cfg.benchmark, settings.dtype)
    if len(operations) < 2:
        raise ConfigurationError(f"{key}: {cfg.benchmark.name} has one operation; rounds interleave two or more")
    return resolved(name.upper(), entry, operations, settings, side, f"{name.upper()}_{entry.name}")


def _log_side(cfg: DlbenchConfig, ctx: AppContext, parent: str, side, result, files):
    """One side as a child run of the comparison, logged as a sweep is; its run id, name, and per operation
    ``id, key, count, why`` (a reason its number is not clean)."""
    from dlbench.analysis.comparison.sides import recorded_from
    from dlbench.analysis.report import log_sweep, log_workload
    from dlbench.operators.measure import sweep_params
    from dlbench.tracking.runs import open_run

    entry, settings = side.side.benchmark, side.side.settings
    side_cfg = replace(cfg, threads=settings.threads, dtype=settings.dtype)
    assert cfg.benchmark is not None
    params = {**sweep_params(side_cfg, entry, cfg.benchmark.name, len(side.side.operations), settings.device),
              "compare.side": side.name, **{f"side.{k}": v for k, v in side.description.items() if v}}  # fmt: skip
    name = f"{side.name}-{entry.name}-{cfg.benchmark.name}"
    with open_run(side_cfg, ctx, kind="operator_sweep", benchmark=cfg.benchmark.name, name=name, params=params,
                  implementation=entry.name, parent_run_id=parent) as child:  # fmt: skip
        log_workload(child, side.side.operations, cfg.benchmark.name, f"benchmark/{cfg.benchmark.name}.yaml")
        frame = log_sweep(child, side_cfg, side.side.operations, result, files, child.run_name)
        recorded = recorded_from(frame, None, child.run_id, result.interference.noisy if result.interference else False)
    return child.run_id, child.run_name, recorded.operations[["id", "key", "count", "why"]]
