"""A sweep on a busy machine, where every operation's threads waited for cores (status ``contended``): it still
gives its totals (with the contended operations, an upper bound; without them, where any other has a time),
its plot (the contended operations marked) and a summary that says what its table shows."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pandas as pd
import pytest
from helpers import REPO, Store, artifact_text, mlflow_runs, run_dlbench

CONTENDED_CONF = REPO / "tests" / "data" / "contended"


def test_a_jobs_total_over_contended_operations_is_drawn_hollow_beside_clean_ones() -> None:
    from dlbench.analysis.plots import plot_sweep_operations

    operations = pd.DataFrame({"key": ["a", "a"], "batch_size": [1, 4], "median_ms": [1.0, 4.0],
                               "time_per_sample_ms": [1.0, 1.0], "gflops_per_s": [2.0, 2.0],
                               "marked": [False, True]})  # fmt: skip
    jobs = pd.DataFrame({"batch_size": [1, 4], "total_time_ms": [10.0, None], "time_per_sample_ms": [10.0, None],
                         "total_time_with_contended_ms": [None, 40.0],
                         "time_per_sample_with_contended_ms": [None, 10.0]})  # fmt: skip
    figure = plot_sweep_operations(operations, jobs, "batch_size", "batch size", "relu")
    totals = figure.axes[3]
    drawn = [line for line in totals.lines if line.get_markerfacecolor() != "white"]
    hollow = [line for line in totals.lines if line.get_markerfacecolor() == "white"]
    assert [list(line.get_xdata()) for line in drawn] == [[1, 4], [1, 4]], "both jobs' totals, both series"
    assert [list(line.get_xdata()) for line in hollow] == [[4], [4]], "the upper bound hollow"
    assert [list(line.get_ydata()) for line in drawn][0] == [10.0, 40.0]


@pytest.mark.slow
def test_a_sweep_with_every_operation_contended_exits_0_with_totals_a_plot_and_an_agreeing_summary(
    tmp_path: Path, store: Store
) -> None:
    # tests/data/contended/waiting_relu.py sleeps as long as it computes: its CPU efficiency (about 0.5, reported
    # per row) is below the default threshold, so every operation is contended, on a quiet machine or a busy one
    fast = ("measure.warmup=1", "measure.min_reps=2", "measure.min_time_s=0", "measure.rounds=1", "quiet=true")
    result = run_dlbench("+benchmark=relu", "backend=waiting", "batch_size=1", f"--config-dir={CONTENDED_CONF}",
                         *fast, cwd=tmp_path, store=store)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = mlflow_runs(store)
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    assert rows and {r["status"] for r in rows} == {"contended"}
    metrics = run.data.metrics
    upper = sum(float(r["median_ms"]) * int(r["count"]) for r in rows)
    assert math.isclose(metrics["total_time_with_contended_ms"], upper, rel_tol=1e-3)
    assert metrics["time_per_sample_with_contended_ms"] == pytest.approx(metrics["total_time_with_contended_ms"])
    assert metrics["operations_contended"] == len(rows) and metrics["operations_without_time"] == 0
    assert "total_time_ms" not in metrics and "partial_total_time_ms" not in metrics
    artifacts = [a.path for a in __import__("mlflow").tracking.MlflowClient(store.uri).list_artifacts(run.info.run_id)]
    assert "results.png" in artifacts, "the plot, contended bars marked"
    total = f"{float(f'{upper:.4g}'):.4g} ms"
    note = run.data.tags["mlflow.note.content"]
    assert f"{len(rows)} contended" in note and f"with the contended ones {total}, an upper bound" in note
    assert "without a time" not in note, "every operation has a time in the table"
    printed = next(line for line in result.stdout.splitlines() if line.startswith("Total time"))
    assert f"{len(rows)} contended" in printed and total in printed
