"""Warm start: with a server up, ``python -m dlbench`` runs each command in a fresh fork of it, and the command
behaves as it does in a process of its own: the same output and exit status, the caller's directory and
environment, the run in the caller's store, the embedded kernels measured in a forked worker, Ctrl-C
reaching the command and a killed client taking its command with it. A real server, started the way a
user's first command starts it, in a private socket folder."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import FAST, REPO, Store, clean_env, mlflow_runs

from dlbench.cli import warmstart
from dlbench.core.process import default_signals_in_children


def warm_env(folder: Path, **extra: str) -> dict[str, str]:
    env = clean_env(DLBENCH_WARM="1", DLBENCH_WARM_DIR=str(folder), **extra)
    env.pop("PYTEST_CURRENT_TEST", None)  # pytest changes it per test: a server serves one environment
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A server in a short private folder (a Unix socket's path is limited to 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="dlbw", dir="/tmp"))
    start_dir = tmp_path_factory.mktemp("server_start")
    manage = [sys.executable, "-m", "dlbench.cli.warmstart"]
    started = subprocess.run(
        [*manage, "start"], cwd=start_dir, env=warm_env(folder), capture_output=True, text=True, timeout=300
    )
    assert started.returncode == 0, started.stdout + started.stderr
    yield folder
    subprocess.run([*manage, "stop"], cwd=start_dir, env=warm_env(folder), capture_output=True, timeout=120)
    shutil.rmtree(folder, ignore_errors=True)


def served(folder: Path) -> list[tuple[int, str]]:
    """(pid, argument list) of every command the server forked, from its log."""
    lines = "".join(log.read_text() for log in folder.glob("*.log"))
    return [(int(m[1]), m[2]) for m in re.finditer(r"^served \d+: pid (\d+) (.*)$", lines, re.M)]


def dlbench(*args: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlbench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_warm_command_prints_and_exits_as_a_command_of_its_own(server: Path, tmp_path: Path) -> None:
    before = len(served(server))
    warm = dlbench("task=list", cwd=tmp_path, env=warm_env(server))
    cold = dlbench("task=list", cwd=tmp_path, env=clean_env())
    assert warm.returncode == cold.returncode == 0, warm.stderr + cold.stderr
    assert warm.stdout == cold.stdout and "torch_conv" in warm.stdout
    assert len(served(server)) == before + 1, "the server ran the command"

    bad_warm = dlbench("+benchmark=conv", "+batchsize=8", cwd=tmp_path, env=warm_env(server))
    bad_cold = dlbench("+benchmark=conv", "+batchsize=8", cwd=tmp_path, env=clean_env())
    assert bad_warm.returncode == bad_cold.returncode != 0
    assert bad_warm.stderr == bad_cold.stderr and "batch_size" in bad_warm.stderr
    assert "Traceback" not in bad_warm.stderr
    assert len(served(server)) == before + 2


def test_a_warm_sweep_lands_in_the_callers_store_and_folder_measured_by_a_forked_worker(
    server: Path, tmp_path: Path, store: Store
) -> None:
    result = dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=tmp_path, env=warm_env(server, **store.env()))
    assert result.returncode == 0, result.stdout + result.stderr
    pid, argv = served(server)[-1]
    assert "+benchmark=relu" in argv
    (run,) = mlflow_runs(store)  # MLFLOW_* of this command, not of the server's start
    assert run.info.status == "FINISHED"
    assert (tmp_path / ".dlbench" / "runs").is_dir(), "outputs go where the command was started"
    assert not (REPO / ".dlbench" / "runs" / run.info.run_id).exists()
    client = __import__("mlflow").tracking.MlflowClient(store.uri)
    metrics = client.get_run(run.info.run_id).data.metrics
    assert any(key.endswith("median_ms") and value > 0 for key, value in metrics.items()), metrics


def test_a_warm_command_creates_a_new_store_as_a_command_of_its_own_does(server: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    def schema(db: Path) -> list[tuple]:
        """Tables, indexes and schema revision; the lines of a table's SQL as a set (MLflow's migrations list
        a table's constraints in an order that changes from one Python process to the next)."""
        with contextlib.closing(sqlite3.connect(db)) as connection:
            objects = connection.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
            revision = connection.execute("SELECT * FROM alembic_version").fetchall()
        unordered = [(kind, name, sorted((sql or "").replace(",", "").splitlines())) for kind, name, sql in objects]
        return unordered + revision

    before = len(served(server))
    folders = {how: tmp_path / how for how in ("warm", "cold")}
    for how, folder in folders.items():
        folder.mkdir()
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        env = warm_env(server, MLFLOW_TRACKING_URI=uri) if how == "warm" else clean_env(MLFLOW_TRACKING_URI=uri)
        result = dlbench("+benchmark=relu", "batch_size=1", *FAST, cwd=folder, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "mlflow ui" in result.stdout + result.stderr, "a new store is announced once"
    assert len(served(server)) == before + 1, "the server ran the warm command"
    assert schema(folders["warm"] / "mlflow.db") == schema(folders["cold"] / "mlflow.db")
    for folder in folders.values():
        client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
        assert str(folder) in client.get_experiment("0").artifact_location, "the default experiment's artifacts"
        (run,) = client.search_runs([client.get_experiment_by_name("dlbench").experiment_id])
        assert run.info.status == "FINISHED" and str(folder) in run.info.artifact_uri


def test_the_embedded_worker_of_a_warm_command_is_a_fork_not_a_new_interpreter(server: Path, tmp_path: Path) -> None:
    slow = ("measure.warmup=0", "measure.min_reps=1", "measure.max_reps=100000000", "measure.min_time_s=1.0")
    with default_signals_in_children():
        proc = subprocess.Popen(
            [sys.executable, "-m", "dlbench", "+benchmark=relu", "batch_size=1", *slow, "quiet=true"],
            cwd=tmp_path, env=warm_env(server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    try:
        command = wait_for_command(server, "+benchmark=relu", proc)
        deadline = time.monotonic() + 60
        workers: list[psutil.Process] = []
        while not workers and time.monotonic() < deadline:
            workers = command.children()
            time.sleep(0.1)
        assert workers, "the command started its kernels' worker"
        assert all("dlbench.backends.torch" not in " ".join(w.cmdline()) for w in workers)
        assert all("dlbench.cli.forkserver" in " ".join(w.cmdline()) for w in workers), "forked, not exec'd"
        assert command.name() == "dlbench" and all(w.name() == "dlbench-worker" for w in workers), "as top shows them"
        proc.send_signal(signal.SIGINT)  # Ctrl-C in the terminal reaches the client, which passes it on
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        assert "interrupted" in err
        _, alive = psutil.wait_procs([command, *workers], timeout=10)
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()


def wait_for_command(folder: Path, marker: str, proc: subprocess.Popen[str], timeout: float = 60) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, argv in served(folder):
            if marker in argv and psutil.pid_exists(pid):
                return psutil.Process(pid)
        if proc.poll() is not None:
            pytest.fail(f"the client ended first: {proc.communicate()}")
        time.sleep(0.05)
    pytest.fail("the server never forked the command")


def start_slow_warm_client(server: Path, cwd: Path, batch_size: int) -> subprocess.Popen:
    """The client of a warm relu sweep whose rows each repeat for 2 s, in a process group of its own as a
    shell's job is (Ctrl-Z stops a process only there: in an orphaned group, such as a CI runner's, the kernel
    discards SIGTSTP, for a command of its own as for a client)."""
    slow = ("measure.warmup=0", "measure.min_reps=1", "measure.max_reps=100000000", "measure.min_time_s=2.0")
    return subprocess.Popen(
        [sys.executable, "-m", "dlbench", "+benchmark=relu", f"batch_size={batch_size}", *slow, "quiet=true"],
        cwd=cwd, env=warm_env(server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0,
    )  # fmt: skip


def start_slow_warm_sweep(server: Path, cwd: Path, batch_size: int) -> tuple[subprocess.Popen, psutil.Process]:
    """A warm relu sweep whose rows each repeat for 2 s; the client and the fork running it."""
    proc = start_slow_warm_client(server, cwd, batch_size)
    return proc, wait_for_command(server, f"batch_size={batch_size}", proc)


def wait_until_stopped(stopped: bool, *processes: psutil.Process) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if all((p.status() == psutil.STATUS_STOPPED) == stopped for p in processes):
            return
        time.sleep(0.05)
    pytest.fail(f"expected stopped={stopped}: {[(p.pid, p.status()) for p in processes]}")


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M)[1], 16)
    return bool(caught & (1 << (signum - 1)))


def test_a_killed_client_takes_its_command_with_it(server: Path, tmp_path: Path) -> None:
    proc, command = start_slow_warm_sweep(server, tmp_path, 2)
    time.sleep(1.0)
    family = [command, *command.children(recursive=True)]
    proc.kill()  # no chance to pass anything on: the server sees the connection close
    proc.wait()
    _, alive = psutil.wait_procs(family, timeout=20)
    assert alive == [], "the command and its worker must not go on measuring for nobody"


def test_a_server_serves_one_environment_and_one_version_of_the_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"PATH": "/usr/bin", "LANG": "C.UTF-8"}
    key = warmstart.server_key(base)
    assert warmstart.server_key({**base, "DLBENCH_THREADS": "1", "MLFLOW_TRACKING_URI": "sqlite:///x.db"}) == key
    assert warmstart.server_key({**base, "PWD": "/elsewhere"}) == key
    assert warmstart.server_key({**base, "OMP_NUM_THREADS": "1"}) != key, "read when libraries load"
    assert warmstart.server_key({**base, "LD_PRELOAD": "libjemalloc.so"}) != key

    source = tmp_path / "dlbench" / "module.py"
    source.parent.mkdir()
    source.write_text("x = 1\n")
    monkeypatch.setattr(warmstart, "PROJECT_ROOT", tmp_path)
    before = warmstart.server_key(base)
    source.write_text("x = 22\n")
    assert warmstart.server_key(base) != before, "edited code gets a new server"


def test_warm_start_is_off_when_asked_in_slurm_jobs_and_where_a_package_would_be_shadowed(tmp_path: Path) -> None:
    assert warmstart.enabled({})
    assert not warmstart.enabled({"DLBENCH_WARM": "0"})
    assert not warmstart.enabled({"SLURM_JOB_ID": "17"})
    assert warmstart.enabled({"SLURM_JOB_ID": "17", "DLBENCH_WARM": "1"})
    assert not warmstart.shadows_preloaded(tmp_path)
    (tmp_path / "numpy.py").write_text("")
    assert warmstart.shadows_preloaded(tmp_path), "python -m would import this numpy, not the server's"
    assert not warmstart.shadows_preloaded(REPO), "the repository's own dlbench is the server's"


def test_the_first_command_runs_itself_and_leaves_a_server_for_the_next(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="dlbf", dir="/tmp"))
    env = warm_env(folder, DLBENCH_WARM_IDLE_S="60")
    stop = [sys.executable, "-m", "dlbench.cli.warmstart", "stop"]
    try:
        first = dlbench("task=list", cwd=tmp_path, env=env)
        assert first.returncode == 0, first.stderr
        assert served(folder) == [], "no server yet: the first command ran in its own process"
        deadline = time.monotonic() + 180
        while not list(folder.glob("*.ready")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(folder.glob("*.ready")), "the first command started a server as it left"
        second = dlbench("task=list", cwd=tmp_path, env=env)
        assert second.returncode == 0 and second.stdout == first.stdout
        assert len(served(folder)) == 1
        status = subprocess.run(
            [sys.executable, "-m", "dlbench.cli.warmstart", "status"], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert "(this environment)" in status.stdout
        stopped = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=120)
        assert "stopped 1 warm-start server" in stopped.stdout
        assert not list(folder.glob("*.sock")) and not list(folder.glob("*.ready")), "a stopped server cleans up"
        third = dlbench("task=list", cwd=tmp_path, env={**env, "DLBENCH_WARM": "0"})
        assert third.returncode == 0 and len(served(folder)) == 1, "DLBENCH_WARM=0 runs here, starting nothing"
        assert not list(folder.glob("*.ready"))
    finally:
        subprocess.run(stop, env=env, capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_forked_worker_takes_the_allocator_settings_a_new_process_would_start_with() -> None:
    from dlbench.core.allocator import KEEP_HEAP_TUNABLES, tunables_as_mallopt

    assert tunables_as_mallopt(KEEP_HEAP_TUNABLES) == [(-3, 33554432), (-1, 1073741824)]
    assert tunables_as_mallopt("glibc.malloc.tcache_count=0") is None, "no mallopt twin: a new process instead"


WORKER_SCRIPT = """
import json, os, sys, time
from dlbench.core import forking
from dlbench.core.worker import Worker

def main(argv):
    if argv[0] == "hang":
        time.sleep(600)
    if argv[0] == "crash":
        os._exit(3)
    print(os.environ.get("DLBENCH_X"), os.environ.get("ONLY_IN_WORKER"), os.getpgid(0) == os.getpid())
    return int(argv[1])

forking.mark_forked_from_server(forking.native_threads())
worker = Worker([sys.executable, "-c", "raise SystemExit(9)"], {**os.environ, "ONLY_IN_WORKER": "yes"}, main)
report = []
for argv, timeout in ((["ok", "0"], 60), (["ok", "4"], 60), (["hang"], 1.0), (["crash"], 60), (["ok", "0"], 60)):
    result = worker.run(argv, timeout=timeout, env={"DLBENCH_X": "x"})
    report.append([worker.forked, result.returncode, result.timed_out, result.stdout.strip()])
worker.close()
print(json.dumps(report))
"""


def test_a_forked_worker_keeps_the_guards_of_a_worker_process(tmp_path: Path) -> None:
    import json

    result = subprocess.run(
        [sys.executable, "-c", WORKER_SCRIPT], cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(forked for forked, *_ in report), "every child was forked (the command would exit 9)"
    assert report[0][1:] == [0, False, "x yes True"], "the request's DLBENCH_*, the worker's environment, own group"
    assert report[1][1] == 4
    assert report[2][2] is True, "a hanging request times out and its child is killed"
    assert report[3][1] == 3, "a crash fails its request only"
    assert report[4][1:] == [0, False, "x yes True"], "the next request gets a new fork"


def test_a_process_that_started_threads_is_not_forked() -> None:
    script = (
        "import threading, time\n"
        "from dlbench.core import forking\n"
        "print(forking.still_as_forked())\n"
        "forking.mark_forked_from_server(forking.native_threads())\n"
        "print(forking.still_as_forked())\n"
        "threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
        "print(forking.still_as_forked())\n"
    )
    result = subprocess.run([sys.executable, "-c", script], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["False", "True", "False"], result.stderr
    assert os.environ.get("DLBENCH_WARM") == "0", "the test session runs commands without a server"


def test_a_fork_killed_by_a_signal_ends_its_client_by_the_same_signal(server: Path, tmp_path: Path) -> None:
    proc, command = start_slow_warm_sweep(server, tmp_path, 3)
    command.kill()  # as the out-of-memory killer would
    assert proc.wait(timeout=60) == -signal.SIGKILL, "what a parent sees of a dlbench process killed by SIGKILL"


def test_a_command_started_with_a_closed_standard_stream_runs_in_its_own_process(server: Path, tmp_path: Path) -> None:
    before = len(served(server))
    script = (
        "import os, runpy, sys; os.close(0); sys.argv = ['dlbench', 'task=list']; "
        "runpy.run_module('dlbench', run_name='__main__')"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=warm_env(server), capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0 and "torch_conv" in result.stdout, result.stderr
    assert len(served(server)) == before, "a closed descriptor cannot be passed: the command ran here"


def test_an_idle_server_leaves_and_a_bad_idle_setting_falls_back_to_the_default(tmp_path: Path) -> None:
    from dlbench.cli.forkserver import idle_seconds

    assert idle_seconds("") == warmstart.DEFAULT_IDLE_S
    assert idle_seconds("soon") == idle_seconds("-5") == warmstart.DEFAULT_IDLE_S
    assert idle_seconds("2.5") == 2.5
    folder = Path(tempfile.mkdtemp(prefix="dlbi", dir="/tmp"))
    env = warm_env(folder, DLBENCH_WARM_IDLE_S="1")
    try:
        subprocess.run([sys.executable, "-m", "dlbench.cli.warmstart", "start"], cwd=tmp_path, env=env, check=True,
                       capture_output=True, timeout=300)  # fmt: skip
        assert list(folder.glob("*.sock"))
        deadline = time.monotonic() + 30
        while list(folder.glob("*.sock")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not list(folder.glob("*.sock")), "a server without commands leaves after DLBENCH_WARM_IDLE_S"
        assert "leaves after 0 commands" in "".join(log.read_text() for log in folder.glob("*.log"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_ctrl_z_stops_the_command_and_fg_continues_it(server: Path, tmp_path: Path) -> None:
    with default_signals_in_children():
        proc, command = start_slow_warm_sweep(server, tmp_path, 4)
    proc.send_signal(signal.SIGTSTP)  # what the terminal sends on Ctrl-Z
    stopped_then_continued_then_interrupted(proc, command)


def stopped_then_continued_then_interrupted(proc: subprocess.Popen, command: psutil.Process) -> None:
    """After Ctrl-Z: client and command stop; ``fg`` continues both; Ctrl-C ends them as interrupted."""
    client = psutil.Process(proc.pid)
    try:
        wait_until_stopped(True, client, command)
        proc.send_signal(signal.SIGCONT)  # what the shell's fg sends
        wait_until_stopped(False, client, command)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()


def test_ctrl_z_before_the_command_has_started_stops_it_as_soon_as_it_has(server: Path, tmp_path: Path) -> None:
    servers = list(warmstart.ready_servers(warm_env(server)).values())
    assert servers
    for pid in servers:  # a server held still: the client has asked, and no command exists yet
        os.kill(pid, signal.SIGSTOP)
    try:
        with default_signals_in_children():
            proc = start_slow_warm_client(server, tmp_path, 5)
        client = psutil.Process(proc.pid)
        deadline = time.monotonic() + 30
        while not catches(proc.pid, signal.SIGTSTP) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert catches(proc.pid, signal.SIGTSTP), "the client handles Ctrl-Z once it has asked for its command"
        proc.send_signal(signal.SIGTSTP)
        time.sleep(0.5)
        assert client.status() != psutil.STATUS_STOPPED, "a client stopped first would leave its command running"
    finally:
        for pid in servers:
            os.kill(pid, signal.SIGCONT)
    try:
        command = wait_for_command(server, "batch_size=5", proc)
    except BaseException:
        proc.kill()
        raise
    stopped_then_continued_then_interrupted(proc, command)
