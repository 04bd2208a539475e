"""The all-reduce times a data-parallel prediction needs: the registered AllReduce benchmark of the chosen
device, run among ``world_size`` ranks at the given message sizes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dlbench.core.costs import operation_cost
from dlbench.core.errors import TaskFailed
from dlbench.core.values import Operation, SweepResult
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.registry import Registry
from dlbench.operators.runner import RunSettings, SweepFiles

ALLREDUCE = "AllReduce"


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
    """Median ms per message size (sizes whose row failed are left out), the sweep result and its files."""
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
