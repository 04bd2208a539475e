"""Sweeps through a real Slurm cluster on this machine (real sbatch, slurmctld, slurmd): one run per job in one
store, tagged with its Slurm job and node; a cancelled job's run ends KILLED and resume measures the rest; a
SIGKILLed job's run is marked FAILED by task=gc; a dead controller or a refused sbatch stops the sweep naming
the launcher setting, with nothing measured."""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    FAST,
    Store,
    artifact_text,
    clean_env,
    job_runs,
    live_processes_with,
    mlflow_runs,
    run_dlbench,
    write_fake_benchmark,
)
from local_services import LocalSlurm, free_port

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SLURM = ("hydra/launcher=submitit_slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1")

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
    """A registry entry ``slow`` for Relu whose executable takes ``row_s`` seconds per operation."""
    conf = write_fake_benchmark(directory, name="slow")
    (directory / "slow.py").write_text(SLOW_RELU.format(row_s=row_s))
    return conf


def _start_sweep(cluster: LocalSlurm, store: Store, cwd: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dlbench", "-m", *overrides],
        cwd=cwd,
        env=clean_env(SLURM_CONF=cluster.env["SLURM_CONF"], **store.env()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _running_run(store: Store, batch_size: str, protocol_rows: int, cwd: Path, deadline_s: float = 240):
    """The RUNNING run of ``batch_size`` (the sweep's first job) once its executable wrote ``protocol_rows`` rows."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        outputs = list(cwd.glob(".dlbench/multirun/*/0/protocol/slow_relu_out.csv"))
        rows = max((p.read_text().count("\n") - 1 for p in outputs), default=0)
        if rows >= protocol_rows:
            found = [r for r in _runs_or_none(store) if r.data.params.get("batch_size") == batch_size]
            if found and found[0].info.status == "RUNNING":
                return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no RUNNING run of batch_size={batch_size} with {protocol_rows} measured rows")


def _runs_or_none(store: Store) -> list:
    try:
        return job_runs(store)
    except AssertionError:  # the experiment does not exist yet
        return []


def _job_field(cluster: LocalSlurm, job_id: str, field: str) -> str:
    out = cluster.command("scontrol", "show", "job", "-o", job_id).stdout
    match = re.search(rf"\b{field}=(\S+)", out)
    assert match, out
    return match.group(1)


def test_sweep_through_sbatch_logs_one_run_per_job_tagged_with_its_slurm_job_and_node(
    slurm_cluster: LocalSlurm, store: Store, tmp_path: Path
) -> None:
    result = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2,4", *SLURM, *FAST,
        cwd=tmp_path, store=store, env={"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    submitted = re.search(r"Submitted Slurm job\(s\) (\S+)_0,", result.stdout)
    assert submitted, result.stdout
    runs = job_runs(store)
    assert sorted(r.data.params["batch_size"] for r in runs) == ["1", "2", "4"], "no run lost, none duplicated"
    assert all(r.info.status == "FINISHED" and r.data.metrics["operations_ok"] == 6 for r in runs)
    assert len({r.data.tags["dlbench.sweep"] for r in runs}) == 1
    array_ids = sorted(r.data.tags["slurm.array_id"] for r in runs)
    assert array_ids == [f"{submitted.group(1)}_{task}" for task in range(3)]
    for run in runs:
        tags = run.data.tags
        assert tags["slurm.node"] == slurm_cluster.node and tags["slurm.partition"] == "debug"
        assert _job_field(slurm_cluster, tags["slurm.job_id"], "JobState") == "COMPLETED"
        assert _job_field(slurm_cluster, tags["slurm.job_id"], "NodeList") == slurm_cluster.node
        assert _job_field(slurm_cluster, tags["slurm.job_id"], "OverSubscribe") == "NO", "whole node, as configured"
        # threads=0 in a Slurm job: the kernels get the job's CPUs (cpus_per_task=1), not the whole machine
        assert run.data.params["threads"] == "1" and tags["slurm.cpus"] == "1"
    scripts = list(tmp_path.glob(".dlbench/multirun/*/.submitit/*/*_submission.sh"))
    assert scripts and "#SBATCH --exclusive" in scripts[0].read_text()


def test_cancelled_job_ends_its_run_killed_and_resume_measures_only_the_rest(
    slurm_cluster: LocalSlurm, store: Store, tmp_path: Path
) -> None:
    conf = _slow_benchmark(tmp_path / "conf", row_s=1.0)
    sweep = ("--config-dir", str(conf), "+benchmark=relu", "backend=custom", "batch_size=1,2", *SLURM, *FAST)
    process = _start_sweep(slurm_cluster, store, tmp_path, *sweep)
    running = _running_run(store, "1", protocol_rows=2, cwd=tmp_path)
    slurm_cluster.command("scancel", running.data.tags["slurm.array_id"])
    _, stderr = process.communicate(timeout=300)
    assert process.returncode != 0
    assert "1 of 2 Slurm jobs of the sweep ended without a result" in stderr, stderr[-3000:]
    assert "resume=true" in stderr

    runs = {r.data.params["batch_size"]: r for r in job_runs(store)}
    cancelled = runs["1"]
    assert cancelled.info.status in ("KILLED", "FAILED"), cancelled.info.status
    if cancelled.info.status == "FAILED":
        assert cancelled.data.tags["dlbench.error"], "a failed run says why"
    assert runs["2"].info.status == "FINISHED", "the other job of the sweep ran to the end"
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, cancelled.info.run_id, "results.csv"))))
    done = [int(r["id"]) for r in rows if r["status"] == "ok"]
    assert 2 <= len(done) < 6, rows

    _slow_benchmark(tmp_path / "conf", row_s=0)
    resumed_sweep = run_dlbench(
        "-m", *sweep, "resume=true", cwd=tmp_path, store=store, env={"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}
    )
    assert resumed_sweep.returncode == 0, resumed_sweep.stderr[-5000:]
    latest = {}
    for run in job_runs(store):  # newest first
        latest.setdefault(run.data.params["batch_size"], run)
    resumed = latest["1"]
    assert resumed.info.status == "FINISHED"
    assert resumed.data.tags["dlbench.resumed_from"] == cancelled.info.run_id
    measured = artifact_text(store, resumed.info.run_id, "protocol/slow_relu.csv").splitlines()
    assert [int(line.split(",")[0]) for line in measured] == [i for i in range(6) if i not in done]
    assert resumed.data.metrics["operations_resumed"] == len(done)
    assert latest["2"].data.metrics["operations_resumed"] == 6, "the finished job's run had everything"


def test_sigkilled_job_leaves_a_run_that_gc_marks_failed_for_its_lost_heartbeat(
    slurm_cluster: LocalSlurm, store: Store, tmp_path: Path
) -> None:
    conf = _slow_benchmark(tmp_path / "conf", row_s=1.0)
    sweep = ("--config-dir", str(conf), "+benchmark=relu", "backend=custom", "batch_size=1", *SLURM, *FAST)
    process = _start_sweep(slurm_cluster, store, tmp_path, *sweep, "gc.heartbeat_s=1")
    running = _running_run(store, "1", protocol_rows=1, cwd=tmp_path)
    # what the OOM killer does: SIGKILL to the job's dlbench process (scancel --signal=KILL would cancel the job,
    # which starts with SIGTERM and lets the run end itself KILLED)
    candidates = live_processes_with("submitit.core._submit", settle_s=0)
    (job_process,) = [p for p in candidates if p.name() != "srun" and str(tmp_path) in " ".join(p.cmdline())]
    job_process.kill()
    _, stderr = process.communicate(timeout=300)
    assert process.returncode != 0 and "ended without a result" in stderr, stderr[-3000:]
    (killed,) = job_runs(store)
    assert killed.info.status == "RUNNING", "SIGKILL left the run no chance to end itself"

    time.sleep(3)
    gc = run_dlbench("task=gc", "gc.stale_after_s=2", "gc.heartbeat_s=1", cwd=tmp_path, store=store)
    assert gc.returncode == 0, gc.stderr
    assert killed.info.run_id in gc.stdout and "1 run(s)" in gc.stdout
    (marked,) = job_runs(store)
    assert marked.info.status == "FAILED"
    reason = marked.data.tags["dlbench.error"]
    assert reason.startswith("heartbeat lost") and f"Slurm job {running.data.tags['slurm.job_id']}" in reason
    assert marked.info.end_time <= time.time() * 1000 - 2000, "it ended when its heartbeat stopped, not at gc"


def test_unreachable_controller_stops_the_sweep_naming_the_launcher_setting(tmp_path: Path, store: Store) -> None:
    if shutil.which("scontrol") is None or shutil.which("sbatch") is None:
        pytest.skip("Slurm's client commands are not installed: apt-get install slurm-client")
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        f"ClusterName=nowhere\nSlurmctldHost=nowhere(127.0.0.1)\nSlurmctldPort={free_port()}\n"
        f"AuthType=auth/munge\nAuthInfo=socket={tmp_path / 'munge.socket'}\n"
        "NodeName=nowhere NodeAddr=127.0.0.1 CPUs=1\nPartitionName=debug Nodes=ALL Default=YES\n"
    )
    started = time.monotonic()
    result = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2", *SLURM, *FAST, cwd=tmp_path, store=store,
        env={"SLURM_CONF": str(conf)}, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert "dlbench: hydra/launcher=submitit_slurm: the Slurm controller does not answer" in result.stderr
    assert "SLURM_CONF" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 60
    assert job_runs(store) == [], "nothing measured"
    assert [r.info.status for r in mlflow_runs(store)] == ["FAILED"], "the sweep's own run ended, not left RUNNING"


@pytest.mark.parametrize(
    ("override", "named"),
    [
        pytest.param("hydra.launcher.partition=nosuch", "sbatch refused the sweep", id="unknown-partition"),
        pytest.param("hydra.launcher.cpus_per_task=512", "Slurm will never start job", id="more-cpus-than-any-node"),
    ],
)
def test_refused_jobs_stop_the_sweep_naming_the_launcher_setting(
    slurm_cluster: LocalSlurm, store: Store, tmp_path: Path, override: str, named: str
) -> None:
    result = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2", *SLURM, override, *FAST, cwd=tmp_path, store=store,
        env={"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}, timeout=300,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"dlbench: hydra/launcher=submitit_slurm: {named}" in result.stderr, result.stderr[-3000:]
    assert "hydra.launcher.partition" in result.stderr and "cpus_per_task" in result.stderr
    assert "Traceback" not in result.stderr
    assert job_runs(store) == [], "nothing measured"
    assert [r.info.status for r in mlflow_runs(store)] == ["FAILED"], "the sweep's own run ended, not left RUNNING"
    assert slurm_cluster.jobs() == [], "no job left waiting in the queue"
