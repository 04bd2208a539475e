"""Hydra's side of sweeps: create the MLflow store once before any job starts and end the runs earlier jobs left
RUNNING when they died; open a run for the whole multirun whose children are the jobs' runs, and sum the sweep
up in it at the end; how many jobs a launcher runs at once."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from dlbench.core.affinity import available_cores

# conf/hydra/launcher/{joblib,submitit_local,submitit_slurm}.yaml deliberately extend the launcher plugins'
# schemas of the same name. This module is imported in every job process (the callbacks travel with the
# jobs), so the filter also applies where parallel launchers compose each job's configuration.
warnings.filterwarnings("ignore", message=r"(?s).*is validated against ConfigStore schema with the same name")


class PrepareTracking(Callback):
    """Creating the SQLite schema from many jobs at once races ("database is locked"): do it up front."""

    def _prepare(self, config: DictConfig) -> None:
        from dlbench.tracking.store import TrackingError, prepare_store, resolve_tracking

        mlflow_cfg = config.get("mlflow", {})
        target = resolve_tracking(mlflow_cfg.get("tracking_uri", ""), mlflow_cfg.get("experiment", ""), Path.cwd())
        try:
            prepare_store(target, float(mlflow_cfg.get("connect_timeout_s", 10)))
        except TrackingError as err:
            raise SystemExit(f"dlbench: {err}") from err
        _mark_lost_runs(target, float(config.get("gc", {}).get("stale_after_s", 300)))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.get("task", "run") != "list":
            self._prepare(config)


log = logging.getLogger(__name__)


def swept_overrides(overrides: list[str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The command line's sweeps (``batch_size=1,2,4`` -> {"batch_size": ["1", "2", "4"]}) and its fixed
    overrides (``+benchmark=conv`` -> {"benchmark": "conv"})."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    swept: dict[str, list[str]] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if override.is_sweep_override():
            swept[key] = list(override.sweep_string_iterator())
        elif not key.startswith("hydra"):
            fixed[key] = override.get_value_element_as_str()
    return swept, fixed


def sweep_run_name(benchmark: str, swept: dict[str, list[str]]) -> str:
    """``conv-sweep-bs1,8,32``; other swept keys as ``key=a,b``."""
    parts = [f"bs{','.join(v)}" if k == "batch_size" else f"{k}={','.join(v)}" for k, v in swept.items()]
    return f"{benchmark}-sweep-{'-'.join(parts)}"[:120]


class SweepRun(Callback):
    """A multirun's own MLflow run. Opened before the launcher starts any job; the jobs (in this process, in
    joblib workers, submitit or Slurm jobs) learn its id from this callback, which travels with them, or
    from ``mlflow_sweep_run.json`` in the sweep folder, and open their runs as its children. When the sweep
    ends (or the process exits after a failed or interrupted sweep) it gets the jobs' table and plots."""

    def __init__(self) -> None:
        self.sweep: Any = None  # a SweepHandle: plain strings, pickled with the jobs
        self.swept: tuple[str, ...] = ()
        self._finished = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from dlbench.tracking.heartbeat import DEFAULT_INTERVAL_S
        from dlbench.tracking.naming import dlbench_command
        from dlbench.tracking.store import TrackingError, resolve_tracking
        from dlbench.tracking.sweep import start_sweep_run, write_handoff

        if config.get("task", "run") == "list":
            return
        overrides = [str(o) for o in config.hydra.overrides.task]
        swept, fixed = swept_overrides(overrides)
        benchmark = "+".join(swept.get("benchmark", [])) or fixed.get("benchmark") or str(config.get("task", "run"))
        mlflow_cfg = config.get("mlflow", {})
        target = resolve_tracking(mlflow_cfg.get("tracking_uri", ""), mlflow_cfg.get("experiment", ""), Path.cwd())
        sweep_dir = Path(str(config.hydra.sweep.dir))
        params = {**fixed, **{k: ",".join(v) for k, v in swept.items()}, "swept": ",".join(swept), "jobs": _jobs(swept)}
        tags = {
            "dlbench.benchmark": benchmark,
            "dlbench.sweep": sweep_dir.name,
            "dlbench.sweep_dir": str(sweep_dir.resolve()),
            "mlflow.source.name": dlbench_command(overrides, multirun=True),
            "mlflow.source.type": "LOCAL",
        }
        try:
            self.sweep = start_sweep_run(
                target,
                sweep_run_name(benchmark, swept),
                params,
                tags,
                float(mlflow_cfg.get("connect_timeout_s", 10)),
                heartbeat_s=float(config.get("gc", {}).get("heartbeat_s", DEFAULT_INTERVAL_S)),
            )
        except TrackingError as err:
            raise SystemExit(f"dlbench: {err}") from err
        self.swept = tuple(swept)
        write_handoff(sweep_dir, self.sweep)
        at_exit(self._finish_at_exit)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if str(config.hydra.mode) != "RunMode.MULTIRUN":
            return  # a single run has no sweep to join (and need not import tracking, pandas, for nothing)
        from dlbench.tracking.sweep import PARENT_ENV, read_handoff

        sweep = self.sweep or read_handoff(Path(str(config.hydra.sweep.dir)))
        if sweep is not None:
            os.environ[PARENT_ENV] = sweep.run_id  # read where the job builds its context (dlbench.cli)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._finish(completed=True)

    def _finish_at_exit(self) -> None:
        self._finish(completed=False)

    def _finish(self, completed: bool) -> None:
        """Tables, plots and the description on the sweep's run, then its status: FINISHED when the sweep
        completed and every job's run finished; KILLED when a job's run was killed; FAILED otherwise."""
        if self.sweep is None or self._finished:
            return
        self._finished = True
        from dlbench.cli.sweep import finish_sweep_run

        try:
            finish_sweep_run(self.sweep, self.swept, completed)
        except Exception as err:  # noqa: BLE001 - the jobs' own runs hold every measurement already
            log.warning("could not sum up the sweep in MLflow run %s: %s", self.sweep.run_id, err)
            from dlbench.tracking.sweep import attach_sweep_run

            try:  # never left RUNNING
                attach_sweep_run(self.sweep).end("FINISHED" if completed else "FAILED")
            except Exception as end_err:  # noqa: BLE001 - the store itself is gone; task=gc ends it later
                log.warning("could not end MLflow run %s: %s", self.sweep.run_id, end_err)


