"""Measure a list of operations with one operator benchmark through the executable protocol."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlbench.config import DlbenchConfig
from dlbench.core import interrupts
from dlbench.core.allocator import allocator_environment
from dlbench.core.cores import resolve_threads
from dlbench.core.interference import InterferenceWatch
from dlbench.core.process import ProcessResult, run_command
from dlbench.core.settings import EXECUTABLE_SETTINGS, default, to_environment
from dlbench.core.values import Measurement, Operation, SweepResult, TimeStats
from dlbench.operators.align import AlignmentError, align_operation, misfit
from dlbench.operators.embedded import is_embedded, run_embedded
from dlbench.operators.node_file import nodes_path_for, write_nodes
from dlbench.operators.protocol import (
    ProtocolError,
    ids_written,
    output_path_for,
    parse_output,
    samples_path_for,
    write_input,
)
from dlbench.operators.registry import OperatorBenchmark


@dataclass(frozen=True)
class RunSettings:
    """What an executable is told through the environment, and how long it may take."""

    warmup: int = int(default("warmup"))
    min_reps: int = int(default("min_reps"))
    max_reps: int = int(default("max_reps"))
    min_time_s: float = float(default("min_time_s"))
    target_rel_ci: float = float(default("target_rel_ci"))
    max_time_s: float = float(default("max_time_s"))
    threads: int = int(default("threads"))
    device: str = str(default("device"))
    dtype: str = str(default("dtype"))
    fp32_math: str = str(default("fp32_math"))
    timeout_s: float = 600.0
    op_budget_s: float = float(default("op_budget_s"))
    memory_fraction: float = float(default("memory_fraction"))
    caches: str = str(default("caches"))
    #: start the executable with the allocator keeping freed memory (:mod:`dlbench.core.allocator`)
    keep_heap: bool = True

    def environment(self) -> dict[str, str]:
        """The ``DLBENCH_*`` variables of :mod:`dlbench.core.settings` (and OpenMP's thread count)."""
        keys = [s.key for s in EXECUTABLE_SETTINGS if s.key != "verify"]
        env = to_environment({key: getattr(self, key) for key in keys})
        if self.threads > 0:
            env["OMP_NUM_THREADS"] = str(self.threads)
        env.update(allocator_environment(self.keep_heap))
        return env


@dataclass(frozen=True)
class SweepFiles:
    input_csv: Path
    output_csv: Path
    stderr_txt: Path
    samples_csv: Path | None = None


def sweep_files(workdir: Path, stem: str) -> SweepFiles:
    input_csv = workdir / f"{stem}.csv"
    return SweepFiles(
        input_csv, output_path_for(input_csv), workdir / f"{stem}_stderr.txt", samples_path_for(input_csv)
    )


def _stderr_lines_about(stderr: str, op_id: int) -> str:
    pattern = re.compile(rf"\bid\s*[:=]?\s*{op_id}\b")
    hits = [line.strip() for line in stderr.splitlines() if pattern.search(line)]
    return "; ".join(hits[:3])


def failure_summary(result: SweepResult, shown_ids: int = 5, shown_reasons: int = 6) -> list[str]:
    """The failed operations as a few lines: one per distinct reason (the operation's own id taken out of
    it) with a count and the first ids, so 23 times the same problem reads as one line."""
    groups: dict[str, list[int]] = {}
    for op_id in result.failed_ids:
        error = result.measurements[op_id].error
        reason = re.sub(rf"\bid\s*[:=]?\s*{op_id}\b", "id N", re.sub(rf"\s+for id {op_id}\b", "", error))
        groups.setdefault(reason, []).append(op_id)
    lines = []
    for reason, ids in list(groups.items())[:shown_reasons]:
        if len(ids) == 1:
            lines.append(f"id {ids[0]}: {result.measurements[ids[0]].error}")
            continue
        more = f" and {len(ids) - shown_ids} more" if len(ids) > shown_ids else ""
        lines.append(f"{len(ids)} operations (ids {', '.join(map(str, ids[:shown_ids]))}{more}): {reason}")
    if len(groups) > shown_reasons:
        rest = sum(len(ids) for ids in list(groups.values())[shown_reasons:])
        lines.append(f"{rest} more operations failed for other reasons (the run's failed_operations.csv)")
    return lines


def measure_operations(
    benchmark: OperatorBenchmark,
    operations: Sequence[Operation],
    settings: RunSettings,
    workdir: Path,
    stem: str | None = None,
    on_poll: Callable[[], None] | None = None,
) -> tuple[SweepResult, SweepFiles]:
    """Run ``benchmark`` once for all ``operations``; every operation gets a measurement or an error.

    Nothing measured is dropped: a crash, a timeout or malformed rows fail only the operations they
    touch, and the run-wide problem is reported in ``SweepResult.run_error``. On Ctrl-C or SIGTERM the
    executable's process group is stopped and the rows written so far are returned with
    ``interrupted=True``; the caller logs them and re-raises.
    """
    files = sweep_files(workdir, stem or benchmark.name)
    workdir.mkdir(parents=True, exist_ok=True)
    measurements: dict[int, Measurement] = {}
    rows = []
    for op in operations:
        try:
            values = align_operation(
                op, benchmark.param_descr, benchmark.permutations, benchmark.name, benchmark.node_file
            )
            rows.append((op.id, values))
        except AlignmentError as err:
            measurements[op.id] = misfit(op.id, err)
    if not rows:
        return SweepResult(measurements, run_error="no operation could be aligned to param_descr"), files
    write_input(files.input_csv, rows)
    if benchmark.node_file:  # the executable reads each operation's ONNX node beside the input
        aligned = {op_id for op_id, _ in rows}
        write_nodes(nodes_path_for(files.input_csv), [op for op in operations if op.id in aligned])
    files.output_csv.unlink(missing_ok=True)
    command = [*benchmark.command, str(files.input_csv)]
    interrupted = False
    interrupt = ""
    start_error = ""
    # what else the machine does while the benchmark runs (per run and per result row)
    watch = InterferenceWatch(settings.threads, settings.device, lambda: ids_written(files.output_csv), benchmark.name)
    run = run_embedded if is_embedded(command[:-1]) else run_command  # the torch kernels: a persistent worker
    try:
        interrupts.check()  # a Ctrl-C a library lost since the job started: measure nothing more
        with watch:
            process = run(
                command,
                timeout=settings.timeout_s,
                env=settings.environment(),
                cwd=workdir,
                stderr_path=files.stderr_txt,
                on_poll=on_poll,
            )
    except KeyboardInterrupt as err:  # also SIGTERM (RunInterrupted), see core.interrupts
        interrupted = True
        interrupt = type(err).__name__
        stderr = files.stderr_txt.read_text(errors="replace") if files.stderr_txt.exists() else ""
        process = ProcessResult(returncode=None, timed_out=False, stdout="", stderr=stderr, seconds=0.0)
    except OSError as err:  # the program could not start at all: not executable, bad interpreter line
        files.stderr_txt.write_text(f"{err}\n", encoding="utf-8")
        process = ProcessResult(returncode=None, timed_out=False, stdout="", stderr=str(err), seconds=0.0)
        start_error = f"could not be started: {err}"
    else:
        start_error = ""
    exe = " ".join(benchmark.command[:3]) if benchmark.command[0] == sys.executable else benchmark.command[0]
    failure = "was interrupted" if interrupted else start_error or process.describe_failure()
    run_errors = [f"{benchmark.name} ({exe}) {failure}"] if failure else []
    expected = [op_id for op_id, _ in rows]
    parsed_rows: dict[int, TimeStats] = {}
    problems: list[str] = []
    problems_by_id: dict[int, list[str]] = {}
    try:
        parsed = parse_output(
            files.output_csv, expected, target_rel_ci=settings.target_rel_ci, asked_reps=settings.min_reps
        )
        parsed_rows, problems = dict(parsed.rows), list(parsed.problems)
        problems_by_id = {k: list(v) for k, v in parsed.problems_by_id.items()}
    except ProtocolError as err:
        if not (interrupted and not files.output_csv.exists()):
            run_errors.append(f"{benchmark.name} ({exe}): {err}")
    attributed = {p for found in problems_by_id.values() for p in found}
    unexplained = [p for p in problems if p not in attributed]
    for op_id in expected:
        if op_id in parsed_rows and op_id not in problems_by_id:
            measurements[op_id] = Measurement(op_id, parsed_rows[op_id])
            continue
        if interrupted and op_id not in problems_by_id:
            measurements[op_id] = Measurement(op_id, None, "not measured: the sweep was interrupted")
            continue
        reason = "; ".join(problems_by_id.get(op_id, [])) or f"no result row for id {op_id} in {files.output_csv}"
        hint = _stderr_lines_about(process.stderr, op_id)
        if hint:
            reason += f" (stderr: {hint})"
        measurements[op_id] = Measurement(op_id, None, reason)
    if unexplained:
        more = f" (and {len(unexplained) - 20} more)" if len(unexplained) > 20 else ""
        run_errors.append("\n".join(unexplained[:20]) + more)
    if run_errors and process.stderr.strip() and not interrupted:
        run_errors[0] += f" (its stderr: {files.stderr_txt})"
    ordered = {op.id: measurements[op.id] for op in operations}
    return (
        SweepResult(
            ordered,
            run_error="\n".join(run_errors),
            stderr=process.stderr,
            interrupted=interrupted,
            extra={"seconds": process.seconds, **({"interrupt": interrupt} if interrupt else {})},
            interference=watch.report,
        ),
        files,
    )


def run_settings(cfg: DlbenchConfig, device: str) -> RunSettings:
    m = cfg.measure
    return RunSettings(
        warmup=m.warmup,
        min_reps=m.min_reps,
        max_reps=m.max_reps,
        min_time_s=m.min_time_s,
        target_rel_ci=m.target_rel_ci,
        max_time_s=m.max_time_s,
        threads=resolve_threads(cfg.threads),  # 0: all physical cores, decided here so the run records it
        device=device,
        dtype=cfg.dtype,
        fp32_math=cfg.fp32_math,
        timeout_s=cfg.timeout,
        op_budget_s=m.op_budget_s,
        memory_fraction=m.memory_fraction,
        caches=m.caches,
        keep_heap=cfg.keep_heap,
    )
