"""The per-operation contention check: CPU time of the threads that took part against the wall time."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dlbench.core.contention import (
    CpuReading,
    available,
    contended,
    contention_limit,
    cpu_efficiency,
    read_cpu,
)

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux /proc")


def reading(at: float, **threads: float) -> CpuReading:
    return CpuReading(at, {(1, int(name[1:])): seconds for name, seconds in threads.items()})


def test_two_threads_working_the_whole_time_are_fully_efficient() -> None:
    assert cpu_efficiency(reading(0.0, t1=5.0, t2=7.0), reading(1.0, t1=6.0, t2=8.0)) == pytest.approx(1.0)


def test_a_kernel_run_on_one_thread_is_judged_against_that_thread_not_the_idle_one() -> None:
    # torch runs a small elementwise operator on one thread whatever threads says: its pool thread sleeps
    value = cpu_efficiency(reading(0.0, t1=5.0, t2=7.0), reading(1.0, t1=5.98, t2=7.001))
    assert value == pytest.approx(0.98) and not contended(value)


def test_threads_that_wait_for_a_descheduled_sibling_are_contended() -> None:
    # two threads of a parallel kernel, each running 40% of the time: what three CPU burners on two cores left
    value = cpu_efficiency(reading(0.0, t1=0.0, t2=0.0), reading(1.0, t1=0.4, t2=0.4))
    assert value == pytest.approx(0.4) and contended(value)
    assert not contended(value, contention_limit("cuda")), "a host thread waiting for the GPU is not contention"


def test_a_process_that_ended_between_two_readings_is_not_judged() -> None:
    before = CpuReading(0.0, {(1, 1): 1.0, (2, 2): 3.0})
    assert cpu_efficiency(before, CpuReading(1.0, {(1, 1): 1.5})) is None


def test_children_waited_for_count_as_working_threads() -> None:
    before = CpuReading(0.0, {(1, 1): 0.0}, waited_children_s=2.0)
    after = CpuReading(1.0, {(1, 1): 0.0}, waited_children_s=2.9)
    assert cpu_efficiency(before, after) == pytest.approx(0.9)


def test_a_thread_sleeping_through_the_stretch_reads_as_waiting_not_working() -> None:
    before = read_cpu([os.getpid()])
    time.sleep(0.3)
    after = read_cpu([os.getpid()])
    value = cpu_efficiency(before, after)
    assert value is not None and value < 0.2 and contended(value)


def test_reading_this_process_sees_the_cpu_time_its_thread_worked() -> None:
    me = (os.getpid(), threading.get_native_id())
    before = read_cpu([os.getpid()])
    sum(i * i for i in range(3_000_000))
    after = read_cpu([os.getpid()])
    worked = after.threads[me] - before.threads[me]
    assert 0.0 < worked <= (after.at - before.at) * 1.01 + 0.002  # schedstat's nanoseconds, read in ~1 ms
