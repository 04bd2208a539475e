"""Hydra's side of parallel sweeps: create the MLflow store once before any job starts and end the runs earlier
jobs left RUNNING when they died; how many jobs a launcher runs at once."""

from __future__ import annotations

import sys
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
