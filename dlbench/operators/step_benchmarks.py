"""The benchmarks of an evaluation's training step: every operation some benchmark of the chosen backend serves
(the optimizer's update always by PyTorch's, as training runs it), and the reference operations timed before
and after them (:mod:`dlbench.operators.reference`), with their protocol files logged to the run."""

from __future__ import annotations

import logging
from typing import Any

from dlbench.config import DlbenchConfig
from dlbench.core.context import AppContext
from dlbench.core.errors import TaskFailed
from dlbench.core.values import Measurement
from dlbench.operators.measure import measure_with_progress
from dlbench.operators.plan import plan_benchmarks
from dlbench.operators.reference import WARMUP_ROUNDS, probe_settings, reference_benchmarks, reference_medians
from dlbench.operators.registry import Registry, load_registry
from dlbench.operators.runner import run_settings

#: The optimizer's op_types (:mod:`dlbench.onnx.update`); training runs PyTorch's whatever the backend measures
UPDATE_OP_TYPES = ("SGD", "Adam", "AdamW", "RMSprop", "ZeroGrad", "ClipGradNorm")

log = logging.getLogger(__name__)


def measure_step(
    cfg: DlbenchConfig, ctx: AppContext, operations, device: str, run, machine: Any
) -> tuple[dict, dict, object]:
    """Every operation some available benchmark of ``cfg.backend`` serves, measured; protocol files logged;
    ``machine`` (:class:`dlbench.analysis.results.MachineRecord`) is told each benchmark's result."""
    registry = load_registry(ctx.config_dirs)
    plan = plan_benchmarks(registry, operations, cfg.backend, device)
    settings = run_settings(cfg, device)
    measurements: dict[int, Measurement] = {}
    implementations: dict[int, str] = {}
    workdir = ctx.output_dir / "protocol"
    assignments = list(plan.assignments)
    served = {op.id for _, ops in assignments for op in ops}
    for op_type in UPDATE_OP_TYPES:  # training runs PyTorch's optimizer whatever backend measures the rest
        update = tuple(op for op in operations if op.op_type == op_type and op.id not in served)
        if update:
            assignments.append((optimizer_benchmark(registry, device, op_type), update))
    for entry, ops in assignments:
        log.info("measuring %d operations with %s", len(ops), entry.name)
        result, files = measure_with_progress(entry, ops, settings, workdir, f"{entry.name}_evaluate", cfg.quiet)
        for op in ops:
            measurements[op.id] = result.measurements[op.id]
            implementations[op.id] = entry.name
        run.log_files(files.existing(), "protocol")
        cache_states = [*workdir.glob(f"{entry.name}_evaluate*_footprints.csv"),
                        *workdir.glob(f"{entry.name}_evaluate*_rotation.csv")]  # fmt: skip
        run.log_files(sorted(cache_states), "protocol")  # the cache state each row was timed in
        machine.add(entry.name, result, ops)
        if result.interrupted:
            raise KeyboardInterrupt(f"{entry.name} was interrupted")
    return measurements, implementations, plan


def measure_reference(
    cfg: DlbenchConfig, ctx: AppContext, registry: Registry, device: str, when: str
) -> dict[str, float]:
    """Median ms of the reference operations (:mod:`dlbench.operators.reference`) now, with PyTorch's kernels,
    the benchmarks' settings and hot caches, after an untimed round; those without a torch benchmark here are
    left out. On a GPU: device-bound sizes, timed with CUDA events."""
    medians: dict[str, float] = {}
    settings = probe_settings(run_settings(cfg, device))
    for entry, op in reference_benchmarks(registry, device):
        for _ in range(WARMUP_ROUNDS + 1):  # the last round counts
            result, _ = measure_with_progress(
                entry, [op], settings, ctx.output_dir / "protocol", f"{op.name}_{when}", True
            )  # a stem per operation: the GEMM's and the convolution's protocol files stay apart
            if result.interrupted:
                raise KeyboardInterrupt(f"{entry.name} was interrupted")
        medians.update(reference_medians(result.measurements, device))
    return medians


def optimizer_benchmark(registry: Registry, device: str, op_type: str = "SGD"):
    """The torch entry that times PyTorch's optimizer update ``op_type``: training runs it whatever
    ``backend`` measures the other operations."""
    entries = registry.serving(op_type, "torch", device)
    if not entries:
        raise TaskFailed(f"no torch benchmark of {op_type} on {device} is registered (see conf/registry/)")
    return entries[0]
