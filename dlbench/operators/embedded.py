"""The embedded PyTorch kernels (``python -m dlbench.backends.torch OP INPUT.csv``) run in a persistent worker
process instead of one fresh process per benchmark: torch is imported once per dlbench process (about 2 s
each time otherwise), and a worker started early imports it while dlbench opens the MLflow store. The worker
runs the very same program (``backends/torch/run.py``) per request, in its own process group, with the same
timeout, memory guard and interrupt handling, so the result files are the same; a crash ends the worker and
fails only that benchmark, and the next one starts a new worker. Every other executable still runs as a
process of its own (:func:`dlbench.core.process.run_command`)."""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from dlbench.core.cores import allowed_cpus
from dlbench.core.process import ProcessResult
from dlbench.core.worker import Worker, start_environment

EMBEDDED_MODULE = "dlbench.backends.torch"

_WORKERS: dict[tuple, Worker] = {}


def is_embedded(command: Sequence[str]) -> bool:
    """Exactly the registry's embedded kernel command: this interpreter, ``-m dlbench.backends.torch OP``."""
    return len(command) == 4 and tuple(command[:3]) == (sys.executable, "-m", EMBEDDED_MODULE)


def embedded_worker(env: Mapping[str, str] | None = None) -> Worker:
    """The worker for this environment and these cores: a job pinned to other cores, or told another thread
    count at start (``OMP_NUM_THREADS``), gets a worker of its own."""
    full_env = {**os.environ, **(env or {})}
    key = (start_environment(full_env), allowed_cpus())
    worker = _WORKERS.get(key)
    if worker is None:
        close_workers()  # jobs in one process run one after another: one idle torch process at most
        worker = _WORKERS[key] = Worker([sys.executable, "-m", EMBEDDED_MODULE], full_env)
    return worker


def prestart_embedded(env: Mapping[str, str] | None = None) -> None:
    """Start the worker now, so that it imports torch while the caller does other work."""
    embedded_worker(env).start()


def run_embedded(
    command: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stderr_path: Path | None = None,
    on_poll: Callable[[], None] | None = None,
) -> ProcessResult:
    """:func:`dlbench.core.process.run_command` for an embedded kernel command, run by the worker."""
    worker = embedded_worker(env)
    result = worker.run(list(command[3:]), timeout=timeout, env=env, cwd=cwd, stderr_path=stderr_path, on_poll=on_poll)
    if result.returncode or "CUDA error" in result.stderr:
        # a failed program may leave its process in a bad state (a CUDA error sticks to its context): the next
        # benchmark gets a fresh worker, as it would get a fresh process
        worker.close()
    return result


@atexit.register
def close_workers() -> None:
    for worker in _WORKERS.values():
        worker.close()
    _WORKERS.clear()
