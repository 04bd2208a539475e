"""Resuming a sweep: the latest matching run's successful rows, so only the rest is measured again; runs whose job
died while RUNNING count as incomplete."""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dlbench.tracking.heartbeat import DEFAULT_STALE_AFTER_S, lost_run, mark_lost
from dlbench.tracking.store import TrackingTarget, download_artifact, search_runs

log = logging.getLogger(__name__)

#: runs of the same sweep looked at, newest first, for one that logged its results
MAX_CANDIDATES = 20
RESUME_KEYS = ("benchmark", "implementation", "batch_size", "dtype", "fp32_math", "device", "threads")
#: the fingerprint of the operations (``dlbench.operators.measure.operations_digest``)
DIGEST_TAG = "dlbench.operations_sha1"


@dataclass(frozen=True)
class ResumePoint:
    """What an earlier run of the same sweep already measured: its ok rows of ``results.csv``."""

    run_id: str
    status: str
    kept: pd.DataFrame

    @property
    def done_ids(self) -> set[int]:
        return {int(i) for i in self.kept["id"]}


def _quoted(value: object) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _tags(row: pd.Series) -> dict[str, str]:
    return {str(k)[5:]: str(v) for k, v in row.items() if str(k).startswith("tags.") and isinstance(v, str)}


def _ok_rows(target: TrackingTarget, run_id: str) -> pd.DataFrame | None:
    """The ok rows of the run's ``results.csv`` (each with the run that measured it); None without one."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = download_artifact(target, run_id, "results.csv", Path(tmp))
        except Exception:  # noqa: BLE001 - a run that logged no table has nothing to resume from
            return None
        previous = pd.read_csv(path)
    kept = previous[previous["status"] == "ok"].copy()
    if "source_run_id" not in kept:
        kept["source_run_id"] = run_id
    kept["source_run_id"] = kept["source_run_id"].fillna(run_id)
    return kept


def find_resume_point(
    target: TrackingTarget, params: dict, digest: str, stale_after_s: float = DEFAULT_STALE_AFTER_S
) -> ResumePoint | None:
    """The latest run in the experiment with the same benchmark, implementation, batch size, dtype, device,
    threads and operations (``digest``) that logged a ``results.csv``, and the operations it measured successfully; None
    when there is none.

    A run still RUNNING is incomplete: one that still beats is measuring elsewhere right now and is passed
    over; one whose heartbeat stopped more than ``stale_after_s`` ago (its job died) is marked FAILED
    ("heartbeat lost") and resumed from like any failed run. Runs without a table (a job killed before it
    logged one) are passed over for earlier ones."""
    conditions = [f"params.{key} = {_quoted(params[key])}" for key in RESUME_KEYS]
    conditions.append(f"tags.`{DIGEST_TAG}` = {_quoted(digest)}")
    conditions.append("tags.`dlbench.kind` = 'operator_sweep'")
    runs = search_runs(target, " and ".join(conditions), max_results=MAX_CANDIDATES)
    now = time.time()
    for _, candidate in runs.iterrows():
        run_id, status = str(candidate["run_id"]), str(candidate["status"])
        if status == "RUNNING":
            tags = _tags(candidate)
            lost = lost_run(run_id, tags.get("mlflow.runName", ""), tags, stale_after_s, now)
            if lost is None:
                log.info("resume: run %s of this sweep is still RUNNING and not lost; not resuming from it", run_id)
                continue
            if mark_lost(target, lost):
                log.warning("resume: run %s marked FAILED: %s", run_id, lost.reason)
            status = "FAILED"
        kept = _ok_rows(target, run_id)
        if kept is None:
            log.warning("resume: run %s (%s) logged no results.csv; looking at earlier runs", run_id, status)
            continue
        return ResumePoint(run_id, status, kept)
    return None
