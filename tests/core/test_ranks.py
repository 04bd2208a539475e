"""A rank's place read one way for the collectives and the data-parallel script: torchrun's variables, else a
Slurm step's (every task derives the same rendezvous port from the job id), and threads=0 shared per machine."""

from __future__ import annotations

import socket

from dlbench.core.cores import physical_cores
from dlbench.core.ranks import RankPlace, free_port, rank_place, threads_per_rank


def test_torchrun_variables_give_the_place_and_its_local_world() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert rank_place(env) == RankPlace(rank=3, world_size=4, local_rank=1, local_world_size=2)
    assert rank_place({}) is None


def test_every_task_of_a_slurm_step_meets_at_the_same_port_as_torchrun_ranks() -> None:
    tasks = []
    for task in range(4):
        env = {"SLURM_PROCID": str(task), "SLURM_NTASKS": "4", "SLURM_LOCALID": str(task % 2),
               "SLURM_NTASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "123456"}  # fmt: skip
        place = rank_place(env)
        tasks.append((place, env["MASTER_PORT"], env["RANK"], env["WORLD_SIZE"]))
    assert [p.rank for p, *_ in tasks] == [0, 1, 2, 3] and {p.local_world_size for p, *_ in tasks} == {2}
    assert len({port for _, port, *_ in tasks}) == 1  # one rendezvous
    assert [(r, w) for *_, r, w in tasks] == [(str(i), "4") for i in range(4)]  # exported as torchrun's
    assert 1024 < int(tasks[0][1]) < 65536


def test_threads_zero_shares_the_physical_cores_among_a_machines_ranks() -> None:
    assert threads_per_rank(3, 8) == 3
    assert threads_per_rank(0, 1) == physical_cores()
    assert threads_per_rank(0, 10**6) == 1  # at least one each


def test_a_free_port_can_be_bound() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", free_port()))
