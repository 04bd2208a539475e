"""The only module that talks to MLflow: where runs go, creating the store once, and tracked runs that
always end with an honest status (FINISHED, FAILED or KILLED) and keep what was logged before a failure."""

from __future__ import annotations

import logging
import os
import random
import re
import signal
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

DEFAULT_EXPERIMENT = "dlbench"
MAX_PARAMS, MAX_METRICS, MAX_TAGS = 100, 1000, 100
MAX_PARAM_CHARS = 6000
PARENT_TAG = "mlflow.parentRunId"
SECRET_MARKERS = ("PASSWORD", "TOKEN", "SECRET", "KEY", "CREDENTIAL")

T = TypeVar("T")


class TrackingError(RuntimeError):
    """The tracking server or store cannot be used; the message names the URI."""


class RunInterrupted(KeyboardInterrupt):
    """SIGTERM, turned into an exception so runs end KILLED and child processes are stopped."""


@dataclass(frozen=True)
class TrackingTarget:
    uri: str
    experiment: str


def default_tracking_uri(start_dir: Path | None = None) -> str:
    return f"sqlite:///{(start_dir or Path.cwd()).resolve() / 'mlflow.db'}"


def resolve_tracking(uri: str = "", experiment: str = "", start_dir: Path | None = None) -> TrackingTarget:
    """Config first, then MLflow's own environment variables, then ``./mlflow.db`` where dlbench started."""
    resolved_uri = uri or os.environ.get("MLFLOW_TRACKING_URI", "") or default_tracking_uri(start_dir)
    if resolved_uri.startswith("sqlite:///") and not resolved_uri.startswith("sqlite:////"):
        relative = resolved_uri[len("sqlite:///") :]
        resolved_uri = f"sqlite:///{((start_dir or Path.cwd()) / relative).resolve()}"
    name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME", "") or DEFAULT_EXPERIMENT
    return TrackingTarget(resolved_uri, name)


def _is_transient(err: BaseException | str) -> bool:
    text = str(err).lower()
    return any(s in text for s in ("database is locked", "database table is locked", "unable to open database"))


class _RetriedLockFilter(logging.Filter):
    """MLflow logs every SQLite lock error with a traceback before raising it; ``with_retry`` retries those
    (parallel jobs), so the log would only alarm. A lock error that outlasts the retries still propagates."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _is_transient(record.getMessage())


logging.getLogger("mlflow.store.db.utils").addFilter(_RetriedLockFilter())


def with_retry(fn: Callable[[], T], what: str, attempts: int = 8) -> T:
    """Retry ``fn`` with jittered exponential back-off on SQLite lock contention (parallel jobs)."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as err:
            if attempt == attempts - 1 or not _is_transient(err):
                raise
            time.sleep(delay * (1 + random.random()))  # noqa: S311 - jitter, not cryptography
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


def check_reachable(target: TrackingTarget, timeout_s: float = 10.0) -> None:
    """Fail fast, naming the URI, when a tracking server does not answer or a store path is unusable."""
    uri = target.uri
    if uri.startswith(("http://", "https://")):
        url = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - user's server
                if response.status >= 400:
                    raise TrackingError(f"MLflow tracking server {uri} answered {response.status} on /health")
        except urllib.error.HTTPError as err:
            raise TrackingError(f"MLflow tracking server {uri} answered HTTP {err.code} on /health") from err
        except (urllib.error.URLError, OSError, TimeoutError) as err:
            reason = getattr(err, "reason", err)
            raise TrackingError(
                f"cannot reach the MLflow tracking server {uri} within {timeout_s:g} s ({reason}); "
                "check MLFLOW_TRACKING_URI or mlflow.tracking_uri"
            ) from None  # the socket traceback says nothing more
    elif uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        if not db.parent.is_dir():
            raise TrackingError(f"tracking store {uri}: folder {db.parent} does not exist")
    elif "://" in uri and not uri.startswith(("file://", "databricks", "postgresql", "mysql", "mssql")):
        raise TrackingError(f"tracking URI {uri!r}: unsupported scheme")
    elif "://" not in uri and (uri.lower().startswith(("http", "sqlite", "postgres")) or re.search(r":\d+", uri)):
        raise TrackingError(
            f"tracking URI {uri!r} looks like a misspelt URL (no '://'); use http://HOST:PORT, "
            "sqlite:///PATH or postgresql://USER@HOST/DB"
        )


def _client(target: TrackingTarget) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=target.uri)


def prepare_store(target: TrackingTarget, timeout_s: float = 10.0) -> str:
    """Create the store and the experiment once (before parallel jobs start); return the experiment id."""
    check_reachable(target, timeout_s)
    client = with_retry(lambda: _client(target), f"open {target.uri}")

    def get_or_create() -> str:
        found = client.get_experiment_by_name(target.experiment)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                client.restore_experiment(found.experiment_id)
            return found.experiment_id
        try:
            return client.create_experiment(target.experiment)
        except Exception:
            found = client.get_experiment_by_name(target.experiment)  # another job created it first
            if found is None:
                raise
            return found.experiment_id

    try:
        return with_retry(get_or_create, f"experiment {target.experiment}")
    except TrackingError:
        raise
    except Exception as err:
        raise TrackingError(f"tracking store {target.uri}: {type(err).__name__}: {err}") from err


