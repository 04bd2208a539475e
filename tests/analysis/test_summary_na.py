"""A statistic the executable did not report reads NA in the summary table and stays empty in results.csv;
a sweep with an operation that got no time says its total is NA and logs the partial sum under its own name."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench, write_fake_benchmark


def _table_lines(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["id", "name", "median_ms"])
    return lines[start : start + 7]


def test_an_executable_reporting_only_times_shows_na_for_every_other_statistic(tmp_path: Path, store: Store):
    conf = write_fake_benchmark(tmp_path / "conf")  # writes `id,us` only
    result = run_dlbench("+benchmark=relu", "backend=custom", f"--config-dir={conf}", *FAST, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr[-2000:]
    table = _table_lines(result.stdout)
    assert "None" not in "\n".join(table) and "<NA>" not in "\n".join(table)
    header, *rows = table
    assert header.split() == ["id", "name", "median_ms", "min_ms", "p10_ms", "p90_ms", "rel_ci", "reps",
                              "gflops_per_s", "status"]  # fmt: skip
    assert all(row.split()[3:8] == ["NA"] * 5 for row in rows)
    (run,) = mlflow_runs(store)
    results = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    assert all(r["min_ms"] == "" and r["reps"] == "" and float(r["median_ms"]) > 0 for r in results)
    assert run.data.metrics["totals_complete"] == 1 and run.data.metrics["total_time_ms"] > 0


def test_a_sweep_with_an_operation_left_out_logs_no_total_but_the_partial_sum(tmp_path: Path, store: Store):
    conf = write_fake_benchmark(tmp_path / "conf", behaviour="skip_second")
    result = run_dlbench("+benchmark=relu", "backend=custom", f"--config-dir={conf}", *FAST, cwd=tmp_path, store=store)
    (run,) = mlflow_runs(store)
    metrics = run.data.metrics
    assert metrics["operations_failed"] == 1 and metrics["operations_missing"] == 1, result.stderr[-2000:]
    assert "total_time_ms" not in metrics and "time_per_sample_ms" not in metrics
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    measured = sum(float(r["median_ms"]) * int(r["count"]) for r in rows if r["status"] == "ok")
    assert metrics["partial_total_time_ms"] == float(f"{measured:.4g}") and metrics["totals_complete"] == 0
    note = run.data.tags["mlflow.note.content"]
    assert "**Total time**: NA, 1 operation(s) without a time" in note
