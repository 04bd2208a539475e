"""The command's last line: which runs it made, where, and - the first time a store or experiment is used -
how to look at them in the MLflow UI. Jobs of a multirun leave their runs in ``runs.json`` beside their
output, so the line also covers jobs that ran in other processes (joblib, submitit)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

RUNS_FILE = "runs.json"
SHOWN_NAMES = 4


@dataclass(frozen=True)
class RunRecord:
    name: str
    run_id: str
    status: str
    uri: str
    experiment: str
    #: the first run of a store or experiment this process created: the line says how to open it
    new_store: bool = False


def records_of_this_process() -> list[RunRecord]:
    """Top-level runs opened here (child runs are counted by their parents' pages in the UI)."""
    from dlbench.tracking.runs import opened_runs
    from dlbench.tracking.store import created_by_this_process

    return [
        RunRecord(run.run_name, run.run_id, run.status, run.target.uri, run.target.experiment,
                  created_by_this_process(run.target))
        for run in opened_runs()
        if not run.parent_run_id
    ]  # fmt: skip


def write_records(path: Path, records: Sequence[RunRecord], failed: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"failed": failed, "runs": [asdict(r) for r in records]}
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")


def read_records(sweep_dir: Path) -> tuple[list[RunRecord], list[str]]:
    """The runs every job of a multirun recorded, in job order, and the jobs that failed."""
    found: list[RunRecord] = []
    failed: list[str] = []
    jobs = sorted(sweep_dir.glob(f"*/{RUNS_FILE}"), key=lambda p: (len(p.parent.name), p.parent.name))
    for path in jobs:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            found += [RunRecord(**item) for item in document["runs"]]
        except (OSError, ValueError, TypeError, KeyError):
            continue  # a job that died mid-write: its runs are still in the store
        if document.get("failed"):
            failed.append(path.parent.name)
    return found, failed


def ui_hint(uri: str, start_dir: Path) -> str:
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser"
    if uri == f"sqlite:///{(start_dir / 'mlflow.db').resolve()}":
        # the relative form, run here: without --backend-store-uri, MLflow 2 (and MLflow 3 where ./mlruns holds
        # a file store) opens another store
        return "open the MLflow UI with `mlflow ui --backend-store-uri sqlite:///mlflow.db` (run here) and http://127.0.0.1:5000"
    return f"open the MLflow UI with `mlflow ui --backend-store-uri {uri}` and http://127.0.0.1:5000"


def final_line(
    records: Iterable[RunRecord], start_dir: Path, new_stores: Iterable[str] = (), failed_jobs: Sequence[str] = ()
) -> str:
    """One line naming the runs (the first few by name), their experiment and store, and where a store is
    new, how to open the UI on it. Empty when the command made no run."""
    records = list(records)
    failed = f"; job {', '.join(failed_jobs)} failed" if failed_jobs else ""
    if len(failed_jobs) > 1:
        failed = f"; jobs {', '.join(failed_jobs)} failed"
    if not records:
        return f"dlbench: no run was made{failed}" if failed_jobs else ""
    statuses = sorted({r.status for r in records})
    ended = "finished" if statuses == ["FINISHED"] else "ended " + "/".join(statuses)
    names = ", ".join(f"{r.name} ({r.run_id[:8]})" for r in records[:SHOWN_NAMES])
    if len(records) > SHOWN_NAMES:
        names += f" and {len(records) - SHOWN_NAMES} more"
    places = sorted({(r.experiment, r.uri) for r in records})
    where = "; ".join(f"experiment {experiment!r} in {uri}" for experiment, uri in places)
    what = f"run {names}" if len(records) == 1 else f"{len(records)} runs {names}"
    line = f"dlbench: {what} {ended}, {where}{failed}"
    fresh = sorted({r.uri for r in records if r.new_store} | set(new_stores))
    hints = [ui_hint(uri, start_dir) for uri in fresh]
    return line + ("; " + "; ".join(hints) if hints else "")


class RememberSweep(Callback):
    """Keeps the multirun's folder in the launching process, where the entry prints the final line."""

    sweep_dir: Path | None = None

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        RememberSweep.sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
