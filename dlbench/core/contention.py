"""Whether an operation's threads worked or waited while it was timed: the CPU time its process used (every
thread; for an executable, its whole process tree) against the wall time and the threads that took part.

``cpu_efficiency = CPU seconds / (wall seconds x threads that took part)``. A thread takes part when it ran
for at least :data:`PARTICIPATION` of the wall time, so a kernel too small for the library to split (torch
runs an elementwise operator of 30,000 floats on one thread whatever ``threads`` says) is judged against one
thread, not two. Threads of a parallel kernel that wait for one another spin or sleep: spinning counts as CPU
time (no harm: nothing waited for a core), sleeping while a sibling is descheduled does not, and that is what
the figure catches, as does a single thread that shares its core with other work.

Measured on the shared 2-core VM (ResNet-50 convolutions at batch 1, torch, 0.3 s each): quiet (load 0.3),
every operation at 0.96-1.00 with threads=1 and threads=2; with one CPU burner 0.57-0.75 at threads=2; with
two or three burners 0.36-0.55 at threads=2 and 0.42-0.50 at threads=1 (medians 1.3-70x their quiet ones).
:data:`CONTENDED_BELOW` sits between the two groups, with room for a sampler thread or a page fault on a
quiet machine. On a CUDA device the host thread waits for the GPU by design: the figure does not apply.

Linux only (``/proc``); elsewhere nothing is judged. CPU time of threads that ended between two readings
is lost (children that were waited for are counted), so a program that starts threads per operation reads
low; the persistent thread pools of torch, oneDNN and onnxruntime do not."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dlbench.core.settings import default
from dlbench.core.ticker import Ticker

#: below this cpu_efficiency the operation's threads waited for cores held by other work: status contended
#: (``measure.contended_below``, in the settings table)
CONTENDED_BELOW = float(default("contended_below"))
#: a thread takes part in an operation when it ran for this share of the wall time at least
PARTICIPATION = 0.1
#: shorter stretches are not judged: the CPU time of a thread that is running is known to a scheduler tick
MIN_WALL_S = 0.04
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuReading:
    """CPU seconds per thread of some processes at one moment, and of their children already waited for."""

    at: float
    threads: Mapping[tuple[int, int], float] = field(default_factory=dict)
    waited_children_s: float = 0.0


def _thread_cpu_s(pid: int, tid: int) -> float | None:
    """Seconds thread ``tid`` ran: nanoseconds from schedstat, else clock ticks from stat."""
    base = f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{base}/schedstat", encoding="ascii") as handle:
            return int(handle.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"{base}/stat", encoding="ascii") as handle:
            fields = handle.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        return None


def _waited_children_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rpartition(")")[2].split()
        return (int(fields[13]) + int(fields[14])) / _TICKS
    except (OSError, ValueError, IndexError):
        return 0.0


def read_cpu(pids: Iterable[int]) -> CpuReading:
    """The CPU time of every thread of ``pids`` now (processes that are gone are left out)."""
    started = time.perf_counter()
    threads: dict[tuple[int, int], float] = {}
    waited = 0.0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except (OSError, ValueError):
            continue
        for tid in tids:
            seconds = _thread_cpu_s(pid, tid)
            if seconds is not None:
                threads[(pid, tid)] = seconds
        waited += _waited_children_s(pid)
    return CpuReading((started + time.perf_counter()) / 2, threads, waited)  # the reading takes time itself


def available() -> bool:
    """Whether this system lets a process read its threads' CPU time (Linux ``/proc``)."""
    return os.path.isdir(f"/proc/{os.getpid()}/task")


