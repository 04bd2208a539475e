"""task=compare: runs found through MLflow's search API, sorted tables across batch sizes and implementations
with operation names, training runs beside operator sweeps, repeated configurations resolved by a stated rule
(the newest finished run), problems listed rather than fatal."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

from dlbench.analysis.comparison.runs import (
    by_batch_size,
    check_metrics,
    current,
    evaluation_totals,
    implementations_side_by_side,
    left_out_totals,
    mark_repeats,
    results_in_ms,
    run_table,
    run_totals,
    training_totals,
)
from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget


def table(store: Store, run_id: str, name: str) -> pd.DataFrame:
    return pd.read_csv(StringIO(artifact_text(store, run_id, name)))


@pytest.mark.slow  # two real sweeps, then the comparison: three dlbench processes
def test_compare_tabulates_sweeps_across_batch_sizes_and_lists_runs_it_cannot_use(tmp_path: Path, store: Store):
    sweep = run_dlbench("-m", "+benchmark=relu", "batch_size=1,2", *FAST, cwd=tmp_path, store=store)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    target = TrackingTarget(store.uri, store.experiment)
    tags = {"dlbench.kind": "operator_sweep", "dlbench.benchmark": "relu", "dlbench.implementation": "torch_relu"}
    with TrackedRun(target, "relu-without-metrics", params={"batch_size": 4}, tags=tags) as broken:
        pass  # finished, but neither total_ms nor results.csv
    with TrackedRun(target, "relu-in-microseconds", params={"batch_size": 8}, tags=tags) as micro:
        micro.log_metrics({"total_ms": 1.0, "network_total_ms": 2.0})  # a run made before the metrics' renaming
        micro.log_table(
            pd.DataFrame({"id": [0], "name": ["a"], "median_us": [1500.0], "status": ["ok"]}), "results.csv"
        )

    result = run_dlbench("task=compare", "compare.benchmarks=[relu]", cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr[-2000:]
    compare = next(r for r in mlflow_runs(store) if r.data.tags.get("dlbench.kind") == "compare")
    assert compare.info.status == "FINISHED"
    assert compare.data.metrics["runs_compared"] == 4

    by_batch = table(store, compare.info.run_id, "tables/by_batch_size.csv")
    assert {"bs1", "bs2", "bs8"} <= set(by_batch.columns)
    measured = by_batch.dropna(subset=["bs1", "bs2"])
    assert len(measured) >= 1 and (measured["bs1"] > 0).all()
    operations = table(store, compare.info.run_id, "tables/operations.csv")
    assert operations.loc[operations["run_id"] == micro.run_id, "median_ms"].tolist() == [1.5]

    problems = table(store, compare.info.run_id, "tables/problems.csv")
    about_broken = " ".join(problems.loc[problems["run_id"] == broken.run_id, "problem"])
    assert "metric total_time_ms is missing" in about_broken and "no results.csv" in about_broken
    assert "converted from median_us" in " ".join(problems.loc[problems["run_id"] == micro.run_id, "problem"])

    from mlflow.tracking import MlflowClient

    plots = [a.path for a in MlflowClient(tracking_uri=store.uri).list_artifacts(compare.info.run_id, "plots")]
    assert "plots/relu_time_vs_batch.png" in plots
    assert "problem(s):" in result.stdout


def test_compare_with_nothing_to_compare_fails_with_what_it_searched(tmp_path: Path, store: Store):
    result = run_dlbench("task=compare", "compare.filter=\"params.batch_size = '999'\"", cwd=tmp_path, store=store)
    assert result.returncode != 0
    assert "no runs to compare" in result.stderr and store.experiment in result.stderr


def test_time_columns_in_other_units_are_converted_and_disagreeing_ones_refused():
    converted, notes = results_in_ms(pd.DataFrame({"median_s": [0.5]}), "run x")
    assert converted["median_ms"].tolist() == [500.0] and "converted from median_s" in notes[0]
    same, notes = results_in_ms(pd.DataFrame({"median_ms": [2.0], "median_us": [2000.0]}), "run y")
    assert same["median_ms"].tolist() == [2.0] and not notes
    refused, notes = results_in_ms(pd.DataFrame({"median_ms": [2.0], "median_us": [2.0]}), "run z")
    assert refused.empty and "mixed units" in notes[0]
    missing, notes = results_in_ms(pd.DataFrame({"time": [1.0]}), "run w")
    assert missing.empty and "no median_<unit> time column" in notes[0]


def test_implementations_are_set_side_by_side_with_ratios_to_torch():
    operations = pd.DataFrame(
        {
            "benchmark": ["conv"] * 4,
            "system": ["s"] * 4,
            "batch_size": [8] * 4,
            "dtype": ["float32"] * 4,
            "id": [0, 1, 0, 1],
            "key": ["stem", "l1", "stem", "l1"],
            "implementation": ["torch_conv", "torch_conv", "onednn_conv", "onednn_conv"],
            "median_ms": [2.0, 4.0, 1.0, 5.0],
        }
    )
    side = implementations_side_by_side(operations).set_index("key")
    assert side.loc[["stem", "l1"], "onednn_conv_over_torch_conv"].tolist() == [0.5, 1.25]
    assert implementations_side_by_side(operations[operations["implementation"] == "torch_conv"]).empty


def test_evaluations_give_predicted_and_measured_step_times_per_batch_size():
    runs = pd.DataFrame(
        {
            "kind": ["evaluation", "evaluation", "operator_sweep"],
            "benchmark": ["mlp", "mlp", "relu"],
            "system": ["s", "s", "s"],
            "batch_size": [16, 32, 16],
            "step_time_predicted_ms": [10.0, 20.0, None],
            "step_time_measured_ms": [11.0, None, None],
        }
    )
    totals = evaluation_totals(runs)
    assert sorted(totals["series"].unique()) == ["s | measured", "s | predicted"]
    assert totals.loc[totals["series"] == "s | predicted", "step_ms"].tolist() == [10.0, 20.0]
    assert len(totals) == 3  # the missing measured value is left out, not plotted as zero


def _found(rows: list[dict]) -> pd.DataFrame:
    """Search results as ``tracking.search_runs`` returns them."""
    base = {"status": "FINISHED", "tags.system.id": "s", "params.dtype": "float32", "params.device": "cpu",
            "params.threads": "0", "tags.dlbench.implementation": "torch_relu"}  # fmt: skip
    return pd.DataFrame([{**base, **row} for row in rows])


def test_a_repeated_configuration_is_represented_by_its_newest_finished_run():
    found = _found(
        [
            {"run_id": "old", "start_time": 1, "tags.dlbench.kind": "operator_sweep", "tags.dlbench.benchmark": "relu",
             "params.batch_size": "8", "metrics.total_time_ms": 10.0},
            {"run_id": "new", "start_time": 2, "tags.dlbench.kind": "operator_sweep", "tags.dlbench.benchmark": "relu",
             "params.batch_size": "8", "metrics.total_time_ms": 12.0},
            {"run_id": "crashed", "start_time": 3, "status": "FAILED", "tags.dlbench.kind": "operator_sweep",
             "tags.dlbench.benchmark": "relu", "params.batch_size": "8"},
            {"run_id": "other", "start_time": 1, "tags.dlbench.kind": "operator_sweep",
             "tags.dlbench.benchmark": "relu", "params.batch_size": "16", "metrics.total_time_ms": 30.0},
        ]
    )  # fmt: skip
    runs = mark_repeats(run_table(found))
    marked = runs.set_index("run_id")
    assert marked.loc["old", "superseded_by"] == "new" and marked.loc["crashed", "superseded_by"] == "new"
    assert marked.loc["new", "superseded_by"] == "" and marked.loc["new", "repeats"] == 3
    assert sorted(current(runs)["run_id"]) == ["new", "other"]
    assert current(runs)["batch_size"].tolist() == [8, 16], "sorted by batch size"


def test_runs_made_before_the_renaming_are_read_under_the_new_metric_names():
    found = _found(
        [{"run_id": "r", "start_time": 1, "tags.dlbench.kind": "operator_sweep", "tags.dlbench.benchmark": "relu",
          "params.batch_size": "8", "metrics.network_total_ms": 5.0, "metrics.total_ms": 3.0}]
    )  # fmt: skip
    runs = run_table(found)
    assert runs.loc[0, "total_time_ms"] == 5.0 and runs.loc[0, "distinct_operations_time_ms"] == 3.0
    assert "network_total_ms" not in runs.columns


def test_training_runs_and_evaluations_give_step_time_and_samples_per_second_against_batch_size():
    found = _found(
        [
            {"run_id": "t8", "start_time": 1, "tags.dlbench.kind": "training", "tags.dlbench.benchmark": "mlp",
             "params.batch_size": "8", "metrics.step_time_s_median": 0.02, "metrics.samples_per_s_median": 390.0},
            {"run_id": "t16", "start_time": 2, "tags.dlbench.kind": "training", "tags.dlbench.benchmark": "mlp",
             "params.batch_size": "16", "metrics.step_time_s_median": 0.03, "metrics.samples_per_s_median": 530.0},
            {"run_id": "e16", "start_time": 3, "tags.dlbench.kind": "evaluation", "tags.dlbench.benchmark": "mlp",
             "params.batch_size": "16", "metrics.step_time_measured_ms": 40.0},
        ]
    )  # fmt: skip
    totals = training_totals(current(mark_repeats(run_table(found))))
    training = totals[totals["series"] == "s | training"]
    assert training["batch_size"].tolist() == [8, 16]
    assert training["step_time_ms"].tolist() == pytest.approx([20.0, 30.0])
    assert training["samples_per_s"].tolist() == [390.0, 530.0]
    evaluation = totals[totals["series"] == "s | evaluation"]
    assert evaluation["samples_per_s"].tolist() == pytest.approx([16 / 0.04])


def test_operation_table_across_batch_sizes_is_sorted_and_names_each_operation():
    operations = pd.DataFrame(
        {
            "benchmark": ["relu"] * 4,
            "system": ["s"] * 4,
            "implementation": ["torch_relu"] * 4,
            "dtype": ["float32"] * 4,
            "batch_size": [2, 2, 1, 1],
            "id": [1, 0, 1, 0],
            "key": ["l1_64", "stem", "l1_64", "stem"],
            "median_ms": [4.0, 2.0, 3.0, 1.0],
        }
    )
    table = by_batch_size(operations)
    assert table["key"].tolist() == ["stem", "l1_64"] and table.columns[-3:].tolist() == ["bs1", "bs2", "marked"]
    assert table["marked"].tolist() == ["", ""], "no status column: an executable's times, nothing to mark"
    assert table.set_index("key").loc["l1_64", "bs2"] == 4.0


def test_contended_operations_and_noisy_runs_stay_in_the_tables_marked_and_plot_hollow(tmp_path: Path):
    from dlbench.analysis.comparison.runs import operation_table, run_totals
    from dlbench.analysis.plots import plot_time_vs_batch

    found = pd.DataFrame(
        [{"run_id": f"r{b}", "tags.mlflow.runName": f"conv-bs{b}", "status": "FINISHED",
          "tags.dlbench.kind": "operator_sweep", "tags.dlbench.benchmark": "conv", "tags.dlbench.implementation": "t",
          "tags.system.id": "s", "params.batch_size": str(b), "params.dtype": "float32", "start_time": b,
          "tags.dlbench.noisy": noisy, "metrics.total_time_ms": 10.0 * b, "metrics.operations_ok": 2.0,
          "metrics.operations_contended": contended}
         for b, noisy, contended in ((1, "false", 0.0), (4, "true", 0.0), (16, "false", 1.0))]
    )  # fmt: skip
    results = {
        f"r{b}": pd.DataFrame({"id": [0, 1, 2], "key": ["l1_3x3", "l4_reduce", "fc"], "name": ["a", "b", "c"],
                               "count": [1, 1, 1], "median_ms": [1.0 * b, 2.0 * b, None],
                               "status": [status, "ok", "failed"], "error": ["", "", "out of memory"]})
        for b, status in ((1, "ok"), (4, "ok"), (16, "contended"))
    }  # fmt: skip
    runs = mark_repeats(run_table(found))
    assert runs["noisy"].tolist() == [False, True, False]
    operations, problems = operation_table(runs, results.__getitem__)
    assert operations.loc[operations["status"] == "contended", "median_ms"].tolist() == [16.0], "kept, not dropped"
    assert [p["problem"] for p in problems] == ["operation 2 failed: out of memory"] * 3
    table = by_batch_size(operations).set_index("key")
    assert table.loc["l1_3x3", "marked"] == "bs4: noisy run; bs16: contended"
    assert table.loc["l4_reduce", "marked"] == "bs4: noisy run"
    totals = run_totals(runs)
    assert totals["marked"].tolist() == [False, True, True], "a noisy run, and a total with a contended operation"

    figure = plot_time_vs_batch(totals, "conv: total", value="total_time_ms")
    figure.savefig(tmp_path / "total.png")
    (axes,) = figure.axes
    hollow = [line for line in axes.lines if line.get_markerfacecolor() == "white"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [4, 16]
    assert axes.get_legend().get_texts()[-1].get_text().startswith("hollow: not ok")


def test_no_two_series_of_a_legend_share_colour_and_marker():
    from dlbench.analysis.plots import plot_sweep_operations, series_styles

    assert len(set(series_styles(40))) == 40
    keys = [f"op{i}" for i in range(12)]  # more than the ten default colours
    operations = pd.DataFrame({"key": keys * 2, "batch_size": [1] * 12 + [4] * 12, "median_ms": range(1, 25),
                               "time_per_sample_ms": range(1, 25), "gflops_per_s": range(1, 25)})  # fmt: skip
    jobs = pd.DataFrame({"batch_size": [1, 4], "total_time_ms": [10.0, 40.0]})
    figure = plot_sweep_operations(operations, jobs, "batch_size", "batch size", "twelve operations")
    handles = figure.legends[0].legend_handles
    looks = {(h.get_color(), h.get_marker(), h.get_linestyle()) for h in handles}
    assert len(handles) == 12 and len(looks) == 12


def test_partial_totals_are_never_compared_or_plotted_as_complete_ones():
    sweep = {"tags.dlbench.kind": "operator_sweep", "tags.dlbench.benchmark": "relu"}
    found = _found(
        [
            {"run_id": "whole", "start_time": 1, **sweep, "params.batch_size": "8", "metrics.total_time_ms": 10.0,
             "metrics.totals_complete": 1.0, "metrics.operations_failed": 0.0},
            {"run_id": "holes", "start_time": 2, **sweep, "params.batch_size": "16",
             "metrics.partial_total_time_ms": 4.0, "metrics.totals_complete": 0.0, "metrics.operations_failed": 2.0},
            # logged before totals said whether they are complete: its total_time_ms summed the ok rows only
            {"run_id": "old", "start_time": 3, **sweep, "params.batch_size": "32", "metrics.total_time_ms": 7.0,
             "metrics.time_per_sample_ms": 0.2, "metrics.operations_failed": 1.0},
            {"run_id": "old_whole", "start_time": 4, **sweep, "params.batch_size": "64",
             "metrics.total_time_ms": 50.0, "metrics.operations_failed": 0.0},
        ]
    )  # fmt: skip
    runs = mark_repeats(run_table(found)).set_index("run_id")
    assert runs["totals_complete"].to_dict() == {"whole": 1.0, "holes": 0.0, "old": 0.0, "old_whole": 1.0}
    assert runs.loc["old", "partial_total_time_ms"] == 7.0 and pd.isna(runs.loc["old", "total_time_ms"])
    assert pd.isna(runs.loc["old", "time_per_sample_ms"])
    totals = run_totals(runs.reset_index())
    assert sorted(totals["batch_size"]) == [8, 64], "only complete totals are plotted"
    assert left_out_totals(runs.reset_index()) == {"relu": 2}
    problems = " ".join(p["problem"] for p in check_metrics(runs.reset_index()) if p["run_id"] == "old")
    assert "total_time_ms is NA" in problems and "partial_total_time_ms 7 ms" in problems
