"""No run left RUNNING: runs beat while their job lives; a job killed by SIGKILL leaves its run silent, and
task=gc, the start of the next multirun and resume=true end it FAILED ("heartbeat lost")."""

from __future__ import annotations

import csv
import io
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers import FAST, Store, artifact_text, clean_env, job_runs, mlflow_runs, run_dlbench, write_fake_benchmark

from dlbench.config import GcConfig
from dlbench.tracking.heartbeat import HEARTBEAT_TAG, beat_tags, mark_lost_runs
from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget, mlflow_client, prepare_store

SLOW_RELU = """\
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


def _slow_benchmark(directory: Path, row_s: float) -> Path:
    conf = write_fake_benchmark(directory, name="slow")
    (directory / "slow.py").write_text(SLOW_RELU.format(row_s=row_s))
    return conf


def _target(store: Store) -> TrackingTarget:
    return TrackingTarget(store.uri, store.experiment)


def _beat(store: Store, run_id: str) -> float:
    return float(mlflow_client(_target(store)).get_run(run_id).data.tags[HEARTBEAT_TAG])


def test_a_ctrl_c_while_a_new_run_is_filled_in_ends_it_killed(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    target = _target(store)
    prepare_store(target)

    def ctrl_c(self: TrackedRun, params: object) -> None:  # the interrupt arrives after the run was created
        raise KeyboardInterrupt

    monkeypatch.setattr(TrackedRun, "log_params", ctrl_c)
    with pytest.raises(KeyboardInterrupt), TrackedRun(target, "cut short", params={"batch_size": 8}):
        pytest.fail("the block never starts")
    (run,) = mlflow_runs(store)
    assert run.info.status == "KILLED" and run.data.tags["dlbench.error"] == "KeyboardInterrupt: "


def test_a_run_beats_while_it_lives_and_stops_beating_when_it_ends(store: Store) -> None:
    target = _target(store)
    prepare_store(target)
    with TrackedRun(target, "beating", heartbeat_s=0.2) as run:
        first = _beat(store, run.run_id)
        time.sleep(1.0)
        assert _beat(store, run.run_id) > first, "the tag moves while the run lives"
    last = _beat(store, run.run_id)
    time.sleep(0.6)
    assert _beat(store, run.run_id) == last, "no beat after the run ended"
    assert not [t for t in threading.enumerate() if t.name.startswith("dlbench-heartbeat")], "the thread stopped"


def test_gc_marks_only_running_runs_whose_heartbeat_stopped_longer_ago_than_stale_after_s(store: Store) -> None:
    target = _target(store)
    experiment_id = prepare_store(target)
    client = mlflow_client(target)
    now = time.time()

    def run(name: str, tags: dict[str, str]) -> str:
        return client.create_run(experiment_id, run_name=name, tags=tags).info.run_id

    dead = run("dead", {**beat_tags(1, now - 100), "host.name": "node7", "slurm.job_id": "4242"})
    recent = run("recent", beat_tags(1, now - 3))
    slow_beater = run("slow-beater", beat_tags(30, now - 40))  # silent 40 s, but it beats only every 30 s
    foreign = run("foreign", {})  # no heartbeat: not a dlbench run, never touched
    finished = run("finished", beat_tags(1, now - 100))
    client.set_terminated(finished, "FINISHED")
    with TrackedRun(target, "alive", heartbeat_s=0.2) as alive:
        lost = mark_lost_runs(target, stale_after_s=10)
        assert [r.run_id for r in lost] == [dead]
        status = {r.info.run_name: r.info.status for r in job_runs(store)}
        assert status == {
            "dead": "FAILED", "recent": "RUNNING", "slow-beater": "RUNNING", "foreign": "RUNNING",
            "finished": "FINISHED", "alive": "RUNNING",
        }  # fmt: skip
    assert alive.status == "FINISHED"
    marked = client.get_run(dead)
    assert marked.data.tags["dlbench.error"].startswith("heartbeat lost: no heartbeat for 10")
    assert "node7, Slurm job 4242" in marked.data.tags["dlbench.error"]
    assert abs(marked.info.end_time - (now - 100) * 1000) < 5, "it ended when it last beat"
    assert mark_lost_runs(target, stale_after_s=10) == [], "marking is done once"
    for run_id in (recent, slow_beater, foreign):
        client.set_terminated(run_id, "FINISHED")


def test_stale_after_s_below_two_heartbeats_is_refused_naming_both_keys() -> None:
    with pytest.raises(ValueError, match=r"gc\.stale_after_s=50 .*gc\.heartbeat_s=30"):
        GcConfig(stale_after_s=50, heartbeat_s=30)
    with pytest.raises(ValueError, match=r"gc\.heartbeat_s must be > 0"):
        GcConfig(heartbeat_s=0)


def _sigkill_mid_sweep(store: Store, cwd: Path, conf: Path, *overrides: str, rows: int = 2) -> str:
    """Start ``python -m dlbench OVERRIDES`` with the slow benchmark, SIGKILL it and its benchmark process (what
    the OOM killer or a lost node does) once ``rows`` operations are measured; return the run it left behind."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dlbench", "--config-dir", str(conf), *overrides, "gc.heartbeat_s=0.5"],
        cwd=cwd, env=clean_env(**store.env()), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            outputs = list(cwd.glob(".dlbench/**/protocol/slow_relu_out.csv"))
            if outputs and outputs[0].read_text().count("\n") > rows:  # the header and the rows
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the sweep measured nothing within 120 s")
    finally:
        for proc in [*psutil.Process(process.pid).children(recursive=True), psutil.Process(process.pid)]:
            proc.kill()
        process.wait()
    (left,) = [r for r in job_runs(store) if r.info.status == "RUNNING"]
    return left.info.run_id


