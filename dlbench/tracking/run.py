"""A tracked MLflow run as a context manager that always ends with an honest status (FINISHED, FAILED or
KILLED), batches what it logs under MLflow's per-call limits, and keeps what was logged before a failure."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from dlbench.core.errors import interrupt_behind
from dlbench.tracking.heartbeat import DEFAULT_INTERVAL_S, Heartbeat, beat_tags
from dlbench.tracking.naming import round_significant
from dlbench.tracking.secrets import redact, scrub
from dlbench.tracking.store import TrackingTarget, mlflow_client, prepare_store, resolve_tracking, with_retry

MAX_PARAMS, MAX_METRICS, MAX_TAGS = 100, 1000, 100
MAX_PARAM_CHARS = 6000
PARENT_TAG = "mlflow.parentRunId"
T = TypeVar("T")


def _chunks(items: list[T], size: int) -> Iterable[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _param_text(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


class TrackedRun:
    """An MLflow run as a context manager. On leaving: FINISHED, or FAILED/KILLED with the error logged
    as ``error.txt``; the exception propagates. ``attach`` joins an existing run without ending it.

    A run it creates carries the tag ``dlbench.run_id`` and, when ``config_yaml`` is given, the resolved
    configuration as ``config.yaml``; it beats every ``heartbeat_s`` seconds until it ends (a run whose job
    dies without ending it is found by its silence: :mod:`dlbench.tracking.heartbeat`). With
    ``system_metrics_s`` > 0, MLflow's system-metrics monitor samples CPU, memory (and GPU where present) every
    that many seconds while the run is open."""

    def __init__(
        self,
        target: TrackingTarget,
        run_name: str = "",
        params: Mapping[str, object] | None = None,
        tags: Mapping[str, object] | None = None,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        experiment_id: str | None = None,
        config_yaml: str = "",
        system_metrics_s: float = 0.0,
        heartbeat_s: float = DEFAULT_INTERVAL_S,
        on_open: Callable[[TrackedRun], None] | None = None,
    ) -> None:
        self.target = target
        self._on_open = on_open  # what a new run logs first (the machine's state), after its config
        self.run_name = run_name
        self._params = dict(params or {})
        self._tags = dict(tags or {})
        self.parent_run_id = parent_run_id
        self.run_id = run_id or ""
        self._owns = run_id is None
        self._experiment_id = experiment_id
        self._config_yaml = config_yaml
        self.client: Any = None
        self.status = "RUNNING"
        self._system_metrics_s = system_metrics_s
        self._monitor: Any = None
        self._heartbeat_s = heartbeat_s
        self._heartbeat: Heartbeat | None = None

    @classmethod
    def attach(cls, target: TrackingTarget, run_id: str) -> TrackedRun:
        run = cls(target, run_id=run_id)
        run.client = mlflow_client(target)
        return run

    def __enter__(self) -> TrackedRun:
        self.client = mlflow_client(self.target)
        if self._owns:
            if self._system_metrics_s > 0:
                _prime_cpu_percent()
            experiment_id = self._experiment_id or prepare_store(self.target)
            tags = {k: _param_text(v) for k, v in redact(self._tags).items()}
            if self.parent_run_id:
                tags[PARENT_TAG] = self.parent_run_id
            tags.update(beat_tags(self._heartbeat_s))
            run = with_retry(
                lambda: self.client.create_run(experiment_id, run_name=scrub(self.run_name) or None, tags=tags),
                "create run",
            )
            self.run_id = run.info.run_id
        try:
            self._fill()
        except BaseException as err:  # a Ctrl-C here, after the run exists, must not leave it RUNNING
            if self._owns:
                with contextlib.suppress(Exception):
                    self.__exit__(type(err), err, None)
            raise
        return self

    def _fill(self) -> None:
        """What a new run gets right after it is created: its id tag, config, monitor, params, heartbeat."""
        if self._owns:
            self.set_tags({"dlbench.run_id": self.run_id})
            if self._config_yaml:
                self.log_text(self._config_yaml, "config.yaml")
            if self._on_open is not None:
                self._on_open(self)
            if self._system_metrics_s > 0:
                self._monitor = start_system_metrics(self.target, self.run_id, self._system_metrics_s)
        if self._params:
            self.log_params(self._params)
        if self._owns:
            self._heartbeat = Heartbeat(self.target, self.run_id, self._heartbeat_s).start()

    def start(self) -> TrackedRun:
        """Open the run outside a ``with`` block (end it with :meth:`end`)."""
        return self.__enter__()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            status = "FINISHED"
        elif exc is not None and interrupt_behind(exc) is not None:
            status = "KILLED"
        else:
            status = "FAILED"
        if exc is not None:
            try:
                self.log_text(f"{exc_type.__name__}: {exc}\n", "error.txt")
                self.set_tags({"dlbench.error": f"{exc_type.__name__}: {exc}"[:5000]})
            except Exception:  # noqa: S110 - never mask the original error with a logging failure
                pass
        if self._owns:
            self.end(status)

    def end(self, status: str = "FINISHED") -> None:
        if self._monitor is not None:
            monitor, self._monitor = self._monitor, None
            try:
                monitor.finish()
            except Exception:  # noqa: S110 - system metrics are an extra; the run's status is what counts
                pass
        self.status = status
        if self._heartbeat is not None:
            self._heartbeat.stop()
        with_retry(lambda: self.client.set_terminated(self.run_id, status=status), "end run")

    def log_params(self, params: Mapping[str, object]) -> None:
        from mlflow.entities import Param

        items = [Param(k, _param_text(v)) for k, v in redact(params).items()]
        for chunk in _chunks(items, MAX_PARAMS):
            with_retry(lambda c=chunk: self.client.log_batch(self.run_id, params=c), "log params")

    def set_tags(self, tags: Mapping[str, object]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, _param_text(v)) for k, v in redact(tags).items()]
        for chunk in _chunks(items, MAX_TAGS):
            with_retry(lambda c=chunk: self.client.log_batch(self.run_id, tags=c), "set tags")

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.log_metric_records([(name, float(value), step or 0) for name, value in metrics.items()])

    def log_metric_series(self, name: str, values: Iterable[float], steps: Iterable[int] | None = None) -> None:
        values = list(values)
        steps = list(steps) if steps is not None else list(range(len(values)))
        self.log_metric_records([(name, float(v), int(s)) for v, s in zip(values, steps, strict=True)])

    def log_metric_records(self, records: Iterable[tuple[str, float, int]]) -> None:
        """Metrics (name, value, step), NaN left out, values rounded to the significant digits a timing has."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(name, round_significant(value), now, step) for name, value, step in records if value == value]
        for chunk in _chunks(items, MAX_METRICS):
            with_retry(lambda c=chunk: self.client.log_batch(self.run_id, metrics=c), "log metrics")

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        with_retry(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path), "log artifact")

    def log_files(self, paths: Iterable[Path | None], artifact_path: str | None = None) -> None:
        """Each of ``paths`` that exists (a sweep's protocol files: :meth:`SweepFiles.existing`, a profile)."""
        for path in paths:
            if path is not None and path.exists():
                self.log_artifact(path, artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        clean = scrub(text)
        with_retry(lambda: self.client.log_text(self.run_id, clean, artifact_file), "log text")

    def log_table(self, frame: pd.DataFrame, artifact_file: str) -> None:
        """A DataFrame as a CSV artifact (big tables go here, not into thousands of metrics)."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / Path(artifact_file).name
            frame.to_csv(path, index=False)
            parent = str(Path(artifact_file).parent)
            self.log_artifact(path, None if parent in ("", ".") else parent)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        with_retry(lambda: self.client.log_figure(self.run_id, figure, artifact_file), "log figure")

    def log_dataset(self, frame: pd.DataFrame, name: str, digest: str, source: str, context: str = "benchmark") -> None:
        """``frame`` (what the run measured) as the run's dataset input, so the UI's "Dataset" column names
        the workload and runs on the same one can be grouped; ``source`` is the file it came from."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(
            name=name,
            digest=digest,
            source_type="local",
            source=json.dumps({"uri": scrub(source)}),
            schema=json.dumps({"mlflow_colspec": [_column_spec(c, frame[c]) for c in frame.columns]}),
            profile=json.dumps({"num_rows": len(frame), "num_elements": int(frame.size)}),
        )
        entity = DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])
        with_retry(lambda: self.client.log_inputs(self.run_id, datasets=[entity]), "log dataset")

    def data(self) -> Any:
        """The run as MLflow has it now (``.data.metrics``, ``.data.params``, ``.data.tags``)."""
        return with_retry(lambda: self.client.get_run(self.run_id), "read run").data


