"""``hydra/launcher=submitit_slurm``: submitit's Slurm launcher with what a benchmark sweep needs on a real
cluster. A controller that does not answer or refuses the jobs stops the sweep with a message naming the
launcher setting before anything runs; jobs are watched through ``squeue``, so a job that ends without a result
(``scancel``, SIGKILL, a lost node) ends the sweep with a message instead of a wait that never ends (submitit
asks ``sacct``, which clusters without accounting do not answer)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

SETTING = "hydra/launcher=submitit_slurm"
#: pending reasons Slurm never resolves by itself: the request exceeds what the partition offers or names
#: something that does not exist; such a job would wait for ever
NEVER_STARTS = frozenset(
    {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount", "InvalidQOS"}
)
#: states of a job that has ended (any other state may still run: pending, running, suspended, requeued, ...)
ENDED = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED"}
)
#: seconds between two ``squeue`` calls (result files are looked for every second)
QUEUE_POLL_S = 5.0
#: seconds a job that ended gets for its result file to appear (shared file systems lag), as submitit allows
RESULT_GRACE_S = 15.0


class SlurmUnusable(SystemExit):
    """The sweep cannot run on this Slurm cluster; the message says which setting to change."""

    def __init__(self, problem: str, advice: str) -> None:
        super().__init__(f"dlbench: {SETTING}: {problem}; {advice}")


def _slurm(*command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603


def check_controller() -> None:
    """The Slurm commands are there and the controller answers ``scontrol ping``."""
    missing = [tool for tool in ("sbatch", "srun", "squeue", "scontrol") if shutil.which(tool) is None]
    if missing:
        raise SlurmUnusable(
            f"{', '.join(missing)} not found on PATH (is this a Slurm login node?)",
            "run the sweep here with hydra/launcher=joblib instead; nothing was submitted",
        )
    try:
        ping = _slurm("scontrol", "ping", timeout=60)
        answer = " ".join((ping.stdout + ping.stderr).split())
    except subprocess.TimeoutExpired:
        ping, answer = None, "no answer within 60 s"
    if ping is None or ping.returncode != 0 or " is UP" not in answer:
        raise SlurmUnusable(
            f"the Slurm controller does not answer (scontrol ping: {answer[:300]})",
            "check that slurmctld runs and that SLURM_CONF names your cluster's slurm.conf; nothing was submitted",
        )


@dataclass(frozen=True)
class QueueEntry:
    state: str
    reason: str


def queue_entries(array_ids: Sequence[str]) -> dict[str, QueueEntry] | None:
    """``squeue`` for the given job ids, one entry per job or array task (``123`` or ``123_4``); jobs Slurm
    has already forgotten are absent. None when ``squeue`` cannot answer (the caller asks again later)."""
    try:
        out = _slurm("squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(sorted(set(array_ids))))
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0 and "invalid job id" not in out.stderr.lower():
        return None  # the controller is busy or restarting; a forgotten job is not an error
    entries = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            entries[parts[0]] = QueueEntry(parts[1], parts[2])
    return entries


def _failure(job: Any, what: str) -> str:
    return f"Slurm job {job.job_id} {what} (log: {job.paths.stderr})"


class SlurmLauncher(SubmititSlurmLauncher):
    """submitit's Slurm launcher, checked before submitting and watched through ``squeue``."""

    def _executor(self) -> Any:
        import submitit

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        executor = submitit.AutoExecutor(
            cluster="slurm", folder=folder, slurm_max_num_timeout=params.pop("max_num_timeout", 0)
        )
        generic = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in generic else f"slurm_{k}": v for k, v in params.items()})
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from submitit.core.utils import FailedJobError, FailedSubmissionError

        assert self.config is not None
        check_controller()
        executor = self._executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        log.info("Submitit 'slurm' sweep output dir : %s", sweep_dir)
        arguments = []
        for number, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))
            state = Singleton.get_state()
            arguments.append((list(overrides), "hydra.sweep.dir", number, f"job_id_for_{number}", state))
        try:
            jobs = executor.map_array(self, *zip(*arguments, strict=True))
        except (FailedJobError, FailedSubmissionError, OSError) as err:
            refusal = " ".join(str(err).split())
            raise SlurmUnusable(
                f"sbatch refused the sweep ({refusal[:500]})",
                "check hydra.launcher.partition, cpus_per_task, mem_gb, timeout_min, gpus_per_node and "
                "additional_parameters against your cluster (sinfo); nothing was submitted or measured",
            ) from None
        log.info("Submitted Slurm job(s) %s", ", ".join(job.job_id for job in jobs))
        return self._wait(jobs)

    def _wait(self, jobs: list[Any]) -> list[JobReturn]:
        """Each job's result, once every job has ended; a job that never will start is cancelled with the rest."""
        from submitit.core.utils import UncompletedJobError

        waiting = {job.job_id: job for job in jobs}
        gone_since: dict[str, float] = {}
        failures: list[str] = []
        last_poll = 0.0
        while waiting:
            for job_id, job in list(waiting.items()):
                if job.paths.result_pickle.exists():
                    del waiting[job_id]
            if not waiting or time.monotonic() - last_poll < QUEUE_POLL_S:
                time.sleep(1 if waiting else 0)
                continue
            last_poll = time.monotonic()
            queue = queue_entries([job_id.split("_")[0] for job_id in waiting])
            if queue is None:
                continue
            for job_id, job in list(waiting.items()):
                entry = queue.get(job_id)
                if entry is not None and entry.state == "PENDING" and entry.reason in NEVER_STARTS:
                    self._cancel(jobs)
                    raise SlurmUnusable(
                        f"Slurm will never start job {job_id} (pending, reason {entry.reason}: the request exceeds "
                        "what the partition offers or names something the cluster does not have)",
                        "lower hydra.launcher.cpus_per_task, mem_gb or timeout_min, or choose another "
                        "hydra.launcher.partition (sinfo shows them); the sweep's jobs were cancelled",
                    )
                if entry is not None and entry.state not in ENDED:
                    gone_since.pop(job_id, None)
                    continue
                first_seen = gone_since.setdefault(job_id, time.monotonic())
                if time.monotonic() - first_seen > RESULT_GRACE_S:
                    state = entry.state if entry is not None else "no longer in the queue"
                    failures.append(_failure(job, f"ended without a result ({state})"))
                    del waiting[job_id]
        returns = []
        for job in jobs:
            if not job.paths.result_pickle.exists():
                continue
            try:
                returns.append(job.results()[0])
            except UncompletedJobError as err:
                failures.append(_failure(job, f"failed: {str(err).strip().splitlines()[-1][:300]}"))
        if failures:
            for line in failures:
                log.error(line)
            raise SystemExit(
                f"dlbench: {len(failures)} of {len(jobs)} Slurm jobs of the sweep ended without a result "
                "(their runs ended KILLED or FAILED, or are marked FAILED by task=gc once their heartbeat is "
                "lost); rerun the same command with resume=true to measure only what is missing"
            )
        return returns

    @staticmethod
    def _cancel(jobs: list[Any]) -> None:
        ids = sorted({job.job_id.split("_")[0] for job in jobs})
        try:
            _slurm("scancel", *ids)
        except subprocess.TimeoutExpired:
            log.error("scancel %s did not answer; cancel the jobs yourself", " ".join(ids))
