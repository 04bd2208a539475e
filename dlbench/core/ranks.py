"""A rank's place in a torch.distributed process group, read one way by every program dlbench starts (the
collectives' ranks, the data-parallel training script): torchrun's variables, else Slurm's (one task per rank,
the rendezvous port derived from the job id, the same in every task); the loopback port of ranks started on
this machine; and how ``threads=0`` (all physical cores, :func:`dlbench.core.cores.resolve_threads`) is shared
among the ranks of one machine. No torch import."""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from dataclasses import dataclass

from dlbench.core.cores import resolve_threads

#: torch's default MASTER_PORT; a Slurm job's port is this plus its job id modulo :data:`PORT_SPREAD`
BASE_PORT = 29500
PORT_SPREAD = 20000


@dataclass(frozen=True)
class RankPlace:
    """This process's rank, the world size, its rank and the rank count on its machine."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def free_port() -> int:
    """A TCP port nobody listens on now, for rank 0's rendezvous store on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def slurm_port(job_id: str) -> int:
    """The rendezvous port of a Slurm job's ranks: every task computes the same one from the job id."""
    return BASE_PORT + int(job_id or "0") % PORT_SPREAD


def rank_place(env: MutableMapping[str, str] | None = None) -> RankPlace | None:
    """torchrun's ``RANK``/``WORLD_SIZE``, else a Slurm step's tasks (exported as torchrun's, with the master on
    this node unless set); None outside a process group."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        world = int(env["WORLD_SIZE"])
        local_world = int(env.get("LOCAL_WORLD_SIZE", env.get("SLURM_NTASKS_PER_NODE", str(world))).split("(")[0])
        return RankPlace(int(env["RANK"]), world, int(env.get("LOCAL_RANK", env["RANK"])), local_world)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        env.update(RANK=env["SLURM_PROCID"], WORLD_SIZE=env["SLURM_NTASKS"], LOCAL_RANK=env.get("SLURM_LOCALID", "0"))
        env.setdefault("MASTER_ADDR", "127.0.0.1")  # one node; several: export the first node's address
        env.setdefault("MASTER_PORT", str(slurm_port(env.get("SLURM_JOB_ID", "0"))))
        return rank_place(env)
    return None


def threads_per_rank(threads: int, local_ranks: int) -> int:
    """``threads``, or for 0 the physical cores shared among the ranks of this machine, at least one each."""
    return threads if threads > 0 else max(1, resolve_threads(0) // max(local_ranks, 1))