@pytest.mark.slow
def test_the_next_multirun_marks_a_sigkilled_jobs_run_failed_before_it_starts(tmp_path: Path, store: Store) -> None:
    conf = _slow_benchmark(tmp_path / "conf", row_s=1.0)
    sweep = ("-m", "+benchmark=relu", "backend=custom", "batch_size=1,2", *FAST)
    killed = _sigkill_mid_sweep(store, tmp_path, conf, *sweep)
    time.sleep(2)
    _slow_benchmark(tmp_path / "conf", row_s=0)
    result = run_dlbench(
        "--config-dir", str(conf), "-m", "+benchmark=relu", "backend=custom", "batch_size=3", *FAST,
        "gc.heartbeat_s=0.5", "gc.stale_after_s=1", cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(rf"dlbench: run {killed} \(relu-slow-bs1-[^)]*\) marked FAILED: heartbeat lost", result.stderr)
    assert re.search(r"dlbench: run \w+ \(relu-sweep-bs1,2\) marked FAILED: heartbeat lost", result.stderr)
    runs = {r.info.run_id: r for r in job_runs(store)}
    assert runs[killed].info.status == "FAILED"
    assert [r.info.status for r in mlflow_runs(store)].count("RUNNING") == 0, "no run left RUNNING, the sweeps' own too"
    assert [r.data.params["batch_size"] for r in runs.values() if r.info.status == "FINISHED"] == ["3"]


@pytest.mark.slow
def test_resume_passes_over_a_sigkilled_run_to_the_earlier_one_that_kept_its_rows(tmp_path: Path, store: Store) -> None:
    conf = _slow_benchmark(tmp_path / "conf", row_s=1.0)
    sweep = ("+benchmark=relu", "backend=custom", "batch_size=1", *FAST, "resume=true")
    # an interrupted run (SIGTERM) that kept what it measured ...
    process = subprocess.Popen(
        [sys.executable, "-m", "dlbench", "--config-dir", str(conf), *sweep],
        cwd=tmp_path, env=clean_env(**store.env()), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
        p.read_text().count("\n") >= 3 for p in tmp_path.glob(".dlbench/runs/*/protocol/slow_relu_out.csv")
    ):
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    (interrupted,) = job_runs(store)
    assert interrupted.info.status == "KILLED"
    kept = [r for r in csv.DictReader(io.StringIO(artifact_text(store, interrupted.info.run_id, "results.csv")))]
    done = {int(r["id"]) for r in kept if r["status"] == "ok"}
    assert 2 <= len(done) < 6
    # ... then a resumed run that was SIGKILLed before it logged anything
    shutil.rmtree(tmp_path / ".dlbench")  # the first run's protocol files
    killed = _sigkill_mid_sweep(store, tmp_path, conf, *sweep, rows=1)
    time.sleep(2)

    _slow_benchmark(tmp_path / "conf", row_s=0)
    result = run_dlbench(
        "--config-dir", str(conf), *sweep, "gc.heartbeat_s=0.5", "gc.stale_after_s=1", cwd=tmp_path, store=store
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {r.info.run_id: r for r in job_runs(store)}
    assert runs[killed].info.status == "FAILED"
    assert runs[killed].data.tags["dlbench.error"].startswith("heartbeat lost")
    (resumed,) = [r for r in runs.values() if r.info.status == "FINISHED"]
    assert resumed.data.tags["dlbench.resumed_from"] == interrupted.info.run_id, "the lost run had no rows to keep"
    assert resumed.data.metrics["operations_resumed"] == len(done)
