"""A SQLite store comes into being whole or not at all: a first command stopped while it creates the store
(Ctrl-C, or killed outright) leaves no store that later commands cannot open, and the next command creates it.
A store that cannot be opened stops the command with a message that names the file, says whether it holds
runs, and what to do; the file is left as it was."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import FAST, Store, clean_env, mlflow_runs, run_dlbench

from dlbench.core.process import default_signals_in_children
from dlbench.tracking.store import PARTIAL_SUFFIX


def partial_files(db: Path) -> list[Path]:
    return sorted(db.parent.glob(f".{db.name}.*{PARTIAL_SUFFIX}*"))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_a_first_command_stopped_while_it_creates_the_store_leaves_none_and_the_next_creates_it(
    tmp_path: Path, signum: int
) -> None:
    db = tmp_path / "new.db"
    store = Store(f"sqlite:///{db}", "dlbench")
    with default_signals_in_children():
        proc = subprocess.Popen(
            [sys.executable, "-m", "dlbench", "+benchmark=relu", "batch_size=1", *FAST],
            cwd=tmp_path, env=clean_env(**store.env()), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while not partial_files(db) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert partial_files(db), "the schema is built beside the store"
    time.sleep(0.2)  # well into MLflow's migrations
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    if signum == signal.SIGINT:
        assert proc.returncode == 130, out + err
        assert "interrupted" in err and "Traceback" not in err and "bug" not in err, err
        assert partial_files(db) == [], "an interrupted creator cleans up after itself"
    else:
        assert proc.returncode == -signal.SIGKILL
    assert not db.exists(), "no half-made store"

    again = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, store=store)
    assert again.returncode == 0, again.stdout + again.stderr
    (run,) = mlflow_runs(store)
    assert run.info.status == "FINISHED"
    assert partial_files(db) == [], "what a killed creator left behind is gone"


def _set_schema_revision(db: Path, revision: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def _store_with_runs(tmp_path: Path, runs: int) -> Path:
    db = tmp_path / "store.db"
    store = Store(f"sqlite:///{db}", "dlbench")
    if runs == 0:
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=store.uri).search_experiments()  # a store as MLflow itself creates it
    for _ in range(runs):
        made = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, store=store)
        assert made.returncode == 0, made.stdout + made.stderr
    # a schema revision this MLflow does not know: the store was written by another MLflow version
    _set_schema_revision(db, "0123456789ab")
    return db


@pytest.mark.parametrize(
    ("kind", "advice"),
    [
        ("not a database", "is not an MLflow SQLite store"),
        ("store without runs", "holds no runs"),
        ("store with a run", "holds 1 run(s): keep it"),
    ],
)
def test_a_store_that_cannot_be_opened_is_named_with_what_to_do_and_left_as_it_was(
    tmp_path: Path, kind: str, advice: str
) -> None:
    if kind == "not a database":
        db = tmp_path / "results.csv"
        db.write_text("id,n\n1,2\n")
    else:
        db = _store_with_runs(tmp_path, 0 if kind == "store without runs" else 1)
    before = db.read_bytes()

    result = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, store=Store(f"sqlite:///{db}", "x"))
    assert result.returncode != 0
    first, *rest = result.stderr.strip().splitlines()
    assert first.startswith(f"dlbench: tracking store sqlite:///{db} cannot be opened: "), result.stderr
    assert advice in result.stderr and str(db) in "\n".join(rest)
    assert "Traceback" not in result.stderr and "bug in dlbench" not in result.stderr
    assert db.read_bytes() == before, "the store is left as it was"


def test_a_store_that_cannot_be_created_names_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "locked"
    folder.mkdir()
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("no immutable folders here (chattr +i): a folder even root cannot write into")
    try:
        db = folder / "mlflow.db"
        store = Store(f"sqlite:///{db}", "x")
        result = run_dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, store=store)
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)
    assert result.returncode != 0
    assert f"dlbench: tracking store sqlite:///{db} cannot be opened: " in result.stderr
    assert f"could not be created: check that {folder} is writable" in result.stderr
    assert "Traceback" not in result.stderr and "bug in dlbench" not in result.stderr
    assert list(folder.iterdir()) == []
