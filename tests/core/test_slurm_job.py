"""What a job learns from Slurm's environment: its id, array task, node and CPUs; threads=0 inside a job uses
the job's CPUs."""

from __future__ import annotations

from dlbench.core.slurm import job_threads, slurm_job

ARRAY_TASK = {
    "SLURM_JOB_ID": "1047",
    "SLURM_ARRAY_JOB_ID": "1040",
    "SLURM_ARRAY_TASK_ID": "7",
    "SLURMD_NODENAME": "cn-a100-03",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURM_CLUSTER_NAME": "lab",
    "SLURM_CPUS_PER_TASK": "8",
    "SLURM_CPUS_ON_NODE": "64",
    "SLURM_TASKS_PER_NODE": "1",
}


def test_an_array_task_is_tagged_with_its_job_node_partition_and_cpus() -> None:
    job = slurm_job(ARRAY_TASK)
    assert job is not None
    assert job.tags() == {
        "slurm.job_id": "1047",
        "slurm.array_id": "1040_7",
        "slurm.node": "cn-a100-03",
        "slurm.partition": "gpu",
        "slurm.cluster": "lab",
        "slurm.cpus": "8",
    }


def test_threads_zero_in_a_job_takes_cpus_per_task_then_the_nodes_cpus_shared_by_its_tasks() -> None:
    assert job_threads(0, ARRAY_TASK) == 8
    whole_node = {k: v for k, v in ARRAY_TASK.items() if k != "SLURM_CPUS_PER_TASK"}
    assert job_threads(0, whole_node) == 64  # --exclusive without --cpus-per-task: the whole node
    assert job_threads(0, {**whole_node, "SLURM_CPUS_ON_NODE": "64(x2)", "SLURM_TASKS_PER_NODE": "4(x2)"}) == 16


def test_explicit_threads_and_runs_outside_slurm_are_left_alone() -> None:
    assert job_threads(3, ARRAY_TASK) == 3
    assert job_threads(0, {"PATH": "/usr/bin"}) == 0
    assert slurm_job({"PATH": "/usr/bin"}) is None
