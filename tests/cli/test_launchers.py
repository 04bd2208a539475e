"""Parallel and cluster sweeps through Hydra launchers, all logging into one SQLite MLflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import FAST, Store, job_runs, mlflow_runs, run_dlbench

from dlbench.core.affinity import available_cores, exclusive_cores, threads_per_job


def test_jobs_running_at_once_get_distinct_core_blocks_and_the_affinity_is_restored(tmp_path: Path) -> None:
    cores = available_cores()
    with exclusive_cores(job=0, threads=1, parallel_jobs=len(cores), lock_dir=tmp_path) as first:
        assert first.cores == cores[:1] and os.sched_getaffinity(0) == set(cores[:1])
        if len(cores) > 1:
            # job 2 would take block 0 by number, but block 0 is busy: it takes the next free one
            with exclusive_cores(job=len(cores), threads=1, parallel_jobs=len(cores), lock_dir=tmp_path) as second:
                assert second.cores != first.cores and second.threads == 1
    assert os.sched_getaffinity(0) == set(cores)


def test_threads_zero_shares_the_cores_among_the_parallel_jobs() -> None:
    assert threads_per_job(0, 2, 16) == 8
    assert threads_per_job(0, 3, 2) == 1
    assert threads_per_job(4, 2, 16) == 4
    assert threads_per_job(0, None, 16) == 1


def test_more_threads_than_cores_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exclusive_cores: threads="):
        with exclusive_cores(job=0, threads=len(available_cores()) + 1, parallel_jobs=1, lock_dir=tmp_path):
            pass


def _check_sweep(store: Store, batch_sizes: list[str]) -> list:
    (sweep,) = [r for r in mlflow_runs(store) if r.data.tags["dlbench.kind"] == "sweep"]
    runs = job_runs(store)
    assert sorted(r.data.params["batch_size"] for r in runs) == batch_sizes, "no run lost, none duplicated"
    assert all(r.data.tags["mlflow.parentRunId"] == sweep.info.run_id for r in runs), "jobs in other processes too"
    assert all(r.info.status == "FINISHED" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
    assert all(r.data.metrics["operations_ok"] == 6 for r in runs)
    assert len({r.data.tags["dlbench.sweep"] for r in runs}) == 1
    return runs


@pytest.mark.slow
def test_joblib_sweep_runs_two_jobs_at_once_into_one_sqlite_store(tmp_path: Path, store: Store) -> None:
    result = run_dlbench(
        "-m",
        "+benchmark=relu",
        "batch_size=1,2,3,4",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "exclusive_cores=true",
        "threads=1",
        *FAST,
        cwd=tmp_path,
        store=store,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert "database is locked" not in output, output[-5000:]
    assert "Joblib.Parallel(n_jobs=2" in result.stdout
    runs = _check_sweep(store, ["1", "2", "3", "4"])
    assert all(r.data.params["threads"] == "1" for r in runs)
    pinned = {r.data.tags["dlbench.cores"] for r in runs}
    assert len(pinned) == min(2, len(available_cores())), "each job ran on a single core of its own block"


@pytest.mark.slow
def test_submitit_local_launcher_runs_each_job_in_its_own_process(tmp_path: Path, store: Store) -> None:
    result = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2", "hydra/launcher=submitit_local", *FAST, cwd=tmp_path, store=store
    )
    assert result.returncode == 0, result.stderr
    assert "Submitit 'local' sweep output dir" in result.stdout
    _check_sweep(store, ["1", "2"])
    logs = list((tmp_path / ".dlbench" / "multirun").glob("*/.submitit/*/*_log.err"))
    assert len(logs) == 2, "submitit kept one log per job"
