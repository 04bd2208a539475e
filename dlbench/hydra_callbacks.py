"""Hydra callbacks: create the MLflow store and experiment once, before any job (parallel ones) starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class PrepareTracking(Callback):
    """Creating the SQLite schema from many jobs at once races ("database is locked"): do it up front."""

    def _prepare(self, config: DictConfig) -> None:
        from dlbench.tracking import TrackingError, prepare_store, resolve_tracking

        mlflow_cfg = config.get("mlflow", {})
        target = resolve_tracking(mlflow_cfg.get("tracking_uri", ""), mlflow_cfg.get("experiment", ""), Path.cwd())
        try:
            prepare_store(target, float(mlflow_cfg.get("connect_timeout_s", 10)))
        except TrackingError as err:
            raise SystemExit(f"dlbench: {err}") from err

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.get("task", "run") != "list":
            self._prepare(config)
