"""task=compare: runs found through MLflow's search API, tables across batch sizes and implementations,
problems listed rather than fatal."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

from dlbench.analysis.compare import evaluation_totals, implementations_side_by_side, results_in_ms
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
        micro.log_metrics({"total_ms": 1.0, "network_total_ms": 2.0})
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
    assert "metric total_ms is missing" in about_broken and "no results.csv" in about_broken
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
            "implementation": ["torch_conv", "torch_conv", "onednn_conv", "onednn_conv"],
            "median_ms": [2.0, 4.0, 1.0, 5.0],
        }
    )
    side = implementations_side_by_side(operations).set_index("id")
    assert side["onednn_conv_over_torch_conv"].tolist() == [0.5, 1.25]
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
