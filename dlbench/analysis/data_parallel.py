"""A data-parallel training step predicted from independent measurements: the single-process step as
task=evaluate predicts it, plus DistributedDataParallel's gradient all-reduce. The gradients are cut into
DDP's buckets (parameters in reverse registration order, the first bucket closed at 1 MiB, the others at
``bucket_cap_mb``, each closed by the tensor that reaches its limit), each bucket's all-reduce takes the time
the collective benchmarks measured for its size (log-log interpolation between measured sizes), and the
buckets are all-reduced one after another as the backward pass makes them ready. Only the communication that
outlasts the backward pass (exposed) lengthens the step.

A bucket is taken to be ready when the backward pass has produced its share of the gradient bytes (backward
time spread over the parameters in proportion to their size: exact for layers whose backward cost follows
their weights, as GEMMs' does). On CPUs gloo reduces on the same cores as the backward pass, so a hidden
all-reduce is not free there: the model counts it as free, and the error shows what that costs."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

#: DDP's first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES): the last layers' gradients leave early
FIRST_BUCKET_BYTES = 1024 * 1024
MIB = 1024 * 1024


def ddp_buckets(parameter_bytes: Sequence[int], bucket_cap_mb: float) -> list[int]:
    """Bucket sizes in bytes, in the order DDP launches their all-reduce (the order gradients become ready:
    parameters in reverse registration order)."""
    limits = [FIRST_BUCKET_BYTES, int(bucket_cap_mb * MIB)]
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
    backward pass's start), the communication in all and what outlasts the backward pass."""

    schedule: pd.DataFrame
    communication_ms: float
    exposed_ms: float


def overlap_with_backward(backward_ms: float, buckets: Sequence[int], bucket_ms: Sequence[float]) -> Overlap:
    """All-reduces one at a time in launch order, each starting when its bucket is ready and the previous
    one has finished."""
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
    return Overlap(schedule, float(sum(bucket_ms)), max(free_at - backward_ms, 0.0))


def backward_ms(frame: pd.DataFrame) -> float:
    """The predicted backward pass of a prediction frame (every pass but forward, loss and optimizer)."""
    passes = frame["pass"].astype(str)
    part = frame[~passes.isin(("forward", "optimizer")) & ~passes.str.startswith("loss")]
    return float(part["predicted_ms"].fillna(0).sum())


def parameter_bytes_from_facts(params: Mapping[str, object]) -> list[int]:
    """The script's reported ``parameter_bytes`` (comma-separated, registration order)."""
    text = str(params.get("parameter_bytes", "")).strip()
    return [int(p) for p in text.split(",") if p.strip()]


def data_parallel_metrics(single_step_ms: float, overlap: Overlap, world_size: int) -> dict[str, float]:
    """The step's data-parallel figures: the single-process prediction, the communication, the exposed part,
    and the predicted scaling efficiency (single-process step over data-parallel step, same batch per rank)."""
    predicted = single_step_ms + overlap.exposed_ms
    return {
        "world_size": float(world_size),
        "step_time_single_process_predicted_ms": single_step_ms,
        "allreduce_total_ms": overlap.communication_ms,
        "allreduce_exposed_ms": overlap.exposed_ms,
        "allreduce_buckets": float(len(overlap.schedule)),
        "scaling_efficiency_predicted": single_step_ms / predicted if predicted > 0 else math.nan,
    }


EXPOSED_TERM = "exposed communication"


def predict_data_parallel(
    registry: object, device: str, settings: object, workdir: object, quiet: bool, run: object,
    params: Mapping[str, object], world_size: int, frame: pd.DataFrame, terms: pd.DataFrame,
) -> tuple[pd.DataFrame, dict[str, float]]:  # fmt: skip
    """The terms with DDP's exposed all-reduce added, and the data-parallel metrics; the all-reduce is
    measured now at the sizes around each bucket, and the bucket schedule logged as a table."""
    from dlbench.operators.collectives import measure_allreduce

    buckets = ddp_buckets(parameter_bytes_from_facts(params), float(params.get("bucket_cap_mb", 25.0)))  # type: ignore[arg-type]
    measured, _, files = measure_allreduce(
        registry,
        device,
        bracketing_sizes(buckets),
        world_size,
        settings,
        workdir,
        quiet,  # type: ignore[arg-type]
    )
    for path in (files.input_csv, files.output_csv, files.stderr_txt, files.samples_csv):
        if path is not None and path.exists():
            run.log_artifact(path, "protocol")  # type: ignore[attr-defined]
    overlap = overlap_with_backward(backward_ms(frame), buckets, [interpolated_ms(measured, b) for b in buckets])
    run.log_table(overlap.schedule, "data_parallel_buckets.csv")  # type: ignore[attr-defined]
    single_ms = float(terms["ms"].sum())
    row = {"term": EXPOSED_TERM, "ms": overlap.exposed_ms, "operations": len(buckets),
           "source": f"DDP all-reduce of {len(buckets)} buckets among {world_size} ranks (collective benchmarks), "
                     f"{overlap.communication_ms:.3g} ms in all, the part the backward pass does not hide"}  # fmt: skip
    with_exposed = pd.concat([terms, pd.DataFrame([row])], ignore_index=True)
    return with_exposed, data_parallel_metrics(single_ms, overlap, world_size)
