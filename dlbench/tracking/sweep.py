"""A multirun's own MLflow run: opened before any job starts and named in a file in the sweep folder, so
jobs in other processes (joblib, submitit, Slurm) open their runs as its children; its children are found
again when the sweep is over."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from dlbench.tracking.run import TrackedRun
from dlbench.tracking.store import TrackingTarget, prepare_store, search_runs

#: The file in the sweep folder that names the sweep's run (jobs read it where no other hand-off reaches)
HANDOFF_FILE = "mlflow_sweep_run.json"
#: Runs of a process with this variable set become children of the run it names (see dlbench.cli)
PARENT_ENV = "DLBENCH_PARENT_RUN_ID"
SWEEP_KIND = "sweep"


@dataclass(frozen=True)
class SweepHandle:
    """What a job needs to know of its sweep's run (plain strings: it travels pickled with the jobs)."""

    run_id: str
    uri: str
    experiment: str
    experiment_id: str

    @property
    def target(self) -> TrackingTarget:
        return TrackingTarget(self.uri, self.experiment)


def start_sweep_run(
    target: TrackingTarget,
    name: str,
    params: Mapping[str, object],
    tags: Mapping[str, object],
    timeout_s: float = 10.0,
) -> SweepHandle:
    """Open the sweep's run (it stays RUNNING until :func:`end_sweep_run`); a run named by
    ``DLBENCH_PARENT_RUN_ID`` (an MLflow Project's) becomes its parent."""
    from dlbench.tracking.naming import user_name
    from dlbench.tracking.system import hardware_tags

    experiment_id = prepare_store(target, timeout_s)
    user = {"mlflow.user": user_name()} if user_name() else {}
    run = TrackedRun(
        target,
        name,
        params,
        {**hardware_tags(), **user, "dlbench.kind": SWEEP_KIND, **tags},
        parent_run_id=os.environ.get(PARENT_ENV) or None,
        experiment_id=experiment_id,
    ).start()
    return SweepHandle(run.run_id, target.uri, target.experiment, experiment_id)


def write_handoff(sweep_dir: Path, sweep: SweepHandle) -> Path:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / HANDOFF_FILE
    path.write_text(json.dumps(asdict(sweep), indent=2) + "\n", encoding="utf-8")
    return path


def read_handoff(sweep_dir: Path) -> SweepHandle | None:
    """The sweep's run named in ``sweep_dir``, or None (no file, or one that is not ours)."""
    try:
        data = json.loads((sweep_dir / HANDOFF_FILE).read_text(encoding="utf-8"))
        return SweepHandle(**{k: str(data[k]) for k in ("run_id", "uri", "experiment", "experiment_id")})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def child_runs(sweep: SweepHandle) -> pd.DataFrame:
    """The jobs' runs (``params.*``, ``metrics.*``, ``tags.*`` columns), oldest first."""
    found = search_runs(sweep.target, f"tags.`mlflow.parentRunId` = '{sweep.run_id}'")
    return found.sort_values("start_time", ignore_index=True) if len(found) else found


def attach_sweep_run(sweep: SweepHandle) -> TrackedRun:
    return TrackedRun.attach(sweep.target, sweep.run_id)
