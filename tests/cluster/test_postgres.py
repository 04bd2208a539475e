"""A team's tracking server for real: PostgreSQL (started in a temporary directory) behind ``mlflow server``,
which serves the artifacts clients upload through it. A parallel sweep and a training benchmark log into it and
are read back with MlflowClient; a wrong database password fails fast without showing the password."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import FAST, Store, job_runs, run_dlbench
from local_services import LocalPostgres, MlflowServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _rows_in_postgres(postgres: LocalPostgres, experiment: str) -> int:
    """Runs of ``experiment`` as PostgreSQL itself holds them (not through MLflow)."""
    import psycopg2

    with psycopg2.connect(postgres.uri_with_password(postgres.PASSWORD)) as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM runs JOIN experiments ON runs.experiment_id = experiments.experiment_id "
            "WHERE experiments.name = %s",
            (experiment,),
        )
        return int(cursor.fetchone()[0])


def test_parallel_sweep_logs_through_the_postgres_backed_server(
    tracking_server: MlflowServer, postgres: LocalPostgres, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    store = Store(tracking_server.url, "pg-sweep")
    result = run_dlbench(
        "-m", "+benchmark=relu", "batch_size=1,2", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *FAST,
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    assert "Joblib.Parallel(n_jobs=2" in result.stdout
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists(), "nothing stored locally"
    runs = job_runs(store)
    assert sorted(r.data.params["batch_size"] for r in runs) == ["1", "2"]
    assert all(r.info.status == "FINISHED" and r.data.metrics["operations_ok"] == 6 for r in runs)
    assert len({r.data.tags["dlbench.sweep"] for r in runs}) == 1
    assert _rows_in_postgres(postgres, "pg-sweep") == 3, "PostgreSQL holds the two jobs and the sweep"
    client = MlflowClient(tracking_uri=tracking_server.url)
    for run in runs:
        assert run.info.artifact_uri.startswith("mlflow-artifacts:"), "clients upload through the server"
        results = Path(client.download_artifacts(run.info.run_id, "results.csv", str(tmp_path)))
        assert results.read_text().count("\n") == 7
        stored = list(tracking_server.artifacts.rglob(f"{run.info.run_id}/artifacts/results.csv"))
        assert len(stored) == 1, "the file landed in the server's --artifacts-destination"


def test_training_benchmark_logs_its_run_and_profiled_batches_through_the_postgres_backed_server(
    tracking_server: MlflowServer, postgres: LocalPostgres, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    store = Store(tracking_server.url, "pg-training")
    result = run_dlbench(
        "+benchmark=mlp", "batch_size=8", "steps=6", "profile.warmup=2", "profile.batches=1", "quiet=true",
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    runs = job_runs(store)
    (training,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == training.info.run_id]
    assert training.info.status == "FINISHED" and training.data.params["batch_size"] == "8"
    assert len(children) == 1 and children[0].info.status == "FINISHED", "one child run per profiled batch"
    assert _rows_in_postgres(postgres, "pg-training") == 2
    client = MlflowClient(tracking_uri=tracking_server.url)
    history = client.get_metric_history(training.info.run_id, "step_time_s")
    assert len(history) == 6, "one step time per training step"
    child_files = [a.path for a in client.list_artifacts(children[0].info.run_id)]
    assert child_files, "the profiled batch's tables were uploaded"
    config = Path(client.download_artifacts(training.info.run_id, "config.yaml", str(tmp_path))).read_text()
    assert "batch_size: 8" in config


def test_dlbench_logs_straight_into_postgres_and_keeps_the_password_out_of_the_run(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    uri = postgres.uri_with_password(postgres.PASSWORD)
    store = Store(uri, "pg-direct")
    result = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, store=store)
    assert result.returncode == 0, result.stderr[-5000:]
    (run,) = job_runs(store)
    assert run.info.status == "FINISHED" and run.data.metrics["operations_ok"] == 6
    logged = " ".join([*run.data.params.values(), *run.data.tags.values()])
    assert postgres.PASSWORD not in logged


@pytest.mark.parametrize("multirun", [False, True], ids=["single-run", "multirun"])
def test_wrong_database_password_fails_fast_naming_the_uri_without_the_password(
    postgres: LocalPostgres, tmp_path: Path, multirun: bool
) -> None:
    uri = postgres.uri_with_password("not-the-password")
    shown = postgres.uri_with_password("***")
    started = time.monotonic()
    result = run_dlbench(
        *(["-m"] if multirun else []), "+benchmark=relu", "batch_size=1,2" if multirun else "batch_size=1", *FAST,
        cwd=tmp_path, env={"MLFLOW_TRACKING_URI": uri}, timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"cannot log in to the tracking database {shown}" in result.stderr, result.stderr[-3000:]
    assert "password authentication failed" in result.stderr
    assert "not-the-password" not in output
    assert elapsed < 30, f"took {elapsed:.1f} s to refuse the login"
    if multirun:
        assert "#0 :" not in result.stdout and "Traceback" not in result.stderr, "stopped before any job"
