"""What Slurm tells a job through its environment: the job (and array task) id, the node, the partition and how
many CPUs the job was given, so a run records where it ran and uses the CPUs it was allocated."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


def _count(value: str | None) -> int | None:
    """A CPU count from Slurm's variables; ``SLURM_CPUS_ON_NODE`` may read like ``4(x2)`` on some versions."""
    if not value:
        return None
    digits = value.split("(", 1)[0].strip()
    return int(digits) if digits.isdigit() and int(digits) > 0 else None


@dataclass(frozen=True)
class SlurmJob:
    """The Slurm job this process runs in.

    ``job_id`` is Slurm's unique id (``SLURM_JOB_ID``); ``array_id`` is ``<array job>_<task>`` for a task of an
    array job (what ``squeue`` shows and ``scancel`` accepts), else empty."""

    job_id: str
    array_id: str = ""
    node: str = ""
    partition: str = ""
    cluster: str = ""
    cpus_per_task: int | None = None
    cpus_on_node: int | None = None
    tasks_on_node: int | None = None

    @property
    def cpus(self) -> int | None:
        """CPUs this task may use: what ``--cpus-per-task`` asked for, else the job's CPUs on this node shared
        among its tasks there (``--exclusive`` without ``--cpus-per-task``: the whole node)."""
        if self.cpus_per_task:
            return self.cpus_per_task
        if self.cpus_on_node:
            return max(1, self.cpus_on_node // (self.tasks_on_node or 1))
        return None

    def tags(self) -> dict[str, str]:
        """Flat run tags: ``slurm.job_id``, ``slurm.array_id``, ``slurm.node``, ``slurm.partition``, ..."""
        tags = {
            "slurm.job_id": self.job_id,
            "slurm.array_id": self.array_id,
            "slurm.node": self.node,
            "slurm.partition": self.partition,
            "slurm.cluster": self.cluster,
            "slurm.cpus": str(self.cpus or ""),
        }
        return {k: v for k, v in tags.items() if v}


def slurm_job(environ: Mapping[str, str] | None = None) -> SlurmJob | None:
    """The Slurm job of this process (from ``SLURM_*`` variables), or None outside Slurm."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID", "")
    if not job_id:
        return None
    array_job, array_task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
    tasks = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "")
    return SlurmJob(
        job_id=job_id,
        array_id=f"{array_job}_{array_task}" if array_job and array_task else "",
        node=env.get("SLURMD_NODENAME", ""),
        partition=env.get("SLURM_JOB_PARTITION", ""),
        cluster=env.get("SLURM_CLUSTER_NAME", ""),
        cpus_per_task=_count(env.get("SLURM_CPUS_PER_TASK")),
        cpus_on_node=_count(env.get("SLURM_CPUS_ON_NODE")),
        tasks_on_node=_count(tasks),
    )


def job_threads(threads: int, environ: Mapping[str, str] | None = None) -> int:
    """``threads`` when set; with ``threads=0`` inside a Slurm job, the CPUs the job was given (a job must not
    spread over the cores of a node it shares, nor fall back to one thread); otherwise 0 (all cores)."""
    if threads > 0:
        return threads
    job = slurm_job(environ)
    return (job.cpus or 0) if job is not None else 0
