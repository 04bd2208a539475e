"""Pinning parallel jobs to disjoint blocks of cores (``exclusive_cores=true``), so jobs that run at once do
not disturb each other's timings."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The cores this process could use before any job pinned it (a loky worker runs several jobs in turn).
_ORIGINAL_CORES: tuple[int, ...] | None = None


def available_cores() -> tuple[int, ...]:
    """The cores this process may run on, as it was before dlbench pinned it."""
    global _ORIGINAL_CORES
    if _ORIGINAL_CORES is None:
        _ORIGINAL_CORES = tuple(sorted(os.sched_getaffinity(0)))
    return _ORIGINAL_CORES


@dataclass(frozen=True)
class CoreBlock:
    """The cores a job runs on and the thread count that goes with them."""

    slot: int
    cores: tuple[int, ...]

    @property
    def threads(self) -> int:
        return len(self.cores)

    @property
    def label(self) -> str:
        return ",".join(str(c) for c in self.cores)


def threads_per_job(threads: int, parallel_jobs: int | None, n_cores: int) -> int:
    """``threads`` when set; otherwise the cores shared out among the jobs that run at once (at least 1)."""
    if threads > 0:
        return threads
    if parallel_jobs is None or parallel_jobs <= 0:
        return 1
    return max(1, n_cores // parallel_jobs)


@contextmanager
def exclusive_cores(job: int, threads: int, parallel_jobs: int | None, lock_dir: Path) -> Iterator[CoreBlock]:
    """Pin this process (and the benchmark processes it starts) to its own block of cores for one job.

    The cores are cut into blocks of ``threads``; the job takes block ``job % blocks`` when it is free,
    else the first free one (a lock file per block in ``lock_dir`` says which are taken, so jobs that a
    launcher starts out of order never share a block); when every block is taken (more jobs at once than
    blocks) it waits for one. The original affinity is restored afterwards.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise ValueError("exclusive_cores=true needs os.sched_setaffinity (Linux); drop it on this system")
    cores = available_cores()
    per_job = threads_per_job(threads, parallel_jobs, len(cores))
    if per_job > len(cores):
        raise ValueError(f"exclusive_cores: threads={per_job} but this machine lets dlbench use {len(cores)} cores")
    blocks = len(cores) // per_job
    if parallel_jobs is not None and parallel_jobs > 0 and parallel_jobs * per_job > len(cores):
        log.warning(
            "exclusive_cores: %d jobs x %d threads need %d cores but there are %d; jobs will wait for a free block",
            parallel_jobs,
            per_job,
            parallel_jobs * per_job,
            len(cores),
        )
    lock_dir.mkdir(parents=True, exist_ok=True)
    handle, slot = _take_block(job % blocks, blocks, lock_dir)
    block = CoreBlock(slot, cores[slot * per_job : (slot + 1) * per_job])
    try:
        os.sched_setaffinity(0, block.cores)
        log.info("job %d runs on cores %s (block %d of %d)", job, block.label, slot, blocks)
        yield block
    finally:
        os.sched_setaffinity(0, cores)
        handle.close()  # releases the lock


def _take_block(preferred: int, blocks: int, lock_dir: Path) -> tuple[Any, int]:
    order = [preferred, *(b for b in range(blocks) if b != preferred)]
    for slot in order:
        handle = (lock_dir / f"cores-{slot}.lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle, slot
        except BlockingIOError:
            handle.close()
    handle = (lock_dir / f"cores-{preferred}.lock").open("a")
    fcntl.flock(handle, fcntl.LOCK_EX)  # every block is busy: wait for ours
    return handle, preferred
