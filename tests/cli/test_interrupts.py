"""Ctrl-C and SIGTERM stop a sweep or a training benchmark cleanly: the benchmark's process group is
stopped, the MLflow run ends KILLED with what was measured so far, nothing is left running, and the
exit status says the work did not finish."""

from __future__ import annotations

import csv
import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import FAST, REPO, Store, artifact_text, clean_env, live_processes_with, mlflow_runs

from dlbench.core.process import default_signals_in_children, run_command

#: Writes one row every ROW_S seconds; STUBBORN programs ignore SIGTERM and must be SIGKILLed.
SLOW_PROGRAM = """\
import signal, subprocess, sys, time
if {stubborn}:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
# a grandchild, to check the whole process group goes
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", {marker!r}])
path = sys.argv[-1]
rows = [line.strip().split(",") for line in open(path) if line.strip()]
with open(path[:-4] + "_out.csv", "w") as f:
    f.write("id,ms\\n")
    f.flush()
    for row in rows:
        time.sleep({row_s})
        f.write(f"{{row[0]}},{{1 + float(row[1])}}\\n")
        f.flush()
"""


def write_slow_benchmark(conf: Path, marker: str, stubborn: bool = False, row_s: float = 0.4) -> Path:
    (conf / "registry").mkdir(parents=True, exist_ok=True)
    script = conf / "slow_relu.py"
    script.write_text(SLOW_PROGRAM.format(stubborn=stubborn, marker=marker, row_s=row_s))
    (conf / "registry" / "slow_relu.yaml").write_text(
        f"name: slow_relu\nsynonyms: [Relu]\nexe: [python, {script}]\nparam_descr: [N, C, H, W, mode]\n"
        "backend: slow\ndevice: cpu\n"
    )
    return conf


