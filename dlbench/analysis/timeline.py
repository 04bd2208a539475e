"""A training step on a GPU as two lanes: the host issues the step's operations in program order, each
costing its host time (dispatch and the launches of its kernels); the device runs each kernel from
max(its launch, the end of the previous kernel on its stream) for its device time. A synchronising call
(``loss.item()``, ``.cpu()``, ``cudaStreamSynchronize``, a copy to the host) makes the host wait for the
device. The step ends when both lanes have. With no kernels (a CPU device) the step is the sum of the
host times, which is the CPU prediction's sum of terms.

The same model replays a recorded step (:func:`replay_ops`: the trace's own host and device durations), a
check of the model's structure against the traced step, and two-lane breakdowns of a traced step
(:func:`lane_breakdown`): device busy + device idle = step; host in operators + host waiting for the
device + host outside any operator = step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dlbench.analysis.data_parallel import COPIES_TERM, EXPOSED_TERM
from dlbench.training.optimizers import OPTIMIZER_STEP
from dlbench.training.trace import DEVICE, OPERATOR, RUNTIME, TraceEvent, is_sync, read_trace


@dataclass(frozen=True)
class Launch:
    """A kernel (or copy, memset) an operation launches: its device time and stream; ``at_us``: when the
    host issues it, from the operation's start (None: at the end of the operation's host time)."""

    device_us: float
    stream: int = 0
    at_us: float | None = None


@dataclass(frozen=True)
class HostOp:
    """One operation on the host lane: ``gap_us`` of host time before it (outside any operator), its host
    time, what it launches, and whether the host then waits for the device (``sync``)."""

    name: str
    host_us: float
    launches: tuple[Launch, ...] = ()
    sync: bool = False
    gap_us: float = 0.0


@dataclass(frozen=True)
class Timeline:
    """What the model says of a step (us): when each lane ends, and how busy each was."""

    step_us: float
    host_end_us: float
    device_end_us: float
    host_busy_us: float
    host_wait_us: float
    device_busy_us: float

    @property
    def device_idle_us(self) -> float:
        return self.step_us - self.device_busy_us


def simulate(ops: Iterable[HostOp]) -> Timeline:
    """Run the two lanes over ``ops`` in program order."""
    host = busy = wait = 0.0
    stream_end: dict[int, float] = {}
    spans: list[tuple[float, float]] = []
    for op in ops:
        host += op.gap_us
        busy += op.gap_us + op.host_us
        for launch in op.launches:
            at = op.host_us if launch.at_us is None else min(max(launch.at_us, 0.0), op.host_us)
            begin = max(host + at, stream_end.get(launch.stream, 0.0))
            stream_end[launch.stream] = begin + launch.device_us
            spans.append((begin, begin + launch.device_us))
        host += op.host_us
        if op.sync and stream_end:
            device = max(stream_end.values())
            if device > host:
                wait += device - host
                host = device
    device_end = max(stream_end.values(), default=0.0)
    return Timeline(max(host, device_end), host, device_end, busy, wait, _union(spans))


def _union(spans: Sequence[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for begin, end in sorted(spans):
        if end > reach:
            total += end - max(begin, reach)
            reach = end
    return total


# ------------------------------------------------------------------------------ a recorded step replayed


def _top_level(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """Host events not nested in another on their thread, in time order."""
    out: list[TraceEvent] = []
    by_thread: dict[int, list[TraceEvent]] = {}
    for e in events:
        if e.kind in (OPERATOR, RUNTIME):
            by_thread.setdefault(e.thread, []).append(e)
    for thread_events in by_thread.values():
        reach = None
        for e in sorted(thread_events, key=lambda e: (e.start, -e.end)):
            if reach is None or e.start >= reach:
                out.append(e)
                reach = e.end
            else:
                reach = max(reach, e.end)
    return sorted(out, key=lambda e: e.start)


@dataclass(frozen=True)
class Replay:
    ops: tuple[HostOp, ...]
    traced_step_us: float
    unlaunched: int  # device activities no runtime call of the trace launched (left out)


def replay_ops(events: Sequence[TraceEvent]) -> Replay:
    """The host lane of a traced step (top-level host events of every thread in time order, overlaps
    clipped, gaps between them as ``gap_us``), each launching the device activities its runtime calls
    launched, with their traced durations; a top-level event holding a synchronising call is ``sync``, its
    host time less the time that call waited for the device. Streams that wait on each other's events
    (cuDNN's helper stream joined by ``cudaStreamWaitEvent``) are replayed as one queue."""
    devices = [e for e in events if e.kind == DEVICE]
    by_correlation = {d.correlation: d for d in devices if d.correlation}
    calls = sorted((e for e in events if e.kind == RUNTIME), key=lambda e: e.start)
    joined = any(c.name in ("cudaStreamWaitEvent", "cuStreamWaitEvent") for c in calls)
    top = _top_level(events)
    if not top:
        raise ValueError("the trace has no host events")
    begin = top[0].start
    end = max([e.end for e in top] + [d.end for d in devices])
    ops: list[HostOp] = []
    used: set[int] = set()
    reach = begin
    index = 0
    for e in top:
        start = max(e.start, reach)
        if e.end <= start:
            continue
        launches: list[Launch] = []
        sync = False
        waited = 0
        while index < len(calls) and calls[index].start < start:
            index += 1
        inside = index
        while inside < len(calls) and calls[inside].start < e.end:
            call = calls[inside]
            inside += 1
            if call.thread != e.thread and call is not e:
                continue
            launched = by_correlation.get(call.correlation)
            if launched is not None and call.correlation not in used:
                used.add(call.correlation)
                stream = 0 if joined else launched.stream
                launches.append(Launch(launched.duration / 1e3, stream, (call.end - start) / 1e3))
            if is_sync(call, [launched] if launched is not None else []):
                sync = True
                ready = max((d.end for d in devices if d.start < call.end), default=call.start)
                waited += max(0, min(call.end, ready) - call.start)
        host = max(e.end - start - waited, 0)
        ops.append(HostOp(e.name, host / 1e3, tuple(launches), sync, (start - reach) / 1e3))
        reach = e.end
    return Replay(tuple(ops), (end - begin) / 1e3, len(devices) - len(used))


def lane_breakdown(events: Sequence[TraceEvent]) -> dict[str, float]:
    """A traced step on both lanes, in ms: device busy + device idle = step; host in operators + host
    waiting for the device (inside synchronising calls) + host outside any operator = step."""
    replay = replay_ops(events)
    devices = [(d.start, d.end) for d in events if d.kind == DEVICE]
    step = replay.traced_step_us
    device_busy = _union(devices) / 1e3
    host_ops = sum(op.host_us for op in replay.ops)
    spans = _union([(e.start, e.end) for e in _top_level(events)]) / 1e3  # host time in any top-level event
    waited = max(spans - host_ops, 0.0)
    return {
        "step_ms": step / 1e3,
        "device_busy_ms": device_busy / 1e3,
        "device_idle_ms": (step - device_busy) / 1e3,
        "host_operators_ms": host_ops / 1e3,
        "host_waiting_ms": waited / 1e3,
        "host_outside_ms": (step - host_ops - waited) / 1e3,
    }


# --------------------------------------------------------------------------------- a predicted step


#: Program order of a training step's pass groups (:func:`dlbench.analysis.predict._pass_group`).
PASS_ORDER = ("forward", "loss", "backward", "optimizer")
#: Terms that run on the device lane on a GPU, after the backward pass, in this order: DDP's copies of the
#: gradients (into the buckets during the backward pass, back after the all-reduce) and the part of the
#: all-reduce that outlasts the backward pass, which the main stream waits for
DEVICE_TERMS = (COPIES_TERM, EXPOSED_TERM)


def host_framework_ms(host_launch_ms: Mapping[int, float], measured: Mapping[str, float]) -> dict[str, float]:
    """The framework microbenchmark's ms per one-element operator by mode, from the host's issuing time
    (``host_launch_ms``: its protocol file's launch column by mode) where written, else ``measured`` (the
    benchmark's median)."""
    from dlbench.analysis.predict import FRAMEWORK_MODES, FRAMEWORK_OPS

    return {name: host_launch_ms[mode] / FRAMEWORK_OPS if mode in host_launch_ms else ms
            for name, ms in measured.items() if (mode := FRAMEWORK_MODES.get(name)) is not None}  # fmt: skip


def optimizer_calls(folded: pd.DataFrame) -> int | None:
    """How many multi-tensor (``_foreach``/``_fused``) calls the script's optimizer made per step, from the
    folded profile (:func:`dlbench.analysis.step_run.read_step_profile`: what ran inside each optimizer step,
    calls per step); None when it ran per tensor (or was not profiled)."""
    if folded.empty:
        return None
    inside = folded[folded["folded"].astype(str).str.startswith(OPTIMIZER_STEP)
                    & folded["name"].astype(str).str.startswith(("aten::_foreach_", "aten::_fused_"))]  # fmt: skip
    calls = int(round(float(inside["calls"].sum())))
    return calls or None


def step_ops(
    frame: pd.DataFrame,
    extra: Sequence[tuple] = (),
    *,
    device: str = "cpu",
    launch_ms: Mapping[int, float] | None = None,
    default_host_ms: float = 0.0,
    foreach_calls: int | None = None,
) -> list[HostOp]:
    """A predicted step's operations in program order (``frame``: :func:`dlbench.analysis.predict.
    prediction_frame`; ``extra``: (name, ms[, operations]) terms that are no measured operator's, such as the
    framework's and DDP's).

    On a CPU each measured operation costs its benchmark time on the one lane (its occurrences in a row),
    so the step is the prediction's sum of terms. On a GPU each call costs its host time (``launch_ms`` by
    operation id: dispatch and launches as its benchmark measured them, else ``default_host_ms``) and
    launches one kernel of its benchmark median; an optimizer that ran multi-tensor (``foreach_calls``
    calls, from the folded profile) issues those few calls, whose kernels do the per-tensor work; DDP's
    terms (:data:`DEVICE_TERMS`) run on the device after the backward pass (the gradient copies as kernels
    the host issues, one per operation; the exposed all-reduce as the stream waiting for NCCL's); the
    framework's terms are host time spread between the calls; the step ends with the loss read on the host
    (a synchronising copy)."""
    if device != "cuda":
        return [*_cpu_ops(frame), *(HostOp(str(term[0]), float(term[1]) * 1e3) for term in extra)]
    launch_ms = launch_ms or {}
    optimizer = PASS_ORDER.index("optimizer")
    host = [t for t in extra if t[0] not in DEVICE_TERMS]
    device_side = [HostOp(str(t[0]), (int(t[2]) if len(t) > 2 else 0) * default_host_ms * 1e3, (Launch(t[1] * 1e3),))
                   for name in DEVICE_TERMS for t in extra if t[0] == name]  # fmt: skip
    ops: list[HostOp] = []
    optimizer_device_us = 0.0
    for row in _measured_in_order(frame).itertuples(index=False):
        count, bench_us = int(row.occurrences), float(row.benchmark_ms) * 1e3
        if row.order == optimizer and device_side:
            ops.extend(device_side)
            device_side = []
        if foreach_calls and row.order == optimizer:
            optimizer_device_us += bench_us * count
            continue
        host_us = launch_ms.get(int(row.id), default_host_ms) * 1e3
        ops.extend(HostOp(str(row.name), host_us, (Launch(bench_us),)) for _ in range(count))
    ops.extend(device_side)
    if foreach_calls and optimizer_device_us:
        share = optimizer_device_us / foreach_calls
        ops.extend(HostOp("optimizer (multi-tensor)", default_host_ms * 1e3, (Launch(share),))
                   for _ in range(foreach_calls))  # fmt: skip
    spread = sum(float(t[1]) for t in host) * 1e3 / max(len(ops), 1)  # per-node framework costs, between calls
    ops = [HostOp(op.name, op.host_us, op.launches, op.sync, op.gap_us + spread) for op in ops]
    ops.append(HostOp("loss read on the host", 0.0, sync=True))
    return ops


def _measured_in_order(frame: pd.DataFrame) -> pd.DataFrame:
    rows = frame[frame["status"].isin(("ok", "unstable"))].copy()
    rows["order"] = rows["pass"].map(_group_order)
    return rows.sort_values(["order", "id"], kind="stable")


def _cpu_ops(frame: pd.DataFrame) -> list[HostOp]:
    rows = _measured_in_order(frame)
    return [HostOp(str(name), float(ms) * 1e3 * int(n))
            for name, ms, n in zip(rows["name"], rows["benchmark_ms"], rows["occurrences"], strict=True)]  # fmt: skip


def gpu_step(
    frame: pd.DataFrame,
    terms: pd.DataFrame,
    launch_ms: Mapping[int, float],
    folded: pd.DataFrame,
    default_host_ms: float,
) -> Timeline:
    """The timeline of a predicted GPU step: operations from ``frame``, host times from their benchmarks'
    launch column (``launch_ms`` by operation id), the optimizer as the folded profile says it ran, the
    framework's terms on the host lane between the calls, and DDP's terms (:data:`DEVICE_TERMS`) on the
    device lane after the backward pass."""
    return simulate(step_ops(frame, non_operator_terms(terms), device="cuda", launch_ms=launch_ms,
                             default_host_ms=default_host_ms, foreach_calls=optimizer_calls(folded)))  # fmt: skip


def non_operator_terms(terms: pd.DataFrame) -> list[tuple[str, float, int]]:
    """(term, ms, operations) of every term that is not a measured operator's (framework, DDP)."""
    from dlbench.analysis.predict import OPERATOR_TERMS

    count = terms["operations"] if "operations" in terms else pd.Series(0, index=terms.index)
    return [(str(t), float(ms), int(n) if n == n else 0)
            for t, ms, n in zip(terms["term"], terms["ms"], count, strict=True)
            if t not in OPERATOR_TERMS and ms]  # fmt: skip


def _group_order(pass_name: str) -> int:
    if pass_name == "forward":
        return 0
    if pass_name.startswith("loss"):
        return 1
    return 3 if pass_name == "optimizer" else 2


def traced_lanes(profile_dir: Path) -> dict[str, float]:
    """The first profiled step's two lanes (device busy/idle, host in operators/waiting/outside), from its
    trace; none when it has no readable trace."""
    traces = sorted(profile_dir.glob("batch_*_trace.json"))
    try:
        lanes = lane_breakdown(read_trace(traces[0])) if traces else {}
    except ValueError as err:
        logging.getLogger(__name__).warning("no two-lane breakdown of the profiled step: %s", err)
        lanes = {}
    return {f"lanes.{name}": value for name, value in lanes.items()}
