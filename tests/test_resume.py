"""Resuming a sweep: only what an earlier, failed run of the same sweep did not measure is measured again."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench, write_fake_benchmark


def _input_ids(store: Store, run_id: str, stem: str) -> list[int]:
    text = artifact_text(store, run_id, f"protocol/{stem}.csv")
    return [int(line.split(",")[0]) for line in text.splitlines() if line.strip()]


@pytest.mark.slow
def test_resumed_sweep_measures_only_the_operations_the_crashed_run_missed(tmp_path: Path, store: Store) -> None:
    sweep = ("+benchmark=relu", "backend=custom", "batch_size=1", *FAST, "resume=true")
    conf = write_fake_benchmark(tmp_path / "conf", name="flaky", behaviour="crash_after_first")
    first = run_dlbench(*sweep, "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert first.returncode != 0 and "was killed by SIGSEGV" in first.stderr
    (crashed,) = mlflow_runs(store)
    assert crashed.info.status == "FAILED"
    assert "dlbench.resumed_from" not in crashed.data.tags, "nothing earlier to resume from: measured everything"
    assert _input_ids(store, crashed.info.run_id, "flaky_relu") == [0, 1, 2, 3, 4, 5]

    write_fake_benchmark(tmp_path / "conf", name="flaky", behaviour="ok")  # the same implementation, fixed
    second = run_dlbench(*sweep, "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert second.returncode == 0, second.stderr
    resumed, _ = mlflow_runs(store)
    assert resumed.info.status == "FINISHED"
    assert resumed.data.tags["dlbench.resumed_from"] == crashed.info.run_id
    assert _input_ids(store, resumed.info.run_id, "flaky_relu") == [1, 2, 3, 4, 5], "id 0 was measured already"
    assert resumed.data.metrics["operations_resumed"] == 1 and resumed.data.metrics["operations_ok"] == 6
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, resumed.info.run_id, "results.csv"))))
    assert [r["id"] for r in rows] == ["0", "1", "2", "3", "4", "5"]
    assert all(r["status"] == "ok" for r in rows)
    sources = {r["id"]: r["source_run_id"] for r in rows}
    assert sources["0"] == crashed.info.run_id
    assert {sources[i] for i in "12345"} == {resumed.info.run_id}
    # the kept row is the crashed run's own measurement: 1000 us * (1 + N + C + H + W + mode)
    assert float(rows[0]["median_ms"]) == 1 + 1 + 64 + 112 + 112 + 0


@pytest.mark.slow
def test_resume_ignores_runs_of_another_batch_size(tmp_path: Path, store: Store) -> None:
    conf = write_fake_benchmark(tmp_path / "conf", name="flaky", behaviour="crash_after_first")
    first = run_dlbench(
        "+benchmark=relu", "backend=custom", "batch_size=1", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    assert first.returncode != 0
    write_fake_benchmark(tmp_path / "conf", name="flaky", behaviour="ok")
    other = run_dlbench(
        "+benchmark=relu",
        "backend=custom",
        "batch_size=2",
        *FAST,
        "resume=true",
        "--config-dir",
        str(conf),
        cwd=tmp_path,
        store=store,
    )
    assert other.returncode == 0, other.stderr
    newest, _ = mlflow_runs(store)
    assert "dlbench.resumed_from" not in newest.data.tags
    assert _input_ids(store, newest.info.run_id, "flaky_relu") == [0, 1, 2, 3, 4, 5]
