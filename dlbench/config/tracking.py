"""Where runs go and when a run is lost: the ``mlflow`` and ``gc`` nodes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class MlflowConfig:
    """Where runs go. Empty values fall back to MLFLOW_TRACKING_URI / MLFLOW_EXPERIMENT_NAME, then to
    ``sqlite:///mlflow.db`` in the directory dlbench was started from and the experiment ``dlbench``."""

    tracking_uri: str = ""
    experiment: str = ""
    run_name: str = ""
    connect_timeout_s: float = 10.0
    #: per-operation metrics (op/<name>/...) for at most this many operations, the costliest; all are in
    #: results.csv
    max_operation_metrics: int = 200
    #: seconds between MLflow system-metrics samples (CPU, memory, GPU) while a run measures; 0: off
    system_metrics_interval_s: float = 2.0

    def __post_init__(self) -> None:
        if self.max_operation_metrics < 0:
            raise ValueError(f"mlflow.max_operation_metrics must be >= 0 (0: none), got {self.max_operation_metrics}")
        if self.system_metrics_interval_s < 0:
            raise ValueError(
                f"mlflow.system_metrics_interval_s must be >= 0 (0: off), got {self.system_metrics_interval_s}"
            )


@dataclass
class GcConfig:
    """Runs left RUNNING by a job that died without ending them (SIGKILL, the OOM killer, a lost node): every
    run stamps a heartbeat every ``heartbeat_s`` seconds while its job lives; ``task=gc`` and the start of a
    multirun mark runs whose heartbeat stopped more than ``stale_after_s`` seconds ago as FAILED."""

    stale_after_s: float = 300.0
    heartbeat_s: float = 30.0

    def __post_init__(self) -> None:
        if self.heartbeat_s <= 0:
            raise ValueError(f"gc.heartbeat_s must be > 0 seconds, got {self.heartbeat_s}")
        if self.stale_after_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"gc.stale_after_s={self.stale_after_s:g} is below two heartbeats "
                f"(gc.heartbeat_s={self.heartbeat_s:g}): live runs would be marked lost; raise gc.stale_after_s "
                "or lower gc.heartbeat_s"
            )