def cpu_efficiency(
    before: CpuReading, after: CpuReading, process_cpu_s: float | None = None, min_wall_s: float = MIN_WALL_S
) -> float | None:
    """CPU seconds over (wall seconds x threads that took part) between two readings, at most 1; None when
    nothing ran, a process ended in between, or the stretch is too short to judge. ``process_cpu_s``: the
    exact CPU time of this process meanwhile (``time.process_time``), where the readings are of this process:
    a running thread's schedstat lags by up to one scheduler tick (4 ms), 16% of a 25 ms stretch."""
    wall = after.at - before.at
    if wall < max(min_wall_s, 1e-9) or {pid for pid, _ in before.threads} - {pid for pid, _ in after.threads}:
        return None  # too short, or a process ended in between, taking its threads' CPU time with it
    used = [max(s - before.threads.get(key, 0.0), 0.0) for key, s in after.threads.items()]
    waited = max(after.waited_children_s - before.waited_children_s, 0.0)
    # threads below the share (a sampler, a watchdog) are neither the kernel's time nor its threads
    working = [s for s in used if s >= PARTICIPATION * wall]
    taking_part = len(working)
    if waited >= PARTICIPATION * wall:
        working.append(waited)
        taking_part += max(math.ceil(waited / wall - 1e-9), 1)
    if taking_part == 0:
        return min(sum(used) / wall, 1.0) if sum(used) + waited > 0 else None
    cpu = process_cpu_s if process_cpu_s is not None else sum(working)
    return min(cpu / (wall * taking_part), 1.0)


def contended(efficiency: float | None, limit: float = CONTENDED_BELOW) -> bool:
    """Whether an operation timed with this efficiency waited for cores (``limit`` 0: never)."""
    return efficiency is not None and efficiency < limit


def contention_limit(device: str, limit: float = CONTENDED_BELOW) -> float:
    """The limit that applies on ``device``: none on a GPU, where the host thread waits for it by design."""
    return limit if device == "cpu" else 0.0


def children_pids() -> list[int]:
    """This process's descendants: the executable being timed and what it started."""
    from dlbench.core.machine import own_processes

    return [p.pid for p in own_processes()[1:]]


class RowCpuWatch:
    """While an executable writes its output, reads its process tree's CPU time each time rows appear, so
    each row gets the cpu efficiency of the stretch in which it was measured.

    A stretch begins when the output last changed, so a program that writes its header before measuring
    (as the protocol's programs do) has every row judged; rows in the first change seen are not (their
    stretch holds the program's start: imports, a library's set-up, on one thread whatever the kernel
    does), nor are rows whose process ended before they were read. Rows that appear together share their
    stretch's figure."""

    def __init__(
        self,
        output_size: Callable[[], int],
        rows_done: Callable[[], Sequence[int]],
        pids: Callable[[], Iterable[int]] = children_pids,
        interval_s: float = 0.02,
    ) -> None:
        self.output_size = output_size
        self.rows_done = rows_done
        self.pids = pids
        self.interval_s = interval_s
        #: operation id -> cpu efficiency of the stretch that ended with its row (None: not judged)
        self.efficiency: dict[int, float | None] = {}
        self._ticker = Ticker(self._tick, interval_s, "dlbench-row-cpu", (OSError, ValueError))
        self._size = -1
        self._last: CpuReading | None = None
        #: the output has been seen change once (its header, or rows): later stretches hold no start-up
        self._started = False

    def _tick(self) -> None:
        size = self.output_size()
        if size == self._size:
            return
        self._size = size
        new = [i for i in self.rows_done() if i not in self.efficiency]
        reading = read_cpu(self.pids())
        judged = self._started and self._last is not None
        for op_id in new:
            self.efficiency[op_id] = cpu_efficiency(self._last, reading) if judged else None  # type: ignore[arg-type]
        self._last, self._started = reading, True

    def __enter__(self) -> RowCpuWatch:
        if available():
            self._last = read_cpu(self.pids())
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._ticker.stop():
            return
        try:  # rows written since the last tick: the program may have ended, taking its CPU time with it
            for op_id in self.rows_done():
                self.efficiency.setdefault(op_id, None)
        except (OSError, ValueError):
            pass
