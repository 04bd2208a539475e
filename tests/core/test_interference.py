"""Interference: when other work leaves the benchmark fewer cores than its threads, the run is noisy; the
sampler sees real CPU-burning processes as others and our own children as ours; each operation gets the
intervals it ran in; threads=0 means physical cores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlbench.core import cores
from dlbench.core.interference import InterferenceReport, InterferenceWatch, MachineState, busy_reason
from dlbench.core.machine import own_cpu_seconds, own_processes

BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def quiet(**overrides: float | None) -> MachineState:
    values = dict(seconds=1.0, load_avg_1m=0.1, other_cpu_cores=0.05, other_runnable=0.0, steal_pct=0.0)
    values.update(overrides)
    return MachineState(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "cores_", "threads", "reason"),
    [
        (quiet(), 4, 4, ""),
        (quiet(other_cpu_cores=1.2), 4, 2, ""),  # others use the cores the benchmark leaves free
        (quiet(other_cpu_cores=1.2), 4, 4, "other processes kept 1.2 of 4 cores busy"),
        (quiet(other_runnable=3.0), 4, 2, "other processes kept 3.0 of 4 cores busy or waiting"),
        (quiet(), 2, 8, "threads=8 exceeds the 2 cores"),
        (quiet(steal_pct=12.0), 4, 1, "hypervisor took 12% of the CPU time"),
    ],
)
def test_busy_means_more_runnable_work_than_free_cores_for_the_threads(
    state: MachineState, cores_: int, threads: int, reason: str
) -> None:
    found = busy_reason(state, cores_, threads)
    assert (reason in found) if reason else found == ""


def test_gpu_users_matter_only_on_a_gpu() -> None:
    state = quiet(gpu_other_util_pct=40.0)
    assert busy_reason(state, 4, 1, "cpu") == ""
    assert "other processes used 40% of the GPU" in busy_reason(state, 4, 1, "cuda")


def test_each_operation_gets_the_intervals_between_its_row_and_the_previous_one() -> None:
    intervals = tuple(quiet(other_cpu_cores=float(i)) for i in range(6))
    report = InterferenceReport(
        cores=4, threads=2, device="cpu", start=quiet(), intervals=intervals, row_intervals={7: 1, 8: 1, 9: 4}
    )
    # rows 7 and 8 appeared in interval 1: both ran in intervals 0 and 1; row 9 in intervals 2 to 4
    assert report.operation_state(7).other_cpu_cores == report.operation_state(8).other_cpu_cores == 0.5
    assert report.operation_state(9).other_cpu_cores == pytest.approx((2 + 3 + 4) / 3)
    assert report.operation_state(99).other_cpu_cores == pytest.approx(2.5)  # no row: the whole run
    assert report.operation_columns(9)["machine_busy"] is True  # 3 cores wanted, 2 free
    assert report.operation_columns(7)["machine_busy"] is False


LAUNCH = (
    "import subprocess, sys\n"
    "quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "burners = [subprocess.Popen([sys.executable, '-c', sys.argv[2]], **quiet) for _ in range(int(sys.argv[1]))]\n"
    "print(' '.join(str(p.pid) for p in burners), flush=True)\n"
)


@pytest.fixture
def burners() -> Iterator[list[int]]:
    """One CPU-burning process per core this process may use, plus one, started through a launcher that
    exits at once, so they are other processes, not this one's children. Each ends by itself within 60 s
    and is killed by its id when the test ends."""
    count = min(len(os.sched_getaffinity(0)) + 1, 33)
    launched = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(count), BURN.format(seconds=60)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    pids = [int(pid) for pid in launched.stdout.split()]
    try:
        assert len(pids) == count
        time.sleep(0.5)  # let them start burning
        yield pids
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_cpu_burning_processes_make_the_machine_busy(burners: list[int]) -> None:
    watch = InterferenceWatch(threads=cores.resolve_threads(0), interval_s=0.2, label="test")
    with watch:
        time.sleep(1.0)
    report = watch.report
    assert report is not None and report.noisy
    n_cores = len(os.sched_getaffinity(0))
    # the burners alone want more than every core: they used most of them, and more were waiting
    assert report.during.other_cpu_cores > 0.6 * n_cores
    assert report.during.demand_cores > n_cores - 0.5
    assert "other processes kept" in report.reason and len(report.intervals) >= 3


def test_our_own_children_are_not_interference() -> None:
    ours = own_processes()  # the same processes before and after: another of ours may end meanwhile
    before = own_cpu_seconds(ours)
    burn_cpu = "import time\nwhile time.process_time() < 0.8:\n    pass\n"  # 0.8 s of CPU, however busy
    child = subprocess.run([sys.executable, "-c", burn_cpu], check=True, timeout=120)
    after = own_cpu_seconds(ours)
    # /proc counts user and system time in whole clock ticks, each rounded down: 0.8 s may read 0.79
    assert child.returncode == 0 and after - before >= 0.7  # the child's CPU time counts as ours


def test_physical_cores_count_hyper_threads_of_one_core_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for cpu, core in enumerate([0, 0, 1, 1]):  # two cores, two hyper-threads each
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    monkeypatch.setattr(cores, "_TOPOLOGY", tmp_path)
    cores._physical_cores.cache_clear()
    try:
        assert cores._physical_cores((0, 1, 2, 3)) == 2
        assert cores._physical_cores((0, 2)) == 2 and cores._physical_cores((0, 1)) == 1
    finally:
        cores._physical_cores.cache_clear()


def test_threads_zero_means_every_physical_core_and_a_count_stays_as_given() -> None:
    assert cores.resolve_threads(0) == cores.physical_cores()
    assert 1 <= cores.physical_cores() <= len(cores.allowed_cpus())
    assert cores.resolve_threads(3) == 3
