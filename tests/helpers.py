"""Helpers for tests: the dlbench command line as a user runs it, MLflow look-ups, fake benchmark programs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Settings that keep measured sweeps short in tests (the numbers are still real measurements). A loose
#: convergence target: these tests check what is run and logged, on a shared machine; convergence itself is
#: tested in tests/backends/test_timing.py and tests/tasks/test_honest_numbers.py.
#: quick measurements, in one round (the fake programs misbehave at a row's place in their input); no operation
#: judged contended, so a status does not depend on how loaded the machine is
FAST = (
    "measure.warmup=1", "measure.min_reps=2", "measure.min_time_s=0", "measure.target_rel_ci=0.5",
    "measure.rounds=1", "measure.contended_below=0", "quiet=true",
    "evaluate.rounds=2",  # task=evaluate: two trainings (as bracket did), the least that gives an interval
)  # fmt: skip


@dataclass(frozen=True)
class Store:
    """A tracking URI and the experiment a test logs into."""

    uri: str
    experiment: str

    def env(self) -> dict[str, str]:
        return {"MLFLOW_TRACKING_URI": self.uri, "MLFLOW_EXPERIMENT_NAME": self.experiment}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DLBENCH_"))}
    env["HYDRA_FULL_ERROR"] = "0"
    env.update(extra)
    return env


def run_dlbench(
    *overrides: str, cwd: Path, store: Store | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m dlbench OVERRIDES`` as a user runs it, in ``cwd``."""
    extra = dict(env or {})
    if store:
        extra.update(store.env())
    return subprocess.run(
        [sys.executable, "-m", "dlbench", *overrides],
        cwd=cwd,
        env=clean_env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def mlflow_runs(store: Store | str, experiment: str = "dlbench") -> list:
    """All runs of the store's experiment (or of ``experiment`` in a plain URI), newest first."""
    from mlflow.tracking import MlflowClient

    uri, name = (store.uri, store.experiment) if isinstance(store, Store) else (store, experiment)
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(name)
    assert found is not None, f"experiment {name} not in {uri}"
    return client.search_runs([found.experiment_id], max_results=1000)


def job_runs(store: Store | str, experiment: str = "dlbench") -> list:
    """The runs that measured, newest first: every run but a multirun's own (``dlbench.kind`` sweep)."""
    return [r for r in mlflow_runs(store, experiment) if r.data.tags.get("dlbench.kind") != "sweep"]


def artifact_text(store: Store | str, run_id: str, path: str) -> str:
    """The text of one artifact of a run."""
    import tempfile

    from mlflow.tracking import MlflowClient

    uri = store.uri if isinstance(store, Store) else store
    with tempfile.TemporaryDirectory() as tmp:
        return Path(MlflowClient(tracking_uri=uri).download_artifacts(run_id, path, tmp)).read_text()


FAKE_BENCHMARK = '''\
"""A prebuilt operator benchmark obeying the protocol; BEHAVIOUR selects how it misbehaves."""
import math, os, signal, sys, time
BEHAVIOUR = {behaviour!r}
path = sys.argv[-1]
rows = [line.strip().split(",") for line in open(path) if line.strip()]
out = path[:-4] + "_out.csv"
if BEHAVIOUR == "hang":
    time.sleep(3600)
if BEHAVIOUR == "no_output":
    sys.exit(0)
with open(out, "w") as f:
    f.write("id,us\\n")
    for i, row in enumerate(rows):
        op_id = row[0]
        # a "time" derived from the parameters, so tests can check the values arrive in order
        t = 1000.0 * (1 + sum(float(v) for v in row[1:]))
        if BEHAVIOUR == "crash_after_first" and i == 1:
            f.flush(); os.kill(os.getpid(), signal.SIGSEGV)
        if BEHAVIOUR == "nan_second" and i == 1:
            f.write(f"{{op_id}},nan\\n"); continue
        if BEHAVIOUR == "negative_second" and i == 1:
            f.write(f"{{op_id}},-5\\n"); continue
        if BEHAVIOUR == "garbage_second" and i == 1:
            f.write("this is not,a number\\n"); continue
        if BEHAVIOUR == "skip_second" and i == 1:
            print(f"id {{op_id}}: cannot run this shape", file=sys.stderr); continue
        f.write(f"{{op_id}},{{t}}\\n")
print("fake benchmark done", file=sys.stderr)
if BEHAVIOUR == "exit_3":
    sys.exit(3)
'''


def write_fake_benchmark(
    directory: Path,
    name: str = "my_relu",
    behaviour: str = "ok",
    synonyms: Sequence[str] = ("Relu",),
    param_descr: Sequence[str] = ("N", "C", "H", "W", "mode"),
    backend: str = "custom",
) -> Path:
    """A config directory holding ``registry/<name>.yaml`` for a prebuilt executable script."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / f"{name}.py"
    script.write_text(FAKE_BENCHMARK.format(behaviour=behaviour))
    script.chmod(0o755)
    registry = directory / "registry"
    registry.mkdir(parents=True, exist_ok=True)
    (registry / f"{name}.yaml").write_text(
        textwrap.dedent(
            f"""\
            name: {name}
            synonyms: [{", ".join(synonyms)}]
            exe: [python, {script}]
            param_descr: [{", ".join(param_descr)}]
            backend: {backend}
            device: cpu
            """
        )
    )
    return directory


def live_processes_with(marker: str, settle_s: float = 5.0) -> list:
    """Live (not zombie) processes whose command line holds ``marker``, after giving a kill ``settle_s``
    seconds to land."""
    import time

    import psutil

    deadline = time.monotonic() + settle_s
    while True:
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                if marker in " ".join(proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def wait_for_health(url: str, server: subprocess.Popen, log: Path, timeout_s: float, what: str) -> None:
    """Until an MLflow server or UI at ``url`` answers ``/health``; fails the test with the tail of its ``log``
    when it exits or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            import pytest

            pytest.fail(f"{what} did not come up: {log.read_text()[-3000:]}")
        time.sleep(1)