def at_exit(callback: Any) -> None:
    """Call ``callback`` when the interpreter exits, while thread pools still take work: MLflow downloads
    artifacts through one, and plain ``atexit`` runs after they have shut down. (``threading``'s exit hooks
    run last-registered first; concurrent.futures registers its own when imported, so it is imported here.)"""
    import concurrent.futures.thread  # noqa: F401

    register = getattr(threading, "_register_atexit", None) or atexit.register
    register(callback)


def _jobs(swept: dict[str, list[str]]) -> int:
    count = 1
    for values in swept.values():
        count *= len(values)
    return count


def _mark_lost_runs(target: Any, stale_after_s: float) -> None:
    """A sweep starts on a clean experiment: runs whose job died without ending them are marked FAILED."""
    from dlbench.tracking.heartbeat import mark_lost_runs

    for lost in mark_lost_runs(target, stale_after_s):
        print(f"dlbench: run {lost.run_id} ({lost.run_name}) marked FAILED: {lost.reason}", file=sys.stderr)


def launcher_parallelism(launcher: Any) -> int | None:
    """How many jobs a Hydra launcher config runs at once, where it says so (joblib's ``n_jobs``)."""
    if launcher is None:
        return None
    n_jobs = launcher.get("n_jobs") if hasattr(launcher, "get") else None
    if n_jobs is None:
        return None
    n_jobs = int(n_jobs)
    return max(1, len(available_cores()) + 1 + n_jobs) if n_jobs < 0 else n_jobs  # joblib: -1 all, -2 all but one
