"""Where runs go (URI and experiment), creating the store once with retries on lock contention, and the
search and artifact look-ups; with run.py, the only code that talks to MLflow."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from dlbench.tracking.secrets import scrub

DEFAULT_EXPERIMENT = "dlbench"
#: The experiment tag MLflow 3's UI reads for an experiment's kind: runs and metrics, not GenAI traces
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"

T = TypeVar("T")


class TrackingError(RuntimeError):
    """The tracking server or store cannot be used; the message names the URI."""


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


#: database back ends whose driver takes ``connect_timeout`` (seconds)
_TIMEOUT_DRIVERS = ("postgresql", "mysql")


def _check_database(uri: str, timeout_s: float) -> None:
    """Connect once, with a timeout: MLflow's own engine retries a refused login for many minutes."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    shown = scrub(uri)
    connect_args = {"connect_timeout": max(1, round(timeout_s))} if uri.startswith(_TIMEOUT_DRIVERS) else {}
    try:
        engine = sqlalchemy.create_engine(uri, connect_args=connect_args, poolclass=NullPool)
    except ModuleNotFoundError as err:
        raise TrackingError(
            f"tracking store {shown}: its database driver {err.name!r} is not installed "
            "(PostgreSQL: pip install 'dlbench[server]', which brings psycopg2-binary and psycopg)"
        ) from None
    except sqlalchemy.exc.ArgumentError as err:
        raise TrackingError(f"tracking URI {shown}: {err}") from None
    try:
        with engine.connect():
            pass
    except sqlalchemy.exc.SQLAlchemyError as err:
        reason = scrub(str(getattr(err, "orig", None) or err)).strip().splitlines()
        raise TrackingError(
            f"cannot log in to the tracking database {shown} within {timeout_s:g} s "
            f"({' '.join(line.strip() for line in reason[:2])}); check the user, password, host and database "
            "in MLFLOW_TRACKING_URI or mlflow.tracking_uri"
        ) from None  # the driver's traceback says nothing more
    finally:
        engine.dispose()


def check_reachable(target: TrackingTarget, timeout_s: float = 10.0) -> None:
    """Fail fast, naming the URI (never its password), when a tracking server does not answer, a database
    refuses the login or a store path is unusable."""
    uri = scrub(target.uri)
    if uri.startswith(("http://", "https://")):
        url = target.uri.rstrip("/") + "/health"
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
    elif uri.startswith(("postgresql", "mysql", "mssql")):
        _check_database(target.uri, timeout_s)
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


#: Loggers that narrate a store's creation (schema migrations) at INFO: a first run should stay quiet.
CHATTY_LOGGERS = ("mlflow.store.db.utils", "alembic", "alembic.runtime.migration")


def _quiet_store_chatter() -> None:
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


@functools.lru_cache(maxsize=16)
def _client(uri: str) -> Any:
    # MLflow is imported here, on first use: --help, task=list and configuration errors never pay for it.
    from mlflow.tracking import MlflowClient

    _quiet_store_chatter()
    if _sqlite_missing(uri):
        _create_sqlite_store(Path(uri[len("sqlite:///") :]))
    return MlflowClient(tracking_uri=uri)


#: A store being created: ``.NAME.PID.partial`` beside it until it is whole.
PARTIAL_SUFFIX = ".partial"


def _create_sqlite_store(db: Path) -> None:
    """Create a SQLite store whole or not at all. MLflow's schema migrations on SQLite are not one transaction:
    a Ctrl-C half-way through leaves a store that no later command opens. So MLflow builds the schema in a
    hidden file beside the store, which is linked into place once whole; a job that made it first wins, and
    what a killed creator left behind is removed."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking._tracking_service.utils import _get_sqlalchemy_store

    for stale in db.parent.glob(f".{db.name}.*{PARTIAL_SUFFIX}*"):
        pid = stale.name[len(db.name) + 2 :].split(".")[0]
        if pid.isdigit() and not _alive(int(pid)):
            stale.unlink(missing_ok=True)
    partial = db.with_name(f".{db.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    partial_uri = f"sqlite:///{partial}"
    try:
        # Written here first, so a folder that cannot take the file fails at once (MLflow would retry its
        # connection for minutes); an empty file is a new SQLite database.
        partial.write_bytes(b"")
        store = _get_sqlalchemy_store(partial_uri, None)  # the artifact root MLflow gives a store of its own
        store.engine.dispose()
        try:
            os.link(partial, db)  # never replaces a store another command created meanwhile
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not db.exists():
                os.replace(partial, db)
    finally:
        SqlAlchemyStore._engine_map.pop(partial_uri, None)
        for leftover in (partial, partial.with_name(partial.name + "-journal")):
            leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _runs_in(db: Path) -> int | None:
    """How many runs a SQLite store holds, read without MLflow; None where it is no store at all."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as connection:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            return int(connection.execute("SELECT count(*) FROM runs").fetchone()[0]) if "runs" in tables else 0
    except sqlite3.Error:
        return None


