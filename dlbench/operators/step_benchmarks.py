"""The benchmarks of an evaluation's training step: every operation some benchmark of the chosen backend serves
(the optimizer's update always by PyTorch's, as training runs it), and the reference operations timed before
and after them (:mod:`dlbench.operators.reference`), with their protocol files logged to the run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
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
from dlbench.operators.step_rounds import (
    combine_step_rounds,
    round_medians,
    round_samples,
    step_round_settings,
    step_round_stem,
)

#: The optimizer's op_types (:mod:`dlbench.onnx.update`); training runs PyTorch's whatever the backend measures
UPDATE_OP_TYPES = ("SGD", "Adam", "AdamW", "RMSprop", "ZeroGrad", "ClipGradNorm")

log = logging.getLogger(__name__)


def measure_step(
    cfg: DlbenchConfig,
    ctx: AppContext,
    operations,
    device: str,
    run,
    machine: Any,
    rounds: int = 1,
    before_round: Callable[[int], None] | None = None,
    beside: int = 0,
) -> tuple[dict, dict, object, list[dict[int, float]]]:
    """Every operation some available benchmark of ``cfg.backend`` serves, measured in ``rounds`` rounds
    (:mod:`dlbench.operators.step_rounds`), ``before_round(index)`` called before each round after the first
    (the evaluation trains its script there), each round timed beside ``beside`` copies of itself
    (:mod:`dlbench.operators.beside`: a data-parallel step's other ranks); protocol files logged; ``machine``
    (:class:`dlbench.analysis.results.MachineRecord`) is told each benchmark's result. Returns the combined
    measurements, the benchmark of each operation, the plan, and each round's median ms per operation."""
    registry = load_registry(ctx.config_dirs)
    plan = plan_benchmarks(registry, operations, cfg.backend, device)
    settings = replace(run_settings(cfg, device), beside=beside)
    assignments = list(plan.assignments)
    served = {op.id for _, ops in assignments for op in ops}
    for op_type in UPDATE_OP_TYPES:  # training runs PyTorch's optimizer whatever backend measures the rest
        update = tuple(op for op in operations if op.op_type == op_type and op.id not in served)
        if update:
            assignments.append((optimizer_benchmark(registry, device, op_type), update))
    implementations = {op.id: entry.name for entry, ops in assignments for op in ops}
    per_round: list[dict[int, Measurement]] = []
    samples: list[dict[int, list[float]]] = []
    for index in range(rounds):
        if index and before_round is not None:
            before_round(index)
        share = step_round_settings(settings, rounds, index)
        measured, measured_samples = _measure_round(cfg, ctx, assignments, share, rounds, index, run, machine)
        per_round.append(measured)
        samples.append(measured_samples)
    return combine_step_rounds(per_round, samples, settings), implementations, plan, round_medians(per_round)


def _measure_round(
    cfg: DlbenchConfig, ctx: AppContext, assignments: list, settings, rounds: int, index: int, run, machine: Any
) -> tuple[dict[int, Measurement], dict[int, list[float]]]:
    """Round ``index`` of the step's benchmarks: every assignment's sweep; its measurements and raw samples."""
    workdir = ctx.output_dir / "protocol"
    measurements: dict[int, Measurement] = {}
    samples: dict[int, list[float]] = {}
    for entry, ops in assignments:
        log.info("measuring %d operations with %s%s", len(ops), entry.name,
                 f" (round {index + 1} of {rounds})" if rounds > 1 else "")  # fmt: skip
        name = step_round_stem(entry.name, rounds, index)
        result, files = measure_with_progress(entry, ops, settings, workdir, name, cfg.quiet)
        for op in ops:
            measurements[op.id] = result.measurements[op.id]
        if rounds > 1:
            samples.update(round_samples(files.samples_csv))
        run.log_files(files.existing(), "protocol")
        cache_states = [*workdir.glob(f"{name}*_footprints.csv"), *workdir.glob(f"{name}*_rotation.csv")]
        run.log_files(sorted(cache_states), "protocol")  # the cache state each row was timed in
        machine.add(entry.name, result, ops)
        if result.interrupted:
            raise KeyboardInterrupt(f"{entry.name} was interrupted")
    return measurements, samples


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
