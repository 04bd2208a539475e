"""Shared fixtures: a real SQLite MLflow store, created once a session, with a fresh experiment per test; and
the ``slow`` policy: plain ``pytest`` skips slow tests, ``pytest --run-slow`` (what CI runs) includes them."""

from __future__ import annotations

import itertools
import os

import pytest
from helpers import Store

_counter = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow",
        action="store_true",
        default=os.environ.get("DLBENCH_RUN_SLOW", "") == "1",
        help="also run tests marked slow (CI does; DLBENCH_RUN_SLOW=1 does the same)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow (CI runs everything)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def store_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite file for the session: creating MLflow's schema costs seconds, so it is done once."""
    from dlbench.tracking.store import TrackingTarget, prepare_store

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    prepare_store(TrackingTarget(uri, "warm-up"))
    return uri


@pytest.fixture
def store(store_uri: str, request: pytest.FixtureRequest) -> Store:
    """The session store with an experiment of this test's own, so tests see only their runs."""
    return Store(store_uri, f"{request.node.name[:80]}-{next(_counter)}")