def start_dlbench(*overrides: str, cwd: Path, store: Store) -> subprocess.Popen[str]:
    # dlbench as a terminal starts it, even when this test run inherited SIGINT ignored (CI without a terminal)
    with default_signals_in_children():
        return subprocess.Popen(
            [sys.executable, "-m", "dlbench", *overrides],
            cwd=cwd,
            env=clean_env(**store.env()),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(params=["terminal", "sigint_ignored"])
def started_as(request: pytest.FixtureRequest):
    """How the test run itself was started: from a terminal, or as a CI job that ignores SIGINT."""
    if request.param == "sigint_ignored":
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        yield request.param
        signal.signal(signal.SIGINT, previous)
    else:
        yield request.param


def wait_for(condition, proc: subprocess.Popen[str], timeout: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"dlbench ended (status {proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def data_rows(path_glob: str, cwd: Path) -> int:
    for path in cwd.glob(path_glob):
        try:
            return max(0, len(path.read_text().splitlines()) - 1)
        except OSError:
            return 0
    return 0


def interrupt(proc: subprocess.Popen[str], signum: int, timeout: float = 60.0) -> tuple[float, str, str]:
    """Send ``signum`` to dlbench alone (as a terminal's Ctrl-C reaches only the foreground group; the
    benchmark runs in a session of its own) and return the seconds to exit with the output."""
    sent = time.perf_counter()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=timeout)
    return time.perf_counter() - sent, out, err


@pytest.mark.parametrize(
    ("signum", "stubborn"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), pytest.param(signal.SIGINT, True, marks=pytest.mark.slow)],
    ids=["sigint", "sigterm", "sigint_program_ignores_sigterm"],
)
def test_interrupted_sweep_ends_killed_with_the_rows_measured_so_far(
    tmp_path: Path, store: Store, signum: int, stubborn: bool, started_as: str
) -> None:
    marker = f"dlbench-interrupt-{tmp_path.name}"
    # a stubborn program goes on writing rows through the 2 s SIGTERM grace: slower rows keep some unwritten
    conf = write_slow_benchmark(tmp_path / "conf", marker, stubborn=stubborn, row_s=1.0 if stubborn else 0.4)
    proc = start_dlbench(
        "+benchmark=relu", "backend=slow", "batch_size=1", *FAST, "--config-dir", str(conf), cwd=tmp_path, store=store
    )
    out_glob = ".dlbench/runs/*/protocol/slow_relu_relu_out.csv"
    wait_for(lambda: data_rows(out_glob, tmp_path) >= 2, proc, what="two rows were written")
    seconds, out, err = interrupt(proc, signum)

    assert proc.returncode == (130 if signum == signal.SIGINT else 143), out + err
    assert seconds < (12 if stubborn else 8), f"{seconds:.1f} s from the signal to the exit"
    assert live_processes_with(marker) == [], "the benchmark's process group must be gone"
    assert live_processes_with(str(conf / "slow_relu.py")) == []
    (run,) = mlflow_runs(store)
    assert run.info.status == "KILLED"
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    # a row measured before the signal may be marked (unstable, contended on a loaded machine): it has a time
    measured = [r["id"] for r in rows if r["status"] != "failed"]
    assert len(rows) == 6 and measured[:2] == ["0", "1"] and len(measured) < 6, [
        (r["status"], r["error"], r["stats_note"]) for r in rows
    ]
    assert all("interrupted" in r["error"] for r in rows if r["status"] != "ok")
    assert "slow_relu (" in artifact_text(store, run.info.run_id, "run_error.txt")
    assert "interrupted" in artifact_text(store, run.info.run_id, "error.txt")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupted_training_benchmark_ends_killed_and_stops_the_script(
    tmp_path: Path, store: Store, signum: int
) -> None:
    proc = start_dlbench(
        "+benchmark=mlp", "batch_size=8", "steps=100000", "threads=1", "quiet=true", cwd=tmp_path, store=store
    )
    script = str(REPO / "TrainingBenchmarks" / "mlp.py")

    def training_started() -> bool:
        try:
            return any(script in " ".join(c.cmdline()) for c in psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            return False

    wait_for(training_started, proc, what="the training script started")
    time.sleep(2.0)  # let it train a few steps
    descendants = psutil.Process(proc.pid).children(recursive=True)
    seconds, out, err = interrupt(proc, signum)
    assert proc.returncode != 0, out + err
    assert seconds < 8, f"{seconds:.1f} s from the signal to the exit"
    _, alive = psutil.wait_procs(descendants, timeout=5)
    assert alive == [], "the training script and its children must be stopped"
    (run,) = mlflow_runs(store)
    assert run.info.status == "KILLED"
    error = artifact_text(store, run.info.run_id, "error.txt")
    assert ("RunInterrupted: received SIGTERM" if signum == signal.SIGTERM else "KeyboardInterrupt") in error
    assert "batch_size: 8" in artifact_text(store, run.info.run_id, "config.yaml")


CHILD_REPORTS_SIGNALS = (
    "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
    "signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)"
)


def test_children_start_with_default_signal_handling_when_dlbench_ignores_sigint(tmp_path: Path) -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        result = run_command([sys.executable, "-c", CHILD_REPORTS_SIGNALS], timeout=60, cwd=tmp_path)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN, "dlbench itself keeps ignoring SIGINT"
    finally:
        signal.signal(signal.SIGINT, previous)
    # Python installs its KeyboardInterrupt handler only where SIGINT starts with the default action
    assert result.stdout.split() == ["True", "True"], result.stdout + result.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_interrupted_sweep_of_the_embedded_kernels_ends_killed_and_stops_the_worker(
    tmp_path: Path, store: Store, signum: int
) -> None:
    # each row repeats for a second, so the signal arrives in the middle of the sweep
    slow = ("measure.warmup=0", "measure.min_reps=1", "measure.max_reps=100000000", "measure.min_time_s=1.0",
            "measure.rounds=1", "measure.contended_below=0")  # fmt: skip
    proc = start_dlbench("+benchmark=relu", "batch_size=1", *slow, "quiet=true", cwd=tmp_path, store=store)
    out_glob = ".dlbench/runs/*/protocol/torch_relu_relu_out.csv"
    wait_for(lambda: data_rows(out_glob, tmp_path) >= 2, proc, what="two rows were written")
    worker = psutil.Process(proc.pid).children(recursive=True)
    assert any("dlbench.backends.torch" in " ".join(p.cmdline()) for p in worker)
    seconds, out, err = interrupt(proc, signum)
    assert proc.returncode == (130 if signum == signal.SIGINT else 143), out + err
    assert seconds < 8, f"{seconds:.1f} s from the signal to the exit"
    _, alive = psutil.wait_procs(worker, timeout=5)
    assert alive == [], "the worker must be stopped"
    (run,) = mlflow_runs(store)
    assert run.info.status == "KILLED"
    rows = list(csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv"))))
    # a row measured before the signal may be marked (unstable, contended on a loaded machine): it has a time
    measured = [r["id"] for r in rows if r["status"] != "failed"]
    assert len(rows) == 6 and measured[:2] == ["0", "1"] and len(measured) < 6, [
        (r["status"], r["error"], r["stats_note"]) for r in rows
    ]
    assert "Traceback" not in err and "ended KILLED" in err.strip().splitlines()[-1]


def test_a_ctrl_c_while_the_command_is_still_starting_says_interrupted_without_a_traceback(tmp_path: Path) -> None:
    # Ctrl-C at moments spread over the start of a command. Before the command's code runs, a traceback is
    # Python's own (its start, site, runpy importing the package dlbench); from then on dlbench answers it.
    ours = re.compile(rf'File "{re.escape(str(REPO / "dlbench"))}/(?!__init__\.py")')
    seen = set()
    for step in range(24):
        with default_signals_in_children():
            proc = subprocess.Popen(
                [sys.executable, "-m", "dlbench", "task=list"], cwd=tmp_path, env=clean_env(),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        time.sleep(0.02 * step)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        if "Traceback" in err:  # Python's own start (site) was cut short
            assert not ours.search(err), f"Ctrl-C after {0.02 * step:.2f} s:\n{err}"
        else:  # the command was killed before Python ran, said interrupted, or had ended
            assert proc.returncode in (-signal.SIGINT, 130, 0), err
        seen.add(proc.returncode)
    assert 130 in seen, "no Ctrl-C reached dlbench while it ran"


SWALLOWED = """\
import os, signal, sys, time, weakref
from dlbench.core import interrupts
if sys.argv[1] == "dlbench":
    interrupts.install()
class Thing:
    pass
def ctrl_c(ref):  # the Ctrl-C lands while Python runs a weakref callback, as it may in any garbage collection
    os.kill(os.getpid(), signal.SIGINT)
thing = Thing()
ref = weakref.ref(thing, ctrl_c)
try:
    del thing
    for _ in range(200):  # the command goes on measuring
        time.sleep(0.01)
    print("went on")
except KeyboardInterrupt:
    print("interrupted")
"""

REPLACED = """\
import os, signal, sys, time
from dlbench.core import interrupts
if sys.argv[1] == "dlbench":
    interrupts.install()
try:  # a library whose cleanup fails while the Ctrl-C unwinds, and which catches what comes out
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    finally:
        raise AttributeError("'NoneType' object has no attribute '_flags_cache'")
except Exception:
    pass
try:
    interrupts.check()  # the command's next checkpoint
    print("went on")
except KeyboardInterrupt:
    print("interrupted")
"""


def run_python(code: str, mode: str) -> subprocess.CompletedProcess[str]:
    with default_signals_in_children():
        return subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=60)


def test_a_ctrl_c_that_python_swallows_in_a_weakref_callback_is_raised_again() -> None:
    alone = run_python(SWALLOWED, "python")  # what Python does by itself: printed as ignored, and lost
    assert alone.stdout.strip() == "went on" and "Exception ignored" in alone.stderr
    ours = run_python(SWALLOWED, "dlbench")
    assert ours.stdout.strip() == "interrupted" and "Exception ignored" not in ours.stderr, ours.stderr


def test_a_ctrl_c_that_a_library_turned_into_an_exception_and_caught_is_raised_at_the_next_checkpoint() -> None:
    assert run_python(REPLACED, "python").stdout.strip() == "went on"
    ours = run_python(REPLACED, "dlbench")
    assert ours.stdout.strip() == "interrupted", ours.stderr
