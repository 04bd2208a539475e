"""Resuming a sweep: only what an earlier, failed run of the same sweep did not measure is measured again."""

from __future__ import annotations

import csv
import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import FAST, Store, artifact_text, clean_env, mlflow_runs, run_dlbench, write_fake_benchmark


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


SLOW_BENCHMARK = """\
import sys, time
path = sys.argv[-1]
rows = [line.split(",")[0] for line in open(path) if line.strip()]
with open(path[:-4] + "_out.csv", "w") as out:
    out.write("id,ms\\n")
    for op_id in rows:
        time.sleep({row_s})
        out.write(f"{{op_id}},1.5\\n")
        out.flush()
"""


def _write_slow_benchmark(directory: Path, row_s: float) -> Path:
    conf = write_fake_benchmark(directory, name="slow")  # the registry entry; the script is replaced below
    (directory / "slow.py").write_text(SLOW_BENCHMARK.format(row_s=row_s))
    return conf


@pytest.mark.slow
def test_sweep_stopped_by_sigterm_ends_killed_and_a_resumed_run_measures_the_rest(tmp_path: Path, store: Store) -> None:
    sweep = ("+benchmark=relu", "backend=custom", "batch_size=1", *FAST, "resume=true")
    conf = _write_slow_benchmark(tmp_path / "conf", row_s=0.5)
    process = subprocess.Popen(
        [sys.executable, "-m", "dlbench", *sweep, "--config-dir", str(conf)],
        cwd=tmp_path,
        env=clean_env(**store.env()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        outputs = list(tmp_path.glob(".dlbench/runs/*/protocol/slow_relu_out.csv"))
        if outputs and outputs[0].read_text().count("\n") >= 3:  # header and two rows
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0, stderr
    (killed,) = mlflow_runs(store)
    assert killed.info.status == "KILLED"
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, killed.info.run_id, "results.csv"))))
    done = [int(r["id"]) for r in rows if r["status"] == "ok"]
    assert done[:2] == [0, 1] and len(done) < 6

    _write_slow_benchmark(tmp_path / "conf", row_s=0)
    second = run_dlbench(*sweep, "--config-dir", str(conf), cwd=tmp_path, store=store)
    assert second.returncode == 0, second.stderr
    resumed, _ = mlflow_runs(store)
    assert resumed.data.tags["dlbench.resumed_from"] == killed.info.run_id
    assert _input_ids(store, resumed.info.run_id, "slow_relu") == [i for i in range(6) if i not in done]
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, resumed.info.run_id, "results.csv"))))
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows)
    assert {r["source_run_id"] for r in rows if int(r["id"]) in done} == {killed.info.run_id}
