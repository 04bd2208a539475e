"""The embedded torch kernels run in a persistent worker: the same program and the same records as running
``python -m dlbench.backends.torch`` as a process of its own, with the same timeout, memory guard and
interrupt handling; a crash fails only its request and the next request starts a new worker; a worker whose
dlbench died goes too."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import clean_env

from dlbench.core.process import run_command
from dlbench.core.settings import to_environment
from dlbench.core.worker import Worker
from dlbench.operators.embedded import EMBEDDED_MODULE, is_embedded
from dlbench.operators.protocol import output_path_for, write_input

#: Two ReLUs, a row with a parameter missing and a row that cannot be allocated: records of every kind.
ROWS = [(0, [2, 8, 16, 16, 0]), (1, [1, 4, 8, 8, 1]), (2, [1, 4, 8]), (3, [4096, 4096, 4096, 4096, 0])]
SETTINGS = {"warmup": 1, "min_reps": 3, "max_reps": 3, "min_time_s": 0.0, "threads": 1, "dtype": "float32"}
COMMAND = [sys.executable, "-m", EMBEDDED_MODULE]


def records(input_csv: Path) -> list[dict[str, str]]:
    with output_path_for(input_csv).open() as handle:
        rows = list(csv.DictReader(handle))
    return [{"id": r["id"], "reps": r["reps"], "columns": ",".join(r)} for r in rows]


def id_lines(stderr: str) -> list[str]:
    """What the program said per id; the free memory it saw is measured, not compared."""
    lines = [line for line in stderr.splitlines() if line.startswith("id ")]
    return sorted(re.sub(r"[\d.]+ ([KMG]iB|B) free", "FREE", line) for line in lines)


@pytest.fixture
def worker():
    worker = Worker(COMMAND, clean_env())
    yield worker
    worker.close()


def test_the_worker_writes_the_records_the_program_writes(tmp_path: Path, worker: Worker) -> None:
    env = to_environment(SETTINGS)
    alone = write_input(tmp_path / "alone" / "relu.csv", ROWS)
    served = write_input(tmp_path / "served" / "relu.csv", ROWS)
    program = run_command([*COMMAND, "Relu", str(alone)], timeout=120, env=env, cwd=alone.parent)
    result = worker.run(["Relu", str(served)], timeout=120, env=env, cwd=served.parent)
    assert result.returncode == program.returncode == 0
    assert records(served) == records(alone) and [r["id"] for r in records(served)] == ["0", "1"]
    assert id_lines(result.stderr) == id_lines(program.stderr)
    assert any("id 2: Relu cannot run: 3 parameters" in line for line in id_lines(result.stderr))
    assert any(line.startswith("id 3: needs") and "skipped" in line for line in id_lines(result.stderr))


def test_one_worker_serves_many_requests_with_their_own_settings(tmp_path: Path, worker: Worker) -> None:
    first = write_input(tmp_path / "a.csv", ROWS[:1])
    second = write_input(tmp_path / "b.csv", ROWS[:1])
    worker.run(["Relu", str(first)], timeout=120, env=to_environment(SETTINGS), cwd=tmp_path)
    pid = worker.proc.pid
    result = worker.run(
        ["Relu", str(second)], timeout=120, env=to_environment({**SETTINGS, "min_reps": 5, "max_reps": 5}), cwd=tmp_path
    )
    assert result.returncode == 0 and worker.proc.pid == pid
    assert [r["reps"] for r in records(first)] == ["3"] and [r["reps"] for r in records(second)] == ["5"]
    # the memory guard reads its fraction per request, as the program reads it from its environment
    guarded = worker.run(
        ["Relu", str(second)], timeout=120, env=to_environment({**SETTINGS, "memory_fraction": 1e-9}), cwd=tmp_path
    )
    assert guarded.returncode == 1 and "skipped" in guarded.stderr


def test_a_crash_fails_its_request_and_the_next_request_gets_a_new_worker(tmp_path: Path, worker: Worker) -> None:
    slow = write_input(tmp_path / "slow.csv", [(0, [1, 4, 8, 8, 0]), (1, [1, 4, 8, 8, 0])])
    env = to_environment({**SETTINGS, "min_reps": 1, "max_reps": 100_000_000, "min_time_s": 3600.0})

    def crash() -> None:
        os.kill(worker.proc.pid, signal.SIGSEGV)

    crashed = worker.run(["Relu", str(slow)], timeout=120, env=env, cwd=tmp_path, on_poll=crash)
    assert crashed.returncode == -signal.SIGSEGV and crashed.describe_failure() == "was killed by SIGSEGV"
    fine = write_input(tmp_path / "ok.csv", ROWS[:1])
    again = worker.run(["Relu", str(fine)], timeout=120, env=to_environment(SETTINGS))
    assert again.returncode == 0 and worker.alive


def test_a_timeout_stops_the_worker_and_keeps_what_it_wrote(tmp_path: Path, worker: Worker) -> None:
    worker.run(["Relu", str(write_input(tmp_path / "warm.csv", ROWS[:1]))], timeout=120, env=to_environment(SETTINGS))
    slow = write_input(tmp_path / "slow.csv", [(i, [1, 4, 8, 8, 0]) for i in range(3)])
    env = to_environment({**SETTINGS, "min_reps": 1, "max_reps": 100_000_000, "min_time_s": 2.0})
    result = worker.run(["Relu", str(slow)], timeout=5.0, env=env, cwd=tmp_path)  # rows take 2 s each
    assert result.timed_out and result.describe_failure().startswith("timed out after 5.")
    assert not worker.alive
    ids = [r["id"] for r in records(slow)]
    assert ids and ids == ["0", "1", "2"][: len(ids)] and len(ids) < 3


def test_the_operation_budget_holds_in_the_worker(tmp_path: Path, worker: Worker) -> None:
    rows = write_input(tmp_path / "rows.csv", [(0, [1, 4, 8, 8, 0]), (1, [1, 4, 8, 8, 0])])
    env = to_environment({**SETTINGS, "min_reps": 1, "max_reps": 100_000_000, "min_time_s": 3600.0, "op_budget_s": 0.5})
    result = worker.run(["Relu", str(rows)], timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 0 and [r["id"] for r in records(rows)] == ["0", "1"]
    assert result.stderr.count("time budget of 0.5 s spent") == 2


def test_an_interrupt_stops_the_worker_group(tmp_path: Path, worker: Worker) -> None:
    slow = write_input(tmp_path / "slow.csv", [(0, [1, 4, 8, 8, 0])])
    env = to_environment({**SETTINGS, "min_reps": 1, "max_reps": 100_000_000, "min_time_s": 3600.0})

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    worker.start()
    child = psutil.Process(worker.proc.pid)
    with pytest.raises(KeyboardInterrupt):
        worker.run(["Relu", str(slow)], timeout=120, env=env, cwd=tmp_path, on_poll=ctrl_c)
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


PARENT = f"""
import sys, time
from dlbench.core.worker import Worker
worker = Worker({COMMAND!r}, {{}})
worker.start()
print(worker.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_worker_leaves_when_its_dlbench_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=clean_env())
    worker_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while psutil.pid_exists(worker_pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    assert time.monotonic() < deadline, "the worker outlived the dlbench that started it"


def test_only_the_embedded_kernel_command_goes_to_the_worker() -> None:
    assert is_embedded([*COMMAND, "Conv"])
    assert not is_embedded([*COMMAND, "Conv", "--extra"])
    assert not is_embedded(["python", "-m", EMBEDDED_MODULE, "Conv"])  # another interpreter: its own process
    assert not is_embedded([sys.executable, "my_conv.py"])


def test_a_benchmark_that_failed_leaves_the_next_one_a_fresh_worker(tmp_path: Path) -> None:
    from dlbench.operators.embedded import close_workers, embedded_worker, run_embedded

    env = to_environment({**SETTINGS, "memory_fraction": 1e-9})  # every row is skipped: the program fails
    try:
        failed = run_embedded([*COMMAND, "Relu", str(write_input(tmp_path / "a.csv", ROWS[:1]))], timeout=120, env=env)
        assert failed.returncode == 1 and not embedded_worker(env).alive
        ok = run_embedded([*COMMAND, "Relu", str(write_input(tmp_path / "b.csv", ROWS[:1]))], timeout=120,
                          env=to_environment(SETTINGS))  # fmt: skip
        assert ok.returncode == 0 and embedded_worker(to_environment(SETTINGS)).alive
    finally:
        close_workers()
