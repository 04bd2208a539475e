"""Measuring operations with one implementation as a sweep does: with a progress bar, a fingerprint of what
was measured, the params that describe it, and one error naming every problem afterwards."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from dlbench.config import DlbenchConfig
from dlbench.core.collectives import is_collective
from dlbench.core.errors import RunInterrupted, TaskFailed
from dlbench.core.progress import progress
from dlbench.core.values import Operation, SweepResult
from dlbench.operators.registry import OperatorBenchmark
from dlbench.operators.row_settings import none_runnable, sweep_notes, unable_line
from dlbench.operators.runner import (
    RunSettings,
    SweepFiles,
    failure_summary,
    measure_operations,
    round_files,
    rounds_for,
    sweep_files,
)

log = logging.getLogger(__name__)


def sweep_params(cfg: DlbenchConfig, entry: OperatorBenchmark, benchmark_name: str, n_ops: int, device: str) -> dict:
    return {
        "benchmark": benchmark_name,
        "implementation": entry.name,
        "backend": entry.backend,
        "op_type": cfg.benchmark.op_type if cfg.benchmark else "",
        "batch_size": cfg.batch_size,
        "dtype": cfg.dtype,
        "amp": cfg.amp,
        "channels_last": cfg.channels_last,
        "fp32_math": cfg.fp32_math,
        "threads": cfg.threads,
        "keep_heap": cfg.keep_heap,
        "device": device,
        "n_operations": n_ops,
        "timeout": cfg.timeout,
        **{f"measure.{k}": v for k, v in asdict(cfg.measure).items()},
        "command": " ".join(entry.command),
        **({"passes": "+".join(entry.passes)} if entry.passes else {}),
        **({"world_size": cfg.world_size} if cfg.benchmark and is_collective(cfg.benchmark.op_type) else {}),
    }


def operations_digest(entry: OperatorBenchmark, operations: Sequence[Operation]) -> str:
    """A short fingerprint of what a sweep measures: each operation's id and parameters, and the
    implementation's parameter order. Resuming only takes results from a run with the same fingerprint."""
    ops = [(op.id, op.op_type, op.params, *((op.dtype, op.memory_format) if op.dtype or op.memory_format else ()))
           for op in operations]  # fmt: skip
    text = repr([list(entry.param_descr), ops])
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def measure_with_progress(
    entry: OperatorBenchmark,
    operations: Sequence[Operation],
    settings: RunSettings,
    workdir: Path,
    stem: str,
    quiet: bool,
    probe: Sequence[tuple[OperatorBenchmark, Operation]] = (),
) -> tuple[SweepResult, SweepFiles]:
    """``measure_operations`` with a progress bar fed by the rows the executable has written so far, over
    every round (``probe``: the reference operations timed in each round, see ``measure_operations``)."""
    refused = none_runnable(entry, operations)  # every row in a dtype or memory format it does not run
    if refused is not None:
        log.warning("%s: %s", entry.name, unable_line(operations, refused))
        return refused, sweep_files(workdir, stem)
    rounds = rounds_for(settings, len(operations))
    total = len(operations) * rounds
    bar = progress(total, f"{stem}", quiet=quiet)
    outputs = [round_files(workdir, stem, i, rounds).output_csv for i in range(rounds)]

    def poll() -> None:
        done = 0
        for path in outputs:
            try:
                with path.open("rb") as handle:
                    done += max(0, sum(1 for _ in handle) - 1)
            except OSError:
                continue
        bar.update(max(0, min(done, total) - bar.n))

    try:
        result, files = measure_operations(entry, operations, settings, workdir, stem=stem, on_poll=poll, probe=probe)
    finally:
        bar.close()
    for line in sweep_notes(operations, result, settings.dtype, settings.device):
        log.warning("%s: %s", entry.name, line)
    return result, files


def raise_for_result(name: str, result: SweepResult, kept: str = "") -> None:
    """After logging: re-raise an interrupt, or fail with every run-wide and per-operation problem."""
    if result.interrupted:
        # SIGTERM stays SIGTERM (exit status 143), Ctrl-C stays Ctrl-C (130)
        signal = RunInterrupted if result.extra.get("interrupt") == RunInterrupted.__name__ else KeyboardInterrupt
        raise signal(f"{name} was interrupted" + (f"; {kept}" if kept else ""))
    if not result.ok:
        problems = [result.run_error] if result.run_error else []
        problems += failure_summary(result)
        raise TaskFailed(f"{name}: " + "\n  ".join(problems))
