"""Runs beat while their job lives: a daemon thread stamps the run's ``dlbench.heartbeat`` tag every few seconds.
A run still RUNNING whose beat stopped (SIGKILL, the OOM killer, a lost node) is lost, and :func:`mark_lost_runs`
ends it FAILED with the reason "heartbeat lost" instead of leaving it RUNNING forever."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from dlbench.tracking.store import TrackingTarget, mlflow_client, with_retry

log = logging.getLogger(__name__)

#: unix time (seconds) of the run's latest beat, written by the job's own clock
HEARTBEAT_TAG = "dlbench.heartbeat"
#: seconds between beats, so a collector never calls a run lost before it missed two of them
INTERVAL_TAG = "dlbench.heartbeat_s"
LOST_REASON = "heartbeat lost"
RUNNING = "attributes.status = 'RUNNING'"
DEFAULT_INTERVAL_S = 30.0
DEFAULT_STALE_AFTER_S = 300.0


def beat_tags(interval_s: float, now: float | None = None) -> dict[str, str]:
    """The tags a run is created with: its first beat and its interval."""
    return {HEARTBEAT_TAG: f"{time.time() if now is None else now:.3f}", INTERVAL_TAG: f"{interval_s:g}"}


class Heartbeat:
    """A daemon thread that stamps ``run_id``'s heartbeat every ``interval_s`` seconds until :meth:`stop`.

    One tag write per beat, through a client of its own. A beat that fails (a busy SQLite file, a tracking
    server restarting) is skipped, never raised: the measurement must not die of its heartbeat."""

    def __init__(self, target: TrackingTarget, run_id: str, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.target = target
        self.run_id = run_id
        self.interval_s = interval_s
        self.beats = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"dlbench-heartbeat-{run_id[:8]}", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        client: Any = None
        while not self._stopped.wait(self.interval_s):
            try:
                client = client or mlflow_client(self.target)
                self.beat(client)
                self.beats += 1
            except Exception as err:  # noqa: BLE001 - a missed beat is harmless; a dead job is what gc looks for
                log.debug("heartbeat of run %s skipped: %s", self.run_id, err)

    def beat(self, client: Any) -> None:
        """One beat now: the tag write the thread makes every interval."""
        stamp = f"{time.time():.3f}"
        with_retry(lambda: client.set_tag(self.run_id, HEARTBEAT_TAG, stamp), "heartbeat", attempts=3)


@dataclass(frozen=True)
class LostRun:
    """A RUNNING run whose job stopped beating ``silent_s`` seconds ago (at ``last_beat``, unix seconds)."""

    run_id: str
    run_name: str
    last_beat: float
    silent_s: float
    where: str

    @property
    def reason(self) -> str:
        stamp = datetime.fromtimestamp(self.last_beat, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        where = f" on {self.where}" if self.where else ""
        return f"{LOST_REASON}: no heartbeat for {self.silent_s:.0f} s (last at {stamp} UTC{where})"


def last_beat(tags: Mapping[str, str]) -> float | None:
    """When the run last beat, or None for a run that never carried a heartbeat (not started by this dlbench)."""
    try:
        return float(tags[HEARTBEAT_TAG])
    except (KeyError, ValueError):
        return None


def silent_for(tags: Mapping[str, str], stale_after_s: float, now: float) -> float | None:
    """Seconds since the run's last beat when that is more than ``stale_after_s`` (and more than two of the
    run's own intervals); None for a run that still beats or never did."""
    beat = last_beat(tags)
    if beat is None:
        return None
    try:
        interval = float(tags.get(INTERVAL_TAG, DEFAULT_INTERVAL_S))
    except ValueError:
        interval = DEFAULT_INTERVAL_S
    silent = now - beat
    return silent if silent > max(stale_after_s, 2 * interval) else None


def _where(tags: Mapping[str, str]) -> str:
    host = tags.get("slurm.node") or tags.get("host.name", "")
    job = tags.get("slurm.array_id") or tags.get("slurm.job_id", "")
    return f"{host}, Slurm job {job}" if job else host


def lost_run(run_id: str, run_name: str, tags: Mapping[str, str], stale_after_s: float, now: float) -> LostRun | None:
    """The run as a :class:`LostRun` when its heartbeat stopped more than ``stale_after_s`` ago, else None."""
    silent = silent_for(tags, stale_after_s, now)
    if silent is None:
        return None
    return LostRun(run_id, run_name, last_beat(tags) or 0.0, silent, _where(tags))


def _running_runs(client: Any, experiment_id: str) -> list[Any]:
    def page(token: str | None) -> Any:
        return with_retry(
            lambda: client.search_runs([experiment_id], RUNNING, max_results=1000, page_token=token),
            "search running runs",
        )

    runs: list[Any] = []
    found = page(None)
    runs.extend(found)
    while found.token:
        found = page(found.token)
        runs.extend(found)
    return runs


def find_lost_runs(target: TrackingTarget, stale_after_s: float, now: float | None = None) -> list[LostRun]:
    """The RUNNING runs of the target's experiment whose heartbeat stopped more than ``stale_after_s`` ago."""
    client = mlflow_client(target)
    experiment = with_retry(lambda: client.get_experiment_by_name(target.experiment), "experiment")
    if experiment is None:
        return []
    now = time.time() if now is None else now
    found = (
        lost_run(run.info.run_id, run.info.run_name or "", run.data.tags, stale_after_s, now)
        for run in _running_runs(client, experiment.experiment_id)
    )
    return [lost for lost in found if lost is not None]


def mark_lost(target: TrackingTarget, lost: LostRun) -> bool:
    """End ``lost`` FAILED with the reason, its end time the last beat; False when it ended meanwhile or beat
    again (checked just before, so a job that was only slow keeps its run)."""
    client = mlflow_client(target)
    run = with_retry(lambda: client.get_run(lost.run_id), "get run")
    if run.info.status != "RUNNING" or last_beat(run.data.tags) != lost.last_beat:
        return False
    with_retry(lambda: client.set_tag(lost.run_id, "dlbench.error", lost.reason), "tag lost run")
    end_ms = int(lost.last_beat * 1000)
    with_retry(lambda: client.set_terminated(lost.run_id, status="FAILED", end_time=end_ms), "end lost run")
    return True


def mark_lost_runs(target: TrackingTarget, stale_after_s: float = DEFAULT_STALE_AFTER_S) -> list[LostRun]:
    """Mark every lost run of the target's experiment FAILED ("heartbeat lost"); return those it marked."""
    return [lost for lost in find_lost_runs(target, stale_after_s) if mark_lost(target, lost)]
