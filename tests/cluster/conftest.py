"""Fixtures that start real services on this machine and always stop them: a one-node Slurm cluster (munged,
slurmctld, slurmd) and a PostgreSQL cluster behind an ``mlflow server``. Tests using them skip, saying why,
where the packages are absent (CI installs them: .ci/run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from local_services import LocalPostgres, LocalSlurm, MlflowServer


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    """The cluster for one test module; its daemons' logs are kept in the module's temporary directory."""
    reason = LocalSlurm.missing()
    if reason:
        pytest.skip(reason)
    with LocalSlurm(log_dir=tmp_path_factory.mktemp("slurm-logs")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    reason = LocalPostgres.missing()
    if reason:
        pytest.skip(reason)
    import sqlalchemy

    pytest.importorskip("psycopg2", reason="psycopg2 missing: pip install 'dlbench[server]'")
    try:  # the driver SQLAlchemy picks for postgresql:// (psycopg from SQLAlchemy 2.1 on)
        sqlalchemy.create_engine("postgresql://probe@127.0.0.1/probe")
    except ModuleNotFoundError as err:
        pytest.skip(f"the PostgreSQL driver {err.name} is missing: pip install 'dlbench[server]'")
    with LocalPostgres() as database:
        yield database


@pytest.fixture(scope="module")
def tracking_server(postgres: LocalPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """``mlflow server`` on the PostgreSQL cluster; it reads the database password from a password file, as
    a team server would, so the backend URI on its command line carries none."""
    server = MlflowServer(postgres.uri, tmp_path_factory.mktemp("mlflow-server"), {"PGPASSFILE": str(postgres.pgpass)})
    with server:
        yield server
