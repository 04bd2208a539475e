"""The bench scripts' ``--store`` takes a tracking URI as well as a path (a URI once became a folder named
``sqlite:`` in the repository)."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers import REPO

sys.path.insert(0, str(REPO / "bench"))

from _common import store_uri  # noqa: E402


def test_a_tracking_uri_is_used_as_given_and_makes_no_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for uri in ("sqlite:///runs/bench.db", "postgresql://user@localhost/mlflow", "http://127.0.0.1:5000"):
        assert store_uri(uri) == uri
    assert list(tmp_path.iterdir()) == []


def test_a_path_is_a_sqlite_store_there_with_its_folder_made(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    uri = store_uri("stores/bench.db")
    assert uri == f"sqlite:///{tmp_path / 'stores' / 'bench.db'}"
    assert (tmp_path / "stores").is_dir()