def cannot_open(uri: str, err: BaseException) -> str:
    """What to tell someone whose store MLflow cannot open, and what to do about it."""
    first = (scrub(str(err)).strip().splitlines() or [""])[0]
    message = f"tracking store {scrub(uri)} cannot be opened: {type(err).__name__}: {first}"
    if not uri.startswith("sqlite:///"):
        return message
    db = Path(uri[len("sqlite:///") :])
    if not db.exists():
        return f"{message}\n{db} could not be created: check that {db.parent} is writable and has space left"
    runs = _runs_in(db)
    if runs is None:
        return f"{message}\n{db} is not an MLflow SQLite store: point mlflow.tracking_uri at another file"
    if runs == 0:
        return (
            f"{message}\n{db} holds no runs (its schema was left half-made or comes from another MLflow "
            f"version): delete it, and the next command creates it anew"
        )
    return (
        f"{message}\n{db} holds {runs} run(s): keep it and a copy of it; open it with the MLflow version that "
        f"wrote it (`mlflow db upgrade {scrub(uri)}` brings an older schema up to date), or use another store"
    )


def import_tracking_in_background() -> Callable[[], None]:
    """Import MLflow and its SQL store (~2 s) in a thread while the caller reads its input, so that opening
    the store later costs only the opening; call the result to wait. Nothing is created here: a command
    that fails on its input leaves no store behind. Python threads share one core, but importing reads files
    and runs C code outside the lock: overlapped with reading an ONNX model it saves about half a second."""

    def load() -> None:
        try:
            import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
            import mlflow.tracking  # noqa: F401
        except Exception:  # noqa: S110 - the same import in the caller's thread reports it properly
            pass

    thread = threading.Thread(target=load, name="dlbench-import-mlflow", daemon=True)
    thread.start()
    return thread.join


def mlflow_client(target: TrackingTarget) -> Any:
    """One client (and one open store) per tracking URI for the whole process."""
    return _client(target.uri)


#: Stores and experiments this process created (the first run there): the command says how to open them.
_CREATED: set[TrackingTarget] = set()


def created_by_this_process(target: TrackingTarget) -> bool:
    return target in _CREATED


def _sqlite_missing(uri: str) -> bool:
    return uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists()


def prepare_store(target: TrackingTarget, timeout_s: float = 10.0) -> str:
    """Create the store and the experiment once (before parallel jobs start); return the experiment id."""
    check_reachable(target, timeout_s)
    new_store = _sqlite_missing(target.uri)
    try:
        client = with_retry(lambda: mlflow_client(target), f"open {target.uri}")
    except TrackingError:
        raise
    except Exception as err:
        raise TrackingError(cannot_open(target.uri, err)) from err
    if new_store:
        _CREATED.add(target)

    def get_or_create() -> str:
        found = client.get_experiment_by_name(target.experiment)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                client.restore_experiment(found.experiment_id)
            if EXPERIMENT_KIND_TAG not in found.tags:  # a kind the user chose stays
                client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            return found.experiment_id
        try:
            created = client.create_experiment(target.experiment, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
            _CREATED.add(target)
            return created
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
        raise TrackingError(f"tracking store {scrub(target.uri)}: {type(err).__name__}: {scrub(str(err))}") from err


def run_experiment_name(target: TrackingTarget, run_id: str) -> str:
    """The name of the experiment ``run_id`` belongs to (an MLflow Project's run, for its child runs)."""
    try:
        client = mlflow_client(target)
        run = with_retry(lambda: client.get_run(run_id), f"run {run_id}")
        return with_retry(lambda: client.get_experiment(run.info.experiment_id), "experiment").name
    except Exception as err:
        raise TrackingError(f"tracking store {scrub(target.uri)}: cannot read run {run_id}: {err}") from err


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
    return Path(mlflow_client(target).download_artifacts(run_id, path, str(dst)))


def get_run(target: TrackingTarget, run_id: str) -> Any:
    return mlflow_client(target).get_run(run_id)