def _chunks(items: list[T], size: int) -> Iterable[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _param_text(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


_URL_CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@")
#: environment values shorter than this are too common to be told apart from ordinary text
MIN_SECRET_CHARS = 6


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose name says they hold a secret (longest first)."""
    env = os.environ if environ is None else environ
    found = {v for k, v in env.items() if any(m in k.upper() for m in SECRET_MARKERS) and len(v) >= MIN_SECRET_CHARS}
    return sorted(found, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` with URL passwords and the values of secret environment variables replaced by ``***``."""
    text = _URL_CREDENTIALS.sub(r"\g<head>***@", text)
    for value in secret_values():
        text = text.replace(value, "***")
    return text


def redact(mapping: Mapping[str, object]) -> dict[str, object]:
    """Drop values whose key names a secret and scrub the others, so credentials never reach params or tags."""
    return {
        k: ("***" if any(m in k.upper() for m in SECRET_MARKERS) else scrub(v) if isinstance(v, str) else v)
        for k, v in mapping.items()
    }


class TrackedRun:
    """An MLflow run as a context manager. On leaving: FINISHED, or FAILED/KILLED with the error logged
    as ``error.txt``; the exception propagates. ``attach`` joins an existing run without ending it."""

    def __init__(
        self,
        target: TrackingTarget,
        run_name: str = "",
        params: Mapping[str, object] | None = None,
        tags: Mapping[str, object] | None = None,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        experiment_id: str | None = None,
    ) -> None:
        self.target = target
        self.run_name = run_name
        self._params = dict(params or {})
        self._tags = dict(tags or {})
        self.parent_run_id = parent_run_id
        self.run_id = run_id or ""
        self._owns = run_id is None
        self._experiment_id = experiment_id
        self.client: Any = None
        self.status = "RUNNING"

    @classmethod
    def attach(cls, target: TrackingTarget, run_id: str) -> TrackedRun:
        run = cls(target, run_id=run_id)
        run.client = _client(target)
        return run

    def __enter__(self) -> TrackedRun:
        self.client = _client(self.target)
        if self._owns:
            experiment_id = self._experiment_id or prepare_store(self.target)
            tags = {k: _param_text(v) for k, v in redact(self._tags).items()}
            if self.parent_run_id:
                tags[PARENT_TAG] = self.parent_run_id
            run = with_retry(
                lambda: self.client.create_run(experiment_id, run_name=scrub(self.run_name) or None, tags=tags),
                "create run",
            )
            self.run_id = run.info.run_id
        if self._params:
            self.log_params(self._params)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            status = "FINISHED"
        elif issubclass(exc_type, KeyboardInterrupt):
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
        self.status = status
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
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(name, value, now, step) for name, value, step in records if value == value]
        for chunk in _chunks(items, MAX_METRICS):
            with_retry(lambda c=chunk: self.client.log_batch(self.run_id, metrics=c), "log metrics")

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        with_retry(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path), "log artifact")

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


def run_experiment_name(target: TrackingTarget, run_id: str) -> str:
    """The name of the experiment ``run_id`` belongs to (an MLflow Project's run, for its child runs)."""
    try:
        client = _client(target)
        run = with_retry(lambda: client.get_run(run_id), f"run {run_id}")
        return with_retry(lambda: client.get_experiment(run.info.experiment_id), "experiment").name
    except Exception as err:
        raise TrackingError(f"tracking store {target.uri}: cannot read run {run_id}: {err}") from err


def search_runs(
    target: TrackingTarget, filter_string: str = "", experiments: Iterable[str] | None = None, max_results: int = 5000
) -> pd.DataFrame:
    """Runs as a DataFrame (``params.*``, ``metrics.*``, ``tags.*`` columns), through MLflow's search API."""
    import mlflow

    mlflow.set_tracking_uri(target.uri)
    names = list(experiments) if experiments else [target.experiment]
    return mlflow.search_runs(
        experiment_names=names, filter_string=filter_string, max_results=max_results, output_format="pandas"
    )


def download_artifact(target: TrackingTarget, run_id: str, path: str, dst: Path) -> Path:
    return Path(_client(target).download_artifacts(run_id, path, str(dst)))


def get_run(target: TrackingTarget, run_id: str) -> Any:
    return _client(target).get_run(run_id)


def install_sigterm_handler() -> None:
    """Turn SIGTERM into :class:`RunInterrupted`, so runs end KILLED and children are stopped."""

    def handler(signum: int, frame: object) -> None:
        raise RunInterrupted(f"received {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, handler)
