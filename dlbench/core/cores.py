"""The threads policy: ``threads=0`` means every physical core this process may run on (hyper-threads of a
core share its execution units, so a second thread per core mostly adds contention to a kernel's timing)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

_TOPOLOGY = Path("/sys/devices/system/cpu")


def allowed_cpus() -> tuple[int, ...]:
    """The logical CPUs this process may run on (its affinity), or all of them where that is unknown."""
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


@lru_cache(maxsize=8)
def _physical_cores(cpus: tuple[int, ...]) -> int:
    cores = set()
    for cpu in cpus:
        topology = _TOPOLOGY / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            cores.add(("cpu", str(cpu)))  # no topology (containers, other systems): count it as a core
            continue
        cores.add((package, core))
    return max(1, len(cores))


def physical_cores() -> int:
    """Physical cores among the CPUs this process may use (two hyper-threads of one core count once)."""
    return _physical_cores(allowed_cpus())


def resolve_threads(threads: int) -> int:
    """The thread count a benchmark runs with: ``threads``, or all physical cores for 0."""
    return threads if threads > 0 else physical_cores()


def thread_environment(threads: int) -> dict[str, str]:
    """The environment that gives a process started by dlbench (a training script, a benchmark) ``threads``
    OpenMP and MKL threads unless it sets its own: torch's default would otherwise be every core of the
    machine, whatever this process's affinity or ``threads`` say."""
    count = str(resolve_threads(threads))
    return {"OMP_NUM_THREADS": count, "MKL_NUM_THREADS": count}
