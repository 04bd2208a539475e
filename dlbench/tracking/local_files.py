"""dlbench's own files, in one folder ``.dlbench/`` beside a SQLite MLflow store (the default ``./mlflow.db``:
``./.dlbench/``), else in the folder dlbench started from; never loose beside the user's files. It holds the
reuse store (``dlbench_reuse.db``), the model files runs refer to, each once by its content
(``models/<sha256>.onnx``, named by the run tag ``dlbench.model_file``), and Hydra's run folders (``runs/``,
``multirun/``; conf/config.yaml). ``task=gc`` says what it holds and removes the models no run refers to."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from pathlib import Path

import psutil

from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget, mlflow_client

FOLDER = ".dlbench"
MODELS = "models"
#: the run tag naming the model file of a run in ``.dlbench/models/`` (``<sha256>.onnx``)
MODEL_TAG = "dlbench.model_file"
CHUNK = 1 << 20


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI; None for any other store."""
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None


def local_folder(uri: str, start_dir: Path) -> Path:
    """``.dlbench/`` beside the SQLite store at ``uri``, else in ``start_dir``."""
    db = sqlite_path(uri)
    return (db.parent if db is not None else start_dir) / FOLDER


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def store_model(path: Path, models: Path) -> Path:
    """Move ``path`` (a model file dlbench made) to ``models/<sha256>.onnx``; where a file of that content is
    there already, ``path`` is dropped. Returns the stored file, dated now (:func:`unreferenced_models` spares
    what is young)."""
    models.mkdir(parents=True, exist_ok=True)
    stored = models / f"{sha256_of(path)}{path.suffix or '.onnx'}"
    if stored.exists():
        path.unlink()
    else:  # a rename where both are on one file system; else a copy to a hidden name, renamed once whole
        partial = models / f".{stored.name}.{os.getpid()}.partial"
        shutil.move(path, partial)
        os.replace(partial, stored)
    os.utime(stored)
    return stored


def keep_model(run: TrackedRun, path: Path, start_dir: Path) -> None:
    """The model a run made, stored once: in ``.dlbench/models/`` beside a SQLite store, named by the tag
    ``dlbench.model_file``; for any other store (a team's server) as the run's artifact ``model/``, where all who
    read the run find it, and no copy stays here."""
    if sqlite_path(run.target.uri) is None:
        run.log_artifact(path, "model")
        path.unlink()
        return
    stored = store_model(path, local_folder(run.target.uri, start_dir) / MODELS)
    run.set_tags({MODEL_TAG: stored.name})


def unreferenced_models(models: Path, referenced: set[str], younger_than_s: float) -> list[Path]:
    """The files of ``models`` that no run names, except those stored less than ``younger_than_s`` ago (a
    command may have stored one and not yet tagged its run)."""
    if not models.is_dir():
        return []
    now = time.time()
    return sorted(
        p for p in models.iterdir()
        if p.is_file() and p.name not in referenced and now - p.stat().st_mtime >= younger_than_s
    )  # fmt: skip


def referenced_models(target: TrackingTarget) -> set[str]:
    """The model files the runs of every experiment of the store name, deleted runs too (MLflow keeps them until
    ``mlflow gc``, and one can restore them)."""
    from mlflow.entities import ViewType

    client = mlflow_client(target)
    experiments = [e.experiment_id for e in client.search_experiments(view_type=ViewType.ALL)]
    found: set[str] = set()
    for start in range(0, len(experiments), 100):  # MLflow searches at most 100 experiments at once
        token = None
        while True:
            page = client.search_runs(
                experiments[start : start + 100], f"tags.`{MODEL_TAG}` LIKE '%'", ViewType.ALL, 1000, page_token=token
            )
            found.update(run.data.tags[MODEL_TAG] for run in page)
            token = page.token
            if not token:
                break
    return found


#: the kinds of file ``.dlbench/`` holds, by top-level name (anything else is reported under its own name)
KINDS = {
    MODELS: "models (by content)",
    "runs": "run folders",
    "multirun": "multirun folders",
    "profile": "profiles of scripts run alone",
}
REUSE_PREFIX = "dlbench_reuse.db"
_RUN_FOLDER_PID = re.compile(r"_(\d+)-[0-9a-f]+$")  # conf/config.yaml's hydra.run.dir and hydra.sweep.dir


def kind_of(name: str) -> str:
    return "reuse store" if name.startswith(REUSE_PREFIX) else KINDS.get(name, name)


def holdings(folder: Path) -> dict[str, tuple[int, int]]:
    """Files and bytes per kind of what ``folder`` holds (links not followed)."""
    found: dict[str, tuple[int, int]] = {}
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        files = [entry] if not entry.is_dir() else [Path(r) / f for r, _, fs in os.walk(entry) for f in fs]
        sizes = [p.lstat().st_size for p in files if p.is_file() or p.is_symlink()]
        count, size = found.get(kind_of(entry.name), (0, 0))
        found[kind_of(entry.name)] = (count + len(sizes), size + sum(sizes))
    return found


def stray_models(folder: Path, younger_than_s: float) -> list[Path]:
    """Model files left in the run folders of commands that ended without storing them (a failed evaluation):
    a folder whose process (its name ends ``_<pid>-<random>``) still lives on this machine, or a file younger
    than ``younger_than_s``, is spared."""
    now, stray = time.time(), []
    for top in (folder / "runs", folder / "multirun"):
        for run_folder in sorted(top.iterdir()) if top.is_dir() else []:
            pid = _RUN_FOLDER_PID.search(run_folder.name)
            if pid is None or psutil.pid_exists(int(pid.group(1))):
                continue
            stray += [p for p in run_folder.rglob("*.onnx") if now - p.stat().st_mtime >= younger_than_s]
    return stray
