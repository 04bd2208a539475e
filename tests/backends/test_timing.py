"""The timing loop: it stops when the median has converged or the time for converging ends, keeps every
sample, and times CUDA work with device events chosen by device type."""

from __future__ import annotations

import time

import pytest

from dlbench.backends.timing import (
    EVENT_BATCH,
    CudaEventClock,
    HostClock,
    TimingSettings,
    clock_for,
    time_repeated,
)

QUICK = dict(warmup=1, min_reps=5, max_reps=100_000, min_time_s=0.0)


def busy_for(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class ScriptedClock(HostClock):
    """Calls the operation for real but reports prescribed times, so the stopping rules are checked exactly
    whatever else the machine does (the real clock is exercised by the other tests)."""

    def __init__(self, times_ms: list[float]) -> None:
        super().__init__()
        self.times = iter(times_ms * 100_000)

    def time_call(self, fn) -> None:  # type: ignore[no-untyped-def]
        fn()
        self._samples.append(next(self.times))


def test_a_steady_operation_stops_at_the_first_count_that_bounds_its_median() -> None:
    settings = TimingSettings(**QUICK, target_rel_ci=0.02, max_time_s=60.0)
    timing = time_repeated(lambda: None, settings, clock=ScriptedClock([1.0]))
    # 5 samples (min_reps) cannot bound a median with 95% confidence; 6 identical ones can
    assert timing.stats.reps == 6 and timing.stats.converged is True and timing.samples_ms == (1.0,) * 6


def test_a_real_operation_stops_when_converged_not_at_the_time_limit() -> None:
    settings = TimingSettings(**{**QUICK, "max_reps": 10**6}, target_rel_ci=0.5, max_time_s=600.0)
    # a call too short to be preempted often, so its median settles even on a busy machine
    timing = time_repeated(lambda: None, settings)
    assert timing.stats.converged is True and timing.stats.rel_ci <= 0.5
    # neither limit stopped it: far fewer repetitions than the cap, far less timed than the time limit
    assert timing.stats.reps < settings.max_reps and sum(timing.samples_ms) < settings.max_time_s * 1e3 / 10
    assert len(timing.samples_ms) == timing.stats.reps


def test_an_operation_that_cannot_converge_runs_until_max_time_and_says_so() -> None:
    settings = TimingSettings(**QUICK, target_rel_ci=0.01, max_time_s=0.3)
    started = time.perf_counter()
    # alternately 1 ms and 3 ms: the median's interval spans both
    timing = time_repeated(lambda: busy_for(0.0005), settings, clock=ScriptedClock([1.0, 3.0]))
    elapsed = time.perf_counter() - started
    assert timing.stats.converged is False and timing.stats.rel_ci > 0.01
    # the time limit stopped it (load only lengthens a run: a lower bound holds on a busy machine), not the cap
    assert elapsed >= 0.3 and 20 <= timing.stats.reps < settings.max_reps


def test_the_minima_come_before_convergence() -> None:
    settings = TimingSettings(warmup=0, min_reps=40, max_reps=1000, min_time_s=0.0, target_rel_ci=1.0, max_time_s=0)
    timing = time_repeated(lambda: None, settings)
    assert timing.stats.reps >= 40


def test_max_reps_caps_the_repetitions_even_unconverged() -> None:
    settings = TimingSettings(warmup=0, min_reps=2, max_reps=7, min_time_s=0.0, target_rel_ci=1e-9, max_time_s=60)
    timing = time_repeated(lambda: busy_for(0.0002), settings)
    assert timing.stats.reps == 7 and timing.stats.converged is False


def test_the_clock_is_chosen_by_device_type() -> None:
    assert isinstance(clock_for("cpu"), HostClock)
    assert isinstance(clock_for("cuda"), CudaEventClock)  # torch is only touched on the first timed call
    assert isinstance(clock_for("mps"), HostClock)


class DeferredClock(HostClock):
    """Host timing whose samples, like CUDA events, are only readable after a flush (the loop's batching
    is exercised without a GPU; the device clock itself is tested on a GPU below)."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes: list[int] = []

    @property
    def pending(self) -> int:  # type: ignore[override]
        return len(self._samples)

    def flush(self) -> list[float]:
        self.flushes.append(len(self._samples))
        return super().flush()


def test_deferred_samples_are_read_in_batches_and_none_is_lost() -> None:
    clock = DeferredClock()
    settings = TimingSettings(warmup=0, min_reps=200, max_reps=200, min_time_s=0.0, target_rel_ci=1.0)
    timing = time_repeated(lambda: None, settings, clock=clock)
    assert timing.stats.reps == 200 and len(timing.samples_ms) == 200
    assert max(clock.flushes) <= EVENT_BATCH and sum(clock.flushes) == 200
    assert len([f for f in clock.flushes if f]) < 200 / 4  # batches, not one synchronize per call


@pytest.mark.gpu
def test_cuda_events_time_device_work_without_a_synchronize_per_call() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(2048, 2048, device="cuda")
    clock = CudaEventClock()
    settings = TimingSettings(warmup=3, min_reps=20, max_reps=200, min_time_s=0.0, target_rel_ci=0.05)
    timing = time_repeated(lambda: a @ a, settings, clock=clock)
    host = time_repeated(lambda: a @ a, settings, torch.cuda.synchronize)
    assert timing.stats.reps >= 20 and timing.launch_ms is not None
    assert timing.launch_ms < timing.stats.median_ms  # launching is asynchronous
    # device time of a 2048^3 GEMM: within a factor of two of the host clock with a synchronize
    assert 0.5 < timing.stats.median_ms / host.stats.median_ms < 2.0


def test_the_stream_is_held_for_twice_a_batchs_issuing_time_within_bounds():
    from dlbench.backends.timing import EVENT_BATCH, hold_ms

    assert hold_ms([0.02, 0.01, 0.03]) == pytest.approx(2 * EVENT_BATCH * 0.02)
    assert hold_ms([]) == pytest.approx(2.0)  # 1 ms of issuing assumed before any launch is timed
    assert hold_ms([1e-6]) == 0.1 and hold_ms([10.0]) == 50.0


class RecordedCuda:
    """``torch.cuda`` as :class:`CudaEventClock` uses it, on a machine without a GPU: a device whose clock runs
    at ``rate`` cycles per ms (``_sleep`` spins cycles), events that read the device's time where they are
    recorded, and a host clock that each event record advances by 1 ms and each kernel launch by 7 us."""

    def __init__(self, rate: float) -> None:
        self.rate, self.device_ms, self.host_ns = rate, 0.0, 0
        self.sleeps: list[int] = []
        self.streams: list[object] = []
        self.main = object()
        clock = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, stream: object = None) -> None:
                clock.streams.append(stream)
                clock.host_ns += 1_000_000
                self.at = clock.device_ms

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: Event) -> float:
                return other.at - self.at

        self.Event = Event

    def current_stream(self) -> object:
        return self.main

    def _sleep(self, cycles: int) -> None:
        self.sleeps.append(cycles)
        self.device_ms += cycles / self.rate

    def synchronize(self) -> None:
        pass

    def kernel(self) -> None:
        self.host_ns += 7_000
        self.device_ms += 0.002


def test_the_launch_time_is_the_calls_own_not_the_event_records() -> None:
    cuda = RecordedCuda(rate=1.41e6)
    clock = CudaEventClock(cuda, host_ns=lambda: cuda.host_ns)
    for _ in range(5):
        clock.time_call(cuda.kernel)
    assert clock.flush() == pytest.approx([0.002] * 5)
    assert clock.launch_ms == pytest.approx([0.007] * 5)  # each record costs 1 ms of host time: none counted
    assert clock.stream is cuda.main and set(cuda.streams) == {cuda.main}, "the events bracket the current stream"


def test_the_stream_is_held_at_the_devices_measured_clock_not_an_assumed_one() -> None:
    from dlbench.backends.timing import CALIBRATION_CYCLES, hold_ms

    cuda = RecordedCuda(rate=1.41e6)  # an H200's 1.41 GHz base clock, not 2 GHz
    clock = CudaEventClock(cuda, host_ns=lambda: cuda.host_ns)
    clock.time_call(cuda.kernel)
    clock.flush()
    assert cuda.sleeps[0] == CALIBRATION_CYCLES and clock.cycles_per_ms == pytest.approx(1.41e6)
    assert cuda.sleeps[1] == int(hold_ms([]) * 1.41e6)  # the first batch's hold, at the measured rate
    cuda.rate = 1.98e6  # the clock boosts: the next hold is read at its own rate
    clock.time_call(cuda.kernel)
    clock.flush()
    assert clock.cycles_per_ms == pytest.approx(1.98e6)
    clock.time_call(cuda.kernel)
    assert cuda.sleeps[-1] == pytest.approx(hold_ms(clock.launch_ms[-EVENT_BATCH:]) * 1.98e6, abs=1)


@pytest.mark.gpu
def test_a_kernel_shorter_than_its_launch_reads_as_its_device_time() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.ones(1, device="cuda")
    settings = TimingSettings(warmup=3, min_reps=64, max_reps=256, min_time_s=0.0, target_rel_ci=0.05)
    timing = time_repeated(lambda: x.add_(1), settings, clock=CudaEventClock())
    assert timing.launch_ms is not None
    assert timing.stats.median_ms < timing.launch_ms  # the stream was held: events time the kernel, not the host
