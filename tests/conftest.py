"""Shared fixtures: a real SQLite MLflow store, created once a session, with a fresh experiment per test."""

from __future__ import annotations

import itertools

import pytest
from helpers import Store

_counter = itertools.count()


@pytest.fixture(scope="session")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite file for the session: creating MLflow's schema costs seconds, so it is done once."""
    from dlbench.tracking import TrackingTarget, prepare_store

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    prepare_store(TrackingTarget(uri, "warm-up"))
    return uri


@pytest.fixture
def store(store_uri: str, request: pytest.FixtureRequest) -> Store:
    """The session store with an experiment of this test's own, so tests see only their runs."""
    return Store(store_uri, f"{request.node.name[:80]}-{next(_counter)}")
