"""Collectives and data-parallel training on a real one-node Slurm cluster: the rank program and the DDP
script as one job step of 2 Slurm tasks (srun), and the collective sweep and the DDP benchmark submitted
through dlbench's submitit launcher, each one job whose 2 ranks run on its node, as is the evaluation of
the DDP benchmark."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAST, REPO, Store, artifact_text, job_runs, run_dlbench
from local_services import LocalSlurm

from dlbench.operators.protocol import output_path_for, parse_output, write_input

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SLURM = ("hydra/launcher=submitit_slurm", "hydra.launcher.cpus_per_task=2", "hydra.launcher.mem_gb=1")


def test_collective_ranks_run_as_the_tasks_of_one_slurm_job_step(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    path = write_input(tmp_path / "allreduce.csv", [(0, [65536, 2]), (1, [1 << 20, 2])])
    env = {**slurm_cluster.env, "PYTHONPATH": str(REPO), "DLBENCH_THREADS": "1", "DLBENCH_MIN_TIME_S": "0"}
    done = subprocess.run(
        ["srun", "--ntasks=2", "--cpus-per-task=1", f"--chdir={tmp_path}",
         sys.executable, "-m", "dlbench.backends.collectives", "--rank", "AllReduce", str(path)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(parse_output(output_path_for(path)).rows) == {0, 1}


def test_allreduce_sweep_and_ddp_training_run_as_slurm_jobs(
    slurm_cluster: LocalSlurm, store: Store, tmp_path: Path
) -> None:
    slurm_env = {"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}
    sweep = run_dlbench(
        "-m", "+benchmark=allreduce", "world_size=2", "threads=1", *SLURM, *FAST,
        cwd=tmp_path, store=store, env=slurm_env, timeout=900,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-5000:]
    training = run_dlbench(
        "-m", "+benchmark=mlp_ddp", "world_size=2", "threads=1", "steps=8", "profile.warmup=2", "profile.batches=2",
        *SLURM, "quiet=true", cwd=tmp_path, store=store, env=slurm_env, timeout=900,
    )  # fmt: skip
    assert training.returncode == 0, training.stderr[-5000:]
    runs = job_runs(store)
    collective = next(r for r in runs if r.data.tags.get("dlbench.benchmark") == "allreduce")
    ddp = next(r for r in runs if r.data.tags.get("dlbench.kind") == "training")
    for run in (collective, ddp):
        assert run.data.tags["slurm.node"] == slurm_cluster.node and run.info.status == "FINISHED"
    table = list(csv.DictReader(io.StringIO(artifact_text(store, collective.info.run_id, "results.csv"))))
    assert len(table) == 17 and all(float(row["busbw_gbs"]) > 0 for row in table)
    assert ddp.data.params["world_size"] == "2"
    from mlflow.tracking import MlflowClient

    rank1 = {Path(a.path).name for a in MlflowClient(store.uri).list_artifacts(ddp.info.run_id, "profile/rank1")}
    assert {"batch_2_ops.csv", "batch_3_ops.csv"} <= rank1


def test_ddp_script_trains_as_the_tasks_of_one_slurm_job_step(slurm_cluster: LocalSlurm, tmp_path: Path) -> None:
    profile = tmp_path / "profile"
    env = {
        **slurm_cluster.env, "PYTHONPATH": str(REPO), "DLBENCH_PROFILE_DIR": str(profile),
        "DLBENCH_PROFILE_WARMUP": "1", "DLBENCH_PROFILE_BATCHES": "1",
    }  # fmt: skip
    done = subprocess.run(
        ["srun", "--ntasks=2", "--cpus-per-task=1", f"--chdir={tmp_path}", sys.executable,
         str(REPO / "TrainingBenchmarks" / "mlp_ddp.py"), "--steps=3", "--threads=1", "--hidden=64", "--quiet"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mlp_ddp rank 0: 3 steps" in done.stdout and "mlp_ddp rank 1: 3 steps" in done.stdout
    assert (profile / "batch_1_ops.csv").is_file() and (profile / "rank1" / "batch_1_ops.csv").is_file()


def test_data_parallel_evaluation_runs_as_a_slurm_job(slurm_cluster: LocalSlurm, store: Store, tmp_path: Path) -> None:
    done = run_dlbench(
        "-m", "task=evaluate", "+benchmark=mlp_ddp", "world_size=2", "threads=1", "steps=10", "profile.warmup=2",
        "profile.batches=2", "evaluate.bracket=false", *SLURM, *FAST,
        cwd=tmp_path, store=store, env={"SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    run = next(r for r in job_runs(store) if r.data.tags.get("dlbench.kind") == "evaluation")
    assert run.data.tags["slurm.node"] == slurm_cluster.node and run.info.status == "FINISHED"
    metrics = run.data.metrics
    # the job's 2 CPUs are the 2 ranks' threads: the all-reduce cannot hide behind the backward pass there
    assert metrics["world_size"] == 2 and metrics["allreduce_hidden_by_backward"] == 0
    assert metrics["allreduce_exposed_ms"] == pytest.approx(metrics["allreduce_total_ms"], rel=1e-3)
    assert metrics["scaling_efficiency_measured"] > 0
