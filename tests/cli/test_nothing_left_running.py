"""A command ends with its processes: after ``python -m dlbench`` returns, nothing it started is still running
(no server kept for the next command, no kernel worker), with default settings. Only the measurement
settings are shortened here; nothing about processes is changed."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest
from helpers import FAST, Store, mlflow_runs, run_dlbench

#: An environment variable every process the command starts inherits, unless it was given an environment
#: of its own: it finds the command's processes wherever they were moved (a daemon leaves its parent).
MARK = "LEFTOVER_CHECK_MARK"


def left_running(mark: str) -> list[str]:
    """Live processes that carry ``mark`` in their environment, or mention dlbench on their command line and
    descend from this test; described by pid and command line."""
    ours = {child.pid for child in psutil.Process().children(recursive=True)}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue  # dead already, its exit status not yet collected
        cmdline = " ".join(proc.info["cmdline"] or [])
        try:
            marked = proc.environ().get(MARK) == mark
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            marked = False
        if marked or (proc.info["pid"] in ours and "dlbench" in cmdline):
            found.append(f"{proc.info['pid']}: {cmdline}")
    return found


@pytest.mark.parametrize(
    "command",
    [("+benchmark=relu", "batch_size=1", *FAST), ("task=list",)],
    ids=["relu sweep", "task=list"],
)
def test_no_dlbench_process_is_left_after_a_command_returns(tmp_path: Path, command: tuple[str, ...]) -> None:
    mark = uuid.uuid4().hex
    store = Store(f"sqlite:///{tmp_path / 'mlflow.db'}", "leftovers")
    result = run_dlbench(*command, cwd=tmp_path, store=store, env={MARK: mark})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert left_running(mark) == [], "the command left processes running"
    if command[0].startswith("+benchmark"):  # it did start a kernel worker, and measured through it
        (run,) = mlflow_runs(store, "leftovers")
        assert run.info.status == "FINISHED" and run.data.metrics["operations_ok"] > 0


#: A program that leaves a child running in a session of its own, as a daemon does.
LEAVES_ONE = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
"""


def test_the_check_finds_a_process_that_outlived_its_command() -> None:
    mark = uuid.uuid4().hex
    subprocess.run([sys.executable, "-c", LEAVES_ONE], env={**os.environ, MARK: mark}, check=True)  # noqa: S603
    try:
        assert len(left_running(mark)) == 1
    finally:
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARK) == mark:
                    proc.kill()
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                pass
