"""Reading what the machine does, for :mod:`dlbench.core.interference`: CPU counters of chosen CPUs from
``/proc/stat``, the runnable tasks, the CPU time and running threads of this process and its descendants
(psutil), and GPU utilisation per process through NVML (``pynvml``, optional)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Counters:
    at: float
    busy_s: float
    steal_s: float | None
    total_s: float
    own_s: float


def cpu_counters(cpus: Sequence[int]) -> tuple[float, float | None, float]:
    """Busy, steal and total CPU seconds of ``cpus`` since boot, from /proc/stat."""
    wanted = {f"cpu{c}" for c in cpus}
    busy = total = 0.0
    steal: float | None = None
    with open("/proc/stat", encoding="ascii") as handle:
        for line in handle:
            name, _, rest = line.partition(" ")
            if name not in wanted:
                continue
            fields = [int(v) for v in rest.split()]
            user, nice, system, idle, iowait, irq, softirq = (fields + [0] * 7)[:7]
            busy += user + nice + system + irq + softirq
            total += sum(fields[:8])
            if len(fields) >= 8:
                steal = (steal or 0.0) + fields[7]
    ticks = float(_CLOCK_TICKS)
    return busy / ticks, None if steal is None else steal / ticks, total / ticks


def procs_running() -> int | None:
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("procs_running"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def own_processes() -> list[Any]:
    import psutil

    me = psutil.Process()
    try:
        return [me, *me.children(recursive=True)]
    except psutil.Error:
        return [me]


def own_cpu_seconds(processes: Sequence[Any]) -> float:
    """CPU time of our processes, children they have waited for included (so nothing is lost when the
    benchmark exits between two samples)."""
    import psutil

    total = 0.0
    for proc in processes:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return total


def own_running(processes: Sequence[Any]) -> int:
    """Threads of our processes that are running or runnable right now."""
    running = 0
    for proc in processes:
        try:
            tasks = list(Path(f"/proc/{proc.pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                stat = (task / "stat").read_text(encoding="ascii", errors="replace")
            except OSError:
                continue
            if stat.rpartition(")")[2].split()[:1] == ["R"]:
                running += 1
    return running


class GpuReader:
    """Utilisation of the GPUs, and the share other processes have, through NVML (absent: all None)."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        self._last_seen = 0
        try:
            import pynvml  # optional: nvidia-ml-py

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # noqa: BLE001 - no library, no driver or no GPU: simply not reported
            self.nvml = None

    def read(self, own_pids: set[int]) -> tuple[float | None, float | None]:
        if self.nvml is None or not self.handles:
            return None, None
        util, others = [], 0.0
        for handle in self.handles:
            try:
                util.append(float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
                for sample in self.nvml.nvmlDeviceGetProcessUtilization(handle, self._last_seen):
                    if sample.pid not in own_pids:
                        others += float(sample.smUtil)
            except Exception:  # noqa: BLE001, S112 - NVML_ERROR_NOT_FOUND when no process ran lately
                continue
        self._last_seen = int(time.time() * 1e6) - 1_000_000
        return (max(util) if util else None), others


def available_memory_bytes() -> int:
    """Bytes of host memory that can be allocated now without swapping (psutil's ``available``)."""
    import psutil

    return int(psutil.virtual_memory().available)