def _column_spec(name: object, column: pd.Series) -> dict[str, object]:
    """A column in MLflow's schema notation (what the UI's dataset panel lists)."""
    kinds = {"i": "long", "u": "long", "f": "double", "b": "boolean"}
    return {"type": kinds.get(column.dtype.kind, "string"), "name": str(name), "required": not column.isna().any()}


def _prime_cpu_percent() -> None:
    """psutil's CPU utilisation is measured since its previous call: make that the run's start, not boot."""
    try:
        import psutil

        psutil.cpu_percent()
    except Exception:  # noqa: BLE001, S110 - only the first sample is affected
        pass


def start_system_metrics(target: TrackingTarget, run_id: str, interval_s: float) -> Any:
    """MLflow's system-metrics monitor for ``run_id`` (``system/cpu_utilization_percentage``, memory, disk,
    network, GPU where present), or None where it cannot start; it stops when the run ends."""
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # not "Started monitoring" per run
        monitor = SystemMetricsMonitor(run_id, sampling_interval=interval_s, tracking_uri=target.uri)
        monitor.start()
        return monitor
    except Exception:  # noqa: BLE001 - a missing optional piece (e.g. no psutil) must not stop a measurement
        return None


def attach_run_from_env() -> TrackedRun | None:
    """The run a parent process opened, when this process was started with ``MLFLOW_RUN_ID``."""
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        return None
    return TrackedRun.attach(resolve_tracking(), run_id)


def child_environment(run: TrackedRun) -> dict[str, str]:
    """MLflow's own variables that let a child process log into ``run``."""
    env = {"MLFLOW_RUN_ID": run.run_id, "MLFLOW_TRACKING_URI": run.target.uri}
    if run.target.experiment:
        env["MLFLOW_EXPERIMENT_NAME"] = run.target.experiment
    return env
