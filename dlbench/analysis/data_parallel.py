"""A data-parallel training step predicted from independent measurements: the single-process step as
task=evaluate predicts it, plus what DistributedDataParallel adds. The gradients are cut into DDP's buckets
(parameters in reverse registration order, the first bucket closed at ``first_bucket_cap_mb``, the others at
``bucket_cap_mb``, each closed by the tensor that reaches its limit: DDP's rebuilt buckets), each bucket's
all-reduce takes the time the collective benchmarks measured for its size (log-log interpolation between
measured sizes), and the buckets are all-reduced one after another as the backward pass makes them ready.
DDP also copies every gradient into its bucket divided by the world size (``aten::mul`` into the bucket, in
the backward pass) and back after the all-reduce (``aten::copy_``): both timed by the Mul benchmark at the
parameter's size with a one-element operand (the same bytes read and written).

A bucket is taken to be ready when the backward pass has produced its share of the gradient bytes (backward
time spread over the parameters in proportion to their size: exact for layers whose backward cost follows
their weights, as GEMMs' does). Whether the all-reduce hides behind the backward pass is a physical question,
not a fit: gloo reduces on CPU threads, and when the ranks' compute threads take every core, the all-reduce
takes its cores from the backward pass (a hidden millisecond of communication is a millisecond of backward
lost), so there the whole all-reduce is exposed (``evaluate.communication_overlap``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

#: DDP's first bucket when bucket_cap_mb is left to its default (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES):
#: the last layers' gradients leave early; with bucket_cap_mb given, DDP closes the first bucket at that cap
FIRST_BUCKET_BYTES = 1024 * 1024
MIB = 1024 * 1024
#: evaluate.communication_overlap values
OVERLAP_MODES = ("auto", "backward", "none")


def ddp_buckets(
    parameter_bytes: Sequence[int], bucket_cap_mb: float, first_bucket_cap_mb: float | None = None
) -> list[int]:
    """Bucket sizes in bytes, in the order DDP launches their all-reduce (the order gradients become ready:
    parameters in reverse registration order). ``first_bucket_cap_mb`` None: DDP's rule when bucket_cap_mb is
    given, the first bucket closed at bucket_cap_mb too."""
    cap = int(bucket_cap_mb * MIB)
    limits = [cap if first_bucket_cap_mb is None else int(first_bucket_cap_mb * MIB), cap]
    buckets: list[int] = []
    current = 0
    for size in reversed(parameter_bytes):
        current += int(size)
        if current >= limits[min(len(buckets), 1)]:
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return buckets


def interpolated_ms(measured: Mapping[int, float], message_bytes: float) -> float:
    """A collective's time for ``message_bytes`` from times measured at other sizes: linear in log(time)
    over log(bytes) between the neighbours; below the smallest size its time (latency-bound), above the
    largest the largest's time scaled by the bytes (bandwidth-bound)."""
    sizes = sorted(s for s, t in measured.items() if t and t > 0 and math.isfinite(t))
    if not sizes:
        raise ValueError("no measured collective sizes to interpolate from")
    if message_bytes <= sizes[0]:
        return float(measured[sizes[0]])
    if message_bytes >= sizes[-1]:
        return float(measured[sizes[-1]]) * message_bytes / sizes[-1]
    upper = bisect.bisect_left(sizes, message_bytes)
    lo, hi = sizes[upper - 1], sizes[upper]
    if hi == message_bytes:
        return float(measured[hi])
    weight = (math.log(message_bytes) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp((1 - weight) * math.log(measured[lo]) + weight * math.log(measured[hi]))


def bracketing_sizes(buckets: Sequence[int]) -> list[int]:
    """The powers of two around every bucket size: what the collective benchmarks measure for them."""
    sizes: set[int] = set()
    for size in buckets:
        exponent = max(int(math.floor(math.log2(max(size, 1)))), 2)
        sizes.update((2**exponent, 2 ** (exponent + 1)))
    return sorted(sizes)


@dataclass(frozen=True)
class Overlap:
    """Buckets scheduled against the backward pass: each bucket's ready, start and end times (ms from the
    backward pass's start), the communication in all and the part that lengthens the step (all of it when
    the all-reduce cannot hide behind the backward pass)."""

    schedule: pd.DataFrame
    communication_ms: float
    exposed_ms: float
    hidden: bool = True
    #: what would be exposed if the all-reduce could hide (the other model, for comparison)
    exposed_if_hidden_ms: float = 0.0


def overlap_with_backward(
    backward_ms: float, buckets: Sequence[int], bucket_ms: Sequence[float], hidden: bool = True
) -> Overlap:
    """All-reduces one at a time in launch order, each starting when its bucket is ready and the previous
    one has finished; ``hidden`` False: the backward pass yields the all-reduce its cores, so none of the
    communication hides behind it."""
    total = float(sum(buckets)) or 1.0
    produced = 0.0
    free_at = 0.0
    rows = []
    for index, (size, duration) in enumerate(zip(buckets, bucket_ms, strict=True)):
        produced += size
        ready = backward_ms * produced / total
        start = max(ready, free_at)
        free_at = start + duration
        rows.append({"bucket": index, "bytes": size, "ready_ms": ready, "start_ms": start, "allreduce_ms": duration,
                     "end_ms": free_at})  # fmt: skip
    schedule = pd.DataFrame(rows, columns=["bucket", "bytes", "ready_ms", "start_ms", "allreduce_ms", "end_ms"])
    communication = float(sum(bucket_ms))
    outlasting = max(free_at - backward_ms, 0.0)
    return Overlap(schedule, communication, outlasting if hidden else communication, hidden, outlasting)


def communication_hides(setting: str, device: str, world_size: int, threads: int, cores: int) -> tuple[bool, str]:
    """Whether the all-reduce can hide behind the backward pass, and why (a note for the evaluation).
    ``auto``: not on CPUs whose cores the ranks' compute threads take (``threads`` 0: all of them), where
    gloo's reductions and loopback copies run on the cores the backward pass needs; elsewhere it can."""
    if setting not in OVERLAP_MODES:
        raise ValueError(f"evaluate.communication_overlap={setting!r}: use one of {', '.join(OVERLAP_MODES)}")
    if setting != "auto":
        hides = setting == "backward"
        what = "hides behind the backward pass where it can" if hides else "is counted in full"
        return hides, f"evaluate.communication_overlap={setting}: the all-reduce {what}"
    if device != "cpu":
        return True, f"on {device} the all-reduce runs beside the backward pass; only what outlasts it is exposed"
    busy = world_size * (threads if threads > 0 else cores)
    if busy >= cores:
        return False, (
            f"{world_size} ranks x {threads or 'all'} threads take all {cores} cores: gloo's all-reduce runs on "
            "CPU threads of the same cores, so hiding it behind the backward pass would slow the backward as much; "
            "it is counted in full (a physical model, not a fit: evaluate.communication_overlap=backward hides it)"
        )
    return True, f"{world_size} ranks x {threads} threads leave {cores - busy} of {cores} cores to gloo's all-reduce"


def is_data_parallel(ran_with: Mapping[str, object]) -> bool:
    """Whether the script's reported facts are a DistributedDataParallel script's (it reports ``bucket_cap_mb``)."""
    return "bucket_cap_mb" in ran_with


def ranks_beside(ran_with: Mapping[str, object], device: str) -> int:
    """How many copies of each operator benchmark run beside it (:mod:`dlbench.operators.beside`): a
    DistributedDataParallel script's other ranks where they share this CPU (its memory bandwidth and last-level
    cache) and run the same operations at the same time; 0 for one process, and on GPUs (a GPU per rank)."""
    if device != "cpu" or not is_data_parallel(ran_with):
        return 0
    return max(int(float(str(ran_with.get("world_size", 1) or 1))) - 1, 0)


def beside_note(count: int) -> str:
    """The evaluation's note on its operator benchmarks' neighbours."""
    return (
        f"operator benchmarks timed beside {count} cop{'y' if count == 1 else 'ies'} of themselves running the same "
        "rows: the step's other ranks on this CPU run the same operations at the same time and share its memory "
        "bandwidth and last-level cache (the all-reduce is timed with its ranks)"
    )


def backward_ms(frame: pd.DataFrame) -> float:
    """The predicted backward pass of a prediction frame (every pass but forward, loss and optimizer)."""
    passes = frame["pass"].astype(str)
    part = frame[~passes.isin(("forward", "optimizer")) & ~passes.str.startswith("loss")]
    return float(part["predicted_ms"].fillna(0).sum())


def parameter_bytes_from_facts(params: Mapping[str, object]) -> list[int]:
    """The script's reported ``parameter_bytes`` (comma-separated, registration order)."""
    text = str(params.get("parameter_bytes", "")).strip()
    return [int(p) for p in text.split(",") if p.strip()]


def first_bucket_cap_from_facts(params: Mapping[str, object]) -> float | None:
    """The script's reported ``first_bucket_cap_mb`` (DDP's first bucket limit), None when not reported."""
    value = params.get("first_bucket_cap_mb")
    return None if value in (None, "", "None") else float(value)  # type: ignore[arg-type]


def bucket_copy_ms(parameter_bytes: Sequence[int], element_bytes: int, mul_ms: Mapping[int, float]) -> float:
    """One pass of DDP's gradient copies (into the buckets, or back): each parameter's gradient read and written
    once, timed as the Mul benchmark of its element count (``mul_ms`` by elements; a missing size counts 0)."""
    return float(sum(mul_ms.get(int(size) // element_bytes, 0.0) for size in parameter_bytes))


@dataclass(frozen=True)
class DataParallelStep:
    """A data-parallel step's additions to the single-process prediction: the bucket schedule, DDP's gradient
    copies (into the buckets during the backward pass, out of them after the all-reduce), whether the
    communication hides and why."""

    overlap: Overlap
    copy_in_ms: float
    copy_out_ms: float
    reason: str


def data_parallel_step(
    backward: float, buckets: Sequence[int], bucket_ms: Sequence[float], copy_ms: float, hides: bool, reason: str
) -> DataParallelStep:
    """The copy into the buckets lengthens the backward pass the all-reduce overlaps; the copy back follows it."""
    return DataParallelStep(
        overlap_with_backward(backward + copy_ms, buckets, bucket_ms, hides), copy_ms, copy_ms, reason
    )


def data_parallel_metrics(
    single_step_ms: float, data_parallel_step_ms: float, step: DataParallelStep, world_size: int
) -> dict[str, float]:
    """The step's data-parallel figures: the single-process prediction and the data-parallel one (both from the
    same step model: on a GPU the two-lane timeline, where DDP's terms run on the device lane; on a CPU the
    sum of terms), DDP's copies, the communication, the exposed part, and the predicted scaling efficiency
    (single-process step over data-parallel step, same batch per rank)."""
    overlap = step.overlap
    return {
        "world_size": float(world_size),
        "step_time_single_process_predicted_ms": single_step_ms,
        "ddp_gradient_copies_ms": step.copy_in_ms + step.copy_out_ms,
        "allreduce_total_ms": overlap.communication_ms,
        "allreduce_exposed_ms": overlap.exposed_ms,
        "allreduce_buckets": float(len(overlap.schedule)),
        "allreduce_hidden_by_backward": float(overlap.hidden),
        "allreduce_exposed_if_hidden_ms": overlap.exposed_if_hidden_ms,
        "scaling_efficiency_predicted": (
            single_step_ms / data_parallel_step_ms if data_parallel_step_ms > 0 else math.nan
        ),
    }


def measured_scaling_metrics(single_process_ms: float, data_parallel_ms: float) -> dict[str, float]:
    """The measured single-process step (same script, one rank, same batch) and the scaling efficiency: the
    fraction of world_size x the single process's throughput the ranks reach (1: perfect weak scaling)."""
    efficiency = single_process_ms / data_parallel_ms if data_parallel_ms > 0 else math.nan
    return {"step_time_single_process_measured_ms": single_process_ms, "scaling_efficiency_measured": efficiency}


EXPOSED_TERM = "exposed communication"
COPIES_TERM = "DDP gradient copies"


def data_parallel_terms(terms: pd.DataFrame, step: DataParallelStep, world_size: int, parameters: int) -> pd.DataFrame:
    """The single-process terms with DDP's copies and its exposed all-reduce added."""
    overlap = step.overlap
    buckets = len(overlap.schedule)
    rows = [
        {"term": COPIES_TERM, "ms": step.copy_in_ms + step.copy_out_ms, "operations": 2 * parameters,
         "source": "every gradient into its bucket divided by world_size and back after the all-reduce "
                   "(Mul benchmark at each parameter's size, twice)"},
        {"term": EXPOSED_TERM, "ms": overlap.exposed_ms, "operations": buckets,
         "source": f"DDP all-reduce of {buckets} buckets among {world_size} ranks (collective benchmarks), "
                   f"{overlap.communication_ms:.3g} ms in all, "
                   + ("the part the backward pass does not hide" if overlap.hidden else "none hidden: " + step.reason)},
    ]  # fmt: skip
    return pd.concat([terms, pd.DataFrame(rows)], ignore_index=True)


@dataclass(frozen=True)
class DataParallelPlan:
    """What a data-parallel prediction measures for a script's report: its DDP buckets (bytes, launch order),
    the all-reduce sizes around them, and the gradients' element counts (DDP's copies)."""

    parameter_bytes: tuple[int, ...]
    element_bytes: int
    buckets: tuple[int, ...]
    allreduce_sizes: tuple[int, ...]
    copy_elements: tuple[int, ...]

    @classmethod
    def of(cls, params: Mapping[str, object], element_bytes: int) -> DataParallelPlan:
        parameter_bytes = parameter_bytes_from_facts(params)
        cap = float(params.get("bucket_cap_mb", 25.0))  # type: ignore[arg-type]
        buckets = ddp_buckets(parameter_bytes, cap, first_bucket_cap_from_facts(params))
        return cls(tuple(parameter_bytes), element_bytes, tuple(buckets), tuple(bracketing_sizes(buckets)),
                   tuple(sorted({b // element_bytes for b in parameter_bytes})))  # fmt: skip


def predict_data_parallel(
    plan: DataParallelPlan, allreduce_ms: Mapping[int, float], copy_ms: Mapping[int, float], frame: pd.DataFrame,
    hides: bool, reason: str, beside: int = 0,
) -> tuple[DataParallelStep, list[str]]:  # fmt: skip
    """DDP's step from the measured all-reduce (``allreduce_ms`` by message bytes) and gradient copies
    (``copy_ms`` by elements), against the backward pass of the prediction ``frame``; and its notes (``beside``:
    the copies its operator benchmarks ran beside, :func:`ranks_beside`)."""
    step = data_parallel_step(
        backward_ms(frame), plan.buckets, [interpolated_ms(allreduce_ms, b) for b in plan.buckets],
        bucket_copy_ms(plan.parameter_bytes, plan.element_bytes, copy_ms), hides, reason,
    )  # fmt: skip
    notes = [f"DDP buckets (bytes, launch order): {', '.join(str(b) for b in plan.buckets)}",
             f"communication overlap: {reason}"]  # fmt: skip
    return step, notes + ([beside_note(beside)] if beside > 0 else [])
