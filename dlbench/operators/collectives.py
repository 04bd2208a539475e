"""The measurements a data-parallel prediction needs: the registered AllReduce benchmark of the chosen device,
run among ``world_size`` ranks at the given message sizes, and DDP's gradient copies as the Mul benchmark
writing into a bucket's view (in place, as DDP does)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dlbench.core.costs import operation_cost
from dlbench.core.device import check_ranks_fit
from dlbench.core.errors import TaskFailed
from dlbench.core.glue import BUCKET_VIEW_MODE
from dlbench.core.values import Operation, SweepResult
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.registry import Registry
from dlbench.operators.runner import RunSettings, SweepFiles

ALLREDUCE = "AllReduce"
MUL = "Mul"


def allreduce_operations(sizes: Sequence[int], world_size: int) -> list[Operation]:
    return [
        Operation(i, ALLREDUCE, (("bytes", size), ("world_size", world_size)), name=f"allreduce_{size}B",
                  bytes_moved=operation_cost(ALLREDUCE, {"bytes": size})[1])
        for i, size in enumerate(sizes)
    ]  # fmt: skip


def measure_allreduce(
    registry: Registry, device: str, sizes: Sequence[int], world_size: int, settings: RunSettings, workdir: Path,
    quiet: bool,
) -> tuple[dict[int, float], SweepResult, SweepFiles]:  # fmt: skip
    """Median ms per message size (sizes whose row failed are left out), the sweep result and its files; a
    :class:`ConfigurationError` before any rank starts when NCCL would put two ranks on one GPU."""
    check_ranks_fit([world_size], device)
    entries = [e for e in registry.serving(ALLREDUCE, device=device) if not e.unavailable_reason]
    if not entries:
        raise TaskFailed(f"no {ALLREDUCE} benchmark for {device} is registered (conf/registry/collectives_*.yaml)")
    operations = allreduce_operations(sizes, world_size)
    result, files = measure_with_progress(entries[0], operations, settings, workdir, "allreduce_buckets", quiet)
    times = {
        int(op.param_dict["bytes"]): result.measurements[op.id].stats.median_ms
        for op in operations
        if op.id in result.measurements and result.measurements[op.id].ok
    }
    return times, result, files


def gradient_copy_operations(elements: Sequence[int]) -> list[Operation]:
    """A gradient of ``n`` elements multiplied by a one-element operand into a view of a bucket that outlives
    the step (Mul ``mode`` 2, :data:`dlbench.core.glue.BUCKET_VIEW_MODE`): what DDP runs to copy it into its
    bucket divided by world_size (``aten::mul`` with ``out=``), and the same bytes as the copy back; not a
    fresh output per call. With ``caches=step`` they have no footprint and are timed hot: the gradient was just
    written by the backward kernel."""
    operations = []
    for i, count in enumerate(elements):
        params = {"N": 1, "C": 1, "H": 1, "W": count, "N_b": 1, "C_b": 1, "H_b": 1, "W_b": 1,
                  "mode": BUCKET_VIEW_MODE}  # fmt: skip
        flops, moved = operation_cost(MUL, params)
        operations.append(Operation(i, MUL, tuple(params.items()), name=f"gradient_copy_{count}",
                                    flops=flops, bytes_moved=moved))  # fmt: skip
    return operations


def measure_gradient_copies(
    registry: Registry, device: str, elements: Sequence[int], settings: RunSettings, workdir: Path, quiet: bool,
) -> tuple[dict[int, float], list[Path]]:  # fmt: skip
    """Median ms of one gradient copy by element count (the embedded torch Mul where registered; a failed row
    is left out), and the sweep's files."""
    entries = [e for e in registry.serving(MUL, device=device) if not e.unavailable_reason]
    entries.sort(key=lambda e: e.backend != "torch")
    if not entries:
        raise TaskFailed(f"no {MUL} benchmark for {device} is registered: DDP's gradient copies need it")
    operations = gradient_copy_operations(elements)
    result, files = measure_with_progress(entries[0], operations, settings, workdir, "ddp_gradient_copies", quiet)
    times = {
        int(op.param_dict["W"]): result.measurements[op.id].stats.median_ms
        for op in operations
        if op.id in result.measurements and result.measurements[op.id].ok
    }
    return times, files.existing()
