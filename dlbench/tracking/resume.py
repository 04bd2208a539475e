"""Resuming a sweep: the latest matching run's successful rows, so only the rest is measured again."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

log = logging.getLogger(__name__)

RESUME_KEYS = ("benchmark", "implementation", "batch_size", "dtype", "device", "threads")
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


def find_resume_point(target, params: dict, digest: str) -> ResumePoint | None:
    """The latest run in the experiment with the same benchmark, implementation, batch size, dtype, device,
    threads and operations (``digest``), and the operations it measured successfully; None when there is none."""
    from dlbench.tracking.store import download_artifact, search_runs

    conditions = [f"params.{key} = {_quoted(params[key])}" for key in RESUME_KEYS]
    conditions.append(f"tags.`{DIGEST_TAG}` = {_quoted(digest)}")
    conditions.append("tags.`dlbench.kind` = 'operator_sweep'")
    runs = search_runs(target, " and ".join(conditions), max_results=1)
    if runs.empty:
        return None
    latest = runs.iloc[0]
    run_id, status = str(latest["run_id"]), str(latest["status"])
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = download_artifact(target, run_id, "results.csv", Path(tmp))
        except Exception as err:  # noqa: BLE001 - a run that logged no table has nothing to resume from
            log.warning("resume: run %s has no results.csv (%s); measuring everything", run_id, err)
            return ResumePoint(run_id, status, pd.DataFrame(columns=["id", "status", "source_run_id"]))
        previous = pd.read_csv(path)
    kept = previous[previous["status"] == "ok"].copy()
    if "source_run_id" not in kept:
        kept["source_run_id"] = run_id
    kept["source_run_id"] = kept["source_run_id"].fillna(run_id)
    return ResumePoint(run_id, status, kept)
